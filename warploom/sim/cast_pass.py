"""Planner rule 29's two passes on the simulator: the first pass's amax workspace, and the cast pass after it.

The first pass is an ordinary module (`ir.Module.amax_pass`): its one output is y's fp32 workspace, and each tile's
`atomic_amax` adds its row amax to the (M,) amax workspace (`CtaData.atomic_amax`), counting the columns it covers.
Around the launch this file models what the launcher does (runtime/launch.py `_two_passes`): the amax workspace as
the launch finds it (zeroed per call; a kept one is AMAX_STALE when it is not), and the cast kernel after the whole
launch (backends/gluon_cast.py), whose numbers are `warploom.quantization.cast_rows` of the workspace. A row whose
amax misses some of its N columns when the cast pass reads it (a tile that skipped its atomic_amax, or a cast pass
run before every tile along N finished: a sample of the CTAs) is AMAX_INCOMPLETE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from warploom.backends.gluon_cast import unit_columns
from warploom.errors import InputError, ShapeError
from warploom.ir import nodes as ir
from warploom.quantization import cast_rows
from warploom.sim.findings import FindingKind, FindingSink, SimFinding
from warploom.sim.numerics import Operands

CAST = -1  # the cta of a finding of the cast pass (a kernel after the first pass's launch)


def final_outputs(p: ir.AmaxPass, m: int, n: int, out: torch.Tensor | None,
                  outs: Sequence[torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The call's outputs q (M, N) fp8 and s (M, 1) fp32: as given (`out`: q; `outs`: both, written in place) or
    NaN-filled."""
    given = tuple(outs) if outs is not None else (out,) if out is not None else ()
    want = (((m, n), p.fp8.torch), ((m, 1), torch.float32))
    if len(given) > 2:
        raise InputError("outs", "at most two tensors, q (M, N) fp8 and s (M, 1) fp32", f"{len(given)}",
                         "pass (q, s)")
    for j, (t, (shape, dt)) in enumerate(zip(given, want, strict=False)):
        if t.dtype != dt or tuple(t.shape) != shape:
            raise ShapeError(f"outs[{j}]", f"{dt} of shape {shape}", f"{t.dtype} of shape {tuple(t.shape)}",
                             f"allocate it as torch.empty({shape}, dtype={dt})")
    if given:  # (the cast kernel writes q's columns at unit stride: the launcher refuses any other q, as here)
        unit_columns(given[0], "outs[0]")
    q = given[0] if given else torch.full((m, n), float("nan")).to(p.fp8.torch)
    s = given[1] if len(given) > 1 else torch.full((m, 1), float("nan"))
    return q, s


def start(ops: Operands, amax: torch.Tensor | None, m: int, sink: FindingSink) -> Operands:
    """`ops` with the amax workspace the launch finds: `amax` (M,) fp32 as kept by the caller (written in place),
    or a fresh zeroed one (the launcher's per-call torch.zeros). A kept one holding anything but zeros is stale."""
    if amax is None:
        amax = torch.zeros(m)
    elif tuple(amax.shape) != (m,) or amax.dtype != torch.float32:
        raise InputError("amax", f"an fp32 tensor of shape ({m},)", f"{amax.dtype} of shape {tuple(amax.shape)}",
                         "pass torch.zeros(M) (the amax workspace of rule 29's first pass)")
    dirty = (amax != 0).nonzero().flatten()  # (NaN != 0 too)
    if dirty.numel():
        sink.add(SimFinding(FindingKind.AMAX_STALE, f"the amax workspace holds {dirty.numel()} nonzero row(s) when "
                            f"the first pass starts (row {int(dirty[0])}: {float(amax[dirty[0]])}): zero it per call",
                            CAST, partition="launch"))
    return replace(ops, amax=amax, amax_cols=torch.zeros(m, dtype=torch.int64))


def run(p: ir.AmaxPass, ops: Operands, y: torch.Tensor, final: tuple[torch.Tensor, torch.Tensor], n: int,
        sink: FindingSink, rows: torch.Tensor | None = None) -> None:
    """The cast pass after the first pass's launch: every row's amax must hold its N columns; q and s written into
    `final` from the workspace `y` and the amax as they are. A grouped module's (`rows`: (M,) bool, the rows of some
    group) casts those rows only, as its cast kernel does (backends/gluon_cast.py), and no other row's amax may have
    been added to (a tile's atomic_amax not clipped at its group's end row: OUTPUT_COVERAGE)."""
    assert ops.amax is not None and ops.amax_cols is not None
    owned = torch.ones(ops.amax.shape[0], dtype=torch.bool) if rows is None else rows
    short = ((ops.amax_cols != n) & owned).nonzero().flatten()
    if short.numel():
        r = int(short[0])
        sink.add(SimFinding(FindingKind.AMAX_INCOMPLETE, f"the cast pass reads the amax of {short.numel()} row(s) "
                            f"that miss columns or hold others (row {r}: {int(ops.amax_cols[r])} of N={n} added): "
                            "every tile along N must add its atomic_amax, and only its own group's rows, before the "
                            "cast kernel runs", CAST, partition="cast"))
    stray = ((ops.amax_cols != 0) & ~owned).nonzero().flatten()
    if stray.numel():
        r = int(stray[0])
        sink.add(SimFinding(FindingKind.OUTPUT_COVERAGE, f"the amax workspace's rows of no group were added to "
                            f"({stray.numel()} row(s); row {r}: {int(ops.amax_cols[r])} columns): an atomic_amax must "
                            "stop at its group's end row", CAST, partition="cast"))
    q, s = cast_rows(y[owned], ops.amax[owned].reshape(-1, 1), p.fp8)
    final[0][owned] = q
    final[1][owned] = s
