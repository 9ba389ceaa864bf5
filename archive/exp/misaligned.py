"""Which operand's unaligned rows slow the bf16 kernel, which schedules suffer less, and which kernel cuBLAS runs
(GPU only). Rows of K elements that are not whole 128-byte lines against rows padded to 64 elements (the same
values), for A and B apart; then forced plans on the unpadded operands; CUDA-graph timing, torch in the same run.

    PYTHONPATH=.:scripts python3 archive/exp/misaligned.py 4634x4968x3672 --variants '[{}, {"bn": 128}]'
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import time_graph as graph_ms


def rows(n: int, k: int, pad: bool) -> torch.Tensor:
    width = -(-k // 64) * 64 if pad else k
    return torch.randn(n, width, device="cuda", dtype=torch.bfloat16)[:, :k]


def cublas_names(fn: Any) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--variants", default="[{}]")
    ap.add_argument("--out", default="misaligned.json")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    out_rows = []
    for text in args.shapes:
        m, n, k = (int(x) for x in text.split("x"))
        for pad_a, pad_b in ((False, False), (True, False), (False, True), (True, True)):
            a, w = rows(m, k, pad_a), rows(n, k, pad_b)
            b = w.t()
            spec = checks.matmul_spec(a, b, None)
            ref = a.float() @ b.float()
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            theirs = functools.partial(torch.matmul, a, b)
            t_torch = graph_ms(theirs)
            names = cublas_names(theirs)
            variants = json.loads(args.variants) if not (pad_a or pad_b) else [{}]
            for kw in variants:
                forced = {key: v for key, v in kw.items() if key != "plan"}
                plan = dataclasses.replace(plan_schedule(spec, dev, **forced), **kw.get("plan", {}))
                try:
                    kern = build(spec, dev, plan)
                    c.fill_(float("nan"))
                    kern.run(a, b, c, None, None, None)
                    torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=2e-1)
                    t = graph_ms(functools.partial(kern.run, a, b, c, None, None, None))
                except Exception as e:  # a variant that fails is reported, not fatal
                    print(f"{text} {plan.short()}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                row = {"shape": text, "pad_a": pad_a, "pad_b": pad_b, "plan": plan.short(), "ms": t,
                       "torch_ms": t_torch, "ratio": t_torch / t, "tflops": 2 * m * n * k / t / 1e9,
                       "torch_tflops": 2 * m * n * k / t_torch / 1e9, "cublas": names}
                out_rows.append(row)
                print(f"{text} pad A {pad_a:d} B {pad_b:d} {plan.short():40s} {row['tflops']:4.0f} TFLOP/s, torch "
                      f"{row['torch_tflops']:4.0f} (ratio {row['ratio']:.3f}) {names[0][:90] if names else ''}",
                      flush=True)
    with open(args.out, "w") as f:
        json.dump(out_rows, f, indent=1)


if __name__ == "__main__":
    main()
