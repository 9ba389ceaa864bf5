"""Run cases on the GPU: warploom against torch eager (cuBLAS) and, optionally, torch.compile of the same function.

For each case, in one process: random inputs (seeded, never all zeros), an fp32 reference, warploom's output
checked against it and against torch's (`check`), then the timings. Eager timings are `do_bench` medians of
Python calls (host overhead included); CUDA-graph timings replay a graph of 10 calls (kernel time only) and
are taken for decode shapes, or for every shape with ``graph=True``. Timing and compiling are injected
(`Timer`, `Compiler`) so the whole path runs on the CPU in tests, where warploom runs on its simulator.

Importing this module imports torch (as warploom does) but not triton, and touches no GPU.
"""

from __future__ import annotations

import contextlib
import functools
import math
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

import warploom
from warploom.benchsuite.results import Environment, Measurement, Results, Row
from warploom.benchsuite.shapes import Case, Group, Op, Tensor
from warploom.benchsuite.tables import ERR_FLOOR
from warploom.errors import KernelHangError
from warploom.reference import dequantized, relative_error
from warploom.runtime.timing import finish_within, time_eager, time_graph

# warploom's output may be off the fp32 reference by `tables.ERR_FLOOR` (scale-free error), or by this many times
# torch's error where that is larger and torch's own is within ERR_FLOOR.
ERR_TORCH_FACTOR = 4.0
# bf16 against torch.matmul's output: one bf16 ulp is 2^-8 relative; accumulation order moves fp32 sums little.
BF16_RTOL = BF16_ATOL = 2e-2


class Timer(Protocol):
    """How a contender is timed; both return milliseconds per call."""

    def eager(self, fn: Callable[[], Any]) -> float: ...

    def graph(self, fn: Callable[[], Any]) -> float: ...


class GpuTimer:
    """warploom.bench's timing: `do_bench` median (100 ms warm-up, 500 ms of repeats), and CUDA graphs of 10 calls."""

    def eager(self, fn: Callable[[], Any]) -> float:
        return time_eager(fn)

    def graph(self, fn: Callable[[], Any]) -> float:
        return time_graph(fn)


Compiler = Callable[[Callable[..., Any]], Callable[..., Any]]


def compile_max_autotune(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile as a tuned deployment would: max-autotune without its own CUDA graphs (we add ours).

    Dynamo is reset first: each case compiles afresh for its static shape, rather than hitting the
    recompile limit over a suite's shapes and silently falling back to eager.
    """
    torch._dynamo.reset()
    return torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)


@dataclass(frozen=True)
class Options:
    """How to run a suite.

    Attributes:
        compile: also time torch.compile of the torch function (~40 s of autotuning per case).
        graph: CUDA-graph timing for every shape (decode shapes always get it).
        seed: the inputs' seed; device: where tensors live (``cuda``; ``cpu`` for tests on the simulator).
        ops, groups, shapes: the command line's filters (shapes as MxNxK), recorded in the results' environment.
        shard: ``I/N`` when the run is one shard of its suite (the caller picked its cases), else ''.
    """

    compile: bool = False
    graph: bool = False
    seed: int = 0
    device: str = "cuda"
    ops: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()
    shard: str = ""


# The torch contenders, one plain function per op so torch.compile sees exactly what eager runs.
def torch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def torch_scaled_mm_fast(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> Any:
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)


def torch_scaled_mm_exact(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> Any:
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=False)


def gelu_residual(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The fused case's epilogue; warploom gets it as ``epilogue=`` and computes it on the fp32 accumulator."""
    return F.gelu(acc) + residual


def torch_fused(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, bias: torch.Tensor,
                residual: torch.Tensor) -> torch.Tensor:
    y = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    return gelu_residual(y, residual)


def torch_fused_bias_apart(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                           bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """`torch_fused` with the bias added by a second kernel: cuBLASLt refuses some shapes' bias epilogue
    (CUBLAS_STATUS_NOT_SUPPORTED from its heuristic, e.g. 191x448x14496 and 8x112x5248 on the H100)."""
    y = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)
    return gelu_residual(y + bias, residual)


def torch_scaled_mm_blockwise(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> Any:
    """torch's blockwise `_scaled_mm` (cuBLASLt's 1x128 x 128x128 kernel: scale_a outer-dim-major, scale_b
    column-major, as `inputs` makes them)."""
    return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)


TORCH_FNS: dict[Op, Callable[..., Any]] = {
    Op.MATMUL_BF16: torch_matmul,
    Op.SCALED_MM_FP8_ROWWISE_FAST: torch_scaled_mm_fast,
    Op.SCALED_MM_FP8_ROWWISE_EXACT: torch_scaled_mm_exact,
    Op.SCALED_MM_FP8_TENSORWISE: torch_scaled_mm_fast,
    Op.FUSED_EPILOGUE: torch_fused,
    Op.SCALED_MM_FP8_BLOCKWISE: torch_scaled_mm_blockwise,
}


def warploom_call(case: Case, x: dict[str, torch.Tensor]) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The warploom function, positional and keyword arguments for the case; `warploom.plan` takes the same."""
    if case.op is Op.MATMUL_BF16:
        return warploom.matmul, (x["a"], x["b"]), {}
    kw: dict[str, Any] = {"use_fast_accum": case.op.fast_accum}
    if case.op is Op.FUSED_EPILOGUE:
        kw.update(bias=x["bias"], epilogue=gelu_residual, residual=x["residual"])
    return warploom.scaled_mm, (x["a"], x["b"], x["scale_a"], x["scale_b"]), kw


def inputs(case: Case, device: str) -> dict[str, torch.Tensor]:
    """Random tensors for every input of `case.tensors()`, by name (seed with torch.manual_seed first)."""
    return {t.name: _random(case, t, device) for t in case.tensors() if t.name != "out"}


def _random(case: Case, t: Tensor, device: str) -> torch.Tensor:
    dt = t.dtype.torch
    if t.name == "b":  # (K, N) viewed from an (N, K) row-major weight: the K-major b both libraries want
        return torch.randn(t.shape[::-1], device=device).to(dt).t()
    if t.name.startswith("scale"):
        # Fused: smaller scales keep gelu's input (|acc| ~ sqrt(K) * scale_a * scale_b) in its curved range.
        low, width = (0.05, 0.125) if case.op is Op.FUSED_EPILOGUE else (0.5, 1.0)
        if case.op is Op.SCALED_MM_FP8_BLOCKWISE:
            # The layouts torch's blockwise kernel takes: both scales column-major (scale_a "outer-dim-major")
            return (torch.rand(t.shape[::-1], device=device) * width + low).t()
        return torch.rand(t.shape, device=device) * width + low
    return torch.randn(t.shape, device=device).to(dt)


@contextlib.contextmanager
def _exact_fp32() -> Iterator[None]:
    """fp32 matmuls without TF32, whatever the process set."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def reference(case: Case, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """The op in fp32 on the same (already rounded) inputs."""
    if case.op is Op.SCALED_MM_FP8_BLOCKWISE:  # scales inside the sum: each operand dequantized block by block
        a, b = dequantized(x["a"], x["b"], x["scale_a"], x["scale_b"])
        with _exact_fp32():
            return a @ b
    with _exact_fp32():
        acc = x["a"].float() @ x["b"].float()  # (M, N)
    if case.op is Op.MATMUL_BF16:
        return acc
    acc = acc * x["scale_a"] * x["scale_b"]
    if case.op is Op.FUSED_EPILOGUE:
        return gelu_residual(acc + x["bias"].float(), x["residual"].float())
    return acc


def err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Scale-free error 1 - 2Σxy/Σ(x²+y²), in float64 (`warploom.reference.relative_error`)."""
    return relative_error(x, ref)


def check(case: Case, ours: Any, theirs: torch.Tensor, ref: torch.Tensor) -> str:
    """'' when warploom's output is right; else what is wrong.

    Every op: the scale-free error against the fp32 reference at most max(ERR_FLOOR, 4x torch's), or ERR_FLOOR where
    torch's own is off by more than ERR_FLOOR (torch computed another product there). bf16 also
    element-wise against torch.matmul's output (rtol = atol = 2e-2), which catches a few wrong tiles that the
    global metric averages away.
    """
    if not isinstance(ours, torch.Tensor) or tuple(ours.shape) != (case.m, case.n) or ours.dtype != torch.bfloat16:
        got = f"{tuple(ours.shape)} {ours.dtype}" if isinstance(ours, torch.Tensor) else type(ours).__name__
        return f"expected a ({case.m}, {case.n}) bfloat16 output, got {got}"
    e_ours, e_torch = err(ours, ref), err(theirs, ref)
    # (torch's error sets the bar only where torch computed the product)
    limit = max(ERR_FLOOR, ERR_TORCH_FACTOR * e_torch) if e_torch <= ERR_FLOOR else ERR_FLOOR
    if not math.isfinite(e_ours) or e_ours > limit:
        return f"error {e_ours:.2e} against the fp32 reference exceeds {limit:.1e} (torch's: {e_torch:.2e})"
    if not case.op.fp8 and not torch.allclose(ours.float(), theirs.float(), rtol=BF16_RTOL, atol=BF16_ATOL):
        worst = float((ours.float() - theirs.float()).abs().max())
        return f"bf16 output differs from torch.matmul's by up to {worst:.3g} (rtol = atol = {BF16_RTOL})"
    return ""


BIAS_APART = "bias added by a second kernel (cuBLASLt refused its bias epilogue here)"


def torch_contender(case: Case, x: dict[str, torch.Tensor]) -> tuple[Callable[..., Any], torch.Tensor, str]:
    """torch's function for `case`, its output on `x` and a note ('' for `TORCH_FNS`' own): for the fused case,
    where cuBLASLt refuses the shape's bias epilogue, `torch_fused_bias_apart` and `BIAS_APART` (a library refusing
    its own fused form is not a failure of the case; torch's time then includes the extra kernel, as a user's code
    would, and the row says so)."""
    fn = TORCH_FNS[case.op]
    try:
        return fn, fn(**x), ""
    except (RuntimeError, ValueError) as e:
        if case.op is Op.SCALED_MM_FP8_BLOCKWISE and torch_refuses(e):
            return _blockwise_padded(fn, x)
        if case.op is not Op.FUSED_EPILOGUE or "CUBLAS_STATUS_NOT_SUPPORTED" not in str(e):
            raise
    return torch_fused_bias_apart, torch_fused_bias_apart(**x), BIAS_APART


PADDED_SCALE_B = "scale_b's rows padded to a multiple of 4 scales apart (the layout this torch takes)"


def _blockwise_padded(fn: Callable[..., Any],
                      x: dict[str, torch.Tensor]) -> tuple[Callable[..., Any], torch.Tensor, str]:
    """torch's blockwise call with scale_b (K/128, N/128) held as cuBLASLt reads it: its transpose's rows
    round_up(K/128, 4) apart. torch 2.11 takes scale_b only unpadded (and cuBLASLt then reads other values wherever
    K/128 is not a multiple of 4 and N > 128); a torch that refuses the unpadded layout gets this one. Raises what
    torch raises if it refuses this too."""
    sb = x["scale_b"]
    kb, nb = sb.shape
    store = torch.zeros(nb, -(-kb // 4) * 4, device=sb.device, dtype=sb.dtype)
    store[:, :kb] = sb.t()
    padded = store[:, :kb].t()

    def call(**kw: torch.Tensor) -> Any:
        return fn(**{**kw, "scale_b": padded})

    return call, call(**x), PADDED_SCALE_B


TORCH_REFUSED = "torch refused the case"
# What torch says when it has no kernel for a case (its scaling checks, cuBLASLt's heuristic finding none), as
# opposed to a kernel that crashed.
_REFUSALS = ("CUBLAS_STATUS_NOT_SUPPORTED", "Invalid scaling configuration", "blockwise scaling")


def torch_refuses(e: BaseException) -> bool:
    """Whether torch's error is a refusal of the case (a failed row that names it: there is nothing to time
    warploom against) rather than a crash (which stops the suite)."""
    return isinstance(e, NotImplementedError) or any(r in str(e) for r in _REFUSALS)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _measure(timer: Timer, fn: Callable[[], Any], graph: bool, error: float) -> Measurement:
    return Measurement(timer.eager(fn), timer.graph(fn) if graph else None, error)


def run_case(case: Case, opts: Options, timer: Timer | None = None, compiler: Compiler | None = None) -> Row:
    """Check and time one case. A shape warploom refuses (it raises) is a failed row, not a crash."""
    timer = timer or GpuTimer()
    torch.manual_seed(opts.seed)
    x = inputs(case, opts.device)
    ref = reference(case, x)
    fn, args, kw = warploom_call(case, x)
    try:
        plan = warploom.plan(*args, **kw).plan.short()
        out = fn(*args, **kw)
        if opts.device.startswith("cuda"):
            finish_within(f"{case.op.value} {case.shape.short()} ({plan})")
    except KernelHangError:
        raise  # the GPU stays busy: the suite stops (its rows so far are saved)
    except Exception as e:  # a warploom error (or crash) on this shape; the suite goes on
        return Row(case, None, None, ok=False, failure=f"{type(e).__name__}: {e}")
    try:
        torch_fn, theirs, torch_note = torch_contender(case, x)
    except (RuntimeError, ValueError, NotImplementedError) as e:
        if not torch_refuses(e):
            raise  # (a crash of torch's kernel is no refusal: the suite stops, as for warploom's own hang)
        # (warploom's output is still checked, so the row says whether it was right)
        e_ours = err(out, ref)
        wrong = "" if e_ours <= ERR_FLOOR else (f"; warploom's error {e_ours:.2e} against the fp32 reference "
                                                 f"exceeds {ERR_FLOOR:.0e}")
        return Row(case, None, None, plan=plan, ok=False,
                   failure=f"{TORCH_REFUSED}: {(str(e).splitlines() or [type(e).__name__])[0]}{wrong}")
    failure = check(case, out, theirs, ref)
    graph = opts.graph or case.shape.group is Group.DECODE
    ours_m = _measure(timer, functools.partial(fn, *args, **kw), graph, err(out, ref))
    torch_m = _measure(timer, functools.partial(torch_fn, **x), graph, err(theirs, ref))
    compiled, compile_s = None, None
    if opts.compile:
        cfn = (compiler or compile_max_autotune)(torch_fn)
        t0 = time.perf_counter()
        c_out = cfn(**x)
        _sync(opts.device)
        compile_s = time.perf_counter() - t0
        compiled = _measure(timer, functools.partial(cfn, **x), graph, err(c_out, ref))
    return Row(case, ours_m, torch_m, compiled, compile_s, plan, ok=not failure, failure=failure,
               torch_note=torch_note)


def measure_copy_tbps(timer: Timer | None = None, nbytes: int = 2**30) -> float:
    """Device-to-device copy bandwidth in TB/s, counting bytes read and written (the roofline's memory roof)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = (timer or GpuTimer()).eager(lambda: dst.copy_(src))
    return 2 * nbytes / ms / 1e9


def environment(suite: str, opts: Options, copy_tbps: float | None, argv: Sequence[str] | None = None) -> Environment:
    import triton

    gpu = opts.device.startswith("cuda")
    return Environment(
        device=torch.cuda.get_device_name() if gpu else f"cpu ({platform.machine()}, warploom's simulator)",
        torch=torch.__version__, triton=triton.__version__,
        date=time.strftime("%Y-%m-%d %H:%M:%S"), host=platform.node(),
        command=_command(sys.argv if argv is None else argv), suite=suite,
        options={"compile": opts.compile, "graph": opts.graph, "seed": opts.seed, "ops": list(opts.ops),
                 "groups": list(opts.groups), **({"shapes": list(opts.shapes)} if opts.shapes else {})},
        copy_tbps=copy_tbps, shard=opts.shard,
    )


def _command(argv: Sequence[str]) -> str:
    """The command line as one would retype it: `python3 -m warploom.cli ...` rather than the module's path."""
    if argv and Path(argv[0]).name == "cli.py":
        return shlex.join(["python3", "-m", "warploom.cli", *argv[1:]])
    return shlex.join(argv)


def run_suite(cases: Sequence[Case], opts: Options, out: Path, suite: str, console: Any = None,
              timer: Timer | None = None) -> Results:
    """Run every case with a progress bar, saving `out` after each (a killed run keeps what it finished)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    con = console or Console()
    timer = timer or GpuTimer()
    copy_tbps = None
    if opts.device.startswith("cuda"):
        copy_tbps = measure_copy_tbps(timer)
        con.print(f"device-to-device copy: {copy_tbps:.2f} TB/s (the roofline's memory roof)")
    env = environment(suite, opts, copy_tbps)
    rows: list[Row] = []
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=con) as progress:
        task = progress.add_task("bench", total=len(cases))
        for case in cases:
            progress.update(task, description=f"{case.op.value} {case.shape.short()} ({case.shape.name})")
            try:
                row = run_case(case, opts, timer)
            except KernelHangError as e:  # nothing more can run on this GPU until the process exits
                rows.append(Row(case, None, None, ok=False, failure=str(e)))
                Results(env, tuple(rows)).save(out)
                raise
            except Exception as e:  # a torch or torch.compile failure on this case; keep the others
                row = Row(case, None, None, ok=False, failure=f"{type(e).__name__}: {e}")
            rows.append(row)
            Results(env, tuple(rows)).save(out)
            progress.console.print(_line(row), highlight=False, markup=False)
            progress.advance(task)
            if opts.device.startswith("cuda"):
                torch.cuda.empty_cache()  # the next case's tensors may be larger than the cached blocks
    return Results(env, tuple(rows))


def _line(r: Row) -> str:
    head = f"{r.case.op.value:28s} {r.case.shape.short():>18s}"
    if r.ours is None or r.torch is None:
        return f"{head}  FAILED: {r.failure}"
    ratios = f"ratio {r.ratio:.3f}" + (f", graph {r.graph_ratio:.3f}" if r.graph_ratio is not None else "")
    if r.compile_ratio is not None:
        ratios += f", compile {r.compile_ratio:.3f}"
    flag = "" if r.ok else f"  MISMATCH: {r.failure}"
    return f"{head}  ours {r.tflops(r.ours):7.1f} TFLOP/s, torch {r.tflops(r.torch):7.1f}  {ratios}  {r.plan}{flag}"
