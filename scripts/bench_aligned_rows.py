"""Operands as given against rows padded to whole 128-byte lines ahead (`warploom.aligned_rows`), GPU only.

For each M x N x K (K not a multiple of 64 for bf16, 128 for fp8, so the contiguous rows are not whole lines), in
one process: torch on the contiguous operands and on the padded ones, warploom on the contiguous operands, with the
weight w (N, K) padded ahead (as a model would at load time), and with both padded ahead (the activations written
padded by the layer before). Every warploom output is checked against the fp32 product first; times are CUDA-graph
replays (`time_graph`), interleaved over rounds (`time_interleaved`), ratios against torch on the contiguous operands:

    python3 scripts/bench_aligned_rows.py --out rows.json --ops bf16,fp8 1064x5696x1160 4619x1408x1352
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch

import warploom
from warploom.bench import environment
from warploom.reference import relative_error
from warploom.runtime.timing import time_interleaved


def _calls(op: str, m: int, n: int, k: int) -> tuple[dict[str, Callable[[], Any]], dict[str, str], torch.Tensor]:
    """The timed calls by name, warploom's plans by name, and the fp32 product."""
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    if op == "bf16":
        a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16)
        ap, wp = warploom.aligned_rows(a), warploom.aligned_rows(w)
        ref = a.float() @ w.float().t()

        def ours(x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
            return lambda: warploom.matmul(x, y.t())

        def theirs(x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
            return lambda: torch.matmul(x, y.t())

        def plan(x: torch.Tensor, y: torch.Tensor) -> str:
            return warploom.plan(x, y.t()).plan.short()
    else:  # fp8 rowwise, fast accumulation
        a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ap, wp = warploom.aligned_rows(a), warploom.aligned_rows(w)
        ref = (a.float() @ w.float().t()) * sa * sb

        def ours(x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
            return lambda: warploom.scaled_mm(x, y.t(), sa, sb, use_fast_accum=True)

        def theirs(x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
            return lambda: torch._scaled_mm(x, y.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)

        def plan(x: torch.Tensor, y: torch.Tensor) -> str:
            return warploom.plan(x, y.t(), sa, sb, use_fast_accum=True).plan.short()
    pairs = {"as given": (a, w), "weight padded": (a, wp), "both padded": (ap, wp)}
    calls = {"torch": theirs(a, w), "torch, both padded": theirs(ap, wp)}
    calls.update({name: ours(x, y) for name, (x, y) in pairs.items()})
    return calls, {name: plan(x, y) for name, (x, y) in pairs.items()}, ref


def measure(op: str, text: str, rounds: int) -> dict[str, Any]:
    m, n, k = (int(x) for x in text.split("x"))
    calls, plans, ref = _calls(op, m, n, k)
    errors = {}
    for name, call in calls.items():
        if name.startswith("torch"):
            continue
        errors[name] = e = relative_error(call(), ref)
        if not e < 1e-4:
            raise AssertionError(f"{op} {text} {name}: error {e:.2e} against the fp32 product")
    times = time_interleaved(calls, rounds, warmup_ms=25, rep_ms=150)
    ms = {name: statistics.median(v) for name, v in times.items()}
    return {"op": op, "size": text, "plans": plans, "err": errors, "torch_us": ms["torch"] * 1e3,
            "ratios": {name: ms["torch"] / t for name, t in ms.items() if name != "torch"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--ops", default="bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="rows.json")
    args = ap.parse_args()
    rows = []
    for op in args.ops.split(","):
        for text in args.shapes:
            row = measure(op, text, args.rounds)
            rows.append(row)
            print(f"{op:5} {text:>17} torch {row['torch_us']:7.1f} us  "
                  + "  ".join(f"{name} {v:.3f}" for name, v in row["ratios"].items())
                  + f"  ({row['plans']['as given']} -> {row['plans']['both padded']})", flush=True)
            with open(args.out, "w") as f:
                json.dump({"env": environment(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
