"""Ping-pong consumers (passes/split_consumers.py, Plan.pingpong): the pass's structure, the verifier's
arrival rule for it, the planner's rules, and the Gluon it lowers to."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.errors import UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

BF16 = GemmSpec(4096, 4096, 4096)
FP8_PROMOTED = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                        accumulation=Accumulation.PROMOTED)


def consumers(m: ir.Module) -> list[ir.Partition]:
    return [p for p in m.partitions if p.role is ir.Role.CONSUMER]


def module(spec: GemmSpec = BF16, **forced: object) -> ir.Module:
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, pingpong=True, **forced)).module  # type: ignore[arg-type]


def test_each_consumer_takes_alternate_whole_tiles() -> None:
    m = module()
    c0, c1 = consumers(m)
    assert (c0.warps, c1.warps, c0.rows, c1.rows) == (4, 4, None, None)
    assert [a.rows for a in c0.accumulators] == [128]  # the whole tile, not a row block
    (l0,) = [s for s in c0.body if isinstance(s, ir.Loop)]
    (l1,) = [s for s in c1.body if isinstance(s, ir.Loop)]
    assert (l0.start, l0.step, l1.start, l1.step) == (0, 2, 1, 2)
    # consumer1 first steps its cursor over tile 0; both step over the other's tile after each of theirs.
    # (after each partition's grid-dependency wait, passes/launch.py)
    assert c1.body[1] == ir.SkipTiles("c", 1) and not isinstance(c0.body[1], ir.SkipTiles)
    for lp in (l0, l1):
        assert lp.body[-2:] == (ir.SkipTiles("c", 1), ir.Advance("t"))


def test_mainloops_take_turns() -> None:
    m = module()
    assert [(b.name, b.depth, b.count, b.purpose) for b in m.barriers if b.purpose is ir.Purpose.ORDER] == [
        ("turn0", 1, 1, ir.Purpose.ORDER), ("turn1", 1, 1, ir.Purpose.ORDER)]
    assert m.barrier("empty").count == 1  # each slot use is released by the one consumer that read it
    for i, c in enumerate(consumers(m)):
        body = [s for s in c.body if isinstance(s, ir.Loop)][0].body
        k = next(j for j, s in enumerate(body) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K)
        # Consumer 0's first wait passes on the fresh barrier; consumer 1 waits for consumer 0's hand-over.
        assert body[k - 1] == ir.Wait(f"turn{i}", ir.Slot("t"), ir.Parity("t", flip=i == 0))
        assert body[k + 1] == ir.Arrive(f"turn{1 - i}", ir.Slot("t"))


def test_printer_shows_the_alternation() -> None:
    text = printer.module(module())
    assert "    for tiles[0::2]:" in text and "    for tiles[1::2]:" in text
    assert "    skip c by 1 tile\n" in text and "wait turn1[t] phase(t)\n" in text
    assert "  mbarrier turn0[1] count=1 order\n" in text  # an ORDER barrier guards no ring


def test_verifier_counts_a_pingpong_consumer_as_half_an_arrival() -> None:
    m = module()
    assert verify.complete(m, H100_SXM) == []
    doubled = replace(m, barriers=tuple(replace(b, count=2) if b.name == "empty" else b for b in m.barriers))
    errs = verify.complete(doubled, H100_SXM)
    assert any("expects 2 arrivals per phase but 1 partitions arrive" in e and "ping-pong" in e for e in errs)


def test_loop_rejects_a_bad_stride() -> None:
    with pytest.raises(ValueError, match="0 <= start < step"):
        ir.Loop(ir.LoopKind.TILES, (), start=2, step=2)
    with pytest.raises(ValueError, match="only a tiles loop"):
        ir.Loop(ir.LoopKind.K, (), step=2)


@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 256), (64, 128)])
def test_planner_tiles_a_warpgroup_can_hold(bm: int, bn: int) -> None:
    p = plan_schedule(BF16, H100_SXM, pingpong=True, bm=bm, bn=bn)
    assert (p.consumer_partitions, p.consumer_warps, p.pingpong) == (2, 8, True)
    assert p.short().endswith("_p2_pp_nohoist")


def test_planner_refuses_what_a_warpgroup_cannot_hold() -> None:
    with pytest.raises(UnsupportedError, match="whole BM x BN fp32 accumulator"):
        plan_schedule(BF16, H100_SXM, pingpong=True, bm=128, bn=256)
    with pytest.raises(UnsupportedError, match="needs two consumer partitions"):
        plan_schedule(BF16, H100_SXM, pingpong=True, consumer_partitions=1)
    # Promoted fp8 needs the partial beside the accumulator: a column-block partial (h2) fits.
    assert plan_schedule(FP8_PROMOTED, H100_SXM, pingpong=True, bm=128, bn=128).partial_blocks == 2
    with pytest.raises(UnsupportedError):
        plan_schedule(FP8_PROMOTED, H100_SXM, pingpong=True, bm=128, bn=128, partial_blocks=1)


def test_pingpong_is_not_the_default() -> None:
    # Measured 15-30% slower than cooperative on the H100 (docs/benchmarks.md, 2026-11-23).
    assert not plan_schedule(BF16, H100_SXM).pingpong
    assert not plan_schedule(FP8_PROMOTED, H100_SXM).pingpong


def test_each_consumer_stages_whole_tiles_in_smem() -> None:
    m = module()
    assert [(b.name, b.rows, b.cols) for b in m.buffers] == [("c_smem0", 128, 64), ("c_smem1", 128, 64)]


def test_gluon_walks_alternate_tiles_and_passes_the_turn() -> None:
    src = build(BF16, H100_SXM, plan_schedule(BF16, H100_SXM, pingpong=True)).source
    assert "for tile_id in range(pid, num_tiles, 2 * gl.num_programs(0)):  # for tiles[0::2]" in src
    assert "for tile_id in range(pid + 1 * gl.num_programs(0), num_tiles, 2 * gl.num_programs(0)):" in src
    assert "mbarrier.wait(turn0_bars.index(0), (t & 1) ^ 1)  # wait turn0[t] phase(t)^1" in src
    assert "mbarrier.wait(turn1_bars.index(0), t & 1)  # wait turn1[t] phase(t)" in src
    assert "mbarrier.arrive(turn1_bars.index(0))  # arrive turn1[t]" in src
    assert "c += k_tiles  # skip c by 1 tile" in src
    # One init loop per barrier depth: the rings' STAGES, then the single turn barriers.
    assert "for i in gl.static_range(1):\n        mbarrier.init(turn0_bars.index(i), count=1)" in src
