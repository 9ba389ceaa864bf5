"""Run session 38's hand-written fitted-tile cluster kernels on the GPU (Triton >= 3.7): numbers, then speed.

Each kernel is checked against an fp32 reference on a NaN-poisoned output, then timed (CUDA-graph replays,
interleaved rounds) against torch and against warploom's own plans in the same process:

    TRITON_PARTS=/tmp/tw bash scripts/gpu.sh fitcluster     # (FITCLUSTER_ARGS passes the flags below)
    python3 archive/exp/fitted_cluster/run.py --kernels fc144_min,fc192_rowsplit --sizes 1256x1720x11240 \
        --variants '[{}, {"bm": 128, "bn": 256, "n_blocks": [128, 16], "cluster": 1}]' --out fc.json

A kernel's launch is what warploom's would be for a 2x1 cluster: one program per cluster (`num_ctas=2`), as many
as the cluster tiles (256 rows by the kernel's TN columns) up to the SMs' half."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # (archive/exp: its shared _rows.py)

from _rows import bf16_problem  # noqa: E402
from compile import CASES, load_module  # noqa: E402  (this folder's compile.py)

from warploom import checks  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.dtypes import DType  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.reference import relative_error  # noqa: E402
from warploom.runtime.cross import shared_layout  # noqa: E402
from warploom.runtime.timing import finish_within, time_graph  # noqa: E402

TN = {"fc144_min": 144, "fc144_rowsplit": 144, "fc192_rowsplit": 192}
MAXNREG = 168  # (the generated fitted kernel's: 240 consumer / 24 producer registers within it)


def launcher(name: str, a: torch.Tensor, b_nk: torch.Tensor, out: torch.Tensor, sms: int) -> Any:
    """A call of hand-written kernel `name` on (M, K) `a`, B's (N, K) storage `b_nk`, into (M, N) `out`."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    kernel_name, boxes = CASES[name]
    kernel = getattr(load_module(name), kernel_name)
    over = {"a_desc": a, "c_desc": out, "c_desc_w16": out}
    descs = [TensorDescriptor.from_tensor(over.get(p, b_nk), box, shared_layout(DType.BF16, box, cga))
             for p, (box, cga) in boxes.items()]
    m, k = a.shape
    n = b_nk.shape[0]
    tiles = -(-m // 256) * -(-n // TN[name])
    grid = (min(tiles, sms // 2),)
    return functools.partial(kernel[grid], *descs, m, n, k, num_warps=4, num_ctas=2, maxnreg=MAXNREG)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kernels", default="fc144_min")
    ap.add_argument("--sizes", default="1256x1720x11240")
    ap.add_argument("--variants", default='[{}]', help="warploom plan_schedule overrides (JSON list) timed beside")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="fitcluster.json")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict[str, Any]] = []
    for text in args.sizes.split(","):
        m, n, k = (int(x) for x in text.split("x"))
        a, b_nk, ref, theirs = bf16_problem(m, n, k)
        calls: list[tuple[dict[str, Any], Any]] = []
        for name in args.kernels.split(","):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            row: dict[str, Any] = {"size": text, "kernel": name}
            try:
                call = launcher(name, a, b_nk, out, sms)
                call()
                finish_within(f"{name} {text}")
                row["err"] = e = relative_error(out, ref)
                row["nan"] = int(out.isnan().sum())
                if not e < 1e-3:
                    raise AssertionError(f"error {e:.3e} against the fp32 reference, {row['nan']} NaN left")
                calls.append((row, call))
            except Exception as ex:  # a kernel that fails is reported, the others still run
                row["error"] = f"{type(ex).__name__}: {ex}"[:600]
                print(f"{name} {text}: {row['error']}", flush=True)
            rows.append(row)
        spec = checks.matmul_spec(a, b_nk.t(), None)
        for kw in json.loads(args.variants):
            row = {"size": text, "variant": kw}
            try:
                kern = build(spec, dev, plan_schedule(spec, dev, **kw))
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern.run(a, b_nk.t(), out)
                finish_within(f"{kw} {text}")
                row |= {"kernel": kern.plan.short(), "err": relative_error(out, ref)}
                calls.append((row, functools.partial(kern.run, a, b_nk.t(), out)))
            except Exception as ex:
                row["error"] = f"{type(ex).__name__}: {ex}"[:600]
                print(f"{kw} {text}: {row['error']}", flush=True)
            rows.append(row)
        for _ in range(args.rounds):  # interleaved: clock drift hits every call alike
            t_torch = time_graph(theirs)
            for row, call in calls:
                t = time_graph(call)
                row.setdefault("ms", []).append(t)
                row.setdefault("ratios", []).append(t_torch / t)
        for row, _ in calls:
            row["ratio"] = statistics.median(row["ratios"])
            row["tflops"] = 2 * m * n * k / statistics.median(row["ms"]) / 1e9
            print(f"{text:>16} {row['kernel']:44} ratio {row['ratio']:.3f} [{min(row['ratios']):.3f}-"
                  f"{max(row['ratios']):.3f}] {row['tflops']:.0f} TFLOP/s err {row['err']:.2e}", flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    print(json.dumps(dataclasses.asdict(dev) if dataclasses.is_dataclass(dev) else str(dev))[:200])


if __name__ == "__main__":
    main()
