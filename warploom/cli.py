"""The `warploom` command line.

`warploom demo`: plan a GEMM, print its schedule IR, write the generated Gluon, cross-compile it for
sm_90a and summarize the SASS; with a GPU, also run it, check it against torch and time both; without
one, run the planned kernel on the CPU simulator and compare with torch.

`warploom sim`: plan a GEMM and run it on the CPU simulator on random data (the whole problem when
small, else a sample of CTAs), print findings and the error against torch, optionally draw the timeline
and explore every schedule of a small configuration of the same plan.

`warploom bench`: the benchmark suite (warploom.benchsuite) on the GPU against torch and torch.compile,
written as JSON, a plot and a markdown section; `--report` renders an earlier run's JSON on the CPU, `--merge`
joins the JSON of a suite's shards (`--shard I/N`).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from warploom.benchsuite.shapes import Group, Op, Shard, Suite

if TYPE_CHECKING:
    from warploom.errors import SizeRule
    from warploom.kernel import Kernel
    from warploom.sim.explore import ExploreReport


# fp8 scale recipes by --scales: (scale_a shape, scale_b shape) as functions of (m, n, k); e8m0 for MX.
SCALES = {
    "rowwise": lambda m, n, k: ((m, 1), (1, n)),
    "tensorwise": lambda m, n, k: ((1,), (1,)),
    "blockwise": lambda m, n, k: ((m, -(-k // 128)), (-(-k // 128), -(-n // 128))),  # 1x128 x 128x128
    "blockwise-1x128": lambda m, n, k: ((m, -(-k // 128)), (-(-k // 128), n)),
    "mx": lambda m, n, k: ((m, k // 32), (n, k // 32)),
}


def _tensors(m: int, n: int, k: int, dtype: str, device: str, scales: str = "rowwise") -> tuple[Any, Any, Any, Any]:
    import torch

    if dtype in ("bf16", "fp16"):
        dt = torch.bfloat16 if dtype == "bf16" else torch.float16
        a = torch.randn(m, k, device=device, dtype=dt)
        b = torch.randn(n, k, device=device, dtype=dt).t()
        return a, b, None, None
    # sm_100a's native MX: e8m0 scales in torch's blocked layout (to_blocked); NVFP4: e4m3 ones per 16 of K and a
    # global fp32 scale each, as [block, global] pairs (torch.nn.functional.scaled_mm's convention)
    if dtype in ("mxfp8", "mxfp4", "nvfp4", "mxfp8xfp4"):
        from warploom.checks import blocked_scales
        from warploom.spec import NVFP4_BLOCK

        def fp4(rows: int) -> Any:  # two e2m1 values a byte along K
            return torch.randint(0, 256, (rows, k // 2), device=device, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)

        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn) if dtype.startswith("mxfp8") else fp4(m)
        b = (torch.randn(n, k, device=device).to(torch.float8_e4m3fn) if dtype == "mxfp8" else fp4(n)).t()
        if dtype == "nvfp4":
            pa, pb = ([(torch.rand(blocked_scales(rows, k, NVFP4_BLOCK), device=device) + 0.5)
                       .to(torch.float8_e4m3fn), torch.rand(1, device=device) + 0.5] for rows in (m, n))
            return a, b, pa, pb
        sa, sb = (torch.randint(120, 135, (blocked_scales(rows, k),), device=device, dtype=torch.uint8)
                  .view(torch.float8_e8m0fnu) for rows in (m, n))
        return a, b, sa, sb
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
    sa_shape, sb_shape = SCALES[scales](m, n, k)
    if scales == "mx":  # e8m0 bits for 2**-7..2**7
        def e8m0(shape: tuple[int, ...]) -> Any:
            return torch.randint(120, 135, shape, device=device, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        return a, b, e8m0(sa_shape), e8m0(sb_shape)
    sa = torch.rand(*sa_shape, device=device) + 0.5
    sb = torch.rand(*sb_shape, device=device) + 0.5
    return a, b, sa, sb


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="warploom", message="%(prog)s %(version)s")
def main() -> None:
    """warploom: warp-specialized, pipelined, persistent GEMM kernels for GPUs."""


def _target_device(target: str) -> Any:
    """The device a --target plans for: None (this machine's GPU, else an H100) for sm_90a, a B200 or a gfx1250."""
    from warploom.device import B200, GFX1250

    return {"sm_100a": B200, "gfx1250": GFX1250}.get(target)


def _planned(m: int, n: int, k: int, dtype: str, fast_accum: bool, stages: int | None = None,
             scales: str = "rowwise", device: Any = None, allocates: bool = True, aligned_rows: bool = False) -> Kernel:
    """The kernel warploom plans for an H100 (or this machine's GPU, or `device`) for the problem; `stages` forces
    the depth; `aligned_rows`: A's and B's rows padded to whole 128-byte lines (`warploom.aligned_rows`).

    A size warploom refuses (e.g. fp8 with N not a multiple of 16) is a usage error, printed without a traceback and
    named by its option (--n) with the nearest sizes that pass (`_size_message`).
    """
    import warploom
    from warploom.checks import FP4_K
    from warploom.errors import InputError, InternalError, WarploomError
    from warploom.kernel import build
    from warploom.placement import sim_max_flops
    from warploom.targets import deepest_stages

    try:
        sim_max_flops()  # a bad WARPLOOM_SIM_MAX_FLOPS is a usage error before any work, not after planning
    except WarploomError as e:
        raise click.UsageError(str(e)) from None
    sizes = {"M": m, "N": n, "K": k}
    if dtype in _FP4 and k % 2:  # (two values a byte: K // 2 bytes of an odd K would plan K - 1, or K = 0)
        raise click.UsageError(_size_message(FP4_K, sizes))
    if allocates:  # (`plan` only plans: its tensors are meta ones)
        _check_memory(m, n, k)
    a, b, sa, sb = _tensors(m, n, k, dtype, "meta", scales)
    if aligned_rows:
        a, b = warploom.aligned_rows(a), warploom.aligned_rows(b)
    try:
        kern = warploom.plan(a, b, sa, sb, use_fast_accum=fast_accum, device=device)
    except WarploomError as e:
        if isinstance(e, InternalError):
            raise
        # (a size this command line chose the tensors for: named as the option typed, not as a's stride)
        rule = e.rule if isinstance(e, InputError) else None
        raise click.UsageError(_in_cli_words(str(e)) if rule is None else _size_message(rule, sizes)) from None
    if stages is None:
        return kern

    # (only the depth changes: re-planning with it forced picked another tile, or dropped a split)
    try:
        return build(kern.spec, kern.device, replace(kern.plan, stages=stages))
    except WarploomError:  # (the depth's rings overflow shared memory: the deepest that fits, as build finds it)
        most = deepest_stages(kern.spec, replace(kern.plan, stages=stages), kern.device)
        raise click.BadParameter(f"{stages} stages of the planned {kern.plan.short()} do not fit "
                                 f"{kern.device.name}'s shared memory"
                                 + (f": pass --stages {most} or fewer" if most >= 2 else "")
                                 + f" (planned: {kern.plan.stages})", param_hint="--stages") from None


# The dtypes whose data packs two e2m1 values of K a byte (`_tensors` makes K // 2 bytes a row).
_FP4 = ("mxfp4", "nvfp4", "mxfp8xfp4")
# The GEMM's sizes (`SizeRule.dim`) as this command line's options.
_SIZE_OPTIONS = {"M": "--m", "N": "--n", "K": "--k"}


def _size_message(rule: SizeRule, sizes: dict[str, int]) -> str:
    """A size rule broken, named by the option typed (`sizes`: M, N and K as given), with the nearest sizes that
    keep it: the error the API raises names a's or b's stride, which no command-line user wrote."""
    option, value = _SIZE_OPTIONS[rule.dim], sizes[rule.dim]
    below, above = value // rule.multiple * rule.multiple, -(-value // rule.multiple) * rule.multiple
    nearest = " or ".join(f"{option} {v}" for v in (below, above) if v > 0)
    return (f"{option} {value}: expected a multiple of {rule.multiple} ({rule.why}), got {value}. "
            f"Fix: pass {nearest}")


# The Python API's spellings in the planner's messages, as this command line spells them.
_CLI_WORDS = (
    ("pass the scales before to_blocked, or plan for an sm_100a device (device=B200)",
     "pass --dtype fp8 --scales mx (MX scales row-major, as sm_90a reads them), or --target sm_100a"),
    ("plan for an sm_100a device (device=B200)", "pass --target sm_100a"),
    ("plan it for an sm_90a device (device=H100_SXM)", "pass --target sm_90a"),
    ("(device=B200)", "(--target sm_100a)"), ("(device=H100_SXM)", "(--target sm_90a)"),
    ("(device=GFX1250)", "(--target gfx1250)"),
    ("pass use_fast_accum=True", "pass --fast-accum"), ("pass use_fast_accum=False", "pass --no-fast-accum"),
    ("quantize to torch.float8_e4m3fn with MX scales for sm_90a", "pass --dtype fp8 --scales mx for sm_90a"),
)


def _in_cli_words(message: str) -> str:
    """`message` with the Python API's fixes spelt as this command line's options (a CLI user cannot pass
    device=B200)."""
    for api, cli in _CLI_WORDS:
        message = message.replace(api, cli)
    return message


def _check_memory(m: int, n: int, k: int) -> None:
    """Refuse, before planning (which enumerates the tiles), a problem whose random inputs, output and fp32 reference
    cannot fit in this machine's memory."""
    need = 4 * (m * k + k * n + 2 * m * n)  # (bytes, at most 4 per element)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): no check
        return
    if need > have:
        raise click.UsageError(f"--m {m} --n {n} --k {k} needs about {need / 2**30:,.0f} GiB for its inputs, output "
                               f"and reference; this machine has {have / 2**30:,.0f} GiB. Pick a smaller problem")


def _problem(m: int, n: int, k: int) -> Any:
    """The options that describe the GEMM: --m, --n, --k (with these defaults), --dtype, --fast-accum."""
    opts = [click.option(f"--{d}", type=click.IntRange(min=1), default=v, show_default=True)
            for d, v in (("m", m), ("n", n), ("k", k))] + [
        click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8", "mxfp8", "mxfp4", "nvfp4", "mxfp8xfp4",
                                                   "blockwise"]),
                     default="bf16", show_default=True, help="fp8: e4m3 with rowwise scales, as torch._scaled_mm; "
                     "blockwise: e4m3 with DeepSeek's fp32 1x128 x 128x128 scales, promoted (--dtype fp8 --scales "
                     "blockwise --no-fast-accum); "
                     "mxfp8 (e4m3) and mxfp4 (e2m1, two a byte): e8m0 scales per 32 of K in torch's blocked layout; "
                     "nvfp4 (e2m1): e4m3 scales per 16 of K, blocked, and an fp32 global scale each; mxfp8xfp4: an "
                     "e4m3 a with an e2m1 b, MX scales; sm_100a only"),
        click.option("--fast-accum/--no-fast-accum", default=True, show_default=True, help="fp8 accumulation"),
        click.option("--scales", type=click.Choice(list(SCALES)), default="rowwise", show_default=True,
                     help="fp8 scale recipe: blockwise is 1x128 x 128x128 (DeepSeek-V3), mx e8m0 per 32 of K"),
    ]

    def apply(f: Any) -> Any:
        @functools.wraps(f)
        def command(**kw: Any) -> Any:
            ctx = click.get_current_context()
            given = ctx.get_parameter_source("scales") is not click.core.ParameterSource.DEFAULT
            accum = ctx.get_parameter_source("fast_accum") is not click.core.ParameterSource.DEFAULT
            dtype = kw["dtype"]
            # (an option the dtype does not read would be ignored without a word: 16-bit inputs have no scales, and
            # blockwise and the block-scaled dtypes set their own)
            if dtype != "fp8" and given:
                raise click.UsageError(f"--scales {kw['scales']} goes with --dtype fp8; --dtype {dtype} "
                                       + ("has no scales" if dtype in ("bf16", "fp16") else "sets its own") +
                                       ". Fix: drop --scales, or pass --dtype fp8")
            if accum and (dtype in ("bf16", "fp16", "mxfp8", "mxfp4", "nvfp4", "mxfp8xfp4")
                          or dtype == "blockwise" and kw["fast_accum"]):
                raise click.UsageError(f"--{'' if kw['fast_accum'] else 'no-'}fast-accum goes with --dtype fp8; "
                                       f"--dtype {dtype} " + (
                                           "always promotes" if dtype == "blockwise" else
                                           "accumulates in fp32 itself" if dtype not in ("bf16", "fp16") else
                                           "has no fp8 accumulation") + ". Fix: drop it, or pass --dtype fp8")
            if dtype == "fp8" and accum and kw["fast_accum"] and kw["scales"] in ("blockwise", "blockwise-1x128", "mx"):
                # (the recipe promotes per block: fast accumulation was dropped without a word)
                raise click.UsageError(f"--fast-accum with --scales {kw['scales']}: that recipe applies its scales "
                                       "per block of K itself, so fast accumulation does not apply (it was ignored). "
                                       "Fix: drop --fast-accum")
            if dtype == "blockwise":  # (a name for the recipe's three options)
                kw.update(dtype="fp8", scales="blockwise", fast_accum=False)
            return f(**kw)

        for opt in reversed(opts):
            command = opt(command)
        return command

    return apply


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A float option that is a number (FloatRange lets NaN through: it compares false with every bound)."""
    if value is not None and value != value:
        raise click.BadParameter("expected a number, got nan: pass e.g. 3.0", ctx, param)
    return value


class _PathGiven(click.Path):
    """click.Path that refuses an empty string (Path("") is ".": a file written as the current directory failed after
    the run, and an --out-dir of "" wrote into the current directory)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail(f"expected a path, got {value!r}: pass a file or directory name", param, ctx)
        return super().convert(value, param, ctx)


def _creatable(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """An output path whose missing directories can be made: the nearest existing one above it is a directory
    (not a file, where mkdir would fail after the run)."""
    if value is None:
        return None
    above = next((p for p in value.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise click.BadParameter(f"{str(above)!r} is a file, so {str(value)!r} cannot be made under it", ctx, param)
    if above is not None and not _can_write_in(above):  # (/proc, a read-only mount: found after the run)
        raise click.BadParameter(f"{str(above)!r} is not writable, so {str(value)!r} cannot be made under it; "
                                 "pick a path you can write", ctx, param)
    return value


def _can_write_in(directory: Path) -> bool:
    """Whether a file can be made in `directory`, by making one (permission bits say nothing for root, or of /proc)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


# matplotlib's savefig picks the format by suffix; checked before any work, as is the directory it goes into.
_TIMELINE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _picture(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is not None and value.suffix.lower() not in _TIMELINE_SUFFIXES:
        raise click.BadParameter(f"expected a picture file ending in {', '.join(_TIMELINE_SUFFIXES)}, got "
                                 f"{str(value)!r}", ctx, param)


def _plot_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    _picture(ctx, param, value)
    return _creatable(ctx, param, value)


def _timeline_path(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    if value is None:
        return None
    _picture(ctx, param, value)
    parent = value.resolve().parent
    if parent.exists() and not parent.is_dir():
        raise click.BadParameter(f"{str(value.parent)!r} is a file, not a directory", ctx, param)
    if not parent.is_dir():
        raise click.BadParameter(f"the directory {str(value.parent)!r} does not exist; create it first", ctx, param)
    if not _can_write_in(parent):
        raise click.BadParameter(f"the directory {str(value.parent)!r} is not writable; pick a path you can write",
                                 ctx, param)
    return value


_TIMELINE = click.option("--timeline", type=_PathGiven(dir_okay=False, path_type=Path), default=None,
                         callback=_timeline_path, help="write the simulation's timeline picture (PNG) here")


@main.command()
@_problem(4096, 4096, 4096)
@click.option("--out-dir", type=_PathGiven(file_okay=False, path_type=Path), default=Path("out"), show_default=True,
              callback=_creatable)
@_TIMELINE
@click.option("--target", type=click.Choice(["sm_90a", "sm_100a", "gfx1250"]), default="sm_90a", show_default=True,
              help="sm_100a: plan for a B200 (planner rule 19), gfx1250: for an AMD gfx1250 (rule 20); both "
                   "cross-compile and simulate only")
def demo(m: int, n: int, k: int, dtype: str, fast_accum: bool, scales: str, out_dir: Path,
         timeline: Path | None, target: str) -> None:
    """Plan, show, cross-compile and run one GEMM: on the GPU (timed) or, without one, on the CPU simulator."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from warploom.targets import declared

    if timeline is not None and timeline.resolve() == out_dir.resolve():
        raise click.UsageError(f"--timeline {timeline} is also the --out-dir directory, where the generated Gluon "
                               "goes; name a picture file inside it, e.g. "
                               f"--timeline {out_dir / 'timeline.png'}")
    con = Console()
    decl = declared(target)
    gpu = torch.cuda.is_available() and decl.runs
    kern = _planned(m, n, k, dtype, fast_accum, scales=scales, device=None if decl.runs else decl.device)
    con.rule(f"[bold]plan[/] {kern.spec.short()}")
    con.print(_plan_table(kern))
    from warploom.planner import wave_fill

    con.print(f"persistent grid: {wave_fill(kern.spec, kern.plan).describe()}", highlight=False)
    con.print("why this plan (the planner's scored candidates; every field: Kernel.plan):", highlight=False)
    con.print(kern.explain(), highlight=False, markup=False)
    con.rule("[bold]schedule IR")
    con.print(kern.schedule, highlight=False, markup=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    # One file per kernel module, each runnable on its own (a split-K tail's module defines the same names).
    for module, gluon in ((kern.module, kern.gluon), (kern.tail, kern.tail_gluon)):
        if module is None or gluon is None:
            continue
        src = out_dir / f"{module.name}.py"
        src.write_text(gluon.text)
        con.print(f"generated Gluon written to [bold]{src}[/] ({len(gluon.text.splitlines())} lines)")
    con.rule(f"[bold]cross-compile {target}")
    mma = tuple(name for name, _ in decl.counts)
    cols = mma + ("registers", "spills", "smem_bytes") + (("wgmma_serialized",) if target == "sm_90a" else ())
    t = Table("kernel", *cols)
    for name, compile_it in (("main", kern.compile), ("split-K tail", kern.compile_tail if kern.tail else None)):
        if compile_it is None:
            continue
        s = compile_it(target).summary()
        t.add_row(name, *(str(s[c]) for c in cols))
    con.print(t)
    con.print("; ".join([*(f"{name}: {words}" for name, words in decl.counts), *_SASS_WORDS[target]]),
              highlight=False)
    if gpu:
        _run_gpu(con, m, n, k, dtype, fast_accum, scales)
    if not gpu or timeline is not None:  # (an sm_100a or gfx1250 kernel is simulated: no GPU here runs it)
        _run_sim(con, kern, 0, timeline, "simulate on the CPU" + (
            f" ({target}: cross-compiled, not run)" if target != "sm_90a" else "" if gpu else " (no GPU here)"))


@main.command("plan")
@_problem(4096, 4096, 4096)
@click.option("--target", type=click.Choice(["sm_90a", "sm_100a", "gfx1250"]), default="sm_90a", show_default=True,
              help="the device planned for: an H100, a B200 or an AMD gfx1250")
@click.option("--explain", is_flag=True, help="every candidate the planner scored, and why the winner won")
@click.option("--schedule", is_flag=True, help="also print the schedule IR")
@click.option("--aligned-rows", is_flag=True,
              help="A's and B's rows padded to whole 128-byte lines (warploom.aligned_rows), as padded operands are")
def plan_command(m: int, n: int, k: int, dtype: str, fast_accum: bool, scales: str, target: str, explain: bool,
                 schedule: bool, aligned_rows: bool) -> None:
    """Plan one GEMM and show the plan (no compile, no run): its tile, ring, warps, grid and schedule."""
    from rich.console import Console

    from warploom.planner import wave_fill

    con = Console()
    kern = _planned(m, n, k, dtype, fast_accum, scales=scales, device=_target_device(target), allocates=False,
                    aligned_rows=aligned_rows)
    con.rule(f"[bold]plan[/] {kern.spec.short()}")
    con.print(f"{kern.plan.short()}  ({kern.module.name})", highlight=False)
    con.print(_plan_table(kern))
    con.print(f"persistent grid: {wave_fill(kern.spec, kern.plan).describe()}", highlight=False)
    if explain:
        con.print(kern.explain(), highlight=False, markup=False)
    if schedule:
        con.print(kern.schedule, highlight=False, markup=False)


@main.command()
@_problem(256, 256, 512)
@click.option("--stages", type=click.IntRange(min=2), default=None,
              help="the ring depth of the planned kernel [default: planned]")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="the data's and the schedule's random seed")
@_TIMELINE
@click.option("--explore", is_flag=True, help="also explore every schedule of a small configuration of the plan")
@click.option("--max-states", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="--explore's bound on distinct states")
@click.option("--target", type=click.Choice(["sm_90a", "sm_100a", "gfx1250"]), default="sm_90a", show_default=True,
              help="the device planned for: an H100, a B200 (fp4 and MX) or an AMD gfx1250")
def sim(m: int, n: int, k: int, dtype: str, fast_accum: bool, scales: str, stages: int | None, seed: int,
        timeline: Path | None, explore: bool, max_states: int, target: str) -> None:
    """Run the planned kernel on the CPU simulator on random data and compare with torch; no GPU needed.

    Exits 1 on a finding or a mismatch, and where --explore stopped at --max-states (inconclusive).
    """
    from rich.console import Console

    con = Console()
    kern = _planned(m, n, k, dtype, fast_accum, stages, scales, device=_target_device(target))
    con.rule(f"[bold]plan[/] {kern.spec.short()}")
    con.print(f"{kern.plan.short()}  ({kern.module.name})", highlight=False)
    ok = _run_sim(con, kern, seed, timeline, "simulate", exit_on_failure=False)
    cut = False
    if explore:
        reports = _explore(con, kern, stages, max_states)
        ok = all(r.ok for r in reports) and ok
        cut = any(r.bound_hit for r in reports)
    if not ok:
        sys.exit("the simulation found a problem")
    if cut:  # (no finding among the schedules seen is no verdict on those beyond the bound: not a pass)
        sys.exit(f"inconclusive: --explore stopped at --max-states {max_states} before it had seen every schedule "
                 f"(none of those it saw had a finding). Fix: pass a larger --max-states, e.g. --max-states "
                 f"{4 * max_states}")


# The cross-compile table's other columns in words, per target (the instruction counts' words are the target's
# declaration's).
_NVIDIA_WORDS = ("registers: the cap per thread", "spills: bytes spilled to local memory (0 is good)")
_SASS_WORDS = {
    "sm_90a": (*_NVIDIA_WORDS, "wgmma_serialized: ptxas serialized the async MMAs (False is good)"),
    "sm_100a": _NVIDIA_WORDS,
    "gfx1250": ("VGPRs and scratch (0 is good): registers and spills",),
}


def _plan_table(kern: Kernel) -> Any:
    """The plan as a short table: the tile, the ring, the warps and their registers, the grid and the schedule."""
    from rich.table import Table

    p, mod = kern.plan, kern.module
    schedule = (f"stream-K, {p.stream_k} pieces for the last wave's tiles" if p.stream_k else
                f"split-K tail, {p.tail_split} k-ranges" if p.tail_split > 1 else
                f"split-K, {p.split_k} k-ranges" if p.split_k > 1 else
                "ping-pong consumers" if p.pingpong else "whole tiles, cooperative")
    t = Table("tile (BMxBNxBK)", "stages", "partitions: warps x registers", "grid", "schedule", "smem")
    parts = ", ".join(f"{q.name} {q.warps}x{q.regs}" if q.regs else f"{q.name} {q.warps}" for q in mod.partitions)
    t.add_row(f"{p.bm}x{p.bn}x{p.bk}" + (" (swapped: C^T)" if p.swap_ab else ""), str(p.stages), parts,
              str(p.grid), schedule, f"{mod.smem_bytes // 1024} KiB")
    return t


def _run_sim(con: Any, kern: Kernel, seed: int, timeline: Path | None, title: str, *,
             exit_on_failure: bool = True) -> bool:
    """Simulate `kern` at its size on random data: every CTA when small, else `sample_ctas`; compare with torch."""
    from warploom.placement import SIM_MAX_FLOPS_ENV, sim_max_flops
    from warploom.reference import make_inputs
    from warploom.sim import compare_kernel, draw_timeline, sample_kernel_ctas
    from warploom.sim.compare import TOLERANCE

    s = kern.spec
    whole = s.flops <= sim_max_flops()
    ctas, tail_ctas = (None, None) if whole else sample_kernel_ctas(kern, s.m, s.n, s.k)
    con.rule(f"[bold]{title}")
    if not whole:
        con.print(f"{s.m}x{s.n}x{s.k} is above the simulator's whole-problem limit ({SIM_MAX_FLOPS_ENV}): "
                  "simulating a sample of CTAs, one per distinct tile count and the last tile's")
    cmp = compare_kernel(kern, make_inputs(s, s.m, s.n, s.k, seed=seed), ctas=ctas, tail_ctas=tail_ctas,
                         seed=seed, record=timeline is not None)
    rep = cmp.result.report

    def ids(pids: tuple[int, ...]) -> str:
        return ", ".join(map(str, pids)) if len(pids) <= 8 else f"{pids[0]}..{pids[-1]}"

    if kern.tail is not None:
        whole_span, rest = kern.spans(s.m, s.n, s.k)
        con.print(f"two launches: tiles {whole_span.lo}..{whole_span.hi} whole, {rest.lo}..{rest.hi} as "
                  f"{kern.plan.tail_split}-way split-K units (the tail)")
        ran = "; ".join(f"{name} {len(p)} of {g} ({ids(p)})" for name, g, p in cmp.launches)
    else:
        ran = f"{len(rep.ctas)} of {cmp.grid} ({ids(rep.ctas)})"
    n_tiles = kern.plan.units(s.m, s.n) // kern.plan.split_k
    con.print(f"CTAs simulated: {ran}; output tiles: {len(cmp.tiles)} of {n_tiles}; k-steps (MMAs issued): "
              f"{rep.k_steps}; scheduler steps: {rep.steps}")
    con.print("findings: " + ("none" if rep.ok else f"{len(rep.findings)}"), highlight=False)
    for f in rep.findings:
        con.print(f"  - {f}", highlight=False, markup=False)
    con.print(f"error vs fp32 reference on those tiles (1 - 2Σxy/Σ(x²+y²)): {cmp.error:.2e} "
              f"(good: below {TOLERANCE:g})")
    con.print(f"sim wall time: {rep.wall_s:.2f} s (with the comparison: {cmp.wall_s:.2f} s)")
    if timeline is not None:
        con.print(f"timeline written to [bold]{draw_timeline(cmp.result, timeline)}[/]")
    if not cmp.ok and exit_on_failure:
        sys.exit("the simulated kernel does not match the reference")
    return cmp.ok


def _explore(con: Any, kern: Kernel, stages: int | None, max_states: int) -> list[ExploreReport]:
    """Every schedule of one CTA of the same plan on 2 tiles whose k-blocks wrap the ring (protocol only); the
    reports, the split-K tail's too, each cut where it reached `max_states` states (`ExploreReport.bound_hit`).

    Unless forced, the ring is cut to 3 stages, which already wrap across the tile boundary: 3 explore
    completely in about a second, 6 pass 200,000 states. Tile shape, partitions and epilogue stay the plan's.
    """
    from warploom.kernel import build
    from warploom.sim import explore

    depth = stages if stages is not None else min(kern.plan.stages, 3)
    # (a tail's ring is cut the same way)
    tail_depth = min(kern.plan.tail_stages, depth) if kern.plan.tail_split > 1 else kern.plan.tail_stages
    small = build(kern.spec, kern.device, replace(kern.plan, grid=1, stages=depth, tail_stages=tail_depth))
    t = small.module.tiling
    ks = max(2, -(-(depth + 1) // 2))  # 2 tiles of ks k-blocks: more k-blocks in all than ring slots
    con.rule("[bold]explore every schedule")
    con.print(f"one CTA, 2 tiles of {t.bm}x{t.tile_n}, {ks} k-blocks each, {depth} stages (problem "
              f"{t.bm}x{2 * t.tile_n}x{ks * t.bk})")
    r = explore(small.module, t.bm, 2 * t.tile_n, ks * t.bk, max_states=max_states)
    _print_explored(con, r, max_states)
    if small.tail is None:
        return [r]
    # The split-K tail: one tile as units of 2 k-blocks in each of its k-ranges, all in the one CTA (more k-blocks
    # than ring slots again; two tiles' units pass the default bound of states).
    ts = small.tail.tiling.split_k
    con.print(f"split-K tail: 1 tile x {ts} k-ranges of 2 k-blocks (problem {t.bm}x{t.bn}x{2 * ts * t.bk})")
    tail = explore(small.tail, t.bm, t.bn, 2 * ts * t.bk, max_states=max_states)
    _print_explored(con, tail, max_states)
    return [r, tail]


def _print_explored(con: Any, r: ExploreReport, max_states: int) -> None:
    con.print(r.summary(), highlight=False, markup=False)
    con.print(f"states: {r.states}")
    if r.bound_hit:
        con.print(f"[bold yellow]cut at --max-states {max_states}[/]: the schedules past the bound were not explored",
                  highlight=False)


def _run_gpu(con: Any, m: int, n: int, k: int, dtype: str, fast_accum: bool, scales: str = "rowwise") -> None:
    import torch
    import triton

    import warploom
    from warploom.reference import Inputs, reference

    a, b, sa, sb = _tensors(m, n, k, dtype, "cuda", scales)
    theirs: Any = None
    if sa is None:
        ours = lambda: warploom.matmul(a, b)  # noqa: E731
        theirs = lambda: torch.matmul(a, b)  # noqa: E731
    else:
        ours = lambda: warploom.scaled_mm(a, b, sa, sb, use_fast_accum=fast_accum)  # noqa: E731
        # torch's kernel for the recipe, when this torch has one (blockwise wants outer-dim-major 1x128 scales;
        # MX has none on Hopper)
        ta = sa.t().contiguous().t() if scales.startswith("blockwise") else sa
        try:
            torch._scaled_mm(a, b, ta, sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
            theirs = lambda: torch._scaled_mm(a, b, ta, sb, out_dtype=torch.bfloat16,  # noqa: E731
                                              use_fast_accum=fast_accum)
        except (RuntimeError, NotImplementedError):
            theirs = None
    ref = reference(Inputs(a, b, sa, sb))
    out = ours().double()
    err = float(1 - 2 * (out * ref).sum() / (out * out + ref.double() ** 2).sum())
    t_ours = triton.testing.do_bench(ours, return_mode="median")
    tf = 2 * m * n * k / 1e9
    con.rule("[bold]run on " + torch.cuda.get_device_name())
    con.print(f"error vs fp32 reference (1 - 2Σxy/Σ(x²+y²)): {err:.2e}")
    if theirs is None:
        con.print(f"warploom {tf / t_ours:.0f} TFLOP/s (torch has no kernel for {scales} scales here)")
    else:
        t_theirs = triton.testing.do_bench(theirs, return_mode="median")
        con.print(f"warploom {tf / t_ours:.0f} TFLOP/s, torch {tf / t_theirs:.0f} TFLOP/s, "
                  f"ratio {t_theirs / t_ours:.3f}")
    if err > 1e-3:
        sys.exit("warploom's result does not match the reference")


def _enum_list(kind: Any) -> Any:
    """A click callback parsing a comma-separated list of `kind`'s values into a tuple of members (None: all)."""

    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[Any, ...] | None:
        if value is None:
            return None
        names = [v.strip() for v in value.split(",") if v.strip()]
        valid = [e.value for e in kind]
        bad = [v for v in names if v not in valid]
        if bad or not names:
            raise click.BadParameter(f"expected a comma-separated list of {', '.join(valid)}; got {value!r}")
        return tuple(kind(v) for v in names)

    return parse


_PATH = _PathGiven(dir_okay=False, path_type=Path)


def _sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> frozenset[tuple[int, int, int]] | None:
    """--shapes: a comma-separated list of MxNxK sizes (None: every size)."""
    if value is None:
        return None
    sizes = set()
    for text in (v.strip() for v in value.split(",")):
        parts = text.split("x")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise click.BadParameter(f"expected a comma-separated list of MxNxK sizes, got {text!r} in {value!r}. "
                                     "Fix: write each size as three whole numbers joined by x, e.g. "
                                     "--shapes 43x88x7960,469x96x4928")
        m, n, k = (int(p) for p in parts)
        sizes.add((m, n, k))
    return frozenset(sizes)


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> Shard | None:
    try:
        return None if value is None else Shard.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@main.command()
@click.option("--suite", type=click.Choice([s.value for s in Suite]), default="quick", show_default=True,
              help="quick: a handful of cases (under a minute on an H100); full: every op at every shape; zoo: every "
                   "op at 224 random shapes (run it in --shard parts)")
@click.option("--ops", default=None, callback=_enum_list(Op),
              help="only these ops, comma-separated: " + ", ".join(o.value for o in Op))
@click.option("--groups", default=None, callback=_enum_list(Group),
              help="only these shape groups, comma-separated: " + ", ".join(g.value for g in Group))
@click.option("--shapes", "sizes", default=None, callback=_sizes,
              help="only cases at these sizes, comma-separated MxNxK, as each op sizes the suite's shape (the zoo's "
                   "fp8 N and K in multiples of 16, blockwise M in multiples of 4): re-time a few zoo shapes")
@click.option("--compile", "use_compile", is_flag=True,
              help="also time torch.compile(mode='max-autotune-no-cudagraphs') (~40 s per case)")
@click.option("--graph", is_flag=True, help="CUDA-graph timing for every shape (decode shapes always)")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="the inputs' random seed")
@click.option("--shard", default=None, callback=_shard,
              help="I/N: run only every N-th case from the I-th (0-based); merge the shards' JSON with --merge")
@click.option("--merge", is_flag=True, help="merge the results files given as arguments (shards of one run) "
                                            "into --out, then render them like --report")
@click.argument("merge_files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=_PATH, default=None, callback=_creatable,
              help="write the results JSON here (needed to run)")
@click.option("--report", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="render this earlier run's JSON instead of running (no GPU needed)")
@click.option("--plot", type=_PATH, default=None, callback=_plot_path, help="write the plot (PNG) here")
@click.option("--markdown", "markdown_out", type=_PATH, default=None, callback=_creatable,
              help="write the markdown section for docs/benchmarks.md here")
@click.option("--bandwidth", type=click.FloatRange(min=0, min_open=True, max=1e6), default=None, callback=_finite,
              help="memory roof in TB/s [default: the run's measured copy bandwidth, else 3.0]")
def bench(suite: str, ops: tuple[Op, ...] | None, groups: tuple[Group, ...] | None,
          sizes: frozenset[tuple[int, int, int]] | None, use_compile: bool, graph: bool, seed: int, shard: Shard | None,
          merge: bool, merge_files: tuple[Path, ...], out: Path | None,
          report: Path | None, plot: Path | None, markdown_out: Path | None, bandwidth: float | None) -> None:
    """Time warploom against torch (cuBLAS) and torch.compile over a suite; write JSON, a plot and markdown.

    With --report, only render an earlier run's JSON (--plot, --markdown; the markdown goes to stdout when
    neither is given). `warploom bench --merge a.json b.json --out all.json` joins shards of one run.
    """
    from rich.console import Console

    from warploom.benchsuite.results import MergeError, Results, ResultsFormatError
    from warploom.benchsuite.results import merge as merge_results

    con = Console()
    if merge or merge_files:
        if not merge or not merge_files or out is None or report is not None:
            raise click.UsageError("merge shards with: warploom bench --merge a.json b.json ... --out all.json")
        if any(f.resolve() == out.resolve() for f in merge_files):  # (the merged file would replace a shard)
            raise click.BadParameter(f"{str(out)!r} is one of the shards merged; write the merge to a new file",
                                     param_hint="--out")
        try:
            results = merge_results([Results.load(f) for f in merge_files], [str(f) for f in merge_files])
        except (ResultsFormatError, MergeError) as e:
            raise click.BadParameter(str(e), param_hint="--merge") from None
        results.save(out)
        con.print(f"{len(results.rows)} rows of {len(merge_files)} files merged into [bold]{out}[/]")
        _render(con, results, plot, markdown_out, bandwidth, stdout=False)
        return
    if report is not None:
        if out is not None:
            raise click.UsageError("--report renders an earlier run and --out writes a new one: pass one of them")
        try:
            results = Results.load(report)
        except ResultsFormatError as e:
            raise click.BadParameter(str(e), param_hint="--report") from None
        _render(con, results, plot, markdown_out, bandwidth, stdout=plot is None and markdown_out is None)
        return
    if out is None:
        raise click.UsageError("pass --out results.json to run the suite, or --report results.json to render one")
    import torch

    if not torch.cuda.is_available():
        raise click.ClickException(
            "warploom bench times kernels on a CUDA GPU (an H100), and torch sees none here. Run it on the GPU "
            "machine; to render an earlier run here: warploom bench --report results.json --plot bench.png "
            "--markdown bench.md")
    from warploom.benchsuite.run import Options, run_suite
    from warploom.benchsuite.shapes import cases

    selected = cases(Suite(suite), ops, groups, sizes)
    if shard is not None:
        selected = shard.select(selected)
    if not selected:
        raise click.UsageError(f"no case of the {suite} suite has those --ops, --groups, --shapes and --shard")
    opts = Options(compile=use_compile, graph=graph, seed=seed, ops=tuple(o.value for o in ops or ()),
                   groups=tuple(g.value for g in groups or ()), shard="" if shard is None else str(shard),
                   shapes=tuple(f"{m}x{n}x{k}" for m, n, k in sorted(sizes or ())))
    part = "" if shard is None else f" (shard {shard})"
    con.rule(f"[bold]warploom bench[/] {suite}{part}: {len(selected)} cases on {torch.cuda.get_device_name()}")
    results = run_suite(selected, opts, out, suite, con)
    con.print(f"results written to [bold]{out}[/]")
    _render(con, results, plot, markdown_out, bandwidth, stdout=False)
    bad = [r for r in results.rows if not r.ok]
    if bad:
        sys.exit(f"{len(bad)} of {len(results.rows)} cases failed or did not match the reference: "
                 + "; ".join(f"{r.case.short()}: {r.failure}" for r in bad[:5]))


def _render(con: Any, results: Any, plot: Path | None, markdown_out: Path | None, bandwidth: float | None, *,
            stdout: bool) -> None:
    """The per-op summary table on the console, then the plot and the markdown where asked."""
    import os

    from rich.table import Table

    from warploom.benchsuite import report

    peaks = report.peaks_for(results.env, bandwidth)
    if results.env.suite == Suite.ZOO.value:  # the zoo's geomeans are over every shape, small ones too
        from warploom.benchsuite import report_zoo

        t = Table("op", "shapes", "geomean ratio", "geomean graph", "faster than torch", "worst (headline)",
                  title="the zoo: torch ms / warploom ms over every shape (above 1: warploom is faster)")
        for z in report_zoo.summarize(results):
            worst = "-" if not z.worst else f"{z.worst[0].headline_ratio:.3f} ({z.worst[0].case.shape.name})"
            t.add_row(z.op.label, str(z.ran), *(f"{v:.3f}" if v is not None else "-" for v in
                                                 (z.geomean_ratio, z.geomean_graph_ratio)), str(z.faster), worst)
        con.print(t)
    else:
        t = Table("op", "large shapes", "geomean ratio", "geomean graph", "geomean compile", "worst (headline)",
                  title="torch ms / warploom ms (above 1: warploom is faster)")
    for s in () if results.env.suite == Suite.ZOO.value else report.summarize(results):
        worst = "-" if s.worst is None else f"{s.worst.headline_ratio:.3f} ({s.worst.case.shape.name})"
        t.add_row(s.op.label, str(s.large), *(f"{v:.3f}" if v is not None else "-" for v in
                                               (s.geomean_ratio, s.geomean_graph_ratio, s.geomean_compile_ratio)),
                  worst)
    if results.env.suite != Suite.ZOO.value:
        con.print(t)
    if plot is not None:
        try:
            con.print(f"plot written to [bold]{report.plot(results, peaks, plot)}[/]")
        except ImportError as e:  # a GPU machine without matplotlib: the JSON is saved, draw it elsewhere
            con.print(f"[red]no plot[/] ({e}): draw it where matplotlib is, with warploom bench --report")
            plot = None
    if markdown_out is not None or stdout:
        link = None
        if plot is not None:
            base = markdown_out.parent if markdown_out is not None else Path.cwd()
            link = os.path.relpath(plot.resolve(), base.resolve())
        text = report.markdown(results, peaks, link)
        if markdown_out is None:
            click.echo(text)
        else:
            markdown_out.parent.mkdir(parents=True, exist_ok=True)
            markdown_out.write_text(text)
            con.print(f"markdown written to [bold]{markdown_out}[/]")


if __name__ == "__main__":
    main()
