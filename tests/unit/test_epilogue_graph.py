"""The epilogue IR checks itself, and prints to a deterministic text form (golden, via expecttest).

Refresh the inline goldens after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/unit -k epilogue``.
"""

# ruff: noqa: E501 - golden lines are as long as the printer and emitter write them

from __future__ import annotations

import expecttest
import pytest
import torch
import torch.nn.functional as F

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue.capture import capture
from warploom.epilogue.classify import classify
from warploom.epilogue.operands import OperandKind
from warploom.epilogue.printer import inline, text

M, N = 64, 128
ROW = classify("bias", torch.empty(N, dtype=torch.bfloat16, device="meta"), (M, N))


def graph(*nodes: eg.Node, outputs: tuple[eg.Output, ...] = (eg.Output(0),), operands: tuple = ()) -> eg.EpilogueGraph:
    return eg.EpilogueGraph(nodes, outputs, operands)


class TestVerify:
    def test_well_formed(self) -> None:
        g = graph(eg.Acc(), eg.Operand("bias", OperandKind.ROW), eg.Binary(eg.BinaryOp.ADD, 0, 1),
                  outputs=(eg.Output(2, DType.BF16),), operands=(ROW,))
        assert g.types() == (eg.ValueType.FLOAT,) * 3
        assert g.kinds() == (OperandKind.DENSE, OperandKind.ROW, OperandKind.DENSE)
        assert g.operand("bias") is ROW and g.uses_acc()

    @pytest.mark.parametrize("nodes,outputs,operands,problem", [
        ((eg.Unary(eg.UnaryOp.EXP, 0),), (eg.Output(0),), (), "inputs must be earlier nodes"),
        ((eg.Acc(), eg.Binary(eg.BinaryOp.ADD, 0, 2)), (eg.Output(1),), (), "inputs must be earlier nodes"),
        ((eg.Operand("bias", OperandKind.ROW),), (eg.Output(0),), (), "operand 'bias' has no spec"),
        ((eg.Operand("bias", OperandKind.COLUMN),), (eg.Output(0),), (ROW,), "is column but its spec says row"),
        ((eg.Acc(), eg.Where(0, 0, 0)), (eg.Output(1),), (), "input %0 must be bool"),
        ((eg.Acc(), eg.Compare(eg.CompareOp.LT, 0, 0), eg.Unary(eg.UnaryOp.EXP, 1)), (eg.Output(2),), (),
         "input %1 must be a float"),
        ((eg.Acc(), eg.Compare(eg.CompareOp.LT, 0, 0)), (eg.Output(1),), (), "output 0: %1 is a bool"),
        ((eg.Acc(),), (eg.Output(3),), (), "output 0: %3 is not a node"),
        ((eg.Acc(),), (), (), "no outputs"),
        ((eg.Acc(),), (eg.Output(0),), (ROW, ROW), "duplicate operand names"),
    ])
    def test_rejects(self, nodes: tuple, outputs: tuple, operands: tuple, problem: str) -> None:
        with pytest.raises(ValueError, match="invalid epilogue graph") as ei:
            eg.EpilogueGraph(nodes, outputs, operands)
        assert problem in str(ei.value)

    def test_nodes_check_their_attributes(self) -> None:
        with pytest.raises(ValueError, match="Cast to DType.FP32"):
            eg.Cast(0, DType.FP32)
        with pytest.raises(ValueError, match="Cast to DType.E8M0"):
            eg.Cast(0, DType.E8M0)
        with pytest.raises(ValueError, match="at least one bound"):
            eg.Clamp(0, None, None)
        with pytest.raises(TypeError, match="float or a bool"):
            eg.Const(1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="Output dtype"):
            eg.Output(0, DType.E8M0)

    def test_output_dtype_resolution(self) -> None:
        assert eg.Output(0).resolve(DType.FP16) is DType.FP16
        assert eg.Output(0, DType.E4M3).resolve(DType.FP16) is DType.E4M3


class TestPrinter(expecttest.TestCase):
    def test_headline(self) -> None:
        g = capture(lambda acc, bias, residual: (F.gelu(acc + bias, approximate="tanh") * 0.5 + residual,
                                                 (acc + bias).to(torch.bfloat16)),
                    {"bias": torch.empty(N, dtype=torch.bfloat16, device="meta"),
                     "residual": torch.empty(M, N, device="meta")}, out_shape=(M, N))
        self.assertExpectedInline(text(g), """\
epilogue(acc, bias: row bf16, residual: dense fp32):
  %0 = add acc, bias
  %1 = gelu_tanh %0
  %2 = mul %1, 0.5
  %3 = add %2, residual
  return %3, %0 as bf16
""")
        self.assertExpectedInline(inline(g), """%0 = add acc, bias; %1 = gelu_tanh %0; %2 = mul %1, 0.5; %3 = add %2, residual; return %3, %0 as bf16""")

    def test_fp8_scaled_mm_style(self) -> None:
        ops = {"scale_a": torch.empty(M, 1, device="meta"), "scale_b": torch.empty(1, N, device="meta"),
               "bias": torch.empty(N, dtype=torch.float16, device="meta"), "alpha": torch.empty((), device="meta")}
        g = capture(lambda acc, scale_a, scale_b, bias, alpha: (
            torch.where(acc * scale_a * scale_b + bias > 0, acc, alpha * acc).clamp(-6, 6) ** 2,
            F.silu(acc / alpha).to(torch.float8_e4m3fn)), ops, out_shape=(M, N))
        self.assertExpectedInline(text(g), """\
epilogue(acc, scale_a: column fp32, scale_b: row fp32, bias: row fp16, alpha: scalar fp32):
  %0 = mul acc, scale_a
  %1 = mul %0, scale_b
  %2 = add %1, bias
  %3 = gt %2, 0.0
  %4 = mul alpha, acc
  %5 = where %3, acc, %4
  %6 = clamp %5, min=-6.0, max=6.0
  %7 = pow %6, 2.0
  %8 = div acc, alpha
  %9 = silu %8
  return %7, %9 as e4m3
""")

    def test_constants(self) -> None:
        g = capture(lambda acc: torch.where(acc < float("-inf"), float("nan"), acc).clamp(max=float("inf")) - 0.0,
                    {}, out_shape=(M, N))
        self.assertExpectedInline(text(g), """\
epilogue(acc):
  %0 = lt acc, -inf
  %1 = where %0, nan, acc
  %2 = clamp %1, max=inf
  %3 = sub %2, 0.0
  return %3
""")

    def test_identity(self) -> None:
        self.assertExpectedInline(text(capture(lambda acc: acc, {}, out_shape=(M, N))), """\
epilogue(acc):
  return acc
""")
