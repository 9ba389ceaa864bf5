"""Experiment (session 14): which kernels torch (cuBLAS / cuBLASLt) runs for the suite's shapes, by name. cuBLAS's
names carry its tile, cluster and schedule (e.g. ``tilesize128x256x64_cluster2x1x1``), which says what our
128x256 mainloop is compared with.

    PYTHONPATH=. python3 archive/exp/cublas_names.py
"""

from __future__ import annotations

import json

import torch
from _rows import write_rows  # (archive/exp is the script's own folder)
from torch.profiler import ProfilerActivity, profile

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 7168, 2048), (4096, 2112, 7168)]


def names(fn: object) -> list[str]:
    for _ in range(3):
        fn()  # type: ignore[operator]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()  # type: ignore[operator]
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def main() -> None:
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(m, 1, device="cuda"), torch.rand(1, n, device="cuda")
        for op, fn in (("bf16", lambda a=a, b=b: a @ b),
                       ("fp8 rowwise fast", lambda a8=a8, b8=b8, sa=sa, sb=sb: torch._scaled_mm(
                           a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True))):
            row = {"shape": [m, n, k], "op": op, "kernels": names(fn)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_rows(rows, "cublas-names.json")


if __name__ == "__main__":
    main()
