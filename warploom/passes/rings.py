"""Ring and barrier planning: deepen the rings to `stages` slots and add the full/empty handshake.

Per stage s there is a READY barrier (count 1: the producer's arrive.expect_tx; its phase completes
when the TMA bytes land too) and an EMPTY barrier (count 1: the consumer's release). The producer
waits EMPTY with the flipped parity, so its first pass over the fresh ring does not wait.

    producer, per (tile, k):                 consumer, per (tile, k):
      wait empty[p] phase(p)^1                 wait ready[c] phase(c)
      arrive_expect_tx ready[p] bytes=A+B      wgmma acc += a[c] @ b[c]
      tma_load A -> a[p] on ready[p]           arrive empty[c]
      tma_load B -> b[p] on ready[p]           advance c
      advance p
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import rewrite


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
        stage_bytes = sum(r.slot_bytes for r in rings)
        parts = []
        for p in m.partitions:
            cursors = tuple(replace(c, depth=s) for c in p.cursors)
            if p.role is ir.Role.PRODUCER:
                body = rewrite(p.body, lambda o: _producer(o, stage_bytes))
            else:
                body = _consumer(p.body)
            parts.append(replace(p, body=body, cursors=cursors))
        return replace(m, rings=rings, barriers=barriers, partitions=tuple(parts))


def _producer(o: ir.Op, stage_bytes: int) -> tuple[ir.Stmt, ...]:
    if not isinstance(o, ir.TmaLoad):
        return (o,)
    load = replace(o, barrier="ready")
    if o.tensor is not ir.Tensor.A:
        return (load,)
    # The A load opens the stage: claim the slot, then announce the stage's bytes before any copy.
    cur = o.slot.cursor
    return (
        ir.Wait("empty", ir.Slot(cur), ir.Parity(cur, flip=True)),
        ir.ArriveExpectTx("ready", ir.Slot(cur), stage_bytes),
        load,
    )


def _consumer(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """Wait for the slot before the k-block's first wgmma; release it after its last (there are several
    when the accumulator is split into column blocks)."""
    mmas = [i for i, s in enumerate(body) if isinstance(s, ir.Mma)]
    out: list[ir.Stmt] = []
    for i, s in enumerate(body):
        if isinstance(s, ir.Loop):
            out.append(replace(s, body=_consumer(s.body)))
            continue
        if mmas and i == mmas[0]:
            cur = s.slot.cursor  # type: ignore[union-attr]
            out.append(ir.Wait("ready", ir.Slot(cur), ir.Parity(cur)))
        out.append(s)
        if mmas and i == mmas[-1]:
            out.append(ir.Arrive("empty", ir.Slot(s.slot.cursor)))  # type: ignore[union-attr]
    return tuple(out)
