"""Gluon statements for an epilogue graph: the register math between the accumulator and the store.

`emit` is a pure function from a graph and the names of already-loaded register values to lines of Gluon:

    ep_0 = acc + bias  # %0 = add acc, bias
    ep_1 = ep_0 / (1.0 + gl.exp(-1.5957691216057308 * (...)))  # %1 = gelu_tanh %0
    out0 = ep_1.to(gl.bfloat16)  # output 0: %1 as bf16 (out_dtype)

Register shapes follow the values' kinds: the accumulator and DENSE operands are [BM, BN] in the accumulator's
layout, a COLUMN operand [BM, 1], a ROW operand [1, BN] (each an ``expand_dims`` of a slice of that layout, see
`load_operand`), a SCALAR a scalar; Gluon broadcasts them like torch does. Outputs come out [BM, BN] in their
stored dtype.

Triton 3.6's Gluon has ``gl.exp, exp2, log, log2, sqrt, sqrt_rn, rsqrt, erf, abs, maximum, minimum, where,
div_rn, fdiv, fma`` but no tanh, sigmoid or pow. Those come from libdevice (``gl.extra.libdevice.tanh`` and
``.pow``, accurate to a few ulp) or are formulas over ``gl.exp``: sigmoid and silu as torch's CPU kernels write
them, tanh GELU as x * sigmoid(2u) (the same function as x/2 (1 + tanh(u)), without libdevice tanhf's ~14 more
instructions per element; x * 0 where torch's fp32 1 + tanh(u) cancels to 0, below about x = -5.15), erf GELU over
``gl.erf`` (libdevice erff; cheaper forms were not faster, archive/exp/gelu_forms.py).
Each op is matched to torch's meaning (`warploom.epilogue.reference`):

- maximum, minimum and clamp propagate NaN (``propagate_nan=tl.PropagateNan.ALL``, max.NaN.f32): the
  default max.f32 would return the other operand and hide a NaN that torch shows.
- relu is ``where(x < 0, 0, x)``, torch's own definition: it keeps NaN and keeps -0.0 as -0.0, which
  max.NaN.f32(-0.0, 0.0) would turn into +0.0 (then 1 / relu(-0.0) is -inf in torch, +inf with max; the
  property test in tests/unit/test_epilogue_gluon.py found it).
- div and sqrt are IEEE round-to-nearest (``gl.div_rn``, ``gl.sqrt_rn``), as torch's are; plain ``/`` and
  ``gl.sqrt`` are approximate on NVIDIA GPUs. Inside sigmoid and silu the approximate ``/`` is used.
- pow uses torch's own special cases (x*x for 2, x*x*x for 3, sqrt for 0.5, 1/x for -1, ...) and powf else.
- casts to fp8 clamp to +-448 (e4m3) or +-57344 (e5m2) before converting. sm_90's cvt.rn.satfinite saturates
  anyway; the clamp makes the meaning independent of the conversion instruction Triton picks. (Eager CUDA torch's own
  ``.to(torch.float8_e4m3fn)`` turns 500.0 into NaN; a fused epilogue saturates, as the kernel does.)

What is not bit-exact against torch: ``gl.exp`` (ex2.approx), ``gl.rsqrt`` (rsqrt.approx.ftz: a denormal input
flushes to zero), libdevice tanh, erf and pow are a few ulp off; and Triton contracts ``a * b + c`` into an
FMA (``enable_fp_fusion``, which warploom asks for explicitly: backends/gluon_api.py), which rounds once where eager
torch rounds twice. The GPU tier (tests/gpu/test_epilogue_ops_gpu.py) measures every op against `reference.evaluate`.

The generated module must import ``triton.language as tl`` (`IMPORTS`) for ``tl.PropagateNan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import printer
from warploom.epilogue.operands import OperandKind, OperandSpec

IMPORTS = ("import triton.language as tl",)

_NAN = "propagate_nan=tl.PropagateNan.ALL"
_SQRT_1_2 = repr(1 / math.sqrt(2))  # erf GELU: x/2 (1 + erf(x / sqrt 2))
_TWO_SQRT_2_PI = repr(2 * math.sqrt(2 / math.pi))  # twice tanh GELU's beta
# The largest fp32 u whose tanh is exactly -1 (torch's, found by bisection; libdevice tanhf agrees to an ulp), twice:
# tanh GELU compares 2u against it.
_TWO_TANH_MINUS_ONE = repr(2 * -9.01084041595459)
_KAPPA = "0.044715"


def literal(v: float | bool) -> str:
    """A constant in Gluon source (a Python float; JIT code spells infinities and NaN with float())."""
    if isinstance(v, bool):
        return repr(v)
    return repr(v) if math.isfinite(v) else f'float("{v}")'


def _unary(op: eg.UnaryOp, x: str) -> str:
    match op:
        case eg.UnaryOp.NEG:
            return f"-{x}"
        case eg.UnaryOp.ABS:
            return f"gl.abs({x})"
        case eg.UnaryOp.RELU:
            return f"gl.where({x} < 0.0, 0.0, {x})"
        case eg.UnaryOp.GELU_ERF:
            return f"{x} * 0.5 * (1.0 + gl.erf({x} * {_SQRT_1_2}))"
        case eg.UnaryOp.GELU_TANH:
            # x/2 (1 + tanh(u)) = x sigmoid(2u): one exp and one divide where libdevice's tanhf took ~14 more
            # instructions per element (612 -> 510 us at 8192x8192x4096 fused; archive/exp/gelu_forms.py). Where
            # fp32 tanh(u) is exactly -1 (2u <= _TWO_TANH_MINUS_ONE) torch's 1 + tanh(u) is 0 and the result
            # x * 0: kept, so a later sqrt or 1/x sees -0.0 as in torch, not a tiny negative (the property test).
            inner = f"{_TWO_SQRT_2_PI} * ({x} + {_KAPPA} * {x} * {x} * {x})"
            return f"gl.where({inner} <= {_TWO_TANH_MINUS_ONE}, {x} * 0.0, {x} / (1.0 + gl.exp(-{inner})))"
        case eg.UnaryOp.SILU:
            return f"{x} / (1.0 + gl.exp(-{x}))"
        case eg.UnaryOp.SIGMOID:
            return f"1.0 / (1.0 + gl.exp(-{x}))"
        case eg.UnaryOp.TANH:
            return f"gl.extra.libdevice.tanh({x})"
        case eg.UnaryOp.EXP:
            return f"gl.exp({x})"
        case eg.UnaryOp.LOG:
            return f"gl.log({x})"
        case eg.UnaryOp.SQRT:
            return f"gl.sqrt_rn({x})"
        case eg.UnaryOp.RSQRT:
            return f"gl.rsqrt({x})"


def _binary(op: eg.BinaryOp, x: str, y: str) -> str:
    match op:
        case eg.BinaryOp.ADD:
            return f"{x} + {y}"
        case eg.BinaryOp.SUB:
            return f"{x} - {y}"
        case eg.BinaryOp.MUL:
            return f"{x} * {y}"
        case eg.BinaryOp.DIV:
            return f"gl.div_rn({x}, {y})"
        case eg.BinaryOp.MAXIMUM:
            return f"gl.maximum({x}, {y}, {_NAN})"
        case eg.BinaryOp.MINIMUM:
            return f"gl.minimum({x}, {y}, {_NAN})"


_CMP = {eg.CompareOp.LT: "<", eg.CompareOp.LE: "<=", eg.CompareOp.GT: ">", eg.CompareOp.GE: ">=",
        eg.CompareOp.EQ: "==", eg.CompareOp.NE: "!="}


def _clamp(x: str, lo: float | None, hi: float | None) -> str:
    if lo is not None:
        x = f"gl.maximum({x}, {literal(lo)}, {_NAN})"
    if hi is not None:
        x = f"gl.minimum({x}, {literal(hi)}, {_NAN})"
    return x


def _pow(x: str, e: float) -> str:
    # torch.pow's own special cases (its CPU and CUDA kernels), so results match it bit for bit there.
    special = {0.0: f"gl.where({x} == {x}, 1.0, 1.0)", 1.0: x, 2.0: f"{x} * {x}", 3.0: f"{x} * {x} * {x}",
               0.5: f"gl.sqrt_rn({x})", -0.5: f"gl.rsqrt({x})", -1.0: f"gl.div_rn(1.0, {x})",
               -2.0: f"gl.div_rn(1.0, {x} * {x})"}
    return special.get(e, f"gl.extra.libdevice.pow({x}, {literal(e)})")


def cast_to(x: str, dtype: DType) -> str:
    """`x` (fp32) converted to `dtype` as every warploom store converts (`_cast`): rule 29's cast kernel's q."""
    return _cast(x, dtype)


def _cast(x: str, dtype: DType) -> str:
    """`x` (fp32) converted to `dtype`: round to nearest even; fp8 saturating to +-its largest finite value."""
    if dtype is DType.FP32:
        return x
    if dtype in eg.FP8_MAX:
        x = _clamp(x, -eg.FP8_MAX[dtype], eg.FP8_MAX[dtype])
    return f"{x}.to({dtype.gluon})"


def expr(nd: eg.Node, a: Sequence[str]) -> str:
    """Gluon for computed node `nd`, its inputs spelled `a`."""
    match nd:
        case eg.Unary():
            return _unary(nd.op, a[0])
        case eg.Binary():
            return _binary(nd.op, a[0], a[1])
        case eg.Compare():
            return f"{a[0]} {_CMP[nd.op]} {a[1]}"
        case eg.Where():
            return f"gl.where({a[0]}, {a[1]}, {a[2]})"
        case eg.Cast():
            return f"{_cast(a[0], nd.dtype)}.to(gl.float32)"
        case eg.Clamp():
            return _clamp(a[0], nd.lo, nd.hi)
        case eg.Pow():
            return _pow(a[0], nd.exponent)
        case _:
            raise TypeError(f"{nd} is a leaf, not an op")


# A group amax's combine (warploom.quantize in an epilogue): NaN wins, as in torch.amax; gl.max's maximum would drop it.
NAN_MAX = ("@gluon.jit",
           "def _nan_max(a, b):",
           f"    return gl.maximum(a, b, {_NAN})")


def emit(g: eg.EpilogueGraph, acc: str, operands: Mapping[str, str], outputs: Sequence[str], *,
         out_dtype: DType, prefix: str = "ep_", amax: str | None = None, up: str | None = None,
         up_operands: Mapping[str, str] | None = None) -> list[str]:
    """Lines computing each output of `g` into the variables `outputs`, [BM, BN] in its stored dtype (a groups
    output, 1x128 scales: [BM, 1], fp32).

    `acc` names the fp32 accumulator ([BM, BN]); `operands` maps each operand's name to the variable holding
    its fp32 registers (as `load_operand` writes them); `out_dtype` is the call's output dtype, for outputs
    without their own; `amax` the [BM] group amax a graph with a `GroupAmax` reads (`emit_amax`'s). Temporaries
    are `prefix` + the printer's value number, so ``ep_3`` is ``%3``.

    A gate/up graph (`EpilogueGraph.gate_up`): `acc` is the gate block, `up` the up block of the same result
    columns and `up_operands` the operands (those over N) loaded at the up block; the nodes over N are computed on
    each side (the up side's temporaries end in ``_u``), each `GateUpHalf` is its side's value.
    """
    if len(outputs) != len(g.outputs):
        raise ValueError(f"emit: {len(g.outputs)} outputs in the graph, {len(outputs)} names given")
    if g.gate_up() is not None:
        if up is None:
            raise ValueError("emit: a gate/up graph needs the up block's variable (up=)")
        spell, lines = _gate_up_values(g, acc, up, operands, {**operands, **(up_operands or {})}, prefix)
    else:
        spell, lines = _values(g, acc, operands, prefix, amax, range(len(g.nodes)))
    kinds, ns = g.kinds(), printer.names(g)
    for j, (o, name) in enumerate(zip(g.outputs, outputs, strict=True)):
        v = spell[o.value]
        if o.layout is eg.OutputLayout.GROUPS:  # [BM, 1]: one value a row for the block's group
            lines.append(f"{name} = {v}  # output {j}: {printer.output(o, ns)}")
            continue
        if isinstance(g.nodes[o.value], eg.Const):
            v = f"gl.full_like({acc}, {v})"
        elif kinds[o.value] is not OperandKind.DENSE:
            v = f"gl.broadcast({v}, {acc})[0]"  # a row/column/scalar result stored over the whole tile
        dt = o.resolve(out_dtype)
        how = "" if o.dtype is not None else f" as {dt.value} (out_dtype)"
        lines.append(f"{name} = {_cast(v, dt)}  # output {j}: {printer.output(o, ns)}{how}")
    return lines


def emit_amax(g: eg.EpilogueGraph, acc: str, operands: Mapping[str, str], *, cols: str, block: str,
              prefix: str = "ep_") -> list[str]:
    """Lines computing a block's share of the graph's group amax into `block` ([BM], the rows' slice layout): the
    nodes its `GroupAmax` reads, then each row's NaN-propagating max (`NAN_MAX`) of their magnitude over the
    block's columns below N (`cols`: the block's [BN] output column indices). Columns past N never count: a
    ragged last group's amax is over its valid columns, as `reference.group_amax` says."""
    ref = g.group_amax()
    if ref is None:
        raise ValueError("emit_amax: the graph has no group amax")
    spell, lines = _values(g, acc, operands, prefix, None, g.before_amax())
    x = eg.inputs(g.nodes[ref])[0]
    v = spell[x] if g.kinds()[x] is OperandKind.DENSE else f"gl.broadcast({spell[x]}, {acc})[0]"
    lines.append(f"{block} = gl.reduce(gl.where(gl.expand_dims({cols} < N, 0), gl.abs({v}), 0.0), 1, _nan_max)"
                 f"  # this block's row amax of {printer.names(g)[x]} (columns < N)")
    return lines


def _values(g: eg.EpilogueGraph, acc: str, operands: Mapping[str, str], prefix: str, amax: str | None,
            which: Sequence[int], suffix: str = "") -> tuple[list[str], list[str]]:
    """Each node's spelling, and the lines computing the nodes in `which` (in order)."""
    missing = [s.name for s in g.operands if s.name not in operands]
    if missing:
        raise ValueError(f"emit: no register variable for operand(s) {missing}")
    ns = printer.names(g)
    spell: list[str] = []
    lines: list[str] = []
    wanted = set(which)
    for i, nd in enumerate(g.nodes):
        match nd:
            case eg.Acc():
                spell.append(acc)
            case eg.Operand():
                spell.append(operands[nd.name])
            case eg.Const():
                spell.append(literal(nd.value))
            case eg.GroupAmax():
                if i in wanted and amax is None:
                    raise ValueError("emit: the graph reads a group amax, but no amax variable was given")
                spell.append(f"gl.expand_dims({amax}, 1)")  # [BM, 1]: the group's, folded over its blocks
            case _:
                var = prefix + ns[i].lstrip("%") + suffix
                if i in wanted:
                    lines.append(f"{var} = {expr(nd, [spell[r] for r in eg.inputs(nd)])}  # {printer.line(g, i, ns)}")
                spell.append(var)
    return spell, lines


def _gate_up_values(g: eg.EpilogueGraph, gate: str, up: str, operands: Mapping[str, str],
                    up_operands: Mapping[str, str], prefix: str) -> tuple[list[str], list[str]]:
    """A gate/up graph's spellings and lines: the nodes over N on the gate side (acc = `gate`) and on the up side
    (acc = `up`, suffix ``_u``), then the half-space nodes on the halves."""
    gate_spell, gate_lines = _values(g, gate, operands, prefix, None, _sides(g))
    up_spell, up_lines = _values(g, up, up_operands, prefix, None, _sides(g), suffix="_u")
    ns, halved = printer.names(g), g.halved()
    spell: list[str] = []
    lines = gate_lines + up_lines
    for i, nd in enumerate(g.nodes):
        if isinstance(nd, eg.GateUpHalf):
            spell.append((gate_spell if nd.half is eg.Half.GATE else up_spell)[nd.x])
        elif halved[i]:
            var = prefix + ns[i].lstrip("%")
            lines.append(f"{var} = {expr(nd, [spell[r] for r in eg.inputs(nd)])}  # {printer.line(g, i, ns)}")
            spell.append(var)
        else:
            spell.append(gate_spell[i])
    return spell, lines


def _sides(g: eg.EpilogueGraph) -> list[int]:
    """The computed nodes a gate/up graph evaluates on each side: those not over the halves."""
    halved = g.halved()
    return [i for i in range(len(g.nodes)) if not halved[i]]


def load_operand(spec: OperandSpec, var: str, ptr: str, *, offs_m: str, offs_n: str, mask_m: str, mask_n: str,
                 rs: str, cs: str) -> str:
    """One line loading operand `spec` for a tile into `var` as fp32 registers of its kind's shape.

    `offs_m` ([BM]) and `offs_n` ([BN]) are the tile's output row and column indices in the accumulator
    layout's slices (``gl.SliceLayout(1, layout)`` and ``gl.SliceLayout(0, layout)``), `mask_m`/`mask_n` their
    in-bounds masks, and `rs`/`cs` expressions for `spec.mn_strides()` (arguments or literals). Out-of-bounds
    rows and columns read 0.0, as `reference.evaluate_tile` says. An operand whose elements lie 2**31 or more
    apart (`OperandSpec.span`) is addressed with 64-bit offsets, as its offsets would overflow int32. A per-group
    operand's `ptr` is its tile's group's slice (the grouped emitter's `operand_ptr`).
    """
    f32 = ".to(gl.float32)"
    if spec.span() >= 2**31:  # offsets past int32: the index vectors go 64-bit (only then: they cost registers)
        offs_m, offs_n = f"{offs_m}.to(gl.int64)", f"{offs_n}.to(gl.int64)"
    mine = "the tile's group's " if spec.per_group else ""  # (`ptr` is then the group's slice)
    match spec.kind:
        case OperandKind.SCALAR:
            return f"{var} = gl.load({ptr}){f32}  # {spec.name}: {mine}scalar"
        case OperandKind.ROW:
            return (f"{var} = gl.expand_dims(gl.load({ptr} + {offs_n} * {cs}, mask={mask_n}, other=0.0){f32}, 0)"
                    f"  # {spec.name}: {mine}row, [1, BN]")
        case OperandKind.COLUMN:
            return (f"{var} = gl.expand_dims(gl.load({ptr} + {offs_m} * {rs}, mask={mask_m}, other=0.0){f32}, 1)"
                    f"  # {spec.name}: column, [BM, 1]")
        case OperandKind.DENSE:
            return (f"{var} = gl.load({ptr} + gl.expand_dims({offs_m} * {rs}, 1) + gl.expand_dims({offs_n}, 0), "
                    f"mask=gl.expand_dims({mask_m}, 1) & gl.expand_dims({mask_n}, 0), other=0.0){f32}"
                    f"  # {spec.name}: dense, [BM, BN]")
