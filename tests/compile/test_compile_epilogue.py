"""Compile-only tier for the epilogue emitter: one small elementwise kernel per op, operand kind and output dtype,
cross-compiled for sm_90a, each checked for the PTX instruction that gives the op its meaning.

One kernel per case, so a failure names the op whose emitted Gluon Triton rejects. About 40 kernels, ~0.5 s each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import standalone
from warploom.epilogue.builder import Builder
from warploom.epilogue.classify import classify
from warploom.epilogue.operands import OperandKind

M, N = 256, 512
OPERANDS = {  # meta tensors: classification and code generation never read data
    "dense": torch.empty(M, N, dtype=torch.float16, device="meta"),
    "column": torch.empty(M, 1, device="meta"),
    "row": torch.empty(N, dtype=torch.bfloat16, device="meta"),
    "scalar": torch.empty((), device="meta"),
}
SPECS = [classify(k, v, (M, N)) for k, v in OPERANDS.items()]


def one(make: Callable[..., eg.Ref], out: DType | None = None) -> eg.EpilogueGraph:
    """A graph computing ``make(b, x)`` where x = acc + dense, with the given output dtype."""
    b = Builder(SPECS)
    x = b.add(eg.Binary(eg.BinaryOp.ADD, b.acc(), b.operand("dense")))
    return b.finish([eg.Output(make(b, x), out)])


CASES: list[tuple[str, eg.EpilogueGraph, str]] = [
    *[(f"unary_{op.value}", one(lambda b, x, op=op: b.add(eg.Unary(op, x))), "") for op in eg.UnaryOp],
    *[(f"binary_{op.value}_{k.value}", one(lambda b, x, op=op, k=k: b.add(eg.Binary(op, x, b.operand(k.value)))), "")
      for op in eg.BinaryOp for k in (OperandKind.ROW, OperandKind.COLUMN, OperandKind.SCALAR)],
    *[(f"compare_{op.value}", one(lambda b, x, op=op: b.add(eg.Where(
        b.add(eg.Compare(op, x, b.operand("row"))), x, b.const(0.0)))), "selp") for op in eg.CompareOp],
    *[(f"cast_{d.value}", one(lambda b, x, d=d: b.add(eg.Cast(x, d))), f"cvt.rn{'.satfinite' if d.is_fp8 else ''}")
      for d in eg.CAST_DTYPES],
    ("clamp_both", one(lambda b, x: b.add(eg.Clamp(x, -1.0, 1.0))), "max.NaN.f32"),
    ("clamp_lo", one(lambda b, x: b.add(eg.Clamp(x, 0.0, None))), "max.NaN.f32"),
    ("clamp_hi", one(lambda b, x: b.add(eg.Clamp(x, None, 6.0))), "min.NaN.f32"),
    *[(f"pow_{e}", one(lambda b, x, e=e: b.add(eg.Pow(x, e))), "")
      for e in (0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 2.5, -3.0)],
    *[(f"out_{d.value}", one(lambda b, x: x, d), "") for d in eg.OUTPUT_DTYPES],
    ("out_row_broadcast", one(lambda b, x: b.add(eg.Unary(eg.UnaryOp.EXP, b.operand("row")))), ""),
    ("out_scalar_broadcast", one(lambda b, x: b.add(eg.Unary(eg.UnaryOp.NEG, b.operand("scalar")))), ""),
    ("non_finite_constants", one(lambda b, x: b.add(eg.Where(b.add(eg.Compare(eg.CompareOp.LT, x, b.const(
        float("-inf")))), b.const(float("nan")), b.add(eg.Clamp(x, None, float("inf")))))), ""),
]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Generated sources go to a private directory, not the user's warploom cache."""
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "warploom-cache"))
    yield


@pytest.mark.parametrize("g,instr", [(g, i) for _, g, i in CASES], ids=[n for n, _, _ in CASES])
@pytest.mark.parametrize("out_dtype", [DType.BF16])
def test_epilogue_kernel_cross_compiles(g: eg.EpilogueGraph, instr: str, out_dtype: DType) -> None:
    ptx = standalone.cross_compile(standalone.source(g, out_dtype)).asm["ptx"]
    assert ".target sm_90a" in ptx
    assert instr in ptx, f"{instr} not in the PTX"
