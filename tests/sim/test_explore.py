"""Exhaustive exploration of small configurations: every interleaving of the partitions and every
completion order of the asynchronous copies and wgmma, up to a bound on distinct states."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pytest

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import Plan
from warploom.sim import ExploreReport, FindingKind, explore
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

MAX_STATES = 100_000


def plan(stages: int, bk: int, subtiles: int = 1) -> Plan:
    # bn = 64 and grid = 1: N = 64 * tiles gives the one CTA exactly `tiles` tiles.
    return Plan(bm=64, bn=64, bk=bk, stages=stages, consumer_warps=4, group_m=2, grid=1,
                epilogue_subtiles=subtiles)


def split_plan(stages: int, bk: int) -> Plan:
    """The planner's structure for 128-row tiles: two 4-warp consumer partitions; for promoted fp8 (bk 64
    here) a 128-wide tile in two column blocks. Grid 1 again: N = bn * tiles."""
    fp8 = bk == 64
    return Plan(bm=128, bn=128 if fp8 else 64, bk=bk, stages=stages, consumer_warps=8, group_m=2, grid=1,
                consumer_partitions=2, partial_blocks=2 if fp8 else 1)


def config(kind: str, tiles: int, ks: int, split: bool = False) -> tuple[GemmSpec, int]:
    bm = 128 if split else 64
    if kind == "bf16":
        return GemmSpec(bm, 64 * tiles, ks * 32), 32
    bn = 128 if split else 64
    return GemmSpec(bm, bn * tiles, ks * 64, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED), 64


@functools.cache
def _explore(kind: str, stages: int, tiles: int, ks: int, subtiles: int = 1, split: bool = False) -> ExploreReport:
    spec, bk = config(kind, tiles, ks, split)
    module = build(spec, H100_SXM, split_plan(stages, bk) if split else plan(stages, bk, subtiles)).module
    if split:
        assert [p.name for p in module.partitions] == ["consumer0", "consumer1", "producer"]
    return explore(module, spec.m, spec.n, spec.k, max_states=MAX_STATES)


CONFIGS = [(kind, s, t, ks) for kind in ("bf16", "fp8_promoted") for s in (1, 2, 3) for t in (1, 2) for ks in (1, 2, 3)]


@pytest.mark.parametrize("kind,stages,tiles,ks", CONFIGS, ids=[f"{c[0]}-s{c[1]}-t{c[2]}-k{c[3]}" for c in CONFIGS])
def test_small_configs_have_no_violation_on_any_schedule(kind: str, stages: int, tiles: int, ks: int) -> None:
    r = _explore(kind, stages, tiles, ks)
    assert r.ok, r.summary()
    assert not r.bound_hit, r.summary()
    assert r.states > tiles * ks and r.terminals >= 1


# Split consumers: three partitions interleave, so the state space grows faster; configurations up to 8
# ring uses per CTA, every stage count from 1 to 3 and a k-loop longer than the ring included.
SPLIT_CONFIGS = [c for c in CONFIGS if c[1] * c[2] * c[3] <= 8]


@pytest.mark.parametrize("kind,stages,tiles,ks", SPLIT_CONFIGS,
                         ids=[f"{c[0]}-p2-s{c[1]}-t{c[2]}-k{c[3]}" for c in SPLIT_CONFIGS])
def test_split_consumer_configs_have_no_violation_on_any_schedule(kind: str, stages: int, tiles: int,
                                                                 ks: int) -> None:
    r = _explore(kind, stages, tiles, ks, split=True)
    assert r.ok, r.summary()
    assert not r.bound_hit, r.summary()
    # More states than one consumer: the two warpgroups really run independently of each other.
    assert r.states > _explore(kind, stages, tiles, ks).states


def test_split_consumer_one_missing_release_deadlocks_on_every_schedule() -> None:
    """Only consumer1 stops releasing slots: the producer blocks at its first refill whatever the order."""
    spec, bk = config("bf16", 2, 3, split=True)
    m = build(spec, H100_SXM, split_plan(2, bk)).module
    m = m.with_partition(_dropped_arrive_of(m.partition("consumer1")))
    r = explore(m, spec.m, spec.n, spec.k, max_states=MAX_STATES)
    assert FindingKind.DEADLOCK in r.kinds(), r.summary()
    assert not r.bound_hit
    assert r.counterexample and any("wait empty[p]" in line for line in r.counterexample)


@pytest.mark.parametrize("stages,tiles,ks", [(4, 3, 4), (2, 4, 3), (3, 3, 4)])
def test_larger_configs_have_no_violation_on_any_schedule(stages: int, tiles: int, ks: int) -> None:
    r = _explore("bf16", stages, tiles, ks)
    assert r.ok and not r.bound_hit, r.summary()


def test_split_epilogue_has_no_violation_on_any_schedule() -> None:
    r = _explore("bf16", 2, 2, 3, subtiles=2)
    assert r.ok and not r.bound_hit, r.summary()


def test_states_explored(table: Callable[[str], None]) -> None:
    lines = ["exhaustive exploration (states / transitions / seconds):"]
    for c in CONFIGS:
        r = _explore(*c)
        lines.append(f"  {c[0]:12s} stages={c[1]} tiles={c[2]} k={c[3]}: {r.states:6d} / {r.transitions:6d} / "
                     f"{r.wall_s:.2f}{'  BOUND HIT' if r.bound_hit else ''}")
    table("\n".join(lines))
    assert sum(_explore(*c).states for c in CONFIGS) > 1000


def _dropped_arrive_of(p: ir.Partition) -> ir.Partition:
    """`p` without its in-loop release of slot c-1."""
    def body(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(ir.Loop(s.kind, body(s.body)) if isinstance(s, ir.Loop) else s for s in stmts
                     if not (isinstance(s, ir.Arrive) and s.guard is ir.Guard.NOT_FIRST_K))

    return replace(p, body=body(p.body))


def _dropped_arrive(m: ir.Module) -> ir.Module:
    """Every consumer's in-loop release of slot c-1 removed."""
    for p in [p for p in m.partitions if p.role is ir.Role.CONSUMER]:
        m = m.with_partition(_dropped_arrive_of(p))
    return m


def test_planted_dropped_arrive_deadlock_is_found_exhaustively() -> None:
    spec, bk = config("bf16", 2, 3)
    module = _dropped_arrive(build(spec, H100_SXM, plan(2, bk)).module)
    r = explore(module, spec.m, spec.n, spec.k, max_states=MAX_STATES)
    assert FindingKind.DEADLOCK in r.kinds(), r.summary()
    assert not r.bound_hit
    # The counterexample replays the schedule to the deadlock, one action per line.
    assert r.counterexample and any("wait empty[p]" in line for line in r.counterexample)


def test_deadlock_only_on_some_schedules_is_found() -> None:
    """Arrival count 2 on ready with 1 tile x 1 k-block: the consumer's wait never passes on any schedule,
    but whether the producer is still running when that happens depends on the interleaving."""
    spec, bk = config("bf16", 1, 1)
    m = build(spec, H100_SXM, plan(2, bk)).module
    m = replace(m, barriers=tuple(replace(b, count=2) if b.name == "ready" else b for b in m.barriers))
    r = explore(m, spec.m, spec.n, spec.k)
    assert FindingKind.DEADLOCK in r.kinds(), r.summary()


def test_bound_is_reported() -> None:
    spec, bk = config("bf16", 2, 3)
    module = build(spec, H100_SXM, plan(3, bk)).module
    r = explore(module, spec.m, spec.n, spec.k, max_states=50)
    assert r.bound_hit and r.states == 50 and r.ok


@pytest.mark.parametrize("mutate", [lambda m: m, _dropped_arrive], ids=["clean", "dropped_arrive"])
def test_reduction_agrees_with_full_search(mutate: object) -> None:
    """Taking local instructions eagerly must not change what is found, only how many states it takes."""
    spec, bk = config("bf16", 2, 2)
    module = mutate(build(spec, H100_SXM, plan(2, bk)).module)  # type: ignore[operator]
    fast = explore(module, spec.m, spec.n, spec.k)
    full = explore(module, spec.m, spec.n, spec.k, por=False)
    assert not fast.bound_hit and not full.bound_hit
    assert fast.kinds() == full.kinds()
    assert full.states > fast.states
