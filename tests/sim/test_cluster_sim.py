"""2-CTA clusters (planner rule 24, ir.Tiling.cluster) on the CPU: each CTA's rows of the cluster tiles against torch
and against the same plan without a cluster, whole clusters sampled, and planted bugs in the cluster's protocol (the
lead's multicast, the cluster's EMPTY barrier and the cluster barrier before exit, sim/cluster.py) that the simulator
must catch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_fused_epilogue_sim import (  # (pytest puts this folder on sys.path)
    Case,
    assert_matches,
    bf16_case,
    fp8_case,
    gelu_fn,
    gelu_operands,
)

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.ir import nodes as ir
from warploom.ir.raster import cta_tiles, launch_grid
from warploom.kernel import build
from warploom.passes.cluster import CLUSTER_EMPTY
from warploom.passes.util import filter_ops, rewrite
from warploom.planner import plan_schedule
from warploom.reference import make_inputs, relative_error
from warploom.sim import FindingKind, check_protocol, explore, representative_ctas, simulate
from warploom.sim.cluster import whole_clusters
from warploom.sim.compare import compare, sample_ctas
from warploom.sim.program import CtaProgram, Geometry, LoadI, WaitI
from warploom.targets import compile_schedule

K = FindingKind
# M not a multiple of the cluster tile's 256 rows (the last cluster tile's rank 1 may lie wholly past M), N not of
# BN, K not of BK.
SHAPES = [(300, 520, 200), (200, 304, 72), (130, 136, 40)]


def _module(m: int, n: int, k: int, cluster: int = 2, grid: int = 8, stages: int = 4) -> ir.Module:
    a = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
    b = torch.empty(k, n, dtype=torch.bfloat16, device="meta")
    kern = warploom.plan(a, b)
    plan = dataclasses.replace(kern.plan, bm=128, bn=256, consumer_warps=8, consumer_partitions=2, cluster=cluster,
                               epilogue_subtiles=4, grid=grid, stages=stages)
    module, _ = compile_schedule(kern.spec, plan, H100_SXM)
    return module


def _inputs(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(m * 7 + n + k)
    return torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()


def _drop(module: ir.Module, role: ir.Role, drop: type, barrier: str) -> ir.Module:
    """`module` with every `drop` op (Wait or Arrive) on `barrier` removed from its `role` partitions."""
    parts = tuple(dataclasses.replace(p, body=filter_ops(p.body, lambda o: not (
        isinstance(o, drop) and o.barrier == barrier))) if p.role is role else p for p in module.partitions)
    assert parts != module.partitions, "the mutation changed nothing"
    return dataclasses.replace(module, partitions=parts)


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_each_rank_computes_its_rows(m: int, n: int, k: int) -> None:
    module = _module(m, n, k)
    assert module.tiling.cluster == 2
    assert_as_one_cta(module, _module(m, n, k, cluster=1), *_inputs(m, n, k))


def assert_as_one_cta(module: ir.Module, one_cta: ir.Module, a: torch.Tensor, b: torch.Tensor) -> None:
    """A cluster's `module` on two schedules: clean, every element of C written, right against fp32, and the same bits
    as `one_cta`, the same plan without the cluster (the same k-blocks summed in the same order)."""
    for seed in range(2):
        res = simulate(module, a, b, seed=seed)
        assert res.ok, res.report.summary()
        assert not res.output.isnan().any(), "every element of C written"
        assert relative_error(res.output.float(), a.float() @ b.float()) < 1e-2
    plain = simulate(one_cta, a, b)
    assert plain.ok and torch.equal(res.output, plain.output)


def test_cluster_raster_covers_c_once() -> None:
    m, n, bm, bn, grid = 700, 520, 128, 256, 8
    launched = launch_grid(m, n, bm, bn, grid, cluster=2)
    assert launched == 8  # 3 x 3 cluster tiles, 4 clusters
    seen: dict[tuple[int, int], int] = {}
    for pid in range(launched):
        for u in cta_tiles(pid, m, n, bm, bn, 8, grid, cluster=2):
            assert u.off_m // bm % 2 == pid % 2, "rank r computes rows r * BM of its cluster tile"
            seen[(u.off_m, u.off_n)] = seen.get((u.off_m, u.off_n), 0) + 1
    assert seen == {(r * bm, c * bn): 1 for r in range(6) for c in range(3)}  # (rows 640.. lie past M: clipped)
    assert launch_grid(130, 136, bm, bn, grid, cluster=2) == 2  # one cluster tile: one cluster


def test_only_the_lead_multicasts_and_waits_on_the_cluster_barrier() -> None:
    m, n, k = 300, 520, 200
    module = _module(m, n, k)
    grid = launch_grid(m, n, 128, 256, 8, cluster=2)
    for pid in range(2):
        geo = Geometry.of(module, m, n, k, pid, grid)
        (producer,) = (tr for p, tr in zip(module.partitions, CtaProgram.build(module, geo).traces, strict=True)
                       if p.role is ir.Role.PRODUCER)
        multicasts = sum(isinstance(i, LoadI) and i.multicast for i in producer)
        cluster_waits = sum(isinstance(i, WaitI) and i.barrier == CLUSTER_EMPTY for i in producer)
        loads = sum(isinstance(i, LoadI) for i in producer)
        steps = len(geo.tiles) * geo.k_tiles
        assert geo.rank == pid
        assert (multicasts, cluster_waits, loads) == ((steps, steps, 2 * steps) if pid == 0 else (0, 0, steps))


def test_samples_are_whole_clusters() -> None:
    m, n, k = 300, 520, 200
    module = _module(m, n, k)
    reps = representative_ctas(module, m, n)
    assert reps and all(p ^ 1 in reps for p in reps)
    a, b = _inputs(m, n, k)
    res = simulate(module, a, b, ctas=[3])
    assert res.report.ctas == (2, 3) and res.ok
    assert check_protocol(module, m, n, k, seeds=range(3)).ok


def test_a_sample_of_clusters_is_judged() -> None:
    """`sample_ctas` names whole clusters (one per tile count, and the last cluster tile's), and `compare` judges
    their tiles, rank 1's past M included."""
    m, n, k = 700, 520, 72
    module = _module(m, n, k)
    ctas = sample_ctas(module, m, n)
    assert ctas == whole_clusters(module, ctas) and len(ctas) < 8
    got = compare(module, make_inputs(module.spec, m, n, k), ctas=ctas)
    assert got.ok, got.result.report.summary()
    t = module.tiling
    units = sum(len(cta_tiles(p, m, n, t.bm, t.bn, t.group_m, t.grid, cluster=t.cluster)) for p in ctas)
    assert len(got.tiles) == units == 10  # (clusters 0 and 1 of 4: 3 and 2 of the 9 cluster tiles, 2 CTAs each)


def test_lead_must_wait_for_every_cta_to_release_b() -> None:
    """Without its wait on the cluster's EMPTY barrier, the lead's multicast refills the other CTA's B slot while
    that CTA's wgmma may still read it: only its own consumers' releases were observed."""
    m, n, k = 300, 520, 200
    module = _drop(_module(m, n, k), ir.Role.PRODUCER, ir.Wait, CLUSTER_EMPTY)
    a, b = _inputs(m, n, k)
    for seed in range(3):
        res = simulate(module, a, b, seed=seed)
        assert K.OVERWRITE_UNRELEASED in res.report.kinds(), res.report.summary()
        assert any("CTA 1's b_ring" in f.message for f in res.findings if f.kind is K.OVERWRITE_UNRELEASED)
    # The same module with the wait is clean on the same seeds: the finding is the missing wait's.
    assert check_protocol(_module(m, n, k), m, n, k, seeds=range(3)).ok


def test_own_empty_barrier_still_guards_a() -> None:
    """The cluster's barrier guards only B: without its own EMPTY wait a CTA's producer overwrites its A slots."""
    m, n, k = 300, 520, 200
    module = _drop(_module(m, n, k), ir.Role.PRODUCER, ir.Wait, "empty")
    res = simulate(module, *_inputs(m, n, k))
    found = [f for f in res.findings if f.kind is K.OVERWRITE_UNRELEASED]
    assert found and all("a_ring" in f.message for f in found), res.report.summary()


def test_consumers_must_release_on_the_cluster_barrier() -> None:
    m, n, k = 300, 520, 200
    module = _drop(_module(m, n, k), ir.Role.CONSUMER, ir.Arrive, CLUSTER_EMPTY)
    res = simulate(module, *_inputs(m, n, k))
    assert K.DEADLOCK in res.report.kinds(), res.report.summary()
    assert any(CLUSTER_EMPTY in f.message for f in res.findings if f.kind is K.DEADLOCK)


def test_each_cta_must_expect_the_multicast_bytes() -> None:
    """Each CTA's expect-tx counts B's multicast bytes too: announcing A's alone is found in the lead (its own copy
    lands more than announced) and in the other CTA (its phase completes on A's bytes, before B's have landed)."""
    m, n, k = 300, 520, 200
    module = _module(m, n, k)
    b_bytes = next(r.slot_bytes for r in module.rings if r.tensor is ir.Tensor.B)

    def a_only(o: ir.Op) -> tuple[ir.Stmt, ...]:
        return (dataclasses.replace(o, nbytes=o.nbytes - b_bytes) if isinstance(o, ir.ArriveExpectTx) else o,)

    parts = tuple(dataclasses.replace(p, body=rewrite(p.body, a_only)) for p in module.partitions)
    res = simulate(dataclasses.replace(module, partitions=parts), *_inputs(m, n, k))
    assert K.TX_MISMATCH in res.report.kinds(), res.report.summary()
    assert any(f.cta % 2 for f in res.findings if f.kind is K.READ_BEFORE_LANDED), res.report.summary()


# The explorer's small configuration: one cluster tile (two CTAs), two k-blocks through one stage (so the second
# refills the slot the first was read from: every release and wait of the cluster's protocol is exercised).
EXPLORE = (130, 136, 72)


def test_explorer_is_clean_on_a_cluster() -> None:
    """Every interleaving of one cluster's two CTAs (the lead's multicast, the shared EMPTY barrier, the exit
    barrier) is clean."""
    m, n, k = EXPLORE
    rep = explore(_module(m, n, k, grid=2, stages=1), m, n, k, max_states=100_000)
    assert rep.ok and not rep.bound_hit, rep.summary()
    assert rep.ctas == (0, 1)  # (the cluster whole)


@pytest.mark.parametrize("name", ["no_cluster_wait", "no_cluster_release", "every_cta_multicasts", "no_exit_sync"])
def test_explorer_finds_the_cluster_mutants(name: str) -> None:
    """The planted cluster bugs the random simulator finds, found on some schedule by the exhaustive explorer too,
    with a counterexample."""
    m, n, k = EXPLORE
    module = _module(m, n, k, grid=2, stages=1)
    mutant, kind = {
        "no_cluster_wait": (lambda: _drop(module, ir.Role.PRODUCER, ir.Wait, CLUSTER_EMPTY), K.OVERWRITE_UNRELEASED),
        "no_cluster_release": (lambda: _drop(module, ir.Role.CONSUMER, ir.Arrive, CLUSTER_EMPTY), K.DEADLOCK),
        "every_cta_multicasts": (lambda: _every_cta_multicasts(module), K.DOUBLE_WRITE),
        "no_exit_sync": (lambda: dataclasses.replace(module, tiling=dataclasses.replace(module.tiling,
                                                                                          exit_sync=False)),
                         K.WRITE_AFTER_EXIT),
    }[name]
    rep = explore(mutant(), m, n, k, max_states=100_000, stop_at_first=True)
    assert kind in rep.kinds() and rep.counterexample, rep.summary()
    if name == "no_cluster_wait":  # (the lead refills the other CTA's B slot before that CTA released it)
        assert any("CTA 1's b_ring" in f.message for f in rep.findings if f.kind is kind), rep.summary()


def _every_cta_multicasts(module: ir.Module) -> ir.Module:
    """`module` with B's multicast issued by every CTA of the cluster, not by the lead alone (`TmaLoad.lead_only`)."""

    def every(o: ir.Op) -> tuple[ir.Stmt, ...]:
        return (dataclasses.replace(o, lead_only=False),) if isinstance(o, ir.TmaLoad) and o.multicast else (o,)

    parts = tuple(dataclasses.replace(p, body=rewrite(p.body, every)) for p in module.partitions)
    assert parts != module.partitions, "the mutation changed nothing"
    return dataclasses.replace(module, partitions=parts)


def test_only_the_lead_may_multicast() -> None:
    """A multicast that every CTA issues is two copies of each B box, each into both CTAs: whichever comes second
    finds its box already in the slot (DOUBLE_WRITE, in both CTAs' slots), and each READY barrier gets B's bytes
    twice (TX_MISMATCH)."""
    m, n, k = 300, 520, 200
    module = _every_cta_multicasts(_module(m, n, k))
    geo = Geometry.of(module, m, n, k, 1, launch_grid(m, n, 128, 256, 8, cluster=2))
    (producer,) = (tr for p, tr in zip(module.partitions, CtaProgram.build(module, geo).traces, strict=True)
                   if p.role is ir.Role.PRODUCER)
    assert sum(isinstance(i, LoadI) and i.multicast for i in producer) == len(geo.tiles) * geo.k_tiles  # (CTA 1's)
    a, b = _inputs(m, n, k)
    for seed in range(3):
        res = simulate(module, a, b, seed=seed)
        found = [f for f in res.findings if f.kind is K.DOUBLE_WRITE]
        assert found and all(f"CTA {f.cta ^ 1}'s copy of the same box already fills" in f.message
                             and "b_ring[" in f.message for f in found), res.report.summary()
        assert K.TX_MISMATCH in res.report.kinds(), res.report.summary()
    # The lead's multicast alone is clean on the same seeds: the findings are the second copy's.
    assert check_protocol(_module(m, n, k), m, n, k, seeds=range(3)).ok


def test_no_cta_exits_before_its_cluster_is_done() -> None:
    """Without the cluster barrier before exit (`Tiling.exit_sync`) a CTA exits when its own partitions finish. The
    other CTA's releases of B's last stages on the lead's cluster barrier are observed by no wait of the lead, so
    nothing orders them before the lead's exit: found on every schedule, whichever CTA finishes first."""
    m, n, k = 300, 520, 200
    module = _module(m, n, k)
    assert module.tiling.exit_sync
    no_sync = dataclasses.replace(module, tiling=dataclasses.replace(module.tiling, exit_sync=False))
    a, b = _inputs(m, n, k)
    for seed in range(3):
        res = simulate(no_sync, a, b, seed=seed)
        assert res.report.kinds() == {K.WRITE_AFTER_EXIT}, res.report.summary()
        for f in res.findings:  # (reported at the lead, which exits: CTA 0, 2, 4, 6)
            assert f.cta % 2 == 0 and f"of CTA {f.cta + 1} arrives on CTA {f.cta}'s {CLUSTER_EMPTY}[" in f.message
            assert f.partition.startswith("consumer") and "exited" in f.message
    assert simulate(module, a, b, seed=0).ok


# Rule 24 beyond native accumulation (forced: `cluster=2`): promoted fp8 (each warpgroup's 128 columns in two
# 64-column accumulators, SplitConsumers._columns), blockwise scales (each CTA copies its own rows' scale_a and the
# tile's scale_b) and fused epilogue graphs (rule 9's blocks, each CTA its rows of every dense operand's block).
PROMOTED = {
    "rowwise": ScaleRecipe.ROWWISE,
    "tensorwise": ScaleRecipe.TENSORWISE,
    "blockwise_128x128": ScaleRecipe.BLOCKWISE_1X128_128X128,
    "blockwise_1x128": ScaleRecipe.BLOCKWISE_1X128_1X128,
}
RAGGED = (300, 520, 392)  # the second cluster tile's rank 1 lies wholly past M; N and K not tile multiples


def _forced(spec: GemmSpec, **options: object) -> ir.Module:
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM, **options)  # type: ignore[arg-type]
    return build(spec, H100_SXM, plan).module


def _promoted(recipe: ScaleRecipe) -> GemmSpec:
    return GemmSpec(*RAGGED, DType.E4M3, DType.E4M3, DType.BF16, scale=recipe, accumulation=Accumulation.PROMOTED)


@pytest.mark.parametrize("name", list(PROMOTED))
def test_promoted_and_blockwise_clusters(name: str) -> None:
    """Each CTA's rows against the fp32 reference (blockwise: the dequantized operands' product), every element
    written, and the same bits as one CTA per 128x256 tile (each column block promotes the same partials)."""
    spec = _promoted(PROMOTED[name])
    module = _forced(spec, cluster=2)
    assert module.tiling.cluster == 2
    cons = [p for p in module.partitions if p.role is ir.Role.CONSUMER]
    assert [[(a.col0, a.cols) for a in p.accumulators] for p in cons] == [[(0, 64), (64, 64), (0, 64)],
                                                                          [(128, 64), (192, 64), (0, 64)]]
    x = make_inputs(spec, *RAGGED)
    for seed in range(2):
        got = compare(module, x, seed=seed)
        assert got.ok and got.error < 1e-5, got.result.report.summary()
        assert not got.result.output.isnan().any()
    plain = compare(_forced(spec, cluster=1, bm=128, bn=256), x)
    assert plain.ok and torch.equal(got.result.output, plain.result.output)


def _fused_cases() -> dict[str, Case]:
    m, n, k = RAGGED
    return {"bf16_gelu_residual": bf16_case(m, n, k, gelu_fn, gelu_operands(m, n, False)),
            "fp8_rowwise_bias_gelu_residual": fp8_case(m, n, k, ScaleRecipe.ROWWISE)}


@pytest.mark.parametrize("name", ["bf16_gelu_residual", "fp8_rowwise_bias_gelu_residual"])
def test_fused_epilogue_clusters(name: str) -> None:
    """A fused epilogue graph (rule 9's 128x256 blocks, a dense residual copied by TMA into each CTA's block) in a
    cluster: NaN-poisoned outputs against the user's function on the fp64 product, and the same bits as one CTA
    per tile."""
    case = _fused_cases()[name]
    with emitting_for("3.9"):
        plan = plan_schedule(case.spec, H100_SXM, cluster=2)
    module, res = case.run(plan)
    assert module.tiling.cluster == 2 and any(b.tensor is ir.Tensor.OPERAND for b in module.buffers)
    assert_matches(case, res)
    _, plain = case.run(plan_schedule(case.spec, H100_SXM, cluster=1, bm=128, bn=256))
    assert all(torch.equal(x, y) for x, y in zip(res.outputs, plain.outputs, strict=True))


NEW_PATHS = {"promoted_rowwise": lambda: _forced(_promoted(ScaleRecipe.ROWWISE), cluster=2),
             "blockwise_128x128": lambda: _forced(_promoted(ScaleRecipe.BLOCKWISE_1X128_128X128), cluster=2),
             "fused_bf16": lambda: build(_fused_cases()["bf16_gelu_residual"].spec, H100_SXM, _fused_plan()).module}


def _fused_plan() -> warploom.Plan:
    with emitting_for("3.9"):
        return plan_schedule(_fused_cases()["bf16_gelu_residual"].spec, H100_SXM, cluster=2)


@pytest.mark.parametrize("name", list(NEW_PATHS))
def test_new_paths_must_release_b_to_the_cluster(name: str) -> None:
    """Planted on each new path: one consumer warpgroup's releases on the cluster barrier dropped. The lead's
    next multicast waits for a release that never comes: DEADLOCK, named on the cluster barrier."""
    module = NEW_PATHS[name]()
    m, n, k = RAGGED
    parts = tuple(dataclasses.replace(p, body=filter_ops(p.body, lambda o: not (
        isinstance(o, ir.Arrive) and o.barrier == CLUSTER_EMPTY))) if p.name == "consumer1" else p
        for p in module.partitions)
    assert parts != module.partitions
    found = check_protocol(dataclasses.replace(module, partitions=parts), m, n, k, seeds=range(2),
                           raise_on_finding=False)
    assert any(f.kind is K.DEADLOCK and CLUSTER_EMPTY in f.message for f in found.findings), found.findings
    # ...and without the cluster barrier before exit the other CTA's last releases come after the lead exits
    no_sync = dataclasses.replace(module, tiling=dataclasses.replace(module.tiling, exit_sync=False))
    found = check_protocol(no_sync, m, n, k, seeds=range(2), raise_on_finding=False)
    assert {f.kind for f in found.findings} == {K.WRITE_AFTER_EXIT}, found.findings
    assert check_protocol(module, m, n, k, seeds=range(2)).ok


# 1x2 clusters (ShareA, `ir.Tiling.cluster_n`): two CTAs side by side along N, A multicast by the lead.
ALONG_N = [(300, 1040, 200), (130, 600, 72), (200, 304, 72)]  # (the last: rank 1 of the cluster tile past N)


def _along_n(m: int, n: int, k: int, grid: int = 8, stages: int | None = None) -> ir.Module:
    spec = GemmSpec(m, n, k, b_layout=BLayout.N_MAJOR)
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM, cluster="1x2")
    plan = dataclasses.replace(plan, grid=grid, stages=stages or plan.stages)
    return build(spec, H100_SXM, plan).module


@pytest.mark.parametrize("m,n,k", ALONG_N)
def test_along_n_each_rank_computes_its_columns(m: int, n: int, k: int) -> None:
    module = _along_n(m, n, k)
    assert module.tiling.cluster_n and module.tiling.cluster == 2
    a, b = _inputs(m, n, k)
    for seed in range(2):
        res = simulate(module, a, b, seed=seed)
        assert res.ok, res.report.summary()
        assert not res.output.isnan().any(), "every element of C written"
        assert relative_error(res.output.float(), a.double().matmul(b.double()).float()) < 1e-5
    plain = simulate(_forced(GemmSpec(m, n, k, b_layout=BLayout.N_MAJOR), cluster=1, bm=128, bn=256), a, b)
    assert plain.ok and torch.equal(res.output, plain.output)


def test_along_n_raster_covers_c_once() -> None:
    m, n, bm, bn, grid = 300, 1300, 128, 256, 8
    launched = launch_grid(m, n, bm, bn, grid, cluster=2, cluster_n=True)
    assert launched == 8  # 3 x 3 cluster tiles of 128 x 512, 4 clusters
    seen: dict[tuple[int, int], int] = {}
    for pid in range(launched):
        for u in cta_tiles(pid, m, n, bm, bn, 8, grid, cluster=2, cluster_n=True):
            assert u.off_n // bn % 2 == pid % 2, "rank r computes columns r * BN of its cluster tile"
            seen[(u.off_m, u.off_n)] = seen.get((u.off_m, u.off_n), 0) + 1
    assert seen == {(r * bm, c * bn): 1 for r in range(3) for c in range(6)}  # (columns 1536.. lie past N)


@pytest.mark.parametrize("name", ["every_cta_multicasts_a", "no_cluster_release", "no_cluster_wait",
                                  "no_exit_sync"])
def test_along_n_planted_bugs(name: str) -> None:
    """The planted bugs of the 1x2 form: A multicast by both CTAs (each A slot written twice: DOUBLE_WRITE, and
    A's bytes twice on each READY barrier), a consumer's cluster release dropped (the lead waits forever), the
    lead's cluster wait dropped (it refills the other CTA's A slot unreleased) and no exit barrier."""
    m, n, k = ALONG_N[0]
    module = _along_n(m, n, k)
    mutant, kinds = {
        "every_cta_multicasts_a": (_every_cta_multicasts, {K.DOUBLE_WRITE, K.TX_MISMATCH}),  # (A's, in 1x2)
        "no_cluster_release": (lambda mod: _drop(mod, ir.Role.CONSUMER, ir.Arrive, CLUSTER_EMPTY), {K.DEADLOCK}),
        "no_cluster_wait": (lambda mod: _drop(mod, ir.Role.PRODUCER, ir.Wait, CLUSTER_EMPTY),
                            {K.OVERWRITE_UNRELEASED}),
        "no_exit_sync": (lambda mod: dataclasses.replace(mod, tiling=dataclasses.replace(mod.tiling,
                                                                                         exit_sync=False)),
                         {K.WRITE_AFTER_EXIT}),
    }[name]
    a, b = _inputs(m, n, k)
    for seed in range(2):
        res = simulate(mutant(module), a, b, seed=seed)
        assert kinds <= res.report.kinds(), res.report.summary()
        if name == "every_cta_multicasts_a":
            assert all("a_ring[" in f.message for f in res.findings if f.kind is K.DOUBLE_WRITE)
        if name == "no_cluster_wait":
            assert any("CTA 1's a_ring" in f.message for f in res.findings if f.kind is K.OVERWRITE_UNRELEASED)
    assert check_protocol(module, m, n, k, seeds=range(2)).ok  # (the findings are the mutants')


def test_explorer_finds_a_1x2_deadlock() -> None:
    """Without the consumers' cluster release some interleaving of one 1x2 cluster deadlocks, with a counterexample.
    (The clean module's whole state space passes the explorer's 100k-state bound: its row-split warpgroups
    interleave more freely than the 2x1 form's; the random simulator covers it above.)"""
    m, n, k = 130, 300, 72  # (one cluster tile, two k-blocks through one stage, as EXPLORE)
    module = _along_n(m, n, k, grid=2, stages=1)
    bad = explore(_drop(module, ir.Role.CONSUMER, ir.Arrive, CLUSTER_EMPTY), m, n, k, max_states=100_000,
                  stop_at_first=True)
    assert K.DEADLOCK in bad.kinds() and bad.counterexample, bad.summary()


def test_along_n_sample_holds_the_last_cluster_tile() -> None:
    """`sample_ctas` of a 1x2 module counts its cluster tiles of 128 x 512 (not 2x1's 256 x 256), so that the cluster
    of the last, ragged cluster tile is sampled (1000 x 528: 8 x 2 cluster tiles, the corner's in cluster 15)."""
    m, n, k = 1000, 528, 72
    module = _along_n(m, n, k, grid=64)
    t = module.tiling
    grid = launch_grid(m, n, t.bm, t.bn, t.grid, cluster=2, cluster_n=True)
    ctas = sample_ctas(module, m, n)
    corner = {p for p in range(grid) for u in cta_tiles(p, m, n, t.bm, t.bn, t.group_m, grid, cluster=2,
                                                         cluster_n=True) if u.pid_m == 7 and u.pid_n >= 2}
    assert corner == {30, 31} and corner <= set(ctas), ctas


@pytest.mark.parametrize("m,n,k,along_n", [(100, 2048, 192, True), (100, 2048, 64, True), (2000, 256, 256, False)])
def test_the_lead_may_multicast_the_same_box_again(m: int, n: int, k: int, along_n: bool) -> None:
    """A cluster that visits tiles sharing the multicast box (1x2: tiles of the same rows, M <= 128; 2x1: of the same
    columns, N <= 256) refills a released slot with the box it held before: the lead's legitimate next fill, not a
    second copy of the same fill (DOUBLE_WRITE is a copy from another CTA)."""
    module = _along_n(m, n, k, grid=2) if along_n else _module(m, n, k, grid=2)
    a, b = _inputs(m, n, k)
    res = simulate(module, a, b)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), a.double().matmul(b.double()).float()) < 1e-5


# Rule 24's forced 128x128 and 64x128 tiles (CLUSTER_TILES): cluster tiles of 256x128 (each warpgroup 128 cluster rows
# by 64 columns) and of 128x128 (one warpgroup a CTA, its 64x128 block), every recipe they build for, B either way.
SMALL_TILES = {
    "bf16": GemmSpec(*RAGGED),
    "bf16_n_major": GemmSpec(*RAGGED, b_layout=BLayout.N_MAJOR),
    "fp16_fp32_out": GemmSpec(*RAGGED, DType.FP16, DType.FP16, DType.FP32),
    "e4m3_rowwise_fast": GemmSpec(*RAGGED, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE),
    "e4m3_rowwise_bias": GemmSpec(*RAGGED, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                  bias_dtype=DType.BF16),
    "e4m3_tensorwise_promoted": _promoted(ScaleRecipe.TENSORWISE),
    "e4m3_blockwise_128x128": _promoted(ScaleRecipe.BLOCKWISE_1X128_128X128),
}


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("name", list(SMALL_TILES))
def test_128_and_64_row_tile_clusters(name: str, bm: int) -> None:
    """Clean on two schedules, every element of C written, right against fp32 (blockwise: the dequantized product),
    and the same bits as the same tile one CTA a tile (the simulator sums each element's k-blocks in one order
    whatever the wgmma shape; on the GPU only the 64x128 form matches bit for bit, tests/gpu/test_cluster_gpu.py)."""
    spec = SMALL_TILES[name]
    plan = _forced_plan(spec, cluster=2, bm=bm, bn=128)
    module = build(spec, H100_SXM, plan).module
    assert (module.tiling.cluster, module.tiling.bm) == (2, bm)
    x = make_inputs(spec, *RAGGED)
    for seed in range(2):
        got = compare(module, x, seed=seed)
        assert got.ok and got.error < 1e-5, got.result.report.summary()
        assert not got.result.output.isnan().any()
    plain = compare(_forced(spec, cluster=1, bm=bm, bn=128, stages=plan.stages), x)
    assert plain.ok and torch.equal(got.result.output, plain.result.output)


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("name", ["bf16_gelu_residual", "fp8_rowwise_bias_gelu_residual"])
def test_fused_epilogue_in_128_and_64_row_tile_clusters(name: str, bm: int) -> None:
    """A fused epilogue graph on the smaller cluster tiles (forced): NaN-poisoned outputs against the user's function
    on the fp64 product, and the same bits as the same tile one CTA a tile."""
    case = _fused_cases()[name]
    plan = _forced_plan(case.spec, cluster=2, bm=bm, bn=128)
    module, res = case.run(plan)
    assert (module.tiling.cluster, module.tiling.bm) == (2, bm)
    assert_matches(case, res)
    _, plain = case.run(_forced_plan(case.spec, cluster=1, bm=bm, bn=128, stages=plan.stages))
    assert all(torch.equal(x, y) for x, y in zip(res.outputs, plain.outputs, strict=True))


@pytest.mark.parametrize("name", ["no_cluster_wait", "no_cluster_release"])
def test_a_64_row_cluster_missing_its_cluster_barrier_is_caught(name: str) -> None:
    """The one-warpgroup form keeps the cluster's protocol: every interleaving of one cluster is clean, and a lead
    that does not wait for both CTAs to release B, or a consumer that does not release it, is found by the explorer
    with a counterexample."""
    m, n, k = EXPLORE
    plan = _forced_plan(GemmSpec(m, n, k), cluster=2, bm=64, bn=128)
    module, _ = compile_schedule(GemmSpec(m, n, k), dataclasses.replace(plan, stages=1, grid=2), H100_SXM)
    rep = explore(module, m, n, k, max_states=100_000)
    assert rep.ok and not rep.bound_hit and rep.ctas == (0, 1), rep.summary()
    role, op, kind = {"no_cluster_wait": (ir.Role.PRODUCER, ir.Wait, K.OVERWRITE_UNRELEASED),
                      "no_cluster_release": (ir.Role.CONSUMER, ir.Arrive, K.DEADLOCK)}[name]
    mutant = _drop(module, role, op, CLUSTER_EMPTY)
    rep = explore(mutant, m, n, k, max_states=100_000, stop_at_first=True)
    assert kind in rep.kinds() and rep.counterexample, rep.summary()


def _forced_plan(spec: GemmSpec, **options: object) -> warploom.Plan:
    with emitting_for("3.9"):
        return plan_schedule(spec, H100_SXM, **options)  # type: ignore[arg-type]
