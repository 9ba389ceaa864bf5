"""Grouped GEMMs (issue 27 items 1-2): `grouped_mm` and `scaled_grouped_mm`, with the semantics of torch._grouped_mm
and torch._scaled_grouped_mm, plus DeepGEMM's masked layout.

Layouts (``b`` is (G, K, N) but in the K-grouped one: G experts' weights, a (G, N, K) tensor seen as
``.transpose(-2, -1)`` or a contiguous (G, K, N)):

- M-grouped ("contiguous"): ``a`` (total_M, K) and int32 cumulative row ends ``offs`` (G,): rows offs[g-1] ..
  offs[g] of the result are ``a[those rows] @ b[g]``; rows past offs[-1] are not written (their values are
  unspecified, as torch's).
- masked: ``a`` (G, M_max, K) and int32 counts ``masked_m`` (G,): result (G, M_max, N), rows at or past a count
  unspecified; nothing outside the result is ever written.
- batched: ``a`` (G, M, K) without counts: every row.
- K-grouped (the weight gradient): ``a`` (M, total_K), ``b`` 2-D (total_K, N) (torch's column-major one, or a
  contiguous one) and int32 cumulative K ends ``offs`` (G,): result (G, M, N), its block g
  ``a[:, offs[g-1]:offs[g]] @ b[offs[g-1]:offs[g]]``, zeros for an empty K range (torch's). bf16/fp16, and fp8
  blockwise (`scaled_grouped_mm` with 2-D scales over total_K, every group's K range on the 128 grid) and rowwise
  (torch's 1-D (G * M,) and (G * N,) scales).

CUDA tensors launch the grouped kernel (ir.Tiling.grouping) with no host sync, so it can be captured in a CUDA
graph; CPU tensors run the same planned kernel on the simulator (small problems, `sim_max_flops`). Arguments are
checked first (`checks_grouped`); the bounds' values only on CPU tensors (its docstring says why).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable
from typing import Any

import torch

from warploom.checks import fast_accum, no_backward, no_grad_through_epilogue, no_neg_bit
from warploom.checks_grouped import GroupedCall, grouped_call, grouped_result
from warploom.epilogue.graph import OutputLayout
from warploom.errors import InputError, ShapeError, UnsupportedError, WarploomError
from warploom.fused import fused_spec
from warploom.kernel import Kernel, build
from warploom.placement import check_sim_size, device_for, require_cuda, sim_device, skip_dispatcher
from warploom.planning.amax_pass import amax_pass_problem
from warploom.planning.sm90.fused import grouped_quantize_problems, two_passes
from warploom.spec import GemmSpec, Grouping


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *,
               masked_m: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
               epilogue: Callable[..., Any] | None = None, **operands: Any) -> Any:
    """bf16/fp16 grouped GEMM: ``torch._grouped_mm(a, b, offs=offs, out_dtype=out_dtype)`` for a 2-D a with offs
    (over a 3-D b: M-grouped; over a 2-D b: K-grouped) or a 3-D a, and the masked layout with `masked_m` (module
    docstring). fp32 accumulation.

    `epilogue`: a function of the fp32 accumulator and `operands`, fused as `warploom.matmul`'s is
    (warploom/fused.py), with one output, on every layout. M-grouped: operands are shaped
    against the (total_M, N) result, so a per-row operand (total_M, 1) and a dense (total_M, N) one are indexed in
    the grouped row space (row r of a's); a per-column (N,) one is shared by every group. A per-expert one holds one
    value set per group: (G, N) or (G, 1, N) adds row g along N to expert g's rows (an MoE layer's per-expert bias),
    (G,) or (G, 1, 1) gives them value g (a per-expert output scale); the 3-D forms always, while (G, N) where
    G == total_M and (G,) where G == N could also be read against the result and are refused with the fix
    (`offsets_operands`; (1, total_M, N) says dense). Masked and
    batched (a 3-D a): operands are shaped against the (G, M_max, N) result with a leading expert dimension:
    (G, M_max, N) dense, (G, M_max, 1) or (G, M_max) one value per row of each expert, the per-expert (G, 1, N),
    (G, N), (G, 1, 1), (G,) and the shared (N,) as above (`masked_operands`); rows at or past masked_m[g] are never
    written. K-grouped: operands shaped against the (G, M, N) result as the masked layout's (M one group's rows); an
    empty group (no K range) gives fn(0, its operands), e.g. a weight gradient accumulated into the one held,
    ``grouped_mm(dy_t, x, offs, out_dtype=torch.float32, epilogue=lambda acc, grad: grad + acc, grad=dw)``. E.g. an
    MoE layer's up projection with its SiLU-mul: ``grouped_mm(x, w_up, offs, epilogue=lambda acc, gate:
    F.silu(gate) * acc, gate=x_gate)``; with per-expert biases ``epilogue=lambda acc, bias: acc + bias,
    bias=b_up`` (b_up (G, N)). torch._grouped_mm's own ``bias`` argument is refused by torch 2.11-2.13 ("Bias not
    supported yet"), so there is no ``bias=`` here beyond such an operand.

    An epilogue returning ``warploom.quantize(y, recipe="1x128")`` (M-grouped and masked/batched; rule 26 on rule
    22's tiles) returns the pair (q, s): q shaped as the result in fp8, s fp32 with one scale per 128 columns of each
    row, (total_M, ceil(N/128)) or (G, M_max, ceil(N/128)), computed on the tile, rows of no group unwritten (s is
    `scaled_grouped_mm`'s blockwise scale_a for the next GEMM, K = N), e.g. an fp8 MoE layer's gate/up GEMM
    ``epilogue=lambda acc, gate: warploom.quantize(F.silu(gate) * acc)``. ``recipe="rowwise"`` returns q and s
    (total_M, 1) or (G, M_max, 1), as the dense recipe's: on one tile where N <= 128, wider in planner rule 29's two
    passes (the GEMM stores y in fp32 and each tile adds its rows' amax, clipped at its group's end; a cast kernel
    then quantizes the rows of some group), for ``return warploom.quantize(y, recipe="rowwise")`` alone."""
    if epilogue is None:  # (the custom op: see `_grouped_mm_impl`)
        _no_operands(operands, ("offs", "masked_m", "out_dtype", "epilogue"))
        _no_neg_view({"a": a, "b": b})
        try:
            if skip_dispatcher(a, b, offs, masked_m):
                return _grouped_mm_impl(a, b, offs, masked_m, out_dtype)
            return torch.ops.warploom.grouped_mm(a, b, offs, masked_m, out_dtype)
        except (AttributeError, TypeError, RuntimeError) as e:
            _refused(e, lambda: grouped_call(a, b, offs, masked_m, out_dtype))
            raise
    no_grad_through_epilogue({"a": a, "b": b, **operands}, "the call without it (warploom.grouped_mm's M-grouped "
                             "and batched calls have a backward)")
    return _run(*_fused(grouped_call(a, b, offs, masked_m, out_dtype), epilogue, operands))


def scaled_grouped_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      offs: torch.Tensor | None = None, *, masked_m: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = torch.bfloat16, use_fast_accum: bool = False,
                      epilogue: Callable[..., Any] | None = None, **operands: Any) -> Any:
    """fp8 (e4m3) grouped GEMM, bf16 out.

    Rowwise: ``torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16,
    use_fast_accum=...)``: scale_a (total_M,) fp32 per row of a ((G, M_max) with a 3-D a), scale_b (G, N) per column
    of each expert. use_fast_accum=False promotes each k-block's partial into an fp32 accumulator (torch's
    accuracy); True accumulates in the tensor core's.

    Blockwise 1x128 x 128x128 (DeepSeek-V3's MoE recipe), chosen by a 3-D scale_b: scale_a (total_M, ceil(K/128))
    fp32, one per row of a and 128-deep block of K (a row's own, whichever expert; (G, M_max, ceil(K/128)) with a
    3-D a, masked or batched), scale_b (G, ceil(K/128), ceil(N/128)) fp32, one per 128x128 block of each expert's
    (K, N) weight (any strides: DeepGEMM's (G, ceil(N/128), ceil(K/128)) goes as ``scale_b.transpose(-2, -1)``).
    Rows of expert g are ``sum over k-blocks kb of (a[rows, kb] @ b[g][kb, :]) * scale_a[rows, kb] *
    scale_b[g, kb, n // 128]``, each k-block's partial promoted into the fp32 accumulator with its scales
    (use_fast_accum must be False).

    K-grouped blockwise (the weight gradient; a 2-D a (M, total_K), a 2-D b (total_K, N) column-major, offs over
    K): scale_a (M, ceil(total_K/128)) and scale_b (ceil(total_K/128), ceil(N/128)) fp32 over the grouped K space;
    result (G, M, N), block g ``sum over the 128-column blocks kb of group g's K range of (a[:, kb] @ b[kb, :]) *
    scale_a[:, kb] * scale_b[kb, n // 128]``, zeros for an empty group. Every offs entry must be a multiple of 128
    or total_K (DeepGEMM's rule; checked on CPU offs). K-grouped rowwise: torch's 1-D scale_a (G * M,) and scale_b
    (G * N,), one per row and column of each group's (M, N) block (each group quantizes its own K slice); offs
    anywhere.

    `epilogue` (every layout; rowwise, fast or not, and blockwise): fn(acc, **operands) gets the
    fp32 scaled product, ``acc * scale_a * scale_b`` for rowwise scales (as `warploom.scaled_mm`'s fused epilogue
    defines it; the scales join the graph in front of fn), the promoted blockwise sum for blockwise ones, and its one
    result is stored, or the pair of ``warploom.quantize(y, recipe="1x128")`` (`grouped_mm` says how). Operands are
    shaped as `grouped_mm`'s; scaled_mm's names scale_a, scale_b and bias are reserved (neither an operand nor a
    parameter of fn may take them)."""
    if epilogue is None:  # (the custom op: see `_grouped_mm_impl`)
        _no_operands(operands, ("offs", "masked_m", "out_dtype", "use_fast_accum", "epilogue"))
        fast_accum(use_fast_accum)  # (before the dispatcher, which casts None to False and fails on a string)
        _no_neg_view({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b})
        try:
            if skip_dispatcher(a, b, scale_a, scale_b, offs, masked_m):
                return _scaled_grouped_mm_impl(a, b, scale_a, scale_b, offs, masked_m, out_dtype, use_fast_accum)
            return torch.ops.warploom.scaled_grouped_mm(a, b, scale_a, scale_b, offs, masked_m, out_dtype,
                                                        use_fast_accum)
        except (AttributeError, TypeError, RuntimeError) as e:
            _refused(e, lambda: grouped_call(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum,
                                             scaled=True))
            raise
    no_grad_through_epilogue({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, **operands},
                             "the call without it")
    call = grouped_call(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum, scaled=True)
    sa, scale_b = _mainloop_scales(call, scale_a, scale_b)
    if call.spec.scale.is_blockwise:  # (the mainloop's scales: they ride beside the graph's operands)
        return _run(*_fused(call, epilogue, operands, scale_a=sa, scale_b=scale_b))
    # rowwise: graph operands, scale_a a (total_M, 1) column, scale_b a (G, 1, N) row per expert (the 3-D form is
    # per expert always, even where G == total_M: classify.py)
    return _run(*_fused(call, epilogue, operands, scale_a=sa[:, None], scale_b=scale_b.unsqueeze(1)))


def _mainloop_scales(call: GroupedCall, scale_a: torch.Tensor,
                     scale_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scales as the kernel reads them: blockwise ones with their strides, a 3-D scale_a over a's flattened rows;
    rowwise ones flattened, as the epilogue reads them, a K-grouped call's scale_b (torch's (G * N,)) per group."""
    if call.spec.grouping is Grouping.K_OFFSETS and not call.spec.scale.is_blockwise:
        scale_b = scale_b.reshape(call.spec.groups, call.spec.n)
    return (scale_a.flatten(0, -2) if call.spec.scale.is_blockwise else scale_a.reshape(-1)), scale_b


# The plain calls (no epilogue) are torch.library custom ops, torch.ops.warploom.grouped_mm and .scaled_grouped_mm, as
# `warploom.matmul` is (api.py): torch.compile traces them and FakeTensorMode runs them through the fake
# implementations, which answer with the result's shape and dtype (`checks_grouped.grouped_result`). Calls with an
# epilogue go straight to the kernel (fused.py says why). Registered when warploom.api is imported (it imports this
# module).
def _grouped_mm_impl(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                     masked_m: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    out = _run(grouped_call(a, b, offs, masked_m, out_dtype))
    assert isinstance(out, torch.Tensor)  # (no epilogue: one result)
    return out


_grouped_mm_op = torch.library.custom_op("warploom::grouped_mm", mutates_args=())(_grouped_mm_impl)


@_grouped_mm_op.register_fake
def _grouped_mm_fake(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None,
                     masked_m: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    shape, dtype = grouped_result(a, b, offs, masked_m, out_dtype, scaled=False)
    return a.new_empty(shape, dtype=dtype)


def _grouped_mm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    a, b, offs, masked_m, _ = inputs
    ctx.layout = ("masked" if masked_m is not None else "k_grouped" if offs is not None and a.dim() == 2
                  and b.dim() == 2 else "m_grouped" if offs is not None else "batched")
    ctx.save_for_backward(a, b, offs)


def _grouped_mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """The gradients of an M-grouped or batched ``grouped_mm`` through warploom's grouped kernels, in a's dtype (the
    incoming gradient cast to it, as `_matmul_backward`): M-grouped, grad_a = grouped_mm(grad, b^T, offs) with the rows
    of no group zeroed (the kernel leaves them unwritten) and grad_b = the K-grouped grouped_mm(a^T, grad, offs),
    the weight gradient's own layout (offs over the tokens); batched, the two 3-D products. a^T is copied: the
    K-grouped kernel reads A K-major. Masked and K-grouped calls have no backward yet (refused by name)."""
    a, b, offs = ctx.saved_tensors
    if ctx.layout in ("masked", "k_grouped"):
        raise UnsupportedError(f"backward of a {ctx.layout.replace('_', '-')} grouped_mm: expected an M-grouped (offs "
                               "over a's rows) or batched call, the layouts whose backward is built. Fix: compute "
                               "the gradients with warploom.grouped_mm calls of your own, or call torch._grouped_mm")
    g = grad.to(a.dtype).contiguous()  # (autograd may hand in an expanded gradient, e.g. a sum's)
    ga = gb = None
    if ctx.needs_input_grad[0]:
        ga = torch.ops.warploom.grouped_mm(g, b.transpose(-2, -1), offs if ctx.layout == "m_grouped" else None, None,
                                           a.dtype)
        if ctx.layout == "m_grouped":  # (rows past offs[-1] belong to no group: their gradient is zero)
            owned = torch.arange(a.shape[0], device=a.device) < offs[-1].to(torch.int64)
            ga = torch.where(owned[:, None], ga, torch.zeros((), dtype=ga.dtype, device=ga.device))
    if ctx.needs_input_grad[1]:
        # (a^T's rows run over the tokens: padded with zero tokens to 16 bytes for TMA; M-grouped, they lie past
        # offs[-1], in no group; batched, zero rows add nothing)
        tokens = a.shape[-2]
        rows = -(-tokens // (16 // a.element_size())) * (16 // a.element_size())
        a_t = a.new_zeros(*a.shape[:-2], a.shape[-1], rows)
        a_t[..., :tokens] = a.transpose(-2, -1)
        g_k = g if rows == tokens else torch.cat([g, g.new_zeros(*g.shape[:-2], rows - tokens, g.shape[-1])], -2)
        gb = torch.ops.warploom.grouped_mm(a_t, g_k, offs if ctx.layout == "m_grouped" else None, None, b.dtype)
    return ga, gb, None, None, None


_grouped_mm_op.register_autograd(_grouped_mm_backward, setup_context=_grouped_mm_setup)


def _scaled_grouped_mm_impl(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                            offs: torch.Tensor | None = None, masked_m: torch.Tensor | None = None,
                            out_dtype: torch.dtype | None = torch.bfloat16,
                            use_fast_accum: bool = False) -> torch.Tensor:
    call = grouped_call(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum, scaled=True)
    out = _run(call, *_mainloop_scales(call, scale_a, scale_b))
    assert isinstance(out, torch.Tensor)
    return out


_scaled_grouped_mm_op = torch.library.custom_op("warploom::scaled_grouped_mm", mutates_args=())(
    _scaled_grouped_mm_impl)


def _scaled_grouped_mm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    pass  # (the backward refuses: it needs nothing saved)


def _scaled_grouped_mm_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    """fp8 grouped GEMMs have no backward (`checks.no_backward`; an fp8 a cast from a tensor that requires grad
    carries it here)."""
    raise no_backward("scaled_grouped_mm", ("a", "b", "scale_a", "scale_b"), ctx.needs_input_grad,
                      "the fp8 grouped GEMM", "pass the fp8 tensors and scales .detach()ed, or call under "
                      "torch.no_grad(); train through warploom.grouped_mm in bf16, which has a backward for M-grouped "
                      "and batched calls, or quantize the gradients and call warploom.scaled_grouped_mm for them "
                      "yourself")


_scaled_grouped_mm_op.register_autograd(_scaled_grouped_mm_backward, setup_context=_scaled_grouped_mm_setup)


@_scaled_grouped_mm_op.register_fake
def _scaled_grouped_mm_fake(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                            offs: torch.Tensor | None = None, masked_m: torch.Tensor | None = None,
                            out_dtype: torch.dtype | None = torch.bfloat16,
                            use_fast_accum: bool = False) -> torch.Tensor:
    shape, dtype = grouped_result(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum, scaled=True)
    return a.new_empty(shape, dtype=dtype)


def _no_neg_view(named: dict[str, Any]) -> None:
    """A negated view is refused on every path, as the direct one (CUDA, `skip_dispatcher`) must refuse it: the
    dispatcher would resolve it. (Not while torch.compile traces, whose graph's dispatcher resolves it.)"""
    if not torch.compiler.is_compiling():
        no_neg_bit(named)


def _refused(e: Exception, check: Callable[[], Any]) -> None:
    """After a call failed with a Python or torch error (an argument the op's dispatcher could not take: None, a
    list, a string out_dtype), raise the warploom error the checks give for it, naming the argument, if any."""
    if isinstance(e, WarploomError):
        return
    try:
        check()
    except WarploomError as err:
        raise err from None


def _no_operands(operands: dict[str, Any], params: tuple[str, ...]) -> None:
    """Keyword arguments without an epilogue: epilogue operands, or (more often) a misspelt parameter, ``offsets=``
    or ``fast_accum=``, whose fix is the parameter's name rather than an epilogue."""
    if operands:
        name = next(iter(operands))
        near = difflib.get_close_matches(name, params, n=1)
        raise InputError(name, "no epilogue operands without epilogue=", "an operand",
                         (f"did you mean {near[0]}=? Else " if near else "") +
                         "pass epilogue=fn whose parameters after acc name the operands, or drop them")


def _fused(call: GroupedCall, epilogue: Callable[..., Any], operands: dict[str, Any], *, scale_a: Any = None,
           scale_b: Any = None) -> tuple[GroupedCall, torch.Tensor | None, torch.Tensor | None, dict[str, Any]]:
    """`call` with its epilogue captured (`fused.fused_spec`; rowwise scales in front of it), the mainloop's
    blockwise scales if any, and the graph's operands by name."""
    spec = call.spec
    if spec.scale.microscaled:  # (else refused by the planner, in words that name no argument)
        e = UnsupportedError("epilogue: expected no fused epilogue on an MX grouped GEMM (it runs on sm_100a only, "
                             "whose grouped epilogue stores the product only so far), got one. Fix: drop epilogue= "
                             "and apply it to the call's result")
        e.arg = "epilogue"  # type: ignore[attr-defined]
        raise e
    # (a masked or K-grouped call's operands are shaped against its (G, M, N) result, the kernel reading C's
    # (G * M, N) rows: a masked call's M is all groups' rows, a K-grouped one's one group's)
    if spec.grouping is Grouping.MASKED:
        operands = masked_operands(operands, spec.groups, spec.m // max(spec.groups, 1), spec.n)
    elif spec.grouping is Grouping.K_OFFSETS:
        operands = masked_operands(operands, spec.groups, spec.m, spec.n)
    elif spec.grouping is Grouping.OFFSETS:
        operands = offsets_operands(operands, spec.groups, spec.m, spec.n)
    try:
        spec, picked = fused_spec(spec, call.a, epilogue, operands, scale_a=scale_a, scale_b=scale_b)
    except WarploomError as err:
        if getattr(err, "arg", None) != "grouping":
            raise
        # (GemmSpec's grouped_problems: an epilogue with several outputs)
        e = UnsupportedError("epilogue: expected a function with one output on a grouped GEMM, or one returning "
                             "warploom.quantize(y, recipe='1x128'), got one with several outputs. Fix: return one "
                             "tensor")
        e.arg = "epilogue"  # type: ignore[attr-defined]
        raise e from None
    g = spec.epilogue
    problems = grouped_quantize_problems(spec) if g is not None and g.group_amax() is not None else []
    if g is not None and two_passes(spec) and (pair := amax_pass_problem(spec)) is not None:
        problems.append(pair)  # (rule 29 stores the quantize pair alone)
    if problems:
        assert g is not None
        recipe = "rowwise" if g.rowwise() else "1x128"
        e = UnsupportedError(f"epilogue: expected warploom.quantize(y, recipe='1x128' or 'rowwise') on an M-grouped "
                             f"or masked GEMM (rowwise wider than 128 as `return warploom.quantize(y, "
                             f"recipe='rowwise')` alone), got {'; '.join(problems)}. Fix: "
                             f"return y itself (out_dtype=torch.bfloat16 or torch.float32) and quantize the call's "
                             f"result with warploom.quantize(out, recipe='{recipe}')")
        e.arg = "epilogue"  # type: ignore[attr-defined]
        raise e
    sa = sb = None
    if spec.scale.is_blockwise:
        sa, sb = picked.pop("scale_a"), picked.pop("scale_b")
    return dataclasses.replace(call, spec=spec), sa, sb, picked


def _expert_or_column(name: str, g: int, expected: str) -> ShapeError:
    """The refusal of a (G,) epilogue operand where the experts G == N: one value per expert, or one per column?"""
    return ShapeError(name, expected, f"shape ({g},), and the experts G == N == {g}",
                      f"say which: {name}.reshape({g}, 1, 1) for one value per expert, or {name}.reshape(1, {g}) for "
                      "one value per column")


def offsets_operands(operands: dict[str, Any], groups: int, m: int, n: int) -> dict[str, Any]:
    """An M-grouped call's epilogue operands, shaped against its (total_M, N) result (epilogue/classify.py), with
    two more rules:

        (1, total_M, N), (1, total_M, 1)  -> (total_M, N), (total_M, 1): dense or one value per row, said so
        (G, N) where G == total_M          refused: one row per expert, or one per row of the result?
        (G,) where G == N                  refused: one value per expert, or one per column?

    classify reads those two as the broadcast ones (dense, per column), which is not what a per-expert bias or scale
    meant: a model whose token count met its expert count got a wrong result with no error. Each refusal names the
    3-D form of either meaning; the rest goes on to classify as it is."""
    g = groups
    out: dict[str, Any] = {}
    for name, t in operands.items():
        if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:  # (classify says what is wrong)
            out[name] = t
            continue
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 3 and shape[:2] == (1, m) and m != 1 and shape[2] in (1, n):
            out[name] = t.reshape(m, shape[2])
        elif g > 1 and shape == (g, n) and g == m:
            raise ShapeError(name, f"an epilogue operand that says how it is read: ({g}, 1, {n}) one row per expert, "
                             f"(1, {m}, {n}) one row per row of the ({m}, {n}) result",
                             f"shape {shape}, and the experts G == total_M == {m}",
                             f"say which: {name}.unsqueeze(1) for one row per expert, or {name}.unsqueeze(0) for one "
                             "row per row of the result")
        elif g > 1 and shape == (g,) and g == n:
            raise _expert_or_column(name, g, f"an epilogue operand that says how it is read: ({g}, 1, 1) one value "
                                    f"per expert, (1, {n}) one value per column")
        else:
            out[name] = t
    return out


def masked_operands(operands: dict[str, Any], groups: int, m_max: int, n: int) -> dict[str, Any]:
    """A masked or batched call's epilogue operands, shaped against its (G, M_max, N) result, as the kernel reads
    them: over its (G * M_max, N) rows, or per expert. A K-grouped call's alike, M_max its M (C is (G * M, N)).

        (G, M_max, N), (G, M_max, 1)   -> (G * M_max, N), (G * M_max, 1): dense, one value per row (a view where
                                          the strides allow, else a copy)
        (G, M_max)                      -> (G * M_max, 1): one value per row of each expert
        (G, 1, N), (G, 1, 1), (G, N), (G,)  kept: per expert (classify.py)
        (1, 1, N), (1, 1, 1)            -> (N,), (1,): shared by every row
        (N,), (1, N), a single element; the flattened (G * M_max, N) and (G * M_max, 1)  kept

    A 2-D (G, M_max) where M_max == N could be either per row or per expert, and a (G,) where G == N per expert or
    per column: both are refused with the fix (the 3-D form), as is any other shape (a ShapeError naming the
    operand). A value that is not a tensor, or not a dense one, goes on to classify, which says so."""
    g, r, rows = groups, m_max, groups * m_max
    expected = (f"an epilogue operand of the ({g}, {r}, {n}) result: ({g}, {r}, {n}) dense, ({g}, {r}, 1) or "
                f"({g}, {r}) one value per row of each expert, ({g}, 1, {n}) or ({g}, {n}) one row per expert, "
                f"({g}, 1, 1) or ({g},) one value per expert, ({n},) one value per column, or a single element")
    out: dict[str, Any] = {}
    for name, t in operands.items():
        if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:  # (sparse: no reshape; classify says)
            out[name] = t
            continue
        shape = tuple(int(d) for d in t.shape)
        if len(shape) == 3 and shape[0] == g and shape[1] == 1:
            out[name] = t  # per expert
        elif len(shape) == 3 and shape[:2] == (g, r) and shape[2] in (1, n):
            out[name] = t.reshape(rows, shape[2])
        elif len(shape) == 3 and shape[:2] == (1, 1) and shape[2] in (1, n):
            out[name] = t.reshape(shape[2])
        elif shape == (g, r) and (r != n or r == 1):
            out[name] = t.reshape(rows, 1)
        elif shape == (g, r):
            raise ShapeError(name, expected, f"shape {shape}, and M_max == N == {n}",
                             f"say which: {name}.unsqueeze(1) ({g}, 1, {n}) for one row per expert, or "
                             f"{name}.unsqueeze(-1) ({g}, {r}, 1) for one value per row")
        elif shape == (g,) and g == n and g > 1:
            raise _expert_or_column(name, g, expected)
        elif shape in ((g, n), (1, n), (1, 1), (rows, n), (rows, 1), (n,), (1,), (g,), ()):
            out[name] = t
        else:
            raise ShapeError(name, expected, f"shape {shape}",
                             f"reshape {name} to one of those; one (M_max, N) operand shared by every expert goes "
                             f"as {name}.expand({g}, {r}, {n})" if shape == (r, n) else
                             f"reshape {name} to one of those shapes")
    return out


def _run(call: GroupedCall, scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
         operands: dict[str, Any] | None = None) -> Any:
    """The result, or a fused quantization's pair (q, s): q shaped as the result, s with one scale per 128 columns
    (rowwise: one) of each of its rows, (total_M, ceil(N/128)) or (G, M_max, ceil(N/128)). (A rule 29 kernel's
    module stores y's workspace; its launcher and `simulate_grouped` take the call's (q, s) and run the cast.)"""
    spec, a = call.spec, call.a
    rows = _c_rows(spec)
    # (out_dtype, or a fused epilogue's outputs': N wide, a gate/up one's N / 2, a quantization's scales a group's)
    dtypes = [d.torch for d in spec.output_dtypes()]
    shapes = spec.output_shapes(rows, spec.n)
    if spec.m == 0 or spec.n == 0 or spec.k == 0:  # no kernel: an empty result, or a sum over nothing
        if spec.epilogue is not None and spec.m and spec.n:  # the epilogue of a zero accumulator
            outs = _zero_k_epilogue(call, operands or {})
        else:  # (an empty quantization's scales: 1, the zero-group scale, as api's)
            fill = [torch.ones if j else torch.zeros for j in range(len(shapes))]
            outs = tuple(f(shape, dtype=dt, device=a.device) for f, shape, dt in zip(fill, shapes, dtypes, strict=True))
        return _shaped(call, outs)
    kernel = build(spec, sim_device(spec) if a.device.type == "cpu" else device_for(a))
    if a.device.type == "cpu":
        from warploom.sim.grouped import simulate_grouped

        check_sim_size(spec)
        # (rows outside every group: unspecified; zeros here)
        outs = tuple(torch.zeros(shape, dtype=dt) for shape, dt in zip(shapes, dtypes, strict=True))
        simulate_grouped(kernel.module, a, call.b, call.bounds, scale_a, scale_b, out=outs,
                         operands=operands).raise_for_findings()
        return _shaped(call, outs)
    require_cuda(a)
    outs = tuple(torch.empty(shape, dtype=dt, device=a.device) for shape, dt in zip(shapes, dtypes, strict=True))
    with torch.cuda.device(a.device):
        _launcher(kernel)(a, call.b, call.bounds, outs[0], scale_a, scale_b, operands, outs[1:])
    return _shaped(call, outs)


def _shaped(call: GroupedCall, outs: tuple[torch.Tensor, ...]) -> Any:
    """C's (rows, width) outputs in the call's result shape ((G, M_max, width) for a 3-D a); one, or a tuple."""
    shaped = tuple(o.reshape(*call.out_shape[:-1], o.shape[-1]) for o in outs)
    return shaped[0] if len(shaped) == 1 else shaped


def _c_rows(spec: GemmSpec) -> int:
    """C's rows: the grouped row space, or a K-grouped call's G blocks of M."""
    return spec.groups * spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m


def _zero_k_epilogue(call: GroupedCall, operands: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """K == 0: the epilogue of a zero accumulator, no kernel. With per-expert operands each group's rows read their
    group's slice, so the bounds are read on the host here (only here: a degenerate call launches nothing); a
    K-grouped call's groups are C's blocks of M rows, every one of them empty-K."""
    from warploom.epilogue.reference import evaluate, evaluate_tile, group_columns
    from warploom.ir.raster import group_bounds

    spec, dev = call.spec, call.a.device
    g = spec.epilogue
    assert g is not None
    rows = _c_rows(spec)
    zero = torch.zeros((rows, spec.n), dtype=torch.float32, device=dev)
    if not any(s.per_group for s in g.operands):
        return evaluate(g, zero, operands, out_dtype=spec.out_dtype)
    # (a gate/up graph's (M, N / 2) result: one interleave block's pair at a time, both halves zero; a quantization's
    # whole rows at once, its scales one column a group)
    block = g.gate_up()
    width = spec.n // 2 if block else spec.n
    outs = tuple(torch.zeros(shape, dtype=dt.torch, device=dev)
                 for shape, dt in zip(spec.output_shapes(rows, spec.n), spec.output_dtypes(), strict=True))
    row_groups = ([(i * spec.m, (i + 1) * spec.m) for i in range(spec.groups)] if spec.grouping is Grouping.K_OFFSETS
                  else group_bounds(spec.grouping, call.bounds.tolist(), spec.m))
    for grp, (s, e) in enumerate(row_groups):
        for c in range(0, width, block or width) if e > s else ():
            w = min(block or width, width - c)
            vals = evaluate_tile(g, zero[s:e, :w], operands, range(s, e), range(c, c + w), out_shape=(rows, width),
                                 out_dtype=spec.out_dtype, group=grp, up_tile=zero[s:e, :w] if block else None)
            for out, o, v in zip(outs, g.outputs, vals, strict=True):
                if o.layout is OutputLayout.GROUPS:
                    out[s:e] = group_columns(v, g.amax(), width)
                else:
                    out[s:e, c:c + w] = v
    return outs


@functools.lru_cache(maxsize=64)
def _launcher(kernel: Kernel) -> Any:
    from warploom.runtime.launch_grouped import GroupedLauncher

    return GroupedLauncher(kernel.module, kernel.gluon)
