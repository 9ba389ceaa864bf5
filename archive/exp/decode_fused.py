"""Experiment (session 16): does planner rule 16's decode tile (64x64, 12 stages) pay with a fused epilogue too?

Rule 16 was first measured on plain decode GEMMs only. This times its plan against the 64x128 tile at 6 stages
(the planner's before) for two decode epilogues at N = K = 8192, M in {1, 16, 64}, against torch eager of the
same function: bf16
``silu(acc + bias)`` and fp8 rowwise ``gelu(acc) + residual``. CUDA graphs of 10 calls, median of interleaved
rounds; outputs checked against the fp32 reference first. It did pay (docs/benchmarks.md, session 16), and rule
16 now covers fused epilogues.

    PYTHONPATH=. python3 archive/exp/decode_fused.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _rows import write_rows  # noqa: E402

import warploom  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime.timing import time_graph as _time_graph  # noqa: E402

PLANS: dict[str, dict[str, Any]] = {"64x128_s6": {"bm": 64, "bn": 128, "stages": 6},
                                    "64x64_s12": {"bm": 64, "bn": 64, "stages": 12}}


def err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


def silu_bias(acc: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.silu(acc + bias)


def gelu_residual(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return F.gelu(acc) + residual


def problem(dtype: str, m: int, n: int, k: int) -> tuple[Any, ...]:
    """(kernel for the planner's plan, launch args, operands, fp32 reference, torch eager fn)."""
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        kern = warploom.plan(a, b, epilogue=silu_bias, bias=bias)
        ref = silu_bias(a.float() @ b.float(), bias.float())
        return kern, (a, b, None, None), {"bias": bias}, ref, lambda: silu_bias(a @ b, bias)
    a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    kern = warploom.plan(a8, b8, sa, sb, use_fast_accum=True, epilogue=gelu_residual, residual=res)
    ref = gelu_residual((a8.float() @ b8.float()) * sa * sb, res.float())

    def theirs() -> torch.Tensor:
        y = torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
        return gelu_residual(y, res)

    return kern, (a8, b8, sa, sb), {"scale_a": sa, "scale_b": sb, "bias": None, "residual": res}, ref, theirs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dev = DeviceInfo.current()
    rows = []
    n = k = 8192
    for dtype in ("bf16", "fp8"):
        for m in (1, 16, 64):
            torch.manual_seed(m)
            planned, (a, b, _, _), operands, ref, theirs = problem(dtype, m, n, k)
            ops = {o.name: operands[o.name] for o in planned.spec.epilogue.operands}  # the graph's, by name
            runs = []
            for label, kw in PLANS.items():
                kern = build(planned.spec, dev, plan_schedule(planned.spec, dev, **kw))
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                launch = functools.partial(kern.run, a, b, out, operands=ops)
                launch()
                e = err(out, ref)
                assert e < 1e-3, f"{dtype} M={m} {label}: error {e:.3e}"
                runs.append((label, kern, launch, {"ms": [], "torch_ms": []}))
            for _ in range(args.rounds):
                t_torch = _time_graph(theirs)
                for _, _, launch, rec in runs:
                    rec["ms"].append(_time_graph(launch))
                    rec["torch_ms"].append(t_torch)
            for label, kern, _, rec in runs:
                ms, tms = statistics.median(rec["ms"]), statistics.median(rec["torch_ms"])
                rows.append({"dtype": dtype, "m": m, "variant": label, "plan": kern.plan.short(), "ms": ms,
                             "torch_ms": tms, "ratio": tms / ms})
                print(f"{dtype} M={m:3d} {label:10s} {kern.plan.short():40s} {ms * 1e3:8.1f} us "
                      f"ratio vs torch eager {tms / ms:.3f}", flush=True)
    print(write_rows(rows, "decode-fused.json"))


if __name__ == "__main__":
    main()
