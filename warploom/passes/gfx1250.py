"""gfx1250: the sequential program as one software-pipelined partition of TDM copies and wmma (planner rule 20).

Triton 3.6 cannot warp-specialize for gfx1250 (``ttg.warp_specialize`` does not legalize there), so there is no
producer warp: every warp of the CTA issues its share of each Tensor Data Mover copy and then computes. The copies
run ahead of the math by software pipelining instead. After build_sequential the program is

    for tiles:
      for k: tma_load A[m, k] -> a[c] sync; tma_load B[n, k] -> b[c] sync; wgmma acc += a[c] @ b[c]; advance c
      [epilogue acc: steps]; store_tile C[m, n] <- acc

and this pass makes it, with a ring of S = `stages` slots and one cursor c (the k-blocks read so far, across
tiles):

    for tiles:
      tdm_load A[m, k+j] -> a_ring[c+j]; tdm_load B[n, k+j] -> b_ring[c+j]     j = 0 .. S-2: the tile's prologue
      for k:
        tdm_wait pending=2(S-2) while k+S-2 < k_tiles, else 0                   block k landed, in every warp's share
        sync_warps                                                              ... seen by all warps; slot c-1 read
        tdm_load A[m, k+S-1] -> a_ring[c+S-1]; tdm_load B[n, k+S-1] -> ...      into the slot block k-1 left
        wmma acc += a_ring[c] @ b_ring[c]
        advance c
      [epilogue acc: steps]; store_tile C[m, n] <- acc                         masked stores from the registers
    tdm_wait pending=0                                                          (Triton's predicated-off copies)

A fused epilogue (spec.epilogue) runs on the whole tile where the store stood: a load_operand per graph operand
(a column operand one value per row, a row operand one per column, a dense one as the tile, by ordinary loads:
no TMA, no staging), apply_epilogue, and a store_tile of each output.

Two copies (A and B) per k-block: when block k is needed, the copies of blocks k+1 .. k+S-2 may still be in flight,
so at most 2(S-2) may be pending; near the tile's end fewer were issued behind it (copies past the last k-block are
predicated off), and the wait takes all of them (a TDM wait counts copies, it cannot name a block). The one
barrier per k-block does two jobs: each warp waits only for its own shares of a copy, so the warps must meet before
any reads a slot whole; and the copy issued right after it overwrites the slot that block k-1 was read from, which
every warp has finished reading by the time it reaches the barrier. The ring's slot of block k is (c0 + k) % S for
the tile's first count c0, whether the prologue or the loop copies it, so one cursor serves both.

The prologue restarts the pipeline at every tile (copies do not run ahead across tiles): S-1 blocks' latency per
tile, unhidden, which a flattened (tile, k) copy stream would hide at the cost of the next tile's coordinates in the
loop. Not measured: no gfx1250 is at hand.

With warp masks (seed 004, Triton >= 3.8's ``warp_used_hint``; planner rule 20 chooses them) each copy is issued
by its mask's warps only, and a wait counts one warp's copies: with A from warp 0 and B from warp 1 each issuing
warp has one copy per block in flight, so the wait is ``pending=S-2`` and names warps 0 and 1 (the other warps
run it with nothing in flight); the barrier after it still hands every warp the whole slot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.ir.warps import WarpMask, fewest_copies
from warploom.passes.epilogue import operand_read


@dataclass(frozen=True)
class PipelineTdm:
    """Attributes:
    stages: ring slots (at least 2: the copy of block k+1 runs under block k's wmma).
    warps: the warps issuing A's and B's copies (None: every warp its share, as without a hint).
    fused: each k-block's two copies are one fused copy (``tdm.async_load_fused``; needs both warps, disjoint)."""

    stages: int
    warps: tuple[WarpMask | None, WarpMask | None] = (None, None)
    fused: bool = False

    def __call__(self, m: ir.Module) -> ir.Module:
        if self.stages < 2:
            raise ValueError(f"PipelineTdm(stages={self.stages}): a software pipeline needs at least 2 slots")
        (main,) = m.partitions
        assert main.role is ir.Role.SEQUENTIAL, "PipelineTdm rewrites build_sequential's program"
        (tiles,) = main.body
        assert isinstance(tiles, ir.Loop) and tiles.kind is ir.LoopKind.TILES
        k_loop = next(s for s in tiles.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K)
        loads = [o for o in k_loop.body if isinstance(o, ir.TmaLoad)]
        mmas = [o for o in k_loop.body if isinstance(o, ir.Mma)]
        if len(mmas) != 1 or len(loads) != 2 or any(not isinstance(o, (ir.TmaLoad, ir.Mma, ir.Advance))
                                                    for o in k_loop.body):
            raise NotImplementedError("gfx1250: plain native accumulation only (one MMA per k-block, no scales or "
                                      "promotion in the mainloop)")
        (mma,) = mmas
        s = self.stages

        def copies(ahead: int) -> list[ir.Stmt]:
            return [ir.TdmLoad(ld.tensor, ld.ring, ir.Slot("c", ahead), ld.coord, ahead, warps, self.fused)
                    for ld, warps in zip(loads, self.warps, strict=True)]

        # A wait counts each warp's own copies: per block, the fewest any issuing warp has (every warp: both).
        per_block = fewest_copies(list(self.warps), main.warps)
        every = WarpMask.every(main.warps)
        waits = None if self.warps == (None, None) else WarpMask((self.warps[0] or every).bits
                                                                 | (self.warps[1] or every).bits)

        prologue = [st for j in range(s - 1) for st in copies(j)]
        k_body: list[ir.Stmt] = [
            ir.TdmWait(pending=per_block * (s - 2), ahead=s - 2, warps=waits),
            ir.SyncWarps(),
            *copies(s - 1),
            ir.Wmma(mma.a_ring, mma.b_ring, ir.Slot("c"), mma.acc, mma.overwrite),
            ir.Advance("c"),
        ]
        body: list[ir.Stmt] = []
        graph = m.spec.epilogue
        for st in tiles.body:
            if st is k_loop:
                body += [*prologue, replace(k_loop, body=tuple(k_body))]
            elif isinstance(st, ir.StoreTile) and graph is not None:
                # A fused epilogue on the whole tile in registers: each operand read the cheapest way its kind allows
                # (seed 003: a column as one value per row, a row as one per column), then each output stored.
                body += [ir.LoadOperand(o.name, st.acc, 0, 1, operand_read(o.kind, scalar_columns=True))
                         for o in graph.operands]
                body.append(ir.ApplyEpilogue(st.acc, 0, 1))
                body += [ir.StoreTile(st.acc, output=j) for j in range(len(graph.outputs))]
            else:
                body.append(st)
        # The kernel ends with no copy in flight: the schedule issues none past its last wait, but Triton 3.6 issues
        # the copies of blocks past a tile's end as predicated-off instructions, which still count.
        part = replace(main, name="main", role=ir.Role.WORKGROUP,
                       body=(replace(tiles, body=tuple(body)), ir.TdmWait(pending=0, warps=waits)),
                       cursors=(ir.Cursor("c", s),))
        rings = tuple(replace(r, depth=s) for r in m.rings)
        return replace(m, partitions=(part,), rings=rings)
