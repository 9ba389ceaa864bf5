"""How well rules 23 and 25's latency models (`planning/sm90/latency.py`: `latency_us`, `split_time`, `decode_time`)
price the few-tile plans measured on the H100, and whether they pick the plan that ran fastest.

    python3 scripts/fit_latency.py [docs/data/JSON ...]

Reads `scripts/sweep_plans.py` JSON (default: the latency-tile and split-K sweeps in docs/data), models every row
whose plan is one the models price (64x64 or 128x128 tiles, whole, stream-K pieces, split-K ranges; 64x64 tiles
at M <= 64, whole or split, by `decode_time`; split above M = 64 by `split_time` at 64), and prints measured against
modeled microseconds, then each shape's fastest plan against the model's pick among the plans measured there. A
refit of the constants starts from this table.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import statistics
from dataclasses import dataclass

from warploom.dtypes import DType
from warploom.planning.common import k_blocks
from warploom.planning.sm90.latency import decode_time, latency_us, piece_kblocks, split_time
from warploom.spec import GemmSpec, ScaleRecipe

DEFAULT = ["docs/data/latency-tiles-*.json", "docs/data/splitk-*.json", "docs/data/smallsplit-*.json",
           "docs/data/split64-*.json"]
PLAN = re.compile(r"^(\d+)x(\d+)x\d+_s\d+_w\d+_g\d+(?:_p2)?(?:_sk(\d+)g\d+)?(?:_k(\d+))?$")


@dataclass(frozen=True)
class Row:
    """One measured plan: its shape, plan name, median microseconds, torch's, and the models' microseconds."""

    case: str
    size: str
    plan: str
    us: float
    torch_us: float
    model_us: float


def spec_of(case: str, size: str) -> GemmSpec:
    m, n, k = (int(x) for x in size.split("x"))
    if case == "bf16":
        return GemmSpec(m, n, k)
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)


def modeled(spec: GemmSpec, plan: str) -> float | None:
    """The models' microseconds for `plan` (a `Plan.short()`), or None where none prices it."""
    m = PLAN.match(plan)
    if m is None:
        return None
    bm, bn = int(m.group(1)), int(m.group(2))
    pieces, ranges = int(m.group(3) or 0), int(m.group(4) or 1)
    kb = k_blocks(spec)
    if (bm, bn) == (64, 64):
        if spec.m <= 64:  # (rule 25 at decode sizes compares its ranges with the whole tiles in these terms)
            return decode_time(spec, math.ceil(spec.n / 64), ranges)
        return latency_us(spec, 64, kb) if ranges == 1 else split_time(spec, ranges, 64)
    if (bm, bn) == (128, 128):
        if ranges > 1:
            return split_time(spec, ranges)
        return latency_us(spec, 128, piece_kblocks(kb, pieces or 1))
    return None


def rows(paths: list[str]) -> list[Row]:
    out: dict[tuple[str, str, str], Row] = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for r in data["rows"] if isinstance(data, dict) else data:
            if "ms" not in r:
                continue
            spec = spec_of(r["case"], r["size"])
            model = modeled(spec, r["plan"])
            if model is None:
                continue
            out[(r["case"], r["size"], r["plan"])] = Row(
                r["case"], r["size"], r["plan"], statistics.median(r["ms"]) * 1e3,
                statistics.median(r["torch_ms"]) * 1e3, model)
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="*", help="sweep_plans.py JSON files (default: docs/data's latency and split-K)")
    args = ap.parse_args()
    paths = args.json or sorted(p for pattern in DEFAULT for p in glob.glob(pattern))
    table = rows(paths)
    print(f"{'case':5s} {'shape':16s} {'plan':34s} {'ran us':>7s} {'model':>7s} {'model/ran':>9s}")
    for r in sorted(table, key=lambda r: (r.case, r.size, r.us)):
        print(f"{r.case:5s} {r.size:16s} {r.plan:34s} {r.us:7.1f} {r.model_us:7.1f} {r.model_us / r.us:9.2f}")
    errors = [math.log(r.model_us / r.us) for r in table]
    print(f"\n{len(table)} plans: model/ran geomean {math.exp(statistics.fmean(errors)):.2f}, "
          f"spread (exp of the log standard deviation) {math.exp(statistics.pstdev(errors)):.2f}")
    shapes: dict[tuple[str, str], list[Row]] = {}
    for r in table:
        shapes.setdefault((r.case, r.size), []).append(r)
    agree, lost = 0, []
    for (case, size), rs in sorted(shapes.items()):
        if len(rs) < 2:
            continue
        ran = min(rs, key=lambda r: r.us)
        # (plans the models price alike, such as one tile at two ring depths, which rule 23 sets apart by K: the
        # fastest of them stands for the pick)
        pick = min((r for r in rs if r.model_us <= min(q.model_us for q in rs) * 1.001), key=lambda r: r.us)
        if ran is pick or pick.us <= 1.03 * ran.us:
            agree += 1
        else:
            lost.append(f"{case} {size}: model picks {pick.plan} ({pick.us:.1f} us), {ran.plan} ran {ran.us:.1f} "
                        f"({pick.us / ran.us - 1:.0%} slower)")
    print(f"{agree} of {agree + len(lost)} shapes: the model's pick ran within 3% of the fastest measured")
    for line in lost:
        print("  " + line)


if __name__ == "__main__":
    main()
