"""Classify a user's epilogue operand against the (M, N) output by its shape AND its strides.

An operand must broadcast to (M, N) the way torch broadcasts it in ``fn(acc, **operands)``: a 0-D or 1-D
tensor aligns with the output's trailing dimensions, so a 1-D operand is a row (N,). Within that, the
strides decide what varies: an ``expand``-ed view has stride 0 along the expanded dimension and is no more
than the vector it came from, while a genuine dense tensor of the same shape has non-zero strides.

The rules, per output dimension (m, n): the operand varies along it when its size there equals the output's,
that size is more than 1, and its stride there is not 0. Then:

    varies along m and n   DENSE    (M, N) with strides (s, 1), s >= N (row-major; anything else is refused
                                    with the fix ``.contiguous()``: the tile load wants contiguous rows)
    varies along m only    COLUMN   (M, 1); or (M, N) with strides (s, 0), e.g. ``v[:, None].expand(M, N)``
    varies along n only    ROW      (N,), (1, N); or (M, N) with strides (0, s), e.g. ``bias.expand(M, N)``
    varies along neither   SCALAR   (), (1,), (1, 1); or (M, N) with strides (0, 0)

Degenerate outputs: when M == 1 a (1, N) operand is both a dense tile and a row vector; it is a ROW (a size-1
dimension does not vary). That is the cheaper kind to load (one vector per tile instead of a 2-D tile, no
unit-stride rule) and it is exact: with one output row, "the same value for every row" and "its own value per
row" are the same statement. Likewise (M, 1) is a COLUMN when N == 1, and (1, 1) is a SCALAR.

Grouped GEMMs (`groups` = G, an M-grouped call's experts; (M, N) is then the (total_M, N) result): an operand may
also hold one value set per expert (`OperandSpec.per_group`), read at the tile's group g:

    (G, 1, N) or (G, N)     ROW per group     row g added along N to the rows of expert g (a per-expert bias)
    (G, 1, 1) or (G,)       SCALAR per group  value g (a per-expert output scale)

The rule for shapes that could mean two things: a shape that broadcasts to (M, N) keeps that meaning, so (G, N) is
per-expert only where G is neither 1 nor M, and (G,) only where G is neither 1 nor N; the 3-D forms never broadcast
(an epilogue sees a 2-D output) and are per-expert always, so they are the way to say it when G == M or G == N. With
G == 1 both meanings are one. The grouped calls refuse the two ambiguous shapes before they get here
(`grouped.offsets_operands`, `grouped.masked_operands`): a per-expert bias read as a dense operand at the one token
count that equals the expert count was a wrong result with no error.

Every function here reads only shapes, strides, dtypes and devices, so fake and meta tensors work. Sizes are
taken as Python ints (symbolic sizes are not supported).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from warploom.checks import no_neg_bit
from warploom.dtypes import DType
from warploom.epilogue.operands import OPERAND_DTYPES, OperandKind, OperandSpec, check_name
from warploom.errors import AlignmentError, ArgumentTypeError, DeviceError, DTypeError, InputError, ShapeError


def classify(name: str, t: Any, out_shape: tuple[int, int], device: Any = None, groups: int = 0) -> OperandSpec:
    """Classify operand tensor `t` (passed as ``name=t``) for an output of shape `out_shape` (M, N).

    `device`, when given, is the device every operand must be on (the GEMM's inputs' device). `groups`, an M-grouped
    call's expert count (0: not grouped), admits per-expert operands (module docstring).
    Raises DTypeError, DeviceError, ShapeError or AlignmentError naming `name`.
    """
    check_name(name)
    m, n = (int(s) for s in out_shape)
    if not isinstance(t, torch.Tensor):  # (a Python number: the function can hold it as a constant instead)
        raise InputError(name, "an epilogue operand that is a torch.Tensor", f"{type(t).__name__} {t!r}"[:80],
                         f"pass {name}=torch.tensor(...) on the inputs' device, or write the constant into the "
                         "epilogue function")
    if t.layout is not torch.strided:  # (a sparse tensor has no storage to read: torch's RuntimeError further on)
        raise ArgumentTypeError(name, "a dense (strided) epilogue operand", f"a tensor of layout {t.layout}",
                                f"pass {name}.to_dense()")
    dtype = DType.from_torch(t.dtype)
    if dtype not in OPERAND_DTYPES:
        raise DTypeError(name, "an epilogue operand of dtype torch.float32, torch.bfloat16 or torch.float16",
                         str(t.dtype), f"pass {name}.float()")
    if device is not None and str(t.device) != str(device):
        raise DeviceError(name, f"an epilogue operand on {device}, like the matmul's inputs",
                          f"a tensor on {t.device}", f"move it with {name}.to({str(device)!r})")
    no_neg_bit({name: t})
    shape = tuple(int(s) for s in t.shape)
    strides = tuple(int(s) for s in t.stride())
    got = f"shape {shape} with strides {strides}"
    if groups and _read_per_group(shape, m, n, groups):
        return _per_group(name, dtype, shape, strides, m, n, groups)
    if len(shape) > 2:
        raise ShapeError(name, _expected(m, n, groups), got, _fix(name, shape, m, n, groups))
    # Right-align with (M, N), as torch broadcasting does: () -> (1, 1), (L,) -> (1, L).
    rows, cols = ((1, 1) + shape)[-2:]
    rs, cs = ((0, 0) + strides)[-2:]
    if rows not in (1, m) or cols not in (1, n):
        raise ShapeError(name, _expected(m, n, groups), got, _fix(name, shape, m, n, groups))
    varies_m = rows == m and m > 1 and rs != 0
    varies_n = cols == n and n > 1 and cs != 0
    kind = OperandKind.of(varies_m, varies_n)
    # A dense tile is loaded row by row, contiguous along n; an overlapping row stride (0 < s < N) would make
    # rows alias each other, which no GEMM output layout produces, so it is refused with the column-major case.
    if kind is OperandKind.DENSE and (cs != 1 or rs < n):
        raise AlignmentError(
            name, f"a dense ({m}, {n}) operand in row-major order: stride 1 along N and a row stride >= {n}",
            got, f"pass {name}.contiguous()")
    return OperandSpec(name, kind, dtype, shape, strides)


def classify_all(operands: Mapping[str, Any], out_shape: tuple[int, int], device: Any = None, groups: int = 0
                 ) -> tuple[OperandSpec, ...]:
    """`classify` each ``name=tensor`` of `operands`, keeping their order."""
    return tuple(classify(k, v, out_shape, device, groups) for k, v in operands.items())


def _read_per_group(shape: tuple[int, ...], m: int, n: int, groups: int) -> bool:
    """Whether a grouped call reads `shape` per expert (the module docstring's rule): a 3-D one always; (G, N) and
    (G,) where they do not already broadcast to (M, N)."""
    if len(shape) == 3:
        return True
    if len(shape) == 2:
        return shape == (groups, n) and groups not in (1, m)
    return shape == (groups,) and groups not in (1, n)


def _per_group(name: str, dtype: DType, shape: tuple[int, ...], strides: tuple[int, ...], m: int, n: int,
               groups: int) -> OperandSpec:
    """A per-expert operand: (G, N) or (G, 1, N) one row per group, (G,) or (G, 1, 1) one value per group."""
    ok = shape in ((groups, n), (groups,), (groups, 1, n), (groups, 1, 1))
    if not ok:
        raise ShapeError(name, f"a per-expert epilogue operand of this {groups}-expert call: ({groups}, 1, {n}) or "
                         f"({groups}, {n}) one row per expert, ({groups}, 1, 1) or ({groups},) one value per expert",
                         f"shape {shape} with strides {strides}",
                         f"give {name} one slice per expert of b ({groups}), e.g. {name}.reshape({groups}, 1, {n})"
                         if len(shape) == 3 and shape[0] != groups else
                         f"reshape {name} to ({groups}, 1, {n}) or ({groups}, 1, 1)")
    row = len(shape) > 1 and shape[-1] == n and n > 1 and strides[-1] != 0
    return OperandSpec(name, OperandKind.ROW if row else OperandKind.SCALAR, dtype, shape, strides, per_group=True)


def _expected(m: int, n: int, groups: int = 0) -> str:
    per_group = (f"; or per expert (of {groups}): ({groups}, 1, {n}) or ({groups}, {n}) one row each, ({groups}, 1, 1) "
                 f"or ({groups},) one value each") if groups else ""
    return (f"an epilogue operand that broadcasts to the ({m}, {n}) output: ({m}, {n}) dense, ({m}, 1) per-row, "
            f"({n},) or (1, {n}) per-column, or a single element{per_group}")


def _fix(name: str, shape: tuple[int, ...], m: int, n: int, groups: int = 0) -> str:
    """The likely mistake behind a shape that does not broadcast, and its fix (and, for a shape that would be one
    row or value per expert, where such operands are taken)."""
    fix = _shape_fix(name, shape, m, n)
    if not groups and (len(shape) == 3 and shape[1:] in ((1, n), (1, 1)) or len(shape) == 2 and shape[1] == n):
        fix += (f"; if {name} holds one row per expert, only warploom.grouped_mm's M-grouped call (a 2-D a with offs "
                f"over a 3-D b) reads it so: here pass {name}[expert_of_row] ({m}, {n})")
    return fix


def _shape_fix(name: str, shape: tuple[int, ...], m: int, n: int) -> str:
    if len(shape) > 2:
        return (f"an epilogue sees one (M, N) output; reshape {name} to 2-D (e.g. {name}.reshape({m}, {n})) or "
                "squeeze its size-1 dimensions")
    if shape == (m,) and m != n:
        return f"{name} has one value per output row: pass {name}[:, None] (shape ({m}, 1))"
    if shape == (n, m) and m != n:
        return f"{name} looks transposed: pass {name}.t().contiguous()"
    if shape == (n, 1) and m != n:
        return f"{name} has one value per output column: pass {name}.reshape(1, {n})"
    if shape == (1, m) and m != n:
        return f"{name} has one value per output row: pass {name}.reshape({m}, 1)"
    return f"slice or reshape {name} to one of those shapes, or expand() a vector to ({m}, {n})"
