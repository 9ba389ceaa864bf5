"""Timing on a CUDA GPU, in one place: the benchmarks (`warploom.bench`, `warploom.benchsuite`), the tuner
(`warploom.tune.gpu`) and the scripts all time through these two functions (side by side over several rounds:
`time_interleaved`), and check a first launch finishes with `finish_within` (a hung kernel would otherwise block the
whole run at its next synchronization).

Both return median milliseconds per call. Importing this module touches no GPU; torch and triton are imported
when a function runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from warploom.errors import KernelHangError

# Kernel calls per CUDA graph: enough that the graph launch's own cost (a few us) is spread thin.
GRAPH_CALLS = 10


def time_eager(call: Callable[[], object], *, warmup_ms: int = 100, rep_ms: int = 500) -> float:
    """Median milliseconds of one `call` launched from the host (`triton.testing.do_bench`), host overhead
    included."""
    import triton

    return float(triton.testing.do_bench(call, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def time_graph(call: Callable[[], object], *, calls: int = GRAPH_CALLS, warmup_ms: int = 100, rep_ms: int = 500,
               eager_fallback: bool = False) -> float:
    """Median milliseconds of one `call` without host overhead: replays of a CUDA graph of `calls` calls.

    A call that cannot be captured raises torch's RuntimeError, or with `eager_fallback` is timed by
    `time_eager` instead (the tuner's choice: a candidate it cannot capture is still comparable).
    """
    import torch

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        call()  # the first launch compiles; capture needs a warm call on a side stream
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                call()
    except RuntimeError:
        if not eager_fallback:
            raise
        torch.cuda.synchronize()
        return time_eager(call, warmup_ms=warmup_ms, rep_ms=rep_ms)
    return time_eager(graph.replay, warmup_ms=warmup_ms, rep_ms=rep_ms) / calls


def time_interleaved(runs: Mapping[str, Callable[[], object]], rounds: int, *,
                     timer: Callable[..., float] | None = None, **window: int) -> dict[str, list[float]]:
    """Each run's milliseconds per call in each of `rounds` rounds, every run timed once per round in turn
    (`time_graph` by default, with `window`'s warmup_ms and rep_ms): the GPU's clocks drift within a process, and
    interleaving spreads the drift over all runs alike, so a ratio of two runs is best taken round by round."""
    time_one: Callable[..., float] = time_graph if timer is None else timer
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(time_one(fn, **window))
    return times


# What a first launch may take before it counts as hung: compile time is spent before the launch, and the largest
# benchmark kernels run in milliseconds.
HANG_SECONDS = 30.0


def finish_within(what: str, seconds: float = HANG_SECONDS) -> None:
    """Wait for the work queued on the current stream, at most `seconds`; raise `KernelHangError` naming `what` if it
    has not finished by then (polling an event, so a hung kernel never blocks this thread)."""
    import torch

    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            raise KernelHangError(what, seconds)
        time.sleep(0.0005)
