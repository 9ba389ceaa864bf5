"""Put scaled_mm's own epilogue (scales, bias) in front of a user's epilogue graph.

A fused scaled_mm hands the user's function the accumulator torch._scaled_mm would store, before its output
cast: ``acc * scale_a * scale_b + bias`` in fp32. Rather than a second mechanism beside the graph, those
become ordinary operands (named scale_a, scale_b, bias, classified like any other: a rowwise scale_a is a
column vector, scale_b a row vector) and nodes in front of the user's, so the kernel, the simulator and the
reference all see one graph.
"""

from __future__ import annotations

from collections.abc import Sequence

from warploom.epilogue import graph as eg
from warploom.epilogue.builder import Builder, _remap
from warploom.epilogue.operands import OperandSpec


def with_prologue(g: eg.EpilogueGraph, scale_a: OperandSpec, scale_b: OperandSpec,
                  bias: OperandSpec | None) -> eg.EpilogueGraph:
    """`g` applied to ``acc * scale_a * scale_b (+ bias)``; the three are operands of the result."""
    taken = {s.name for s in g.operands} & {scale_a.name, scale_b.name, *([bias.name] if bias else [])}
    if taken:
        raise ValueError(f"operand names {sorted(taken)} are reserved for scaled_mm's own scales and bias")
    extra: Sequence[OperandSpec] = (scale_a, scale_b, *([bias] if bias else []))
    b = Builder((*extra, *g.operands))
    x = b.add(eg.Binary(eg.BinaryOp.MUL, b.add(eg.Binary(eg.BinaryOp.MUL, b.acc(), b.operand(scale_a.name))),
                        b.operand(scale_b.name)))
    if bias is not None:
        x = b.add(eg.Binary(eg.BinaryOp.ADD, x, b.operand(bias.name)))
    new: dict[int, int] = {}
    for i, nd in enumerate(g.nodes):
        new[i] = x if isinstance(nd, eg.Acc) else b.add(_remap(nd, new))
    return b.finish([eg.Output(new[o.value], o.dtype) for o in g.outputs])
