"""The verifier's rules for planner rule 29's first pass (`ir.Module.amax_pass`): a rowwise quantization whose rows
span tiles along N, each tile adding its columns' row amax to a workspace by an atomic max (`ir.AtomicAmax`).

Allowed (per tile of the first pass, for each stored accumulator):

    fold_amax acc[cols 0/8]; apply_epilogue acc[cols 0/8]; ... tma_store y -> C
    ...
    fold_amax acc[cols 7/8]; apply_epilogue acc[cols 7/8]; ... tma_store y -> C
    atomic_amax acc -> amax[m]

Forbidden: an atomic_amax before every block of its accumulator folded (it would publish a part of the tile's
columns, and no later atomic adds the rest); a tile that folds and never publishes (its columns never reach the
amax: the cast kernel would scale by the other tiles' amax); an atomic_amax, or a graph output reading the amax
(q, s: the first pass stores y only), in a module that is not a first pass; a first pass whose graph's one output
is not fp32 (the workspace holds y exactly); store_scales there (the cast kernel stores s).
"""

from __future__ import annotations

from warploom.dtypes import DType
from warploom.epilogue.graph import OutputLayout
from warploom.ir import nodes as ir
from warploom.ir import printer


def check_amax_pass(m: ir.Module) -> list[str]:
    """Problems of a module's atomic amax ops and of a first pass's graph (module docstring)."""
    g, errs = m.spec.epilogue, []
    atomics = [(p, o) for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.AtomicAmax)]
    if m.amax_pass is None:
        errs += [f"partition {p.name}: {printer.op(o)} outside a rule 29 first pass (Module.amax_pass is None)"
                 for p, o in atomics]
        return errs
    if g is None or not g.rowwise():
        return errs + ["amax_pass: the spec's graph must hold a rowwise group amax (the first pass folds it)"]
    if g.reads_amax() or len(g.outputs) != 1 or g.outputs[0].layout is not OutputLayout.FULL \
            or g.outputs[0].dtype is not DType.FP32:
        errs.append("amax_pass: the graph's outputs must be y alone, fp32 and not reading the amax "
                    "(EpilogueGraph.amax_pass: the cast kernel computes q and s)")
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.StoreScales):
                errs.append(f"partition {p.name}: {printer.op(o)} in a first pass (the cast kernel stores s)")
        for loop in (s for s in p.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES):
            errs += _tile(p.name, loop.body)
    return errs


def _tile(part: str, body: tuple[ir.Stmt, ...]) -> list[str]:
    """One tile body: each accumulator's blocks all folded before its atomic_amax, and every fold published."""
    errs: list[str] = []
    folded: dict[str, set[int]] = {}  # per accumulator: blocks folded since its last atomic
    parts: dict[str, int] = {}
    for s in body:
        if isinstance(s, ir.FoldAmax):
            folded.setdefault(s.acc, set()).add(s.part)
            parts[s.acc] = s.parts
        elif isinstance(s, ir.AtomicAmax):
            got = folded.pop(s.acc, set())
            want = set(range(parts.get(s.acc, 1)))
            if got != want:
                errs.append(f"partition {part}: {printer.op(s)} after the fold_amax of blocks {sorted(got)} of "
                            f"{s.acc}, expected all of {sorted(want)}: the tile would publish part of its columns' "
                            "amax")
    errs += [f"partition {part}: fold_amax of {acc} blocks {sorted(b)} with no atomic_amax after them in the tile: "
             "its columns would never reach the row amax the cast kernel reads" for acc, b in folded.items() if b]
    return errs
