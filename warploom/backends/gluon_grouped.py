"""Grouped GEMMs on sm_90a (ir.Tiling.grouping): the group scan helpers and the partition emitter's differences.
(sm_100a's M-grouped kernel, backends/gluon_sm100.py, takes `GroupedEmitter`'s methods around its tcgen05 ops.)

A grouped kernel is the sm_90a kernel with four changes, all here (and a fifth for blockwise fp8: the scale_b
copy reads the tile's group's block, ``sb_ptr + grp * sb_stride_g``, of the (G, ceil(K/128), ceil(N/128)) scales;
scale_a's rows are A's, a 3-D A's flattened, so its copy is the ungrouped one):

- its tile loop runs over (group, tile) pairs: ``num_tiles`` and each tile's group come from a scan over the
  group bounds in the kernel (``group_count``, ``group_tile``), never from the host, so a CUDA graph captured once
  replays with other offsets. The scan is O(G) scalar loads per tile and partition (G = 8: a few hundred cycles
  beside a tile's mainloop of tens of microseconds at K = 7168; with hundreds of groups a running cursor over the
  increasing tile ids would be the next step);
- B is one 3-D TMA descriptor over (G, N, K) (or (G, K, N)), addressed at [group, n, k]: a K or N tail is outside
  the box's group and reads zeros, never the next group's rows. A is one 2-D descriptor over all rows: a tile's
  rows past its group's end read the next group's rows (or zeros past A), which only feed output rows that are
  dropped;
- a per-expert epilogue operand (``OperandSpec.per_group``: a (G, N) bias, a (G,) scale) is read from the tile's
  group's slice, ``bias_ptr + grp * stride``;
- a TMA store of C is clipped at the group's last row: a column block whose rows all lie in the group is stored by
  TMA; one that crosses the group's end (a group's last, ragged tile) is read back from its staging buffer and
  stored by masked stores. One descriptor serves every group, so there is no device-side descriptor to build (that
  needs a global scratch allocator and a descriptor fence per group); the masked path costs a group's last tile
  row only.

warploom.ir.raster.group_tiles is the same scan in Python.

Stream-K (ir.Tiling.stream_k, M-grouped and masked, forced only) adds nothing here: the sm_90a unit loop splits the
scan's ``num_tiles`` (``sk_range``) and places each unit's tile id through `_tile_coords`, so a piece, its
contributor's partial and its finisher's fixup and clipped stores all see the tile's group, origin and row end
(ir.raster.group_stream_k_units in Python).

A K-grouped module (Grouping.K_OFFSETS, the weight gradient) differs again (`KGroupedEmitter`): every group has C's
(M, N) tiles, so the tile count and a tile's group are arithmetic; each tile loads its group's K range from offs
(``k_group_tile``) and runs ``max(1, cdiv(k_end - k_base, BK))`` k-blocks from k_base, the group's K start rounded
down to 16 bytes: TMA's innermost coordinate must be a multiple of 16 bytes (an H100 raises "illegal instruction" at
any other, e.g. a bf16 group starting at column 375), and offs may end a group at any column. A and B are 2-D
descriptors read at ``k_base + kk * BK``, so a group's first k-block may read the previous group's last columns (up
to 15 bytes' worth) and its last, partial one the next group's columns, of both, and their products would add into
the sum (unlike the M-grouped row edge, whose extra rows feed only dropped output rows). The consumer therefore
zeroes its rows of A's columns outside the group's K range in the slot it waited on, before its wgmma (a fence and
a partition barrier after the stores, so every thread's zeros are in the async proxy's view first); the B rows they
meet are finite or not, 0 * inf being NaN (torch's kernel never reads them: see
docs/decisions/k-grouped-and-gate-epilogue.md). An empty group runs one k-block of all-zero A, so its tile stores
zeros (torch's result) by the path every tile takes. ir.raster.k_group_tiles is the same in Python. Blockwise fp8
K-grouped scales are 2-D over the grouped K space, scale_a (M, KB) and scale_b (KB, NB): the copies read scale block
``k_base // 128 + kk`` (each group's K range on the 128 grid, checks_grouped) at A's rows, masked past the last block.
"""

from __future__ import annotations

from warploom.backends.codebuf import CodeBuffer
from warploom.backends.gluon_sm90 import GluonSource, PartitionEmitter, lower, slot_index, store_desc
from warploom.epilogue.operands import OperandSpec
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.ir.raster import tma_k_align
from warploom.spec import SCALE_BLOCK, BLayout, Grouping


class GroupedEmitter(PartitionEmitter):
    """A grouped module's partition: the tile loop over the group scan, B at the tile's group, C clipped."""

    def __init__(self, m: ir.Module, p: ir.Partition, buf: CodeBuffer) -> None:
        super().__init__(m, p, buf)
        self.scale_b = "(scale_b_ptr + grp * N)"  # rowwise scale_b (G, N): the tile's group's row
        # blockwise scale_b (E, ceil(K/128), ceil(N/128)): the tile's group's block, never a neighbour expert's
        # (scale_a is in the grouped row space: a tile's rows are A's, whichever expert, so off_m as it is)
        self.sb_base = "(sb_ptr + grp * sb_stride_g)"
        # a quantization's scales (ir.StoreScales) are clipped at the group's last row as C's stores are
        self.store_rows = "row_end"

    def _num_tiles(self) -> None:
        self.buf.line("num_tiles = group_count(group_ptr, E, M, num_pid_n)",
                      "grouped: all groups' tiles, from their bounds on the device")

    def _tile_coords(self, var: str) -> None:
        self.buf.line(f"grp, off_m, off_n, row_end = group_tile({var}, group_ptr, E, M, num_pid_n)",
                      "its group, origin and the group's row end")

    def _b_slot(self, ring: str, slot: str) -> str:
        rows, cols = ("BN", "BK") if self.m.spec.b_layout is BLayout.K_MAJOR else ("BK", "BN")
        return f"{ring}.index({slot}).reshape([{rows}, {cols}])"  # (the 3-D box's one group)

    def op(self, o: ir.Op) -> None:
        match o:
            case ir.TmaLoad() if o.tensor is ir.Tensor.B:
                self._load_b(o)
            case ir.TmaStore() if o.tensor is ir.Tensor.C:
                self._clipped_store(o)
            case _:
                super().op(o)

    def operand_ptr(self, spec: OperandSpec) -> str:
        # a per-expert operand ((G, N) bias, (G,) scale): the tile's group's slice, never a neighbour expert's
        if not spec.per_group:
            return super().operand_ptr(spec)
        grp = "grp.to(gl.int64)" if spec.span() >= 2**31 else "grp"
        return f"{spec.name}_ptr + {grp}" + (f" * {spec.group_stride}" if spec.group_stride != 1 else "")

    def _load_b(self, o: ir.TmaLoad) -> None:
        d = self.depth[o.slot.cursor]
        slot = slot_index(o.slot, d, self.stages)
        coord = ", ".join(["grp", *(self._coord(a, ir.Tensor.B) for a in o.coord)])  # (sm_100a fp4: K in bytes)
        self.buf.line(f"{self.api.tma_load}(b_desc, [{coord}], {o.barrier}_bars.index({slot}), "
                      f"{o.ring}.index({slot}))", printer.op(o) + " (the tile's group)")

    def _clipped_store(self, o: ir.TmaStore) -> None:
        """TMA where the block's rows lie in the group; else the staging buffer read back and stored masked at the
        group's row end (a barrier before the read: every thread's smem writes; one after: every read done before
        the buffer is written again)."""
        b, c = self.buf, printer.op(o)
        buf = self.m.buffer(o.buffer)
        n0 = "off_n // 2" if o.halved else "off_n"  # (a gate/up result: (M, N / 2), BN / 2 a tile)
        col = n0 if o.part == 0 else f"{n0} + {o.part} * (BN // {o.parts})"
        width = "(N // 2)" if o.halved else "N"  # C's row length
        row = f"off_m + {self.row0}" if self.row0 else "off_m"
        with b.block(f"if {row} + {buf.rows} <= row_end", comment="the block's rows all in the group: TMA"):
            b.line(f"{self.api.tma_store}({store_desc(o)}, [{row}, {col}], {o.buffer})", c)
        with b.block("else", comment="it crosses the group's last row: masked stores, never into the next group"):
            vec = max(1, 16 // buf.dtype.bytes)
            lanes = min(32, max(1, buf.cols // vec))
            b.line(f"st_layout: gl.constexpr = gl.BlockedLayout([1, {vec}], [{32 // lanes}, {lanes}], "
                   f"[{self.p.warps}, 1], [1, 0])")
            b.line(self.api.barrier, "every thread's store_smem before the read-back")
            b.line(f"st_vals = {o.buffer}.load(st_layout)")
            b.line(f"st_rows = {row} + gl.arange(0, {buf.rows}, layout=gl.SliceLayout(1, st_layout))")
            b.line(f"st_cols = {col} + gl.arange(0, {buf.cols}, layout=gl.SliceLayout(0, st_layout))")
            b.line(f"gl.store(c_ptr + st_rows.to(gl.int64)[:, None] * {width} + st_cols[None, :], st_vals, "
                   f"mask=(st_rows < row_end)[:, None] & (st_cols < {width})[None, :])",
                   c + " (clipped at the group's end)")
            b.line(self.api.barrier, "every read done before the buffer is written again")


class KGroupedEmitter(GroupedEmitter):
    """A K-grouped module's partition (module docstring): the group's K range per tile, A's tail zeroed."""

    def __init__(self, m: ir.Module, p: ir.Partition, buf: CodeBuffer) -> None:
        super().__init__(m, p, buf)
        # Blockwise scales over the grouped K space: scale_a (M, KB) at A's rows (C's less g * M), scale_b (KB, NB)
        # shared by the groups; k-block kk of a tile is scale block k_base // 128 + kk (k_base is the group's K
        # start, a multiple of 128 as checks_grouped requires), and an empty group's one k-block at k_base = K
        # reads no scale past the last block (masked: zeros, times its all-zero A).
        self.sa_row0 = "(off_m - grp * M)"
        self.sb_base = "sb_ptr"
        self.sk_block = f"(k_base // {SCALE_BLOCK} + kk)"
        self.sk_mask = f"({self.sk_block} < gl.cdiv(K, {SCALE_BLOCK}))"
        self.operand_rows = "row_end"  # (per-row and dense operands, rowwise scale_a: C's (G * M) rows, not M)

    def _num_tiles(self) -> None:
        self.buf.line("num_tiles = E * num_pid_m * num_pid_n", "K-grouped: every group has C's (M, N) tiles")

    def _tile_coords(self, var: str) -> None:
        b = self.buf
        b.line(f"grp, off_m, off_n, row_end, k_start, k_end = k_group_tile({var}, group_ptr, M, K, num_pid_m, "
               "num_pid_n)", "its group, origin in C (G * M, N), the group's row end and K range")
        # (TMA's innermost coordinate a multiple of 16 bytes, else an illegal instruction; the columns before
        # k_start that this brings in are zeroed as the tail's are: _zero_a_tail)
        align = tma_k_align(self.m.spec.a_dtype)
        b.line(f"k_base = k_start // {align} * {align}",
               "the group's K start rounded down to 16 bytes: TMA's innermost coordinate must be")
        b.line("k_tiles = gl.maximum(gl.cdiv(k_end - k_base, BK), 1)",
               "the group's k-blocks (an empty group's one reads A as zeros)")

    def _coord(self, axis: ir.Axis, tensor: ir.Tensor | None = None) -> str:
        # A's rows are the group's block of C's less g * M; K from the group's aligned start
        return {ir.Axis.M: "off_m - grp * M", ir.Axis.N: "off_n", ir.Axis.K: "k_base + kk * BK"}[axis]

    def op(self, o: ir.Op) -> None:
        match o:
            case ir.TmaLoad():
                PartitionEmitter.op(self, o)  # (B is 2-D: no group coordinate)
            case ir.Mma() if o.n_cols is None or o.n_cols.start == 0:  # (once a k-block: the first column block's)
                self._zero_a_tail(o)
                super().op(o)
            case _:
                super().op(o)

    def _b_slot(self, ring: str, slot: str) -> str:
        return f"{ring}.index({slot})"

    def _zero_a_tail(self, o: ir.Mma) -> None:
        b = self.buf
        slot = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
        view = f"{o.a_ring}.index({slot})" + (f".slice({self.row0}, {self.rows})" if self.p.rows else "")
        ring = self.m.ring(o.a_ring)
        vec = max(1, 16 // ring.dtype.bytes)
        lanes = min(32, max(1, ring.cols // vec))
        b.line("k_skip = k_start - k_base - kk * BK", "this k-block's columns before the group's K start")
        b.line("k_left = k_end - k_base - kk * BK", "and before its end")
        with b.block("if (k_skip > 0) | (k_left < BK)",
                     comment="its first or last, partial k-block: A's columns outside the group's K range to 0"):
            b.line(f"mk_layout: gl.constexpr = gl.BlockedLayout([1, {vec}], [{32 // lanes}, {lanes}], "
                   f"[{self.p.warps}, 1], [1, 0])")
            b.line(f"mk_vals = {view}.load(mk_layout)")
            b.line(f"mk_cols = gl.arange(0, {ring.cols}, layout=gl.SliceLayout(0, mk_layout))")
            b.line(f"{view}.store(gl.where(((mk_cols >= k_skip) & (mk_cols < k_left))[None, :], mk_vals, "
                   "gl.zeros_like(mk_vals)))", "(else the neighbour groups' columns add into the sum)")
            b.line("fence_async_shared()", "the zeros visible to wgmma's async proxy")
            b.line(self.api.barrier, "every thread's zeros stored before any thread's wgmma reads the slot")


def lower_grouped(m: ir.Module) -> GluonSource:
    """Gluon source of a grouped sm_90a module."""
    return lower(m, KGroupedEmitter if m.tiling.grouping is Grouping.K_OFFSETS else GroupedEmitter)
