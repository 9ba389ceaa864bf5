"""capture(): every supported op and spelling, type promotion, output dtypes, CSE and folding, and the errors.

Each case states the captured graph's one-line text form, so a test reads like the IR it pins.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue.builder import Builder
from warploom.epilogue.capture import SUPPORTED, capture
from warploom.epilogue.classify import classify
from warploom.epilogue.printer import inline
from warploom.errors import InputError, UnsupportedError

M, N = 4, 6
BF16, FP16 = torch.bfloat16, torch.float16

# Operands by parameter name: b a row (N,), c a column (M, 1), r dense (M, N), s a 0-D scalar, s1 a (1,) scalar.
OPERANDS = {"b": lambda: torch.randn(N), "c": lambda: torch.randn(M, 1), "r": lambda: torch.randn(M, N),
            "s": lambda: torch.randn(()), "s1": lambda: torch.randn(1)}


def cap(fn: Callable[..., Any], **override: torch.Tensor) -> eg.EpilogueGraph:
    """Capture `fn` with the standard operand for each of its parameters after acc (or an override)."""
    names = [p.name for p in list(inspect.signature(fn).parameters.values())[1:]
             if p.name in OPERANDS or p.name in override]
    ops = {n: override[n] if n in override else OPERANDS[n]() for n in names}
    return capture(fn, ops, out_shape=(M, N))


OPS: list[tuple[str, Callable[..., Any], str]] = [
    # arithmetic, with Python scalars on either side
    ("add", lambda acc, b: acc + b, "%0 = add acc, b; return %0"),
    ("torch.add", lambda acc, b: torch.add(acc, b), "%0 = add acc, b; return %0"),
    ("Tensor.add", lambda acc, b: acc.add(b), "%0 = add acc, b; return %0"),
    ("radd", lambda acc: 2 + acc, "%0 = add 2.0, acc; return %0"),
    ("sub", lambda acc, c: acc - c, "%0 = sub acc, c; return %0"),
    ("rsub", lambda acc: 2 - acc, "%0 = sub 2.0, acc; return %0"),
    ("torch.sub", lambda acc, r: torch.subtract(acc, r), "%0 = sub acc, r; return %0"),
    ("mul", lambda acc, s: acc * s, "%0 = mul acc, s; return %0"),
    ("rmul", lambda acc: 0.5 * acc, "%0 = mul 0.5, acc; return %0"),
    ("torch.mul", lambda acc, s1: torch.mul(acc, s1), "%0 = mul acc, s1; return %0"),
    ("div", lambda acc, r: acc / r, "%0 = div acc, r; return %0"),
    ("rdiv", lambda acc: 2 / acc, "%0 = div 1.0, acc; %1 = mul %0, 2.0; return %1"),  # torch's __rtruediv__
    ("torch.div", lambda acc: torch.div(acc, 3), "%0 = div acc, 3.0; return %0"),
    ("true_divide", lambda acc: acc.true_divide(3.0), "%0 = div acc, 3.0; return %0"),
    ("iadd", lambda acc, b: _iadd(acc, b), "%0 = add acc, b; return %0"),
    ("neg", lambda acc: -acc, "%0 = neg acc; return %0"),
    ("torch.neg", lambda acc: torch.neg(acc), "%0 = neg acc; return %0"),
    ("abs", lambda acc: abs(acc), "%0 = abs acc; return %0"),
    ("Tensor.abs", lambda acc: acc.abs(), "%0 = abs acc; return %0"),
    ("maximum", lambda acc, b: torch.maximum(acc, b), "%0 = maximum acc, b; return %0"),
    ("max2", lambda acc, c: torch.max(acc, c), "%0 = maximum acc, c; return %0"),
    ("minimum", lambda acc, b: acc.minimum(b), "%0 = minimum acc, b; return %0"),
    ("min2", lambda acc, r: torch.min(acc, r), "%0 = minimum acc, r; return %0"),
    # clamp and friends
    ("clamp", lambda acc: acc.clamp(-1, 1), "%0 = clamp acc, min=-1.0, max=1.0; return %0"),
    ("clamp_kw", lambda acc: torch.clamp(acc, min=0.0), "%0 = clamp acc, min=0.0; return %0"),
    ("clamp_max", lambda acc: acc.clamp(max=6), "%0 = clamp acc, max=6.0; return %0"),
    ("clip", lambda acc: torch.clip(acc, 0, 1), "%0 = clamp acc, min=0.0, max=1.0; return %0"),
    ("clamp_min", lambda acc: acc.clamp_min(0.5), "%0 = clamp acc, min=0.5; return %0"),
    ("torch.clamp_max", lambda acc: torch.clamp_max(acc, 2), "%0 = clamp acc, max=2.0; return %0"),
    ("clamp_tensors", lambda acc, b, c: torch.clamp(acc, min=b, max=c),
     "%0 = maximum acc, b; %1 = minimum %0, c; return %1"),
    ("relu6", lambda acc: F.relu6(acc), "%0 = clamp acc, min=0.0, max=6.0; return %0"),
    ("hardtanh", lambda acc: F.hardtanh(acc, -2.0), "%0 = clamp acc, min=-2.0, max=1.0; return %0"),
    # comparisons and where
    ("where", lambda acc, b: torch.where(acc > b, acc, b), "%0 = gt acc, b; %1 = where %0, acc, b; return %1"),
    ("where_scalars", lambda acc: torch.where(acc < 0, 0.0, 1.0),
     "%0 = lt acc, 0.0; %1 = where %0, 0.0, 1.0; return %1"),
    ("Tensor.where", lambda acc, c: acc.where(acc >= c, c), "%0 = ge acc, c; %1 = where %0, acc, c; return %1"),
    ("reversed_compare", lambda acc: torch.where(0 < acc, acc, 0.0),
     "%0 = gt acc, 0.0; %1 = where %0, acc, 0.0; return %1"),
    ("le", lambda acc: torch.where(torch.le(acc, 1), acc, 1.0), "%0 = le acc, 1.0; %1 = where %0, acc, 1.0; return %1"),
    ("eq", lambda acc, r: torch.where(acc == r, 0.0, acc), "%0 = eq acc, r; %1 = where %0, 0.0, acc; return %1"),
    ("ne", lambda acc, r: torch.where(acc.ne(r), acc, r), "%0 = ne acc, r; %1 = where %0, acc, r; return %1"),
    ("bool_promotes", lambda acc: (acc > 0) * acc,
     "%0 = gt acc, 0.0; %1 = where %0, 1.0, 0.0; %2 = mul %1, acc; return %2"),
    ("leaky_relu", lambda acc: F.leaky_relu(acc, 0.2),
     "%0 = gt acc, 0.0; %1 = mul acc, 0.2; %2 = where %0, acc, %1; return %2"),
    # activations and math
    ("relu", lambda acc: torch.relu(acc), "%0 = relu acc; return %0"),
    ("F.relu", lambda acc: F.relu(acc), "%0 = relu acc; return %0"),
    ("Tensor.relu", lambda acc: acc.relu(), "%0 = relu acc; return %0"),
    ("gelu", lambda acc: F.gelu(acc), "%0 = gelu acc; return %0"),
    ("gelu_none", lambda acc: F.gelu(acc, approximate="none"), "%0 = gelu acc; return %0"),
    ("gelu_tanh", lambda acc: F.gelu(acc, approximate="tanh"), "%0 = gelu_tanh acc; return %0"),
    ("nn.GELU", lambda acc: torch.nn.GELU(approximate="tanh")(acc), "%0 = gelu_tanh acc; return %0"),
    ("silu", lambda acc: F.silu(acc), "%0 = silu acc; return %0"),
    ("nn.SiLU", lambda acc: torch.nn.SiLU()(acc), "%0 = silu acc; return %0"),
    ("sigmoid", lambda acc: torch.sigmoid(acc), "%0 = sigmoid acc; return %0"),
    ("Tensor.sigmoid", lambda acc: acc.sigmoid(), "%0 = sigmoid acc; return %0"),
    ("F.sigmoid", lambda acc: F.sigmoid(acc), "%0 = sigmoid acc; return %0"),
    ("expit", lambda acc: torch.special.expit(acc), "%0 = sigmoid acc; return %0"),
    ("tanh", lambda acc: torch.tanh(acc), "%0 = tanh acc; return %0"),
    ("F.tanh", lambda acc: F.tanh(acc), "%0 = tanh acc; return %0"),
    ("exp", lambda acc: acc.exp(), "%0 = exp acc; return %0"),
    ("log", lambda acc: torch.log(acc), "%0 = log acc; return %0"),
    ("sqrt", lambda acc: torch.sqrt(acc), "%0 = sqrt acc; return %0"),
    ("rsqrt", lambda acc: torch.rsqrt(acc), "%0 = rsqrt acc; return %0"),
    ("Tensor.rsqrt", lambda acc: acc.rsqrt(), "%0 = rsqrt acc; return %0"),
    ("pow_op", lambda acc: acc ** 2.0, "%0 = pow acc, 2.0; return %0"),
    ("pow_int", lambda acc: acc ** 3, "%0 = pow acc, 3.0; return %0"),
    ("torch.pow", lambda acc: torch.pow(acc, 0.5), "%0 = pow acc, 0.5; return %0"),
    ("Tensor.pow", lambda acc: acc.pow(-1.5), "%0 = pow acc, -1.5; return %0"),
    ("square", lambda acc: torch.square(acc), "%0 = mul acc, acc; return %0"),
    ("reciprocal", lambda acc: acc.reciprocal(), "%0 = div 1.0, acc; return %0"),
    # casts in the middle round; a final one is the output's dtype
    ("cast_mid_bf16", lambda acc: acc.to(BF16).float() * 2, "%0 = cast.bf16 acc; %1 = mul %0, 2.0; return %1"),
    ("cast_mid_fp16", lambda acc: acc.half().float() + 1, "%0 = cast.fp16 acc; %1 = add %0, 1.0; return %1"),
    ("cast_mid_e4m3", lambda acc: acc.to(torch.float8_e4m3fn).to(torch.float32) * 2,
     "%0 = cast.e4m3 acc; %1 = mul %0, 2.0; return %1"),
    ("out_bf16", lambda acc: acc.to(BF16), "return acc as bf16"),
    ("out_fp16", lambda acc: acc.half(), "return acc as fp16"),
    ("out_fp32", lambda acc: (acc + 1).float(), "%0 = add acc, 1.0; return %0 as fp32"),
    ("out_e4m3", lambda acc: acc.to(torch.float8_e4m3fn), "return acc as e4m3"),
    ("cast_mid_e5m2", lambda acc: acc.to(torch.float8_e5m2).float() + 1, "%0 = cast.e5m2 acc; %1 = add %0, 1.0; "
     "return %1"),
    ("out_e5m2", lambda acc: acc.to(torch.float8_e5m2), "return acc as e5m2"),
    ("out_dtype_kw", lambda acc: acc.to(dtype=BF16), "return acc as bf16"),
    ("out_acc_dtype", lambda acc, r: (acc + r).to(acc.dtype), "%0 = add acc, r; return %0 as fp32"),
    ("out_type_as", lambda acc, r: acc.type_as(r), "return acc as fp32"),
    ("out_double_round", lambda acc: acc.to(BF16).to(FP16), "%0 = cast.bf16 acc; return %0 as fp16"),
    ("out_bool_cast", lambda acc: (acc > 0).to(BF16), "%0 = gt acc, 0.0; %1 = where %0, 1.0, 0.0; return %1 as bf16"),
    # a tensor constant is a constant
    ("tensor_const", lambda acc: acc * torch.tensor(2.0), "%0 = mul acc, 2.0; return %0"),
    ("math_const", lambda acc: acc * math.sqrt(2.0), "%0 = mul acc, 1.4142135623730951; return %0"),
]


def _iadd(acc: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    acc += b  # traced as acc + b: the function's own variable is rebound, nothing is mutated
    return acc


@pytest.mark.parametrize("fn,expected", [(f, e) for _, f, e in OPS], ids=[i for i, _, _ in OPS])
def test_op(fn: Callable[..., Any], expected: str) -> None:
    assert inline(cap(fn)) == expected


def test_every_graph_op_is_reachable_from_torch() -> None:
    graphs = [cap(f) for _, f, _ in OPS]
    seen: set[object] = set()
    for g in graphs:
        for nd in g.nodes:
            seen.add(getattr(nd, "op", type(nd)))
            if isinstance(nd, eg.Cast):
                seen.add(nd.dtype)
    want = {*eg.UnaryOp, *eg.BinaryOp, *eg.CompareOp, eg.Where, eg.Clamp, eg.Pow, eg.Acc, eg.Operand, eg.Const,
            *eg.CAST_DTYPES}
    assert want <= seen, want - seen


def test_headline_example() -> None:
    g = cap(lambda acc, b, r: F.gelu(acc + b) * 0.5 + r)
    assert inline(g) == "%0 = add acc, b; %1 = gelu %0; %2 = mul %1, 0.5; %3 = add %2, r; return %3"
    assert [s.name for s in g.operands] == ["b", "r"]


def test_several_outputs() -> None:
    g = cap(lambda acc, b: (acc + b, F.gelu(acc + b).to(BF16)))
    assert inline(g) == "%0 = add acc, b; %1 = gelu %0; return %0, %1 as bf16"
    g = cap(lambda acc: [acc, acc])
    assert inline(g) == "return acc, acc"


def test_an_operand_alone_may_be_an_output() -> None:
    assert inline(cap(lambda acc, b: (acc, b * 2))) == "%0 = mul b, 2.0; return acc, %0"


class TestTypePromotion:
    """The graph rounds where torch's eager result is 16-bit, and only there."""

    def test_bf16_operand_op_rounds(self) -> None:
        g = cap(lambda acc, b: acc + b * 2, b=torch.randn(N, dtype=BF16))
        assert inline(g) == "%0 = mul b, 2.0; %1 = cast.bf16 %0; %2 = add acc, %1; return %2"

    def test_bf16_with_fp32_acc_is_fp32(self) -> None:
        assert inline(cap(lambda acc, b: acc * b, b=torch.randn(N, dtype=BF16))) == "%0 = mul acc, b; return %0"

    def test_bf16_with_fp16_is_fp32(self) -> None:
        g = cap(lambda acc, b, c: acc + b * c, b=torch.randn(N, dtype=BF16), c=torch.randn(M, 1, dtype=FP16))
        assert inline(g) == "%0 = mul b, c; %1 = add acc, %0; return %1"

    def test_zero_dim_fp32_does_not_promote_bf16_and_is_rounded_to_it(self) -> None:
        # torch: a 0-D tensor does not raise a dimensioned tensor's dtype within the float category, and inputs
        # are converted to the op's dtype first.
        g = cap(lambda acc, b, s: acc + b * s, b=torch.randn(N, dtype=BF16))
        assert inline(g) == "%0 = cast.bf16 s; %1 = mul b, %0; %2 = cast.bf16 %1; %3 = add acc, %2; return %3"

    def test_python_numbers_are_not_rounded(self) -> None:
        g = cap(lambda acc, b: acc + b * 0.1, b=torch.randn(N, dtype=BF16))
        assert inline(g) == "%0 = mul b, 0.1; %1 = cast.bf16 %0; %2 = add acc, %1; return %2"

    def test_comparison_in_the_common_dtype(self) -> None:
        g = cap(lambda acc, b, s: torch.where(b > s, acc, 0.0), b=torch.randn(N, dtype=BF16))
        assert inline(g) == "%0 = cast.bf16 s; %1 = gt b, %0; %2 = where %1, acc, 0.0; return %2"

    def test_reciprocal_of_a_number_rounds_twice(self) -> None:
        g = cap(lambda acc, b: acc + 3 / b, b=torch.randn(N, dtype=BF16))
        assert inline(g) == ("%0 = div 1.0, b; %1 = cast.bf16 %0; %2 = mul %1, 3.0; %3 = cast.bf16 %2; "
                             "%4 = add acc, %3; return %4")

    def test_16_bit_cube_and_inverse_square_round_the_square(self) -> None:
        g = cap(lambda acc, b: acc + b ** 3 + b ** -2 + b ** 2 + b ** 1.5, b=torch.randn(N, dtype=FP16))
        assert inline(g) == (
            "%0 = mul b, b; %1 = cast.fp16 %0; %2 = mul %1, b; %3 = cast.fp16 %2; %4 = add acc, %3; "
            "%5 = div 1.0, %1; %6 = cast.fp16 %5; %7 = add %4, %6; %8 = pow b, 2.0; %9 = cast.fp16 %8; "
            "%10 = add %7, %9; %11 = pow b, 1.5; %12 = cast.fp16 %11; %13 = add %10, %12; return %13")

    def test_one_element_fp32_promotes_bf16(self) -> None:
        g = cap(lambda acc, b, s1: acc + b * s1, b=torch.randn(N, dtype=BF16))
        assert inline(g) == "%0 = mul b, s1; %1 = add acc, %0; return %1"

    def test_ops_after_a_cast_round_each_time(self) -> None:
        g = cap(lambda acc: F.relu(acc.to(BF16) * 3 + 1))
        assert inline(g) == ("%0 = cast.bf16 acc; %1 = mul %0, 3.0; %2 = cast.bf16 %1; %3 = add %2, 1.0; "
                             "%4 = cast.bf16 %3; %5 = relu %4; %6 = cast.bf16 %5; return %6")

    def test_bf16_operand_cast_to_bf16_is_free(self) -> None:
        assert inline(cap(lambda acc, b: acc + b.to(BF16), b=torch.randn(N, dtype=BF16))) == \
            "%0 = add acc, b; return %0"


def test_common_subexpressions_are_shared() -> None:
    g = cap(lambda acc, b: F.relu(acc + b) + F.relu(acc + b) * torch.sigmoid(acc + b))
    assert inline(g) == "%0 = add acc, b; %1 = relu %0; %2 = sigmoid %0; %3 = mul %1, %2; %4 = add %1, %3; return %4"


def test_unused_operands_and_nodes_are_dropped() -> None:
    def f(acc: Any, b: Any, c: Any) -> Any:
        unused = torch.exp(c) * acc  # traced, but no output reads it
        del unused
        return acc + b

    g = cap(f)
    assert inline(g) == "%0 = add acc, b; return %0"
    assert [s.name for s in g.operands] == ["b"]


class TestFolding:
    def test_builder_folds_constant_subexpressions(self) -> None:
        b = Builder()
        two = b.add(eg.Binary(eg.BinaryOp.ADD, b.const(1.0), b.const(1.0)))
        root2 = b.add(eg.Unary(eg.UnaryOp.SQRT, two))
        x = b.add(eg.Binary(eg.BinaryOp.MUL, b.acc(), b.add(eg.Cast(root2, DType.BF16))))
        cond = b.add(eg.Compare(eg.CompareOp.GT, two, b.const(0.0)))
        y = b.add(eg.Where(cond, x, b.const(0.0)))
        g = b.finish([eg.Output(y)])
        # sqrt(2) rounded to bf16 is 1.4140625; the where's constant-true condition folds to true
        assert inline(g) == "%0 = mul acc, 1.4140625; %1 = where true, %0, 0.0; return %1"

    def test_bool_of_a_constant_folds(self) -> None:
        g = cap(lambda acc: acc * (torch.tensor(1.0) > 0))
        assert inline(g) == "%0 = mul acc, 1.0; return %0"

    def test_zero_and_negative_zero_stay_apart(self) -> None:
        b = Builder()
        assert b.const(0.0) != b.const(-0.0)
        assert b.const(float("nan")) == b.const(float("nan"))


def test_specs_or_example_tensors() -> None:
    ops = {"b": torch.randn(N, dtype=BF16, device="meta"), "c": torch.randn(M, 1, device="meta")}
    from_tensors = capture(lambda acc, b, c: acc * c + b, ops, out_shape=(M, N))
    specs = [classify(k, v, (M, N)) for k, v in ops.items()]
    assert capture(lambda acc, b, c: acc * c + b, specs) == from_tensors
    assert from_tensors.operands == tuple(specs)


def test_function_signatures() -> None:
    def kwonly(x: Any, *, b: Any) -> Any:
        return x + b

    def defaults(acc: Any, b: Any, scale: float = 2.0) -> Any:
        return acc * scale + b

    assert inline(cap(kwonly)) == "%0 = add acc, b; return %0"
    assert inline(cap(defaults)) == "%0 = mul acc, 2.0; %1 = add %0, b; return %1"
    g = capture(lambda acc, **ops: acc + ops["b"], {"b": torch.randn(N)}, out_shape=(M, N))
    assert inline(g) == "%0 = add acc, b; return %0"


def test_graph_is_hashable_and_comparable() -> None:
    f = lambda acc, b: F.silu(acc) + b  # noqa: E731
    assert cap(f) == cap(f) and hash(cap(f)) == hash(cap(f))
    assert cap(f) != cap(lambda acc, b: F.silu(acc) - b)


# ---------------------------------------------------------------------------------------------
# Errors: each names what is at fault, what was expected, what came and the fix.


def raises(fn: Callable[..., Any], arg: str, *fragments: str, err: type[Exception] = UnsupportedError,
           **override: torch.Tensor) -> str:
    with pytest.raises(err) as ei:
        cap(fn, **override)
    msg = str(ei.value)
    assert msg.startswith(f"{arg}: expected "), msg
    assert "Fix: " in msg, msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


@pytest.mark.parametrize("fn,arg,fragment", [
    (lambda acc, r: torch.matmul(acc, r), "epilogue op torch.matmul", "got torch.matmul"),
    (lambda acc, r: acc @ r, "epilogue op operator.matmul", "got operator.matmul"),
    (lambda acc: torch.sum(acc), "epilogue op torch.sum", "compute it outside the epilogue"),
    (lambda acc: acc.sum(dim=1), "epilogue op Tensor.sum", "got Tensor.sum"),
    (lambda acc: acc.softmax(-1), "epilogue op Tensor.softmax", "got Tensor.softmax"),
    (lambda acc, b: acc + b[None, :], "epilogue op operator.getitem", "index operands before passing them"),
    (lambda acc: acc.t(), "epilogue op Tensor.t", "got Tensor.t"),
    (lambda acc: torch.erf(acc), "epilogue op torch.erf", "gelu (approximate='none' or 'tanh')"),
])
def test_unsupported_ops_name_the_op_and_list_the_supported(fn: Callable[..., Any], arg: str, fragment: str) -> None:
    msg = raises(fn, arg, fragment)
    assert SUPPORTED in msg


def test_in_place_ops() -> None:
    raises(lambda acc, b: acc.add_(b), "epilogue op Tensor.add_", "an in-place op", "x = x + y")
    raises(lambda acc: acc.relu_(), "epilogue op Tensor.relu_", "an in-place op")
    raises(lambda acc: F.relu(acc, inplace=True), "epilogue op torch.nn.functional.relu", "inplace=True")


def test_data_dependent_control_flow() -> None:
    def branchy(acc: Any) -> Any:
        return acc if acc.sum() > 0 else -acc

    def branchy2(acc: Any) -> Any:
        if acc[0, 0] > 0:
            return acc
        return -acc

    raises(branchy, "epilogue", "data-dependent control flow", "torch.where")
    raises(branchy2, "epilogue", "data-dependent control flow")


def test_python_math_on_tensors() -> None:
    raises(lambda acc: math.exp(acc), "epilogue op math.exp", "got math.exp")


def test_shape_access() -> None:
    raises(lambda acc: acc / acc.shape[1], "epilogue attribute .shape", "only .dtype")


def test_bad_arguments() -> None:
    raises(lambda acc: F.gelu(acc, approximate="erf"), "epilogue op torch.nn.functional.gelu",
           "approximate argument must be either none or tanh")
    raises(lambda acc, b: acc ** b, "epilogue op operator.pow", "got base a tensor, exponent a tensor")
    raises(lambda acc: 2 ** acc, "epilogue op operator.pow", "a constant Python number")
    raises(lambda acc: torch.div(acc, 2, rounding_mode="floor"), "epilogue op torch.div", "rounding_mode=None")
    raises(lambda acc, b: torch.add(acc, b, alpha=2), "epilogue op torch.add", "alpha=1")
    raises(lambda acc: torch.max(acc), "epilogue op torch.max", "the two-tensor form")
    raises(lambda acc: torch.maximum(acc, 0.0), "epilogue", "must be Tensor, not float")  # torch's own check
    raises(lambda acc: acc.clamp(), "epilogue op Tensor.clamp")


def test_bad_dtypes() -> None:
    raises(lambda acc: acc.double(), "epilogue op Tensor.double")
    raises(lambda acc: acc.to(torch.float64), "epilogue op Tensor.to", "a cast to torch.float64")
    raises(lambda acc: acc.to(torch.float8_e4m3fnuz), "epilogue op Tensor.to", "float8_e5m2")
    raises(lambda acc: acc.to(torch.int32), "epilogue op Tensor.to", "a cast to torch.int32")
    raises(lambda acc: acc.to("cpu"), "epilogue op Tensor.to", "leave devices out")
    raises(lambda acc: acc.to(torch.float8_e4m3fn) * 2, "epilogue op operator.mul", "cast float8 values back")


def test_bad_outputs() -> None:
    raises(lambda acc: acc > 0, "epilogue output 0", "a bool tensor", "mask.to(torch.bfloat16)")
    raises(lambda acc: (acc, 1.0), "epilogue output 1", "got float 1.0")
    raises(lambda acc: None, "epilogue output 0", "got NoneType None")
    raises(lambda acc: torch.tensor(3.0), "epilogue output 0", "got a constant")
    raises(lambda acc: acc * torch.ones(3), "epilogue constant", "shape (3,)")


def test_operand_and_parameter_mismatch() -> None:
    with pytest.raises(InputError, match=r"^bias: expected an operand bias=tensor.*Fix: pass bias=\.\.\."):
        capture(lambda acc, bias: acc + bias, [])
    with pytest.raises(InputError, match=r"^extra: expected an operand the epilogue takes.*Fix: remove extra="):
        capture(lambda acc: acc, {"extra": torch.randn(N)}, out_shape=(M, N))
    with pytest.raises(UnsupportedError, match=r"^epilogue: expected a function whose first parameter"):
        capture(lambda *, acc: acc, [])
    with pytest.raises(InputError, match=r"^epilogue: expected a function"):
        capture(3, [])  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"^out_shape: "):
        capture(lambda acc, b: acc + b, {"b": torch.randn(N)})
