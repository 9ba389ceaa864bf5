"""The meaning of an epilogue graph: a pure torch interpreter in fp32.

This is the single definition of every op (`apply`): the CPU simulator runs it on tiles, the tests compare
the user's function, the captured graph and the Gluon emitter's code against it, and constant folding in
`capture` calls it. Casts round exactly as the H100 does: round to nearest even, and for fp8 saturation (E4M3 to
+-448, E5M2 to +-57344: cvt.rn.satfinite), written out as a clamp so that the meaning does not rest on how a given
torch build converts overflowing values (torch 2.13 on the CPU saturates too, eager CUDA torch gives NaN; NaN stays
NaN).

Ops are torch's CPU kernels, corrected where those differ from the GPU and from torch's CUDA kernels: sqrt is
correctly rounded (torch's vectorized CPU sqrt is sometimes an ulp off), and gelu(+inf) is +inf (NaN on the CPU).

Operands are read the way the GPU reads them, through their `OperandSpec.mn_strides` (element (m, n) at
``m * rs + n * cs``), so a wrong classification shows up here as a wrong answer, not only on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue.operands import OperandSpec
from warploom.errors import InputError, ShapeError


def _sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """IEEE sqrt, correctly rounded like the GPU's sqrt.rn.f32. torch's vectorized CPU sqrt is off by an ulp for
    some inputs (measured: sqrt(2.1905410) gives 1.4800476 instead of 1.4800477); in float64 and rounded once it is
    exact, since 53 >= 2 * 24 + 2 bits make the double rounding innocuous."""
    return torch.sqrt(x.double()).float() if x.dtype == torch.float32 else torch.sqrt(x)


def _pow(x: torch.Tensor, e: float) -> torch.Tensor:
    # torch's pow(x, 0.5) is its sqrt kernel, so it inherits that ulp; the GPU's is sqrt.rn.
    return _sqrt_rn(x) if e == 0.5 else torch.pow(x, e)


def _gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """torch's gelu, with the edges of its CUDA kernel (x * 0.5 * (1 + erf(x / sqrt 2)), which the emitted code
    computes too). torch's CPU kernel gives NaN at +inf where CUDA gives +inf, and +0.0 where CUDA's product is
    -0.0 (at -0.0, and below about -6 where 1 + erf is 0): a later x ** -0.5 or 1 / x then gives +inf against the
    GPU's -inf. Non-zero values stay the CPU kernel's, bit for bit."""
    y = torch.where(x == torch.inf, x, F.gelu(x))
    return torch.where(y == 0, torch.copysign(y, x), y)


_UNARY: dict[eg.UnaryOp, Callable[[torch.Tensor], torch.Tensor]] = {
    eg.UnaryOp.NEG: torch.neg,
    eg.UnaryOp.ABS: torch.abs,
    eg.UnaryOp.RELU: torch.relu,
    eg.UnaryOp.GELU_ERF: _gelu_erf,
    eg.UnaryOp.GELU_TANH: lambda x: F.gelu(x, approximate="tanh"),
    eg.UnaryOp.SILU: F.silu,
    eg.UnaryOp.SIGMOID: torch.sigmoid,
    eg.UnaryOp.TANH: torch.tanh,
    eg.UnaryOp.EXP: torch.exp,
    eg.UnaryOp.LOG: torch.log,
    eg.UnaryOp.SQRT: _sqrt_rn,
    eg.UnaryOp.RSQRT: torch.rsqrt,
}

_BINARY: dict[eg.BinaryOp, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    eg.BinaryOp.ADD: torch.add,
    eg.BinaryOp.SUB: torch.sub,
    eg.BinaryOp.MUL: torch.mul,
    eg.BinaryOp.DIV: torch.div,
    eg.BinaryOp.MAXIMUM: torch.maximum,
    eg.BinaryOp.MINIMUM: torch.minimum,
}

_COMPARE: dict[eg.CompareOp, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    eg.CompareOp.LT: torch.lt, eg.CompareOp.LE: torch.le, eg.CompareOp.GT: torch.gt,
    eg.CompareOp.GE: torch.ge, eg.CompareOp.EQ: torch.eq, eg.CompareOp.NE: torch.ne,
}


def round_to(x: torch.Tensor, dtype: DType) -> torch.Tensor:
    """`x` (fp32) converted to `dtype` as the GPU converts it: RNE, fp8 saturating (E4M3 to +-448, E5M2 to +-57344;
    NaN stays NaN)."""
    if dtype is DType.FP32:
        return x
    if dtype in eg.FP8_MAX:
        x = x.clamp(-eg.FP8_MAX[dtype], eg.FP8_MAX[dtype])
    return x.to(dtype.torch)


def const(v: float | bool) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.bool if isinstance(v, bool) else torch.float32)


def apply(nd: eg.Node, xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The value of computed node `nd` (not a leaf) given its inputs' values `xs` (fp32 or bool tensors)."""
    match nd:
        case eg.Unary():
            return _UNARY[nd.op](xs[0])
        case eg.Binary():
            return _BINARY[nd.op](xs[0], xs[1])
        case eg.Compare():
            return _COMPARE[nd.op](xs[0], xs[1])
        case eg.Where():
            return torch.where(xs[0], xs[1], xs[2])
        case eg.Cast():
            return round_to(xs[0], nd.dtype).float()
        case eg.Clamp():
            return torch.clamp(xs[0], min=nd.lo, max=nd.hi)
        case eg.Pow():
            return _pow(xs[0], nd.exponent)
        case eg.GroupAmax() if xs[0].dim() == 0:
            return xs[0].abs()  # a constant is its own group's amax (constant folding)
        case eg.GroupAmax():
            raise TypeError("group_amax needs the tile's columns: evaluate it with evaluate_tile")
        case _:
            raise TypeError(f"{nd} is a leaf, not an op")


def evaluate(g: eg.EpilogueGraph, acc: torch.Tensor, operands: Mapping[str, torch.Tensor],
             out_dtype: DType | None = None) -> tuple[torch.Tensor, ...]:
    """Every output of `g` for the (M, N) accumulator `acc` and the operand tensors (by name), each as an
    (M, N) tensor of its stored dtype (an output without one gets `out_dtype`, or stays fp32 when that is None).
    """
    m, n = acc.shape
    per_group = [s.name for s in g.operands if s.per_group]
    if per_group:  # (whose rows read which slice is the grouping's: evaluate_tile each group's rows)
        raise ValueError(f"evaluate: per-group operands ({', '.join(per_group)}) need each group's rows apart: use "
                         "evaluate_tile(..., group=g) on them")
    b = g.gate_up()
    if b is not None:  # (M, N / 2): one interleave block's pair at a time
        if n % (2 * b):
            raise ShapeError("acc", f"N a multiple of 2 * block = {2 * b} (whole gate/up pairs)", f"N={n}",
                             "interleave the weights with warploom.interleave_gate_up(w1, w3, block=...)")
        pairs = [evaluate_tile(g, acc[:, 2 * b * k:2 * b * k + b], operands, range(m), range(b * k, b * (k + 1)),
                               out_shape=(m, n // 2), out_dtype=out_dtype,
                               up_tile=acc[:, 2 * b * k + b:2 * b * (k + 1)])
                 for k in range(n // (2 * b))]
        if not pairs:  # N = 0: (M, 0) outputs
            return evaluate_tile(g, acc, operands, range(m), range(0), out_shape=(m, 0), out_dtype=out_dtype,
                                 up_tile=acc)
        return tuple(torch.cat(blocks, dim=1) for blocks in zip(*pairs, strict=True))
    outs = evaluate_tile(g, acc, operands, range(m), range(n), out_shape=(m, n), out_dtype=out_dtype)
    # A groups output (a 1x128 or rowwise scale) is constant along each group: one column per group, (M, groups).
    if g.group_amax() is None:
        return outs
    amax = g.amax()
    return tuple(group_columns(v, amax, n) if o.layout is eg.OutputLayout.GROUPS else v
                 for o, v in zip(g.outputs, outs, strict=True))


def group_columns(v: torch.Tensor, amax: eg.GroupAmax, n: int) -> torch.Tensor:
    """(M, groups): each group's first column; with N = 0 a rowwise group's zero-group scale, 1 (as
    `warploom.quantize` gives it: one scale a row whatever N)."""
    if amax.width is None:
        return v[:, :1].contiguous() if n else torch.ones(v.shape[0], 1)
    return v[:, ::amax.width].contiguous()


def group_amax(x: torch.Tensor, cols: tuple[int, int], n: int, width: int | None = eg.GROUP) -> torch.Tensor:
    """`GroupAmax` of the (R, C) values `x` of output columns [c0, c1): per row, the NaN-propagating max of |x| over
    each group's columns < `n` (groups of `width` columns; None: the row), broadcast back over the group's columns.
    The tile must hold every valid column of each group it touches (else a `ValueError`: a block's share is folded
    in by the caller)."""
    c0, c1 = cols
    w = width or max(n, c1)
    if c0 % w or (c1 % w and c1 < n):
        what = "the whole row" if width is None else f"whole {w}-column groups (or a ragged last one)"
        raise ValueError(f"group_amax over columns [{c0}, {c1}) of N={n}: expected {what}; fold the blocks' row "
                         "amaxes with block_amax instead")
    out = torch.empty_like(x)
    for g0 in range(c0, c1, w):
        out[:, g0 - c0:g0 - c0 + w] = block_amax(x[:, g0 - c0:g0 - c0 + w], g0, n)
    return out


def block_amax(x: torch.Tensor, col0: int, n: int) -> torch.Tensor:
    """(R, 1): per row, the NaN-propagating max of |x| over the (R, C) block's columns below `n` (its first is
    output column `col0`); 0 where none is (columns past N never count, as the kernel masks them)."""
    valid = max(0, min(x.shape[1], n - col0))
    if valid == 0:
        return torch.zeros(x.shape[0], 1)
    return x[:, :valid].abs().amax(dim=1, keepdim=True)  # (amax propagates NaN)


def evaluate_tile(g: eg.EpilogueGraph, acc_tile: torch.Tensor, operands: Mapping[str, torch.Tensor],
                  rows: range | slice, cols: range | slice, *, out_shape: tuple[int, int],
                  out_dtype: DType | None = None, amax: torch.Tensor | None = None, group: int = 0,
                  up_tile: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """`evaluate` on one tile: output rows `rows` and columns `cols` (step 1) of an `out_shape` (M, N) output.

    `acc_tile` is (len(rows), len(cols)). Each operand is read by its kind: a DENSE one as the matching tile,
    a COLUMN one as one value per row, a ROW one as one value per column, a SCALAR one as its single value; a
    per-group one (a grouped GEMM's per-expert operand) from its slice `group`, the tile's group.
    Rows or columns past the output's edge (a tile overhanging M or N) read as 0.0, as the GPU's masked loads
    do; the store drops those elements, so they never reach the result.

    A `GroupAmax` is taken over the tile's own groups (which it must hold whole, `group_amax`), or is `amax`
    ((R, 1): the group's row amax, folded over its blocks by the caller) when given. Every output comes back
    (R, C); a groups output's value is constant along each group.
    """
    m, n = out_shape
    r0, r1 = _bounds(rows, m)
    c0, c1 = _bounds(cols, n)
    if tuple(acc_tile.shape) != (r1 - r0, c1 - c0):
        raise ShapeError("acc_tile", f"shape ({r1 - r0}, {c1 - c0}) for rows [{r0}, {r1}) and cols [{c0}, {c1})",
                         f"shape {tuple(acc_tile.shape)}", "pass the accumulator tile those ranges cover")
    missing = [s.name for s in g.operands if s.name not in operands]
    if missing:
        raise InputError(missing[0], "a tensor for every operand of the epilogue graph",
                         f"operands {sorted(operands)}", f"pass {missing[0]}=...")
    if g.gate_up() is not None:
        if up_tile is None or up_tile.shape != acc_tile.shape:
            raise ShapeError("up_tile", f"the up columns' accumulator tile, shape {tuple(acc_tile.shape)}",
                             "None" if up_tile is None else f"shape {tuple(up_tile.shape)}",
                             "pass the accumulator at the up columns paired with acc_tile's gate columns")
        vals = _gate_up_values(g, acc_tile, up_tile, operands, (m, n), (r0, r1), (c0, c1), group)
        return _outputs(g, vals, (r1 - r0, c1 - c0), out_dtype)
    return _outputs(g, _values(g, acc_tile, operands, (m, n), (r0, r1), (c0, c1), amax, group=group),
                    (r1 - r0, c1 - c0), out_dtype)


def values_before_amax(g: eg.EpilogueGraph, acc_tile: torch.Tensor, operands: Mapping[str, torch.Tensor],
                       rows: range, cols: range, *, out_shape: tuple[int, int], group: int = 0) -> torch.Tensor:
    """The (R, C) value the graph's `GroupAmax` reads on one block (which need not hold a whole group): what a
    block folds into its group's amax; per-group operands from slice `group` (a grouped tile's)."""
    ref = g.group_amax()
    if ref is None:
        raise ValueError("values_before_amax: the graph has no group amax")
    r0, r1 = _bounds(rows, out_shape[0])
    c0, c1 = _bounds(cols, out_shape[1])
    vals = _values(g, acc_tile, operands, out_shape, (r0, r1), (c0, c1), None, stop=ref, group=group)
    return vals[eg.inputs(g.nodes[ref])[0]].expand(r1 - r0, c1 - c0)


def _values(g: eg.EpilogueGraph, acc_tile: torch.Tensor, operands: Mapping[str, torch.Tensor],
            out_shape: tuple[int, int], rows: tuple[int, int], cols: tuple[int, int], amax: torch.Tensor | None,
            stop: int | None = None, group: int = 0) -> list[torch.Tensor]:
    """Every node's value on the tile (up to node `stop`, excluded, when given) of group `group`."""
    vals: list[torch.Tensor] = []
    for i, nd in enumerate(g.nodes):
        if i == stop:
            break
        vals.append(_value(g, nd, vals, acc_tile, operands, out_shape, rows, cols, amax, group))
    return vals


def _value(g: eg.EpilogueGraph, nd: eg.Node, vals: list[torch.Tensor], acc_tile: torch.Tensor,
           operands: Mapping[str, torch.Tensor], out_shape: tuple[int, int], rows: tuple[int, int],
           cols: tuple[int, int], amax: torch.Tensor | None, group: int) -> torch.Tensor:
    """Node `nd`'s value on the tile, its inputs' being `vals`."""
    (m, n), (r0, r1), (c0, c1) = out_shape, rows, cols
    match nd:
        case eg.Acc():
            return acc_tile.float()
        case eg.Operand():
            return _operand_tile(g.operand(nd.name), operands[nd.name], (m, n), (r0, r1), (c0, c1), group)
        case eg.Const():
            return const(nd.value)
        case eg.GroupAmax() if amax is not None:
            return amax.float().reshape(r1 - r0, 1)
        case eg.GroupAmax():
            return group_amax(vals[nd.x].expand(r1 - r0, c1 - c0), (c0, c1), n, nd.width)
        case _:
            return apply(nd, [vals[r] for r in eg.inputs(nd)])


def _gate_up_values(g: eg.EpilogueGraph, gate_tile: torch.Tensor, up_tile: torch.Tensor,
                    operands: Mapping[str, torch.Tensor], out_shape: tuple[int, int], rows: tuple[int, int],
                    cols: tuple[int, int], group: int) -> list[torch.Tensor]:
    """A gate/up graph's values on result columns `cols` (one interleave block's, or part of one) of the (M, I')
    result: the nodes over N on the gate tile at the gate columns and on the up tile at the up columns, each
    `GateUpHalf` picking its side, the half-space nodes on those."""
    (m, n), (c0, c1) = out_shape, cols
    b = g.gate_up()
    assert b is not None
    if c1 > c0 and c0 // b != (c1 - 1) // b:
        raise ValueError(f"gate/up tile columns [{c0}, {c1}): expected columns of one {b}-column interleave block")
    halved = g.halved()
    # per side: its accumulator tile, its columns of the (M, N) product, and its values of the nodes over N
    sides: dict[eg.Half, tuple[torch.Tensor, tuple[int, int], list[torch.Tensor]]] = {}
    for h, tile in ((eg.Half.GATE, gate_tile), (eg.Half.UP, up_tile)):
        f0 = eg.GateUpHalf(0, h, b).source(c0)
        sides[h] = (tile, (f0, f0 + c1 - c0), [])
    side_vals: dict[eg.Half, list[torch.Tensor]] = {h: v for h, (_, _, v) in sides.items()}
    vals: list[torch.Tensor] = []
    for i, nd in enumerate(g.nodes):
        if isinstance(nd, eg.GateUpHalf):
            v = side_vals[nd.half][nd.x]
        elif halved[i]:
            v = apply(nd, [vals[r] for r in eg.inputs(nd)])
        else:  # over N (or constant along it): on each side's columns of the (M, N = 2 I') product
            for tile, full, out in sides.values():
                out.append(_value(g, nd, out, tile, operands, (m, 2 * n), rows, full, None, group))
            v = side_vals[eg.Half.GATE][i]
        if halved[i]:
            for out in side_vals.values():
                out.append(v)  # (never read on a side: no node over N reads a half)
        vals.append(v)
    return vals


def _outputs(g: eg.EpilogueGraph, vals: list[torch.Tensor], shape: tuple[int, int],
             out_dtype: DType | None) -> tuple[torch.Tensor, ...]:
    return tuple(round_to(vals[o.value].expand(shape), o.resolve(out_dtype or DType.FP32)).contiguous()
                 for o in g.outputs)


def _bounds(r: range | slice, size: int) -> tuple[int, int]:
    step = r.step if r.step is not None else 1
    start = r.start if r.start is not None else 0
    stop = r.stop if r.stop is not None else size
    if step != 1 or start < 0 or stop < start:
        raise ValueError(f"tile range {r}: expected step 1 and 0 <= start <= stop")
    return start, stop


def _operand_tile(spec: OperandSpec, t: torch.Tensor, out_shape: tuple[int, int], rows: tuple[int, int],
                  cols: tuple[int, int], group: int = 0) -> torch.Tensor:
    """The operand's values for one tile, in fp32: DENSE (R, C), COLUMN (R, 1), ROW (1, C), SCALAR (1, 1); a
    per-group operand's from its slice `group`."""
    if tuple(t.shape) != spec.shape or tuple(t.stride()) != spec.strides:
        raise InputError(spec.name, f"the tensor classified as {spec.name} (shape {spec.shape}, strides "
                         f"{spec.strides})", f"shape {tuple(t.shape)}, strides {tuple(t.stride())}",
                         "pass the same tensors to evaluation as to classification")
    m, n = out_shape
    (r0, r1), (c0, c1) = rows, cols
    # Along a dimension the operand does not vary, every row (column) reads its one value: index 0.
    if not spec.kind.varies_m:
        r0, r1, m = 0, 1, 1
    if not spec.kind.varies_n:
        c0, c1, n = 0, 1, 1
    if spec.per_group:  # the kernel's base pointer moves to the group's slice
        if not 0 <= group < spec.shape[0]:
            raise ValueError(f"operand {spec.name}: group {group} outside its {spec.shape[0]} per-group slices")
        t = t[group]
    # The view the GPU addresses: element (i, j) at offset i * rs + j * cs.
    view = torch.as_strided(t, (m, n), spec.mn_strides(), t.storage_offset())
    out = torch.zeros(r1 - r0, c1 - c0, device=t.device)
    h, w = min(r1, m) - r0, min(c1, n) - c0
    if h > 0 and w > 0:
        out[:h, :w] = view[r0:r0 + h, c0:c0 + w]
    return out

