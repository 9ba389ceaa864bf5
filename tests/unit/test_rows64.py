"""Planner rule 35 (64x128 tiles in one wave, `planning/sm90/rows64.py`): the choices the H200 sweeps set
(docs/decisions/rule-35-short-k-rows64.md, docs/data/rows64-h200-2026-11-28-session37.json at short K,
docs/data/rows64long-h200-2026-11-28-session38.json at long K) and what the rule leaves alone.
tests/unit/test_measured_choices.py holds the planner against that sweep's times; 64x128 tiles' numerics are
the simulator tier's and tests/gpu's. CPU only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import plan_schedule
from warploom.planning.sm90.rows64 import (
    ROWS64_MAX_KBLOCKS,
    ROWS64_MAX_TILES_OF_SMS,
    ROWS64_SPLIT_MIN_M,
    one_wave_rows64,
    rows64_tiles,
)
from warploom.spec import Accumulation

# Gained 8-12% on 64x128 (78-116 tiles), and 1-2% at 108 and 114 tiles.
WON = [(198, 2792, 168), (773, 664, 104), (107, 7408, 200), (118, 6288, 96), (1072, 464, 200), (5113, 120, 200),
       (2196, 328, 192), (208, 3472, 64), (1700, 392, 136), (7268, 104, 392)]
# 64x128 lost: a second wave of its tiles (2606x288x160: 123 tiles, -0.2%; 1444x1288x232: 253, -8%), or the plan was
# 128x256 (86x10976x280, -15%) or 192-row (6754x560x536, -43%).
LOST = [(2606, 288, 160), (1444, 1288, 232), (86, 10976, 280), (6754, 560, 536)]
# At 32-75 k-blocks (session 38): gained 5-83% over 128x128 in 2 split-K ranges (the first five) or 128-row tiles in
# one wave (the last: rule 31's 128x80). (73x7472x4784 gained 17% over 128x80 too, and is rule 25's split of 128x128
# in 2 since session 42, which ran 10% faster than 64x128: tests/unit/test_split_k.py.)
LONG_WON = [(2244, 360, 2000), (494, 1528, 2496), (6262, 120, 2120), (662, 1096, 3752), (405, 1520, 4040),
            (146, 3672, 4008)]
# Left alone: 128x128 in 2 ranges under 128 rows (100x5264x3464, -6%) or past 80 k-blocks (405x1424x6576, 103: a tie),
# in 3 or more ranges (-11% to -43% on 64x128 tiles, whole or in 2 ranges). (1597x80x4192, split 6 ways, lost too:
# rule 36 splits one column of 64-row tiles there, tests/unit/test_column_split.py.)
LONG_LOST = [(100, 5264, 3464), (405, 1424, 6576), (549, 656, 5920), (2415, 160, 14360), (1881, 224, 15080),
             (731, 232, 8688)]


@pytest.mark.parametrize("mnk", WON + LONG_WON)
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_one_wave_of_64x128_tiles_where_they_won(mnk: tuple[int, int, int], dtype: DType, device: object) -> None:
    plan = plan_schedule(GemmSpec(*mnk, dtype, dtype), device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.n_blocks, plan.split_k, plan.stream_k) == (64, 128, (), 1, 0)
    assert plan.grid == rows64_tiles(GemmSpec(*mnk)) <= ROWS64_MAX_TILES_OF_SMS * 132


# fp8 rowwise fast (session 38, docs/data/rows64fp8-h200-2026-11-28-session38.json): 64x128 gained 7-33% at all six
# shapes timed, the zoo's three of the rule's domain among them (405x1424x6576 in place of 2 split-K ranges).
FP8_WON = [(405, 1424, 6576), (118, 6288, 96), (208, 3472, 64), (2240, 368, 2000), (496, 1536, 2496),
           (6256, 128, 2112)]


@pytest.mark.parametrize("mnk", FP8_WON)
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_fp8_fast_takes_them_too(mnk: tuple[int, int, int], device: object) -> None:
    spec = GemmSpec(*mnk, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)
    plan = plan_schedule(spec, device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.n_blocks, plan.split_k, plan.stream_k) == (64, 128, (), 1, 0)


@pytest.mark.parametrize("mnk", LOST + LONG_LOST)
def test_other_plans_where_64x128_lost(mnk: tuple[int, int, int]) -> None:
    plan = plan_schedule(GemmSpec(*mnk), H200)
    assert plan.bm >= 128


def test_the_split_it_replaces() -> None:
    """The plans the long-K half of the rule replaces, planned without it: 128x128 in 2 ranges, or in one wave."""
    for mnk in LONG_WON:
        spec = GemmSpec(*mnk)
        before = plan_schedule(spec, H200, bm=128, bn=128)
        assert before.split_k in (1, 2) and before.grid <= 132, (mnk, before.short())
        assert 7 < -(-mnk[2] // 64) <= ROWS64_MAX_KBLOCKS
    # under ROWS64_SPLIT_MIN_M rows a split plan stands; from it, the same shape's split gives way
    small = GemmSpec(100, 5264, 3464)
    split = plan_schedule(small, H200)
    assert split.split_k == 2 and small.m < ROWS64_SPLIT_MIN_M and not one_wave_rows64(small, H200, split)
    assert one_wave_rows64(replace(small, m=ROWS64_SPLIT_MIN_M), H200, split)
    # a split in 3 stands at any M
    assert not one_wave_rows64(replace(small, m=ROWS64_SPLIT_MIN_M), H200, replace(split, split_k=3))


def test_what_the_rule_leaves_alone() -> None:
    shape = (1072, 464, 200)
    before = plan_schedule(GemmSpec(*shape), H200)
    assert (before.bm, before.bn) == (64, 128)
    # fp8 with fast accumulation is of the rule's kind; promoted accumulation or a bias: 128-row tiles as before
    fp8 = GemmSpec(1072, 464, 208, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)
    assert (plan_schedule(fp8, H200).bm, plan_schedule(fp8, H200).bn) == (64, 128)
    exact = replace(fp8, accumulation=Accumulation.PROMOTED)
    assert plan_schedule(exact, H200).bm == 128
    assert plan_schedule(GemmSpec(*shape, bias_dtype=DType.BF16), H200).bm == 128
    # a forced tile or depth stands
    assert plan_schedule(GemmSpec(*shape), H200, bm=128).bm == 128
    assert plan_schedule(GemmSpec(*shape), H200, bn=128).bm == 128
    # past ROWS64_MAX_KBLOCKS k-blocks (64 of bf16 each), the other rules' plan
    long_k = GemmSpec(662, 1096, 64 * (ROWS64_MAX_KBLOCKS + 1))
    assert plan_schedule(GemmSpec(662, 1096, 64 * ROWS64_MAX_KBLOCKS), H200).bm == 64
    assert not one_wave_rows64(long_k, H200, plan_schedule(long_k, H200))
    assert plan_schedule(long_k, H200).bm != 64 or plan_schedule(long_k, H200).bn != 128
    # the tile-count cap: one more row block of 64x128 tiles past 0.9 of the SMs is refused
    assert rows64_tiles(GemmSpec(7268, 104, 392)) == 114
    assert plan_schedule(GemmSpec(7680, 104, 392), H200).bm == 128  # 120 tiles
