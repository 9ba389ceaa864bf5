"""Issue 4's benchmark: fp8 rowwise scaled_mm + bias + gelu + residual, fused by warploom, against torch eager
and torch.compile(mode="max-autotune-no-cudagraphs") of the same function, with the seed-003 ablations.

    PYTHONPATH=. python3 scripts/bench_epilogue.py --out out/epilogue.json

Every timing is the median of CUDA-graph replays of 10 calls (host overhead excluded for all contenders);
every contender's output is checked against an fp32 reference first (scale-free error).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import torch
import torch.nn.functional as F

import warploom
from warploom.bench import environment
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import time_graph

SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096)]
SCHEDULES: dict[str, dict[str, Any]] = {
    # Planner rule 9's wide epilogue (the default) without its copies ahead, and with two consumer partitions
    # (two unrolled copies of the epilogue's code: the instruction cache thrashes).
    "wide_noprefetch": {"prefetch_operands": False}, "wide_p2": {"consumer_partitions": 2},
    # The 128-wide tile (the rule before session 15: two partitions), in one partition, and with prefetch.
    "128x128_p2": {"bn": 128, "consumer_partitions": 2}, "128x128_p1": {"bn": 128},
    "128x128_p1_prefetch": {"bn": 128, "prefetch_operands": True},
    "pingpong_128x128": {"pingpong": True, "bm": 128, "bn": 128},
    "pingpong_64x256": {"pingpong": True, "bm": 64, "bn": 256},
}


def err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def torch_fn(a: Any, b: Any, sa: Any, sb: Any, bias: Any, residual: Any) -> torch.Tensor:
    y = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    return F.gelu(y) + residual


def epilogue(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.gelu(acc) + residual


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/epilogue.json")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (minutes of autotuning)")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    compiled = None if args.no_compile else torch.compile(torch_fn, mode="max-autotune-no-cudagraphs")
    rows = [bench_shape(m, n, k, dev, compiled) for m, n, k in SHAPES]
    with open(args.out, "w") as f:
        json.dump({"env": environment(), "rows": rows}, f, indent=1)


def problem(m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    """The benchmark's inputs on the GPU (seeded): a, b, scale_a, scale_b, bias, residual, and the fp32 reference."""
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") / 8 + 0.05, torch.rand(1, n, device="cuda") / 8 + 0.05
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    ref = epilogue((a.float() @ b.float()) * sa * sb + bias.float(), residual)
    return a, b, sa, sb, bias, residual, ref


def bench_shape(m: int, n: int, k: int, dev: DeviceInfo, compiled: Any) -> dict[str, Any]:
    a, b, sa, sb, bias, residual, ref = problem(m, n, k)
    flops = 2 * m * n * k
    row: dict[str, Any] = {"shape": [m, n, k]}

    def record(name: str, fn: Any) -> None:
        out = fn()
        torch.cuda.synchronize()
        ms = time_graph(fn)
        row[name] = {"ms": ms, "tflops": flops / ms / 1e9, "err": err(out, ref)}
        print(f"{m}x{n}x{k} {name:28s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.1f} TFLOP/s err {row[name]['err']:.2e}",
              flush=True)

    record("torch_eager", lambda: torch_fn(a, b, sa, sb, bias, residual))
    if compiled is not None:
        t0 = time.perf_counter()
        compiled(a, b, sa, sb, bias, residual)
        row["compile_s"] = time.perf_counter() - t0
        record("torch_compile_max_autotune", lambda: compiled(a, b, sa, sb, bias, residual))
    record("warploom_fused", lambda: warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=True,
                                                        epilogue=epilogue, residual=residual))
    spec = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=epilogue, residual=residual).spec
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": residual}
    # Seed 003's two switches on the default plan. "Hoist": the row vectors' loads ahead of their use, i.e. before
    # the final wgmma wait (hoist_rows, 128 wide) or one block early (load_ahead, rule 9's 256 wide); off, each
    # load stands right before its block's math.
    default = plan_schedule(spec, dev)
    for hoist in (True, False):
        for scalar in (True, False):
            early = {"load_ahead": hoist} if default.load_ahead else {"hoist_rows": hoist}
            kern = build(spec, dev, dataclasses.replace(default, scalar_columns=scalar, **early))
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            record(f"ablation_hoist{int(hoist)}_colscalar{int(scalar)}",
                   lambda kern=kern, out=out: kern.run(a, b, out, operands=ops))
            row[f"ablation_hoist{int(hoist)}_colscalar{int(scalar)}"]["plan"] = kern.plan.short()
    # Schedule variants: the dense operand's prefetch, and ping-pong consumers at three tile shapes.
    for name, kw in SCHEDULES.items():
        try:
            kern = build(spec, dev, plan_schedule(spec, dev, **kw))
        except Exception as ex:  # a variant the planner refuses is reported, not fatal
            row[f"schedule_{name}"] = {"error": f"{type(ex).__name__}: {ex}"[:300]}
            continue
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        record(f"schedule_{name}", lambda kern=kern, out=out: kern.run(a, b, out, operands=ops))
        row[f"schedule_{name}"]["plan"] = kern.plan.short()
    row["plan"] = build(spec, dev).plan.short()
    # The unfused warploom kernel plus torch's ops: what fusing the epilogue saves.
    record("warploom_unfused_then_torch",
           lambda: F.gelu(warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=True)) + residual)
    for base in ("torch_eager", "torch_compile_max_autotune"):
        if base in row:
            row[f"speedup_vs_{base}"] = row[base]["ms"] / row["warploom_fused"]["ms"]
    print(json.dumps({key: v for key, v in row.items() if key.startswith("speedup")}), flush=True)
    return row


if __name__ == "__main__":
    main()
