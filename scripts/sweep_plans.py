"""Time hand-picked plan variants against the planner's choice and torch, in one process (GPU only).

    python3 scripts/sweep_plans.py --out sweep.json [--sizes 4096,8192] [--cases bf16,fp8,fp8-exact]
    python3 scripts/sweep_plans.py --variants tail --sizes 4096x2112x7168 --cases bf16,fp8,fp8-exact,blockwise
    python3 scripts/sweep_plans.py --variants partitions --cases bf16,fp8,fp8-exact,fp8-bias,blockwise
    python3 scripts/sweep_plans.py --variants clusters --sizes 4634x4968x3672 --cases bf16,fp8,bf16-gelu,fp8-gelu
    python3 scripts/sweep_plans.py --specs shapes.txt --rounds 3   # lines 'bf16|1895x136x3704|[{}, {"bm": 64}]'

Each variant's output is checked against an fp32 reference before it is timed; times are CUDA-graph
replays of 10 launches (kernel time without host overhead), ratios against torch in the same run,
interleaved over several rounds (median ratio reported, with its range). This is
how the planner's defaults are chosen (docs/benchmarks.md records the runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
from typing import Any

import torch

from warploom import checks
from warploom.bench import environment
from warploom.device import DeviceInfo
from warploom.errors import KernelHangError, WarploomError
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.runtime.timing import finish_within, time_interleaved  # (CUDA-graph replays of 10 calls)

# (label, plan_schedule keyword overrides)
_PP = {"pingpong": True}
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "bf16": [{"consumer_partitions": 2}, {**_PP, "bm": 128, "bn": 128}, {**_PP, "bm": 64, "bn": 256},
             {**_PP, "bm": 128, "bn": 128, "group_m": 16}],
    "fp8": [{"consumer_partitions": 2}, {**_PP, "bm": 128, "bn": 128}, {**_PP, "bm": 64, "bn": 256},
            {**_PP, "bm": 128, "bn": 128, "group_m": 16}],
    "fp8-exact": [{}, {**_PP, "bm": 128, "bn": 128}, {**_PP, "bm": 64, "bn": 256},
                  {**_PP, "bm": 128, "bn": 128, "stages": 4}],
    # rowwise + bf16 bias, fast accumulation: the per-block 256-wide epilogue (rule 10, the default since
    # 2026-11-23) against the 128x128 tile the planner took before, and ping-pong 128x128.
    "fp8-bias": [{}, {"bn": 128}, {**_PP, "bm": 128, "bn": 128}],
}
# --variants tail: a split-K tail (rule 15) at 128x128 and 128x256 against none, and the planner's choice.
_TAIL = [{}, {"tail_split": 1, "bn": 128}, {"tail_split": 1, "bn": 256}, {"bn": 128, "tail_split": 8},
         {"bn": 128, "tail_split": 4}, {"bn": 256, "tail_split": 4}, {"bn": 256, "tail_split": 2}]
TAIL_VARIANTS: dict[str, list[dict[str, Any]]] = {c: _TAIL for c in ("bf16", "fp8", "fp8-exact", "blockwise")}
# --variants partitions: the planner's two consumer partitions against one 8-warp partition. Two partitions unroll
# their epilogue code twice; the fused epilogue's 8 blocks thrashed the instruction cache that way (session 15).
_PARTS = [{}, {"consumer_partitions": 1}]
PARTITION_VARIANTS: dict[str, list[dict[str, Any]]] = {
    c: _PARTS for c in ("bf16", "fp8", "fp8-exact", "fp8-bias", "blockwise")}
# --variants clusters: rule 24's forms side by side (the planner's choice, one CTA per tile, 2x1 sharing B, 1x2
# sharing A; and, native accumulation, ping-pong in one CTA and in 2x1 clusters, issue 24); promoted fp8, blockwise
# and fused epilogues run 2x1 cooperative only (1x2 refuses their column blocks, ping-pong clusters native ones).
_CLUSTERS = [{}, {"cluster": 1}, {"cluster": 2}, {"cluster": "1x2"}, {"pingpong": True},
             {"pingpong": True, "cluster": 2}]
_CLUSTERS_2X1 = [{}, {"cluster": 1}, {"cluster": 2}]
CLUSTER_VARIANTS: dict[str, list[dict[str, Any]]] = {
    "bf16": _CLUSTERS, "fp8": _CLUSTERS, "fp8-exact": _CLUSTERS_2X1, "blockwise": _CLUSTERS_2X1,
    "bf16-gelu": _CLUSTERS_2X1, "fp8-gelu": _CLUSTERS_2X1}
# Every case `case` builds.
CASES = ("bf16", "fp8", "fp8-exact", "fp8-bias", "blockwise", "bf16-gelu", "fp8-gelu")


def err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


def case(name: str, size: tuple[int, int, int]) -> tuple[Any, tuple[Any, ...], Any, Any]:
    """(spec, (a, b, scale_a, scale_b, bias, graph operands or None), the fp32 reference, torch's call)."""
    m, n, k = size
    if name.endswith("-gelu"):
        return _fused_case(name, size)
    spec, ins, ref, theirs = _plain_case(name, size)
    return spec, (*ins, None), ref, theirs


def _fused_case(name: str, size: tuple[int, int, int]) -> tuple[Any, tuple[Any, ...], Any, Any]:
    """A fused epilogue (rule 9's wide blocks): bf16 (+ bias, GELU, + residual), or fp8 rowwise fast with scaled_mm's
    bias, then GELU and a residual; torch runs the GEMM, then the epilogue's ops eagerly."""
    import torch.nn.functional as F

    import warploom

    m, n, k = size
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    if name == "bf16-gelu":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()

        def fn(acc: Any, bias: Any, residual: Any) -> Any:
            return F.gelu(acc + bias) + residual

        ops = {"bias": bias, "residual": res}
        spec = warploom.plan(a, b, epilogue=fn, **ops).spec
        return spec, (a, b, None, None, None, ops), fn(a.float() @ b.float(), bias.float(), res.float()), \
            lambda: fn(torch.matmul(a, b), bias, res)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5

    def gelu_res(acc: Any, residual: Any) -> Any:
        return F.gelu(acc) + residual

    spec = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=gelu_res, residual=res).spec
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": res}
    ref = gelu_res((a.float() @ b.float()) * sa * sb + bias.float(), res.float())
    return spec, (a, b, None, None, None, ops), ref, lambda: gelu_res(torch._scaled_mm(
        a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True), res)


def _plain_case(name: str, size: tuple[int, int, int]) -> tuple[Any, tuple[Any, ...], Any, Any]:
    m, n, k = size
    if name == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        return checks.matmul_spec(a, b, None), (a, b, None, None, None), a.float() @ b.float(), \
            lambda: torch.matmul(a, b)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    if name == "blockwise":  # 1x128 x 128x128, scale_a outer-dim-major as torch wants
        from warploom.reference import dequantized

        kb = -(-k // 128)
        sa = (torch.rand(kb, m, device="cuda") + 0.5).t()
        sb = torch.rand(kb, -(-n // 128), device="cuda") + 0.5
        from bench_blockwise import _torch_fn  # (scripts/ is on the path: torch's call, as bench_blockwise makes it)

        da, db = dequantized(a, b, sa, sb)
        return checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False), (a, b, sa, sb, None), da @ db, \
            _torch_fn(a, b, sa, sb)[0]
    fast = name in ("fp8", "fp8-bias")
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if name == "fp8-bias" else None
    spec = checks.scaled_mm_spec(a, b, sa, sb, bias, torch.bfloat16, fast)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    return spec, (a, b, sa, sb, bias), ref, \
        lambda: torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=fast)


def read_specs(path: str) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """`--specs`' jobs: (case, size, variants) from each 'case|MxNxK|[...]' line of `path`."""
    jobs = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = line.strip().split("|")
            if len(parts) != 3 or parts[0] not in CASES:
                raise ValueError(f"line {number}: expected 'case|MxNxK|[variants]' with a case of {', '.join(CASES)}, "
                                 f"got {line.strip()!r}")
            variants = json.loads(parts[2])
            if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
                raise ValueError(f"line {number}: expected a JSON list of plan_schedule arguments, got {parts[2]!r}")
            jobs.append((parts[0], parts[1], variants))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="sweep.json")
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--cases", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (clocks drift within a run)")
    ap.add_argument("--variants", default="schedules",
                    help="schedules, tail or partitions (the tables above), or forced plan_schedule arguments as "
                         "JSON for every case, e.g. '[{}, {\"stages\": 8}]'; a variant's \"plan\" entry replaces "
                         "Plan fields after planning (beyond what the planner accepts, e.g. "
                         "'{\"plan\": {\"stages\": 4, \"epilogue_subtiles\": 4}}')")
    ap.add_argument("--specs", help="a file of 'case|MxNxK|[variants as JSON]' lines, each shape with variants of its "
                                    "own (blank lines and # comments skipped), in place of --cases, --sizes and "
                                    "--variants")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    if args.variants.startswith("["):
        variants: dict[str, list[dict[str, Any]]] = {c: json.loads(args.variants) for c in args.cases.split(",")}
    elif args.variants in ("schedules", "tail", "partitions", "clusters"):
        variants = {"tail": TAIL_VARIANTS, "partitions": PARTITION_VARIANTS,
                    "clusters": CLUSTER_VARIANTS}.get(args.variants, VARIANTS)
    else:
        ap.error(f"--variants {args.variants!r}: expected schedules, tail, partitions, clusters or a JSON list")
    jobs = [(name, text, variants[name]) for name in args.cases.split(",") for text in args.sizes.split(",")]
    if args.specs:
        try:
            jobs = read_specs(args.specs)
        except ValueError as e:
            ap.error(f"--specs {args.specs}: {e}")
    rows = []
    for name, text, kws in jobs:
        size = tuple(int(x) for x in text.split("x")) if "x" in text else (int(text),) * 3
        m, n, k = size
        s = text
        try:
            spec, ins, ref, theirs = case(name, (m, n, k))
        except WarploomError as e:  # e.g. fp8 at an N that is not a multiple of 16, which torch refuses too
            print(f"{name:6} {s:>20} skipped: {e}")
            continue
        a, b, sa, sb, bias, ops = ins
        graph = {"operands": ops} if ops else {}  # (a fused epilogue's operands, scaled_mm's among them)
        torch_err = err(theirs(), ref)
        runs: list[tuple[dict[str, Any], Any, Any]] = []
        for kw in kws:
            try:
                forced = {key: v for key, v in kw.items() if key != "plan"}
                planned = dataclasses.replace(plan_schedule(spec, dev, **forced), **kw.get("plan", {}))
                kern = build(spec, dev, planned)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=spec.out_dtype.torch)
                kern.run(a, b, out, sa, sb, bias, **graph)
                finish_within(f"{name} {s} {kern.plan.short()}")
                e = err(out, ref)
                if not e < 1e-3:
                    raise AssertionError(f"error {e:.3e} against the fp32 reference")
                runs.append((kw, kern, out))
                rows.append({"case": name, "size": s, "variant": kw, "plan": kern.plan.short(), "err": e,
                             "torch_err": torch_err, "ratios": []})
            except KernelHangError as ex:  # the GPU stays busy: report what hung and stop
                rows.append({"case": name, "size": s, "variant": kw, "error": str(ex)})
                _write(args.out, rows)
                print(ex, flush=True)
                os._exit(3)
            except Exception as ex:  # a variant that fails to compile, run or verify is reported, not fatal
                rows.append({"case": name, "size": s, "variant": kw, "error": f"{type(ex).__name__}: {ex}"[:400]})
        mine = [r for r in rows if r["case"] == name and r["size"] == s and "ratios" in r]
        # Interleaved: each round times torch, then every variant, so drift hits all alike; ratios round by round.
        calls = {"torch": theirs, **{str(i): functools.partial(kern.run, a, b, out, sa, sb, bias, **graph)
                                     for i, (_, kern, out) in enumerate(runs)}}
        times = time_interleaved(calls, args.rounds)
        for i, (_, row) in enumerate(zip(runs, mine, strict=True)):  # (a row per variant that ran, in order)
            row["ms"], row["torch_ms"] = times[str(i)], times["torch"]
            row["ratios"] = [t_torch / t for t_torch, t in zip(times["torch"], times[str(i)], strict=True)]
        for row in mine:
            row["ratio"] = statistics.median(row["ratios"])
            row["tflops"] = 2 * m * n * k / statistics.median(row["ms"]) / 1e9
            print(f"{name:10s} {s:>14s} {row['plan']:38s} ratio {row['ratio']:.3f} "
                  f"[{min(row['ratios']):.3f}-{max(row['ratios']):.3f}] {row['tflops']:.0f} TFLOP/s "
                  f"err {row['err']:.2e} (torch {torch_err:.2e})", flush=True)
        _write(args.out, rows)  # after every shape: a call cut by its time limit keeps what it measured
    _write(args.out, rows)


def _write(path: str, rows: list[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        json.dump({"env": environment(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
