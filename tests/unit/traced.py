"""torch.compile with the graphs it traced kept, for the custom-op tests (fullgraph: a graph break fails)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def compile_keeping_graphs(fn: Callable[..., Any], *args: Any,
                           **options: Any) -> tuple[Any, list[torch.fx.GraphModule]]:
    """`fn(*args)` compiled with fullgraph=True (and `options`) under aot_eager, with dynamo reset before and after;
    returns its result and the FX graphs dynamo handed the backend."""
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, inputs)

    torch._dynamo.reset()
    try:
        out = torch.compile(fn, backend=backend, fullgraph=True, **options)(*args)
    finally:
        torch._dynamo.reset()
    return out, graphs
