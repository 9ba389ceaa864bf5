"""Property: a random invalid input to warploom.grouped_mm / scaled_grouped_mm / quantize, on CPU or meta tensors,
raises a warploom error that is a ValueError or TypeError and names the argument first; never another exception,
never a result. test_props_bad_input.py says the same of matmul, scaled_mm and plan.

Each example is a small valid problem with one mistake: a kind from GROUPED_KINDS that the problem can take
(`_kinds`), or one of quantize's. The grouped problems take every layout (M-grouped 2-D a with offs over a 3-D b;
masked 3-D a with masked_m; 3-D x 3-D batched; K-grouped 2-D x 2-D with offs), bf16 or fp8 (rowwise or blockwise
1x128 x 128x128 scales; MX e8m0 ones M-grouped), with or without a fused epilogue; the quantize problems a y, a
recipe and an fp8 dtype. `warploom.grouped.build` is replaced by one that plans the spec and raises
`Accepted`, so a mistake that got past the checks says so, and nothing is simulated; on meta tensors, which the
custom ops (no epilogue) answer with their fake implementations, `grouped.grouped_result` is replaced alike.
test_valid_problems_are_accepted runs the same problems unmistaken; a few of them through the CPU simulator too.
COUNTS tallies what was tried (printed with -s).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch
from hypothesis import given
from hypothesis import strategies as st
from props import examples, figures, refused, show_arg

import warploom
import warploom.grouped
from warploom.api import device_for
from warploom.checks_grouped import grouped_call
from warploom.device import DeviceInfo
from warploom.planner import plan_schedule
from warploom.quantization import QuantRecipe
from warploom.spec import GemmSpec

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn
I32 = torch.int32
COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures('invalid grouped inputs', COUNTS)


class Accepted(Exception):  # noqa: N818 - not an error: the checks passed and a kernel was about to be built
    """Raised by the stand-in for `warploom.grouped.build`: every check passed, and the planner planned the spec."""


@contextmanager
def _no_build() -> Iterator[None]:
    def accepted(spec: GemmSpec, device: DeviceInfo, *args: Any, **kwargs: Any) -> None:
        # (planned: a call the planner refuses was let through the checks, and its refusal names no argument)
        plan_schedule(spec, device)
        raise Accepted("the checks passed and the planner planned it")

    def fake_accepted(*args: Any, **kwargs: Any) -> None:
        # (meta tensors reach the custom ops' fake implementations, which check as the real call does but build
        # nothing: the same stand-in there)
        call = grouped_call(*args, **kwargs)
        accepted(call.spec, device_for(call.a))

    with mock.patch.object(warploom.grouped, "build", accepted), \
            mock.patch.object(warploom.grouped, "grouped_result", fake_accepted):
        yield


class Call:
    """One call: the entry point ("grouped_mm", "scaled_grouped_mm" or "quantize"), its arguments by name, the
    problem's layout ("m", "masked", "batched", "k"; "y" for quantize) and recipe ("none", "rowwise", "blockwise",
    "mx"),
    its sizes (G, M, N, K: M a's rows, M_max for a 3-D a), and the names a correct refusal may start with.
    (No dataclass: hypothesis would print its tensors whole.)"""

    def __init__(self, fn: str, args: dict[str, Any], layout: str, recipe: str = "none",
                 dims: tuple[int, int, int, int] = (0, 0, 0, 0), names: tuple[str, ...] = (),
                 mistake: str = "") -> None:
        self.fn, self.args, self.layout, self.recipe, self.dims = fn, args, layout, recipe, dims
        self.names, self.mistake = names, mistake

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={show_arg(v)}" for k, v in self.args.items())
        return f"{self.fn}({args}) [{self.layout}, {self.recipe}: {self.mistake}; expected to name {self.names}]"

    def __call__(self) -> Any:
        kw = dict(self.args)
        if self.fn == "quantize":
            return warploom.quantize(kw.pop("y"), **kw)
        a, b = kw.pop("a"), kw.pop("b")
        if self.fn == "scaled_grouped_mm":
            return warploom.scaled_grouped_mm(a, b, kw.pop("scale_a"), kw.pop("scale_b"), **kw)
        return warploom.grouped_mm(a, b, **kw)

    @property
    def device(self) -> str:
        return next(iter(self.args.values())).device.type

    def replace(self, arg: str, value: Any, mistake: str, names: tuple[str, ...] | None = None) -> Call:
        """This call with `arg` set to `value` (dropped where `value` is `DROP`)."""
        args = {k: v for k, v in self.args.items() if k != arg}
        if value is not DROP:
            args[arg] = value
        return Call(self.fn, args, self.layout, self.recipe, self.dims, names or (arg,), mistake)


DROP = object()


def _t(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    x = torch.empty(shape, device=device)
    if device != "meta":
        x.uniform_(-1, 1)
    return x.to(dtype)


def _i32(values: list[int], device: str) -> torch.Tensor:
    return torch.tensor(values, dtype=I32, device=device)


def _ends(draw: st.DrawFn, groups: int, total: int, grid: int = 1) -> list[int]:
    """Non-decreasing cumulative ends of `groups` groups within `total`, each a multiple of `grid` or `total`."""
    choices = sorted({*range(0, total + 1, grid), total})
    return sorted(draw(st.lists(st.sampled_from(choices), min_size=groups, max_size=groups)))


@st.composite
def grouped(draw: st.DrawFn) -> Call:
    """A valid grouped problem: G experts, N and K 16-aligned, bf16 (b K- or N-major) or fp8 (b K-major) with rowwise
    or blockwise scales (or M-grouped MX e8m0 ones, K 32-aligned), maybe out_dtype, optionally a fused epilogue adding
    a per-column operand x (N,)."""
    device = draw(st.sampled_from(["cpu", "meta"]))
    layout = draw(st.sampled_from(["m", "masked", "batched", "k"]))
    # (MX: M-grouped, on CPU, whose kernel is planned for a B200; meta tensors plan for an H100, which has no MX)
    mx = ["mx"] if layout == "m" and device == "cpu" else []
    recipe = draw(st.sampled_from(["none", "rowwise", "blockwise", *mx]))
    kq = 32 if recipe == "mx" else 16  # (MX: one e8m0 scale per 32 of K)
    g, n, k = draw(st.integers(1, 4)), 16 * draw(st.integers(1, 4)), kq * draw(st.integers(1, 64 // kq))
    m = draw(st.integers(1, 40)) if layout in ("m", "k") else draw(st.integers(1, 12))
    dt = E4 if recipe != "none" else draw(st.sampled_from([BF16, BF16, torch.float16]))
    k_major = recipe != "none" or draw(st.booleans())
    args: dict[str, Any] = {}
    if layout == "k":
        args["a"] = _t((m, k), dt, device)
        args["b"] = _t((n, k), dt, device).t() if k_major else _t((k, n), dt, device)
        args["offs"] = _i32(_ends(draw, g, k, 128 if recipe == "blockwise" else 1), device)
    else:
        args["a"] = _t((m, k), dt, device) if layout == "m" else _t((g, m, k), dt, device)
        args["b"] = _t((g, n, k), dt, device).transpose(-2, -1) if k_major else _t((g, k, n), dt, device)
        if layout == "m":
            args["offs"] = _i32(_ends(draw, g, m), device)
        elif layout == "masked":
            args["masked_m"] = _i32(draw(st.lists(st.integers(0, m), min_size=g, max_size=g)), device)
    kb, nb = -(-k // 128), -(-n // 128)
    if recipe == "rowwise":
        sa, sb = {"m": ((m,), (g, n)), "k": ((g * m,), (g * n,))}.get(layout, ((g, m), (g, n)))
    elif recipe == "blockwise":
        sa, sb = {"m": ((m, kb), (g, kb, nb)), "k": ((m, kb), (kb, nb))}.get(layout, ((g, m, kb), (g, kb, nb)))
    elif recipe == "mx":
        sa, sb = (m, k // 32), (g, n, k // 32)
    if recipe != "none":
        sdt = torch.float8_e8m0fnu if recipe == "mx" else torch.float32
        args["scale_a"], args["scale_b"] = (torch.ones(s, device=device).to(sdt) for s in (sa, sb))
        if recipe == "rowwise" and draw(st.booleans()):
            args["use_fast_accum"] = True
    out = draw(st.sampled_from([DROP, None, BF16] + ([torch.float16, torch.float32] if recipe == "none" else [])))
    if out is not DROP:
        args["out_dtype"] = out
    if recipe != "mx" and draw(st.booleans()):  # (MX grouped GEMMs take no epilogue: "MX epilogue")
        args["epilogue"] = lambda acc, x: acc + x
        args["x"] = _t((n,), BF16, device)
    fn = "grouped_mm" if recipe == "none" else "scaled_grouped_mm"
    return Call(fn, args, layout, recipe, (g, m, n, k))


@st.composite
def quantizing(draw: st.DrawFn) -> Call:
    """A valid quantize: y (M, N) (or 1-D, or 3-D) fp32/bf16/fp16, a recipe by name or enum, an fp8 dtype."""
    device = draw(st.sampled_from(["cpu", "meta"]))
    shape = draw(st.sampled_from([(draw(st.integers(1, 8)), draw(st.integers(1, 300))), (draw(st.integers(1, 300)),),
                                  (2, 3, draw(st.integers(1, 200)))]))
    args: dict[str, Any] = {"y": _t(shape, draw(st.sampled_from([torch.float32, BF16, torch.float16])), device)}
    if draw(st.booleans()):
        args["recipe"] = draw(st.sampled_from(["1x128", "rowwise", *QuantRecipe]))
    if draw(st.booleans()):
        args["dtype"] = draw(st.sampled_from([E4, torch.float8_e5m2]))
    return Call("quantize", args, "y")


def problem() -> st.SearchStrategy[Call]:
    return st.one_of(grouped(), grouped(), grouped(), quantizing())


def _other(device: str) -> str:
    return "cpu" if device == "meta" else "meta"


def _moved(x: torch.Tensor, device: str) -> torch.Tensor:
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)  # (meta has no data to copy)


NOT_TENSORS = (None, [1, 2], 1.0, "x", (1,))


@st.composite
def quantize_mistake(draw: st.DrawFn) -> Call:
    c = draw(quantizing())
    y, dev = c.args["y"], c.device
    kind = draw(st.sampled_from(["y dtype", "y 0-D", "y not a tensor", "y sparse", "recipe", "recipe type",
                                 "dtype"]))
    if kind == "y dtype":
        bad = draw(st.sampled_from([torch.int32, torch.int8, torch.bool, torch.float64, torch.complex64, E4,
                                    torch.float8_e5m2]))
        return c.replace("y", y.to(bad), f"y {bad}")
    if kind == "y 0-D":
        return c.replace("y", _t((), y.dtype, dev), "y 0-D")
    if kind == "y not a tensor":
        bad = draw(st.sampled_from([*NOT_TENSORS, torch.zeros(3, 4).numpy()]))
        return c.replace("y", bad, f"y {type(bad).__name__}")
    if kind == "y sparse":
        return c.replace("y", torch.zeros(4, 130).to_sparse(), "y sparse")
    if kind == "recipe":
        bad = draw(st.sampled_from(["1x64", "128x128", "ROWWISE", "blockwise", "", "1x128 "]))
        return c.replace("recipe", bad, f"recipe {bad!r}")
    if kind == "recipe type":
        bad = draw(st.sampled_from([128, None, ("1x128",), 1.0, E4]))
        return c.replace("recipe", bad, f"recipe {bad!r}")
    bad = draw(st.sampled_from([BF16, torch.float32, torch.int8, "e4m3", None, torch.float8_e4m3fnuz, [E4]]))
    return c.replace("dtype", bad, f"dtype {bad!r}")


GROUPED_KINDS = ["a dtype", "b dtype", "mixed 16-bit", "fp8 without scales", "scales None", "offs dtype",
                 "offs not a tensor", "offs values", "offs length", "offs empty", "offs 2-D", "offs device",
                 "offs missing", "offs with a 3-D a", "rank", "K mismatch", "experts mismatch", "a strides",
                 "b strides", "base address", "N unaligned", "masked_m", "masked_m values", "masked_m with 2-D a",
                 "both bounds", "scale shape", "scale dtype", "scale device", "scale not a tensor", "scale strides",
                 "mixed recipes", "use_fast_accum", "MX K", "MX epilogue", "bias", "out_dtype", "operand",
                 "unknown operand", "stray operand", "operand name", "negated view", "epilogue body",
                 "epilogue not callable", "quantize epilogue"]


def _kinds(c: Call, bound: str | None) -> list[str]:
    """The mistakes `c` can take: its layout's, its recipe's, and the bounds' values on CPU only (not checked on
    other devices: checks_grouped's docstring)."""
    g, scaled, cpu, x = c.dims[0], c.recipe != "none", c.device == "cpu", "x" in c.args
    takes = {"mixed 16-bit": not scaled, "offs dtype": bound, "offs not a tensor": bound, "offs 2-D": bound,
             "offs empty": bound, "offs device": bound, "offs values": "offs" in c.args and cpu,
             "offs missing": "offs" in c.args,
             # (a K-grouped call's offs gives its group count: a mistake only where the rowwise scales are per group)
             "offs length": bound and (c.layout != "k" or c.recipe == "rowwise"),
             "offs with a 3-D a": c.layout in ("masked", "batched"), "experts mismatch": c.layout != "k",
             "base address": cpu, "N unaligned": not scaled and c.layout != "k",
             "masked_m": c.layout in ("masked", "batched"), "masked_m values": c.layout == "masked" and cpu,
             "masked_m with 2-D a": c.layout in ("m", "k"), "both bounds": c.layout == "masked",
             "scale shape": scaled, "scale dtype": scaled, "scale device": scaled, "scale not a tensor": scaled,
             "scale strides": c.recipe == "rowwise" and c.layout == "m" and g > 1,  # (blockwise: any strides)
             "mixed recipes": scaled, "use_fast_accum": scaled, "MX K": c.recipe == "mx",
             "MX epilogue": c.recipe == "mx", "operand": x, "unknown operand": x, "quantize epilogue": c.layout == "k"}
    return [kind for kind in GROUPED_KINDS if takes.get(kind, True)]


@st.composite
def grouped_mistake(draw: st.DrawFn) -> Call:  # noqa: C901, PLR0911, PLR0912 - one branch a mistake
    c = draw(grouped())
    dev, (g, m, n, k) = c.device, c.dims
    a, b = c.args["a"], c.args["b"]
    scaled = c.recipe != "none"
    bound = "offs" if "offs" in c.args else "masked_m" if "masked_m" in c.args else None
    kind = draw(st.sampled_from(_kinds(c, bound)))
    if kind == "a dtype" or kind == "b dtype":
        arg = kind[0]
        bad = draw(st.sampled_from([torch.float32, torch.float64, torch.int8, torch.int32, torch.bool,
                                    torch.complex64] + ([BF16] if scaled else [E4, torch.float8_e5m2])))
        return c.replace(arg, c.args[arg].to(bad), f"{arg} {bad}", ("a", "b"))
    if kind == "mixed 16-bit":
        other = torch.float16 if a.dtype == BF16 else BF16
        return c.replace("b", b.to(other), "b's 16-bit dtype not a's", ("a", "b"))
    if kind == "fp8 without scales":  # grouped_mm of fp8 tensors
        c2 = c.replace("a", a.to(E4), "fp8 through grouped_mm", ("a", "b"))
        c2.fn, c2.args["b"] = "grouped_mm", b.to(E4)
        for s in ("scale_a", "scale_b", "use_fast_accum"):
            c2.args.pop(s, None)
        return c2
    if kind == "scales None":  # scaled_grouped_mm without its scales
        c2 = c.replace("scale_a", None, "scaled_grouped_mm with no scales", ("scale_a", "scale_b"))
        c2.fn, c2.args["scale_b"] = "scaled_grouped_mm", None
        return c2
    if kind == "offs dtype":
        bad = draw(st.sampled_from([torch.int64, torch.float32, torch.int16, torch.uint8, torch.bool]))
        return c.replace(bound, c.args[bound].to(bad), f"{bound} {bad}")
    if kind == "offs not a tensor":
        bad = draw(st.sampled_from([c.args[bound].tolist() if dev == "cpu" else [1] * g, 3, "offs",
                                    torch.zeros(g).numpy()]))
        return c.replace(bound, bad, f"{bound} a {type(bad).__name__}")
    if kind == "offs values":
        total = k if c.layout == "k" else m
        ends = c.args["offs"].tolist()
        how = draw(st.sampled_from(["decreasing", "past the end", "negative"] if g > 1 else ["past the end",
                                                                                            "negative"]))
        if how == "decreasing":
            i = draw(st.integers(1, g - 1))
            ends[i - 1], ends[i] = max(ends[i - 1], ends[i]) + 1, min(ends[i - 1], ends[i])
        elif how == "past the end":
            ends[-1] = total + draw(st.integers(1, 20))
        else:
            ends[0] = -draw(st.integers(1, 5))
        return c.replace("offs", _i32(ends, dev), f"offs {how} {ends}")
    if kind == "offs length":
        bad = draw(st.sampled_from([g + 1, g + 2] + ([g - 1] if g > 1 else [])))
        values = sorted(min(i, k if c.layout == "k" else m) for i in range(bad))
        names = ("scale_a", "scale_b") if c.layout == "k" else (bound, "b")
        return c.replace(bound, _i32(values, dev), f"{bound} of {bad} entries", names)
    if kind == "offs empty":
        return c.replace(bound, _i32([], dev), f"{bound} empty", (bound, "b"))
    if kind == "offs 2-D":
        return c.replace(bound, c.args[bound].reshape(1, g), f"{bound} (1, G)")
    if kind == "offs device":
        return c.replace(bound, _moved(c.args[bound], _other(dev)), f"{bound} on {_other(dev)}")
    if kind == "offs missing":
        return c.replace("offs", DROP if draw(st.booleans()) else None, "offs missing")
    if kind == "offs with a 3-D a":
        return c.replace("offs", _i32([m] * g, dev), "offs with a 3-D a", ("offs", "masked_m"))
    if kind == "rank":
        arg = draw(st.sampled_from(["a", "b"]))
        x = c.args[arg]
        bad = draw(st.sampled_from([x.reshape(-1), x.unsqueeze(0)] + ([x.unsqueeze(0).unsqueeze(0)]
                                                                      if x.dim() == 2 else [])))
        if c.layout == "k" and arg == "b" and bad.dim() == 3 or c.layout == "m" and arg == "a" and bad.dim() == 3:
            bad = bad.unsqueeze(0)  # (3-D: a valid form's rank; 4-D is the mistake)
        return c.replace(arg, bad, f"{arg} rank {bad.dim()}", ("a", "b"))
    if kind == "K mismatch":
        k2 = k + 16 * draw(st.integers(1, 2))
        if c.layout == "k":
            bad = _t((n, k2), b.dtype, dev).t() if b.stride(0) == 1 else _t((k2, n), b.dtype, dev)
        else:
            bad = _t((g, n, k2), b.dtype, dev).transpose(-2, -1) if b.stride(1) == 1 else _t((g, k2, n), b.dtype, dev)
        return c.replace("b", bad, "K mismatch", ("a", "b"))
    if kind == "experts mismatch":
        e = draw(st.sampled_from([0, g + 1]))
        bad = _t((e, n, k), b.dtype, dev).transpose(-2, -1)
        return c.replace("b", bad, f"b with {e} experts", ("a", "b", "offs", "masked_m"))
    if kind == "a strides":
        rows = a.shape[:-1].numel()  # (one row has no row stride to get wrong)
        how = draw(st.sampled_from(["inner"] + (["row"] if rows > 1 else []) +
                                   (["3-D order"] if a.dim() == 3 and g > 1 and m > 1 else [])))
        if how == "inner":  # K of stride 2
            bad = _t((*a.shape[:-1], 2 * k), a.dtype, dev)[..., ::2]
        elif how == "row":  # rows not on the 16-byte grid
            pad = draw(st.integers(1, 15 if a.element_size() == 1 else 7))
            bad = _t((*a.shape[:-1], k + pad), a.dtype, dev)[..., :k]
        else:  # (M_max, G, K) storage seen as (G, M_max, K)
            bad = _t((m, g, k), a.dtype, dev).transpose(0, 1)
        return c.replace("a", bad, f"a strides {how}")
    if kind == "b strides":
        how = draw(st.sampled_from(["no unit stride", "row"] + (["N-major fp8"] if scaled else []) +
                                   (["expert"] if c.layout != "k" and g > 1 else [])))
        if how == "no unit stride":
            bad = _t((*b.shape[:-1], 2 * n), b.dtype, dev)[..., ::2]
        elif how == "N-major fp8":
            bad = b.contiguous()
        elif how == "row":  # K-major with rows of K + pad
            pad = draw(st.integers(1, 15 if b.element_size() == 1 else 7))
            bad = _t((*b.shape[:-2], n, k + pad), b.dtype, dev)[..., :k].transpose(-2, -1)
        else:  # an expert stride off the 16-byte grid
            bad = torch.empty_strided((g, n, k), (n * k + 1, k, 1), dtype=b.dtype, device=dev).transpose(-2, -1)
        return c.replace("b", bad, f"b strides {how}")
    if kind == "base address":
        arg = draw(st.sampled_from(["a", "b"]))
        x = c.args[arg]
        flat = torch.zeros(x.numel() + 16, dtype=x.dtype)[1:1 + x.numel()]
        return c.replace(arg, flat.as_strided(x.shape, x.stride()), f"{arg} base address off the grid")
    if kind == "N unaligned":
        n2 = n - draw(st.sampled_from([1, 3, 5, 7]))  # (odd: off the 16-byte grid for a 16- or 32-bit result)
        return c.replace("b", _t((g, n2, k), b.dtype, dev).transpose(-2, -1), f"N = {n2}", ("b",))
    if kind == "masked_m":
        if c.layout == "batched":
            return c.replace("masked_m", _i32([m + 1] * g, dev) if dev == "cpu" else _i32([1] * (g + 1), dev),
                             "batched with bad masked_m")
        bad = draw(st.sampled_from([_i32([1] * (g + 1), dev), c.args["masked_m"].long(),
                                    c.args["masked_m"].float(), [1] * g]))
        return c.replace("masked_m", bad, "masked_m shape, dtype or type")
    if kind == "masked_m values":
        counts = c.args["masked_m"].tolist()
        i = draw(st.integers(0, g - 1))
        counts[i] = draw(st.sampled_from([m + 1, m + 100, -1]))
        return c.replace("masked_m", _i32(counts, dev), f"masked_m {counts} (M_max {m})")
    if kind == "masked_m with 2-D a":
        return c.replace("masked_m", _i32([0] * g, dev), "masked_m with a 2-D a", ("masked_m", "offs"))
    if kind == "both bounds":
        return c.replace("offs", _i32([0] * g, dev), "offs and masked_m", ("offs", "masked_m"))
    if kind == "scale shape":
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        s = c.args[arg]
        bad = draw(st.sampled_from([(s.shape[0] + 1, *s.shape[1:]), (*s.shape, 1), (s.numel() + 2,), (1, 1, 1, 1),
                                    (*s.shape[:-1], s.shape[-1] + 1)]))
        return c.replace(arg, torch.ones(bad, device=dev), f"{arg} shape {bad}", ("scale_a", "scale_b"))
    if kind == "scale dtype":
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        bad = draw(st.sampled_from([torch.float64, BF16, torch.float16, torch.int32,
                                    torch.float32 if c.recipe == "mx" else torch.float8_e8m0fnu]))
        return c.replace(arg, c.args[arg].to(bad), f"{arg} {bad}", ("scale_a", "scale_b"))
    if kind == "scale device":
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        return c.replace(arg, _moved(c.args[arg], _other(dev)), f"{arg} on {_other(dev)}")
    if kind == "scale not a tensor":
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        return c.replace(arg, draw(st.sampled_from([*NOT_TENSORS, 2])), f"{arg} not a tensor")
    if kind == "scale strides":
        return c.replace("scale_b", torch.ones(n, g, device=dev).t(), "scale_b column-major")
    if kind == "mixed recipes":
        other = {"rowwise": (torch.ones(m, 1, 1), torch.ones(g, 1, 1)), "blockwise": (torch.ones(3), torch.ones(2)),
                 "mx": (torch.ones(m, k // 32), torch.ones(g, n, k // 32))}  # (MX's shapes, float32)
        arg = draw(st.sampled_from(["scale_a", "scale_b"]))
        bad = other[c.recipe][arg == "scale_b"].to(dev)
        return c.replace(arg, bad, f"{arg} of another recipe", ("scale_a", "scale_b"))
    if kind == "use_fast_accum":
        bad = True if c.recipe in ("blockwise", "mx") else draw(st.sampled_from(["yes", None, 1, [True]]))
        return c.replace("use_fast_accum", bad, f"use_fast_accum={bad!r}")
    if kind == "bias":  # torch's bias: refused (scaled_mm's reserved name, or an operand with no epilogue)
        c2 = c.replace("bias", _t((n,), BF16, dev), "bias", ("bias", "epilogue") if c.recipe == "mx" else ("bias",))
        if scaled and draw(st.booleans()):
            c2.args["epilogue"] = lambda acc, bias: acc + bias
        elif not scaled:
            c2.args.pop("epilogue", None)
            c2.args.pop("x", None)
        return c2
    if kind == "MX K":  # (one e8m0 scale per 32 of K)
        k2 = 16 * draw(st.sampled_from([1, 3]))
        c2 = c.replace("a", _t((m, k2), a.dtype, dev), f"MX with K = {k2}", ("a",))
        c2.args["b"] = _t((g, n, k2), b.dtype, dev).transpose(-2, -1)
        c2.args["scale_a"] = torch.ones(m, 1, device=dev).to(torch.float8_e8m0fnu)
        c2.args["scale_b"] = torch.ones(g, n, 1, device=dev).to(torch.float8_e8m0fnu)
        return c2
    if kind == "MX epilogue":
        c2 = c.replace("epilogue", lambda acc, x: acc + x, "an epilogue on MX")
        c2.args["x"] = _t((n,), BF16, dev)
        return c2
    if kind == "out_dtype":
        bad = draw(st.sampled_from([torch.int32, torch.int8, torch.bool, torch.complex64, torch.float64, E4, "bf16",
                                    [BF16]] + ([torch.float16, torch.float32] if scaled else [])))
        return c.replace("out_dtype", bad, f"out_dtype {bad}")
    if kind == "operand":
        how = draw(st.sampled_from(["a string", "a list", "wrong shape", "4-D", "wrong device", "integer",
                                    "wrong experts", "dense, a row too many", "sparse"]))
        bad = {"a string": "hello", "a list": [1.0] * n, "wrong shape": _t((n + 3,), BF16, dev),
               "4-D": _t((1, 1, 1, n), BF16, dev) if c.layout in ("m",) else _t((1, g, m, n, 1), BF16, dev),
               "wrong device": _t((n,), BF16, _other(dev)), "integer": torch.ones(n, dtype=I32, device=dev),
               "wrong experts": _t((g + 1, 1, n), BF16, dev),
               "dense, a row too many": _t((m + 1, n) if c.layout == "m" else (g, m + 1, n), BF16, dev),
               "sparse": torch.zeros((m, n) if c.layout == "m" else (g, m, n)).to_sparse()}[how]
        return c.replace("x", bad, f"operand {how}")
    if kind == "operand name":  # (names the generated kernel uses itself, scaled_mm's own, or no identifier)
        name = draw(st.sampled_from(["c", "ep_cols", "sa", "sb", "c1", "1x", "lambda", "x-y"] +
                                    (["scale_a_", "bias"] if scaled else [])))
        p = name.rstrip("_")  # (fn's parameter scale_a, given as scale_a_: scale_a= is the call's own argument)
        fn = eval(f"lambda acc, {p}: acc + {p}") if name.isidentifier() and name != "lambda" else \
            (lambda acc, **kw: acc + kw[name])  # noqa: S307 - the operand's name is the point
        c2 = c.replace("x", DROP, f"operand named {name}", (name, p, "epilogue"))
        c2.args["epilogue"], c2.args[name] = fn, _t((n,), BF16, dev)
        return c2
    if kind == "negated view":  # (kernels read the storage, which holds the values un-negated)
        arg = draw(st.sampled_from(["a", "b"] + (["scale_a", "scale_b"] if scaled else [])))
        return c.replace(arg, torch._neg_view(c.args[arg]), f"{arg} a negated view")
    if kind == "unknown operand":  # fn takes x; y came
        c2 = c.replace("x", DROP, "fn's operand missing, another given", ("x", "y", "epilogue"))
        c2.args["y"] = _t((n,), BF16, dev)
        return c2
    if kind == "stray operand":  # an operand without an epilogue
        c2 = c.replace("epilogue", DROP, "operand with no epilogue", ("x",))
        c2.args["x"] = _t((n,), BF16, dev)
        return c2
    if kind == "epilogue body":
        body = draw(st.sampled_from(["None", "()", "[]", "'x'", "acc.sum()", "acc[:, :1]", "acc.reshape(-1)",
                                     "acc.unsqueeze(0)", "(acc, None)", "warploom.quantize(acc, recipe='1x64')",
                                     "warploom.quantize(acc, recipe=5)", "warploom.quantize(acc, dtype=torch.int8)",
                                     "warploom.quantize(acc)[0] + 1"]))
        c2 = c.replace("epilogue", eval(f"lambda acc: {body}"), f"epilogue returns {body}",  # noqa: S307
                       ("epilogue", "recipe", "dtype"))
        c2.args.pop("x", None)
        return c2
    if kind == "epilogue not callable":
        return c.replace("epilogue", draw(st.sampled_from(["silu", 1, torch.nn.functional])), "epilogue not callable")
    assert kind == "quantize epilogue"  # (refused on a K-grouped GEMM: quantize its result)
    c2 = c.replace("epilogue", lambda acc: warploom.quantize(acc), "quantize epilogue on K-grouped")
    c2.args.pop("x", None)
    return c2


def mistake() -> st.SearchStrategy[Call]:
    return st.one_of(grouped_mistake(), grouped_mistake(), grouped_mistake(), quantize_mistake())


@examples(500)
@given(mistake())
def test_an_invalid_grouped_input_raises_a_warploom_error_naming_it(call: Call) -> None:
    def run() -> Any:
        with _no_build():
            return call()

    e = refused(run, call.mistake, call.names, COUNTS)
    assert "expected" in str(e) and "Fix: " in str(e), f"{call.mistake}: no expected or no fix: {e}"


@examples(200)
@given(problem())
def test_valid_problems_are_accepted(call: Call) -> None:
    """The builders' problems unmistaken: every check passes (a grouped call reaches its build; quantize returns)."""
    COUNTS["valid"] += 1
    try:
        with _no_build():
            out = call()
    except Accepted:
        return
    assert call.fn == "quantize", f"{call.fn} returned without building a kernel"
    q, s = out
    assert q.shape == call.args["y"].shape and s.dtype == torch.float32


def _reference(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 result of a valid grouped problem (its scales are ones) and the mask of its rows that are written."""
    args = call.args
    a, b = args["a"].float(), args["b"].float()
    g, m, n, _ = call.dims
    if call.layout == "k":
        ends = [0, *args["offs"].tolist()]
        out = torch.stack([a[:, ends[i]:ends[i + 1]] @ b[ends[i]:ends[i + 1]] for i in range(g)])
        written = torch.ones(g, m, 1, dtype=torch.bool)
    elif call.layout == "m":
        ends = [0, *args["offs"].tolist()]
        out, written = torch.zeros(m, n), torch.zeros(m, 1, dtype=torch.bool)
        for i in range(g):
            out[ends[i]:ends[i + 1]] = a[ends[i]:ends[i + 1]] @ b[i]
            written[ends[i]:ends[i + 1]] = True
    else:
        out = a @ b
        counts = args["masked_m"].tolist() if "masked_m" in args else [m] * g
        written = torch.arange(m)[None, :, None] < torch.tensor(counts)[:, None, None]
    if "x" in args:
        out = out + args["x"].float()
    return out, written


@examples(12)
@given(grouped().filter(lambda c: c.device == "cpu"))
def test_valid_problems_run_on_the_simulator(call: Call) -> None:
    """A few of them through the CPU simulator: the reference's values in the rows the layout writes."""
    out = call()
    ref, written = _reference(call)
    assert out.shape == ref.shape
    torch.testing.assert_close(torch.where(written, out.float(), 0), torch.where(written, ref, 0), atol=0.05, rtol=0.02)
