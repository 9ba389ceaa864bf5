"""Where does an eager warploom call spend host time? cProfile over repeated calls (run on the GPU machine)."""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import warploom

a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16).t()
out = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
warploom.matmul(a, b)
torch.cuda.synchronize()
k = warploom.plan(a, b)
for name, fn in [("warploom.matmul", lambda: warploom.matmul(a, b)), ("kernel.run", lambda: k.run(a, b, out)),
                 ("torch.matmul", lambda: torch.matmul(a, b))]:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        fn()
    host = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    print(f"{name:20s} host {host:8.1f} us/call")
pr = cProfile.Profile()
pr.enable()
for _ in range(200):
    warploom.matmul(a, b)
pr.disable()
torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
