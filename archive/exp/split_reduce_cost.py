"""Experiment (session 41): what split-K's second kernel costs inside a CUDA graph.

Rule 25's split-K plans write fp32 partials and sum them in a second kernel (`Launcher._reduce`). This times each
planned split-K zoo shape three ways in one process: the whole call, the same call with the reduce launch left out
(a kernel of its own, `build` uncached; its output is then wrong: timing only), and torch; then it profiles one
replay of the whole call's graph for each kernel's own duration. The difference is what an in-kernel join could save
at most.

    PYTHONPATH=. python3 archive/exp/split_reduce_cost.py [MxNxK ...]
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch
from _rows import interleaved_ms, write_rows

from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

SHAPES = ["73x104x3280", "469x88x4920", "268x112x4944", "325x96x10232", "80x576x3552", "191x440x14496",
          "122x712x7784", "459x112x2632", "8x104x5240", "43x88x7960", "21x88x3992", "4x816x10392",
          "295x1536x6064", "405x1424x6576", "549x656x5920", "2415x160x14360", "100x5264x3464", "289x1536x15712",
          "1881x224x15080", "731x232x8688"]


class _Skip:
    """Stands in for the reduce kernel's launcher: launches nothing."""

    def launch(self, *args: Any) -> None:
        pass


def _kernel_us(call: Any) -> dict[str, float]:
    """Each kernel's mean duration (us) in 20 replays of a CUDA graph of `call`, from the profiler's GPU records."""
    from torch.profiler import ProfilerActivity, profile

    graph = torch.cuda.CUDAGraph()
    call()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        call()
    graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
    return {e.key[-24:]: round(e.device_time / 1.0, 2) for e in prof.key_averages() if e.device_time > 0}


def main(shapes: list[str]) -> None:
    dev = DeviceInfo.current()
    rows = []
    for s in shapes:
        m, n, k = map(int, s.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        spec = checks.matmul_spec(a, b, None)
        plan = plan_schedule(spec, dev)
        whole, alone = build(spec, dev, plan), build.__wrapped__(spec, dev, plan)
        out, out2 = (torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        whole.run(a, b, out)
        alone.run(a, b, out2)
        if plan.split_k > 1:
            alone.launcher._reduce = _Skip()
        ms = interleaved_ms({"whole": functools.partial(whole.run, a, b, out),
                             "main": functools.partial(alone.run, a, b, out2),
                             "torch": functools.partial(torch.matmul, a, b)}, rounds=5)
        us = {key: v * 1e3 for key, v in ms.items()}
        kernels = _kernel_us(functools.partial(whole.run, a, b, out))
        rows.append({"shape": s, "plan": plan.short(), "split_k": plan.split_k, "whole_us": us["whole"],
                     "kernels_us": kernels, "main_only_us": us["main"], "torch_us": us["torch"],
                     "reduce_us": us["whole"] - us["main"]})
        print(f"{s:>16} {plan.short():32} whole {us['whole']:6.2f} us  main only {us['main']:6.2f}  reduce "
              f"{us['whole'] - us['main']:5.2f}  torch {us['torch']:6.2f}  ratio {us['torch'] / us['whole']:.3f} -> "
              f"{us['torch'] / us['main']:.3f}  kernels {kernels}", flush=True)
    write_rows(rows, "split_reduce_cost.json")


if __name__ == "__main__":
    main(sys.argv[1:] or SHAPES)
