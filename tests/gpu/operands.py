"""GPU-tier helpers: the random fp8 operands and scales the scaled_mm tests draw (in this order, from torch's RNG)."""

from __future__ import annotations

import torch


def fp8_pair(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 A (M, K) and B (K, N) column-major, as torch._scaled_mm wants it, from standard normals."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    return a, b


def fp8_scales(m: int, n: int, tensorwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """scale_a and scale_b in [0.5, 1.5): one each (tensorwise), or (M, 1) and (1, N) (rowwise)."""
    if tensorwise:
        return torch.rand((), device="cuda") + 0.5, torch.rand((), device="cuda") + 0.5
    return torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
