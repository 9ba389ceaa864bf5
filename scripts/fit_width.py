"""How well rule 33's width model (`planning/sm90/latency.py`: `width_us`) prices the 64-row latency tiles measured 16,
32 and 64 wide, and whether it picks the width that ran fastest; `--refit` searches its constants again.

    python3 scripts/fit_width.py [--refit] [docs/data/JSON ...]

Reads `scripts/sweep_plans.py` JSON (default: the latency-width sweeps in docs/data), keeps each whole 64-row plan
(no split, stream-K or narrow blocks) at 6 stages (the depth rule 33 plans) or at rule 23's 4 or 8 for 64 wide, whose
tiles fit one wave, and prints measured against modeled microseconds, then per shape the fastest width against the
model's pick among the widths measured there (within WIDTH_MAX_TILES_OF_SMS, as the planner chooses). `--refit` grid-
searches each width's start and k-block time and the shared L2 rate for the least relative squared error.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import statistics
from dataclasses import dataclass

from warploom.device import H200
from warploom.planning.common import k_blocks
from warploom.planning.sm90 import latency as models
from warploom.spec import GemmSpec

DEFAULT = ["docs/data/latency-width-*.json"]
PLAN = re.compile(r"^64x(16|32|64)x64_s(\d+)_w4_g8$")
SMS = H200.sm_count  # (the sweeps ran on an H200)


@dataclass(frozen=True)
class Row:
    """One measured plan: its shape, width, median microseconds and the model's."""

    size: str
    width: int
    us: float
    model_us: float


def spec_of(size: str) -> GemmSpec:
    m, n, k = (int(x) for x in size.split("x"))
    return GemmSpec(m, n, k)


def tiles(spec: GemmSpec, width: int) -> int:
    return math.ceil(spec.m / 64) * math.ceil(spec.n / width)


def rows(paths: list[str]) -> list[Row]:
    """Every whole 64-row plan of bf16 in `paths` whose tiles fit one wave, one row per (shape, width): the 6-stage
    run where there is one, else rule 23's depth."""
    found: dict[tuple[str, int], tuple[int, float]] = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["rows"]:
                m = PLAN.match(r.get("plan", ""))
                if r.get("case") != "bf16" or m is None or "ms" not in r:
                    continue
                width, stages = int(m.group(1)), int(m.group(2))
                if tiles(spec_of(r["size"]), width) > SMS:
                    continue
                key, us = (r["size"], width), statistics.median(r["ms"]) * 1000
                rank = 0 if stages == models.WIDTH_STAGES else 1
                if key not in found or rank < found[key][0]:
                    found[key] = (rank, us)
    return [Row(size, width, us, models.width_us(spec_of(size), width)) for (size, width), (_, us) in found.items()]


def picks(table: list[Row]) -> tuple[int, int, list[str]]:
    """Shapes where the model's pick among the measured widths (the narrow ones within WIDTH_MAX_TILES_OF_SMS, as
    the planner) ran within 3% of the fastest measured, of the shapes with at least two widths; and the misses."""
    by: dict[str, list[Row]] = {}
    for r in table:
        by.setdefault(r.size, []).append(r)
    agree, total, misses = 0, 0, []
    for size, rs in by.items():
        allowed = [r for r in rs if r.width == 64
                   or tiles(spec_of(size), r.width) <= SMS * models.WIDTH_MAX_TILES_OF_SMS]
        if len(rs) < 2 or not allowed:
            continue
        total += 1
        pick = min(allowed, key=lambda r: (r.model_us, -r.width))
        best = min(rs, key=lambda r: r.us)
        if pick.us <= best.us * 1.03:
            agree += 1
        else:
            misses.append(f"{size}: picks {pick.width} ({pick.us:.2f} us), {best.width} ran {best.us:.2f} us")
    return agree, total, misses


def _error(table: list[Row], width: int, start: float, kblock: float, l2: float) -> float:
    """Summed relative squared error of `width`'s rows priced at these constants (L2 in TB/s)."""
    total = 0.0
    for r in table:
        spec = spec_of(r.size)
        l2_us = tiles(spec, width) * (64 + width) * spec.k * 2 / (l2 * 1e6)
        total += ((start + max(kblock * k_blocks(spec), l2_us)) / r.us - 1) ** 2
    return total


def refit(table: list[Row]) -> None:
    """Grid-search each width's start and k-block microseconds and the shared L2 rate (relative squared error)."""
    best: tuple[float, float, dict[int, tuple[float, float]]] | None = None
    for l2 in [x / 4 for x in range(16, 41)]:  # 4 .. 10 TB/s
        fits, total = {}, 0.0
        for width in models.LATENCY_WIDTHS:
            mine = [r for r in table if r.width == width]
            if not mine:
                continue
            err, start, kblock = min((_error(mine, width, s / 100, kb / 1000, l2), s / 100, kb / 1000)
                                     for s in range(200, 451, 2) for kb in range(80, 201, 2))
            fits[width], total = (start, kblock), total + err
        if best is None or total < best[0]:
            best = (total, l2, fits)
    assert best is not None
    total, l2, fits = best
    print(f"refit: L2 {l2:.2f} TB/s, rms relative error {math.sqrt(total / len(table)):.3f}")
    for width, (start, kblock) in fits.items():
        print(f"  64x{width}: start {start:.2f} us, k-block {kblock:.3f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--refit", action="store_true")
    args = ap.parse_args()
    paths = sorted({p for pattern in (args.paths or DEFAULT) for p in glob.glob(pattern)})
    table = rows(paths)
    for r in sorted(table, key=lambda r: (r.size, r.width)):
        print(f"{r.size:>16} 64x{r.width:<3} measured {r.us:6.2f} us  modeled {r.model_us:6.2f} us")
    rms = math.sqrt(statistics.fmean((r.model_us / r.us - 1) ** 2 for r in table))
    print(f"{len(table)} plans: rms relative error {rms:.3f}")
    agree, total, misses = picks(table)
    print(f"{agree} of {total} shapes: the model's pick ran within 3% of the fastest width measured")
    for line in misses:
        print("  miss:", line)
    if args.refit:
        refit(table)


if __name__ == "__main__":
    main()
