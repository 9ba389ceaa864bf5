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
from warploom.errors import PlanError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.kernel import build
from warploom.planner import Plan
from warploom.reference import make_inputs, reference, relative_error
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

K = FindingKind
BW, BW1 = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128
# 128x128 blocks of A (issue 27 item 4): with B's 1x128 (torch's pair) or 128x128 blocks.
BWA1, BWA = ScaleRecipe.BLOCKWISE_128X128_1X128, ScaleRecipe.BLOCKWISE_128X128_128X128
ALL_BW, ALL_IDS = [BW, BW1, BWA1, BWA], ["128x128", "1x128", "a128x128-1x128", "a128x128-128x128"]


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
# Rule 13's 64x64 tile for small M: two tiles share each 128-column block of scale_b.
P64 = Plan(bm=64, bn=64, bk=128, stages=4, consumer_warps=4, group_m=2, grid=3)
# Four 64-column blocks through one 64-wide partial (forced only: measured 9-16% slower than two, session 19).
P2H4 = Plan(bm=128, bn=256, bk=128, stages=3, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2,
            partial_blocks=4, epilogue_subtiles=2)
PLANS = {"p1": P1, "p2h2": P2H2, "p2h4": P2H4, "p2": P2, "p64": P64}
# K = 5 k-blocks, the last partial; M and N not tile multiples; more ring uses than stages.
SIZE = (130, 300, 600)


@functools.cache
def module(recipe: ScaleRecipe, plan_name: str, size: tuple[int, int, int] = SIZE) -> ir.Module:
    return build(spec(*size, recipe), H100_SXM, PLANS[plan_name]).module


def run(m: ir.Module, seed: int = 0):  # noqa: ANN201 - SimResult
    s = m.spec
    x = make_inputs(s, s.m, s.n, s.k, seed=seed)
    return simulate(m, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed), x


@pytest.mark.parametrize("recipe", ALL_BW, ids=ALL_IDS)
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
    m = build(spec(*SIZE), H100_SXM, P1).module
    with pytest.raises(VerificationError, match="bk=64, expected 128"):
        verify.check(replace(m, tiling=replace(m.tiling, bk=64)), "planted")
    # (a plan with that k-block is refused first, naming the field: planning/plan_check.py)
    with pytest.raises(PlanError, match=r"^Plan\(bk=64\): expected 128: .*Fix: bk=128"):
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


# ---------------------------------------------------------------------------------------------------------------
# The dedicated scale partition (passes/scales.py, seed 000): its own ring and barriers, decoupled from A/B.

SP1 = replace(P1, scale_partition=True)
SP2H2 = replace(P2H2, scale_partition=True)
SP_PLANS = {"sp1": SP1, "sp2h2": SP2H2, "sp1_single": replace(SP1, scale_stages=1),
            "sp2h2_deep": replace(SP2H2, scale_stages=3, stages=2)}


@functools.cache
def sp_module(recipe: ScaleRecipe, plan_name: str) -> ir.Module:
    return build(spec(*SIZE, recipe), H100_SXM, SP_PLANS[plan_name]).module


@pytest.mark.parametrize("recipe", ALL_BW, ids=ALL_IDS)
@pytest.mark.parametrize("plan_name", list(SP_PLANS))
def test_scale_partition_clean_and_exact(recipe: ScaleRecipe, plan_name: str) -> None:
    m = sp_module(recipe, plan_name)
    res, x = run(m)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-5
    r = explore(m, *EXPLORE_SIZE["p1" if plan_name.startswith("sp1") else "p2h2"], max_states=10_000)
    assert not r.findings, r.summary()


def test_scale_partition_structure() -> None:
    m = sp_module(BW, "sp2h2")
    scales = m.partition("scales")
    assert scales.role is ir.Role.SCALES and scales.warps == 1 and scales.regs == m.partition("producer").regs
    assert m.ring("sa_ring").depth == 2 and m.ring("a_ring").depth == 3
    assert m.barrier("scale_empty").count == 2  # both consumer warpgroups release each scale stage
    assert not any(isinstance(o, ir.CopyScales) for o, _ in ir.walk(m.partition("producer").body))
    # The A/B stage is released right after the last wgmma, before the promotion that reads only scales.
    text = [ln.strip() for ln in printer.module(m).splitlines()]
    i = text.index("arrive empty[c]")
    assert text[i + 1] == "promote acc1 += partial * sa_ring[q][rows] * sb_ring[q][cols]"
    assert text[i + 2] == "arrive scale_empty[q]"
    # One worker warpgroup holds the producer's and the scale partition's warps: 12 warps, consumers at 240.
    assert m.launched_warps == 12 and m.partition("consumer0").regs == 240


def _drop_scale_wait(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    return tuple(s for s in stmts if not (isinstance(s, ir.Wait) and s.barrier == "scale_ready"))


def _move_arrive(barrier: str, before: type, last: bool = False):  # noqa: ANN202
    """A rewrite moving the body's arrive on `barrier` to just before its first (or last) op of type `before`."""
    def fn(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        arrive = [s for s in stmts if isinstance(s, ir.Arrive) and s.barrier == barrier]
        if not arrive:
            return stmts
        rest = [s for s in stmts if s is not arrive[0]]
        at = [i for i, s in enumerate(rest) if isinstance(s, before)]
        i = at[-1] if last else at[0]
        return tuple(rest[:i] + arrive + rest[i:])
    return fn


# The scale partition announces its stage before issuing the copies.
_scale_arrive_first = _move_arrive("scale_ready", ir.CopyScales)
# The scale stage released before the k-block's last scaled promotion.
_release_scales_early = _move_arrive("scale_empty", ir.Promote, last=True)


SP_MUTANTS = {
    "scale_ready_wait_dropped": (ir.Role.CONSUMER, _drop_scale_wait, {K.READ_BEFORE_LANDED, K.READ_UNACQUIRED,
                                                                      K.WRONG_TILE}),
    "scale_arrive_before_copies": (ir.Role.SCALES, _scale_arrive_first, {K.READ_BEFORE_LANDED, K.READ_UNACQUIRED,
                                                                         K.WRONG_TILE}),
    "scale_release_before_promotion": (ir.Role.CONSUMER, _release_scales_early, {K.READ_AFTER_RELEASE}),
}


@pytest.mark.parametrize("name", list(SP_MUTANTS))
def test_scale_partition_mutants(name: str) -> None:
    role, fn, caught_by = SP_MUTANTS[name]
    mutated = _edit(sp_module(BW, "sp2h2"), role, fn)
    kinds: set[FindingKind] = set()
    for seed in range(3):
        kinds |= set(run(mutated, seed)[0].report.kinds())
    assert kinds & caught_by, f"{name} not caught by simulation: {sorted(k.name for k in kinds)}"
    r = explore(mutated, *EXPLORE_SIZE["p2h2"], max_states=50_000, stop_at_first=True)
    assert r.kinds() & caught_by, r.summary()


def test_verifier_rejects_scale_copies_after_the_scale_arrive() -> None:
    m = _edit(sp_module(BW, "sp1"), ir.Role.SCALES, _scale_arrive_first)
    assert any("must be issued before the arrival" in e for e in verify.complete(m, H100_SXM))


# ---------------------------------------------------------------------------------------------------------------
# MX fp8 (e8m0 scales per 32 of K): four 32-deep wgmma per k-block, each promoted with its slice's scales; the
# scale partition loads the single-byte scales with ordinary loads (sync copies) and publishes them by its arrive.

MX = ScaleRecipe.MX


@functools.cache
def mx_module(plan_name: str, size: tuple[int, int, int] = (130, 300, 608)) -> ir.Module:
    return build(spec(*size, MX), H100_SXM, SP_PLANS[plan_name]).module


@pytest.mark.parametrize("plan_name", ["sp1", "sp2h2", "sp1_single"])
@pytest.mark.parametrize("size", [(130, 300, 608), (64, 128, 32), (1, 16, 160)])
def test_mx_clean_and_exact(plan_name: str, size: tuple[int, int, int]) -> None:
    m = mx_module(plan_name, size)
    res, x = run(m)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-5


def test_mx_schedule() -> None:
    m = mx_module("sp2h2")
    text = printer.module(m)
    assert "wgmma.async partial += a_ring[c] @ b_ring[c][:, 128:256] k[96:128] overwrite=always" in text
    assert "promote acc1 += partial * sa_ring[q][3][rows] * sb_ring[q][3][cols]" in text
    assert "copy_scales scale_a[tile, k] -> sa_ring[q] sync, published by the next arrive on scale_ready[q]" in text
    assert m.ring("sa_ring").rows == 4 and m.ring("sb_ring").cols == 256
    assert m.partition("scales").warps == 1
    assert not any(isinstance(o, ir.CopyScales) for o, _ in ir.walk(m.partition("producer").body))


def test_mx_explores_clean_and_catches_an_early_arrive() -> None:
    m = mx_module("sp1")
    assert not explore(m, 130, 130, 384, max_states=10_000).findings
    bad = _edit(m, ir.Role.SCALES, _scale_arrive_first)
    r = explore(bad, 130, 130, 384, max_states=50_000, stop_at_first=True)
    assert r.kinds() & {K.READ_UNACQUIRED, K.READ_BEFORE_LANDED, K.WRONG_TILE}, r.summary()
    kinds = set(run(bad)[0].report.kinds())
    assert kinds & {K.READ_UNACQUIRED, K.READ_BEFORE_LANDED, K.WRONG_TILE}, kinds


def test_mx_slices_promoted_with_the_wrong_scales_are_wrong_and_rejected() -> None:
    """Each 32-deep slice must take its own scales: rotating them is invisible to the protocol (same slot) but not
    to the numbers; the verifier refuses slices outside the slot."""
    def rotate(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, scales=replace(s.scales, sub=(s.scales.sub + 1) % 4))
                     if isinstance(s, ir.Promote) and s.scales is not None else s for s in stmts)

    m = _edit(mx_module("sp1"), ir.Role.CONSUMER, rotate)
    res, x = run(m)
    assert res.ok and relative_error(res.output.float(), reference(x)) > 1e-2
    out_of_range = _edit(mx_module("sp1"), ir.Role.CONSUMER, lambda st: tuple(
        replace(s, scales=replace(s.scales, sub=4)) if isinstance(s, ir.Promote) and s.scales else s for s in st))
    assert any("slice 4 of sa_ring" in e for e in verify.structural(out_of_range))


@pytest.mark.parametrize("recipe", [*ALL_BW, MX], ids=[*ALL_IDS, "mx"])
def test_pingpong_blockwise(recipe: ScaleRecipe) -> None:
    """Ping-pong warpgroups (whole tiles in turn) with in-stage scales, or MX's scale partition refused for now."""
    from warploom.errors import UnsupportedError
    from warploom.planner import plan_schedule

    s = spec(300, 300, 640, recipe)
    if recipe is MX:
        with pytest.raises(UnsupportedError, match="not built yet"):
            plan_schedule(s, H100_SXM, pingpong=True)
        return
    plan = replace(plan_schedule(s, H100_SXM, pingpong=True), grid=3, group_m=2)
    m = build(s, H100_SXM, plan).module
    res, x = run(m)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), reference(x)) < 1e-5


# ---------------------------------------------------------------------------------------------------------------
# Clean sweep: stages 1-6 x k-block counts at the ring's edges (1, S-1, S, S+1, 2S+1) x consumer structures x
# recipes x scale placement, several tiles per CTA, ragged M and N. Each must simulate clean and be exact.

# (128x128 for the split structure: six 128x256 stages would not fit the shared memory.)
SWEEP_STRUCTURES = {"p1": P1, "p2h2": replace(P2H2, bn=128, epilogue_subtiles=1)}


def _sweep_cases() -> list[tuple[str, int, int, str, bool]]:
    cases = []
    for stages in range(1, 7):
        for ks in sorted({1, stages - 1, stages, stages + 1, 2 * stages + 1} - {0}):
            for structure in SWEEP_STRUCTURES:
                # Each recipe and placement once per (stages, ks), rotating through the structures.
                i = len(cases)
                recipe = ("128x128", "1x128", "mx")[i % 3]
                sp = recipe == "mx" or i % 2 == 1
                cases.append((structure, stages, ks, recipe, sp))
    return cases


SWEEP = _sweep_cases()


@pytest.mark.parametrize("structure,stages,ks,recipe,sp", SWEEP,
                         ids=[f"{c[0]}-s{c[1]}-k{c[2]}-{c[3]}{'-sp' if c[4] else ''}" for c in SWEEP])
def test_clean_sweep(structure: str, stages: int, ks: int, recipe: str, sp: bool) -> None:
    rec = {"128x128": BW, "1x128": BW1, "mx": MX}[recipe]
    plan = replace(SWEEP_STRUCTURES[structure], stages=stages, scale_partition=sp,
                   scale_stages=1 + (stages + ks) % 3)
    k = ks * 128 - (32 if ks > 1 else 0)  # the last k-block partial (a multiple of 32 for MX)
    m = build(spec(130 if structure == "p1" else 300, 200, k, rec), H100_SXM, plan).module
    res, x = run(m, seed=stages + ks)
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert relative_error(res.output.float(), reference(x)) < 1e-5


@pytest.mark.parametrize("recipe", [BW, BW1], ids=["128x128", "1x128"])
def test_sampled_tiles_are_judged_against_the_dequantized_product(recipe: ScaleRecipe) -> None:
    """`compare` on some CTAs (what `warploom demo` does above the size limit) judges their tiles against the
    dequantized product: blockwise scales are indexed by k-block and 128-column block, not by the tile's rows and
    columns (the rowwise per-tile reference crashed on them)."""
    from warploom.reference import make_inputs as inputs
    from warploom.sim import compare

    m = module(recipe, "p64")
    s = m.spec
    r = compare(m, inputs(s, s.m, s.n, s.k, seed=3), ctas=(1,))
    assert 0 < len(r.tiles) < -(-s.m // 64) * -(-s.n // 64)
    assert r.ok, (r.error, r.result.report.summary())
