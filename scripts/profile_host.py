"""Where does an eager warploom call spend host time? (run on the GPU machine)

    PYTHONPATH=. python3 scripts/profile_host.py [--size 256] [--profile matmul|scaled_mm|fused]

A small size keeps the GPU from being the bottleneck, so the per-call time is the host's: each entry point,
the kernel's own launch (`Kernel.run`) and torch's, then cProfile of one entry point.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import warploom


def host_us(fn: Callable[[], Any], n: int = 300) -> float:
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def gelu_residual(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.gelu(acc) + residual


def gemm_operands(s: int) -> tuple[torch.Tensor, ...]:
    """bf16 A (s, s) and K-major B, their fp8 copies, and rowwise scales: the calls the host-time scripts make."""
    a = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(s, s, device="cuda", dtype=torch.bfloat16).t()
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    sa, sb = torch.rand(s, 1, device="cuda") + 0.5, torch.rand(1, s, device="cuda") + 0.5
    return a, b, a8, b8, sa, sb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--profile", default="scaled_mm", choices=["matmul", "scaled_mm", "fused"])
    ap.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"])
    args = ap.parse_args()
    s = args.size
    a, b, a8, b8, sa, sb = gemm_operands(s)
    bias, res = torch.randn(s, device="cuda", dtype=torch.bfloat16), torch.randn(s, s, device="cuda",
                                                                                dtype=torch.bfloat16)
    out = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    k = warploom.plan(a, b)
    from warploom.runtime.launch import Launcher

    jit = Launcher(k.module, k.gluon, fast=False)  # the same kernel, every call through Triton's JIT dispatch
    kb = -(-s // 128)
    sa_bw, sb_bw = torch.rand(s, kb, device="cuda") + 0.5, torch.rand(kb, kb, device="cuda") + 0.5
    calls: dict[str, Callable[[], Any]] = {
        "warploom.matmul": lambda: warploom.matmul(a, b),
        "Kernel.run (matmul)": lambda: k.run(a, b, out),
        "  same, JIT dispatch": lambda: jit(a, b, out),
        "torch.matmul": lambda: torch.matmul(a, b),
        "warploom.scaled_mm": lambda: warploom.scaled_mm(a8, b8, sa, sb, bias=bias, use_fast_accum=True),
        "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, sa, sb, bias=bias, out_dtype=torch.bfloat16,
                                                     use_fast_accum=True),
        "scaled_mm blockwise": lambda: warploom.scaled_mm(a8, b8, sa_bw, sb_bw),
        "torch blockwise": lambda: torch._scaled_mm(a8, b8, sa_bw.t().contiguous().t(),
                                                    sb_bw.t().contiguous().t(), out_dtype=torch.bfloat16),
        "warploom fused": lambda: warploom.scaled_mm(a8, b8, sa, sb, bias=bias, use_fast_accum=True,
                                                     epilogue=gelu_residual, residual=res),
    }
    for name, fn in calls.items():
        try:
            print(f"{name:22s} host {host_us(fn):8.1f} us/call", flush=True)
        except RuntimeError as e:  # torch without a blockwise _scaled_mm
            print(f"{name:22s} {type(e).__name__}: {str(e)[:120]}", flush=True)
    fn = {"matmul": calls["warploom.matmul"], "scaled_mm": calls["warploom.scaled_mm"],
          "fused": calls["warploom fused"]}[args.profile]
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats(args.sort).print_stats(30)


if __name__ == "__main__":
    main()
