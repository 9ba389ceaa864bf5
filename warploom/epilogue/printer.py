"""Deterministic text form of an epilogue graph, for goldens, the schedule printout and generated-code comments.

Leaves print inline where they are used (``acc``, an operand's name, a constant's literal); computed values
are numbered %0, %1, ... in definition order. For example::

    epilogue(acc, bias: row bf16, residual: dense fp32):
      %0 = add acc, bias
      %1 = gelu_tanh %0
      %2 = mul %1, 0.5
      %3 = add %2, residual
      return %3, %0 as bf16

The text depends only on the graph's structure, its operands' names, kinds (a grouped GEMM's per-expert operand
prints ``bias: row per group bf16``) and dtypes and its output dtypes, not on operand shapes or strides, so equal
texts mean the same generated epilogue code.
"""

from __future__ import annotations

import math

from warploom.epilogue import graph as eg
from warploom.epilogue.operands import ACC


def literal(v: float | bool) -> str:
    """A constant as it prints (and as Gluon source spells it, see `warploom.epilogue.gluon`)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if math.isfinite(v) else str(v)  # inf, -inf, nan


def names(g: eg.EpilogueGraph) -> tuple[str, ...]:
    """How each node is referred to: ``acc``, an operand name, a literal, or %k for a computed value."""
    out: list[str] = []
    k = 0
    for nd in g.nodes:
        match nd:
            case eg.Acc():
                out.append(ACC)
            case eg.Operand():
                out.append(nd.name)
            case eg.Const():
                out.append(literal(nd.value))
            case _:
                out.append(f"%{k}")
                k += 1
    return tuple(out)


def is_leaf(nd: eg.Node) -> bool:
    return isinstance(nd, (eg.Acc, eg.Operand, eg.Const))


def expr(nd: eg.Node, ns: tuple[str, ...]) -> str:
    """The right-hand side of a computed node, e.g. ``add acc, bias``."""
    match nd:
        case eg.Unary():
            return f"{nd.op.value} {ns[nd.x]}"
        case eg.Binary() | eg.Compare():
            return f"{nd.op.value} {ns[nd.x]}, {ns[nd.y]}"
        case eg.Where():
            return f"where {ns[nd.cond]}, {ns[nd.x]}, {ns[nd.y]}"
        case eg.Cast():
            return f"cast.{nd.dtype.value} {ns[nd.x]}"
        case eg.Clamp():
            bounds = [f"{k}={literal(v)}" for k, v in (("min", nd.lo), ("max", nd.hi)) if v is not None]
            return f"clamp {ns[nd.x]}, {', '.join(bounds)}"
        case eg.Pow():
            return f"pow {ns[nd.x]}, {literal(nd.exponent)}"
        case eg.GroupAmax():
            return f"group_amax {ns[nd.x]}" + (", row" if nd.width is None else
                                               "" if nd.width == eg.GROUP else f", width={nd.width}")
        case eg.GateUpHalf():
            return f"{nd.half.value}_half {ns[nd.x]}, block={nd.block}"
        case _:
            raise TypeError(f"{nd} is a leaf; it has no expression")


def line(g: eg.EpilogueGraph, i: int, ns: tuple[str, ...] | None = None) -> str:
    """Node `i` (a computed one) as ``%k = op args``."""
    ns = names(g) if ns is None else ns
    return f"{ns[i]} = {expr(g.nodes[i], ns)}"


def output(o: eg.Output, ns: tuple[str, ...]) -> str:
    layout = " per group" if o.layout is eg.OutputLayout.GROUPS else ""
    return ns[o.value] + ("" if o.dtype is None else f" as {o.dtype.value}") + layout


def header(g: eg.EpilogueGraph) -> str:
    ops = "".join(f", {s.name}: {s.kind.value}{' per group' if s.per_group else ''} {s.dtype.value}"
                  for s in g.operands)
    return f"epilogue({ACC}{ops})"


def text(g: eg.EpilogueGraph) -> str:
    """The multi-line form (ends with a newline)."""
    ns = names(g)
    body = [f"  {line(g, i, ns)}" for i, nd in enumerate(g.nodes) if not is_leaf(nd)]
    ret = "  return " + ", ".join(output(o, ns) for o in g.outputs)
    return "\n".join([header(g) + ":", *body, ret]) + "\n"


def inline(g: eg.EpilogueGraph) -> str:
    """One line, for the schedule IR's one-op-a-line printout: ``%0 = add acc, bias; return %0``."""
    ns = names(g)
    parts = [line(g, i, ns) for i, nd in enumerate(g.nodes) if not is_leaf(nd)]
    parts.append("return " + ", ".join(output(o, ns) for o in g.outputs))
    return "; ".join(parts)
