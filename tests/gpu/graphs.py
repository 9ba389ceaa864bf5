"""A GPU-tier helper: a kernel launch captured in a CUDA graph and replayed over a poisoned output."""

from __future__ import annotations

from collections.abc import Callable

import torch


def replayed(launch: Callable[[], object], out: torch.Tensor, replays: int = 3) -> torch.Tensor:
    """`out` after `launch` (which writes it) was captured in a CUDA graph, `out` filled with NaN, and the graph
    replayed `replays` times. The first launch runs on a side stream: capture needs a warm call (Triton compiles on
    it)."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    out.fill_(float("nan"))
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    return out
