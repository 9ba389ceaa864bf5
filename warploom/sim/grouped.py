"""Grouped GEMMs on the simulator (ir.Tiling.grouping): the launch over (group, tile) pairs and its coverage check.

The CTAs run as `simulate` runs them (one after another, each under random scheduling, exact mbarriers; a stream-K
launch's together, `run_linked`, its fixups checked as a dense launch's); what
differs is where the tiles come from (`raster.group_tiles`, from the group bounds the kernel scans; stream-K's units
`raster.group_stream_k_units`, the same scan's tile ids shared as the dense kernel's), that B is read
per group and C's stores are clipped at each group's end row, and the coverage check: every element of a group's
rows is stored exactly once, and nothing else of C at all, so a tile that writes into the next group's rows (or
past the last group) is reported as OUTPUT_COVERAGE with its rows. A rule 29 first pass's atomic amax is clipped
at its group's end row as C's stores are, and its cast pass casts the rows of some group only (`cast_pass.run`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping

import torch

from warploom.dtypes import DType
from warploom.epilogue.graph import GateUpHalf, Half, OutputLayout
from warploom.errors import ScaleError, ShapeError
from warploom.ir import nodes as ir
from warploom.ir.raster import TileRef, group_bounds
from warploom.sim import cast_pass
from warploom.sim.events import TimelineEvent
from warploom.sim.findings import FindingKind, FindingSink, SimFinding
from warploom.sim.machine import Machine
from warploom.sim.numerics import CtaData, Operands
from warploom.sim.program import CtaProgram, Geometry, MalformedError
from warploom.sim.scheduler import run_random
from warploom.sim.simulate import SimReport, SimResult, check_operands, program_ids, run_linked
from warploom.spec import Grouping, ScaleRecipe


def simulate_grouped(module: ir.Module, a: torch.Tensor, b: torch.Tensor, bounds: torch.Tensor | Iterable[int],
                     scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None, *, seed: int = 0,
                     ctas: Iterable[int] | None = None, out: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
                     record: bool = False, operands: Mapping[str, torch.Tensor] | None = None,
                     globals_: tuple[torch.Tensor, torch.Tensor] | None = None) -> SimResult:
    """Run grouped `module` on the CPU: ``C[rows of g] = A[rows of g] @ b[g]`` for every group g.

    `a` is (M, K) (a MASKED module's (G, M_max, K) flattened to (G * M_max, K)); `b` is (G, K, N) as torch's grouped
    ops take it (a K-major module's (G, N, K) storage seen through ``.transpose(-2, -1)``); `bounds` the group bounds
    the kernel reads (OFFSETS: offs, MASKED: masked_m). A K-grouped module (Grouping.K_OFFSETS) takes a 2-D b
    (total_K, N) and offs over K: C (G * M, N), its block g ``a[:, K range of g] @ b[K range of g]``. Rowwise
    scales: scale_a (M,) (K-grouped: (G * M,), C's rows), scale_b (G, N); blockwise 1x128 x 128x128 ones: scale_a
    (M, ceil(K/128)), scale_b (G, ceil(K/128), ceil(N/128)), a tile reading its group's block of scale_b
    (K-grouped: scale_a (M, KB), scale_b (KB, NB) over total_K, `program.scale_tag`). `out` (C's rows, N), if given,
    is written in place (rows outside every group keep what they held); else a NaN-filled one is made; a fused
    quantization's pair (q, s) takes a tuple of both (s (C's rows, ceil(N/128)), stored clipped as C is). A rule 29
    first pass (`ir.Module.amax_pass`) runs with its cast pass after it (sim/cast_pass.py), over the rows of some
    group: `out` is then the call's (q, s) (s (C's rows, 1)), y's workspace internal, the amax workspace zeroed (as
    the launcher's per-call one). `ctas` picks
    program ids of the launch (default all); `operands` a fused epilogue's, by graph name, indexed in the grouped
    row space (a row operand's row r is A's and C's row r), as `sim.simulate` takes them. NVFP4 (sm_100a): e4m3
    scale_a (M, K/16) and scale_b (G, N, K/16), and `globals_` (A's (1,), B's (G,) per expert) fp32."""
    t0 = time.perf_counter()
    t = module.tiling
    if not t.grouped:
        raise ValueError(f"module {module.name} is not grouped (ir.Tiling.grouping): use sim.simulate")
    k_grouped = t.grouping is Grouping.K_OFFSETS
    if k_grouped and (a.dim() != 2 or b.dim() != 2 or b.shape[0] != a.shape[1]):
        raise ShapeError("b", f"({a.shape[-1]}, N) beside a 2-D a (K-grouped)", f"a {tuple(a.shape)}, b "
                         f"{tuple(b.shape)}", "pass a as (M, total_K) and b as (total_K, N)")
    if not k_grouped and (a.dim() != 2 or b.dim() != 3 or b.shape[1] != a.shape[1]):
        raise ShapeError("b", f"(G, {a.shape[1] if a.dim() == 2 else 'K'}, N) beside a 2-D a",
                         f"a {tuple(a.shape)}, b {tuple(b.shape)}", "pass a as (M, K) and b as (G, K, N)")
    m, k = a.shape
    k *= 2 if module.spec.fp4_a else 1  # (sm_100a MX fp4: K in values, two a byte of a and b)
    n = b.shape[-1]
    values = bounds.tolist() if isinstance(bounds, torch.Tensor) else list(bounds)
    groups = group_bounds(t.grouping, values, k if k_grouped else m)
    if not k_grouped and len(groups) != b.shape[0]:
        raise ShapeError("b", f"{len(groups)} groups, one per bound", f"{b.shape[0]}", "pass one bound per group")
    rows = len(groups) * m if k_grouped else m
    # (N, or a gate/up epilogue's N / 2; a quantization's scales (rows, ceil(N/128)) beside q)
    shapes, dtypes = module.spec.output_shapes(rows, n), module.spec.output_dtypes()
    cast = module.amax_pass
    final = None
    if cast is not None:  # rule 29: the first pass writes y's workspace, the cast pass the call's (q, s)
        given = out if isinstance(out, tuple) else None
        final = cast_pass.final_outputs(cast, rows, n, out if isinstance(out, torch.Tensor) else None, given)
        out = None
    results = tuple(torch.full(shape, float("nan")).to(dt.torch) for shape, dt in zip(shapes, dtypes, strict=True)) \
        if out is None else out if isinstance(out, tuple) else (out,)
    if len(results) != len(shapes):
        raise ShapeError("out", f"{len(shapes)} output tensor(s), shaped {', '.join(map(str, shapes))}",
                         f"{len(results)}", "pass a tuple with one tensor per output of the epilogue")
    # (blockwise scales are the mainloop's, never graph operands; rowwise ones are the graph's with an epilogue)
    positional = {} if module.spec.scale.is_blockwise else {"scale_a": scale_a, "scale_b": scale_b}
    tensors = check_operands(module, operands, positional, frozenset()) if module.spec.epilogue is not None else {}
    nvfp4 = module.spec.scale is ScaleRecipe.NVFP4
    if module.spec.scale.microscaled:
        _check_block_scales(module, scale_a, scale_b, m, n, k, len(groups))
    if nvfp4 and (globals_ is None or globals_[0].numel() != 1 or globals_[1].numel() != len(groups)):
        raise ScaleError("globals_", f"NVFP4's global scales: A's one and one per expert of B ({len(groups)})",
                         "None" if globals_ is None else f"{globals_[0].numel()} of A and {globals_[1].numel()} of B",
                         "pass globals_=(global_a (1,), global_b (G,))")
    ops = Operands.of(module, a, b, scale_a, scale_b, None, results, tensors, globals_=globals_ if nvfp4 else None)
    # (a stream-K launch runs whole: its CTAs' fixups link them, ir.Fixup, so a sample would wait forever)
    pids = tuple(range(t.grid)) if ctas is None or t.stream_k else program_ids("ctas", ctas, t.grid)
    sink = FindingSink()
    if cast is not None:
        ops = cast_pass.start(ops, None, rows, sink)
    rng = random.Random(seed)
    steps = k_steps = 0
    events: list[TimelineEvent] = []
    ran: list[int] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (tile-sized products: threads cost more than they give, as in sim.simulate)
    try:
        machines: list[Machine] = []
        for pid in pids:
            try:
                prog = CtaProgram.build(module, Geometry.of(module, m, n, k, pid, t.grid, groups=groups))
            except MalformedError as e:
                sink.add(SimFinding(FindingKind.MALFORMED, str(e), pid))
                break
            machines.append(Machine(prog, sink, CtaData(module, ops, len(module.partitions)), record=record))
            if not t.stream_k:
                run_random(machines[-1], rng)
        if t.stream_k and machines:  # (together, once all are built: a finisher waits on later CTAs' partials)
            run_linked(machines, rng, sink)
        for mach in machines:
            steps += mach.step
            k_steps += mach.k_steps
            events.extend(mach.events or ())
            if mach.done():
                ran.append(mach.prog.geo.pid)
    finally:
        torch.set_num_threads(threads)
    for j, writes in enumerate(ops.writes):
        grouped_coverage(module, m, n, k, groups, tuple(ran), writes, sink, j)
    if cast is not None and final is not None:  # (after the whole launch, over the rows of some group)
        owned = torch.zeros(rows, dtype=torch.bool)
        for start, end in groups:
            owned[start:end] = True
        cast_pass.run(cast, ops, results[0], final, n, sink, owned)
        results = final
    report = SimReport(module.name, seed, pids, steps, k_steps, sink.findings(), tuple(events),
                       time.perf_counter() - t0)
    return SimResult(results, report)


def _check_block_scales(module: ir.Module, scale_a: torch.Tensor | None, scale_b: torch.Tensor | None, m: int, n: int,
                        k: int, groups: int) -> None:
    """An MX / NVFP4 module's scales (sm_100a, row-major, any strides), as `checks_grouped` holds the API's: scale_a
    (M, K/v) in the grouped row space and scale_b (G, N, K/v), one (N, K/v) block per expert, in the recipe's dtype.
    The partition's masked loads would otherwise read a short tensor's missing entries as ones, and a 2-D scale_b's
    rows as experts."""
    recipe = module.spec.scale
    want = DType.E8M0 if recipe is ScaleRecipe.MX else DType.E4M3
    cols = -(-k // recipe.scale_k)
    for name, t, shape, what in (("scale_a", scale_a, (m, cols), "one per row of a"),
                                 ("scale_b", scale_b, (groups, n, cols),
                                  "one per expert and row of its (N, K) weight")):
        expected = f"{want.value} scales of shape {shape} ({recipe.value}: {what} and {recipe.scale_k} of K)"
        if t is None:
            raise ScaleError(name, expected, "None", f"pass {name}")
        if t.dtype != want.torch:
            raise ScaleError(name, expected, f"dtype {t.dtype}", f"pass {name} as {want.torch}")
        if tuple(t.shape) != shape:
            raise ScaleError(name, expected, f"shape {tuple(t.shape)}", f"pass {name} with shape {shape}")


def expected_writes(module: ir.Module, m: int, n: int, k: int, groups: tuple[tuple[int, int], ...],
                    pids: Iterable[int]) -> tuple[torch.Tensor, tuple[TileRef, ...]]:
    """How often each element of C must be stored when CTAs `pids` run, with their tiles. A whole launch: once in
    every group's rows, from the bounds alone (so a raster that loses or doubles rows is caught too); a sample of
    CTAs: once in each of their tiles' rows within the tile's group."""
    c_rows, row_groups = c_groups(module, m, groups)
    want = torch.zeros((c_rows, n), dtype=torch.int16)
    t = module.tiling
    pids = tuple(pids)
    tiles = tuple(tile for pid in pids for tile in Geometry.of(module, m, n, k, pid, t.grid, groups=groups).tiles)
    if set(pids) >= set(range(t.grid)):
        for start, end in row_groups:
            want[start:end] = 1
        return want, tiles
    for tile in (x for x in tiles if x.stores()):  # (a stream-K contributor stores a partial, not its tile)
        end = min(tile.off_m + t.bm, tile.row_end if tile.row_end is not None else m)
        want[tile.off_m:end, tile.off_n:tile.off_n + t.tile_n] += 1
    return want, tiles


def c_groups(module: ir.Module, m: int, groups: tuple[tuple[int, int], ...]) -> tuple[int, tuple[tuple[int, int], ...]]:
    """C's rows and each group's rows of C: the bounds' own, or a K-grouped module's G blocks of M rows (its
    `groups` are K ranges)."""
    if module.tiling.grouping is Grouping.K_OFFSETS:
        return len(groups) * m, tuple((g * m, (g + 1) * m) for g in range(len(groups)))
    return m, groups


def grouped_coverage(module: ir.Module, m: int, n: int, k: int, groups: tuple[tuple[int, int], ...],
                     pids: tuple[int, ...], writes: torch.Tensor, sink: FindingSink, output: int = 0) -> None:
    """Every element of the simulated tiles' group rows stored exactly once, every other element of C never; of a
    quantization's scales (`output` a groups output), each group's column in those rows."""
    want, tiles = expected_writes(module, m, n, k, groups, pids)
    g = module.spec.epilogue
    block = g.gate_up() if g is not None else None
    if block is not None:  # a gate/up result's column c is stored by the tile holding its gate column
        want = want[:, [GateUpHalf(0, Half.GATE, block).source(c) for c in range(n // 2)]]
    if g is not None and g.outputs[output].layout is OutputLayout.GROUPS:  # scale c: by the tile holding its group
        amax = g.amax()
        want = want[:, [c * (amax.width or n) for c in range(amax.groups(n))]]
    bad = writes != want
    if not bool(bad.any()):
        return
    rows = bad.any(dim=1).nonzero().flatten().tolist()
    r = rows[0]
    owner = next((g for g, (s, e) in enumerate(c_groups(module, m, groups)[1]) if s <= r < e), None)
    where = f"group {owner}'s" if owner is not None else "no group's"
    tile = next((x for x in tiles if x.off_m <= r < x.off_m + module.tiling.bm), None)
    name = "C" if output == 0 else f"output {output}"
    sink.add(SimFinding(FindingKind.OUTPUT_COVERAGE,
                        f"{name} rows {rows[0]}..{rows[-1]} ({len(rows)} rows; row {r} is {where}): stored "
                        f"{int(writes[r].max())} times where {int(want[r].max())} was expected (a grouped store must "
                        "write its group's rows once and never another group's)", -1,
                        tile=None if tile is None else str(tile)))


def reference_grouped(a: torch.Tensor, b: torch.Tensor, groups: tuple[tuple[int, int], ...],
                      scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None) -> torch.Tensor:
    """The fp32 result in each group's rows (NaN elsewhere): ``a[rows] @ b[g]``, times rowwise scales if given."""
    out = torch.full((a.shape[0], b.shape[2]), float("nan"))
    for g, (s, e) in enumerate(groups):
        y = a[s:e].float() @ b[g].float()
        if scale_a is not None and scale_b is not None:
            y = y * scale_a[s:e].float().reshape(-1, 1) * scale_b[g].float().reshape(1, -1)
        out[s:e] = y
    return out


def reference_k_grouped(a: torch.Tensor, b: torch.Tensor, groups: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The fp32 K-grouped result (G, M, N): ``a[:, s:e] @ b[s:e]`` for each group's K range, zeros where it is
    empty (torch._grouped_mm's)."""
    return torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in groups])
