"""A GPU-tier helper: a kernel launch captured in a CUDA graph and replayed over a poisoned output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def captured(launch: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
    """`launch` captured in a CUDA graph: the graph and what the captured call returned (its outputs come from the
    graph's pool). The first launch runs on a side stream: capture needs a warm call (Triton compiles on it)."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = launch()
    return graph, result


def replayed(launch: Callable[[], object], out: torch.Tensor, replays: int = 3) -> torch.Tensor:
    """`out` after `launch` (which writes it) was captured in a CUDA graph (`captured`), `out` filled with NaN, and
    the graph replayed `replays` times."""
    graph, _ = captured(launch)
    out.fill_(float("nan"))
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    return out
