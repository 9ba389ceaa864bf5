"""What a schedule's output is compared against: random inputs for a spec and the torch fp32 reference.

The simulator (`sim/compare.py`), the tuner's accuracy check (`tune/gpu.py`), the CLI and the GPU tests all judge
against it, so it stands above the spec and below all of them.

Inputs are random normal values, never zeros (a schedule that drops or repeats a k-block must change
the result); B is laid out as the spec says (K-major: the transpose of a row-major (N, K) matrix);
scales are random in [0.5, 1.5) and bias values spread widely, so a missing or doubled term shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from warploom import fp4
from warploom.blocked import from_blocked, to_blocked
from warploom.spec import MX_BLOCK, NVFP4_BLOCK, SCALE_BLOCK, BLayout, GemmSpec, ScaleLayout, ScaleRecipe


@dataclass(frozen=True)
class Inputs:
    """Arguments of one GEMM: a (M, K), b (K, N) in the spec's layout, optional scales and bias; NVFP4's fp32 global
    scales (one element each) beside its e4m3 block scales."""

    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    global_a: torch.Tensor | None = None
    global_b: torch.Tensor | None = None

    def scales(self) -> tuple[Any, Any]:
        """(scale_a, scale_b) as `warploom.scaled_mm` and `simulate` take them: NVFP4's as [block, global] pairs."""
        if self.global_a is None or self.global_b is None:
            return self.scale_a, self.scale_b
        return [self.scale_a, self.global_a], [self.scale_b, self.global_b]


def _fp4(rows: int, k: int, g: torch.Generator) -> torch.Tensor:
    """(rows, K/2) random e2m1 pairs."""
    return torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


def make_inputs(spec: GemmSpec, m: int, n: int, k: int, seed: int = 0) -> Inputs:
    """Random inputs of `spec`'s dtypes, layout and recipe at size (m, n, k)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b_rows = torch.randn(n, k, generator=g) if spec.b_layout is BLayout.K_MAJOR else torch.randn(k, n, generator=g)
    if spec.is_fp8:
        a, b_rows = a * 2, b_rows * 2  # spread over e4m3's range, well below its 448 maximum
    # MX fp4: random e2m1 values (any of the sixteen codes), packed two a byte along K (MX fp8 x fp4: one operand)
    a = _fp4(m, k, g) if spec.fp4_a else a.to(spec.a_dtype.torch)
    b_rows = _fp4(n, k, g) if spec.fp4_b else b_rows.to(spec.b_dtype.torch)
    b = b_rows.t() if spec.b_layout is BLayout.K_MAJOR else b_rows  # (K, N) either way
    scale_a = scale_b = global_a = global_b = None
    if spec.scale is ScaleRecipe.TENSORWISE:
        scale_a = torch.rand(1, generator=g) + 0.5
        scale_b = torch.rand(1, generator=g) + 0.5
    elif spec.scale is ScaleRecipe.ROWWISE:
        scale_a = torch.rand(m, 1, generator=g) + 0.5
        scale_b = torch.rand(1, n, generator=g) + 0.5
    elif spec.scale is ScaleRecipe.MX:
        # e8m0 scales 2**-8..2**8 as their bits (127 is 1.0); scale_b is a row per column of B, like the weight's.
        def e8m0(rows: int, cols: int) -> torch.Tensor:
            return torch.randint(119, 136, (rows, cols), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)

        scale_a, scale_b = e8m0(m, k // MX_BLOCK), e8m0(n, k // MX_BLOCK)
        if spec.scale_layout is ScaleLayout.BLOCKED:  # (sm_100a: as tcgen05.cp reads them)
            scale_a, scale_b = to_blocked(scale_a), to_blocked(scale_b)
    elif spec.scale is ScaleRecipe.NVFP4:
        # e4m3 block scales 2**-3 .. 2**3 times 0.5 .. 1.5 (rounded to e4m3), blocked; global scales 0.5 .. 1.5
        def e4m3(rows: int, cols: int) -> torch.Tensor:
            e = torch.randint(-3, 4, (rows, cols), generator=g).float()
            return (torch.exp2(e) * (torch.rand(rows, cols, generator=g) + 0.5)).to(torch.float8_e4m3fn)

        scale_a, scale_b = to_blocked(e4m3(m, k // NVFP4_BLOCK)), to_blocked(e4m3(n, k // NVFP4_BLOCK))
        global_a, global_b = torch.rand(1, generator=g) + 0.5, torch.rand(1, generator=g) + 0.5
    elif spec.scale.is_blockwise:
        kb = -(-k // SCALE_BLOCK)
        cols = spec.scale.b_scales(n)
        # Spread over 2**-4..2**4, so a scale applied to the wrong k-block or rows changes the result visibly.
        def spread(rows: int, cols: int) -> torch.Tensor:
            e = torch.randint(-4, 5, (rows, cols), generator=g).float()
            return torch.exp2(e) * (torch.rand(rows, cols, generator=g) + 0.5)

        scale_a, scale_b = spread(spec.scale.a_scales(m), kb), spread(kb, cols)
    bias = None
    if spec.bias_dtype is not None:
        bias = (torch.randn(n, generator=g) * 4).to(spec.bias_dtype.torch)
    return Inputs(a, b, scale_a, scale_b, bias, global_a, global_b)


def dequantized(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                scale_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 A and B with blockwise scales applied element by element: scale_a (M, k-blocks) per row and 128 of K, or
    (M-blocks, k-blocks) per 128x128 block; scale_b (k-blocks, N) per column, or (k-blocks, N-blocks) per 128x128
    block (padded k-blocks ignored)."""
    m, k = a.shape
    n = b.shape[1]
    # MX fp4: a (M, K/2) and b (K/2, N), two values of K a byte (MX fp8 x fp4: one of them)
    if a.dtype == torch.float4_e2m1fn_x2:
        a = fp4.unpack(a)
        m, k = a.shape
    if b.dtype == torch.float4_e2m1fn_x2:
        b = fp4.unpack(b.t()).t()
    # MX: scale_a (M, K/32), scale_b (N, K/32) e8m0; NVFP4: (M, K/16) and (N, K/16) e4m3
    if scale_a.dtype in (torch.float8_e8m0fnu, torch.float8_e4m3fn):
        block = MX_BLOCK if scale_a.dtype == torch.float8_e8m0fnu else NVFP4_BLOCK
        if scale_a.dim() == 1:  # (torch's blocked layout, `to_blocked`: back to rows, padding dropped)
            scale_a = from_blocked(scale_a, m, k // block)[:m, : k // block]
            scale_b = from_blocked(scale_b, n, k // block)[:n, : k // block]
        sa = scale_a.float().repeat_interleave(block, dim=1)[:, :k]
        sb = scale_b.float().t().repeat_interleave(block, dim=0)[:k]
        return a.float() * sa, b.float() * sb
    kb = -(-k // SCALE_BLOCK)
    sa = scale_a.float().repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    if sa.shape[0] != m:
        sa = sa.repeat_interleave(SCALE_BLOCK, dim=0)[:m]
    sb = scale_b.float()[:kb].repeat_interleave(SCALE_BLOCK, dim=0)[:k]
    if sb.shape[1] != n:
        sb = sb.repeat_interleave(SCALE_BLOCK, dim=1)[:, :n]
    return a.float() * sa, b.float() * sb


def cublas_a_blocks(scale_a: torch.Tensor) -> torch.Tensor:
    """A 128x128-block scale_a (M-blocks, k-blocks) laid out for torch._scaled_mm, so that torch computes with its
    values: a row-major (M-blocks, k-blocks) tensor at the start of a buffer that holds row i at element i * L4.

    cuBLAS's BlockWise128x128 kernel reads row i of A's scales at element i * L4, L4 the k-blocks rounded up to a
    multiple of 4, whatever the tensor's strides (torch passes only the address), while torch._scaled_mm asks for
    strides (k-blocks, 1). So with k-blocks not a multiple of 4 and M > 128, torch given a plain row-major scale_a
    computes rows past the first 128 with other scales, silently (pytorch/pytorch#166752). The tensor returned is
    for torch only: read through its strides it holds other values there. warploom reads scale tensors through
    their strides: give it `scale_a` itself.
    """
    mb, kb = scale_a.shape
    l4 = -(-kb // 4) * 4
    rows = torch.zeros(mb * l4, dtype=scale_a.dtype, device=scale_a.device)
    rows.view(mb, l4)[:, :kb] = scale_a  # (M-blocks, L4): row i at i * L4, as cuBLAS reads it; padding never read
    return rows[: mb * kb].view(mb, kb)  # (M-blocks, k-blocks), strides (k-blocks, 1), as torch checks


def is_blockwise(x: Inputs) -> bool:
    """Whether the scales vary along K (not tensorwise (one each) or rowwise ((M, 1) and (1, N)))."""
    if x.scale_a is None or x.scale_b is None:
        return False
    if x.scale_a.dtype in (torch.float8_e8m0fnu, torch.float8_e4m3fn):
        return True  # MX, NVFP4
    if x.scale_a.numel() == 1 and x.scale_b.numel() == 1:
        return False
    if x.scale_a.dim() != 2 or x.scale_b.dim() != 2:
        return False  # flattened rowwise scales
    return not (tuple(x.scale_a.shape) == (x.a.shape[0], 1) and tuple(x.scale_b.shape) == (1, x.b.shape[1]))


def global_scale(x: Inputs) -> torch.Tensor | float:
    """NVFP4's tensorwise global scales, multiplied (as its epilogue does); 1.0 for the other recipes."""
    if x.global_a is None or x.global_b is None:
        return 1.0
    return (x.global_a.float() * x.global_b.float()).reshape(())


def reference(x: Inputs) -> torch.Tensor:
    """``(a @ b) * scale_a * scale_b + bias`` in fp32 (torch._scaled_mm's meaning), before the output cast; with
    blockwise scales, the product of the dequantized fp32 A and B."""
    if is_blockwise(x):
        assert x.scale_a is not None and x.scale_b is not None
        a, b = dequantized(x.a, x.b, x.scale_a, x.scale_b)
        out = (a @ b) * global_scale(x)
        return out + x.bias.float() if x.bias is not None else out
    out = x.a.float() @ x.b.float()
    if x.scale_a is not None and x.scale_b is not None:
        sa = x.scale_a.float().reshape(-1, 1) if x.scale_a.numel() > 1 else x.scale_a.float().reshape(())
        sb = x.scale_b.float().reshape(1, -1) if x.scale_b.numel() > 1 else x.scale_b.float().reshape(())
        out = out * sa * sb
    if x.bias is not None:
        out = out + x.bias.float()
    return out


def relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``1 - 2 sum(xy) / sum(x^2 + y^2)``: 0 for equal tensors, independent of their common scale; NaN where
    either holds a NaN (an unwritten or broken output must not pass)."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    return 0.0 if denom == 0 else float(1 - 2 * (x * y).sum() / denom)
