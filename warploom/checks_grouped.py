"""Checks of grouped calls (`warploom.grouped_mm`, `warploom.scaled_grouped_mm`): user tensors to a grouped
`GemmSpec`, or a warploom error naming the argument, what was expected, what came and the fix, before anything is
planned or launched.

The group bounds (`offs`, `masked_m`) live on the device in a real MoE layer, and their values change every call.
Reading them would sync the host and break CUDA-graph replay, so their *values* are checked only on CPU tensors (the
simulator's path): offs non-decreasing and at most A's rows, masked_m within [0, M_max]. On CUDA tensors they are
not checked at all; the kernel clamps instead, so bad values can never address memory outside A, B or C: an offset
below the previous one reads as an empty group, an offset past A's rows as A's last row, a count outside
[0, M_max] as the nearest bound (backends/gluon_grouped.py, `_BOUNDS`). The results for such values are then
unspecified, as torch's are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from warploom.checks import (
    TMA_ALIGN,
    check_block_scales,
    check_dtype,
    check_tensors,
    fast_accum,
    indexable,
    is_fake,
    no_neg_bit,
    same_device,
    static_sizes,
)
from warploom.dtypes import DType
from warploom.errors import AlignmentError, ArgumentTypeError, DTypeError, InputError, ScaleError, ShapeError
from warploom.spec import MX_BLOCK, SCALE_BLOCK, Accumulation, BLayout, GemmSpec, Grouping, ScaleRecipe

_16BIT = (DType.BF16, DType.FP16)


@dataclass(frozen=True)
class GroupedCall:
    """A checked grouped call, as the kernel runs it.

    Attributes:
        spec: the grouped spec (M: A's rows, all groups' together).
        a: A as (M, K) (a 3-D A flattened to (G * M_max, K), a view).
        b: B as (G, K, N), as passed.
        bounds: the int32 group bounds the kernel reads (offs, masked_m, or for a 3-D x 3-D call every count M_max).
        out_shape: the result's shape ((M, N), or (G, M_max, N) for a 3-D A).
    """

    spec: GemmSpec
    a: torch.Tensor
    b: torch.Tensor
    bounds: torch.Tensor
    out_shape: tuple[int, ...]


def _bounds(name: str, t: Any, groups: int, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise InputError(name, "an int32 tensor of shape (G,)", type(t).__name__,
                         f"pass {name} as torch.tensor([...], dtype=torch.int32, device=a.device)")
    if t.layout is not torch.strided:  # (the kernel reads its storage; a sparse tensor has none to read)
        raise InputError(name, "a dense int32 tensor", f"a {t.layout} tensor", f"pass {name}.to_dense()")
    no_neg_bit({name: t})  # (the kernel would read the values un-negated)
    if t.dtype != torch.int32:
        raise DTypeError(name, "torch.int32 (as torch._grouped_mm takes it)", str(t.dtype),
                         f"pass {name}.to(torch.int32)")
    if t.dim() != 1 or t.shape[0] != groups:
        fix = (f"pass one {name} entry per expert, or b with {t.shape[0]} experts" if t.dim() == 1 else
               f"pass {name} as a 1-D tensor ({name}.reshape(-1))" if t.numel() == groups else
               f"pass a 1-D {name} of one entry per expert")
        raise ShapeError(name, f"shape ({groups},): one entry per group of b (b is (G, K, N) with G = {groups})",
                         f"shape {tuple(t.shape)}", fix)
    if t.device != device:
        raise InputError(name, f"a tensor on {device}, a's device", f"a tensor on {t.device}",
                         f"move it with {name}.to(a.device)")
    if t.device.type == "cuda" and (t.stride(0) != 1 or not is_fake(t) and t.data_ptr() % 4):
        raise AlignmentError(name, "a contiguous tensor", f"stride {t.stride(0)}", f"pass {name}.contiguous()")


def _cpu_values(offs: torch.Tensor | None, masked_m: torch.Tensor | None, rows: int, cap: int) -> None:
    """The bounds' values, on CPU tensors only (module docstring: on CUDA this would sync the host; fake tensors,
    a custom op's while tracing, have none)."""
    if offs is not None and _has_values(offs) and offs.numel():
        steps = offs[1:] - offs[:-1]
        if bool((steps < 0).any()) or int(offs[0]) < 0:
            i = int((steps < 0).nonzero()[0]) + 1 if bool((steps < 0).any()) else 0
            raise InputError("offs", "non-decreasing cumulative row ends, starting at 0 or above",
                             f"offs[{i}] = {int(offs[i])} after {int(offs[i - 1]) if i else 'the start (0)'}",
                             "pass each expert's row counts summed up: counts.cumsum(0).to(torch.int32)")
        if int(offs[-1]) > rows:
            raise InputError("offs", f"a last offset of at most a's {rows} rows",
                             f"offs[-1] = {int(offs[-1])}", "pass offs ending at the rows of a the experts own")
    if masked_m is not None and _has_values(masked_m) and masked_m.numel():
        hi, lo = int(masked_m.max()), int(masked_m.min())
        if hi > cap or lo < 0:
            raise InputError("masked_m", f"counts in [0, {cap}] (a's capacity M_max per expert)",
                             f"counts from {lo} to {hi}", f"clamp them: masked_m.clamp(0, {cap})")


def _has_values(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and not is_fake(t)


def _b_layout(b: torch.Tensor, fp8: bool) -> BLayout:
    """B (G, K, N): K-major when each expert's (K, N) matrix is the transpose of a contiguous (N, K) one (torch's
    tests pass ``w.transpose(-2, -1)`` of a (G, N, K) tensor); N-major when each is a contiguous (K, N) one (16-bit
    only). The expert stride and the other stride must be multiples of 16 bytes (B's 3-D TMA descriptor)."""
    es = b.element_size()
    if b.stride(1) == 1 and b.shape[1] > 0:
        layout, row = BLayout.K_MAJOR, b.stride(2)
    elif b.shape[1] == 0:  # (K = 0: no kernel reads b, so its strides say nothing)
        layout, row = (BLayout.K_MAJOR, b.stride(2)) if fp8 else (BLayout.N_MAJOR, b.stride(1))
    elif b.stride(2) == 1 and not fp8:
        layout, row = BLayout.N_MAJOR, b.stride(1)
    else:
        want = "(G, N, K) storage seen as .transpose(-2, -1) (fp8 reads B K-major)" if fp8 else \
            "(G, N, K) storage seen as .transpose(-2, -1), or a contiguous (G, K, N)"
        raise AlignmentError("b", want, f"strides {tuple(b.stride())}",
                             "pass w.transpose(-2, -1) of a contiguous (G, N, K) weight" if fp8 else
                             "pass b.contiguous()")
    if b.stride(0) == 0 and b.shape[0] > 1 and b.numel():
        # An expanded b (``w.expand(G, K, N)``, or a 1-expert tensor's .expand) shares one weight among the experts.
        # B's 3-D TMA descriptor takes the expert stride as its outermost stride, and the CUDA driver documents each
        # tensor-map stride as nesting the ones inside it (cuTensorMapEncodeTiled: globalStrides[i] =
        # globalStrides[i - 1] * (globalDim[i] + padding[i])), which 0 breaks: the launch would fail to encode it or
        # read past the contract, though the simulator and torch._grouped_mm read such a b by its strides. (A
        # size-1 dimension's stride is never stepped: any multiple of 16 bytes, as a 2-D operand's.)
        fix = "b.contiguous()" if layout is BLayout.N_MAJOR else \
            "b.transpose(-2, -1).contiguous().transpose(-2, -1) (each expert its own copy, K-major as before)"
        raise AlignmentError("b", "a nonzero expert stride: each expert's (K, N) weight in its own memory (B's 3-D "
                             "TMA descriptor steps from one expert to the next by it)",
                             f"strides {tuple(b.stride())}, an expanded tensor", f"pass {fix}")
    for what, stride in (("row", row), ("expert", b.stride(0))):
        if (stride * es) % TMA_ALIGN and b.numel():
            raise AlignmentError("b", f"a {what} stride that is a multiple of {TMA_ALIGN} bytes (TMA rule)",
                                 f"{stride * es} bytes", "pad K and N to multiples of 16 bytes")
    _base_aligned("b", b)
    return layout


def _out_dtype(out_dtype: Any, a_dt: DType, scaled: bool) -> DType:
    """The result's dtype: bf16 for fp8 (None or torch.bfloat16), else a's, fp16 or fp32."""
    # (a torch.dtype only: anything else, a list say, is no key of DType.from_torch's table)
    out = (DType.BF16 if scaled else a_dt) if out_dtype is None else \
        DType.from_torch(out_dtype) if isinstance(out_dtype, torch.dtype) else None
    if out not in (DType.BF16, DType.FP16, DType.FP32) or (scaled and out is not DType.BF16):
        raise DTypeError("out_dtype", "torch.bfloat16" if scaled else "bf16, fp16 or fp32", repr(out_dtype)[:80],
                         "pass out_dtype=torch.bfloat16" if scaled else "pass out_dtype=None (a's dtype)")
    return out


def _row_aligned(arg: str, t: torch.Tensor) -> None:
    if t.numel() and (t.stride(-1) != 1 or (t.stride(-2) * t.element_size()) % TMA_ALIGN):
        raise AlignmentError(arg, f"contiguous rows whose stride is a multiple of {TMA_ALIGN} bytes (TMA rule)",
                             f"strides {tuple(t.stride())}", f"pass {arg}.contiguous() with K padded to "
                             f"{TMA_ALIGN // t.element_size()} elements")
    _base_aligned(arg, t)


def _base_aligned(arg: str, t: torch.Tensor) -> None:
    """A TMA descriptor's base address must be 16-byte aligned (else its encode fails at the launch)."""
    if t.numel() and t.device.type != "meta" and not is_fake(t) and t.data_ptr() % TMA_ALIGN:
        raise AlignmentError(arg, f"a base address aligned to {TMA_ALIGN} bytes (TMA rule)",
                             f"address {t.data_ptr():#x}", f"pass {arg}.clone()")


def grouped_call(a: Any, b: Any, offs: Any = None, masked_m: Any = None, out_dtype: Any = None,
                 scale_a: Any = None, scale_b: Any = None, use_fast_accum: bool = False, *,
                 scaled: bool | None = None) -> GroupedCall:
    """Check a grouped call and give its spec; `scale_a`/`scale_b` given means fp8 (`scaled_grouped_mm`, which
    passes `scaled=True`, so that its scales missing are refused rather than read as a 16-bit call): rowwise, or
    blockwise 1x128 x 128x128 where scale_b is 3-D (`_blockwise_scales`)."""
    if scaled is None:
        scaled = scale_a is not None or scale_b is not None
    a_dt, mx = _dtypes(a, b, scale_a, scale_b, use_fast_accum, scaled)
    if a.dim() == 2 and b.dim() == 2:
        if mx:  # (not built: `_k_grouped_call` would ask for scale_a.float(), which a fp4 a then fails again)
            name, t = ("scale_a", scale_a) if DType.from_torch(scale_a.dtype) is DType.E8M0 else \
                ("scale_b", scale_b)
            raise ScaleError(name, "float32 rowwise or blockwise scales with a 2-D a and a 2-D b (K-grouped): MX "
                             "e8m0 scales go with a 2-D (total_M, K) a, a 3-D (G, K, N) b and offs (M-grouped); "
                             "K-grouped MX calls are not built", f"dtype {t.dtype}",
                             "quantize a and b to torch.float8_e4m3fn with float32 blockwise 1x128 x 128x128 or "
                             "rowwise scales for the K-grouped GEMM")
        return _k_grouped_call(a, b, offs, masked_m, out_dtype, a_dt, scale_a, scale_b, use_fast_accum)
    return _in_grouped_call(a, b, offs, masked_m, out_dtype, a_dt, mx, scale_a, scale_b, use_fast_accum, scaled)


def _dtypes(a: Any, b: Any, scale_a: Any, scale_b: Any, use_fast_accum: Any, scaled: bool) -> tuple[DType, bool]:
    """The argument, device and dtype checks of a grouped call (no sizes): a's dtype, and whether it is MX."""
    if scaled and scale_a is None and scale_b is None:
        raise ArgumentTypeError("scale_a", "float32 scales for both fp8 operands: rowwise (one per row of a and per "
                                "column of each expert) or blockwise 1x128 x 128x128", "None for scale_a and scale_b",
                                "pass the scales the fp8 quantization gave, or call warploom.grouped_mm for bf16 or "
                                "fp16 tensors")
    missing = next((name for name, t in (("scale_a", scale_a), ("scale_b", scale_b)) if t is None), None)
    if scaled and missing:  # (a grouped call has no tensorwise recipe: check_tensors' torch.ones(()) would be refused)
        raise ArgumentTypeError(missing, "a float32 torch.Tensor (rowwise: one per row of a, one per column of each "
                                "expert; or blockwise 1x128 x 128x128)", "None",
                                f"pass {missing} as the fp8 quantization gave it (torch.ones of the rowwise shape for "
                                "no scaling)")
    named = {"a": a, "b": b} | ({"scale_a": scale_a, "scale_b": scale_b} if scaled else {})
    _no_tensor_lists(named)
    check_tensors(named)
    no_neg_bit(named)
    same_device(named)
    fast_accum(use_fast_accum)
    # (MX fp4, torch.float4_e2m1fn_x2 two values of K a byte, goes with e8m0 scales: `_mx_scales`)
    mx = scaled and DType.E8M0 in (DType.from_torch(scale_a.dtype), DType.from_torch(scale_b.dtype))
    allowed = (DType.E4M3, DType.E2M1) if mx else (DType.E4M3,) if scaled else _16BIT
    fix = "quantize to torch.float8_e4m3fn with rowwise or blockwise scales (or MX e8m0 ones, also for " \
        "torch.float4_e2m1fn_x2)" if scaled else "pass bf16 or fp16 tensors"
    a_dt = check_dtype("a", a, allowed, fix)
    b_dt = check_dtype("b", b, allowed, fix)
    if a_dt != b_dt:
        raise DTypeError("b", f"{a.dtype}, a's dtype", str(b.dtype), f"pass b.to({a.dtype})")
    return a_dt, mx


def _no_tensor_lists(named: dict[str, Any]) -> None:
    """A list of per-expert tensors where one stacked tensor goes (``[w0, w1, ...]`` as b): check_tensors' fix,
    torch.as_tensor, fails on a list of tensors of more than one element, so the fix here says how to stack them."""
    for name, t in named.items():
        if not isinstance(t, (list, tuple)) or not t or not all(isinstance(x, torch.Tensor) for x in t):
            continue
        fix = {"a": "torch.cat(a) with offs (a 2-D (total_M, K) a), or torch.stack(a) (a 3-D (G, M_max, K) a)",
               "b": "torch.stack(b) of the (K, N) weights, or torch.stack(ws).transpose(-2, -1) of (N, K) ones "
                    "(fp8 reads B K-major: the latter)"}.get(name, f"torch.stack({name})")
        raise ArgumentTypeError(name, "one torch.Tensor holding every expert's", f"a {type(t).__name__} of "
                                f"{len(t)} tensors", f"pass {fix}")


def grouped_result(a: Any, b: Any, offs: Any = None, masked_m: Any = None, out_dtype: Any = None,
                   scale_a: Any = None, scale_b: Any = None, use_fast_accum: bool = False, *,
                   scaled: bool) -> tuple[tuple[Any, ...], torch.dtype]:
    """The result's shape and dtype, for the custom ops' fake implementations: with plain int sizes every check of
    `grouped_call` (no bound values: fake tensors have none), else, on symbolic sizes, the dtype and rank checks
    only (strides and sizes wait for the real call), as `checks.matmul_dtypes`."""
    if static_sizes(a, b, offs, masked_m, scale_a, scale_b):
        call = grouped_call(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum, scaled=scaled)
        return call.out_shape, call.spec.out_dtype.torch
    a_dt, _ = _dtypes(a, b, scale_a, scale_b, use_fast_accum, scaled)
    out = _out_dtype(out_dtype, a_dt, scaled).torch
    if a.dim() == 2 and b.dim() == 2:  # K-grouped: (G, M, N)
        if not isinstance(offs, torch.Tensor):
            raise InputError("offs", "the (G,) int32 cumulative K ends of a 2-D x 2-D (K-grouped) call", "None",
                             "pass offs=k_counts.cumsum(0).to(torch.int32)")
        return (offs.shape[0], a.shape[0], b.shape[1]), out
    if b.dim() != 3:
        raise ShapeError("b", "a 3-D (G, K, N) tensor of expert weights", f"{b.dim()}-D shape {tuple(b.shape)}",
                         "stack the experts' (K, N) weights")
    if a.dim() == 2:  # M-grouped: (total_M, N)
        return (a.shape[0], b.shape[2]), out
    if a.dim() == 3:  # masked or batched: (G, M_max, N)
        return (a.shape[0], a.shape[1], b.shape[2]), out
    raise ShapeError("a", "a 2-D (total_M, K) tensor with offs, or a 3-D (G, M_max, K) one",
                     f"{a.dim()}-D shape {tuple(a.shape)}", "reshape a")


def _in_grouped_call(a: Any, b: Any, offs: Any, masked_m: Any, out_dtype: Any, a_dt: DType, mx: bool,
                     scale_a: Any, scale_b: Any, use_fast_accum: bool, scaled: bool) -> GroupedCall:
    """`grouped_call` past its dtype checks, for a 3-D b: M-grouped, masked or batched."""
    if b.dim() != 3:
        raise ShapeError("b", "a 3-D (G, K, N) tensor of expert weights", f"{b.dim()}-D shape {tuple(b.shape)}",
                         "stack the experts' (K, N) weights")
    groups, k, n = b.shape
    if groups == 0:  # (GemmSpec: a grouped spec has a group)
        raise ShapeError("b", "at least one expert: (G, K, N) with G >= 1", f"shape {tuple(b.shape)}",
                         "pass b with one (K, N) weight per expert, and offs or masked_m with one entry each")
    if offs is not None and masked_m is not None:
        raise InputError("masked_m", "either offs (a 2-D a) or masked_m (a 3-D a), not both", "both",
                         "drop one of them")
    if a.dim() == 2:
        if offs is None:
            raise InputError("offs", "the (G,) int32 cumulative row ends of a 2-D a", "None",
                             "pass offs=counts.cumsum(0).to(torch.int32), or a 3-D (G, M, K) a")
        if masked_m is not None:
            raise InputError("masked_m", "None with a 2-D a (masked_m goes with a 3-D (G, M_max, K) a)",
                             "a tensor", "drop masked_m, or pass a as (G, M_max, K)")
        grouping, rows, cap, a2 = Grouping.OFFSETS, a.shape[0], a.shape[0], a
        _bounds("offs", offs, groups, a.device)
        bounds = offs
        out_shape: tuple[int, ...] = (a.shape[0], n)
    elif a.dim() == 3:
        if offs is not None:
            raise InputError("offs", "None with a 3-D a (its experts are its first dimension)", "a tensor",
                             "drop offs (pass masked_m for per-expert row counts), or pass a 2-D (total_M, K) a")
        if a.shape[0] != groups:
            raise ShapeError("a", f"{groups} experts along dim 0, as b has", f"shape {tuple(a.shape)}",
                             "pass a and b with the same number of experts")
        cap = a.shape[1]
        if masked_m is None:  # 3-D x 3-D batched: every row of every expert
            bounds = torch.full((groups,), cap, dtype=torch.int32, device=a.device)
        else:
            _bounds("masked_m", masked_m, groups, a.device)
            bounds = masked_m
        if not a.is_contiguous():
            raise AlignmentError("a", "a contiguous (G, M_max, K) tensor", f"strides {tuple(a.stride())}",
                                 "pass a.contiguous()")
        grouping, rows, a2, out_shape = Grouping.MASKED, groups * cap, a.reshape(groups * cap, a.shape[2]), \
            (groups, cap, n)
    else:
        raise ShapeError("a", "a 2-D (total_M, K) tensor with offs, or a 3-D (G, M_max, K) one",
                         f"{a.dim()}-D shape {tuple(a.shape)}", "reshape a")
    if a2.shape[1] != k:
        raise ShapeError("b", f"(G, {a2.shape[1]}, N): K as a's last dimension", f"shape {tuple(b.shape)}",
                         "pass b as (G, K, N) (a (G, N, K) weight as .transpose(-2, -1))")
    _row_aligned("a", a2)
    layout = _b_layout(b, scaled)
    out = _out_dtype(out_dtype, a_dt, scaled)
    if (n * out.bytes) % TMA_ALIGN:
        raise AlignmentError("b", f"N a multiple of {TMA_ALIGN // out.bytes} (the output's rows, TMA rule)",
                             f"N = {n}", "pad N")
    recipe = ScaleRecipe.NONE
    if mx:
        k *= 2 if a_dt is DType.E2M1 else 1  # (MX fp4: a (M, K/2) and b (G, K/2, N) bytes, K counted in values)
        recipe = _mx_scales(scale_a, scale_b, a.dim(), rows, groups, n, k, use_fast_accum)
    elif scaled:
        kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
        block_a, row_a = (rows, kb) if a.dim() == 2 else (groups, rows // groups, kb), \
            (rows,) if a.dim() == 2 else (groups, cap)
        # (the recipe is the one a scale's shape says, so that the error names the scale that does not fit it: a
        # blockwise scale_b, or DeepGEMM's transposed one, beside a rowwise scale_a is scale_a's mistake, and a 3-D
        # (G, 1, N) scale_b beside a rowwise scale_a is scale_b's; failing both, a 3-D scale_b says blockwise)
        sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
        if sb in ((groups, kb, nb), (groups, nb, kb)) or sa == block_a or (
                sa != row_a and sb != (groups, n) and scale_b.dim() == 3):
            recipe = _blockwise_scales(scale_a, scale_b, block_a, (groups, kb, nb),
                                       "one per row of a and 128-deep block of K",
                                       "one per expert and 128x128 block of its (K, N) weight", use_fast_accum)
        else:
            recipe = ScaleRecipe.ROWWISE
            _rowwise_scales(scale_a, scale_b, row_a, (groups, n))
    indexable(rows, n, k, grouping, groups, recipe)
    _cpu_values(offs, masked_m, rows, cap)
    # (blockwise always promotes: `_blockwise_scales` refuses use_fast_accum=True)
    spec = GemmSpec(rows, n, k, a_dt, a_dt, out, layout, recipe,
                    Accumulation.NATIVE if not scaled or use_fast_accum else Accumulation.PROMOTED,
                    grouping=grouping, groups=groups)
    return GroupedCall(spec, a2, b, bounds, out_shape)


def _k_grouped_call(a: torch.Tensor, b: torch.Tensor, offs: Any, masked_m: Any, out_dtype: Any, a_dt: DType,
                    scale_a: Any, scale_b: Any, use_fast_accum: bool) -> GroupedCall:
    """torch._grouped_mm's K-grouped layout (the weight gradient): a (M, total_K), b (total_K, N) and int32 offs
    (G,), cumulative ends over K; result (G, M, N), zeros for an empty K range (`Grouping.K_OFFSETS`). fp8 takes
    blockwise 1x128 x 128x128 scales (2-D: `_blockwise_scales` over total_K, offs on the 128 grid: `_k_block_offsets`)
    or torch's rowwise (G * M,) and (G * N,) ones (1-D: one per row and column of each group's result)."""
    scaled = scale_a is not None or scale_b is not None
    rowwise = scaled and scale_a.dim() == 1 and scale_b.dim() == 1
    if scaled and not rowwise and (scale_a.dim() != 2 or scale_b.dim() != 2):
        arg = "scale_a" if scale_a.dim() not in (1, 2) else "scale_b"
        raise ScaleError(arg, "rowwise scales, both 1-D (scale_a (G * M,), scale_b (G * N,)), or blockwise ones, both "
                         "2-D (scale_a (M, ceil(total_K/128)), scale_b (ceil(total_K/128), ceil(N/128))), in a 2-D x "
                         "2-D (K-grouped) fp8 call", f"shapes {tuple(scale_a.shape)} and {tuple(scale_b.shape)}",
                         "pass both scales of one recipe")
    if masked_m is not None:
        raise InputError("masked_m", "None with a 2-D a and a 2-D b (a K-grouped call takes offs)", "a tensor",
                         "drop masked_m and pass offs, the cumulative K ends")
    if offs is None:
        raise InputError("offs", "the (G,) int32 cumulative K ends of a 2-D x 2-D (K-grouped) call", "None",
                         "pass offs=k_counts.cumsum(0).to(torch.int32)")
    if isinstance(offs, torch.Tensor) and (offs.dim() != 1 or offs.numel() == 0):
        raise ShapeError("offs", "shape (G,) with G >= 1: one cumulative K end per group", f"shape "
                         f"{tuple(offs.shape)}", "pass offs as a 1-D int32 tensor")
    groups = offs.shape[0] if isinstance(offs, torch.Tensor) else 0
    _bounds("offs", offs, groups, a.device)
    (m, total_k), n = a.shape, b.shape[1]
    if b.shape[0] != total_k:
        raise ShapeError("b", f"({total_k}, N): a's {total_k} columns (total_K) as its rows", f"shape "
                         f"{tuple(b.shape)}", "pass a (M, total_K) and b (total_K, N) over the same K ranges")
    _row_aligned("a", a)
    es = b.element_size()
    if b.stride(0) == 1 and b.shape[0] > 0:  # torch's column-major b: a contiguous (N, total_K) seen as .t()
        layout, row = BLayout.K_MAJOR, b.stride(1)
    elif b.shape[0] == 0:  # (total_K = 0, e.g. torch's column-major b sliced to no rows: no kernel reads b)
        layout, row = (BLayout.K_MAJOR, b.stride(1)) if scaled else (BLayout.N_MAJOR, b.stride(0))
    elif b.stride(1) == 1 and not scaled:
        layout, row = BLayout.N_MAJOR, b.stride(0)
    elif scaled:
        raise AlignmentError("b", "a column-major (total_K, N) (a contiguous (N, total_K) seen as .t(): fp8 reads B "
                             "K-major)", f"strides {tuple(b.stride())}", "pass b.t().contiguous().t()")
    else:
        raise AlignmentError("b", "a column-major (total_K, N) (a contiguous (N, total_K) seen as .t()) or a "
                             "contiguous one", f"strides {tuple(b.stride())}", "pass b.contiguous()")
    if b.numel() and (row * es) % TMA_ALIGN:
        raise AlignmentError("b", f"a row stride that is a multiple of {TMA_ALIGN} bytes (TMA rule)",
                             f"{row * es} bytes", "pad total_K (or N) to a multiple of 16 bytes")
    _base_aligned("b", b)
    out = _out_dtype(out_dtype, a_dt, scaled)
    if (n * out.bytes) % TMA_ALIGN:
        raise AlignmentError("b", f"N a multiple of {TMA_ALIGN // out.bytes} (the output's rows, TMA rule)",
                             f"N = {n}", "pad N")
    kb, nb = -(-total_k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    if rowwise:
        _rowwise_scales(scale_a, scale_b, (groups * m,), (groups * n,),
                        "one per row and per column of each group's (M, N) result")
    elif scaled:
        _blockwise_scales(scale_a, scale_b, (m, kb), (kb, nb), "one per row of a and 128-deep block of total_K",
                          "one per 128x128 block of b (total_K, N)", use_fast_accum)
    if _has_values(offs):  # (the values on CPU tensors only: module docstring)
        ends = [0, *offs.tolist()]
        bad = next((i for i in range(groups) if ends[i + 1] < ends[i]), None)
        if bad is not None:
            raise InputError("offs", "non-decreasing cumulative K ends, starting at 0 or above",
                             f"offs[{bad}] = {ends[bad + 1]} after {ends[bad] if bad else 'the start (0)'}",
                             "pass each group's K counts summed up: counts.cumsum(0).to(torch.int32)")
        if ends[-1] > total_k:
            raise InputError("offs", f"a last offset of at most a's {total_k} columns (total_K)",
                             f"offs[-1] = {ends[-1]}", "pass offs ending within total_K")
        if scaled and not rowwise:
            _k_block_offsets(ends[1:], total_k)
    recipe, acc = (ScaleRecipe.NONE, Accumulation.NATIVE) if not scaled else \
        (ScaleRecipe.ROWWISE, Accumulation.NATIVE if use_fast_accum else Accumulation.PROMOTED) if rowwise else \
        (ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED)
    indexable(m, n, total_k, Grouping.K_OFFSETS, groups, recipe)
    spec = GemmSpec(m, n, total_k, a_dt, a_dt, out, layout, recipe, acc, grouping=Grouping.K_OFFSETS, groups=groups)
    return GroupedCall(spec, a, b, offs, (groups, m, n))


def _k_block_offsets(ends: list[int], total_k: int) -> None:
    """Blockwise K-grouped offs: every group's K range starts on a 128-column scale block (DeepGEMM's K-grouped
    wgrad requires each group's K to be a multiple of 128 too), so each of its k-blocks is one block of scale_a's
    columns and scale_b's rows, never two groups'. An end may be total_K itself (the last group's partial block,
    read as zeros past total_K); the groups after it are then empty."""
    bad = next((i for i, e in enumerate(ends) if e % SCALE_BLOCK and e != total_k), None)
    if bad is not None:
        raise InputError("offs", f"cumulative K ends that are multiples of {SCALE_BLOCK} (or total_K = {total_k}) "
                         f"with blockwise scales: each group's k-blocks are whole {SCALE_BLOCK}-deep scale blocks",
                         f"offs[{bad}] = {ends[bad]}", f"pad each group's K range to a multiple of {SCALE_BLOCK} "
                         "(zero columns of a and rows of b), as DeepGEMM's K-grouped GEMM requires")


def _blockwise_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, want_a: tuple[int, ...],
                      want_b: tuple[int, ...], what_a: str, what_b: str, use_fast_accum: bool) -> ScaleRecipe:
    """DeepSeek-V3's blockwise recipe (`ScaleRecipe.BLOCKWISE_1X128_128X128`): fp32 scale_a (total_M, ceil(K/128))
    with a 2-D a (M-grouped), one per row of a and 128-deep block of K in the grouped row space (a row's own,
    whichever expert owns it), or (G, M_max, ceil(K/128)) with a 3-D a (masked or batched: a's rows); and scale_b
    (G, ceil(K/128), ceil(N/128)), one per 128x128 block of each expert's (K, N) weight: warploom's ungrouped
    128x128 scale_b per expert. Any strides are accepted (the kernel reads the scales element by element with their
    strides), so DeepGEMM's (G, ceil(N/128), ceil(K/128)) storage goes as ``scale_b.transpose(-2, -1)``, a view (a
    3-D scale_a is seen as (G * M_max, ceil(K/128)): a view where its strides allow, else a copy). K need not be a
    multiple of 128: the last k-block is partial, as in the ungrouped kernel (TMA reads zeros past K). A K-grouped
    call's scales are 2-D over the grouped K space (`_k_grouped_call`): scale_a (M, ceil(total_K/128)) and scale_b
    (ceil(total_K/128), ceil(N/128)), a (ceil(N/128), ceil(total_K/128)) one going as ``scale_b.t()``."""
    for name, t, want, what in (("scale_a", scale_a, want_a, what_a), ("scale_b", scale_b, want_b, what_b)):
        if t.dtype != torch.float32:
            raise ScaleError(name, "float32 blockwise scales", str(t.dtype), f"pass {name}.float()")
        if tuple(t.shape) == want:
            continue
        fix = f"pass {name} with shape {want}"
        if name == "scale_b" and tuple(t.shape) == (*want[:-2], want[-1], want[-2]):  # DeepGEMM's (E, N/128, K/128)
            fix = "pass scale_b.transpose(-2, -1), a view (any strides are accepted)"
        raise ScaleError(name, f"shape {want} (blockwise 1x128 x 128x128: {what})", f"shape {tuple(t.shape)}", fix)
    # (after the shapes: a rowwise call with fast accumulation whose scale_b is 3-D by mistake is a scale mistake)
    if use_fast_accum:
        raise InputError("use_fast_accum", "False with blockwise scales (each 128-deep k-block's partial is "
                         "promoted with its own scales, so there is no fast-accumulation mode)", "True",
                         "pass use_fast_accum=False")
    check_block_scales(scale_a, scale_b)
    return ScaleRecipe.BLOCKWISE_1X128_128X128


def _mx_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, a_dim: int, rows: int, groups: int, n: int,
               k: int, use_fast_accum: bool = False) -> ScaleRecipe:
    """MX fp8 and MX fp4 (`ScaleRecipe.MX`, sm_100a; `k` in values): e8m0 scales per 32 of K, row-major and
    unpadded, any strides: scale_a (total_M, K/32), one per row of a in the grouped row space (a row's own, whichever
    expert owns it), and scale_b (G, N, K/32), one per row of each expert's (N, K) weight and 32 of K. M-grouped (a
    2-D a with offs) only; K a multiple of 32; no use_fast_accum (refused as blockwise's is). The scale partition
    reads each tile's expert's rows at their strides (`sb_ptr + grp * sb_stride_g`), so nothing is padded or swizzled
    per expert."""
    kb = k // MX_BLOCK
    # (the dtypes first: one e8m0 scale beside a float32 one is a scale mistake, not an MX call to refuse for its
    # use_fast_accum, layout or K)
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if DType.from_torch(t.dtype) is not DType.E8M0:
            raise ScaleError(name, "torch.float8_e8m0fnu like the other scale (MX)", f"dtype {t.dtype}",
                             "pass both scales as torch.float8_e8m0fnu (MX), or both as float32 (rowwise or "
                             "blockwise)")
    if use_fast_accum:
        raise InputError("use_fast_accum", "False with MX scales (the block-scaled MMA applies each 32-deep block's "
                         "scales and accumulates in fp32 itself, so there is no fast-accumulation mode)", "True",
                         "pass use_fast_accum=False")
    if a_dim != 2:
        raise ScaleError("scale_a", "MX scales with a 2-D (total_M, K) a and offs (M-grouped; masked and batched MX "
                         "calls are not built)", f"a {a_dim}-D a", "pass a as (total_M, K) with offs")
    if k % MX_BLOCK:
        raise ShapeError("a", f"K a multiple of {MX_BLOCK} for MX scales (one per {MX_BLOCK} elements of K)",
                         f"K = {k}", f"pad K with zeros to a multiple of {MX_BLOCK}")
    for name, t, want, what in (("scale_a", scale_a, (rows, kb), "one per row of a and 32 of K"),
                                ("scale_b", scale_b, (groups, n, kb), "one per expert, row of its (N, K) weight "
                                 "and 32 of K")):
        if tuple(t.shape) != want:
            raise ScaleError(name, f"shape {want} (MX, row-major: {what})", f"shape {tuple(t.shape)}",
                             f"pass {name} with shape {want} (any strides)")
    check_block_scales(scale_a, scale_b)  # (32-bit offsets unless the spec's sizes need more: `scale_offsets_wide`)
    return ScaleRecipe.MX


def _rowwise_scales(scale_a: Any, scale_b: Any, want_a: tuple[int, ...], want_b: tuple[int, ...],
                    what: str = "one per row of a / per column of each expert") -> None:
    """torch._scaled_grouped_mm's rowwise recipe: fp32 scale_a, one per row of a ((M,), or (G, M_max) with a 3-D a),
    and scale_b (G, N), one per column of each expert; a K-grouped call's (G * M,) and (G * N,), one per row and
    column of each group's (M, N) result (each group quantizes its own K slice)."""
    for name, t, want in (("scale_a", scale_a, want_a), ("scale_b", scale_b, want_b)):
        if t.dtype != torch.float32:
            raise ScaleError(name, "float32 rowwise scales", str(t.dtype), f"pass {name}.float()")
        if tuple(t.shape) != want:
            raise ScaleError(name, f"shape {want} (rowwise: {what})", f"shape {tuple(t.shape)}",
                             f"pass {name} with shape {want}")
        if not t.is_contiguous():
            raise ScaleError(name, "a contiguous tensor", f"strides {tuple(t.stride())}", f"pass {name}.contiguous()")
