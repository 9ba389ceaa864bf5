"""GPU tier: warploom.quantize on CUDA tensors, and its (q, s) pair as the next fp8 GEMM's blockwise A.

A model that chains fp8 layers quantizes each GEMM's output with one fp32 scale per row and 128 columns
(DeepSeek-V3's activations); the pair then is `scaled_mm`'s A and its BLOCKWISE_1X128_128X128 scale_a (M, ceil(K/128))
with K = the first GEMM's N. Here the first GEMM stores fp32 and quantize runs after it (the unfused way, which the
refusals of rowwise and promoted fp8 in an epilogue name); the fused 1x128 pair:
tests/gpu/test_quantize_epilogue_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom.reference import dequantized
from warploom.reference import relative_error as scale_free_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("m,n", [(300, 528), (1, 4096), (129, 200)])
def test_cuda_matches_cpu(m: int, n: int, dtype: torch.dtype) -> None:
    """Same bytes on CUDA as on the CPU (IEEE division and the saturating cast on both), zero rows included."""
    g = torch.Generator(device="cuda").manual_seed(m + n)
    y = torch.randn(m, n, device="cuda", generator=g) * 30
    y[m // 2] = 0
    q, s = warploom.quantize(y, dtype=dtype)
    qc, sc = warploom.quantize(y.cpu(), dtype=dtype)
    assert q.device == y.device and s.device == y.device
    assert torch.equal(s.cpu(), sc)
    assert torch.equal(q.cpu().view(torch.uint8), qc.view(torch.uint8))


@pytest.mark.parametrize("m,n1,n2,k", [(296, 528, 272, 1024), (64, 7168, 2048, 512), (200, 1008, 400, 256)])
def test_pair_feeds_blockwise_scaled_mm(m: int, n1: int, n2: int, k: int) -> None:
    """out = x @ w1 (fp32), (q, s) = quantize(out); scaled_mm(q, w2, scale_a=s, ...) against torch's product of the
    dequantized operands, and the quantized activation against torch's product within fp8 rounding."""
    g = torch.Generator(device="cuda").manual_seed(m + n1)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w1 = torch.randn(k, n1, device="cuda", generator=g).to(torch.bfloat16) / k**0.5
    out = warploom.matmul(x, w1, out_dtype=torch.float32)
    torch_out = x.float() @ w1.float()
    q, s = warploom.quantize(out)
    tq, ts = warploom.quantize(torch_out)
    assert s.shape == (m, -(-n1 // 128))
    # Scales: the amax of nearly equal fp32 products (accumulation order differs), so relatively close.
    assert torch.allclose(s, ts, rtol=1e-4)
    cols = s.repeat_interleave(128, dim=1)[:, :n1]
    assert scale_free_error(q.float() * cols, torch_out) < 2e-3  # e4m3's 2**-4 relative step, squared-ish

    w2 = (torch.randn(n2, n1, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()  # (K=n1, n2), K-major
    sb = torch.rand(-(-n1 // 128), -(-n2 // 128), device="cuda", generator=g) + 0.5
    got = warploom.scaled_mm(q, w2, s, sb, out_dtype=torch.bfloat16)
    a32, b32 = dequantized(q, w2, s, sb)
    want = a32 @ b32
    assert scale_free_error(got.float(), want) < 1e-4
    assert scale_free_error(got.float(), (tq.float() * ts.repeat_interleave(128, dim=1)[:, :n1]) @ b32) < 1e-4
