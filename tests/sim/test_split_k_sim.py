"""Simulator tier for split-K: work units over (k-range, tile), each storing fp32 partial sums to its slab of the
workspace, then the reduction kernel's in-order sum into C.

Clean schedules must simulate without findings (every slab box stored exactly once) and match the fp32 reference
as closely as an unsplit kernel; the explorer finds no schedule that breaks the protocol; a unit that skips one of
its stores leaves its slab box unwritten, which the simulator reports by itself."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    # Unequal ranges (ir.Tiling.uneven_split): K's k-blocks do not divide by split_k, the first ranges take one more.
    "bf16_uneven_7_in_3": (replace(BF16_K, k=440), Plan(bm=64, bn=64, bk=64, stages=3, consumer_warps=4, group_m=2,
                                                       grid=5, split_k=3)),
    "rowwise_uneven_7_in_5": (replace(ROWWISE, k=896), Plan(bm=64, bn=128, bk=128, stages=2, consumer_warps=4,
                                                           group_m=8, grid=4, split_k=5)),
    "blockwise_uneven_8_in_3": (BW, Plan(bm=128, bn=128, bk=128, stages=3, consumer_warps=8, group_m=2, grid=7,
                                         consumer_partitions=2, split_k=3)),
    # ... and promoted on one warpgroup's 64x64 tile, the form the planner takes unequal promoted ranges in.
    "rowwise_promoted_uneven_7_in_3": (replace(ROWWISE, k=896, accumulation=Accumulation.PROMOTED),
                                       Plan(bm=64, bn=64, bk=128, stages=3, consumer_warps=4, group_m=2, grid=5,
                                            split_k=3)),
    "blockwise_uneven_64x64_7_in_3": (replace(BW, k=896), Plan(bm=64, bn=64, bk=128, stages=3, consumer_warps=4,
                                                              group_m=2, grid=6, split_k=3)),
    # Rule 25 at decode sizes (`decode_split`), the planner's own plans: 64x64 units of a few rows in a few ranges.
    "decode_planned_k8": (GemmSpec(8, 104, 5120), None),
    "decode_planned_uneven_82_in_7": (GemmSpec(8, 104, 5240), None),
    "decode_rowwise_planned_uneven_73_in_7": (GemmSpec(5, 96, 9344, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
                                              None),
}
UNEVEN = [name for name in CASES if "uneven" in name]


@functools.cache
def module(name: str) -> ir.Module:
    spec, plan = CASES[name]
    return build(spec, H100_SXM, plan).module if plan is not None else build(spec, H100_SXM).module


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


def test_uneven_cases_are_built_uneven_and_even_ones_not() -> None:
    assert {name for name in CASES if module(name).tiling.uneven_split} == set(UNEVEN)


def test_decode_cases_are_the_planners_split() -> None:
    """The decode cases are rule 25's own plans at decode sizes (`decode_split`): 64x64 units, the counts named."""
    for name, ranges in (("decode_planned_k8", 8), ("decode_planned_uneven_82_in_7", 7),
                         ("decode_rowwise_planned_uneven_73_in_7", 7)):
        t = module(name).tiling
        assert (t.bm, t.bn, t.split_k, t.swap_ab) == (64, 64, ranges, False)


@pytest.mark.parametrize("name", UNEVEN)
def test_uneven_ranges_cover_k_once(name: str) -> None:
    """Each unit's k-blocks are its range's (ir.raster.split_range): the ranges of a tile cover every k-block of K
    once, in order, the longer ones first; the simulator's sum check holds each unit to its own range."""
    from warploom.ir.raster import split_range
    from warploom.sim.program import Geometry

    m = module(name)
    t = m.tiling
    blocks = -(-m.spec.k // t.bk)
    ranges = [split_range(blocks, t.split_k, s) for s in range(t.split_k)]
    assert [lo for lo, _ in ranges] == [sum(c for _, c in ranges[:s]) for s in range(t.split_k)]
    assert sum(c for _, c in ranges) == blocks and max(c for _, c in ranges) - min(c for _, c in ranges) == 1
    assert [c for _, c in ranges] == sorted((c for _, c in ranges), reverse=True)
    geo = Geometry.of(m, m.spec.m, m.spec.n, m.spec.k, 0, t.grid)
    assert all(geo.unit_range(u) == ranges[u.split] for u in geo.tiles)


@pytest.mark.parametrize("name", UNEVEN)
def test_uneven_kernel_runs_at_other_k(name: str) -> None:
    """An uneven kernel takes any K with a k-block for each range (K is a run-time argument), ragged last
    k-blocks included, and refuses fewer k-blocks than ranges before any launch."""
    from warploom.errors import ShapeError

    m = module(name)
    s, t = m.spec, m.tiling
    for k in (t.split_k * t.bk + 40, 2 * s.k + t.bk):  # a ragged K just past one block a range; a longer one
        x = make_inputs(replace(s, k=k), s.m, s.n, k, seed=2)
        res = simulate(m, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=2)
        assert res.ok, res.report.summary()
        assert relative_error(res.output.float(), reference(x)) < 1e-5
    k = (t.split_k - 1) * t.bk
    x = make_inputs(replace(s, k=k), s.m, s.n, k, seed=2)
    with pytest.raises(ShapeError, match=f"at least {t.split_k}"):
        simulate(m, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=2)


def test_a_unit_on_the_wrong_range_is_caught() -> None:
    """Plant equal-range arithmetic in an uneven module's geometry (every unit reads k_blocks // split_k blocks from
    split * that): the last k-block is never summed, which the simulator's sum check reports."""
    from warploom.sim import program

    m = module("bf16_uneven_7_in_3")
    s = m.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=0)
    good = program.Geometry.unit_range
    try:
        program.Geometry.unit_range = lambda self, t: (  # type: ignore[method-assign]
            (t.split * (self.k_blocks // self.split_k), self.k_blocks // self.split_k) if self.split_k > 1
            else (0, self.k_tiles))
        res = simulate(m, x.a, x.b, seed=0)
    finally:
        program.Geometry.unit_range = good  # type: ignore[method-assign]
    assert not res.ok or relative_error(res.output.float(), reference(x)) > 1e-3


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 130), n=st.integers(1, 70).map(lambda v: 8 * v), blocks=st.integers(2, 9),
       ragged=st.integers(1, 8).map(lambda v: 8 * v), split=st.integers(2, 9), grid=st.integers(1, 7))
def test_any_split_of_any_k_matches(m: int, n: int, blocks: int, ragged: int, split: int, grid: int) -> None:
    """Split-K at random sizes, ranges equal or not, any grid: the simulator runs clean and matches fp32."""
    split = min(split, blocks)
    k = (blocks - 1) * 64 + ragged  # `blocks` k-blocks of 64, the last 8..64 wide
    spec = GemmSpec(m, n, k)
    mod = build(spec, H100_SXM, Plan(bm=64, bn=64, bk=64, stages=2, consumer_warps=4, group_m=2, grid=grid,
                                     split_k=split)).module
    assert mod.tiling.uneven_split == (blocks % split != 0)
    x = make_inputs(spec, m, n, k, seed=blocks)
    res = simulate(mod, x.a, x.b, seed=blocks)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-5
