"""Consumer splitting: one MMA partition per warpgroup, cooperative (each owning a row block of every tile) or
ping-pong (each owning every other tile).

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

Ping-pong (seed 002): each warpgroup takes whole tiles instead, alternately, so one warpgroup's epilogue runs
while the other's wgmma keep the tensor cores busy. The producer still fills every tile's stages in order, so
each consumer steps its cursor over the other's tiles, and a slot is released by the one consumer that read it:

    partition consumer0 (tiles 0, 2, 4, ...)     partition consumer1 (tiles 1, 3, 5, ...)
                                                   skip c by 1 tile
      for tiles[0::2]:                             for tiles[1::2]:
        wait turn0[t] phase(t)^1                     wait turn1[t] phase(t)
        for k: wait ready[c] / wgmma / ...           for k: wait ready[c] / wgmma / ...
        arrive turn1[t]                              arrive turn0[t]
        epilogue, store                              epilogue, store
        skip c by 1 tile  -- empty count 1 --        skip c by 1 tile
        advance t                                    advance t
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import rewrite


@dataclass(frozen=True)
class SplitConsumers:
    """Attributes:
    partitions: consumer partitions to split the consumer into (1: leave it whole).
    pingpong: each partition takes whole tiles, in turn, instead of a row block of every tile.
    by_columns: each partition takes a column block of every tile (all its rows) instead of a row block: a
        cluster's rows are split among its CTAs (`ir.Tiling.cluster`), so a warpgroup's rows would not be one
        block of the cluster tile's A box, while a column block is one of B's, which every CTA holds whole."""

    partitions: int = 1
    pingpong: bool = False
    by_columns: bool = False

    def __call__(self, m: ir.Module) -> ir.Module:
        n = self.partitions
        if n == 1:
            return m
        (cons,) = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
        if self.pingpong:
            return self._pingpong(m, cons)
        if self.by_columns:
            return self._columns(m, cons)
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
        return _cooperative(m, cons, split)

    def _columns(self, m: ir.Module, cons: ir.Partition) -> ir.Module:
        """Warpgroup i computes columns [i * BN / n, (i + 1) * BN / n) of every tile. One whole-tile accumulator
        becomes that column block (`Accumulator.col0`), and its wgmma reads that block of B's slot (`Mma.n_cols`).
        Accumulators already in column blocks (promoted fp8's, `Plan.partial_blocks`) go whole to the warpgroup
        whose block holds them, with every op on them (the partial's wgmma into them by its `n_cols`, their
        promotions, zeroing, epilogues and stores); each warpgroup keeps the block-wide partial. The epilogue stores
        each block where it belongs (passes/epilogue.py places a block by its accumulator's col0)."""
        n = self.partitions
        cols = m.tiling.bn // n
        accs = cons.accumulators
        tile_accs = [a for a in accs if a.name != PARTIAL]
        whole = len(tile_accs) == 1 and tile_accs[0].cols == m.tiling.bn
        in_blocks = all(a.col0 // cols == (a.col0 + a.cols - 1) // cols for a in tile_accs)
        if cons.warps % n or cons.warps // n != 4 or cols % 64 or not (len(accs) == 1 if whole else in_blocks):
            raise ValueError(f"cannot split a {cons.warps}-warp consumer of {m.tiling.bn}-column tiles (one whole-tile "
                             f"accumulator, or column blocks within {cols} columns) into {n} warpgroups of column "
                             "blocks of at least 64")
        split = []
        for i in range(n):
            block = ir.ColBlock(i * cols, cols)
            if whole:
                def own(o: ir.Op, block: ir.ColBlock = block) -> tuple[ir.Stmt, ...]:
                    return (replace(o, n_cols=block),) if isinstance(o, ir.Mma) else (o,)

                mine: tuple[ir.Accumulator, ...] = (replace(accs[0], cols=cols, col0=i * cols),)
                body = rewrite(cons.body, own)
            else:
                mine = tuple(a for a in accs if a.name == PARTIAL or a.col0 // cols == i)
                body = _only(cons.body, {a.name for a in mine}, block)
            split.append(replace(cons, name=f"{cons.name}{i}", warps=4, default=cons.default and i == 0,
                                 accumulators=mine, body=body))
        return _cooperative(m, cons, split)

    def _pingpong(self, m: ir.Module, cons: ir.Partition) -> ir.Module:
        n = self.partitions
        if cons.warps % n or cons.warps // n != 4:
            raise ValueError(f"cannot split a {cons.warps}-warp consumer into {n} ping-pong warpgroups of 4 warps")
        match cons.body:
            case (ir.Loop(kind=ir.LoopKind.TILES) as tiles,):
                pass
            case _:
                raise ValueError("ping-pong needs the consumer's body to be one tiles loop")
        (cursor,) = cons.cursors
        # The mainloops take turns. An mbarrier wait compares only a phase's parity, so a waiter must never be
        # two phases ahead of the barrier; consumer 1's first ready wait (use k_tiles of the ring) would be
        # whenever k_tiles >= 2 * stages while consumer 0 still consumes tile 0. Waiting for consumer 0 to
        # have issued its whole mainloop keeps every ready wait within one phase (the simulator finds the
        # PHASE_ALIAS without it), and is the ping-pong order itself: one mainloop on the tensor cores while
        # the other warpgroup runs its epilogue.
        turns = tuple(ir.Barriers(f"turn{i}", 1, 1, (), ir.Purpose.ORDER) for i in range(n))
        turn = ir.Cursor("t", 1)  # this partition's tiles so far: the turn barrier's phase
        split = []
        for i in range(n):
            k = next(j for j, s in enumerate(tiles.body) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K)
            # Partition 0's first wait passes on the fresh barrier (flipped parity); partition i > 0 waits for
            # partition i - 1 to hand over the turn of the same round.
            wait = ir.Wait(f"turn{i}", ir.Slot("t"), ir.Parity("t", flip=i == 0))
            handover = ir.Arrive(f"turn{(i + 1) % n}", ir.Slot("t"))
            body_i = (*tiles.body[:k], wait, tiles.body[k], handover, *tiles.body[k + 1:],
                      # Step over the n - 1 tiles between this partition's own, whose ring uses the producer
                      # counts too; then count the tile for the turn barrier's phase.
                      ir.SkipTiles(cursor.name, n - 1), ir.Advance("t"))
            loop = replace(tiles, body=body_i, start=i, step=n)
            body = ((ir.SkipTiles(cursor.name, i),) if i else ()) + (loop,)
            split.append(replace(cons, name=f"{cons.name}{i}", warps=4, default=cons.default and i == 0, body=body,
                                 cursors=(cursor, turn)))
        parts: list[ir.Partition] = []
        for p in m.partitions:
            parts.extend(split if p is cons else (p,))
        # Each slot use is read, and released, by one partition: the empty barriers keep their count.
        return replace(m, partitions=tuple(parts), barriers=m.barriers + turns)


PARTIAL = "partial"  # promoted fp8's block-wide partial accumulator (passes/build.py)


def _only(body: tuple[ir.Stmt, ...], accs: set[str], block: ir.ColBlock) -> tuple[ir.Stmt, ...]:
    """`body` without the ops on accumulators outside `accs` (a partial's wgmma counts as its `n_cols`' block
    within `block`), nor the wgmma waits that followed a dropped wgmma (promoted fp8: wgmma, wait, promote)."""
    out: list[ir.Stmt] = []
    dropped = False
    for s in body:
        if isinstance(s, ir.Loop):
            out.append(replace(s, body=_only(s.body, accs, block)))
            dropped = False
            continue
        if isinstance(s, ir.Mma) and s.acc == PARTIAL:
            assert s.n_cols is not None, "a partial of column blocks reads its block of B"
            keep = block.start <= s.n_cols.start < block.start + block.cols
        elif isinstance(s, ir.MmaWait):
            keep = not dropped
        else:
            named = s.dst if isinstance(s, ir.Promote) else getattr(s, "acc", None)
            keep = named is None or named in accs
        if not isinstance(s, ir.MmaWait):
            dropped = not keep and isinstance(s, ir.Mma)
        if keep:
            out.append(s)
    return tuple(out)


def _cooperative(m: ir.Module, cons: ir.Partition, split: list[ir.Partition] | tuple[ir.Partition, ...]) -> ir.Module:
    """`m` with `cons` replaced by the partitions of `split`, each of which releases every slot once: a slot is free
    after as many arrivals as there are partitions."""
    n = len(split)
    arrivals = {o.barrier for o, _ in ir.walk(cons.body) if isinstance(o, ir.Arrive)}
    barriers = tuple(replace(b, count=b.count * n) if b.name in arrivals else b for b in m.barriers)
    parts: list[ir.Partition] = []
    for p in m.partitions:
        parts.extend(split if p is cons else (p,))
    return replace(m, partitions=tuple(parts), barriers=barriers)
