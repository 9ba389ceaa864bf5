"""scripts/bench_grouped.py's CPU-checkable parts: the bytes its masked decode kinds count as moved (the bandwidth
compared with a device copy's, issue 27's 90% target)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_grouped as bench  # noqa: E402


def test_masked_bytes_leave_out_the_weights_of_empty_experts() -> None:
    """An expert with no valid rows has no tiles (`ir.raster.GroupScan`): the kernel never reads its weight, so its
    bytes do not count (bench_grouped's masked kinds leave expert 0 empty: counting its weight overstated the
    bandwidth by 1/E, 12.5% at 8 experts)."""
    n, k = 4096, 7168
    counts = torch.tensor([0, 3, 64, 0, 17], dtype=torch.int32)
    valid = 3 + 64 + 17
    for a_bytes, b_bytes in ((2, 2), (1, 1)):
        want = 3 * n * k * b_bytes + valid * k * a_bytes + valid * n * 2
        assert bench.masked_bytes(counts, n, k, a_bytes, b_bytes) == want
