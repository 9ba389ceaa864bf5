"""The autotuner: check each candidate schedule's output, time the correct ones, keep the fastest, cache it.

The loop is device-free: the `Harness` brings the device (build and launch a plan's kernel, its output
buffers, the reference, a timer), so the same code runs on the H100 (warploom.tune.gpu) and in CPU tests
with fakes. For each candidate, in order (the planner's default first):

1. poison: every output is filled with NaN, so nothing a previous candidate wrote can pass for this one's;
2. run once and check against the reference (accuracy.py); a candidate that raises or is wrong is
   disqualified with the reason and is never timed;
3. time it (the harness's timer: on the GPU the median of CUDA-graph replays), then check the output again:
   the runs being timed must still be right;
4. the fastest correct candidate wins if it beats the first (the planner's default) by `min_gain`: timings
   move by a percent or so between runs, and a schedule swapped on noise would flap from tune to tune. The
   winner is written to the cache (cache.py).

A cache hit is not trusted blindly either: beyond the cache's own validation, its plan is run once and
checked (not timed) before it is returned; a wrong output warns and re-tunes.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from warploom.device import DeviceInfo
from warploom.errors import InternalError
from warploom.planner import Plan, plan_schedule
from warploom.spec import GemmSpec
from warploom.tune import settings
from warploom.tune.accuracy import mismatch
from warploom.tune.cache import Cache, Entry, StaleCacheWarning, clear_requested_once
from warploom.tune.candidates import DEFAULT_SPACE, SearchSpace, candidates
from warploom.tune.key import CacheKey
from warploom.tune.result import Source, Trial, TuneResult


def _no_sync() -> None:
    """Synchronous devices (and CPU fakes) have nothing to wait for."""


@dataclass(frozen=True)
class Harness:
    """The device half of tuning.

    Attributes:
        launch: builds `plan`'s kernel and returns a call that runs it once, writing `outputs`.
        outputs: the tensors every candidate writes (NaN-poisoned before each one).
        reference: the exact result for each output, in any float dtype (compared in float64).
        time: the median milliseconds of a call (warm-up included); called only for correct candidates.
        sync: waits until launched work is done, before outputs are read (torch.cuda.synchronize on a GPU).
    """

    launch: Callable[[Plan], Callable[[], object]]
    outputs: tuple[Any, ...]
    reference: tuple[Any, ...]
    time: Callable[[Callable[[], object]], float]
    sync: Callable[[], None] = _no_sync

    def __post_init__(self) -> None:
        if not self.outputs or len(self.outputs) != len(self.reference):
            raise ValueError(f"Harness: expected one reference per output (at least one), got "
                             f"{len(self.outputs)} outputs and {len(self.reference)} references")


class TuneError(InternalError):
    """No candidate, the planner's default included, produced a correct output: a warploom bug (or a broken
    harness). The message lists each candidate's failure."""

    def __init__(self, spec: GemmSpec, trials: Sequence[Trial]) -> None:
        self.trials = tuple(trials)
        lines = "\n".join(f"  - {t.plan.short()}: {t.error}" for t in trials)
        super().__init__(f"autotune {spec.short()}: no candidate produced a correct output:\n{lines}\n"
                         "Fix: report it with this message; WARPLOOM_AUTOTUNE=0 skips tuning (the planner's "
                         "default then runs unchecked)")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def _poison(outputs: Sequence[Any]) -> None:
    for o in outputs:
        o.fill_(math.nan)


def _wrong(spec: GemmSpec, harness: Harness) -> str | None:
    """Why the harness's outputs are not its references, or None; names the output when there are several."""
    for j, (out, ref) in enumerate(zip(harness.outputs, harness.reference, strict=True)):
        why = mismatch(out, ref, fp8_inputs=spec.is_fp8)
        if why is not None:
            return why if len(harness.outputs) == 1 else f"output {j}: {why}"
    return None


def _run_checked(spec: GemmSpec, harness: Harness, plan: Plan) -> tuple[Callable[[], object] | None, str | None]:
    """Poison, build, run once, check: the call and None, or None and why it failed."""
    try:
        _poison(harness.outputs)
        call = harness.launch(plan)
        call()
        harness.sync()
    except Exception as e:  # a candidate that fails to build or launch is disqualified, not fatal
        return None, f"raised {_first_line(e)}"
    why = _wrong(spec, harness)
    return (None, f"wrong output: {why}") if why else (call, None)


def trial(spec: GemmSpec, harness: Harness, plan: Plan) -> Trial:
    """One candidate, steps 1-3 of the module docstring."""
    call, why = _run_checked(spec, harness, plan)
    if call is None:
        return Trial(plan, error=why)
    try:
        ms = float(harness.time(call))
        harness.sync()
    except Exception as e:
        return Trial(plan, error=f"timing raised {_first_line(e)}")
    if not math.isfinite(ms) or ms <= 0:
        return Trial(plan, error=f"timer returned {ms!r} ms")
    why = _wrong(spec, harness)
    if why:
        return Trial(plan, error=f"wrong output after timing: {why}")
    return Trial(plan, ms=ms)


def _progress(enabled: bool) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[plan]}"), console=Console(stderr=True), transient=True,
                    disable=not enabled)


def _tune(spec: GemmSpec, harness: Harness, plans: Sequence[Plan], progress: bool) -> list[Trial]:
    trials: list[Trial] = []
    with _progress(progress) as bar:
        task = bar.add_task(f"autotune {spec.short()}", total=len(plans), plan="")
        for plan in plans:
            bar.update(task, plan=plan.short())
            trials.append(trial(spec, harness, plan))
            bar.advance(task)
    return trials


def autotune(spec: GemmSpec, device: DeviceInfo, harness: Harness, *, strides: tuple[tuple[int, ...], ...] = (),
             limit: int = 8, space: SearchSpace = DEFAULT_SPACE, plans: Sequence[Plan] | None = None,
             min_gain: float = 0.01, cache: Cache | None = None, use_cache: bool = True, check_hit: bool = True,
             progress: bool = True, verbose: bool | None = None) -> TuneResult:
    """The fastest correct schedule for `spec` on `device` (module docstring).

    `strides` (the caller's tensors' strides) join the cache key. `plans` replaces the cost model's
    candidates (`candidates(spec, device, limit=limit, space=space)`), its first being the baseline that another
    must beat by `min_gain` (a fraction of its time); none of these is part of the key: the cache
    answers with the best plan found for the key, however it was searched. `verbose` (default:
    WARPLOOM_AUTOTUNE_VERBOSE) prints the chosen schedule and the trials to stderr. With WARPLOOM_AUTOTUNE=0,
    or an empty problem, the planner's default comes back untried.
    """
    _check_arguments(spec, device, limit, space, plans, min_gain, strides, cache)
    if not settings.enabled() or spec.flops == 0:
        result = TuneResult(spec, plan_schedule(spec, device), Source.DEFAULT)
    else:
        todo = plans if plans is not None else [c.plan for c in candidates(spec, device, limit=limit, space=space)]
        result = _lookup_or_tune(spec, device, harness, strides, todo, min_gain, cache or Cache(), use_cache,
                                 check_hit, progress)
    if settings.verbose() if verbose is None else verbose:
        print(result.table(), file=sys.stderr)
    return result


def _check_arguments(spec: Any, device: Any, limit: Any, space: Any, plans: Any, min_gain: Any, strides: Any,
                     cache: Any) -> None:
    """`autotune`'s arguments by type and range, before any input is made or any candidate planned (a string limit
    or a plan that is not a Plan failed deep in the search; a min_gain outside [0, 1) makes the search meaningless)."""
    from warploom.device import check_device
    from warploom.errors import ArgumentTypeError, InputError
    from warploom.spec import check_spec

    check_spec(spec)
    check_device(device)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError("limit", "an int >= 1 (candidates to time)", repr(limit), "pass limit=8, or leave it out")
    if not isinstance(space, SearchSpace):
        raise ArgumentTypeError("space", "a warploom.tune.SearchSpace", type(space).__name__,
                                "pass SearchSpace(...), or leave it out")
    if plans is not None and (isinstance(plans, (str, bytes)) or not all(isinstance(p, Plan) for p in plans)
                              or not len(plans)):
        raise InputError("plans", "a non-empty sequence of warploom.Plan (the first the baseline)", repr(plans)[:80],
                         "pass [plan_schedule(spec, device), ...], or leave plans out for the cost model's")
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 1:
        raise InputError("min_gain", "a fraction in [0, 1) of the baseline's time", repr(min_gain),
                         "pass min_gain=0.01, or leave it out")
    if not isinstance(strides, tuple) or not all(isinstance(st, tuple) for st in strides):
        raise ArgumentTypeError("strides", "a tuple of the tensors' stride tuples", repr(strides)[:80],
                                "pass tuple(t.stride() for t in (a, b)), or leave it out")
    if cache is not None and not isinstance(cache, Cache):
        raise ArgumentTypeError("cache", "a warploom.tune.Cache or None", type(cache).__name__,
                                "pass Cache(path), or leave it out")


def _lookup_or_tune(spec: GemmSpec, device: DeviceInfo, harness: Harness, strides: tuple[tuple[int, ...], ...],
                    plans: Sequence[Plan], min_gain: float, cache: Cache, use_cache: bool, check_hit: bool,
                    progress: bool) -> TuneResult:
    key = CacheKey(spec, device, strides)
    hit = _cached(spec, harness, cache, key, check_hit) if use_cache else None
    if hit is not None:
        return hit
    trials = _tune(spec, harness, plans, progress)
    correct = [t for t in trials if t.ok]
    if not correct:
        raise TuneError(spec, trials)
    best = min(correct, key=lambda t: t.ms or 0.0)  # min keeps the first of equals: the default
    base = trials[0]
    if base.ok and base.ms is not None and best.ms is not None and best.ms > base.ms * (1 - min_gain):
        best = base  # within noise of the default: keep it
    result = TuneResult(spec, best.plan, Source.TUNED, tuple(trials), key.digest())
    if use_cache:
        cache.store(key, Entry(key.text(), best.plan, result.trials))
        from warploom.tune.lookup import forget

        forget()  # ordinary calls of this problem now run the winner (tune/lookup.py)
    return result


def _cached(spec: GemmSpec, harness: Harness, cache: Cache, key: CacheKey, check: bool) -> TuneResult | None:
    """The cache's valid entry as a result, after one checked run of its plan (when `check`); None on a miss."""
    clear_requested_once(cache)
    entry = cache.load(key)
    if entry is None:
        return None
    if check:
        _, why = _run_checked(spec, harness, entry.plan)
        if why is not None:
            warnings.warn(f"warploom autotune cache: ignoring {cache.path(key)}: its plan {entry.plan.short()} "
                          f"{why}; it will be re-tuned and overwritten", StaleCacheWarning, stacklevel=3)
            return None
    return TuneResult(spec, entry.plan, Source.CACHE, entry.trials, key.digest())
