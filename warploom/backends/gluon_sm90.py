"""Lower a schedule IR module to Triton Gluon source for Hopper (sm_90a).

One ``@gluon.jit`` function per partition, a kernel that allocates the rings, buffers and mbarriers and
forks the partitions with ``gl.warp_specialize``, and a raster helper. Every line that implements an IR
op carries the op's text form as a comment, so the generated kernel can be read beside the schedule.
Tile sizes and stages are module-level ``gl.constexpr`` values; M, N and K are run-time arguments, so
one compiled kernel serves every problem size with the same spec kind and plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warploom.backends import gluon_api
from warploom.backends.codebuf import CodeBuffer
from warploom.backends.gluon_raster import SK_PARAMS, raster, sk_batches, stream_k_helpers
from warploom.backends.gluon_reduce import RANGE_PARAMS, emit_reduce
from warploom.backends.grid_dependency import GRID_DEPENDENCY_HELPERS
from warploom.backends.group_scan import group_helpers
from warploom.dtypes import DType
from warploom.epilogue.graph import GROUP, OutputLayout
from warploom.epilogue.operands import OperandSpec
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.ir.nodes import INTERLEAVE
from warploom.spec import SCALE_BLOCK, ALayout, BLayout, GemmSpec, Grouping, ScaleLayout

_HEADER = """\
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
"""

# Blockwise scales are copied by cp.async, whose completion an mbarrier can track (seed 001).
_ASYNC_COPY_IMPORT = "from triton.experimental.gluon.language.nvidia.ampere import async_copy"

# The blockwise scale kernel parameters: the scale tensors go as they are, with their strides (any layout).
SCALE_PARAMS = ("sa_ptr", "sb_ptr", "sa_stride_m", "sa_stride_k", "sb_stride_k", "sb_stride_n")
# A grouped module's scale_b is (E, k-blocks, N-blocks): its expert stride too (backends/gluon_grouped.py).
GROUP_SCALE_PARAMS = ("sb_stride_g",)


# sm_100a's scale partition over blocked scales (flat, contiguous: `warploom.blocked.offset`) takes no strides.
BLOCKED_SCALE_PARAMS = ("sa_ptr", "sb_ptr")


def scale_params(m: ir.Module) -> tuple[str, ...]:
    """The blockwise scale parameters of `m`'s kernel (an M-grouped module's with scale_b's expert stride; a
    K-grouped module's scale_b is 2-D over the grouped K space, with none; blocked MX / NVFP4 scales, which
    sm_100a's scale partition loads, are flat, with none)."""
    if m.spec.scale_layout is ScaleLayout.BLOCKED:
        return BLOCKED_SCALE_PARAMS
    per_expert = m.tiling.grouped and m.tiling.grouping is not Grouping.K_OFFSETS
    return SCALE_PARAMS + (GROUP_SCALE_PARAMS if per_expert else ())

# A grouped module's (ir.Tiling.grouping): C's pointer (its stores clipped at a group's last row), the int32 group
# bounds (offs or masked_m) and the number of groups G.
GROUP_PARAMS = ("c_ptr", "group_ptr", "E")


@dataclass(frozen=True)
class GluonSource:
    """Generated Gluon for one module.

    Attributes:
        text: the Python source of the kernel module.
        kernel: name of the ``@gluon.jit`` kernel function in `text`.
        params: the kernel's run-time parameters, in order.
        num_warps: warps of the default partition.
        maxnreg: the kernel-wide register cap that lets setmaxnreg redistribute registers.
        reduce_kernel: split-K only: the ``@gluon.jit`` function in `text` that adds the workspace's partial sums
            in order and casts them into C (`gluon_reduce.REDUCE_PARAMS`; one program per `REDUCE_BLOCK` elements).
        cast_kernel: planner rule 29 only (`ir.Module.amax_pass`): the ``@gluon.jit`` function in `text` that
            quantizes the first pass's fp32 workspace by its rows' amax (`gluon_cast.CAST_PARAMS`; a program a row).
        num_ctas: the CTAs of a cluster (`ir.Tiling.cluster`): a Gluon program is then a cluster, its shapes are the
            cluster tile's and its layouts say how the CTAs share them (`cga_layout`, `cga`).
    """

    text: str
    kernel: str
    params: tuple[str, ...]
    num_warps: int
    maxnreg: int
    reduce_kernel: str | None = None  # split-K: the kernel that sums the workspace's slabs into C
    num_ctas: int = 1  # CTAs per cluster (ir.Tiling.cluster): each program of the launch is a cluster
    cast_kernel: str | None = None  # rule 29: the kernel that quantizes the first pass's workspace (gluon_cast)


def _instr_n(bm: int, bn: int, warps: int) -> int:
    """wgmma's N: the largest multiple of 8 (<= 256) dividing BN that the warps' share of BN allows."""
    m_reps = -(-bm // 16)
    n_reps = -(-warps // m_reps)
    max_n = max(bn // n_reps, 8)
    n = 256
    while n > max_n or bn % n:
        n -= 8
    return n


def cga_bases(cluster: int, split: bool, along_n: bool = False) -> tuple[tuple[int, int], ...]:
    """A 2-D tile's CTA layout in a cluster of `cluster` CTAs stacked along M (ir.Tiling.cluster): each CTA its own
    rows of the cluster tile (`split`: A, accumulators, C), or every CTA the whole (B, which the lead CTA
    multicasts); none without a cluster. `along_n` (ir.Tiling.cluster_n): the CTAs stand along N, each its own
    columns (`split` on the second dimension: B N-major, accumulators, C), or every CTA A's whole."""
    step = 1 if split else 0
    return tuple((0, step << i) if along_n else (step << i, 0) for i in range(cluster.bit_length() - 1))


def cga(cluster: int, split: bool = True, along_n: bool = False) -> str:
    """A layout's ``cga_layout`` argument (`cga_bases`), "" with no cluster."""
    bases = cga_bases(cluster, split, along_n)
    return f", cga_layout={[list(b) for b in bases]}" if bases else ""


def cga_scales(cluster: int, tensor: ir.Tensor, rank: int) -> str:
    """The ``cga_layout`` argument of a blockwise scale ring's slot or its copies' index vector (`rank` 1) in a
    cluster stacked along M: scale_a's slots hold the cluster tile's rows, each CTA its own (split along the last
    dimension), scale_b's the tile's columns, which every CTA copies whole for itself (broadcast: cp.async has no
    multicast). "" with no cluster."""
    if cluster == 1:
        return ""
    split = 1 if tensor is ir.Tensor.SCALE_A else 0
    bases = [[0] * (rank - 1) + [split << i] for i in range(cluster.bit_length() - 1)]
    return f", cga_layout={bases}"


def wide(index: str) -> str:
    """`index` (an expression) as a 64-bit integer, to multiply by a stride: Triton passes an int argument below 2^31
    as i32 and an i32 product wraps silently, so an element offset into a tensor of 2^31 elements or more needs one
    64-bit factor. Indices themselves (rows, columns, k-blocks) stay 32-bit: only the products pass 2^31."""
    if index.isidentifier() or _parenthesized(index):
        return f"{index}.to(gl.int64)"
    return f"({index}).to(gl.int64)"


def as_is(index: str) -> str:
    """`index` (an expression) to multiply by a stride as it is: 32-bit (`wide`'s counterpart)."""
    return index if index.isidentifier() or _parenthesized(index) else f"({index})"


def scale_offsets_wide(spec: GemmSpec) -> bool:
    """Whether the kernel's element-wise scale loads (blockwise, MX on sm_90a) need 64-bit offsets: a scale tensor of
    the spec's sizes, with room for strides padded up to 4x (cuBLAS's scale layouts round rows up to 4), reaches
    2^31 elements. Only then: 64-bit address math in the copying partitions costs registers, which spill there."""
    s, m, n, k = spec.scale, spec.m, spec.n, spec.k
    if s.microscaled:  # MX, NVFP4 (a grouped spec's scale_b holds every expert's N rows)
        most = max(m, n * max(spec.groups, 1)) * -(-k // s.scale_k)
    elif s.is_blockwise:
        kb = -(-k // SCALE_BLOCK)
        most = max(s.a_scales(m), s.b_scales(n)) * kb
    else:
        return False
    return most * 4 >= 2**31


def _parenthesized(expr: str) -> bool:
    """Whether `expr` is one parenthesized expression, "(a + b)" (not "(a) * (b)")."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(expr) - 1:
            return False
    return True


def slot_index(s: ir.Slot, depth: int, stages: int) -> str:
    if depth == 1:  # a single barrier (ping-pong turns)
        return "0"
    d = "STAGES" if depth == stages else str(depth)
    if s.offset % depth == 0:
        return f"{s.cursor} % {d}"
    return f"({s.cursor} + {s.offset % depth}) % {d}"


def _parity(p: ir.Parity, depth: int, stages: int) -> str:
    # + 2*depth keeps the dividend non-negative for negative offsets without changing the parity.
    count = p.cursor if p.offset == 0 else f"({p.cursor} + {p.offset + 2 * depth})"
    base = f"{count} & 1" if depth == 1 else f"({count} // {'STAGES' if depth == stages else depth}) & 1"
    return f"({base}) ^ 1" if p.flip else base


def _guard(g: ir.Guard, first: str = "0") -> str | None:
    """A guard's condition on the k-block `kk`; `first`: the loop's first k-block (a stream-K unit's k_lo)."""
    return {ir.Guard.ALWAYS: None, ir.Guard.NOT_FIRST_K: f"kk > {first}", ir.Guard.FIRST_K: f"kk == {first}"}[g]


def use_acc(overwrite: ir.Guard, first: str = "0") -> str:
    """An MMA's use_acc argument: accumulate unless its `overwrite` guard holds for this k-block (`first`: as in
    `_guard`)."""
    return {ir.Guard.FIRST_K: f"kk > {first}", ir.Guard.ALWAYS: "False",
            ir.Guard.NOT_FIRST_K: f"kk == {first}"}[overwrite]


def _maxnreg(m: ir.Module) -> int:
    # setmaxnreg moves registers between warpgroups of a CTA that starts under a common cap: the cap is the SM's
    # 64K registers over all launched warps (workers packed, the total rounded to a warpgroup: Module.launched_warps),
    # in steps of 8, at most 248. Padding each worker separately gave a producer and a scale partition 2
    # warpgroups, a cap of 128, and 1764 bytes of spills at 128x256.
    return min(248, (65536 // (32 * m.launched_warps)) // 8 * 8)


class PartitionEmitter:
    """Emits one partition's function."""

    # A scaled promotion ends with a wgmma wait that pins it before the next wgmma (`promote_scaled`); sm_100a's
    # promoting partition issues no wgmma.
    pins_promotion = True

    def __init__(self, m: ir.Module, p: ir.Partition, buf: CodeBuffer) -> None:
        self.m, self.p, self.buf = m, p, buf
        self.depth = {c.name: c.depth for c in p.cursors}
        self.stages = m.rings[0].depth  # the STAGES constant
        self.async_accs = tuple(dict.fromkeys(o.acc for o, _ in ir.walk(p.body) if isinstance(o, ir.Mma)
                                              and o.is_async))
        # A partition with a row block computes rows [row0, row0 + rows) of each tile.
        # A cluster's program computes the cluster tile's rows (ir.Tiling.cluster), each CTA its own share of them.
        # (a 1x2 cluster's, ir.Tiling.cluster_n: the cluster tile's columns, each CTA its own, every CTA its rows)
        self.cluster, self.along_n = m.tiling.cluster, m.tiling.cluster_n
        rows_m = 1 if self.along_n else self.cluster  # CTAs along M
        self.row0, self.rows = (p.rows.start, p.rows.rows) if p.rows else (0, m.tiling.bm * rows_m)
        # (where the CTAs interleave 64-row blocks, ir.Tiling.interleaved, a warpgroup's block in the program is every
        # CTA's: rows 128 w .. of the cluster tile, each CTA its 64, as its A box and its C boxes split them)
        self.box = p.rows.start // INTERLEAVE if p.rows else 0  # (its box of A's slot, where a slot is boxes)
        if p.rows and m.tiling.interleaved:
            self.row0, self.rows = p.rows.start * self.cluster, p.rows.rows * self.cluster
        # Epilogue index vectors already computed in the current tile (ep_rows, ..., and offs_m / offs_n where they hold
        # the partition's rows / the whole tile's columns).
        self._offsets: set[str] = set()
        self._split: set[str] = set()  # accumulators already split into column blocks in the current tile
        self.split = m.tiling.split_k > 1
        self.kb = "(k0 + kk)" if self.split else "kk"  # the k-block's index in K (split-K: from the unit's start)
        self.tile0 = "tile_lo + " if m.tiling.ranged else ""  # a ranged launch's tiles start at tile_lo
        self.sk = m.tiling.stream_k
        self.k_first = "k_lo" if self.sk else "0"  # the first k-block of a K loop (a stream-K unit's)
        self.api = gluon_api.current()  # the installed Triton's spellings (backends/gluon_api.py)
        self.scale_b = "scale_b_ptr"  # rowwise scale_b's first column (a grouped module's: its group's row)
        self.sb_base = "sb_ptr"  # blockwise scale_b's first block (a grouped module's: its group's (KB, NB) block)
        self.global_b = "global_b_ptr"  # NVFP4's global scale of B (a grouped sm_100a module's: its expert's)
        self.sa_row0 = "off_m"  # blockwise scale_a's first row: the tile's (a K-grouped module's: in A, not C)
        # where C's rows end for an epilogue operand or rowwise scale_a read at them (a K-grouped module's M is one
        # group's rows, C's the groups' G * M: its tile's rows end at its group's, row_end)
        self.operand_rows = "M"
        self.store_rows = "M"  # where C's rows end for a masked register store (a grouped module's: the group's end)
        self.sk_block = self.kb  # blockwise scales' k-block (a K-grouped module's: from its group's K start)
        self.sk_mask = ""  # a further condition of the scale copies' mask (a K-grouped module's: k-blocks in scales)

    def params(self) -> list[str]:
        return partition_params(self.m, self.p)

    def emit(self) -> None:
        b = self.buf
        body = self.p.body
        b.line("@gluon.jit")
        with b.block(f"def {self.p.name}({', '.join(self.params())})",
                     comment=f"{self.p.role.value}: {self.p.warps} warps, {self.p.regs} registers"):
            if body and isinstance(body[0], ir.GridDependencyWait):  # (ir.Module.dependent_launch)
                # before the preamble too: a grouped module's tile count reads the group bounds from memory
                b.line("grid_dependency_wait()", printer.op(body[0]))
                body = body[1:]
            b.line("pid = gl.program_id(0)")
            b.line("num_pid_m = gl.cdiv(M, BM)")
            b.line(f"num_pid_n = gl.cdiv(N, {'TN' if self.m.tiling.n_blocks else 'BN'})")
            self._num_tiles()
            if self.split:
                if self.m.tiling.uneven_split:
                    b.line("k_all = gl.cdiv(K, BK)", "a tile's k-blocks; each unit takes its range of them")
                else:
                    b.line("k_tiles = gl.cdiv(K, BK) // SPLIT_K", "k-blocks per work unit")
                b.line("num_units = num_tiles * SPLIT_K", "split-K: unit = split * num_tiles + tile")
            else:
                b.line("k_tiles = gl.cdiv(K, BK)")
            if self.sk:
                b.line("dp_tiles, it0, it1, num_units = sk_range(pid, num_tiles, k_tiles)",
                       "stream-K: whole tiles, then this CTA's share of the rest")
            self.layouts()
            for o, _ in ir.walk(self.p.body):
                if isinstance(o, ir.CopyScales):
                    r = self.m.ring(o.ring)
                    per = max(1, r.cols // (32 * self.p.warps))
                    lay = (f"gl.BlockedLayout([{per}], [32], [{self.p.warps}], [0]"
                           f"{cga_scales(self.cluster, r.tensor, 1)})")
                    what = f"{r.cols}" if r.rows == 1 else f"{r.rows} slices x {r.cols}"
                    b.line(f"{o.ring}_copy: gl.constexpr = {lay}",
                           comment=f"{what} scales of a stage over the warps' threads")
            for c in self.p.cursors:
                b.line(f"{c.name} = 0", comment=f"cursor {c.name}: stage uses so far, across tiles")
            for buf in self._operand_buffers():
                b.line(f"{buf}_phase = 0", comment=f"phase of {buf}_bar")
            self.body(body)

    def _num_tiles(self) -> None:
        """The line that counts the launch's tiles (a grouped module's scan: backends/gluon_grouped.py)."""
        if self.m.tiling.ranged:
            self.buf.line("num_tiles = tile_hi - tile_lo", "this launch's tiles: tile_lo .. tile_hi of C's (ranged)")
        else:
            self.buf.line("num_tiles = num_pid_m * num_pid_n")

    def layouts(self) -> None:
        """The accumulators' register layout (wgmma's), their zero tiles, and a fused epilogue's block layout."""
        b = self.buf
        if not self.p.accumulators:
            return
        # A narrow or fitted tile's block accumulators (ir.Tiling.n_blocks): each in the layout of its own wgmma N.
        narrow = bool(self.m.tiling.n_blocks)
        bits = self.m.spec.a_dtype.bytes * 8
        if not narrow:
            n = _instr_n(self.rows, min(a.cols for a in self.p.accumulators), self.p.warps)
            b.line(f"acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], "
                   f"warps_per_cta=[{self.p.warps}, 1], instr_shape=[16, {n}, {256 // bits}]"
                   f"{cga(self.cluster, along_n=self.along_n)})",
                   comment="wgmma accumulator: each warpgroup owns 64 rows" + (
                       "" if self.cluster == 1 else f", each CTA its {'columns' if self.along_n else 'rows'} of the "
                                                    "cluster tile"))
        else:
            for w in sorted({a.cols for a in self.p.accumulators}, reverse=True):
                b.line(f"acc_layout_n{w}: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], "
                       f"warps_per_cta=[{self.p.warps}, 1], instr_shape=[16, {w}, {256 // bits}]"
                       f"{cga(self.cluster, along_n=self.along_n)})",
                       comment=f"a {w}-column block of the tile: its own wgmma N"
                       + ("" if self.cluster == 1 else ", each CTA its rows of the warpgroup's block"))
        for a in self.p.accumulators:
            b.line(f"{a.name} = gl.zeros({self._acc_shape(a)}, gl.float32, {self._layout(a)})")
        width = self._epilogue_width()
        if width:
            en = _instr_n(self.rows, width, self.p.warps)
            b.line(f"ep_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], "
                   f"warps_per_cta=[{self.p.warps}, 1], instr_shape=[16, {en}, {256 // bits}]"
                   f"{cga(self.cluster, along_n=self.along_n)})",
                   comment="one column block of the accumulator, as the fused epilogue computes it")

    def body(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, ir.Loop):
                self.loop(s)
            else:
                self.op(s)

    def _sk_unit_head(self) -> None:
        b = self.buf
        b.line("tile_id, k_lo, k_hi = sk_unit(u, pid, dp_tiles, it0, it1, k_tiles)",
               "this unit's tile and its k-blocks k_lo .. k_hi")
        if self.p.role is not ir.Role.MMA:  # (a grouped module's: its group, origin and row end, `group_tile`)
            self._tile_coords("tile_id")

    def _sk_tile_body(self, body: tuple[ir.Stmt, ...]) -> None:
        """A stream-K unit's body: the ops up to its Fixup, the fixup, then the rest only where this unit is not a
        contributor (which stores its partial instead: ir.Fixup)."""
        at = next((i for i, s in enumerate(body) if isinstance(s, ir.Fixup)), None)
        if at is None:
            self.body(body)
            return
        fx = body[at]
        assert isinstance(fx, ir.Fixup)
        self.body(body[:at])
        b = self.buf
        rows = self.rows
        part = self.row0 // rows  # this partition's flag among the CTA's (one per consumer partition)
        parts = self.m.tiling.bm // rows
        narrow = bool(self.m.tiling.n_blocks)  # (each block in its own layout: its rows' offsets too)
        if not narrow:
            b.line(f"sk_rows = gl.arange(0, {rows}, layout=gl.SliceLayout(1, acc_layout))", printer.op(fx))
        with b.block("if k_lo > 0", comment="a contributor: its partial to this CTA's workspace slot, then its flag"):
            for name in fx.accs:
                self._sk_slot(self._acc(name), rows, narrow, "pid")
                b.line(f"gl.store(sk_ws_ptr + sk_offs, {name})")
            b.line(self.api.barrier, "every thread's partial stored before the flag is released")
            b.line(f"gl.atomic_xchg(sk_flags_ptr + pid * {parts} + {part}, 1, sem=\"release\", scope=\"gpu\")")
        with b.block("else"):
            with b.block("if k_hi < k_tiles", comment="the finisher: add the later CTAs' partials, in k order"):
                b.line("sk_last = sk_owner(tile_id - dp_tiles, k_tiles, dp_tiles, num_tiles)",
                       "the CTA holding the tile's last k-block")
                self._sk_gather(fx, rows, part, parts, narrow)
            self.body(body[at + 1:])

    def _sk_gather(self, fx: ir.Fixup, rows: int, part: int, parts: int, narrow: bool) -> None:
        """The finisher's side of a Fixup: acquire the flags of pieces pid + 1 .. sk_last, then add their partials in
        k order and reset the flags. The pieces end at about the same time, so the waits and the loads are each issued
        for several pieces at once (`sk_batches`) rather than one piece's round trips after another's, which cost
        about a microsecond a piece (docs/decisions/rule-21-stream-k.md)."""
        b = self.buf
        waits, loads = sk_batches(self.m.tiling.stream_k, sum(a.rows * a.cols for a in map(self._acc, fx.accs))
                                  // (32 * self.p.warps))
        flags = f"sk_flags_ptr + sk_q * {parts} + {part}"
        acquire = f"gl.atomic_add({flags}, gl.zeros_like(sk_q), mask=~sk_up, sem=\"acquire\", scope=\"gpu\")"
        b.line(f"sk_wait_layout: gl.constexpr = gl.BlockedLayout([1], [32], [{self.p.warps}], [0])")
        with b.block(f"for q0 in range(pid + 1, sk_last + 1, {waits})",
                     comment=f"acquire the later pieces' flags, {waits} at a time"):
            b.line(f"sk_q = q0 + gl.arange(0, {waits}, layout=sk_wait_layout)")
            b.line("sk_up = sk_q > sk_last", "past the tile's last piece: no flag to wait on")
            b.line(f"sk_set = {acquire}")
            with b.block("while gl.min(gl.where(sk_up, 1, sk_set), axis=0) == 0"):
                b.line(f"sk_set = {acquire}")
        # Weak loads, ordered after the contributors' partials by the flags' acquires and the barrier after them (PTX
        # causality order: acquire, then the CTA barrier). As .cg (LDG.STRONG.GPU in SASS) such loads made
        # 685x6136x1680 under sk_waves=1 11% slower (H100, archive/exp/sk_anatomy.py); evict_first: a slot is read once.
        b.line(self.api.barrier, "every flag acquired before any thread reads a partial")
        if loads == 1:  # (a wide accumulator: one partial at a time, no second copy of it held for a select)
            with b.block("for q in range(pid + 1, sk_last + 1)", comment="add the partials in k order"):
                self._sk_add(fx, rows, narrow, "q", None)
        else:
            with b.block(f"for q0 in range(pid + 1, sk_last + 1, {loads})",
                         comment=f"add the partials in k order, {loads} loads in flight"):
                with b.block(f"for j in gl.static_range({loads})"):
                    b.line("sk_here = q0 + j <= sk_last")
                    self._sk_add(fx, rows, narrow, "(q0 + j)", "sk_here")
        with b.block(f"for q0 in range(pid + 1, sk_last + 1, {waits})", comment="reset the flags for the next launch"):
            b.line(f"sk_q = q0 + gl.arange(0, {waits}, layout=sk_wait_layout)")
            b.line(f"gl.atomic_xchg({flags}, gl.zeros_like(sk_q), mask=sk_q <= sk_last, sem=\"relaxed\", "
                   "scope=\"gpu\")")

    def _sk_slot(self, a: ir.Accumulator, rows: int, narrow: bool, piece: str) -> None:
        """`sk_offs`: where accumulator `a`'s elements lie in workspace slot `piece` (a CTA's: its rows of BM x BN)."""
        b = self.buf
        if narrow:
            b.line(f"sk_rows = gl.arange(0, {rows}, layout=gl.SliceLayout(1, {self._layout(a)}))")
        b.line(f"sk_cols = gl.arange(0, {a.cols}, layout=gl.SliceLayout(0, {self._layout(a)}))")
        b.line(f"sk_offs = ({piece} * BM + {self.row0} + sk_rows)[:, None] * BN + ({a.col0} + sk_cols)[None, :]")

    def _sk_add(self, fx: ir.Fixup, rows: int, narrow: bool, piece: str, here: str | None) -> None:
        """Add the partial of workspace slot `piece` to each of the Fixup's accumulators (where `here`, if given: a
        batch's slots past the tile's last piece load nothing and add nothing)."""
        b = self.buf
        for name in fx.accs:
            self._sk_slot(self._acc(name), rows, narrow, piece)
            if here is None:
                b.line(f"{name} = {name} + gl.load(sk_ws_ptr + sk_offs, eviction_policy=\"evict_first\")")
            else:
                b.line(f"{name} = gl.where({here}, {name} + gl.load(sk_ws_ptr + sk_offs, mask={here}, other=0.0, "
                       f"eviction_policy=\"evict_first\"), {name})")

    def loop(self, lp: ir.Loop) -> None:
        b = self.buf
        if lp.kind is ir.LoopKind.TILES and self.sk:
            self._offsets, self._split = set(), set()
            assert lp.step == 1, "stream-K has no ping-pong (ir/verify.py)"
            with b.block("for u in range(num_units)", comment="for units (stream-K: tile_id, k_lo .. k_hi)"):
                self._sk_unit_head()
                self._sk_tile_body(lp.body)
        elif lp.kind is ir.LoopKind.K and self.sk:
            with b.block("for kk in range(k_lo, k_hi)", comment="for k (this unit's k-blocks)"):
                self.body(lp.body)
        elif lp.kind is ir.LoopKind.FLAT and self.sk:
            with b.block("for u in range(num_units)",
                         comment="for units*k (flattened: one sequence of (tile, k) steps)"):
                self._sk_unit_head()
                with b.block("for kk in range(k_lo, k_hi)"):
                    self.body(lp.body)
        elif lp.kind is ir.LoopKind.TILES and self.split:
            self._offsets, self._split = set(), set()
            assert lp.step == 1, "split-K has no ping-pong (ir/verify.py)"
            with b.block("for unit in range(pid, num_units, gl.num_programs(0))", comment="for units (split-K)"):
                self._unit_coords("unit")
                self.body(lp.body)
        elif lp.kind is ir.LoopKind.TILES:
            self._offsets, self._split = set(), set()
            if lp.step == 1:
                head, note = "range(pid, num_tiles, gl.num_programs(0))", "for tiles"
            else:  # this CTA's tiles number start, start + step, ...: ping-pong consumers alternate
                first = "pid" if lp.start == 0 else f"pid + {lp.start} * gl.num_programs(0)"
                head, note = f"range({first}, num_tiles, {lp.step} * gl.num_programs(0))", \
                    f"for tiles[{lp.start}::{lp.step}]"
            with b.block(f"for tile_id in {head}", comment=note):
                if self.p.role is not ir.Role.MMA:  # (an sm_100a MMA warp addresses only its rings)
                    self._tile_coords("tile_id")
                self.body(lp.body)
        elif lp.kind is ir.LoopKind.K:
            with b.block("for kk in range(k_tiles)", comment="for k"):
                self.body(lp.body)
        else:  # FLAT: over this CTA's tiles (split-K: work units) and their k-blocks
            var, what = ("unit", "units") if self.split else ("tile_id", "tiles")
            if self.m.spec.scale.per_column_b and any(isinstance(o, ir.CopyScales) for o, _ in ir.walk(lp.body)):
                if self.m.tiling.uneven_split:
                    raise NotImplementedError(f"sm_90a lowering of {self.m.name}: the flattened loop of a per-column "
                                              "scale copier runs one count of k-blocks a unit; unequal split-K "
                                              "ranges need the nest (planner: split_k must divide the k-blocks)")
                # A partition copying a scale per column of B (1x128 x 1x128, MX) keeps the flat loop: in the nest the
                # compiler hoists the copies' index vectors out of the k-loop, and at its 24 registers they spill
                # (32-64 bytes, ptxas). Its k-steps are long (two 128-wide fp8 tiles and scales) beside the divisions.
                b.line(f"my_{what} = gl.cdiv(num_{what} - pid, gl.num_programs(0))")
                with b.block(f"for t in range(my_{what} * k_tiles)", comment=f"for {what}*k (flattened)"):
                    b.line(f"{var} = pid + (t // k_tiles) * gl.num_programs(0)")
                    b.line("kk = t % k_tiles")
                    self._tile_coords(var)
                    self.body(lp.body)
                return
            # Otherwise emitted as the (tile, k) nest the IR flattened: a warp-specialized producer is not
            # software-pipelined, so the nest runs ahead across tiles just the same, and needs no division or branch
            # a k-step. A flat loop's `t // k_tiles` and tile coordinates each k-step (even under `if kk == 0`, which
            # the compiler predicates) held a decode kernel's lone producer warp to 0.59-0.81x torch at 16x4096x4096
            # bf16, the nest to 0.98x (archive/exp/swap_gap.py, docs/benchmarks.md session 18).
            with b.block(f"for {var} in range(pid, num_{what}, gl.num_programs(0))",
                         comment=f"for {what}*k (flattened: one sequence of (tile, k) steps)"):
                self._tile_coords(var)
                with b.block("for kk in range(k_tiles)"):
                    self.body(lp.body)

    def _tile_coords(self, var: str) -> None:
        if self.split:
            self._unit_coords(var)
        else:
            self.buf.line(f"off_m, off_n = tile_coords({self.tile0}tile_id, num_pid_m, num_pid_n)")

    def _unit_coords(self, unit: str) -> None:
        b = self.buf
        b.line(f"split = {unit} // num_tiles", "which k-range")
        if self.m.tiling.uneven_split:  # (ir.raster.split_range: the first K % SPLIT_K ranges take one more)
            b.line("k0 = split * (k_all // SPLIT_K) + gl.minimum(split, k_all % SPLIT_K)", "its first k-block")
            b.line("k_tiles = (split + 1) * (k_all // SPLIT_K) + gl.minimum(split + 1, k_all % SPLIT_K) - k0",
                   "its k-blocks (ranges differ by at most one)")
        else:
            b.line("k0 = split * k_tiles", "its first k-block")
        b.line(f"off_m, off_n = tile_coords({self.tile0}{unit} % num_tiles, num_pid_m, num_pid_n)")

    def _coord(self, axis: ir.Axis, tensor: ir.Tensor | None = None) -> str:
        """The TMA coordinate along `axis` of a load of `tensor`."""
        return {ir.Axis.M: "off_m", ir.Axis.N: "off_n", ir.Axis.K: f"{self.kb} * BK"}[axis]

    def _b_slot(self, ring: str, slot: str) -> str:
        """B's slot `slot` of `ring` as a 2-D (BN, BK) or (BK, BN) view (a grouped module's slots are 3-D)."""
        return f"{ring}.index({slot})"

    def _b_view(self, ring: str, slot: str, cols: ir.ColBlock | None, k_cols: ir.ColBlock | None = None) -> str:
        k_major = self.m.spec.b_layout is BLayout.K_MAJOR
        view = self._b_slot(ring, slot)
        blocks = self.m.ring(ring).blocks
        if blocks and cols is not None:  # (a fitted tile's B: each block its own buffer, `ir.Ring.blocks`)
            view, cols = f"{block_buffer(ring, blocks.index(cols))}.index({slot})", None
        if cols is not None:  # a column block of N: dim 0 of a K-major (BN, BK) slot, dim 1 of (BK, BN)
            view += f".slice({cols.start}, {cols.cols}{'' if k_major else ', dim=1'})"
        if k_cols is not None:  # a slice of K: dim 1 of a K-major slot, dim 0 of (BK, BN)
            view += f".slice({k_cols.start}, {k_cols.cols}{', dim=1' if k_major else ''})"
        return f"{view}.permute((1, 0))" if k_major else view  # K-major (BN, BK) is read as (BK, BN)

    def op(self, o: ir.Op) -> None:
        b, c = self.buf, printer.op(o)
        match o:
            case ir.Wait():
                d = self.depth[o.slot.cursor]
                slot, parity = slot_index(o.slot, d, self.stages), _parity(o.parity, d, self.stages)
                b.line(f"mbarrier.wait({o.barrier}_bars.index({slot}), {parity})", c)
            case ir.Arrive():
                d = self.depth[o.slot.cursor]
                args = [f"{o.barrier}_bars.index({slot_index(o.slot, d, self.stages)})"]
                if o.count != 1:
                    args.append(f"count={o.count}")
                g = _guard(o.guard, self.k_first)
                if g:
                    args.append(f"pred={g}")
                b.line(f"mbarrier.arrive({', '.join(args)})", c)
            case ir.ArriveExpectTx():
                d = self.depth[o.slot.cursor]
                b.line(f"mbarrier.expect({o.barrier}_bars.index({slot_index(o.slot, d, self.stages)}), {o.nbytes})", c)
            case ir.TmaLoad():
                d = self.depth[o.slot.cursor]
                desc = f"{o.tensor.value.lower()}_desc"
                coord = ", ".join(self._coord(a, o.tensor) for a in o.coord)
                s = slot_index(o.slot, d, self.stages)
                if o.multicast:
                    self.api.require_multicast(f"{self.m.name}: {c}")
                if o.multicast and not o.lead_only:  # (a broadcast layout's multicast is issued by the lead alone)
                    raise NotImplementedError(f"sm_90a lowering of {c}: a multicast issued by every CTA")
                mc = ", multicast=True" if o.multicast else ""
                if o.blocks:  # (a fitted tile's B: each block of rows by a box of its width, ir.TmaLoad.blocks)
                    assert o.tensor is ir.Tensor.B and o.coord[0] is ir.Axis.N, c
                    n0, rest = self._coord(o.coord[0], o.tensor), self._coord(o.coord[1], o.tensor)
                    stored = self.m.ring(o.ring).blocks
                    for cb in o.blocks:
                        at = f"{n0} + {cb.start}" if cb.start else n0
                        dst = f"{block_buffer(o.ring, stored.index(cb))}.index({s})" if stored else \
                            f"{o.ring}.index({s}).slice({cb.start}, {cb.cols})"
                        b.line(f"{self.api.tma_load}({load_desc(o, cb)}, [{at}, {rest}], {o.barrier}_bars.index({s}), "
                               f"{dst}{mc})", c + f" (rows {cb.start}..{cb.start + cb.cols - 1})")
                    return
                boxes = self.m.ring(o.ring).boxes
                if boxes > 1:  # (a 192-row slot: three 64-row buffers, a box each, at rows 64 i of the tile)
                    assert o.tensor is ir.Tensor.A and o.coord[0] is ir.Axis.M and not o.multicast, c
                    rest = ", ".join(self._coord(a, o.tensor) for a in o.coord[1:])
                    m0 = self._coord(o.coord[0], o.tensor)
                    # (interleaved CTAs, ir.Tiling.interleaved: box i is every CTA's block i, 64 rows each, so the
                    # cluster's boxes stand 64 * cluster rows apart)
                    step = INTERLEAVE * (self.cluster if self.m.tiling.interleaved else 1)
                    for i in range(boxes):
                        at = f"{m0} + {step * i}" if i else m0
                        b.line(f"{self.api.tma_load}({desc}, [{at}, {rest}], {o.barrier}_bars.index({s}), "
                               f"{o.ring}.index(({s}) * {boxes} + {i}))",
                               c + f" (rows {step * i}..{step * i + step - 1})")
                    return
                b.line(f"{self.api.tma_load}({desc}, [{coord}], {o.barrier}_bars.index({s}), {o.ring}.index({s}){mc})",
                       c)
            case ir.Mma():
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                use = use_acc(o.overwrite, self.k_first)
                a_view = f"{o.a_ring}.index({s})"
                m_major = self.m.spec.a_layout is ALayout.M_MAJOR  # (an M-major A's slot is (BK, BM))
                boxes = self.m.ring(o.a_ring).boxes
                if boxes > 1:  # (a 192-row slot's three 64-row buffers: this warpgroup's is its own)
                    assert self.p.rows is not None and self.p.rows.rows == INTERLEAVE, c
                    a_view = f"{o.a_ring}.index(({s}) * {boxes} + {self.box})"
                elif self.p.rows:  # this warpgroup's rows of the A tile
                    a_view += f".slice({self.row0}, {self.rows}{', dim=1' if m_major else ''})"
                if m_major:
                    a_view += ".permute((1, 0))"  # read MN-major as (rows, BK)
                if o.k_cols is not None:  # MX: one 32-deep slice of the k-block
                    a_view += f".slice({o.k_cols.start}, {o.k_cols.cols}, dim=1)"
                b.line(f"{o.acc} = warpgroup_mma({a_view}, {self._b_view(o.b_ring, s, o.n_cols, o.k_cols)}, {o.acc}, "
                       f"use_acc={use}, is_async={o.is_async})", c)
            case ir.MmaWait():
                deps = ", ".join(self.async_accs)
                lhs = deps if len(self.async_accs) > 1 else self.async_accs[0]
                b.line(f"{lhs} = warpgroup_mma_wait({o.pending}, deps=({deps},))", c)
            case ir.Promote() if o.scales is not None:
                self.promote_scaled(o)
            case ir.Promote():
                b.line(f"{o.dst} = {o.dst} + {o.src}", c)
                if self.api.pin_promotion:  # (as `promote_scaled` always does)
                    b.line(f"{o.dst} = warpgroup_mma_wait(0, deps=({o.dst},))",
                           "keep the promotion before the next wgmma")
            case ir.CopyScales():
                self.copy_scales(o)
            case ir.ZeroAcc():
                a = self._acc(o.acc)
                b.line(f"{o.acc} = gl.zeros({self._acc_shape(a)}, gl.float32, {self._layout(a)})", c)
            case ir.Epilogue():
                self.epilogue(o)
            case ir.LoadOperand():
                self.load_operand(o)
            case ir.PrefetchOperand():
                self.prefetch_operand(o)
            case ir.SkipTiles():
                n = "k_tiles" if o.tiles == 1 else f"{o.tiles} * k_tiles"
                b.line(f"{o.cursor} += {n}", c)
            case ir.ApplyEpilogue():
                self.apply_epilogue(o)
            case ir.FoldAmax():
                self.fold_amax(o)
            case ir.StoreScales():
                self.store_scales(o)
            case ir.AtomicAmax():
                self.atomic_amax(o)
            case ir.StoreWait():
                b.line(f"tma.store_wait({o.pending})", c)
            case ir.StoreSmem() if o.output is not None:
                dst, c = self._staged(o.buffer, c)
                b.line(f"{dst}.store(ep_out{o.output})", c)
            case ir.StoreSmem():
                buf = self.m.buffer(o.buffer)
                src = self._column_block(o.acc, o.part, o.parts)
                dst, c = self._staged(o.buffer, c)
                b.line(f"{dst}.store({src}.to({buf.dtype.gluon}))", c)
            case ir.FenceAsync():
                b.line("fence_async_shared()", c)
            case ir.TmaStore():
                n0 = "off_n // 2" if o.halved else "off_n"  # (a gate/up result: (M, N / 2), BN / 2 a tile)
                col = n0 if o.part == 0 else f"{n0} + {o.part} * (BN // {o.parts})"
                row = f"off_m + {self.row0}" if self.row0 else "off_m"
                if o.tensor is ir.Tensor.WORKSPACE and self.m.tiling.ranged:  # compact: unit u's box at rows u * BM
                    row = f"unit * BM + {self.row0}" if self.row0 else "unit * BM"
                    col = "0" if o.part == 0 else f"{o.part} * (BN // {o.parts})"
                elif o.tensor is ir.Tensor.WORKSPACE:  # the unit's slab: M rounded up to BM rows per k-range
                    row = f"split * (num_pid_m * BM) + {row}"
                if self.m.tiling.swap_ab:  # C's rows are this module's columns (ir.Tiling.swap_ab)
                    row, col = col, row
                    c = re.sub(r"\b(C\d*)\[m, n\]", r"\1[n, m]", c)  # (C1, C2, ...: a fused epilogue's outputs)
                b.line(f"{self.api.tma_store}({buffer_desc(self.m.buffer(o.buffer))}, [{row}, {col}], {o.buffer})", c)
            case ir.Advance():
                b.line(f"{o.cursor} += 1", c)
            case _:
                raise NotImplementedError(f"sm_90a lowering of {c}")

    def copy_scales(self, o: ir.CopyScales) -> None:
        """cp.async of the stage's scales (masked: zeros outside the problem), then cp.async.mbarrier.arrive:
        the ready phase now waits for this thread's copies, without counting them as an arrival."""
        if o.sync:
            self.copy_scales_sync(o)
            return
        b, ring = self.buf, self.m.ring(o.ring)
        slot = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
        idx = f"{o.ring}_idx"
        # Offsets are 64-bit (`wide`) where the scales may reach 2^31 elements (`scale_offsets_wide`): their strides
        # are run-time arguments, and a column-major (M, K/128) scale_a puts k-block kk at kk * M.
        w = wide if scale_offsets_wide(self.m.spec) else as_is
        kb = self.sk_block
        if o.tensor is ir.Tensor.SCALE_A:
            # (a cluster's program copies the cluster tile's rows, each CTA its own: cga_scales)
            b.line(f"{idx} = {self.sa_row0} + gl.arange(0, {ring.cols * self.cluster}, layout={o.ring}_copy)",
                   "the tile's rows")
            # (128x128 blocks of A: each row copies its block's scale, so the ring is per row either way)
            row = f"({idx} // {SCALE_BLOCK})" if self.m.spec.scale.block_a else idx
            ptr, mask = f"sa_ptr + {w(row)} * sa_stride_m + {w(kb)} * sa_stride_k", f"{idx} < M"
        elif self.m.spec.scale.per_column_b:
            b.line(f"{idx} = off_n + gl.arange(0, {ring.cols}, layout={o.ring}_copy)", "the tile's columns")
            ptr, mask = f"{self.sb_base} + {w(kb)} * sb_stride_k + {w(idx)} * sb_stride_n", f"{idx} < N"
        else:
            b.line(f"{idx} = off_n // {SCALE_BLOCK} + gl.arange(0, {ring.cols}, layout={o.ring}_copy)",
                   f"the tile's {SCALE_BLOCK}-column blocks of B")
            ptr, mask = (f"{self.sb_base} + {w(kb)} * sb_stride_k + {w(idx)} * sb_stride_n",
                         f"{idx} < gl.cdiv(N, {SCALE_BLOCK})")
        mask = f"({mask}) & {self.sk_mask}" if self.sk_mask else mask
        b.line(f"{self.api.cp_async}({o.ring}.index({slot}), {ptr}, mask={mask})",
               printer.op(o))
        if o.barrier is not None:
            b.line(f"async_copy.mbarrier_arrive({o.barrier}_bars.index({slot}))",
                   f"{o.barrier}[{slot}] completes only once these copies land")
            if self.p.warps > 1:
                # The stage's arrival is one thread's: every warp must have registered its copies first.
                b.line(self.api.barrier, "every warp's copies tracked before the arrival that can complete it")

    def copy_scales_sync(self, o: ir.CopyScales) -> None:
        """MX: load the stage's e8m0 scales (per 32-deep slice j of the k-block, the tile's rows or columns) with
        ordinary byte loads, decode them to fp32 (2**(e - 127); 255 is NaN) and store slice j in row
        slot * slices + j of the ring; a partition barrier then orders every thread's stores before the one
        thread's arrive that publishes them. A loop, not unrolled: unrolled, the four slices' addresses and bytes
        are live at once and the 48-register warp spilled 408 bytes."""
        b, ring = self.buf, self.m.ring(o.ring)
        slot = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
        a_side = o.tensor is ir.Tensor.SCALE_A
        pre, off, size, dim = ("sa", "off_m", "M", "m") if a_side else ("sb", "off_n", "N", "n")
        idx, n, sk = f"{o.ring}_idx", ring.cols, self.m.spec.scale.scale_k
        b.line(f"{idx} = {off} + gl.arange(0, {n}, layout={o.ring}_copy)",
               "the tile's rows" if a_side else "the tile's columns")
        with b.block(f"for j in range({ring.rows})", comment=f"{printer.op(o)}: {sk}-deep slice j"):
            # The last k-block's slices past K hold no scales (K is a multiple of 32, not of 128): masked to 1.0,
            # times a partial of zeros (TMA zero-fills A and B there).
            # 64-bit offsets where they may pass 2^31 (`scale_offsets_wide`): M x K/32 e8m0 scales pass 2^31 bytes
            # with an A of 64 GiB, which an H100 holds.
            col = f"{self.kb} * {ring.rows} + j"  # the slice's column of the (M or N, K/32) scales
            w = wide if scale_offsets_wide(self.m.spec) else as_is
            b.line(f"{pre}_bits = gl.load({pre}_ptr + {w(idx)} * {pre}_stride_{dim} + {w(col)} * {pre}_stride_k, "
                   f"mask=({idx} < {size}) & ({col} < K // {sk}), other=127).to(gl.float32)", "e8m0 bits (127: 1.0)")
            b.line(f"{o.ring}.index(({slot}) * {ring.rows} + j).store(gl.where({pre}_bits == 255.0, float('nan'), "
                   f"gl.exp2({pre}_bits - 127.0)))", "2**(e - 127), exact in fp32; 255 is NaN")
        b.line(self.api.barrier, "every thread's stores before the arrive that publishes them")

    def promote_scaled(self, o: ir.Promote) -> None:
        """``dst += src * (sa[rows] x sb[cols])``: the per-row scales and one per 128-column block (a [rows, 1]
        factor, one FMA per element) or per column (a [rows, cols] factor)."""
        assert o.scales is not None
        b, sc, acc = self.buf, o.scales, self._acc(o.dst)
        slot = slot_index(sc.slot, self.depth[sc.slot.cursor], self.stages)
        # MX: slice j of slot s is ring row s * slices + j
        row = slot if sc.sub is None else f"({slot}) * {self.m.ring(sc.a_ring).rows} + {sc.sub}"
        rows = f".slice({self.row0}, {self.rows})" if self.p.rows else ""
        b.line(f"sa = {sc.a_ring}.index({row}){rows}.load(gl.SliceLayout(1, acc_layout))", "this k-block's row scales")
        if self.m.spec.scale.per_column_b:
            b.line(f"sb = {sc.b_ring}.index({row}).slice({acc.col0}, {acc.cols}).load(gl.SliceLayout(0, acc_layout))",
                   "its column scales")
        else:
            b.line(f"sb = {sc.b_ring}.index({slot}).slice({acc.col0 // SCALE_BLOCK}, 1)"
                   ".load(gl.SliceLayout(0, acc_layout))", f"its {SCALE_BLOCK}-column block's scale")
        b.line(f"{o.dst} = {o.dst} + {o.src} * (gl.expand_dims(sa, 1) * gl.expand_dims(sb, 0))", printer.op(o))
        # A wait with nothing in flight that names dst: LLVM would otherwise sink the FMAs below the next block's
        # wgmma, so two partials live at once and spill (1360 bytes at 128x256, ptxas); pinned, 0.
        if self.pins_promotion:
            b.line(f"{o.dst} = warpgroup_mma_wait(0, deps=({o.dst},))", "keep the promotion before the next wgmma")

    def _epilogue_width(self) -> int:
        """The column-block width of this partition's fused or per-block epilogue (0: none)."""
        for o, _ in ir.walk(self.p.body):
            if isinstance(o, ir.ApplyEpilogue) or (isinstance(o, ir.Epilogue) and o.parts > 1):
                return self._acc(o.acc).cols // o.parts
        return 0

    def _operand_buffers(self) -> list[str]:
        return list(dict.fromkeys(o.buffer for o, _ in ir.walk(self.p.body)
                                  if isinstance(o, ir.LoadOperand) and o.buffer is not None))

    def _block_offsets(self, acc: str, part: int, parts: int) -> tuple[str, str]:
        """Lines' variables for the rows and columns of block `part` of `acc` (in ep_layout's slices)."""
        row, col, w = self._block_origin(acc, part, parts)
        rows_v, cols_v = "ep_rows", f"ep_cols_{acc}_{part}"
        # Once per tile each: every load of the tile stands at its top level, after the first.
        if rows_v not in self._offsets:
            self.buf.line(f"{rows_v} = {row} + gl.arange(0, {self.rows}, layout=gl.SliceLayout(1, ep_layout))")
        if cols_v not in self._offsets:
            self.buf.line(f"{cols_v} = {col} + gl.arange(0, {w}, layout=gl.SliceLayout(0, ep_layout))")
        self._offsets |= {rows_v, cols_v}
        return rows_v, cols_v

    def load_operand(self, o: ir.LoadOperand) -> None:
        from warploom.epilogue.gluon import load_operand
        from warploom.epilogue.operands import OperandKind

        g = self.m.spec.epilogue
        assert g is not None
        spec = g.operand(o.operand)
        var, ptr = f"{o.operand}_{o.acc}_{o.part}", self.operand_ptr(spec)
        if o.buffer is not None:
            # The block's TMA copy was started by its prefetch_operand; the buffer's private mbarrier flips its
            # phase once per copy.
            buf, b = o.buffer, self.buf
            b.line(f"mbarrier.wait({buf}_bar, {buf}_phase)", f"{printer.op(o)}: its prefetch has landed")
            b.line(f"{buf}_phase ^= 1")
            b.line(f"{var} = {buf}.load(ep_layout).to(gl.float32)", f"{spec.name}: dense, [rows, cols]")
            return
        rows_v, cols_v = self._block_offsets(o.acc, o.part, o.parts)
        rs, cs = spec.mn_strides()
        kind = {ir.OperandRead.SCALAR: OperandKind.SCALAR, ir.OperandRead.PER_COL: OperandKind.ROW,
                ir.OperandRead.PER_ROW: OperandKind.COLUMN, ir.OperandRead.TILE: OperandKind.DENSE}[o.read]
        if kind is OperandKind.DENSE and spec.kind is not OperandKind.DENSE:
            # A vector read as a full tile (the naive way, kept for measurement): one address per element, 64-bit
            # where the operand's elements lie 2^31 or more apart (as epilogue.gluon.load_operand's).
            r, c = (wide(rows_v), wide(cols_v)) if spec.span() >= 2**31 else (rows_v, cols_v)
            line = (f"{var} = gl.load({ptr} + gl.expand_dims({r} * {rs}, 1) + gl.expand_dims({c} * {cs}, 0), "
                    f"mask=gl.expand_dims({rows_v} < {self.operand_rows}, 1) & gl.expand_dims({cols_v} < N, 0), "
                    "other=0.0)"
                    f".to(gl.float32)  # {spec.name}: {spec.kind.value} read as a tile, [rows, cols]")
        else:
            line = load_operand(spec, var, ptr, offs_m=rows_v, offs_n=cols_v, mask_m=f"{rows_v} < {self.operand_rows}",
                                mask_n=f"{cols_v} < N", rs=str(rs), cs=str(cs))
        code, _, note = line.partition("  # ")
        self.buf.line(code, f"{printer.op(o)}: {note}" if note else printer.op(o))

    def operand_ptr(self, spec: OperandSpec) -> str:
        """Where a tile reads operand `spec` from (a grouped module's per-group operand: its group's slice)."""
        return f"{spec.name}_ptr"

    def _block_origin(self, acc: str, part: int, parts: int) -> tuple[str, str, int]:
        """The output row and column where block `part` of `parts` of `acc` starts (expressions), and its width."""
        a = self._acc(acc)
        w = a.cols // parts
        col0 = a.col0 + part * w
        return (f"off_m + {self.row0}" if self.row0 else "off_m"), (f"off_n + {col0}" if col0 else "off_n"), w

    def prefetch_operand(self, o: ir.PrefetchOperand) -> None:
        row, col, w = self._block_origin(o.acc, o.part, o.parts)
        g = self.m.spec.epilogue
        assert g is not None
        # (a cluster's program loads every CTA's rows: each CTA's barrier expects its own block's bytes)
        nbytes = self.rows // self.cluster * w * g.operand(o.operand).dtype.bytes
        b, buf = self.buf, o.buffer
        if not o.synced:  # (else the TMA store just before did both: ir.PrefetchOperand)
            b.line(self.api.barrier, "every thread has read the buffer's previous block ...")
            b.line("fence_async_shared()", "... before the async proxy overwrites it")
        b.line(f"mbarrier.expect({buf}_bar, {nbytes})")
        b.line(f"{self.api.tma_load}({o.operand}_desc, [{row}, {col}], {buf}_bar, {buf})", printer.op(o))

    def apply_epilogue(self, o: ir.ApplyEpilogue) -> None:
        from warploom.epilogue.gluon import emit

        b, g = self.buf, self.m.spec.epilogue
        assert g is not None
        src = self._column_block(o.acc, o.part, o.parts)
        b.line(f"ep_acc = gl.convert_layout({src}, ep_layout)", printer.op(o))
        operands = {s.name: f"{s.name}_{o.acc}_{o.part}" for s in g.operands}
        outs = [f"ep_out{j}" for j in range(len(g.outputs))]
        amax = "ep_amax" if g.group_amax() is not None else None
        up, up_operands = None, None
        if o.up is not None:  # a gate/up pair: the same result columns' up block, from the tile's right half
            up = "ep_up"
            b.line(f"ep_up = gl.convert_layout({self._column_block(o.acc, o.up, o.parts)}, ep_layout)",
                   "the pair's up columns")
            up_operands = {s.name: f"{s.name}_{o.acc}_{o.up}" for s in g.operands if s.kind.varies_n}
        for line in emit(g, "ep_acc", operands, outs, out_dtype=self.m.spec.out_dtype, amax=amax, up=up,
                         up_operands=up_operands):
            code, _, note = line.partition("  # ")
            b.line(code, note or None)

    def fold_amax(self, o: ir.FoldAmax) -> None:
        """A fused quantization's block folded into its group's row amax (`ep_amax`, [rows]); the group's first
        block (a rowwise quantization's: the tile's first) starts it."""
        from warploom.epilogue.gluon import emit_amax

        b, g = self.buf, self.m.spec.epilogue
        assert g is not None
        _, cols_v = self._block_offsets(o.acc, o.part, o.parts)
        src = self._column_block(o.acc, o.part, o.parts)
        b.line(f"ep_acc = gl.convert_layout({src}, ep_layout)", printer.op(o))
        if g.rowwise() and self.m.amax_pass is None:  # (rule 29's first pass: the fold and the store share y)
            # An opaque copy: the fold's values must not be merged with the division's (same expressions of the
            # same block), or every block's values stay live beside the accumulator until its division, past the
            # 168 registers ptxas allots (688-1756 spilled bytes at 128x256, Triton 3.6); the division recomputes.
            b.line("ep_acc = gl.inline_asm_elementwise(\"mov.b32 $0, $1;\", \"=r,r\", [ep_acc], dtype=gl.float32, "
                   "is_pure=False, pack=1)", "(not common with apply_epilogue's values: recomputed there)")
        operands = {s.name: f"{s.name}_{o.acc}_{o.part}" for s in g.operands}
        for line in emit_amax(g, "ep_acc", operands, cols=cols_v, block="ep_block_amax"):
            code, _, note = line.partition("  # ")
            b.line(code, note or None)
        a = self._acc(o.acc)
        if (a.col0 + o.part * (a.cols // o.parts)) % g.amax().tile_cols(self.m.tiling.bn) == 0:
            b.line("ep_amax = ep_block_amax", "the group's first block starts its amax")
        else:
            b.line("ep_amax = gl.maximum(ep_amax, ep_block_amax, propagate_nan=tl.PropagateNan.ALL)",
                   "combined with the group's earlier blocks, NaN winning")

    def atomic_amax(self, o: ir.AtomicAmax) -> None:
        """Rule 29's first pass: the tile's row amax (`ep_amax`, >= 0 or a positive NaN) added to the (M,) amax
        workspace by a signed 32-bit max of its bits, which orders non-negative floats as floats and puts NaN above
        +inf; rows below M, a grouped module's below its group's end row (a ragged tile's other rows are the next
        group's, or no group's). Relaxed: the cast kernel reads the workspace after this launch ends."""
        rows_v = "ep_rows"
        if rows_v not in self._offsets:  # (every fold of the tile defined it)
            rows_v, _ = self._block_offsets(o.acc, 0, 1)
        self.buf.line(f"gl.atomic_max(amax_ptr + {rows_v}, ep_amax.to(gl.int32, bitcast=True), "
                      f"mask={rows_v} < {self.store_rows}, sem=\"relaxed\")", printer.op(o))

    def store_scales(self, o: ir.StoreScales) -> None:
        """A groups output's [rows, 1] values into column (block column) // 128 of its (M, ceil(N/128)) tensor, by
        masked register stores (rows below M, a grouped module's below its group's end row, as C's clipped stores;
        a group past N, a 256-wide tile's second, stores nothing); a rowwise
        quantization's into its (M, 1) tensor's one column (its tile holds the whole row: rule 27)."""
        rows_v, _ = self._block_offsets(o.acc, o.part, o.parts)
        ptr, stride = f"c{o.output}_ptr", f"c{o.output}_stride_m"
        b, g = self.buf, self.m.spec.epilogue
        assert g is not None
        if g.rowwise():
            b.line(f"gl.store({ptr} + gl.expand_dims({rows_v}, 1) * {stride}, ep_out{o.output}, "
                   f"mask=gl.expand_dims({rows_v} < {self.store_rows}, 1))", printer.op(o))
            return
        _, col, _ = self._block_origin(o.acc, o.part, o.parts)
        b.line(f"ep_group = ({col}) // {GROUP}" if " " in col else f"ep_group = {col} // {GROUP}", printer.op(o))
        b.line(f"gl.store({ptr} + gl.expand_dims({rows_v}, 1) * {stride} + ep_group, ep_out{o.output}, "
               f"mask=gl.expand_dims({rows_v} < {self.store_rows}, 1) & (ep_group * {GROUP} < N))")

    def _staged(self, buffer: str, comment: str) -> tuple[str, str]:
        """The staging buffer a block is written to, and its comment: a swapped module's block goes to C transposed
        (ir.Tiling.swap_ab), so it is written through the buffer's transposed view."""
        if self.m.tiling.swap_ab:
            return f"{buffer}.permute((1, 0))", f"{comment}, transposed"
        return buffer, comment

    def _column_block(self, acc: str, part: int, parts: int) -> str:
        """The variable holding column block `part` of `parts` of `acc`; at block 0, the lines that split it.

        (rows, cols) -> (rows, 2, cols/2) -> permute -> split halves the columns without moving data: in the
        wgmma layout a thread's registers already hold both halves. More blocks (a power of two) split each half
        again: block i is named by its index's bits, most significant first (lo = 0, hi = 1)."""
        if parts == 1:
            return acc
        levels = parts.bit_length() - 1
        cols = self._acc(acc).cols
        if parts != 1 << levels or parts > 16 or cols // parts < 8:
            raise NotImplementedError(f"sm_90a epilogue: 1, 2, 4, 8 or 16 column blocks of at least 8 columns, not "
                                      f"{parts} of {cols} columns")
        if acc not in self._split:  # once per tile: a block's epilogue and its store both name it
            self._split.add(acc)
            frontier = [acc]
            for level in range(levels):
                width, nxt = cols >> (level + 1), []
                note = "the accumulator's column halves (register-local)" if level == 0 else None
                for name in frontier:
                    self.buf.line(f"{name}_lo, {name}_hi = {name}.reshape([{self.rows}, 2, {width}]).permute(0, 2, 1)"
                                  ".split()", note)
                    nxt += [f"{name}_lo", f"{name}_hi"]
                frontier = nxt
        bits = "_".join("hi" if part >> (levels - 1 - j) & 1 else "lo" for j in range(levels))
        return f"{acc}_{bits}"

    def _acc_shape(self, a: ir.Accumulator) -> str:
        """Accumulator `a`'s shape in the program: a cluster's holds every CTA's rows (or, 1x2, columns) of it."""
        return f"[{a.rows}, {a.cols * self.cluster}]" if self.along_n else f"[{a.rows * self.cluster}, {a.cols}]"

    def _acc(self, name: str) -> ir.Accumulator:
        return next(x for x in self.p.accumulators if x.name == name)

    def _layout(self, a: ir.Accumulator) -> str:
        """Accumulator `a`'s register layout: a narrow or fitted tile's block's own (`layouts`), else acc_layout."""
        return f"acc_layout_n{a.cols}" if self.m.tiling.n_blocks else "acc_layout"

    def epilogue(self, o: ir.Epilogue) -> None:
        if o.parts > 1:
            self._block_epilogue(o)
            return
        b, acc = self.buf, o.acc
        steps = o.steps
        a = self._acc(acc)
        if ir.EpilogueStep.SCALE_ROWWISE in steps or ir.EpilogueStep.ADD_ROW_BIAS in steps:
            row = f"off_m + {self.row0}" if self.row0 else "off_m"
            b.line(f"offs_m = {row} + gl.arange(0, {'BM' if self.p.rows is None else self.rows}, "
                   f"layout=gl.SliceLayout(1, {self._layout(a)}))")
            self._offsets.add("offs_m")
        if ir.EpilogueStep.SCALE_ROWWISE in steps or ir.EpilogueStep.ADD_BIAS in steps:
            col = f"off_n + {a.col0}" if a.col0 else "off_n"
            width = "BN" if a.cols == self.m.tiling.bn else str(a.cols)
            b.line(f"offs_n = {col} + gl.arange(0, {width}, layout=gl.SliceLayout(0, {self._layout(a)}))")
            if (a.col0, a.cols) == (0, self.m.tiling.bn):
                self._offsets.add("offs_n")
            else:
                self._offsets.discard("offs_n")
        for s in steps:
            match s:
                case ir.EpilogueStep.SCALE_TENSORWISE:
                    b.line(f"{acc} = {acc} * (gl.load(scale_a_ptr) * gl.load(scale_b_ptr))", s.value)
                case ir.EpilogueStep.SCALE_GLOBAL:
                    b.line(f"{acc} = {acc} * (gl.load(global_a_ptr) * gl.load({self.global_b}))", s.value)
                case ir.EpilogueStep.SCALE_ROWWISE:
                    b.line(f"scale_a = gl.load(scale_a_ptr + offs_m, mask=offs_m < {self.operand_rows}, other=0.0)")
                    b.line(f"scale_b = gl.load({self.scale_b} + offs_n, mask=offs_n < N, other=0.0)")
                    b.line(f"{acc} = {acc} * gl.expand_dims(scale_a, 1) * gl.expand_dims(scale_b, 0)", s.value)
                case ir.EpilogueStep.ADD_BIAS:
                    b.line("bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)")
                    b.line(f"{acc} = {acc} + gl.expand_dims(bias, 0)", s.value)
                case ir.EpilogueStep.ADD_ROW_BIAS:
                    b.line(f"bias = gl.load(bias_ptr + offs_m, mask=offs_m < {self.operand_rows}, other=0.0)"
                           ".to(gl.float32)")
                    b.line(f"{acc} = {acc} + gl.expand_dims(bias, 1)", s.value)


    def _block_epilogue(self, o: ir.Epilogue) -> None:
        """The steps on one column block, in the block's own wgmma layout (ep_layout): its scale and bias values
        are the only ones live (passes/epilogue.py block_steps)."""
        b = self.buf
        blk = self._column_block(o.acc, o.part, o.parts)
        b.line(f"{blk} = gl.convert_layout({blk}, ep_layout)", printer.op(o))
        rows_v, cols_v = self._block_offsets(o.acc, o.part, o.parts)
        for s in o.steps:
            match s:
                case ir.EpilogueStep.SCALE_TENSORWISE:
                    b.line(f"{blk} = {blk} * (gl.load(scale_a_ptr) * gl.load(scale_b_ptr))", s.value)
                case ir.EpilogueStep.SCALE_GLOBAL:
                    b.line(f"{blk} = {blk} * (gl.load(global_a_ptr) * gl.load({self.global_b}))", s.value)
                case ir.EpilogueStep.SCALE_ROWWISE:
                    b.line(f"{blk} = {blk} * gl.expand_dims(gl.load(scale_a_ptr + {rows_v}, "
                           f"mask={rows_v} < {self.operand_rows}, "
                           f"other=0.0), 1) * gl.expand_dims(gl.load({self.scale_b} + {cols_v}, mask={cols_v} < N, "
                           "other=0.0), 0)", s.value)
                case ir.EpilogueStep.ADD_BIAS:
                    b.line(f"{blk} = {blk} + gl.expand_dims(gl.load(bias_ptr + {cols_v}, mask={cols_v} < N, "
                           "other=0.0).to(gl.float32), 0)", s.value)
                case ir.EpilogueStep.ADD_ROW_BIAS:
                    b.line(f"{blk} = {blk} + gl.expand_dims(gl.load(bias_ptr + {rows_v}, "
                           f"mask={rows_v} < {self.operand_rows}, "
                           "other=0.0).to(gl.float32), 1)", s.value)


def output_desc(output: int) -> str:
    """The TMA descriptor parameter of kernel output `output` (c_desc, c1_desc, ...)."""
    return "c_desc" if output == 0 else f"c{output}_desc"


WORKSPACE_DESC = "workspace_desc"
def store_desc(o: ir.TmaStore) -> str:
    """The descriptor a TMA store writes through: an output's, or the split-K workspace's."""
    return WORKSPACE_DESC if o.tensor is ir.Tensor.WORKSPACE else output_desc(o.output)


def block_buffer(ring: str, j: int) -> str:
    """The shared buffer of block j of a ring stored in blocks (`ir.Ring.blocks`: a fitted tile's B)."""
    return f"{ring}_n{j}"


def load_desc(o: ir.TmaLoad, block: ir.ColBlock | None = None) -> str:
    """The descriptor a TMA load copies through: its tensor's, or a fitted tile's B block's, of that block's width
    (`ir.TmaLoad.blocks`)."""
    desc = f"{o.tensor.value.lower()}_desc"
    return f"{desc}_w{block.cols}" if block is not None else desc


def buffer_desc(bf: ir.Buffer) -> str:
    """The descriptor of staging buffer `bf`'s TMA stores or loads (its box is the buffer): an output's, the split-K
    workspace's or a dense operand's; a narrow block's (`ir.Buffer.alias`) one of its own width."""
    desc = {ir.Tensor.C: output_desc(bf.output), ir.Tensor.OPERAND: f"{bf.operand}_desc",
            ir.Tensor.WORKSPACE: WORKSPACE_DESC}.get(bf.tensor, f"{bf.tensor.value.lower()}_desc")
    return f"{desc}_w{bf.cols}" if bf.alias else desc


def partition_params(m: ir.Module, p: ir.Partition) -> list[str]:
    """A partition function's parameters: the descriptors, smem and pointers its ops use, then M, N, K."""
    used: dict[str, None] = {}
    for o, _ in ir.walk(p.body):
        match o:
            case ir.TmaLoad():
                for cb in o.blocks or (None,):
                    used[load_desc(o, cb)] = None
                used |= dict.fromkeys(tmem_buffers(m.ring(o.ring)))
                if o.barrier:
                    used[f"{o.barrier}_bars"] = None
            case ir.Mma():
                used[o.a_ring] = None
                used |= dict.fromkeys(tmem_buffers(m.ring(o.b_ring)))
            case ir.TcMma():
                used[o.a_ring] = None
                used[o.b_ring] = None
                used[o.acc_ring] = None
                if o.release:
                    used[f"{o.release}_bars"] = None
                if o.release_scales:
                    used[f"{o.release_scales}_bars"] = None
                if o.scales and o.scales.slot is not None:  # seed 000: each buffer of the tensor-memory scale rings
                    used.update(dict.fromkeys(n for r in (o.scales.a, o.scales.b) for n in tmem_buffers(m.ring(r))))
                elif o.scales:
                    used[o.scales.a] = None
                    used[o.scales.b] = None
            case ir.StoreTmemScales():
                used.update(dict.fromkeys(tmem_buffers(m.ring(o.ring))))
                prefix = "sa_" if o.tensor is ir.Tensor.SCALE_A else "sb_"
                used.update(dict.fromkeys(n for n in scale_params(m) if n.startswith(prefix)))
            case ir.ScaleCopy():
                used[o.ring] = None
                used[o.dst] = None
            case ir.Commit():
                used[f"{o.barrier}_bars"] = None
            case ir.LoadTmem():
                used[o.acc_ring] = None
            case ir.CopyScales():
                used[o.ring] = None
                if o.barrier:
                    used[f"{o.barrier}_bars"] = None
                prefix = "sa_" if o.tensor is ir.Tensor.SCALE_A else "sb_"
                used.update(dict.fromkeys(n for n in scale_params(m) if n.startswith(prefix)))
            case ir.Promote() if o.scales is not None:
                used[o.scales.a_ring] = None
                used[o.scales.b_ring] = None
            case ir.Wait() | ir.Arrive() | ir.ArriveExpectTx():
                used[f"{o.barrier}_bars"] = None
            case ir.StoreSmem():
                used[o.buffer] = None
            case ir.TmaStore():
                used[buffer_desc(m.buffer(o.buffer))] = None
                used[o.buffer] = None
                if m.tiling.grouped:  # (a tile crossing its group's last row stores through masked stores)
                    used["c_ptr"] = None
            case ir.PrefetchOperand():
                used[f"{o.operand}_desc"] = None
                used[o.buffer] = None
                used[f"{o.buffer}_bar"] = None
            case ir.LoadOperand() if o.buffer is not None:
                used[o.buffer] = None
                used[f"{o.buffer}_bar"] = None
            case ir.LoadOperand():
                used[f"{o.operand}_ptr"] = None
            case ir.StoreScales():
                used[f"c{o.output}_ptr"] = None
                used[f"c{o.output}_stride_m"] = None
            case ir.AtomicAmax():
                used["amax_ptr"] = None
            case ir.Fixup():
                used.update(dict.fromkeys(SK_PARAMS))
            case ir.Epilogue():
                for s in o.steps:
                    if s in (ir.EpilogueStep.SCALE_ROWWISE, ir.EpilogueStep.SCALE_TENSORWISE):
                        used["scale_a_ptr"] = None
                        used["scale_b_ptr"] = None
                    if s is ir.EpilogueStep.SCALE_GLOBAL:
                        used.update(dict.fromkeys(GLOBAL_PARAMS))
                    if s in (ir.EpilogueStep.ADD_BIAS, ir.EpilogueStep.ADD_ROW_BIAS):
                        used["bias_ptr"] = None
    if m.tiling.grouped:  # every partition's tile loop scans the group bounds
        used.update(dict.fromkeys(GROUP_PARAMS[1:]))
    order = {n: i for i, n in enumerate(_all_resources(m))}
    return sorted(used, key=lambda n: order[n]) + list(_sizes(m))


def tmem_buffers(r: ir.Ring) -> list[str]:
    """The kernel's names for a ring's buffers (every ring's, in shared or tensor memory): one, the ring, except a
    tensor-memory scale ring's (seed 000), whose slots are allocations of their own (Triton 3.6 and 3.9 refuse a
    multi-buffered TensorMemoryScalesLayout: "Scales don't currently support multibuffering"), and a ring stored in
    blocks (`ir.Ring.blocks`: a fitted tile's B), one per block."""
    if r.blocks:
        return [block_buffer(r.name, j) for j in range(len(r.blocks))]
    return [f"{r.name}{j}" for j in range(r.depth)] if r.tmem else [r.name]


def _all_resources(m: ir.Module) -> list[str]:
    return ([n for r in m.rings for n in tmem_buffers(r)] + [s.name for s in m.tmem_scales]
            + [f"{b.name}_bars" for b in m.barriers]
            + [b.name for b in m.buffers]
            + [f"{b.name}_bar" for b in m.buffers if b.tensor is ir.Tensor.OPERAND]
            + [p for p in kernel_params(m) if p not in _sizes(m)])


def _sizes(m: ir.Module) -> tuple[str, ...]:
    """The last run-time parameters of the kernel and of each partition: the sizes, and a ranged kernel's tiles."""
    return ("M", "N", "K") + (RANGE_PARAMS if m.tiling.ranged else ())


# NVFP4's tensorwise global scales (one fp32 each), read by the epilogue (ir.EpilogueStep.SCALE_GLOBAL).
GLOBAL_PARAMS = ["global_a_ptr", "global_b_ptr"]


def b_blocks(m: ir.Module) -> tuple[ir.ColBlock, ...]:
    """The blocks B's TMA loads copy (`ir.TmaLoad.blocks`), or () for whole slots."""
    return next((o.blocks for p in m.partitions for o, _ in ir.walk(p.body)
                 if isinstance(o, ir.TmaLoad) and o.tensor is ir.Tensor.B), ())


def scale_desc(t: ir.Tensor) -> str:
    """The kernel parameter of a TMA-loaded scale tensor (sm_100a MX)."""
    return f"{t.value}_desc"


def kernel_params(m: ir.Module) -> tuple[str, ...]:
    """The kernel's run-time parameters: TMA descriptors, then scale and bias pointers, then sizes."""
    steps = {s for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) for s in o.steps}
    # (a fitted tile's B goes by a descriptor per block width: ir.TmaLoad.blocks)
    ps = ["a_desc", *(dict.fromkeys(f"b_desc_w{w}" for w in m.tiling.n_blocks) if b_blocks(m) else ["b_desc"])]
    ps += [WORKSPACE_DESC] if m.tiling.split_k > 1 else [output_desc(j) for j in range(len(m.spec.output_dtypes()))
                                                          if j not in scale_outputs(m)]
    ps += list(dict.fromkeys(buffer_desc(bf) for bf in m.buffers if bf.alias))  # (a fitted tile's narrow blocks)
    if m.tmem_scales:  # sm_100a MX: TMA descriptors over torch's blocked scales (backends/gluon_sm100.py)
        ps += [scale_desc(ir.Tensor.SCALE_A), scale_desc(ir.Tensor.SCALE_B)]
    elif m.spec.scale.is_blockwise:
        ps += scale_params(m)
    if steps & {ir.EpilogueStep.SCALE_ROWWISE, ir.EpilogueStep.SCALE_TENSORWISE}:
        ps += ["scale_a_ptr", "scale_b_ptr"]
    if ir.EpilogueStep.SCALE_GLOBAL in steps:
        ps += GLOBAL_PARAMS
    if steps & {ir.EpilogueStep.ADD_BIAS, ir.EpilogueStep.ADD_ROW_BIAS}:
        ps.append("bias_ptr")
    if m.spec.epilogue is not None:
        ps += [f"{s.name}_desc" if s.kind.value == "dense" else f"{s.name}_ptr" for s in m.spec.epilogue.operands]
    ps += [p for j in scale_outputs(m) for p in (f"c{j}_ptr", f"c{j}_stride_m")]
    if m.amax_pass is not None:  # rule 29's first pass: the (M,) row amax its tiles add to
        ps.append("amax_ptr")
    if m.tiling.stream_k:
        ps += SK_PARAMS
    if m.tiling.grouped:
        ps += GROUP_PARAMS
    return tuple(ps) + _sizes(m)


def scale_outputs(m: ir.Module) -> tuple[int, ...]:
    """The outputs a fused 1x128 quantization stores as scales (`OutputLayout.GROUPS`): a pointer and a row stride
    each (``c1_ptr``, ``c1_stride_m``) rather than a TMA descriptor (ir.StoreScales)."""
    g = m.spec.epilogue
    return () if g is None else tuple(j for j, o in enumerate(g.outputs) if o.layout is OutputLayout.GROUPS)


def prelude(m: ir.Module, header: str) -> CodeBuffer:
    """A generated module's start, on every target: where it came from, its imports (`header`, then what blockwise
    scales and a fused epilogue need), the tiling's constants and the raster helper."""
    t = m.tiling
    b = CodeBuffer()
    b.line(comment=f"Generated by warploom from schedule IR module {m.name}.")
    b.line(comment=f"spec: {m.spec.short()}")
    b.lines(header)
    if m.spec.scale.is_blockwise and not m.tmem_scales:
        b.line(_ASYNC_COPY_IMPORT)
    if m.spec.epilogue is not None:
        from warploom.epilogue.gluon import IMPORTS

        for line in IMPORTS:
            b.line(line, comment="fused epilogue: tl.PropagateNan")
    b.line()
    # (a cluster's program tiles the cluster tile: BM is its rows, the CTAs' together; ir.Tiling.cluster)
    cm, cn = t.cluster_mn
    consts: tuple[tuple[str, int], ...] = (("BM", t.bm * cm), ("BN", t.bn * cn), ("BK", t.bk),
                                           ("STAGES", m.rings[0].depth), ("GROUP_M", t.group_m))
    consts += (("TN", t.tile_n),) if t.n_blocks else ()  # (a narrow or fitted tile's columns: its stride along N)
    consts += (("SPLIT_K", t.split_k),) if t.split_k > 1 else ()
    consts += (("SK_SPLIT", t.stream_k),) if t.stream_k else ()
    consts += (("SK_WAVES", t.sk_waves),) if t.sk_waves else ()
    for name, val in consts:
        b.line(f"{name} = gl.constexpr({val})")
    b.line()
    b.line()
    b.lines(raster(t))
    if m.dependent_launch:
        b.line()
        b.line()
        b.lines(GRID_DEPENDENCY_HELPERS)
    if t.stream_k:
        b.line()
        b.line()
        b.lines(stream_k_helpers(t))
    if t.grouped:
        b.line()
        b.line()
        b.lines(group_helpers(t.grouping))
    if m.spec.epilogue is not None and m.spec.epilogue.group_amax() is not None:
        from warploom.epilogue.gluon import NAN_MAX

        b.line()
        b.line()
        b.lines("\n".join(NAN_MAX))
    return b


def lower(m: ir.Module, emitter: type[PartitionEmitter] = PartitionEmitter, header: str = _HEADER) -> GluonSource:
    """Generate Gluon source for a complete (verified) module; backends/gluon_sm100.py passes its own partition
    emitter and imports for sm_100a modules."""
    t = m.tiling
    cm, cn = t.cluster_mn
    b = prelude(m, header)
    for p in m.partitions:
        b.line()
        b.line()
        emitter(m, p, b).emit()
    b.line()
    b.line()
    params = kernel_params(m)
    b.line("@gluon.jit")
    with b.block(f"def {m.name}({', '.join(params)})"):
        for r in m.rings:
            if r.in_tmem:  # sm_100a: tcgen05 accumulators, one (rows, cols) fp32 tile per slot
                b.line(f"{r.name} = allocate_tensor_memory(gl.float32, [{r.depth}, {r.rows}, {r.cols}], "
                       f"TensorMemoryLayout([{r.rows}, {r.cols}], col_stride=1))",
                       comment=f"ring {r.name}: {r.depth} x ({r.rows}, {r.cols}) fp32 in tensor memory")
                continue
            if r.tmem:  # sm_100a seed 000: each scale buffer its own allocation (`tmem_buffers`)
                for n in tmem_buffers(r):
                    b.line(f"{n} = allocate_tensor_memory({r.dtype.gluon}, [{r.rows}, {r.cols}], "
                           "TensorMemoryScalesLayout())",
                           comment=f"ring {r.name}, one of {r.depth}: ({r.rows}, {r.cols}) {r.dtype.value} scales in "
                                   "tensor memory")
                continue
            if r.byte_scales:  # sm_100a MX / NVFP4: TMA boxes of torch's blocked scales (backends/gluon_sm100.py)
                desc = scale_desc(r.tensor)
                b.line(f"{r.name} = gl.allocate_shared_memory({desc}.dtype, [{r.depth}, {r.rows // 128}, "
                       f"{r.cols // 4}, 2, 256], {desc}.layout)",
                       comment=f"ring {r.name}: {r.depth} x ({r.rows}, {r.cols}) {r.dtype.value} scales in 128x4 "
                               "blocks")
                continue
            if r.tensor in (ir.Tensor.SCALE_A, ir.Tensor.SCALE_B):
                # One fp32 row a slot (MX: a row per slice, slot s's at rows s * slices ...).
                cols = r.cols * t.cluster if r.tensor is ir.Tensor.SCALE_A else r.cols  # (every CTA's rows)
                # (the layout is a slot's, rank 1: the leading dimension indexes slots)
                b.line(f"{r.name} = gl.allocate_shared_memory(gl.float32, [{r.depth * r.rows}, {cols}], "
                       f"gl.SwizzledSharedLayout(1, 1, 1, [0]{cga_scales(t.cluster, r.tensor, 1)}))",
                       comment=f"ring {r.name}: {r.depth} x {'' if r.rows == 1 else f'{r.rows} slices x '}"
                               f"{r.cols} fp32 scales")
                continue
            desc = f"{r.tensor.value.lower()}_desc"
            if r.tensor is ir.Tensor.B and b_blocks(m):  # (copied by blocks: the widest one's descriptor, same layout)
                desc = f"b_desc_w{max(cb.cols for cb in b_blocks(m))}"
            # (a grouped module's B slots are (1, rows, cols): its 3-D descriptor's box, one group's block)
            # (a cluster's A box holds every CTA's rows; a 1x2 cluster's B box every CTA's columns)
            rows, cols = r.rows * cm if r.tensor is ir.Tensor.A else r.rows, r.cols
            if r.tensor is ir.Tensor.B and cn > 1:
                rows, cols = (rows * cn, cols) if m.spec.b_layout is BLayout.K_MAJOR else (rows, cols * cn)
            box = f"1, {rows}" if t.b_per_group and r.tensor is ir.Tensor.B else f"{rows}"
            cols = cols * r.dtype.bits // 8 if r.dtype is DType.E2M1 else cols  # (MX fp4: two values a byte)
            depth = r.depth
            if r.boxes > 1:  # (rule 32's 192-row slot: three 64-row buffers, `ir.Ring.boxes`)
                depth, box = r.depth * r.boxes, f"{rows // r.boxes}"
            if r.blocks:  # (a fitted tile's B: a buffer per block of rows, `ir.Ring.blocks`)
                for j, cb in enumerate(r.blocks):
                    b.line(f"{block_buffer(r.name, j)} = gl.allocate_shared_memory(b_desc_w{cb.cols}.dtype, "
                           f"[{r.depth}, {cb.cols}, {cols}], b_desc_w{cb.cols}.layout)",
                           comment=f"ring {r.name}'s rows {cb.start}..{cb.start + cb.cols - 1}: {r.depth} x "
                                   f"({cb.cols}, {r.cols}) {r.dtype.value}")
                continue
            b.line(f"{r.name} = gl.allocate_shared_memory({desc}.dtype, [{depth}, {box}, {cols}], "
                   f"{desc}.layout)", comment=f"ring {r.name}: {r.depth} x ({box}, {r.cols}) {r.dtype.value}"
                                             + (" padded, a value a byte (fp4_padded)" if r.padded else ""))
        # sm_100a MX / NVFP4: the tcgen05 scale operands (TensorMemoryScalesLayout); their dtype tells Gluon the
        # scale format (uint8: e8m0; float8e4nv: NVFP4's e4m3, scale_vec::4X)
        for sb in m.tmem_scales:
            b.line(f"{sb.name} = allocate_tensor_memory({sb.dtype.gluon}, [{sb.rows}, {sb.cols}], "
                   "TensorMemoryScalesLayout())",
                   comment=f"scale buffer {sb.name}: ({sb.rows}, {sb.cols}) {sb.dtype.value} in tensor memory")
        for bf in m.buffers:
            desc = buffer_desc(bf)
            if bf.alias:  # (a narrow block's staging, in the memory of its partition's widest: ir.Buffer.alias)
                view = gluon_api.current().smem_reinterpret
                b.line(f"{bf.name} = {bf.alias}.{view}({desc}.dtype, [{bf.rows * cm}, {bf.cols * cn}], {desc}.layout)",
                       comment=f"buffer {bf.name}: ({bf.rows}, {bf.cols}) {bf.dtype.value} in {bf.alias}'s memory")
                continue
            b.line(f"{bf.name} = gl.allocate_shared_memory({desc}.dtype, [{bf.rows * cm}, {bf.cols * cn}], "
                   f"{desc}.layout)", comment=f"buffer {bf.name}: ({bf.rows}, {bf.cols}) {bf.dtype.value}"
                                              + (" per CTA" if t.cluster > 1 else ""))
        for br in m.barriers:
            if t.cluster > 1:  # one barrier per CTA, or per cluster in the lead CTA (ir.Barriers.cluster)
                b.line(f"{br.name}_bars = mbarrier.allocate_mbarrier(batch={br.depth}"
                       f"{', two_ctas=True' if br.cluster else ''})",
                       comment="one per cluster, the lead CTA's" if br.cluster else None)
                continue
            b.line(f"{br.name}_bars = gl.allocate_shared_memory(gl.int64, [{br.depth}, 1], "
                   f"mbarrier.MBarrierLayout())")
        for depth in dict.fromkeys(br.depth for br in m.barriers):
            with b.block(f"for i in gl.static_range({depth})"):
                for br in m.barriers:
                    if br.depth == depth:
                        b.line(f"mbarrier.init({br.name}_bars.index(i), count={br.count})")
        for bf in m.buffers:
            if bf.tensor is ir.Tensor.OPERAND:
                alloc = ("mbarrier.allocate_mbarrier()" if t.cluster > 1  # (one per CTA of a cluster)
                         else "gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())")
                b.line(f"{bf.name}_bar = {alloc}", comment=f"TMA completion of {bf.name}, private to its "
                                                          "load_operand ops")
                b.line(f"mbarrier.init({bf.name}_bar, count=1)")
        b.line("fence_async_shared()", comment="make the mbarrier inits visible to the async proxy")
        if m.dependent_launch:
            b.line("launch_dependents()", comment="the next grid may start now (it waits for this one's end)")
        b.line(comment="argument tuples stay inline: binding one to a variable turns constexprs into tensors")
        b.line("gl.warp_specialize([")
        with b.indented():
            for p in (m.default_partition, *m.workers):
                b.line(f"({p.name}, ({', '.join(partition_params(m, p))})),")
        workers = m.workers
        b.line(f"], [{', '.join(str(p.warps) for p in workers)}], [{', '.join(str(p.regs) for p in workers)}])")
        # A cluster's exit barrier (ir.Tiling.exit_sync) is not emitted: Triton's ClusterBarrierInsertion puts a
        # cluster barrier before the return of every kernel of more than one CTA, here after warp_specialize joins.
        if t.cluster > 1 and not t.exit_sync:
            raise NotImplementedError(f"sm_90a lowering of {m.name}: a cluster without exit_sync (Triton ends every "
                                      "cluster's kernel with a cluster barrier)")
    reduce = None
    if t.split_k > 1:
        reduce = f"{m.name}_reduce"
        emit_reduce(b, reduce, m.spec.out_dtype, t, m.dependent_launch)
    cast = None
    if m.amax_pass is not None:  # rule 29's second pass
        from warploom.backends.gluon_cast import emit_cast

        cast = f"{m.name}_cast"
        emit_cast(b, cast, m.amax_pass, m.tiling.grouping, m.dependent_launch)
    return GluonSource(b.text(), m.name, params, m.default_partition.warps, _maxnreg(m), reduce, t.cluster, cast)
