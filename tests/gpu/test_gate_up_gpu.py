"""GPU tier: the one-GEMM gate/up form on an H100, against torch's ``F.silu(x @ w1.T) * (x @ w3.T)``.

``warploom.matmul(x, interleave_gate_up(w1, w3, block=B).T, epilogue=lambda acc: silu_mul_interleaved(acc, block=B))``
returns the (M, I') result of a DeepSeek/Llama-style MLP's gate/up GEMM (planner rule 28: BN = 2B), the padded
columns past I exactly 0; fp8 rowwise ``scaled_mm`` takes scale_b interleaved like the weight, and the M-grouped
``grouped_mm`` the experts' weights (G, 2I', K) interleaved along dim -2. Judged against torch's
two GEMMs in fp32 (bf16 rounding of the stored result; fp8: the dequantized operands' product). Written on
2026-11-27 without a GPU at hand (the simulator and compile tiers cover the same kernels); not run yet.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import warploom

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


def close(y: torch.Tensor, want: torch.Tensor, i: int) -> None:
    torch.testing.assert_close(y[:, :i].float(), want, rtol=2 ** -7, atol=1e-3 * want.abs().max().item())
    assert not y[:, i:].any()


# (M, I, K, block): DeepSeek-V3's expert I = 2048, K = 7168; Llama-3-8B's I = 14336, K = 4096; ragged M and I = 1408
# (DeepSeek-V2-Lite, 11 blocks of 128) and I = 1000 (padded); a decode batch
SHAPES = [(300, 2048, 7168, 128), (1000, 14336, 4096, 128), (77, 1408, 2048, 64), (129, 1000, 1024, 128),
          (9, 2048, 7168, 128)]


@pytest.mark.parametrize(("m", "i", "k", "block"), SHAPES)
def test_bf16_gate_up_against_torch(m: int, i: int, k: int, block: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(m + i)
    x = torch.randn(m, k, device="cuda", generator=g).to(BF16)
    w1, w3 = (torch.randn(i, k, device="cuda", generator=g).div(k ** 0.5).to(BF16) for _ in range(2))
    w = warploom.interleave_gate_up(w1, w3, block=block)
    y = warploom.matmul(x, w.T, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=block))
    assert y.shape == (m, w.shape[0] // 2) and y.dtype == BF16
    close(y, F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T), i)


@pytest.mark.parametrize(("block", "fast"), [(128, True), (64, False)])
def test_fp8_rowwise_gate_up_against_torch(block: int, fast: bool) -> None:
    g = torch.Generator(device="cuda").manual_seed(block)
    m, i, k = 515, 2048, 7168
    x = torch.randn(m, k, device="cuda", generator=g).to(E4)
    w1, w3 = (torch.randn(i, k, device="cuda", generator=g).to(E4) for _ in range(2))
    sa = torch.rand(m, 1, device="cuda", generator=g) / k ** 0.5
    s1, s3 = (torch.rand(i, device="cuda", generator=g) + 0.5 for _ in range(2))
    w = warploom.interleave_gate_up(w1, w3, block=block)
    sb = warploom.interleave_gate_up(s1, s3, block=block, dim=-1)[None]
    y = warploom.scaled_mm(x, w.T, sa, sb, out_dtype=BF16, use_fast_accum=fast,
                           epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=block))
    xs = x.float() * sa
    close(y, F.silu(xs @ (w1.float() * s1[:, None]).T) * (xs @ (w3.float() * s3[:, None]).T), i)


def test_one_gemm_equals_the_two_gemm_form() -> None:
    """The fused two-GEMM form (the gate as a dense operand of the up GEMM) and the one-GEMM form agree."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(256, 1024, device="cuda", generator=g).to(BF16)
    w1, w3 = (torch.randn(768, 1024, device="cuda", generator=g).div(32).to(BF16) for _ in range(2))
    gate = warploom.matmul(x, w1.T)
    two = warploom.matmul(x, w3.T, epilogue=lambda acc, gate: F.silu(gate.float()) * acc, gate=gate)
    one = warploom.matmul(x, warploom.interleave_gate_up(w1, w3, block=128).T,
                          epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=128))
    torch.testing.assert_close(one.float(), two.float(), rtol=2 ** -6, atol=1e-2)


def test_grouped_gate_up_against_torch() -> None:
    """M-grouped (DeepSeek-V3's routed experts: I = 2048, K = 7168) with an empty expert and ragged expert ends:
    each expert's rows through its own interleaved weight, the stores clipped at its last row."""
    g = torch.Generator(device="cuda").manual_seed(7)
    ends, i, k = [300, 300, 811, 1500], 2048, 7168
    x = torch.randn(ends[-1], k, device="cuda", generator=g).to(BF16)
    w1, w3 = (torch.randn(4, i, k, device="cuda", generator=g).div(k ** 0.5).to(BF16) for _ in range(2))
    w = warploom.interleave_gate_up(w1, w3, block=128)
    y = warploom.grouped_mm(x, w.transpose(-2, -1), torch.tensor(ends, dtype=torch.int32, device="cuda"),
                            epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=128))
    want, start = [], 0
    for e, end in enumerate(ends):
        xs = x[start:end].float()
        want.append(F.silu(xs @ w1[e].float().T) * (xs @ w3[e].float().T))
        start = end
    close(y, torch.cat(want), i)
