"""Grouped GEMM plans side by side on the GPU (issue 27's targets): the planner's grouped plan against forced
variants of it (Plan fields replaced after planning, as scripts/sweep_plans.py does), torch's grouped op and
warploom's dense kernel on the same total rows (what a grouped kernel could reach), per `--case`:

- bf16: against torch._grouped_mm, a loop of torch.mm over the experts and warploom.matmul;
- fp8, fp8-fast: e4m3 A and B with rowwise fp32 scales (per row of A, per expert per column of B), bf16 out,
  promoted accumulation or (fp8-fast) the tensor core's, planned as warploom.scaled_grouped_mm plans them, against
  torch._scaled_grouped_mm with the same use_fast_accum and warploom.scaled_mm (rowwise) on the same rows.

Operands and torch's op come from scripts/bench_grouped.py (`operands`, `torch_grouped`), the same as its kinds'.
Each output is checked against torch's before it is timed (`reference.relative_error` below 1e-2); times are
CUDA-graph replays. Rows of the JSON carry their case; a variant that the planner refuses, or that does not build,
run or match torch, is a row with its "error", and the sweep goes on.
`--forced` passes plan_schedule options to every variant's planning (e.g. '{"stream_k": 2}', refused by name where
they cannot run); the default bf16 variants include forced stream-K's Plan fields, {"stream_k": 2} and
{"stream_k": 4} (the last round's tiles shared as k-block pieces; the same plan plan_schedule(stream_k=...) gives,
tests/sim/test_grouped_stream_k_sim.py). fp8's do not: the planner keeps fp8 stream-K tiles 128 wide (its 128x256
one spilled: plan_grouped in warploom/planning/sm90/grouped.py), which a Plan field replaced on the 128x256 plan
would not, so fp8 stream-K goes as `--forced '{"stream_k": 2}'` (with `--variants '[{}, {"stream_k": 4}]'` for 4
pieces on the same tile). A forced option or variant the planner refuses is such an error row.
`--masked`: the masked decode layout instead (any case; its variants are plan_schedule options), each variant's
bandwidth against a device copy's and its time against torch's batched op (`sweep_masked`).

    PYTHONPATH=. python3 scripts/sweep_grouped.py --out sweep-grouped.json [--case bf16,fp8,fp8-fast] \
        [--shapes 8x8192x4096x7168] [--variants '[{}, {"stages": 5}]'] [--forced '{"stream_k": 2}'] [--masked]
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch
from bench_grouped import (  # (scripts/ is on the path)
    masked_bytes,
    masked_counts,
    operands,
    routing,
    torch_grouped,
    torch_loop,
)

import warploom
from warploom.checks_grouped import grouped_call
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import Plan, plan_schedule
from warploom.reference import relative_error
from warploom.runtime.launch_grouped import GroupedLauncher
from warploom.runtime.timing import time_graph
from warploom.spec import GemmSpec

SHAPES = "8x8192x4096x7168,8x8192x7168x2048,32x16384x2048x7168"
VARIANTS = ('[{}, {"stages": 3}, {"bn": 128, "stages": 6}, {"group_m": 1}, {"group_m": 16}, {"epilogue_subtiles": 4}, '
            '{"bn": 128, "consumer_partitions": 2}, {"stream_k": 2}, {"stream_k": 4}]')
# (fp8: no stream-K Plan fields, module docstring; its SK plans come from --forced)
FP8_VARIANTS = ('[{}, {"stages": 3}, {"stages": 4}, {"bn": 128, "stages": 6}, {"group_m": 1}, {"group_m": 16}, '
                '{"epilogue_subtiles": 4}, {"bn": 128, "consumer_partitions": 2}]')


class Case(enum.Enum):
    """What the sweep multiplies: bf16, or e4m3 with rowwise fp32 scales, promoted (FP8) or fast (FP8_FAST)
    accumulation."""

    BF16 = "bf16"
    FP8 = "fp8"
    FP8_FAST = "fp8-fast"

    @property
    def fp8(self) -> bool:
        return self is not Case.BF16

    @property
    def fast(self) -> bool:
        """torch's use_fast_accum (False for bf16, where it means nothing)."""
        return self is Case.FP8_FAST


def cases(text: str) -> list[Case]:
    """`--case`'s comma list, e.g. "bf16,fp8-fast"; an unknown name is an argparse error naming the known ones."""
    try:
        return [Case(name.strip()) for name in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of {', '.join(c.value for c in Case)}, got "
                                         f"{text!r}") from None


def checked_ms(spec: GemmSpec, dev: DeviceInfo, plan: Plan, args: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
               shape: tuple[int, int], compared: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
               scales: tuple[torch.Tensor, ...] = ()) -> tuple[float, float]:
    """`plan`'s grouped kernel run once on `args` (a, b, bounds) and `scales` (fp8's rowwise scale_a flattened and
    scale_b (G, N), as scaled_grouped_mm passes them) into a NaN-poisoned bf16 output of `shape`, its error
    (`compared(out)` gives what to judge against torch's) checked, then timed: (ms, error); AssertionError where the
    error is not below 1e-2."""
    kern = build(spec, dev, plan)
    launch = GroupedLauncher(kern.module, kern.gluon)
    out = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    a, b, bounds = args
    launch(a, b, bounds, out, *scales)
    err = relative_error(*compared(out))
    if not err < 1e-2:
        raise AssertionError(f"error {err:.3e} against torch's")
    return time_graph(functools.partial(launch, a, b, bounds, out, *scales)), err


def measured(spec: GemmSpec, dev: DeviceInfo, kw: dict[str, Any], forced: dict[str, Any], fields: bool,
             measure: Callable[[Plan], tuple[float, float]]) -> dict[str, Any]:
    """One variant: planned with `forced` (plan_schedule's options) and then `kw` as Plan fields replaced
    (`fields`) or as more options, and `measure`d (`checked_ms`): {"variant", "forced", "plan", "ms", "err"}; or
    {"variant", "forced", "error"} (with "plan" where planning got that far) where the planner refuses it or it
    does not build, run or match torch, printed, so that the sweep goes on."""
    row: dict[str, Any] = {"variant": kw, "forced": forced}
    try:
        plan = (dataclasses.replace(plan_schedule(spec, dev, **forced), **kw) if fields else
                plan_schedule(spec, dev, **{**forced, **kw}))
        row["plan"] = plan.short()
        row["ms"], row["err"] = measure(plan)
    except Exception as ex:  # noqa: BLE001 (a variant that does not plan, build or run is reported, not fatal)
        row["error"] = f"{type(ex).__name__}: {ex}"
        print(f"  {json.dumps(kw):40} failed: {row['error'][:200]}", flush=True)
    return row


def launch_scales(sa: torch.Tensor | None, sb: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """The scales the grouped launcher takes after its output, as scaled_grouped_mm passes them: rowwise scale_a
    flattened over A's rows ((M,), a masked A's (G, M_max) too) and scale_b (G, N); none for bf16."""
    return () if sa is None or sb is None else (sa.reshape(-1), sb)


def dense_call(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor | None, sb: torch.Tensor | None,
               case: Case) -> Callable[[], Any]:
    """warploom's dense kernel on A's rows and expert 1's weight (a K-major (K, N) B): what a grouped kernel could
    reach; fp8 as warploom.scaled_mm with rowwise scales ((M, 1) and expert 1's (1, N))."""
    bd = w[1].t()
    if sa is None or sb is None:
        return lambda: warploom.matmul(a, bd)
    return lambda: warploom.scaled_mm(a, bd, sa[:, None], sb[1][None, :], use_fast_accum=case.fast)


def dense_reference(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor | None,
                    sb: torch.Tensor | None) -> torch.Tensor:
    """What `dense_call` computes, in fp32: A's rows times expert 1's weight (fp8: dequantized rowwise)."""
    out = a.float() @ w[1].float().t()
    return out if sa is None or sb is None else out * sa[:, None] * sb[1]


def checked_baseline(base: dict[str, Any], key: str, call: Callable[[], torch.Tensor], want: torch.Tensor) -> None:
    """A baseline beside torch's op (the bf16 loop, the dense kernel) checked as the variants are (relative error
    below 1e-2 against `want`) and then timed: `key`_ms and `key`_err in `base`, or `key`_error where it does not
    run or match (not timed; the variants still are)."""
    try:
        err = relative_error(call()[:want.shape[0]], want)
        if not err < 1e-2:
            raise AssertionError(f"error {err:.3e} against its reference; not timed")
        base[f"{key}_ms"], base[f"{key}_err"] = time_graph(call), err
    except Exception as ex:  # noqa: BLE001 (a baseline that fails is reported beside the variants)
        base[f"{key}_error"] = f"{type(ex).__name__}: {ex}"


def sweep_shape(text: str, case: Case, variants: list[dict[str, Any]], dev: DeviceInfo, align: int = 1,
                forced: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One EXPERTSxROWSxNxK shape in `case`: the baselines (torch's grouped op, the dense kernel on the same rows;
    bf16 also a loop of torch.mm), then each variant (Plan fields replaced after planning with `forced`,
    plan_schedule's options) checked and timed."""
    e, rows, n, k = (int(x) for x in text.split("x"))
    torch.manual_seed(0)
    offs = routing(e, rows, align=align)
    a, w, sa, sb = operands(case.fp8, (rows,), e, n, k)
    b = w.transpose(1, 2)
    theirs = torch_grouped(a, b, sa, sb, offs, case.fast)
    want = theirs()
    flops = 2 * rows * n * k
    base: dict[str, Any] = {"shape": text, "case": case.value, "align": align, "torch_ms": time_graph(theirs)}
    ends = [0, *offs.tolist()]
    if not case.fp8:
        checked_baseline(base, "loop", torch_loop(a, w, offs), want)
    checked_baseline(base, "dense", dense_call(a, w, sa, sb, case), dense_reference(a, w, sa, sb))
    counts = ", ".join(str(hi - lo) for lo, hi in zip(ends[:-1], ends[1:], strict=True))
    torch_ms = base["torch_ms"]
    looped = "".join(f", {what} {base[key + '_ms']:.3f}" if key + "_ms" in base else
                     f", {what}: {base.get(key + '_error', '')[:120]}" for key, what in
                     (("loop", "loop of torch.mm"), ("dense", f"warploom dense {rows}x{n}x{k}"))
                     if key == "dense" or case is Case.BF16)
    print(f"{text} {case.value} (counts {counts}): torch {torch_ms:.3f} ms ({flops / torch_ms / 1e9:.0f} TFLOP/s)"
          f"{looped}", flush=True)
    call = grouped_call(a, b, offs, None, torch.bfloat16, sa, sb, case.fast)  # (scaled_grouped_mm's)
    scales = launch_scales(sa, sb)
    found = []
    for kw in variants:
        row = base | measured(call.spec, dev, kw, forced or {}, True, lambda plan: checked_ms(
            call.spec, dev, plan, (a, b, call.bounds), (rows, n), lambda out: (out, want), scales))
        found.append(row)
        if "error" not in row:
            ms = row["ms"]
            vs = "".join(f", x {key[:-3]} {row[key] / ms:.3f}" for key in ("torch_ms", "loop_ms", "dense_ms")
                         if key in row)
            print(f"  {json.dumps(kw):40} {row['plan']:32} {ms:.3f} ms {flops / ms / 1e9:5.0f} TFLOP/s{vs}",
                  flush=True)
    return found


def sweep_masked(text: str, case: Case, variants: list[dict[str, Any]], dev: DeviceInfo,
                 forced: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One EXPERTSxROWSxNxK shape in the masked decode layout (capacity ROWS / EXPERTS rows an expert, bench_grouped's
    counts: random in 1..capacity, expert 0 empty), in `case`: each variant's bandwidth (`bench_grouped.masked_bytes`
    over its time, fp8's operands a byte an element) against a device-to-device copy's of as many bytes as the
    weights in the same run, and its time against torch's batched torch._grouped_mm / _scaled_grouped_mm over every
    row (bench_grouped's masked and masked-fp8 kinds). A decode launch's tiles quantize on the SMs (7 experts x 4096
    columns are 224 tiles of 128 for 132 SMs); stream-K's pieces even them out (`{"stream_k": 2}` on rule 22's 64-row
    tile, `{"stream_k": 2, "bm": 128}` on 128-row ones) but ran slower (session 42: HBM, not the rounds, binds). Here
    each variant is plan_schedule's options (not Plan fields)."""
    e, rows, n, k = (int(x) for x in text.split("x"))
    cap = rows // e
    counts = masked_counts(e, cap).cuda()
    torch.manual_seed(0)
    a3, w, sa, sb = operands(case.fp8, (e, cap), e, n, k)
    b = w.transpose(1, 2)
    theirs = torch_grouped(a3, b, sa, sb, fast=case.fast)
    want = theirs()
    valid = torch.arange(cap, device="cuda")[None, :] < counts[:, None]
    torch_ms = time_graph(theirs)
    src = torch.empty(w.numel() * w.element_size(), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() / time_graph(lambda: dst.copy_(src)) / 1e6
    moved = masked_bytes(counts.cpu(), n, k, a3.element_size(), w.element_size())
    print(f"{text} {case.value} masked (capacity {cap}, counts {counts.tolist()}): torch batched {torch_ms:.3f} ms, "
          f"a copy {copy_gbs:.0f} GB/s", flush=True)
    call = grouped_call(a3, b, None, counts, torch.bfloat16, sa, sb, case.fast)
    scales = launch_scales(sa, sb)
    base = {"shape": text, "case": case.value, "masked": cap, "torch_ms": torch_ms, "copy_gbs": copy_gbs}
    found = []
    for kw in variants:
        row = base | measured(call.spec, dev, kw, forced or {}, False, lambda plan: checked_ms(
            call.spec, dev, plan, (call.a, call.b, call.bounds), (e * cap, n),
            lambda out: (out.view(e, cap, n)[valid], want[valid]), scales))
        found.append(row)
        if "error" not in row:
            ms = row["ms"]
            row["gbs"] = gbs = moved / ms / 1e6
            row["of_copy"] = gbs / copy_gbs
            print(f"  {json.dumps(kw):40} {row['plan']:32} {ms:.3f} ms {gbs:5.0f} GB/s, {gbs / copy_gbs:.2f} of a "
                  f"copy's, x torch {torch_ms / ms:.3f}", flush=True)
    return found


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sweep-grouped.json")
    ap.add_argument("--shapes", default=SHAPES, help="EXPERTSxROWSxNxK, comma-separated")
    ap.add_argument("--case", type=cases, default=[Case.BF16],
                    help="comma list of bf16, fp8 (rowwise scales, promoted accumulation) and fp8-fast (fast "
                         "accumulation)")
    ap.add_argument("--variants", default=None,
                    help="JSON list of Plan fields to replace after planning (default: the bf16 list, or for fp8 one "
                         "without stream-K)")
    ap.add_argument("--align", default="1", help="comma-separated row alignments of the routing to run each shape at")
    ap.add_argument("--forced", default="{}", help="JSON object of plan_schedule options for every variant's plan")
    ap.add_argument("--masked", action="store_true",
                    help="the masked decode layout instead (ROWS / EXPERTS rows of capacity an expert; --align unused; "
                         "--variants are then plan_schedule options)")
    return ap.parse_args(argv)


def variants_of(args: argparse.Namespace, case: Case) -> list[dict[str, Any]]:
    """--variants, or the case's default list."""
    return json.loads(args.variants or (FP8_VARIANTS if case.fp8 else VARIANTS))


def main() -> None:
    args = parse_args()
    dev = DeviceInfo.current()
    forced = json.loads(args.forced)
    rows: list[dict[str, Any]] = []
    for text in args.shapes.split(","):
        for case in args.case:
            for align in [None] if args.masked else [int(x) for x in args.align.split(",")]:
                try:
                    rows += (sweep_masked(text, case, variants_of(args, case), dev, forced) if align is None else
                             sweep_shape(text, case, variants_of(args, case), dev, align, forced))
                except Exception as ex:  # noqa: BLE001 (a baseline that fails leaves the other shapes and cases)
                    where = {"align": align} if align is not None else {"masked": True}
                    rows.append({"shape": text, "case": case.value, **where, "error": f"{type(ex).__name__}: {ex}"})
                    print(f"{text} {case.value} failed: {rows[-1]['error'][:300]}", flush=True)
            with open(args.out, "w") as f:  # (after every case: a timeout keeps what ran)
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
