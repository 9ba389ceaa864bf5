"""Is copying an operand into rows of whole 128-byte lines worth it per call? bf16 zoo shapes whose rows (K elements)
are not whole lines, the planner's kernel on the operands as given against the same kernel fed a copy whose rows
are padded to 64 elements (the copy timed with it, in one CUDA graph), the smaller operand or both; the kernel alone
on operands padded ahead (what a pre-padded weight gives); and the plan the planner makes where rows are whole
lines (its `rows_aligned` patched true) on both padded. Session 23 measured 4634x4968x3672 at 462 TFLOP/s as given
and 600 with both operands padded ahead (archive/exp/misaligned.py). GPU only:

    python3 archive/exp/pad_rows.py --out pad.json 1029x14960x4536 265x10920x14120 ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from _rows import checked_into, interleaved_ms

from warploom import checks
from warploom.bench import environment
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

_ALIGNED_USERS = ("warploom.planner", "warploom.planning.sm90.rule", "warploom.planning.sm90.fitted_cluster",
                  "warploom.planning.sm90.search", "warploom.planning.sm90.latency", "warploom.planning.sm90.fitted",
                  "warploom.planning.sm90.tiles")


@contextlib.contextmanager
def rows_whole() -> Iterator[None]:
    """The planner as it plans operands whose rows are whole 128-byte lines."""
    with contextlib.ExitStack() as stack:
        for mod in _ALIGNED_USERS:
            __import__(mod)
            if hasattr(sys.modules[mod], "rows_aligned"):
                stack.enter_context(mock.patch(f"{mod}.rows_aligned", lambda spec: True))
        stack.enter_context(mock.patch("warploom.planning.sm90.fitted.sector_aligned", lambda spec: True))
        yield


def padded(t: torch.Tensor) -> torch.Tensor:
    """An (R, K) buffer view whose rows start on 128-byte lines (K padded to 64 elements)."""
    r, k = t.shape
    return torch.empty(r, -(-k // 64) * 64, device=t.device, dtype=t.dtype)[:, :k]


def measure(text: str, dev: DeviceInfo, rounds: int) -> dict[str, Any]:
    m, n, k = (int(x) for x in text.split("x"))
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)  # b = w.t(): K-major, rows of K as torch's weight
    ref = a.float() @ w.float().t()
    spec = checks.matmul_spec(a, w.t(), None)
    kern = build(spec, dev, plan_schedule(spec, dev))
    with rows_whole():
        whole = build(spec, dev, plan_schedule(spec, dev))
    pa, pw = padded(a), padded(w)
    pa.copy_(a)
    pw.copy_(w)
    small_a = m <= n  # the operand with fewer rows costs less to copy
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

    def run(kn: Any, x: torch.Tensor, y: torch.Tensor, copy_a: bool = False, copy_w: bool = False) -> None:
        if copy_a:
            pa.copy_(a)
        if copy_w:
            pw.copy_(w)
        kn.run(x, y.t(), out)

    variants: dict[str, Callable[[], Any]] = {
        "as given": lambda: run(kern, a, w),
        "copy smaller": (lambda: run(kern, pa, w, copy_a=True)) if small_a else (lambda: run(kern, a, pw, copy_w=True)),
        "copy both": lambda: run(kern, pa, pw, True, True),
        "smaller padded ahead": (lambda: run(kern, pa, w)) if small_a else (lambda: run(kern, a, pw)),
        "both padded ahead": lambda: run(kern, pa, pw),
        "whole-line plan, both padded ahead": lambda: run(whole, pa, pw),
        "whole-line plan, copy both": lambda: run(whole, pa, pw, True, True),
    }
    checked_into(variants, out, ref, text)
    times = interleaved_ms({"torch": lambda: torch.matmul(a, w.t()), **variants}, rounds, warmup_ms=25, rep_ms=120)
    tt = times.pop("torch")
    row = {"size": text, "plan": kern.plan.short(), "whole_plan": whole.plan.short(),
           "smaller": "a" if small_a else "b", "torch_us": tt * 1e3,
           "ratios": {name: tt / t for name, t in times.items()}}
    print(f"{text:>18} {row['plan']:40s} whole {row['whole_plan']:40s} torch {tt * 1e3:7.1f} us  "
          + "  ".join(f"{name} {v:.3f}" for name, v in row["ratios"].items()), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--out", default="pad.json")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    dev = DeviceInfo.current()
    rows = []
    for text in args.shapes:
        rows.append(measure(text, dev, args.rounds))
        with open(args.out, "w") as f:
            json.dump({"env": environment(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
