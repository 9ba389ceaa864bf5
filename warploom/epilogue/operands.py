"""What an epilogue operand is, once classified: how it varies over the (M, N) output and how to address it.

Plain data, no torch: the epilogue graph, the printer and the Gluon emitter read it; `classify.py` makes it
from a user tensor. The kind decides what one output tile needs loaded: a DENSE operand a (BM, BN) tile, a
COLUMN one BM values (one per output row), a ROW one BN values (one per output column), a SCALAR one value.

A grouped GEMM's operand may hold one value set per expert (`OperandSpec.per_group`): its first dimension is the
group, and a tile of group g reads slice g, a ROW (G, N) or (G, 1, N) its row g, a SCALAR (G,) or (G, 1, 1) its g-th
value. The kind describes the slice, so the graph, its register shapes and its Gluon math are those of a plain row
or scalar; only the load's base moves (``ptr + grp * group_stride``).
"""

from __future__ import annotations

import enum
import keyword
from dataclasses import dataclass

from warploom.dtypes import DType
from warploom.errors import InputError

# Element types an operand may have. The epilogue computes in fp32, and these three convert to it exactly;
# fp8 operands would need a scale to mean anything, so they are refused rather than guessed at.
OPERAND_DTYPES = (DType.FP32, DType.BF16, DType.FP16)

# The accumulator's parameter name in generated code and in the printed graph; an operand may not shadow it.
ACC = "acc"


class OperandKind(enum.Enum):
    """How a value varies over the (M, N) output, i.e. which of m and n index it.

    The same four kinds describe operands (what to load per tile) and intermediate values of the graph (what
    shape a value has in registers: DENSE [BM, BN], COLUMN [BM, 1], ROW [1, BN], SCALAR a scalar).
    """

    DENSE = "dense"  # varies along m and n: a (M, N) tensor
    COLUMN = "column"  # varies along m only: a per-row vector, a column (M, 1)
    ROW = "row"  # varies along n only: a per-column vector, a row (1, N) or (N,)
    SCALAR = "scalar"  # one value

    @property
    def varies_m(self) -> bool:
        return self in (OperandKind.DENSE, OperandKind.COLUMN)

    @property
    def varies_n(self) -> bool:
        return self in (OperandKind.DENSE, OperandKind.ROW)

    @staticmethod
    def of(varies_m: bool, varies_n: bool) -> OperandKind:
        return {
            (True, True): OperandKind.DENSE, (True, False): OperandKind.COLUMN,
            (False, True): OperandKind.ROW, (False, False): OperandKind.SCALAR,
        }[(varies_m, varies_n)]

    def join(self, other: OperandKind) -> OperandKind:
        """The kind of an elementwise result of values of kinds `self` and `other` (broadcasting)."""
        return OperandKind.of(self.varies_m or other.varies_m, self.varies_n or other.varies_n)


def element_span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The distance in elements between a strided tensor's first and last element: the largest offset a load of it
    adds to its pointer (0 for an empty one). Kernels address epilogue operands and blockwise scales with 32-bit
    offsets below 2**31."""
    if 0 in shape:
        return 0
    return sum((d - 1) * abs(st) for d, st in zip(shape, strides, strict=True))


def check_name(name: str) -> None:
    """An operand name becomes a Python keyword argument and a variable in generated code."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name == ACC:
        raise InputError(
            repr(name), f"an epilogue operand name that is a Python identifier other than {ACC!r}",
            repr(name), f"rename the operand (the accumulator is always the epilogue's first argument, {ACC})")


@dataclass(frozen=True)
class OperandSpec:
    """One classified epilogue operand.

    Attributes:
        name: the keyword the user passed it under; also the epilogue function's parameter name.
        kind: how it varies over the (M, N) output.
        dtype: its element type (fp32, bf16 or fp16); the epilogue converts it to fp32 exactly.
        shape, strides: the tensor's own shape and strides, in elements (0-, 1- or 2-D; a per-group one's 1-, 2- or
            3-D, its first dimension the group).
        per_group: a grouped GEMM's per-expert operand: a tile of group g reads slice ``t[g]`` (its kind is the
            slice's: ROW or SCALAR), at ``group_stride`` elements per group.
    """

    name: str
    kind: OperandKind
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    per_group: bool = False

    def __post_init__(self) -> None:
        check_name(self.name)
        if len(self.shape) != len(self.strides) or len(self.shape) > 2 + self.per_group:
            raise ValueError(f"OperandSpec {self.name}: shape {self.shape} and strides {self.strides} must "
                             f"have the same length, at most {2 + self.per_group}")
        if self.per_group and (not self.shape or self.kind.varies_m):
            raise ValueError(f"OperandSpec {self.name}: a per-group operand is a row or a scalar per group, with "
                             f"the group first; got {self.kind.value} of shape {self.shape}")
        if self.dtype not in OPERAND_DTYPES:
            raise ValueError(f"OperandSpec {self.name}: dtype {self.dtype} not in {OPERAND_DTYPES}")
        if self.kind is OperandKind.DENSE and self.mn_strides()[1] != 1:
            raise ValueError(f"OperandSpec {self.name}: a dense operand needs a unit inner stride, got "
                             f"{self.strides}")

    @property
    def group_stride(self) -> int:
        """Elements between consecutive groups' slices of a per-group operand (0 for any other)."""
        return self.strides[0] if self.per_group else 0

    def slice_shape(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shape and strides one tile reads: a per-group operand's one group's slice, any other's whole."""
        return (self.shape[1:], self.strides[1:]) if self.per_group else (self.shape, self.strides)

    def span(self) -> int:
        """The distance in elements between the operand's first and last element (the largest offset a load
        adds to its pointer)."""
        return element_span(self.shape, self.strides)

    def transposed(self) -> OperandSpec:
        """This operand as the transposed problem reads it (planner rule 18: C^T's (m, n) is C's (n, m)): a row
        becomes a column and back, with the same storage. A 1-D (N,) row becomes an (N, 1) column; a 2-D
        operand's shape and strides trade places (a dense one's then has no unit inner stride: it cannot be
        transposed, `GemmSpec.swap_problems` says so first)."""
        if self.kind is OperandKind.DENSE:
            raise ValueError(f"OperandSpec {self.name}: a dense operand read transposed has no unit inner stride")
        if self.per_group:  # (grouped GEMMs never swap: GemmSpec.swap_problems)
            raise ValueError(f"OperandSpec {self.name}: a per-group operand is never read transposed")
        kind = {OperandKind.ROW: OperandKind.COLUMN, OperandKind.COLUMN: OperandKind.ROW}.get(self.kind, self.kind)
        if len(self.shape) == 1:
            return OperandSpec(self.name, kind, self.dtype, (self.shape[0], 1), (self.strides[0], 0))
        return OperandSpec(self.name, kind, self.dtype, self.shape[::-1], self.strides[::-1])

    def mn_strides(self) -> tuple[int, int]:
        """(row stride, column stride) in elements: output element (m, n) reads ``ptr[m * rs + n * cs]``.

        A stride is 0 along a dimension the operand does not vary along, whatever the tensor's own stride
        there (a size-1 dimension's stride is arbitrary in torch, and an expanded view's is already 0).
        """
        shape, strides = self.slice_shape()  # (a per-group operand's: one group's slice, after its base)
        if not shape:
            return (0, 0)
        # A 1-D operand is a row (N,): torch broadcasting aligns it with the output's last dimension.
        rs = strides[0] if len(shape) == 2 else 0
        cs = strides[-1]
        return (rs if self.kind.varies_m else 0, cs if self.kind.varies_n else 0)
