"""Operands whose rows start on whole 128-byte L2 lines.

A contiguous bf16 (M, K) operand whose K is not a multiple of 64 (fp8: 128) has rows that start part-way into a
line, so each 128-byte row of a TMA box touches two lines, and L2 delivers about half the rate it does for whole
lines (docs/decisions/rule-24-clusters.md; on the H200 warploom then ran at 0.72-0.87 of torch where the same values
in rows padded to whole lines ran at 0.93-1.02, docs/benchmarks.md session 47). `aligned_rows` makes such a copy
once, e.g. of a weight at load time: the same shape and values, each row padded to whole lines. The checks read
where a tensor's rows start (`checks.row_align`, `GemmSpec.a_row_align`), so the planner prices the padded rows
as whole lines.
"""

from __future__ import annotations

from typing import Any

from warploom.errors import AlignmentError, ShapeError
from warploom.spec import LINE_BYTES


def aligned_rows(t: Any) -> Any:
    """A copy of 2-D `t` (same shape, values, dtype, device and contiguous dimension) whose rows start on whole
    128-byte lines: the other stride rounded up to a multiple of 128 bytes. Pass it where `t` went: ``matmul(a,
    aligned_rows(w).t())`` for a weight w (N, K), or ``aligned_rows(w.t())`` alike. `t` itself where its rows
    already start on lines (and, on the GPU, its address is a line's). Call it last: ``.to()``, ``.clone()`` and
    ``Module.to()`` return contiguous copies, whose rows are K long again."""
    import torch

    from warploom.checks import not_a_tensor, row_align

    if (error := not_a_tensor({"t": t})) is not None:
        raise error
    if t.dim() != 2:
        raise ShapeError("t", "a 2-D tensor (an operand's rows)", f"shape {tuple(t.shape)}",
                         "pass the (rows, K) matrix; flatten leading dimensions first")
    # (the contiguous dimension: a unit stride, the longer side's where both have one, as size-1 dimensions do)
    unit = [d for d in (1, 0) if t.stride(d) == 1 or t.size(d) == 1]
    inner = max(unit, key=lambda d: t.size(d)) if unit else None
    if inner is None:
        raise AlignmentError("t", "one unit stride (a row-major or column-major matrix)",
                             f"strides {tuple(t.stride())}", "pass t.contiguous() (or t.t().contiguous().t())")
    outer = 1 - inner
    size = t.element_size()
    if row_align(t, outer) == LINE_BYTES:
        return t
    pitch = -(-t.size(inner) * size // LINE_BYTES) * LINE_BYTES // size  # elements a padded row holds
    store = torch.empty(t.size(outer), pitch, dtype=t.dtype, device=t.device)  # (rows as stored, padded)
    out = store[:, :t.size(inner)] if inner == 1 else store[:, :t.size(inner)].t()
    out.copy_(t)
    return out
