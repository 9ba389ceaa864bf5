"""MMA pipelining: make wgmma asynchronous and release each slot as late as correctness needs.

Native accumulation keeps one wgmma in flight: after issuing k-block k's wgmma, `wgmma_wait 1`
guarantees k-block k-1's wgmma finished, so slot c-1 (not c) is released. After the k-loop,
`wgmma_wait 0` drains the last one and releases its slot before the accumulator is read. A narrow tile
(rule 31) issues one wgmma per column block: `wgmma_wait n` after the k-block's n keeps them in flight alike.

Promoted fp8 accumulation reads the partial right after each wgmma, so it waits for 0 in flight and
releases the slot after the k-block's last wgmma (with column-block accumulators there is one wgmma
and one wait per block). Alone, that wait leaves the tensor cores idle between k-blocks (0.76-0.81x
torch's use_fast_accum=False); with one consumer partition per warpgroup (SplitConsumers) the other
warpgroup's wgmma fills the gap (0.92-1.05x, docs/benchmarks.md). Not implemented: unrolling k by two
with two partials issued back to back (`wgmma_wait 1; acc += p0; wgmma_wait 0; acc += p1`), which a
probe compiled at 128x128 without ptxas's C7514 serialization; keeping a partial in flight across the
loop's back edge does trip C7514.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class PipelineMma:
    def __call__(self, m: ir.Module) -> ir.Module:
        # With one slot, slot c-1 is slot c: deferring its release would make the consumer wait for a
        # refill that only that release allows (a deadlock), so a 1-stage ring waits and releases at once.
        serial = min(r.depth for r in m.rings) == 1
        parts = tuple(
            replace(p, body=_tiles(p.body, serial)) if p.role is ir.Role.CONSUMER else p for p in m.partitions
        )
        return replace(m, partitions=parts)


def _tiles(body: tuple[ir.Stmt, ...], serial: bool) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K:
            out.extend(_k_loop(s, serial))
        elif isinstance(s, ir.Loop):
            out.append(replace(s, body=_tiles(s.body, serial)))
        else:
            out.append(s)
    return tuple(out)


def _k_loop(loop: ir.Loop, serial: bool) -> tuple[ir.Stmt, ...]:
    mma = next(s for s in loop.body if isinstance(s, ir.Mma))
    cur = mma.slot.cursor
    promoted = mma.overwrite is ir.Guard.ALWAYS or serial
    # A narrow tile's k-block (rule 31) issues one wgmma per column block: all of them, then a wait that leaves
    # only this k-block's in flight, so the previous k-block's slot is released once.
    mmas = [s for s in loop.body if isinstance(s, ir.Mma)]
    body: list[ir.Stmt] = []
    for s in loop.body:
        if isinstance(s, ir.Mma):
            body.append(replace(s, is_async=True))
            if promoted:
                body.append(ir.MmaWait(0))
            elif s is mmas[-1]:
                body.append(ir.MmaWait(len(mmas)))
                body.append(ir.Arrive("empty", ir.Slot(cur, -1), guard=ir.Guard.NOT_FIRST_K))
        elif isinstance(s, ir.Arrive) and s.barrier == "empty" and not promoted:
            continue  # replaced by the deferred release above and after the loop
        else:
            body.append(s)
    if promoted:  # PlanRings' release of slot c stays where it is, right after the wait for 0
        return (ir.Loop(ir.LoopKind.K, tuple(body)),)
    # Cursor c has advanced past the last k-block, so its slot is c-1.
    return (ir.Loop(ir.LoopKind.K, tuple(body)), ir.MmaWait(0), ir.Arrive("empty", ir.Slot(cur, -1)))
