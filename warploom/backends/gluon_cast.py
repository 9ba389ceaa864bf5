"""Planner rule 29's second pass: the cast kernel that quantizes the first pass's fp32 workspace (`ir.AmaxPass`).

The first pass (the GEMM) stored y (M, N) fp32 to the workspace and added each tile's row amax to the (M,) amax
workspace (int32 bits of non-negative floats, `ir.AtomicAmax`). After it, one program a row computes exactly what
`warploom.quantization.cast_rows` (and so ``quantize(y, recipe="rowwise")``) does:

    s = amax / fp8_max            (IEEE division: gl.div_rn), 1 where that is 0
    q = saturating fp8 cast of y / s   (div_rn, then NaN-propagating clamp to +-fp8_max, then cvt.rn)

and stores s into the (M, 1) scale tensor and q into the (M, N) fp8 output by plain masked stores (no TMA: q's rows
need not be 16-byte multiples). A row is read in chunks of `AmaxPass.chunk` columns (4 warps, 16-byte loads of fp32
at 1024), 64-bit offsets (the workspace may pass 2^31 elements).

A grouped first pass's (M-grouped or masked, `ir.Tiling.grouping`) cast kernel also takes the group bounds and G
(`cast_params`): a program whose row is no group's (past offs[-1], at or past a masked count) stores nothing, so
those rows of q and s keep what they held, as the grouped kernel's own outputs do. Whether a row is owned comes from
the bounds on the device by the group scan's own rule (`group_scan.row_owner_helper`), so nothing is read on the
host and a CUDA graph replays with other bounds.
"""

from __future__ import annotations

from typing import Any

from warploom.backends.codebuf import CodeBuffer
from warploom.backends.grid_dependency import dependent_start
from warploom.backends.group_scan import row_owner_helper
from warploom.dtypes import DType
from warploom.epilogue.gluon import cast_to
from warploom.epilogue.graph import FP8_MAX
from warploom.errors import AlignmentError, DeviceError, DTypeError, ShapeError
from warploom.ir import nodes as ir
from warploom.spec import Grouping

# The cast kernel's parameters: the workspace and its row stride (padded to 16-byte rows), the amax workspace, q and
# its row stride, s and its row stride, M, N.
CAST_PARAMS = ("ws_ptr", "ws_stride_m", "amax_ptr", "q_ptr", "q_stride_m", "s_ptr", "s_stride_m", "M", "N")
CAST_GROUP_PARAMS = ("group_ptr", "E")  # a grouped first pass's: the bounds (int32) and G
CAST_WARPS = 4


def cast_params(grouping: Grouping = Grouping.NONE) -> tuple[str, ...]:
    """The cast kernel's parameters: `CAST_PARAMS`, and a grouped first pass's bounds after them."""
    return CAST_PARAMS + (CAST_GROUP_PARAMS if grouping is not Grouping.NONE else ())


def emit_cast(b: CodeBuffer, name: str, p: ir.AmaxPass, grouping: Grouping = Grouping.NONE,
              dependent: bool = False) -> None:
    """The ``@gluon.jit`` cast kernel `name` of a first pass whose quantized dtype and chunk `p` gives (module
    docstring); launched with M programs. A grouped one's (`grouping` M-grouped or masked) casts the rows of some
    group only."""
    if grouping is Grouping.K_OFFSETS:
        raise ValueError("emit_cast: a K-grouped GEMM has no fused quantization (rule 26 on rule 22's M-grouped and "
                         "masked layouts)")
    grouped = grouping is not Grouping.NONE
    per_thread = p.chunk // (32 * CAST_WARPS)
    if grouped:
        b.line()
        b.line()
        b.lines(row_owner_helper(grouping))
    b.line()
    b.line()
    b.line("@gluon.jit")
    with b.block(f"def {name}({', '.join(cast_params(grouping))})",
                 comment=f"rule 29's cast pass: q = {p.fp8.value}(y / s), s = amax / fp8_max, a program a row"):
        if dependent:  # (ir.Module.dependent_launch: it reads the first pass's workspace and amax)
            dependent_start(b)
        b.line(f"layout: gl.constexpr = gl.BlockedLayout([{per_thread}], [32], [{CAST_WARPS}], [0])")
        b.line("row = gl.program_id(0).to(gl.int64)", "64-bit: the workspace and q may pass 2^31 elements")
        b.line(f"cols = gl.arange(0, {p.chunk}, layout=layout)")
        width, s_mask = "N", "cols == 0"
        if grouped:
            b.line("owned = row_owned(row, group_ptr, E, M)", "rows of no group: q and s left as they were")
            b.line("width = N * owned.to(gl.int32)", "the columns this program casts: N, or none")
            width, s_mask = "width", "(cols == 0) & owned"
        b.line("amax = gl.load(amax_ptr + row + cols * 0).to(gl.float32, bitcast=True)",
               "the row's amax (its int32 bits), in every lane")
        b.line(f"s = gl.div_rn(amax, gl.full([{p.chunk}], {FP8_MAX[p.fp8]!r}, gl.float32, layout))",
               "amax / fp8_max, IEEE-rounded")
        b.line("s = gl.where(s == 0.0, 1.0, s)", "a zero row's scale is 1 (warploom.quantization)")
        b.line(f"gl.store(s_ptr + row * s_stride_m + cols, s, mask={s_mask})")
        with b.block(f"for c0 in range(0, {width}, {p.chunk})"):
            b.line("c = c0 + cols")
            b.line("mask = c < N")
            b.line("y = gl.load(ws_ptr + row * ws_stride_m + c, mask=mask, other=0.0)")
            b.line(f"q = {cast_to('gl.div_rn(y, s)', p.fp8)}", "saturating, NaN kept")
            b.line("gl.store(q_ptr + row * q_stride_m + c, q, mask=mask)")


def check_outputs(fp8: DType, m: int, n: int, q: Any, s: Any, names: tuple[str, str], device: Any) -> None:
    """Refuse, before any launch, outputs the cast kernel cannot write as they are (`names`: the arguments q and s
    came as): it stores q (M, N) in `fp8` at q's row stride with its columns at unit stride, and s (M, 1) fp32 at
    s's row stride (`CAST_PARAMS` carry no other stride), both on `device` (A's: where both passes run and the amax
    workspace is zeroed)."""
    import torch

    for name, t, shape, dt in ((names[0], q, (m, n), fp8.torch), (names[1], s, (m, 1), torch.float32)):
        if t.device != device:
            raise DeviceError(name, f"a tensor on {device}, where a is", f"a tensor on {t.device}",
                              f"allocate it on {device}")
        if t.dtype != dt:
            raise DTypeError(name, str(dt), str(t.dtype), f"allocate it as torch.empty({shape}, dtype={dt})")
        if tuple(t.shape) != shape:
            raise ShapeError(name, f"shape {shape}", f"{tuple(t.shape)}",
                             f"allocate it as torch.empty({shape}, dtype={dt})")
    unit_columns(q, names[0])


def unit_columns(q: Any, name: str) -> None:
    """Refuse a q whose columns are not at unit stride: the cast kernel writes q[row, c] at row * stride(0) + c."""
    if q.dim() == 2 and q.shape[0] > 0 and q.shape[1] > 1 and q.stride(1) != 1:
        raise AlignmentError(name, "q's columns at unit stride (the cast kernel of rule 29 stores each row's columns "
                             "contiguously, at q's row stride)", f"strides {tuple(q.stride())}",
                             "pass a row-major q, torch.empty(M, N, dtype=...), and copy it where it is to go")
