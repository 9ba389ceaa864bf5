"""GPU tier: 128x128 blocks of A's scales (issue 27 item 4) against torch._scaled_mm.

torch takes BlockWise128x128 for A with BlockWise1x128 for B (cuBLAS >= 12.9 on sm_90): scale_a (ceil(M/128),
ceil(K/128)), scale_b (ceil(K/128), N) as warploom takes it (b.t()'s (N, K/128) scales, outer-dim-major). cuBLAS
reads scale_a's rows L4 = ceil(K/128) rounded up to 4 apart whatever its strides, so torch is given
`cublas_a_blocks(scale_a)` and warploom scale_a itself (it reads the tensor's strides); with a plain row-major
scale_a torch computes with other scales wherever K/128 is not a multiple of 4 and M > 128
(test_torch_reads_a_rows_l4_apart).
Integer inputs and power-of-two scales make every sum exact, so both must give the same fp32 values, and so must
the exact k-block loop. 128x128 on both operands torch refuses on CUDA; warploom computes it, checked against the
loop.
"""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom.reference import cublas_a_blocks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")

E4, BF16, FP32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
# (384, 128, 1280), (640, 128, 1152) and (130, 256, 384): K/128 = 10, 9 and 3, not multiples of 4.
SHAPES = [(256, 768, 512), (384, 128, 1280), (512, 512, 512), (4096, 7168, 2048), (300, 528, 1024),
          (640, 128, 1152), (130, 256, 384)]


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
    got = warploom.scaled_mm(a, b, sa, sb, out_dtype=out)
    assert torch.equal(got, loop_reference(a, b, sa, sb).to(out))  # (first: a failure says whose result is off)
    assert torch.equal(got, torch._scaled_mm(a, b, cublas_a_blocks(sa), sb, out_dtype=out))


def test_torch_reads_a_rows_l4_apart() -> None:
    """Why torch is given `cublas_a_blocks`: at K/128 = 10 torch._scaled_mm reads row i of a row-major (3, 10)
    scale_a at element 12 * i, as if its strides were (12, 1) (the reported 'wrong result' at 384x128x1280 was
    torch's). The storage past the 30 elements is set, so what torch reads there is known."""
    a, b, _, sb = operands(384, 128, 1280, b_block=1)
    g = torch.Generator(device="cuda").manual_seed(10)
    storage = torch.exp2(torch.randint(-3, 4, (3 * 12,), device="cuda", generator=g).float())
    sa = storage[:30].view(3, 10)  # row-major, strides (10, 1): what torch._scaled_mm's check asks for
    read = storage.view(3, 12)[:, :10]  # what cuBLAS reads: rows 12 elements apart
    assert not torch.equal(loop_reference(a, b, sa, sb), loop_reference(a, b, read, sb))
    assert torch.equal(torch._scaled_mm(a, b, sa, sb, out_dtype=FP32), loop_reference(a, b, read, sb))
    assert torch.equal(warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32), loop_reference(a, b, sa, sb))
    assert torch.equal(warploom.scaled_mm(a, b, read, sb, out_dtype=FP32), loop_reference(a, b, read, sb))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a128x128_b128x128_where_torch_refuses_it(shape: tuple[int, int, int]) -> None:
    a, b, sa, sb = operands(*shape, b_block=128)
    with pytest.raises(RuntimeError):
        torch._scaled_mm(a, b, sa, sb, out_dtype=BF16)
    got = warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32)
    assert torch.equal(got, loop_reference(a, b, sa, sb))
