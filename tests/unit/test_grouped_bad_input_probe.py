"""Grouped-GEMM mistakes (warploom.grouped_mm, warploom.scaled_grouped_mm) that a probe found passing without a word,
failing with a bare torch error, or refused with a fix that does not work.

Each must raise a warploom error, a ValueError or TypeError subclass, whose message names the argument first and
contains "Fix: ", before any kernel is launched (CPU and meta tensors: no GPU). The bounds, shapes, strides, dtypes
and scales already refused are test_props_bad_input_grouped.py's and test_bad_input.py's.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_bad_input import raises

import warploom
from warploom.checks_grouped import grouped_call
from warploom.errors import AlignmentError, ArgumentTypeError, InputError, ScaleError, UnsupportedError

BF16, E4, E8 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e8m0fnu
G, M, N, K = 3, 40, 32, 64


def _offs(*v: int, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32, device=device)


def _ab(dtype: torch.dtype = BF16, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """An M-grouped a (M, K) and b (G, K, N), b the transposed view of (G, N, K) weights, as a model holds them."""
    return (torch.randn(M, K, device=device).to(dtype),
            torch.randn(G, N, K, device=device).to(dtype).transpose(-2, -1))


# A fused epilogue's call bypasses the custom ops' autograd: on the GPU its result carried no gradient, silently
# (matmul's and scaled_mm's are refused in api.py).
@pytest.mark.parametrize("case", ["a", "b", "operand", "masked a", "scaled scale_a"])
def test_a_fused_epilogue_on_tensors_that_require_grad_is_refused(case: str) -> None:
    a, b = _ab()
    if case == "a":
        raises(InputError, "a", lambda: warploom.grouped_mm(a.requires_grad_(), b, _offs(10, 20, 40),
                                                            epilogue=lambda acc: acc * 2), match="requires_grad")
    elif case == "b":
        raises(InputError, "b", lambda: warploom.grouped_mm(a, b.detach().requires_grad_(), _offs(10, 20, 40),
                                                            epilogue=lambda acc: acc * 2), match="b.detach()")
    elif case == "operand":
        bias = torch.randn(N, requires_grad=True)
        raises(InputError, "bias", lambda: warploom.grouped_mm(a, b, _offs(10, 20, 40), epilogue=lambda acc, bias:
                                                               acc + bias, bias=bias), match="torch.no_grad()")
    elif case == "masked a":
        a3 = torch.randn(G, 16, K).to(BF16).requires_grad_()
        raises(InputError, "a", lambda: warploom.grouped_mm(a3, b, masked_m=_offs(1, 2, 3),
                                                            epilogue=lambda acc: acc * 2), match="requires_grad")
    else:
        a8, b8 = _ab(E4)
        sa = torch.ones(M, requires_grad=True)
        offs = _offs(10, 20, 40)
        raises(InputError, "scale_a", lambda: warploom.scaled_grouped_mm(a8, b8, sa, torch.ones(G, N), offs,
                                                                         epilogue=lambda acc: acc),
               match="requires_grad")


def test_a_fused_epilogue_without_grad_still_runs() -> None:
    a, b = _ab()
    offs = _offs(10, 20, 40)
    with torch.no_grad():
        out = warploom.grouped_mm(a.requires_grad_(), b, offs, epilogue=lambda acc: acc * 2)
    ref = torch.cat([a[s:e].float() @ b[g].float() for g, (s, e) in enumerate([(0, 10), (10, 20), (20, 40)])]) * 2
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.02)


# scaled_grouped_mm has no backward: torch's bare "no autograd formula was registered" RuntimeError came at the
# backward. (Meta tensors: the op's fake implementation answers, nothing runs.)
@pytest.mark.parametrize("needs", ["a", "scale_a"])
def test_backward_of_scaled_grouped_mm_is_refused_by_name(needs: str) -> None:
    a8, b8 = _ab(E4, "meta")
    sa, sb = torch.ones(M, device="meta"), torch.ones(G, N, device="meta")
    if needs == "a":
        a8.requires_grad_()
    else:
        sa.requires_grad_()
    y = warploom.scaled_grouped_mm(a8, b8, sa, sb, _offs(10, 20, 40, device="meta"))
    e = raises(UnsupportedError, "backward of scaled_grouped_mm", lambda: y.float().sum().backward(),
               match=f"asked for {needs}")
    assert ".detach()" in str(e).split("Fix: ")[1], e


# A list of per-expert tensors: the fix was torch.as_tensor(b), which fails on a list of tensors.
@pytest.mark.parametrize("arg", ["a", "b"])
def test_a_list_of_expert_tensors_is_refused_with_a_fix_that_stacks_them(arg: str) -> None:
    a, b = _ab()
    if arg == "b":
        e = raises(ArgumentTypeError, "b", lambda: warploom.grouped_mm(a, list(b.unbind(0)), _offs(10, 20, 40)),
                   match="torch.stack(b)")
    else:
        a3 = [torch.randn(16, K).to(BF16) for _ in range(G)]
        e = raises(ArgumentTypeError, "a", lambda: warploom.grouped_mm(a3, b, masked_m=_offs(1, 2, 3)),
                   match="torch.stack(a)")
    assert "as_tensor" not in str(e), e


def test_a_list_of_expert_weights_to_scaled_grouped_mm_is_refused_with_stack() -> None:
    a8, b8 = _ab(E4)
    raises(ArgumentTypeError, "b", lambda: warploom.scaled_grouped_mm(a8, tuple(b8.unbind(0)), torch.ones(M),
                                                                      torch.ones(G, N), _offs(10, 20, 40)),
           match="torch.stack(ws).transpose(-2, -1)")


# MX e8m0 scales on a K-grouped (2-D x 2-D) call: the fix was scale_a.float(), after which a fp4 a is refused and an
# fp8 one's scales have the wrong shape.
@pytest.mark.parametrize("which", ["both", "scale_b"])
def test_mx_scales_on_a_k_grouped_call_are_refused_as_not_built(which: str) -> None:
    a = torch.randn(16, 256).to(E4)
    b = torch.randn(N, 256).to(E4).t()
    sa = torch.ones(16, 8).to(E8) if which == "both" else torch.ones(16, 2)
    sb = torch.ones(8, N).to(E8)
    arg = "scale_a" if which == "both" else "scale_b"
    e = raises(ScaleError, arg, lambda: warploom.scaled_grouped_mm(a, b, sa, sb, _offs(128, 256)),
               match="K-grouped MX calls are not built")
    assert ".float()" not in str(e), e


# A misspelt keyword went to the epilogue operands, whose fix (drop it, or pass an epilogue) hid the parameter meant.
@pytest.mark.parametrize("kwarg,meant", [("offsets", "offs"), ("masked", "masked_m"), ("dtype", "out_dtype")])
def test_a_misspelt_keyword_names_the_parameter_meant(kwarg: str, meant: str) -> None:
    a, b = _ab()
    value: Any = torch.float32 if meant == "out_dtype" else _offs(10, 20, 40)
    offs = None if meant == "offs" else _offs(10, 20, 40)
    raises(InputError, kwarg, lambda: warploom.grouped_mm(a, b, offs, **{kwarg: value}),
           match=f"did you mean {meant}=?")


def test_a_misspelt_use_fast_accum_names_it() -> None:
    a8, b8 = _ab(E4)
    raises(InputError, "fast_accum", lambda: warploom.scaled_grouped_mm(a8, b8, torch.ones(M), torch.ones(G, N),
                                                                        _offs(10, 20, 40), fast_accum=True),
           match="did you mean use_fast_accum=?")


def test_an_epilogue_operand_without_an_epilogue_suggests_no_parameter() -> None:
    a, b = _ab()
    e = raises(InputError, "bias", lambda: warploom.grouped_mm(a, b, _offs(10, 20, 40), bias=torch.randn(N)))
    assert "did you mean" not in str(e), e


# An expanded b, one weight for every expert (stride 0 along G), was accepted: the simulator reads it by its strides,
# but B's 3-D TMA descriptor cannot take a zero stride (the driver's tensor-map strides nest). Refused, with a copy
# that keeps b's layout and runs.
@pytest.mark.parametrize("how", ["w.t().expand", "a 1-expert b expanded"])
def test_an_expanded_b_is_refused_with_a_copy_that_runs(how: str) -> None:
    torch.manual_seed(0)
    a = torch.randn(M, K).to(BF16)
    if how == "w.t().expand":  # K-major: the (N, K) weight's transpose, as a model holds it
        w = torch.randn(N, K).to(BF16).t()
        b, fix = w.expand(G, K, N), "b.transpose(-2, -1).contiguous().transpose(-2, -1)"
    else:  # N-major: a contiguous (1, K, N) expanded to G experts
        one = torch.randn(1, K, N).to(BF16)
        w, b, fix = one[0], one.expand(G, K, N), "b.contiguous()"
    offs = _offs(10, 20, 40)
    e = raises(AlignmentError, "b", lambda: warploom.grouped_mm(a, b, offs), match="a nonzero expert stride")
    assert f"got strides {tuple(b.stride())}, an expanded tensor. Fix: pass {fix}" in str(e), e
    fixed = b.transpose(-2, -1).contiguous().transpose(-2, -1) if "transpose" in fix else b.contiguous()
    assert fixed.stride(0) != 0 and fixed.stride() != b.stride()
    torch.testing.assert_close(warploom.grouped_mm(a, fixed, offs).float(), a.float() @ w.float(), atol=0.1,
                               rtol=0.02)


def test_an_expanded_fp8_b_is_refused_with_a_k_major_copy() -> None:
    a8, b8 = _ab(E4)
    b = b8[:1].expand(G, K, N)  # (one expert's (N, K) weight seen K-major, shared)
    args = (torch.ones(M), torch.ones(G, N), _offs(10, 20, 40))
    raises(AlignmentError, "b", lambda: warploom.scaled_grouped_mm(a8, b, *args),
           match="b.transpose(-2, -1).contiguous().transpose(-2, -1)")
    grouped_call(a8, b.transpose(-2, -1).contiguous().transpose(-2, -1), args[2], None, None, *args[:2], scaled=True)
