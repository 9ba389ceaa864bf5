"""Planner rule 31's narrow tile and the column blocks it shares with rule 32's fitted tiles (`ir.Tiling.n_blocks`):
the blocks, what a Plan and the verifier refuse (planted bugs among them), the planner's choice. Rule 32's own choice
is tests/unit/test_fitted.py; the simulator's numerics are in tests/sim/test_narrow_sim.py, the compiled wgmma in
tests/compile/test_compile_narrow.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.device import B200
from warploom.epilogue import graph as eg
from warploom.errors import PlanError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.narrow import narrow_blocks
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


def test_plan_tile_n_counts_units() -> None:
    """A fitted plan's tiles are tile_n = sum(n_blocks) columns wide: its units count them, and the planner's grid."""
    spec = GemmSpec(1000, 1000, 256)
    plan = plan_schedule(spec, H100_SXM, bm=128, bn=256, stream_k=0, n_blocks=(128, 32, 16))
    assert plan.tile_n == 176 and plan.units(1000, 1000) == 8 * 6 and plan.grid == 48


@pytest.mark.parametrize("blocks", [(64, 24), (16, 64), (64, 64), (8,), (128,)])
def test_plan_refuses_blocks(blocks: tuple[int, ...]) -> None:
    with pytest.raises(PlanError, match="n_blocks"):
        narrow_plan(GemmSpec(300, 80, 200), blocks, bm=128, bn=128)


def test_plan_refuses_pingpong_and_a_tail() -> None:
    with pytest.raises(PlanError, match="rule 31's narrow or rule 32's fitted tile"):
        narrow_plan(fp8(300, 80, 256), (64, 16), pingpong=True)
    with pytest.raises(PlanError, match="the tail's reduction writes whole BN-wide tiles"):
        replace(plan_schedule(GemmSpec(4096, 2112, 7168), H100_SXM, tail_split=2), n_blocks=(128, 64))


@pytest.mark.parametrize(("spec", "match"), [
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


def test_verifier_finds_a_missing_block_wgmma() -> None:
    found = _edited(lambda o: () if isinstance(o, ir.Mma) and o.acc == "acc_n1" else (o,))
    assert any("one wgmma per block accumulator" in e for e in found)


def test_verifier_finds_a_block_read_from_the_wrong_columns() -> None:
    def shift(o: ir.Op) -> tuple[ir.Op, ...]:
        if isinstance(o, ir.Mma) and o.n_cols == ir.ColBlock(64, 16):
            return (replace(o, n_cols=ir.ColBlock(48, 16)),)
        return (o,)

    assert any("must read its accumulator's block of B's slot" in e for e in _edited(shift))


def test_verifier_finds_a_store_past_tile_n() -> None:
    """The 16-wide block's store widened to a 32-wide box at column 64 would write columns 80..95, the next tile's."""
    spec = GemmSpec(300, 200, 200)
    m = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128, n_blocks=(64, 16))).module
    assert verify.complete(m, H100_SXM) == []
    bufs = tuple(replace(b, cols=32) if b.alias else b for b in m.buffers)
    found = verify.complete(replace(m, buffers=bufs), H100_SXM)
    assert any("writes columns [64, 96) of the tile, across its blocks" in e for e in found)


def test_verifier_finds_a_whole_b_box() -> None:
    """B copied as one box of the slot's rows: it would read the next tile's rows past tile_n."""
    found = _edited_all(lambda o: (replace(o, blocks=()),) if isinstance(o, ir.TmaLoad) and o.blocks else (o,))
    assert any("must copy exactly the tile's blocks of B's rows" in e for e in found)


def _edited_all(fn):  # type: ignore[no-untyped-def]
    """A narrow module with `fn` applied to every partition's ops, and the verifier's findings."""
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    return verify.complete(replace(m, partitions=tuple(replace(p, body=rewrite(p.body, fn)) for p in m.partitions)),
                           H100_SXM)


def test_verifier_finds_a_fused_epilogue_and_a_ranged_launch() -> None:
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    assert any("ranged launch" in e for e in verify.complete(replace(m, tiling=replace(m.tiling, ranged=True)),
                                                           H100_SXM))
    gelu = eg.EpilogueGraph((eg.Acc(), eg.Unary(eg.UnaryOp.GELU_TANH, 0)), (eg.Output(1),))
    fused = replace(spec, epilogue=gelu)
    with pytest.raises(VerificationError, match="a fused epilogue"):
        build(fused, H100_SXM, narrow_plan(fused, (64, 16), bm=128, bn=128))


@pytest.mark.parametrize(("spec", "blocks"), [
    (GemmSpec(10050, 80, 1280), (64, 16)),  # one 128x128 tile along N, its last 48 columns empty
    (GemmSpec(13332, 72, 5120), (64, 16)),
    (GemmSpec(10047, 176, 72), (128, 32, 16)),  # 128x256 tiles
    (fp8(10050, 80, 1280), (64, 16)),
    # 112 of 128 columns: too few saved for rule 31, but rule 32's 80-wide (past rule 35's one wave of 64x128 tiles)
    (GemmSpec(7700, 104, 520), (64, 16)),
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


def test_forced_blocks() -> None:
    """plan_schedule(n_blocks=...): the blocks on the planner's tile (with a forced tile too), () keeps it whole, and
    blocks that cannot run are refused by name; other targets and grouped GEMMs refuse the option."""
    spec = GemmSpec(10050, 80, 1280)
    assert plan_schedule(spec, H100_SXM, n_blocks=()).n_blocks == ()
    assert plan_schedule(spec, H100_SXM, bm=64, bn=128, n_blocks=(64, 16)).n_blocks == (64, 16)
    assert plan_schedule(GemmSpec(10050, 100, 1280), H100_SXM, n_blocks=(64, 16)).units(10050, 100) == 79 * 2
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


def test_verifier_reports_rather_than_raises() -> None:
    """An extra whole-width wgmma on a block, and blocks that are not ints: findings, not exceptions."""
    def extra(o: ir.Op) -> tuple[ir.Op, ...]:
        return (o, replace(o, n_cols=None)) if isinstance(o, ir.Mma) and o.acc == "acc_n0" else (o,)

    assert any("must read its accumulator's block of B's slot" in e for e in _edited(extra))
    spec = GemmSpec(300, 80, 200)
    m = build(spec, H100_SXM, narrow_plan(spec, (64, 16), bm=128, bn=128)).module
    bad = replace(m, tiling=replace(m.tiling, n_blocks=(64.0, 16)))  # type: ignore[arg-type]
    assert any("powers of two" in e for e in verify.complete(bad, H100_SXM))
