"""Blockwise fp8 recipes without a GPU: how scales are recognised, refused, planned and simulated end to end.

scale_a (M, ceil(K/128)) with scale_b (ceil(K/128), ceil(N/128)) is 1x128 x 128x128 (DeepSeek-V3); with scale_b
(ceil(K/128), N) it is 1x128 x 1x128. Any strides are accepted (the kernel copies scales element by element);
torch.nn.functional.scaled_mm's 128x128 scale_b with K-blocks padded to a multiple of 4 is accepted too.
"""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import H100_SXM
from warploom.errors import ScaleError
from warploom.planner import plan_schedule, stage_bytes
from warploom.sim.reference import Inputs, dequantized, reference, relative_error
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

E4 = torch.float8_e4m3fn
BW, BW1 = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128


def fp8(m: int, n: int, k: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, generator=g) * 2).to(E4)
    b = (torch.randn(n, k, generator=g) * 2).to(E4).t()
    return a.to(device), b.to(device)


def recipe(m: int, n: int, k: int, sa: torch.Tensor, sb: torch.Tensor) -> ScaleRecipe:
    a, b = fp8(m, n, k, "meta")
    return checks.scaled_mm_spec(a, b, sa.to("meta"), sb.to("meta")).scale


@pytest.mark.parametrize("m,n,k", [(256, 384, 1024), (1, 16, 4096), (300, 528, 1008), (64, 7168, 2048)])
def test_recipes_by_shape(m: int, n: int, k: int) -> None:
    kb, nb = -(-k // 128), -(-n // 128)
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(kb, nb)) is BW
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(kb, n)) is BW1
    # torch's layouts: 1x128 scales outer-dim-major, F.scaled_mm's K-blocks padded to 4 for 128x128.
    assert recipe(m, n, k, torch.ones(kb, m).t(), torch.ones(kb, nb)) is BW
    padded = -(-kb // 4) * 4
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(nb, padded).t()) is BW
    # Expanded (stride-0) views are scales like any other.
    assert recipe(m, n, k, torch.ones(1, kb).expand(m, kb), torch.ones(kb, 1).expand(kb, n)) is BW1


def test_one_k_block_of_per_column_scales_is_rowwise() -> None:
    """K <= 128: 1x128 x 1x128 scales are (M, 1) and (1, N), the rowwise shapes, with the rowwise meaning."""
    assert recipe(64, 256, 128, torch.ones(64, 1), torch.ones(1, 256)) is ScaleRecipe.ROWWISE
    assert recipe(64, 256, 128, torch.ones(64, 1), torch.ones(1, 2)) is BW


def test_blockwise_is_always_promoted() -> None:
    a, b = fp8(128, 256, 512, "meta")
    for fast in (False, True):
        spec = checks.scaled_mm_spec(a, b, torch.ones(128, 4, device="meta"), torch.ones(4, 2, device="meta"),
                                     use_fast_accum=fast)
        assert spec.accumulation is Accumulation.PROMOTED
    with pytest.raises(ValueError, match="must be PROMOTED"):
        GemmSpec(128, 256, 512, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW)


@pytest.mark.parametrize("sa_shape,sb_shape,arg", [
    ((128, 5), (4, 2), "scale_a"),  # one K-block too many
    ((128, 4), (4, 3), "scale_b"),  # N-blocks of another N
    ((128, 4), (2, 2), "scale_b"),  # K-blocks of another K
    ((128, 4), (2, 4), "scale_b"),  # (N-blocks, K-blocks): must be passed transposed (a view)
    ((4, 128), (4, 2), "scale_a"),  # (K-blocks, M)
])
def test_wrong_shapes_name_the_argument(sa_shape: tuple[int, int], sb_shape: tuple[int, int], arg: str) -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError) as e:
        checks.scaled_mm_spec(a, b, torch.ones(sa_shape, device="meta"), torch.ones(sb_shape, device="meta"))
    assert e.value.arg == arg
    assert "BlockWise128x128" in str(e.value) and "(128, 4)" in str(e.value)


def test_wrong_scale_dtype() -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError, match="scale_b: expected a torch.float32"):
        checks.scaled_mm_spec(a, b, torch.ones(128, 4, device="meta"),
                              torch.ones(4, 2, device="meta", dtype=torch.bfloat16))


def test_planner_counts_the_scale_slots() -> None:
    spec = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW,
                    accumulation=Accumulation.PROMOTED)
    per_col = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW1,
                       accumulation=Accumulation.PROMOTED)
    plain = 128 * 128 + 256 * 128
    assert stage_bytes(spec, 128, 256, 128) == plain + 4 * (128 + 2)
    assert stage_bytes(per_col, 128, 256, 128) == plain + 4 * (128 + 256)
    for s in (spec, per_col):
        for kw in ({}, {"bn": 128}, {"bm": 64, "bn": 128}):
            p = plan_schedule(s, H100_SXM, **kw)
            warploom.kernel.build(s, H100_SXM, p)  # the complete verifier checks shared memory against the SM


LAYOUTS = [(lay, per_col) for lay in ("row", "col", "expanded") for per_col in (False, True)] + [("padded", False)]


@pytest.mark.parametrize("layout,per_col", LAYOUTS)
def test_cpu_scaled_mm_matches_dequantized_product(layout: str, per_col: bool) -> None:
    """The public API on CPU tensors runs the planned kernel on the simulator: every scale layout, ragged tiles."""
    m, n, k = 96, 272, 640
    kb, nb = 5, 3
    a, b = fp8(m, n, k)
    cols = n if per_col else nb
    g = torch.Generator().manual_seed(1)
    sa, sb = torch.rand(m, kb, generator=g) + 0.5, torch.rand(kb, cols, generator=g) + 0.5
    if layout == "col":
        sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()
    elif layout == "expanded":
        sa, sb = sa[:1].expand(m, kb), sb[:, :1].expand(kb, cols)
    elif layout == "padded":  # torch pads only the 128x128 layout's K-blocks, to 8 here; padding never read
        sb = torch.cat([sb, torch.full((3, cols), float("nan"))]).t().contiguous().t()
    out = warploom.scaled_mm(a, b, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert relative_error(out.float(), da @ db) < 1e-5
    assert relative_error(out.float(), reference(Inputs(a, b, sa, sb[:kb]))) < 1e-5


def test_cpu_blockwise_bias_and_zero_sizes() -> None:
    a, b = fp8(64, 128, 256)
    sa, sb = torch.rand(64, 2) + 0.5, torch.rand(2, 1) + 0.5
    bias = torch.randn(128)
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32)
    da, db = dequantized(a, b, sa, sb)
    assert relative_error(out, da @ db + bias) < 1e-10
    a0, b0 = fp8(64, 128, 0)
    out = warploom.scaled_mm(a0, b0, torch.ones(64, 0), torch.ones(0, 1), bias=bias.bfloat16())
    assert torch.equal(out, bias.bfloat16().expand(64, 128))


def test_plan_on_meta_names_the_recipe_and_schedule() -> None:
    a, b = fp8(4096, 7168, 16384, "meta")
    k = warploom.plan(a, b, torch.ones(128, 4096, device="meta").t(), torch.ones(128, 56, device="meta"))
    assert k.spec.scale is BW
    assert "copy_scales scale_a[tile, k] -> sa_ring[p] on ready[p]" in k.schedule
    assert "promote acc0 += partial * sa_ring[c][rows] * sb_ring[c][cols]" in k.schedule
    assert "async_copy.async_copy_global_to_shared(sa_ring.index(p % STAGES)" in k.source


def test_cpu_fused_epilogue_with_blockwise_scales() -> None:
    """A fused epilogue gets the blockwise-scaled accumulator plus bias; only the bias and the user's operands are
    graph operands (the scales are the mainloop's)."""
    m, n, k = 96, 272, 640
    a, b = fp8(m, n, k)
    g = torch.Generator().manual_seed(2)
    sa, sb = torch.rand(m, 5, generator=g) + 0.5, torch.rand(5, 3, generator=g) + 0.5
    bias, res = torch.randn(n, generator=g).bfloat16(), torch.randn(m, n, generator=g).bfloat16()
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias,
                             epilogue=lambda acc, residual: torch.nn.functional.gelu(acc) + residual, residual=res)
    da, db = dequantized(a, b, sa, sb)
    ref = torch.nn.functional.gelu(da @ db + bias.float()) + res.float()
    assert relative_error(out.float(), ref) < 1e-5
    plan = warploom.plan(a, b, sa, sb, bias=bias, epilogue=lambda acc, residual: acc + residual, residual=res)
    assert plan.spec.scale is BW
    assert sorted(s.name for s in plan.spec.epilogue.operands) == ["bias", "residual"]
