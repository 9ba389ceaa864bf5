"""One CTA as a state machine: partitions as agents, asynchronous copies and wgmma as pending events.

An *action* is either one partition executing its next instruction (when it is not blocked) or the
completion of one asynchronous operation: any in-flight TMA load (the copy engine may finish them in any
order), the oldest unfinished wgmma of a partition (wgmma groups complete in issue order), the oldest
unfinished TMA store of a partition (bulk groups retire in order), or the oldest unfinished TDM copy of a
gfx1250 partition (a warp's copies complete in issue order). A scheduler (`scheduler.py`, random;
`explore.py`, exhaustive) picks actions until none is enabled; then either every partition finished, or
the CTA is deadlocked.

Every check runs where the event happens and judges it by what the *program* has established, not by
the completion order the scheduler happened to pick: an async wgmma counts as reading its slots and
writing its accumulator until a ``wgmma_wait`` retires it, a TMA store as reading its buffer until a
``tma_store_wait`` retires it, and TMA data as unsynchronized until a wait acquires the barrier phase it
completed (see `barrier.py`). So a missing wait is found on every schedule, not only on unlucky ones.

``wgmma_wait N`` and ``tma_store_wait N`` block until the hardware has finished all but the newest N
of the partition's operations (the scheduler decides when each finishes), then retire them: the same
as "complete the oldest until N remain", with the completions free to interleave with other partitions.
A wgmma reads its operands when it finishes; the data move only when the machine carries `CtaData`.

gfx1250 has no mbarriers in its schedule: a ``tdm_wait N`` blocks until all but the newest N of the partition's
TDM copies finished, then retires them, which makes their data the partition's own warps' shares; only a
``sync_warps`` after it makes it every warp's (each warp copies and waits for its share of a block). The same
barrier orders the warps' wmma reads of a slot before the next copy into it. Both are checked per slot fill.

A CTA of a thread-block cluster (`ir.Tiling.cluster`) is one machine too, linked to the others of its cluster
(sim/cluster.py): the lead's multicast load is one copy in flight in the lead's machine, checked at issue against
every CTA's slot and landing in all of them (`_land`), and a cluster barrier is one `MBarrier` in all of the
machines. A non-lead CTA's releases on it name that CTA, so that the lead's own consumers' releases of the same
slot and fill never stand in for them. A multicast that finds its box already in a slot (another CTA's copy of it: a
multicast not the lead's alone) is DOUBLE_WRITE. Another CTA's write into this one (an arrival on its barrier, a
multicast landing on it) that no wait of this CTA observed before it exited (`leave`: sim/cluster.py lets a CTA exit
early where no cluster barrier comes before exit), or that comes after, is WRITE_AFTER_EXIT.

A fused epilogue's ``load_operand`` is a synchronous register load of read-only global memory, so it only
records which tile's block each operand's registers hold; ``apply_epilogue`` must find every graph operand
loaded for its block in the current tile, and a ``store_smem`` of an epilogue output the same tile's
``apply_epilogue`` of its block.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from warploom.ir import nodes as ir
from warploom.ir.raster import TMA_INNER_BYTES
from warploom.ir.warps import WarpMask, affine_basis, uncovered_rows
from warploom.sim.barrier import MBarrier, Token
from warploom.sim.events import EventKind, TimelineEvent
from warploom.sim.findings import FindingKind, FindingSink, SimFinding
from warploom.sim.memory import BufferState, SlotState
from warploom.sim.numerics import CtaData
from warploom.sim.program import (
    ApplyI,
    ArriveI,
    AtomicI,
    CommitI,
    CtaProgram,
    EarlyAccessI,
    EpilogueI,
    ExpectI,
    FenceI,
    FlagWaitI,
    FoldI,
    LoadI,
    LoadOperandI,
    LoadTmemI,
    MmaI,
    MmaWaitI,
    PartialAddI,
    PartialStoreI,
    PrefetchI,
    PromoteI,
    ScaleCopyI,
    Site,
    StoreScalesI,
    StoreSmemI,
    StoreTileI,
    StoreWaitI,
    SyncI,
    Tag,
    TcMmaI,
    TdmWaitI,
    TmaStoreI,
    WaitI,
    ZeroI,
)
from warploom.sim.tmem_scales import Flag, ScaleBuffers
from warploom.spec import Grouping

AGENT, LOAD, MMA, STORE, TDM = 0, 1, 2, 3, 4
# (AGENT, partition) / (LOAD, index in flight) / (MMA, partition) / (STORE, partition) / (TDM, partition)
Action = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Inflight:
    """An asynchronous operation issued by instruction `pc` of `agent` at step `issued`.

    For loads, `fill` is the slot fill it writes and `phase` the barrier's phase when it was issued; a multicast load's
    `peers` are the same (fill, phase) in each other CTA of the cluster (`Machine.others`), in rank order.
    """

    agent: int
    pc: int
    issued: int
    fill: int = -1
    phase: int = -1
    peers: tuple[tuple[int, int], ...] = ()

    def key(self) -> tuple[int, int, int, int]:
        return (self.agent, self.pc, self.fill, self.phase)


class Machine:
    """The state of one CTA. `enabled`/`apply` drive it; `finish` runs the end-of-CTA checks."""

    def __init__(self, prog: CtaProgram, sink: FindingSink, data: CtaData | None = None, record: bool = False):
        m = prog.module
        n = len(prog.traces)
        self.prog, self.sink, self.data = prog, sink, data
        self.pc = [0] * n
        # A cluster barrier (ir.Barriers.cluster) counts every CTA's arrivals: `cluster.link` shares the lead's.
        self.bars = {b.name: [MBarrier(b.count * (m.tiling.cluster if b.cluster else 1)) for _ in range(b.depth)]
                     for b in m.barriers}
        self.cluster_bars = frozenset(b.name for b in m.barriers if b.cluster)
        self.rank = prog.geo.rank
        # The CTAs of this one's cluster, lead first (`cluster.link`; empty outside a cluster): a multicast load of the
        # lead fills the others' slots, and a non-lead's barrier may await the lead's multicast copies.
        self.cluster: tuple[Machine, ...] = ()
        # Whether this CTA has exited (sim/cluster.py: its partitions finished, and no cluster barrier before exit
        # holds it until the others have): its shared memory and barriers are no longer its cluster's to write.
        self.exited = False
        # Other CTAs' writes into this one (an arrival on its barrier, a multicast landing on it) that no wait of this
        # CTA has observed yet, as (barrier, index, phase) -> (site, CTA, what): nothing orders them before its exit.
        self.unobserved: dict[tuple[str, int, int], tuple[Site, int, str]] = {}
        self.bar_rings = {b.name: b.rings for b in m.barriers}
        self.empty_bars = frozenset(b.name for b in m.barriers if b.purpose is ir.Purpose.EMPTY)
        self.slots = {r.name: [SlotState() for _ in range(r.depth)] for r in m.rings}
        self.bufs = {b.name: BufferState() for b in m.buffers}
        self.loads: list[Inflight] = []
        self.mmas: list[tuple[Inflight, ...]] = [()] * n  # un-retired wgmma, oldest first
        self.mma_done = [0] * n  # how many of them (a prefix) the hardware finished
        self.stores: list[tuple[Inflight, ...]] = [()] * n
        self.store_done = [0] * n
        self.tdm: list[tuple[Inflight, ...]] = [()] * n  # gfx1250: un-retired TDM copies, oldest first
        self.tdm_done = [0] * n  # how many of them (a prefix) the hardware finished
        # the warps that issue any of each partition's TDM copies (seed 004: a wait on others is IDLE_TDM_WAIT)
        self.tdm_issuers = [functools.reduce(int.__or__, (t.warps for t in tr if isinstance(t, LoadI) and t.tdm), 0)
                            for tr in prog.traces]
        self.tokens: list[frozenset[Token]] = [frozenset()] * n  # what each agent has acquired
        self.step = 0
        self.k_steps = 0
        self.blocked_at = [-1] * n
        self.events: list[TimelineEvent] | None = [] if record else None
        # Fused epilogue registers, per partition: the tile (index) each operand was last loaded in for a block
        # (operand, acc, cols), and the block (acc, cols, tile index) the last apply_epilogue computed. Both are
        # functions of the partition's pc (its own program prefix), so `key` need not hold them.
        g = m.spec.epilogue
        self.graph_operands = tuple(s.name for s in g.operands) if g is not None else ()
        # (a gate/up graph's operands over N: read at each pair's up block too)
        self.up_operands = tuple(s.name for s in g.operands if s.kind.varies_n) if g is not None else ()
        self.amax_node = g.amax() if g is not None and g.group_amax() is not None else None  # (its groups)
        self.loaded: list[dict[tuple[str, str, tuple[int, int]], int]] = [{} for _ in range(n)]
        self.applied: list[tuple[str, tuple[int, int], int] | None] = [None] * n
        # A fused quantization's running group amax, per partition: (acc, tile index, the output columns folded in).
        self.folded: list[tuple[str, int, frozenset[int]] | None] = [None] * n
        # Per partition: each staging buffer's prefetched block not yet loaded, as (operand, cols, tile index).
        self.staged: list[dict[str, tuple[str, tuple[int, int], int]]] = [{} for _ in range(n)]
        # Per partition: what each register accumulator holds, as (tile index, the K origins of the k-blocks summed
        # into it; _FOREIGN among them once another tile's sum was added). A function of the partition's own program
        # prefix, like `loaded`.
        self.acc_sum: list[dict[str, tuple[int, frozenset[int]]]] = [{} for _ in range(n)]
        # Stream-K (ir.Fixup): the workspace slots and flags all CTAs of a launch share (set by the simulator's
        # driver), and per partition the slots whose flags it has acquired.
        self.sk: StreamKState | None = None
        self.sk_acquired: list[set[tuple[int, int]]] = [set() for _ in range(n)]
        self.scales = ScaleBuffers.of(m)  # sm_100a: tensor-memory scale buffers (seed 001)

    # ------------------------------------------------------------------------------------------
    # scheduling interface

    def done(self) -> bool:
        return all(pc == len(t) for pc, t in zip(self.pc, self.prog.traces, strict=True))

    def others(self) -> tuple[Machine, ...]:
        """The other CTAs of this one's cluster, in rank order: those a multicast of this CTA also fills."""
        return tuple(p for p in self.cluster if p is not self)

    def runnable(self, i: int) -> bool:
        """Whether partition `i` can execute its next instruction now."""
        tr = self.prog.traces[i]
        pc = self.pc[i]
        if pc == len(tr):
            return False
        ins = tr[pc]
        if isinstance(ins, WaitI):
            return self.bars[ins.barrier][ins.index].passes(ins.parity)
        if isinstance(ins, MmaWaitI):
            return len(self.mmas[i]) - self.mma_done[i] <= ins.pending
        if isinstance(ins, StoreWaitI):
            return len(self.stores[i]) - self.store_done[i] <= ins.pending
        if isinstance(ins, TdmWaitI):  # each waiting warp counts its own copies in flight
            flying = [self._load_of(e).warps for e in self.tdm[i][self.tdm_done[i]:]]
            return all(sum(b >> w & 1 for b in flying) <= ins.pending for w in WarpMask(ins.warps).members)
        if isinstance(ins, FlagWaitI):
            return self.sk is not None and ins.flag in self.sk.flags
        return True

    def enabled(self) -> list[Action]:
        acts: list[Action] = []
        n = len(self.pc)
        for i in range(n):
            if self.runnable(i):
                acts.append((AGENT, i))
            elif self.blocked_at[i] < 0 and self.pc[i] < len(self.prog.traces[i]):
                self.blocked_at[i] = self.step
        acts.extend((LOAD, j) for j in range(len(self.loads)))
        acts.extend((MMA, i) for i in range(n) if len(self.mmas[i]) > self.mma_done[i])
        acts.extend((STORE, i) for i in range(n) if len(self.stores[i]) > self.store_done[i])
        acts.extend((TDM, i) for i in range(n) if len(self.tdm[i]) > self.tdm_done[i])
        return acts

    def local(self, i: int) -> bool:
        """Whether partition `i`'s next instruction touches only its own state (registers, private
        buffers): it commutes with every other action, so the explorer need not branch on it."""
        tr = self.prog.traces[i]
        pc = self.pc[i]
        if pc == len(tr):
            return False
        ins = tr[pc]
        if isinstance(ins, PromoteI):
            return ins.scales is None  # a blockwise promotion reads shared scale slots
        if isinstance(ins, (ZeroI, EpilogueI, FenceI, LoadOperandI, PrefetchI, ApplyI, FoldI, StoreScalesI,
                            AtomicI,  # (an atomic max commutes with every other CTA's)
                            EarlyAccessI)):  # (a report only)
            return True
        if isinstance(ins, (StoreSmemI, TmaStoreI)):
            return ins.buffer in self.prog.private[i]
        if isinstance(ins, StoreWaitI):
            return self.runnable(i) and all(self._store_of(e).buffer in self.prog.private[i] for e in self.stores[i])
        return False

    def apply(self, act: Action) -> None:
        kind, x = act
        if kind == AGENT:
            self._step_agent(x)
        elif kind == LOAD:
            self._land(x)
        elif kind == MMA:
            self._complete_mma(x)
        elif kind == TDM:
            self._land_tdm(x)
        else:
            self._complete_store(x)
        self.step += 1

    def describe(self, act: Action) -> str:
        """An action in words, for counterexample traces."""
        kind, x = act
        if kind == AGENT:
            return f"{self.prog.traces[x][self.pc[x]].site.where()}"
        if kind == LOAD:
            ins = self._load_of(self.loads[x])
            return f"TMA lands {ins.tag} in {ins.ring}[{ins.slot}] ({ins.site.where()})"
        if kind == MMA:
            e = self.mmas[x][self.mma_done[x]]
            mi = self.prog.traces[x][e.pc]
            what = {TcMmaI: "tcgen05 MMA finishes", CommitI: "tcgen05 commit arrives",
                    ScaleCopyI: "tcgen05 copy finishes"}.get(type(mi), "wgmma finishes")
            return f"{what} ({mi.site.where()})"
        if kind == TDM:
            ins = self._load_of(self.tdm[x][self.tdm_done[x]])
            return f"TDM copy lands {ins.tag} in {ins.ring}[{ins.slot}] ({ins.site.where()})"
        e = self.stores[x][self.store_done[x]]
        return f"TMA store finishes ({self.prog.traces[x][e.pc].site.where()})"

    def key(self) -> tuple[Any, ...]:
        """A canonical, hashable state (protocol state only: no data, no step counters)."""
        return (
            tuple(self.pc),
            tuple(b.key() for bs in self.bars.values() for b in bs),
            tuple(s.key() for ss in self.slots.values() for s in ss),
            tuple(b.key() for b in self.bufs.values()),
            tuple(sorted(e.key() for e in self.loads)),
            tuple(tuple(e.pc for e in q) for q in self.mmas), tuple(self.mma_done),
            tuple(tuple(e.pc for e in q) for q in self.stores), tuple(self.store_done),
            tuple(tuple(e.key() for e in q) for q in self.tdm), tuple(self.tdm_done),
            tuple(self.tokens), self.scales.key(),
        )

    def clone(self) -> Machine:
        """A copy for the explorer (protocol state only; no data, no timeline)."""
        c = Machine.__new__(Machine)
        c.prog, c.sink, c.data, c.events = self.prog, self.sink, None, None
        c.pc = list(self.pc)
        c.bars = {k: [b.clone() for b in v] for k, v in self.bars.items()}
        c.bar_rings, c.empty_bars = self.bar_rings, self.empty_bars
        c.cluster_bars, c.rank, c.cluster = self.cluster_bars, self.rank, ()  # (explore's _Cluster re-links copies)
        c.exited, c.unobserved = False, {}
        c.slots = {k: [s.clone() for s in v] for k, v in self.slots.items()}
        c.bufs = {k: b.clone() for k, b in self.bufs.items()}
        c.loads = list(self.loads)
        c.mmas, c.mma_done = list(self.mmas), list(self.mma_done)
        c.stores, c.store_done = list(self.stores), list(self.store_done)
        c.tdm, c.tdm_done, c.tdm_issuers = list(self.tdm), list(self.tdm_done), self.tdm_issuers
        c.tokens = list(self.tokens)
        c.step, c.k_steps = self.step, self.k_steps
        c.blocked_at = list(self.blocked_at)
        c.graph_operands = self.graph_operands
        c.up_operands = self.up_operands
        c.amax_node = self.amax_node
        c.loaded = [dict(d) for d in self.loaded]
        c.applied = list(self.applied)
        c.staged = [dict(d) for d in self.staged]
        c.acc_sum = [dict(d) for d in self.acc_sum]
        c.scales = self.scales.clone()
        return c

    # ------------------------------------------------------------------------------------------
    # findings and timeline

    def _flag(self, kind: FindingKind, site: Site | None, msg: str, barrier: str | None = None,
              phase: int | None = None) -> None:
        self.sink.add(SimFinding(
            kind, msg, self.prog.geo.pid,
            partition=site.partition if site else "", op=site.text if site else "",
            tile=str(site.tile) if site and site.tile is not None else None, k=site.k if site else None,
            barrier=barrier, phase=phase, step=self.step,
        ))

    def _event(self, site: Site, start: int, end: int, kind: EventKind) -> None:
        if self.events is not None:
            self.events.append(TimelineEvent(site.partition, site.text, start, end, kind, self.prog.geo.pid,
                                             site.tile.index if site.tile is not None else None, site.k))

    def _site(self, e: Inflight) -> Site:
        return self.prog.traces[e.agent][e.pc].site

    def _load_of(self, e: Inflight) -> LoadI:
        ins = self.prog.traces[e.agent][e.pc]
        assert isinstance(ins, LoadI)
        return ins

    def _store_of(self, e: Inflight) -> TmaStoreI:
        ins = self.prog.traces[e.agent][e.pc]
        assert isinstance(ins, TmaStoreI)
        return ins

    # ------------------------------------------------------------------------------------------
    # partitions

    def _step_agent(self, i: int) -> None:
        tr = self.prog.traces[i]
        pc = self.pc[i]
        ins = tr[pc]
        _EXEC[type(ins)](self, i, pc, ins)
        if self.events is not None:
            blocked = self.blocked_at[i]
            if blocked >= 0:
                self._event(ins.site, blocked, self.step + 1, EventKind.WAIT)
            else:
                self._event(ins.site, self.step, self.step + 1, EventKind.OP)
        self.blocked_at[i] = -1
        self.pc[i] = pc + 1
        if pc + 1 == len(tr):
            self._exit(i, ins.site)

    def _wait(self, i: int, pc: int, ins: WaitI) -> None:
        bar = self.bars[ins.barrier][ins.index]
        name = f"{ins.barrier}[{ins.index}]"
        if bar.phase != ins.phase + 1:
            why = ("before that phase completed" if bar.phase <= ins.phase else
                   f"although that phase completed {bar.phase - ins.phase - 1} phases ago")
            self._flag(FindingKind.PHASE_ALIAS, ins.site,
                       f"{ins.site.where()} waits on {name} for phase {ins.phase} (parity {ins.parity}) and passes "
                       f"{why}: the barrier has completed {bar.phase} phases, and only the parity is compared",
                       name, ins.phase)
        self.tokens[i] = self.tokens[i] | bar.last_tokens
        if self.unobserved:  # (other CTAs' writes in the phases this wait observed are ordered before this CTA's exit)
            self.unobserved = {k: v for k, v in self.unobserved.items()
                               if not (k[:2] == (ins.barrier, ins.index) and k[2] < bar.phase)}

    def leave(self) -> None:
        """This CTA of a cluster exits with no cluster barrier before (sim/cluster.py): each write of another CTA into
        it so far must be one a wait of this CTA observed, or nothing orders it before the exit; a later one is
        found as it comes (`_arrive`, `_land`)."""
        self.exited = True
        me = self.prog.geo.pid
        for (barrier, index, phase), (site, pid, what) in self.unobserved.items():
            self._flag(FindingKind.WRITE_AFTER_EXIT, site,
                       f"{site.where()} of CTA {pid} {what} CTA {me}'s {barrier}[{index}] in its phase {phase}, which "
                       f"no wait of CTA {me} observed before CTA {me} exited: nothing orders that write before the "
                       f"exit", f"{barrier}[{index}]", phase)

    def _arrive(self, i: int, pc: int, ins: ArriveI | ExpectI) -> None:
        bar = self.bars[ins.barrier][ins.index]
        name = f"{ins.barrier}[{ins.index}]"
        for ring in self.bar_rings.get(ins.barrier, ()):
            slots = self.slots.get(ring)
            if slots is None or ins.index >= len(slots):
                continue
            s = slots[ins.index]
            for r in s.readers:
                if r[0] == i:
                    rs = self.prog.traces[i][r[1]].site
                    self._flag(FindingKind.RELEASE_WHILE_READING, ins.site,
                               f"{ins.site.where()} releases {ring}[{ins.index}] on {name} while {rs.where()} "
                               f"may still read it: no wgmma_wait has retired that wgmma",
                               name, bar.phase)
            if s.fill >= 0 and i in s.read_by:
                # A non-lead CTA's release on the lead's barrier names its CTA: the lead's own consumers release the
                # same ring, slot and fill number, and must not stand in for it.
                who = f"{ring}@{self.rank}" if self.rank and ins.barrier in self.cluster_bars else ring
                bar.publish(("R", who, ins.index, s.fill))
            if s.fill >= 0 and s.loader == i and ("F", ring, ins.index, s.fill) in self.tokens[i]:
                # data this partition stored itself (a sync copy): its arrive releases it to the waiters
                bar.publish(("F", ring, ins.index, s.fill))
            if s.fill >= 0 and ins.barrier in self.empty_bars:
                s.released_by = s.released_by | {i}
        holder = self.cluster[0] if self.cluster and ins.barrier in self.cluster_bars else self
        if holder is not self:
            holder._remote(ins.site, self.prog.geo.pid, "arrives on", ins.barrier, ins.index)
        count = 1
        if isinstance(ins, ExpectI):
            bar.expect(ins.nbytes)
        else:
            count = ins.count
        if count > bar.pending:
            self._flag(FindingKind.ARRIVAL_OVERFLOW, ins.site,
                       f"{ins.site.where()} arrives with count {count} on {name}, which is {bar.describe()}: more "
                       f"arrivals than its count {bar.count} allows in phase {bar.phase}", name, bar.phase)
        phase = bar.phase
        if bar.arrive(count, self.prog.names[i]):
            self._completed(ins.barrier, ins.index, phase)

    def _completed(self, barrier: str, index: int, phase: int) -> None:
        """Phase `phase` of barrier[index] just completed: no load issued on it may still be in flight (nor another
        CTA's multicast into this one, at the phase this CTA's barrier had when it was issued)."""
        flying = [(self._load_of(e), e.phase, e.issued) for e in self.loads]
        for src in self.others():
            me = src.others().index(self)
            flying += [(ld, e.peers[me][1], e.issued) for e in src.loads if (ld := src._load_of(e)).multicast]
        for ld, issued_in, issued in flying:
            if ld.barrier == barrier and ld.index == index and issued_in <= phase:
                self._flag(FindingKind.TX_MISMATCH, ld.site,
                           f"{barrier}[{index}] completed phase {phase} while {ld.site.where()}, issued at step "
                           f"{issued} in that phase, was still in flight: expect-tx announced fewer "
                           f"bytes than the phase's loads bring, so waiters may read {ld.ring}[{ld.slot}] before "
                           f"{ld.tag} lands", f"{barrier}[{index}]", phase)

    def _load(self, i: int, pc: int, ins: LoadI) -> None:
        s = self.slots[ins.ring][ins.slot]
        name = f"{ins.ring}[{ins.slot}]"
        if ins.tdm and s.fill >= 0 and i in s.read_by and i not in s.released_by:
            self._flag(FindingKind.UNSYNCED_WARPS, ins.site,
                       f"{ins.site.where()} copies {ins.tag} into {name}, which {self.prog.names[i]}'s warps read "
                       f"({s.describe()}) with no sync_warps since: a warp may still be reading it")
        self._check_tma_origin(ins, name)
        fill = self._overwrite(i, ins)
        if ins.tdm:  # gfx1250: completes in the partition's issue order; a tdm_wait retires it
            self._check_issuers(ins, name)
            self.tdm[i] = self.tdm[i] + (Inflight(i, pc, self.step, fill),)
        elif ins.barrier is None or ins.sync:  # a synchronous load: lands now, seen by its issuer
            s.landed, s.landed_at = True, self.step
            self.tokens[i] = self.tokens[i] | {("F", ins.ring, ins.slot, fill)}
            if self.data is not None:
                self.data.land(ins.ring, ins.slot, ins.tag)
        else:
            bar = self.bars[ins.barrier][ins.index]
            if ins.tracked:  # cp.async.mbarrier.arrive: the phase now also waits for this copy
                bar.pending += 1
            # A multicast (the cluster's lead's) is one copy that writes the slot of every CTA of the cluster.
            peers = tuple((self._overwrite(i, ins, p), p.bars[ins.barrier][ins.index].phase)
                          for p in self.others()) if ins.multicast else ()
            self.loads.append(Inflight(i, pc, self.step, fill, bar.phase, peers))

    def _overwrite(self, i: int, ins: LoadI, into: Machine | None = None) -> int:
        """Load `ins` of partition `i` starts a new fill of its slot in this CTA or, a multicast's, in the cluster's
        CTA `into`, and gets its number: no wgmma may still read the slot (`_fill` checks the rest)."""
        dst = self if into is None else into
        s = dst.slots[ins.ring][ins.slot]
        name = f"{ins.ring}[{ins.slot}]" if into is None else f"CTA {into.prog.geo.pid}'s {ins.ring}[{ins.slot}]"
        # The same box again in the same slot from another CTA's copy (a cluster's multicast issued by more than the
        # lead): one finding for the copy that should not be, in place of the overwrite findings it implies. (The
        # same CTA's copy of the same box is its next fill of the released slot: a cluster's consecutive tiles may
        # share the multicast box, and `_fill` checks that refill like any other.)
        double = ins.multicast and s.fill >= 0 and s.tag == ins.tag and s.source != self.prog.geo.pid
        if double:
            self._flag(FindingKind.DOUBLE_WRITE, ins.site,
                       f"{ins.site.where()} of CTA {self.prog.geo.pid} multicasts {ins.tag} into {name}, which CTA "
                       f"{s.source}'s copy of the same box already fills (fill #{s.fill}, "
                       f"{'landed' if s.landed else 'in flight'}): the slot is written twice and "
                       f"{ins.barrier}[{ins.index}] gets the box's {ins.nbytes} bytes twice")
        for r in s.readers if not double else ():
            rs = dst.prog.traces[r[0]][r[1]].site
            self._flag(FindingKind.OVERWRITE_WHILE_READ, ins.site,
                       f"{ins.site.where()} loads {ins.tag} into {name} while {rs.where()} may still read "
                       f"{name}: no wgmma_wait has retired that wgmma")
        return self._fill(i, ins.site, ins.ring, ins.slot, ins.tag, lambda: f"loads {ins.tag} into {name} while its "
                          f"previous load ({s.describe()}) is still in flight", "wgmma", into, checked=not double)

    def _check_tma_origin(self, ins: LoadI, name: str) -> None:
        """A TMA load of A or B (a tag's axes are in storage order: origin[1] is the innermost coordinate) must start
        at a multiple of 16 bytes along it; the hardware faults otherwise, whatever the descriptor allows."""
        if ins.tdm or ins.sync or ins.tracked or ins.tag.tensor not in ("A", "B"):
            return
        dt = self.prog.module.ring(ins.ring).dtype
        inner = ins.tag.origin[1] * dt.bits // 8
        if inner % TMA_INNER_BYTES:
            self._flag(FindingKind.TMA_MISALIGNED, ins.site,
                       f"{ins.site.where()} loads {ins.tag} into {name} at innermost coordinate {ins.tag.origin[1]} "
                       f"({inner} bytes), not a multiple of {TMA_INNER_BYTES} bytes: an illegal instruction on the GPU")

    def _mma(self, i: int, pc: int, ins: MmaI) -> None:
        self.k_steps += 1
        if not ins.is_async:  # a synchronous wgmma waits for the partition's earlier groups first
            while len(self.mmas[i]) > self.mma_done[i]:
                self._complete_mma(i)
            self._retire_mmas(i, len(self.mmas[i]))
        for ring, si, tag in ((ins.a_ring, ins.a_slot, ins.a_tag), (ins.b_ring, ins.b_slot, ins.b_tag)):
            s = self._read_slot(i, ins.site, ring, si, tag)
            if ins.is_async:
                s.readers = s.readers + ((i, pc),)
        if ins.is_async:
            self.mmas[i] = self.mmas[i] + (Inflight(i, pc, self.step),)
        elif self.data is not None:
            self.data.mma(i, ins)
        k_at = ins.a_tag.axes.index("k")  # (an M-major A's blocks are tagged (k, m))
        self._sum_into(i, ins.site, ins.acc, frozenset({ins.a_tag.origin[k_at]}), ins.use_acc)

    # ------------------------------------------------------------------------------------------
    # accumulator contents: each read of a register accumulator must find exactly this tile's sum over its k-blocks

    def _sum_into(self, i: int, site: Site, acc: str, ks: frozenset[int], accumulate: bool) -> None:
        """Partition `i` adds (or, not `accumulate`, writes) the k-blocks `ks` of the current tile into `acc`."""
        assert site.tile is not None
        tile = site.tile.index
        held = self.acc_sum[i].get(acc)
        if not accumulate:
            self.acc_sum[i][acc] = (tile, ks)
        elif held is None or held[0] != tile:  # adding to nothing, or to another tile's sum
            self.acc_sum[i][acc] = (tile, ks | {_FOREIGN})
        else:
            self.acc_sum[i][acc] = (tile, held[1] | ks)

    def _full_sum(self, site: Site) -> frozenset[int]:
        """The K origins of every k-block of the current tile (its work unit's, with split-K)."""
        assert site.tile is not None
        g, bk, t = self.prog.geo, self.prog.module.tiling.bk, site.tile
        if self.prog.module.tiling.grouping is Grouping.K_OFFSETS:  # its group's k-blocks, from the group's K start
            assert t.k_hi is not None
            return frozenset(t.k0 + kk * bk for kk in range(t.k_hi))
        first, count = g.unit_range(t)
        return frozenset((first + kk) * bk for kk in range(count))

    def _sum_check(self, i: int, site: Site, acc: str, verb: str) -> None:
        if self.prog.geo.k_tiles == 0 or site.tile is None:
            return  # (an empty K launches nothing)
        held = self.acc_sum[i].get(acc)
        want = self._full_sum(site)
        if held is not None and held == (site.tile.index, want):
            return
        bk = self.prog.module.tiling.bk
        if held is None:
            what = "nothing this partition computed"
        elif _FOREIGN in held[1]:
            what = "a sum that started from another tile's (or an unset) accumulator"
        elif held[0] != site.tile.index:
            what = f"tile #{held[0]}'s sum"
        else:
            got = sorted(k // bk for k in held[1])
            what = f"this tile's sum over k-blocks {got[:8]}{'...' if len(got) > 8 else ''} only"
        self._flag(FindingKind.ACC_INCOMPLETE, site,
                   f"{site.where()} {verb} {acc}, which holds {what}: it must hold this tile's sum over all "
                   f"{len(want)} of its k-blocks")

    def _read_slot(self, i: int, site: Site, ring: str, si: int, tag: Tag) -> SlotState:
        """Partition `i` reads ring[si], which must hold `tag`, landed, acquired by one of its waits."""
        s = self.slots[ring][si]
        name = f"{ring}[{si}]"
        if i in s.released_by and s.land_barrier == _TDM:
            # gfx1250: the barrier that marked it released does not end the fill's life; reading it again is fine, and
            # only means a barrier must come again before a copy may overwrite it
            s.released_by = s.released_by - {i}
        elif i in s.released_by:
            self._flag(FindingKind.READ_AFTER_RELEASE, site,
                       f"{site.where()} reads {name} ({s.describe()}) after {self.prog.names[i]} released it on the "
                       "empty barrier: the producer may already be refilling it")
        if s.fill < 0:
            self._flag(FindingKind.READ_BEFORE_LANDED, site,
                       f"{site.where()} reads {name}, which no load has filled yet (it needs {tag})")
        elif not s.landed:
            self._flag(FindingKind.READ_BEFORE_LANDED, site,
                       f"{site.where()} reads {name} before its data landed ({s.describe()})")
        elif ("F", ring, si, s.fill) not in self.tokens[i] and ("W", ring, si, s.fill) in self.tokens[i]:
            self._flag(FindingKind.UNSYNCED_WARPS, site,
                       f"{site.where()} reads {name} ({s.describe()}) after a tdm_wait retired its copy but with no "
                       "sync_warps since: each warp waited only for its own share of the block")
        elif ("F", ring, si, s.fill) not in self.tokens[i] and s.land_barrier == _TDM:
            self._flag(FindingKind.READ_UNACQUIRED, site,
                       f"{site.where()} reads {name} ({s.describe()}), whose copy no tdm_wait of "
                       f"{self.prog.names[i]} retired: the warps cannot know it landed")
        elif ("F", ring, si, s.fill) not in self.tokens[i]:  # (a synchronous load hands its issuer the token)
            self._flag(FindingKind.READ_UNACQUIRED, site,
                       f"{site.where()} reads {name} ({s.describe()}, completing phase {s.land_phase} of "
                       f"{s.land_barrier}) but {self.prog.names[i]} never passed a wait that observed that phase",
                       s.land_barrier, s.land_phase)
        if s.fill >= 0 and s.tag != tag:
            self._flag(FindingKind.WRONG_TILE, site,
                       f"{site.where()} reads {name} holding {s.tag} (fill #{s.fill}) but this iteration needs {tag}")
        s.read_by = s.read_by | {i}
        return s

    def _retire_mmas(self, i: int, n: int) -> None:
        """The `n` oldest wgmma of partition `i` are known complete (a wgmma_wait returned)."""
        q = self.mmas[i]
        for e in q[:n]:
            ins = self.prog.traces[i][e.pc]
            assert isinstance(ins, MmaI)
            for ring, si in ((ins.a_ring, ins.a_slot), (ins.b_ring, ins.b_slot)):
                s = self.slots[ring][si]
                s.readers = tuple(r for r in s.readers if r != (i, e.pc))
        self.mmas[i] = q[n:]
        self.mma_done[i] -= n

    def _mma_wait(self, i: int, pc: int, ins: MmaWaitI) -> None:
        self._retire_mmas(i, max(0, len(self.mmas[i]) - ins.pending))

    def _acc_check(self, i: int, site: Site, accs: tuple[str, ...], verb: str) -> None:
        for e in self.mmas[i]:
            mi = self.prog.traces[i][e.pc]
            if isinstance(mi, MmaI) and mi.acc in accs:  # (tcgen05 MMAs write tensor memory, not registers)
                self._flag(FindingKind.ACC_RACE, site,
                           f"{site.where()} {verb} {mi.acc} while {mi.site.where()}, issued at step {e.issued}, "
                           f"may still write it: no wgmma_wait pending=0 retired it")
                return

    # ------------------------------------------------------------------------------------------
    # stream-K fixup (ir.Fixup): partials through the workspace slots, each behind its flag

    def _sk_store(self, i: int, pc: int, ins: PartialStoreI) -> None:
        self._acc_check(i, ins.site, ins.accs, "stores")
        assert self.sk is not None and ins.site.tile is not None
        old = self.sk.slots.get(ins.flag)
        if old is not None and not old.added:
            self._flag(FindingKind.SK_SLOT_REUSED, ins.site,
                       f"{ins.site.where()} stores its partial into workspace slot {ins.flag}, which still holds "
                       f"{old.what} that no finisher has added")
        data = {a: self.data.accs[i][a].clone() for a in ins.accs} if self.data is not None else {}
        sums = {a: self.acc_sum[i].get(a, (-1, frozenset({_FOREIGN})))[1] for a in ins.accs}
        self.sk.slots[ins.flag] = Partial(ins.site.tile.tile_id, sums, data, f"CTA {self.prog.geo.pid}'s partial of "
                                          f"tile id {ins.site.tile.tile_id}")
        self.sk.flags.add(ins.flag)

    def _sk_wait(self, i: int, pc: int, ins: FlagWaitI) -> None:
        self.sk_acquired[i].add(ins.flag)

    def _sk_add(self, i: int, pc: int, ins: PartialAddI) -> None:
        self._acc_check(i, ins.site, ins.accs, "adds to")
        assert self.sk is not None and ins.site.tile is not None
        got = self.sk.slots.get(ins.flag)
        if ins.flag not in self.sk_acquired[i] or got is None:
            self._flag(FindingKind.SK_UNSYNCED, ins.site,
                       f"{ins.site.where()} adds workspace slot {ins.flag}, " + (
                           "which no contributor has stored" if got is None else "whose flag it never acquired"))
            if got is None:
                return
        if got.tile_id != ins.site.tile.tile_id or got.added:
            self._flag(FindingKind.SK_WRONG_PARTIAL, ins.site,
                       f"{ins.site.where()} adds {got.what}" + (" a second time" if got.added else
                                                                 f" to tile id {ins.site.tile.tile_id}"))
        for a in ins.accs:
            held = self.acc_sum[i].get(a)
            if held is not None and held[1] & got.sums[a]:
                self._flag(FindingKind.SK_WRONG_PARTIAL, ins.site,
                           f"{ins.site.where()} adds {got.what} to {a}, which already holds some of its k-blocks")
            self._sum_into(i, ins.site, a, got.sums[a], True)
            if self.data is not None and a in got.data:
                self.data.accs[i][a] = self.data.accs[i][a] + got.data[a]
        got.added = True
        self.sk.flags.discard(ins.flag)  # reset for the next launch
        self.sk_acquired[i].discard(ins.flag)

    def _tc_mma(self, i: int, pc: int, ins: TcMmaI) -> None:
        """sm_100a: issue a tcgen05 MMA. It reads its A and B slots until it completes (then its release arrives),
        and writes its tensor-memory slot: a tile's first MMA starts a new fill of the slot, which must have been
        drained by the epilogue and released to this partition; later ones add to the fill this partition started
        for the same tile. The fill lands at the commit that follows."""
        self.k_steps += 1
        # (seed 000: its tensor-memory scale slots are read the same way, acquired through scale_ready)
        for ring, si, tag in ((ins.a_ring, ins.a_slot, ins.a_tag), (ins.b_ring, ins.b_slot, ins.b_tag),
                              *ins.scale_slots):
            s = self._read_slot(i, ins.site, ring, si, tag)
            s.readers = s.readers + ((i, pc),)
        s = self.slots[ins.acc_ring][ins.acc_slot]
        name = f"{ins.acc_ring}[{ins.acc_slot}]"
        if ins.accumulate:
            if s.fill < 0 or s.loader != i or s.tag != ins.acc_tag:
                self._flag(FindingKind.WRONG_TILE, ins.site,
                           f"{ins.site.where()} adds to {name}, which holds {s.describe()}, not the accumulator this "
                           f"partition started for {ins.acc_tag}")
            elif s.landed:
                self._flag(FindingKind.ACC_RACE, ins.site,
                           f"{ins.site.where()} adds to {name} after its commit published it: the epilogue may be "
                           "reading it")
        else:
            self._fill(i, ins.site, ins.acc_ring, ins.acc_slot, ins.acc_tag, lambda: f"starts tile accumulator "
                       f"{ins.acc_tag} in {name} while its previous fill ({s.describe()}) was never committed",
                       "partition")
        self._scale_flags(ins.site, self.scales.mma_issued(i, pc, ins.site.where(), ins.scales))
        self.mmas[i] = self.mmas[i] + (Inflight(i, pc, self.step),)

    def _fill(self, i: int, site: Site, ring: str, si: int, tag: Tag, unlanded: Callable[[], str], reader: str,
              into: Machine | None = None, checked: bool = True) -> int:
        """Partition `i` starts a new fill of ring[si] with `tag` (a TMA load, or a tile's first tcgen05 MMA into a
        tensor-memory accumulator) and gets its number. The previous fill must have landed (else the finding says
        `unlanded()`, built only then), been read (by a `reader`), and been released to `i`. `into`: the cluster's
        CTA whose slot a multicast of this lead fills; its readers must have released it on a cluster barrier
        (a release token naming that CTA, `_arrive`). Not `checked`: the caller reported the overwrite already."""
        dst = self if into is None else into
        s = dst.slots[ring][si]
        name = f"{ring}[{si}]" if into is None else f"CTA {dst.prog.geo.pid}'s {ring}[{si}]"
        key = ring if into is None else f"{ring}@{into.rank}"
        others = s.read_by - {i} if into is None else s.read_by
        if s.fill >= 0 and checked:
            if not s.landed:
                self._flag(FindingKind.OVERWRITE_UNRELEASED, site, f"{site.where()} {unlanded()}")
            elif not s.read_by:
                self._flag(FindingKind.OVERWRITE_UNRELEASED, site,
                           f"{site.where()} overwrites {name} ({s.describe()}) before any {reader} read it")
            elif others and ("R", key, si, s.fill) not in self.tokens[i]:
                cta = "" if into is None else f"CTA {dst.prog.geo.pid}'s "
                who = ", ".join(cta + dst.prog.names[a] for a in sorted(others))
                self._flag(FindingKind.OVERWRITE_UNRELEASED, site,
                           f"{site.where()} overwrites {name} ({s.describe()}) that {who} read but has not "
                           f"released to {self.prog.names[i]}: no wait of {self.prog.names[i]} observed a barrier "
                           f"phase in which {who} arrived after that read")
        fill = s.nfills
        s.fill, s.nfills, s.tag, s.landed, s.loader = fill, fill + 1, tag, False, i if into is None else -1
        s.source = self.prog.geo.pid
        s.read_by, s.released_by, s.issued, s.landed_at = frozenset(), frozenset(), self.step, -1
        # Tokens of older fills of this slot can never be checked again; dropping them keeps states small.
        dst.tokens = _drop(dst.tokens, ring, si)
        if into is not None:
            self.tokens = _drop(self.tokens, key, si)
        return fill

    def _scale_copy(self, i: int, pc: int, ins: ScaleCopyI) -> None:
        """sm_100a: tcgen05_copy joins the partition's tcgen05 queue; it reads its slot until it completes."""
        s = self._read_slot(i, ins.site, ins.ring, ins.slot, ins.tag)
        s.readers = s.readers + ((i, pc),)
        self.scales.copy_issued(i, ins.dst, ins.tag)
        self.mmas[i] = self.mmas[i] + (Inflight(i, pc, self.step),)

    def _scale_flags(self, site: Site, flags: list[Flag]) -> None:
        for kind, msg in flags:
            self._flag(kind, site, msg)

    def _commit(self, i: int, pc: int, ins: CommitI) -> None:
        """sm_100a: tcgen05_commit joins the partition's MMAs in order; it arrives when they have completed."""
        self.mmas[i] = self.mmas[i] + (Inflight(i, pc, self.step),)

    def _load_tmem(self, i: int, pc: int, ins: LoadTmemI) -> None:
        self._read_slot(i, ins.site, ins.acc_ring, ins.slot, ins.tag)
        # (tensor memory's own sum is checked by the MMA warp's WRONG_TILE and ring checks: the block is that tile's)
        assert ins.site.tile is not None
        # (a partial holds its one k-block; an accumulator the tile's whole sum)
        ks = self._full_sum(ins.site) if ins.k is None else frozenset({ins.k})
        self.acc_sum[i][ins.acc] = (ins.site.tile.index, ks)
        if self.data is not None:
            self.data.load_tmem(i, ins)

    def _promote(self, i: int, pc: int, ins: PromoteI) -> None:
        self._acc_check(i, ins.site, (ins.src, ins.dst), "reads")
        if ins.scales is not None:
            for ring, si, tag in (ins.scales.a, ins.scales.b):
                self._read_slot(i, ins.site, ring, si, tag)
        if self.data is not None:
            self.data.promote(i, ins)
        src = self.acc_sum[i].get(ins.src)
        assert ins.site.tile is not None
        fresh = src is not None and src[0] == ins.site.tile.index
        self._sum_into(i, ins.site, ins.dst, src[1] if fresh and src else frozenset({_FOREIGN}), True)

    def _zero(self, i: int, pc: int, ins: ZeroI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "resets")
        if self.data is not None:
            self.data.zero(i, ins.acc)
        assert ins.site.tile is not None
        self.acc_sum[i][ins.acc] = (ins.site.tile.index, frozenset())

    def _epilogue(self, i: int, pc: int, ins: EpilogueI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "reads")
        self._sum_check(i, ins.site, ins.acc, "scales")
        if self.data is not None:
            self.data.epilogue(i, ins.acc, ins.steps, ins.off_m, ins.off_n, ins.cols, ins.group)

    def _load_operand(self, i: int, pc: int, ins: LoadOperandI) -> None:
        # A synchronous register load of read-only global memory: nothing to order against other partitions.
        # Through a staging buffer (private to the partition) it first waits for the buffer's prefetch.
        tile = ins.site.tile
        assert tile is not None
        if ins.buffer is not None:
            want = (ins.operand, ins.cols, tile.index)
            got = self.staged[i].pop(ins.buffer, None)
            block = f"{ins.operand}[:, {ins.cols[0]}:{ins.cols[1]}] of tile #{tile.index}"
            if got is None:
                self._flag(FindingKind.OPERAND_STAGING, ins.site,
                           f"{ins.site.where()} waits for {ins.buffer}'s copy of {block}, but no prefetch_operand "
                           f"into {ins.buffer} is pending: put one before it in the tile")
            elif got != want:
                self._flag(FindingKind.OPERAND_STAGING, ins.site,
                           f"{ins.site.where()} reads {block} from {ins.buffer}, which holds "
                           f"{got[0]}[:, {got[1][0]}:{got[1][1]}] of tile #{got[2]}")
        self.loaded[i][(ins.operand, ins.acc, ins.cols)] = tile.index

    def _prefetch(self, i: int, pc: int, ins: PrefetchI) -> None:
        tile = ins.site.tile
        assert tile is not None
        old = self.staged[i].get(ins.buffer)
        if old is not None:
            self._flag(FindingKind.OPERAND_STAGING, ins.site,
                       f"{ins.site.where()} overwrites {ins.buffer}, whose copy of "
                       f"{old[0]}[:, {old[1][0]}:{old[1][1]}] of tile #{old[2]} no load_operand has read yet")
        self.staged[i][ins.buffer] = (ins.operand, ins.cols, tile.index)

    def _fold(self, i: int, pc: int, ins: FoldI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "reads")
        self._sum_check(i, ins.site, ins.acc, "folds the group amax of")
        self._loaded_check(i, ins.site, ins.acc, ins.cols, "folds the group amax of")
        tile = ins.site.tile
        assert tile is not None
        cols = frozenset(range(ins.off_n, ins.off_n + ins.cols[1] - ins.cols[0]))
        old = self.folded[i]
        a = self.amax_node
        assert a is not None  # (program.py refuses fold_amax without a group amax)
        same = old is not None and old[:2] == (ins.acc, tile.index) and a.index(min(old[2])) == a.index(ins.off_n)
        # The group's first block starts its amax, as does a tile's first fold (rule 29's tiles along N each fold
        # their own columns of the row, from the tile's first block: the Gluon's `ep_amax = ep_block_amax`).
        starts = a.start(ins.off_n) == ins.off_n or not same
        self.folded[i] = (ins.acc, tile.index, cols if starts or not same or old is None else old[2] | cols)
        if self.data is not None:
            self.data.fold(i, ins.acc, ins.cols, ins.off_m, ins.off_n, starts, ins.group)

    def _atomic(self, i: int, pc: int, ins: AtomicI) -> None:
        """Rule 29: the tile's row amax into the amax workspace; every column the accumulator holds below N must have
        been folded in this tile first (else AMAX_INCOMPLETE: the columns left out never reach the row's amax)."""
        tile = ins.site.tile
        assert tile is not None
        got = self.folded[i]
        have = got[2] if got is not None and got[:2] == (ins.acc, tile.index) else frozenset()
        n = self.prog.geo.n
        need = set(range(ins.cols[0], min(ins.cols[1], n)))
        if not need <= have:
            self._flag(FindingKind.AMAX_INCOMPLETE, ins.site,
                       f"{ins.site.where()} adds {ins.acc}'s row amax to the amax workspace, but it holds "
                       f"{len(have & need)} of the tile's {len(need)} columns [{ins.cols[0]}, {min(ins.cols[1], n)}): "
                       "fold_amax every block of the tile before its atomic_amax")
        if self.data is not None:
            self.data.atomic_amax(i, ins.off_m, len(have & need), ins.row_end)

    def _store_scales(self, i: int, pc: int, ins: StoreScalesI) -> None:
        tile = ins.site.tile
        assert tile is not None
        if self.applied[i] != (ins.acc, ins.cols, tile.index):
            self._flag(FindingKind.EPILOGUE_NOT_APPLIED, ins.site,
                       f"{ins.site.where()} stores the scales of {ins.acc}[:, {ins.cols[0]}:{ins.cols[1]}], but the "
                       "last apply_epilogue computed another block: put the store_scales after that block's "
                       "apply_epilogue")
        if self.data is not None:
            self.data.store_scales(i, ins.output, ins.off_m, ins.off_n, ins.row_end)

    def _apply(self, i: int, pc: int, ins: ApplyI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "reads")
        self._sum_check(i, ins.site, ins.acc, "evaluates the epilogue on")
        tile = ins.site.tile
        assert tile is not None
        self._loaded_check(i, ins.site, ins.acc, ins.cols, "evaluates the epilogue on")
        if ins.up_cols is not None:
            self._loaded_check(i, ins.site, ins.acc, ins.up_cols, "pairs its up block", self.up_operands)
        if ins.amax_cols is not None:
            got = self.folded[i]
            need = set(range(*ins.amax_cols))
            have = got[2] if got is not None and got[:2] == (ins.acc, tile.index) else frozenset()
            if not need <= have:
                self._flag(FindingKind.AMAX_INCOMPLETE, ins.site,
                           f"{ins.site.where()} divides {ins.acc}[:, {ins.cols[0]}:{ins.cols[1]}] by its group's "
                           f"scale, but the amax holds {len(have & need)} of the group's {len(need)} columns "
                           f"[{ins.amax_cols[0]}, {ins.amax_cols[1]}) of this tile: fold_amax every block of the group "
                           "before its first apply_epilogue")
        self.applied[i] = (ins.acc, ins.cols, tile.index)
        if self.data is not None:
            self.data.apply(i, ins.acc, ins.cols, ins.off_m, ins.off_n, ins.amax_cols is not None, ins.group,
                            up_cols=ins.up_cols)

    def _loaded_check(self, i: int, site: Site, acc: str, cols: tuple[int, int], what: str,
                      names: tuple[str, ...] | None = None) -> None:
        """Every graph operand (or those `names`) loaded for this block in this tile (OPERAND_NOT_LOADED)."""
        tile = site.tile
        assert tile is not None
        block = f"{acc}[:, {cols[0]}:{cols[1]}]"
        for name in self.graph_operands if names is None else names:
            at = self.loaded[i].get((name, acc, cols))
            if at == tile.index:
                continue
            why = ("no load_operand of it for that block ran before in this partition" if at is None else
                   f"its last load_operand for that block ran in tile #{at}, so the registers hold that tile's values")
            self._flag(FindingKind.OPERAND_NOT_LOADED, site,
                       f"{site.where()} {what} {block} reading operand {name}, but {why}: "
                       f"put a `load_operand {name}` for this block in the tile loop before it")

    def _store_smem(self, i: int, pc: int, ins: StoreSmemI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "reads")
        if ins.output is not None:
            self._applied_check(i, ins)
        else:
            self._sum_check(i, ins.site, ins.acc, "stores")
        buf = self.bufs[ins.buffer]
        for r in buf.stores:
            rs = self.prog.traces[r[0]][r[1]].site
            self._flag(FindingKind.STORE_BUFFER_RACE, ins.site,
                       f"{ins.site.where()} overwrites {ins.buffer} while {rs.where()} may still read it"
                       f": no tma_store_wait has retired that store")
        buf.unfenced_by, buf.written_at = i, (ins.site, self.step)
        if self.data is not None:
            self.data.store_smem(i, ins.acc, ins.buffer, ins.cols, ins.output, ins.transposed)

    def _applied_check(self, i: int, ins: StoreSmemI | StoreTileI) -> None:
        """A store of an epilogue output needs this tile's apply_epilogue of the same block just before."""
        assert ins.site.tile is not None
        want = (ins.acc, ins.cols, ins.site.tile.index)
        got = self.applied[i]
        if got == want:
            return
        block = f"{ins.acc}[:, {ins.cols[0]}:{ins.cols[1]}]"
        why = ("no apply_epilogue ran before in this partition" if got is None else
               f"the last apply_epilogue computed {got[0]}[:, {got[1][0]}:{got[1][1]}] in tile #{got[2]}")
        self._flag(FindingKind.EPILOGUE_NOT_APPLIED, ins.site,
                   f"{ins.site.where()} stores epilogue output {ins.output} of {block}, but {why}: put an "
                   f"`apply_epilogue` of this block between its operand loads and its stores")

    def _early_access(self, i: int, pc: int, ins: EarlyAccessI) -> None:
        self._flag(FindingKind.EARLY_GLOBAL_ACCESS, ins.site,
                   f"{ins.site.where()} touches global memory before its partition's grid_dependency_wait, in a "
                   f"kernel launched dependently (PDL): the grid before it may still be writing this kernel's "
                   f"operands or reading its output")

    def _fence(self, i: int, pc: int, ins: FenceI) -> None:
        for buf in self.bufs.values():
            if buf.unfenced_by == i:
                buf.unfenced_by = -1

    def _tma_store(self, i: int, pc: int, ins: TmaStoreI) -> None:
        buf = self.bufs[ins.buffer]
        if buf.unfenced_by >= 0 and buf.written_at is not None:
            ws, wstep = buf.written_at
            self._flag(FindingKind.MISSING_FENCE, ins.site,
                       f"{ins.site.where()} lets the TMA engine (async proxy) read {ins.buffer}, which {ws.where()} "
                       f"wrote through the generic proxy at step {wstep} with no fence_async_shared "
                       f"in between: the store may read stale data")
        buf.stores = buf.stores + ((i, pc),)
        self.stores[i] = self.stores[i] + (Inflight(i, pc, self.step),)

    def _store_wait(self, i: int, pc: int, ins: StoreWaitI) -> None:
        n = max(0, len(self.stores[i]) - ins.pending)
        for e in self.stores[i][:n]:
            buf = self.bufs[self._store_of(e).buffer]
            buf.stores = tuple(r for r in buf.stores if r != (i, e.pc))
        self.stores[i] = self.stores[i][n:]
        self.store_done[i] -= n

    def _check_issuers(self, ins: LoadI, name: str) -> None:
        """Seed 004: the warps that issue a TDM copy must be an affine set and copy every row of its block."""
        mask = WarpMask(ins.warps)
        if affine_basis(mask) is None:
            self._flag(FindingKind.TDM_WARPS, ins.site,
                       f"{ins.site.where()} copies {ins.tag} into {name} from warps {list(mask.members)}, not an "
                       "affine set of warp ids: the hardware cannot split the block over them")
            return
        gaps = uncovered_rows(mask, ins.team, ins.rows)
        if gaps:
            rows = ", ".join(f"{g.start}..{g.stop - 1}" for g in gaps)
            self._flag(FindingKind.TDM_WARPS, ins.site,
                       f"{ins.site.where()} copies {ins.tag} into {name} from warps {list(mask.members)} of "
                       f"{ins.team}: rows {rows} of its {ins.rows} are never copied")

    def _tdm_wait(self, i: int, pc: int, ins: TdmWaitI) -> None:
        """Each waiting warp's oldest copies, all but its newest `pending`, finished: a copy whose issuing warps all
        waited past it retires, each of them now knowing its own share landed. A copy an issuing warp did not wait on
        stays in flight (nothing tells that warp it landed)."""
        idle = ins.warps & ~self.tdm_issuers[i]
        if idle:
            self._flag(FindingKind.IDLE_TDM_WAIT, ins.site,
                       f"{ins.site.where()} waits on warps {list(WarpMask(idle).members)}, which issue no TDM copy")
        q = self.tdm[i]
        issuers = [self._load_of(e).warps for e in q]
        newest: set[int] = set()
        for w in WarpMask(ins.warps).members:
            mine = [j for j, b in enumerate(issuers) if b >> w & 1]
            newest |= set(mine[max(0, len(mine) - ins.pending):] if ins.pending else [])
        retire = [j < self.tdm_done[i] and j not in newest and not b & ~ins.warps for j, b in enumerate(issuers)]
        for e, r in zip(q, retire, strict=True):
            if r:
                ld = self._load_of(e)
                self.tokens[i] = self.tokens[i] | {("W", ld.ring, ld.slot, e.fill)}
        self.tdm[i] = tuple(e for e, r in zip(q, retire, strict=True) if not r)
        self.tdm_done[i] -= sum(retire)

    def _sync(self, i: int, pc: int, ins: SyncI) -> None:
        """A barrier of the partition's warps: shares each warp saw land are every warp's, and the slots the warps
        read are done with (a later copy may refill them)."""
        own = {t for t in self.tokens[i] if t[0] == "W"}
        self.tokens[i] = (self.tokens[i] - own) | {("F", *t[1:]) for t in own}
        for slots in self.slots.values():
            for s in slots:
                if s.fill >= 0 and i in s.read_by:
                    s.released_by = s.released_by | {i}

    def _store_tile(self, i: int, pc: int, ins: StoreTileI) -> None:
        self._acc_check(i, ins.site, (ins.acc,), "reads")
        if ins.output is not None:
            self._applied_check(i, ins)
        else:
            self._sum_check(i, ins.site, ins.acc, "stores")
        if self.data is not None:
            self.data.store_tile(i, ins.acc, ins.off_m, ins.off_n, ins.output)

    def _exit(self, i: int, site: Site) -> None:
        # (tcgen05 MMAs and commits complete on their own after the MMA warp's last op: their arrivals are what
        # the epilogue waits for)
        wgmma = tuple(e for e in self.mmas[i] if isinstance(self.prog.traces[i][e.pc], MmaI))
        for what, q in (("wgmma", wgmma), ("TMA store", self.stores[i]), ("TDM copy", self.tdm[i])):
            if q:
                first = self._site(q[0])
                wait = {"wgmma": "wgmma_wait pending=0", "TMA store": "tma_store_wait pending=0"}.get(
                    what, "tdm_wait pending=0")
                self._flag(FindingKind.ASYNC_AT_EXIT, site,
                           f"{self.prog.names[i]} exits (its last op: {site.where()}) with {len(q)} {what}(s) not "
                           f"retired (oldest: {first.where()}): a {wait} before exit is missing")

    # ------------------------------------------------------------------------------------------
    # asynchronous completions

    def _land(self, j: int) -> None:
        e = self.loads.pop(j)
        ins = self._load_of(e)
        self._land_in(ins, e.fill, e.agent)
        if e.peers:  # a multicast: the one copy lands in every CTA of the cluster
            for peer, (fill, _) in zip(self.others(), e.peers, strict=True):
                assert ins.barrier is not None
                peer._remote(ins.site, self.prog.geo.pid, f"lands {ins.tag} in {ins.ring}[{ins.slot}] and on",
                             ins.barrier, ins.index)
                peer._land_in(ins, fill, e.agent, issued_here=False)
        self._event(ins.site, e.issued, self.step + 1, EventKind.ASYNC)

    def _remote(self, site: Site, pid: int, what: str, barrier: str, index: int) -> None:
        """CTA `pid` of the cluster writes into this CTA (`what`: an arrival or a multicast's landing on
        barrier[index], at `site`): after this CTA exited, a finding; before, one to be observed by a wait."""
        phase = self.bars[barrier][index].phase
        if self.exited:
            self._flag(FindingKind.WRITE_AFTER_EXIT, site,
                       f"{site.where()} of CTA {pid} {what} CTA {self.prog.geo.pid}'s {barrier}[{index}] after CTA "
                       f"{self.prog.geo.pid} exited", f"{barrier}[{index}]", phase)
        else:
            self.unobserved.setdefault((barrier, index, phase), (site, pid, what))

    def _land_in(self, ins: LoadI, fill: int, agent: int, issued_here: bool = True) -> None:
        """Fill #`fill` of load `ins` (issued by partition `agent` of this CTA or, not `issued_here`, a multicast of
        the cluster's lead) lands in this CTA's slot and completes on this CTA's barrier."""
        assert ins.barrier is not None
        s = self.slots[ins.ring][ins.slot]
        bar = self.bars[ins.barrier][ins.index]
        name = f"{ins.barrier}[{ins.index}]"
        if s.fill == fill:  # (an overwritten fill's late bytes were reported when it was overwritten)
            s.landed, s.landed_at, s.land_barrier, s.land_phase = True, self.step, name, bar.phase
            if self.data is not None:
                self.data.land(ins.ring, ins.slot, ins.tag)
        bar.publish(("F", ins.ring, ins.slot, fill))
        phase = bar.phase
        if ins.tracked:  # a cp.async copy: its landing is the tracked arrival
            if bar.arrive(1, self.prog.names[agent]):
                self._completed(ins.barrier, ins.index, phase)
            return
        # Another CTA's multicast may land before this CTA's own expect-tx: PTX lets the tx-count go negative, and
        # the phase cannot complete before that expect's arrival. Too few bytes announced show there as a deadlock
        # (the count stays negative) or as a phase completing with the copy in flight (`_completed`).
        if issued_here and bar.tx < ins.nbytes:
            self._flag(FindingKind.TX_MISMATCH, ins.site,
                       f"{ins.site.where()} lands {ins.nbytes} bytes on {name} in phase "
                       f"{bar.phase}, but only {bar.tx} announced bytes are pending: expect-tx announced fewer bytes "
                       f"than the loads bring, or the load names the wrong barrier", name, bar.phase)
        if bar.complete_tx(ins.nbytes):
            self._completed(ins.barrier, ins.index, phase)

    def _land_tdm(self, i: int) -> None:
        """The oldest unfinished TDM copy of partition `i` lands (the copies of a warp complete in issue order)."""
        e = self.tdm[i][self.tdm_done[i]]
        ins = self._load_of(e)
        s = self.slots[ins.ring][ins.slot]
        if s.fill == e.fill:
            s.landed, s.landed_at, s.land_barrier, s.land_phase = True, self.step, _TDM, -1
            if self.data is not None:
                self.data.land(ins.ring, ins.slot, ins.tag)
        self.tdm_done[i] += 1
        self._event(ins.site, e.issued, self.step + 1, EventKind.ASYNC)

    def _complete_mma(self, i: int) -> None:
        e = self.mmas[i][self.mma_done[i]]
        ins = self.prog.traces[i][e.pc]
        if isinstance(ins, (TcMmaI, CommitI, ScaleCopyI)):
            self._complete_tc(i, e, ins)
            return
        assert isinstance(ins, MmaI)
        if self.data is not None:  # operands are read now: between issue and retirement
            self.data.mma(i, ins)
        self.mma_done[i] += 1
        self._event(ins.site, e.issued, self.step + 1, EventKind.ASYNC)

    def _complete_tc(self, i: int, e: Inflight, ins: TcMmaI | CommitI | ScaleCopyI) -> None:
        """sm_100a: the oldest tcgen05 op of partition `i` completes, and retires at once (no wgmma_wait). An MMA
        has read its slots and written tensor memory, then arrives on its release barrier; a commit lands the
        accumulator slot its barrier guards and arrives, publishing it to the waiters."""
        assert self.mma_done[i] == 0 and self.mmas[i][0] == e, "tcgen05 ops complete and retire in order"
        self.mmas[i] = self.mmas[i][1:]
        if isinstance(ins, ScaleCopyI):
            s = self.slots[ins.ring][ins.slot]
            s.readers = tuple(r for r in s.readers if r != (i, e.pc))
            self._scale_flags(ins.site, self.scales.copy_done(i, ins.site.where(), ins.dst, ins.tag))
            for ring, j in self.scales.overlap[ins.dst]:
                if self.slots[ring][j].fill >= 0:
                    self._flag(FindingKind.TMEM_OVERLAP, ins.site,
                               f"{ins.site.where()} writes scale buffer {ins.dst} over columns of {ring}[{j}], which "
                               f"holds {self.slots[ring][j].describe()}")
            if self.data is not None:
                self.data.scale_copy(ins)
        elif isinstance(ins, TcMmaI):
            for ring, si in ((ins.a_ring, ins.a_slot), (ins.b_ring, ins.b_slot), *((r, j) for r, j, _ in
                                                                                   ins.scale_slots)):
                s = self.slots[ring][si]
                s.readers = tuple(r for r in s.readers if r != (i, e.pc))
            self._scale_flags(ins.site, self.scales.mma_done(i, e.pc, ins.site.where(), ins.scales))
            for buf, slots in self.scales.overlap.items():
                if (ins.acc_ring, ins.acc_slot) in slots and self.scales.bufs[buf].content is not None:
                    self._flag(FindingKind.TMEM_OVERLAP, ins.site,
                               f"{ins.site.where()} writes {ins.acc_ring}[{ins.acc_slot}] over the columns of scale "
                               f"buffer {buf}, which holds {self.scales.bufs[buf].content}")
            if self.data is not None:
                self.data.tc_mma(ins)
            if ins.release is not None:
                self._arrive(i, e.pc, ArriveI(ins.site, ins.release, ins.release_index, 1))
            if ins.release_scales is not None:  # seed 000: the scale buffers it read are free again
                self._arrive(i, e.pc, ArriveI(ins.site, ins.release_scales, ins.release_scales_index, 1))
        else:
            for ring in self.bar_rings.get(ins.barrier, ()):
                s = self.slots[ring][ins.index]
                if s.fill >= 0 and s.loader == i and not s.landed:
                    bar = self.bars[ins.barrier][ins.index]
                    s.landed, s.landed_at = True, self.step
                    s.land_barrier, s.land_phase = f"{ins.barrier}[{ins.index}]", bar.phase
                    self.tokens[i] = self.tokens[i] | {("F", ring, ins.index, s.fill)}
            self._arrive(i, e.pc, ArriveI(ins.site, ins.barrier, ins.index, 1))
        self._event(ins.site, e.issued, self.step + 1, EventKind.ASYNC)

    def _complete_store(self, i: int) -> None:
        e = self.stores[i][self.store_done[i]]
        ins = self._store_of(e)
        if self.data is not None:
            self.data.tma_store(ins.buffer, ins.off_m, ins.off_n, ins.output, ins.workspace, ins.row_end)
        self.store_done[i] += 1
        self._event(ins.site, e.issued, self.step + 1, EventKind.ASYNC)

    # ------------------------------------------------------------------------------------------
    # end of the CTA

    def finish(self) -> None:
        """Run when no action is enabled: report a deadlock, or data that was loaded and never read."""
        blocked = [i for i, tr in enumerate(self.prog.traces) if self.pc[i] < len(tr)]
        if not blocked:
            for i, staged in enumerate(self.staged):
                for buf, (operand, cols, tile) in staged.items():
                    self._flag(FindingKind.ASYNC_AT_EXIT, None,
                               f"{self.prog.names[i]} exits with the copy of {operand}[:, {cols[0]}:{cols[1]}] of tile "
                               f"#{tile} into {buf} never loaded: a prefetch_operand without its load_operand")
            for ring, slots in self.slots.items():
                for si, s in enumerate(slots):
                    if s.fill >= 0 and not s.read_by:
                        self._flag(FindingKind.LOST_FILL, None,
                                   f"{ring}[{si}] holds {s.describe()} that no wgmma read before CTA "
                                   f"{self.prog.geo.pid} finished: the producer loads more blocks than the consumer "
                                   f"uses")
            return
        parts = []
        first: WaitI | None = None
        for i, tr in enumerate(self.prog.traces):
            if i not in blocked:
                parts.append(f"{self.prog.names[i]} has finished")
                continue
            ins = tr[self.pc[i]]
            # The timeline shows the stall that never ends, up to the last step.
            self._event(ins.site, max(self.blocked_at[i], 0), self.step + 1, EventKind.WAIT)
            if isinstance(ins, WaitI):
                first = first or ins
                bar = self.bars[ins.barrier][ins.index]
                name = f"{ins.barrier}[{ins.index}]"
                alias = (f"; phase {ins.phase} completed long ago and the parity now names a later phase"
                         if bar.phase >= ins.phase + 2 else "")
                parts.append(f"{ins.site.where()} is blocked on {name}, waiting for phase {ins.phase} to complete "
                             f"(parity {ins.parity}); {name} is {bar.describe()}{alias}")
                if bar.pending == 0 and bar.tx > 0 and not any(
                        (ld.barrier, ld.index) == (ins.barrier, ins.index) for ld in map(self._load_of, self.loads)):
                    self._flag(FindingKind.TX_MISMATCH, ins.site,
                               f"{name} has all {bar.count} arrivals of phase {bar.phase} but still waits for "
                               f"{bar.tx} tx bytes that no TMA load will bring: expect-tx announced more bytes than "
                               f"the loads on it", name, bar.phase)
            else:
                parts.append(f"{ins.site.where()} cannot proceed")
        site = first.site if first else self.prog.traces[blocked[0]][self.pc[blocked[0]]].site
        self._flag(FindingKind.DEADLOCK, site,
                   f"deadlock in CTA {self.prog.geo.pid} at step {self.step}: " + "; ".join(parts),
                   f"{first.barrier}[{first.index}]" if first else None, first.phase if first else None)


def _drop(tokens: list[frozenset[Token]], ring: str, si: int) -> list[frozenset[Token]]:
    """Each agent's `tokens` less those of ring[si]."""
    return [t if not any(x[1] == ring and x[2] == si for x in t)
            else frozenset(x for x in t if x[1] != ring or x[2] != si) for t in tokens]


_FOREIGN = -1  # among an accumulator's k-block origins: another tile's sum (or an unset register) was added to
_TDM = "its TDM copies"  # SlotState.land_barrier of a slot filled by gfx1250's TDM (no barrier)

# Instruction type -> Machine method executing it.
_EXEC: dict[type, Callable[[Machine, int, int, Any], None]] = {
    WaitI: Machine._wait, ArriveI: Machine._arrive, ExpectI: Machine._arrive, LoadI: Machine._load,
    MmaI: Machine._mma, MmaWaitI: Machine._mma_wait, PromoteI: Machine._promote, ZeroI: Machine._zero,
    EpilogueI: Machine._epilogue, StoreSmemI: Machine._store_smem, FenceI: Machine._fence,
    EarlyAccessI: Machine._early_access,
    TmaStoreI: Machine._tma_store, StoreWaitI: Machine._store_wait, StoreTileI: Machine._store_tile,
    LoadOperandI: Machine._load_operand, PrefetchI: Machine._prefetch, ApplyI: Machine._apply,
    FoldI: Machine._fold, StoreScalesI: Machine._store_scales, AtomicI: Machine._atomic,
    TcMmaI: Machine._tc_mma, ScaleCopyI: Machine._scale_copy, CommitI: Machine._commit, LoadTmemI: Machine._load_tmem,
    TdmWaitI: Machine._tdm_wait, SyncI: Machine._sync, PartialStoreI: Machine._sk_store, FlagWaitI: Machine._sk_wait,
    PartialAddI: Machine._sk_add,
}


@dataclass
class Partial:
    """A stream-K partial in a workspace slot: its tile, the k-blocks (origins) each accumulator summed, its data."""

    tile_id: int
    sums: dict[str, frozenset[int]]
    data: dict[str, Any]
    what: str
    added: bool = False


@dataclass
class StreamKState:
    """What the CTAs of one stream-K launch share: the workspace slots and the released flags, by (CTA, partition)."""

    slots: dict[tuple[int, int], Partial]
    flags: set[tuple[int, int]]

    def report_lost(self, sink: FindingSink) -> None:
        """Once every CTA has finished: a partial stored but never added is a finding."""
        for p in self.slots.values():
            if not p.added:
                sink.add(SimFinding(FindingKind.SK_LOST_PARTIAL, f"{p.what} was stored but never added to its tile",
                                    -1))

    def key(self) -> tuple[Any, ...]:
        """Protocol state only (the explorer's): each slot's tile, k-block sums and whether it was added; the flags."""
        return (tuple(sorted((f, p.tile_id, tuple(sorted((a, tuple(sorted(v))) for a, v in p.sums.items())), p.added)
                             for f, p in self.slots.items())), tuple(sorted(self.flags)))

    def clone(self) -> StreamKState:
        return StreamKState({f: dataclasses.replace(p) for f, p in self.slots.items()}, set(self.flags))
