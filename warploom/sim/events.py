"""The per-partition event timeline a simulation records, for `warploom.sim.timeline.draw_timeline`."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class EventKind(enum.Enum):
    OP = "op"  # the partition executed an op (one scheduler step)
    WAIT = "wait"  # the partition was blocked at a wait (mbarrier, wgmma_wait, tma_store_wait)
    ASYNC = "async"  # an asynchronous operation in flight: from issue to completion


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One bar of the timeline.

    Attributes:
        partition: the partition that executed or issued it.
        op: the op's text (``warploom.ir.printer.op``).
        start, end: scheduler steps, end exclusive.
        kind: op, wait or async.
        cta: the CTA's program id.
        tile, k: the loop iteration (tile index within the CTA, k-block), or None.
    """

    partition: str
    op: str
    start: int
    end: int
    kind: EventKind
    cta: int = 0
    tile: int | None = None
    k: int | None = None

    @property
    def category(self) -> str:
        """A coarse class for colouring: wait, tma_load, wgmma, sync, epilogue, tma_store."""
        word = self.op.split(" ", 1)[0]
        if self.kind is EventKind.WAIT:
            return "wait"
        if word == "tma_load":
            return "tma_load"
        if word.startswith("wgmma"):
            return "wgmma"
        if word in ("arrive", "arrive_expect_tx", "wait"):
            return "sync"
        if word in ("tma_store", "tma_store_wait"):
            return "tma_store"
        return "epilogue"
