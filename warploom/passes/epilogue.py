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

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from warploom.dtypes import DType
from warploom.epilogue.graph import EpilogueGraph, OutputLayout
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
    subtiles: column blocks the tile is stored in (1, 2, 4 or 8).
    scalar_columns: read column-vector operands of a fused epilogue one value per row (else as a tile).
    block_steps: apply the `epilogue` op's scales and bias per stored block, right before its store_smem,
        instead of to the whole accumulator (rowwise scales + bias on a 256-wide tile otherwise spill).
    staging_slots: staging buffers per output; the tile's block j goes through slot j % staging_slots, and its
        store wait, right before its own stores, leaves only the last staging_slots - 2 blocks' stores in flight
        (one slot: wait for every store before the writes). Must divide the tile's blocks, so each tile starts on
        the slot of the oldest store.
    operand_slots: staging buffers per dense operand; block j's copy goes to slot j % operand_slots
        (PrefetchOperands then starts it as soon as block j - operand_slots has been read)."""

    subtiles: int = 1
    scalar_columns: bool = True
    block_steps: bool = False
    staging_slots: int = 1
    operand_slots: int = 1

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
            stored_accs = [accs[o.acc] for o, _ in ir.walk(p.body) if isinstance(o, ir.StoreTile)]
            # One column block per store; an accumulator narrower than that (column-block accumulators)
            # is stored whole. A narrow or fitted tile's blocks (rules 31 and 32) each store in boxes of their own
            # width (at most the store's), through a staging buffer of that width: a box as wide as the widest
            # block's would reach past the tile's tile_n columns, into the next tile's.
            own = {a.name: min(t.bn // n, a.cols) for a in stored_accs} if t.n_blocks else {}
            width = max(own.values()) if own else min([t.bn // n] + [a.cols for a in stored_accs])
            # A gate/up epilogue pairs the tile's left (gate) and right (up) halves: blocks of at most BN / 2,
            # half of which are stored (each the result of a pair).
            paired = graph is not None and graph.gate_up() is not None
            if paired:
                width = min(width, t.bn // 2)
            stored = t.bn // width // (2 if paired else 1)
            if stored % self.staging_slots:
                raise ValueError(f"LowerEpilogue(staging_slots={self.staging_slots}) does not divide the tile's "
                                 f"{stored} stored blocks: the next tile would reuse a slot whose store is "
                                 "not the oldest in flight")
            # Slot k of output j: the first slot keeps the single-buffer name.
            # A swapped module (rule 18) stages each block transposed: C's rows are its columns.
            shape = (width, rows) if t.swap_ab else (rows, width)
            # A groups output (1x128 scales) goes out by register stores (ir.StoreScales): no staging buffer.
            staged = [j for j in range(len(out_dtypes))
                      if graph is None or j >= len(graph.outputs) or graph.outputs[j].layout is OutputLayout.FULL]
            slots = tuple(tuple(ir.Buffer((base if j == 0 else f"{base}_{j}") + (f"_s{k}" if k else ""), target,
                                          out_dtypes[j], *shape, output=j) for j in staged)
                          for k in range(self.staging_slots))
            # Dense operands come by TMA through buffers of their own: loaded straight into the wgmma
            # layout each thread would hold a 64-bit address per 4 bytes, and spill.
            dense = {s.name: tuple(ir.Buffer(f"{s.name}_smem{base.removeprefix('c_smem')}" + (f"_s{k}" if k else ""),
                                             ir.Tensor.OPERAND, s.dtype, rows, width, operand=s.name)
                                   for k in range(self.operand_slots))
                     for s in (graph.operands if graph else ()) if s.kind is OperandKind.DENSE}
            narrow = {w: ir.Buffer(f"{base}_w{w}", target, out_dtypes[0], *((w, rows) if t.swap_ab else (rows, w)),
                                   alias=slots[0][0].name)
                      for w in sorted(set(own.values()) - {width}, reverse=True)}
            buffers.extend([b for slot in slots for b in slot] + list(narrow.values())
                           + [b for ring in dense.values() for b in ring])
            steps = {o.acc: o.steps for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue)} if self.block_steps \
                else {}
            lower = _Lower(graph, slots, accs, t.bn, width, self.scalar_columns,
                           {k: tuple(b.name for b in v) for k, v in dense.items()}, steps, m.amax_pass is not None,
                           own, narrow)
            parts.append(replace(p, body=rewrite(p.body, lower) + (ir.StoreWait(0),)))
        return replace(m, buffers=m.buffers + tuple(buffers), partitions=tuple(parts))


@dataclass(frozen=True)
class _Lower:
    graph: EpilogueGraph | None
    slots: tuple[tuple[ir.Buffer, ...], ...]  # per staging slot, one buffer per output
    accs: dict[str, ir.Accumulator]
    bn: int
    width: int  # the accumulator columns one store writes
    scalar_columns: bool
    dense: dict[str, tuple[str, ...]]  # per dense operand, its staging slots
    steps: dict[str, tuple[ir.EpilogueStep, ...]]  # per accumulator: its epilogue, applied per block
    amax_pass: bool = False  # rule 29's first pass (ir.Module.amax_pass): fold, apply and store each block in turn
    own: dict[str, int] = field(default_factory=dict)  # a narrow or fitted tile's blocks: each one's store width
    narrow: dict[int, ir.Buffer] = field(default_factory=dict)  # ...and the staging buffer of each width but `width`

    def __call__(self, o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.Epilogue) and o.acc in self.steps:
            return ()  # moves into the stores below, one block at a time
        if not isinstance(o, ir.StoreTile):
            return (o,)
        acc, w = self.accs[o.acc], self.own.get(o.acc, self.width)
        n = acc.cols // w
        out: list[ir.Stmt] = []
        for i in range(n):
            j = acc.col0 // w + i  # the block's place in the tile: it picks the slots
            bufs = self.slots[j % len(self.slots)] if w == self.width else (self.narrow[w],)
            if self.graph is None:
                if o.acc in self.steps:
                    out.append(ir.Epilogue(o.acc, self.steps[o.acc], i, n))
                out += self._store([ir.StoreSmem(o.acc, bufs[0].name, i, n)],
                                   [ir.TmaStore(bufs[0].name, bufs[0].tensor, part=j, parts=self.bn // w)])
                continue
            if self.graph.gate_up() is not None:
                if i < n // 2:
                    out += self._pair(o.acc, acc, i, n)
                continue
            if self.amax_pass:
                out += self._amax_block(o.acc, i, n, j)
                if i == n - 1:
                    out.append(ir.AtomicAmax(o.acc))
                continue
            if self.graph.group_amax() is not None:
                if i % self._group_blocks(acc):
                    continue  # (the group's walk below, from its first block, stores this block)
                out += self._group(o.acc, acc, i, n)
                continue
            out += self._loads(o.acc, i, n, j)
            out.append(ir.ApplyEpilogue(o.acc, i, n))
            out += self._store([ir.StoreSmem(o.acc, b.name, i, n, output=b.output) for b in bufs],
                               [ir.TmaStore(b.name, part=j, parts=self.bn // w, output=b.output) for b in bufs])
        return tuple(out)

    def _loads(self, acc: str, i: int, n: int, j: int) -> list[ir.Stmt]:
        """Block i of n's operand loads (j: its place in the tile)."""
        assert self.graph is not None
        out: list[ir.Stmt] = []
        for s in self.graph.operands:
            ring = self.dense.get(s.name)
            buf = ring[j % len(ring)] if ring else None
            if buf is not None:  # TMA into the staging buffer, waited for by the load; PrefetchOperands moves it
                out.append(ir.PrefetchOperand(s.name, acc, i, n, buf))
            out.append(ir.LoadOperand(s.name, acc, i, n, operand_read(s.kind, self.scalar_columns), buf))
        return out

    def _pair(self, name: str, acc: ir.Accumulator, i: int, n: int) -> list[ir.Stmt]:
        """Gate/up block i of n (i < n / 2): its operands (those over N at the up block too), the graph on the pair
        (block i's gate columns, block i + n / 2's up columns), and its result stored at the tile's n * BN / 2:

            load_operand scale_b for acc[cols 0/2] as per_col
            load_operand scale_b for acc[cols 1/2] as per_col
            apply_epilogue acc[cols 0/2] with up acc[cols 1/2]
            ... store_smem / tma_store c_smem -> C[m, n/2][cols 0/2]
        """
        assert self.graph is not None
        if acc.col0 or acc.cols != self.bn:
            raise ValueError(f"LowerEpilogue: a gate/up epilogue pairs the tile's halves in one accumulator, but "
                             f"{name} holds columns [{acc.col0}, {acc.col0 + acc.cols}) of {self.bn} (the planner's "
                             "rule 28 plans one accumulator a tile)")
        up = i + n // 2
        out = self._loads(name, i, n, i)
        out += [ir.LoadOperand(s.name, name, up, n, operand_read(s.kind, self.scalar_columns))
                for s in self.graph.operands if s.kind.varies_n]
        out.append(ir.ApplyEpilogue(name, i, n, up=up))
        bufs = self.slots[i % len(self.slots)]
        return out + self._store([ir.StoreSmem(name, b.name, i, n, output=b.output) for b in bufs],
                                 [ir.TmaStore(b.name, part=i, parts=n, output=b.output, halved=True) for b in bufs])

    def _group_blocks(self, acc: ir.Accumulator) -> int:
        """The blocks of one group (a fused quantization's: 128 columns for 1x128, the whole tile for rowwise)."""
        assert self.graph is not None
        group = self.graph.amax().tile_cols(self.bn)
        if self.width > group or group % self.width or acc.col0 % group or acc.cols % group:
            raise ValueError(f"LowerEpilogue: a fused quantization needs {group}-column groups of whole blocks in "
                             f"one accumulator, but {acc.name} holds columns [{acc.col0}, {acc.col0 + acc.cols}) "
                             f"in blocks of {self.width} (the planner's rules 26 and 27 plan one accumulator a tile)")
        return group // self.width

    def _group(self, name: str, acc: ir.Accumulator, first: int, n: int) -> list[ir.Stmt]:
        """The walk over one group (128 columns, or a rowwise quantization's whole tile) from block `first`: every
        block's operands loaded and its share of the amax folded in before any block divides by the group's scale,
        then each block applied and stored, and after the group's last block its scale column:

            load_operand bias for acc[cols 0/2] as per_col
            fold_amax acc[cols 0/2]
            load_operand bias for acc[cols 1/2] as per_col
            fold_amax acc[cols 1/2]
            apply_epilogue acc[cols 0/2]         # q of block 0: y / s with the whole group's s
            ... store_smem / tma_store q
            apply_epilogue acc[cols 1/2]
            ... store_smem / tma_store q
            store_scales out1 of acc[cols 1/2]   # s, one value per row: masked register stores
        """
        assert self.graph is not None
        w, blocks = self.width, range(first, first + self._group_blocks(acc))
        out: list[ir.Stmt] = []
        for i in blocks:
            out += self._loads(name, i, n, acc.col0 // w + i)
            out.append(ir.FoldAmax(name, i, n))
        for i in blocks:
            j = acc.col0 // w + i
            bufs = self.slots[j % len(self.slots)]
            out.append(ir.ApplyEpilogue(name, i, n))
            out += self._store([ir.StoreSmem(name, b.name, i, n, output=b.output) for b in bufs],
                               [ir.TmaStore(b.name, part=j, parts=self.bn // w, output=b.output) for b in bufs])
        out += [ir.StoreScales(name, blocks[-1], n, k) for k, o in enumerate(self.graph.outputs)
                if o.layout is OutputLayout.GROUPS]
        return out

    def _amax_block(self, name: str, i: int, n: int, j: int) -> list[ir.Stmt]:
        """Rule 29's first pass, block i of n (j: its place in the tile): its operands, its share of the row amax
        folded into the tile's, y computed and stored (fp32) to the workspace, which is this module's C. No block
        waits for another: nothing here divides by the amax (the cast kernel does, after the launch), and after the
        tile's last block one atomic_amax publishes the tile's row amax:

            load_operand bias for acc[cols 0/8] as per_col
            fold_amax acc[cols 0/8]
            apply_epilogue acc[cols 0/8]         # y
            ... store_smem / tma_store y -> C[m, n][cols 0/8]
            ...
            atomic_amax acc -> amax[m]
        """
        bufs = self.slots[j % len(self.slots)]
        out = self._loads(name, i, n, j)
        out += [ir.FoldAmax(name, i, n), ir.ApplyEpilogue(name, i, n)]
        return out + self._store([ir.StoreSmem(name, b.name, i, n, output=b.output) for b in bufs],
                                 [ir.TmaStore(b.name, part=j, parts=self.bn // self.width, output=b.output)
                                  for b in bufs])

    def _store(self, writes: list[ir.StoreSmem], stores: list[ir.TmaStore]) -> list[ir.Stmt]:
        """One block's staging writes and TMA stores, with the store wait that lets the writes reuse a slot.

        One slot: the writes wait for every store (the previous block's read the same buffer). With S slots the
        wait moves behind the writes, right before the fence and this block's stores: it retires all but the
        last S - 2 blocks' stores, so the next block's writes find their slot (last used S blocks back) free.
        The barrier Triton puts before every TMA store then publishes the wait too; before the writes it needed
        one of its own (47 -> 39 BAR.SYNC at 4096^3, 0.5-2.4% faster in four same-run comparisons, session 15).
        Stores complete in order, each block storing every output."""
        slots, outs = len(self.slots), len(self.slots[0])
        if slots == 1:
            return [ir.StoreWait(0), *writes, ir.FenceAsync(), *stores]
        return [*writes, ir.StoreWait((slots - 2) * outs), ir.FenceAsync(), *stores]


@dataclass(frozen=True)
class HoistOperands:
    """Move a fused epilogue's row-vector and scalar operand loads ahead of the accumulator's final wgmma
    wait (seed 003: their global-memory latency then hides under the last MMAs instead of stalling the
    epilogue). They stay after the k-loop, so they hold registers only while the accumulator drains.
    Column and dense operands stay where they are: they are read per block, beside the block's math.

    A consumer whose k-loop is followed by no wgmma wait (promoted fp8 waits inside the loop) gets its
    loads just after the k-loop: the earliest point that does not keep them live across the mainloop.

    With `ahead` instead (a 256-wide tile, where every block's vectors live at once would spill), each block's
    register loads (row, column, scalar) move one block early: block 0's to the same place, block j + 1's to just
    before block j's apply_epilogue, so their latency hides under block j's math and two blocks' vectors are live:

        load_operand bias[cols 0/8]          # after the k-loop, before the final wgmma wait
        wgmma_wait pending=0
        load_operand residual[cols 0/8] via residual_smem0
        load_operand bias[cols 1/8]          # block 1's, under block 0's math
        apply_epilogue acc[cols 0/8]
        ...

    Attributes:
        enabled: False leaves every load before its ApplyEpilogue (for measurement).
        ahead: with enabled False, move each block's register loads one block early (above).
    """

    enabled: bool = True
    ahead: bool = False

    def __post_init__(self) -> None:
        if self.enabled and self.ahead:
            raise ValueError("HoistOperands(enabled=True, ahead=True): hoisting already loads every block's operands "
                             "before the final wgmma wait; pass one of the two")

    def __call__(self, m: ir.Module) -> ir.Module:
        if not (self.enabled or self.ahead) or m.spec.epilogue is None:
            return m
        tile = _hoist_tile if self.enabled else _ahead_tile
        return replace(m, partitions=tuple(replace(p, body=_per_tile(p.body, tile)) for p in m.partitions))


_HOISTED = (ir.OperandRead.PER_COL, ir.OperandRead.SCALAR)


def _per_tile(body: tuple[ir.Stmt, ...],
              tile: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]) -> tuple[ir.Stmt, ...]:
    return tuple(replace(s, body=tile(s.body)) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES else s
                 for s in body)


def _after_k_loop(body: list[ir.Stmt]) -> int:
    """Right after the k-loop: before the final wgmma wait where there is one."""
    return max(i for i, s in enumerate(body) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K) + 1


def _hoist_tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    loads = [s for s in body if isinstance(s, ir.LoadOperand) and s.read in _HOISTED]
    if not loads:
        return body
    rest = [s for s in body if s not in loads]
    at = _after_k_loop(rest)
    return tuple(rest[:at]) + tuple(loads) + tuple(rest[at:])


def _ahead_tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    applies = [s for s in body if isinstance(s, ir.ApplyEpilogue)]
    loads = [[s for s in body
              if isinstance(s, ir.LoadOperand) and s.buffer is None and (s.acc, s.part) == (a.acc, a.part)]
             for a in applies]
    if not any(loads):
        return body
    moved = {id(s) for group in loads for s in group}
    rest = [s for s in body if id(s) not in moved]
    at = _after_k_loop(rest)
    before = {id(a): group for a, group in zip(applies[:-1], loads[1:], strict=True)}  # block j + 1's, before j's
    out: list[ir.Stmt] = [*rest[:at], *loads[0]]
    for s in rest[at:]:
        out += before.get(id(s), [])
        out.append(s)
    return tuple(out)


@dataclass(frozen=True)
class PrefetchOperands:
    """Issue each dense operand's TMA copy early, so its latency hides instead of stalling the epilogue.

    A block's `prefetch_operand` moves from just before its `load_operand` to the earliest point where its
    staging buffer is free: the first block's (with `operand_slots` buffers, the first that many blocks') to the
    start of the tile (it lands under the whole mainloop), each later block's behind the block that last read the
    same buffer, right after that block's TMA store (which already synchronized the threads' reads: the prefetch
    is `synced`, with no barrier of its own). It lands while the blocks in between are computed and stored.

        for tiles:                                       for tiles:
          for k: ...                                       prefetch_operand r[cols 0/2] into r_smem
          ...                                              for k: ...
          prefetch_operand r[cols 0/2] into r_smem   ->    load_operand r[cols 0/2] via r_smem
          load_operand r[cols 0/2] via r_smem              apply / store block 0 (... tma_store)
          apply / store block 0                            prefetch_operand r[cols 1/2] into r_smem (synced)
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
        return replace(m, partitions=tuple(replace(p, body=_per_tile(p.body, _prefetch_tile)) for p in m.partitions))




def _prefetch_tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    prefetches = [s for s in body if isinstance(s, ir.PrefetchOperand)]
    if not prefetches:
        return body
    rest = [s for s in body if not isinstance(s, ir.PrefetchOperand)]
    first: list[ir.Stmt] = []
    after: dict[int, list[ir.PrefetchOperand]] = {}  # by id of the load that last read the buffer
    last_load: dict[str, ir.LoadOperand] = {}
    for s in body:
        if isinstance(s, ir.PrefetchOperand):
            prev = last_load.get(s.buffer)
            if prev is None:
                first.append(s)
            else:
                after.setdefault(id(prev), []).append(s)
        elif isinstance(s, ir.LoadOperand) and s.buffer is not None:
            last_load[s.buffer] = s
    # A later prefetch waits behind the load for the block's TMA store, whose fence and barrier sync the threads'
    # reads of the buffer for it (ir.PrefetchOperand.synced); with no store after the load, it follows the load.
    out: list[ir.Stmt] = list(first)
    held: list[ir.PrefetchOperand] = []
    for s in rest:
        out.append(s)
        if isinstance(s, ir.TmaStore) and held:
            out += [replace(p, synced=True) for p in held]
            held = []
        if isinstance(s, ir.LoadOperand):
            held += after.get(id(s), [])
    return (*out, *held)
