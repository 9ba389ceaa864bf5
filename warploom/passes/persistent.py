"""Persistent scheduling of the producer: flatten its (tile, k) nest into one loop (seed 002).

The producer has no per-tile work, so one flat loop over every (tile, k) pair of its CTA runs ahead
across tile boundaries: it fills the next tile's first stages while the consumer is still in the
previous tile's epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class FlattenProducer:
    def __call__(self, m: ir.Module) -> ir.Module:
        # The scale partition (seed 000) has no per-tile work either.
        parts = tuple(replace(p, body=_flatten(p.body)) if p.role in (ir.Role.PRODUCER, ir.Role.SCALES) else p
                      for p in m.partitions)
        return replace(m, partitions=parts)


def _flatten(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    match body:
        case (ir.Loop(kind=ir.LoopKind.TILES, body=(ir.Loop(kind=ir.LoopKind.K, body=inner),)),):
            return (ir.Loop(ir.LoopKind.FLAT, inner),)
    return body
