"""Decode-sized GEMMs (M <= 64, N = K = 8192): tile widths against torch, as bandwidth (GPU only).

    PYTHONPATH=. python3 scripts/sweep_decode.py --out decode.json [--rounds 5]

A decode GEMM streams B once: its time is bytes (A + B + C) over bandwidth, so each variant is reported as
TB/s beside torch's and as the fraction of a device-to-device copy's bandwidth measured in the same run.
Outputs are checked against an fp32 reference before timing; times are CUDA-graph replays of 10 calls,
interleaved with torch over several rounds (median).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from typing import Any

import torch

from warploom import checks
from warploom.bench import environment
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import time_graph as graph_ms

# The default 64x128 tile (64 CTAs at N = 8192), and split-K (forced; planner.Plan.split_k) into 128 or 256 units.
# (64- and 256-wide tiles without split-K were measured slower: docs/benchmarks.md, 2026-11-23 session 10.)
VARIANTS: list[dict[str, Any]] = [{}, {"split_k": 2}, {"split_k": 4}, {"bn": 256, "split_k": 4}]


def err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


def copy_tbps() -> float:
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = graph_ms(lambda: y.copy_(x))
    return 2 * x.numel() / ms / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="decode.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", type=json.loads, default=VARIANTS,
                    help='forced plan_schedule arguments as JSON, e.g. \'[{}, {"stages": 8}]\'')
    args = ap.parse_args()
    dev = DeviceInfo.current()
    copy = copy_tbps()
    print(f"device copy {copy:.2f} TB/s", flush=True)
    rows = []
    n = k = 8192
    for dtype in ("bf16", "fp8"):
        for m in (1, 16, 64):
            torch.manual_seed(m)
            if dtype == "bf16":
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
                sa = sb = None
                spec = checks.matmul_spec(a, b, None)
                ref = a.float() @ b.float()
                theirs: Any = functools.partial(torch.matmul, a, b)
            else:
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
                sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
                spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True)
                ref = (a.float() @ b.float()) * sa * sb
                theirs = functools.partial(torch._scaled_mm, a, b, sa, sb, out_dtype=torch.bfloat16,
                                           use_fast_accum=True)
            nbytes = a.numel() * a.element_size() + b.numel() * b.element_size() + m * n * 2
            runs = []
            for kw in args.variants:
                try:
                    kern = build(spec, dev, plan_schedule(spec, dev, **kw))
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    kern.run(a, b, out, sa, sb)
                    e = err(out, ref)
                    if not e < 1e-3:
                        raise AssertionError(f"error {e:.3e}")
                    runs.append((kw, kern, out, {"ms": [], "torch_ms": []}))
                except Exception as ex:  # reported, not fatal
                    rows.append({"dtype": dtype, "m": m, "variant": kw, "error": f"{type(ex).__name__}: {ex}"[:300]})
            for _ in range(args.rounds):
                t_torch = graph_ms(theirs)
                for _kw, kern, out, rec in runs:
                    rec["ms"].append(graph_ms(functools.partial(kern.run, a, b, out, sa, sb)))
                    rec["torch_ms"].append(t_torch)
            for kw, kern, _, rec in runs:
                ms, tms = statistics.median(rec["ms"]), statistics.median(rec["torch_ms"])
                row = {"dtype": dtype, "m": m, "variant": kw, "plan": kern.plan.short(), "ms": ms, "torch_ms": tms,
                       "ratio": tms / ms, "tbps": nbytes / ms / 1e9, "torch_tbps": nbytes / tms / 1e9,
                       "of_copy": nbytes / ms / 1e9 / copy, "torch_of_copy": nbytes / tms / 1e9 / copy}
                rows.append(row)
                print(f"{dtype} M={m:3d} {row['plan']:28s} ratio {row['ratio']:.3f} {row['tbps']:.2f} TB/s "
                      f"({row['of_copy']:.0%} of copy; torch {row['torch_of_copy']:.0%})", flush=True)
    with open(args.out, "w") as f:
        json.dump({"env": environment(), "copy_tbps": copy, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
