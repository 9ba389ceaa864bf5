"""Benchmarks on a GPU: warploom against torch (cuBLAS) in the same process, as ratios.

`python -m warploom.bench --out results.json` runs the trunk suite. Timing: triton.testing.do_bench
median over random data, after a correctness check of the very output being timed.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any

from warploom.runtime.timing import time_eager, time_graph


@dataclass(frozen=True)
class Row:
    """One benchmark line.

    Attributes:
        op: what was timed; shape: (M, N, K); ours_ms / torch_ms: median times; ratio: torch_ms / ours_ms
        (above 1: warploom is faster); ours_err / torch_err: error against the fp32 reference (scale-free
        metric for fp8, max relative for bf16); plan: the schedule warploom chose.
    """

    op: str
    shape: tuple[int, int, int]
    ours_ms: float
    torch_ms: float
    ours_tflops: float
    torch_tflops: float
    ratio: float
    graph_ratio: float
    ours_err: float
    torch_err: float
    plan: str


def bench_matmul(m: int, n: int, k: int) -> Row:
    import torch

    import warploom
    from warploom.reference import relative_error as err

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    ref = a.float() @ b.float()
    ours, theirs = warploom.matmul(a, b), torch.matmul(a, b)
    t_ours = time_eager(lambda: warploom.matmul(a, b))
    t_torch = time_eager(lambda: torch.matmul(a, b))
    g_ratio = time_graph(lambda: torch.matmul(a, b)) / time_graph(lambda: warploom.matmul(a, b))
    flops = 2 * m * n * k
    return Row("matmul bf16", (m, n, k), t_ours, t_torch, flops / t_ours / 1e9, flops / t_torch / 1e9,
               t_torch / t_ours, g_ratio, err(ours, ref), err(theirs, ref), warploom.plan(a, b).plan.short())


def bench_scaled_mm(m: int, n: int, k: int, fast_accum: bool) -> Row:
    import torch

    import warploom
    from warploom.reference import relative_error as err

    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    ref = (a.float() @ b.float()) * sa * sb

    def ours() -> Any:
        return warploom.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    def torch_fn() -> Any:
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)

    o, t = ours(), torch_fn()
    t_ours, t_torch = time_eager(ours), time_eager(torch_fn)
    g_ratio = time_graph(torch_fn) / time_graph(ours)
    flops = 2 * m * n * k
    name = f"scaled_mm fp8 rowwise fast_accum={fast_accum}"
    return Row(name, (m, n, k), t_ours, t_torch, flops / t_ours / 1e9, flops / t_torch / 1e9, t_torch / t_ours,
               g_ratio, err(o, ref), err(t, ref), warploom.plan(a, b, sa, sb, use_fast_accum=fast_accum).plan.short())


def trunk_suite(sizes: tuple[int, ...] = (4096, 8192)) -> list[Row]:
    rows = []
    for s in sizes:
        rows.append(bench_matmul(s, s, s))
        rows.append(bench_scaled_mm(s, s, s, fast_accum=True))
        rows.append(bench_scaled_mm(s, s, s, fast_accum=False))
    return rows


def environment() -> dict[str, Any]:
    import torch
    import triton

    return {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
    }


def table(rows: list[Row]) -> str:
    lines = [f"{'op':42s} {'shape':>18s} {'ours TF/s':>9s} {'torch TF/s':>10s} {'ratio':>6s} {'ours err':>9s} "
             f"{'torch err':>9s}  plan"]
    for r in rows:
        shape = "x".join(map(str, r.shape))
        lines.append(f"{r.op:42s} {shape:>18s} {r.ours_tflops:9.0f} {r.torch_tflops:10.0f} {r.ratio:6.3f} "
                     f"{r.graph_ratio:6.3f} {r.ours_err:9.2e} {r.torch_err:9.2e}  {r.plan}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--sizes", default="4096,8192")
    args = ap.parse_args()
    rows = trunk_suite(tuple(int(s) for s in args.sizes.split(",")))
    with open(args.out, "w") as f:
        json.dump({"env": environment(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
