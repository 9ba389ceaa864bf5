"""Simulator tier for split-K: work units over (k-range, tile), each storing fp32 partial sums to its slab of the
workspace, then the reduction kernel's in-order sum into C.

Clean schedules must simulate without findings (every slab box stored exactly once) and match the fp32 reference
as closely as an unsplit kernel; the explorer finds no schedule that breaks the protocol; a unit that skips one of
its stores leaves its slab box unwritten, which the simulator reports by itself."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.passes.util import filter_ops
from warploom.planner import Plan
from warploom.reference import make_inputs, reference, relative_error
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import Accumulation, BLayout, GemmSpec, ScaleRecipe

E4 = DType.E4M3
BF16_K = GemmSpec(70, 200, 640)
BF16_N = GemmSpec(130, 300, 512, b_layout=BLayout.N_MAJOR, out_dtype=DType.FP32)
ROWWISE = GemmSpec(100, 264, 512, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)
BW = GemmSpec(130, 300, 1024, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
              accumulation=Accumulation.PROMOTED)
BW1 = replace(BW, m=60, n=200, k=768, scale=ScaleRecipe.BLOCKWISE_1X128_1X128)
TENSORWISE = GemmSpec(64, 128, 512, E4, E4, DType.FP16, scale=ScaleRecipe.TENSORWISE,
                      accumulation=Accumulation.PROMOTED)

CASES = {
    # (spec, plan): grids smaller than the unit count, so CTAs take several units across k-ranges.
    "bf16_k5": (BF16_K, Plan(bm=64, bn=64, bk=64, stages=3, consumer_warps=4, group_m=2, grid=5, split_k=5)),
    "bf16_nmajor_fp32_k2": (BF16_N, Plan(bm=128, bn=128, bk=64, stages=2, consumer_warps=8, group_m=2, grid=3,
                                         consumer_partitions=2, split_k=2)),
    "rowwise_k4": (ROWWISE, Plan(bm=64, bn=128, bk=128, stages=1, consumer_warps=4, group_m=8, grid=4, split_k=4)),
    "blockwise_p2_k4": (BW, Plan(bm=128, bn=128, bk=128, stages=3, consumer_warps=8, group_m=2, grid=7,
                                 consumer_partitions=2, split_k=4)),
    "blockwise_h2_k2": (BW, Plan(bm=128, bn=256, bk=128, stages=2, consumer_warps=8, group_m=2, grid=3,
                                 consumer_partitions=2, partial_blocks=2, epilogue_subtiles=2, split_k=2)),
    "blockwise_1x128_64x64_k3": (BW1, Plan(bm=64, bn=64, bk=128, stages=4, consumer_warps=4, group_m=2, grid=5,
                                            split_k=3)),
    "tensorwise_promoted_k2": (TENSORWISE, Plan(bm=64, bn=128, bk=128, stages=2, consumer_warps=4, group_m=1,
                                                grid=1, split_k=2)),
}


@functools.cache
def module(name: str) -> ir.Module:
    spec, plan = CASES[name]
    return build(spec, H100_SXM, plan).module


@pytest.mark.parametrize("name", list(CASES))
def test_clean_and_exact(name: str) -> None:
    m = module(name)
    s = m.spec
    for seed in (0, 1):
        x = make_inputs(s, s.m, s.n, s.k, seed=seed)
        res = simulate(m, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed)
        assert res.ok, res.report.summary()
        assert not res.output.isnan().any()
        # fp32 partial sums added in fp32: only the output rounding differs from the reference.
        assert relative_error(res.output.float(), reference(x)) < 1e-5


def test_units_cover_every_k_range_once() -> None:
    """The raster's units: each (tile, k-range) exactly once over the grid, k-range-major."""
    from warploom.sim import cta_tiles

    spec, plan = CASES["blockwise_p2_k4"]
    units = [u for pid in range(plan.grid)
             for u in cta_tiles(pid, spec.m, spec.n, plan.bm, plan.bn, plan.group_m, plan.grid, plan.split_k)]
    assert sorted((u.split, u.off_m, u.off_n) for u in units) == sorted(
        (s, pm * plan.bm, pn * plan.bn) for s in range(4) for pm in range(2) for pn in range(3))


@pytest.mark.parametrize("name", ["bf16_k5", "rowwise_k4"])
def test_explores_clean(name: str) -> None:
    spec = module(name).spec
    r = explore(module(name), spec.m, spec.n, spec.k, max_states=20_000)
    assert not r.findings, r.summary()


def test_a_missing_partial_store_is_caught() -> None:
    """Drop the second column block's store of a 256-wide unit: its slab box is never written, so the reduction
    would add stale memory. The simulator flags the unit (the verifier is bypassed)."""
    m = module("blockwise_h2_k2")
    def second_block(o: ir.Op) -> bool:
        return isinstance(o, ir.TmaStore) and o.part == 1

    assert any(second_block(o) for p in m.partitions for o, _ in ir.walk(p.body))
    bad = replace(m, partitions=tuple(replace(p, body=filter_ops(p.body, lambda o: not second_block(o)))
                                      for p in m.partitions))
    s = m.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=0)
    assert any(f.kind is FindingKind.OUTPUT_COVERAGE and "workspace" in f.message for f in res.report.findings)
    assert res.output.isnan().any()  # the unwritten (NaN-poisoned) workspace reaches C through the reduction


def test_other_k_than_planned_is_refused() -> None:
    """K is a run-time argument: a split kernel at a K whose k-blocks do not split as planned would drop the
    remainder's k-blocks, so the simulator (like the launcher) refuses it; a K that splits the same way runs."""
    from warploom.errors import ShapeError

    m = module("bf16_k5")  # K = 640: 10 k-blocks of 64 in 5 ranges
    s = m.spec
    for k in (700, 576):
        x = make_inputs(replace(s, k=k), s.m, s.n, k, seed=0)
        with pytest.raises(ShapeError, match="split into 5 equal ranges"):
            simulate(m, x.a, x.b, seed=0)
    x = make_inputs(replace(s, k=1280), s.m, s.n, 1280, seed=0)  # 20 k-blocks: 5 ranges of 4
    res = simulate(m, x.a, x.b, seed=0)
    assert res.ok and relative_error(res.output.float(), reference(x)) < 1e-5


def test_partial_simulation_leaves_incomplete_tiles_alone() -> None:
    """With only some CTAs simulated, C is written only where every k-range of a tile ran."""
    m = module("bf16_k5")  # grid 5: each tile's five units fall on five different CTAs
    s = m.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    res = simulate(m, x.a, x.b, seed=0, ctas=(0, 1))
    assert res.ok and res.output.isnan().all()
    one = module("tensorwise_promoted_k2")  # grid 1: every unit in CTA 0
    t = one.spec
    y = make_inputs(t, t.m, t.n, t.k, seed=0)
    res = simulate(one, y.a, y.b, y.scale_a, y.scale_b, seed=0, ctas=(0,))
    assert res.ok and relative_error(res.output.float(), reference(y)) < 1e-5


def test_sampled_ctas_complete_the_first_and_last_tiles() -> None:
    """`sample_ctas` (what `warploom demo` simulates above the size limit) includes every CTA with a unit of the
    first and the last tile, so the comparison judges whole tiles of C rather than none."""
    from warploom.sim import compare, sample_ctas

    m = module("bf16_k5")
    s = m.spec
    ctas = sample_ctas(m, s.m, s.n)
    r = compare(m, make_inputs(s, s.m, s.n, s.k, seed=2), ctas=ctas)
    tiles = {(t.off_m, t.off_n) for t in r.tiles}
    assert {(0, 0), ((-(-s.m // 64) - 1) * 64, (-(-s.n // 64) - 1) * 64)} <= tiles
    assert r.ok, (r.error, r.result.report.summary())
