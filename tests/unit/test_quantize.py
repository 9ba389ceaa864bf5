"""warploom.quantize on plain tensors against a hand-written fp64 reference, and its refusals.

The reference does every step in float64 and rounds by hand: s = fp32(amax / fp8_max) (one rounding of an exact
quotient: fp64 division then the fp32 rounding is the correctly rounded fp32 quotient, as 53 >= 2 * 24 + 2), the
quotient y / s rounded to fp32 the same way, then to the fp8 grid by round-half-even on the type's exponent grid
(subnormals included) with saturation. So q is compared as exact bytes and s as exact fp32 values, and neither
leans on torch's own fp8 conversion.
"""

from __future__ import annotations

import math

import pytest
import torch

import warploom
from warploom.errors import ArgumentTypeError, DTypeError, InputError, UnsupportedError

# (mantissa bits, smallest normal exponent, largest finite value)
_GRID = {torch.float8_e4m3fn: (3, -6, 448.0), torch.float8_e5m2: (2, -14, 57344.0)}


def _fp8_round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp64 `x` rounded to `dtype`'s values (RNE, saturating, NaN kept), still fp64."""
    mbits, emin, fmax = _GRID[dtype]
    x = x.clamp(-fmax, fmax)
    e = torch.floor(torch.log2(x.abs())).clamp(min=emin)  # log2(0) = -inf: clamped to the subnormal grid
    e = torch.where(torch.isfinite(e), e, torch.full_like(e, emin))
    step = torch.exp2(e - mbits)
    return torch.round(x / step) * step  # torch.round is half to even; the clamp kept it finite


def _reference(y: torch.Tensor, dtype: torch.dtype, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q bytes, s fp32) by hand: groups of `width` columns (the last one ragged)."""
    fmax = _GRID[dtype][2]
    y64 = y.double()
    m, n = y64.shape
    groups = max(1, math.ceil(n / width))
    s = torch.empty(m, groups, dtype=torch.float64)
    q = torch.empty(m, n, dtype=torch.float64)
    for j in range(groups):
        cols = slice(j * width, min(n, (j + 1) * width))
        amax = y64[:, cols].abs().amax(dim=1) if n else torch.zeros(m, dtype=torch.float64)
        sj = (amax / fmax).float().double()
        sj = torch.where(sj == 0, 1.0, sj)
        s[:, j] = sj
        q[:, cols] = _fp8_round((y64[:, cols] / sj[:, None]).float().double(), dtype)
    return q.to(dtype).view(torch.uint8), s.float()


def _data(m: int, n: int, seed: int, in_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values over many binades (so groups' scales differ and fp8 subnormals occur), a zero row and a zero group."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(m, n, generator=g) * torch.exp2(torch.randint(-12, 12, (m, n), generator=g).float())
    y[1] = 0.0
    if n > 128:
        y[2, :128] = 0.0
    y[0, 0] = -0.0
    return y.to(in_dtype)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("n", [300, 256, 128, 1, 129])
@pytest.mark.parametrize("in_dtype", [torch.float32, torch.bfloat16])
def test_1x128_matches_fp64_reference(dtype: torch.dtype, n: int, in_dtype: torch.dtype) -> None:
    y = _data(5, n, n, in_dtype)
    q, s = warploom.quantize(y, recipe="1x128", dtype=dtype)
    want_q, want_s = _reference(y, dtype, 128)
    assert q.dtype == dtype and q.shape == (5, n)
    assert s.dtype == torch.float32 and s.shape == (5, math.ceil(n / 128))
    assert torch.equal(s, want_s)
    assert torch.equal(q.view(torch.uint8), want_q)
    assert torch.equal(s[1], torch.ones_like(s[1]))  # the zero row: s = 1, q = 0
    assert not q[1].float().any()


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_rowwise_matches_fp64_reference(dtype: torch.dtype) -> None:
    y = _data(4, 300, 7)
    q, s = warploom.quantize(y, recipe="rowwise", dtype=dtype)
    want_q, want_s = _reference(y, dtype, 300)
    assert s.shape == (4, 1)
    assert torch.equal(s, want_s)
    assert torch.equal(q.view(torch.uint8), want_q)


def test_group_amax_reaches_fp8_max() -> None:
    """Each group's largest magnitude lands on fp8_max (saturating where s's rounding pushes it a hair above)."""
    y = _data(6, 384, 3)
    q, s = warploom.quantize(y)
    amax_q = q.float().abs().reshape(6, 3, 128).amax(-1)
    nonzero = y.abs().reshape(6, 3, 128).amax(-1) > 0
    assert torch.equal(amax_q[nonzero], torch.full_like(amax_q[nonzero], 448.0))


def test_dequantized_error_is_fp8_rounding() -> None:
    """q * s gives y back to within e4m3's half ulp (2**-4 relative) plus its subnormal step, group by group."""
    y = torch.randn(8, 520, generator=torch.Generator().manual_seed(1))
    q, s = warploom.quantize(y)
    s_cols = s.repeat_interleave(128, dim=1)[:, :520]
    err = (q.float() * s_cols - y).abs()
    assert torch.all(err <= y.abs() * 2**-4 + s_cols * 2**-10)


def test_nonfinite_propagates() -> None:
    y = torch.ones(2, 256)
    y[0, 3] = float("nan")
    y[1, 200] = float("inf")
    q, s = warploom.quantize(y)
    assert torch.isnan(s[0, 0]) and s[0, 1] == 1 / 448
    assert torch.isnan(q[0, :128].float()).all()
    assert torch.isinf(s[1, 1]) and torch.isnan(q[1, 200].float()) and q[1, 129].float() == 0


def test_leading_dims_and_empty() -> None:
    y = _data(6, 260, 5).reshape(2, 3, 260)
    q, s = warploom.quantize(y)
    q2, s2 = warploom.quantize(y.reshape(6, 260))
    assert s.shape == (2, 3, 3) and torch.equal(s.reshape(6, 3), s2)
    assert torch.equal(q.reshape(6, 260).view(torch.uint8), q2.view(torch.uint8))
    q, s = warploom.quantize(torch.zeros(3, 0))
    assert q.shape == (3, 0) and s.shape == (3, 0)


def test_recipe_enum_and_string_agree() -> None:
    y = _data(3, 200, 9)
    a = warploom.quantize(y, recipe=warploom.QuantRecipe.BLOCK_1X128)
    b = warploom.quantize(y, recipe="1x128")
    assert torch.equal(a[1], b[1]) and torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8))


def test_bad_inputs() -> None:
    y = torch.randn(4, 256)
    with pytest.raises(InputError, match=r"recipe: expected one of '1x128', 'rowwise', got '1x64'") as e:
        warploom.quantize(y, recipe="1x64")
    assert e.value.arg == "recipe"
    with pytest.raises(ArgumentTypeError, match="recipe"):
        warploom.quantize(y, recipe=128)  # type: ignore[arg-type]
    with pytest.raises(DTypeError, match="dtype: expected torch.float8_e4m3fn or torch.float8_e5m2"):
        warploom.quantize(y, dtype=torch.bfloat16)
    with pytest.raises(DTypeError, match="y: expected torch.float32"):
        warploom.quantize(y.to(torch.float8_e4m3fn))
    with pytest.raises(ArgumentTypeError, match="y: expected a torch.Tensor"):
        warploom.quantize(y.numpy())
    with pytest.raises(ArgumentTypeError, match="0-D"):
        warploom.quantize(torch.tensor(1.0))

    with pytest.raises(DTypeError, match=r"^dtype: expected torch.float8_e4m3fn or torch.float8_e5m2"):
        warploom.quantize(y, dtype=[torch.float8_e4m3fn])  # type: ignore[arg-type]  (a TypeError: unhashable)


@pytest.mark.parametrize("recipe", ["1x128", "rowwise"])
def test_sparse_y_is_refused_naming_it(recipe: str) -> None:
    """A sparse y raised torch's NotImplementedError (1x128: fill_ in F.pad) or RuntimeError (rowwise: reshape)
    rather than a warploom error (found by tests/unit/test_props_bad_input_grouped.py)."""
    with pytest.raises(ArgumentTypeError, match=r"^y: expected a dense \(strided\) torch.Tensor, got a tensor of "
                       r"layout torch.sparse_coo. Fix: pass y.to_dense\(\)"):
        warploom.quantize(torch.randn(4, 130).to_sparse(), recipe=recipe)


def _bf16(m: int, n: int) -> torch.Tensor:
    return torch.randn(m, n).to(torch.bfloat16)


def test_in_epilogue_refusals_name_the_fix() -> None:
    """Inside a fused epilogue 1x128 and rowwise quantization run (tests/sim/test_quantize_epilogue_sim.py,
    tests/sim/test_rowwise_epilogue_sim.py), rowwise wider than one tile too (rule 29's two passes); what cannot run
    says so and names the unfused way: a rule 29 graph with another output beside the pair, and an unknown recipe."""
    a, b = _bf16(64, 128), _bf16(128, 256)
    q, s = warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(acc, dtype=torch.float8_e5m2))
    assert q.dtype == torch.float8_e5m2 and s.shape == (64, 2)
    q, s = warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    assert q.shape == (64, 256) and s.shape == (64, 1)
    # rowwise wider than a tile runs in two passes (rule 29) and stores the pair only: a third output is refused
    q, s = warploom.matmul(a, _bf16(128, 384), epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    assert q.shape == (64, 384) and s.shape == (64, 1)
    with pytest.raises(UnsupportedError, match="rowwise, rule 29.*N=384 > 256 takes rule 29's two passes.*"
                                               r"Fix: .*warploom.quantize\(out, recipe='rowwise'\)"):
        warploom.matmul(a, _bf16(128, 384), epilogue=lambda acc: (*warploom.quantize(acc, recipe="rowwise"), acc))
    with pytest.raises(InputError, match="recipe: expected one of"):
        warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(acc, recipe="per_tensor"))


def test_unfused_workaround_is_the_reference() -> None:
    """The named fix: the call's fp32 result quantized afterwards is quantize of torch's product (CPU simulator)."""
    g = torch.Generator().manual_seed(4)
    a = torch.randn(72, 96, generator=g).to(torch.bfloat16)
    b = torch.randn(96, 200, generator=g).to(torch.bfloat16)
    bias = torch.randn(200, generator=g)
    out = warploom.matmul(a, b, epilogue=lambda acc, bias: acc + bias, bias=bias, out_dtype=torch.float32)
    want = a.float() @ b.float() + bias
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-4)
    q, s = warploom.quantize(out)
    wq, ws = warploom.quantize(want)
    assert torch.allclose(s, ws, rtol=1e-5)
    # Scale-free: the dequantized values differ by at most fp8 rounding of the (nearly equal) quotients.
    deq = q.float() * s.repeat_interleave(128, 1)[:, :200]
    wdeq = wq.float() * ws.repeat_interleave(128, 1)[:, :200]
    assert ((deq - wdeq).norm() / wdeq.norm()).item() < 2**-5
