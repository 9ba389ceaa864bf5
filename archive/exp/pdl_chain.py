"""What programmatic dependent launch (PDL) gains where: warploom's planned kernel launched with PDL and without
(WARPLOOM_PDL=0), in one process, against torch (GPU only).

Two graphs per shape, each of 10 iterations:
- back to back: the GEMM alone, as `warploom bench --graph` times it (each launch follows the previous GEMM);
- after torch: each GEMM follows a torch elementwise kernel (launched without PDL, so it lets the next grid start
  only when it ends): what a GEMM between other layers' kernels sees. The elementwise kernel's own graph time is
  subtracted, so the numbers are the GEMM's share.

    PYTHONPATH=. python3 archive/exp/pdl_chain.py --shapes 87x640x72,1435x872x776 [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from _rows import checked, interleaved_ms, write_rows  # noqa: E402

SHAPES = ("87x640x72,111x256x496,547x64x608,64x592x360,2606x288x160,753x216x800,1700x392x136,144x6648x104,"
          "513x368x5160,1435x872x776,3230x6336x240,2188x4312x760,4096x4096x4096")


# Each form's WARPLOOM_PDL: every kernel launched with PDL, warploom's default (a call's second kernels only), none;
# `pdl_wait`: every kernel with PDL, but the first kernel without its early launch_dependents (it waits only).
FORMS = {"pdl": "1", "auto": "auto", "plain": "0", "pdl_wait": "1"}
_TRIGGER = "    launch_dependents()  # the next grid may start now (it waits for this one's end)\n"


def launcher(kern: Any, mode: str, trigger: bool = True) -> Any:
    """A fresh launcher of `kern`'s module, built under WARPLOOM_PDL=`mode` (read when it is built); without
    `trigger`, the first kernel's launch_dependents is cut from its source."""
    import dataclasses

    from warploom.runtime.launch import Launcher

    old = os.environ.get("WARPLOOM_PDL")
    os.environ["WARPLOOM_PDL"] = mode
    try:
        tail = None if kern.tail is None else (kern.tail, kern.tail_gluon)
        src = kern.gluon
        if not trigger:
            assert src.text.count(_TRIGGER) == 1, "the kernel's launch_dependents line moved"
            src = dataclasses.replace(src, text=src.text.replace(_TRIGGER, ""))
        return Launcher(kern.module, src, tail=tail)
    finally:
        os.environ.pop("WARPLOOM_PDL") if old is None else os.environ.__setitem__("WARPLOOM_PDL", old)


def main() -> None:
    import torch
    from sweep_plans import case

    from warploom.device import DeviceInfo
    from warploom.kernel import build

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="pdl-chain.json")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    z = torch.zeros(1 << 16, device="cuda")  # the elementwise kernel's tensor (a few microseconds' kernel)
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        torch.manual_seed(m + n + k)
        spec, (a, b, sa, sb, bias, _ops), ref, theirs = case("bf16", (m, n, k))
        kern = build(spec, dev)
        outs = {f: torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for f in FORMS}
        calls: dict[str, Any] = {"torch": theirs}
        for form, mode in FORMS.items():
            run = launcher(kern, mode, trigger=form != "pdl_wait")
            calls[form] = functools.partial(run, a, b, outs[form], sa, sb, bias)
        checked({f: c for f, c in calls.items() if f != "torch"}, ref.double(), shape)
        runs = dict(calls)
        runs.update({f"{f}+add": (lambda c=c: (c(), z.add_(1.0))) for f, c in calls.items()})
        runs["add"] = lambda: z.add_(1.0)
        ms = interleaved_ms(runs, args.rounds)
        after = {f: ms[f"{f}+add"] - ms["add"] for f in calls}
        row = {"shape": [m, n, k], "plan": kern.plan.short(), "us": {f: t * 1000 for f, t in ms.items()},
               "back_to_back": {f: ms["torch"] / ms[f] for f in FORMS},
               "after_torch": {f: after["torch"] / after[f] for f in FORMS}}
        rows.append(row)
        print(f"{shape:>16} {kern.plan.short():36} back to back: torch {ms['torch'] * 1e3:.2f} us, " + ", ".join(
            f"{f} {ms[f] * 1e3:.2f} ({row['back_to_back'][f]:.3f})" for f in FORMS)
            + f" | after torch's add: torch {after['torch'] * 1e3:.2f}, " + ", ".join(
            f"{f} {after[f] * 1e3:.2f} ({row['after_torch'][f]:.3f})" for f in FORMS), flush=True)
    print(write_rows(rows, args.out))


if __name__ == "__main__":
    main()
