"""Epilogue lowering: write each tile through a shared-memory staging buffer and an async TMA store.

With `subtiles` = 2 the tile goes out in two column halves through a half-width buffer: the 32 KiB
saved buys the mainloop one more pipeline stage (planner.py), at the cost of one more store wait.

    tma_store_wait pending=0     # the previous tile's store has finished reading the buffer
    store_smem c_smem <- acc     # registers -> smem, cast to the output dtype (generic proxy)
    fence_async_shared           # make those writes visible to the TMA engine (async proxy)
    tma_store c_smem -> C[m, n]  # overlaps the next tile's mainloop
  ... and after the tile loop: tma_store_wait pending=0, so the CTA never exits with a store in flight.

A fused epilogue (spec.epilogue) runs per column block, so only one block's operands and outputs are live
beside the accumulator (a whole 64x256 block with a dense residual would spill):

    load_operand residual for acc[cols 0/2] as tile     # each operand the block reads
    apply_epilogue acc[cols 0/2]                        # the graph, on this block of the accumulator
    tma_store_wait pending=0
    store_smem c_smem <- out0 of acc[cols 0/2]          # one staging buffer per output
    fence_async_shared
    tma_store c_smem -> C[m, n][cols 0/2]

How an operand is read follows its kind (Plan.scalar_columns switches the column read off for measurement):
a column vector one value per row (seed 003's scalar column read), a row vector one value per column, a
dense operand a tile gather. `HoistOperands` then moves the row and scalar loads ahead of the accumulator's
final wgmma wait.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.epilogue.graph import EpilogueGraph
from warploom.epilogue.operands import OperandKind
from warploom.ir import nodes as ir
from warploom.passes.util import rewrite


def operand_read(kind: OperandKind, scalar_columns: bool) -> ir.OperandRead:
    """How an operand of `kind` is read for one column block."""
    return {
        OperandKind.SCALAR: ir.OperandRead.SCALAR,
        OperandKind.ROW: ir.OperandRead.PER_COL,
        OperandKind.COLUMN: ir.OperandRead.PER_ROW if scalar_columns else ir.OperandRead.TILE,
        OperandKind.DENSE: ir.OperandRead.TILE,
    }[kind]


@dataclass(frozen=True)
class LowerEpilogue:
    """Attributes:
    subtiles: column blocks the tile is stored in (1, 2 or 4).
    scalar_columns: read column-vector operands of a fused epilogue one value per row (else as a tile).
    block_steps: apply the `epilogue` op's scales and bias per stored block, right before its store_smem,
        instead of to the whole accumulator (rowwise scales + bias on a 256-wide tile otherwise spill)."""

    subtiles: int = 1
    scalar_columns: bool = True
    block_steps: bool = False

    def __call__(self, m: ir.Module) -> ir.Module:
        t, n = m.tiling, self.subtiles
        graph = m.spec.epilogue
        out_dtypes = m.spec.output_dtypes()
        # Split-K units store fp32 partial sums to the workspace; the reduction kernel casts them (ir.Tiling).
        target = ir.Tensor.C
        if t.split_k > 1:
            out_dtypes, target = (DType.FP32,), ir.Tensor.WORKSPACE
        storing = [p for p in m.partitions if any(isinstance(o, ir.StoreTile) for o, _ in ir.walk(p.body))]
        buffers: list[ir.Buffer] = []
        parts = []
        for p in m.partitions:
            if p not in storing:
                parts.append(p)
                continue
            # Each storing partition (one per consumer warpgroup after SplitConsumers) stages its own rows,
            # in one buffer per output.
            base = "c_smem" if len(storing) == 1 else f"c_smem{storing.index(p)}"
            rows = p.rows.rows if p.rows else t.bm
            accs = {a.name: a for a in p.accumulators}
            # One column block per store; an accumulator narrower than that (column-block accumulators)
            # is stored whole.
            width = min([t.bn // n] + [accs[o.acc].cols for o, _ in ir.walk(p.body) if isinstance(o, ir.StoreTile)])
            bufs = tuple(ir.Buffer(base if j == 0 else f"{base}_{j}", target, d, rows, width, output=j)
                         for j, d in enumerate(out_dtypes))
            # Dense operands come by TMA through a buffer of their own: loaded straight into the wgmma
            # layout each thread would hold a 64-bit address per 4 bytes, and spill.
            dense = {s.name: ir.Buffer(f"{s.name}_smem{base.removeprefix('c_smem')}", ir.Tensor.OPERAND, s.dtype,
                                       rows, width, operand=s.name)
                     for s in (graph.operands if graph else ()) if s.kind is OperandKind.DENSE}
            buffers.extend(bufs + tuple(dense.values()))
            steps = {o.acc: o.steps for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue)} if self.block_steps \
                else {}
            lower = _Lower(graph, bufs, accs, t.bn, self.scalar_columns, {k: v.name for k, v in dense.items()}, steps)
            parts.append(replace(p, body=rewrite(p.body, lower) + (ir.StoreWait(0),)))
        return replace(m, buffers=m.buffers + tuple(buffers), partitions=tuple(parts))


@dataclass(frozen=True)
class _Lower:
    graph: EpilogueGraph | None
    bufs: tuple[ir.Buffer, ...]
    accs: dict[str, ir.Accumulator]
    bn: int
    scalar_columns: bool
    dense: dict[str, str]
    steps: dict[str, tuple[ir.EpilogueStep, ...]]  # per accumulator: its epilogue, applied per block

    def __call__(self, o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.Epilogue) and o.acc in self.steps:
            return ()  # moves into the stores below, one block at a time
        if not isinstance(o, ir.StoreTile):
            return (o,)
        acc, w = self.accs[o.acc], self.bufs[0].cols
        n = acc.cols // w
        out: list[ir.Stmt] = []
        for i in range(n):
            if self.graph is None:
                if o.acc in self.steps:
                    out.append(ir.Epilogue(o.acc, self.steps[o.acc], i, n))
                out += [ir.StoreWait(0), ir.StoreSmem(o.acc, self.bufs[0].name, i, n), ir.FenceAsync(),
                        ir.TmaStore(self.bufs[0].name, self.bufs[0].tensor, part=acc.col0 // w + i,
                                    parts=self.bn // w)]
                continue
            for s in self.graph.operands:
                buf = self.dense.get(s.name)
                if buf is not None:  # TMA into the staging buffer, waited for by the load; PrefetchOperands moves it
                    out.append(ir.PrefetchOperand(s.name, o.acc, i, n, buf))
                out.append(ir.LoadOperand(s.name, o.acc, i, n, operand_read(s.kind, self.scalar_columns), buf))
            out += [ir.ApplyEpilogue(o.acc, i, n), ir.StoreWait(0)]
            out += [ir.StoreSmem(o.acc, b.name, i, n, output=b.output) for b in self.bufs]
            out.append(ir.FenceAsync())
            out += [ir.TmaStore(b.name, part=acc.col0 // w + i, parts=self.bn // w, output=b.output)
                    for b in self.bufs]
        return tuple(out)


@dataclass(frozen=True)
class HoistOperands:
    """Move a fused epilogue's row-vector and scalar operand loads ahead of the accumulator's final wgmma
    wait (seed 003: their global-memory latency then hides under the last MMAs instead of stalling the
    epilogue). They stay after the k-loop, so they hold registers only while the accumulator drains.
    Column and dense operands stay where they are: they are read per block, beside the block's math.

    A consumer whose k-loop is followed by no wgmma wait (promoted fp8 waits inside the loop) gets its
    loads just after the k-loop: the earliest point that does not keep them live across the mainloop.

    Attributes:
        enabled: False leaves every load before its ApplyEpilogue (for measurement).
    """

    enabled: bool = True

    def __call__(self, m: ir.Module) -> ir.Module:
        if not self.enabled or m.spec.epilogue is None:
            return m
        return replace(m, partitions=tuple(replace(p, body=_hoist(p.body)) for p in m.partitions))


_HOISTED = (ir.OperandRead.PER_COL, ir.OperandRead.SCALAR)


def _hoist(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES:
            out.append(replace(s, body=_hoist_tile(s.body)))
        else:
            out.append(s)
    return tuple(out)


def _hoist_tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    loads = [s for s in body if isinstance(s, ir.LoadOperand) and s.read in _HOISTED]
    if not loads:
        return body
    rest = [s for s in body if s not in loads]
    # Right after the k-loop: before the final wgmma wait where there is one.
    at = max(i for i, s in enumerate(rest) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K) + 1
    return tuple(rest[:at]) + tuple(loads) + tuple(rest[at:])


@dataclass(frozen=True)
class PrefetchOperands:
    """Issue each dense operand's TMA copy early, so its latency hides instead of stalling the epilogue.

    A block's `prefetch_operand` moves from just before its `load_operand` to the earliest point where its
    staging buffer is free: the first block's to the start of the tile (it lands under the whole mainloop),
    each later block's to right after the previous block's `load_operand` through the same buffer (it lands
    while the previous block is computed and stored). One buffer per operand is enough for that.

        for tiles:                                       for tiles:
          for k: ...                                       prefetch_operand r[cols 0/2] into r_smem
          ...                                              for k: ...
          prefetch_operand r[cols 0/2] into r_smem   ->    load_operand r[cols 0/2] via r_smem
          load_operand r[cols 0/2] via r_smem              prefetch_operand r[cols 1/2] into r_smem
          apply / store block 0                            apply / store block 0
          prefetch_operand r[cols 1/2] into r_smem         load_operand r[cols 1/2] via r_smem
          load_operand r[cols 1/2] via r_smem              apply / store block 1
          apply / store block 1

    Attributes:
        enabled: False leaves every prefetch right before its load (for measurement).
    """

    enabled: bool = True

    def __call__(self, m: ir.Module) -> ir.Module:
        if not self.enabled or m.spec.epilogue is None:
            return m
        return replace(m, partitions=tuple(replace(p, body=_prefetch(p.body)) for p in m.partitions))


def _prefetch(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    return tuple(replace(s, body=_prefetch_tile(s.body)) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES
                 else s for s in body)


def _prefetch_tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    prefetches = [s for s in body if isinstance(s, ir.PrefetchOperand)]
    if not prefetches:
        return body
    rest = [s for s in body if not isinstance(s, ir.PrefetchOperand)]
    first: list[ir.Stmt] = []
    after: dict[ir.LoadOperand, ir.PrefetchOperand] = {}  # a buffer's next prefetch, behind its previous load
    last_load: dict[str, ir.LoadOperand] = {}
    for s in body:
        if isinstance(s, ir.PrefetchOperand):
            prev = last_load.get(s.buffer)
            if prev is None:
                first.append(s)
            else:
                after[prev] = s
        elif isinstance(s, ir.LoadOperand) and s.buffer is not None:
            last_load[s.buffer] = s
    out: list[ir.Stmt] = list(first)
    for s in rest:
        out.append(s)
        if isinstance(s, ir.LoadOperand) and s in after:
            out.append(after[s])
    return tuple(out)
