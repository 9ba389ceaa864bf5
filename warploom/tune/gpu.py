"""Tuning on a CUDA GPU: `tune_matmul` and `tune_scaled_mm` build the spec as warploom.matmul / scaled_mm do,
tune it on fresh random tensors of the caller's shapes, dtypes and strides, and return the winning `Kernel`.

Random inputs, not the caller's: the check must be able to fail (an all-zero input passes any schedule that
writes zeros), and tuning must not depend on what the first batch happened to hold. The reference is
computed in float64. A cache hit runs the cached plan once to check it, and times nothing.

Importing this module touches no GPU; torch is imported (warploom imports it anyway), triton when timing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from warploom import checks
from warploom.device import DeviceInfo
from warploom.errors import DeviceError
from warploom.kernel import Kernel, build
from warploom.planner import Plan
from warploom.runtime import timing
from warploom.spec import GemmSpec
from warploom.tune import settings
from warploom.tune.autotune import Harness, autotune
from warploom.tune.cache import Cache

Timer = Callable[[Callable[[], object]], float]

# The tuner's setting of the one CUDA-graph timer: shorter warm-up and repeats than the benchmarks' (it times
# many candidates), and a candidate that cannot be captured is timed eagerly rather than dropped.
time_graph: Timer = functools.partial(timing.time_graph, warmup_ms=25, rep_ms=100, eager_fallback=True)


def _device(t: torch.Tensor) -> DeviceInfo:
    if t.device.type != "cuda":
        raise DeviceError("a", "CUDA tensors (tuning runs and times kernels on an sm_90a GPU)",
                          f"a tensor on {t.device}", "move the tensors with .cuda(), or use warploom.plan(...) "
                          "for the planner's untuned choice without a GPU")
    with torch.cuda.device(t.device):
        device = DeviceInfo.current()
    if device.blackwell or device.gfx1250:  # before any inputs are made: only sm_90a kernels run (runtime/launch)
        from warploom.errors import TargetError

        target = "gfx1250" if device.gfx1250 else "sm_100a"
        raise TargetError(f"tuning times kernels on the GPU, and {device.name} ({device.arch}) would run {target} "
                          f"kernels, which warploom has not run yet. Fix: warploom.plan(..., device=...) for the "
                          f"planner's {target} choice, cross-compiled with Kernel.compile()")
    return device


def _strided_like(t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` (t's shape and dtype) in a new tensor with t's strides, at t's address modulo 128 (where its rows
    start, which its spec holds: `checks.row_align`; the candidates are timed on rows like the caller's); e8m0 is
    copied as its bytes."""
    from warploom.epilogue.operands import element_span
    from warploom.spec import LINE_BYTES

    shift = t.data_ptr() % LINE_BYTES // t.element_size() if t.is_cuda else 0  # (a fresh allocation starts on one)
    size = element_span(tuple(t.shape), tuple(t.stride())) + (t.numel() > 0)  # (the last element's offset, + 1)
    store = torch.empty(size + shift, dtype=t.dtype, device=t.device)
    x = torch.as_strided(store, tuple(t.shape), tuple(t.stride()), shift)
    if t.dtype == torch.float8_e8m0fnu:
        x.view(torch.uint8).copy_(values.view(torch.uint8))
    else:
        x.copy_(values)
    return x


def _random_like(t: torch.Tensor) -> torch.Tensor:
    """Standard-normal values (converted to t's dtype) in a new tensor with t's shape and strides."""
    return _strided_like(t, torch.randn(tuple(t.shape), device=t.device).to(t.dtype))


def tune_matmul(a: torch.Tensor, b: torch.Tensor, *, out_dtype: torch.dtype | None = None, limit: int = 8,
                timer: Timer = time_graph, cache: Cache | None = None, progress: bool = True,
                verbose: bool | None = None) -> Kernel:
    """The fastest correct kernel for ``warploom.matmul(a, b, out_dtype=out_dtype)`` on a's GPU.

    Run it with ``kernel.run(a, b, out)``, `out` an empty (M, N) tensor of the output dtype.
    """
    spec = checks.matmul_spec(a, b, out_dtype)
    device = _device(a)
    if spec.flops == 0 or not settings.enabled():
        return build(spec, device)  # untuned: no inputs to make (an empty problem needs no kernel at all)
    ra, rb = _random_like(a), _random_like(b)
    ref = ra.double() @ rb.double()
    harness = _harness_ab(spec, device, ra, rb, (), ref, timer)
    result = autotune(spec, device, harness, strides=(tuple(a.stride()), tuple(b.stride())), limit=limit,
                      cache=cache, progress=progress, verbose=verbose)
    return build(spec, device, result.plan)


def tune_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
                   bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                   use_fast_accum: bool = False, limit: int = 8, timer: Timer = time_graph,
                   cache: Cache | None = None, progress: bool = True, verbose: bool | None = None) -> Kernel:
    """The fastest correct kernel for ``warploom.scaled_mm(a, b, scale_a, scale_b, ...)`` on a's GPU.

    Run it with ``kernel.run(a, b, out, scale_a, scale_b, bias)``.
    """
    spec = checks.scaled_mm_spec(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)
    device = _device(a)
    if spec.flops == 0 or not settings.enabled():
        return build(spec, device)
    ra, rb = _random_like(a), _random_like(b)
    sa, sb = _random_scale(scale_a), _random_scale(scale_b)
    rbias = torch.randn_like(bias) if bias is not None else None
    if spec.scale.is_blockwise:  # scales per k-block (or MX slice): the dequantized product
        from warploom.reference import dequantized

        da, db = dequantized(ra, rb, sa, sb)
        ref = da.double() @ db.double()
    else:
        ref = (ra.float().double() @ rb.float().double()) * sa.double() * sb.double()
    if rbias is not None:
        ref = ref + rbias.double()
    harness = _harness_ab(spec, device, ra, rb, (sa, sb, rbias), ref, timer)
    result = autotune(spec, device, harness, strides=(tuple(a.stride()), tuple(b.stride())), limit=limit,
                      cache=cache, progress=progress, verbose=verbose)
    return build(spec, device, result.plan)


def _random_scale(t: torch.Tensor) -> torch.Tensor:
    """Random scales with t's shape, strides and dtype: fp32 in [0.5, 1.5); MX e8m0 bits for 2**-7..2**7. An
    expanded (stride-0) layout cannot be written element by element: its random base is expanded the same way."""
    shape = tuple(t.shape)
    overlap = any(st == 0 and sz > 1 for sz, st in zip(shape, t.stride(), strict=True))
    base = tuple(1 if st == 0 else sz for sz, st in zip(shape, t.stride(), strict=True)) if overlap else shape
    if t.dtype == torch.float8_e8m0fnu:
        vals = torch.randint(120, 135, base, device=t.device, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    else:
        vals = torch.rand(base, device=t.device) + 0.5
    return vals.expand(shape) if overlap else _strided_like(t, vals)


def _harness_ab(spec: GemmSpec, device: DeviceInfo, a: torch.Tensor, b: torch.Tensor, rest: tuple[Any, ...],
                ref: torch.Tensor, timer: Timer) -> Harness:
    """Kernel.run takes (a, b, out, scale_a, scale_b, bias): the output goes between b and the scales."""
    out = torch.empty((spec.m, spec.n), dtype=spec.out_dtype.torch, device=a.device)

    def launch(plan: Plan) -> Callable[[], object]:
        return functools.partial(build(spec, device, plan).run, a, b, out, *rest)

    return Harness(launch, (out,), (ref,), timer, torch.cuda.synchronize)
