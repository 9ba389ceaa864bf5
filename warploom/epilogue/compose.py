"""Put scaled_mm's own epilogue (scales, bias) in front of a user's epilogue graph.

A fused scaled_mm hands the user's function the accumulator torch._scaled_mm would store, before its output
cast: ``acc * scale_a * scale_b + bias`` in fp32. Rather than a second mechanism beside the graph, those
become ordinary operands (named scale_a, scale_b, bias, classified like any other: a rowwise scale_a is a
column vector, scale_b a row vector) and nodes in front of the user's, so the kernel, the simulator and the
reference all see one graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from warploom.epilogue import graph as eg
from warploom.epilogue.builder import Builder, remap
from warploom.epilogue.operands import OperandSpec


def with_prologue(g: eg.EpilogueGraph, scale_a: OperandSpec | None, scale_b: OperandSpec | None,
                  bias: OperandSpec | None) -> eg.EpilogueGraph:
    """`g` applied to ``acc * scale_a * scale_b (+ bias)``; those given are operands of the result. Blockwise
    scales are applied in the mainloop, so their accumulator arrives scaled: scale_a = scale_b = None."""
    extra: Sequence[OperandSpec] = tuple(s for s in (scale_a, scale_b, bias) if s is not None)
    taken = {s.name for s in g.operands} & {s.name for s in extra}
    if taken:
        raise ValueError(f"operand names {sorted(taken)} are reserved for scaled_mm's own scales and bias")
    b = Builder((*extra, *g.operands))
    x = b.acc()
    if scale_a is not None and scale_b is not None:
        x = b.add(eg.Binary(eg.BinaryOp.MUL, b.add(eg.Binary(eg.BinaryOp.MUL, x, b.operand(scale_a.name))),
                            b.operand(scale_b.name)))
    if bias is not None:
        x = b.add(eg.Binary(eg.BinaryOp.ADD, x, b.operand(bias.name)))
    new: dict[int, int] = {}
    for i, nd in enumerate(g.nodes):
        new[i] = x if isinstance(nd, eg.Acc) else b.add(remap(nd, new))
    return b.finish([replace(o, value=new[o.value]) for o in g.outputs])
