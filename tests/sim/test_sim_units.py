"""Unit tests of the simulator's parts: raster twin, mbarrier semantics, program resolution, entry points."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from warploom.backends import gluon_raster
from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.errors import DTypeError
from warploom.kernel import build
from warploom.planner import Plan
from warploom.reference import make_inputs, relative_error
from warploom.sim import FindingKind, ProtocolError, check_protocol, cta_tiles, launch_grid, simulate, tile_coords
from warploom.sim.barrier import MBarrier
from warploom.sim.program import (
    ArriveI,
    EpilogueI,
    Geometry,
    LoadI,
    MalformedError,
    MmaI,
    StoreTileI,
    TmaStoreI,
    WaitI,
    unroll,
)
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

PLAN = Plan(bm=64, bn=64, bk=32, stages=3, consumer_warps=4, group_m=2, grid=2)


# ---------------------------------------------------------------------------------------------
# raster


def test_grouped_raster_order() -> None:
    # 3 x 2 tiles, GROUP_M = 2: the first group walks rows 0-1 column by column, then row 2 alone.
    order = [tile_coords(t, 3, 2, 2) for t in range(6)]
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]


def _gluon_raster() -> str:
    """The backend's own `tile_coords` source, as Python (gl.minimum is min on scalars)."""
    return gluon_raster.RASTER.replace("@gluon.jit\n", "").replace("gl.minimum", "min")


@pytest.mark.parametrize("pm,pn,group", [(3, 2, 2), (7, 5, 8), (9, 4, 3), (1, 6, 8), (5, 1, 2)])
def test_raster_is_the_gluon_helper(pm: int, pn: int, group: int) -> None:
    env: dict[str, object] = {"GROUP_M": group, "BM": 1, "BN": 1}
    exec(_gluon_raster(), env)
    gluon_tile_coords = env["tile_coords"]
    for t in range(pm * pn):
        assert tile_coords(t, pm, pn, group) == gluon_tile_coords(t, pm, pn)  # type: ignore[operator]


@pytest.mark.parametrize("m,n,grid,group", [(130, 120, 2, 2), (300, 700, 5, 8), (64, 64, 3, 1), (1000, 70, 7, 3)])
def test_persistent_grid_covers_every_tile_once(m: int, n: int, grid: int, group: int) -> None:
    g = launch_grid(m, n, 64, 64, grid)
    seen = [(t.pid_m, t.pid_n) for pid in range(g) for t in cta_tiles(pid, m, n, 64, 64, group, g)]
    assert sorted(seen) == sorted(itertools.product(range(-(-m // 64)), range(-(-n // 64))))


# ---------------------------------------------------------------------------------------------
# mbarrier


def test_fresh_barrier_passes_parity_1_only() -> None:
    b = MBarrier(1)
    assert b.passes(1) and not b.passes(0)


def test_phase_completes_on_arrivals_and_tx() -> None:
    b = MBarrier(2)
    b.expect(100)
    assert not b.arrive(1, "p") and b.pending == 1
    assert not b.complete_tx(100)  # bytes landed, one arrival still missing
    assert b.arrive(1, "q")  # the phase completes and flips
    assert b.phase == 1 and b.pending == 2 and b.tx == 0 and b.passes(0) and not b.passes(1)


def test_tokens_move_to_the_completed_phase() -> None:
    b = MBarrier(1)
    b.publish(("F", "a_ring", 0, 0))
    assert b.arrive(1, "p")
    assert b.last_tokens == {("F", "a_ring", 0, 0)} and not b.tokens


# ---------------------------------------------------------------------------------------------
# program resolution


def test_producer_and_consumer_resolve_the_same_blocks_per_slot() -> None:
    spec = GemmSpec(130, 120, 150)
    m = build(spec, H100_SXM, PLAN).module
    geo = Geometry.of(m, spec.m, spec.n, spec.k, 0, 2)
    loads = [i for i in unroll(m, m.partition("producer"), geo) if isinstance(i, LoadI)]
    mmas = [i for i in unroll(m, m.partition("consumer"), geo) if isinstance(i, MmaI)]
    assert len(mmas) == len(geo.tiles) * geo.k_tiles == len(loads) // 2
    for u, mma in enumerate(mmas):  # the u-th use of the ring holds the u-th wgmma's blocks
        a, b = loads[2 * u], loads[2 * u + 1]
        assert (a.slot, a.tag, b.tag) == (mma.a_slot, mma.a_tag, mma.b_tag) == (u % 3, mma.a_tag, mma.b_tag)
        assert mma.use_acc == (mma.site.k != 0)


def test_parities_and_deferred_release_indices() -> None:
    spec = GemmSpec(64, 64, 32 * 4)
    m = build(spec, H100_SXM, replace(PLAN, grid=1)).module
    geo = Geometry.of(m, spec.m, spec.n, spec.k, 0, 1)
    prod = [i for i in unroll(m, m.partition("producer"), geo) if isinstance(i, WaitI)]
    assert [(w.index, w.parity, w.phase) for w in prod] == [(0, 1, -1), (1, 1, -1), (2, 1, -1), (0, 0, 0)]
    cons = unroll(m, m.partition("consumer"), geo)
    rel = [(i.index, i.site.k) for i in cons if isinstance(i, ArriveI)]
    assert rel == [(0, 1), (1, 2), (2, 3), (0, None)]  # slot c-1 from k = 1 on, then the last slot after the loop


def test_split_consumers_resolve_their_row_and_column_blocks() -> None:
    """Each of two consumer partitions reads its 64 rows of every A slot, all of B's columns in two blocks,
    and scales and stores its rows of the tile at each block's columns."""
    spec = GemmSpec(130, 120, 128, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    accumulation=Accumulation.PROMOTED)
    plan = Plan(bm=128, bn=128, bk=64, stages=2, consumer_warps=8, group_m=2, grid=1, consumer_partitions=2,
                partial_blocks=2)
    kernel = build(spec, H100_SXM, plan)
    m = kernel.module
    geo = Geometry.of(m, spec.m, spec.n, spec.k, 0, 1)  # 2 x 1 tiles, 2 k-blocks each
    for name, row0 in (("consumer0", 0), ("consumer1", 64)):
        instrs = unroll(m, m.partition(name), geo)
        mmas = [i for i in instrs if isinstance(i, MmaI)]
        assert [(i.a_rows, i.b_cols) for i in mmas] == [((row0, row0 + 64), (0, 64)),
                                                        ((row0, row0 + 64), (64, 128))] * 4
        epis = [(i.acc, i.off_m, i.off_n) for i in instrs if isinstance(i, EpilogueI)]
        assert epis == [("acc0", row0, 0), ("acc1", row0, 64), ("acc0", 128 + row0, 0), ("acc1", 128 + row0, 64)]
        stores = [(i.buffer, i.off_m, i.off_n) for i in instrs if isinstance(i, TmaStoreI)]
        buf = f"c_smem{row0 // 64}"
        assert stores == [(buf, row0, 0), (buf, row0, 64), (buf, 128 + row0, 0), (buf, 128 + row0, 64)]
    # Before LowerEpilogue the abstract store is placed the same way.
    before = dict(kernel.trace.stages)["FlattenProducer"]
    tiles = [(i.acc, i.off_m, i.off_n) for i in unroll(before, before.partition("consumer1"), geo)
             if isinstance(i, StoreTileI)]
    assert tiles == [("acc0", 64, 0), ("acc1", 64, 64), ("acc0", 192, 0), ("acc1", 192, 64)]


def test_malformed_module_is_reported() -> None:
    spec = GemmSpec(64, 64, 64)
    m = build(spec, H100_SXM, replace(PLAN, grid=1)).module
    cons = m.partition("consumer")
    bad = m.with_partition(replace(cons, cursors=()))
    with pytest.raises(MalformedError, match="cursor 'c'"):
        unroll(bad, bad.partition("consumer"), Geometry.of(bad, 64, 64, 64, 0, 1))
    x = make_inputs(spec, 64, 64, 64)
    res = simulate(bad, x.a, x.b)
    assert [f.kind for f in res.findings] == [FindingKind.MALFORMED]


# ---------------------------------------------------------------------------------------------
# entry points


def test_simulate_checks_dtypes() -> None:
    m = build(GemmSpec(64, 64, 64), H100_SXM, PLAN).module
    with pytest.raises(DTypeError, match="bfloat16"):
        simulate(m, torch.randn(64, 64), torch.randn(64, 64))


def test_check_protocol_raises_on_findings() -> None:
    spec = GemmSpec(130, 190, 150)
    m = build(spec, H100_SXM, PLAN).module
    assert check_protocol(m, spec.m, spec.n, spec.k, seeds=range(3)).ok
    broken = replace(m, barriers=tuple(replace(b, count=2) for b in m.barriers))
    with pytest.raises(ProtocolError, match="DEADLOCK"):
        check_protocol(broken, spec.m, spec.n, spec.k)
    report = check_protocol(broken, spec.m, spec.n, spec.k, raise_on_finding=False)
    assert FindingKind.DEADLOCK in {f.kind for f in report.findings}


def test_simulate_records_the_timeline() -> None:
    spec = GemmSpec(130, 120, 150)
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    res = simulate(build(spec, H100_SXM, PLAN).module, x.a, x.b, ctas=[0])
    parts = {e.partition for e in res.report.timeline}
    kinds = {e.kind.value for e in res.report.timeline}
    assert parts == {"producer", "consumer"} and kinds == {"op", "wait", "async"}
    assert all(e.start < e.end <= res.report.steps for e in res.report.timeline)
    assert sum(e.op.startswith("wgmma.async") and e.kind.value == "op" for e in res.report.timeline) == 3 * 5


def test_relative_error_is_scale_free() -> None:
    x = torch.randn(50, 40)
    assert relative_error(x, x) == pytest.approx(0.0, abs=1e-12)
    assert relative_error(x * 1e3, x * 1e3 * 1.01) == pytest.approx(relative_error(x, x * 1.01), rel=1e-6)
    assert relative_error(x, -x) == pytest.approx(2.0)
