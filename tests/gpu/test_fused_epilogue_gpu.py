"""GPU tier: fused epilogues (epilogue=fn, **operands) inside the real kernels, against torch.

The reference applies the same fn with torch to the fp32 product (for fp8, of the dequantized inputs, with
torch._scaled_mm's own scaling and bias first), on the same GPU. Outputs are poisoned first, shapes are not
tile multiples, and both ablation switches (row hoist, scalar column read) are run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import Plan, plan_schedule

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")


def err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def poison(m: int, n: int, dtype: torch.dtype) -> None:
    torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


def as_tuple(x: Any) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


FNS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "bias_gelu_residual": (lambda acc, bias, residual: F.gelu(acc + bias) + residual, ("bias", "residual")),
    "silu_mul_col": (lambda acc, col: F.silu(acc) * col, ("col",)),
    "clamp_row_expanded": (lambda acc, row: torch.clamp(acc * row, -3.0, 3.0), ("row_x",)),
    "two_outputs": (lambda acc, bias: (acc + bias, F.relu(acc + bias).to(torch.float32)), ("bias",)),
    "where_sigmoid_scalar": (lambda acc, s: torch.where(acc > 0, torch.sigmoid(acc) * s, acc * 0.5), ("s",)),
    "tanh_gelu_residual_fp32": (lambda acc, residual: F.gelu(acc, approximate="tanh") + residual, ("res32",)),
}


DISCONTINUOUS = {"where_sigmoid_scalar"}


def operands(names: tuple[str, ...], m: int, n: int) -> dict[str, torch.Tensor]:
    make = {
        "bias": lambda: torch.randn(n, device="cuda", dtype=torch.bfloat16),
        "residual": lambda: torch.randn(m, n, device="cuda", dtype=torch.bfloat16),
        "res32": lambda: torch.randn(m, n, device="cuda"),
        "col": lambda: torch.rand(m, 1, device="cuda") + 0.5,
        "row_x": lambda: (torch.rand(n, device="cuda") + 0.5).expand(m, n),  # strides (0, 1): a row vector
        "s": lambda: torch.tensor(1.5, device="cuda"),
    }
    out = {}
    for name in names:
        key = {"row_x": "row", "res32": "residual"}.get(name, name)
        out[key] = make[name]()
    return out


WIDE = (1040, 2064, 256)  # planner rule 9 takes 128x256 here (81 tiles in one wave), with partial tiles in M and N
DECODE = (16, 520, 1024)  # planner rule 16: 64x64 tiles with a ring deeper than 6, a partial tile in N


def assert_decode_plan(plan: Plan) -> None:
    assert (plan.bm, plan.bn) == (64, 64) and plan.stages > 6, plan.short()


@pytest.mark.parametrize("name", list(FNS))
@pytest.mark.parametrize("m,n,k", [(296, 520, 1024), (1000, 1000, 72), WIDE, DECODE])
def test_matmul_fused(name: str, m: int, n: int, k: int) -> None:
    torch.manual_seed(0)
    fn, names = FNS[name]
    ops = operands(names, m, n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if (m, n, k) == WIDE:  # the slotted wide epilogue, through the public call
        plan = warploom.plan(a, b, epilogue=fn, **ops).plan
        assert (plan.bn, plan.epilogue_subtiles, plan.consumer_partitions, plan.load_ahead) == (256, 8, 1, True)
    if (m, n, k) == DECODE:
        assert_decode_plan(warploom.plan(a, b, epilogue=fn, **ops).plan)
    poison(m, n, torch.bfloat16)
    got = as_tuple(warploom.matmul(a, b, epilogue=fn, **ops))
    acc = a.float() @ b.float()
    ref = as_tuple(fn(acc, **ops))
    # where(acc > 0, ...) jumps at 0: an acc within the summation-order error of 0 may take either branch (the wide
    # shape's 2.1M elements met one at 1e-7), so those few elements are left out of the comparison.
    keep = acc.abs() > 1e-3 if name in DISCONTINUOUS else torch.ones_like(acc, dtype=torch.bool)
    assert keep.float().mean() > 0.999
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        assert g.shape == (m, n) and not g.isnan().any()
        rr = r.to(g.dtype) if g.dtype != r.dtype else r
        torch.testing.assert_close(g.float()[keep], rr.float()[keep], atol=6e-2, rtol=2e-2)


def fp8_inputs(m: int, n: int, k: int, rowwise: bool) -> tuple[torch.Tensor, ...]:
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    if rowwise:
        sa, sb = torch.rand(m, 1, device="cuda") / 8 + 0.05, torch.rand(1, n, device="cuda") / 8 + 0.05
    else:
        sa, sb = torch.tensor(0.1, device="cuda"), torch.tensor(0.2, device="cuda")
    return a, b, sa, sb


@pytest.mark.parametrize("rowwise", [True, False], ids=["rowwise", "tensorwise"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "promoted"])
@pytest.mark.parametrize("m,n,k", [(300, 528, 672), (2048, 1024, 512), (1040, 2064, 512), (33, 528, 672)])
def test_scaled_mm_fused(rowwise: bool, fast: bool, m: int, n: int, k: int) -> None:
    torch.manual_seed(1)
    a, b, sa, sb = fp8_inputs(m, n, k, rowwise)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    def fn(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc) + residual

    if m <= 64 and fast:  # rule 16 (promoted fp8 keeps its tiles)
        assert_decode_plan(warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=fn,
                                         residual=residual).plan)

    poison(m, n, torch.bfloat16)
    got = warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast, epilogue=fn, residual=residual)
    acc = (a.float() @ b.float()) * sa * sb + bias.float()
    ref = fn(acc, residual)
    assert got.dtype == torch.bfloat16 and not got.isnan().any()
    assert err(got, ref) < 1e-3


def test_fp8_output_saturates() -> None:
    m, n, k = 256, 512, 256
    a, b, sa, sb = fp8_inputs(m, n, k, True)
    got = warploom.scaled_mm(a, b, sa, sb, use_fast_accum=True,
                             epilogue=lambda acc: (acc * 100).to(torch.float8_e4m3fn))
    ref = ((a.float() @ b.float()) * sa * sb * 100).clamp(-448, 448)
    assert got.dtype == torch.float8_e4m3fn
    assert err(got.float(), ref) < 1e-3
    assert got.float().abs().max() <= 448


@pytest.mark.parametrize("hoist,scalar,prefetch,pingpong,grid", [
    (True, True, True, False, 132), (False, True, True, False, 132), (True, False, True, False, 132),
    (False, False, True, False, 132), (True, True, False, False, 132), (True, True, True, False, 3),
    (True, True, True, True, 3), (True, True, True, True, 132), (True, True, False, True, 5)])
def test_ablations_compute_the_same(hoist: bool, scalar: bool, prefetch: bool, pingpong: bool, grid: int) -> None:
    torch.manual_seed(2)
    m, n, k = 1040, 400, 384
    a, b, sa, sb = fp8_inputs(m, n, k, True)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    fn = lambda acc, residual: F.gelu(acc) + residual  # noqa: E731
    k_ = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=fn, residual=residual)
    dev = DeviceInfo.current()
    plan = plan_schedule(k_.spec, dev, hoist_rows=hoist, scalar_columns=scalar, prefetch_operands=prefetch,
                         pingpong=pingpong, **({"bm": 64, "bn": 128} if pingpong else {}))
    # A small grid gives each CTA several tiles: prefetches across tiles, ping-pong's alternation.
    kern = build(k_.spec, dev, dataclasses.replace(plan, grid=min(grid, plan.grid)))
    assert kern.plan.hoist_rows is hoist and kern.plan.scalar_columns is scalar
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, operands={"scale_a": sa, "scale_b": sb, "bias": bias, "residual": residual})
    ref = fn((a.float() @ b.float()) * sa * sb + bias.float(), residual)
    assert err(out, ref) < 1e-3


def gelu_residual_case(m: int, n: int, k: int, seed: int) -> tuple[Any, tuple[torch.Tensor, ...], dict[str, Any],
                                                                    torch.Tensor]:
    """fp8 rowwise scaled_mm + bias, then gelu + residual: the spec, (a, b), the operands and the fp32 reference."""
    torch.manual_seed(seed)
    a, b, sa, sb = fp8_inputs(m, n, k, True)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    fn = lambda acc, residual: F.gelu(acc) + residual  # noqa: E731
    spec = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=fn, residual=residual).spec
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": residual}
    return spec, (a, b), ops, fn((a.float() @ b.float()) * sa * sb + bias.float(), residual)


def run_on_grid(spec: Any, plan: Any, grid: int, ab: tuple[torch.Tensor, ...], ops: dict[str, Any],
                ref: torch.Tensor) -> None:
    """`plan` on at most `grid` CTAs (a small grid gives each CTA several tiles), output poisoned, checked."""
    kern = build(spec, DeviceInfo.current(), dataclasses.replace(plan, grid=min(grid, plan.grid)))
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(*ab, out, operands=ops)
    assert not out.isnan().any()
    assert err(out, ref) < 1e-3


@pytest.mark.parametrize("slots", [(2, 2, 4), (2, 8, 3), (1, 1, 4)], ids=["ss2_os2_s4", "ss2_os8_s3", "ss1_os1_s4"])
@pytest.mark.parametrize("grid", [3, 132])
def test_slotted_wide_epilogue(slots: tuple[int, int, int], grid: int) -> None:
    # The 256-wide fused epilogue in 8 blocks: stores alternating through staging slots, the residual copied
    # ahead into operand slots, each block's scales and bias loaded one block early; partial tiles in M and N.
    staging, operand, stages = slots
    spec, ab, ops, ref = gelu_residual_case(1040, 784, 384, seed=3)
    plan = dataclasses.replace(plan_schedule(spec, DeviceInfo.current(), bn=256, stages=2), stages=stages,
                               epilogue_subtiles=8, hoist_rows=False, load_ahead=True, prefetch_operands=True,
                               staging_slots=staging, operand_slots=operand)
    run_on_grid(spec, plan, grid, ab, ops, ref)


def test_forced_256_wide_tile() -> None:
    # At this size the planner takes 128 wide; forced 256 wide, rule 9's slotted 8-block epilogue.
    m, n, k = 384, 768, 256
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    fn = lambda acc, bias: F.relu(acc + bias)  # noqa: E731
    spec = warploom.plan(a, b, epilogue=fn, bias=bias).spec
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bn=256))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, operands={"bias": bias})
    torch.testing.assert_close(out.float(), fn(a.float() @ b.float(), bias).to(torch.bfloat16).float(),
                               atol=6e-2, rtol=2e-2)


@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 256)])
@pytest.mark.parametrize("grid", [3, 132])
def test_pingpong_epilogue_in_quarters(bm: int, bn: int, grid: int) -> None:
    # Ping-pong beside a whole 128x128 (64x256) accumulator: the epilogue runs in 4 column blocks (planner).
    spec, ab, ops, ref = gelu_residual_case(1040, 1040, 512, seed=3)
    plan = plan_schedule(spec, DeviceInfo.current(), pingpong=True, bm=bm, bn=bn)
    assert plan.epilogue_subtiles == 4 and not plan.hoist_rows
    run_on_grid(spec, plan, grid, ab, ops, ref)


@pytest.mark.parametrize("m", [48, 16])  # unswapped (rule 16) and swapped (rule 18: the operands trade kinds)
def test_operands_spanning_2_31_elements(m: int) -> None:
    """A row and a column operand whose elements lie 2**26 apart, so their last element is 2**31 or more past
    their first: loaded with 64-bit offsets (OperandSpec.span), where int32 offsets would wrap. About 9 GB."""
    torch.manual_seed(m)
    n, k, stride = 40, 64, 2**26
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    big_row = torch.zeros((n - 1) * stride + 1, device="cuda", dtype=torch.bfloat16)
    big_col = torch.zeros((m - 1) * stride + 1, device="cuda", dtype=torch.float32)
    bias = big_row.as_strided((n,), (stride,))
    col = big_col.as_strided((m, 1), (stride, 1))
    bias.copy_(torch.randn(n, device="cuda", dtype=torch.bfloat16))
    col.copy_(torch.randn(m, 1, device="cuda"))
    assert (n - 1) * stride >= 2**31

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        return (acc + bias) * col

    kern = warploom.plan(a, w.t(), epilogue=fn, bias=bias, col=col)
    assert kern.plan.swap_ab == (m <= 32) and "to(gl.int64)" in kern.source
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, w.t(), out, operands={"bias": bias, "col": col})
    ref = fn(a.float() @ w.float().t(), bias.float(), col)
    assert not out.isnan().any() and err(out, ref) < 1e-4
    torch.testing.assert_close(warploom.matmul(a, w.t(), epilogue=fn, bias=bias, col=col).float(), ref,
                               atol=0.05, rtol=2e-2)
    del big_row, big_col
    torch.cuda.empty_cache()
