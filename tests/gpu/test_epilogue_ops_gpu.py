"""GPU tier: every epilogue op's emitted Gluon on the H100 against reference.evaluate, and the graph's rounding rules
against eager CUDA torch.

Each op runs in `warploom.epilogue.standalone`'s elementwise kernel on an (M, N) that is no multiple of its
(32, 64) block, with operands of every kind and layout, and an accumulator salted with 0, -0, +-inf, NaN and huge
values. Exact ops (arithmetic, comparisons, casts, clamp, IEEE div and sqrt) must agree bit for bit; functions
built on the GPU's approximate exp, rsqrt and libdevice to a few ulp.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.epilogue import standalone
from warploom.epilogue.capture import capture
from warploom.epilogue.reference import evaluate

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(120, method="thread")]

M, N = 300, 200
BF16, FP16, E4M3 = torch.bfloat16, torch.float16, torch.float8_e4m3fn


def operands(device: str = "cpu") -> dict[str, torch.Tensor]:
    """The same values on any device, with the same layouts (views are made on the device: moving an expanded
    or sliced view with .cuda() would materialize it)."""
    g = torch.Generator().manual_seed(11)

    def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    return {
        "b": r(N, dtype=BF16),  # row
        "bx": r(N).expand(M, N),  # row, as an expanded (M, N) view
        "c": r(M, 1),  # column
        "cx": r(M, 1, dtype=FP16).expand(M, N),  # column, expanded
        "r": r(M, N, dtype=FP16),  # dense
        "rp": r(M, N + 8, dtype=BF16)[:, :N],  # dense with padded rows
        "s": r(()),  # scalar
    }


def accumulator() -> torch.Tensor:
    acc = torch.randn(M, N, generator=torch.Generator().manual_seed(5)) * 3
    acc.view(-1)[:10] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e30, -1e30, 1e-30, -2.0, 600.0])
    return acc


EXACT = (0.0, 0.0)
APPROX = (2e-5, 4e-6)  # rtol, atol: a few ulp of the approximate functions; atol for gelu's 1 + erf cancelling
APPROX_16 = (8e-3, 4e-6)  # those few ulp can round a bf16 output either way: one bf16 ulp
OPS: list[tuple[str, Callable[..., Any], tuple[float, float]]] = [
    ("add_row", lambda acc, b: acc + b, EXACT),
    ("add_row_expanded", lambda acc, bx: acc + bx, EXACT),
    ("sub_col", lambda acc, c: c - acc, EXACT),
    ("mul_col_expanded", lambda acc, cx: acc * cx, EXACT),
    ("mul_scalar", lambda acc, s: acc * s, EXACT),
    ("div_dense", lambda acc, r: acc / r, EXACT),
    ("div_padded", lambda acc, rp: acc / rp, EXACT),
    ("rdiv", lambda acc: 3 / acc, EXACT),
    ("neg", lambda acc: -acc, EXACT),
    ("abs", lambda acc: acc.abs(), EXACT),
    ("maximum", lambda acc, b: torch.maximum(acc, b), EXACT),
    ("minimum", lambda acc, c: torch.minimum(c, acc), EXACT),
    ("clamp", lambda acc: acc.clamp(-1, 2), EXACT),
    ("clamp_min", lambda acc: acc.clamp(min=0.5), EXACT),
    ("clamp_max", lambda acc: acc.clamp(max=-0.5), EXACT),
    ("where_lt", lambda acc, s: torch.where(acc < s, acc, 0.0), EXACT),
    ("where_le", lambda acc: torch.where(acc <= 1, 1.0, acc), EXACT),
    ("where_gt", lambda acc, b: torch.where(acc > b, b, acc), EXACT),
    ("where_ge", lambda acc: torch.where(acc >= 0, acc, -acc), EXACT),
    ("where_eq", lambda acc: torch.where(acc == 0, 1.0, acc), EXACT),
    ("where_ne", lambda acc, c: torch.where(acc != acc, c, acc), EXACT),
    ("relu", lambda acc: torch.relu(acc), EXACT),
    ("gelu", lambda acc: F.gelu(acc), APPROX),
    ("gelu_tanh", lambda acc: F.gelu(acc, approximate="tanh"), APPROX),
    ("silu", lambda acc: F.silu(acc), APPROX),
    ("sigmoid", lambda acc: torch.sigmoid(acc), APPROX),
    ("tanh", lambda acc: torch.tanh(acc), APPROX),
    ("exp", lambda acc: torch.exp(acc), APPROX),
    ("log", lambda acc: torch.log(acc), APPROX),
    ("sqrt", lambda acc: torch.sqrt(acc), EXACT),
    ("rsqrt", lambda acc: torch.rsqrt(acc), APPROX),
    ("pow0", lambda acc: acc ** 0, EXACT),
    ("pow2", lambda acc: acc ** 2, EXACT),
    ("pow3", lambda acc: acc ** 3, EXACT),
    ("pow_half", lambda acc: acc ** 0.5, EXACT),
    ("pow_neg_half", lambda acc: acc ** -0.5, APPROX),
    ("pow_neg1", lambda acc: acc ** -1, EXACT),
    ("pow_neg2", lambda acc: acc ** -2, EXACT),
    ("pow_general", lambda acc: acc ** 2.5, APPROX),
    ("pow_odd_int", lambda acc: acc ** 5, APPROX),
    ("cast_bf16", lambda acc: acc.to(BF16).float() + 1, EXACT),
    ("cast_fp16", lambda acc: acc.half().float() * 3, EXACT),
    ("cast_e4m3", lambda acc: acc.to(E4M3).float() - 1, EXACT),
    ("out_bf16", lambda acc: acc.to(BF16), EXACT),
    ("out_fp16", lambda acc: acc.half(), EXACT),
    ("out_fp32", lambda acc: acc.float(), EXACT),
    ("out_e4m3_saturates", lambda acc: (acc * 100).to(E4M3), EXACT),
    ("out_row_broadcast", lambda acc, b: (acc, b * 2), EXACT),
    ("out_scalar_broadcast", lambda acc, s: (acc, s + 1), EXACT),
    ("bool_promote", lambda acc: (acc > 0) * acc, EXACT),
    ("bf16_operand_math", lambda acc, b, s: acc + b * s, EXACT),
    ("headline", lambda acc, b, r: (F.gelu(acc + b, approximate="tanh") * 0.5 + r, (acc + b).to(BF16)), APPROX),
]


def graph_of(fn: Callable[..., Any], ops: dict[str, torch.Tensor]) -> Any:
    names = list(inspect.signature(fn).parameters)[1:]
    return capture(fn, {k: ops[k] for k in names}, out_shape=(M, N))


@pytest.mark.parametrize("out_dtype", [DType.FP32, DType.BF16])
@pytest.mark.parametrize("fn,tol", [(f, t) for _, f, t in OPS], ids=[i for i, _, _ in OPS])
def test_op_on_gpu_matches_reference(fn: Callable[..., Any], tol: tuple[float, float], out_dtype: DType) -> None:
    ops, acc = operands(), accumulator()
    g = graph_of(fn, ops)
    got = standalone.run(g, acc.cuda(), operands("cuda"), out_dtype)
    want = evaluate(g, acc, ops, out_dtype)
    for x, y in zip(got, want, strict=True):
        assert x.shape == (M, N) and x.dtype == y.dtype
        rtol, atol = APPROX_16 if tol == APPROX and x.dtype.itemsize < 4 else tol
        torch.testing.assert_close(x.cpu().float(), y.float(), rtol=rtol, atol=atol, equal_nan=True)


# The graph's rounding rules (capture.py) were measured against CUDA torch; these pin them there.
EAGER: list[tuple[str, Callable[..., Any]]] = [
    ("zero_dim_times_bf16", lambda acc, b, s: b * s),
    ("zero_dim_first", lambda acc, b, s: s * b + (b - s)),
    ("python_scalar_times_bf16", lambda acc, b: b * 0.1 + (b + 1 / 3)),
    ("rdiv_bf16", lambda acc, b: 3 / b),
    ("rdiv_fp32", lambda acc: 3 / acc),
    ("cube_fp16", lambda acc, r: r ** 3),
    ("inverse_square_bf16", lambda acc, b: b ** -2),
    ("compare_in_bf16", lambda acc, b, s: torch.where(b > s, acc, 0.0)),
    ("bf16_chain", lambda acc, b: F.relu(acc.to(BF16) * 3 + b)),
    ("bf16_fp16_promote", lambda acc, b, r: b * r + 1),
]


@pytest.mark.parametrize("fn", [f for _, f in EAGER], ids=[i for i, _ in EAGER])
def test_graph_rounds_like_eager_cuda_torch(fn: Callable[..., Any]) -> None:
    ops, acc = operands(), accumulator()
    acc = torch.nan_to_num(acc, posinf=7.0, neginf=-7.0, nan=0.5).clamp(-1e4, 1e4)
    g = graph_of(fn, ops)
    names = list(inspect.signature(fn).parameters)[1:]
    cuda = operands("cuda")
    eager = fn(acc.cuda(), **{k: cuda[k] for k in names})
    (ours,) = evaluate(g, acc, ops)
    torch.testing.assert_close(ours, torch.broadcast_to(eager.cpu().float(), (M, N)), rtol=0, atol=0, equal_nan=True)
