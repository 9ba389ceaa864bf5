"""Calls with a fused epilogue: ``matmul(a, b, epilogue=fn, **operands)`` and the same for scaled_mm and plan.

The user's function is captured into an epilogue graph (warploom.epilogue), scaled_mm's scales and bias are put
in front of it (epilogue/compose.py), and the graph joins the spec, so the planner, the passes, the Gluon
backend and the simulator all see it. Checks here run before any kernel is planned or launched: operand
device, dense operands' TMA rules, and each output's row alignment.

These calls go straight to the kernel, not through the torch.library custom ops: a Python function cannot be an
argument of a registered op.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from warploom.checks import TMA_ALIGN, is_real, tensor_meta, tma_ok
from warploom.epilogue import memo, names
from warploom.epilogue.capture import capture
from warploom.epilogue.classify import classify, classify_all
from warploom.epilogue.compose import with_prologue
from warploom.epilogue.graph import OutputLayout
from warploom.epilogue.operands import OperandKind
from warploom.errors import AlignmentError, DeviceError, InputError, ShapeError
from warploom.planning.sm90.fused import two_passes
from warploom.spec import GemmSpec, Grouping

# scaled_mm's own operands, in front of the user's (epilogue/compose.py).
RESERVED = ("scale_a", "scale_b", "bias")


def fused_spec(spec: GemmSpec, a: torch.Tensor, epilogue: Callable[..., Any], operands: Mapping[str, Any], *,
               scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> tuple[GemmSpec, dict[str, Any]]:
    """`spec` with the captured epilogue, and every graph operand's tensor by name.

    Remembered (epilogue/memo.py) per function and everything the checks read of the operands, so an eager call
    that repeats one pays a dictionary lookup instead of classification, capture and composition."""
    extra = (spec, a.device, tuple((k, _meta(v)) for k, v in operands.items()),
             _meta(scale_a), _meta(scale_b), _meta(bias))
    key = memo.key(epilogue, extra) if all(m is not _UNCACHEABLE for m in _flat(extra)) else None
    hit = memo.get(key)
    if hit is not None:
        fused, names = hit
        # The user's operands last: matmul may name one `bias` (scaled_mm refuses those names for its own).
        tensors = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias, **operands}
        return fused, {n: tensors[n] for n in names}
    fused, picked = _fused_spec(spec, a, epilogue, operands, scale_a=scale_a, scale_b=scale_b, bias=bias)
    memo.put(key, (fused, tuple(picked)))
    return fused, picked


_UNCACHEABLE = object()


def _meta(t: Any) -> Any:
    """What classification and the checks read of an operand (`checks.tensor_meta`), or a stand-in for a Python
    value; _UNCACHEABLE for anything else."""
    if t is None or isinstance(t, (bool, int, float)):
        return memo.value_key(t)
    if isinstance(t, torch.Tensor):
        # (a meta or fake tensor has no address to check; a sparse one no storage: `classify` refuses it)
        return tensor_meta(t) if is_real(t) and t.layout is torch.strided else _UNCACHEABLE
    return _UNCACHEABLE


def _flat(extra: tuple[Any, ...]) -> list[Any]:
    _, _, ops, *scales = extra
    return [m for _, m in ops] + scales


def _fused_spec(spec: GemmSpec, a: torch.Tensor, epilogue: Callable[..., Any], operands: Mapping[str, Any], *,
                scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> tuple[GemmSpec, dict[str, Any]]:
    # (C's rows: a K-grouped call's G blocks of M, its operands flattened to them by grouped.masked_operands)
    out_shape = (spec.groups * spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m, spec.n)
    for name, t in operands.items():
        names.check(name)
        if name in RESERVED and scale_a is not None:
            raise InputError(name, "an epilogue operand name other than scaled_mm's own scale_a, scale_b, bias",
                             repr(name), f"rename the operand (fn's parameter and the keyword), e.g. {name}_")
        if isinstance(t, torch.Tensor) and t.device != a.device:
            raise DeviceError(name, f"an epilogue operand on {a.device}, where a is", f"a tensor on {t.device}",
                              f"move it with {name}.to(a.device)")
    if scale_a is not None:
        _no_reserved_parameter(epilogue)
    # (a grouped call's operands may hold one value set per group: classify.py's rule; a masked or K-grouped
    # call's come flattened to its (G * M, N) rows, grouped.masked_operands)
    groups = spec.groups if spec.grouped else 0
    user = classify_all(operands, out_shape, a.device, groups)
    g = capture(epilogue, user, out_shape=out_shape, device=a.device)
    tensors: dict[str, Any] = dict(operands)
    mainloop_scales: dict[str, Any] = {}
    if scale_a is not None:
        sa = sb = None
        if spec.scale.is_blockwise:
            # Blockwise scales are applied in the mainloop (each k-block's promotion): the user's function gets the
            # scaled accumulator, and only the bias is a graph operand. The scales travel beside the operands.
            mainloop_scales = {"scale_a": scale_a, "scale_b": scale_b}
        else:
            # (a grouped call's scale_b comes (G, 1, N): one row per expert, grouped.scaled_grouped_mm)
            sa, sb = (classify("scale_a", scale_a, out_shape, a.device),
                      classify("scale_b", scale_b, out_shape, a.device, groups))
            tensors.update(scale_a=scale_a, scale_b=scale_b)
        bs = classify("bias", bias, out_shape, a.device) if bias is not None else None
        g = with_prologue(g, sa, sb, bs)
        if bias is not None:
            tensors["bias"] = bias
    spec = dataclasses.replace(spec, epilogue=g)
    block = g.gate_up()
    if block is not None and spec.n % (2 * block):
        raise ShapeError("b", f"N a multiple of 2 * block = {2 * block} for silu_mul_interleaved(acc, block={block}) "
                         "(whole gate/up pairs: a tile 2 * block wide holds one gate block and its up block)",
                         f"N = {spec.n}", "interleave the weights with warploom.interleave_gate_up(w1, w3, "
                         f"block={block}), which zero-pads I to whole blocks, and pass the same block to the epilogue")
    picked = {**{s.name: tensors[s.name] for s in g.operands}, **mainloop_scales}
    if spec.flops == 0:  # no kernel runs (api.run_fused's empty result): TMA's rules do not apply
        return spec, picked
    for s in g.operands:
        if s.kind is OperandKind.DENSE:
            tma_ok(s.name, tensors[s.name], 1, "a dense epilogue operand read by TMA")
    # Rule 29's cast kernel stores q by plain stores (the first pass's workspace is padded to 16-byte rows).
    cast = two_passes(spec)
    for j, dt in enumerate(spec.output_dtypes()):
        if g.outputs[j].layout is OutputLayout.GROUPS or cast:
            continue  # (1x128 scales: masked register stores, not TMA)
        if spec.n % (TMA_ALIGN // dt.bytes):
            raise AlignmentError("b", f"N a multiple of {TMA_ALIGN // dt.bytes} for the epilogue's output {j} "
                                 f"({dt.value}, rows of {TMA_ALIGN}-byte multiples for the TMA store)",
                                 f"N = {spec.n}", "pad b's N dimension and slice the results")
    return spec, picked


def _no_reserved_parameter(epilogue: Callable[..., Any]) -> None:
    """scaled_mm's epilogue gets ``acc * scale_a * scale_b + bias`` already: a parameter named like one of those
    would be fed nothing (or the bias twice), so it is refused by name."""
    try:
        params = list(inspect.signature(epilogue).parameters)[1:]
    except (TypeError, ValueError):
        return  # no signature to read: capture says what is wrong
    for name in params:
        if name in RESERVED:
            raise InputError(name, f"epilogue parameters other than scaled_mm's own {', '.join(RESERVED)} (fn's "
                             "acc already holds acc * scale_a * scale_b + bias)", f"a parameter {name!r}",
                             f"drop the parameter (acc includes {name}), or rename it and pass the tensor "
                             f"under the new name, e.g. {name}_={name}")
