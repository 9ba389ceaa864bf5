"""Experiment (session 19): where issue 4's fused epilogue spends its time.

The fused kernel (fp8 rowwise scaled_mm + bias, then gelu(acc) + residual) runs 528 µs at 8192x8192x4096 where
torch's plain `_scaled_mm` runs 374: the epilogue adds ~40% to the mainloop. This times the planner's kernel for
epilogues that add one piece at a time (the bias alone, a residual alone, erf and tanh GELU, relu), and the plain
GEMM's plan forced to the fused kernel's one consumer partition, interleaved rounds, CUDA graphs of 10 calls.
Every output is checked against an fp32 reference first.

    PYTHONPATH=. python3 archive/exp/epilogue_parts.py [--rounds 3] [--out parts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import warploom
from warploom.bench import environment
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import time_graph as _time_graph

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))  # bench_epilogue
from bench_epilogue import SHAPES, err, problem  # noqa: E402

# name -> (epilogue or None, whether scaled_mm gets the bias, whether the epilogue takes the residual)
EPILOGUES: dict[str, tuple[Callable[..., torch.Tensor] | None, bool, bool]] = {
    "plain": (None, False, False),
    "bias": (None, True, False),
    "bias_times_one": (lambda acc: acc * 1.5, True, False),
    "bias_relu": (lambda acc: F.relu(acc), True, False),
    "bias_gelu_tanh": (lambda acc: F.gelu(acc, approximate="tanh"), True, False),
    "bias_gelu_erf": (lambda acc: F.gelu(acc), True, False),
    "bias_residual": (lambda acc, residual: acc + residual, True, True),
    "bias_relu_residual": (lambda acc, residual: F.relu(acc) + residual, True, True),
    "bias_gelu_erf_residual": (lambda acc, residual: F.gelu(acc) + residual, True, True),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="epilogue-parts.json")
    ap.add_argument("--only", default="", help="comma-separated epilogue names")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(EPILOGUES)
    rows = [r for m, n, k in SHAPES for r in shape_rows(m, n, k, names, args.rounds)]
    with open(args.out, "w") as f:
        json.dump({"env": environment(), "rows": rows}, f, indent=1)


def shape_rows(m: int, n: int, k: int, names: list[str], rounds: int) -> list[dict[str, Any]]:
    dev = DeviceInfo.current()
    a, b, sa, sb, bias, residual, _ = problem(m, n, k)  # issue 4's benchmark inputs (seeded)
    base = (a.float() @ b.float()) * sa * sb
    calls: dict[str, Callable[[], torch.Tensor]] = {}
    rows: list[dict[str, Any]] = []
    for name in names:
        fn, with_bias, with_res = EPILOGUES[name]
        x = base + bias.float() if with_bias else base
        ref = x if fn is None else (fn(x, residual.float()) if with_res else fn(x))
        kw: dict[str, Any] = {"bias": bias if with_bias else None, "use_fast_accum": True}
        if fn is not None:
            kw["epilogue"] = fn
            if with_res:
                kw["residual"] = residual

        def call(kw: dict[str, Any] = kw) -> torch.Tensor:
            return warploom.scaled_mm(a, b, sa, sb, **kw)
        variants: list[tuple[str, Callable[..., torch.Tensor], str]] = [
            (name, call, warploom.plan(a, b, sa, sb, **kw).plan.short())]
        if name in ("plain", "bias"):  # the same GEMM in the fused kernel's one consumer partition
            spec = warploom.plan(a, b, sa, sb, **kw).spec
            kern = build(spec, dev, plan_schedule(spec, dev, consumer_partitions=1))
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

            def forced(kern: Any = kern, out: torch.Tensor = out, kw: dict[str, Any] = kw) -> torch.Tensor:
                kern.run(a, b, out, sa, sb, kw["bias"])
                return out
            variants.append((f"{name}_p1", forced, kern.plan.short()))
        for vname, fcall, plan in variants:
            e = err(fcall(), ref)
            assert e < 1e-3, (vname, e)
            calls[vname] = fcall
            rows.append({"shape": [m, n, k], "name": vname, "plan": plan, "err": e, "us": []})
    torch_ms: list[float] = []
    for _ in range(rounds):
        torch_ms.append(_time_graph(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                              use_fast_accum=True)))
        for row in rows:
            row["us"].append(_time_graph(calls[row["name"]]) * 1e3)
    t = statistics.median(torch_ms) * 1e3
    print(f"{m}x{n}x{k}: torch plain _scaled_mm {t:.1f} us", flush=True)
    for r in rows:
        r["torch_plain_us"] = t
        med = statistics.median(r["us"])
        print(f"  {r['name']:26s} {med:8.1f} us  ({med / t:.3f} of torch plain)  {r['plan']}", flush=True)
    return rows


if __name__ == "__main__":
    main()
