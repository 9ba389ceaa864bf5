"""sm_100a fp32 blockwise scales (planner rule 19, `planner.promotion_path`): promotion through tensor-memory partials.

tcgen05's block-scaled MMA applies only e8m0 (power-of-two) or e4m3 scales, so DeepSeek's fp32 1x128 x 128x128
scales are applied outside the MMA, as on sm_90a (rule 8) and as DeepGEMM's sm100 fp32-scale kernel does: each
k-block's MMA writes a fresh fp32 partial, and the partial is scaled and added into the accumulator. After ring
planning the consumer is

    for tiles:
      zero acc
      for k:
        wait ready[c]; mma partial = a[c] @ b[c]; promote acc += partial * sa[c][rows] * sb[c][block]
        arrive empty[c]; advance c
      [epilogue acc: bias]; store_tile C <- acc

and this pass splits it around a ring of `partials` BM x BN fp32 partials in tensor memory, with a PART_READY /
PART_EMPTY barrier pair per partial (count 1 each):

    mma (1 warp):                                 epilogue (the default partition, 8 warps):
      for tiles:                                    for tiles:
        for k:                                        zero acc_j (each 64-column block j)
          wait ready[c] phase(c)                      for k:
          wait part_empty[p] phase(p)^1                 wait ready[c] phase(c)        (the stage's scales)
          tcgen05_mma part_tm[p] = a[c] @ b[c],         wait part_ready[p] phase(p)   (this k-block's MMA is done)
              then arrive empty[c]                      for each block j:
          tcgen05_commit part_ready[p]                    load_tmem partial <- part_tm[p][cols j]
          advance c; advance p                            [the last block: arrive part_empty[p]]
                                                          promote acc_j += partial * sa[c] * sb[c]
                                                        arrive empty[c]; advance c; advance p
                                                      per block j: [epilogue acc_j]; store acc_j
                                                    tma_store_wait 0

A stage now has two readers, the MMA (A and B, released by its completion) and the epilogue partition (the scales,
released by its own arrival after its last promotion), so its empty barrier counts 2 arrivals a phase. The partial
is read only after the commit that follows its MMA (`part_ready`), and its buffer is refilled only after the
epilogue partition has loaded it into registers (`part_empty`). One 64-column block of the partial is in registers
at a time beside the accumulator, over 8 warps (64 accumulator registers a thread): with 4 warps (128 a thread) ptxas
spilled 128 bytes, with 64- and with 32-column partial blocks alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.passes.blackwell import STAGING

PARTIAL_RING = "part_tm"
PARTIAL_REGS = "partial"
BLOCK = 64  # columns of the partial and of each accumulator block a thread holds per tcgen05.ld


@dataclass(frozen=True)
class SplitMmaPromoted:
    """Attributes:
    partials: tensor-memory partials (each a BM x BN fp32 buffer; `planner.PROMOTED_PARTIALS`).
    block: columns of each accumulator block and of the partial block loaded at a time.
    epilogue_warps: warps of the promoting (epilogue) partition (the plan's `consumer_warps`: 8, two warpgroups,
        each holding half of every block's columns)."""

    partials: int
    block: int = BLOCK
    epilogue_warps: int = 8

    def __call__(self, m: ir.Module) -> ir.Module:
        consumer = next(p for p in m.partitions if p.role is ir.Role.CONSUMER)
        (tiles,) = consumer.body
        assert isinstance(tiles, ir.Loop) and tiles.kind is ir.LoopKind.TILES
        k_loop = next(s for s in tiles.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K)
        mma_op = next(s for s in k_loop.body if isinstance(s, ir.Mma))
        promote = next(s for s in k_loop.body if isinstance(s, ir.Promote))
        ready = next(s for s in k_loop.body if isinstance(s, ir.Wait))
        release = next(s for s in k_loop.body if isinstance(s, ir.Arrive) and s.barrier == "empty")
        if promote.scales is None:
            raise NotImplementedError("sm_100a promotion: fp32 blockwise scales only (unscaled promotion is not "
                                      "planned)")
        steps = next((o.steps for o in tiles.body if isinstance(o, ir.Epilogue)), ())
        t = m.tiling
        part = ir.Ring(PARTIAL_RING, ir.Tensor.PARTIAL, DType.FP32, self.partials, t.bm, t.bn)
        p_ready = ir.Barriers("part_ready", self.partials, 1, (PARTIAL_RING,), ir.Purpose.READY)
        p_empty = ir.Barriers("part_empty", self.partials, 1, (PARTIAL_RING,), ir.Purpose.EMPTY)
        ps = ir.Slot("p")

        # The MMA warp: every k-block's MMA overwrites a fresh partial and releases its stage when it completes.
        mma = ir.Partition(
            name="mma", role=ir.Role.MMA, warps=1,
            body=(ir.Loop(ir.LoopKind.TILES, (ir.Loop(ir.LoopKind.K, (
                ready,
                ir.Wait("part_empty", ps, ir.Parity("p", flip=True)),
                ir.TcMma(mma_op.a_ring, mma_op.b_ring, mma_op.slot, PARTIAL_RING, ps, ir.Guard.ALWAYS,
                         release="empty"),
                ir.Commit("part_ready", ps),
                ir.Advance("c"),
                ir.Advance("p"),
            )),)),),
            cursors=(*consumer.cursors, ir.Cursor("p", self.partials)),
        )

        # The promoting partition: the register accumulator in 64-column blocks, one block of the partial at a time.
        n = t.bn // self.block
        accs = tuple(ir.Accumulator(f"acc{j}", t.bm, self.block, j * self.block) for j in range(n))
        k_body: list[ir.Stmt] = [ready, ir.Wait("part_ready", ps, ir.Parity("p"))]
        for j, a in enumerate(accs):
            k_body.append(ir.LoadTmem(PARTIAL_RING, ps, PARTIAL_REGS, j, n))
            if j == n - 1:  # the whole partial has been read: the MMA warp may overwrite it
                k_body.append(ir.Arrive("part_empty", ps))
            k_body.append(ir.Promote(PARTIAL_REGS, a.name, promote.scales))
        k_body += [release, ir.Advance("c"), ir.Advance("p")]
        staging = ir.Buffer(STAGING, ir.Tensor.C, m.spec.out_dtype, t.bm, self.block)
        tile: list[ir.Stmt] = [ir.ZeroAcc(a.name) for a in accs]
        tile.append(replace(k_loop, body=tuple(k_body)))
        for j, a in enumerate(accs):
            if steps:
                tile.append(ir.Epilogue(a.name, steps))
            tile += [ir.StoreWait(0), ir.StoreSmem(a.name, staging.name), ir.FenceAsync(),
                     ir.TmaStore(staging.name, part=j, parts=n)]
        epilogue = ir.Partition(
            name="epilogue", role=ir.Role.EPILOGUE, warps=self.epilogue_warps, default=True,
            body=(ir.Loop(ir.LoopKind.TILES, tuple(tile)), ir.StoreWait(0)),
            accumulators=(*accs, ir.Accumulator(PARTIAL_REGS, t.bm, self.block)),
            cursors=(*consumer.cursors, ir.Cursor("p", self.partials)),
        )
        # Two readers of each stage: the MMA's completion (A, B) and the epilogue partition's arrival (its scales).
        barriers = tuple(replace(b, count=2) if b.name == release.barrier else b for b in m.barriers)
        others = tuple(p for p in m.partitions if p.role is not ir.Role.CONSUMER)
        return replace(m, partitions=(epilogue, mma, *others), rings=(*m.rings, part),
                       barriers=(*barriers, p_ready, p_empty), buffers=(*m.buffers, staging))
