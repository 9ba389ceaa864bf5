"""Blockwise fp8 (1x128 x 128x128, DeepSeek-V3's recipe) on the GPU: warploom against torch's blockwise kernel.

Shapes: 4096^3, 8192^3 and DeepSeek-V3's (M in {64, 128, 4096}; N x K in {7168x16384, 4096x7168, 2112x7168,
7168x2048}). Both run on the same tensors (scale_a outer-dim-major, as torch requires); each output is checked
against the dequantized fp32 product before it is timed. Times are CUDA-graph replays (kernel time) and eager
calls, as medians of triton.testing.do_bench. Writes JSON with --out.

    PYTHONPATH=. python3 scripts/bench_blockwise.py --out blockwise.json [--quick] [--plans] [--ablation]

--ablation times, at 4096^3 and 4096x7168x16384, the three ways scales can reach the promotion: in the A/B
stages (the default), through the dedicated scale partition's 2-slot ring (seed 000), and through a 1-slot ring
(unpipelined: each k-block's scale copy starts only once the previous k-block's were consumed); the 1x128 x 1x128
recipe (a per-column scale_b, a [rows, cols] factor per promotion) and MX (four 32-deep promotions per k-block)
beside 1x128 x 128x128.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import torch

import warploom
from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import dequantized, relative_error
from warploom.runtime.timing import time_eager, time_graph

SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
DEEPSEEK = [(m, n, k) for m in (64, 128, 4096) for n, k in ((7168, 16384), (4096, 7168), (2112, 7168), (7168, 2048))]


def _inputs(m: int, n: int, k: int, per_col: bool = False, mx: bool = False) -> tuple[torch.Tensor, ...]:
    """fp8 A and B and scales: 1x128 x 128x128 (scale_a outer-dim-major, as torch wants), 1x128 x 1x128 with
    `per_col`, or MX e8m0 scales (M, K/32) and (N, K/32) with `mx`."""
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    if mx:
        def e8m0(rows: int) -> torch.Tensor:
            return torch.randint(120, 135, (rows, k // 32), device="cuda", dtype=torch.uint8).view(
                torch.float8_e8m0fnu)
        return a, b, e8m0(m), e8m0(n)
    kb, nb = -(-k // 128), -(-n // 128)
    sa = (torch.rand(kb, m, device="cuda") + 0.5).t()  # (M, kb), outer-dim-major
    sb = torch.rand(kb, n if per_col else nb, device="cuda") + 0.5
    return a, b, sa, sb


def _ours(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
          plan_kw: dict[str, Any] | None) -> tuple[Any, str]:
    """warploom's call and its plan's name: `scaled_mm` itself, or the planner's tile with `plan_kw` forced
    (`scale_stages`, a Plan field the planner does not take, is set on its plan)."""
    import dataclasses

    if not plan_kw:
        return (lambda: warploom.scaled_mm(a, b, sa, sb)), warploom.plan(a, b, sa, sb).plan.short()
    kw = dict(plan_kw)
    stages = kw.pop("scale_stages", None)
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, **kw)
    if stages is not None:
        plan = dataclasses.replace(plan, scale_stages=stages)
    kern = build(spec, dev, plan)
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device="cuda")
    return (lambda: kern.run(a, b, out, sa, sb)), kern.plan.short()


def _torch_fn(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> tuple[Any, str]:
    """torch's blockwise call for these tensors: the first layout of scale_b this torch accepts."""
    for name, s in (("row-major scale_b", sb), ("column-major scale_b", sb.t().contiguous().t())):
        try:
            torch._scaled_mm(a, b, sa, s, out_dtype=torch.bfloat16)
            return (lambda s=s: torch._scaled_mm(a, b, sa, s, out_dtype=torch.bfloat16)), name
        except (RuntimeError, NotImplementedError) as e:
            last = e
    raise RuntimeError(f"torch has no blockwise _scaled_mm here: {last}")


def bench(m: int, n: int, k: int, plan_kw: dict[str, Any] | None = None, per_col: bool = False) -> dict[str, Any]:
    a, b, sa, sb = _inputs(m, n, k, per_col)
    ref_a, ref_b = dequantized(a, b, sa, sb)
    ref = ref_a @ ref_b
    ours, plan = _ours(a, b, sa, sb, plan_kw)
    theirs, how = _torch_fn(a, b, sa, sb)
    e_ours, e_torch = relative_error(ours(), ref), relative_error(theirs(), ref)
    g_ours, g_torch = time_graph(ours), time_graph(theirs)
    t_ours, t_torch = time_eager(ours), time_eager(theirs)
    flops = 2 * m * n * k
    return {"shape": [m, n, k], "plan": plan, "torch_call": how, "ours_graph_ms": g_ours, "torch_graph_ms": g_torch,
            "graph_ratio": g_torch / g_ours, "ours_ms": t_ours, "torch_ms": t_torch, "ratio": t_torch / t_ours,
            "ours_tflops": flops / g_ours / 1e9, "torch_tflops": flops / g_torch / 1e9, "ours_err": e_ours,
            "torch_err": e_torch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="blockwise.json")
    ap.add_argument("--quick", action="store_true", help="4096^3 and two DeepSeek shapes only")
    ap.add_argument("--plans", action="store_true", help="also force each tile shape at 4096^3 and 8192^3")
    ap.add_argument("--ablation", action="store_true", help="scale placement and recipe ablation (docstring)")
    ap.add_argument("--splitk", action="store_true", help="split-K variants (forced) at the M <= 128 shapes")
    args = ap.parse_args()
    shapes = [SQUARE[0], (4096, 7168, 16384), (128, 7168, 2048)] if args.quick else SQUARE + DEEPSEEK
    rows = []
    for s in shapes:
        r = bench(*s)
        rows.append(r)
        print(f"{str(tuple(s)):22s} {r['plan']:34s} ours {r['ours_tflops']:7.1f} TFLOP/s  torch "
              f"{r['torch_tflops']:7.1f}  graph ratio {r['graph_ratio']:.3f}  eager {r['ratio']:.3f}  "
              f"err {r['ours_err']:.2e} / {r['torch_err']:.2e}",
              flush=True)
    gm = math.exp(sum(math.log(r["graph_ratio"]) for r in rows) / len(rows))
    low = min(r["graph_ratio"] for r in rows)
    print(f"geometric mean graph ratio over {len(rows)} shapes: {gm:.3f}; min {low:.3f}")
    forced = []
    if args.plans:
        for s in SQUARE:
            for kw in (dict(bm=128, bn=256), dict(bm=128, bn=128), dict(bm=128, bn=256, stages=4),
                       dict(bm=128, bn=128, stages=4)):
                try:
                    r = bench(*s, plan_kw=kw)
                except Exception as e:  # a forced plan that does not fit is reported, not fatal
                    print(f"{s} {kw}: {type(e).__name__}: {e}")
                    continue
                forced.append(r)
                print(f"forced {str(tuple(s)):18s} {r['plan']:34s} ours {r['ours_tflops']:7.1f}  torch "
                      f"{r['torch_tflops']:7.1f}  graph ratio {r['graph_ratio']:.3f}", flush=True)
    splitk = []
    if args.splitk:
        # Split-K at the M <= 128 shapes: for 128x128 and 64x128 tiles, the most k-ranges (dividing the k-blocks,
        # at most 8) that keep the work units within one wave of SMs.
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        for s in [x for x in DEEPSEEK if x[0] <= 128]:
            for bm, bn in ((128, 128), (64, 128)):
                if bm > 64 >= s[0]:
                    continue  # half of a 128-row tile would be padding
                tiles, kb = -(-s[0] // bm) * -(-s[1] // bn), s[2] // 128
                split = max(d for d in range(1, 9) if kb % d == 0 and tiles * d <= sms)
                if split == 1:
                    continue
                r = bench(*s, plan_kw=dict(bm=bm, bn=bn, split_k=split))
                splitk.append(r)
                print(f"split-K {str(tuple(s)):18s} {r['plan']:34s} ours {r['ours_tflops']:7.1f}  torch "
                      f"{r['torch_tflops']:7.1f}  graph ratio {r['graph_ratio']:.3f}  eager {r['ratio']:.3f}  "
                      f"err {r['ours_err']:.2e}", flush=True)
    ablation = []
    if args.ablation:
        for s in ((4096, 4096, 4096), (4096, 7168, 16384)):
            for name, kw, per_col in (("in-stage", {}, False), ("scale partition", {"scale_partition": True}, False),
                                      ("unpipelined (1-slot scale ring)", {"scale_partition": True,
                                                                           "scale_stages": 1}, False),
                                      ("1x128 x 1x128, in-stage", {}, True),
                                      ("MX (e8m0 per 32 of K, scale partition)", {"mx": True}, False)):
                r = _ablate(s, kw, per_col)
                r["variant"] = name
                ablation.append(r)
                print(f"ablation {str(tuple(s)):18s} {name:34s} {r['plan']:36s} ours {r['ours_tflops']:7.1f} "
                      f"TFLOP/s  (torch 1x128x128x128 {r['torch_tflops']:7.1f})", flush=True)
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows, "geomean_graph_ratio": gm,
                   "forced": forced, "ablation": ablation, "splitk": splitk}, f, indent=1)


def _ablate(shape: tuple[int, int, int], kw: dict[str, Any], per_col: bool) -> dict[str, Any]:
    """One ablation variant: `kw` forced on the planner's tile (`mx`: MX scales instead), timed beside torch's
    blockwise kernel on 1x128 x 128x128 tensors of the same shape, for scale."""
    m, n, k = shape
    kw = dict(kw)
    mx = kw.pop("mx", False)
    a, b, sa, sb = _inputs(m, n, k, per_col, mx)
    ours, plan = _ours(a, b, sa, sb, kw)
    ref_a, ref_b = dequantized(a, b, sa, sb)
    err = relative_error(ours(), ref_a @ ref_b)
    t = time_graph(ours)
    theirs, _ = _torch_fn(*_inputs(m, n, k))
    t_torch = time_graph(theirs)
    flops = 2 * m * n * k
    return {"shape": list(shape), "plan": plan, "ours_err": err, "ours_graph_ms": t, "ours_tflops": flops / t / 1e9,
            "torch_tflops": flops / t_torch / 1e9}


if __name__ == "__main__":
    main()
