"""warploom.matmul's backward on the GPU (issue 28 item 5): the gradients run warploom kernels (grad @ b^T with an
N-major B, a^T @ grad with a column-major A) and match torch's fp64 autograd of the same product, as the CPU
simulator's do (tests/unit/test_autograd.py), at shapes that are not tile multiples."""

from __future__ import annotations

import pytest
import torch

import warploom

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


@pytest.mark.parametrize("m,n,k", [(64, 96, 128), (300, 520, 1000), (1000, 776, 2000), (8, 4096, 4096)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gradients_match_fp64(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, dtype=dtype, device="cuda", requires_grad=True)
    b = torch.randn(n, k, dtype=dtype, device="cuda").t().requires_grad_()  # a K-major weight, as models hold it
    up = torch.randn(m, n, dtype=dtype, device="cuda")
    (warploom.matmul(a, b) * up).sum().backward()
    a64 = a.detach().double().cpu().requires_grad_()
    b64 = b.detach().double().cpu().requires_grad_()
    ((a64 @ b64) * up.double().cpu()).sum().backward()
    assert a.grad is not None and b.grad is not None and a.grad.dtype == dtype and b.grad.dtype == dtype
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    # Each gradient is a K' = n (for a) or m (for b) long dot product of 16-bit values, rounded once to 16 bits.
    for got, want, depth in ((a.grad, a64.grad, n), (b.grad, b64.grad, m)):
        assert want is not None
        torch.testing.assert_close(got.double().cpu(), want, atol=0.05 * depth ** 0.5, rtol=0.02)


def test_a_plain_call_and_the_cpu_simulator_agree() -> None:
    """The same gradients on the GPU and through the CPU simulator (the two paths of the one custom op)."""
    torch.manual_seed(3)
    a = torch.randn(40, 136, dtype=torch.bfloat16)
    b = torch.randn(136, 200, dtype=torch.bfloat16)
    grads = []
    for device in ("cpu", "cuda"):
        # Fresh leaves on each device (a.to("cpu") is `a` itself, which the first pass would otherwise mark).
        x, y = a.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        warploom.matmul(x, y).float().square().sum().backward()
        assert x.grad is not None and y.grad is not None
        grads.append((x.grad.float().cpu(), y.grad.float().cpu()))
    for cpu, gpu in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(gpu, cpu, atol=0.5, rtol=0.02)
