"""Epilogue lowering: write each tile through a shared-memory staging buffer and an async TMA store.

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
    def __call__(self, m: ir.Module) -> ir.Module:
        t = m.tiling
        buf = ir.Buffer("c_smem", ir.Tensor.C, m.spec.out_dtype, t.bm, t.bn)

        def lower(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if not isinstance(o, ir.StoreTile):
                return (o,)
            return (ir.StoreWait(0), ir.StoreSmem(o.acc, buf.name), ir.FenceAsync(), ir.TmaStore(buf.name))

        parts = []
        for p in m.partitions:
            body = rewrite(p.body, lower)
            if body != p.body:
                body = body + (ir.StoreWait(0),)
            parts.append(replace(p, body=body))
        return replace(m, buffers=m.buffers + (buf,), partitions=tuple(parts))
