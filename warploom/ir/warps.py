"""gfx1250: which warps issue a Tensor Data Mover copy (seed 004, Triton #10056's ``warp_used_hint``).

A TDM copy is a per-warp instruction: without a hint every warp of the partition issues its share of the block
(block rows / warps each). With a hint only the named warps issue, the block re-tiled over those K warps (rows / K
each); the others execute the instruction predicated off, so they issue nothing and count nothing. The data the
copy writes is the same either way: a hint moves issue work, never bytes.

`WarpMask` is the typed hint; `affine_basis` and `row_shares` are the two checks the verifier
(ir/verify.py) and the simulator (sim/machine.py) share.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WarpMask:
    """A set of warp ids as a bitmask: bit w set means warp w issues the copy.

    Attributes:
        bits: the mask, e.g. ``0b0001`` (warp 0 only) or ``0b1111`` (warps 0-3). Non-empty; whether it is an affine
            subspace of the warp ids, and lies within the partition, is the verifier's question (a planted bad mask
            must reach it)."""

    bits: int

    def __post_init__(self) -> None:
        if not isinstance(self.bits, int) or isinstance(self.bits, bool):
            raise TypeError(f"WarpMask(bits={self.bits!r}): expected an int bitmask of warp ids")
        if self.bits <= 0:
            raise ValueError(f"WarpMask(bits={self.bits}): expected at least one warp (bits > 0)")

    @staticmethod
    def every(warps: int) -> WarpMask:
        """All `warps` warps of a partition (what a copy without a hint issues from)."""
        return WarpMask((1 << warps) - 1)

    @property
    def members(self) -> tuple[int, ...]:
        """The warp ids, ascending."""
        return tuple(w for w in range(self.bits.bit_length()) if self.bits >> w & 1)

    def __str__(self) -> str:
        return f"0b{self.bits:0{max(4, self.bits.bit_length())}b}"


def affine_basis(mask: WarpMask) -> tuple[int, tuple[int, ...]] | None:
    """(base, basis) with ``mask == {base XOR span(basis)}`` if the mask is an affine subspace of the warp ids (as
    bit vectors over GF(2)), else None.

    Allowed (affine): ``0b0001`` {0} (base 0, no basis); ``0b0011`` {0, 1}; ``0b1111`` {0..3}; ``0b0101`` {0, 2};
    ``0b1010`` {1, 3} (base 1, basis 2); ``0b1001`` {0, 3} (basis 3: affine, though not axis-aligned);
    ``0b1100`` {2, 3}. Forbidden: ``0b0111`` {0, 1, 2} (3 members: an affine set has 2^d); ``0b1011`` {0, 1, 3}
    (3 members); ``0b00010111`` {0, 1, 2, 4} (4 members, but 1 ^ 2 ^ 4 = 7 is missing: not closed under XOR).

    From first principles: a set S is affine iff, for any s0 in S, S ^ s0 = {s ^ s0} is a linear subspace, i.e. it
    contains 0 and is closed under XOR. Build the subspace's basis greedily from S ^ s0 (Gaussian elimination over
    GF(2)), then S is affine iff its size is 2^len(basis) and every element of the span lies in S."""
    members = mask.members
    base = members[0]
    shifted = {w ^ base for w in members}
    basis: list[int] = []
    reduced: list[int] = []  # the basis in echelon form: each one's top bit is unique
    for v in sorted(shifted):
        r = v
        for b in reduced:
            r = min(r, r ^ b)
        if r:
            basis.append(v)
            reduced.append(r)
            reduced.sort(reverse=True)
    if len(members) != 1 << len(basis):
        return None
    span = {0}
    for b in basis:
        span |= {s ^ b for s in span}
    return (base, tuple(basis)) if span == shifted else None


def axis_aligned(mask: WarpMask) -> bool:
    """Whether an affine mask's warps differ in whole bits of the warp id, so that one mask check selects them
    (``warp_id & ~support == base``): Triton's lowering of ``warp_used_hint`` accepts only these (``0b0101`` yes,
    ``0b1001`` no: {0, 3} vary in bits 0 and 1 together)."""
    found = affine_basis(mask)
    if found is None:
        return False
    base, basis = found
    support = 0
    for b in basis:
        support |= b
    return len(mask.members) == 1 << bin(support).count("1") and base & support == 0


def row_shares(mask: WarpMask, warps: int, rows: int) -> dict[int, range]:
    """The rows of a `rows`-row block each existing warp of a `warps`-warp partition copies when `mask`'s warps
    issue it: the block re-tiled over the K = |mask| active warps in ascending order, rows / K each (the last rows
    stay uncopied when K does not divide them). A named warp the partition does not have copies nothing: its share
    is missing from the result."""
    members = mask.members
    share = rows // len(members)
    return {w: range(j * share, (j + 1) * share) for j, w in enumerate(members) if w < warps}


def uncovered_rows(mask: WarpMask, warps: int, rows: int) -> list[range]:
    """The row ranges of the block that no warp copies (`row_shares`), merged; empty when every row is copied once."""
    covered = sorted((r.start, r.stop) for r in row_shares(mask, warps, rows).values() if len(r))
    gaps: list[range] = []
    at = 0
    for start, stop in covered:
        if start > at:
            gaps.append(range(at, start))
        at = max(at, stop)
    if at < rows:
        gaps.append(range(at, rows))
    return gaps


def fewest_copies(masks: list[WarpMask | None], warps: int) -> int:
    """Of copies issued by `masks` (None: every one of `warps` warps), the fewest any issuing warp issues: what one
    tdm_wait's count may leave in flight per block (a TDM wait counts the running warp's own copies)."""
    bits = [(m or WarpMask.every(warps)).bits for m in masks]
    issuing = [w for w in range(warps) if any(b >> w & 1 for b in bits)]
    return min((sum(b >> w & 1 for b in bits) for w in issuing), default=0)
