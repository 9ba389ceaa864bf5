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
        storing = [p for p in m.partitions if any(isinstance(o, ir.StoreTile) for o, _ in ir.walk(p.body))]
        buffers: list[ir.Buffer] = []
        parts = []
        for p in m.partitions:
            if p not in storing:
                parts.append(p)
                continue
            # Each storing partition (one per consumer warpgroup after SplitConsumers) stages its own rows.
            name = "c_smem" if len(storing) == 1 else f"c_smem{len(buffers)}"
            rows = p.rows.rows if p.rows else t.bm
            accs = {a.name: a for a in p.accumulators}
            # One column block per store; an accumulator narrower than that (column-block accumulators)
            # is stored whole.
            width = min([t.bn // n] + [accs[o.acc].cols for o, _ in ir.walk(p.body) if isinstance(o, ir.StoreTile)])
            buf = ir.Buffer(name, ir.Tensor.C, m.spec.out_dtype, rows, width)
            buffers.append(buf)

            def lower(o: ir.Op, buf: ir.Buffer = buf, accs: dict[str, ir.Accumulator] = accs) -> tuple[ir.Stmt, ...]:
                if not isinstance(o, ir.StoreTile):
                    return (o,)
                acc, w = accs[o.acc], buf.cols
                out: list[ir.Stmt] = []
                for i in range(acc.cols // w):
                    out += [ir.StoreWait(0), ir.StoreSmem(o.acc, buf.name, i, acc.cols // w), ir.FenceAsync(),
                            ir.TmaStore(buf.name, part=acc.col0 // w + i, parts=t.bn // w)]
                return tuple(out)

            parts.append(replace(p, body=rewrite(p.body, lower) + (ir.StoreWait(0),)))
        return replace(m, buffers=m.buffers + tuple(buffers), partitions=tuple(parts))
