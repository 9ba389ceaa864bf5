"""The Gluon emitter: its statements run on the CPU against reference.evaluate, read as golden text, and compile.

The emitted lines are plain Python over ``gl.*`` calls, so they also run with a stand-in ``gl`` whose functions
are torch's (`TorchGl`): that checks each op's formula and its NaN and rounding behaviour against the reference
without a GPU. The stand-in refuses a NaN-dropping maximum, so the emitter must ask for NaN propagation. One
kernel with every op is cross-compiled for sm_90a to prove the text is valid Gluon.
"""

# ruff: noqa: E501 - golden lines are as long as the printer and emitter write them

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import expecttest
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import standalone
from warploom.epilogue.builder import Builder
from warploom.epilogue.capture import capture
from warploom.epilogue.classify import classify
from warploom.epilogue.gluon import emit, literal, load_operand
from warploom.epilogue.operands import OperandKind, OperandSpec
from warploom.epilogue.reference import evaluate

M, N = 6, 8
BF16, FP16, E4M3 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
_ALL = object()  # stands for tl.PropagateNan.ALL


def _t(v: Any) -> torch.Tensor:
    return v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float32)


def _nan_propagating(f: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def g(x: Any, y: Any, propagate_nan: Any = None) -> torch.Tensor:
        assert propagate_nan is _ALL, "emitted gl.maximum/minimum must propagate NaN, as torch does"
        return f(_t(x), _t(y))
    return g


TorchGl = types.SimpleNamespace(
    float32=torch.float32, bfloat16=BF16, float16=FP16, float8e4nv=E4M3, float8e5=torch.float8_e5m2,
    abs=torch.abs, exp=torch.exp, log=torch.log, erf=torch.erf, rsqrt=torch.rsqrt,
    sqrt_rn=lambda x: torch.sqrt(x.double()).float(),  # correctly rounded, like sqrt.rn.f32
    maximum=_nan_propagating(torch.maximum), minimum=_nan_propagating(torch.minimum),
    div_rn=lambda x, y: torch.div(_t(x), _t(y)),
    where=lambda c, x, y: torch.where(_t(c), _t(x), _t(y)),
    broadcast=lambda x, y: torch.broadcast_tensors(_t(x), _t(y)),
    full_like=lambda x, v: torch.full_like(x, v),
    extra=types.SimpleNamespace(libdevice=types.SimpleNamespace(tanh=torch.tanh, pow=torch.pow)),
)
TorchTl = types.SimpleNamespace(PropagateNan=types.SimpleNamespace(ALL=_ALL))


def registers(kind: OperandKind, t: torch.Tensor) -> torch.Tensor:
    """What load_operand leaves in registers for a whole-output "tile": [M, N], [M, 1], [1, N] or a scalar."""
    full = torch.broadcast_to(t, (M, N)).float()
    return {OperandKind.DENSE: full, OperandKind.COLUMN: full[:, :1], OperandKind.ROW: full[:1, :],
            OperandKind.SCALAR: full[0, 0]}[kind]


def run_emitted(g: eg.EpilogueGraph, acc: torch.Tensor, ops: dict[str, torch.Tensor],
                out_dtype: DType) -> tuple[torch.Tensor, ...]:
    names = {s.name: f"{s.name}_v" for s in g.operands}
    outs = [f"out{i}" for i in range(len(g.outputs))]
    env: dict[str, Any] = {"acc": acc.clone(), **{names[s.name]: registers(s.kind, ops[s.name]) for s in g.operands}}
    exec("\n".join(emit(g, "acc", names, outs, out_dtype=out_dtype)), {"gl": TorchGl, "tl": TorchTl}, env)
    return tuple(env[o] for o in outs)


def operands() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {"b": torch.randn(N, generator=g).to(BF16), "c": torch.randn(M, 1, generator=g),
            "r": torch.randn(M, N, generator=g).to(FP16), "s": torch.randn((), generator=g)}


def special_acc() -> torch.Tensor:
    """Random values, plus the edges: 0, -0, +-inf, NaN, huge, tiny, negative for log/sqrt."""
    acc = torch.randn(M, N, generator=torch.Generator().manual_seed(1)) * 3
    acc.view(-1)[:10] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e30, -1e30, 1e-30, -2.0, 600.0])
    return acc


# (id, function, exact): exact ops must agree bit for bit; the transcendental ones to a few ulp.
OPS: list[tuple[str, Callable[..., Any], bool]] = [
    ("add", lambda acc, b: acc + b, True),
    ("sub", lambda acc, c: c - acc, True),
    ("mul", lambda acc, s: acc * s, True),
    ("div", lambda acc, r: acc / r, True),
    ("rdiv", lambda acc: 3 / acc, True),
    ("neg", lambda acc: -acc, True),
    ("abs", lambda acc: acc.abs(), True),
    ("maximum", lambda acc, b: torch.maximum(acc, b), True),
    ("minimum", lambda acc, c: torch.minimum(c, acc), True),
    ("clamp", lambda acc: acc.clamp(-1, 2), True),
    ("clamp_min", lambda acc: acc.clamp(min=0.5), True),
    ("clamp_max", lambda acc: acc.clamp(max=-0.5), True),
    ("where_lt", lambda acc, s: torch.where(acc < s, acc, 0.0), True),
    ("where_le", lambda acc: torch.where(acc <= 1, 1.0, acc), True),
    ("where_gt", lambda acc, b: torch.where(acc > b, b, acc), True),
    ("where_ge", lambda acc: torch.where(acc >= 0, acc, -acc), True),
    ("where_eq", lambda acc: torch.where(acc == 0, 1.0, acc), True),
    ("where_ne", lambda acc, c: torch.where(acc != acc, c, acc), True),
    ("relu", lambda acc: torch.relu(acc), True),
    # relu(-0.0) is -0.0 in torch: a max against 0.0 gives +0.0, and the sign shows through a division (found by
    # test_random_graphs_emulated).
    ("rdiv_relu", lambda acc: 3 / torch.relu(acc), True),
    ("gelu", lambda acc: F.gelu(acc), False),
    ("gelu_tanh", lambda acc: F.gelu(acc, approximate="tanh"), False),
    ("silu", lambda acc: F.silu(acc), False),
    ("sigmoid", lambda acc: torch.sigmoid(acc), False),
    ("tanh", lambda acc: torch.tanh(acc), False),
    ("exp", lambda acc: torch.exp(acc), False),
    ("log", lambda acc: torch.log(acc), False),
    ("sqrt", lambda acc: torch.sqrt(acc), True),
    ("rsqrt", lambda acc: torch.rsqrt(acc), False),
    ("pow0", lambda acc: acc ** 0, True),
    ("pow1", lambda acc: acc ** 1, True),
    ("pow2", lambda acc: acc ** 2, True),
    ("pow3", lambda acc: acc ** 3, True),
    ("pow_half", lambda acc: acc ** 0.5, True),
    ("pow_neg_half", lambda acc: acc ** -0.5, False),
    ("pow_neg1", lambda acc: acc ** -1, True),
    ("pow_neg2", lambda acc: acc ** -2, True),
    ("pow_general", lambda acc: acc ** 2.5, False),
    ("pow_int_odd", lambda acc: acc ** 5, False),
    ("cast_bf16", lambda acc: acc.to(BF16).float() + 1, True),
    ("cast_fp16", lambda acc: acc.half().float() * 3, True),
    ("cast_e4m3", lambda acc: acc.to(E4M3).float() - 1, True),
    ("out_bf16", lambda acc: acc.to(BF16), True),
    ("out_fp16", lambda acc: acc.half(), True),
    ("out_fp32", lambda acc: acc.float(), True),
    ("out_e4m3", lambda acc: acc.to(E4M3), True),
    ("out_row", lambda acc, b: (acc, b * 2), True),
    ("out_scalar", lambda acc, s: (acc, s + 1), True),
    ("out_operand", lambda acc, c: (acc, c), True),
    ("bool_promote", lambda acc: (acc > 0) * acc, True),
]


def graph_of(fn: Callable[..., Any]) -> eg.EpilogueGraph:
    import inspect

    ops = operands()
    return capture(fn, {k: ops[k] for k in list(inspect.signature(fn).parameters)[1:]}, out_shape=(M, N))


@pytest.mark.parametrize("out_dtype", [DType.FP32, DType.BF16])
@pytest.mark.parametrize("fn,exact", [(f, e) for _, f, e in OPS], ids=[i for i, _, _ in OPS])
def test_emitted_code_matches_reference(fn: Callable[..., Any], exact: bool, out_dtype: DType) -> None:
    g = graph_of(fn)
    acc = special_acc()
    got = run_emitted(g, acc, operands(), out_dtype)
    want = evaluate(g, acc, operands(), out_dtype)
    for x, y in zip(got, want, strict=True):
        assert x.shape == (M, N) and x.dtype == y.dtype
        if exact:
            torch.testing.assert_close(x.float(), y.float(), rtol=0, atol=0, equal_nan=True)
        else:
            # atol: 1 + erf(x / sqrt 2) cancels for negative x in torch's gelu as in the GPU formula, so the two
            # erf implementations agree to ~1e-7 absolute there, not relative
            torch.testing.assert_close(x.float(), y.float(), rtol=4e-6, atol=1e-6, equal_nan=True)


def test_every_op_is_covered() -> None:
    seen = {getattr(nd, "op", type(nd)) for _, f, _ in OPS for nd in graph_of(f).nodes}
    assert {*eg.UnaryOp, *eg.BinaryOp, *eg.CompareOp, eg.Where, eg.Cast, eg.Clamp, eg.Pow} <= seen


def test_literals() -> None:
    assert [literal(v) for v in (0.5, -0.0, 1e-30, math.inf, -math.inf, math.nan, True)] == \
        ["0.5", "-0.0", "1e-30", 'float("inf")', 'float("-inf")', 'float("nan")', "True"]


def test_non_finite_constants_run() -> None:
    g = graph_of(lambda acc: torch.where(acc > 0, acc, float("-inf")).clamp(max=float("inf")) + float("nan") * 0)
    got, want = run_emitted(g, special_acc(), {}, DType.FP32), evaluate(g, special_acc(), {})
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Random graphs, built node by node


SPECS = [classify(k, v, (M, N)) for k, v in operands().items()]


@st.composite
def graphs(draw: st.DrawFn) -> eg.EpilogueGraph:
    b = Builder(SPECS)
    floats = [b.acc()] + [b.operand(s.name) for s in SPECS if draw(st.booleans())]
    for _ in range(draw(st.integers(1, 10))):
        pick = st.sampled_from(floats)
        x, y = draw(pick), draw(st.one_of(pick, st.sampled_from([0.0, -1.5, 2.0]).map(b.const)))
        kind = draw(st.sampled_from(["unary", "binary", "where", "cast", "clamp", "pow"]))
        if kind == "unary":
            nd: eg.Node = eg.Unary(draw(st.sampled_from(list(eg.UnaryOp))), x)
        elif kind == "binary":
            nd = eg.Binary(draw(st.sampled_from(list(eg.BinaryOp))), x, y)
        elif kind == "where":
            cond = b.add(eg.Compare(draw(st.sampled_from(list(eg.CompareOp))), x, y))
            nd = eg.Where(cond, draw(pick), draw(pick))
        elif kind == "cast":
            nd = eg.Cast(x, draw(st.sampled_from(eg.CAST_DTYPES)))
        elif kind == "clamp":
            lo, hi = draw(st.sampled_from([(None, 1.0), (-1.0, None), (-2.0, 0.5), (1.0, -1.0)]))
            nd = eg.Clamp(x, lo, hi)
        else:
            nd = eg.Pow(x, draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.5, 4.0, -3.0])))
        floats.append(b.add(nd))
    outs = draw(st.lists(st.sampled_from(floats), min_size=1, max_size=3))
    return b.finish([eg.Output(o, draw(st.sampled_from([None, *eg.OUTPUT_DTYPES]))) for o in outs])


def test_gelu_zero_signs_follow_the_gpu() -> None:
    """Hypothesis found it: gelu(x) ** -0.5 where gelu(x) is a zero. The emitted formula (torch's CUDA kernel's,
    x * 0.5 * (1 + erf(x / sqrt 2))) gives -0.0 at -0.0 and below about -6, so -inf; torch's CPU gelu gives +0.0
    there. The reference follows the GPU (its sign of zero), so both agree."""
    g = eg.EpilogueGraph(nodes=(eg.Acc(), eg.Unary(eg.UnaryOp.GELU_ERF, 0), eg.Pow(1, -0.5)),
                         outputs=(eg.Output(2),))
    acc = torch.zeros(M, N)
    acc[0, :4] = torch.tensor([-0.0, 0.0, -6.7366734, -1e30])
    (got,), (want,) = run_emitted(g, acc, {}, DType.FP32), evaluate(g, acc, {}, DType.FP32)
    assert got[0, :4].tolist() == want[0, :4].tolist() == [-math.inf, math.inf, -math.inf, -math.inf]


def test_tanh_gelu_cancels_to_zero_where_torch_does() -> None:
    """Hypothesis found it: tanh GELU is emitted as x * sigmoid(2u), which is a tiny negative (1e-15) where torch's
    0.5 x (1 + tanh(u)) is -0.0 (fp32 tanh(u) exactly -1, below about x = -5.15); then a later sqrt gave NaN
    against 0. The emitted code returns x * 0 there, as torch does; just above, both are tiny negatives."""
    g = eg.EpilogueGraph(nodes=(eg.Acc(), eg.Unary(eg.UnaryOp.GELU_TANH, 0), eg.Pow(1, 0.5)), outputs=(eg.Output(2),))
    acc = torch.zeros(M, N)
    acc[0, :6] = torch.tensor([-5.2, -7.0, -100.0, -1e30, -5.0, 1.0])
    (got,), (want,) = run_emitted(g, acc, {}, DType.FP32), evaluate(g, acc, {}, DType.FP32)
    assert got[0, :4].tolist() == want[0, :4].tolist() == [-0.0, -0.0, -0.0, -0.0]
    assert got[0, 4].isnan() and want[0, 4].isnan()  # sqrt of a tiny negative, in both
    torch.testing.assert_close(got[0, 5], want[0, 5], rtol=1e-6, atol=0)


@settings(deadline=None, max_examples=200)
@given(graphs())
def test_random_graphs_emulated(g: eg.EpilogueGraph) -> None:
    acc = special_acc()
    got, want = run_emitted(g, acc, operands(), DType.BF16), evaluate(g, acc, operands(), DType.BF16)
    # How far a few fp32 ulp in the accumulator move each output: the graph's own conditioning (1 / gelu(x) near
    # gelu's zero turns an ulp into a relative 1e-3), which fp32 outputs are allowed on top of their tolerance.
    nudged = evaluate(g, acc * (1 + 4 * 2.0**-23), operands(), DType.BF16)
    for x, y, z in zip(got, want, nudged, strict=True):
        assert x.dtype == y.dtype
        # Transcendental formulas differ from torch's by a few fp32 ulp, which a later cast can round either
        # way, so compare at the stored precision plus a little.
        tol = {BF16: 1e-2, FP16: 2e-3, E4M3: 0.13, torch.float8_e5m2: 0.26, torch.float32: 1e-5}[x.dtype]
        if x.dtype == torch.float32:
            slack = (z - y).abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
            close = ((x - y).abs() <= tol * y.abs() + 1e-5 + slack) | (x == y) | (x.isnan() & y.isnan())
            assert bool(close.all()), (x[~close], y[~close], slack[~close])
        else:
            torch.testing.assert_close(x.float(), y.float(), rtol=tol, atol=1e-5, equal_nan=True)


# ---------------------------------------------------------------------------------------------
# Golden text and compilation


class TestGolden(expecttest.TestCase):
    def test_headline(self) -> None:
        g = capture(lambda acc, bias, residual: (F.gelu(acc + bias, approximate="tanh") * 0.5 + residual,
                                                 (acc + bias).to(torch.float8_e4m3fn)),
                    {"bias": torch.empty(N, dtype=BF16), "residual": torch.empty(M, N)}, out_shape=(M, N))
        lines = emit(g, "acc", {"bias": "bias_r", "residual": "res_r"}, ["y", "pre"], out_dtype=DType.BF16)
        self.assertExpectedInline("\n".join(lines), """\
ep_0 = acc + bias_r  # %0 = add acc, bias
ep_1 = gl.where(1.5957691216057308 * (ep_0 + 0.044715 * ep_0 * ep_0 * ep_0) <= -18.02168083190918, ep_0 * 0.0, ep_0 / (1.0 + gl.exp(-1.5957691216057308 * (ep_0 + 0.044715 * ep_0 * ep_0 * ep_0))))  # %1 = gelu_tanh %0
ep_2 = ep_1 * 0.5  # %2 = mul %1, 0.5
ep_3 = ep_2 + res_r  # %3 = add %2, residual
y = ep_3.to(gl.bfloat16)  # output 0: %3 as bf16 (out_dtype)
pre = gl.minimum(gl.maximum(ep_0, -448.0, propagate_nan=tl.PropagateNan.ALL), 448.0, propagate_nan=tl.PropagateNan.ALL).to(gl.float8e4nv)  # output 1: %0 as e4m3""")

    def test_operand_loads(self) -> None:
        ops = {"d": torch.empty(M, N), "c": torch.empty(M, 1), "r": torch.empty(N), "s": torch.empty(())}
        text = "\n".join(load_operand(classify(k, v, (M, N)), f"{k}_r", f"{k}_ptr", offs_m="offs_m", offs_n="offs_n",
                                      mask_m="mask_m", mask_n="mask_n", rs=f"{k}_rs", cs=f"{k}_cs")
                         for k, v in ops.items())
        self.assertExpectedInline(text, """\
d_r = gl.load(d_ptr + gl.expand_dims(offs_m * d_rs, 1) + gl.expand_dims(offs_n, 0), mask=gl.expand_dims(mask_m, 1) & gl.expand_dims(mask_n, 0), other=0.0).to(gl.float32)  # d: dense, [BM, BN]
c_r = gl.expand_dims(gl.load(c_ptr + offs_m * c_rs, mask=mask_m, other=0.0).to(gl.float32), 1)  # c: column, [BM, 1]
r_r = gl.expand_dims(gl.load(r_ptr + offs_n * r_cs, mask=mask_n, other=0.0).to(gl.float32), 0)  # r: row, [1, BN]
s_r = gl.load(s_ptr).to(gl.float32)  # s: scalar""")


def all_ops(acc: Any, b: Any, c: Any, r: Any, s: Any) -> tuple[Any, ...]:
    """One graph with every op, for one compile."""
    y = (F.gelu(acc + b, approximate="tanh") * F.gelu(acc - c) + F.silu(acc) * torch.sigmoid(r) / s
         + torch.tanh(acc) + torch.exp(-acc.abs()) + torch.log(acc.abs() + 1) + torch.sqrt(acc.abs()) + acc.rsqrt()
         + torch.maximum(acc, b) - torch.minimum(acc, c) + acc.clamp(-1, 1) + F.relu(acc) + acc ** 2.5 + acc ** 3)
    y = (y + torch.where(acc < 0, acc, -acc) + torch.where(acc <= r, 1.0, 0.0) + torch.where(acc >= c, acc, 0.0)
         + torch.where(acc == b, 0.0, acc) + torch.where(acc != s, acc, 2.0) + torch.where(acc > 1, acc, 1.0))
    y = y + acc.to(BF16).float() + acc.half().float() + acc.to(E4M3).float()
    return y, acc.to(E4M3), acc.half(), b * s


def test_every_op_compiles_for_sm90a(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))  # not the user's warploom cache
    g = graph_of(all_ops)
    k = standalone.source(g, DType.BF16)
    ptx = standalone.cross_compile(k).asm["ptx"]
    # NaN-propagating min/max, IEEE div and sqrt, RNE casts with e4m3 saturation, approximate exp and rsqrt
    for instr in ["max.NaN.f32", "min.NaN.f32", "div.rn.f32", "sqrt.rn.f32", "cvt.rn.satfinite.e4m3x2.f32",
                  "cvt.rn.bf16.f32", "cvt.rn.f16.f32", "ex2.approx", "rsqrt.approx"]:
        assert instr in ptx, instr


def test_operands_past_int32_offsets_load_with_64_bit_offsets() -> None:
    """A (65537, 32768) residual's last offset is past 2**31 - 1: its row offsets (m * 32768) overflow int32, so
    the load's index vectors go 64-bit; (65536, 32768) still fits, and keeps 32-bit ones (no extra registers)."""
    kw = dict(offs_m="rows", offs_n="cols", mask_m="mm", mask_n="mn", rs="32768", cs="1")
    big = OperandSpec("r", OperandKind.DENSE, DType.BF16, (65537, 32768), (32768, 1))
    small = OperandSpec("r", OperandKind.DENSE, DType.BF16, (65536, 32768), (32768, 1))
    assert big.span() == 65536 * 32768 + 32767 >= 2**31 > small.span() == 2**31 - 1
    assert "rows.to(gl.int64) * 32768" in load_operand(big, "r_t", "r_ptr", **kw)
    assert "int64" not in load_operand(small, "r_t", "r_ptr", **kw)
    strided_row = OperandSpec("b", OperandKind.ROW, DType.FP32, (1, 40), (0, 2**26))
    assert "cols.to(gl.int64)" in load_operand(strided_row, "b_t", "b_ptr", **kw)
