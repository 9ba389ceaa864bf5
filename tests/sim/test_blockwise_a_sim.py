"""128x128 blocks of A's scales (issue 27 item 4) through warploom.scaled_mm on the CPU simulator.

scale_a (ceil(M/128), ceil(K/128)), torch's ScalingType.BlockWise128x128 for A, with scale_b per column
(ceil(K/128), N) (the pair torch._scaled_mm takes) or per 128x128 block (ceil(K/128), ceil(N/128)) (which torch
refuses on CUDA). Integer inputs and power-of-two scales make every sum exact, so the result must equal an
independent k-block loop exactly, whatever scale_a's strides: row-major, column-major, or a (M/128, K/128) view of
a (M/128, L4) buffer (cuBLAS's rows, L4 = K/128 rounded up to 4). 384x128x1280 (K/128 = 10) is where torch, given
a row-major scale_a, reads other scales (tests/unit/test_blockwise_a.py).
"""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom.spec import ScaleRecipe

E4, BF16, FP32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32


def pow2(*shape: int) -> torch.Tensor:
    return torch.exp2(torch.randint(-3, 4, shape).float())


def loop_reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """sum over k-blocks of (A[:, kb] @ B[kb, :]) * scale_a[row // 128, kb] * scale_b[kb, col or col // 128]."""
    m, k = a.shape
    n = b.shape[1]
    rows, cols = torch.arange(m) // 128, torch.arange(n) // (128 if sb.shape[1] != n else 1)
    acc = torch.zeros(m, n)
    for kb in range(-(-k // 128)):
        ks = slice(kb * 128, (kb + 1) * 128)
        acc += (a[:, ks].float() @ b[ks].float()) * sa[rows, kb][:, None] * sb[kb, cols][None, :]
    return acc


@pytest.mark.parametrize("size", [(300, 272, 640), (128, 256, 128), (1, 16, 16), (129, 528, 1008),
                                  (384, 128, 1280), (130, 128, 384)])
@pytest.mark.parametrize("b_block", [1, 128], ids=["b1x128", "b128x128"])
@pytest.mark.parametrize("layout", ["row", "col", "l4"])
def test_a_blocks_exact(size: tuple[int, int, int], b_block: int, layout: str) -> None:
    torch.manual_seed(sum(size))
    m, n, k = size
    kb, mb, nb = -(-k // 128), -(-m // 128), -(-n // 128)
    a = torch.randint(-4, 5, (m, k)).float().to(E4)
    b = torch.randint(-4, 5, (n, k)).float().to(E4).t()
    l4 = -(-kb // 4) * 4
    # Any strides: the kernel reads the scales one by one ("l4": rows L4 apart, as cuBLAS lays them out).
    if layout == "row":
        sa = pow2(mb, kb)
    elif layout == "col":
        sa = pow2(kb, mb).t()
    else:
        sa = pow2(mb, l4)[:, :kb]
    sb = pow2(kb, n if b_block == 1 else nb)
    want = ScaleRecipe.BLOCKWISE_128X128_1X128 if b_block == 1 else ScaleRecipe.BLOCKWISE_128X128_128X128
    if m > 1:  # (with M = 1 the shape is also the 1x128 one, which means the same)
        assert warploom.plan(a, b, sa, sb).spec.scale is want
    ref = loop_reference(a, b, sa, sb)
    assert torch.equal(warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32), ref)
    assert torch.equal(warploom.scaled_mm(a, b, sa, sb), ref.to(BF16))
    bias = torch.randint(-8, 8, (n,)).to(BF16)
    y = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=E4, scale_result=torch.tensor(0.5))
    assert torch.equal(y.view(torch.uint8), ((ref + bias.float()) * 0.5).clamp(-448, 448).to(E4).view(torch.uint8))


def test_a_blocks_with_padded_b_blocks() -> None:
    """torch.nn.functional.scaled_mm's padded 128x128 scale_b (k-blocks rounded up to 4) goes with A's blocks too."""
    torch.manual_seed(3)
    m, n, k = 256, 384, 640
    a, b = torch.randint(-4, 5, (m, k)).float().to(E4), torch.randint(-4, 5, (n, k)).float().to(E4).t()
    sa, sb = pow2(2, 5), pow2(8, 3)
    assert torch.equal(warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32), loop_reference(a, b, sa, sb[:5]))
