"""Planner rule 36 (one column of 64-row tiles across N <= 128 at long K, its K split to fill the SMs,
`planning/sm90/column.py`): the choices the H200 sweeps set (docs/decisions/rule-36-one-column-split.md,
docs/data/router-h200-2026-11-28-session38.json, router96-..., narrowk-...) and what the rule leaves alone.
tests/unit/test_measured_choices.py holds the planner against those sweeps' times. CPU only."""

from __future__ import annotations

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.column import (
    COLUMN_MAX_SPLIT,
    COLUMN_MIN_KBLOCKS,
    COLUMN_MIN_ROW_BLOCKS,
    Column,
    one_column_split,
)

# (shape, ranges, blocks): measured faster than the plan before (2048x96x4096 0.766 -> 1.047, 2090x96x7792 0.59 ->
# 0.945), or within 1-5% above it.
WON = [((2048, 96, 4096), 4, (64, 32)), ((2090, 96, 7792), 4, (64, 32)), ((2048, 128, 4096), 4, ()),
       ((1024, 96, 7168), 4, (64, 32)), ((4096, 128, 7168), 2, ()), ((2048, 96, 7168), 4, (64, 32)),
       ((4096, 96, 7168), 2, (64, 32)), ((1024, 128, 7168), 4, ()), ((1597, 80, 4192), 4, (64, 16))]


@pytest.mark.parametrize("mnk,ranges,blocks", WON)
@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16])
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_one_column_split_where_it_won(mnk: tuple[int, int, int], ranges: int, blocks: tuple[int, ...],
                                       dtype: DType, device: object) -> None:
    plan = plan_schedule(GemmSpec(*mnk, dtype, dtype), device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.split_k, plan.n_blocks) == (64, 128, ranges, blocks), plan.short()
    assert plan.grid <= 132 and plan.units(mnk[0], mnk[1]) == -(-mnk[0] // 64) * ranges


def test_the_plans_it_replaced_were_others() -> None:
    """The rule changed these plans (so its tests above cannot pass on the rules before it)."""
    spec = GemmSpec(2048, 96, 4096)
    before = plan_schedule(spec, H200, bm=64, bn=64)
    assert one_column_split(spec, H200, before) == Column(64, 128, 4, (64, 32))
    assert "one column, 4 ranges (rule 36)" in explain(spec, H200).text()


@pytest.mark.parametrize("mnk", [
    (4096, 64, 4096), (8192, 64, 7168),  # N = 64: one 64-wide column already, a split gained nothing
    (1024, 256, 4096),  # N > 128: two columns (rule 39's, 64x128 in 4 ranges)
    (2048, 96, 64 * (COLUMN_MIN_KBLOCKS - 1)),  # short of the k-blocks measured (rule 39 splits it, from 48)
    (64 * (COLUMN_MIN_ROW_BLOCKS - 1), 96, 7168),  # too few row blocks to fill the SMs in 4 ranges
    (64 * 67, 96, 7168),  # more row blocks than half the SMs: no split of 2 fits
])
def test_what_the_rule_leaves_alone(mnk: tuple[int, int, int]) -> None:
    spec = GemmSpec(*mnk)
    assert one_column_split(spec, H200, plan_schedule(spec, H200, bm=64, bn=64)) is None
    plan = plan_schedule(spec, H200)
    assert "(rule 36)" not in explain(spec, H200).text(), plan.short()


def test_other_kinds_and_forced_options_stand() -> None:
    spec = GemmSpec(2048, 96, 4096)
    fp8 = GemmSpec(2048, 96, 4096, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)  # not measured
    assert one_column_split(fp8, H200, plan_schedule(fp8, H200)) is None
    assert one_column_split(GemmSpec(2048, 96, 4096, bias_dtype=DType.BF16), H200, plan_schedule(spec, H200)) is None
    assert plan_schedule(spec, H200, bm=64, bn=64).bn == 64  # a forced tile stands
    assert plan_schedule(spec, H200, split_k=1).split_k == 1
    # the split fills the SMs, at most COLUMN_MAX_SPLIT ranges
    for m in (1024, 2048, 2090, 3000, 4096):
        column = one_column_split(GemmSpec(m, 96, 7168), H200, plan_schedule(GemmSpec(m, 96, 7168), H200, bm=128))
        split = column.split if column else 0
        rows = -(-m // 64)
        assert split == min(COLUMN_MAX_SPLIT, 132 // rows) and rows * split <= 132
