"""Rule 18 with block scales on sm_100a (issue 25): decode-sized NVFP4 and MX problems (M <= 32) run swapped,
C^T = B^T A^T on 128x16 or 128x32 tiles, their block scales trading sides (the weight's scale_b feeds the 128-row
MMA operand, the tokens' scale_a the 16- or 32-wide one, whose tensor-memory scale buffer holds a whole 128-row
block of which the MMA reads the first rows) and NVFP4's global scales commuting. Simulated against the dequantized
fp32 reference (warploom.reference) at N and K that are not tile multiples."""

from __future__ import annotations

import pytest
import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleLayout, ScaleRecipe
from warploom.device import B200
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import simulate

E2M1, E4M3 = DType.E2M1, DType.E4M3


def _spec(m: int, n: int, k: int, recipe: ScaleRecipe, dtype: DType) -> GemmSpec:
    return GemmSpec(m, n, k, dtype, dtype, DType.BF16, BLayout.K_MAJOR, recipe, Accumulation.PROMOTED,
                    scale_layout=ScaleLayout.BLOCKED)


def _check(spec: GemmSpec, tokens: int) -> None:
    m, n, k = spec.m, spec.n, spec.k
    plan = plan_schedule(spec, B200)
    assert (plan.swap_ab, plan.bm, plan.bn) == (True, 128, tokens)
    mod = build(spec, B200, plan).module
    # the tokens' scales: one whole 128-row block of the blocked layout per stage, as tcgen05.cp copies it
    assert (mod.ring("sb_ring").rows, mod.ring("a_ring").rows, mod.ring("b_ring").rows) == (128, 128, tokens)
    x = make_inputs(spec, m, n, k, seed=m)
    sa, sb = x.scales()
    res = simulate(mod, x.a, x.b, sa, sb, seed=3)
    assert not res.findings, res.findings
    assert res.output.shape == (m, n)
    ref = reference(x)
    torch.testing.assert_close(res.output.float(), ref.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("m", [1, 8, 16, 24, 32])
def test_nvfp4_decode_runs_swapped_against_the_dequantized_reference(m: int) -> None:
    """NVFP4: N = 208 (a partial 128-row tile of the weight; a multiple of 16, as scaled_mm takes N), K = 1056
    (16.5 k-blocks of 64)."""
    _check(_spec(m, 208, 1056, ScaleRecipe.NVFP4, E2M1), 16 if m <= 16 else 32)


@pytest.mark.parametrize("m,n,k,dtype", [
    (8, 336, 1056, E4M3),  # MX fp8: 8.25 k-blocks of 128
    (24, 208, 544, E4M3),
    (3, 144, 1088, E2M1),  # MX fp4: 8.5 k-blocks of 128 (64 bytes)
    (32, 272, 320, E2M1),
])
def test_mx_decode_runs_swapped_against_the_dequantized_reference(m: int, n: int, k: int, dtype: DType) -> None:
    _check(_spec(m, n, k, ScaleRecipe.MX, dtype), 16 if m <= 16 else 32)


def test_unswapped_scales_would_give_another_product() -> None:
    """The comparison can fail: the swapped kernel given the scales the other way round (scale_a as the weight's,
    scale_b as the tokens', equal shapes at M = N = 32) misses the reference."""
    spec = _spec(32, 32, 256, ScaleRecipe.NVFP4, E2M1)
    plan = plan_schedule(spec, B200)
    assert plan.swap_ab
    mod = build(spec, B200, plan).module
    x = make_inputs(spec, 32, 32, 256, seed=7)
    (sa, ga), (sb, gb) = x.scales()
    good = simulate(mod, x.a, x.b, [sa, ga], [sb, gb], seed=1)
    bad = simulate(mod, x.a, x.b, [sb, ga], [sa, gb], seed=1)
    ref = reference(x)
    torch.testing.assert_close(good.output.float(), ref.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
    assert not torch.allclose(bad.output.float(), ref, rtol=1e-2, atol=1e-2)


def test_mx_decode_with_a_bias_runs_swapped() -> None:
    """A bias (one per column of C) swaps as a row vector of C^T, as on the unscaled path."""
    spec = GemmSpec(20, 272, 544, E4M3, E4M3, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    DType.BF16, scale_layout=ScaleLayout.BLOCKED)
    plan = plan_schedule(spec, B200)
    assert (plan.swap_ab, plan.bn) == (True, 32)
    x = make_inputs(spec, 20, 272, 544, seed=3)
    assert x.bias is not None
    sa, sb = x.scales()
    res = simulate(build(spec, B200, plan).module, x.a, x.b, sa, sb, x.bias, seed=1)
    assert not res.findings, res.findings
    torch.testing.assert_close(res.output.float(), reference(x).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("m,n,k,recipe,dtype", [
    (300, 64, 1056, ScaleRecipe.MX, E4M3),     # MX fp8, 8.25 k-blocks
    (200, 48, 544, ScaleRecipe.MX, E2M1),      # MX fp4, N short of the tile
    (136, 64, 1024, ScaleRecipe.NVFP4, E2M1),  # NVFP4 at BK 128
])
def test_forced_64_wide_block_scaled_tile_against_the_dequantized_reference(m: int, n: int, k: int,
                                                                            recipe: ScaleRecipe, dtype: DType) -> None:
    """bn=64 (forced; N <= 64): the 64-wide MMA reads the first 64 rows of the whole 128-row block of B's scales the
    stage holds, as the swapped 16- and 32-wide ones do."""
    spec = _spec(m, n, k, recipe, dtype)
    mod = build(spec, B200, plan_schedule(spec, B200, bn=64)).module
    assert (mod.tiling.bn, mod.ring("sb_ring").rows, mod.ring("b_ring").rows) == (64, 128, 64)
    x = make_inputs(spec, m, n, k, seed=m)
    sa, sb = x.scales()
    res = simulate(mod, x.a, x.b, sa, sb, seed=5)
    assert not res.findings, res.findings
    torch.testing.assert_close(res.output.float(), reference(x).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
