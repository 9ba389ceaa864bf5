"""What the simulator reports: one `SimFinding` per protocol violation, and `ProtocolError` to raise them.

Every finding names where it happened the way a person reads the schedule: the CTA, the partition, the
op as `warploom.ir.printer.op` prints it, the loop iteration (tile, k), and the barrier and phase
involved. Each kind carries a hint saying what usually causes it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from warploom.errors import InternalError


class FindingKind(enum.Enum):
    """A class of schedule bug. The value is the hint printed with it."""

    DEADLOCK = "no partition can move and nothing is in flight: some wait's phase is never completed"
    READ_BEFORE_LANDED = "wgmma reads a ring slot whose TMA load has not landed: the ready wait is missing or early"
    READ_UNACQUIRED = ("wgmma reads TMA data it never acquired through a wait on the barrier phase those bytes "
                       "completed: a wait on the wrong barrier, index or parity")
    WRONG_TILE = "wgmma reads a slot holding another (tile, k) block: producer and consumer slot indices disagree"
    OVERWRITE_WHILE_READ = ("a TMA load overwrites a slot that an un-waited wgmma still reads: release the slot "
                            "only after wgmma_wait retires the wgmma")
    OVERWRITE_UNRELEASED = ("a TMA load overwrites data its reader has not released through the empty barrier: "
                            "the producer's empty wait is missing, early, or on the wrong phase")
    RELEASE_WHILE_READING = "an arrive releases a slot that this partition's un-waited wgmma still reads"
    READ_AFTER_RELEASE = ("a partition reads a ring slot it already released on the empty barrier: the release "
                          "stands before the last op reading the stage (e.g. a blockwise promotion reading scales)")
    ARRIVAL_OVERFLOW = "more arrivals in one phase than the barrier's count: a double arrive or a wrong count"
    TX_MISMATCH = "expect-tx bytes differ from the bytes the TMA loads on this barrier bring"
    PHASE_ALIAS = "a wait's parity names a phase two away from the barrier's: the cursor arithmetic is off"
    MISSING_FENCE = "a generic-proxy smem write reaches a TMA store without fence_async_shared in between"
    STORE_BUFFER_RACE = "store_smem overwrites a buffer that an earlier TMA store may still read: tma_store_wait"
    ACC_INCOMPLETE = ("an epilogue or store reads an accumulator that is not exactly this tile's sum over all its "
                      "k-blocks: a store before the mainloop, a lost or misplaced overwrite, or another tile's sum")
    ACC_RACE = "an accumulator is read or reset while an async wgmma writing it is in flight: wgmma_wait first"
    OPERAND_NOT_LOADED = ("apply_epilogue runs without this tile's load_operand of one of the graph's operands for "
                          "its block: the registers hold nothing, or another tile's values")
    OPERAND_STAGING = ("a dense operand's staging buffer is out of step: a load_operand through it without its "
                       "prefetch_operand (on the GPU it waits forever), a prefetch over a block no load has read "
                       "yet, or a load of another block than the one prefetched")
    AMAX_INCOMPLETE = ("a fused quantization's scale reads an amax that misses columns of its group: an "
                       "apply_epilogue before every block of the group was folded in (fold_amax), as an amax over 64 "
                       "of 128 would; in rule 29's two passes an atomic_amax before every block of its tile folded, "
                       "or the cast pass reading a row's amax before every tile along N added its columns")
    AMAX_STALE = ("rule 29's amax workspace is not zero when the first pass starts: an earlier call's row amax would "
                  "win the atomic max and scale this call's rows (the workspace must be zeroed per call)")
    EPILOGUE_NOT_APPLIED = ("store_smem of an epilogue output whose block no apply_epilogue of this tile computed: "
                            "the buffer gets no value, or another block's")
    UNSYNCED_WARPS = ("gfx1250: a slot is read after a tdm_wait but with no sync_warps since (each warp waits only for "
                      "its own shares of a copy), or a TDM copy overwrites a slot the warps read with no sync_warps "
                      "since (a warp may still be reading it)")
    TDM_WARPS = ("gfx1250: a TDM copy's warp mask (seed 004) is not an affine set of warp ids, or its warps, the "
                 "block re-tiled over them, leave rows uncopied (a warp the partition does not have copies nothing)")
    IDLE_TDM_WAIT = ("gfx1250: a tdm_wait names warps that issue no TDM copy: it retires nothing there, and the warps "
                     "that did issue are not the ones told their shares landed")
    SCALE_COPY_MISSING = ("sm_100a: a block-scaled tcgen05 MMA reads a tensor-memory scale buffer whose last "
                          "tcgen05_copy was not of this (tile, k-block)'s scales, or there was none: the copy before "
                          "the MMA is missing, misplaced, or from the wrong slot")
    SCALE_OVERWRITTEN = ("sm_100a: a tcgen05_copy overwrites a scale buffer that an issued MMA has not finished "
                         "reading: only copies issued by the MMA's own thread run after it (tcgen05 ops of one "
                         "thread execute in issue order)")
    TMEM_OVERLAP = ("sm_100a: a scale buffer and an accumulator share tensor-memory columns: one's writes clobber "
                    "the other's data")
    DOUBLE_WRITE = ("a cluster's multicast writes a box into a slot that another copy of the same box already fills: "
                    "a multicast is the lead's alone (TmaLoad.lead_only); a copy from every CTA writes each slot, and "
                    "brings its bytes to each barrier, once per CTA")
    WRITE_AFTER_EXIT = ("a CTA of a cluster exits while another may still multicast into it or arrive on its "
                        "barriers (no wait of the exiting CTA observed the write; its shared memory may be another "
                        "CTA's by then): the cluster barrier before exit (Tiling.exit_sync) is missing")
    EARLY_GLOBAL_ACCESS = ("a partition of a dependently launched kernel (PDL, Module.dependent_launch) reads or "
                           "writes global memory before its grid_dependency_wait: the grid before it may still be "
                           "writing the operands or reading the output (the wait must be the partition's first op)")
    ASYNC_AT_EXIT = "a partition exits with async work (wgmma, TMA store or TDM copy) still in flight"
    LOST_FILL = "a TMA load's data was never read: producer and consumer loop trip counts disagree"
    OUTPUT_COVERAGE = "an output tile was stored twice or never: the tile loops or raster disagree"
    SK_UNSYNCED = ("a stream-K finisher reads a workspace slot it has not acquired through the slot's flag, or one "
                   "no contributor stored: the flag wait is missing, or names another slot")
    SK_WRONG_PARTIAL = ("a stream-K finisher adds a partial of another tile, or k-blocks its accumulator already holds "
                        "(a partial added twice): the owner or peer arithmetic is off")
    SK_SLOT_REUSED = "a stream-K partial overwrites a workspace slot whose last partial no finisher has added yet"
    SK_LOST_PARTIAL = "a stream-K contributor's partial was never added: its tile's finisher did not wait for it"
    TMA_MISALIGNED = ("a TMA load's innermost coordinate is not a multiple of 16 bytes: the GPU raises an illegal "
                      "instruction (a data-dependent origin, such as a K-grouped module's group start, must be "
                      "rounded down and the extra elements masked)")
    MALFORMED = "the module cannot be executed as written"

    @property
    def hint(self) -> str:
        return self.value


@dataclass(frozen=True)
class SimFinding:
    """One violation, with enough context to find the op in `Kernel.schedule`.

    Attributes:
        kind: the class of bug.
        message: the full, specific description (what happened, to which slot/barrier, and when).
        cta: the program id of the CTA.
        partition: the partition whose op saw it ('' for the whole CTA, e.g. a deadlock).
        op: that op's text (``warploom.ir.printer.op``), or ''.
        tile: the tile (``tile #1 (m=0, n=2)``) of the iteration, or None outside tile loops.
        k: the k-block of the iteration, or None.
        barrier: the barrier involved, e.g. ``ready[1]``, or None.
        phase: the barrier phase involved, or None.
        step: the scheduler step at which it was seen.
        occurrences: how often the same (kind, partition, op) was seen in the run.
    """

    kind: FindingKind
    message: str
    cta: int
    partition: str = ""
    op: str = ""
    tile: str | None = None
    k: int | None = None
    barrier: str | None = None
    phase: int | None = None
    step: int = 0
    occurrences: int = 1

    @property
    def key(self) -> tuple[FindingKind, str, str]:
        """Findings with the same key are one bug seen several times."""
        return (self.kind, self.partition, self.op)

    def __str__(self) -> str:
        more = f" (seen {self.occurrences}x)" if self.occurrences > 1 else ""
        return f"[{self.kind.name}] CTA {self.cta}, step {self.step}: {self.message}{more}\n    hint: {self.kind.hint}"


class ProtocolError(InternalError):
    """The simulator found protocol violations in a schedule; `findings` lists them (first ones in the message)."""

    def __init__(self, module: str, findings: tuple[SimFinding, ...]) -> None:
        self.module = module
        self.findings = findings
        shown = "\n".join(f"  - {f}" for f in findings[:8])
        more = f"\n  ... and {len(findings) - 8} more" if len(findings) > 8 else ""
        super().__init__(f"schedule {module} violates the barrier protocol ({len(findings)} finding(s)):\n"
                         f"{shown}{more}")


class FindingSink:
    """Collects findings, merging repeats of the same (kind, partition, op) into one with a count."""

    def __init__(self, limit: int = 64) -> None:
        self._first: dict[tuple[FindingKind, str, str], SimFinding] = {}
        self._count: dict[tuple[FindingKind, str, str], int] = {}
        self.limit = limit

    def add(self, f: SimFinding) -> None:
        k = f.key
        if k in self._first:
            self._count[k] += 1
        elif len(self._first) < self.limit:
            self._first[k] = f
            self._count[k] = 1

    def __len__(self) -> int:
        return len(self._first)

    def kinds(self) -> set[FindingKind]:
        return {k[0] for k in self._first}

    def findings(self) -> tuple[SimFinding, ...]:
        out = []
        for k, f in self._first.items():
            n = self._count[k]
            out.append(f if n == 1 else replace(f, occurrences=n))
        return tuple(out)
