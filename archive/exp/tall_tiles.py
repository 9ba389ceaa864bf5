"""Experiment (session 17, issues 2 and 6): 256x128 tiles with four consumer warpgroups, one partition each.

cuBLAS's bf16 kernels at 4096^3 and 4096x7168x2048 are 256x128 tiles (`nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA`,
docs/benchmarks.md session 14); warploom's are 128x256 with two consumer warpgroups. A 256x128 tile moves the same
bytes per k-block (bf16: 256x64 of A and 64x128 of B, 48 KiB) for the same work. Four 64-row warpgroups hold a
64x128 fp32 accumulator each (64 registers), which fits the ~112 registers four consumer warpgroups can have
beside the producer (65536 / 512 threads). With the output staged in 64x64 halves (4 x 8 KiB), 4 stages fit in
shared memory (229 KiB).

First run (session 17, before the planner had the tile: the script then added it to the planner's table
in-process): 256x128 at 4 stages with 64x64 epilogue halves beat 128x256 at 4096x7168x2048 bf16 in both rounds,
and was within noise elsewhere; it became planner rule 17 (short K, 16-bit). `--short-k` measures the rule's
scope: the planner's plan against both tiles forced, bf16 at K <= 2048 and at K = 4096 beside it. It timed the
same kernel up to 6% apart within a round; `scripts/sweep_plans.py` with 7 interleaved rounds then found the two
tiles equal (-2.3% to +1.5%), so rule 17 is forced or tuned only (docs/benchmarks.md session 17).

    PYTHONPATH=. python3 archive/exp/tall_tiles.py --cross            # CPU: registers, spills, shared memory
    PYTHONPATH=. python3 archive/exp/tall_tiles.py                    # GPU: $OUT/tall-tiles.json
    PYTHONPATH=. python3 archive/exp/tall_tiles.py --short-k --ops bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import torch

from warploom import checks
from warploom.device import H100_SXM, DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import Plan, plan_schedule

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 2048), (4096, 28672, 4096), (8192, 8192, 4096)]
SHORT_K = [(4096, 7168, 2048), (4096, 4096, 2048), (8192, 8192, 2048), (8192, 8192, 1024), (4096, 14336, 1024),
           (2048, 8192, 2048), (4096, 4096, 4096)]
# (name, plan_schedule arguments): None is the planner's own plan
VARIANTS: list[tuple[str, dict[str, Any] | None]] = [
    ("planner", None),
    ("128x256", dict(bm=128, bn=256)),
    ("256x128", dict(bm=256, bn=128)),
    ("256x128 s3", dict(bm=256, bn=128, stages=3, epilogue_subtiles=1)),
]


def _spec(op: str, a: torch.Tensor, b: torch.Tensor, sa: Any, sb: Any) -> Any:
    if op == "bf16":
        return checks.matmul_spec(a, b, None)
    return checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True)


def _plan(spec: Any, dev: DeviceInfo, over: dict[str, Any] | None) -> Plan:
    if over is None:
        return plan_schedule(spec, dev)
    over = dict(over)
    sub = over.pop("epilogue_subtiles", None)  # (3 stages with whole 64x128 stores: the first run's variant)
    p = plan_schedule(spec, dev, **over)
    return p if sub is None else dataclasses.replace(p, epilogue_subtiles=sub)


def _inputs(op: str, m: int, n: int, k: int, device: str) -> tuple[Any, ...]:
    if op == "bf16":
        a = torch.randn(m, k, device=device).to(torch.bfloat16)
        b = torch.randn(k, n, device=device).to(torch.bfloat16)
        return a, b, None, None
    a = (torch.randn(m, k, device=device) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=device) * 2).to(torch.float8_e4m3fn).t()
    return a, b, torch.rand(m, 1, device=device) + 0.5, torch.rand(1, n, device=device) + 0.5


def cross() -> None:
    for op in ("bf16", "fp8"):
        a, b, sa, sb = _inputs(op, 4096, 4096, 4096, "meta")
        spec = _spec(op, a, b, sa, sb)
        for name, over in VARIANTS:
            kern = build(spec, H100_SXM, _plan(spec, H100_SXM, over))
            print(op, name, kern.plan.short(), kern.compile().summary())


def _torch(op: str, a: Any, b: Any, sa: Any, sb: Any) -> Callable[[], Any]:
    if op == "bf16":
        return lambda: torch.matmul(a, b)
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def _one(rnd: int, op: str, m: int, n: int, k: int) -> list[dict[str, Any]]:
    from warploom.reference import relative_error as _err
    from warploom.runtime.timing import time_graph as _time_graph

    a, b, sa, sb = _inputs(op, m, n, k, "cuda")
    ref = (a.float() @ b.float()) if op == "bf16" else (a.float() @ b.float()) * sa * sb
    spec = _spec(op, a, b, sa, sb)
    dev = DeviceInfo.current()
    theirs = _torch(op, a, b, sa, sb)
    gt = _time_graph(theirs)
    rs = []
    for name, over in VARIANTS:
        kern = build(spec, dev, _plan(spec, dev, over))
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

        def ours(kern: Kernel = kern, out: torch.Tensor = out) -> None:
            kern.run(a, b, out, sa, sb) if op != "bf16" else kern.run(a, b, out)

        try:
            ours()
            torch.cuda.synchronize()
        except Exception as e:  # a variant that fails is reported; the others still run
            print(json.dumps(dict(op=op, shape=[m, n, k], variant=name, error=str(e)[:300])), flush=True)
            continue
        g = _time_graph(ours)
        r = dict(round=rnd, op=op, shape=[m, n, k], variant=name, plan=kern.plan.short(), err=_err(out, ref),
                 tflops=2 * m * n * k / g / 1e9, torch_tflops=2 * m * n * k / gt / 1e9, ratio=gt / g)
        print(json.dumps(r), flush=True)
        rs.append(r)
    return rs


def gpu(rounds: int, ops: list[str], shapes: list[tuple[int, int, int]]) -> None:
    rs = []
    for rnd in range(rounds):
        for op in ops:
            for shape in shapes:
                rs += _one(rnd, op, *shape)
                torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "tall-tiles.json"), "w") as f:
        json.dump(rs, f, indent=1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--cross", action="store_true")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--short-k", action="store_true")
    p.add_argument("--ops", default="bf16,fp8")
    args = p.parse_args()
    cross() if args.cross else gpu(args.rounds, args.ops.split(","), SHORT_K if args.short_k else SHAPES)
