"""warploom.sim: a CPU simulator and protocol checker for schedule IR modules.

Each partition of a module runs as an independent agent over its own resolved program
(`program.py`); a scheduler interleaves the agents and the completions of asynchronous operations (TMA
loads and stores, wgmma) under exact mbarrier semantics (`barrier.py`), tracking the state of every
ring slot and buffer (`memory.py`) and, optionally, the data with torch on the CPU (`numerics.py`).

    simulate(module, a, b, ...)         numerics + checks under one seeded random schedule
    check_protocol(module, m, n, k)     checks only, several seeds; raises ProtocolError on findings
    explore(module, m, n, k)            every schedule of a small configuration (DFS + state hashing)
    draw_timeline(result, path)         the per-partition timeline of a simulation (matplotlib)
    compare(module, inputs, ctas=...)   simulate on inputs and judge the tiles written against torch fp32
    compare_kernel(kernel, inputs)      the same for a Kernel: both launches of a split-K tail plan
    simulate_grouped(module, a, b, bounds)  a grouped module (ir.Tiling.grouping) over its group bounds

Entry points elsewhere: `Kernel.simulate` / `Kernel.check_protocol`; `warploom.matmul` and
`warploom.scaled_mm` on small CPU problems; `warploom sim` and `warploom demo` without a GPU.

A module with a fused epilogue (`GemmSpec.epilogue`) runs the same way: `simulate(..., operands={name: tensor})`
takes the graph's operands (for scaled_mm with an epilogue the scales and bias too), `apply_epilogue` is
`warploom.epilogue.reference.evaluate_tile` on each block, and `SimResult.outputs` holds one tensor per output.

A cluster module (`ir.Tiling.cluster`, planner rule 24) runs whole clusters, their CTAs linked and interleaved at
random (`cluster.py`): the lead's multicast copies land in every CTA, and the cluster's barriers count every CTA's
arrivals. `explore` explores each cluster whole, every interleaving of its CTAs (`explore._Cluster`).

Findings (`SimFinding`, kinds in `FindingKind`) name the CTA, partition, op, (tile, k), barrier and phase.
"""

from __future__ import annotations

from typing import Any

from warploom.ir.raster import Span, TileRef, cta_tiles, launch_grid, tail_spans, tile_coords
from warploom.sim.compare import Comparison, compare, compare_kernel, sample_ctas, sample_kernel_ctas
from warploom.sim.events import EventKind, TimelineEvent
from warploom.sim.explore import ExploreReport, explore
from warploom.sim.findings import FindingKind, ProtocolError, SimFinding
from warploom.sim.grouped import reference_grouped, simulate_grouped
from warploom.sim.simulate import CheckReport, SimReport, SimResult, check_protocol, representative_ctas, simulate


def draw_timeline(result: SimResult | SimReport, path: Any, **kwargs: Any) -> Any:
    """See `warploom.sim.timeline.draw_timeline` (imported lazily: matplotlib is slow to import)."""
    from warploom.sim.timeline import draw_timeline as draw

    return draw(result, path, **kwargs)


__all__ = [
    "CheckReport", "Comparison", "EventKind", "ExploreReport", "FindingKind", "ProtocolError", "SimFinding",
    "SimReport", "SimResult", "Span", "TileRef", "TimelineEvent", "check_protocol", "compare", "compare_kernel",
    "cta_tiles", "draw_timeline", "explore", "launch_grid", "representative_ctas", "sample_ctas", "sample_kernel_ctas",
    "reference_grouped", "simulate", "simulate_grouped", "tail_spans", "tile_coords",
]
