"""Experiment (session 19): swap-AB decode with a fused epilogue (planner rule 18 for fused GEMMs).

A fused epilogue without dense operands can run swapped: its row and column operands trade kinds
(`EpilogueGraph.transposed`). This times, at Llama-3 and 8192² decode shapes, M in {1, 16, 32}, the unswapped plan
(`swap_ab=False`: rule 16) against the swapped one (`swap_ab=True`, rule 18's tile), for bf16 ``silu(acc + bias)``
and fp8 rowwise ``gelu(acc)`` with scaled_mm's bias, against torch eager of the same function. CUDA graphs of
10 calls, median of interleaved rounds; outputs checked against the fp32 reference first.

    PYTHONPATH=. python3 archive/exp/decode_fused_swap.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
import decode_fused  # noqa: E402
from _rows import checked, interleaved_ms, write_rows  # noqa: E402

import warploom  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402

SIZES = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)]


def gelu(acc: torch.Tensor) -> torch.Tensor:
    return F.gelu(acc)


def problem(dtype: str, m: int, n: int, k: int) -> tuple[Any, ...]:
    """(the planner's kernel, A, B, the graph's operands, the fp32 reference, torch eager's call)."""
    if dtype == "bf16":  # decode_fused.py's bf16 problem: silu(acc + bias)
        kern, (a, b, _, _), ops, ref, theirs = decode_fused.problem("bf16", m, n, k)
        return kern, a, b, ops, ref, theirs
    a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bias8 = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    kern = warploom.plan(a8, b8, sa, sb, bias=bias8, use_fast_accum=True, epilogue=gelu)
    ref = gelu((a8.float() @ b8.float()) * sa * sb + bias8.float())

    def theirs() -> torch.Tensor:
        return gelu(torch._scaled_mm(a8, b8, sa, sb, bias=bias8, out_dtype=torch.bfloat16, use_fast_accum=True))

    def theirs_apart() -> torch.Tensor:
        return gelu(torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True) + bias8)

    try:  # (cuBLAS refused a bias at 1x4096x14336 on torch 2.11, CUBLAS_STATUS_NOT_SUPPORTED: then it is added apart)
        theirs()
    except RuntimeError:
        return kern, a8, b8, {"scale_a": sa, "scale_b": sb, "bias": bias8}, ref, theirs_apart
    return kern, a8, b8, {"scale_a": sa, "scale_b": sb, "bias": bias8}, ref, theirs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = DeviceInfo.current()
    rows: list[dict[str, Any]] = []
    for dtype in ("bf16", "fp8"):
        for (n, k), m in ((s, m) for s in SIZES for m in (1, 16, 32)):
            torch.manual_seed(m)
            planned, a, b, ops, ref, theirs = problem(dtype, m, n, k)
            runs: dict[str, Any] = {"torch": theirs}
            plans = {}
            for label, kw in (("unswapped", {"swap_ab": False}), ("swapped", {"swap_ab": True})):
                kern = build(planned.spec, dev, plan_schedule(planned.spec, dev, **kw))
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                runs[label] = functools.partial(kern.run, a, b, out, operands=ops)
                plans[label] = kern.plan.short()
            checked({label: runs[label] for label in plans}, ref.double(), f"{dtype} {m}x{n}x{k}")
            ms = interleaved_ms(runs, args.rounds)
            for label, plan in plans.items():
                rows.append({"dtype": dtype, "size": [m, n, k], "variant": label, "plan": plan, "ms": ms[label],
                             "torch_ms": ms["torch"], "ratio": ms["torch"] / ms[label]})
                print(f"{dtype} {m}x{n}x{k:<6d} {label:9s} {plan:36s} {ms[label] * 1e3:8.1f} us "
                      f"ratio vs torch eager {ms['torch'] / ms[label]:.3f}", flush=True)
            write_rows(rows, "decode-fused-swap.json")  # after every shape: a later failure keeps these


if __name__ == "__main__":
    main()
