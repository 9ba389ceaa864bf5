"""Planted bugs: mutations of real planner output, each of which the simulator must catch by itself.

Each mutant rewrites a finished module (built by the real pass pipeline) the way a plausible pass bug
would, and is simulated directly: the static verifier is bypassed, so these tests hold the simulator
to account, not the verifier. Each names the finding kinds that count as catching it; the unmutated
module must be clean, so a catch is never a false alarm. Every mutant is planted in both consumer
structures (`name@p1`: one consumer partition; `name@p2`: the planner's default for 128-row tiles, one
partition per warpgroup, promoted fp8 in column blocks), and a few bugs only the split structure can have.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import Plan
from warploom.reference import make_inputs
from warploom.sim import FindingKind, SimResult, explore, simulate
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

K = FindingKind
# 3x3 tiles over a grid of 2 (5 and 4 tiles per CTA), 5 k-blocks each: more ring uses than stages, so
# every ring slot is refilled several times and every phase of every barrier is exercised.
SIZE = (130, 190, 150)
PLAN = Plan(bm=64, bn=64, bk=32, stages=3, consumer_warps=4, group_m=2, grid=2)
FP8_PLAN = Plan(bm=64, bn=64, bk=64, stages=3, consumer_warps=4, group_m=2, grid=2)
# The planner's structure for 128-row tiles (planner.py, rules 7-8): one consumer partition per warpgroup,
# and promoted fp8 in two column blocks; 2x3 (bf16) and 2x2 (fp8) tiles over the grid of 2.
P2_PLAN = Plan(bm=128, bn=64, bk=32, stages=3, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2)
FP8_P2H2_PLAN = Plan(bm=128, bn=128, bk=64, stages=3, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2,
                     partial_blocks=2)
WIDE_PLAN = Plan(bm=128, bn=256, bk=64, stages=3, consumer_warps=8, group_m=2, grid=2, epilogue_subtiles=2,
                 consumer_partitions=2)
# Ping-pong (passes/split_consumers.py): two warpgroups taking alternate whole tiles, handing over the mainloop
# through the turn barriers; 3x3 tiles over the grid of 2 give each consumer 2 or 3 tiles (and 2 or 1).
PP_PLAN = Plan(bm=64, bn=64, bk=32, stages=3, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2,
               pingpong=True)
FP8_PP_PLAN = replace(PP_PLAN, bk=64)
BF16 = GemmSpec(*SIZE)
FP8_PROMOTED = GemmSpec(SIZE[0], SIZE[1], 320, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                        accumulation=Accumulation.PROMOTED)
# Per consumer structure: (the bf16 plan, the promoted fp8 plan, the 256-wide split-epilogue plan).
STRUCTURES = {
    "p1": (PLAN, FP8_PLAN, replace(WIDE_PLAN, consumer_partitions=1)),
    "p2": (P2_PLAN, FP8_P2H2_PLAN, WIDE_PLAN),
    "pp": (PP_PLAN, FP8_PP_PLAN, replace(PP_PLAN, bn=256, epilogue_subtiles=2)),
}

Rewrite = Callable[[ir.Op], tuple[ir.Stmt, ...]]


def edit(m: ir.Module, role: ir.Role, fn: Rewrite, where: ir.LoopKind | None | str = "any",
         only: str | None = None) -> ir.Module:
    """`m` with the ops of every partition of `role` (or just the one named `only`) rewritten by `fn`: those
    directly inside loops of kind `where`, those outside every loop (where=None), or all (where="any")."""

    def body(stmts: tuple[ir.Stmt, ...], kind: ir.LoopKind | None) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            if isinstance(s, ir.Loop):
                out.append(replace(s, body=body(s.body, s.kind)))
            elif where == "any" or where == kind:
                out.extend(fn(s))
            else:
                out.append(s)
        return tuple(out)

    parts = [p for p in m.partitions if p.role is role and only in (None, p.name)]
    assert parts, f"no {role.value} partition {only or ''}"
    for part in parts:
        m = m.with_partition(replace(part, body=body(part.body, None)))
    return m


def drop(kind: type, pred: Callable[[ir.Op], bool] = lambda o: True) -> Rewrite:
    return lambda o: () if isinstance(o, kind) and pred(o) else (o,)


def change(kind: type, fn: Callable[[ir.Op], ir.Op]) -> Rewrite:
    return lambda o: (fn(o),) if isinstance(o, kind) else (o,)


def _is_empty(o: ir.Op) -> bool:
    return getattr(o, "barrier", None) == "empty"


def _is_ready(o: ir.Op) -> bool:
    return getattr(o, "barrier", None) == "ready"


def _shared_barrier(m: ir.Module) -> ir.Module:
    """Ready and empty collapsed into one barrier array: every 'empty' op now names 'ready'."""
    def rename(o: ir.Op) -> tuple[ir.Stmt, ...]:
        return (replace(o, barrier="ready"),) if _is_empty(o) else (o,)  # type: ignore[type-var]

    m = edit(edit(m, ir.Role.CONSUMER, rename), ir.Role.PRODUCER, rename)
    return replace(m, barriers=tuple(b for b in m.barriers if b.name != "empty"))


def _one_stage_deferred_release(m: ir.Module) -> ir.Module:
    """The 2-stage schedule (wgmma_wait 1, release of slot c-1 deferred by one k-block) squeezed into one
    stage: what PipelineMma produced for stages=1 before it learnt to release at once with one slot."""
    depth1 = {"rings": tuple(replace(r, depth=1) for r in m.rings),
              "barriers": tuple(replace(b, depth=1) for b in m.barriers)}
    parts = tuple(replace(p, cursors=tuple(replace(c, depth=1) for c in p.cursors)) for p in m.partitions)
    return replace(m, partitions=parts, **depth1)


def _arrival_count(m: ir.Module, fn: Callable[[int], int]) -> ir.Module:
    return replace(m, barriers=tuple(replace(b, count=fn(b.count)) if b.name == "empty" else b for b in m.barriers))


def _move_release(m: ir.Module, where: Callable[[list[int]], int]) -> ir.Module:
    """Every consumer's in-k-loop release moved to index `where(positions of the loop's wgmma_waits)` of the
    loop body without it."""
    def move(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        if not any(isinstance(s, ir.Mma) for s in stmts):
            return tuple(replace(s, body=move(s.body)) if isinstance(s, ir.Loop) else s for s in stmts)
        (arrive,) = [s for s in stmts if isinstance(s, ir.Arrive)]
        rest = [s for s in stmts if s is not arrive]
        i = where([j for j, s in enumerate(rest) if isinstance(s, ir.MmaWait)])
        return tuple(rest[:i] + [arrive] + rest[i:])

    for p in [p for p in m.partitions if p.role is ir.Role.CONSUMER]:
        m = m.with_partition(replace(p, body=move(p.body)))
    return m


def _rows(m: ir.Module, name: str, rows: ir.RowBlock) -> ir.Module:
    return m.with_partition(replace(m.partition(name), rows=rows))


def _shared_staging_buffer(m: ir.Module) -> ir.Module:
    """Both warpgroups stage their rows through consumer0's buffer."""
    m = edit(m, ir.Role.CONSUMER, lambda o: (replace(o, buffer="c_smem0"),)  # type: ignore[type-var]
             if isinstance(o, (ir.StoreSmem, ir.TmaStore)) else (o,), only="consumer1")
    return replace(m, buffers=tuple(b for b in m.buffers if b.name != "c_smem1"))


@dataclass(frozen=True)
class Mutant:
    """A planted bug: how to make it, and which findings catch it."""

    name: str
    spec: GemmSpec
    plan: Plan
    mutate: Callable[[ir.Module], ir.Module]
    caught_by: frozenset[FindingKind]
    exhaustive: bool = True  # whether the explorer (protocol only, no output) can see it too


C, P, KL, TL = ir.Role.CONSUMER, ir.Role.PRODUCER, ir.LoopKind.K, ir.LoopKind.TILES


def mutants(structure: str) -> list[Mutant]:
    """Every planted bug, on the plans of one consumer structure (named `name@structure`)."""
    plan, fp8_plan, wide_plan = STRUCTURES[structure]
    base = [
        Mutant("dropped_arrive", BF16, plan,  # the consumer never releases slots inside the k-loop
               lambda m: edit(m, C, drop(ir.Arrive, _is_empty), KL), frozenset({K.DEADLOCK})),
        Mutant("initial_phase_flip_removed", BF16, plan,  # the producer waits for a release of a fresh ring
               lambda m: edit(m, P, change(ir.Wait, lambda o: replace(o, parity=replace(o.parity, flip=False)))),
               frozenset({K.DEADLOCK})),
        Mutant("initial_phase_flip_added", BF16, plan,  # the consumer's first ready wait passes on a fresh barrier
               lambda m: edit(m, C, change(ir.Wait, lambda o: replace(o, parity=replace(o.parity, flip=True)))),
               frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
        Mutant("stage_index_off_by_one", BF16, plan,  # wgmma reads stage c+1 after waiting for stage c
               lambda m: edit(m, C, change(ir.Mma, lambda o: replace(o, slot=replace(o.slot, offset=1)))),
               frozenset({K.WRONG_TILE, K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
        Mutant("expect_tx_too_few_bytes", BF16, plan,  # announces only A's bytes
               lambda m: edit(m, P, change(ir.ArriveExpectTx,
                                           lambda o: replace(o, nbytes=m.ring("a_ring").slot_bytes))),
               frozenset({K.TX_MISMATCH})),
        Mutant("expect_tx_too_many_bytes", BF16, plan,
               lambda m: edit(m, P, change(ir.ArriveExpectTx, lambda o: replace(o, nbytes=o.nbytes + 128))),
               frozenset({K.TX_MISMATCH})),
        Mutant("missing_mma_wait_before_epilogue", BF16, plan,
               lambda m: edit(m, C, drop(ir.MmaWait), TL), frozenset({K.ACC_RACE})),
        Mutant("early_exit_without_arrive", BF16, plan,  # the tile's last slot is never released
               lambda m: edit(m, C, drop(ir.Arrive), TL), frozenset({K.DEADLOCK})),
        Mutant("arrival_count_mismatch", BF16, plan,  # empty expects one arrival more than partitions arrive
               lambda m: _arrival_count(m, lambda n: n + 1), frozenset({K.DEADLOCK})),
        Mutant("barrier_shared_by_two_rings", BF16, plan, _shared_barrier,
               frozenset({K.OVERWRITE_UNRELEASED, K.READ_BEFORE_LANDED, K.READ_UNACQUIRED, K.WRONG_TILE})),
        Mutant("missing_fence", BF16, plan, lambda m: edit(m, C, drop(ir.FenceAsync)),
               frozenset({K.MISSING_FENCE})),
        Mutant("missing_store_wait_before_store_smem", BF16, plan,
               lambda m: edit(m, C, drop(ir.StoreWait), TL), frozenset({K.STORE_BUFFER_RACE})),
        Mutant("missing_store_wait_at_exit", BF16, plan,
               lambda m: edit(m, C, drop(ir.StoreWait), None), frozenset({K.ASYNC_AT_EXIT})),
        Mutant("mma_wait_too_loose", BF16, plan,  # wgmma_wait 2 in the loop: slot c-1 is released while read
               lambda m: edit(m, C, change(ir.MmaWait, lambda o: replace(o, pending=2)), KL),
               frozenset({K.RELEASE_WHILE_READING})),
        Mutant("double_arrive", BF16, plan,
               lambda m: edit(m, C, change(ir.Arrive, lambda o: replace(o, count=2)), KL),
               frozenset({K.ARRIVAL_OVERFLOW}) if structure == "p1" else
               # With two partitions counted, one partition's double arrive completes the phase by itself (no
               # overflow, as on the hardware): the slot is refilled while the other warpgroup reads it.
               frozenset({K.ARRIVAL_OVERFLOW, K.OVERWRITE_WHILE_READ, K.OVERWRITE_UNRELEASED})),
        Mutant("ready_wait_dropped", BF16, plan,
               lambda m: edit(m, C, drop(ir.Wait, _is_ready)), frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
        Mutant("one_stage_deferred_release", BF16, replace(plan, stages=2), _one_stage_deferred_release,
               frozenset({K.DEADLOCK})),
        Mutant("split_epilogue_stores_one_half_twice", BF16, wide_plan,
               lambda m: edit(m, C, change(ir.TmaStore, lambda o: replace(o, part=0))),
               frozenset({K.OUTPUT_COVERAGE}), exhaustive=False),
        Mutant("promoted_missing_mma_wait", FP8_PROMOTED, fp8_plan,  # promote reads the partial in flight
               lambda m: edit(m, C, drop(ir.MmaWait), KL), frozenset({K.ACC_RACE})),
        Mutant("promoted_release_before_wait", FP8_PROMOTED, fp8_plan,  # arrive empty before the last wgmma_wait
               lambda m: _move_release(m, lambda waits: waits[-1]), frozenset({K.RELEASE_WHILE_READING})),
    ]
    return [replace(mu, name=f"{mu.name}@{structure}") for mu in base]


# Bugs only the split structure can have.
SPLIT_ONLY = [
    Mutant("one_consumer_never_releases@p2", BF16, P2_PLAN,  # consumer1 drops its arrives on empty
           lambda m: edit(m, C, drop(ir.Arrive, _is_empty), only="consumer1"), frozenset({K.DEADLOCK})),
    Mutant("empty_count_not_doubled@p2", BF16, P2_PLAN,  # two partitions release, the first completes the phase
           lambda m: _arrival_count(m, lambda n: 1),
           frozenset({K.ARRIVAL_OVERFLOW, K.OVERWRITE_UNRELEASED, K.OVERWRITE_WHILE_READ})),
    Mutant("row_blocks_overlap@p2", BF16, P2_PLAN,  # consumer1 computes and stores consumer0's rows
           lambda m: _rows(m, "consumer1", ir.RowBlock(0, 64)), frozenset({K.OUTPUT_COVERAGE}), exhaustive=False),
    Mutant("staging_buffer_shared@p2", BF16, P2_PLAN, _shared_staging_buffer,
           frozenset({K.STORE_BUFFER_RACE})),
    Mutant("column_block_release_after_first_block@p2", FP8_PROMOTED, FP8_P2H2_PLAN,  # the second block still reads
           lambda m: _move_release(m, lambda waits: waits[0] + 1),
           frozenset({K.READ_AFTER_RELEASE, K.READ_UNACQUIRED, K.OVERWRITE_UNRELEASED, K.OVERWRITE_WHILE_READ,
                      K.WRONG_TILE})),
]

def _is_turn(o: ir.Op) -> bool:
    return getattr(o, "barrier", "").startswith("turn")


def _tiles_loop(m: ir.Module, name: str, fn: Callable[[ir.Loop], ir.Loop]) -> ir.Module:
    p = m.partition(name)
    return m.with_partition(replace(p, body=tuple(fn(s) if isinstance(s, ir.Loop) else s for s in p.body)))


# Bugs only ping-pong can have.
PINGPONG_ONLY = [
    Mutant("no_turns@pp", BF16, PP_PLAN,  # consumer1 waits on ready phases two ahead of the barriers
           lambda m: edit(m, C, drop(ir.Wait, _is_turn)),
           frozenset({K.PHASE_ALIAS, K.WRONG_TILE, K.READ_UNACQUIRED, K.READ_BEFORE_LANDED})),
    Mutant("turn_never_handed_back@pp", BF16, PP_PLAN,  # consumer1 keeps the turn: consumer0 waits forever
           lambda m: edit(m, C, drop(ir.Arrive, _is_turn), only="consumer1"), frozenset({K.DEADLOCK})),
    Mutant("skip_missing@pp", BF16, PP_PLAN,  # the consumers' cursors ignore each other's tiles
           lambda m: edit(m, C, drop(ir.SkipTiles)),
           frozenset({K.WRONG_TILE, K.PHASE_ALIAS, K.DEADLOCK, K.READ_UNACQUIRED})),
    Mutant("both_take_the_same_tiles@pp", BF16, PP_PLAN,  # consumer1's loop starts at tile 0 too
           lambda m: _tiles_loop(m, "consumer1", lambda lp: replace(lp, start=0)),
           frozenset({K.OUTPUT_COVERAGE, K.WRONG_TILE, K.DEADLOCK, K.PHASE_ALIAS}), exhaustive=False),
]

MUTANTS = mutants("p1") + mutants("p2") + mutants("pp") + SPLIT_ONLY + PINGPONG_ONLY


@functools.cache
def _base(spec: GemmSpec, plan: Plan) -> ir.Module:
    return build(spec, H100_SXM, plan).module


def _run(module: ir.Module, spec: GemmSpec, seed: int = 0) -> SimResult:
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=seed)
    return simulate(module, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed)


@functools.cache
def _outcome(name: str) -> tuple[frozenset[FindingKind], bool, str]:
    """(finding kinds of the simulated mutant, whether the static verifier also rejects it, the report)."""
    mu = next(x for x in MUTANTS if x.name == name)
    module = mu.mutate(_base(mu.spec, mu.plan))
    res = _run(module, mu.spec)
    return frozenset(res.report.kinds()), bool(verify.complete(module, H100_SXM)), res.report.summary()


BASES = sorted({(mu.spec, mu.plan) for mu in MUTANTS}, key=lambda sp: (sp[0].short(), sp[1].short()))


@pytest.mark.parametrize("spec,plan", BASES, ids=[f"{s.short()}-{p.short()}".replace(" ", "_") for s, p in BASES])
def test_unmutated_modules_are_clean(spec: GemmSpec, plan: Plan) -> None:
    res = _run(_base(spec, plan), spec)
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()


def test_split_plans_have_the_split_structure() -> None:
    """The p2 plans really run two consumer partitions (and h2 two column blocks), as the planner would."""
    for plan in (P2_PLAN, FP8_P2H2_PLAN, WIDE_PLAN):
        spec = FP8_PROMOTED if plan.partial_blocks == 2 else BF16
        m = _base(spec, plan)
        assert [p.name for p in m.partitions if p.role is C] == ["consumer0", "consumer1"]
        assert m.barrier("empty").count == 2
    accs = _base(FP8_PROMOTED, FP8_P2H2_PLAN).partition("consumer1").accumulators
    assert [(a.name, a.col0, a.cols) for a in accs] == [("acc0", 0, 64), ("acc1", 64, 64), ("partial", 0, 64)]


@pytest.mark.parametrize("mu", MUTANTS, ids=[mu.name for mu in MUTANTS])
def test_mutant_is_caught(mu: Mutant) -> None:
    kinds, _, summary = _outcome(mu.name)
    assert kinds & mu.caught_by, f"{mu.name} not caught: expected one of {sorted(k.name for k in mu.caught_by)}\n" \
                                 f"{summary}"


def test_mutation_score(table: Callable[[str], None]) -> None:
    caught = [mu.name for mu in MUTANTS if _outcome(mu.name)[0] & mu.caught_by]
    lines = [f"mutants caught: {len(caught)}/{len(MUTANTS)}"]
    for mu in MUTANTS:
        kinds, by_verifier, _ = _outcome(mu.name)
        lines.append(f"  {mu.name:44s} sim: {', '.join(sorted(k.name for k in kinds)) or '-':60s} "
                     f"static verifier: {'rejects' if by_verifier else 'accepts'}")
    table("\n".join(lines))
    assert len(caught) == len(MUTANTS)


def test_findings_name_partition_op_iteration_and_barrier() -> None:
    mu = next(x for x in MUTANTS if x.name == "dropped_arrive@p1")
    res = _run(mu.mutate(_base(mu.spec, mu.plan)), mu.spec)
    (dead,) = [f for f in res.findings if f.kind is K.DEADLOCK]
    assert dead.partition in ("consumer", "producer") and dead.op.startswith("wait ")
    assert dead.barrier is not None and dead.phase is not None and dead.tile is not None and dead.k is not None
    # Both blocked partitions are named with what they wait for.
    assert "consumer: `wait ready[c] phase(c)`" in dead.message
    assert "producer: `wait empty[p] phase(p)^1`" in dead.message


def test_deadlock_of_a_missing_consumer_release_names_who_arrived() -> None:
    """Split consumers: the producer's blocked wait says how many of the 2 arrivals came, and from whom."""
    mu = next(x for x in MUTANTS if x.name == "one_consumer_never_releases@p2")
    res = _run(mu.mutate(_base(mu.spec, mu.plan)), mu.spec)
    (dead,) = [f for f in res.findings if f.kind is K.DEADLOCK]
    assert "producer: `wait empty[p] phase(p)^1`" in dead.message
    assert "with 1 of 2 arrivals (arrived: consumer0)" in dead.message
    # Both consumers are blocked on the next ready phase, which the producer can no longer complete.
    assert "consumer0: `wait ready[c] phase(c)`" in dead.message
    assert "consumer1: `wait ready[c] phase(c)`" in dead.message


def test_expect_tx_finding_names_barrier_and_phase() -> None:
    mu = next(x for x in MUTANTS if x.name == "expect_tx_too_few_bytes@p1")
    res = _run(mu.mutate(_base(mu.spec, mu.plan)), mu.spec)
    tx = [f for f in res.findings if f.kind is K.TX_MISMATCH]
    assert tx and all(f.barrier is not None and f.barrier.startswith("ready[") for f in tx)
    assert any("completed phase 0" in f.message for f in tx)


def test_race_findings_do_not_depend_on_the_schedule() -> None:
    """The missing-wait mutants are caught on every seed: checks judge what the program synchronized."""
    for name in [f"{n}@{s}" for n in ("missing_mma_wait_before_epilogue", "missing_fence", "mma_wait_too_loose")
                 for s in STRUCTURES]:
        mu = next(x for x in MUTANTS if x.name == name)
        module = mu.mutate(_base(mu.spec, mu.plan))
        for seed in range(4):
            assert _run(module, mu.spec, seed).report.kinds() & mu.caught_by, (name, seed)


def test_unsimulated_ctas_stay_poisoned() -> None:
    x = make_inputs(BF16, *SIZE)
    res = simulate(_base(BF16, PLAN), x.a, x.b, ctas=[1])
    assert res.ok
    assert res.output[:64, :64].isnan().all()  # tile 0 belongs to CTA 0
    assert res.output.isnan().any() and not res.output.isnan().all()


EXHAUSTIVE = [mu for mu in MUTANTS if mu.exhaustive]


@pytest.mark.parametrize("mu", EXHAUSTIVE, ids=[mu.name for mu in EXHAUSTIVE])
def test_mutant_is_caught_exhaustively(mu: Mutant) -> None:
    """The explorer, with no data and its own schedules, catches every mutant too (a smaller problem: 3 x 3
    tiles over 2 CTAs, the same k-blocks)."""
    r = explore(mu.mutate(_base(mu.spec, mu.plan)), 130, 130, mu.spec.k, max_states=50_000, stop_at_first=True)
    assert r.kinds() & mu.caught_by, r.summary()
