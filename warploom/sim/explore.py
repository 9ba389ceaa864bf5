"""Exhaustive exploration: every schedule of a small configuration, up to a bound on distinct states.

Depth-first search over scheduler choices (which partition steps, which async operation completes) with
a visited set of canonical state hashes (`Machine.key`, protocol state only: no data). The state graph
is acyclic (every action retires an instruction or an async operation), so a visited set is all the
search needs. One reduction keeps it small: an instruction that touches only its partition's own
registers or private buffers (`Machine.local`) commutes with every other action, so it is taken at once
instead of branched on; findings and deadlocks reachable in the full graph stay reachable.

The counterexample of the first finding is replayed from the initial state and described step by step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from warploom.ir import nodes as ir
from warploom.ir.raster import launch_grid
from warploom.sim.cluster import link, whole_clusters
from warploom.sim.findings import FindingKind, FindingSink, SimFinding
from warploom.sim.machine import AGENT, Action, Machine, StreamKState
from warploom.sim.program import CtaProgram, FlagWaitI, Geometry, MalformedError, PartialAddI, PartialStoreI
from warploom.sim.simulate import program_ids, representative_ctas

Path = tuple[Action, "Path"] | None  # a linked list of actions, newest first


@dataclass(frozen=True)
class ExploreReport:
    """Attributes:
    module: the module's name.
    size: the problem (m, n, k).
    ctas: program ids explored (one per distinct tile count unless chosen).
    states: distinct states visited, over all CTAs.
    transitions: actions applied.
    terminals: end states reached (finished or deadlocked).
    bound_hit: whether `max_states` stopped a CTA's search before it was complete.
    findings: violations found on any schedule.
    counterexample: the schedule (one line per action) reaching the first finding, or ().
    wall_s: wall time.
    """

    module: str
    size: tuple[int, int, int]
    ctas: tuple[int, ...]
    states: int
    transitions: int
    terminals: int
    bound_hit: bool
    findings: tuple[SimFinding, ...]
    counterexample: tuple[str, ...]
    wall_s: float

    @property
    def ok(self) -> bool:
        """No finding on any explored schedule (and, if not `bound_hit`, on any schedule at all)."""
        return not self.findings

    def kinds(self) -> set[FindingKind]:
        return {f.kind for f in self.findings}

    def summary(self) -> str:
        bound = " (bound hit: incomplete)" if self.bound_hit else " (complete)"
        head = (f"{self.module} at {self.size}: {self.states} states, {self.transitions} transitions, "
                f"{self.terminals} end states{bound}, {self.wall_s:.2f} s")
        if not self.findings:
            return head + ": no findings"
        lines = [head + f": {len(self.findings)} finding(s)"] + [f"  - {f}" for f in self.findings]
        if self.counterexample:
            lines.append("  schedule to the first finding:")
            lines += [f"    {i:4d}. {s}" for i, s in enumerate(self.counterexample)]
        return "\n".join(lines)


class _Several:
    """Several CTAs' machines as one state machine, the explorer's interface of `Machine` over all of them: an action
    is (kind, (cta, x)) for a CTA's own (kind, x); a partition is numbered across the CTAs, for the local-instruction
    reduction (a local instruction touches no barrier or slot, so it commutes with the other CTAs' actions too)."""

    def __init__(self, machines: list[Machine]) -> None:
        self.ms = machines
        self.agents = [(c, i) for c, mach in enumerate(machines) for i in range(len(mach.pc))]
        self.pc = [0] * len(self.agents)  # (only its length is read: _eager numbers the partitions by it)

    def local(self, j: int) -> bool:
        c, i = self.agents[j]
        return self.ms[c].local(i)

    def runnable(self, j: int) -> bool:
        c, i = self.agents[j]
        return self.ms[c].runnable(i)

    def apply(self, act: Any) -> None:
        kind, x = act
        c, y = x if isinstance(x, tuple) else self.agents[x]
        self.ms[c].apply((kind, y))

    def describe(self, act: Any) -> str:
        kind, x = act
        c, y = x if isinstance(x, tuple) else self.agents[x]
        return f"CTA {self.ms[c].prog.geo.pid}: {self.ms[c].describe((kind, y))}"


class _Linked(_Several):
    """The CTAs of a stream-K launch as one state machine (`ir.Fixup` links them through workspace flags)."""

    def __init__(self, machines: list[Machine], state: StreamKState) -> None:
        super().__init__(machines)
        self.state = state
        for mach in machines:
            mach.sk = state

    def enabled(self) -> list[Any]:
        """The enabled actions, reduced: CTAs touch each other only through their fixup instructions, so where some
        CTA can move without one, its actions alone are explored (they commute with every other CTA's: an ample
        set), and the CTAs interleave only at their fixups."""
        per = [(c, mach.enabled()) for c, mach in enumerate(self.ms)]
        for c, acts in per:
            if acts and not any(self._linking(c, a) for a in acts):
                return [(kind, (c, x)) for kind, x in acts]
        return [(kind, (c, x)) for c, acts in per for kind, x in acts]

    def _linking(self, c: int, act: Action) -> bool:
        """Whether CTA `c`'s action is a fixup instruction (the only ones other CTAs observe)."""
        kind, i = act
        mach = self.ms[c]
        return kind == AGENT and isinstance(mach.prog.traces[i][mach.pc[i]], (PartialStoreI, FlagWaitI, PartialAddI))

    def key(self) -> tuple[Any, ...]:
        return (tuple((mach.key(), tuple(tuple(sorted(a)) for a in mach.sk_acquired)) for mach in self.ms),
                self.state.key())

    def clone(self) -> _Linked:
        copies = [mach.clone() for mach in self.ms]
        for new, old in zip(copies, self.ms, strict=True):
            new.sk_acquired = [set(a) for a in old.sk_acquired]
        return _Linked(copies, self.state.clone())

    def finish(self) -> None:
        for mach in self.ms:
            mach.finish()
        self.state.report_lost(self.ms[0].sink)


class _Cluster(_Several):
    """The CTAs of one thread-block cluster (`ir.Tiling.cluster`, linked as sim/cluster.py links them: the lead's
    cluster barriers are every CTA's, its multicast copies land in every CTA) as one state machine, with the
    explorer's interface of `Machine`: every interleaving of the CTAs' actions is explored, as `run_cluster` samples
    them. Without a cluster barrier before exit (`ir.Tiling.exit_sync`), a CTA exits as soon as its partitions
    finish."""

    def __init__(self, machines: list[Machine]) -> None:
        super().__init__(machines)
        link(machines)
        self.early_exit = not machines[0].prog.module.tiling.exit_sync

    def enabled(self) -> list[Any]:
        return [(kind, (c, x)) for c, mach in enumerate(self.ms) for kind, x in mach.enabled()]

    def apply(self, act: Any) -> None:
        super().apply(act)
        if self.early_exit:
            for mach in self.ms:
                if not mach.exited and mach.done():
                    mach.leave()

    def key(self) -> tuple[Any, ...]:
        return tuple((mach.key(), mach.exited, tuple(sorted(mach.unobserved))) for mach in self.ms)

    def clone(self) -> _Cluster:
        copies = [mach.clone() for mach in self.ms]
        for new, old in zip(copies, self.ms, strict=True):
            new.exited, new.unobserved = old.exited, dict(old.unobserved)
        return _Cluster(copies)  # (re-linked: the copies share the lead copy's cluster barriers)

    def finish(self) -> None:
        for mach in self.ms:
            mach.finish()


def _eager(mach: Any, path: Path, por: bool) -> Path:
    """Take every enabled local instruction at once (see the module docstring)."""
    moved = por
    while moved:
        moved = False
        for i in range(len(mach.pc)):
            while mach.local(i) and mach.runnable(i):
                act = (0, i)
                mach.apply(act)
                path = (act, path)
                moved = True
    return path


def _replay(root: Callable[[FindingSink], Any], path: Path) -> tuple[str, ...]:
    acts: list[Action] = []
    while path is not None:
        acts.append(path[0])
        path = path[1]
    mach = root(FindingSink())
    lines = []
    for act in reversed(acts):
        lines.append(mach.describe(act))
        mach.apply(act)
    return tuple(lines)


@dataclass
class _CtaSearch:
    """The depth-first search of one CTA's state graph (or of a stream-K launch's linked CTAs: `_Linked`)."""

    root: Callable[[FindingSink], Any]  # the initial state, reporting to a sink
    sink: FindingSink
    por: bool
    states: int = 0
    transitions: int = 0
    terminals: int = 0
    bound_hit: bool = False
    first: Path = None  # the path to the first new finding
    found: bool = False

    def _note(self, before: int, path: Path) -> None:
        if len(self.sink) > before and not self.found:
            self.first, self.found = path, True

    def run(self, max_states: int, stop_at_first: bool) -> None:
        root = self.root(self.sink)
        before = len(self.sink)
        stack: list[tuple[Any, Path]] = [(root, _eager(root, None, self.por))]
        self._note(before, stack[0][1])
        visited: set[int] = set()
        while stack and not (stop_at_first and self.found):
            mach, path = stack.pop()
            h = hash(mach.key())
            if h in visited:
                continue
            if len(visited) >= max_states:
                self.bound_hit = True
                break
            visited.add(h)
            acts = mach.enabled()
            if not acts:
                self.terminals += 1
                before = len(self.sink)
                mach.finish()
                self._note(before, path)
                continue
            for act in reversed(acts):  # reversed: the first enabled action is explored first
                c = mach.clone()
                before = len(self.sink)
                c.apply(act)
                p = _eager(c, (act, path), self.por)
                self.transitions += 1
                self._note(before, p)
                stack.append((c, p))
        self.states = len(visited)


def _cluster_root(progs: list[CtaProgram], sink: FindingSink) -> _Cluster:
    return _Cluster([Machine(p, sink) for p in progs])


def explore(module: ir.Module, m: int, n: int, k: int, *, max_states: int = 200_000,
            ctas: Iterable[int] | None = None, stop_at_first: bool = False, por: bool = True,
            mutate: Callable[[CtaProgram], CtaProgram] | None = None) -> ExploreReport:
    """Explore every schedule of `module` at problem size (m, n, k), protocol only.

    `max_states` bounds the distinct states per CTA; `bound_hit` in the report says whether it cut the
    search short. With `stop_at_first`, the search ends at the first finding. `por=False` turns the
    local-instruction reduction off (to cross-check it). A stream-K module's CTAs are explored together, all of them
    (keep its grid small); a cluster module's (`ir.Tiling.cluster`) one cluster at a time, each with all its CTAs.
    `mutate` edits each CTA's resolved program first: tests plant bugs below the IR with it.
    """
    t0 = time.perf_counter()
    t = module.tiling
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, stream_k=t.stream_k, cluster=t.cluster,
                       cluster_n=t.cluster_n)
    pids = representative_ctas(module, m, n) if ctas is None else program_ids("ctas", ctas, grid)
    pids = whole_clusters(module, pids)  # (a cluster's CTAs wait on each other: none is explored alone)
    sink = FindingSink()
    searches: list[_CtaSearch] = []
    counter: tuple[str, ...] = ()
    roots: list[Callable[[FindingSink], Any]] = []
    try:
        progs = [CtaProgram.build(module, Geometry.of(module, m, n, k, pid, grid))
                 for pid in (range(grid) if t.stream_k else pids)]
        progs = [mutate(p) for p in progs] if mutate is not None else progs
    except MalformedError as e:
        sink.add(SimFinding(FindingKind.MALFORMED, str(e), -1))
        progs = []
    if t.stream_k and progs:
        # (the CTAs of a stream-K launch wait on each other's flags: explored together, all of them)
        pids = tuple(range(grid))
        roots.append(lambda s: _Linked([Machine(p, s) for p in progs], StreamKState({}, set())))
    elif t.cluster > 1 and progs:
        # (a cluster's CTAs share barriers and multicast copies: each cluster explored whole, lead first)
        for at in range(0, len(progs), t.cluster):
            roots.append(functools.partial(_cluster_root, progs[at:at + t.cluster]))
    else:
        roots += [functools.partial(Machine, p) for p in progs]
    for root in roots:
        search = _CtaSearch(root, sink, por)
        search.run(max_states, stop_at_first)
        searches.append(search)
        if search.found and not counter:
            counter = _replay(root, search.first)
        if stop_at_first and search.found:
            break
    return ExploreReport(
        module.name, (m, n, k), pids, sum(s.states for s in searches), sum(s.transitions for s in searches),
        sum(s.terminals for s in searches), any(s.bound_hit for s in searches), sink.findings(), counter,
        time.perf_counter() - t0,
    )
