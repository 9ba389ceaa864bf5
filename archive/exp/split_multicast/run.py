"""Time CUTLASS's split multicast (edit.py) against warploom's rule-24 cluster, one CTA a tile and the planner's
plan, bf16, on the GPU under Triton >= 3.7 (`TRITON_PARTS=/tmp/tw`, scripts/gpu.sh's environment). Every kernel
first checked against the fp32 product over a NaN-poisoned output; CUDA-graph timing, interleaved rounds, torch in
the same run:

    python3 archive/exp/split_multicast/run.py --out split.json 4619x1408x1352 1064x5696x1160
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from _rows import bf16_problem, checked_into, interleaved_ms, with_source  # noqa: E402
from edit import split_multicast  # noqa: E402

from warploom import checks  # noqa: E402
from warploom.bench import environment  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.errors import KernelHangError  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime import launch  # noqa: E402
from warploom.runtime.timing import finish_within  # noqa: E402

B_PARAM = 5  # B's descriptor map in the PTX's parameters: after A's map, 2 sizes and 2 strides


def half_box(blocks: Any) -> Any:
    def patched(m: Any) -> Any:
        b = blocks(m)
        dtype, block, cga, padded = b["b_desc"]
        b["b_desc"] = (dtype, [block[0] // 2, block[1]], cga, padded)
        return b
    return patched


def measure(text: str, rounds: int) -> dict[str, Any]:
    m, n, k = (int(x) for x in text.split("x"))
    dev = DeviceInfo.current()
    a, b_nk, ref, theirs = bf16_problem(m, n, k)
    spec = checks.matmul_spec(a, b_nk.t(), None)
    kerns = {"planner": build(spec, dev, plan_schedule(spec, dev)),
             "one CTA 128x256": build(spec, dev, plan_schedule(spec, dev, bm=128, bn=256, cluster=1)),
             "lead multicasts": build(spec, dev, plan_schedule(spec, dev, bm=128, bn=256, cluster=2))}
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    for kern in kerns.values():  # (each launcher made, with B's whole box, before the patch below)
        kern.run(a, b_nk.t(), out)
    finish_within(f"{text} warploom's plans", 30)
    c = kerns["lead multicasts"]
    released = with_source(c, split_multicast(c.gluon.text, c.gluon.kernel, B_PARAM, halves=False))
    released.run(a, b_nk.t(), out)
    finish_within(f"{text} the lead's multicast released by every consumer warp", 30)
    kerns["lead multicasts, released by all"] = released
    split = with_source(c, split_multicast(c.gluon.text, c.gluon.kernel, B_PARAM))
    original = launch.descriptor_blocks
    launch.descriptor_blocks = half_box(original)
    try:
        split.run(a, b_nk.t(), out)
    finally:
        launch.descriptor_blocks = original
    finish_within(f"{text} split multicast", 30)
    kerns["split multicast"] = split
    runs = {name: (lambda kern=kern: kern.run(a, b_nk.t(), out)) for name, kern in kerns.items()}
    row: dict[str, Any] = {"size": text, "plans": {name: kk.plan.short() for name, kk in kerns.items()},
                           "err": checked_into(runs, out, ref, text)}
    times = interleaved_ms({"torch": theirs, **runs}, rounds, warmup_ms=25, rep_ms=150)
    tt = times.pop("torch")
    row["torch_us"] = tt * 1e3
    row["ratios"] = {name: tt / t for name, t in times.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("shapes", nargs="+")
    ap.add_argument("--out", default="split.json")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for text in args.shapes:
        try:
            row = measure(text, args.rounds)
        except KernelHangError as e:  # the GPU stays busy: report and stop
            print(e, flush=True)
            os._exit(3)
        except Exception as e:  # a shape whose variant fails is reported, the others still run
            row = {"size": text, "error": f"{type(e).__name__}: {e}"[:500]}
            print(text, row["error"], flush=True)
        else:
            print(f"{text:>18} torch {row['torch_us']:7.1f} us  "
                  + "  ".join(f"{name} {v:.3f}" for name, v in row["ratios"].items()), flush=True)
        rows.append(row)
        with open(args.out, "w") as f:
            json.dump({"env": environment(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
