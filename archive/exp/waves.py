"""Experiment (session 13): is blockwise 4096x2112x7168's 0.81x torch (issue 5's worst shape) wave quantization?

At 128x128 its 32 x 17 = 544 tiles fill 4.12 waves of 132 SMs: 5 waves of time for 4.12 of work (82%). N = 2048
(512 tiles, 3.88 waves: 4, 97% full) does ~3% less work in one wave less. If quantization is the cause, N = 2112
takes ~5/4 of N = 2048's time; 64x128 tiles (1088 tiles, 8.24 waves: 9, 92%) fill better at a lower per-tile
efficiency. Uses bench_blockwise's bench (graph and eager times against torch's blockwise kernel).

    PYTHONPATH=. python3 archive/exp/waves.py

Written in session 13, run in session 14: yes, it is (docs/benchmarks.md).
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from _rows import write_rows  # noqa: E402
from bench_blockwise import bench  # noqa: E402

CASES = [((4096, 2048, 7168), None), ((4096, 2112, 7168), None), ((4096, 2112, 7168), {"bm": 64, "bn": 128}),
         ((4096, 2112, 7168), {"bn": 256})]


def main() -> None:
    rows = []
    for (m, n, k), kw in CASES:
        r = bench(m, n, k, kw)
        bm, bn = (int(x) for x in r["plan"].split("x")[:2])
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        r["waves"] = tiles / 132
        rows.append(r)
        print(f"{m}x{n}x{k} {r['plan']:34s} waves {tiles / 132:5.2f} ours {r['ours_graph_ms'] * 1e3:7.1f} us "
              f"{r['ours_tflops']:6.1f} TFLOP/s  torch {r['torch_graph_ms'] * 1e3:7.1f} us  "
              f"ratio {r['graph_ratio']:.3f}", flush=True)
    write_rows(rows, "waves.json")


if __name__ == "__main__":
    main()
