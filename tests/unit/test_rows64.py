"""Planner rule 35 (64x128 tiles at short K, `planning/sm90_rows64.py`): the choices the H200 sweep set
(docs/decisions/rule-35-short-k-rows64.md, docs/data/rows64-h200-2026-11-28-session37.json) and what the rule leaves
alone. tests/unit/test_measured_choices.py holds the planner against that sweep's times; 64x128 tiles' numerics are
the simulator tier's and tests/gpu's. CPU only."""

from __future__ import annotations

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import plan_schedule
from warploom.planning.sm90_rows64 import ROWS64_MAX_KBLOCKS, ROWS64_MAX_TILES_OF_SMS, rows64_tiles, short_k_rows64

# Gained 8-12% on 64x128 (78-116 tiles), and 1-2% at 108 and 114 tiles.
WON = [(198, 2792, 168), (773, 664, 104), (107, 7408, 200), (118, 6288, 96), (1072, 464, 200), (5113, 120, 200),
       (2196, 328, 192), (208, 3472, 64), (1700, 392, 136), (7268, 104, 392)]
# 64x128 lost: a second wave of its tiles (2606x288x160: 123 tiles, -0.2%; 1444x1288x232: 253, -8%), or the plan was
# 128x256 (86x10976x280, -15%) or 192-row (6754x560x536, -43%).
LOST = [(2606, 288, 160), (1444, 1288, 232), (86, 10976, 280), (6754, 560, 536)]


@pytest.mark.parametrize("mnk", WON)
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_one_wave_of_64x128_tiles_where_they_won(mnk: tuple[int, int, int], dtype: DType, device: object) -> None:
    plan = plan_schedule(GemmSpec(*mnk, dtype, dtype), device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.n_blocks, plan.split_k, plan.stream_k) == (64, 128, (), 1, 0)
    assert plan.grid == rows64_tiles(GemmSpec(*mnk)) <= ROWS64_MAX_TILES_OF_SMS * 132


@pytest.mark.parametrize("mnk", LOST)
def test_other_plans_where_64x128_lost(mnk: tuple[int, int, int]) -> None:
    plan = plan_schedule(GemmSpec(*mnk), H200)
    assert plan.bm >= 128


def test_what_the_rule_leaves_alone() -> None:
    shape = (1072, 464, 200)
    before = plan_schedule(GemmSpec(*shape), H200)
    assert (before.bm, before.bn) == (64, 128)
    # fp8 (not measured), a bias, promoted accumulation: 128-row tiles as before
    fp8 = GemmSpec(1072, 464, 208, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)
    assert plan_schedule(fp8, H200).bm == 128
    assert plan_schedule(GemmSpec(*shape, bias_dtype=DType.BF16), H200).bm == 128
    # a forced tile or depth stands
    assert plan_schedule(GemmSpec(*shape), H200, bm=128).bm == 128
    assert plan_schedule(GemmSpec(*shape), H200, bn=128).bm == 128
    # past ROWS64_MAX_KBLOCKS k-blocks (64 of bf16 each), the other rules' plan
    long_k = GemmSpec(1072, 464, 64 * (ROWS64_MAX_KBLOCKS + 1))
    assert not short_k_rows64(long_k, H200, plan_schedule(long_k, H200))
    assert plan_schedule(long_k, H200).bm != 64 or plan_schedule(long_k, H200).bn != 128
    # the tile-count cap: one more row block of 64x128 tiles past 0.9 of the SMs is refused
    assert rows64_tiles(GemmSpec(7268, 104, 392)) == 114
    assert plan_schedule(GemmSpec(7680, 104, 392), H200).bm == 128  # 120 tiles
