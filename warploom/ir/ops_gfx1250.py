"""gfx1250's own schedule ops (planner rule 20, `warploom.targets.gfx1250`): Tensor Data Mover copies and their
waits, WMMA, and the partition's warp barrier. The ops every target shares are in `ir/nodes.py`."""

from __future__ import annotations

from dataclasses import dataclass

from warploom.ir.base import Axis, Guard, Op, Slot, Tensor
from warploom.ir.warps import WarpMask


@dataclass(frozen=True)
class TdmLoad(Op):
    """gfx1250: asynchronously copy one block of `tensor` into `ring[slot]` with the Tensor Data Mover.

    The block is the current tile's at k-block ``k + ahead``, where k is the enclosing k-loop's k-block (0 outside a
    k-loop: a tile's prologue); its origin is (coord[0] index * block, coord[1] index * block) in the tensor's own
    index order, and elements out of bounds read as zero. A block past the tile's last k-block is not copied (the op
    is predicated off: it issues nothing and counts nothing). Every warp of the partition copies its share of the
    block and counts its own copies in flight; they complete in issue order, and only a `TdmWait` tells a warp its
    own shares landed (a `SyncWarps` after it tells every warp that all of them did).

    With `warps` (Triton >= 3.8's ``warp_used_hint``, ir/warps.py) only those warps issue it, the block re-tiled
    over them; the others issue and count nothing. None: every warp issues its share. `fused` copies standing
    next to each other (2 to 4, each with its own disjoint `warps`) are one fused copy (Triton 3.9's
    ``tdm.async_load_fused``): each warp issues the instruction of the member that names it, as if apart."""

    tensor: Tensor
    ring: str
    slot: Slot
    coord: tuple[Axis, Axis]
    ahead: int = 0
    warps: WarpMask | None = None
    fused: bool = False


@dataclass(frozen=True)
class Wmma(Op):
    """gfx1250: ``acc (+)= ring_a[slot] @ ring_b[slot]`` by the WMMA units, synchronous: each warp loads its operand
    fragments from the two slots into registers and multiplies, so the slots have been read (by that warp) when it
    returns. B's slot is read as (K, N) whatever its storage order. The accumulator is overwritten instead of added
    to when `overwrite` holds (FIRST_K: a tile's first k-block)."""

    a_ring: str
    b_ring: str
    slot: Slot
    acc: str
    overwrite: Guard = Guard.FIRST_K


@dataclass(frozen=True)
class TdmWait(Op):
    """gfx1250: wait until at most `pending` of this partition's TDM copies are in flight (each warp for its own
    shares, oldest first) while k-block ``k + ahead`` of the tile exists, i.e. while later blocks' copies were
    issued behind the one needed now; where it does not (the tile's last blocks: nothing was issued behind them),
    wait until none is. Outside a k-loop it always waits for `pending`.

    `warps` names the warps whose copies it retires (those the copies' masks name; None: every warp). The other
    warps run it too (Gluon's control flow is uniform) but have nothing in flight, so it returns at once there."""

    pending: int
    ahead: int = 0
    warps: WarpMask | None = None


@dataclass(frozen=True)
class SyncWarps(Op):
    """gfx1250: a barrier of all the partition's warps. Every warp's TDM shares that a `TdmWait` retired become
    visible to all the warps (a slot is read whole), and every warp's earlier reads of shared memory are done
    before any warp's later TDM copy may overwrite it."""


# This target's own ops (its declaration adds the shared ones its schedules hold).
OWN_OPS: frozenset[type[Op]] = frozenset({TdmLoad, Wmma, TdmWait, SyncWarps})
