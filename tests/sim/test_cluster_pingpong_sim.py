"""2x1 clusters of ping-pong consumers (issue 24, forced: `pingpong=True, cluster=2`) on the CPU: both CTAs of a
cluster run the same 128x128 tiles offset by 128 rows, each consumer warpgroup taking every other tile and releasing
its slots on the lead's cluster EMPTY barrier. Numerics against fp32 references at ragged shapes (rank 1 partly or
wholly past M), the same bits as ping-pong without a cluster, and planted bugs in the protocol that the simulator
(and the verifier, statically) must catch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_cluster_sim import _every_cta_multicasts  # (pytest puts this folder on sys.path)

from warploom import DType, GemmSpec, ScaleRecipe
from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.passes.cluster import CLUSTER_EMPTY
from warploom.passes.util import filter_ops
from warploom.planner import plan_schedule
from warploom.reference import make_inputs
from warploom.sim import FindingKind, check_protocol, explore
from warploom.sim.compare import compare

K = FindingKind
# (300: the second cluster tile's rank 1 holds rows 384.. wholly past M; 200: rank 1 partly past M; 100: one
# cluster tile whose rank 1 lies wholly past M). N not a multiple of 128, K not of 64.
SHAPES = [(300, 520, 200), (200, 304, 72), (100, 264, 136)]
E4 = DType.E4M3


def _module(spec: GemmSpec, cluster: int = 2, grid: int = 4, **options: object) -> ir.Module:
    """The forced plan on `grid` CTAs (4: two clusters, so each CTA runs several tiles, both warpgroups take turns
    and every ring slot is refilled)."""
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM, pingpong=True, cluster=cluster, **options)  # type: ignore[arg-type]
    return build(spec, H100_SXM, dataclasses.replace(plan, grid=grid)).module


def _specs(m: int, n: int, k: int) -> dict[str, GemmSpec]:
    return {"bf16": GemmSpec(m, n, k),
            "e4m3_rowwise": GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
            "e4m3_tensorwise": GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),
            "e4m3_rowwise_bias_fp32": GemmSpec(m, n, k, E4, E4, DType.FP32, scale=ScaleRecipe.ROWWISE,
                                               bias_dtype=DType.BF16)}


@pytest.mark.parametrize("name", ["bf16", "e4m3_rowwise", "e4m3_tensorwise", "e4m3_rowwise_bias_fp32"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_pingpong_cluster_matches_fp32(name: str, m: int, n: int, k: int) -> None:
    """Every CTA (every cluster) against the fp32 reference, every element of C written, on two schedules; and the
    same bits as ping-pong without the cluster (the same 128x128 tiles sum the same k-blocks in the same order)."""
    spec = _specs(m, n, k)[name]
    module = _module(spec)
    t = module.tiling
    assert (t.cluster, t.cluster_n, t.bm, t.bn, t.exit_sync) == (2, False, 128, 128, True)
    x = make_inputs(spec, m, n, k)
    for seed in range(2):
        got = compare(module, x, seed=seed)
        assert got.ok and got.error < 1e-5, got.result.report.summary()
        assert not got.result.output.isnan().any(), "every element of C written"
    plain = compare(_module(spec, cluster=1), x)
    assert plain.ok and torch.equal(got.result.output, plain.result.output)


def test_the_schedule() -> None:
    """Two ping-pong warpgroups, each releasing every slot use it read on its own EMPTY barrier and on the lead's
    cluster barrier, both counting one arrival a CTA; B multicast by the lead; the A and B bytes expected per CTA."""
    module = _module(GemmSpec(300, 520, 200))
    cons = [p for p in module.partitions if p.role is ir.Role.CONSUMER]
    assert len(cons) == 2 and all(p.rows is None and p.accumulators[0].cols == 128 for p in cons)
    for p in cons:
        arrives = [o.barrier for o, _ in ir.walk(p.body) if isinstance(o, ir.Arrive) and "empty" in o.barrier]
        assert arrives == ["empty", CLUSTER_EMPTY] * 2  # (the pipelined release, then the tile's last)
    assert module.barrier(CLUSTER_EMPTY).count == module.barrier("empty").count == 1
    (expect,) = [o for p in module.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ArriveExpectTx)]
    assert expect.nbytes == sum(r.slot_bytes for r in module.rings) == 2 * 128 * 64 * 2


def _skip_release(module: ir.Module, partition: str = "consumer1") -> ir.Module:
    """`module` with one ping-pong warpgroup's releases on the cluster barrier dropped."""
    parts = tuple(dataclasses.replace(p, body=filter_ops(p.body, lambda o: not (
        isinstance(o, ir.Arrive) and o.barrier == CLUSTER_EMPTY))) if p.name == partition else p
        for p in module.partitions)
    assert parts != module.partitions, "the mutation changed nothing"
    return dataclasses.replace(module, partitions=parts)


@pytest.mark.parametrize("partition", ["consumer0", "consumer1"])
def test_a_warpgroup_that_skips_its_cluster_release(partition: str) -> None:
    """The lead waits for both CTAs' releases of each B slot; a ping-pong warpgroup that releases only its own
    EMPTY barrier leaves the lead's next multicast into that slot waiting forever (DEADLOCK on the cluster barrier),
    and the verifier says so before any run."""
    m, n, k = 300, 520, 200
    module = _module(GemmSpec(m, n, k))
    mutant = _skip_release(module, partition)
    found = check_protocol(mutant, m, n, k, seeds=range(2), raise_on_finding=False)
    assert any(f.kind is K.DEADLOCK and CLUSTER_EMPTY in f.message for f in found.findings), found.findings
    assert any(f"partition {partition} reads b_ring but does not release it on {CLUSTER_EMPTY}" in e
               for e in verify.complete(mutant, H100_SXM)), verify.complete(mutant, H100_SXM)
    assert check_protocol(module, m, n, k, seeds=range(2)).ok  # (the finding is the mutation's)


def test_a_multicast_by_both_ctas() -> None:
    """Both CTAs multicasting B is two copies of each box into each CTA's slot (DOUBLE_WRITE) and twice B's bytes
    on each READY barrier (TX_MISMATCH); the verifier names the load."""
    m, n, k = 300, 520, 200
    mutant = _every_cta_multicasts(_module(GemmSpec(m, n, k)))
    found = check_protocol(mutant, m, n, k, seeds=range(2), raise_on_finding=False)
    kinds = {f.kind for f in found.findings}
    assert K.DOUBLE_WRITE in kinds and K.TX_MISMATCH in kinds, found.findings
    assert all("b_ring[" in f.message for f in found.findings if f.kind is K.DOUBLE_WRITE)
    assert any("is issued by every CTA of the cluster" in e for e in verify.complete(mutant, H100_SXM))


def test_a_cluster_barrier_counting_both_warpgroups() -> None:
    """The cooperative split's count (one arrival of each warpgroup a slot use) under ping-pong, where one
    warpgroup reads each slot use: the lead's first refill waits forever. Verifier and simulator both find it."""
    m, n, k = 300, 520, 200
    module = _module(GemmSpec(m, n, k))
    barriers = tuple(dataclasses.replace(b, count=2) if b.name == CLUSTER_EMPTY else b for b in module.barriers)
    mutant = dataclasses.replace(module, barriers=barriers)
    assert any(f"{CLUSTER_EMPTY} counts 2 arrival(s) a CTA, empty 1" in e for e in verify.complete(mutant, H100_SXM))
    found = check_protocol(mutant, m, n, k, seeds=range(1), raise_on_finding=False)
    assert any(f.kind is K.DEADLOCK for f in found.findings), found.findings


def test_no_cta_exits_before_its_cluster_is_done() -> None:
    """Without the exit barrier the other CTA's releases of the last stages reach the lead after it exited."""
    m, n, k = 300, 520, 200
    module = _module(GemmSpec(m, n, k))
    no_sync = dataclasses.replace(module, tiling=dataclasses.replace(module.tiling, exit_sync=False))
    found = check_protocol(no_sync, m, n, k, seeds=range(2), raise_on_finding=False)
    assert {f.kind for f in found.findings} == {K.WRITE_AFTER_EXIT}, found.findings


# One cluster (two CTAs), two tiles along N (one for each warpgroup), one k-block through one stage: the second tile
# refills the slot the first warpgroup released to both CTAs.
EXPLORE = (130, 200, 40)


def test_explorer_on_a_pingpong_cluster() -> None:
    """Every interleaving of one cluster's CTAs is clean; the first warpgroup's skipped cluster release is found on
    some schedule, with a counterexample."""
    m, n, k = EXPLORE
    module = _module(GemmSpec(m, n, k), grid=2, stages=1)
    rep = explore(module, m, n, k, max_states=100_000)
    assert rep.ok and not rep.bound_hit, rep.summary()
    rep = explore(_skip_release(module, "consumer0"), m, n, k, max_states=100_000, stop_at_first=True)
    assert K.DEADLOCK in rep.kinds() and rep.counterexample, rep.summary()
