"""warploom.matmul differentiates (issue 28 item 5): its backward runs warploom kernels (grad @ b^T with an N-major B,
a^T @ grad with a column-major A), checked against torch's fp64 autograd of the same product on the CPU simulator.
warploom.scaled_mm has no backward, as torch._scaled_mm has none: its forward runs, its backward is refused by name."""

from __future__ import annotations

import pytest
import torch
from test_bad_input import raises

import warploom
from warploom.errors import UnsupportedError


@pytest.mark.parametrize("m,n,k", [(64, 96, 128), (40, 136, 200), (128, 256, 64)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gradients_match_fp64(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, dtype=dtype, requires_grad=True)
    b = torch.randn(k, n, dtype=dtype, requires_grad=True)
    up = torch.randn(m, n, dtype=dtype)
    (warploom.matmul(a, b) * up).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ((a64 @ b64) * up.double()).sum().backward()
    assert a.grad is not None and b.grad is not None and a.grad.dtype == dtype and b.grad.dtype == dtype
    tol = {"atol": 0.1 * k ** 0.5 / 8, "rtol": 0.02}
    torch.testing.assert_close(a.grad.double(), a64.grad, **tol)
    torch.testing.assert_close(b.grad.double(), b64.grad, **tol)


def test_only_the_needed_gradient_with_an_odd_m_and_a_column_major_b() -> None:
    torch.manual_seed(0)
    a = torch.randn(36, 56, dtype=torch.bfloat16)  # M = 36: a^T (M-major, rows of K) is still aligned
    b = torch.randn(24, 56, dtype=torch.bfloat16).t().requires_grad_()  # a K-major (column-major) b
    warploom.matmul(a, b).sum().backward()
    assert b.grad is not None and b.grad.shape == (56, 24)
    torch.testing.assert_close(b.grad.float(), a.float().t() @ torch.ones(36, 24), atol=0.3, rtol=0.02)


# torch._scaled_mm runs its forward on tensors that require grad and fails at the backward ("derivative for
# aten::_scaled_mm is not implemented", torch 2.13). warploom.scaled_mm's backward ended in torch's bare "no autograd
# formula was registered" RuntimeError; it is refused by name, and the forward still runs as torch's does.
@pytest.mark.parametrize("needs", ["a", "scale_a", "bias"])
def test_scaled_mm_runs_forward_on_tensors_that_require_grad_and_refuses_the_backward_by_name(needs: str) -> None:
    torch.manual_seed(0)
    a = torch.randn(32, 64).to(torch.float8_e4m3fn)
    b = torch.randn(48, 64).to(torch.float8_e4m3fn).t()
    sa, sb, bias = torch.full((1,), 0.5), torch.full((1,), 2.0), torch.randn(48, dtype=torch.bfloat16)
    expected = warploom.scaled_mm(a, b, sa, sb, bias=bias)
    {"a": a, "scale_a": sa, "bias": bias}[needs].requires_grad_()
    y = warploom.scaled_mm(a, b, sa, sb, bias=bias)
    assert y.requires_grad  # (as torch._scaled_mm's result: a backward through it is asked for, then refused)
    torch.testing.assert_close(y.detach(), expected)
    e = raises(UnsupportedError, "backward of scaled_mm", lambda: y.float().sum().backward(),
               match=f"asked for {needs} ({needs}.requires_grad=True)")
    assert ".detach()" in str(e).split("Fix: ")[1] and "warploom.matmul" in str(e), e
