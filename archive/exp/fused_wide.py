"""Experiment (session 13): issue 4's fused epilogue on the 256-wide tile, in 8 or 16 column blocks.

The planner keeps fused epilogues at 128-wide tiles because beside a 64x256 accumulator the epilogue spilled
(ptxas: 2128 bytes in halves, 1088 in quarters). Cross-compiling showed the spills come from the hoisted row
vectors (scale_b, bias of every block live across the whole epilogue): without hoisting, 8 and 16 column blocks
compile with 0 spills at 4 stages. This times those plans against the default and torch eager.

Session 15 added the slotted variants and one consumer partition (`_p1`). Latency hiding alone did nothing
(233-238 µs at 4096^3). One partition for both warpgroups did: 132 µs, because two partitions' unrolled
epilogues thrash the instruction cache (scripts/ncu_kernels.py, docs/benchmarks.md). Planner rule 9 now takes
that plan.

    PYTHONPATH=. python3 archive/exp/fused_wide.py [--cross] [--only NAME ...]
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

# Variant names spell their Plan fields over the planner's plan: 256/128 (tile width; 256 turns hoisting off),
# s<stages>, b<column blocks>, ss<staging slots>, os<operand slots, with the residual copied early>, pf (copied
# early), ahead (load_ahead), p1 (one consumer partition); what a name leaves out is off. "default" is the
# planner's own. Session 13 timed the _s4_b8 / _b4 / _b16 rows (one staging buffer, each block's copy and vectors
# waited for in turn); session 15 the slotted ones.
VARIANTS = ["default", "256_s4_b8", "256_s4_b8_pf", "256_s4_b8_ss2_os2_ahead", "256_s4_b8_ss2_os2",
            "256_s4_b8_os2_ahead", "256_s4_b8_ss2_os2_ahead_p1", "256_s4_b8_p1", "256_s4_b8_ss2_os2_p1",
            "256_s3_b8_ss4_os2_ahead_p1", "256_s3_b8_ss8_os2_ahead_p1", "256_s3_b8_ss4_os4_ahead_p1",
            "256_s3_b8_ss2_os8_ahead_p1", "256_s3_b4_ss2_os2_ahead_p1", "256_s3_b4_ss2_os2_p1", "256_s4_b4_pf_p1",
            "128_s5_p1", "256_s3_b8_ss2_os8_ahead"]
_FIELDS = {"s": "stages", "b": "epilogue_subtiles", "ss": "staging_slots", "os": "operand_slots"}


def fields(name: str) -> dict[str, Any]:
    """The Plan fields a variant name spells (module comment above)."""
    width, *tokens = name.split("_")
    # What a name leaves out is off: one slot each, nothing early, two consumer partitions (the kernels of session 13).
    out: dict[str, Any] = {"bn": int(width), "staging_slots": 1, "operand_slots": 1, "load_ahead": False,
                           "prefetch_operands": False, "consumer_partitions": 2}
    if width == "256":
        out["hoist_rows"] = False
    for tok in tokens:
        if tok in ("pf", "ahead", "p1"):
            out[{"pf": "prefetch_operands", "ahead": "load_ahead", "p1": "consumer_partitions"}[tok]] = \
                1 if tok == "p1" else True
            continue
        key = tok.rstrip("0123456789")
        out[_FIELDS[key]] = int(tok[len(key):])
        if key == "os":
            out["prefetch_operands"] = True
    return out


def kernels(m: int, n: int, k: int, device: str, only: list[str] | None = None) -> dict[str, Any]:
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device).t()
    sa, sb = torch.empty(m, 1, device=device), torch.empty(1, n, device=device)
    bias = torch.empty(n, dtype=torch.bfloat16, device=device)
    res = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    base = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=epilogue, residual=res)
    out = {}
    for name in VARIANTS:
        if only and name not in only:
            continue
        if name == "default":
            out[name] = base
            continue
        v = fields(name)
        p = plan_schedule(base.spec, base.device, bn=v.pop("bn"), stages=2)  # then re-staged
        out[name] = build(base.spec, base.device, dataclasses.replace(p, **v))
    return out


def cross(only: list[str] | None) -> None:
    from warploom.targets import cross_compile

    for name, kern in kernels(4096, 4096, 4096, "meta", only).items():
        print(name, kern.plan.short(), cross_compile(kern.module, kern.gluon).summary(), flush=True)


def gpu_shape(m: int, n: int, k: int, only: list[str] | None) -> dict[str, Any]:
    (a, b, sa, sb, bias, res), row, record = start(m, n, k)
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": res}
    for name, kern in kernels(m, n, k, "cuda", only).items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        record(name, lambda kern=kern, out=out: kern.run(a, b, out, operands=ops))
    return row


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "out"), "fused_wide.json"))
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = ap.parse_args()
    if args.cross:
        cross(args.only)
    else:
        rows = [gpu_shape(m, n, k, args.only) for m, n, k in [(4096, 4096, 4096), (8192, 8192, 4096)]]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))
