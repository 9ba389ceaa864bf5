"""Experiment (session 14): where a split-K tail's time goes (Plan.tail_split, rule 15).

At 4096x2112x7168 a tail took ~0.65 of a round of whole tiles where its work is 0.25 (128x256, 4 k-ranges). This
times, as CUDA-graph replays, the whole call, the whole-wave kernel alone, the tail kernel with and without its
reduction, and the reduction alone, for the plans given.

    PYTHONPATH=. python3 archive/exp/tail_parts.py
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from _rows import write_rows  # noqa: E402
from sweep_plans import case  # noqa: E402

from warploom.device import DeviceInfo  # noqa: E402
from warploom.ir.raster import tail_spans  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime.timing import time_graph as _time_graph  # noqa: E402

CASES = [("fp8", dict(bn=256, tail_split=4)), ("fp8", dict(bn=128, tail_split=8)), ("bf16", dict(bn=256, tail_split=4)),
         ("fp8", dict(bn=256, tail_split=2))]


def measure(name: str, kw: dict[str, int], m: int, n: int, k: int) -> dict[str, object]:
    """One plan's parts, as CUDA-graph replays (us)."""
    dev = DeviceInfo.current()
    spec, (a, b, sa, sb, _), _, theirs = case(name, (m, n, k))
    kern = build(spec, dev, plan_schedule(spec, dev, **kw))
    plain = build(spec, dev, plan_schedule(spec, dev, **{**kw, "tail_split": 1}))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    la = kern.launcher
    t = kern.module.tiling
    whole, rest = tail_spans(-(-m // t.bm) * -(-n // t.bn), t.grid)
    tail = la._tail
    ws = torch.empty(tail._tiling.workspace_shape(m, n, rest.tiles), device="cuda", dtype=torch.float32)
    reduce_grid = rest.tiles * (t.bm * t.bn // 1024)

    def reduce_only() -> None:
        tail._reduce.launch(reduce_grid, [ws, out, out.stride(0), out.stride(1), m, n, rest.lo, rest.hi])

    def tail_main_only() -> None:
        saved = tail._reduce
        tail._reduce = type("NoReduce", (), {"launch": staticmethod(lambda g, args: None)})()
        try:
            tail._run(a, b, out, sa, sb, None, None, (), rest)
        finally:
            tail._reduce = saved

    parts = {
        "torch": theirs,
        "plain (no tail)": lambda: plain.run(a, b, out, sa, sb),
        "whole call": lambda: kern.run(a, b, out, sa, sb),
        "whole waves only": lambda: la._run(a, b, out, sa, sb, None, None, (), whole),
        "tail + reduce": lambda: tail._run(a, b, out, sa, sb, None, None, (), rest),
        "tail kernel only": tail_main_only,
        "reduce only": reduce_only,
    }
    row: dict[str, object] = {"case": name, "plan": kern.plan.short(), "whole_tiles": whole.tiles,
                              "tail_tiles": rest.tiles}
    for label, fn in parts.items():
        row[label] = _time_graph(fn) * 1e3
    return row


def main() -> None:
    rows = []
    for name, kw in CASES:
        row = measure(name, kw, 4096, 2112, 7168)
        rows.append(row)
        print(json.dumps(row), flush=True)
    write_rows(rows, "tail-parts.json")


if __name__ == "__main__":
    main()
