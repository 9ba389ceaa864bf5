"""Experiment (session 13): issue 4's fused epilogue on the 256-wide tile, in 8 or 16 column blocks.

The planner keeps fused epilogues at 128-wide tiles because beside a 64x256 accumulator the epilogue spilled
(ptxas: 2128 bytes in halves, 1088 in quarters). Cross-compiling showed the spills come from the hoisted row
vectors (scale_b, bias of every block live across the whole epilogue): without hoisting, 8 and 16 column blocks
compile with 0 spills at 4 stages. This times those plans against the default and torch eager.

    PYTHONPATH=. python3 scripts/exp/fused_wide.py [--cross]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

import warploom
from warploom.kernel import build
from warploom.planner import plan_schedule

sys.path.insert(0, os.path.dirname(__file__))
from epilogue_partition import epilogue, start  # noqa: E402

VARIANTS = {  # name: (bn, stages, column blocks, hoist rows, prefetch dense operands); None: the planner's default
    "default": None,
    "256_s4_b8": (256, 4, 8, False, False),
    "256_s4_b4": (256, 4, 4, False, False),
    "256_s4_b8_pf": (256, 4, 8, False, True),
    "256_s4_b4_pf": (256, 4, 4, False, True),
    "256_s4_b16_pf": (256, 4, 16, False, True),
    "128_s5_b2_pf": (128, 5, 2, False, True),
}


def kernels(m: int, n: int, k: int, device: str) -> dict[str, Any]:
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device).t()
    sa, sb = torch.empty(m, 1, device=device), torch.empty(1, n, device=device)
    bias = torch.empty(n, dtype=torch.bfloat16, device=device)
    res = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    base = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=epilogue, residual=res)
    out = {}
    for name, v in VARIANTS.items():
        if v is None:
            out[name] = base
            continue
        bn, stages, blocks, hoist, prefetch = v
        p = plan_schedule(base.spec, base.device, bn=bn, stages=3)  # then re-staged: smaller blocks free smem
        out[name] = build(base.spec, base.device,
                          dataclasses.replace(p, stages=stages, epilogue_subtiles=blocks, hoist_rows=hoist,
                                              prefetch_operands=prefetch))
    return out


def cross() -> None:
    from warploom.runtime.cross import cross_compile

    for name, kern in kernels(4096, 4096, 4096, "meta").items():
        print(name, kern.plan.short(), cross_compile(kern.module, kern.gluon).summary(), flush=True)


def gpu_shape(m: int, n: int, k: int) -> dict[str, Any]:
    (a, b, sa, sb, bias, res), row, record = start(m, n, k)
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": res}
    for name, kern in kernels(m, n, k, "cuda").items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        record(name, lambda kern=kern, out=out: kern.run(a, b, out, operands=ops))
    return row


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "out"), "fused_wide.json"))
    args = ap.parse_args()
    if args.cross:
        cross()
    else:
        rows = [gpu_shape(m, n, k) for m, n, k in [(4096, 4096, 4096), (8192, 8192, 4096)]]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
