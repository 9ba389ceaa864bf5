"""Timing on a CUDA GPU, in one place: the benchmarks (`warploom.bench`, `warploom.benchsuite`), the tuner
(`warploom.tune.gpu`) and the scripts all time through these two functions.

Both return median milliseconds per call. Importing this module touches no GPU; torch and triton are imported
when a function runs.
"""

from __future__ import annotations

from collections.abc import Callable

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
