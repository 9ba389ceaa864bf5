"""Ring and barrier planning: deepen the rings to `stages` slots and add the full/empty handshake.

Per stage s there is a READY barrier (count 1: the producer's arrive.expect_tx; its phase completes
when the TMA bytes land too) and an EMPTY barrier (count 1: the consumer's release). The producer
waits EMPTY with the flipped parity, so its first pass over the fresh ring does not wait.

Blockwise scales ride the same stages (seed 001): their copies are tracked by the stage's READY phase
without counting as arrivals, so they are issued first, before the arrive.expect_tx that could complete
it, and the consumer's one wait covers A, B and both scales. The consumer releases the stage after the
last op that reads it: the last wgmma, or, with blockwise scales, the last promotion that reads them.
Scales a SCALES partition copies (passes/scales.py, seed 000) fill rings of their own instead, with
SCALE_READY/SCALE_EMPTY barriers of depth `scale_stages`: that partition arrives once on scale_ready after
its copies, and the consumer waits on it before its first scaled promotion of the k-block.

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
    stages: ring depth (pipeline stages) of the rings the producer fills.
    scale_stages: depth of the scale rings a SCALES partition fills (passes/scales.py), if there is one."""

    stages: int
    scale_stages: int = 2

    def __call__(self, m: ir.Module) -> ir.Module:
        # Rings are grouped by the partition that fills them: the producer's stages get ready/empty barriers, a
        # scale partition's ring scale_ready/scale_empty ones of its own depth.
        filler = {o.ring: p.role for p in m.partitions for o, _ in ir.walk(p.body)
                  if isinstance(o, (ir.TmaLoad, ir.CopyScales))}
        group = {r.name: "scale_" if filler.get(r.name) is ir.Role.SCALES else "" for r in m.rings}
        depth = {"": self.stages, "scale_": self.scale_stages}
        rings = tuple(replace(r, depth=depth[group[r.name]]) for r in m.rings)
        barriers: tuple[ir.Barriers, ...] = ()
        for g in dict.fromkeys(group.values()):
            names = tuple(r.name for r in rings if group[r.name] == g)
            barriers += (ir.Barriers(f"{g}ready", depth[g], 1, names, ir.Purpose.READY),
                         ir.Barriers(f"{g}empty", depth[g], 1, names, ir.Purpose.EMPTY))
        # Only TMA bytes count as transactions (A's, B's and sm_100a MX's scales); cp.async scale copies hold the
        # phase by other means.
        tma = {o.ring: o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TmaLoad)}
        stage_bytes = sum(ir.load_bytes(r, tma[r.name]) for r in rings if r.name in tma)
        parts = []
        for p in m.partitions:
            # A cursor indexes the rings of one group: it gets that group's depth.
            used = {}
            for o, _ in ir.walk(p.body):
                for ring, slot in _ring_slots(o):
                    used[slot.cursor] = group[ring]
            cursors = tuple(replace(c, depth=depth[used.get(c.name, "")]) for c in p.cursors)
            if p.role in (ir.Role.PRODUCER, ir.Role.SCALES):
                body = _producer(p.body, stage_bytes, group)
            else:
                body = _consumer(p.body, group)
            parts.append(replace(p, body=body, cursors=cursors))
        return replace(m, rings=rings, barriers=barriers, partitions=tuple(parts))


def _ring_slots(o: ir.Op) -> list[tuple[str, ir.Slot]]:
    """The (ring, slot) pairs an op writes or reads."""
    match o:
        case ir.TmaLoad() | ir.CopyScales() | ir.ScaleCopy():
            return [(o.ring, o.slot)]
        case ir.Mma():
            return [(o.a_ring, o.slot), (o.b_ring, o.slot)]
        case ir.Promote() if o.scales is not None:
            return [(o.scales.a_ring, o.scales.slot), (o.scales.b_ring, o.scales.slot)]
    return []


def _producer(body: tuple[ir.Stmt, ...], stage_bytes: int, group: dict[str, str]) -> tuple[ir.Stmt, ...]:
    """A body's loads fill one stage: claim the slot, start the scale copies, announce the TMA bytes, then
    issue the TMA loads (the scale copies must precede the arrival that can complete the phase). A scale
    partition's stage has no TMA: its copies, then a plain arrival."""
    body = tuple(replace(s, body=_producer(s.body, stage_bytes, group)) if isinstance(s, ir.Loop) else s
                 for s in body)
    loads = [s for s in body if isinstance(s, (ir.TmaLoad, ir.CopyScales))]
    if not loads:
        return body
    g = group[loads[0].ring]
    ready, cur = f"{g}ready", loads[0].slot.cursor
    copies = [replace(s, barrier=ready) for s in loads if isinstance(s, ir.CopyScales)]
    tma = [replace(s, barrier=ready) for s in loads if isinstance(s, ir.TmaLoad)]
    stage: list[ir.Stmt] = [ir.Wait(f"{g}empty", ir.Slot(cur), ir.Parity(cur, flip=True)), *copies]
    if tma:
        stage += [ir.ArriveExpectTx(ready, ir.Slot(cur), stage_bytes), *tma]
    else:
        stage.append(ir.Arrive(ready, ir.Slot(cur)))
    first = next(i for i, s in enumerate(body) if isinstance(s, (ir.TmaLoad, ir.CopyScales)))
    rest = [s for s in body[first:] if not isinstance(s, (ir.TmaLoad, ir.CopyScales))]
    return (*body[:first], *stage, *rest)


def _consumer(body: tuple[ir.Stmt, ...], group: dict[str, str]) -> tuple[ir.Stmt, ...]:
    """Per ring group: wait for the slot before the k-block's first op reading it (its first wgmma, or its first
    scaled promotion for a scale partition's ring); release it after the last (there are several wgmma when the
    accumulator is split into column blocks, and with in-stage scales the last reader is a promotion)."""
    first: dict[str, int] = {}
    last: dict[str, tuple[int, str]] = {}
    for i, s in enumerate(body):
        if isinstance(s, ir.Loop):
            continue
        for ring, slot in _ring_slots(s):
            first.setdefault(group[ring], i)
            last[group[ring]] = (i, slot.cursor)
    out: list[ir.Stmt] = []
    for i, s in enumerate(body):
        if isinstance(s, ir.Loop):
            out.append(replace(s, body=_consumer(s.body, group)))
            continue
        for g, (_, cur) in last.items():
            if first[g] == i:
                out.append(ir.Wait(f"{g}ready", ir.Slot(cur), ir.Parity(cur)))
        out.append(s)
        for g, (j, cur) in last.items():
            if j == i:
                out.append(ir.Arrive(f"{g}empty", ir.Slot(cur)))
    return tuple(out)
