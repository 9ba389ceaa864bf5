"""Consumer splitting: one MMA partition per warpgroup, each owning a row block of every tile.

A single 8-warp consumer partition runs its two warpgroups in lockstep: Gluon lowers each mbarrier
arrive of a multi-warp partition to a bar.sync over all its warps followed by one thread's arrive, so
every k-block both warpgroups meet before the slot is released. Split into two 4-warp partitions, each
warpgroup releases its slots on its own (the empty barrier counts one arrival per partition) and runs
ahead or behind the other by up to the ring's depth. With promoted fp8 accumulation, where a
warpgroup must wait for its own wgmma before adding the partial, this lets one warpgroup's wgmma run on
the tensor cores while the other promotes.

    partition consumer0 (rows 0:64, default)    partition consumer1 (rows 64:128)
      wait ready[c]                               wait ready[c]
      wgmma acc += a[c][0:64] @ b[c]              wgmma acc += a[c][64:128] @ b[c]
      arrive empty[c]   -- count 2 --             arrive empty[c]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class SplitConsumers:
    """Attributes:
    partitions: consumer partitions to split the consumer into (1: leave it whole)."""

    partitions: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        n = self.partitions
        if n == 1:
            return m
        (cons,) = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
        rows = m.tiling.bm // n
        if rows % 64 or cons.warps % n or cons.warps // n != 4:
            raise ValueError(f"cannot split a {cons.warps}-warp consumer of {m.tiling.bm}-row tiles into {n} "
                             f"warpgroups of 64-row blocks")
        split = tuple(
            replace(cons, name=f"{cons.name}{i}", warps=4, default=cons.default and i == 0,
                    accumulators=tuple(replace(a, rows=rows) for a in cons.accumulators),
                    rows=ir.RowBlock(i * rows, rows))
            for i in range(n)
        )
        # Each consumer partition releases every slot once, so a slot is free after n arrivals.
        arrivals = {o.barrier for o, _ in ir.walk(cons.body) if isinstance(o, ir.Arrive)}
        barriers = tuple(replace(b, count=b.count * n) if b.name in arrivals else b for b in m.barriers)
        parts: list[ir.Partition] = []
        for p in m.partitions:
            parts.extend(split if p is cons else (p,))
        return replace(m, partitions=tuple(parts), barriers=barriers)
