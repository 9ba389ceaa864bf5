"""Where a tiny GEMM's time goes (the zoo's shapes under 10 us, half of its bf16 log-loss): warploom's kernel against
torch's, as kernel durations (torch.profiler, eager calls) and as CUDA-graph time per call, beside an empty kernel's
graph time (the launch floor) and the planner's plan with a shorter ring.

    PYTHONPATH=. python3 archive/exp/tiny_overhead.py [--shapes 43x216x104,...] [--rounds 3]

Writes $OUT/tiny-overhead.json (rows per shape: graph us per call, profiler kernel us and names).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).parent))
from _rows import write_rows  # noqa: E402

import warploom  # noqa: E402
from warploom import checks  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime.timing import time_graph  # noqa: E402

SHAPES = "43x216x104,58x2024x360,141x136x1624,5113x120x200,86x10976x280,1072x464x200"


@triton.jit
def _empty(x_ptr):
    pid = tl.program_id(0)
    if pid < 0:
        tl.store(x_ptr, 1.0)


def kernel_us(fn: Any, calls: int = 40) -> dict[str, float]:
    """Mean device duration (us) of each kernel name that `calls` eager calls of `fn` launch."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            out.setdefault(e.name[:90], []).append(e.time_range.elapsed_us())
    return {k: statistics.mean(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = DeviceInfo.current()
    x = torch.zeros(1, device="cuda")
    floor = [time_graph(lambda: _empty[(1,)](x)) for _ in range(args.rounds)]
    print(f"empty kernel: {statistics.median(floor) * 1000:.2f} us a call in a graph", flush=True)
    rows: list[dict[str, Any]] = [{"shape": "empty", "graph_us": statistics.median(floor) * 1000}]
    for text in args.shapes.split(","):
        m, n, k = (int(v) for v in text.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        ref = a.double() @ b.double()
        spec = checks.matmul_spec(a, b)
        planned = plan_schedule(spec, dev)
        runs: dict[str, Any] = {"torch": functools.partial(torch.matmul, a, b),
                                "warploom.matmul": functools.partial(warploom.matmul, a, b)}
        for label, plan in (("planned", planned), ("stages=2", dataclasses.replace(planned, stages=2)),
                            ("stages=4", dataclasses.replace(planned, stages=min(4, planned.stages)))):
            kern = build(spec, dev, plan)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            kern.run(a, b, out)
            torch.cuda.synchronize()
            assert torch.allclose(out.double(), ref, rtol=2e-2, atol=2e-1), label
            runs[f"{label} {plan.short()}"] = functools.partial(kern.run, a, b, out)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                times[name].append(time_graph(fn) * 1000)
        row = {"shape": text, "graph_us": {name: statistics.median(v) for name, v in times.items()},
               "kernel_us": {"torch": kernel_us(runs["torch"]), "warploom": kernel_us(runs["warploom.matmul"])}}
        rows.append(row)
        print(text, {name: round(v, 2) for name, v in row["graph_us"].items()}, flush=True)
        for who, ks in row["kernel_us"].items():
            print(f"   {who}: " + "; ".join(f"{name} {us:.2f}" for name, us in ks.items()), flush=True)
        write_rows(rows, "tiny-overhead.json")


if __name__ == "__main__":
    main()
