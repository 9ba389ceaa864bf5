"""The schedule IR's vocabulary that every target's ops share: the global tensors, the problem's axes, k-loop guards,
ring slots, and `Op`, the open base of every op.

A target's own ops (`ir/ops_sm100.py`, `ir/ops_gfx1250.py`) build on this module alone, and `ir/nodes.py` (the
ops every target may hold, loops, partitions, the module) gathers them all, so `ir.TcMma` names the one class
wherever the IR is read. Which ops a target's complete schedules may hold is its declaration's op set
(`warploom.targets`), which the verifier checks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Op:
    """An op of a partition's body: a frozen dataclass with one meaning, given in its docstring, which the Gluon
    backends and the CPU simulator both implement. Open: a target declares its own ops beside it (`Stmt` is any
    op or a `Loop`)."""

    __slots__ = ()


class Tensor(enum.Enum):
    """A global-memory tensor of the kernel."""

    A = "A"
    B = "B"
    C = "C"
    OPERAND = "operand"  # a fused epilogue's dense operand (Buffer.operand names it)
    SCALE_A = "scale_a"  # blockwise scales of A: one fp32 per row and k-block
    SCALE_B = "scale_b"  # blockwise scales of B: per 128 columns (or per column) and k-block
    WORKSPACE = "workspace"  # split-K: fp32 partial sums, one (M rounded up to BM) x N slab per k-range
    ACC = "acc"  # sm_100a: fp32 accumulator tiles in tensor memory (a Ring of them, not shared memory)
    # sm_100a fp32 blockwise: one k-block's unscaled fp32 product in tensor memory, which the promoting partition
    # loads, scales and adds into its register accumulator (passes/blackwell_promote.py)
    PARTIAL = "partial"


class Axis(enum.Enum):
    """A problem dimension; a tile coordinate along it is ``index * block`` (BM, BN or BK)."""

    M = "m"
    N = "n"
    K = "k"


class Guard(enum.Enum):
    """A condition on the innermost k-loop's iteration under which an op runs."""

    ALWAYS = "always"
    NOT_FIRST_K = "k > 0"
    FIRST_K = "k == 0"


@dataclass(frozen=True)
class Slot:
    """Stage index ``(cursor + offset) % depth``."""

    cursor: str
    offset: int = 0
