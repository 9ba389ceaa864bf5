"""Planner rule 31's narrow tile (`ir.Tiling.n_blocks`): its column blocks, what a Plan and the verifier refuse, the
planner's choice, and the launch's refusal of an N wider than the blocks compute. The simulator's numerics are in
tests/sim/test_narrow_sim.py, the compiled wgmma in tests/compile/test_compile_narrow.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.device import B200
from warploom.errors import PlanError, ShapeError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90_narrow import narrow_blocks
from warploom.tune.candidates import replan

E4 = DType.E4M3


def fp8(m: int, n: int, k: int, **kw: object) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "bn", "blocks"), [
    (80, 128, (64, 16)), (72, 128, (64, 16)), (96, 128, (64, 32)), (1, 128, (16,)), (144, 256, (128, 16)),
    (152, 256, (128, 32)), (176, 256, (128, 32, 16)),
    # more than three quarters of the tile, or more than three blocks: whole
    (104, 128, ()), (120, 128, ()), (208, 256, ()), (240, 256, ()), (128, 128, ()),
])
def test_blocks(n: int, bn: int, blocks: tuple[int, ...]) -> None:
    assert narrow_blocks(n, bn) == blocks


def narrow_plan(spec: GemmSpec, blocks: tuple[int, ...], **forced: object):  # type: ignore[no-untyped-def]
    return replace(plan_schedule(spec, H100_SXM, **forced), n_blocks=blocks)  # type: ignore[arg-type]


@pytest.mark.parametrize("blocks", [(64, 24), (16, 64), (64, 64), (8,), (128,)])
def test_plan_refuses_blocks(blocks: tuple[int, ...]) -> None:
    with pytest.raises(PlanError, match="n_blocks"):
        narrow_plan(GemmSpec(300, 80, 200), blocks, bm=128, bn=128)


def test_plan_refuses_pingpong() -> None:
    with pytest.raises(PlanError, match="rule 31's narrow tile"):
        narrow_plan(fp8(300, 80, 256), (64, 16), pingpong=True)


@pytest.mark.parametrize(("spec", "match"), [
    (GemmSpec(300, 100, 200), "N = 100 is wider than the blocks' 80 columns"),
    (GemmSpec(300, 80, 200, b_layout=BLayout.N_MAJOR), "N-major B"),
    (fp8(300, 80, 256, accumulation=Accumulation.PROMOTED), "promoted accumulation"),
])
def test_verifier_refuses_specs(spec: GemmSpec, match: str) -> None:
    with pytest.raises(VerificationError, match=match):
        build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128))


def _edited(fn):  # type: ignore[no-untyped-def]
    """A narrow module with `fn` applied to its consumers' ops (a planted bug), and the verifier's findings."""
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    assert verify.complete(m, H100_SXM) == []
    parts = tuple(replace(p, body=rewrite(p.body, fn)) if p.role is ir.Role.CONSUMER else p for p in m.partitions)
    return verify.complete(replace(m, partitions=parts), H100_SXM)


def test_verifier_finds_a_missing_join() -> None:
    found = _edited(lambda o: () if isinstance(o, ir.JoinAcc) else (o,))
    assert any("0 joins of the narrow tile's blocks" in e for e in found)


def test_verifier_finds_blocks_joined_out_of_order() -> None:
    found = _edited(lambda o: (replace(o, parts=o.parts[::-1]),) if isinstance(o, ir.JoinAcc) else (o,))
    assert any("its parts must be accumulators at the blocks' columns" in e for e in found)


def test_verifier_finds_a_block_read_from_the_wrong_columns() -> None:
    def shift(o: ir.Op) -> tuple[ir.Op, ...]:
        if isinstance(o, ir.Mma) and o.n_cols == ir.ColBlock(64, 16):
            return (replace(o, n_cols=ir.ColBlock(48, 16)),)
        return (o,)

    assert any("from that block of B's slot" in e for e in _edited(shift))


def test_verifier_finds_a_join_in_a_whole_tile() -> None:
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128)).module
    parts = tuple(replace(p, body=p.body + (ir.JoinAcc("acc", ("acc",)),)) if p.role is ir.Role.CONSUMER else p
                  for p in m.partitions)
    assert any("in a module without n_blocks" in e for e in verify.complete(replace(m, partitions=parts), H100_SXM))


@pytest.mark.parametrize(("spec", "blocks"), [
    (GemmSpec(10050, 80, 1280), (64, 16)),  # one 128x128 tile along N, its last 48 columns empty
    (GemmSpec(13332, 72, 5120), (64, 16)),
    (GemmSpec(10047, 176, 72), (128, 32, 16)),  # 128x256 tiles
    (fp8(10050, 80, 1280), (64, 16)),
    (GemmSpec(7268, 104, 392), ()),  # 112 of 128 columns: too few saved
    (GemmSpec(4096, 4096, 4096), ()),  # many tiles along N
    (GemmSpec(300, 80, 200), ()),  # rule 23's 64x64 tiles
    (fp8(16, 4096, 4096), ()),  # rule 18's swap
    (fp8(10050, 80, 1280, accumulation=Accumulation.PROMOTED), ()),
])
def test_planner_choice(spec: GemmSpec, blocks: tuple[int, ...]) -> None:
    assert plan_schedule(spec, H100_SXM).n_blocks == blocks


def test_forced_tiles_stay_whole() -> None:
    assert plan_schedule(GemmSpec(10050, 80, 1280), H100_SXM, bm=128, bn=128).n_blocks == ()


def test_explain_names_the_rule() -> None:
    assert "narrow tile, rule 31: N=80 fills 80 of the tile's 128 columns: wgmma over those only, in blocks 64+16" in \
        explain(GemmSpec(10050, 80, 1280), H100_SXM).text()


def test_launch_refuses_a_wider_n() -> None:
    """The kernel computes 80 columns: called with N = 100 it would store zeros in the other 20, so the launch refuses
    it, naming b, before anything runs (CPU tensors: no GPU needed to reach the check); the simulator too."""
    kern = build(GemmSpec(10050, 80, 1280), H100_SXM)
    a = torch.empty(10050, 1280, dtype=torch.bfloat16)
    b = torch.empty(100, 1280, dtype=torch.bfloat16).t()
    with pytest.raises(ShapeError, match=r"^b: expected N <= 80, the columns this narrow-tile kernel computes"):
        kern.launcher(a, b, torch.empty(10050, 100, dtype=torch.bfloat16))
    small = build(GemmSpec(200, 80, 128), H100_SXM, narrow_plan(GemmSpec(200, 80, 128), (64, 16), bm=128, bn=128))
    with pytest.raises(ShapeError, match=r"^b: expected N <= 80"):
        small.simulate(torch.randn(200, 128).bfloat16(), torch.randn(128, 96).bfloat16())


def test_forced_blocks() -> None:
    """plan_schedule(n_blocks=...): the blocks on the planner's tile (with a forced tile too), () keeps it whole, and
    blocks that cannot run are refused by name; other targets and grouped GEMMs refuse the option."""
    spec = GemmSpec(10050, 80, 1280)
    assert plan_schedule(spec, H100_SXM, n_blocks=()).n_blocks == ()
    assert plan_schedule(spec, H100_SXM, bm=64, bn=128, n_blocks=(64, 16)).n_blocks == (64, 16)
    with pytest.raises(UnsupportedError, match=r"N = 100 is wider than the blocks' 80 columns"):
        plan_schedule(GemmSpec(10050, 100, 1280), H100_SXM, n_blocks=(64, 16))
    with pytest.raises(UnsupportedError, match="an N-major B"):
        plan_schedule(GemmSpec(10050, 80, 1280, b_layout=BLayout.N_MAJOR), H100_SXM, n_blocks=(64, 16))
    with pytest.raises(UnsupportedError, match="n_blocks"):
        plan_schedule(GemmSpec(8192, 80, 1024, grouping=Grouping.OFFSETS, groups=8), H100_SXM, n_blocks=(64, 16))
    with pytest.raises(UnsupportedError, match="n_blocks"):
        plan_schedule(spec, B200, n_blocks=(64, 16))


def test_a_cached_narrow_plan_replans_to_itself() -> None:
    """The tuner's cache keeps a plan only where forcing its knobs plans it again (`replan`): a narrow default too."""
    spec = GemmSpec(4096, 80, 4096)
    plan = plan_schedule(spec, H100_SXM)
    assert plan.n_blocks and replan(spec, H100_SXM, plan) == plan


def test_verifier_finds_a_join_after_the_store_and_one_in_the_producer() -> None:
    def late(o: ir.Op) -> tuple[ir.Op, ...]:
        if isinstance(o, ir.JoinAcc):
            return ()
        if isinstance(o, ir.TmaStore):
            return (o, ir.JoinAcc("acc", ("acc_n0", "acc_n1")))
        return (o,)

    assert any("before anything that reads acc" in e for e in _edited(late))
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    parts = tuple(replace(p, body=p.body + (ir.JoinAcc("acc", ("acc_n0",)),)) if p.role is ir.Role.PRODUCER else p
                  for p in m.partitions)
    assert any("in a producer partition" in e for e in verify.complete(replace(m, partitions=parts), H100_SXM))


def test_verifier_reports_rather_than_raises() -> None:
    """An extra whole-width wgmma on a block, and blocks that are not ints: findings, not exceptions."""
    def extra(o: ir.Op) -> tuple[ir.Op, ...]:
        return (o, replace(o, n_cols=None)) if isinstance(o, ir.Mma) and o.acc == "acc_n0" else (o,)

    assert any("once each" in e for e in _edited(extra))
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    bad = replace(m, tiling=replace(m.tiling, n_blocks=(64.0, 16)))  # type: ignore[arg-type]
    assert any("powers of two" in e for e in verify.complete(bad, H100_SXM))
