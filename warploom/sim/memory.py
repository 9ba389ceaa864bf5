"""Shared-memory state the checks track: one `SlotState` per ring slot, one `BufferState` per buffer.

A ring slot goes EMPTY -> LOADING (a TMA load was issued into it) -> LANDED (its bytes arrived), and is
then read by wgmma. Each load starts a new *fill* of the slot, numbered per slot, tagged with the block
of the global tensor it copies. Readers are the wgmma that have been issued on the slot and not yet
retired by a ``wgmma_wait``: the hardware may read the operands at any time until then, so a write into
the slot before retirement is a race whatever the simulated completion order happened to be.

A buffer (the epilogue's staging tile) is written by the generic proxy (``store_smem``) and read by the
async proxy (TMA store); it tracks an unfenced generic write and the TMA stores not yet retired by a
``tma_store_wait``.
"""

from __future__ import annotations

from typing import Any

from warploom.sim.program import Site, Tag

Ref = tuple[int, int]  # (agent, pc) of the instruction that issued an async operation


class SlotState:
    """Attributes:
    fill: number of the current fill (-1: never loaded).
    nfills: fills so far (the next fill's number).
    tag: the block the current fill holds.
    landed: the current fill's bytes have arrived.
    loader: the agent that issued the current fill.
    source: the CTA (pid) whose copy wrote the current fill (another CTA's, for a cluster's multicast).
    read_by: agents that issued a wgmma on the current fill (or, for scale rings, promoted with it).
    released_by: agents that arrived on the slot's empty barrier since the current fill (they are done with it).
    readers: un-retired wgmma reading this slot (any fill).
    issued, landed_at: scheduler steps; land_barrier, land_phase: where the bytes completed (messages).
    """

    __slots__ = ("fill", "nfills", "tag", "landed", "loader", "source", "read_by", "released_by", "readers", "issued",
                 "landed_at", "land_barrier", "land_phase")

    def __init__(self) -> None:
        self.fill = -1
        self.nfills = 0
        self.tag: Tag | None = None
        self.landed = False
        self.loader = -1
        self.source = -1
        self.read_by: frozenset[int] = frozenset()
        self.released_by: frozenset[int] = frozenset()
        self.readers: tuple[Ref, ...] = ()
        self.issued = -1
        self.landed_at = -1
        self.land_barrier = ""
        self.land_phase = -1

    def describe(self) -> str:
        if self.fill < 0:
            return "never loaded"
        state = f"landed at step {self.landed_at}" if self.landed else "TMA still in flight"
        return f"fill #{self.fill} = {self.tag}, issued at step {self.issued}, {state}"

    def clone(self) -> SlotState:
        s = SlotState.__new__(SlotState)
        for k in SlotState.__slots__:
            setattr(s, k, getattr(self, k))
        return s

    def key(self) -> tuple[Any, ...]:
        return (self.fill, self.tag, self.landed, self.read_by, self.released_by, self.readers)


class BufferState:
    """Attributes:
    unfenced_by: agent whose generic write has not been fenced yet (-1: none).
    written_at: the site and step of that write (messages).
    stores: un-retired TMA stores reading the buffer, as (agent, pc).
    """

    __slots__ = ("unfenced_by", "written_at", "stores")

    def __init__(self) -> None:
        self.unfenced_by = -1
        self.written_at: tuple[Site, int] | None = None
        self.stores: tuple[Ref, ...] = ()

    def clone(self) -> BufferState:
        b = BufferState.__new__(BufferState)
        b.unfenced_by, b.written_at, b.stores = self.unfenced_by, self.written_at, self.stores
        return b

    def key(self) -> tuple[Any, ...]:
        return (self.unfenced_by, self.stores)
