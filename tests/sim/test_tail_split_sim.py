"""Simulator tier for a split-K tail (`Plan.tail_split`): a ranged kernel runs the whole waves of tiles, a ranged
split-K kernel the tiles left over, storing fp32 partials to a compact workspace whose reduction maps each box back
to its tile. `Kernel.simulate` runs both launches as the GPU does.

Clean schedules simulate without findings and match the fp32 reference as closely as a kernel without a tail; the
explorer finds no schedule that breaks the tail's protocol; a tail unit that skips a store is caught."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir.raster import Span, cta_tiles, tail_spans
from warploom.kernel import Kernel, build
from warploom.passes.util import filter_ops
from warploom.planner import Plan
from warploom.reference import make_inputs, reference, relative_error
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import Accumulation, BLayout, GemmSpec, ScaleRecipe

E4 = DType.E4M3
_P2 = dict(consumer_warps=8, consumer_partitions=2)
CASES = {
    # (spec, plan): small grids, so the problems have whole waves and a tail; ragged M and N.
    "bf16_64x64_t2": (GemmSpec(200, 328, 640), Plan(bm=64, bn=64, bk=64, stages=3, consumer_warps=4, group_m=2,
                                                    grid=5, tail_split=2, tail_stages=3)),
    "bf16_nmajor_fp32_t5": (GemmSpec(300, 260, 640, b_layout=BLayout.N_MAJOR, out_dtype=DType.FP32),
                            Plan(bm=128, bn=64, bk=64, stages=2, group_m=2, grid=4, tail_split=5, tail_stages=2,
                                 **_P2)),
    "rowwise_fast_t4": (GemmSpec(260, 400, 512, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
                        Plan(bm=128, bn=128, bk=128, stages=2, group_m=8, grid=5, tail_split=4, tail_stages=2, **_P2)),
    # A tail in unequal ranges (ir.Tiling.uneven_split): 11 k-blocks, the last ragged, in 3 ranges of 4, 4 and 3.
    "bf16_64x64_uneven_t3": (GemmSpec(200, 328, 680), Plan(bm=64, bn=64, bk=64, stages=3, consumer_warps=4,
                                                           group_m=2, grid=5, tail_split=3, tail_stages=3)),
    "blockwise_h2_t2": (GemmSpec(300, 520, 1024, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                                 accumulation=Accumulation.PROMOTED),
                        Plan(bm=128, bn=256, bk=128, stages=2, group_m=2, grid=4, partial_blocks=2,
                             epilogue_subtiles=2, tail_split=2, tail_stages=2, **_P2)),
}


@functools.cache
def kernel(name: str) -> Kernel:
    spec, plan = CASES[name]
    return build(spec, H100_SXM, plan)


@pytest.mark.parametrize("name", list(CASES))
def test_clean_and_exact(name: str) -> None:
    k = kernel(name)
    s = k.spec
    t = k.module.tiling
    whole, rest = tail_spans(-(-s.m // t.bm) * -(-s.n // t.bn), t.grid)
    assert whole.tiles and rest.tiles  # both launches run
    for seed in (0, 1):
        x = make_inputs(s, s.m, s.n, s.k, seed=seed)
        res = k.simulate(x.a, x.b, x.scale_a, x.scale_b, seed=seed)
        assert res.ok, res.report.summary()
        assert " + " in res.report.module  # the two launches' report
        assert not res.output.isnan().any()
        assert relative_error(res.output.float(), reference(x)) < 1e-5
    assert k.check_protocol(seeds=range(2)).ok


def test_each_launch_writes_only_its_tiles() -> None:
    """The whole-wave launch alone leaves the tail's tiles as they were (NaN), and the tail alone the others."""
    k = kernel("bf16_64x64_t2")
    s = k.spec
    assert k.tail is not None
    t = k.module.tiling
    whole, rest = tail_spans(-(-s.m // t.bm) * -(-s.n // t.bn), t.grid)
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    first = simulate(k.module, x.a, x.b, seed=0, span=whole)
    second = simulate(k.tail, x.a, x.b, seed=0, span=rest)
    assert first.ok and second.ok
    done_first, done_second = ~first.output.isnan(), ~second.output.isnan()
    assert not (done_first & done_second).any() and (done_first | done_second).all()
    assert done_second.sum() < done_first.sum()  # the tail is the smaller part


def test_explores_the_tail_clean() -> None:
    """5 tiles in 2 k-ranges: 10 units of 4 k-blocks over 5 CTAs, so CTAs run two units each and the 3-slot ring
    wraps within and across them."""
    k = kernel("bf16_64x64_t2")
    assert k.tail is not None and k.tail.tiling.grid == 5
    r = explore(k.tail, 64, 320, 512, max_states=200_000)
    assert not r.bound_hit and not r.findings, r.summary()


def test_a_missing_tail_store_is_caught() -> None:
    """Drop the tail's partial store: its compact workspace boxes are never written, so the reduction would add
    stale memory. The simulator flags the units, and the poisoned workspace reaches C."""
    k = kernel("rowwise_fast_t4")
    assert k.tail is not None
    bad = replace(k.tail, partitions=tuple(replace(p, body=filter_ops(p.body, lambda o: not isinstance(o, ir.TmaStore)))
                                           for p in k.tail.partitions))
    s = k.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    span = Span(2, 6)
    clean = simulate(k.tail, x.a, x.b, x.scale_a, x.scale_b, seed=0, span=span)
    res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, seed=0, span=span)
    assert clean.ok, clean.report.summary()
    assert any(f.kind is FindingKind.OUTPUT_COVERAGE and "workspace" in f.message for f in res.report.findings)
    t = k.tail.tiling
    boxes = [(u.off_m, u.off_n) for pid in range(t.grid)
             for u in cta_tiles(pid, s.m, s.n, t.bm, t.bn, t.group_m, t.grid, t.split_k, span)]
    for r0, c0 in set(boxes):  # the span's tiles: finite from the clean tail, NaN (the poisoned workspace) from this
        assert not clean.output[r0:r0 + t.bm, c0:c0 + t.bn].isnan().any()
        assert res.output[r0:r0 + t.bm, c0:c0 + t.bn].isnan().all()


def test_span_only_for_ranged_modules() -> None:
    plain = build(GemmSpec(200, 328, 640), H100_SXM)
    x = make_inputs(plain.spec, 200, 328, 640, seed=0)
    with pytest.raises(ValueError, match="not ranged"):
        simulate(plain.module, x.a, x.b, span=Span(0, 1))


def test_compare_kernel_judges_both_launches() -> None:
    """What `warploom sim` and `warploom demo` run: both launches, the tail's completed tiles judged with the rest."""
    from warploom.sim import compare_kernel, sample_kernel_ctas

    k = kernel("blockwise_h2_t2")  # 3 x 3 tiles of 128x256 on 4 CTAs: 8 whole, 1 in the tail
    s = k.spec
    assert k.tail is not None
    whole, rest = k.spans(s.m, s.n, s.k)
    assert (whole.tiles, rest.tiles) == (8, 1)
    ctas, tail_ctas = sample_kernel_ctas(k, s.m, s.n, s.k)
    cmp = compare_kernel(k, make_inputs(s, s.m, s.n, s.k, seed=3), ctas=ctas, tail_ctas=tail_ctas)
    assert cmp.ok, (cmp.error, cmp.result.report.summary())
    assert [(name, grid, pids) for name, grid, pids in cmp.launches] == [("main", 4, ctas), ("tail", 2, tail_ctas)]
    t = k.tail.tiling
    tail_tiles = {(u.off_m, u.off_n) for pid in range(t.grid)
                  for u in cta_tiles(pid, s.m, s.n, t.bm, t.bn, t.group_m, t.grid, t.split_k, rest)}
    assert tail_tiles <= {(u.off_m, u.off_n) for u in cmp.tiles}


def test_a_k_that_does_not_split_runs_one_launch() -> None:
    """At a run-time K whose k-blocks do not form the tail's ranges (11 of 64 in 2), every tile runs in the main
    kernel, as the launcher does."""
    k = kernel("bf16_64x64_t2")
    s = k.spec
    assert k.tail is not None and not k.tail.tiling.splits_evenly(704)
    whole, rest = k.spans(s.m, s.n, 704)
    assert (whole.tiles, rest.tiles) == (24, 0)
    x = make_inputs(replace(s, k=704), s.m, s.n, 704, seed=0)
    res = k.simulate(x.a, x.b, seed=0)
    assert res.ok and " + " not in res.report.module
    assert relative_error(res.output.float(), reference(x)) < 1e-5


def test_the_merged_timeline_puts_the_tail_after_the_first_launch() -> None:
    k = kernel("bf16_64x64_t2")
    s = k.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    tl = k.simulate(x.a, x.b, seed=0, record=True).report.timeline
    first = [e for e in tl if not e.partition.startswith("tail:")]
    tail = [e for e in tl if e.partition.startswith("tail:")]
    assert first and tail and min(e.start for e in tail) >= max(e.end for e in first)
