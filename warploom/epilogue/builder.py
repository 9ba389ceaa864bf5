"""Build an epilogue graph node by node: common subexpressions shared, pure-constant ones folded.

`capture` builds through it, and so can a pass or a test that makes graphs directly::

    b = Builder([bias_spec])
    y = b.add(eg.Unary(eg.UnaryOp.RELU, b.add(eg.Binary(eg.BinaryOp.ADD, b.acc(), b.operand("bias")))))
    g = b.finish([eg.Output(y)])

`add` returns the existing node for a structurally equal one (hash-consing: equal nodes have equal inputs,
so one pass in definition order finds every common subexpression), and replaces a node whose inputs are all
constants by the constant `reference.apply` computes. `finish` keeps what the outputs read, renumbered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import reference
from warploom.epilogue.operands import OperandSpec


class Builder:
    def __init__(self, specs: Sequence[OperandSpec] = ()) -> None:
        self.specs = tuple(specs)
        self.nodes: list[eg.Node] = []
        self._index: dict[eg.Node, eg.Ref] = {}

    def add(self, nd: eg.Node) -> eg.Ref:
        """The ref of `nd`: an existing equal node's, a folded constant's, or a new node's."""
        refs = eg.inputs(nd)
        consts = [c for c in (self.nodes[r] for r in refs) if isinstance(c, eg.Const)]
        if refs and len(consts) == len(refs):
            v = reference.apply(nd, [reference.const(c.value) for c in consts])
            nd = eg.Const(bool(v.item()) if v.dtype == torch.bool else float(v.item()))
        if nd not in self._index:
            self._index[nd] = len(self.nodes)
            self.nodes.append(nd)
        return self._index[nd]

    def acc(self) -> eg.Ref:
        return self.add(eg.Acc())

    def operand(self, name: str) -> eg.Ref:
        return self.add(eg.Operand(name, self.spec(name).kind))

    def const(self, v: float | bool) -> eg.Ref:
        return self.add(eg.Const(v))

    def spec(self, name: str) -> OperandSpec:
        for s in self.specs:
            if s.name == name:
                return s
        raise KeyError(f"no operand named {name!r}")

    def round(self, ref: eg.Ref, dtype: DType) -> eg.Ref:
        """`ref` rounded to `dtype`, with no node where it already is (fp32, a cast to it, an operand of it)."""
        if dtype is DType.FP32:
            return ref
        nd = self.nodes[ref]
        if isinstance(nd, eg.Cast) and nd.dtype is dtype:
            return ref
        if isinstance(nd, eg.Operand) and self.spec(nd.name).dtype is dtype:
            return ref
        return self.add(eg.Cast(ref, dtype))

    def live(self, outputs: Sequence[eg.Output]) -> set[int]:
        """The nodes `outputs` read, themselves included."""
        live: set[int] = set()
        stack = [o.value for o in outputs]
        while stack:
            r = stack.pop()
            if r not in live:
                live.add(r)
                stack.extend(eg.inputs(self.nodes[r]))
        return live

    def finish(self, outputs: Sequence[eg.Output]) -> eg.EpilogueGraph:
        """The graph of `outputs`: only the nodes they read, renumbered in order, and the operands those name
        (in the builder's operand order)."""
        live = self.live(outputs)
        new = {old: i for i, old in enumerate(sorted(live))}
        kept = tuple(remap(self.nodes[old], new) for old in sorted(live))
        used = {nd.name for nd in kept if isinstance(nd, eg.Operand)}
        return eg.EpilogueGraph(kept, tuple(replace(o, value=new[o.value]) for o in outputs),
                                tuple(s for s in self.specs if s.name in used))


def remap(nd: eg.Node, new: dict[int, int]) -> eg.Node:
    match nd:
        case eg.Unary():
            return eg.Unary(nd.op, new[nd.x])
        case eg.Binary():
            return eg.Binary(nd.op, new[nd.x], new[nd.y])
        case eg.Compare():
            return eg.Compare(nd.op, new[nd.x], new[nd.y])
        case eg.Where():
            return eg.Where(new[nd.cond], new[nd.x], new[nd.y])
        case eg.Cast():
            return eg.Cast(new[nd.x], nd.dtype)
        case eg.Clamp():
            return eg.Clamp(new[nd.x], nd.lo, nd.hi)
        case eg.Pow():
            return eg.Pow(new[nd.x], nd.exponent)
        case eg.GroupAmax():
            return eg.GroupAmax(new[nd.x], nd.width)
        case eg.GateUpHalf():
            return eg.GateUpHalf(new[nd.x], nd.half, nd.block)
        case _:
            return nd
