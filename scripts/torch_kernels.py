"""Which CUDA kernels torch runs per shape, and for how long (issue 23: what cuBLAS does where warploom trails it).

cuBLAS's Hopper kernel names carry its schedule, e.g. ``nvjet_sm90_tst_80x128_64x8_1x4_h_bz_TNN``: an 80 x 128 tile
(cuBLAS's M x N; torch's row-major C makes that N x M of torch's problem), BK 64 in 8 stages, a 1x4 cluster.
Usage (on the GPU machine): ``python3 scripts/torch_kernels.py "MxNxK ..." "MxNxK ..." out.json``; the first list
runs ``torch.matmul`` in bf16, the second ``torch._scaled_mm`` in fp8 e4m3 with rowwise scales and fast
accumulation. Writes {"bf16 MxNxK": {kernel name: [calls, mean device microseconds]}}."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def kernels(fn: Callable[[], object]) -> dict[str, list[float]]:
    """The CUDA kernels five calls of `fn` launch (after three warm-up calls), each with its count and mean time."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            times.setdefault(e.name, []).append(e.device_time_total)
    return {name: [len(t), sum(t) / len(t)] for name, t in times.items()}


def bf16_call(m: int, n: int, k: int) -> Callable[[], object]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return lambda: a @ b


def fp8_call(m: int, n: int, k: int) -> Callable[[], object]:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda"), torch.rand(1, n, device="cuda")
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def main() -> None:
    bf16, fp8, path = sys.argv[1].split(), sys.argv[2].split(), sys.argv[3]
    out: dict[str, dict[str, list[float]]] = {}
    for tag, sizes, make in (("bf16", bf16, bf16_call), ("fp8", fp8, fp8_call)):
        for size in sizes:
            m, n, k = map(int, size.split("x"))
            out[f"{tag} {size}"] = found = kernels(make(m, n, k))
            print(tag, size, {name[:150]: round(t, 2) for name, (_, t) in found.items()}, flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
