"""`quantize(y, recipe="1x128")`: fp8 data and fp32 scales, ready to be the next GEMM's A (issue 27 item 3).

DeepSeek-V3's activation recipe: one fp32 scale per row and per 128 columns. For a (M, N) `y` (any leading
dimensions; the groups run along the last one)

    s[r, j] = amax(|y[r, 128j : 128j + 128]|) / fp8_max          (M, ceil(N/128)) float32
    q[r, c] = saturate_cast(y[r, c] / s[r, c // 128])             (M, N) float8

with fp8_max 448 for float8_e4m3fn and 57344 for float8_e5m2. Ragged N: the last group's amax is over its valid
columns only. The quotient is fp32 (IEEE division, as torch's CPU and CUDA kernels divide), then cast as every
warploom fp8 store casts (`epilogue.reference.round_to`: round to nearest even, saturating to +-fp8_max, NaN kept),
so rounding of s that lets |y / s| land a hair above fp8_max saturates instead of overflowing.
`s` is exactly `scaled_mm`'s blockwise scale_a (`ScaleRecipe.BLOCKWISE_1X128_128X128` and `_1X128`: (M, ceil(K/128))
with K = N), so ``warploom.scaled_mm(q, w, scale_a=s, scale_b=...)`` computes with the dequantized y.

Zero groups: where amax / fp8_max is 0 (an all-zero group, or one whose amax is below fp8_max times fp32's smallest
subnormal) s is 1, and q is y / 1 rounded to fp8, i.e. zeros. DeepSeek's reference kernel divides by 0 there (NaN
data); sglang and TransformerEngine clamp amax to an epsilon, which gives a tiny scale instead: any positive scale
dequantizes an all-zero group to zeros, and 1 keeps the scale tensor free of denormals. Non-finite input propagates:
a NaN in a group makes its s NaN (so its q is NaN), an infinity makes s infinite (finite values of the group become 0,
infinite ones NaN), as the other recipes' references do.

`recipe="rowwise"` takes one group per row (s (M, 1), `scaled_mm`'s rowwise scale_a): the same formulas with the
group the whole last dimension.

Inside a fused epilogue (``epilogue=lambda acc, bias: warploom.quantize(acc + bias)``, on sm_90a) both recipes run in
the GEMM's epilogue: the call returns the pair, q (M, N) fp8 and s fp32 ((M, ceil(N/128)) for 1x128, (M, 1) for
rowwise), with exactly these numerics. Traced, `quantize` records two calls (`quantized_data`, `quantized_scales`)
that the capture lowers to the epilogue graph's `GroupAmax` node (the NaN-propagating amax of |y| over each group's
valid columns: 128 of them, or the row's), the division by fp8_max, the zero-group `where` and the division of y,
with q an fp8 output and s a *groups* output (`OutputLayout.GROUPS`); they are to be returned as they are (computing
with them is refused). The planner keeps each group in one tile (rule 26: 128-wide tiles for 1x128; rule 27: a tile
as wide as N, at most 256, for rowwise); the epilogue folds each column block's row amax into the group's before any
block is divided (`ir.FoldAmax`), stores q by TMA and s by masked register stores (`ir.StoreScales`). Rowwise with
N > 256 (the amax spans the tiles along N) runs in two passes (rule 29): the GEMM stores y (fp32) to a workspace and
adds each tile's row amax to an (M,) amax by an atomic max (`ir.AtomicAmax`), then a cast kernel computes q and s
(`cast_rows`'s numbers); so does 128 < N <= 256 where rule 27's 256-wide tile cannot run (below). Refused there, each
naming the unfused fix (store fp32/bf16 and quantize the call's result with this function): rule 29 with outputs beside
the pair, grouped GEMMs, sm_100a and gfx1250. bf16/fp16 GEMMs and fp8 ones (fast or promoted accumulation, tensorwise,
rowwise or blockwise scales) quantize fused, with operands of every kind (rowwise at 128 < N <= 256 in one pass: fast
accumulation, column and scalar operands, as rule 27 says; per-column or dense operands and promoted fp8 there take rule
29's two passes, if the pair is the graph's only output).
"""

from __future__ import annotations

import enum
from typing import Any

import torch
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.errors import ArgumentTypeError, DTypeError, InputError

GROUP = 128  # columns a 1x128 scale covers


class QuantRecipe(enum.Enum):
    """How `quantize` groups values under one scale. The value is the ``recipe=`` string."""

    BLOCK_1X128 = "1x128"  # a scale per row and per 128 columns (DeepSeek-V3 activations)
    ROWWISE = "rowwise"  # a scale per row (the whole last dimension)


_RECIPES = ", ".join(repr(r.value) for r in QuantRecipe)
_FP8 = {torch.float8_e4m3fn: DType.E4M3, torch.float8_e5m2: DType.E5M2}
_INPUTS = (torch.float32, torch.bfloat16, torch.float16)


def quantize(y: Any, recipe: str | QuantRecipe = "1x128",
             dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair (q, s): `y` quantized to `dtype` (float8_e4m3fn or float8_e5m2) with fp32 scales `s`, one per row
    and per 128 columns for ``recipe="1x128"`` ((M, ceil(N/128))), one per row for ``"rowwise"`` ((M, 1)); the
    module docstring gives the formulas and the zero-group convention (s = 1). y is float32, bfloat16 or float16,
    at least 1-D; the groups run along its last dimension, on its device."""
    r = parse_recipe(recipe)
    fp8 = _fp8_dtype(dtype)
    if isinstance(y, torch.fx.Proxy):  # inside a fused epilogue, being traced (warploom.epilogue.capture)
        # Two recorded calls, which the capture lowers to the graph's amax, scale and division (a Proxy each).
        q: Any = y.tracer.create_proxy("call_function", quantized_data, (y, dtype, r.value), {})
        s: Any = y.tracer.create_proxy("call_function", quantized_scales, (y, dtype, r.value), {})
        return q, s
    if not isinstance(y, torch.Tensor):
        raise ArgumentTypeError("y", "a torch.Tensor", type(y).__name__, "pass a tensor")
    if y.layout is not torch.strided:  # (a sparse y would fail in F.pad or reshape below, a torch error)
        raise ArgumentTypeError("y", "a dense (strided) torch.Tensor", f"a tensor of layout {y.layout}",
                                "pass y.to_dense()")
    if y.dtype not in _INPUTS:
        raise DTypeError("y", "torch.float32, torch.bfloat16 or torch.float16", str(y.dtype),
                         "convert y with y.float() (an fp8 tensor is already quantized)")
    if y.dim() == 0:
        raise ArgumentTypeError("y", "a tensor of at least 1 dimension (groups run along the last)", "a 0-D tensor",
                                "pass y.reshape(1, 1)")
    from warploom.epilogue.reference import round_to

    x = y.float()
    n = x.shape[-1]
    width = GROUP if r is QuantRecipe.BLOCK_1X128 else max(n, 1)
    groups = -(-n // width) if r is QuantRecipe.BLOCK_1X128 else 1
    # Zero padding leaves each ragged group's amax its valid columns' (|.| >= 0; a NaN still wins, amax keeps NaN).
    padded = F.pad(x, (0, groups * width - n))
    amax = padded.abs().reshape(*x.shape[:-1], groups, width).amax(dim=-1)  # (..., groups)
    s = scale_of(amax, fp8)
    s_cols = s.repeat_interleave(width, dim=-1)[..., :n]  # (..., N): each column's group scale
    return round_to(x / s_cols, fp8), s


def scale_of(amax: torch.Tensor, fp8: DType) -> torch.Tensor:
    """The fp32 scales of groups whose amax is `amax`: amax / fp8_max, 1 where that is 0 (the module docstring)."""
    from warploom.epilogue.graph import FP8_MAX

    # A tensor divisor: CUDA divides by a Python scalar as a product with its reciprocal, which rounds differently
    # from the CPU's (and the reference's) IEEE division in the last bit.
    s = amax.float() / torch.full_like(amax.float(), FP8_MAX[fp8])
    return torch.where(s == 0, torch.ones_like(s), s)  # the zero-group convention: no division by zero below


def cast_rows(y: torch.Tensor, amax: torch.Tensor, fp8: DType) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, s) of ``quantize(y, recipe="rowwise")`` for fp32 y (M, N) whose rows' amax is `amax` (M, 1), taken
    elsewhere: planner rule 29's cast pass (the tiles along N each added their columns' share of the amax)."""
    from warploom.epilogue.reference import round_to

    s = scale_of(amax.reshape(-1, 1), fp8)
    return round_to(y.float() / s, fp8), s


def quantized_data(y: torch.Tensor, dtype: torch.dtype, recipe: str = "1x128") -> torch.Tensor:
    """q of ``quantize(y, recipe, dtype)``: the call a traced epilogue records (`epilogue.capture` lowers it to the
    graph's group amax, scale and division; it is never run)."""
    return quantize(y, recipe, dtype)[0]


def quantized_scales(y: torch.Tensor, dtype: torch.dtype, recipe: str = "1x128") -> torch.Tensor:
    """s of ``quantize(y, recipe, dtype)``, as `quantized_data` is its q."""
    return quantize(y, recipe, dtype)[1]


def parse_recipe(recipe: Any) -> QuantRecipe:
    """`recipe` as a `QuantRecipe`, from the enum or its string; anything else is a user error naming the choices."""
    if isinstance(recipe, QuantRecipe):
        return recipe
    if not isinstance(recipe, str):
        raise ArgumentTypeError("recipe", f"a string, one of {_RECIPES}", type(recipe).__name__,
                                'pass recipe="1x128"')
    for r in QuantRecipe:
        if r.value == recipe:
            return r
    raise InputError("recipe", f"one of {_RECIPES}", repr(recipe)[:80],
                     'pass recipe="1x128" (a scale per row and 128 columns) or recipe="rowwise" (a scale per row)')


def _fp8_dtype(dtype: Any) -> DType:
    if not isinstance(dtype, torch.dtype) or dtype not in _FP8:  # (a list is no key of _FP8: a TypeError)
        raise DTypeError("dtype", "torch.float8_e4m3fn or torch.float8_e5m2", str(dtype), "pass one of those")
    return _FP8[dtype]
