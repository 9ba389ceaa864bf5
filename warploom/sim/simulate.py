"""Entry points: `simulate` (numerics and checks on one random schedule) and `check_protocol` (checks only,
several schedules).

The persistent grid is simulated CTA by CTA: CTAs share no shared memory and no barriers, and write
disjoint output tiles, so running them one after another loses no interleaving that matters. Two kinds of
launch link CTAs, which then run together: a stream-K launch's CTAs (their fixups wait on each other's
workspace flags: `run_linked`, all of them), and the CTAs of a thread-block cluster (`ir.Tiling.cluster`: the
lead's multicast copies fill every CTA's slots, and its cluster barriers count every CTA's arrivals;
sim/cluster.py), whose actions interleave at random; a cluster module always runs whole clusters, whatever
`ctas` picks.

A module with a fused epilogue (`GemmSpec.epilogue`) takes its operands by graph name (`operands=`; for
scaled_mm with an epilogue the scales and bias are among them) and writes one output per
`GemmSpec.output_dtypes()`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from warploom.checks import scale_parts
from warploom.epilogue.graph import OutputLayout
from warploom.epilogue.operands import OperandSpec
from warploom.errors import (
    ArgumentTypeError,
    DeviceError,
    DTypeError,
    InputError,
    ScaleError,
    ShapeError,
    rowwise_too_wide,
    split_k_mismatch,
)
from warploom.ir import nodes as ir
from warploom.ir.raster import Span, TileRef, cta_tiles, launch_grid, whole_tiles
from warploom.sim import cast_pass
from warploom.sim.cluster import run_cluster, whole_clusters
from warploom.sim.events import TimelineEvent
from warploom.sim.findings import FindingKind, FindingSink, ProtocolError, SimFinding
from warploom.sim.machine import Machine, StreamKState
from warploom.sim.numerics import CtaData, Operands, reduce_span, reduce_splits
from warploom.sim.program import CtaProgram, Geometry, MalformedError, launch_span
from warploom.sim.scheduler import StepLimitError, run_random, step_budget


@dataclass(frozen=True)
class SimReport:
    """What one simulation did and found.

    Attributes:
        module: the module's name.
        seed: the scheduling seed.
        ctas: the program ids simulated.
        steps: scheduler steps over all CTAs (one action each).
        k_steps: wgmma instructions executed (one per (tile, k) for a plain mainloop).
        findings: protocol violations, merged per (kind, partition, op).
        timeline: every op, wait and async operation with its steps.
        wall_s: wall time of the simulation.
    """

    module: str
    seed: int
    ctas: tuple[int, ...]
    steps: int
    k_steps: int
    findings: tuple[SimFinding, ...]
    timeline: tuple[TimelineEvent, ...] = field(repr=False)
    wall_s: float

    @property
    def ok(self) -> bool:
        return not self.findings

    def kinds(self) -> set[FindingKind]:
        return {f.kind for f in self.findings}

    def summary(self) -> str:
        head = (f"{self.module}: {len(self.ctas)} CTA(s), {self.steps} steps, {self.k_steps} k-steps, "
                f"seed {self.seed}, {self.wall_s:.2f} s: ")
        if self.ok:
            return head + "no findings"
        return head + f"{len(self.findings)} finding(s)\n" + "\n".join(f"  - {f}" for f in self.findings)


@dataclass(frozen=True)
class SimResult:
    """Attributes:
    outputs: the (M, N) results, one per `GemmSpec.output_dtypes()` in its dtype (one unless a fused epilogue
        has several); tiles of CTAs not simulated stay NaN.
    report: steps, findings and timeline."""

    outputs: tuple[torch.Tensor, ...]
    report: SimReport

    @property
    def output(self) -> torch.Tensor:
        """Output 0: C."""
        return self.outputs[0]

    @property
    def findings(self) -> tuple[SimFinding, ...]:
        return self.report.findings

    @property
    def ok(self) -> bool:
        return self.report.ok

    def raise_for_findings(self) -> SimResult:
        if self.report.findings:
            raise ProtocolError(self.report.module, self.report.findings)
        return self


def _check_args(module: ir.Module, a: torch.Tensor, b: torch.Tensor, scale_a: Any, scale_b: Any,
                bias: Any, globals_: Any = None) -> frozenset[ir.EpilogueStep]:
    spec = module.spec
    for arg, t, want in (("a", a, spec.a_dtype), ("b", b, spec.b_dtype)):
        if t.dim() != 2:
            raise ShapeError(arg, "a 2-D tensor", f"shape {tuple(t.shape)}", f"pass a 2-D {arg}")
        if t.dtype != want.torch:
            raise DTypeError(arg, f"{want.torch} as module {module.name} was planned for", str(t.dtype),
                             f"convert {arg} with {arg}.to({want.torch})")
    # (K in values: an e2m1 operand's rows are K/2 bytes; MX fp8 x fp4 packs one operand only)
    k, kb = a.shape[1] * (2 if spec.fp4_a else 1), b.shape[0] * (2 if spec.fp4_b else 1)
    if k != kb:
        rows = k // 2 if spec.fp4_b else k
        raise ShapeError("b", f"shape ({rows}, N) for K = {k}", f"shape {tuple(b.shape)}", "pass b as (K, N)")
    if not module.tiling.splits_evenly(a.shape[1]):
        raise split_k_mismatch(module.tiling.bk, module.tiling.split_k, spec.k, a.shape[1],
                               module.tiling.uneven_split)
    if spec.epilogue is not None and spec.epilogue.rowwise() and b.shape[1] > module.tiling.bn \
            and module.amax_pass is None:  # (rule 29's first pass spans the tiles along N)
        raise rowwise_too_wide(module.tiling.bn, spec.n, b.shape[1])
    steps = {s for p in module.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) for s in o.steps}
    scaled = steps & {ir.EpilogueStep.SCALE_TENSORWISE, ir.EpilogueStep.SCALE_ROWWISE, ir.EpilogueStep.SCALE_GLOBAL}
    if scaled and (scale_a is None or scale_b is None):
        raise ScaleError("scale_a", "scale_a and scale_b, as the module's epilogue scales", "None",
                         "pass both scales")
    if ir.EpilogueStep.SCALE_GLOBAL in steps and globals_ is None:
        raise ScaleError("scale_a", "NVFP4's pairs [block scales, global scale], as the module's epilogue multiplies "
                         "by the global scales", "no global scale of each",
                         "pass scale_a=[block scales, global_a] and scale_b=[block scales, global_b]")
    for arg, g in zip(("scale_a", "scale_b"), globals_, strict=True) if globals_ is not None else ():
        if g.numel() != 1:  # (tensorwise: Operands.of concatenates them, so a longer one would shift the other)
            raise ScaleError(arg, "a one-element fp32 global scale (NVFP4's pair [block scales, global scale])",
                             f"{g.numel()} elements", f"pass {arg}=[block scales, torch.tensor([global])]")
    if spec.scale.is_blockwise and (scale_a is None or scale_b is None):
        raise ScaleError("scale_a" if scale_a is None else "scale_b",
                         f"both blockwise scales: module {module.name} applies them in its mainloop", "None",
                         "pass scale_a and scale_b positionally (also with a fused epilogue)")
    if steps & {ir.EpilogueStep.ADD_BIAS, ir.EpilogueStep.ADD_ROW_BIAS} and bias is None:
        size = a.shape[0] if ir.EpilogueStep.ADD_ROW_BIAS in steps else b.shape[1]  # (a swapped module's: N, its M)
        raise ShapeError("bias", f"a ({size},) bias, as the module's epilogue adds one", "None", "pass bias")
    return frozenset(steps)


def check_operands(module: ir.Module, operands: Mapping[str, torch.Tensor] | None,
                    positional: dict[str, Any], steps: frozenset[ir.EpilogueStep],
                    device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """The fused epilogue's operand tensors by graph name, each checked against its `OperandSpec`: on the CPU for
    the simulator, or on `device` for a launch (`Kernel.run`)."""
    g = module.spec.epilogue
    if operands is not None and not isinstance(operands, Mapping):
        raise InputError("operands", "a mapping of the epilogue graph's operand names to tensors",
                         type(operands).__name__, "pass operands={'name': tensor, ...}")
    given = dict(operands or {})
    specs = {s.name: s for s in g.operands} if g is not None else {}
    if g is not None and not steps:  # the scales and bias, if any, are graph operands: a positional one is unread
        for name, v in positional.items():
            if v is not None:
                raise InputError(name, f"None: module {module.name} has a fused epilogue, whose scales and bias "
                                 "are operands of its graph", "a tensor",
                                 f"pass it as operands={{'{name}': ...}} (it is one of {sorted(specs)})"
                                 if name in specs else f"drop {name}: the epilogue graph does not read it")
    for name in given:
        if name not in specs:
            if g is None:
                raise InputError(name, f"no epilogue operands: module {module.name} has no fused epilogue",
                                 f"operand {name!r}", "drop it from operands, or plan the kernel with the epilogue "
                                 "that reads it")
            raise InputError(name, f"only the epilogue graph's operands ({', '.join(specs) or 'none'})",
                             f"operand {name!r}", f"drop {name}, or pass it under the name of the epilogue "
                             "function's parameter that reads it")
    for name, spec in specs.items():
        if name not in given:
            raise InputError(name, f"a tensor for the epilogue graph's operand {name} ({spec.kind.value}, "
                             f"{spec.dtype.value}, shape {spec.shape})", "none",
                             f"pass operands={{..., '{name}': tensor}}")
        given[name] = _operand_tensor(spec, given[name], device)
    return given


def transposed_operand(t: Any) -> Any:
    """A problem's epilogue operand as a swapped module's graph reads it (`OperandSpec.transposed`): a 1-D (N,) row
    as an (N, 1) column, a 2-D one transposed, a scalar as it is (anything else is left for the checks to refuse)."""
    if not isinstance(t, torch.Tensor):
        return t
    return t.unsqueeze(1) if t.dim() == 1 else t.t() if t.dim() == 2 else t


def _operand_tensor(spec: OperandSpec, t: Any, device: torch.device | None = None) -> torch.Tensor:
    """`t` as the kernel reads it: with the planned strides, which it must have where they matter; on the CPU, or
    on `device` (a launch's)."""
    name = spec.name
    if not isinstance(t, torch.Tensor):
        raise InputError(name, "a torch.Tensor", type(t).__name__, f"pass {name} as a tensor")
    if device is None and t.device.type != "cpu":
        raise DeviceError(name, "a CPU tensor (the simulator runs on the CPU)", f"a tensor on {t.device}",
                          f"move it with {name}.cpu()")
    if device is not None and t.device != device:
        raise DeviceError(name, f"a tensor on {device}, where a is", f"a tensor on {t.device}",
                          f"move it with {name}.to(a.device)")
    if t.dtype != spec.dtype.torch:
        raise DTypeError(name, f"{spec.dtype.torch}, as the epilogue graph was captured with", str(t.dtype),
                         f"convert it with {name}.to({spec.dtype.torch})")
    if tuple(t.shape) != spec.shape:
        raise ShapeError(name, f"shape {spec.shape}, as the epilogue graph was captured with",
                         f"shape {tuple(t.shape)}", "pass the tensor the kernel was planned with, or plan a kernel "
                         "for this one")
    # The kernel compiles the operand's strides in. A size-1 dimension's stride is never stepped, so it may differ.
    if any(n != 1 and st != want for n, st, want in zip(spec.shape, t.stride(), spec.strides, strict=True)):
        raise InputError(name, f"strides {spec.strides} (shape {spec.shape}), as the epilogue graph was captured "
                         "with", f"strides {tuple(t.stride())}", "pass a tensor laid out like the one the kernel "
                         "was planned with (e.g. .contiguous(), or the same expanded view), or plan a kernel for "
                         "this one")
    return t if tuple(t.stride()) == spec.strides else torch.as_strided(t, spec.shape, spec.strides,
                                                                         t.storage_offset())


def _outputs(module: ir.Module, m: int, n: int, out: torch.Tensor | None,
             outs: Sequence[torch.Tensor] | None) -> tuple[torch.Tensor, ...]:
    """One (M, N) tensor per output (a quantization's scales: (M, groups)): those given (checked),
    NaN-filled ones for the rest."""
    dtypes = module.spec.output_dtypes()
    shapes = module.spec.output_shapes(m, n)
    if out is not None and outs is not None:
        raise InputError("out", "either out (output 0) or outs (every output), not both", "both",
                         "pass every output in outs")
    if outs is not None and len(outs) != len(dtypes):
        raise InputError("outs", f"{len(dtypes)} tensor(s), one per output of module {module.name} "
                         f"({', '.join(d.value for d in dtypes)})", f"{len(outs)}",
                         "pass one (M, N) tensor per output, or none to get NaN-filled ones")
    given = tuple(outs) if outs is not None else (out,) if out is not None else ()
    result = []
    for j, dt in enumerate(dtypes):
        if j >= len(given):
            result.append(torch.full(shapes[j], float("nan"), dtype=dt.torch))
            continue
        t, arg = given[j], "out" if out is not None else f"outs[{j}]"
        if tuple(t.shape) != shapes[j]:
            raise ShapeError(arg, f"shape {shapes[j]}", f"shape {tuple(t.shape)}",
                             f"pass a {shapes[j]} output (output {j}'s shape for M={m}, N={n})")
        if t.dtype != dt.torch:
            raise DTypeError(arg, f"{dt.torch}, the dtype of output {j}", str(t.dtype),
                             f"allocate it as torch.empty(({m}, {n}), dtype={dt.torch})")
        if t.device.type != "cpu":
            raise DeviceError(arg, "a CPU tensor (the simulator runs on the CPU)", f"a tensor on {t.device}",
                              "allocate it on the CPU")
        result.append(t)
    return tuple(result)


def _malformed(pid: int, e: MalformedError) -> SimFinding:
    return SimFinding(FindingKind.MALFORMED, str(e), pid)


def simulate(module: ir.Module, a: torch.Tensor, b: torch.Tensor, scale_a: Any = None,
             scale_b: Any = None, bias: torch.Tensor | None = None, *,
             operands: Mapping[str, torch.Tensor] | None = None, outs: Sequence[torch.Tensor] | None = None,
             seed: int = 0, ctas: Iterable[int] | None = None, out: torch.Tensor | None = None,
             record: bool = True, span: Span | None = None, amax: torch.Tensor | None = None) -> SimResult:
    """Run `module` on the CPU for ``a (M, K) @ b (K, N)`` under one random schedule, checking the protocol.

    A swapped module (`ir.Tiling.swap_ab`, planner rule 18) takes the problem's tensors, as its launcher does: its
    own A and B are the problem's B^T and A^T, its scales trade places, and it writes the problem's (M, N) outputs.

    NVFP4's scales come as `warploom.scaled_mm` takes them: scale_a=[blocked e4m3 scales, fp32 global scale], and
    scale_b likewise (`checks.scale_parts`).

    `operands` maps each operand name of a fused epilogue's graph to its CPU tensor (for scaled_mm with an epilogue,
    scale_a, scale_b and bias are among them, not positional), laid out as when the graph was captured: the kernel
    reads element (m, n) at the `OperandSpec.mn_strides` offset. `ctas` picks program ids of the persistent grid
    (default: all; a cluster module's: every CTA of their clusters). `outs` (one (M, N) tensor per
    `module.spec.output_dtypes()`) or `out` (output 0 alone), if given, are written in place (poison them with NaN
    first to see unwritten tiles); the outputs not given are made NaN-filled. The module need not pass the static
    verifier: mutated modules are simulated as written. A ranged module (`ir.Tiling.ranged`) runs the launch over
    `span`'s tiles (default: all of C); the rest of the outputs stays as it was.

    Rule 29's first pass (`ir.Module.amax_pass`) runs with the cast pass after it (sim/cast_pass.py): its outputs
    are the call's (q, s) (`out` is q, `outs` both), its own output, y's workspace, stays internal, and `amax` is
    the (M,) fp32 amax workspace as the launch finds it (default: zeros, as the launcher allocates it per call; a
    kept one is written in place, and is AMAX_STALE unless zero).
    """
    t0 = time.perf_counter()
    (scale_a, global_a), (scale_b, global_b) = scale_parts("scale_a", scale_a), scale_parts("scale_b", scale_b)
    globals_ = None if global_a is None or global_b is None else (global_a, global_b)
    if module.tiling.swap_ab:  # from here on everything is in the module's own terms
        a, b, scale_a, scale_b = b.t(), a.t(), scale_b, scale_a
        # A fused epilogue's operands as its graph reads them (OperandSpec.transposed): same storage.
        operands = {name: transposed_operand(t) for name, t in (operands or {}).items()}
    try:
        ep_steps = _check_args(module, a, b, scale_a, scale_b, bias, globals_)
        # Blockwise scales are the mainloop's, never graph operands: only the bias may be one.
        positional = {"bias": bias} if module.spec.scale.is_blockwise else {"scale_a": scale_a, "scale_b": scale_b,
                                                                            "bias": bias}
        tensors = check_operands(module, operands, positional, ep_steps)
    except (InputError, DTypeError) as e:
        if module.tiling.swap_ab:  # the checks see the kernel's own terms, which the caller's tensors are not in
            e.add_note("(a swapped kernel, planner rule 18: checked as C^T's kernel reads them, with A and B, "
                       "scale_a and scale_b exchanged, (N,) operands as (N, 1) and 2-D ones transposed)")
        raise
    m, k = a.shape
    k *= 2 if module.spec.fp4_a else 1  # (MX fp4: two values of K a byte)
    n = b.shape[1]
    t = module.tiling
    cast = module.amax_pass
    final = cast_pass.final_outputs(cast, m, n, out, outs) if cast is not None else None
    if final is not None:  # (rule 29: the first pass writes y's workspace, the cast pass the call's outputs)
        out = outs = None
    results = _outputs(module, n, m, out, outs) if t.swap_ab else _outputs(module, m, n, out, outs)  # (C: C^T's shape)
    span = launch_span(module, m, n, span)
    ops = Operands.of(module, a, b, scale_a, scale_b, bias, results, tensors, span.tiles if span else 0, globals_)
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, span, t.stream_k, t.cluster, t.cluster_n)
    # A stream-K launch runs whole: its CTAs' fixups link them (ir.Fixup), so a sample would wait forever.
    pids = tuple(range(grid)) if ctas is None or t.stream_k else program_ids("ctas", ctas, grid)
    if t.cluster > 1:  # (a cluster's CTAs wait on each other: whole clusters run)
        pids = whole_clusters(module, pids)
    sink = FindingSink()
    if cast is not None:
        ops = cast_pass.start(ops, amax, m, sink)
    rng = random.Random(seed)
    steps = k_steps = 0
    events: list[TimelineEvent] = []
    stuck: set[int] = set()
    # Tile-sized matmuls are far below the size where torch's intra-op threads pay: on a 2-core machine
    # a 64x32 @ 32x64 product took 1.5 ms with 2 threads and 6 us with one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        machines: list[Machine] = []
        for pid in pids:
            try:
                prog = CtaProgram.build(module, Geometry.of(module, m, n, k, pid, grid, span))
            except MalformedError as e:
                sink.add(_malformed(pid, e))
                stuck.update(pids)  # nothing ran: no output to judge
                machines = []
                break
            mach = Machine(prog, sink, CtaData(module, ops, len(module.partitions)), record=record)
            machines.append(mach)
            _run(module, machines, rng)
        if t.stream_k and machines:
            run_linked(machines, rng, sink)
        for pid, mach in zip(pids, machines, strict=False):
            steps += mach.step
            k_steps += mach.k_steps
            events.extend(mach.events or ())
            if not mach.done():
                stuck.add(pid)
    finally:
        torch.set_num_threads(threads)
    # A deadlocked (or unrunnable) CTA's missing tiles are a consequence already reported, not a new finding.
    _coverage(module, m, n, k, grid, tuple(p for p in pids if p not in stuck), ops, sink, span)
    if ops.workspace is not None:  # split-K: the second kernel sums the slabs into C, where all of them ran
        ran = tuple(p for p in pids if p not in stuck)
        if span is not None:  # (ranged: its compact boxes, each mapped back to its tile)
            done = completed_tiles(module, m, n, grid, ran, span)
            reduce_span(ops.workspace, t.split_k, results[0], [(u.tile_id - span.lo, u.off_m, u.off_n) for u in done],
                        span.tiles)
        else:
            boxes = None if len(ran) == grid else [(u.off_m, u.off_n, t.bm, t.tile_n)
                                                   for u in completed_tiles(module, m, n, grid, ran)]
            reduce_splits(ops.workspace, t.split_k, results[0], boxes)
    if cast is not None and final is not None:  # the cast kernel, after the whole first pass
        cast_pass.run(cast, ops, results[0], final, n, sink)
        results = final
    report = SimReport(module.name, seed, pids, steps, k_steps, sink.findings(), tuple(events),
                       time.perf_counter() - t0)
    return SimResult(results, report)


def _coverage(module: ir.Module, m: int, n: int, k: int, grid: int, pids: tuple[int, ...], ops: Operands,
              sink: FindingSink, span: Span | None) -> None:
    """Every element of every output in the simulated CTAs' tiles must have been stored exactly once."""
    t = module.tiling
    if ops.ws_writes is not None:
        _workspace_coverage(module, m, n, grid, pids, ops.ws_writes, sink, span)
        return
    g = module.spec.epilogue
    grouped = [g is not None and j < len(g.outputs) and g.outputs[j].layout is OutputLayout.GROUPS
               for j in range(len(ops.writes))]
    for pid in pids:
        for tile in stored_tiles(module, m, n, k, pid, grid, span):
            for j, writes in enumerate(ops.writes):
                w = writes.t() if t.swap_ab else writes  # (in the module's coordinates)
                # (a tile's rows of C: BM from its first, or where a cluster's CTAs interleave, their blocks)
                rows = torch.cat([w[tile.off_m + r0:tile.off_m + r0 + q] for r0, q in t.row_blocks])
                if grouped[j]:  # (a quantization's scales: the tile's rows of its groups' columns)
                    assert g is not None
                    amax = g.amax()
                    cols = slice(amax.index(tile.off_n), amax.index(tile.off_n + t.tile_n - 1) + 1)
                    got = rows[:, cols]
                else:
                    got = rows[:, tile.off_n:tile.off_n + t.tile_n]
                if not got.numel():  # (a cluster tile's rows past M: its CTA's stores are all clipped)
                    continue
                lo, hi = int(got.min()), int(got.max())
                if lo != 1 or hi != 1:
                    name = "C" if j == 0 else f"output {j}"
                    sink.add(SimFinding(FindingKind.OUTPUT_COVERAGE,
                                        f"output {tile} at {name}[{tile.off_m}, {tile.off_n}] of CTA {pid}: its "
                                        f"elements were stored between {lo} and {hi} times, expected once", pid,
                                        tile=str(tile)))


def _run(module: ir.Module, machines: list[Machine], rng: random.Random) -> int:
    """Run the newest of `machines` (CTAs in program-id order) unless it must wait for others: a stream-K launch's
    CTAs run together once all are built (`run_linked`, by the caller), a cluster's once its last CTA is. The steps
    run."""
    c = module.tiling.cluster
    if module.tiling.stream_k or machines[-1].rank != c - 1 or len(machines) < c \
            or machines[-c].prog.geo.pid != machines[-1].prog.geo.pid - (c - 1):  # (a CTA of it failed to build)
        return 0
    if c > 1:
        run_cluster(machines[-c:], rng)
        return sum(mach.step for mach in machines[-c:])
    run_random(machines[-1], rng)
    return machines[-1].step


def stored_tiles(module: ir.Module, m: int, n: int, k: int, pid: int, grid: int,
                 span: Span | None = None) -> tuple[TileRef, ...]:
    """The units of CTA `pid` that store their tile of C (every unit but a stream-K contributor)."""
    t = module.tiling
    if t.stream_k:
        return tuple(u for u in Geometry.of(module, m, n, k, pid, grid).tiles if u.stores())
    return cta_tiles(pid, m, n, t.bm, t.tile_n, t.group_m, grid, t.split_k, span, t.cluster, t.cluster_n,
                     t.rank_rows)


def run_linked(machines: list[Machine], rng: random.Random, sink: FindingSink) -> None:
    """Run the CTAs of a stream-K launch together (`ir.Fixup` links them through workspace flags): each in turn under
    random scheduling until it blocks or ends, round after round, until none can move; then every CTA's end checks
    (a finisher still waiting on a flag is a deadlock) and the partials no finisher added."""
    state = StreamKState({}, set())
    for mach in machines:
        mach.sk = state
    moved = True
    while moved:
        moved = False
        for mach in machines:
            budget = step_budget(mach)
            acts = mach.enabled()
            while acts:
                if mach.step > budget:
                    raise StepLimitError(f"CTA {mach.prog.geo.pid} of {mach.prog.module.name} ran past {budget} steps")
                mach.apply(acts[rng.randrange(len(acts))])
                moved = True
                acts = mach.enabled()
    for mach in machines:
        mach.finish()
    state.report_lost(sink)


def completed_tiles(module: ir.Module, m: int, n: int, grid: int, pids: Iterable[int],
                    span: Span | None = None) -> tuple[TileRef, ...]:
    """The tiles of C that CTAs `pids` of a `grid`-CTA launch (over `span`, for a ranged module) complete, one unit
    of each: with split-K only those whose every k-range's unit ran (the reduction leaves the rest of C as it
    was); without, every tile they visit."""
    t = module.tiling
    units = tuple(u for pid in pids for u in cta_tiles(pid, m, n, t.bm, t.tile_n, t.group_m, grid, t.split_k, span,
                                                       t.cluster, t.cluster_n, t.rank_rows))
    return whole_tiles(units, t.split_k)


def _workspace_coverage(module: ir.Module, m: int, n: int, grid: int, pids: tuple[int, ...], writes: torch.Tensor,
                        sink: FindingSink, span: Span | None) -> None:
    """Split-K: every element of each work unit's box in the workspace stored exactly once."""
    t = module.tiling
    for pid in pids:
        for unit in cta_tiles(pid, m, n, t.bm, t.tile_n, t.group_m, grid, t.split_k, span):
            r0, c0 = unit.ws_m, unit.ws_n
            got = writes[r0:r0 + t.bm, c0:c0 + t.tile_n]
            lo, hi = int(got.min()), int(got.max())
            if lo != 1 or hi != 1:
                sink.add(SimFinding(FindingKind.OUTPUT_COVERAGE,
                                    f"work unit {unit} at workspace[{r0}, {c0}] of CTA {pid}: its elements "
                                    f"were stored between {lo} and {hi} times, expected once", pid, tile=str(unit)))


def representative_ctas(module: ir.Module, m: int, n: int, span: Span | None = None) -> tuple[int, ...]:
    """One CTA per distinct tile count: without data, CTAs with as many tiles run the same protocol. A cluster
    module's: every CTA of one cluster per distinct tile count (its CTAs wait on each other)."""
    t = module.tiling
    span = launch_span(module, m, n, span)
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, span, t.stream_k, t.cluster, t.cluster_n)
    if t.stream_k:
        return tuple(range(grid))  # (linked by their fixups: all of them run)
    seen: dict[int, int] = {}
    for pid in range(0, grid, t.cluster):  # (a cluster's CTAs visit as many tiles as its lead)
        tiles = cta_tiles(pid, m, n, t.bm, t.tile_n, t.group_m, grid, t.split_k, span, t.cluster, t.cluster_n,
                     t.rank_rows)
        seen.setdefault(len(tiles), pid)
    return whole_clusters(module, seen.values())


@dataclass(frozen=True)
class CheckReport:
    """Attributes:
    module: the module's name. seeds: the schedules run. ctas: the program ids run.
    steps: scheduler steps in all. findings: merged over all runs."""

    module: str
    seeds: tuple[int, ...]
    ctas: tuple[int, ...]
    steps: int
    findings: tuple[SimFinding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def ints(name: str, values: Any, distinct: bool = False) -> tuple[int, ...]:
    """`values` (an iterable of ints: program ids or seeds) as a tuple, or an error naming `name`; `distinct`: each
    once (a program id twice ran its CTA twice, whose tiles were then reported stored twice)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(name, "an iterable of ints (e.g. range(4) or [0, 3])", f"{type(values).__name__} "
                                f"{values!r}", f"pass {name}=[{values!r}]" if isinstance(values, int) else
                                f"pass a list of ints as {name}")
    out = tuple(values)
    bad = next((v for v in out if isinstance(v, bool) or not isinstance(v, int)), None)
    if bad is not None:
        raise ArgumentTypeError(name, "ints", f"{type(bad).__name__} {bad!r} among them", f"pass {name} as ints")
    twice = sorted(v for v, seen in Counter(out).items() if seen > 1) if distinct else []
    if twice:
        raise InputError(name, "distinct program ids (a CTA runs once a launch)", f"{twice} more than once",
                         f"pass each once: {name}={sorted(set(out))}")
    return out


def program_ids(name: str, ctas: Any, grid: int) -> tuple[int, ...]:
    """`ctas` as distinct program ids of a launch of `grid` CTAs, or an error naming the ones outside it."""
    pids = ints(name, ctas, distinct=True)
    outside = [p for p in pids if not 0 <= p < grid]
    if outside:
        raise InputError(name, f"program ids in [0, {grid}) (the launch's grid)", f"{outside}",
                         f"pass ids below {grid}, or {name}=None for every CTA")
    return pids


def check_protocol(module: ir.Module, m: int, n: int, k: int, *, seeds: Iterable[int] = range(4),
                   ctas: Iterable[int] | None = None, raise_on_finding: bool = True,
                   span: Span | None = None) -> CheckReport:
    """Run the protocol checks (no data) of `module` at problem size (m, n, k) under each seed's schedule.

    By default one CTA per distinct tile count is run (`representative_ctas`); a cluster module runs every CTA of
    the clusters of those (or of `ctas`), linked (sim/cluster.py). Raises ProtocolError
    listing the findings unless `raise_on_finding` is False. A ranged module runs the launch over `span` (default:
    all of C).
    """
    t = module.tiling
    span = launch_span(module, m, n, span)
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, span, t.stream_k, t.cluster, t.cluster_n)
    # (stream-K runs every CTA whatever `ctas` says, below: its ids are only type-checked)
    pids = representative_ctas(module, m, n, span) if ctas is None else whole_clusters(
        module, ints("ctas", ctas, distinct=True) if t.stream_k else program_ids("ctas", ctas, grid))
    seeds = ints("seeds", seeds)
    sink = FindingSink()
    steps = 0
    if t.stream_k:
        pids = tuple(range(grid))  # (linked by their fixups: all of them run)
    for seed in seeds:
        rng = random.Random(seed)
        linked = []
        for pid in pids:
            try:
                prog = CtaProgram.build(module, Geometry.of(module, m, n, k, pid, grid, span))
            except MalformedError as e:
                sink.add(_malformed(pid, e))
                continue
            mach = Machine(prog, sink)
            linked.append(mach)
            steps += _run(module, linked, rng)
        if t.stream_k and linked:
            run_linked(linked, rng, sink)
            steps += sum(mach.step for mach in linked)
    report = CheckReport(module.name, seeds, pids, steps, sink.findings())
    if report.findings and raise_on_finding:
        raise ProtocolError(module.name, report.findings)
    return report
