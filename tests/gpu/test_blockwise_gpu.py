"""GPU tier: blockwise-scaled fp8 (1x128 x 128x128 and 1x128 x 1x128) against the dequantized fp32 product.

The scales ride the pipeline (CopyScales through the A/B stages) and every k-block's partial is promoted with
them; these tests check the kernel on shapes that are not tile multiples, with scale tensors in every layout a
user may hold (row-major, column-major as torch wants them, torch.nn.functional.scaled_mm's padded 128x128
layout, expanded stride-0 views), against torch's own blockwise kernel where torch has one.
"""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.reference import relative_error as scale_free_error
from warploom.spec import ScaleRecipe

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")

def _operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    return a, b


def _scales(rows: int, cols: int, seed: int, layout: str) -> torch.Tensor:
    """Random positive scales spread over 2**-4..2**4, (rows, cols) in `layout`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = torch.exp2(torch.randint(-4, 5, (rows, cols), device="cuda", generator=g).float())
    s = s * (torch.rand(rows, cols, device="cuda", generator=g) + 0.5)
    if layout == "col":  # outer-dim-major, torch's layout for 1x128 scales
        return s.t().contiguous().t()
    return s


def _poison(m: int, n: int, dtype: torch.dtype) -> None:
    torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


SHAPES = [(296, 528, 1024), (1, 4096, 4096), (4097, 272, 2048), (128, 256, 128), (200, 1008, 400), (64, 7168, 2048)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("recipe", ["128x128", "1x128"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_blockwise(m: int, n: int, k: int, recipe: str, layout: str) -> None:
    kb, nb = -(-k // 128), -(-n // 128)
    a, b = _operands(m, n, k, m + n + k)
    sa = _scales(m, kb, 1, layout)
    sb = _scales(kb, nb if recipe == "128x128" else n, 2, layout)
    _poison(m, n, torch.bfloat16)
    out = warploom.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    want = ScaleRecipe.BLOCKWISE_1X128_128X128 if recipe == "128x128" else ScaleRecipe.BLOCKWISE_1X128_1X128
    if kb == 1 and recipe == "1x128":
        want = ScaleRecipe.ROWWISE  # one k-block: (M, 1) x (1, N) 1x128 scales are rowwise scales, same product
    assert warploom.plan(a, b, sa, sb).spec.scale is want
    da, db = dequantized(a, b, sa, sb)
    ref = da @ db
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert not out.isnan().any()
    assert scale_free_error(out.float(), ref) < 1e-3


@pytest.mark.parametrize("plan_kw", [dict(bm=128, bn=256), dict(bm=128, bn=128), dict(bm=64, bn=128),
                                     dict(bm=64, bn=256), dict(bm=128, bn=256, scale_partition=True),
                                     dict(bm=64, bn=128, scale_partition=True), dict(bm=128, bn=128, stages=1),
                                     dict(bm=128, bn=128, pingpong=True), dict(bm=64, bn=64)])
@pytest.mark.parametrize("recipe", ["128x128", "1x128"])
def test_blockwise_plans(plan_kw: dict, recipe: str) -> None:
    """Every tile shape the planner may pick, forced, and the dedicated scale partition, on a shape with partial
    tiles in M, N and K."""
    m, n, k = 300, 608, 1008
    kb, nb = -(-k // 128), -(-n // 128)
    a, b = _operands(m, n, k, 7)
    sa = _scales(m, kb, 3, "col")
    sb = _scales(kb, nb if recipe == "128x128" else n, 4, "row")
    assert _forced_error(a, b, sa, sb, plan_kw) < 1e-3


def _forced_error(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, plan_kw: dict) -> float:
    """Run the plan with `plan_kw` forced into a poisoned output; its error against the dequantized product."""
    m, n = a.shape[0], b.shape[1]
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)
    dev = DeviceInfo.current()
    kernel = build(spec, dev, plan_schedule(spec, dev, **plan_kw))
    _poison(m, n, torch.bfloat16)
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    kernel.run(a, b, out, sa, sb)
    assert not out.isnan().any()
    da, db = dequantized(a, b, sa, sb)
    return scale_free_error(out.float(), da @ db)


def test_blockwise_torch_layouts() -> None:
    """torch.nn.functional.scaled_mm's 128x128 layout (K-blocks padded to 4, stride (1, L4)) and expanded views."""
    m, n, k = 256, 384, 640
    kb, nb = 5, 3
    a, b = _operands(m, n, k, 11)
    sa = _scales(m, kb, 5, "col")
    padded = torch.empty(nb, 8, device="cuda").t()  # (L4, nb), stride (1, L4)
    padded.copy_(_scales(8, nb, 6, "row"))
    out = warploom.scaled_mm(a, b, sa, padded)
    da, db = dequantized(a, b, sa, padded[:kb])
    assert scale_free_error(out.float(), da @ db) < 1e-3
    # One scale per k-block for every row and every column block: stride-0 expanded views.
    sa0 = torch.rand(1, kb, device="cuda").add(0.5).expand(m, kb)
    sb0 = torch.rand(kb, 1, device="cuda").add(0.5).expand(kb, nb)
    out = warploom.scaled_mm(a, b, sa0, sb0)
    da, db = dequantized(a, b, sa0, sb0)
    assert scale_free_error(out.float(), da @ db) < 1e-3


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_blockwise_bias_out_dtype(out_dtype: torch.dtype) -> None:
    m, n, k = 333, 528, 768
    a, b = _operands(m, n, k, 12)
    sa, sb = _scales(m, 6, 7, "col"), _scales(6, 5, 8, "row")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 4
    _poison(m, n, out_dtype)
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    da, db = dequantized(a, b, sa, sb)
    assert out.dtype == out_dtype and not out.isnan().any()
    assert scale_free_error(out.float(), da @ db + bias.float()) < 1e-3


def _torch_blockwise(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor | None:
    """torch's own 1x128 x 128x128 kernel (torch._scaled_mm with outer-dim-major 1x128 scales), if this torch has it."""
    try:
        return torch._scaled_mm(a, b, sa.t().contiguous().t(), sb.t().contiguous().t(), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return None


def test_blockwise_matches_torch() -> None:
    m, n, k = 512, 1024, 2048
    a, b = _operands(m, n, k, 13)
    sa, sb = _scales(m, 16, 9, "col"), _scales(16, 8, 10, "row")
    theirs = _torch_blockwise(a, b, sa, sb)
    if theirs is None:
        pytest.skip("this torch has no blockwise _scaled_mm on this GPU")
    ours = warploom.scaled_mm(a, b, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    ref = da @ db
    # At no larger error than torch's (a small slack for bf16 output rounding).
    assert scale_free_error(ours.float(), ref) <= 1.5 * scale_free_error(theirs.float(), ref) + 1e-6
    assert scale_free_error(ours.float(), theirs.float()) < 1e-4


def test_blockwise_special_scales() -> None:
    """Zero, NaN and Inf scales act as the dequantized product says: zero rows, NaN rows, and inf * 0 = NaN."""
    m, n, k = 256, 256, 512
    a, b = _operands(m, n, k, 14)
    sa, sb = _scales(m, 4, 11, "col"), _scales(4, 2, 12, "row")
    sa[3, :] = 0.0  # row 3: every k-block scaled to zero
    sa[5, 1] = float("nan")  # row 5: one k-block NaN
    out = warploom.scaled_mm(a, b, sa, sb)
    assert (out[3] == 0).all()
    assert out[5].isnan().all()
    assert not out[[0, 1, 2, 4, 6]].isnan().any()


def _e8m0(rows: int, cols: int, seed: int) -> torch.Tensor:
    """MX scales 2**-9..2**9 as e8m0 bits."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(118, 137, (rows, cols), device="cuda", generator=g, dtype=torch.uint8).view(
        torch.float8_e8m0fnu)


# (K = 1056 and 96: the last k-block has 1 and 3 of its 4 slices; the scales past K must not be read.)
@pytest.mark.parametrize("m,n,k", [(296, 528, 1024), (1, 4096, 4096), (4097, 272, 2048), (64, 7168, 2048),
                                   (300, 528, 1056), (128, 256, 96)])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_mx(m: int, n: int, k: int, layout: str) -> None:
    """MX fp8 computed by promotion on Hopper: 32-deep wgmma, each promoted with its e8m0 scales."""
    a, b = _operands(m, n, k, m + k)
    sa, sb = _e8m0(m, k // 32, 15), _e8m0(n, k // 32, 16)
    if layout == "col":
        sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()
    _poison(m, n, torch.bfloat16)
    out = warploom.scaled_mm(a, b, sa, sb)
    assert warploom.plan(a, b, sa, sb).spec.scale is ScaleRecipe.MX
    da, db = dequantized(a, b, sa, sb)
    assert not out.isnan().any()
    assert scale_free_error(out.float(), da @ db) < 1e-3


@pytest.mark.parametrize("plan_kw", [dict(bm=128, bn=256), dict(bm=128, bn=128), dict(bm=64, bn=128),
                                     dict(bm=64, bn=256)])
def test_mx_plans(plan_kw: dict) -> None:
    m, n, k = 300, 608, 1024
    a, b = _operands(m, n, k, 17)
    sa, sb = _e8m0(m, k // 32, 18), _e8m0(n, k // 32, 19)
    assert _forced_error(a, b, sa, sb, plan_kw) < 1e-3
