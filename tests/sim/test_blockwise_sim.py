"""Simulator tier for blockwise-scaled fp8 (issue 5): scales that ride the A/B pipeline stages.

The producer copies each k-block's scales (CopyScales, cp.async) into scale rings of the same stages, tracked by
the stage's ready barrier; the consumer's promotion reads them (Promote with scales) before releasing the stage.
Clean schedules must simulate without findings and match the dequantized fp32 product; planted bugs in the new
protocol (copies after the arrival that can complete their phase, a release before the scaled promotion, a
wrong scale slot) must be caught by the simulator itself, and by the exhaustive explorer.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.errors import VerificationError
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.kernel import build
from warploom.planner import Plan
from warploom.sim import FindingKind, explore, simulate
from warploom.sim.reference import make_inputs, reference, relative_error
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

K = FindingKind
BW, BW1 = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128


def spec(m: int, n: int, k: int, recipe: ScaleRecipe = BW, bias: DType | None = None,
         out: DType = DType.BF16) -> GemmSpec:
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, out, scale=recipe, accumulation=Accumulation.PROMOTED,
                    bias_dtype=bias)


# One consumer partition with 64x128 tiles; the planner's 128-row structure (a partition per warpgroup, two
# 128-column partials, each promoted with its own block's scale); and 128x128 in one block.
P1 = Plan(bm=64, bn=128, bk=128, stages=3, consumer_warps=4, group_m=2, grid=2)
P2H2 = Plan(bm=128, bn=256, bk=128, stages=3, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2,
            partial_blocks=2, epilogue_subtiles=2)
P2 = Plan(bm=128, bn=128, bk=128, stages=2, consumer_warps=8, group_m=2, grid=3, consumer_partitions=2)
PLANS = {"p1": P1, "p2h2": P2H2, "p2": P2}
# K = 5 k-blocks, the last partial; M and N not tile multiples; more ring uses than stages.
SIZE = (130, 300, 600)


@functools.cache
def module(recipe: ScaleRecipe, plan_name: str, size: tuple[int, int, int] = SIZE) -> ir.Module:
    return build(spec(*size, recipe), H100_SXM, PLANS[plan_name]).module


def run(m: ir.Module, seed: int = 0):  # noqa: ANN201 - SimResult
    s = m.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=seed)
    return simulate(m, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed), x


@pytest.mark.parametrize("recipe", [BW, BW1], ids=["128x128", "1x128"])
@pytest.mark.parametrize("plan_name", list(PLANS))
def test_clean_and_exact(recipe: ScaleRecipe, plan_name: str) -> None:
    res, x = run(module(recipe, plan_name))
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    # Promoted accumulation in fp32: only the bf16 output rounding differs from the dequantized product.
    assert relative_error(res.output.float(), reference(x)) < 1e-5


@pytest.mark.parametrize("size", [(64, 128, 128), (1, 16, 16), (65, 130, 129), (200, 64, 1000)])
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_edge_trip_counts(size: tuple[int, int, int], stages: int) -> None:
    """One k-block, a partial one, one row, one stage: the scales still land before each promotion."""
    m = build(spec(*size), H100_SXM, replace(P1, stages=stages)).module
    res, x = run(m)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-5


def test_bias_and_fp32_output() -> None:
    m = build(spec(*SIZE, bias=DType.BF16, out=DType.FP32), H100_SXM, P2H2).module
    res, x = run(m)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-10


def test_schedule_text() -> None:
    """The scale copies open the stage before its arrive_expect_tx, whose bytes are A's and B's alone."""
    m = module(BW, "p2h2")
    prod = [ln.strip() for ln in printer.module(m).splitlines()]
    i = prod.index("copy_scales scale_a[tile, k] -> sa_ring[p] on ready[p]")
    assert prod[i + 1] == "copy_scales scale_b[tile, k] -> sb_ring[p] on ready[p]"
    assert prod[i + 2] == f"arrive_expect_tx ready[p] bytes={128 * 128 + 256 * 128}"
    assert prod.count("promote acc1 += partial * sa_ring[c][rows] * sb_ring[c][cols]") == 2  # one per warpgroup
    assert m.ring("sb_ring").cols == 2 and m.ring("sa_ring").cols == 128
    assert module(BW1, "p2h2").ring("sb_ring").cols == 256


def _edit(m: ir.Module, role: ir.Role, fn) -> ir.Module:  # noqa: ANN001
    def body(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return fn(tuple(replace(s, body=body(s.body)) if isinstance(s, ir.Loop) else s for s in stmts))

    for p in [p for p in m.partitions if p.role is role]:
        m = m.with_partition(replace(p, body=body(p.body)))
    return m


def _copies_after_expect(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The scale copies moved behind the stage's TMA loads: the TMA bytes can complete the phase first."""
    copies = [s for s in stmts if isinstance(s, ir.CopyScales)]
    if not copies:
        return stmts
    rest = [s for s in stmts if not isinstance(s, ir.CopyScales)]
    last_load = max(i for i, s in enumerate(rest) if isinstance(s, ir.TmaLoad))
    return tuple(rest[:last_load + 1] + copies + rest[last_load + 1:])


def _release_before_promotion(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The stage released right after the last wgmma_wait, before the promotion that reads its scales."""
    promotes = [i for i, s in enumerate(stmts) if isinstance(s, ir.Promote) and s.scales is not None]
    arrives = [s for s in stmts if isinstance(s, ir.Arrive) and s.barrier == "empty"]
    if not promotes or not arrives:
        return stmts
    rest = [s for s in stmts if s is not arrives[0]]
    last = max(i for i, s in enumerate(rest) if isinstance(s, ir.Promote))
    return tuple(rest[:last] + [arrives[0]] + rest[last:])


def _scales_slot(offset: int):  # noqa: ANN202
    def fn(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, scales=replace(s.scales, slot=ir.Slot(s.scales.slot.cursor, offset)))
                     if isinstance(s, ir.Promote) and s.scales is not None else s for s in stmts)
    return fn


def _untracked(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The copies tracked by the empty barrier instead of the ready one: nothing holds the ready phase for them."""
    return tuple(replace(s, barrier="empty") if isinstance(s, ir.CopyScales) else s for s in stmts)


MUTANTS = {
    "copies_after_expect": (ir.Role.PRODUCER, _copies_after_expect, {K.READ_BEFORE_LANDED, K.READ_UNACQUIRED,
                                                                      K.WRONG_TILE}),
    "release_before_scaled_promotion": (ir.Role.CONSUMER, _release_before_promotion, {K.READ_AFTER_RELEASE}),
    "promotion_reads_next_stage": (ir.Role.CONSUMER, _scales_slot(1), {K.WRONG_TILE, K.READ_BEFORE_LANDED,
                                                                      K.READ_UNACQUIRED}),
    "copies_tracked_by_wrong_barrier": (ir.Role.PRODUCER, _untracked, {K.READ_BEFORE_LANDED, K.READ_UNACQUIRED,
                                                                     K.ARRIVAL_OVERFLOW, K.DEADLOCK, K.WRONG_TILE}),
}
CASES = [(name, plan) for name in MUTANTS for plan in ("p1", "p2h2")]
# Explorer problems with more stage uses per CTA than stages, so every slot is refilled: 3 (p1: 3 tiles of 3
# k-blocks per CTA) and 2 (p2h2) tiles per CTA.
EXPLORE_SIZE = {"p1": (130, 130, 384), "p2h2": (130, 300, 384)}


@pytest.mark.parametrize("name,plan_name", CASES, ids=[f"{n}@{p}" for n, p in CASES])
def test_mutant_caught_by_simulation(name: str, plan_name: str) -> None:
    role, fn, caught_by = MUTANTS[name]
    mutated = _edit(module(BW, plan_name), role, fn)
    kinds: set[FindingKind] = set()
    for seed in range(3):  # a race shows on some schedules; any of three seeds must catch it
        kinds |= set(run(mutated, seed)[0].report.kinds())
        if kinds & caught_by:
            break
    assert kinds & caught_by, f"{name}@{plan_name} not caught: {sorted(k.name for k in kinds)}"


@pytest.mark.parametrize("name,plan_name", CASES, ids=[f"{n}@{p}" for n, p in CASES])
def test_mutant_caught_exhaustively(name: str, plan_name: str) -> None:
    role, fn, caught_by = MUTANTS[name]
    mutated = _edit(module(BW, plan_name), role, fn)
    r = explore(mutated, *EXPLORE_SIZE[plan_name], max_states=50_000, stop_at_first=True)
    assert r.kinds() & caught_by, r.summary()


def test_unmutated_explores_clean() -> None:
    for plan_name in ("p1", "p2h2"):
        r = explore(module(BW, plan_name), *EXPLORE_SIZE[plan_name], max_states=20_000)
        assert not r.findings, r.summary()


def test_promotion_without_scales_is_wrong_and_rejected() -> None:
    """Dropping the scales from the promotion is invisible to the protocol checks but not to the numbers, and the
    verifier refuses it statically."""
    m = _edit(module(BW, "p1"), ir.Role.CONSUMER, lambda st: tuple(
        replace(s, scales=None) if isinstance(s, ir.Promote) else s for s in st))
    res, x = run(m)
    assert relative_error(res.output.float(), reference(x)) > 1e-2
    assert any("without scales" in e for e in verify.complete(m, H100_SXM))


def test_verifier_rejects_copies_after_expect() -> None:
    m = _edit(module(BW, "p1"), ir.Role.PRODUCER, _copies_after_expect)
    errs = verify.complete(m, H100_SXM)
    assert any("must be issued before the arrival" in e for e in errs), errs


def test_verifier_rejects_k_blocks_other_than_128() -> None:
    with pytest.raises(VerificationError, match="bk=64, expected 128"):
        build(spec(*SIZE), H100_SXM, replace(P1, bk=64))


def test_verifier_rejects_a_promotion_across_two_scale_blocks() -> None:
    """A 256-wide accumulator promoted in one block would need two scale_b values per k-block."""
    m = module(BW, "p2h2")
    parts = []
    for p in m.partitions:
        accs = tuple(replace(a, cols=256) if a.name == "acc0" else a for a in p.accumulators)
        parts.append(replace(p, accumulators=accs))
    errs = verify.structural(replace(m, partitions=tuple(parts)))
    assert any("spans two 128-column scale blocks" in e for e in errs), errs
