"""GPU tier: rule 23's 64x64 latency tiles with promoted accumulation (fp8 rowwise with use_fast_accum=False, and
blockwise 1x128 x 128x128 scales), as the planner chooses them for few-tile problems, against the fp32 product.

The shapes are drawn at random (seeded) among those whose 64x64 tiles fit one wave of the SMs, M, N and K mostly not
multiples of the tile; a NaN buffer of the output's size is freed just before each call, so the allocator's reuse of
it makes an element the kernel never wrote fail (likely, not certain).
"""

from __future__ import annotations

import random

import pytest
import torch

import warploom
from warploom.reference import dequantized
from warploom.reference import relative_error as scale_free_error

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


def _operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    return a, b


@pytest.mark.parametrize(("m", "n", "k"), _shapes(10, seed=23))
@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
def test_promoted_latency_tiles(m: int, n: int, k: int, recipe: str) -> None:
    a, b = _operands(m, n, k, seed=m * n + k)
    if recipe == "rowwise":
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    else:  # 1x128 x 128x128, scale_a outer-dim-major as torch holds it
        kb, nb = -(-k // 128), -(-n // 128)
        sa, sb = (torch.rand(kb, m, device="cuda") + 0.5).t(), torch.rand(kb, nb, device="cuda") + 0.5
    plan = warploom.plan(a, b, sa, sb).plan
    assert (plan.bm, plan.bn) == (64, 64), plan.short()  # (rule 23 takes every shape drawn here)
    torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poison what the output may reuse
    out = warploom.scaled_mm(a, b, sa, sb)
    assert not out.isnan().any()
    assert scale_free_error(out, _reference(a, b, sa, sb, recipe)) < 1e-5


def _reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, recipe: str) -> torch.Tensor:
    """The fp32 product: rowwise scales on the product, blockwise ones on each operand block by block."""
    if recipe == "rowwise":
        return (a.float() @ b.float()) * sa * sb
    x, w = dequantized(a, b, sa, sb)
    return x @ w
