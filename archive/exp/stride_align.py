"""Does a row stride that is not a multiple of 128 bytes slow the kernel? bf16 at M x N x K with A's and B's rows
at their own length (K elements) against rows padded to a multiple of 64 elements (same values, same K), and torch
on both; CUDA-graph timing (GPU only). python3 archive/exp/stride_align.py 3000x3000x3000 2848x736x3088"""

from __future__ import annotations

import sys

import torch

import warploom
from warploom.runtime.timing import time_graph as graph_ms

for text in sys.argv[1:]:
    m, n, k = (int(x) for x in text.split("x"))
    kp = -(-k // 64) * 64
    row = []
    for pad in (k, kp):
        a = torch.randn(m, pad, device="cuda", dtype=torch.bfloat16)[:, :k]
        w = torch.randn(n, pad, device="cuda", dtype=torch.bfloat16)[:, :k]
        out = warploom.matmul(a, w.t())
        torch.testing.assert_close(out.float(), a.float() @ w.float().t(), rtol=2e-2, atol=2e-1)
        t_wl = graph_ms(lambda a=a, w=w: warploom.matmul(a, w.t()))
        t_torch = graph_ms(lambda a=a, w=w: torch.matmul(a, w.t()))
        row.append(f"stride {pad}: warploom {2 * m * n * k / t_wl / 1e9:.0f} torch {2 * m * n * k / t_torch / 1e9:.0f}"
                   f" TFLOP/s (ratio {t_torch / t_wl:.3f})")
    print(f"{text}: " + "; ".join(row), flush=True)
