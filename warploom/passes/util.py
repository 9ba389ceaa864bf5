"""Small tree-rewriting helpers shared by the passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from warploom.ir import nodes as ir


def rewrite(body: tuple[ir.Stmt, ...], fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> tuple[ir.Stmt, ...]:
    """Replace every op (not loops) of `body` by the statements `fn` returns for it, recursively."""
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            out.append(replace(s, body=rewrite(s.body, fn)))
        else:
            out.extend(fn(s))
    return tuple(out)


def filter_ops(body: tuple[ir.Stmt, ...], keep: Callable[[ir.Op], bool]) -> tuple[ir.Stmt, ...]:
    """`body` with only the ops `keep` accepts; loops stay, even when emptied."""
    return rewrite(body, lambda o: (o,) if keep(o) else ())


def prune(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """`body` without the loops left empty (recursively)."""
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            inner = prune(s.body)
            if inner:
                out.append(replace(s, body=inner))
        else:
            out.append(s)
    return tuple(out)


def map_loops(body: tuple[ir.Stmt, ...], kind: ir.LoopKind,
              fn: Callable[[ir.Loop], tuple[ir.Stmt, ...]]) -> tuple[ir.Stmt, ...]:
    """Replace every loop of `kind` (after rewriting inside it) by what `fn` returns."""
    out: list[ir.Stmt] = []
    for s in body:
        if isinstance(s, ir.Loop):
            inner = replace(s, body=map_loops(s.body, kind, fn))
            out.extend(fn(inner) if s.kind is kind else (inner,))
        else:
            out.append(s)
    return tuple(out)
