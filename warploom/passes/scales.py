"""Scale partitioning (seed 000): a dedicated partition that loads blockwise scales into a ring of its own.

Without this pass the producer copies each k-block's scales into scale rings of the A/B stages (seed 001: one
ready wait covers all four). With it, the copies move to a SCALES partition of a few warps with its own cursor
`q` and its own, shallower ring (PlanRings gives it `scale_ready`/`scale_empty` barriers): the scales are then
decoupled from the A/B pipeline, as seed 000 asks for scales that cannot travel with the tiles (an MoE expert's
gathered scales, a layout to be rearranged on the way); the consumers wait for them just before their first
scaled promotion of the k-block and release them after the last, while the A/B stage is released after the
last wgmma.

    partition scales (1 warp)                  consumer, per (tile, k)
      for tiles*k:                               wait ready[c] / wgmma / wgmma_wait 0 / arrive empty[c]
        wait scale_empty[q] phase(q)^1           wait scale_ready[q] phase(q)
        copy_scales -> sa[q], sb[q]              promote acc += partial * sa[q] * sb[q]
        arrive scale_ready[q]                    arrive scale_empty[q]
        advance q                                advance c; advance q
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import filter_ops, prune, rewrite


@dataclass(frozen=True)
class SplitScales:
    """Attributes:
    enabled: move the scale copies to their own partition (False: they stay in the producer's stages).
    warps: warps of the scale partition (seed 000: 1-4)."""

    enabled: bool = False
    warps: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        if not self.enabled:
            return m
        if not 1 <= self.warps <= 4:
            raise ValueError(f"a scale partition has 1-4 warps, not {self.warps}")
        prod = next(p for p in m.partitions if p.role is ir.Role.PRODUCER)
        if not any(isinstance(o, ir.CopyScales) for o, _ in ir.walk(prod.body)):
            raise ValueError("no scale copies to move: the spec's recipe is not blockwise")

        def own(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if isinstance(o, ir.CopyScales):
                return (replace(o, slot=ir.Slot("q")),)
            return (ir.Advance("q"),) if isinstance(o, ir.Advance) else (o,)

        scales = ir.Partition(
            name="scales", role=ir.Role.SCALES, warps=self.warps,
            body=prune(rewrite(filter_ops(prod.body, lambda o: isinstance(o, (ir.CopyScales, ir.Advance))), own)),
            cursors=(ir.Cursor("q", 1),),
        )
        producer = replace(prod, body=filter_ops(prod.body, lambda o: not isinstance(o, ir.CopyScales)))

        def consume(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if isinstance(o, ir.Promote) and o.scales is not None:
                return (replace(o, scales=replace(o.scales, slot=ir.Slot("q"))),)
            if isinstance(o, ir.Advance):  # one scale stage per k-block, like the A/B stage
                return (o, ir.Advance("q"))
            return (o,)

        parts: list[ir.Partition] = []
        for p in m.partitions:
            if p.role is ir.Role.CONSUMER:
                parts.append(replace(p, body=rewrite(p.body, consume), cursors=(*p.cursors, ir.Cursor("q", 1))))
            elif p is prod:
                parts += [producer, scales]
            else:
                parts.append(p)
        return replace(m, partitions=tuple(parts))
