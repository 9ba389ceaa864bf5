"""Grouped GEMM plans side by side on the GPU (issue 27's bf16 target): the planner's grouped plan against forced
variants of it (Plan fields replaced after planning, as scripts/sweep_plans.py does), torch._grouped_mm, a loop of
torch.mm over the experts and warploom's dense kernel on the same total rows (what a grouped kernel could reach).
Each output is checked against torch._grouped_mm's before it is timed; times are CUDA-graph replays.
`--forced` passes plan_schedule options to every variant's planning (e.g. '{"stream_k": 2}', refused by name where
they cannot run); the default variants include forced stream-K's Plan fields, {"stream_k": 2} and {"stream_k": 4}
(the last round's tiles shared as k-block pieces; the same plan plan_schedule(stream_k=...) gives,
tests/sim/test_grouped_stream_k_sim.py).

    PYTHONPATH=. python3 scripts/sweep_grouped.py --out sweep-grouped.json \
        [--shapes 8x8192x4096x7168] [--variants '[{}, {"stages": 5}]'] [--forced '{"stream_k": 2}']
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import torch
from bench_grouped import masked_bytes, masked_counts, routing  # (scripts/ is on the path)

import warploom
from warploom.checks_grouped import grouped_call
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import relative_error
from warploom.runtime.launch_grouped import GroupedLauncher
from warploom.runtime.timing import time_graph

SHAPES = "8x8192x4096x7168,8x8192x7168x2048,32x16384x2048x7168"
VARIANTS = ('[{}, {"stages": 3}, {"bn": 128, "stages": 6}, {"group_m": 1}, {"group_m": 16}, {"epilogue_subtiles": 4}, '
            '{"bn": 128, "consumer_partitions": 2}, {"stream_k": 2}, {"stream_k": 4}]')


def checked_ms(spec: Any, dev: DeviceInfo, plan: Any, args: tuple[torch.Tensor, ...], shape: tuple[int, int],
               compared: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """`plan`'s grouped kernel run once on `args` (a, b, bounds) into a NaN-poisoned bf16 output of `shape`, its error
    (`compared(out)` gives what to judge against torch's) checked, then timed: (ms, error); AssertionError where the
    error is not below 1e-2."""
    kern = build(spec, dev, plan)
    launch = GroupedLauncher(kern.module, kern.gluon)
    out = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(*args, out)
    err = relative_error(*compared(out))
    if not err < 1e-2:
        raise AssertionError(f"error {err:.3e} against torch._grouped_mm")
    return time_graph(functools.partial(launch, *args, out)), err


def sweep_shape(text: str, variants: list[dict[str, Any]], dev: DeviceInfo, align: int = 1,
                forced: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One EXPERTSxROWSxNxK shape: the baselines, then each variant (Plan fields replaced after planning with
    `forced`, plan_schedule's options) checked and timed."""
    e, rows, n, k = (int(x) for x in text.split("x"))
    torch.manual_seed(0)
    offs = routing(e, rows, align=align)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
    b = w.transpose(1, 2)
    want = torch._grouped_mm(a, b, offs=offs)
    flops = 2 * rows * n * k
    torch_ms = time_graph(lambda: torch._grouped_mm(a, b, offs=offs))
    ends = [0, *offs.tolist()]

    def loop() -> None:
        for g in range(e):
            if ends[g + 1] > ends[g]:
                torch.mm(a[ends[g]:ends[g + 1]], b[g])

    loop_ms = time_graph(loop)
    bd = w[1].t()  # (one expert's weight as a K-major (K, N) operand of the dense GEMM)
    dense_ms = time_graph(lambda: warploom.matmul(a, bd))
    counts = ", ".join(str(hi - lo) for lo, hi in zip(ends[:-1], ends[1:], strict=True))
    print(f"{text} (counts {counts}): torch._grouped_mm {torch_ms:.3f} ms ({flops / torch_ms / 1e9:.0f} TFLOP/s), "
          "loop of torch.mm "
          f"{loop_ms:.3f}, warploom dense {rows}x{n}x{k} {dense_ms:.3f}", flush=True)
    call = grouped_call(a, b, offs, None, None)
    found = []
    for kw in variants:
        try:
            plan = dataclasses.replace(plan_schedule(call.spec, dev, **(forced or {})), **kw)
            ms, err = checked_ms(call.spec, dev, plan, (a, b, call.bounds), (rows, n), lambda out: (out, want))
        except Exception as ex:  # noqa: BLE001 (a variant that does not build or run is reported, not fatal)
            print(f"  {json.dumps(kw):40} failed: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
            continue
        found.append({"shape": text, "align": align, "variant": kw, "forced": forced or {}, "plan": plan.short(),
                      "ms": ms, "torch_ms": torch_ms, "loop_ms": loop_ms, "dense_ms": dense_ms, "err": err})
        print(f"  {json.dumps(kw):40} {plan.short():32} {ms:.3f} ms {flops / ms / 1e9:5.0f} TFLOP/s "
              f"x torch {torch_ms / ms:.3f}, x loop {loop_ms / ms:.3f}, x dense {dense_ms / ms:.3f}", flush=True)
    return found


def sweep_masked(text: str, variants: list[dict[str, Any]], dev: DeviceInfo,
                 forced: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One EXPERTSxROWSxNxK shape in the masked decode layout (capacity ROWS / EXPERTS rows an expert, bench_grouped's
    counts: random in 1..capacity, expert 0 empty), bf16: each variant's bandwidth (`bench_grouped.masked_bytes`
    over its time) against a device-to-device copy's in the same run, and its time against torch's batched
    torch._grouped_mm over every row. A decode launch's tiles quantize on the SMs (7 experts x 4096 columns are 224
    tiles of 128 for 132 SMs), which stream-K's pieces can even out. Here each variant is plan_schedule's options
    (not Plan fields: stream-K is refused on 64-row tiles, so it goes as `{"stream_k": 2, "bm": 128}`)."""
    e, rows, n, k = (int(x) for x in text.split("x"))
    cap = rows // e
    counts = masked_counts(e, cap).cuda()
    torch.manual_seed(0)
    a3 = torch.randn(e, cap, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
    b = w.transpose(1, 2)
    want = torch._grouped_mm(a3, b)
    valid = torch.arange(cap, device="cuda")[None, :] < counts[:, None]
    torch_ms = time_graph(lambda: torch._grouped_mm(a3, b))
    src = torch.empty(w.numel() * w.element_size(), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() / time_graph(lambda: dst.copy_(src)) / 1e6
    moved = masked_bytes(counts.cpu(), n, k, 2, 2)
    print(f"{text} masked (capacity {cap}, counts {counts.tolist()}): torch batched {torch_ms:.3f} ms, a copy "
          f"{copy_gbs:.0f} GB/s", flush=True)
    call = grouped_call(a3, b, None, counts, None)
    found = []
    for kw in variants:
        try:
            plan = plan_schedule(call.spec, dev, **{**(forced or {}), **kw})
            ms, err = checked_ms(call.spec, dev, plan, (call.a, call.b, call.bounds), (e * cap, n),
                                 lambda out: (out.view(e, cap, n)[valid], want[valid]))
        except Exception as ex:  # noqa: BLE001 (a variant that does not build or run is reported, not fatal)
            print(f"  {json.dumps(kw):40} failed: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
            continue
        gbs = moved / ms / 1e6
        found.append({"shape": text, "masked": cap, "variant": kw, "forced": forced or {}, "plan": plan.short(),
                      "ms": ms, "torch_ms": torch_ms, "gbs": gbs, "copy_gbs": copy_gbs, "err": err})
        print(f"  {json.dumps(kw):40} {plan.short():32} {ms:.3f} ms {gbs:5.0f} GB/s, {gbs / copy_gbs:.2f} of a "
              f"copy's, x torch {torch_ms / ms:.3f}", flush=True)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sweep-grouped.json")
    ap.add_argument("--shapes", default=SHAPES, help="EXPERTSxROWSxNxK, comma-separated")
    ap.add_argument("--variants", default=VARIANTS, help="JSON list of Plan fields to replace after planning")
    ap.add_argument("--align", default="1", help="comma-separated row alignments of the routing to run each shape at")
    ap.add_argument("--forced", default="{}", help="JSON object of plan_schedule options for every variant's plan")
    ap.add_argument("--masked", action="store_true",
                    help="the masked decode layout instead (ROWS / EXPERTS rows of capacity an expert; --align unused; "
                         "--variants are then plan_schedule options)")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    rows: list[dict[str, Any]] = []
    for text in args.shapes.split(","):
        if args.masked:
            rows += sweep_masked(text, json.loads(args.variants), dev, json.loads(args.forced))
        for align in () if args.masked else (int(x) for x in args.align.split(",")):
            rows += sweep_shape(text, json.loads(args.variants), dev, align, json.loads(args.forced))
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
