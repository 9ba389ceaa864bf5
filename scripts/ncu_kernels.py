"""Time, and launch once for Nsight Compute, warploom kernels of one fp8 rowwise problem (GPU only).

    PYTHONPATH=. python3 scripts/ncu_kernels.py [--size 4096]
    ncu --kernel-name regex:warploom --section SpeedOfLight --section WarpStateStats \
        python3 scripts/ncu_kernels.py --launch-only

Variants:
- the plain kernel at the planner's 128x256 tile, and forced to 128x128;
- the fused bias + gelu + residual epilogue: the planner's plan (128x256 in 8 slotted blocks, one consumer
  partition, rule 9) and the same with two partitions (`fused_wide`). Session 15's no-instruction stalls came
  from that two-partition variant.

Comparing them separates what the tile shape costs from what the epilogue costs.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

import warploom
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import time_graph


def _wide(spec: Any, dev: DeviceInfo, partitions: int) -> Any:
    """The fused epilogue on the 256-wide tile in 8 slotted blocks (session 15, archive/exp/fused_wide.py)."""
    return dataclasses.replace(plan_schedule(spec, dev, bn=256, stages=2), stages=4, epilogue_subtiles=8,
                               hoist_rows=False, prefetch_operands=True, staging_slots=2, operand_slots=2,
                               load_ahead=True, consumer_partitions=partitions)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--launch-only", action="store_true", help="one launch each, no timing (under ncu)")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    args = ap.parse_args()
    s, profiling = args.size, args.launch_only
    torch.manual_seed(0)
    a = torch.randn(s, s, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(s, s, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(s, 1, device="cuda") + 0.5, torch.rand(1, s, device="cuda") + 0.5
    bias = torch.randn(s, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    dev = DeviceInfo.current()
    plain = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True).spec
    fused = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True,
                          epilogue=lambda acc, residual: F.gelu(acc) + residual, residual=residual).spec
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": residual}
    out = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    def run_plain(k: Any) -> None:
        k.run(a, b, out, sa, sb, bias)

    def run_fused(k: Any) -> None:
        k.run(a, b, out, operands=ops)

    variants = {
        "plain_default": (build(plain, dev), run_plain),
        "plain_128x128": (build(plain, dev, plan_schedule(plain, dev, bn=128)), run_plain),
        "fused_default": (build(fused, dev), run_fused),
        "fused_wide": (build(fused, dev, _wide(fused, dev, 2)), run_fused),  # two partitions: the thrash
        "fused_wide_p1": (build(fused, dev, _wide(fused, dev, 1)), run_fused),  # the planner's, forced
        "plain_pingpong": (build(plain, dev, plan_schedule(plain, dev, pingpong=True)), run_plain),
        "fused_pingpong": (build(fused, dev, plan_schedule(fused, dev, pingpong=True)), run_fused),
    }
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}
    flops = 2 * s**3
    for name, (k, run) in variants.items():
        run(k)
        torch.cuda.synchronize()
        if profiling:
            continue
        ms = time_graph(lambda k=k, run=run: run(k))
        print(f"{name:16s} {k.plan.short():36s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
