"""sm_100a tensor-memory scale buffers (seed 001): what each holds, and who may still be reading it.

A `ScaleCopy` (tcgen05_copy) joins its partition's in-order queue of tcgen05 ops: it reads its shared-memory slot
until it completes and then writes the buffer. A block-scaled `TcMma` reads its scale buffers while it executes, so
at issue the buffer's last copy must be of this (tile, k-block)'s scales and, like the MMA, ordered behind nothing
that could still change it. One thread's tcgen05 ops execute in issue order (Triton's lowering and seed 001 rely
on it: one buffer per operand, no double buffering), so a copy the MMA's own partition issues after it cannot
overwrite what it reads; a copy from another thread can (SCALE_OVERWRITTEN), as a missing or misplaced copy leaves
the MMA the wrong scales (SCALE_COPY_MISSING). Buffers that share tensor-memory columns with an accumulator slot
clobber it and are clobbered by it (TMEM_OVERLAP).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from warploom.ir import nodes as ir
from warploom.sim.findings import FindingKind
from warploom.sim.program import Tag

Flag = tuple[FindingKind, str]


@dataclass
class _Buffer:
    """last: the last copy issued into it (issuing partition, scales); content: the scales its last finished copy
    wrote; readers: MMAs issued and not finished, as (partition, pc, the scales they need, fine at issue)."""

    last: tuple[int, Tag] | None = None
    content: Tag | None = None
    readers: tuple[tuple[int, int, Tag, bool], ...] = ()

    def key(self) -> tuple[object, ...]:
        return (self.last, self.content, self.readers)


@dataclass
class ScaleBuffers:
    """The module's scale buffers, and for each the accumulator ring slots whose columns it shares."""

    bufs: dict[str, _Buffer] = field(default_factory=dict)
    overlap: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    @staticmethod
    def of(m: ir.Module) -> ScaleBuffers:
        """Columns as the verifier counts them: the accumulator ring's slot j at j * cols, each buffer at col0."""
        sb = ScaleBuffers()
        for b in m.tmem_scales:
            sb.bufs[b.name] = _Buffer()
            sb.overlap[b.name] = tuple((r.name, j) for r in m.rings if r.in_tmem for j in range(r.depth)
                                       if j * r.cols < b.col0 + b.columns and b.col0 < (j + 1) * r.cols)
        return sb

    def clone(self) -> ScaleBuffers:
        return ScaleBuffers({k: _Buffer(b.last, b.content, b.readers) for k, b in self.bufs.items()}, self.overlap)

    def key(self) -> tuple[object, ...]:
        return tuple(b.key() for b in self.bufs.values())

    def copy_issued(self, agent: int, dst: str, tag: Tag) -> None:
        self.bufs[dst].last = (agent, tag)

    def mma_issued(self, agent: int, pc: int, where: str, reads: tuple[tuple[str, Tag], ...]) -> list[Flag]:
        flags: list[Flag] = []
        for name, tag in reads:
            b = self.bufs[name]
            ok = b.last is not None and b.last == (agent, tag)
            if b.last is None:
                flags.append((FindingKind.SCALE_COPY_MISSING,
                              f"{where} reads scale buffer {name}, into which no tcgen05_copy was issued (it needs "
                              f"{tag})"))
            elif b.last[1] != tag:
                flags.append((FindingKind.SCALE_COPY_MISSING,
                              f"{where} reads scale buffer {name}, whose last tcgen05_copy brought {b.last[1]}, but "
                              f"this (tile, k-block) needs {tag}"))
            elif b.last[0] != agent:
                flags.append((FindingKind.SCALE_OVERWRITTEN,
                              f"{where} reads scale buffer {name}, whose copy of {tag} another partition issued: it "
                              "is not ordered before this MMA"))
            b.readers = b.readers + ((agent, pc, tag, ok),)
        return flags

    def copy_done(self, agent: int, where: str, dst: str, tag: Tag) -> list[Flag]:
        """A copy finishes. Its own thread's earlier MMAs have finished and its later ones have not started; an MMA
        of another thread still reading the buffer has the copy overwrite what it reads."""
        b = self.bufs[dst]
        flags = [(FindingKind.SCALE_OVERWRITTEN,
                  f"{where} finishes writing {tag} into scale buffer {dst} while an MMA another partition issued, "
                  f"which needs {need}, has not finished reading it") for a, _, need, _ in b.readers
                 if a != agent and need != tag]
        b.content = tag
        return flags

    def mma_done(self, agent: int, pc: int, where: str, reads: tuple[tuple[str, Tag], ...]) -> list[Flag]:
        flags: list[Flag] = []
        for name, tag in reads:
            b = self.bufs[name]
            mine = [r for r in b.readers if r[:2] == (agent, pc)]
            b.readers = tuple(r for r in b.readers if r[:2] != (agent, pc))
            if mine and mine[0][3] and b.content != tag:
                flags.append((FindingKind.SCALE_OVERWRITTEN,
                              f"{where} finishes with scale buffer {name} holding {b.content}, not the {tag} copied "
                              "for it"))
        return flags
