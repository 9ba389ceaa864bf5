"""What the experiments in archive/exp share: where they write their rows (JSON under $OUT, default ./out, for the
device tool), how the decode probes time their variants against torch, the bf16 problem the hand-written-kernel probes
run, and how a probe swaps a kernel's source."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_rows(rows: list[dict[str, Any]], name: str) -> Path:
    """Write `rows` as indented JSON to $OUT/`name` (creating the folder) and return the path."""
    out = Path(os.environ.get("OUT", "out")) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return out


def interleaved_ms(runs: dict[str, Callable[[], Any]], rounds: int, **window: int) -> dict[str, float]:
    """Median CUDA-graph time (ms) of each run over `rounds` interleaved rounds (`runtime.timing.time_interleaved`,
    `window`: time_graph's warmup_ms and rep_ms, where a sweep of many variants shortens them)."""
    import statistics

    from warploom.runtime.timing import time_interleaved

    return {name: statistics.median(ts) for name, ts in time_interleaved(runs, rounds, **window).items()}


def checked_into(runs: dict[str, Callable[[], Any]], out: Any, ref: Any, label: str) -> dict[str, float]:
    """Run each call once into `out`, NaN-poisoned first, and require its largest error under 2e-2 of `ref`'s largest
    magnitude, before any timing; the errors by name."""
    import torch

    errors = {}
    for name, fn in runs.items():
        out.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        errors[name] = e = float((out.float() - ref).abs().max() / ref.abs().max())
        if not e < 2e-2:
            raise AssertionError(f"{label} {name}: relative error {e:.3e}")
    return errors


def cross_or_gpu(cross: Callable[[], None], gpu: Callable[[int], None], rounds: int = 5) -> None:
    """A probe's command line: `--cross` cross-compiles its variants without a GPU, else time them on the GPU in
    `--rounds` interleaved rounds."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--cross", action="store_true")
    p.add_argument("--rounds", type=int, default=rounds)
    args = p.parse_args()
    cross() if args.cross else gpu(args.rounds)


def bf16_problem(m: int, n: int, k: int, device: str = "cuda") -> tuple[Any, Any, Any, Callable[[], Any]]:
    """A bf16 GEMM as the hand-written-kernel probes run it (seed 0): A (M, K), B's (N, K) storage (B = b_nk.t(),
    K-major), the fp32 reference product and torch's call."""
    import functools

    import torch

    torch.manual_seed(0)
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b_nk = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    return a, b_nk, a.float() @ b_nk.float().t(), functools.partial(torch.matmul, a, b_nk.t())


def with_source(kern: Any, text: str) -> Any:
    """`kern` (a warploom Kernel) with its Gluon source replaced by `text`: a fresh object, since build(), .gluon
    and .launcher are all cached."""
    import dataclasses

    new = dataclasses.replace(kern)
    new.__dict__["gluon"] = dataclasses.replace(kern.gluon, text=text)
    return new


def decode_problem(dtype: str, m: int, n: int, k: int) -> tuple[Any, Any, dict[str, Callable[[], Any]], Any]:
    """A decode GEMM on the GPU, as the decode probes measure it: A (M, K) and the weight W (N, K) row-major (B =
    W.t(), K-major), bf16, or fp8 e4m3 with unit tensorwise scales. Returns A, W, the calls every probe times
    (torch's, then warploom's own plan, by name) and the float64 reference product."""
    import functools

    import torch

    import warploom

    torch.manual_seed(m)
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        theirs: Any = functools.partial(torch.matmul, a, w.t())
        ours: Any = functools.partial(warploom.matmul, a, w.t())
        scales: tuple[Any, ...] = ()
    else:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        scales = (one, one)
        theirs = functools.partial(torch._scaled_mm, a, w.t(), one, one, out_dtype=torch.bfloat16,
                                   use_fast_accum=True)
        ours = functools.partial(warploom.scaled_mm, a, w.t(), one, one, use_fast_accum=True)
    plan = warploom.plan(a, w.t(), *scales, use_fast_accum=True).plan
    ref = a.float().double() @ w.float().double().t()
    return a, w, {"torch": theirs, f"warploom ({plan.short()})": ours}, ref


def checked(runs: dict[str, Callable[[], Any]], ref: Any, label: str) -> None:
    """Run each call once and require its output within 1e-3 of `ref` (1 - 2Σxy/Σ(x²+y²)), before any timing."""
    for name, fn in runs.items():
        y = fn().double()
        e = float(1 - 2 * (y * ref).sum() / (y * y + ref * ref).sum())
        assert e < 1e-3 and not y.isnan().any(), f"{label} {name}: error {e:.2e}"


Variants = Callable[[str, str], dict[str, str]]  # (case, the planner's Gluon) -> {variant name: Gluon text}


def case_spec(case: str, m: int, n: int, k: int) -> Any:
    """The GemmSpec of one of sweep_plans.py's cases (which builds its GPU tensors) for cross-compiling."""
    from warploom import Accumulation, DType, GemmSpec, ScaleRecipe

    if case == "bf16":
        return GemmSpec(m, n, k)
    blockwise = case == "blockwise"
    scale = ScaleRecipe.BLOCKWISE_1X128_128X128 if blockwise else ScaleRecipe.ROWWISE
    acc = Accumulation.NATIVE if case == "fp8" else Accumulation.PROMOTED
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, accumulation=acc)


def cross_variants(cases: tuple[str, ...], shapes: list[tuple[int, int, int]], variants: Variants) -> None:
    """Cross-compile each text variant of the planner's kernel for sweep_plans' `cases` at `shapes` (H100 plans):
    registers, spills and C7514, before any device time is spent."""
    from warploom.device import H100_SXM
    from warploom.kernel import build
    from warploom.targets import cross_compile

    for case in cases:
        for m, n, k in shapes:
            kern = build(case_spec(case, m, n, k), H100_SXM)
            for name, text in variants(case, kern.gluon.text).items():
                kk = with_source(kern, text)
                c = cross_compile(kk.module, kk.gluon, "sm_90a")
                print(f"{case} {m}x{n}x{k} {kern.plan.short()} {name}: registers {c.registers}, spills {c.spills}, "
                      f"wgmma serialized {c.wgmma_serialized}", flush=True)


def time_variants(cases: tuple[str, ...], shapes: list[tuple[int, int, int]], variants: Variants, rounds: int,
                  out_name: str, unchecked: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Time each text variant of the planner's kernel against torch (sweep_plans' `cases`), interleaved, on poisoned
    outputs; every variant not in `unchecked` (one that writes nothing on purpose) is checked against the fp32
    product first. Prints a line per shape and writes the rows to $OUT/`out_name`."""
    import functools

    import torch
    from sweep_plans import case

    from warploom.device import DeviceInfo
    from warploom.kernel import build

    dev = DeviceInfo.current()
    rows = []
    for name in cases:
        for m, n, k in shapes:
            torch.manual_seed(m + n + k)
            spec, (a, b, sa, sb, bias, _ops), ref, theirs = case(name, (m, n, k))
            kern = build(spec, dev)
            runs: dict[str, Any] = {"torch": theirs}
            for form, text in variants(name, kern.gluon.text).items():
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                runs[form] = functools.partial(with_source(kern, text).run, a, b, out, sa, sb, bias)
            checked({f: r for f, r in runs.items() if f != "torch" and f not in unchecked}, ref.double(),
                    f"{name} {m}x{n}x{k}")
            ms = interleaved_ms(runs, rounds)
            for form, t in ms.items():
                rows.append({"case": name, "shape": [m, n, k], "variant": form, "plan": kern.plan.short(), "ms": t,
                             "ratio": ms["torch"] / t})
            print(f"{name:9s} {m}x{n}x{k} {kern.plan.short():30s} " + "  ".join(
                f"{f} {ms['torch'] / t:.3f}" for f, t in ms.items() if f != "torch"), flush=True)
            torch.cuda.empty_cache()
    print(write_rows(rows, out_name))
    return rows


def variants_main(doc: str | None, cases: tuple[str, ...], shapes: list[tuple[int, int, int]], variants: Variants,
                  out_name: str, rounds: int = 5, unchecked: tuple[str, ...] = ()) -> None:
    """A text-variant probe's command line: `--cross` cross-compiles its variants (`cross_variants`), else they are
    timed on the GPU in `--rounds` interleaved rounds (`time_variants`) over `--cases` (sweep_plans.py's)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--cases", default=",".join(cases), help="sweep_plans.py cases, e.g. bf16,fp8,fp8-exact")
    args = ap.parse_args()
    chosen = tuple(args.cases.split(","))
    if args.cross:
        cross_variants(chosen, shapes, variants)
    else:
        time_variants(chosen, shapes, variants, args.rounds, out_name, unchecked=unchecked)
