"""fp8 outputs of scaled_mm (issue 27 item 3) on the CPU simulator, against torch.

``scaled_mm(..., out_dtype=e4m3 | e5m2, scale_result=s)`` stores ``(acc * scale_a * scale_b + bias) * s`` cast to
fp8 with saturation, NaN kept (torch._scaled_mm's cuBLAS kernel converts with satfinite). The inputs are small
integers and the scales powers of two, so every fp32 sum is exact in any order: the simulator's tile-by-tile
accumulation and torch's reference do identical math, and the fp8 bytes must match bit for bit.
"""

from __future__ import annotations

import pytest
import torch

import warploom
import warploom.api  # registers torch.ops.warploom.*, whichever of torch and warploom a session imported first

E4, E5, BF16, FP16, FP32 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16, torch.float32
FP8_MAX = {E4: 448.0, E5: 57344.0}


def ints(*shape: int, dtype: torch.dtype, lo: int = -4, hi: int = 5) -> torch.Tensor:
    return torch.randint(lo, hi, shape).to(torch.float32).to(dtype)


def pow2(*shape: int) -> torch.Tensor:
    return torch.exp2(torch.randint(-3, 3, shape).to(torch.float32))


def scales(recipe: str, m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    kb, nb = -(-k // 128), -(-n // 128)
    return {"tensorwise": lambda: (pow2(), pow2()),
            "rowwise": lambda: (pow2(m, 1), pow2(1, n)),
            "blockwise": lambda: (pow2(kb, m).t(), pow2(kb, nb))}[recipe]()


def exact(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, recipe: str,
          bias: torch.Tensor | None = None, sr: torch.Tensor | None = None) -> torch.Tensor:
    """torch's meaning in fp32: ``(a @ b * scales + bias) * scale_result``, the blockwise scales expanded to the
    elements they cover."""
    af, bf = a.float(), b.float()
    if recipe == "blockwise":
        m, k = a.shape
        n = b.shape[1]
        acc = torch.zeros(m, n)
        for kb in range(-(-k // 128)):
            ks = slice(kb * 128, (kb + 1) * 128)
            sbe = sb[kb].repeat_interleave(128)[:n]
            acc = acc + (af[:, ks] @ bf[ks, :]) * sa[:, kb:kb + 1] * sbe[None, :]
    else:
        acc = af @ bf * sa * sb
    if bias is not None:
        acc = acc + bias.float()
    return acc if sr is None else acc * sr


def saturate(x: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    """The saturating cast: clamp (which keeps NaN), then ``.to``, which rounds to nearest even."""
    return x.clamp(-FP8_MAX[out], FP8_MAX[out]).to(out)


@pytest.mark.parametrize("out", [E4, E5], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("sr", [None, 0.25, 16.0], ids=["no_scale_result", "sr0.25", "sr16_saturates"])
def test_fp8_output_matches_torch_bit_for_bit(out: torch.dtype, recipe: str, with_bias: bool,
                                              sr: float | None) -> None:
    torch.manual_seed(0)
    m, n, k = 200, 272, 384  # no tile multiples; three k-blocks
    a, b = ints(m, k, dtype=E4), ints(n, k, dtype=E4).t()
    sa, sb = scales(recipe, m, n, k)
    bias = ints(n, dtype=BF16, lo=-64, hi=64) if with_bias else None
    s = None if sr is None else torch.tensor(sr)
    y = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out, scale_result=s, use_fast_accum=recipe != "blockwise")
    want = saturate(exact(a, b, sa, sb, recipe, bias, s), out)
    assert y.dtype == out and y.shape == (m, n)
    assert torch.equal(y.view(torch.uint8), want.view(torch.uint8))
    if sr == 16.0 and out is E4:  # the case must reach the saturation it tests
        assert (y.float().abs() == 448.0).any()


def test_e5m2_saturates_where_eager_torch_would_give_inf() -> None:
    """Past 57344 e5m2 saturates (satfinite) instead of rounding to inf, as eager ``.to(float8_e5m2)`` would."""
    a, b = torch.full((64, 64), 448.0).to(E4), torch.full((64, 64), 448.0).to(E4).t()
    y = warploom.scaled_mm(a, b, torch.ones(()), torch.ones(()), out_dtype=E5, scale_result=torch.tensor(1.0))
    assert torch.isinf((a.float() @ b.float()).to(E5).float()).all()  # what a plain cast does
    assert (y.float() == 57344.0).all()


def test_nan_stays_nan_through_the_saturating_cast() -> None:
    torch.manual_seed(1)
    m = n = k = 128
    a, b = ints(m, k, dtype=E4), ints(n, k, dtype=E4).t()
    sa, sb = torch.ones(m, 1), torch.ones(1, n)
    sa[5] = float("nan")
    for out in (E4, E5):
        y = warploom.scaled_mm(a, b, sa, sb, out_dtype=out, scale_result=torch.tensor(1e6))
        assert torch.isnan(y[5].float()).all()
        assert not torch.isnan(y[:5].float()).any()
        assert (y[:5].float().abs() == FP8_MAX[out]).sum() > 0


def test_plan_and_run_agree_and_zero_k_is_the_scaled_bias() -> None:
    a, b = torch.empty(64, 0).to(E4), torch.empty(64, 0).to(E4).t()
    bias = torch.full((64,), 300.0, dtype=BF16)
    y = warploom.scaled_mm(a, b, torch.ones(()), torch.ones(()), bias=bias, out_dtype=E4,
                           scale_result=torch.tensor(2.0))
    assert (y.float() == 448.0).all()  # 600 saturates
    k = warploom.plan(torch.empty(64, 128, device="meta").to(E4), torch.empty(64, 128, device="meta").to(E4).t(),
                      torch.ones((), device="meta"), torch.ones((), device="meta"), out_dtype=E5,
                      scale_result=torch.ones((), device="meta"))
    assert k.spec.out_dtype.value == "e5m2" and k.spec.epilogue is not None


@pytest.mark.parametrize("bias_dtype", [BF16, FP16, FP32])
def test_fp32_output_with_bias(bias_dtype: torch.dtype) -> None:
    """Issue 27 item 4: fp32 output with a bias. torch._scaled_mm refuses it on CUDA ('Bias is not supported when
    out_dtype is set to Float32'); warploom computes it, exactly as the fp32 sum it is."""
    torch.manual_seed(2)
    m, n, k = 130, 160, 256
    a, b = ints(m, k, dtype=E4), ints(n, k, dtype=E4).t()
    for recipe in ("tensorwise", "rowwise", "blockwise"):
        sa, sb = scales(recipe, m, n, k)
        bias = ints(n, dtype=bias_dtype, lo=-100, hi=100)
        y = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=FP32, use_fast_accum=recipe != "blockwise")
        assert y.dtype == FP32 and torch.equal(y, exact(a, b, sa, sb, recipe, bias)), recipe


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "blockwise"])
def test_e5m2_x_e5m2(recipe: str) -> None:
    """Issue 27 item 4: two e5m2 operands (torch._scaled_mm refuses them on CUDA; sm_90a's wgmma takes them)."""
    torch.manual_seed(4)
    m, n, k = 200, 272, 384
    a, b = ints(m, k, dtype=E5), ints(n, k, dtype=E5).t()
    sa, sb = scales(recipe, m, n, k)
    fast = recipe != "blockwise"
    assert torch.equal(warploom.scaled_mm(a, b, sa, sb, out_dtype=FP32, use_fast_accum=fast),
                       exact(a, b, sa, sb, recipe))
    y = warploom.scaled_mm(a, b, sa, sb, out_dtype=E5, scale_result=torch.tensor(2.0), use_fast_accum=fast)
    assert torch.equal(y.view(torch.uint8), saturate(exact(a, b, sa, sb, recipe) * 2.0, E5).view(torch.uint8))


def test_the_custom_op_takes_an_fp8_out_dtype() -> None:
    """torch.ops.warploom.scaled_mm (what torch.compile traces) with an fp8 out_dtype runs the same fused kernel."""
    torch.manual_seed(5)
    a, b = ints(64, 128, dtype=E4), ints(64, 128, dtype=E4).t()
    one = torch.ones(())
    y = torch.ops.warploom.scaled_mm(a, b, one, one, None, E5, False)
    assert torch.equal(y.view(torch.uint8), saturate(exact(a, b, one, one, "tensorwise"), E5).view(torch.uint8))
