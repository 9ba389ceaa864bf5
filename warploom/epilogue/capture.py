"""Capture an epilogue function ``fn(acc, **operands)`` as an `EpilogueGraph`, by torch.fx symbolic tracing.

Tracing happens at the torch level (not aten), so ``F.gelu(x, approximate="tanh")`` arrives as one call and
becomes one GELU_TANH node instead of a decomposition. Each traced call is then

1. checked against the supported set (`SUPPORTED`); anything else (``torch.matmul``, ``torch.sum``, indexing,
   in-place ops, ``acc.shape``) raises `UnsupportedError` naming the op and listing what is supported;
2. run on meta tensors, so that torch itself decides the result's dtype (type promotion, including its rules
   for 0-D tensors and Python scalars) and rejects what eager torch would reject;
3. lowered to graph nodes computing in fp32, followed by a `Cast` when torch's result is 16-bit: torch rounds
   every bf16/fp16 op's result, so ``bias_bf16 * 2`` or ``acc.to(torch.bfloat16) * 2`` round here too, and the
   graph means what calling ``fn`` on CUDA tensors means: tensor inputs are first rounded to the op's 16-bit
   compute dtype, the op runs in fp32 and its result is rounded once, except where torch's kernels round inside
   the op (``c / x`` is ``x.reciprocal() * c``; a 16-bit ``x ** 3`` is ``(x * x) * x``, ``x ** -2`` is
   ``1 / (x * x)``). These rules were measured against torch on an H100; torch's CPU kernels differ from them
   in the last bit in a few places (fp16 gelu and pow, bf16 mul/div by a 0-D tensor).

Nodes are made by `Builder`: common subexpressions become one node, pure-constant ones are folded, and nodes no
output reads are dropped. A final ``.to(dtype)`` (or ``.float()``, ``.bfloat16()``, ``.half()``) on a returned
value becomes that output's stored dtype instead of a node.
"""

from __future__ import annotations

import builtins
import inspect
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import names as names_
from warploom.epilogue.builder import Builder
from warploom.epilogue.classify import classify_all
from warploom.epilogue.operands import ACC, OperandSpec
from warploom.errors import InputError, UnsupportedError, WarploomError
from warploom.gate_up import gate_half, up_half
from warploom.quantization import QuantRecipe, quantized_data, quantized_scales

SUPPORTED = (
    "+ - * / (with tensors or Python numbers on either side), ** and torch.pow/square/reciprocal with a constant "
    "exponent, comparisons < <= > >= == != (torch.lt ... torch.ne), torch.where(cond, x, y), neg, abs, "
    "torch.maximum/minimum (and torch.max/min of two tensors), clamp/clip/clamp_min/clamp_max, relu, relu6, "
    "leaky_relu, hardtanh, gelu (approximate='none' or 'tanh'), silu, sigmoid, tanh, exp, log, sqrt, rsqrt, "
    "and casts .to(dtype)/.float()/.bfloat16()/.half() to float32, bfloat16, float16 or float8_e4m3fn"
)

def _unsupported(arg: str, expected: str, got: str, fix: str) -> UnsupportedError:
    """An UnsupportedError worded like every warploom user error: what, expected, got, fix (and its `arg`)."""
    e = UnsupportedError(f"{arg}: expected {expected}, got {got}. Fix: {fix}")
    e.arg = arg  # type: ignore[attr-defined]
    return e


# Canonical sizes of the meta tensors traced through: only dtypes are read from them, and for torch's type
# promotion only whether a tensor is 0-D matters, so any sizes with M0 != N0 > 1 do.
_M0, _N0 = 2, 3

_CAST_DTYPES = {torch.float32: DType.FP32, torch.bfloat16: DType.BF16, torch.float16: DType.FP16,
                torch.float8_e4m3fn: DType.E4M3, torch.float8_e5m2: DType.E5M2}


def capture(fn: Callable[..., Any], operands: Sequence[OperandSpec] | Mapping[str, Any] = (), *,
            out_shape: tuple[int, int] | None = None, device: Any = None) -> eg.EpilogueGraph:
    """The epilogue graph of ``fn(acc, **operands)``.

    `operands` are the classified specs, or example tensors by name, which are classified here against
    `out_shape` (M, N) and `device` (see `warploom.epilogue.classify`). The graph's `operands` are the specs
    its outputs read, in the given order.
    """
    if not callable(fn):
        raise InputError("epilogue", "a function fn(acc, **operands)", f"{type(fn).__name__}",
                         "pass a function or lambda")
    if isinstance(operands, Mapping):
        if out_shape is None:
            raise InputError("out_shape", "the output's (M, N) to classify example operand tensors against",
                             "None", "pass out_shape=(M, N), or pass classified OperandSpecs")
        specs = classify_all(operands, out_shape, device)
    else:
        specs = tuple(operands)
        if not all(isinstance(s, OperandSpec) for s in specs):
            raise TypeError("capture: operands must be OperandSpecs or a mapping of example tensors")
    from warploom.epilogue import memo

    k = memo.key(fn, tuple(specs))
    graph = memo.get(k)
    if graph is not None:
        return graph
    names = [s.name for s in specs]
    _check_signature(fn, names)
    gm, root = _trace(fn, names)
    graph = _Lowering(specs, root).run(gm)
    memo.put(k, graph)
    return graph


# ---------------------------------------------------------------------------------------------
# Tracing


def _check_signature(fn: Callable[..., Any], names: list[str]) -> None:
    """`fn` must accept ``fn(acc, **operands)`` for exactly these operands."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: tracing will say what is wrong
    params = list(sig.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or params[0].kind not in positional and params[0].kind is not inspect.Parameter.VAR_POSITIONAL:
        raise _unsupported("epilogue", "a function whose first parameter is the accumulator: fn(acc, **operands)",
                            f"a function with signature {sig}", "make the accumulator the first parameter")
    rest = {p.name: p for p in params[1:]}
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    for p in rest.values():
        if p.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        if p.name not in names and p.default is inspect.Parameter.empty:
            # (a parameter `b`, `c` or `out_dtype` can never be fed: `b=` is matmul's own argument, `c=` is refused
            # as a name the kernel uses, so "pass b=..." sent the user to a Python TypeError or a second refusal)
            fix = (f"rename the parameter, e.g. {p.name}_in, and pass {p.name}_in=... to the call ({p.name!r} is an "
                   "argument of the call itself or a name the generated kernel uses)" if names_.unpassable(p.name)
                   else f"pass {p.name}=... to the call, or give the parameter a default")
            raise InputError(p.name, f"an operand {p.name}=tensor, since the epilogue takes a parameter {p.name}",
                             f"operands ({', '.join(names)})" if names else "no operands", fix)
    for n in names:
        if n not in rest and not has_var_kw:
            raise InputError(n, f"an operand the epilogue takes (its parameters: {sig})", f"{n}=...",
                             f"remove {n}= from the call, or add a parameter {n} to the epilogue")
    try:
        sig.bind(None, **{n: None for n in names})
    except TypeError as e:
        raise _unsupported("epilogue", "a function callable as fn(acc, **operands)", f"signature {sig}: {e}",
                            "make the accumulator the first positional parameter and the operands keywords") from e


class _Tracer(fx.Tracer):
    """Traces through nn.Module calls (``torch.nn.GELU()(acc)``) instead of keeping them as opaque calls."""

    def call_module(self, m: torch.nn.Module, forward: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        return forward(*args, **kwargs)


def _trace(fn: Callable[..., Any], names: list[str]) -> tuple[fx.Graph, torch.nn.Module]:
    # fx makes one placeholder per parameter of the traced function's code object, so trace a generated
    # wrapper whose parameters are exactly (acc, *operands), whatever fn's own signature looks like.
    src = (f"def epilogue({', '.join([ACC, *names])}):\n"
           f"    return __warploom_fn({', '.join([ACC, *(f'{n}={n}' for n in names)])})\n")
    scope: dict[str, Any] = {"__warploom_fn": fn}
    exec(compile(src, "<warploom epilogue>", "exec"), scope)
    tracer = _Tracer()
    try:
        g = tracer.trace(scope["epilogue"])
    except fx.proxy.TraceError as e:
        raise _unsupported("epilogue", "straight-line elementwise code", f"data-dependent control flow ({e})",
                            "replace `if`/`bool()` on tensor values with torch.where(cond, x, y)") from e
    except WarploomError:  # fn called a warploom function that refused itself (warploom.quantize): its own words
        raise
    except Exception as e:  # anything fn raised while being traced with proxies
        raise _unsupported("epilogue", f"a function of elementwise torch ops on acc and the operands: {SUPPORTED}",
                            f"{type(e).__name__} while tracing: {e}",
                            "use torch functions, not math.* or NumPy, on tensor values") from e
    return g, tracer.root


# ---------------------------------------------------------------------------------------------
# Lowering


@dataclass(frozen=True)
class _Val:
    """A traced tensor value: its node, and a meta tensor with torch's dtype for it (canonical sizes)."""

    ref: eg.Ref
    meta: torch.Tensor


_Arg = Any  # a lowered fx argument: a _Val, or a Python constant (number, bool, dtype, None, str)
_Build = Callable[["_Lowering", dict[str, _Arg], str], eg.Ref]  # (lowering, arguments, the call's name)


@dataclass(frozen=True)
class _Op:
    """A supported call: its torch functions and Tensor method names, parameters (torch's keyword names, the
    tensor first) with defaults, and how to build it."""

    functions: tuple[Callable[..., Any], ...]
    methods: tuple[str, ...]
    params: tuple[str, ...]
    build: _Build
    defaults: dict[str, Any] = field(default_factory=dict)
    cast: bool = False  # a dtype conversion: as an output's last op, it sets the stored dtype instead


class _Lowering(Builder):
    """Walks the traced fx graph in order, lowering each call to nodes (see the module docstring)."""

    def __init__(self, specs: tuple[OperandSpec, ...], root: torch.nn.Module) -> None:
        super().__init__(specs)
        self.root = root
        self.common: DType | None = None  # the current call's 16-bit compute dtype, if it has one
        # warploom.quantize's results (fx node -> the output they are): returned as they are, never computed with
        self.quantized: dict[fx.Node, eg.Output] = {}

    def num(self, x: _Arg, what: str) -> eg.Ref:
        """A float value: a traced tensor (a bool one becomes 1.0/0.0, as torch promotes it) or a number."""
        if isinstance(x, _Val):
            if x.meta.dtype == torch.bool:
                return self.add(eg.Where(x.ref, self.const(1.0), self.const(0.0)))
            return x.ref
        if isinstance(x, (bool, int, float)):
            return self.const(float(x))
        raise _unsupported(f"epilogue op {what}", "a tensor or a Python number", f"{type(x).__name__} {x!r}",
                            "pass a tensor value or a number")

    def cond(self, x: _Arg, what: str) -> eg.Ref:
        if isinstance(x, _Val) and x.meta.dtype == torch.bool:
            return x.ref
        if isinstance(x, bool):
            return self.const(x)
        raise _unsupported(f"epilogue op {what}", "a bool condition (a comparison)", repr(x),
                            "compare, e.g. torch.where(acc > 0, ...)")

    # --- the walk over the fx graph

    def run(self, g: fx.Graph) -> eg.EpilogueGraph:
        env: dict[fx.Node, _Arg] = {}
        casts: dict[fx.Node, tuple[eg.Ref, DType]] = {}  # fx node -> (its input, target) for cast calls
        result: Any = None
        for node in g.nodes:
            if node.op == "placeholder":
                if node.target == ACC:
                    env[node] = _Val(self.acc(), torch.empty(_M0, _N0, device="meta"))
                else:
                    env[node] = _Val(self.operand(str(node.target)), _meta(self.spec(str(node.target))))
            elif node.op == "get_attr":
                env[node] = self._constant(node)
            elif node.op in ("call_function", "call_method"):
                env[node] = self._call(node, env, casts)
            elif node.op == "output":
                result = node.args[0]
            else:
                raise _unsupported(f"epilogue op {_name(node)}", f"one of: {SUPPORTED}", node.op,
                                    "call torch functions directly inside the epilogue")
        return self._finish(result, env, casts)

    def _constant(self, node: fx.Node) -> _Val:
        t = getattr(self.root, str(node.target))
        if not isinstance(t, torch.Tensor) or t.dim() != 0 or not (t.dtype.is_floating_point or
                                                                    t.dtype == torch.bool):
            # (the dtype too: a 0-D int or bool tensor was refused as "a tensor of shape ()", the shape it has)
            got = (f"a {t.dtype} tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else
                   f"{type(t).__name__}")
            raise _unsupported("epilogue constant", "a Python number (or a 0-D float tensor)", got,
                                "pass tensors as operands (name=tensor) instead of capturing them")
        # float(item) is exact for every float dtype up to fp32; a float64 constant rounds to fp32 where used.
        v: float | bool = bool(t.item()) if t.dtype == torch.bool else float(t.item())
        return _Val(self.const(v), torch.empty((), dtype=t.dtype, device="meta"))

    def _call(self, node: fx.Node, env: dict[fx.Node, _Arg], casts: dict[fx.Node, tuple[eg.Ref, DType]]) -> _Arg:
        name = _name(node)
        args = fx.node.map_arg(node.args, lambda n: env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
        if node.op == "call_function" and node.target is builtins.getattr:
            return self._getattr(name, args)
        used = [n for n in node.all_input_nodes if n in self.quantized]
        if used:
            raise _unsupported(f"epilogue op {name}", "warploom.quantize's (q, s) returned as they are",
                               f"{name} computing with {_name(used[0])}'s result",
                               "return q and s from the epilogue; compute before quantize, not after")
        if node.op == "call_function" and node.target in _QUANTIZED:
            return self._quantize(node, name, args)
        if node.op == "call_function" and node.target in _HALVES:
            return self._half(name, args, _HALVES[node.target])
        op = _FUNCTIONS.get(node.target) if node.op == "call_function" else _METHODS.get(str(node.target))  # type: ignore[arg-type]
        if op is None:
            method = str(node.target)
            inplace = node.op == "call_method" and method.endswith("_") and not method.startswith("__")
            if inplace:
                raise _unsupported(f"epilogue op {name}", "out-of-place ops (the epilogue returns new values)",
                                    f"{name}, an in-place op", "write the op out of place (x = x + y, not x.add_(y))")
            raise _unsupported(f"epilogue op {name}", f"one of the supported elementwise ops: {SUPPORTED}", name,
                                "compute it outside the epilogue; reshape or index operands before passing them")
        p = _bind(name, op, args, kwargs)
        if p.get("inplace"):
            raise _unsupported(f"epilogue op {name}", "an out-of-place op", "inplace=True", "drop inplace=True")
        if any(isinstance(a, _Val) and a.meta.dtype.itemsize == 1 and a.meta.dtype.is_floating_point
               for a in p.values()) and not op.cast:
            raise _unsupported(f"epilogue op {name}", "arithmetic on float32, bfloat16 or float16 values",
                                "a float8 input", "cast float8 values back with .float() before computing with them")
        if op.cast:
            self.common = None
            ref = op.build(self, p, name)  # before the meta run, whose errors for bad casts say less
            meta = _run_meta(node, name, args, kwargs)
        else:
            meta = _run_meta(node, name, args, kwargs)
            p = self._to_common(p, meta)
            ref = op.build(self, p, name)
        if meta.dtype == torch.bool:
            return _Val(ref, meta)
        ref = self.round(ref, _dtype_of(meta.dtype, f"epilogue op {name}"))
        if op.cast:
            casts[node] = (self.num(p["input"], name), _dtype_of(meta.dtype, f"epilogue op {name}"))
        return _Val(ref, meta)

    def _to_common(self, p: dict[str, _Arg], meta: torch.Tensor) -> dict[str, _Arg]:
        """Round tensor arguments to the op's 16-bit compute dtype, and note it in `self.common`.

        torch converts every tensor input of an op to the op's common dtype before computing (TensorIterator),
        so a 0-D fp32 tensor meeting a bf16 one is first rounded to bf16 (measured on the H100; torch's CPU
        kernels skip that for the second operand of mul and div). Python numbers are not rounded: torch passes
        them to the kernel as fp32 "opmath" scalars.
        """
        tensors = [v.meta for v in p.values() if isinstance(v, _Val)]
        common = meta.dtype
        if common == torch.bool and tensors:  # a comparison: computed in its inputs' common dtype
            others = [v for k, v in p.items() if k in ("input", "other") and isinstance(v, (_Val, int, float))]
            metas = [v.meta if isinstance(v, _Val) else v for v in others]
            common = torch.result_type(metas[0], metas[1]) if len(metas) == 2 else tensors[0].dtype
        self.common = _CAST_DTYPES.get(common) if common in (torch.bfloat16, torch.float16) else None
        if self.common is None:
            return p
        dt = self.common
        return {k: _Val(self.round(v.ref, dt), v.meta.to(common))
                if isinstance(v, _Val) and v.meta.dtype.is_floating_point and v.meta.dtype != common else v
                for k, v in p.items()}

    def _quantize(self, node: fx.Node, name: str, args: tuple[_Arg, ...]) -> _Val:
        """warploom.quantize(y, recipe=...) as graph nodes, with quantization.py's meaning: s = amax / fp8_max per
        row and group (1x128: 128 columns; rowwise: the row; 1 where that is 0), q = the saturating fp8 cast of
        y / s (the output's)."""
        y, dtype, recipe = args
        if not isinstance(y, _Val) or y.meta.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            got = f"a {y.meta.dtype} value" if isinstance(y, _Val) else f"{type(y).__name__} {y!r}"
            raise _unsupported("warploom.quantize y", "a float32, bfloat16 or float16 value of the epilogue", got,
                               "quantize acc, or a value computed from it")
        fp8 = _CAST_DTYPES[dtype]
        amax = self.add(eg.GroupAmax(y.ref, None if recipe == QuantRecipe.ROWWISE.value else eg.GROUP))
        ratio = self.add(eg.Binary(eg.BinaryOp.DIV, amax, self.const(eg.FP8_MAX[fp8])))
        s = self.add(eg.Where(self.add(eg.Compare(eg.CompareOp.EQ, ratio, self.const(0.0))), self.const(1.0), ratio))
        if node.target is _QUANTIZED[0]:
            self.quantized[node] = eg.Output(self.add(eg.Binary(eg.BinaryOp.DIV, y.ref, s)), fp8)
            return _Val(self.quantized[node].value, torch.empty(_M0, _N0, dtype=dtype, device="meta"))
        self.quantized[node] = eg.Output(s, DType.FP32, eg.OutputLayout.GROUPS)
        return _Val(s, torch.empty(_M0, 1, device="meta"))

    def _half(self, name: str, args: tuple[_Arg, ...], half: eg.Half) -> _Val:
        """warploom.silu_mul_interleaved's gate or up half of acc (a value over N) as a `GateUpHalf`."""
        h, block = args
        if not isinstance(h, _Val) or not isinstance(self.nodes[h.ref], eg.Acc):
            raise _unsupported("warploom.silu_mul_interleaved h", "the accumulator acc itself (the interleaved "
                               "gate/up GEMM's result)", f"{type(h).__name__} {h!r}" if not isinstance(h, _Val)
                               else "a value computed from it", "call silu_mul_interleaved(acc, block=...) first, "
                               "and compute on its (M, N / 2) result")
        return _Val(self.add(eg.GateUpHalf(h.ref, half, block)), h.meta)

    def _getattr(self, name: str, args: tuple[_Arg, ...]) -> _Arg:
        obj, attr = args[0], args[1]
        if isinstance(obj, _Val) and attr == "dtype":
            return obj.meta.dtype  # a constant: dtypes are known when tracing, sizes are not
        raise _unsupported(f"epilogue attribute .{attr}", "only .dtype of a tensor value",
                            f".{attr}", "sizes are not known to the epilogue; compute them outside and pass numbers")

    def _no_dropped_quantize(self, items: list[Any]) -> None:
        """Refuse a warploom.quantize call none of whose results the epilogue returns: quantize changes nothing in
        place, so ``warploom.quantize(y); return y`` stored y unquantized without a word (the dead call dropped)."""
        returned = {item for item in items if isinstance(item, fx.Node)}
        calls: dict[tuple[Any, ...], bool] = {}  # a call's (y, dtype, recipe), as its q and s nodes both record it
        for nd in self.quantized:
            calls[nd.args] = calls.get(nd.args, False) or nd in returned
        if not all(calls.values()):
            raise _unsupported("epilogue", "warploom.quantize's result (q, s) returned from the epilogue (it "
                               "quantizes nothing in place)", "a warploom.quantize call whose q and s the epilogue "
                               "drops", "return it, e.g. epilogue=lambda acc: warploom.quantize(acc), or delete the "
                               "call to store the unquantized value")

    def _finish(self, result: Any, env: dict[fx.Node, _Arg], casts: dict[fx.Node, tuple[eg.Ref, DType]]
                ) -> eg.EpilogueGraph:
        items = list(result) if isinstance(result, (tuple, list)) else [result]
        if not items:
            raise _unsupported("epilogue", "a function returning a tensor, or a tuple of tensors (the outputs)",
                                f"an empty {type(result).__name__}", "return acc (or the values to store)")
        self._no_dropped_quantize(items)
        outputs: list[eg.Output] = []
        for i, item in enumerate(items):
            v = env.get(item) if isinstance(item, fx.Node) else None
            if not isinstance(v, _Val):
                raise _unsupported(f"epilogue output {i}", "a tensor computed from acc or the operands",
                                    f"{type(item).__name__} {item!r}", "return tensors (a tuple for several outputs)")
            if isinstance(item, fx.Node) and item in self.quantized:
                outputs.append(self.quantized[item])
            elif isinstance(item, fx.Node) and item in casts:
                ref, dt = casts[item]
                outputs.append(eg.Output(ref, dt))
            elif v.meta.dtype == torch.bool:
                raise _unsupported(f"epilogue output {i}", "a float tensor", "a bool tensor (a comparison)",
                                    "return mask.to(torch.bfloat16) (or .float()) to store it")
            else:
                outputs.append(eg.Output(v.ref, None))
        for i, o in enumerate(outputs):
            if isinstance(self.nodes[o.value], eg.Const):
                raise _unsupported(f"epilogue output {i}", "a tensor computed from acc or the operands",
                                    "a constant", "return a value that depends on acc or an operand")
        if outputs[0].layout is eg.OutputLayout.GROUPS:
            # A kernel stores its first output as C (by TMA) and a scale output after it by pointer: s alone had no
            # pointer (the grouped launcher) or C's own (the simulator), s first was given q's memory (the dense one)
            raise _unsupported("epilogue output 0", "warploom.quantize's q first, then its scales s",
                               "the scales s" + (" alone" if len(outputs) == 1 else " before q"),
                               "return warploom.quantize(y) as it is, (q, s), and drop q after the call if only s "
                               "is wanted")
        amaxes = sum(isinstance(self.nodes[r], eg.GroupAmax) for r in self.live(outputs))
        if amaxes > 1:
            raise _unsupported("epilogue", "at most one warploom.quantize call (a tile takes one amax)",
                               f"{amaxes} quantized values", "quantize one value in the epilogue and any other with "
                               "warploom.quantize on the call's result")
        if any(isinstance(nd, eg.GateUpHalf) for nd in self.nodes):
            if amaxes:  # (its own words: the graph's check below would send the user to what they just did)
                raise _unsupported("epilogue", "silu_mul_interleaved(acc, block=...) or warploom.quantize, not both "
                                   "(quantizing the half-width gate/up result in the epilogue is not built)",
                                   "warploom.quantize of silu_mul_interleaved's result",
                                   "return silu_mul_interleaved(acc, block=...) and quantize the call's result with "
                                   "warploom.quantize(h, recipe=...), or pass the gate as an operand of its own "
                                   "(epilogue=lambda acc, gate: warploom.quantize(torch.nn.functional.silu(gate) * "
                                   "acc, recipe=...)), which fuses")
            try:
                return self.finish(outputs)
            except ValueError as e:  # (the graph's own check of the gate/up spaces, in the user's words)
                raise _unsupported("epilogue", "values computed from silu_mul_interleaved(acc, block=...)'s (M, N / 2) "
                                   "result, per-row operands and scalars only", str(e).replace("\n", " "),
                                   "compute on the result of silu_mul_interleaved, not on acc beside it") from e
        return self.finish(outputs)


def _name(node: fx.Node) -> str:
    """How the user spelled the call: ``torch.sum``, ``operator.matmul``, ``Tensor.add_``."""
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if isinstance(t, str):
        return t
    mod = (getattr(t, "__module__", None) or "").replace("_operator", "operator")
    mod = {"torch._C._nn": "torch.nn.functional", "torch._C._special": "torch.special"}.get(mod, mod)
    return f"{mod}.{getattr(t, '__name__', repr(t))}" if mod else getattr(t, "__name__", repr(t))


def _meta(s: OperandSpec) -> torch.Tensor:
    """A meta tensor standing for operand `s`: its dtype and rank, canonical sizes by kind (a per-group operand's:
    its one group's slice, as a tile reads it)."""
    shape = {0: (), 1: (_N0 if s.kind.varies_n else 1,),
             2: (_M0 if s.kind.varies_m else 1, _N0 if s.kind.varies_n else 1)}[len(s.slice_shape()[0])]
    return torch.empty(shape, dtype=s.dtype.torch, device="meta")


def _dtype_of(dt: torch.dtype, what: str) -> DType:
    d = _CAST_DTYPES.get(dt)
    if d is None:
        raise _unsupported(what, "values of dtype float32, bfloat16, float16, float8_e4m3fn or float8_e5m2",
                            f"dtype {dt}", "compute in float32 (acc's dtype) and cast the result to the stored dtype")
    return d


def _bind(name: str, op: _Op, args: tuple[_Arg, ...], kwargs: dict[str, _Arg]) -> dict[str, _Arg]:
    p = dict(op.defaults)
    if len(args) > len(op.params):
        raise _unsupported(f"epilogue op {name}", f"at most {len(op.params)} arguments ({', '.join(op.params)})",
                            f"{len(args)} arguments", "pass the supported arguments only")
    p.update(zip(op.params, args, strict=False))
    for k, v in kwargs.items():
        if k not in op.params:
            raise _unsupported(f"epilogue op {name}", f"arguments ({', '.join(op.params)})", f"{k}={v!r}",
                                f"drop {k}=")
        p[k] = v
    missing = [k for k in op.params if k not in p]
    if missing:
        raise _unsupported(f"epilogue op {name}", f"arguments ({', '.join(op.params)})", f"no {missing[0]}",
                            f"pass {missing[0]}")
    return p


def _run_meta(node: fx.Node, name: str, args: tuple[_Arg, ...], kwargs: dict[str, _Arg]) -> torch.Tensor:
    """Torch's own result for the call on meta tensors: its dtype, or torch's error for bad arguments."""
    margs = [a.meta if isinstance(a, _Val) else a for a in args]
    mkw = {k: a.meta if isinstance(a, _Val) else a for k, a in kwargs.items()}
    try:
        if node.op == "call_method":
            out = getattr(margs[0], str(node.target))(*margs[1:], **mkw)
        else:
            out = node.target(*margs, **mkw)  # type: ignore[operator]
    except Exception as e:
        raise _unsupported(f"epilogue op {name}", "arguments torch accepts", f"{type(e).__name__}: {e}",
                            "fix the call (it fails in eager torch too)") from e
    if not isinstance(out, torch.Tensor):
        raise _unsupported(f"epilogue op {name}", "a tensor result", f"{type(out).__name__}",
                            "use elementwise ops on tensor values")
    return out


# ---------------------------------------------------------------------------------------------
# The supported calls


def _unary(op: eg.UnaryOp) -> _Build:
    return lambda b, p, name: b.add(eg.Unary(op, b.num(p["input"], name)))


def _binary(op: eg.BinaryOp) -> _Build:
    def build(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
        if p.get("alpha", 1) != 1:
            raise _unsupported(f"epilogue op {name}", "alpha=1", f"alpha={p['alpha']!r}",
                                "write x + alpha * y instead")
        if p.get("rounding_mode") is not None:
            raise _unsupported(f"epilogue op {name}", "true division (rounding_mode=None)",
                                f"rounding_mode={p['rounding_mode']!r}", "use x / y")
        x, y = p["input"], p["other"]
        if op is eg.BinaryOp.DIV and not isinstance(x, _Val) and isinstance(y, _Val):
            # number / tensor is Tensor.__rtruediv__, which torch defines as y.reciprocal() * x: two ops, each
            # rounded to a 16-bit result dtype
            recip = b.add(eg.Binary(op, b.const(1.0), b.num(y, name)))
            recip = recip if b.common is None else b.round(recip, b.common)
            return b.add(eg.Binary(eg.BinaryOp.MUL, recip, b.num(x, name)))
        return b.add(eg.Binary(op, b.num(x, name), b.num(y, name)))
    return build


def _compare(op: eg.CompareOp) -> _Build:
    return lambda b, p, name: b.add(eg.Compare(op, b.num(p["input"], name), b.num(p["other"], name)))


def _where(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return b.add(eg.Where(b.cond(p["condition"], name), b.num(p["input"], name), b.num(p["other"], name)))


def _clamp(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    # torch.clamp is min(max(x, lo), hi): the lower bound first, so lo > hi gives hi everywhere.
    x = b.num(p["input"], name)
    lo, hi = p.get("min"), p.get("max")
    if lo is None and hi is None:
        raise _unsupported(f"epilogue op {name}", "at least one of min= and max=", "neither", "pass min= or max=")
    for k, v in (("min", lo), ("max", hi)):
        # (torch's meta kernel takes a complex bound for a real tensor; float() below then failed with a TypeError)
        if v is not None and not isinstance(v, (_Val, bool, int, float)):
            raise _unsupported(f"epilogue op {name}", f"{k}= a real Python number or a tensor value",
                               f"{k}={v!r}", f"pass a real number, e.g. {k}=0.0")
    if isinstance(lo, _Val):
        x, lo = b.add(eg.Binary(eg.BinaryOp.MAXIMUM, x, b.num(lo, name))), None
    if lo is not None or (hi is not None and not isinstance(hi, _Val)):
        x = b.add(eg.Clamp(x, None if lo is None else float(lo),
                           None if hi is None or isinstance(hi, _Val) else float(hi)))
    if isinstance(hi, _Val):
        x = b.add(eg.Binary(eg.BinaryOp.MINIMUM, x, b.num(hi, name)))
    return x


def _clamp_min(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return _clamp(b, {"input": p["input"], "min": p["min"], "max": None}, name)


def _clamp_max(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return _clamp(b, {"input": p["input"], "min": None, "max": p["max"]}, name)


def _hardtanh(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return b.add(eg.Clamp(b.num(p["input"], name), float(p["min_val"]), float(p["max_val"])))


def _relu6(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return b.add(eg.Clamp(b.num(p["input"], name), 0.0, 6.0))


def _leaky_relu(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    # torch: x > 0 ? x : x * negative_slope
    x = b.num(p["input"], name)
    pos = b.add(eg.Compare(eg.CompareOp.GT, x, b.const(0.0)))
    return b.add(eg.Where(pos, x, b.add(eg.Binary(eg.BinaryOp.MUL, x, b.const(float(p["negative_slope"]))))))


def _gelu(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    op = {"none": eg.UnaryOp.GELU_ERF, "tanh": eg.UnaryOp.GELU_TANH}.get(p["approximate"])
    if op is None:
        raise _unsupported(f"epilogue op {name}", "approximate='none' or 'tanh'", repr(p["approximate"]),
                            "use one of those")
    return b.add(eg.Unary(op, b.num(p["input"], name)))


def _pow(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    e = p["exponent"]
    if not isinstance(p["input"], _Val) or isinstance(e, _Val) or not isinstance(e, (int, float)):
        got = ", ".join(f"{k} {'a tensor' if isinstance(v, _Val) else repr(v)}"
                        for k, v in (("base", p["input"]), ("exponent", e)))
        raise _unsupported(f"epilogue op {name}", "a tensor raised to a constant Python number", got,
                            "use torch.exp(e * torch.log(x)) for a tensor exponent")
    x = b.num(p["input"], name)
    if b.common is not None and e in (3, -2):
        # torch's pow kernels square a 16-bit base in its own dtype first: x*x*x and 1/(x*x), the square rounded
        sq = b.round(b.add(eg.Binary(eg.BinaryOp.MUL, x, x)), b.common)
        if e == 3:
            return b.add(eg.Binary(eg.BinaryOp.MUL, sq, x))
        return b.add(eg.Binary(eg.BinaryOp.DIV, b.const(1.0), sq))
    return b.add(eg.Pow(x, float(e)))


def _square(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    x = b.num(p["input"], name)
    return b.add(eg.Binary(eg.BinaryOp.MUL, x, x))  # torch.square is pow(x, 2), computed as x * x


def _reciprocal(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
    return b.add(eg.Binary(eg.BinaryOp.DIV, b.const(1.0), b.num(p["input"], name)))


def _cast_to(dtype: torch.dtype | None) -> _Build:
    def build(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
        target = dtype
        for k, v in p.items():
            if k == "input" or v is None or isinstance(v, bool):
                continue  # non_blocking= and copy= change nothing in registers
            if isinstance(v, _Val):
                target = v.meta.dtype  # .to(other) / .type_as(other)
            elif isinstance(v, torch.dtype):
                target = v
            else:
                raise _unsupported(f"epilogue op {name}", "a dtype conversion", f"an argument {v!r}",
                                    "leave devices out of the epilogue: it runs where the matmul runs")
        if target is None:
            raise _unsupported(f"epilogue op {name}", "a dtype (.to(torch.bfloat16))", repr(p), "pass a dtype")
        d = _CAST_DTYPES.get(target)
        if d is None:
            raise _unsupported(f"epilogue op {name}", "a cast to torch.float32, bfloat16, float16, float8_e4m3fn or "
                               "float8_e5m2", f"a cast to {target}", "cast to one of those")
        return b.round(b.num(p["input"], name), d)
    return build


def _max_min(op: eg.BinaryOp) -> _Build:
    def build(b: _Lowering, p: dict[str, _Arg], name: str) -> eg.Ref:
        if p.get("other") is None:
            raise _unsupported(f"epilogue op {name}", "the two-tensor form torch.max(x, y)",
                                "a reduction", "reduce outside the epilogue; use torch.maximum(x, y) elementwise")
        return _binary(op)(b, p, name)
    return build


_UN = ("input",)
_BIN = ("input", "other")
_TABLE: list[_Op] = [
    _Op((operator.add, torch.add), ("add",), ("input", "other", "alpha"), _binary(eg.BinaryOp.ADD),
        {"alpha": 1}),
    _Op((operator.sub, torch.sub, torch.subtract), ("sub", "subtract"), ("input", "other", "alpha"),
        _binary(eg.BinaryOp.SUB), {"alpha": 1}),
    _Op((operator.mul, torch.mul, torch.multiply), ("mul", "multiply"), _BIN, _binary(eg.BinaryOp.MUL)),
    _Op((operator.truediv, torch.div, torch.divide, torch.true_divide), ("div", "divide", "true_divide"),
        ("input", "other", "rounding_mode"), _binary(eg.BinaryOp.DIV), {"rounding_mode": None}),
    _Op((torch.maximum,), ("maximum",), _BIN, _binary(eg.BinaryOp.MAXIMUM)),
    _Op((torch.minimum,), ("minimum",), _BIN, _binary(eg.BinaryOp.MINIMUM)),
    _Op((torch.max,), ("max",), _BIN, _max_min(eg.BinaryOp.MAXIMUM), {"other": None}),
    _Op((torch.min,), ("min",), _BIN, _max_min(eg.BinaryOp.MINIMUM), {"other": None}),
    _Op((operator.lt, torch.lt, torch.less), ("lt", "less"), _BIN, _compare(eg.CompareOp.LT)),
    _Op((operator.le, torch.le, torch.less_equal), ("le", "less_equal"), _BIN, _compare(eg.CompareOp.LE)),
    _Op((operator.gt, torch.gt, torch.greater), ("gt", "greater"), _BIN, _compare(eg.CompareOp.GT)),
    _Op((operator.ge, torch.ge, torch.greater_equal), ("ge", "greater_equal"), _BIN, _compare(eg.CompareOp.GE)),
    _Op((operator.eq, torch.eq), ("eq",), _BIN, _compare(eg.CompareOp.EQ)),
    _Op((operator.ne, torch.ne, torch.not_equal), ("ne", "not_equal"), _BIN, _compare(eg.CompareOp.NE)),
    _Op((torch.where,), (), ("condition", "input", "other"), _where),
    _Op((), ("where",), ("input", "condition", "other"), _where),
    _Op((operator.neg, torch.neg, torch.negative), ("neg", "negative"), _UN, _unary(eg.UnaryOp.NEG)),
    _Op((operator.abs, torch.abs), ("abs",), _UN, _unary(eg.UnaryOp.ABS)),
    _Op((torch.relu, F.relu), ("relu",), ("input", "inplace"), _unary(eg.UnaryOp.RELU), {"inplace": False}),
    _Op((F.gelu,), (), ("input", "approximate"), _gelu, {"approximate": "none"}),
    _Op((F.silu,), (), ("input", "inplace"), _unary(eg.UnaryOp.SILU), {"inplace": False}),
    _Op((torch.sigmoid, F.sigmoid, torch.special.expit), ("sigmoid",), _UN, _unary(eg.UnaryOp.SIGMOID)),
    _Op((torch.tanh, F.tanh), ("tanh",), _UN, _unary(eg.UnaryOp.TANH)),
    _Op((torch.exp,), ("exp",), _UN, _unary(eg.UnaryOp.EXP)),
    _Op((torch.log,), ("log",), _UN, _unary(eg.UnaryOp.LOG)),
    _Op((torch.sqrt,), ("sqrt",), _UN, _unary(eg.UnaryOp.SQRT)),
    _Op((torch.rsqrt,), ("rsqrt",), _UN, _unary(eg.UnaryOp.RSQRT)),
    _Op((torch.clamp, torch.clip), ("clamp", "clip"), ("input", "min", "max"), _clamp, {"min": None, "max": None}),
    _Op((torch.clamp_min,), ("clamp_min",), ("input", "min"), _clamp_min),
    _Op((torch.clamp_max,), ("clamp_max",), ("input", "max"), _clamp_max),
    _Op((F.relu6,), (), ("input", "inplace"), _relu6, {"inplace": False}),
    _Op((F.hardtanh,), (), ("input", "min_val", "max_val", "inplace"), _hardtanh,
        {"min_val": -1.0, "max_val": 1.0, "inplace": False}),
    _Op((F.leaky_relu,), (), ("input", "negative_slope", "inplace"), _leaky_relu,
        {"negative_slope": 0.01, "inplace": False}),
    _Op((operator.pow, torch.pow), ("pow",), ("input", "exponent"), _pow),
    _Op((torch.square,), ("square",), _UN, _square),
    _Op((torch.reciprocal,), ("reciprocal",), _UN, _reciprocal),
    _Op((), ("to",), ("input", "dtype", "non_blocking", "copy"), _cast_to(None),
        {"dtype": None, "non_blocking": False, "copy": False}, cast=True),
    _Op((), ("type",), ("input", "dtype"), _cast_to(None), {}, cast=True),
    _Op((), ("type_as",), ("input", "other"), _cast_to(None), {}, cast=True),
    _Op((), ("float",), _UN, _cast_to(torch.float32), {}, cast=True),
    _Op((), ("bfloat16",), _UN, _cast_to(torch.bfloat16), {}, cast=True),
    _Op((), ("half",), _UN, _cast_to(torch.float16), {}, cast=True),
]

_FUNCTIONS: dict[Callable[..., Any], _Op] = {f: op for op in _TABLE for f in op.functions}
# warploom.quantize inside an epilogue records these two calls (quantization.py); `_Lowering._quantize` lowers them.
_QUANTIZED = (quantized_data, quantized_scales)
# warploom.silu_mul_interleaved records these two (gate_up.py); `_Lowering._half` lowers them.
_HALVES = {gate_half: eg.Half.GATE, up_half: eg.Half.UP}
_METHODS: dict[str, _Op] = {m: op for op in _TABLE for m in op.methods}
