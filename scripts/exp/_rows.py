"""What the experiments in scripts/exp share: where they write their rows (JSON under $OUT, default ./out, for the
device tool), how the decode probes time their variants against torch, and how a probe swaps a kernel's source."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_rows(rows: list[dict[str, Any]], name: str) -> Path:
    """Write `rows` as indented JSON to $OUT/`name` (creating the folder) and return the path."""
    out = Path(os.environ.get("OUT", "out")) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return out


def interleaved_ms(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median CUDA-graph time (ms) of each run over `rounds` rounds, every run once per round in turn (clocks drift
    within a process; interleaving spreads the drift over all runs alike)."""
    import statistics

    from warploom.bench import _time_graph

    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(_time_graph(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}


def with_source(kern: Any, text: str) -> Any:
    """`kern` (a warploom Kernel) with its Gluon source replaced by `text`: a fresh object, since build(), .gluon
    and .launcher are all cached."""
    import dataclasses

    new = dataclasses.replace(kern)
    new.__dict__["gluon"] = dataclasses.replace(kern.gluon, text=text)
    return new
