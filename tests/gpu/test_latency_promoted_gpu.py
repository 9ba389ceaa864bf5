"""GPU tier: rule 23's 64x64 latency tiles and rule 25's K split with promoted accumulation (fp8 rowwise with
use_fast_accum=False, and blockwise 1x128 x 128x128 scales), as the planner chooses them for few-tile problems, against
the fp32 product.

The shapes are drawn at random (seeded) among those whose 64x64 tiles fit one wave of the SMs, M, N and K mostly not
multiples of the tile; a NaN buffer of the output's size is freed just before each call, so the allocator's reuse of
it makes an element the kernel never wrote fail (likely, not certain).
"""

from __future__ import annotations

import random

import pytest
import torch

import warploom
from warploom.device import H200
from warploom.dtypes import DType
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.reference import relative_error as scale_free_error
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")


def _shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    """`count` shapes with M in 65..700, N and K multiples of 16 (fp8's TMA rows), at most 132 tiles of 64x64."""
    rng = random.Random(seed)
    out: list[tuple[int, int, int]] = []
    while len(out) < count:
        m, n, k = rng.randint(65, 700), 16 * rng.randint(1, 44), 16 * rng.randint(1, 400)
        if -(-m // 64) * -(-n // 64) <= 132:
            out.append((m, n, k))
    return out


def _split_shapes(count: int, seed: int) -> list[tuple[int, int, int, str]]:
    """`count` (M, N, K, recipe) with a long K (4096..16000) that rule 25 splits for promoted accumulation on the
    H200 (64x64 units in unequal ranges, or 128x128 in equal ones), alternating the recipes."""
    rng = random.Random(seed)
    out: list[tuple[int, int, int, str]] = []
    while len(out) < count:
        recipe = ("rowwise", "blockwise")[len(out) % 2]
        m, n, k = rng.randint(129, 2500), 16 * rng.randint(1, 100), 16 * rng.randint(256, 1000)
        scale = ScaleRecipe.ROWWISE if recipe == "rowwise" else ScaleRecipe.BLOCKWISE_1X128_128X128
        spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, accumulation=Accumulation.PROMOTED)
        if plan_schedule(spec, H200).split_k > 1:
            out.append((m, n, k, recipe))
    return out


def _operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    return a, b


@pytest.mark.parametrize(("m", "n", "k"), _shapes(10, seed=23))
@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
def test_promoted_latency_tiles(m: int, n: int, k: int, recipe: str) -> None:
    a, b = _operands(m, n, k, seed=m * n + k)
    sa, sb = _scales(m, n, k, recipe)
    plan = warploom.plan(a, b, sa, sb).plan
    # (rule 23 takes every shape drawn here, or rule 25 splits its K: 506x368x6320 on 128x128 in 5 ranges)
    assert (plan.bm, plan.bn) == (64, 64) or plan.split_k > 1, plan.short()
    torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poison what the output may reuse
    out = warploom.scaled_mm(a, b, sa, sb)
    assert not out.isnan().any()
    assert scale_free_error(out, _reference(a, b, sa, sb, recipe)) < 1e-5


@pytest.mark.parametrize(("m", "n", "k", "recipe"), _split_shapes(12, seed=25))
def test_promoted_latency_split(m: int, n: int, k: int, recipe: str) -> None:
    a, b = _operands(m, n, k, seed=m * n + k)
    sa, sb = _scales(m, n, k, recipe)
    plan = warploom.plan(a, b, sa, sb).plan
    assert plan.split_k > 1, plan.short()  # (drawn where rule 25 splits on the H200)
    torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poison what the output may reuse
    out = warploom.scaled_mm(a, b, sa, sb)
    assert not out.isnan().any()
    assert scale_free_error(out, _reference(a, b, sa, sb, recipe)) < 1e-5


def _scales(m: int, n: int, k: int, recipe: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales in (0.5, 1.5): rowwise (M, 1) and (1, N), or 1x128 x 128x128 with scale_a outer-dim-major as torch
    holds it."""
    if recipe == "rowwise":
        return torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    kb, nb = -(-k // 128), -(-n // 128)
    return (torch.rand(kb, m, device="cuda") + 0.5).t(), torch.rand(kb, nb, device="cuda") + 0.5


def _reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, recipe: str) -> torch.Tensor:
    """The fp32 product: rowwise scales on the product, blockwise ones on each operand block by block."""
    if recipe == "rowwise":
        return (a.float() @ b.float()) * sa * sb
    x, w = dequantized(a, b, sa, sb)
    return x @ w
