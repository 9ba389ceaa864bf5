"""warploom.matmul / warploom.scaled_mm on CPU tensors: the planned kernel runs on the simulator.

Random data, shapes that are not tile multiples; results against an fp32 torch reference (bf16/fp16 with
torch.testing tolerances of the output dtype, fp8 with the scale-free error), and equal to what
`Kernel.simulate` computes for the same kernel.
"""

from __future__ import annotations

import pytest
import torch

import warploom
import warploom.api  # registers torch.ops.warploom.*, whichever of torch and warploom a session imported first
from warploom.reference import relative_error

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
TOL = {BF16: dict(rtol=1.6e-2, atol=1e-2), FP16: dict(rtol=2e-3, atol=2e-3), FP32: dict(rtol=1e-5, atol=1e-4)}

# (M, N, K): ragged in every dimension against 128 x 128 (x 64 or 128) tiles; M = 1; K below one k-block.
SHAPES = [(130, 200, 96), (1, 64, 256), (257, 136, 40)]
FP8_SHAPES = [(130, 208, 96), (1, 64, 256), (200, 272, 160)]


def b_of(k: int, n: int, dtype: torch.dtype, major: str, g: torch.Generator) -> torch.Tensor:
    """(K, N) with K contiguous (the transpose of a row-major (N, K)) or N contiguous."""
    if major == "k":
        return torch.randn(n, k, generator=g).to(dtype).t()
    return torch.randn(k, n, generator=g).to(dtype)


@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("major", ["k", "n"])
def test_matmul(m: int, n: int, k: int, dtype: torch.dtype, major: str) -> None:
    g = torch.Generator().manual_seed(m * n + k)
    a, b = torch.randn(m, k, generator=g).to(dtype), b_of(k, n, dtype, major, g)
    out = warploom.matmul(a, b)
    assert out.shape == (m, n) and out.dtype == dtype and out.device.type == "cpu"
    torch.testing.assert_close(out.float(), a.float() @ b.float(), **TOL[dtype])
    # Exactly what the simulator computes for the kernel warploom plans.
    assert torch.equal(out, warploom.plan(a, b).simulate(a, b).output)


def test_matmul_fp32_output() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(70, 120, generator=g).to(BF16), b_of(120, 36, BF16, "k", g)
    out = warploom.matmul(a, b, out_dtype=FP32)
    assert out.dtype == FP32
    torch.testing.assert_close(out, a.float() @ b.float(), **TOL[FP32])


def fp8_inputs(m: int, n: int, k: int, recipe: str, b_dtype: torch.dtype = E4,
               seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 2).to(E4)
    b = (torch.randn(n, k, generator=g) * 2).to(b_dtype).t()  # column-major, as torch._scaled_mm wants
    if recipe == "tensorwise":
        sa, sb = torch.rand((), generator=g) + 0.5, torch.rand((), generator=g) + 0.5
    else:
        sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5
    return a, b, sa, sb


@pytest.mark.parametrize("m,n,k", FP8_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "promoted"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_scaled_mm(m: int, n: int, k: int, recipe: str, fast: bool, with_bias: bool) -> None:
    a, b, sa, sb = fp8_inputs(m, n, k, recipe, seed=m + n + k)
    bias = (torch.randn(n) * 4).to(BF16) if with_bias else None
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert out.shape == (m, n) and out.dtype == BF16
    assert relative_error(out.float(), ref) < 1e-3
    kernel = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=fast)
    assert torch.equal(out, kernel.simulate(a, b, sa, sb, bias).output)


def test_scaled_mm_e4m3_x_e5m2_fp32_out() -> None:
    a, b, sa, sb = fp8_inputs(130, 208, 96, "rowwise", b_dtype=E5, seed=3)
    out = warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32)
    ref = (a.float() @ b.float()) * sa * sb
    assert out.dtype == FP32 and relative_error(out, ref) < 1e-3


def test_custom_ops_run_on_cpu() -> None:
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(130, 96, generator=g).to(BF16), b_of(96, 200, BF16, "k", g)
    out = torch.ops.warploom.matmul(a, b, None)
    assert torch.equal(out, warploom.matmul(a, b))
    a8, b8, sa, sb = fp8_inputs(64, 128, 128, "rowwise")
    out8 = torch.ops.warploom.scaled_mm(a8, b8, sa, sb, None, BF16, False)
    assert relative_error(out8.float(), (a8.float() @ b8.float()) * sa * sb) < 1e-3

