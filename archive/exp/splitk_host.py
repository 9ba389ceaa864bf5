"""Experiment (session 13): eager host time of split-K blockwise calls.

bench_blockwise's eager column put 128x4096x7168 (split 4) at 0.21 of torch while its graph ratio is 1.14. This times
eager calls with a plain host loop, reports how many specializations each launcher compiled and whether the direct
path found Triton's C launcher, and profiles the slow shape.

    PYTHONPATH=. python3 archive/exp/splitk_host.py
"""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Any

import torch

import warploom
from warploom import eager
from warploom.runtime.timing import time_eager as _time
from warploom.runtime.timing import time_graph as _time_graph


def call(a: Any, b: Any, sa: Any, sb: Any) -> Any:
    return warploom.scaled_mm(a, b, sa, sb)


def shape(m: int, n: int, k: int) -> Any:
    kb, nb = k // 128, -(-n // 128)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(kb, m, device="cuda").t() + 0.5
    sb = torch.rand(kb, nb, device="cuda") + 0.5

    def fn() -> Any:
        return call(a, b, sa, sb)

    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        fn()
    host = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / 200 * 1e6
    print((m, n, k), f"host {host:.1f} us/call, wall {wall:.1f}, do_bench eager {_time(fn) * 1e3:.1f} us, "
          f"graph {_time_graph(fn) * 1e3:.1f} us", flush=True)
    for key, p in eager._CALLS.items():
        if key[1][0] == torch.Size([m, k]):
            launcher = p.kernel.launcher
            main = launcher._main._compiled
            print("   plan", p.kernel.plan.short(), "main compiled", len(main), "reduce",
                  launcher._reduce and len(launcher._reduce._compiled),
                  "c_launch", bool(main) and next(iter(main.values())).c_launch is not None, flush=True)
    return fn


def main() -> None:
    torch.manual_seed(0)
    fn = None
    for m, n, k in [(128, 2112, 7168), (64, 4096, 7168), (128, 4096, 7168)]:
        fn = shape(m, n, k)
    assert fn is not None
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(100):
        fn()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
