"""Fused epilogues written as Python functions: ``fn(acc, **operands)`` over torch tensors.

The pipeline, one file each:

    classify.py   user operand tensors -> OperandSpec (kind DENSE / COLUMN / ROW / SCALAR by shape and strides)
    capture.py    fn + specs -> EpilogueGraph (torch.fx tracing, type promotion as torch does it)
    graph.py      the typed SSA IR and its self-check; printer.py its text form
    reference.py  the IR's meaning in torch (evaluate, evaluate_tile): the simulator's and the tests' oracle
    gluon.py      the IR as Gluon statements on register values (emit, load_operand)
    standalone.py a small elementwise Gluon kernel around emit, for compile-only and GPU tests

Nothing here imports Triton (emitted code is text); graph.py, operands.py, printer.py and gluon.py do not
import torch either.
"""

from __future__ import annotations

from warploom.epilogue.capture import capture
from warploom.epilogue.classify import classify, classify_all
from warploom.epilogue.gluon import emit, load_operand
from warploom.epilogue.graph import EpilogueGraph, Output
from warploom.epilogue.operands import OperandKind, OperandSpec
from warploom.epilogue.printer import inline, text
from warploom.epilogue.reference import evaluate, evaluate_tile

__all__ = ["EpilogueGraph", "OperandKind", "OperandSpec", "Output", "capture", "classify", "classify_all", "emit",
           "evaluate", "evaluate_tile", "inline", "load_operand", "text"]
