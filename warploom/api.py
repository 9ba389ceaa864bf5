"""Public entry points: `matmul`, `scaled_mm` (torch.library custom ops) and `plan`; importing it registers the
grouped custom ops too (warploom/grouped.py).

Validation (`warploom.checks`) runs first in every path, including the fake (meta) implementations,
so a bad argument fails while tracing too, and always before a kernel is planned or launched.

CUDA tensors run the planned kernel on the GPU. CPU tensors run the same planned kernel (planned for an
H100; fp4 data, MX or NVFP4, for a B200, whose block-scaled MMA is the only one that takes it) on the CPU
simulator, `warploom.sim`, up to `sim_max_flops()` (``WARPLOOM_SIM_MAX_FLOPS``): the result is what the schedule
computes, with the true dtypes' rounding, and a protocol finding raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from warploom import checks, eager
from warploom.device import DeviceInfo, check_device
from warploom.errors import DTypeError, InputError, UnsupportedError, WarploomError
from warploom.fused import fused_spec

# (the grouped entry points, here for `warploom.grouped_mm`: importing them registers their custom ops,
# torch.ops.warploom.grouped_mm and .scaled_grouped_mm, with this module's, whichever name a program uses first)
from warploom.grouped import grouped_mm, scaled_grouped_mm  # noqa: F401
from warploom.kernel import Kernel, build
from warploom.placement import check_sim_size, device_for, require_cuda, sim_device, skip_dispatcher
from warploom.spec import GemmSpec, ScaleRecipe


def _fused(spec: GemmSpec, a: torch.Tensor, epilogue: Callable[..., Any] | None, operands: dict[str, Any],
           **scaled: Any) -> tuple[GemmSpec, dict[str, Any]]:
    if epilogue is None:
        if "out" in operands:  # (torch's out= habit: warploom's calls return a new tensor)
            raise InputError("out", "no out= (warploom's calls return their result in a new tensor; keyword "
                             "arguments beside epilogue=fn are its operands)", "out=",
                             "drop out= and use the result: y = warploom.matmul(a, b)")
        import inspect

        from warploom.planner import plan_schedule

        name = next(iter(operands))
        if name in inspect.signature(plan_schedule).parameters:  # (a schedule option, not an operand)
            raise InputError(name, "epilogue operands only: keyword arguments here are an epilogue's tensors",
                             f"{name}={operands[name]!r}, a plan_schedule option", "plan with the option: "
                             f"kernel = warploom.kernel.build(spec, device, warploom.planner.plan_schedule(spec, "
                             f"device, {name}=...)), spec from warploom.checks.matmul_spec(a, b)")
        raise InputError(name, "epilogue operands together with epilogue=fn",
                         "operands but no epilogue", "pass epilogue=lambda acc, ...: ..., or drop the operands")
    return fused_spec(spec, a, epilogue, operands, **scaled)


def _empty_result(spec: GemmSpec, a: torch.Tensor, bias: Any = None) -> torch.Tensor | None:
    """Results that need no kernel: an empty output, or K = 0 (a sum over nothing is zero), as torch does."""
    out_dtype = spec.out_dtype.torch
    if spec.m == 0 or spec.n == 0:
        return torch.empty((spec.m, spec.n), dtype=out_dtype, device=a.device)
    if spec.k == 0:
        out = torch.zeros((spec.m, spec.n), dtype=torch.float32, device=a.device)
        if bias is not None:
            out = out + bias.float()
        return out.to(out_dtype)
    return None


def _simulate(spec: GemmSpec, a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any,
              bias: Any) -> torch.Tensor:
    """Run the planned kernel on the CPU simulator: every CTA, one seeded schedule, no timeline."""
    check_sim_size(spec)
    kernel = _kernel(spec, sim_device(spec), a, b)
    return kernel.simulate(a, b, scale_a, scale_b, bias, record=False).raise_for_findings().output


def _simulate_fused(spec: GemmSpec, a: torch.Tensor, b: torch.Tensor, operands: dict[str, Any],
                    scale_a: Any = None, scale_b: Any = None) -> tuple[torch.Tensor, ...]:
    """`_simulate` for a spec with a fused epilogue: every output (blockwise scales, if any, positional)."""
    check_sim_size(spec)
    kernel = build(spec, sim_device(spec))
    return kernel.simulate(a, b, scale_a, scale_b, operands=operands, record=False).raise_for_findings().outputs


def run_fused(spec: GemmSpec, a: torch.Tensor, b: torch.Tensor, operands: dict[str, Any],
              key: tuple[Any, ...] | None = None) -> Any:
    """Run (GPU) or simulate (CPU) a spec with a fused epilogue; one tensor per output (a tuple if several). A GPU
    call is remembered under `key` (warploom/eager.py), so the next call with the same key launches at once."""
    dtypes = spec.output_dtypes()
    # Blockwise scales ride beside the graph's operands (fused_spec) but are the mainloop's arguments.
    operands = dict(operands)
    sa, sb = (operands.pop("scale_a"), operands.pop("scale_b")) if spec.scale.is_blockwise else (None, None)
    if spec.m == 0 or spec.n == 0 or spec.k == 0:
        outs = _empty_fused(spec, a, operands)
    elif a.device.type == "cpu":
        outs = _simulate_fused(spec, a, b, operands, sa, sb)
    else:
        require_cuda(a)
        kernel = build(spec, device_for(a))
        # Launched as a remembered call's later ones are, so the next call finds its launch bound to the key.
        prepared = eager.PreparedFused(kernel, spec.m, spec.n, tuple(d.torch for d in dtypes), tuple(operands),
                                       spec.scale.is_blockwise)
        eager.remember(key, prepared)
        return prepared(a, b, sa, sb, None, operands)
    return outs[0] if len(outs) == 1 else outs


def _empty_fused(spec: GemmSpec, a: torch.Tensor, operands: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """No kernel: an empty output, or K = 0 (the accumulator is zero) evaluated by the reference."""
    if spec.m == 0 or spec.n == 0:
        # (a rowwise quantization's scales keep one column at N = 0: 1 a row, the zero-group scale, as quantize's)
        return tuple(torch.ones(shape, dtype=d.torch, device=a.device)
                     for shape, d in zip(spec.output_shapes(), spec.output_dtypes(), strict=True))
    from warploom.epilogue.reference import evaluate

    assert spec.epilogue is not None
    acc = torch.zeros((spec.m, spec.n), dtype=torch.float32, device=a.device)
    return tuple(evaluate(spec.epilogue, acc, operands, out_dtype=spec.out_dtype))


def _run(key: tuple[Any, ...] | None, make_spec: Callable[[], GemmSpec], a: torch.Tensor, b: torch.Tensor,
         scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> torch.Tensor:
    """Check, plan and launch, or launch what an earlier call with the same `key` prepared (warploom/eager.py)."""
    prepared = eager.get(key)
    if prepared is None:
        spec = make_spec()
        done = _empty_result(spec, a, bias)
        if done is not None:
            return done
        if a.device.type == "cpu":
            return _simulate(spec, a, b, scale_a, scale_b, bias)
        require_cuda(a)
        prepared = eager.Prepared(_kernel(spec, device_for(a), a, b), spec.m, spec.n, spec.out_dtype.torch)
        eager.remember(key, prepared)
    return prepared(a, b, scale_a, scale_b, bias)


def _kernel(spec: GemmSpec, device: DeviceInfo, a: torch.Tensor, b: torch.Tensor) -> Kernel:
    """The kernel a call runs: the plan `warploom.tune` cached for this problem if there is one (tune/lookup.py),
    else the planner's."""
    from warploom.tune.lookup import tuned_plan

    return build(spec, device, tuned_plan(spec, device, (tuple(a.stride()), tuple(b.stride()))))


def _matmul_impl(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    return _run(eager.key("matmul", (a, b), out_dtype), lambda: checks.matmul_spec_cached(a, b, out_dtype), a, b)


_matmul_op = torch.library.custom_op("warploom::matmul", mutates_args=())(_matmul_impl)


# With symbolic sizes the fake implementations check dtypes and shapes only: under tracing, sizes may be symbolic and
# tensors have no storage, so stride and address checks wait for the real call.
@_matmul_op.register_fake
def _matmul_fake(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    if checks.static_sizes(a, b):
        out = checks.matmul_spec(a, b, out_dtype).out_dtype
    else:
        out = checks.matmul_dtypes(a, b, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out.torch)


def _matmul_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, b, _ = inputs
    ctx.save_for_backward(a, b)


def _matmul_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
    """The gradients of ``a @ b`` through warploom kernels: grad_a = grad @ b^T and grad_b = a^T @ grad, in a's dtype
    (the incoming gradient cast to it, as a 16-bit backward does). Both run without copies of a and b: b^T and a^T
    are views 16-bit kernels read as they lie (b^T an N- or K-major B, a^T an M-major A), and their strides are a's
    and b's own, which the forward call already found TMA-aligned."""
    a, b = ctx.saved_tensors
    g = grad.to(a.dtype).contiguous()  # (autograd may hand in an expanded gradient, e.g. a sum's: strides (0, 0))
    ga = torch.ops.warploom.matmul(g, b.t(), a.dtype) if ctx.needs_input_grad[0] else None
    gb = torch.ops.warploom.matmul(a.t(), g, b.dtype) if ctx.needs_input_grad[1] else None
    return ga, gb, None


_matmul_op.register_autograd(_matmul_backward, setup_context=_matmul_setup)


def _as_is(acc: torch.Tensor) -> torch.Tensor:
    """An fp8 output without scale_result: the accumulator, saturated to the fp8 type as the store casts it."""
    return acc


def _times_scale_result(acc: torch.Tensor, scale_result: torch.Tensor) -> torch.Tensor:
    """An fp8 output with scale_result: cuBLAS's D = scale_D * (alpha * A @ B + bias), saturated as it is stored."""
    return acc * scale_result


_FP8_OUT = (torch.float8_e4m3fn, torch.float8_e5m2)


def _result_epilogue(epilogue: Callable[..., Any] | None, operands: dict[str, Any], out_dtype: Any,
                     scale_result: Any) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    """The epilogue an fp8-output scaled_mm runs: an fp8 output is a fused epilogue's output (epilogue/gluon.py
    casts to fp8 with saturation, NaN kept, as cuBLAS's satfinite conversion does), scale_result its scalar operand.
    A user's epilogue is kept as it is; scale_result beside it is refused (which output would it scale?)."""
    if epilogue is not None or operands:
        if scale_result is not None:
            raise InputError("scale_result", "scale_result without epilogue= (with a fused epilogue its outputs are "
                             "what fn returns)", "scale_result and an epilogue", "multiply by scale_result inside fn "
                             "(pass it as an operand under another name, e.g. out_scale=scale_result)")
        return epilogue, operands
    if scale_result is None and out_dtype not in _FP8_OUT:
        return None, operands
    if scale_result is None:
        return _as_is, {}
    return _times_scale_result, {"scale_result": scale_result}


def _check_fp8_result(spec: GemmSpec, epilogue: Callable[..., Any] | None, out_dtype: Any) -> None:
    """Refuse an fp8 output (`_result_epilogue`'s fused epilogue) where the planner refuses fused epilogues, by
    out_dtype: its refusal would name an epilogue the caller never passed."""
    if spec.scale is ScaleRecipe.NVFP4 and epilogue in (_as_is, _times_scale_result):
        raise UnsupportedError(f"out_dtype={out_dtype} with NVFP4 scales: an fp8 result is stored by a fused epilogue, "
                               "and sm_100a's NVFP4 kernel applies its global scales in the plain epilogue only. Fix: "
                               "pass out_dtype=torch.bfloat16 and quantize the result (warploom.quantize)")


def _scaled_fused(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, bias: Any,
                  out_dtype: Any, use_fast_accum: bool, epilogue: Callable[..., Any], operands: dict[str, Any],
                  scale_result: Any = None) -> Any:
    """scaled_mm through a fused epilogue: the user's, or the fp8 output's (`_result_epilogue`)."""
    checks.no_grad_through_epilogue({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias,
                                     **operands}, "the call without it")
    key = eager.fused_key("scaled_mm+", epilogue, (a, b, scale_a, scale_b, bias), operands, out_dtype, use_fast_accum)
    hit = eager.get(key)
    if hit is not None:
        return hit(a, b, scale_a, scale_b, bias, operands)
    spec = checks.scaled_mm_spec_cached(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)
    checks.scale_result(scale_result, spec.out_dtype, a)
    _check_fp8_result(spec, epilogue, out_dtype)
    spec, tensors = _fused(spec, a, epilogue, operands, scale_a=scale_a, scale_b=scale_b, bias=bias)
    return run_fused(spec, a, b, tensors, key)


def _pair(scale: Any, global_scale: Any) -> Any:
    """A scale argument as the checks and kernels take it: NVFP4's [block scales, global scale] pair where the custom
    op got its global scale apart (its schema takes tensors, not lists), else the tensor alone."""
    return scale if global_scale is None else [scale, global_scale]


def _scaled_mm_impl(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                    bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                    use_fast_accum: bool = False, scale_a_global: torch.Tensor | None = None,
                    scale_b_global: torch.Tensor | None = None) -> torch.Tensor:
    """The op's real implementation. NVFP4's global scales come as `scale_a_global` and `scale_b_global` (the public
    API's pairs split by `scaled_mm`) and are paired again here, so the checks and kernels see what the user passed."""
    sa, sb = _pair(scale_a, scale_a_global), _pair(scale_b, scale_b_global)
    if out_dtype in _FP8_OUT:  # (an fp8 output is a fused epilogue's: `_result_epilogue`)
        fn, ops = _result_epilogue(None, {}, out_dtype, None)
        assert fn is not None
        return _scaled_fused(a, b, sa, sb, bias, out_dtype, use_fast_accum, fn, ops)
    key = eager.key("scaled_mm", (a, b, scale_a, scale_b, bias, scale_a_global, scale_b_global), out_dtype,
                    use_fast_accum)
    return _run(key, lambda: checks.scaled_mm_spec_cached(a, b, sa, sb, bias, out_dtype, use_fast_accum),
                a, b, sa, sb, bias)


_scaled_mm_op = torch.library.custom_op("warploom::scaled_mm", mutates_args=())(_scaled_mm_impl)


def _scaled_mm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    pass  # (the backward refuses: it needs nothing saved)


def _scaled_mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """fp8 GEMMs have no backward (`checks.no_backward`): the forward runs on tensors that require grad (scales held
    as parameters, an fp8 a cast from an activation), as torch._scaled_mm's does; a backward through it is refused."""
    raise checks.no_backward("scaled_mm", ("a", "b", "scale_a", "scale_b", "bias", None, None, "scale_a", "scale_b"),
                             ctx.needs_input_grad, "the fp8 GEMM", "pass the fp8 tensors, scales and bias "
                             ".detach()ed, or call under torch.no_grad() (torch._scaled_mm has no backward either); "
                             "to train through the GEMM, call warploom.matmul on the dequantized bf16 tensors, which "
                             "has a backward")


_scaled_mm_op.register_autograd(_scaled_mm_backward, setup_context=_scaled_mm_setup)


@_scaled_mm_op.register_fake
def _scaled_mm_fake(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                    bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
                    use_fast_accum: bool = False, scale_a_global: torch.Tensor | None = None,
                    scale_b_global: torch.Tensor | None = None) -> torch.Tensor:
    if checks.static_sizes(a, b, scale_a, scale_b, bias, scale_a_global, scale_b_global):
        out = checks.scaled_mm_spec(a, b, _pair(scale_a, scale_a_global), _pair(scale_b, scale_b_global), bias,
                                    out_dtype, use_fast_accum).out_dtype
    else:
        out = checks.scaled_mm_dtypes(a, b, out_dtype)
    # (M, N) for every recipe: fp4's a is (M, K/2) and b (K/2, N), two values of K a byte
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out.torch)


def _not_a_tensor(e: Exception, named: dict[str, Any], out_dtype: Any = None,
                  out_dtypes: str = checks.MATMUL_OUT_NAMES) -> None:
    """After a call failed with a Python or torch error, raise the warploom error for an argument that is not a dense
    tensor (None, a list, a NumPy array, a number, a sparse tensor) or is a negated view if there is one, or for an
    out_dtype the custom op's dispatcher could not cast (a string). Checked only once a call has failed: the
    eager path reads tensor attributes before any check, and a check there would cost every call."""
    if isinstance(e, WarploomError):
        return
    bad = checks.not_a_tensor(named, optional=("bias",))
    if bad is not None:
        raise bad from None
    # (the dispatcher resolves a negated view before the op runs, and has no negation for fp8: its error is the
    # negated view's)
    checks.no_neg_bit({arg: t for arg, t in named.items() if isinstance(t, torch.Tensor)})
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise DTypeError("out_dtype", out_dtypes, repr(out_dtype),
                         "pass one of those torch dtypes") from None


def _named_scales(scale_a: Any, scale_b: Any) -> dict[str, Any]:
    """The scale arguments by name for `_not_a_tensor`: NVFP4's pairs as their two parts, ``scale_a[0]`` and
    ``scale_a[1]``, as the checks name them."""
    named: dict[str, Any] = {}
    for arg, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if isinstance(scale, (list, tuple)) and len(scale) == 2:
            named |= {f"{arg}[0]": scale[0], f"{arg}[1]": scale[1]}
        else:
            named[arg] = scale
    return named


def matmul(a: torch.Tensor, b: torch.Tensor, *, out_dtype: torch.dtype | None = None,
           epilogue: Callable[..., Any] | None = None, **operands: Any) -> Any:
    """``a @ b`` for bf16/fp16 (fp32 accumulation). `out_dtype` defaults to a's dtype.

    With ``epilogue=fn``, the result is ``fn(acc, **operands)`` computed inside the kernel on the fp32
    accumulator (a tuple if fn returns several tensors); `out_dtype` is the type of outputs fn does not cast.
    A fused call has no backward: with grad enabled, an input that requires grad is refused.
    On CUDA tensors the kernel runs on the GPU; small CPU problems run on the simulator (module docstring).
    """
    try:
        if epilogue is not None or operands:
            checks.no_grad_through_epilogue({"a": a, "b": b, **operands},
                                            "warploom.matmul(a, b) (which has a backward)")
            key = eager.fused_key("matmul+", epilogue, (a, b), operands, out_dtype)
            hit = eager.get(key)
            if hit is not None:
                return hit(a, b, None, None, None, operands)
            spec, tensors = _fused(checks.matmul_spec_cached(a, b, out_dtype), a, epilogue, operands)
            return run_fused(spec, a, b, tensors, key)
        if skip_dispatcher(a, b):
            return _matmul_impl(a, b, out_dtype)
        return torch.ops.warploom.matmul(a, b, out_dtype)
    except (AttributeError, TypeError, RuntimeError) as e:
        _not_a_tensor(e, {"a": a, "b": b}, out_dtype)
        raise


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
              use_fast_accum: bool = False, scale_result: torch.Tensor | None = None,
              epilogue: Callable[..., Any] | None = None, **operands: Any) -> Any:
    """`torch._scaled_mm` semantics for fp8: ``(a @ b) * scale_a * scale_b + bias``, tensorwise or rowwise; or
    blockwise (``ScalingType.BlockWise1x128`` scale_a (M, ceil(K/128)) with scale_b (ceil(K/128), ceil(N/128)),
    ``BlockWise128x128``, or (ceil(K/128), N), ``BlockWise1x128``); or MX (torch.float8_e8m0fnu scale_a (M, K/32)
    and scale_b (N, K/32), ``BlockWise1x32``, unswizzled): the dequantized product, any scale strides. (torch's
    cuBLAS kernel reads a BlockWise128x128 scale_a's rows ceil(K/128) rounded up to 4 apart, whatever its strides:
    where that differs from its row stride, torch gets `warploom.reference.cublas_a_blocks(scale_a)` for the same
    product. Under torch 2.11 the same holds for a BlockWise128x128 scale_b's columns: with N > 128 and ceil(K/128)
    not a multiple of 4, torch computed another product at 76 of 112 zoo shapes, docs/benchmarks.md session 45;
    warploom reads every scale through its strides.)

    With ``use_fast_accum=False`` each k-block's fp8 product is promoted into a full fp32 accumulator; blockwise
    recipes always promote, each k-block with its scales.
    ``out_dtype=torch.float8_e4m3fn`` or ``float8_e5m2`` stores ``(acc * scale_a * scale_b + bias) * scale_result``
    (scale_result a float32 scalar tensor, or 1) cast to fp8 with saturation to the type's largest finite value,
    NaN kept, as torch._scaled_mm's cuBLAS kernel does; its bias is bf16 or fp16, as torch requires. It runs as a
    fused epilogue (one kernel). scale_result with another out_dtype is refused (torch ignores it).
    With ``epilogue=fn``, fn(acc, **operands) gets that fp32 ``acc * scale_a * scale_b + bias`` and its
    results are stored (see `matmul`).
    Small CPU problems run on the simulator (module docstring), which accumulates fp8 in fp32 either way.
    """
    checks.fast_accum(use_fast_accum)  # (before the dispatcher, which casts None to False and fails on a string)
    if out_dtype is None:  # (the default, as warploom.plan and scaled_grouped_mm take None; the op's schema has none)
        out_dtype = torch.bfloat16
    try:
        # (a plain fp8 output goes through the custom op, whose implementation adds its fused cast: torch.compile
        # and fake tensors then see the op and its fake, not the simulator's data-dependent checks)
        if epilogue is not None or operands or scale_result is not None:
            fn, ops = _result_epilogue(epilogue, operands, out_dtype, scale_result)
            if fn is not None:
                return _scaled_fused(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, fn, ops, scale_result)
        # NVFP4's pairs [block scales, global scale] reach the op as two more tensors (its schema takes no lists)
        (sa, ga), (sb, gb) = checks.scale_parts("scale_a", scale_a), checks.scale_parts("scale_b", scale_b)
        if skip_dispatcher(a, b, sa, sb, bias, ga, gb):
            return _scaled_mm_impl(a, b, sa, sb, bias, out_dtype, use_fast_accum, ga, gb)
        return torch.ops.warploom.scaled_mm(a, b, sa, sb, bias, out_dtype, use_fast_accum, ga, gb)
    except (AttributeError, TypeError, RuntimeError) as e:
        _not_a_tensor(e, {"a": a, "b": b, **_named_scales(scale_a, scale_b), "bias": bias}, out_dtype,
                      checks.SCALED_OUT_NAMES)
        raise


def plan(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
         *, bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None, use_fast_accum: bool = False,
         device: DeviceInfo | None = None, scale_result: torch.Tensor | None = None,
         epilogue: Callable[..., Any] | None = None, **operands: Any) -> Kernel:
    """Plan the kernel `matmul` (no scales) or `scaled_mm` would run, without running it: the plan
    `warploom.tune` cached for this problem if it was tuned on this machine, else the planner's.

    Tensors may be on the ``meta`` device. `device` defaults to the tensors' GPU, or an H100 SXM. A fused
    epilogue is given as to `matmul`; `Kernel.run` then takes its operands by name (``operands=``; for
    scaled_mm scale_a, scale_b and bias among them).
    """
    if device is not None:
        check_device(device)
    checks.fast_accum(use_fast_accum)  # (a string would be true: refused even where no scales read it)
    if scale_a is None and scale_b is None:
        spec = checks.matmul_spec(a, b, out_dtype)
        if bias is not None and epilogue is None:  # the kernel would not read it: refuse, never drop it
            raise InputError("bias", "a bias with scale_a and scale_b (scaled_mm's), or with an epilogue that reads "
                             "it", "bias= alone (matmul has no bias of its own)",
                             "pass epilogue=lambda acc, bias: acc + bias, or plan scaled_mm with its scales")
        if bias is not None:  # matmul has no bias of its own: an epilogue operand
            operands = {"bias": bias, **operands}
    else:
        if scale_a is None or scale_b is None:
            from warploom.errors import ScaleError

            missing = "scale_a" if scale_a is None else "scale_b"
            raise ScaleError(missing, "both scale_a and scale_b, or neither", f"{missing}=None",
                             f"pass {missing} (torch.ones(1) for no scaling)")
        spec = checks.scaled_mm_spec(a, b, scale_a, scale_b, bias, out_dtype or torch.bfloat16, use_fast_accum)
        checks.scale_result(scale_result, spec.out_dtype, a)
        fn, operands = _result_epilogue(epilogue, operands, out_dtype, scale_result)
        _check_fp8_result(spec, fn, out_dtype)
        epilogue = fn
    if scale_result is not None and scale_a is None:
        checks.scale_result(scale_result, spec.out_dtype, a)  # (refused: matmul's outputs are 16-bit or fp32)
    if epilogue is not None or operands:
        scaled = {} if scale_a is None else {"scale_a": scale_a, "scale_b": scale_b, "bias": bias}
        spec, _ = _fused(spec, a, epilogue, operands, **scaled)
    return _kernel(spec, device or device_for(a), a, b)
