"""Property: a random invalid input to warploom.matmul / scaled_mm / plan, on CPU or meta tensors, raises a warploom
error that is a ValueError or TypeError and names the argument first; never another exception, never a result.

Each example is a small valid problem (bf16 or fp8 rowwise) with one mistake drawn from MISTAKES: a dtype, shape,
stride, device, scale, bias, operand or epilogue body. Problems are tiny, and a mistake must be refused before any
simulation anyway. COUNTS tallies what was tried (printed with -s; the figures of issue 28).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st
from props import examples, figures, refused, show_arg

import warploom

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn
COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures('invalid inputs', COUNTS)


class Call:
    """One call to make: which entry point ("matmul", "scaled_mm" or "plan"), its arguments, and the names a correct
    refusal may start with. (No dataclass: hypothesis would print its tensors whole.)"""

    def __init__(self, fn: str, a: Any, b: Any, scale_a: Any = None, scale_b: Any = None,
                 kw: dict[str, Any] | None = None, names: tuple[str, ...] = (), mistake: str = "") -> None:
        self.fn, self.a, self.b, self.scale_a, self.scale_b = fn, a, b, scale_a, scale_b
        self.kw, self.names, self.mistake = kw or {}, names, mistake

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={show_arg(getattr(self, n))}" for n in ("a", "b", "scale_a", "scale_b"))
        kw = ", ".join(f"{k}={show_arg(v)}" for k, v in self.kw.items())
        return f"{self.fn}({args}, {kw}) [{self.mistake}; expected to name {self.names}]"

    def __call__(self) -> Any:
        fp8 = self.scale_a is not None or self.scale_b is not None or self.fn == "scaled_mm"
        if self.fn == "plan":
            return warploom.plan(self.a, self.b, self.scale_a, self.scale_b, **self.kw)
        if fp8:
            return warploom.scaled_mm(self.a, self.b, self.scale_a, self.scale_b, **self.kw)
        return warploom.matmul(self.a, self.b, **self.kw)


def _t(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    x = torch.empty(shape, device=device)
    if device != "meta":
        x.uniform_(-1, 1)
    return x.to(dtype)


@st.composite
def base(draw: st.DrawFn) -> Call:
    """A valid problem: bf16 (b row-major) or fp8 with rowwise scales (b column-major), M >= 2, N and K 16-aligned."""
    device = draw(st.sampled_from(["cpu", "meta"]))
    fp8 = draw(st.booleans())
    fn = draw(st.sampled_from(["scaled_mm", "plan"] if fp8 else ["matmul", "plan"]))
    m, n, k = draw(st.integers(2, 40)), 16 * draw(st.integers(1, 4)), 16 * draw(st.integers(1, 4))
    if not fp8:
        return Call(fn, _t((m, k), BF16, device), _t((k, n), BF16, device))
    a, b = _t((m, k), E4, device), _t((n, k), E4, device).t()
    return Call(fn, a, b, torch.ones(m, 1, device=device), torch.ones(1, n, device=device))


def _replace(call: Call, arg: str, value: Any, mistake: str, names: tuple[str, ...] | None = None) -> Call:
    c = Call(call.fn, call.a, call.b, call.scale_a, call.scale_b, dict(call.kw), names or (arg,), mistake)
    if arg in ("a", "b", "scale_a", "scale_b"):
        setattr(c, arg, value)
    else:
        c.kw[arg] = value
    return c


def _fp8(c: Call) -> bool:
    return c.scale_a is not None


NOT_TENSORS: tuple[Callable[[torch.Tensor], Any], ...] = (
    lambda t: None, lambda t: torch.zeros(t.shape).tolist(), lambda t: 1.0, lambda t: "a",
    lambda t: torch.zeros(t.shape).numpy(), lambda t: (t,))


@st.composite
def mistake(draw: st.DrawFn) -> Call:
    c = draw(base())
    dev = c.a.device.type
    elsewhere = torch.empty(c.b.shape[1], dtype=BF16, device="cpu" if dev == "meta" else "meta")  # (n,)
    m, k = c.a.shape
    n = c.b.shape[1]
    tensors = ["a", "b"] + (["scale_a", "scale_b"] if _fp8(c) else [])
    kind = draw(st.sampled_from(["not a tensor", "dtype", "rank", "K mismatch", "inner stride", "unaligned stride",
                                 "device", "scale shape", "scale dtype", "bias", "operand", "epilogue body",
                                 "out_dtype", "plan device", "use_fast_accum", "sparse"]))
    if kind == "not a tensor":
        arg = draw(st.sampled_from(tensors))
        make = draw(st.sampled_from(NOT_TENSORS))
        if c.fn == "plan" and arg.startswith("scale") and make(c.a) is None:
            other = "scale_b" if arg == "scale_a" else "scale_a"  # plan's scales: both or neither
            return _replace(c, arg, None, "one scale None", (arg, other))
        return _replace(c, arg, make(getattr(c, arg)), f"{arg} not a tensor")
    if kind == "dtype":
        arg = draw(st.sampled_from(["a", "b"]))
        bad = draw(st.sampled_from([torch.float32, torch.float64, torch.int8, torch.int32, torch.bool,
                                    torch.complex64] + ([BF16, torch.float16] if _fp8(c) else [E4, torch.float16])))
        if bad == torch.float16 and not _fp8(c):  # fp16 is valid for both; mixing it with bf16 is the mistake
            return _replace(c, arg, getattr(c, arg).to(bad), "mixed bf16/fp16", ("a", "b"))
        return _replace(c, arg, getattr(c, arg).to(bad), f"{arg} dtype {bad}", ("a", "b"))
    if kind == "rank":
        arg = draw(st.sampled_from(["a", "b"]))
        x = getattr(c, arg)
        bad = draw(st.sampled_from([x.reshape(-1), x.unsqueeze(0), x[0, 0]]))
        return _replace(c, arg, bad, f"{arg} rank {bad.dim()}", ("a", "b"))
    if kind == "K mismatch":
        dk = 16 * draw(st.integers(1, 2))
        b = _t((n, k + dk), c.b.dtype, dev).t() if _fp8(c) else _t((k + dk, n), c.b.dtype, dev)
        return _replace(c, "b", b, "K mismatch", ("a", "b"))
    if kind == "inner stride":  # neither dimension of stride 1
        arg = draw(st.sampled_from(["a", "b"]))
        x = getattr(c, arg)
        wide = _t((x.shape[0], 2 * x.shape[1]), x.dtype, dev) if x.stride(1) == 1 else \
            _t((2 * x.shape[1], x.shape[0]), x.dtype, dev).t()
        bad = wide[:, ::2] if x.stride(1) == 1 else wide[::2, :]
        assert min(bad.stride()) > 1
        return _replace(c, arg, bad, f"{arg} without a unit stride")
    if kind == "unaligned stride":  # the outer stride not a multiple of 16 bytes
        arg = draw(st.sampled_from(["a", "b"]))
        x = getattr(c, arg)
        pad = draw(st.integers(1, 7)) if x.element_size() == 2 else draw(st.integers(1, 15))
        if x.stride(1) == 1:
            bad = _t((x.shape[0], x.shape[1] + pad), x.dtype, dev)[:, : x.shape[1]]
        else:
            bad = _t((x.shape[1], x.shape[0] + pad), x.dtype, dev)[:, : x.shape[0]].t()
        return _replace(c, arg, bad, f"{arg} unaligned stride")
    if kind == "device":
        arg = draw(st.sampled_from(tensors[1:]))
        other = "cpu" if dev == "meta" else "meta"
        x = getattr(c, arg)
        moved = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=other)  # (meta has no data to copy)
        return _replace(c, arg, moved, f"{arg} on {other}", ("a", arg))
    if kind == "scale shape" and _fp8(c):
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        shape = draw(st.sampled_from([(m + 1, 1), (1, n + 1), (2,), (m, 2), (2, n), (1, 1, 1), (m, n), (n, 1)]))
        if (arg, shape) in (("scale_a", (n, 1)),) and n == m:
            shape = (m + 1, 1)
        kb = -(-k // 128)
        other = tuple(getattr(c, "scale_a" if arg == "scale_b" else "scale_b").shape)
        if arg == "scale_b" and other == (m, kb) and shape in ((kb, -(-n // 128)), (-(-kb // 4) * 4, -(-n // 128))):
            shape = (1, 1, 1)  # (with scale_a (M, K/128), that is blockwise 128x128's scale_b, padded as torch pads it)
        return _replace(c, arg, torch.ones(shape, device=dev), f"{arg} shape {shape}", ("scale_a", "scale_b"))
    if kind == "scale dtype" and _fp8(c):
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        bad = draw(st.sampled_from([torch.float64, BF16, torch.int32, torch.float16]))
        return _replace(c, arg, getattr(c, arg).to(bad), f"{arg} dtype {bad}", ("scale_a", "scale_b"))
    if kind == "bias":
        how = draw(st.sampled_from(["shape", "dtype", "device", "list"] if _fp8(c) else ["alone"]))
        bias = {"shape": lambda: _t(draw(st.sampled_from([(n + 1,), (m, n), (1,), (m,)])), BF16, dev)
                if n != m else _t((n + 1,), BF16, dev),
                "dtype": lambda: _t((n,), torch.int32, dev), "device": lambda: elsewhere,
                "list": lambda: [0.0] * n, "alone": lambda: _t((n,), BF16, dev)}[how]()
        return _replace(c, "bias", bias, f"bias {how}", ("bias", "a") if how == "device" else ("bias",))
    if kind == "operand":
        how = draw(st.sampled_from(["reserved name", "a string", "a list", "wrong shape", "3-D", "wrong device"]))
        # (names the generated kernel uses itself, or no identifier at all)
        name = draw(st.sampled_from(["c", "ep_cols", "sa", "sb", "c1", "1x", "lambda", "x-y"])) \
            if how == "reserved name" else "x"
        value = {"a string": "hello", "a list": [1.0, 2.0], "wrong shape": _t((n + 3,), BF16, dev),
                 "3-D": _t((2, m, n), BF16, dev), "wrong device": elsewhere,
                 "reserved name": _t((n,), BF16, dev)}[how]
        fn = eval(f"lambda acc, {name}: acc + {name}") if name.isidentifier() and name != "lambda" else \
            (lambda acc, **kw: acc + kw[name])  # noqa: S307 - the operand's name is the point
        c2 = _replace(c, name, value, f"operand {how}", (name,))
        c2.kw["epilogue"] = fn
        return c2
    if kind == "epilogue body":
        body = draw(st.sampled_from(["None", "()", "[]", "'x'", "acc.sum()", "(acc, None)", "acc[:, :1]",
                                     "acc.reshape(-1)", "(acc, 'x')", "acc.unsqueeze(0)"]))
        return _replace(c, "epilogue", eval(f"lambda acc: {body}"), f"epilogue returns {body}")  # noqa: S307
    if kind == "out_dtype":
        bad = draw(st.sampled_from([torch.int32, torch.int8, torch.bool, torch.complex64, torch.float64, "bf16"]))
        return _replace(c, "out_dtype", bad, f"out_dtype {bad}")
    if kind == "use_fast_accum" and _fp8(c):
        return _replace(c, "use_fast_accum", draw(st.sampled_from(["yes", None, [True]])), "use_fast_accum")
    if kind == "plan device":
        bad = draw(st.sampled_from(["H100", "B200", 0, "cuda", torch.device("cpu")]))
        return Call("plan", c.a, c.b, c.scale_a, c.scale_b, {"device": bad}, ("device",), f"device={bad!r}")
    arg = draw(st.sampled_from(["a", "b"]))  # sparse (also the fallback of fp8-only kinds on bf16)
    x = getattr(c, arg)
    sparse = x.float().to_sparse() if dev == "cpu" else None
    return _replace(c, arg, sparse, f"{arg} sparse or None")


@examples(400)
@given(mistake())
def test_an_invalid_input_raises_a_warploom_error_naming_it(call: Call) -> None:
    refused(call, call.mistake, call.names, COUNTS)
