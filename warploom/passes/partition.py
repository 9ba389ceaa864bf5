"""Partitioning: split the sequential program into a TMA producer and an MMA consumer (seed 002).

The producer gets a copy of the loop nest holding only the loads and its own cursor; the consumer keeps
everything else. After this pass the two partitions share rings without any synchronization: the
ring-planning pass that follows adds it, and the verifier refuses a finished module without it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import filter_ops, prune, rewrite


def _is_load(o: ir.Op) -> bool:
    return isinstance(o, (ir.TmaLoad, ir.CopyScales))


def _rename_cursor(o: ir.Op, new: str) -> tuple[ir.Stmt, ...]:
    if isinstance(o, (ir.TmaLoad, ir.CopyScales)):
        return (replace(o, slot=replace(o.slot, cursor=new)),)
    if isinstance(o, ir.Advance):
        return (ir.Advance(new),)
    return (o,)


@dataclass(frozen=True)
class SplitProducer:
    """Move loads into a `producer_warps`-warp PRODUCER partition; the rest becomes the CONSUMER.

    Attributes:
        producer_warps: warps issuing TMA (one is enough: a single thread issues each copy).
    """

    producer_warps: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        (seq,) = m.partitions
        assert seq.role is ir.Role.SEQUENTIAL
        # The producer keeps loads and cursor advances (its own count of stages filled).
        prod_body = rewrite(
            filter_ops(seq.body, lambda o: _is_load(o) or isinstance(o, ir.Advance)),
            lambda o: _rename_cursor(o, "p"),
        )
        producer = ir.Partition(
            name="producer", role=ir.Role.PRODUCER, warps=self.producer_warps, body=prune(prod_body),
            cursors=tuple(ir.Cursor("p", c.depth) for c in seq.cursors),
        )
        consumer = replace(seq, name="consumer", role=ir.Role.CONSUMER,
                           body=filter_ops(seq.body, lambda o: not _is_load(o)))
        return replace(m, partitions=(consumer, producer))
