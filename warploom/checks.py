"""Input validation: turn user tensors into a GemmSpec, or raise a warploom error naming the argument.

Everything here runs before any kernel is planned or launched. Tensors may be on the ``meta`` device
(for `warploom.plan`), on the CPU (simulator path) or on CUDA.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from warploom.dtypes import DType
from warploom.errors import (
    AlignmentError,
    ArgumentTypeError,
    DeviceError,
    DTypeError,
    InputError,
    ScaleError,
    ShapeError,
    SizeRule,
    UnsupportedError,
)
from warploom.spec import (
    LINE_BYTES,
    MX_BLOCK,
    NVFP4_BLOCK,
    SCALE_BLOCK,
    Accumulation,
    ALayout,
    BLayout,
    GemmSpec,
    Grouping,
    ScaleLayout,
    ScaleRecipe,
    align_of,
    oversized,
)

TMA_ALIGN = 16  # bytes: TMA needs 16-byte aligned base addresses and non-inner strides
_16BIT = (DType.BF16, DType.FP16)
# The sizes of a and b along each dimension: a (M, K), b (K, N).
_DIMS = {"a": ("M", "K"), "b": ("K", "N")}
# e2m1 data packs two values of K a byte in rows of whole 16 bytes, MX's scales one per 32 of them.
FP4_K = SizeRule("K", MX_BLOCK, f"two e2m1 values a byte: TMA's rows of whole {TMA_ALIGN} bytes hold "
                 f"{2 * TMA_ALIGN} values of K, as many as one MX scale covers")


def not_a_tensor(named: dict[str, Any], optional: tuple[str, ...] = ()) -> ArgumentTypeError | None:
    """The error for the first argument that is not a dense (strided) torch tensor, or None when all are; those in
    `optional` may be None. Returned, not raised: a caller that found out by an AttributeError raises it from None."""
    for arg, t in named.items():
        if isinstance(t, torch.Tensor) and t.layout is torch.strided or t is None and arg in optional:
            continue
        scale = arg.startswith("scale")
        if isinstance(t, torch.Tensor):
            return ArgumentTypeError(arg, "a dense (strided) torch.Tensor", f"a tensor of layout {t.layout}",
                                     f"pass {arg}.to_dense()")
        if t is None:
            fix = "pass torch.ones((), device=a.device) for no scaling" if scale else f"pass a tensor as {arg}"
            return ArgumentTypeError(arg, "a torch.Tensor", "None", fix)
        if isinstance(t, (bool, int, float)) and scale:
            return ArgumentTypeError(arg, "a float32 torch.Tensor", f"the Python number {t!r}",
                                     f"pass torch.tensor({float(t)!r}, device=a.device)")
        return ArgumentTypeError(arg, "a torch.Tensor", f"{type(t).__module__}.{type(t).__qualname__}"
                                 .removeprefix("builtins."), f"convert it with torch.as_tensor({arg})")
    return None


def fast_accum(flag: Any) -> None:
    """use_fast_accum must be a bool: a string such as "no" is true, and the custom op's dispatcher cannot cast it."""
    if flag is not True and flag is not False:
        raise ArgumentTypeError("use_fast_accum", "a bool", repr(flag)[:80], "pass True or False")


def check_tensors(named: dict[str, Any], optional: tuple[str, ...] = ()) -> None:
    bad = not_a_tensor(named, optional)
    if bad is not None:
        raise bad


def check_dtype(arg: str, t: Any, allowed: tuple[DType, ...], fix: str) -> DType:
    d = DType.from_torch(t.dtype)
    if d not in allowed:
        names = ", ".join(x.value for x in allowed)
        raise DTypeError(arg, f"dtype in ({names})", str(t.dtype), fix)
    return d


def _two_d(arg: str, t: Any) -> None:
    if t.dim() != 2:
        raise ShapeError(arg, "a 2-D tensor", f"{t.dim()}-D shape {tuple(t.shape)}",
                         f"reshape {arg} to 2-D (e.g. {arg}.flatten(0, -2)) and reshape the result back")


def tma_ok(arg: str, t: Any, inner: int, what: str) -> None:
    """`t`'s stride along `inner` must be 1 and its other stride and base 16-byte aligned."""
    if t.numel() == 0:
        return
    esize = t.element_size()
    outer = 1 - inner
    if t.stride(inner) != 1 and t.size(inner) > 1:
        raise AlignmentError(arg, f"{what} (stride 1 along dim {inner})", f"strides {tuple(t.stride())}",
                             f"pass {arg}.contiguous()" if inner == 1 else f"pass {arg}.t().contiguous().t()")
    # TMA descriptors need every outer stride 16-byte aligned, even along a size-1 dimension.
    if (t.stride(outer) * esize) % TMA_ALIGN:
        dtype = DType.from_torch(t.dtype)
        rule = None
        # (where the stride is the size, as in a contiguous a or b, that size breaks the rule; packed e2m1's is half
        # of K)
        if arg in _DIMS and t.stride(outer) == t.size(inner) and dtype is not None and dtype is not DType.E2M1:
            rule = SizeRule(_DIMS[arg][inner], TMA_ALIGN // esize,
                            f"TMA's rows of whole {TMA_ALIGN} bytes: {TMA_ALIGN // esize} {dtype.value} values")
        raise AlignmentError(
            arg, f"a dim-{outer} stride that is a multiple of {TMA_ALIGN} bytes (TMA rule)",
            f"stride {t.stride(outer)} elements = {t.stride(outer) * esize} bytes",
            f"pad dim {inner} of {arg} to a multiple of {TMA_ALIGN // esize} elements", rule,
        )
    if t.device.type != "meta" and not is_fake(t) and t.data_ptr() % TMA_ALIGN:
        raise AlignmentError(arg, f"a base address aligned to {TMA_ALIGN} bytes (TMA rule)",
                             f"address {t.data_ptr():#x}", f"pass {arg}.clone()")


def indexable(m: int, n: int, k: int, grouping: Grouping = Grouping.NONE, groups: int = 0,
              scale: ScaleRecipe = ScaleRecipe.NONE) -> None:
    """Refuse a problem whose sizes its kernels cannot index (`spec.oversized`: 32-bit sizes and coordinates),
    naming the tensor the size belongs to; a size of 0 needs no kernel and passes."""
    big = oversized(m, n, k, grouping, groups, scale)
    if big is None:
        return
    name, value, most = big
    why = "the kernels index rows, columns and K with 32-bit integers (Triton's i32 sizes, TMA's signed 32-bit " \
        "coordinates)"
    arg, fix = {
        "M": ("a", f"split a's rows (every group's, in a grouped call) across calls of at most {most} rows and "
              "concatenate the results"),
        "N": ("b", f"split b's columns across calls of at most {most} and concatenate the results along the last "
              "dimension"),
        "K": ("a", f"split K into chunks of at most {most}, one call each (a[:, k0:k1] with b's rows k0:k1), and "
              "add the results in float32"),
        "G * M": ("offs", f"split the groups across calls of at most {most // m} groups each"),
        "G * N": ("scale_b", f"split the experts across calls of at most {most // n} experts each"),
    }[name]
    if name == "G * N":
        why = "the kernel offsets a grouped rowwise scale_b's rows by grp * N in 32 bits"
    raise InputError(arg, f"{name} at most {most}: {why}", f"{name} = {value}", fix)


def no_neg_bit(named: dict[str, Any]) -> None:
    """Refuse a tensor whose negation is a lazy view bit (`torch._neg_view`, `is_neg()`): kernels read its storage,
    which holds the values un-negated, so the result would be silently wrong."""
    for arg, t in named.items():
        if t is not None and hasattr(t, "is_neg") and t.is_neg():
            raise InputError(arg, "a tensor whose values are its storage", "a negated view (is_neg() is True)",
                             f"pass {arg}.resolve_neg()")


def static_sizes(*tensors: Any) -> bool:
    """Whether every size and stride of the tensors among `tensors` is a plain int: then a custom op's fake
    implementation runs the full checks; under tracing, symbolic sizes leave strides and sizes for the real call."""
    return all(isinstance(d, int) for t in tensors if isinstance(t, torch.Tensor) for d in (*t.shape, *t.stride()))


def is_fake(t: Any) -> bool:
    # A plain torch.Tensor is never fake (FakeTensor subclasses it): the type check spares the eager path the
    # cached import and isinstance (~0.13 us a tensor).
    return type(t) is not torch.Tensor and isinstance(t, _fake_tensor_class())


@functools.cache
def _fake_tensor_class() -> type:
    # Imported once, on first use (importing warploom stays light); an import statement per call cost ~3 us.
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor


def same_device(named: dict[str, Any]) -> None:
    present = {k: v for k, v in named.items() if v is not None}
    devs = {k: v.device for k, v in present.items()}
    first = next(iter(devs))
    for k, d in devs.items():
        if d != devs[first]:
            raise DeviceError(k, f"a tensor on {devs[first]} like {first}", f"a tensor on {d}",
                              f"move {k} with {k}.to({first}.device)")


def a_layout_of(a: Any) -> ALayout | None:
    """A's layout as its strides give it: row-major (K contiguous), column-major (M contiguous: `x.t()` of a
    contiguous x, which wgmma reads transposed from shared memory), or None (no unit stride). A size-1 dimension has
    an arbitrary stride: the other decides."""
    if a.stride(1) == 1 or a.size(1) == 1:
        return ALayout.K_MAJOR
    if a.stride(0) == 1 or a.size(0) == 1:
        return ALayout.M_MAJOR
    return None


def b_layout_of(b: Any) -> BLayout | None:
    """B's (K, N) layout as its strides give it: K contiguous (torch's column-major b, `w.t()`), N contiguous, or
    None; a size-1 dimension as in `a_layout_of`."""
    if b.stride(0) == 1 or b.size(0) == 1:
        return BLayout.K_MAJOR
    if b.stride(1) == 1 or b.size(1) == 1:
        return BLayout.N_MAJOR
    return None


def _a_layout(a: Any) -> ALayout:
    """A 16-bit A's layout (`a_layout_of`), refused where no stride is a unit one (TMA needs one)."""
    layout = a_layout_of(a)
    if layout is None:
        raise AlignmentError("a", "row-major or column-major a (one unit stride)", f"strides {tuple(a.stride())}",
                             "pass a.contiguous()")
    return layout


def _b_layout(b: Any, fp8: bool) -> BLayout:
    """B's layout (`b_layout_of`), refused where no stride is a unit one, and N-major for fp8 (fp8 wgmma reads B
    K-major only)."""
    layout = b_layout_of(b)
    if layout is None:
        raise AlignmentError("b", "row-major or column-major b (one unit stride)", f"strides {tuple(b.stride())}",
                             "pass b.contiguous()")
    if layout is BLayout.N_MAJOR and fp8:
        raise AlignmentError("b", "column-major b (b.t() contiguous), as fp8 wgmma reads B K-major",
                             f"a row-major b with strides {tuple(b.stride())}", "pass b.t().contiguous().t()")
    return layout


def _check_ab(a: Any, b: Any) -> None:
    _two_d("a", a)
    _two_d("b", b)
    if a.shape[1] != b.shape[0]:
        raise ShapeError("b", f"shape ({a.shape[1]}, N) to match a's K = {a.shape[1]}", f"shape {tuple(b.shape)}",
                         "pass b with as many rows as a has columns (b is (K, N), not (N, K))")


def _out_aligned(n: int, out: DType) -> None:
    if n % (TMA_ALIGN // out.bytes):
        raise AlignmentError("b", f"N a multiple of {TMA_ALIGN // out.bytes} for {out.value} output rows of "
                             f"{TMA_ALIGN}-byte multiples (TMA store)", f"N = {n}",
                             "pad b's N dimension and slice the result",
                             SizeRule("N", TMA_ALIGN // out.bytes, f"the {out.value} output's rows, which TMA "
                                      f"stores in whole {TMA_ALIGN} bytes"))


def matmul_dtypes(a: Any, b: Any, out_dtype: Any = None) -> DType:
    """The dtype and rank checks of `matmul_spec` (safe on symbolic shapes); returns the output dtype."""
    check_tensors({"a": a, "b": b})
    _check_ab(a, b)
    da = check_dtype("a", a, _16BIT, "convert a to torch.bfloat16 or torch.float16; for fp8 use warploom.scaled_mm")
    db = check_dtype("b", b, _16BIT, "convert b to torch.bfloat16 or torch.float16")
    if da != db:
        raise DTypeError("b", f"the same dtype as a ({a.dtype})", str(b.dtype), f"convert b with b.to({a.dtype})")
    out = da if out_dtype is None else DType.from_torch(out_dtype)
    if out not in (DType.BF16, DType.FP16, DType.FP32):
        raise DTypeError("out_dtype", MATMUL_OUT_NAMES, str(out_dtype),
                         "pass one of those or None (a's dtype)")
    return out


def matmul_spec(a: Any, b: Any, out_dtype: Any = None) -> GemmSpec:
    """Validate `warploom.matmul`'s arguments and return their spec."""
    out = matmul_dtypes(a, b, out_dtype)
    da = DType.from_torch(a.dtype)
    assert da is not None
    named = {"a": a, "b": b}
    same_device(named)
    no_neg_bit(named)
    if a.shape[0] * b.shape[1] * a.shape[1] == 0:
        # No kernel runs (an empty output, or K = 0: zeros), so TMA's rules do not apply: torch's result, any strides.
        layout = BLayout.K_MAJOR if b.stride(0) == 1 else BLayout.N_MAJOR
        return GemmSpec(a.shape[0], b.shape[1], a.shape[1], da, da, out, layout)
    indexable(a.shape[0], b.shape[1], a.shape[1])
    a_layout = _a_layout(a)
    tma_ok("a", a, 1 if a_layout is ALayout.K_MAJOR else 0, "a")
    layout = _b_layout(b, fp8=False)
    tma_ok("b", b, 0 if layout is BLayout.K_MAJOR else 1, "b")
    _out_aligned(b.shape[1], out)
    return GemmSpec(a.shape[0], b.shape[1], a.shape[1], da, da, out, layout, a_layout=a_layout,
                    a_row_align=row_align(a, 0 if a_layout is ALayout.K_MAJOR else 1),
                    b_row_align=row_align(b, 1 if layout is BLayout.K_MAJOR else 0))


def row_align(t: Any, outer: int) -> int:
    """Where `t`'s rows (along dimension `outer`) start: the largest of 16, 32, 64 and 128 bytes dividing its
    address and, with more than one row, its row stride (`GemmSpec.a_row_align`; TMA's checks refuse less than 16).
    Only a GPU tensor's address counts (CPU ones reach no kernel; meta and fake ones have none): others' rows start
    as their stride says; an empty one's (no kernel reads it) are whole lines."""
    if t.numel() == 0:
        return LINE_BYTES
    at = t.data_ptr() % LINE_BYTES if t.is_cuda and is_real(t) else 0
    if t.size(outer) > 1:
        at |= t.stride(outer) * t.element_size() % LINE_BYTES
    return align_of(at)


def _mx_recipe(scale_a: Any, scale_b: Any, m: int, n: int, k: int) -> ScaleRecipe:
    """MX fp8: e8m0 scales, K a multiple of 32; scale_a (M, K/32) and scale_b (N, K/32), or both in torch's blocked
    layout (`mx_scale_layout`)."""
    for arg, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if DType.from_torch(t.dtype) is not DType.E8M0:
            raise ScaleError(arg, "torch.float8_e8m0fnu like the other scale (MX)", f"dtype {t.dtype}",
                             "pass both scales as torch.float8_e8m0fnu, or both as float32 for the other recipes")
    if k % MX_BLOCK:
        raise ShapeError("a", f"K a multiple of {MX_BLOCK} for MX scales (one per {MX_BLOCK} elements of K)",
                         f"K = {k}", f"pad K with zeros to a multiple of {MX_BLOCK}",
                         SizeRule("K", MX_BLOCK, f"MX scales, one per {MX_BLOCK} values of K"))
    mx_scale_layout(scale_a, scale_b, m, n, k)
    return ScaleRecipe.MX


def blocked_scales(rows: int, k: int, block: int = MX_BLOCK) -> int:
    """Elements of an MX (NVFP4: block 16) scale tensor in torch's blocked layout (``to_blocked``): rows padded to a
    multiple of 128, the K/block scales of a row to a multiple of 4."""
    return -(-rows // 128) * 128 * (-(-(k // block) // 4) * 4)


def mx_scale_layout(scale_a: Any, scale_b: Any, m: int, n: int, k: int) -> ScaleLayout:
    """Which layout both MX scales are in: ROW_MAJOR (M, K/32) and (N, K/32), any strides; or BLOCKED, torch's
    swizzled 1-D ``to_blocked`` output (contiguous, padded to 128x4 blocks) that sm_100a's tcgen05.cp reads."""
    kb = k // MX_BLOCK
    layouts = []
    for arg, t, rows in (("scale_a", scale_a, m), ("scale_b", scale_b, n)):
        blocked = blocked_scales(rows, k)
        if tuple(t.shape) == (rows, kb):
            layouts.append(ScaleLayout.ROW_MAJOR)
        elif tuple(t.shape) == (blocked,) and (blocked <= 1 or t.stride() == (1,)):
            layouts.append(ScaleLayout.BLOCKED)
        else:
            raise ScaleError(arg, f"MX scales of shape ({rows}, {kb}): one per row and {MX_BLOCK} elements of K"
                             + (" (a row of the (N, K) weight b.t())" if arg == "scale_b" else "")
                             + f", or torch's blocked layout: to_blocked's contiguous 1-D ({blocked},)",
                             f"shape {tuple(t.shape)} strides {tuple(t.stride())}",
                             f"pass the ({rows}, {kb}) scales, or to_blocked() of them (contiguous)")
    if layouts[0] is not layouts[1]:
        raise ScaleError("scale_b", f"the layout of scale_a ({layouts[0].value})", layouts[1].value,
                         "pass both scales row-major or both in the blocked layout")
    return layouts[0]


_FP32_RECIPES = (ScaleRecipe.ROWWISE, ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128,
                 ScaleRecipe.BLOCKWISE_128X128_128X128, ScaleRecipe.BLOCKWISE_128X128_1X128)


def recipe_scale_shapes(recipe: ScaleRecipe, m: int, n: int, k: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The (scale_a, scale_b) shapes that fp32 scales of `recipe` take at M x N x K (none for tensorwise, whose scales
    are one element each, or for the block-scaled MX and NVFP4 recipes). torch.nn.functional.scaled_mm pads a
    128x128 scale_b's K-blocks to a multiple of 4 (its L4): accepted, the padding rows are never read."""
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    # (scale_a's rows: one a row of A, or one per 128 rows)
    rows = -(-m // SCALE_BLOCK) if recipe in (ScaleRecipe.BLOCKWISE_128X128_128X128,
                                              ScaleRecipe.BLOCKWISE_128X128_1X128) else m
    if recipe is ScaleRecipe.ROWWISE:
        return (((m, 1), (1, n)),)
    if recipe in (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_128X128_128X128):
        return (((rows, kb), (kb, nb)), ((rows, kb), (-(-kb // 4) * 4, nb)))
    if recipe in (ScaleRecipe.BLOCKWISE_1X128_1X128, ScaleRecipe.BLOCKWISE_128X128_1X128):
        return (((rows, kb), (kb, n)),)
    return ()


def _scale_recipe(scale_a: Any, scale_b: Any, m: int, n: int, k: int) -> ScaleRecipe:
    if DType.E8M0 in (DType.from_torch(scale_a.dtype), DType.from_torch(scale_b.dtype)):
        return _mx_recipe(scale_a, scale_b, m, n, k)
    for arg, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if DType.from_torch(s.dtype) is not DType.FP32:
            raise ScaleError(arg, "a torch.float32 tensor (or, for MX, torch.float8_e8m0fnu)", f"dtype {s.dtype}",
                             f"pass {arg}.float()")
    # One element each is tensorwise even when M = N = 1, where rowwise would mean the same product.
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return ScaleRecipe.TENSORWISE
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    # (In this order: with K <= 128 the 1x128 x 1x128 shapes are the rowwise ones, and so is their meaning; with
    # M = 1 a 128x128 scale_a is the 1x128 one, and means the same.)
    for recipe in _FP32_RECIPES:
        if (sa, sb) in recipe_scale_shapes(recipe, m, n, k):
            return recipe
    kb, nb, mb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK), -(-m // SCALE_BLOCK)
    raise ScaleError(
        "scale_a" if sa not in ((m, 1), (m, kb), (mb, kb)) else "scale_b",
        f"tensorwise scales (one element each); rowwise scale_a ({m}, 1) and scale_b (1, {n}); or blockwise "
        f"scale_a ({m}, {kb}) (ScalingType.BlockWise1x128) or ({mb}, {kb}) (BlockWise128x128) with scale_b ({kb}, "
        f"{nb}) (BlockWise128x128) or ({kb}, {n}) (BlockWise1x128), one scale per 128 elements of K",
        f"scale_a {sa} and scale_b {sb}",
        "reshape the scales to one of those shapes; any strides are accepted (a (N, K/128) scale_b is passed as "
        "scale_b.t(), a view)",
    )


def check_block_scales(scale_a: Any, scale_b: Any) -> None:
    """Blockwise scales are read element by element (cp.async of 4 bytes), so any strides work; the copies address
    them with 32-bit offsets."""
    from warploom.epilogue.operands import element_span  # (the epilogue package imports this module)

    for arg, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        span = element_span(tuple(t.shape), tuple(t.stride()))
        if span >= 2**31:
            raise ScaleError(arg, "a scale tensor spanning fewer than 2**31 elements", f"a span of {span}",
                             f"pass {arg}.contiguous()")


def _check_scaled_ab(a: Any, b: Any) -> None:
    """`_check_ab` with K counted in values: a float4_e2m1fn_x2 operand holds two of K a byte (MX fp8 x fp4 packs one
    operand only: a (M, K) with b (K/2, N), or a (M, K/2) with b (K, N))."""
    _two_d("a", a)
    _two_d("b", b)
    fp4 = torch.float4_e2m1fn_x2
    ka, kb = a.shape[1] * (2 if a.dtype == fp4 else 1), b.shape[0] * (2 if b.dtype == fp4 else 1)
    if ka != kb:
        rows = ka // 2 if b.dtype == fp4 else ka
        raise ShapeError("b", f"shape ({rows}, N) to match a's K = {ka}", f"shape {tuple(b.shape)}",
                         "pass b with as many rows as a has values of K (b is (K, N), not (N, K); fp4 rows hold "
                         "two values a byte)")


def scaled_mm_dtypes(a: Any, b: Any, out_dtype: Any = None) -> DType:
    """The dtype and rank checks of `scaled_mm_spec` (safe on symbolic shapes); returns the output dtype.

    fp8 x fp8 (either format), fp4 x fp4, and MX fp8 x fp4 either way round (warploom's own API: torch's scaled_mm
    has no mixed MX recipe; e8m0 scales per 32 of K for both operands in the blocked layout, sm_100a's
    kind::mxf8f6f4)."""
    check_tensors({"a": a, "b": b})
    _check_scaled_ab(a, b)
    fp8 = (DType.E4M3, DType.E5M2, DType.E2M1)
    fix = "quantize with x.to(torch.float8_e4m3fn) and pass its scale"
    check_dtype("a", a, fp8, fix)
    check_dtype("b", b, fp8, fix)
    # e5m2 x e5m2 is taken although torch._scaled_mm refuses it on CUDA ("Multiplication of two Float8_e5m2 matrices
    # is not supported", a cuBLASLt restriction): sm_90a's wgmma takes any pair of fp8 formats (QGMMA.E5M2.E5M2).
    out = DType.from_torch(out_dtype if out_dtype is not None else torch.bfloat16)
    if out not in SCALED_OUT:
        raise DTypeError("out_dtype", SCALED_OUT_NAMES, str(out_dtype), "pass one of those")
    return out


# scaled_mm's output types: 16-bit and fp32 as the accumulator is cast, fp8 scaled by scale_result and saturated.
SCALED_OUT = (DType.BF16, DType.FP16, DType.FP32, DType.E4M3, DType.E5M2)
# The output types as the refusals name them (matmul's: 16-bit and fp32).
MATMUL_OUT_NAMES = "torch.bfloat16, torch.float16 or torch.float32"
SCALED_OUT_NAMES = "torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn or torch.float8_e5m2"


def scale_result(t: Any, out: DType, a: Any) -> None:
    """torch._scaled_mm's scale_result: a float32 scalar tensor that multiplies an fp8 output before its saturating
    cast. torch ignores it for other outputs; warploom refuses it there, as a scale that does nothing is a mistake."""
    if t is None:
        return
    check_tensors({"scale_result": t})
    if not out.is_fp8:
        raise ScaleError("scale_result", "scale_result only with out_dtype torch.float8_e4m3fn or float8_e5m2 (it "
                         "scales the fp8 output; torch._scaled_mm ignores it for other outputs)",
                         f"scale_result with out_dtype {out.torch}",
                         "drop scale_result, or pass an fp8 out_dtype; for a 16-bit output multiply the result")
    if t.numel() != 1 or t.dtype != torch.float32:
        raise ScaleError("scale_result", "a float32 tensor of one element (torch._scaled_mm's 'float scalar')",
                         f"shape {tuple(t.shape)} dtype {t.dtype}", "pass torch.tensor(s, device=a.device)")
    if t.device != a.device:
        raise DeviceError("scale_result", f"a tensor on {a.device} like a", f"a tensor on {t.device}",
                          "move it with scale_result.to(a.device)")
    no_neg_bit({"scale_result": t})


def _bias_dtype(bias: Any, out: DType) -> DType:
    """The bias's dtype. fp8 outputs take torch._scaled_mm's bf16 or fp16 bias only (a float32 one is refused by
    torch on CUDA: 'Bias must be BFloat16 or Half'); 16-bit and fp32 outputs any of the three."""
    if out.is_fp8:
        return check_dtype("bias", bias, _16BIT, "convert bias to torch.bfloat16 (torch._scaled_mm refuses a "
                           f"{bias.dtype} bias with an fp8 output too)")
    return check_dtype("bias", bias, (DType.BF16, DType.FP16, DType.FP32), "convert bias to out_dtype")


def scale_parts(arg: str, scale: Any) -> tuple[Any, Any]:
    """(block scales, global scale or None) of a scale argument: a tensor, or NVFP4's pair [e4m3 block scales in
    torch's blocked layout, fp32 global scale], as torch.nn.functional.scaled_mm takes it (scale_recipe
    [BlockWise1x16, TensorWise], swizzle [SWIZZLE_32_4_4, NO_SWIZZLE])."""
    if not isinstance(scale, (list, tuple)):
        return scale, None
    if len(scale) != 2:
        raise ScaleError(arg, "a tensor, or NVFP4's [block scales, global scale] (two tensors)",
                         f"a {type(scale).__name__} of {len(scale)}", f"pass {arg}=[to_blocked(e4m3 scales), "
                         "fp32 global scale]")
    return scale[0], scale[1]


def _nvfp4_scales(a: Any, scale_a: Any, scale_b: Any, globals_: dict[str, Any], m: int, n: int,
                  k: int) -> ScaleLayout:
    """NVFP4 (sm_100a): e4m3 scales per 16 of K, both row-major (M, K/16) and (N, K/16) with any strides (seed 000's
    scale partition loads them) or both in torch's blocked layout (padded to 128x4 tiles, tcgen05.cp's), each with a
    tensorwise fp32 global scale. Returns their layout."""
    kb = k // NVFP4_BLOCK
    layouts = []
    for arg, t, rows in (("scale_a", scale_a, m), ("scale_b", scale_b, n)):
        if DType.from_torch(t.dtype) is not DType.E4M3:
            raise ScaleError(arg, f"torch.float8_e4m3fn block scales, one per {NVFP4_BLOCK} of K (NVFP4)",
                             f"dtype {t.dtype}", "pass both NVFP4 block scales as torch.float8_e4m3fn (MX fp4's "
                             "e8m0 scales per 32 take no global scale)")
        blocked = blocked_scales(rows, k, NVFP4_BLOCK)
        if tuple(t.shape) == (rows, kb):
            layouts.append(ScaleLayout.ROW_MAJOR)
            continue
        if tuple(t.shape) != (blocked,) or (blocked > 1 and t.stride() != (1,)):
            raise ScaleError(arg, f"NVFP4 scales per {NVFP4_BLOCK} of K: ({rows}, {kb}), one per row and "
                             f"{NVFP4_BLOCK} elements of K" + (" (a row of the (N, K) weight b.t())"
                                                               if arg == "scale_b" else "")
                             + f", any strides, or torch's blocked layout: to_blocked of them, a contiguous 1-D "
                             f"({blocked},)",
                             f"shape {tuple(t.shape)} strides {tuple(t.stride())}"
                             + (f" (the blocked size of scales per {MX_BLOCK})"
                                if tuple(t.shape) == (blocked_scales(rows, k),) else
                                f" (the shape of scales per {MX_BLOCK})"
                                if tuple(t.shape) == (rows, k // MX_BLOCK) else ""),
                             f"quantize with one e4m3 scale per {NVFP4_BLOCK} of K and pass the ({rows}, {kb}) "
                             "scales or to_blocked() of them")
        layouts.append(ScaleLayout.BLOCKED)
    if layouts[0] is not layouts[1]:
        raise ScaleError("scale_b", f"the layout of scale_a ({layouts[0].value})", layouts[1].value,
                         "pass both NVFP4 scales row-major or both in the blocked layout")
    for arg, g in globals_.items():
        if g is None:
            raise ScaleError(arg, "NVFP4's pair [block scales, global scale]: a tensorwise fp32 global scale beside "
                             "the e4m3 block scales", "the block scales alone",
                             f"pass {arg.removesuffix('[1]')}=[to_blocked(block scales), global scale] as "
                             "torch.nn.functional.scaled_mm takes it (scale_recipe [BlockWise1x16, TensorWise])")
        check_tensors({arg: g})
        if g.numel() != 1 or g.dtype != torch.float32:
            raise ScaleError(arg, "a global scale of one torch.float32 element", f"shape {tuple(g.shape)} dtype "
                             f"{g.dtype}", "pass torch.tensor([s], dtype=torch.float32, device=a.device)")
        same_device({"a": a, arg: g})
        no_neg_bit({arg: g})
    return layouts[0]


def scaled_mm_spec(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None, out_dtype: Any = None,
                   use_fast_accum: bool = False) -> GemmSpec:
    """Validate `warploom.scaled_mm`'s arguments (torch._scaled_mm semantics; NVFP4's scales as the pairs
    torch.nn.functional.scaled_mm takes, `scale_parts`) and return their spec."""
    fast_accum(use_fast_accum)
    (scale_a, global_a), (scale_b, global_b) = scale_parts("scale_a", scale_a), scale_parts("scale_b", scale_b)
    out = scaled_mm_dtypes(a, b, out_dtype)
    check_tensors({"scale_a": scale_a, "scale_b": scale_b, "bias": bias}, optional=("bias",))
    da, db = DType.from_torch(a.dtype), DType.from_torch(b.dtype)
    assert da is not None and db is not None
    m, k = a.shape
    n = b.shape[1]
    fp4 = DType.E2M1 in (da, db)
    if fp4:  # MX fp4: a (M, K/2) and b (K/2, N), two values of K a byte (MX fp8 x fp4: one of them)
        k *= 2 if da is DType.E2M1 else 1
        arg = "a" if da is DType.E2M1 else "b"
        if k % MX_BLOCK:
            raise ShapeError(arg, f"fp4 data with K a multiple of {MX_BLOCK} (two values a byte, rows of whole 16 "
                             f"bytes for TMA, MX's one e8m0 scale per {MX_BLOCK}): K/2 a multiple of "
                             f"{MX_BLOCK // 2}",
                             f"{arg}.shape[{1 if arg == 'a' else 0}] = {k // 2} (K = {k})",
                             f"pad K with zeros to a multiple of {MX_BLOCK} before packing", FP4_K)
    for arg, size in (("a", k), ("b", n)):
        if size % 16:
            dim = "K" if arg == "a" else "N"
            raise ShapeError(arg, "K and N multiples of 16 for fp8 (as torch._scaled_mm requires)",
                             f"{dim} = {size}", "pad with zeros to a multiple of 16",
                             SizeRule(dim, 16, "fp8's K and N, as torch._scaled_mm requires"))
    indexable(m, n, k)
    named = {"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias}
    same_device(named)
    no_neg_bit(named)
    # (NVFP4 by a global scale or e4m3 scales of a; a mismatched scale_b is named against scale_a's recipe)
    nvfp4 = da is DType.E2M1 and (DType.from_torch(scale_a.dtype) is DType.E4M3 or global_a is not None
                                  or global_b is not None)
    if nvfp4 and db is not DType.E2M1:
        raise DTypeError("b", "torch.float4_e2m1fn_x2 like a (NVFP4 x NVFP4)", str(b.dtype),
                         "quantize b to NVFP4 too, or pass MX e8m0 scales for MX fp4 x fp8")
    nvfp4_layout = None
    if nvfp4:  # NVFP4: e4m3 scales per 16 and a global scale each (torch's BlockWise1x16 with TensorWise)
        nvfp4_layout = _nvfp4_scales(a, scale_a, scale_b, {"scale_a[1]": global_a, "scale_b[1]": global_b}, m, n, k)
    else:
        for arg, g in (("scale_a", global_a), ("scale_b", global_b)):
            if g is not None:
                raise ScaleError(arg, "one scale tensor (a global scale goes with NVFP4's fp4 data only)",
                                 f"a pair with {a.dtype} data", f"pass {arg}[0] alone")
    if fp4 and not nvfp4:  # MX fp4 (and MX fp8 x fp4) takes e8m0 scales only
        for arg, t in (("scale_a", scale_a), ("scale_b", scale_b)):
            if DType.from_torch(t.dtype) is not DType.E8M0:
                also = (f" (MX fp4), or NVFP4's [float8_e4m3fn scales per {NVFP4_BLOCK}, fp32 global scale]"
                        if da is db else " (MX fp8 x fp4)")
                raise ScaleError(arg, f"torch.float8_e8m0fnu, one scale per {MX_BLOCK} of K{also}",
                                 f"dtype {t.dtype}", "pass MX e8m0 scales, row-major or to_blocked() of them"
                                 + (", or NVFP4's pairs" if da is db else ""))
    recipe = ScaleRecipe.NVFP4 if nvfp4 else _scale_recipe(scale_a, scale_b, m, n, k)
    if recipe.is_blockwise:
        check_block_scales(scale_a, scale_b)
    bias_dt = None
    if bias is not None:
        bias_dt = _bias_dtype(bias, out)
        if tuple(bias.shape) != (n,):
            raise ShapeError("bias", f"shape ({n},)", f"shape {tuple(bias.shape)}", "pass a 1-D bias of length N")
    tma_ok("a", a, 1, "row-major a (fp8 wgmma reads A K-major; 16-bit matmul also takes a column-major a)")
    _b_layout(b, fp8=True)
    tma_ok("b", b, 0, "column-major b")
    _out_aligned(n, out)
    # Blockwise scales change with each k-block, so every k-block's partial is promoted with them, whatever
    # use_fast_accum says (within one 128-deep k-block the tensor core accumulates as torch's kernels do).
    acc = Accumulation.NATIVE if use_fast_accum and not recipe.is_blockwise else Accumulation.PROMOTED
    layout = mx_scale_layout(scale_a, scale_b, m, n, k) if recipe is ScaleRecipe.MX else \
        nvfp4_layout or ScaleLayout.ROW_MAJOR
    return GemmSpec(m, n, k, da, db, out, BLayout.K_MAJOR, recipe, acc, bias_dt, scale_layout=layout,
                    a_row_align=row_align(a, 0), b_row_align=row_align(b, 1))


# ---------------------------------------------------------------------------------------------
# Eager calls repeat the same checks on tensors of the same shapes: remember each passing spec by everything the
# checks read. Checking costs ~30 us of Python a call; the key ~3 us (docs/benchmarks.md, host overhead).

_SPECS: dict[tuple[Any, ...], GemmSpec] = {}
_MAX_SPECS = 4096


def tensor_meta(t: Any, operand: bool = False) -> tuple[Any, ...] | None:
    """What the checks read of a real tensor: shape, strides, dtype, device, address alignment (TMA's 16 bytes; for
    an `operand`, a or b, on the GPU 128, where its rows start: `row_align`), neg bit."""
    if t is None:
        return None
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr() % address_grain(t, operand), t.is_neg())


def address_grain(t: Any, operand: bool) -> int:
    """To how many bytes a call's key holds `t`'s address: what the checks read of it (an operand on the GPU: where
    its rows start, `row_align`; any other tensor: TMA's 16-byte rule)."""
    return LINE_BYTES if operand and t.is_cuda else TMA_ALIGN


def is_real(t: Any) -> bool:
    """Whether `t` has storage (not a meta or fake tensor), so `tensor_meta` can read its address."""
    return t.device.type != "meta" and not is_fake(t)


def _remembered(key: tuple[Any, ...], make: Any) -> GemmSpec:
    spec = _SPECS.get(key)
    if spec is None:
        spec = make()  # raises on bad input: only passing checks are remembered
        if len(_SPECS) >= _MAX_SPECS:
            _SPECS.clear()
        _SPECS[key] = spec
    return spec


def matmul_spec_cached(a: Any, b: Any, out_dtype: Any = None) -> GemmSpec:
    """`matmul_spec`, remembered per tensor metadata (meta and fake tensors are checked every time)."""
    if not (is_real(a) and is_real(b)):
        return matmul_spec(a, b, out_dtype)
    return _remembered(("matmul", tensor_meta(a, True), tensor_meta(b, True), out_dtype),
                       lambda: matmul_spec(a, b, out_dtype))


def scaled_mm_spec_cached(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any = None, out_dtype: Any = None,
                          use_fast_accum: bool = False) -> GemmSpec:
    """`scaled_mm_spec`, remembered per tensor metadata (meta and fake tensors are checked every time)."""
    def make() -> GemmSpec:
        return scaled_mm_spec(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)

    ts = (a, b, scale_a, scale_b, bias)
    if isinstance(scale_a, (list, tuple)) or isinstance(scale_b, (list, tuple)) \
            or not all(is_real(t) for t in ts if t is not None):  # (NVFP4's scale pairs: checked every time)
        return make()
    metas = (tensor_meta(a, True), tensor_meta(b, True), *map(tensor_meta, ts[2:]))
    return _remembered(("scaled_mm", *metas, out_dtype, use_fast_accum), make)


def no_grad_through_epilogue(tensors: dict[str, Any], unfused: str) -> None:
    """A fused epilogue's kernel has no backward, and the fused calls bypass the custom ops' autograd: on the GPU the
    result would carry no gradient, silently (the CPU simulator's would, through its torch ops). So a call that asks
    for one is refused, before any cache whose key does not read requires_grad. `unfused` names the call without the
    epilogue, which has a backward, for the fix."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise InputError(name, "tensors that do not require grad with epilogue= (a fused epilogue's kernel has "
                             "no backward)", f"{name}.requires_grad=True", f"call under torch.no_grad() or pass "
                             f"{name}.detach(), or apply the epilogue in torch to the result of {unfused}")


def no_backward(op: str, names: tuple[str | None, ...], needs_input_grad: tuple[bool, ...], what: str,
                fix: str) -> UnsupportedError:
    """The error an fp8 op's backward raises (`scaled_mm`, `scaled_grouped_mm`): torch._scaled_mm and
    torch._scaled_grouped_mm have no derivative either, so the forward runs on tensors that require grad, as torch's
    does, and a backward through its result is refused by name, rather than with torch's bare "no autograd formula
    was registered" RuntimeError. `names` are the op's inputs in order (None for a non-tensor, a name twice where one
    argument reached the op as two tensors), `what` the GEMM without a backward, `fix` what to do."""
    asked = list(dict.fromkeys(n for n, need in zip(names, needs_input_grad, strict=False) if n and need))
    return UnsupportedError(f"backward of {op}: expected no gradient through {what} (its backward is not built), got "
                            f"one asked for {', '.join(asked)} ({asked[0] if asked else 'a'}.requires_grad=True). "
                            f"Fix: {fix}")
