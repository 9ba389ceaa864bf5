"""Split-K's second kernel on NVIDIA targets (`ir.Tiling.split_k`): the sum of the k-ranges' fp32 partials, in k-range
order (the same bits every run), cast to C's dtype; unranged over the whole output, or ranged over a split-K tail's
tiles (`ir.Tiling.ranged`). backends/gluon_sm90.py appends it to the kernel's source; runtime/launch.py launches it
over `reduce_grid`'s programs (or a tail's tiles)."""

from __future__ import annotations

from warploom.backends.codebuf import CodeBuffer
from warploom.backends.grid_dependency import dependent_start
from warploom.dtypes import DType
from warploom.ir import nodes as ir

# The split-K reduction kernel's parameters, and the elements each of its programs sums.
REDUCE_PARAMS = ("ws_ptr", "c_ptr", "c_stride_m", "c_stride_n", "M", "N", "MP")
# A ranged kernel's tiles (ir.Tiling.ranged), and its split-K reduction's parameters (one program per REDUCE_BLOCK
# elements of a tile's box: BM * BN // REDUCE_BLOCK programs per tile).
RANGE_PARAMS = ("tile_lo", "tile_hi")
RANGED_REDUCE_PARAMS = ("ws_ptr", "c_ptr", "c_stride_m", "c_stride_n", "M", "N", *RANGE_PARAMS)
REDUCE_BLOCK = 1024
# An unranged reduction's program covers REDUCE_BLOCK elements of C: flat where N is a multiple of 16 (which the JIT
# specializes), else a REDUCE_ROWS x REDUCE_COLS block indexed in two dimensions. The flat form, which divides each
# element's 64-bit index by N, ran 4.9-6.1 us a launch at other N against 1.9-2.4 us at those; the blocks run such N
# in 2.0-2.1 us (docs/decisions/rule-25-latency-split-k.md).
REDUCE_ROWS, REDUCE_COLS = 16, 64


def reduce_grid(m: int, n: int) -> int:
    """An unranged split-K reduction's programs for an M x N output: REDUCE_BLOCK elements each (`emit_reduce`)."""
    return -(-m * n // REDUCE_BLOCK) if n % 16 == 0 else -(-m // REDUCE_ROWS) * -(-n // REDUCE_COLS)


def emit_reduce(b: CodeBuffer, name: str, out: DType, t: ir.Tiling, dependent: bool = False) -> None:
    """Split-K's second kernel: C = the sum of the workspace's k-range partials, added in k-range order (the same
    result every run), cast to C's dtype, REDUCE_BLOCK elements a program.

    Unranged: slab s holds rows s * MP ... of the (SPLIT_K * MP, N) workspace; where N is a multiple of 16 the
    programs walk C's elements, else each sums one REDUCE_ROWS x REDUCE_COLS block of C, row-major over C's column
    blocks (`reduce_grid`). Ranged
    (a plan's split-K tail): the launch's tile tile_lo + i has its partials in the compact workspace's boxes i,
    tiles + i, ... (each BM x BN, unit u's at rows u * BM); BM * BN / REDUCE_BLOCK programs per tile, each storing
    where that tile lies in C (tile_coords: the grouped order the kernel ran), masked at C's edges."""
    b.line()
    b.line()
    b.line("@gluon.jit")
    params, note = (RANGED_REDUCE_PARAMS, "split-K tail: each tile of C = the sum of its k-ranges' boxes") \
        if t.ranged else (REDUCE_PARAMS, "split-K: C = sum of the partial slabs")
    with b.block(f"def {name}({', '.join(params)})", comment=note):
        if dependent:
            dependent_start(b)
        if t.ranged:
            b.line("layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])")
            chunks = t.bm * t.bn // REDUCE_BLOCK
            b.line("num_tiles = tile_hi - tile_lo")
            b.line(f"i = gl.program_id(0) // {chunks}", f"the launch's tile: {chunks} programs per BM x BN box")
            b.line("off_m, off_n = tile_coords(tile_lo + i, gl.cdiv(M, BM), gl.cdiv(N, BN))")
            b.line(f"offs = (gl.program_id(0) % {chunks}) * {REDUCE_BLOCK} + gl.arange(0, {REDUCE_BLOCK}, "
                   "layout=layout)")
            b.line("row = (off_m + offs // BN).to(gl.int64)", "C itself may pass 2^31 elements")
            b.line("col = (off_n + offs % BN).to(gl.int64)", "(and c_stride_n is a run-time stride)")
            b.line("mask = (row < M) & (col < N)")
            _sum_slabs(b, out, "i * (BM * BN) + offs", "(s * num_tiles + i) * (BM * BN) + offs", "k-range 0",
                       "row * c_stride_m + col * c_stride_n")
            return
        with b.block("if N % 16 == 0", comment="flat: whole 16-byte runs of each row (the JIT specializes N % 16)"):
            b.line("layout: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])")
            b.line(f"offs = gl.program_id(0).to(gl.int64) * {REDUCE_BLOCK} + gl.arange(0, {REDUCE_BLOCK}, "
                   "layout=layout)", "64-bit: C and the workspace may pass 2^31 elements")
            b.line("row = offs // N")
            b.line("col = offs % N")
            b.line("mask = row < M", "(not offs < M * N: an i32 product)")
            _sum_slabs(b, out, "offs", "(s * MP + row) * N + col", "slab 0: rows 0 .. M of the first MP",
                       "row * c_stride_m + col * c_stride_n")
        with b.block("else", comment=f"two-dimensional: {REDUCE_ROWS} x {REDUCE_COLS} of C, no division an element"):
            b.line("blocked: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])")
            b.line(f"col_blocks = gl.cdiv(N, {REDUCE_COLS})")
            b.line(f"rows = (gl.program_id(0) // col_blocks) * {REDUCE_ROWS} + gl.arange(0, {REDUCE_ROWS}, "
                   "layout=gl.SliceLayout(1, blocked))")
            b.line(f"cols = (gl.program_id(0) % col_blocks) * {REDUCE_COLS} + gl.arange(0, {REDUCE_COLS}, "
                   "layout=gl.SliceLayout(0, blocked))")
            b.line("mask2 = (rows < M)[:, None] & (cols < N)[None, :]")
            b.line("offs2 = rows.to(gl.int64)[:, None] * N + cols[None, :]")
            b.line("slab = MP.to(gl.int64) * N", "a k-range's slab: MP rows of N")
            b.line("c_offs = rows.to(gl.int64)[:, None] * c_stride_m + cols[None, :].to(gl.int64) * c_stride_n")
            _sum_slabs(b, out, "offs2", "(s * slab + offs2)", None, "c_offs", "2")


def _sum_slabs(b: CodeBuffer, out: DType, first: str, nth: str, what: str | None, c_offs: str, tag: str = "") -> None:
    """The reduce's sum: the partial at `first`, then those at `nth` for k-ranges s = 1 .. SPLIT_K - 1 in order
    (the same bits every run), cast to C's dtype and stored at `c_offs`, masked (`mask{tag}`, into `acc{tag}`: each
    branch of the unranged kernel keeps names of its own)."""
    acc, mask = f"acc{tag}", f"mask{tag}"
    b.line(f"{acc} = gl.load(ws_ptr + {first}, mask={mask}, other=0.0)", what)
    with b.block("for s in gl.static_range(1, SPLIT_K)"):
        b.line(f"{acc} += gl.load(ws_ptr + {nth}, mask={mask}, other=0.0)")
    b.line(f"gl.store(c_ptr + {c_offs}, {acc}.to({out.gluon}), mask={mask})")
