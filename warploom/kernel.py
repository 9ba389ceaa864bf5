"""Kernel: a planned GEMM with its schedule IR, its generated Gluon, and ways to compile and run it."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warploom.backends.gluon_sm90 import GluonSource
from warploom.device import DeviceInfo, check_device
from warploom.errors import ArgumentTypeError, InputError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.passes import Trace
from warploom.planner import Plan, plan_schedule
from warploom.planning.plan import expect_plan
from warploom.runtime.cross import Compiled
from warploom.spec import GemmSpec
from warploom.targets import check_target, compile_schedule, cross_compile, emit

if TYPE_CHECKING:  # warploom.sim is imported when used: importing warploom stays cheap
    import torch

    from warploom.ir.raster import Span
    from warploom.sim import CheckReport, SimResult

# Set to 1 to run the simulator's protocol checks on every kernel `build` plans (see `build`).
SIM_CHECK_ENV = "WARPLOOM_SIM_CHECK"
# The largest problem the simulator runs whole (`sim_max_flops`). On a 2-core CPU machine 512^3 takes ~0.08 s on the
# simulator (every tile-sized wgmma is a torch matmul: 3-4 GFLOP/s at this size, less at smaller ones), and 4096^3
# would take tens of seconds, too long for a call that looks like a matmul.
SIM_MAX_FLOPS_ENV = "WARPLOOM_SIM_MAX_FLOPS"
SIM_MAX_FLOPS = 2 * 512**3
# `Kernel.simulate` of every CTA, a call made for the simulator's sake, runs up to this many times that limit (2*2048^3
# by default: seconds at the 2-3 GFLOP/s it runs whole problems at; tests/sim runs some of 2 GFLOP in under one).
# Past it a call ran for minutes (8192^3) or an hour (16384^3) without a word.
SIM_KERNEL_FACTOR = 64


@dataclass(frozen=True)
class Kernel:
    """A planned kernel.

    Attributes:
        spec: the problem.
        plan: the schedule parameters the planner chose.
        device: the GPU it was planned for.
        module: the finished schedule IR.
        trace: the IR after each pass.
        tail: a plan with a split-K tail (`Plan.tail_split`): the tail's module. `module` then runs the whole
            waves of tiles and `tail` the tiles left over, as split-K units (both ranged, `ir.Tiling.ranged`).
    """

    spec: GemmSpec
    plan: Plan
    device: DeviceInfo
    module: ir.Module
    trace: Trace
    tail: ir.Module | None = None

    @property
    def schedule(self) -> str:
        """The schedule IR as text (a tail's module after the main one)."""
        return "\n".join(printer.module(m) for m in self.modules)

    @property
    def modules(self) -> tuple[ir.Module, ...]:
        """The kernels a call launches, in order: the main module, then a split-K tail's."""
        return (self.module,) if self.tail is None else (self.module, self.tail)

    @functools.cached_property
    def gluon(self) -> GluonSource:
        return emit(self.module)

    @functools.cached_property
    def tail_gluon(self) -> GluonSource | None:
        return None if self.tail is None else emit(self.tail)

    @property
    def source(self) -> str:
        """The generated Gluon source (a split-K tail's kernels follow the main one's, as a second module)."""
        if self.tail_gluon is None:
            return self.gluon.text
        return (self.gluon.text + "\n\n# " + "-" * 100 + "\n# The split-K tail: the tiles past the last whole wave, "
                "launched after the kernel above.\n\n" + self.tail_gluon.text)

    def explain(self) -> str:
        """The planner's candidates for this problem, their scores and why the winner won (`planner.explain`); the
        kernel's own plan may differ where it was forced or tuned."""
        from warploom.planner import explain

        return explain(self.spec, self.device).text()

    def compile(self, target: str | None = None) -> Compiled:
        """Cross-compile without a GPU for `target` (default: the planned device's, ``sm_90a``, ``sm_100a`` or
        ``gfx1250``); the result has .sass (gfx1250: the AMDGCN assembly), .registers, .spills, .smem_bytes."""
        return _compiled(self, check_target(self.device.arch if target is None else target, self.module))

    def compile_tail(self, target: str | None = None) -> Compiled:
        """Cross-compile a split-K tail's kernel (`tail`), as `compile` does the main one."""
        self._require_tail("compile_tail")
        assert self.tail is not None
        return _compiled(self, check_target(self.device.arch if target is None else target, self.tail), tail=True)

    def compile_cast(self) -> Compiled:
        """Cross-compile a rule 29 plan's cast kernel (`ir.Module.amax_pass`: the second pass, which quantizes the
        first pass's workspace) for sm_90a, as `compile` does the GEMM."""
        from warploom.runtime.cross import cross_compile_cast

        if self.module.amax_pass is None:
            raise UnsupportedError(f"compile_cast: expected a kernel with a cast pass (planner rule 29's fused rowwise "
                                   f"quantization), got {self.plan.short()}, which has none. Fix: call compile() for "
                                   "its one kernel")
        return cross_compile_cast(self.module, self.gluon)

    def _require_tail(self, method: str) -> None:
        """Refuse a split-K tail's method on a kernel without one (a plain assertion said nothing of the fix)."""
        if self.tail is None:
            raise UnsupportedError(f"{method}: expected a kernel with a split-K tail (Plan.tail_split > 1), got "
                                   f"{self.plan.short()}, which launches once. Fix: use compile(), simulate() and "
                                   "plan.grid for its one launch")

    def run(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
            operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        """Launch on the GPU holding the tensors, checked against `spec` first (`_check_call`).

        With a fused epilogue, `operands` maps each of the graph's operand names to its tensor (for scaled_mm
        including scale_a, scale_b and bias), and `extra_outs` are the outputs after `out`."""
        launcher = self.launcher  # (a kernel of a target warploom has not run is refused first, by the launcher)
        _check_call(self.spec, a, b, scale_a, scale_b, bias, layouts=True)
        # (a meta tensor has no memory to launch on; CPU ones reach the launcher, whose host path the unit tests drive
        # with recorded launches; extra outputs the launcher checks against a's device)
        _check_devices({"a": a, "b": b, "out": out, "scale_a": scale_a, "scale_b": scale_b, "bias": bias}, launch=True)
        if operands is None and not extra_outs and not self.spec.grouped:  # (a fused epilogue's outputs and a grouped
            _check_out(self.spec, a, b, out)                                  # call's are their launchers' to check)
        if self.module.spec.epilogue is not None and not self.spec.grouped:
            _check_fused_operands(self.module, a, operands)
        return launcher(a, b, out, scale_a, scale_b, bias, operands=operands, extra_outs=extra_outs)

    @functools.cached_property
    def launcher(self) -> Any:
        from warploom.runtime.launch import Launcher

        tail = None if self.tail is None or self.tail_gluon is None else (self.tail, self.tail_gluon)
        return Launcher(self.module, self.gluon, tail=tail)

    def simulate(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                 scale_b: torch.Tensor | None = None, bias: torch.Tensor | None = None, *, seed: int = 0,
                 ctas: Iterable[int] | None = None, out: torch.Tensor | None = None,
                 record: bool = True, operands: Mapping[str, torch.Tensor] | None = None,
                 tail_ctas: Iterable[int] | None = None) -> SimResult:
        """Run this kernel's schedule on the CPU simulator for CPU tensors ``a (M, K) @ b (K, N)``.

        Any M, N, K (they are run-time arguments of the kernel, as on the GPU). `ctas` picks distinct program ids
        of the persistent grid (default: all, up to SIM_KERNEL_FACTOR x `sim_max_flops()`, WARPLOOM_SIM_MAX_FLOPS);
        tiles of the others stay NaN. See `warploom.sim.simulate`.
        With a split-K tail both launches run, as on the GPU: `ctas` picks in the first and `tail_ctas` in the
        tail's (default: `ctas` there too; ids past a launch's grid are dropped, ids past both refused). The report
        merges theirs, the tail's timeline after the first's (its partitions named ``tail:...``).
        """
        from warploom.sim import simulate
        from warploom.sim.simulate import ints, program_ids

        if isinstance(seed, bool) or not isinstance(seed, int):  # (a string seeded Python's random as a string)
            raise ArgumentTypeError("seed", "an int", f"{type(seed).__name__} {seed!r}", "pass seed=0 or another int")
        _check_call(self.spec, a, b, scale_a, scale_b, bias)
        _check_devices({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias, "out": out,
                        **dict(operands or {})}, launch=False)
        if out is not None and operands is None:
            _check_out(self.spec, a, b, out)
        # (read once per launch: an iterator would run out)
        ctas = None if ctas is None else ints("ctas", ctas, distinct=True)
        tail_ctas = None if tail_ctas is None else ints("tail_ctas", tail_ctas, distinct=True)
        if ctas is None and a.dim() == 2 and b.dim() == 2:
            _check_sim_size(a.shape[0], b.shape[1], a.shape[1] * (2 if self.spec.fp4_a else 1))
        if self.tail is not None:
            assert operands is None and bias is None, "a split-K tail has no bias or fused epilogue (planner)"
            launches = self.launches(a.shape[0], b.shape[1], a.shape[1], ctas, tail_ctas)
            for name, picked in (("ctas", ctas), ("tail_ctas", tail_ctas)):  # (ids past every launch's grid ran
                if picked is not None:                                        # nothing, and found nothing)
                    program_ids(name, picked, max((launch.grid for launch in launches), default=0))
            if not launches:  # an empty output: nothing launches, as on the GPU
                return simulate(self.module, a, b, scale_a, scale_b, seed=seed, ctas=(), out=out, record=record,
                                span=self.spans(a.shape[0], b.shape[1], a.shape[1])[0])
            results = []
            for launch in launches:
                res = simulate(launch.module, a, b, scale_a, scale_b, seed=seed, ctas=launch.ctas, out=out,
                               record=record, span=launch.span)
                out = res.output
                results.append(res)
            return _merged(results)
        if operands is not None:  # a fused epilogue: its operands, for scaled_mm its scales and bias too
            # (blockwise scales are the mainloop's, never graph operands: they stay positional)
            return simulate(self.module, a, b, scale_a, scale_b, seed=seed, ctas=ctas, out=out, record=record,
                            operands=operands)
        return simulate(self.module, a, b, scale_a, scale_b, bias, seed=seed, ctas=ctas, out=out, record=record)

    def check_protocol(self, *, seeds: Iterable[int] = range(4), ctas: Iterable[int] | None = None,
                       raise_on_finding: bool = True) -> CheckReport:
        """The simulator's protocol checks (no data) at the spec's size under each seed's schedule.

        By default one CTA per distinct tile count runs. Raises `warploom.sim.ProtocolError` on findings
        unless `raise_on_finding` is False. See `warploom.sim.check_protocol`.
        """
        from warploom.sim import CheckReport, check_protocol
        from warploom.sim.simulate import ints, program_ids

        s = self.module.spec  # (a swapped kernel's: the sizes its module runs at)
        seeds = ints("seeds", seeds)  # (read once per launch)
        ctas = None if ctas is None else ints("ctas", ctas, distinct=True)
        for name, picked in (("seeds", seeds), ("ctas", ctas)):
            if picked is not None and not picked:  # (nothing would run: a report of no findings would mean nothing)
                raise InputError(name, "at least one", "an empty selection",
                                 f"pass {name}=[0], or leave it out" + (" for one CTA of each tile count"
                                                                         if name == "ctas" else ""))
        if self.tail is None:
            return check_protocol(self.module, s.m, s.n, s.k, seeds=seeds, ctas=ctas,
                                  raise_on_finding=raise_on_finding)
        launches = self.launches(s.m, s.n, s.k, ctas)
        if ctas is not None:  # (ids past every launch's grid: refused as a plain kernel refuses them)
            program_ids("ctas", ctas, max((launch.grid for launch in launches), default=0))
        # (each launch takes the ids of `ctas` in its own grid, as `simulate`'s do: the tail's grid is smaller)
        reports = [check_protocol(launch.module, s.m, s.n, s.k, seeds=seeds,
                                  ctas=None if ctas is None else launch.ctas,
                                  raise_on_finding=raise_on_finding, span=launch.span)
                   for launch in launches]
        if not reports:  # an empty output launches nothing
            return CheckReport(self.module.name, tuple(seeds), (), 0, ())
        return CheckReport(" + ".join(r.module for r in reports), reports[0].seeds,
                           tuple(sorted({p for r in reports for p in r.ctas})), sum(r.steps for r in reports),
                           tuple(f for r in reports for f in r.findings))

    def spans(self, m: int, n: int, k: int) -> tuple[Span, Span]:
        """A split-K tail plan's two launches at M x N x K, as `runtime.launch` splits them."""
        from warploom.ir.raster import tail_spans

        self._require_tail("spans")
        assert self.tail is not None
        _sizes(m, n, k)
        t = self.module.tiling
        return tail_spans(-(-m // t.bm) * -(-n // t.tile_n), t.grid, self.tail.tiling.splits_evenly(k))

    def launches(self, m: int, n: int, k: int, ctas: Iterable[int] | None = None,
                 tail_ctas: Iterable[int] | None = None) -> tuple[Launch, ...]:
        """A split-K tail plan's launches at M x N x K that have tiles, in order: each module, its span, its grid
        and the program ids of `ctas` it has (`tail_ctas` for the tail's, by default `ctas`; all when None)."""
        from warploom.ir.raster import in_grid, launch_grid

        self._require_tail("launches")
        picks = (ctas, ctas if tail_ctas is None else tail_ctas)
        out = []
        for name, module, span, picked in zip(("main", "tail"), self.modules, self.spans(m, n, k), picks, strict=True):
            if span.tiles:
                t = module.tiling
                grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, span, t.stream_k, t.cluster, t.cluster_n)
                out.append(Launch(name, module, span, grid, in_grid(picked, grid)))
        return tuple(out)


@dataclass(frozen=True)
class Launch:
    """One launch of a split-K tail plan (`Kernel.launches`): which module over which tiles, its grid, and the
    program ids picked to simulate."""

    name: str
    module: ir.Module
    span: Span
    grid: int
    ctas: tuple[int, ...]


def _check_fused_operands(module: Any, a: Any, operands: Any) -> None:
    """A launch's fused-epilogue operands against the graph the kernel was captured with, as the simulator checks
    them (names, dtypes, shapes, strides), on a's device: the launcher reads each by name and passes its storage, so
    a missing one was a bare KeyError and a wrong one an out-of-bounds or silently wrong read. A swapped kernel's
    (rule 18) are checked as its graph reads them (`OperandSpec.transposed`)."""
    from warploom.errors import DTypeError, InputError
    from warploom.sim.simulate import check_operands, transposed_operand

    given = operands
    if module.tiling.swap_ab and isinstance(operands, Mapping):
        given = {name: transposed_operand(t) for name, t in operands.items()}
    try:
        check_operands(module, given, {}, frozenset(), device=a.device)
    except (InputError, DTypeError) as e:
        if module.tiling.swap_ab:
            e.add_note("(a swapped kernel, planner rule 18: checked as C^T's kernel reads them, (N,) operands as "
                       "(N, 1) and 2-D ones transposed)")
        raise


def _check_call(spec: GemmSpec, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, layouts: bool = False) -> None:
    """`Kernel.run`'s and `Kernel.simulate`'s arguments against the spec the kernel was planned for, before anything
    runs: the inputs' dtypes, scales of the kernel's recipe (none for an unscaled kernel) and, for a launch
    (`layouts`), A's and B's layouts, whose TMA descriptors the kernel was built for (the simulator reads either).
    Anything else would be dropped or read along the wrong axis without a word. M, N and K are the kernel's run-time
    arguments, and the simulator runs shapes TMA would refuse (`warploom.checks` refuses those for the public calls).
    (A grouped or fused kernel's operands are checked where they are bound: the grouped launch, the fused epilogue.)"""
    from warploom import checks
    from warploom.dtypes import DType
    from warploom.errors import ScaleError
    from warploom.spec import ScaleRecipe

    checks.check_tensors({"a": a, "b": b})
    _check_bias(spec, bias, b.shape[-1] if b.dim() == 2 else None)
    if spec.grouped or spec.epilogue is not None:
        return
    fix = "plan a kernel for these tensors (warploom.plan with them), or pass tensors like the planned ones"
    for arg, t, want in (("a", a, spec.a_dtype), ("b", b, spec.b_dtype)):
        have = DType.from_torch(t.dtype)
        if have is not want:
            raise InputError(arg, f"a_dtype {want.value} (the kernel was planned for {spec.short()})"
                             if arg == "a" else f"b_dtype {want.value} (the kernel was planned for {spec.short()})",
                             f"{arg}_dtype {have.value if have else t.dtype}", fix)
    if layouts and a.dim() == 2 and b.dim() == 2 and min(*a.shape, *b.shape) > 1:  # (size 1: either layout)
        for arg, have_l, want_l in (("a", checks.a_layout_of(a), spec.a_layout),
                                    ("b", checks.b_layout_of(b), spec.b_layout)):
            if have_l is not None and have_l is not want_l:
                raise InputError(arg, f"{arg}_layout {want_l.value} (the kernel was planned for {spec.short()})",
                                 f"{arg}_layout {have_l.value}", fix)
    if spec.scale is ScaleRecipe.NONE:
        for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
            if scale is not None:
                raise InputError(name, f"None: this kernel was planned for {spec.short()}, without scales",
                                 f"a {type(scale).__name__}", "plan a kernel with the scales (warploom.plan(a, b, "
                                 "scale_a, scale_b)), or pass none")
        return
    for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
        if scale is None:
            raise ScaleError(name, f"the {spec.scale.value} scales the kernel was planned for ({spec.short()})",
                             "None", f"pass {name}")
    if spec.scale is ScaleRecipe.MX and a.dim() == 2 and b.dim() == 2:
        # (MX scales: e8m0, (M, K/32) and (N, K/32) row-major or both blocked, as the kernel was planned; an fp4 A
        # holds two elements a byte)
        checks.check_tensors({"scale_a": scale_a, "scale_b": scale_b})
        k = a.shape[1] * (2 if spec.a_dtype is DType.E2M1 else 1)
        checks._mx_recipe(scale_a, scale_b, a.shape[0], b.shape[1], k)
        layout = checks.mx_scale_layout(scale_a, scale_b, a.shape[0], b.shape[1], k)
        if layout is not spec.scale_layout:
            raise ScaleError("scale_a, scale_b", f"MX scales in the {spec.scale_layout.value} layout the kernel was "
                             f"planned for ({spec.short()})", f"the {layout.value} layout", fix)
        return
    if spec.scale.microscaled or spec.scale is ScaleRecipe.NVFP4 or a.dim() != 2 or b.dim() != 2:
        return  # (NVFP4's scales come in pairs: the simulator's operands check them)
    checks.check_tensors({"scale_a": scale_a, "scale_b": scale_b})
    m, n, k = a.shape[0], b.shape[1], a.shape[1]
    got = checks._scale_recipe(scale_a, scale_b, m, n, k)
    # (scales whose shapes are the spec's recipe's at this size mean the same: a 128x128 scale_a at M = 1 is the
    # 1x128 one, 1x128 scales at K <= 128 are the rowwise ones, and the kernel reads them as its recipe's)
    shapes = (tuple(scale_a.shape), tuple(scale_b.shape))
    if got is not spec.scale and shapes not in checks.recipe_scale_shapes(spec.scale, m, n, k):
        raise InputError("scale_a, scale_b", f"scale {spec.scale.value}, as the kernel was planned for "
                         f"({spec.short()})", f"scale {got.value}", fix)


def _check_devices(named: Mapping[str, Any], launch: bool) -> None:
    """The tensors among `named` where a launch (`launch`) or the simulator can read them: a launch none on the meta
    device (no memory), the simulator all on the CPU. A tensor elsewhere failed deep in torch or Triton."""
    from warploom.errors import DeviceError

    for arg, t in named.items():
        if not hasattr(t, "device"):
            continue
        if launch and t.device.type == "meta":
            raise DeviceError(arg, "a CUDA tensor: Kernel.run launches on the GPU", f"a tensor on {t.device}",
                              f"pass {arg} with its data on the GPU (Kernel.simulate runs CPU tensors)")
        if not launch and t.device.type != "cpu":
            raise DeviceError(arg, "a CPU tensor: the simulator runs on the CPU", f"a tensor on {t.device}",
                              f"pass {arg}.cpu() (Kernel.run launches on the GPU)")


def _check_out(spec: GemmSpec, a: Any, b: Any, out: Any) -> None:
    """`out` as the kernel writes it: a tensor of the result's shape and the spec's output dtype, each element its
    own memory (an expanded view would be written through one element many times)."""
    import torch

    if not isinstance(out, torch.Tensor):
        raise ArgumentTypeError("out", "a torch.Tensor to write the result into", type(out).__name__,
                                "pass torch.empty(M, N, dtype=..., device=a.device)")
    want = (a.shape[0], b.shape[1]) if a.dim() == 2 and b.dim() == 2 else tuple(out.shape)
    dtype = spec.out_dtype.torch
    if tuple(out.shape) != want or out.dtype != dtype:
        raise InputError("out", f"shape {want} and dtype {dtype}", f"shape {tuple(out.shape)} and dtype {out.dtype}",
                         f"pass torch.empty({want[0]}, {want[-1]}, dtype={dtype}, device=a.device)")
    if out.numel() and torch._debug_has_internal_overlap(out) == 1:  # (1: overlaps for certain)
        raise InputError("out", "a tensor whose elements do not overlap", f"strides {tuple(out.stride())}",
                         "pass a fresh torch.empty(...) (not an expanded view)")
    for arg, t in (("a", a), ("b", b)):  # (the kernel reads them while it writes out: a shared byte was clobbered)
        if _spans_overlap(out, t):
            raise InputError("out", f"memory apart from {arg}'s", f"a view overlapping {arg}",
                             "pass a fresh torch.empty(...) for out")


def _spans_overlap(x: Any, y: Any) -> bool:
    """Whether two tensors' byte spans (first to last element) in one storage intersect."""
    from warploom.epilogue.operands import element_span

    if not (x.numel() and y.numel()) or x.device != y.device or x.device.type == "meta":
        return False
    if x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr():
        return False

    def span(t: Any) -> tuple[int, int]:
        lo = t.data_ptr()
        return lo, lo + (element_span(tuple(t.shape), tuple(t.stride())) + 1) * t.element_size()

    (x0, x1), (y0, y1) = span(x), span(y)
    return x0 < y1 and y0 < x1


def sim_max_flops() -> int:
    """The largest problem (2*M*N*K) the simulator runs whole: ``WARPLOOM_SIM_MAX_FLOPS``, or 2*512^3. CPU tensors
    to warploom.matmul (`placement.check_sim_size`) and `Kernel.simulate` of every CTA are refused above it, and
    ``warploom sim`` simulates a sample of CTAs instead."""
    raw = os.environ.get(SIM_MAX_FLOPS_ENV, "").strip()
    if not raw:
        return SIM_MAX_FLOPS
    try:
        flops = int(raw)
    except ValueError:
        flops = 0
    if flops < 1:  # (0 or less would refuse every CPU call, naming a limit no problem can meet)
        raise InputError(SIM_MAX_FLOPS_ENV, "a positive integer number of FLOPs (2*M*N*K), e.g. 2147483648",
                         repr(raw), f"set {SIM_MAX_FLOPS_ENV} to a positive integer, or unset it for the default "
                         f"{SIM_MAX_FLOPS}")
    return flops


def _check_sim_size(m: int, n: int, k: int) -> None:
    """Every CTA of an M x N x K problem on the simulator: at most SIM_KERNEL_FACTOR times `sim_max_flops()`, the
    limit `warploom.matmul` and ``warploom sim`` keep to on the CPU."""
    limit, flops = SIM_KERNEL_FACTOR * sim_max_flops(), 2 * m * n * k
    if flops > limit:
        raise InputError("ctas", f"a sample of program ids for a problem over {limit:,} FLOPs (2*M*N*K; "
                         f"{SIM_KERNEL_FACTOR} x {SIM_MAX_FLOPS_ENV}), the most Kernel.simulate runs whole",
                         f"None (every CTA) at {m}x{n}x{k} ({flops:,} FLOPs)",
                         f"pass ctas (and tail_ctas) from warploom.sim.sample_kernel_ctas(kernel, {m}, {n}, {k}), "
                         f"simulate a smaller shape, or raise {SIM_MAX_FLOPS_ENV} (the simulator runs a few GFLOP/s)")


def _sizes(m: Any, n: Any, k: Any) -> None:
    """M, N and K as ints >= 0 (a float or a negative size made nonsense spans)."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(name, "an int >= 0", repr(v), f"pass {name} as a non-negative int")


def _check_bias(spec: GemmSpec, bias: Any, n: int | None) -> None:
    """A bias given to a kernel planned without one would be silently dropped, and one longer than N or of another
    dtype read in part or reinterpreted: refuse them. A fused epilogue's bias is a graph operand, never positional
    (a positional one beside the operands was dropped)."""
    from warploom import checks
    from warploom.dtypes import DType
    from warploom.errors import DTypeError, ShapeError

    if bias is None:
        if spec.bias_dtype is not None and spec.epilogue is None and not spec.grouped:
            raise InputError("bias", f"the ({'N' if n is None else n},) {spec.bias_dtype.value} bias the kernel was "
                             f"planned with ({spec.short()})", "None", "pass the bias, or plan a kernel without one")
        return
    shape = tuple(getattr(bias, "shape", ()))
    if spec.epilogue is not None:
        raise InputError("bias", "None: a fused kernel takes its bias as an operand of its epilogue",
                         f"a tensor of shape {shape}", "pass it in operands={'bias': bias} (the epilogue's name for "
                         "it), as warploom.plan(..., epilogue=fn, bias=bias) planned it")
    if spec.bias_dtype is None:
        raise InputError("bias", "None: this kernel was planned without a bias", f"a tensor of shape {shape}",
                         "plan the kernel with the bias (warploom.plan(a, b, scale_a, scale_b, bias=bias), or "
                         "epilogue=lambda acc, bias: acc + bias, bias=bias)")
    if spec.grouped:
        return  # (a grouped bias, one row an expert, is the grouped launch's to check)
    checks.check_tensors({"bias": bias})
    if n is not None and shape != (n,):
        raise ShapeError("bias", f"shape ({n},): one value a column of the output", f"shape {shape}",
                         f"pass a 1-D bias of {n} elements")
    have = DType.from_torch(bias.dtype)
    if have is not spec.bias_dtype:
        raise DTypeError("bias", f"{spec.bias_dtype.value}, the bias dtype the kernel was planned with",
                         f"{have.value if have else bias.dtype}", f"pass bias.to({spec.bias_dtype.torch})")


def _merged(results: list[SimResult]) -> SimResult:
    """One SimResult for a split-K tail plan's launches: the last outputs (each launch wrote its tiles in place),
    the reports' CTAs, steps and findings together, and the timelines one after the other: the tail's events start
    after the first launch's last step, under partitions named ``tail:...`` (its CTA ids restart at 0)."""
    from dataclasses import replace

    if len(results) == 1:
        return results[0]
    first, tail = results[0].report, results[1].report
    shift = max((e.end for e in first.timeline), default=0)
    timeline = first.timeline + tuple(replace(e, partition=f"tail:{e.partition}", start=e.start + shift,
                                              end=e.end + shift) for e in tail.timeline)
    report = replace(tail, module=f"{first.module} + {tail.module}", ctas=tuple(sorted({*first.ctas, *tail.ctas})),
                     steps=first.steps + tail.steps, k_steps=first.k_steps + tail.k_steps,
                     findings=first.findings + tail.findings, timeline=timeline, wall_s=first.wall_s + tail.wall_s)
    return replace(results[-1], report=report)


@functools.lru_cache(maxsize=64)
def _compiled(k: Kernel, target: str, tail: bool = False) -> Compiled:
    if tail:
        assert k.tail is not None and k.tail_gluon is not None
        return cross_compile(k.tail, k.tail_gluon, target)
    return cross_compile(k.module, k.gluon, target)


@functools.lru_cache(maxsize=1024)
def build(spec: GemmSpec, device: DeviceInfo, plan: Plan | None = None) -> Kernel:
    """Plan (unless `plan` is given), run the pass pipeline and verify; cached per (spec, device, plan).

    With ``WARPLOOM_SIM_CHECK=1`` in the environment, each kernel built also runs the simulator's protocol
    checks at the spec's size (one CTA per distinct tile count, 2 schedules), and a finding raises
    `warploom.sim.ProtocolError`. A debugging aid: read on a cache miss only, so a launch pays nothing.
    """
    if plan is None:
        plan = plan_schedule(spec, device)
    else:  # (a hand-written plan's fields are checked against the spec and device by compile_schedule)
        check_device(device)
        plan = expect_plan(plan, "pass plan_schedule(spec, device), or dataclasses.replace(...) of one")
    module, trace = compile_schedule(spec, plan, device)
    tail = compile_schedule(spec, plan.tail(), device)[0] if plan.tail_split > 1 else None
    kernel = Kernel(spec, plan, device, module, trace, tail)
    if os.environ.get(SIM_CHECK_ENV, "0") not in ("", "0") and spec.m and spec.n and spec.k:
        kernel.check_protocol(seeds=range(2))  # an empty problem launches nothing: nothing to check
    return kernel
