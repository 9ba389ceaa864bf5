"""Epilogue lowering: write each tile through a shared-memory staging buffer and an async TMA store.

With `subtiles` = 2 the tile goes out in two column halves through a half-width buffer: the 32 KiB
saved buys the mainloop one more pipeline stage (planner.py), at the cost of one more store wait.

    tma_store_wait pending=0     # the previous tile's store has finished reading the buffer
    store_smem c_smem <- acc     # registers -> smem, cast to the output dtype (generic proxy)
    fence_async_shared           # make those writes visible to the TMA engine (async proxy)
    tma_store c_smem -> C[m, n]  # overlaps the next tile's mainloop
  ... and after the tile loop: tma_store_wait pending=0, so the CTA never exits with a store in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import rewrite


@dataclass(frozen=True)
class LowerEpilogue:
    """Attributes:
    subtiles: column blocks the tile is stored in (1 or 2)."""

    subtiles: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        t, n = m.tiling, self.subtiles
        buf = ir.Buffer("c_smem", ir.Tensor.C, m.spec.out_dtype, t.bm, t.bn // n)

        def lower(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if not isinstance(o, ir.StoreTile):
                return (o,)
            out: list[ir.Stmt] = []
            for i in range(n):
                out += [ir.StoreWait(0), ir.StoreSmem(o.acc, buf.name, i, n), ir.FenceAsync(),
                        ir.TmaStore(buf.name, part=i, parts=n)]
            return tuple(out)

        parts = []
        for p in m.partitions:
            body = rewrite(p.body, lower)
            if body != p.body:
                body = body + (ir.StoreWait(0),)
            parts.append(replace(p, body=body))
        return replace(m, buffers=m.buffers + (buf,), partitions=tuple(parts))
