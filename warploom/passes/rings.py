"""Ring and barrier planning: deepen the rings to `stages` slots and add the full/empty handshake.

Per stage s there is a READY barrier (count 1: the producer's arrive.expect_tx; its phase completes
when the TMA bytes land too) and an EMPTY barrier (count 1: the consumer's release). The producer
waits EMPTY with the flipped parity, so its first pass over the fresh ring does not wait.

Blockwise scales ride the same stages (seed 001): their copies are tracked by the stage's READY phase
without counting as arrivals, so they are issued first, before the arrive.expect_tx that could complete
it, and the consumer's one wait covers A, B and both scales. The consumer releases the stage after the
last op that reads it: the last wgmma, or, with blockwise scales, the last promotion that reads them.

    producer, per (tile, k):                 consumer, per (tile, k):
      wait empty[p] phase(p)^1                 wait ready[c] phase(c)
      [copy_scales -> sa[p], sb[p] on ready[p]]
      arrive_expect_tx ready[p] bytes=A+B      wgmma acc += a[c] @ b[c]
      tma_load A -> a[p] on ready[p]           arrive empty[c]
      tma_load B -> b[p] on ready[p]           advance c
      advance p
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class PlanRings:
    """Attributes:
    stages: ring depth (pipeline stages)."""

    stages: int

    def __call__(self, m: ir.Module) -> ir.Module:
        s = self.stages
        rings = tuple(replace(r, depth=s) for r in m.rings)
        names = tuple(r.name for r in rings)
        barriers = (
            ir.Barriers("ready", s, 1, names, ir.Purpose.READY),
            ir.Barriers("empty", s, 1, names, ir.Purpose.EMPTY),
        )
        # Only TMA bytes count as transactions; the scales' cp.async copies hold the phase by other means.
        stage_bytes = sum(r.slot_bytes for r in rings if r.tensor in (ir.Tensor.A, ir.Tensor.B))
        parts = []
        for p in m.partitions:
            cursors = tuple(replace(c, depth=s) for c in p.cursors)
            if p.role is ir.Role.PRODUCER:
                body = _producer(p.body, stage_bytes)
            else:
                body = _consumer(p.body)
            parts.append(replace(p, body=body, cursors=cursors))
        return replace(m, rings=rings, barriers=barriers, partitions=tuple(parts))


def _producer(body: tuple[ir.Stmt, ...], stage_bytes: int) -> tuple[ir.Stmt, ...]:
    """A body's loads fill one stage: claim the slot, start the scale copies, announce the TMA bytes, then
    issue the TMA loads (the scale copies must precede the arrival that can complete the phase)."""
    body = tuple(replace(s, body=_producer(s.body, stage_bytes)) if isinstance(s, ir.Loop) else s for s in body)
    tma = [s for s in body if isinstance(s, ir.TmaLoad)]
    if not tma:
        return body
    cur = tma[0].slot.cursor
    copies = [replace(s, barrier="ready") for s in body if isinstance(s, ir.CopyScales)]
    stage: list[ir.Stmt] = [ir.Wait("empty", ir.Slot(cur), ir.Parity(cur, flip=True)), *copies,
                            ir.ArriveExpectTx("ready", ir.Slot(cur), stage_bytes),
                            *(replace(s, barrier="ready") for s in tma)]
    first = next(i for i, s in enumerate(body) if isinstance(s, (ir.TmaLoad, ir.CopyScales)))
    rest = [s for s in body[first:] if not isinstance(s, (ir.TmaLoad, ir.CopyScales))]
    return (*body[:first], *stage, *rest)


def _consumer(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """Wait for the slot before the k-block's first wgmma; release it after its last (there are several
    when the accumulator is split into column blocks), or after the last promotion reading its scales."""
    mmas = [i for i, s in enumerate(body) if isinstance(s, ir.Mma)]
    readers = [i for i, s in enumerate(body) if isinstance(s, ir.Mma)
               or (isinstance(s, ir.Promote) and s.scales is not None)]
    out: list[ir.Stmt] = []
    for i, s in enumerate(body):
        if isinstance(s, ir.Loop):
            out.append(replace(s, body=_consumer(s.body)))
            continue
        if mmas and i == mmas[0]:
            cur = s.slot.cursor  # type: ignore[union-attr]
            out.append(ir.Wait("ready", ir.Slot(cur), ir.Parity(cur)))
        out.append(s)
        if readers and i == readers[-1]:
            out.append(ir.Arrive("empty", ir.Slot(body[mmas[0]].slot.cursor)))  # type: ignore[union-attr]
    return tuple(out)
