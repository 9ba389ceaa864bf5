"""Fused-epilogue mistakes that once passed without a word, or failed with a Python error or a misleading fix.

Each is planned on meta tensors (no GPU, no kernel launch) and must raise a warploom error, a ValueError or
TypeError subclass, whose message names the argument first and contains "Fix: ".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom.errors import InputError, UnsupportedError, WarploomError

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn
M, N, K = 64, 256, 128


def _meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _plan(epilogue: Callable[..., Any], **operands: Any) -> Any:
    return warploom.plan(_meta(M, K), _meta(N, K).t(), epilogue=epilogue, **operands)


def _raises(err: type[Exception], arg: str, fn: Callable[[], Any], *fragments: str) -> str:
    with pytest.raises(err) as ei:
        fn()
    e = ei.value
    assert isinstance(e, WarploomError) and isinstance(e, (ValueError, TypeError)), type(e)
    msg = str(e)
    assert msg.startswith(f"{arg}: expected "), msg
    assert "Fix: " in msg, msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


def _drops_its_quantize(acc: Any) -> Any:
    warploom.quantize(acc)  # (as if it quantized acc in place)
    return acc


def _drops_one_of_two(acc: Any) -> Any:
    warploom.quantize(acc * 2, recipe="rowwise")
    return warploom.quantize(acc)


@pytest.mark.parametrize("fn", [_drops_its_quantize, _drops_one_of_two], ids=["alone", "beside_another"])
def test_a_quantize_whose_result_is_dropped_is_refused(fn: Callable[..., Any]) -> None:
    """The dead call was dropped with the fx graph's unread nodes: the kernel stored acc unquantized, in bf16."""
    _raises(UnsupportedError, "epilogue", lambda: _plan(fn), "warploom.quantize's result (q, s) returned",
            "Fix: return it")


def test_a_quantize_whose_q_or_both_are_returned_still_plans() -> None:
    assert _plan(lambda acc: warploom.quantize(acc)).spec.epilogue is not None
    assert _plan(lambda acc: warploom.quantize(acc)[0]).spec.epilogue is not None  # (q alone: s unread, as before)


@pytest.mark.parametrize("fn,op,bound", [(lambda acc: acc.clamp(min=1j), "Tensor.clamp", "min=1j"),
                                         (lambda acc: torch.clamp(acc, max=2j), "torch.clamp", "max=2j"),
                                         (lambda acc: torch.clamp_min(acc, 1 + 0j), "torch.clamp_min", "min=(1+0j)")])
def test_a_complex_clamp_bound_is_refused_by_name(fn: Callable[..., Any], op: str, bound: str) -> None:
    """torch's meta kernel takes a complex bound for a real tensor; the lowering's float() then raised a bare
    TypeError."""
    _raises(UnsupportedError, f"epilogue op {op}", lambda: _plan(fn), "a real Python number", f"got {bound}",
            "Fix: pass a real number")


def test_a_real_clamp_bound_still_plans() -> None:
    assert _plan(lambda acc: F.hardtanh(acc.clamp(min=True, max=3), -1.0, 2.0)).spec.epilogue is not None


@pytest.mark.parametrize("const,dtype", [(torch.tensor(2), "torch.int64"), (torch.tensor([True, False]), "torch.bool")])
def test_a_captured_constant_of_another_dtype_says_its_dtype(const: torch.Tensor, dtype: str) -> None:
    """A 0-D int tensor was refused as "a tensor of shape ()": the shape the message asked for."""
    _raises(UnsupportedError, "epilogue constant", lambda: _plan(lambda acc: acc * const), f"got a {dtype} tensor")


@pytest.mark.parametrize("param", ["b", "c", "out_dtype", "epilogue", "device"])
def test_a_parameter_no_operand_can_feed_says_to_rename_it(param: str) -> None:
    """"Fix: pass b=... to the call" led to Python's "multiple values for argument 'b'" (matmul's own b), `c=` to a
    second refusal (a name the kernel uses), `out_dtype=` and `device=` to the call's own checks of those."""
    fn = eval(f"lambda acc, {param}: acc + {param}")  # (the parameter's name is what is tested)
    msg = _raises(InputError, param, lambda: _plan(fn), f"Fix: rename the parameter, e.g. {param}_in")
    assert f"pass {param}=" not in msg
    # ... and the fix works: the renamed parameter plans with its operand.
    renamed = eval(f"lambda acc, {param}_in: acc + {param}_in")
    assert _plan(renamed, **{f"{param}_in": _meta(N)}).spec.epilogue is not None


def test_a_parameter_an_operand_can_feed_keeps_its_fix() -> None:
    _raises(InputError, "residual", lambda: _plan(lambda acc, residual: acc + residual),
            "Fix: pass residual=... to the call, or give the parameter a default")


def test_scaled_mm_parameter_named_like_its_own_argument_says_to_rename_it() -> None:
    def plan() -> Any:
        return warploom.plan(_meta(M, K, dtype=E4), _meta(N, K, dtype=E4).t(), _meta(M, 1, dtype=torch.float32),
                             _meta(1, N, dtype=torch.float32), epilogue=lambda acc, scale_result: acc * scale_result)

    _raises(InputError, "scale_result", plan, "Fix: rename the parameter, e.g. scale_result_in")
