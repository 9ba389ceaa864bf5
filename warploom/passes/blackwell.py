"""sm_100a partitioning: the consumer becomes an MMA warp and an epilogue partition around tensor memory (rule 19).

On sm_100a a tcgen05 MMA is issued by one thread and accumulates into tensor memory, so the accumulator no longer
ties the epilogue to the warps that run the mainloop. After ring planning the consumer is

    for tiles:
      for k: wait ready[c]; mma acc += a[c] @ b[c]; arrive empty[c]; advance c
      [epilogue acc: steps]; store_tile C <- acc

and this pass splits it in two, with a ring of `acc_buffers` accumulators in tensor memory between them and an
ACC_READY / ACC_EMPTY barrier pair per accumulator (count 1 each):

    mma (1 warp):                                   epilogue (the default partition, 4 warps):
      for tiles:                                      for tiles:
        wait acc_empty[t] phase(t)^1                    wait acc_ready[t] phase(t)
        for k:                                          for each column block j of `subtiles`:
          wait ready[c] phase(c)                          load_tmem acc_j <- acc_tm[t][cols j]
          tcgen05_mma.async acc_tm[t] += a[c] @ b[c],     [the last block: arrive acc_empty[t]]
              then arrive empty[c]                        [epilogue acc_j: steps, or a fused epilogue's
          advance c                                        load_operand ... / apply_epilogue acc_j]
                                                          tma_store_wait 0; store_smem; fence; tma_store
        tcgen05_commit acc_ready[t]                     advance t
        advance t                                     tma_store_wait 0

The MMA's completion releases each stage (the tensor cores read the slots asynchronously: the issuing thread's
program order says nothing about when), and the commit publishes the finished accumulator. With two buffers the
epilogue of tile i overlaps the MMAs of tile i + 1. A swapped module (rule 18's decode, `ir.Tiling.swap_ab`) stages
each block transposed, as LowerEpilogue does on sm_90a.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.epilogue.operands import OperandKind
from warploom.ir import nodes as ir
from warploom.ir.verify_scales import MX_FORMATS
from warploom.passes.epilogue import operand_read

ACC_RING = "acc_tm"
STAGING = "c_smem"
SCALE_TMEM = {ir.Tensor.SCALE_A: "sa_tm", ir.Tensor.SCALE_B: "sb_tm"}


@dataclass(frozen=True)
class PlaceScaleCopies:
    """sm_100a MX (seed 001): before each k-block's MMA, copy the stage's e8m0 scales from their shared-memory slots
    into tensor-memory scale buffers (`ScaleCopy`, tcgen05.cp), which the scaled MMA then reads.

        consumer, per (tile, k), before:          after:
          mma acc += a[c] @ b[c]                    tcgen05_copy sa_ring[c] -> sa_tm
                                                    tcgen05_copy sb_ring[c] -> sb_tm
                                                    mma acc += a[c] @ b[c]   (SplitMma: scaled by sa_tm x sb_tm)

    It runs after SplitProducer and before PlanRings, and the order makes no cycle (the one Triton had to break,
    seed 001: its TMEM-copy rewrite needed the scales in shared memory, which only software pipelining put there,
    while pipelining the MMA needed the rewrite done). Here the front end (build_sequential) already puts the
    scales in shared-memory rings of the stage, so placing the copies needs nothing ring planning makes: only the
    k-loop's slot `c`, which the sequential program names. Ring planning then sees each copy as a reader of its
    stage (passes/rings.py `_ring_slots`): the stage's ready wait lands before the first copy and its release after
    the MMA, which SplitMma turns into the MMA's completion. Because tcgen05 ops complete in issue order, one scale
    buffer per operand suffices: the next k-block's copy completes only after this MMA has read the buffer.

    Attributes:
        acc_columns: tensor-memory columns of the accumulator ring (acc_buffers x BN); the scale buffers follow."""

    acc_columns: int

    def __call__(self, m: ir.Module) -> ir.Module:
        scale_rings = [r for r in m.rings if r.byte_scales]
        if not scale_rings:
            return m
        bufs, col0 = [], self.acc_columns
        for r in scale_rings:
            bufs.append(ir.ScaleBuffer(SCALE_TMEM[r.tensor], r.tensor, r.rows, r.cols, col0, r.dtype))
            col0 += bufs[-1].columns

        def place(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
            out: list[ir.Stmt] = []
            for s in body:
                if isinstance(s, ir.Loop):
                    out.append(replace(s, body=place(s.body)))
                    continue
                if isinstance(s, ir.Mma):
                    out += [ir.ScaleCopy(r.name, s.slot, SCALE_TMEM[r.tensor]) for r in scale_rings]
                out.append(s)
            return tuple(out)

        parts = tuple(replace(p, body=place(p.body)) if p.role is ir.Role.CONSUMER else p for p in m.partitions)
        return replace(m, partitions=parts, tmem_scales=(*m.tmem_scales, *bufs))


@dataclass(frozen=True)
class SplitMma:
    """Attributes:
    acc_buffers: tensor-memory accumulators (2: one drained while the next fills).
    subtiles: column blocks the epilogue loads, computes and stores a tile in (each BM x BN/subtiles fp32 in
        registers: 64 columns are 64 registers a thread over 4 warps).
    scalar_columns: a fused epilogue's column operands read one value per row (else as a tile)."""

    acc_buffers: int
    subtiles: int
    epilogue_warps: int = 4
    scalar_columns: bool = True

    def __call__(self, m: ir.Module) -> ir.Module:
        consumer = next(p for p in m.partitions if p.role is ir.Role.CONSUMER)
        (tiles,) = consumer.body
        assert isinstance(tiles, ir.Loop) and tiles.kind is ir.LoopKind.TILES
        k_loop = next(s for s in tiles.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K)
        steps = next((o.steps for o in tiles.body if isinstance(o, ir.Epilogue)), ())
        if any(isinstance(o, (ir.ZeroAcc, ir.Promote)) for o, _ in ir.walk(consumer.body)):
            raise NotImplementedError("sm_100a: native accumulation only (no promotion)")
        t = m.tiling
        acc = ir.Ring(ACC_RING, ir.Tensor.ACC, DType.FP32, self.acc_buffers, t.bm, t.bn)
        ready = ir.Barriers("acc_ready", self.acc_buffers, 1, (ACC_RING,), ir.Purpose.READY)
        empty = ir.Barriers("acc_empty", self.acc_buffers, 1, (ACC_RING,), ir.Purpose.EMPTY)
        ts = ir.Slot("t")

        # The MMA warp: the consumer's k-loop with each wgmma a tcgen05 MMA that releases its stage itself.
        k_body: list[ir.Stmt] = []
        scales = None
        if m.tmem_scales:  # (PlaceScaleCopies: the MMA reads the buffers the copies before it filled)
            sa, sb = (next(b.name for b in m.tmem_scales if b.tensor is t) for t in SCALE_TMEM)
            scales = ir.TmemScales(sa, sb, MX_FORMATS[m.spec.a_dtype], MX_FORMATS[m.spec.b_dtype],
                                   m.spec.scale.scale_k)
        for s in k_loop.body:
            if isinstance(s, ir.Mma):
                k_body.append(ir.TcMma(s.a_ring, s.b_ring, s.slot, ACC_RING, ts, s.overwrite, release="empty",
                                       scales=scales))
            elif isinstance(s, ir.Arrive) and s.barrier == "empty":
                continue  # the MMA's completion arrives instead
            else:
                k_body.append(s)
        mma = ir.Partition(
            name="mma", role=ir.Role.MMA, warps=1,
            body=(ir.Loop(ir.LoopKind.TILES, (
                ir.Wait("acc_empty", ts, ir.Parity("t", flip=True)),
                replace(k_loop, body=tuple(k_body)),
                ir.Commit("acc_ready", ts),
                ir.Advance("t"),
            )),),
            cursors=(*consumer.cursors, ir.Cursor("t", self.acc_buffers)),
        )

        # The epilogue partition: per column block, tensor memory -> registers -> math -> smem -> TMA store. A fused
        # epilogue (spec.epilogue) evaluates its graph on each block, with its operands read as on sm_90a (a dense
        # one copied by TMA into a staging buffer of its own first), and stores each output through its own buffer.
        n = self.subtiles
        width = t.bn // n
        graph = m.spec.epilogue
        accs = tuple(ir.Accumulator(f"acc{j}", t.bm, width, j * width) for j in range(n))
        # A swapped module (rule 18) stages each block transposed: C's rows are its columns (ir.Tiling.swap_ab).
        shape = (width, t.bm) if t.swap_ab else (t.bm, width)
        staging = tuple(ir.Buffer(STAGING if k == 0 else f"{STAGING}_{k}", ir.Tensor.C, d, *shape, output=k)
                        for k, d in enumerate(m.spec.output_dtypes()))
        dense = {o.name: ir.Buffer(f"{o.name}_smem", ir.Tensor.OPERAND, o.dtype, t.bm, width, operand=o.name)
                 for o in (graph.operands if graph else ()) if o.kind is OperandKind.DENSE}
        ep: list[ir.Stmt] = [ir.Wait("acc_ready", ts, ir.Parity("t"))]
        for j, a in enumerate(accs):
            ep.append(ir.LoadTmem(ACC_RING, ts, a.name, j, n))
            if j == n - 1:  # every block is in registers: the MMA warp may refill this accumulator
                ep.append(ir.Arrive("acc_empty", ts))
            if graph is not None:
                for operand in graph.operands:
                    buf = dense.get(operand.name)
                    if buf is not None:
                        ep.append(ir.PrefetchOperand(operand.name, a.name, 0, 1, buf.name))
                    read = operand_read(operand.kind, self.scalar_columns)
                    ep.append(ir.LoadOperand(operand.name, a.name, 0, 1, read, None if buf is None else buf.name))
                ep.append(ir.ApplyEpilogue(a.name, 0, 1))
            elif steps:
                ep.append(ir.Epilogue(a.name, steps))
            ep.append(ir.StoreWait(0))
            ep += [ir.StoreSmem(a.name, b.name, output=b.output if graph is not None else None) for b in staging]
            ep.append(ir.FenceAsync())
            ep += [ir.TmaStore(b.name, part=j, parts=n, output=b.output) for b in staging]
        ep.append(ir.Advance("t"))
        epilogue = ir.Partition(
            name="epilogue", role=ir.Role.EPILOGUE, warps=self.epilogue_warps, default=True,
            body=(ir.Loop(ir.LoopKind.TILES, tuple(ep)), ir.StoreWait(0)),
            accumulators=accs, cursors=(ir.Cursor("t", self.acc_buffers),),
        )
        others = tuple(p for p in m.partitions if p.role is not ir.Role.CONSUMER)
        return replace(m, partitions=(epilogue, mma, *others), rings=(*m.rings, acc),
                       barriers=(*m.barriers, ready, empty), buffers=(*m.buffers, *staging, *dense.values()))
