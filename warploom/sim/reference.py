"""What a simulated schedule is compared against: random inputs for a spec and the torch fp32 reference.

Inputs are random normal values, never zeros (a schedule that drops or repeats a k-block must change
the result); B is laid out as the spec says (K-major: the transpose of a row-major (N, K) matrix);
scales are random in [0.5, 1.5) and bias values spread widely, so a missing or doubled term shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from warploom.spec import BLayout, GemmSpec, ScaleRecipe


@dataclass(frozen=True)
class Inputs:
    """Arguments of one GEMM: a (M, K), b (K, N) in the spec's layout, optional scales and bias."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None
    bias: torch.Tensor | None = None


def make_inputs(spec: GemmSpec, m: int, n: int, k: int, seed: int = 0) -> Inputs:
    """Random inputs of `spec`'s dtypes, layout and recipe at size (m, n, k)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b_rows = torch.randn(n, k, generator=g) if spec.b_layout is BLayout.K_MAJOR else torch.randn(k, n, generator=g)
    if spec.is_fp8:
        a, b_rows = a * 2, b_rows * 2  # spread over e4m3's range, well below its 448 maximum
    a = a.to(spec.a_dtype.torch)
    b_rows = b_rows.to(spec.b_dtype.torch)
    b = b_rows.t() if spec.b_layout is BLayout.K_MAJOR else b_rows  # (K, N) either way
    scale_a = scale_b = None
    if spec.scale is ScaleRecipe.TENSORWISE:
        scale_a = torch.rand(1, generator=g) + 0.5
        scale_b = torch.rand(1, generator=g) + 0.5
    elif spec.scale is ScaleRecipe.ROWWISE:
        scale_a = torch.rand(m, 1, generator=g) + 0.5
        scale_b = torch.rand(1, n, generator=g) + 0.5
    bias = None
    if spec.bias_dtype is not None:
        bias = (torch.randn(n, generator=g) * 4).to(spec.bias_dtype.torch)
    return Inputs(a, b, scale_a, scale_b, bias)


def reference(x: Inputs) -> torch.Tensor:
    """``(a @ b) * scale_a * scale_b + bias`` in fp32 (torch._scaled_mm's meaning), before the output cast."""
    out = x.a.float() @ x.b.float()
    if x.scale_a is not None and x.scale_b is not None:
        sa = x.scale_a.float().reshape(-1, 1) if x.scale_a.numel() > 1 else x.scale_a.float().reshape(())
        sb = x.scale_b.float().reshape(1, -1) if x.scale_b.numel() > 1 else x.scale_b.float().reshape(())
        out = out * sa * sb
    if x.bias is not None:
        out = out + x.bias.float()
    return out


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - 2 sum(xy) / sum(x^2 + y^2)``: 0 for equal tensors, independent of their common scale."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denom) if denom > 0 else 0.0
