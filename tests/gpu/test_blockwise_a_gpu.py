"""GPU tier: 128x128 blocks of A's scales (issue 27 item 4) against torch._scaled_mm.

torch takes BlockWise128x128 for A with BlockWise1x128 for B (cuBLAS >= 12.9 on sm_90): scale_a (ceil(M/128),
ceil(K/128)) row-major, scale_b (ceil(K/128), N) as warploom takes it (b.t()'s (N, K/128) scales, outer-dim-major).
Integer inputs and power-of-two scales make every sum exact, so both must give the same fp32 values. 128x128 on both
operands torch refuses on CUDA; warploom computes it, checked against the exact k-block loop.
"""

from __future__ import annotations

import pytest
import torch

import warploom

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")

E4, BF16, FP32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
SHAPES = [(256, 768, 512), (384, 128, 1280), (512, 512, 512), (4096, 7168, 2048), (300, 528, 1024)]


def operands(m: int, n: int, k: int, b_block: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randint(-4, 5, (m, k), device="cuda", generator=g).float().to(E4)
    b = torch.randint(-4, 5, (n, k), device="cuda", generator=g).float().to(E4).t()
    kb, mb, nb = -(-k // 128), -(-m // 128), -(-n // 128)

    def pow2(*shape: int) -> torch.Tensor:
        return torch.exp2(torch.randint(-3, 4, shape, device="cuda", generator=g).float())

    return a, b, pow2(mb, kb), pow2(kb, n if b_block == 1 else nb)


def loop_reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    rows = torch.arange(m, device="cuda") // 128
    cols = torch.arange(n, device="cuda") // (128 if sb.shape[1] != n else 1)
    acc = torch.zeros(m, n, device="cuda")
    for kb in range(-(-k // 128)):
        ks = slice(kb * 128, (kb + 1) * 128)
        acc += (a[:, ks].float() @ b[ks].float()) * sa[rows, kb][:, None] * sb[kb, cols][None, :]
    return acc


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out", [BF16, FP32])
def test_a128x128_b1x128_matches_torch(shape: tuple[int, int, int], out: torch.dtype) -> None:
    a, b, sa, sb = operands(*shape, b_block=1)
    want = torch._scaled_mm(a, b, sa, sb, out_dtype=out)
    got = warploom.scaled_mm(a, b, sa, sb, out_dtype=out)
    assert torch.equal(got, want)
    assert torch.equal(got, loop_reference(a, b, sa, sb).to(out))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a128x128_b128x128_where_torch_refuses_it(shape: tuple[int, int, int]) -> None:
    a, b, sa, sb = operands(*shape, b_block=128)
    with pytest.raises(RuntimeError):
        torch._scaled_mm(a, b, sa, sb, out_dtype=BF16)
    got = warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32)
    assert torch.equal(got, loop_reference(a, b, sa, sb))
