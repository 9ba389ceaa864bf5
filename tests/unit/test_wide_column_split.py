"""Planner rule 38 (one column of 128-row tiles fitted to 128 < N <= 256 in place of rule 25's 128x128 split,
`planning/sm90/column.py`): the choices the H200 sweeps set (docs/decisions/rule-38-wide-column-split.md,
docs/data/narrow-split-128-*-h200-2026-11-29-session42.json) and what the rule leaves alone.
tests/unit/test_measured_choices.py holds the planner against those sweeps' times. CPU only."""

from __future__ import annotations

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.column import WIDE_MIN_UNIT_KBLOCKS, Column, wide_column_blocks, wide_column_split


def _spec(dtype: str, m: int, n: int, k: int) -> GemmSpec:
    if dtype == "bf16":
        return GemmSpec(m, n, k)
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)


# measured faster than rule 25's 128x128 split (H200, Triton 3.6): 0.579 -> 0.869, 1.344 -> 1.880, 1.198 -> 1.641 (in 6
# ranges; the rule's 7, each of 16 or 17 k-blocks, ran 1.687 as planned in session 43)
WON = [(("bf16", 2415, 160, 14360), 6, (128, 32)), (("fp8", 2415, 160, 14368), 6, (128, 32)),
       (("fp8", 1881, 224, 15088), 7, (128, 64, 32))]
# lost or tied: the plan's second column wastes under a quarter and the column adds no CTAs (bf16 1881x224x15088 0.908
# -> 0.860, 731x240x8688 0.990 -> 0.838), or its ranges would be 4 k-blocks (fp8 1.672 -> 1.659); and the bf16 zoo's
# own shapes beside them (N 224 and 232, K 15080), untimed in the column
LEFT = [("bf16", 1881, 224, 15088), ("bf16", 731, 240, 8688), ("fp8", 731, 240, 8688), ("bf16", 1881, 224, 15080),
        ("bf16", 731, 232, 8688)]
# more CTAs than the column's, where it was not timed: the plan stays (bf16 1000x192x16384: 128 CTAs against 64)
FEWER = [("bf16", 1000, 192, 16384), ("bf16", 731, 160, 16384), ("fp8", 1000, 160, 16384)]


@pytest.mark.parametrize("case,ranges,blocks", WON)
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_one_wide_column_where_it_won(case: tuple[str, int, int, int], ranges: int, blocks: tuple[int, ...],
                                      device: object) -> None:
    plan = plan_schedule(_spec(*case), device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.split_k, plan.n_blocks) == (128, 256, ranges, blocks), plan.short()
    assert plan.units(case[1], case[2]) == -(-case[1] // 128) * ranges <= 132


@pytest.mark.parametrize("case", LEFT + FEWER)
def test_rule25_split_stays_where_the_column_lost(case: tuple[str, int, int, int]) -> None:
    plan = plan_schedule(_spec(*case), H200)
    assert (plan.bm, plan.bn, plan.n_blocks) == (128, 128, ()) and plan.split_k > 1, plan.short()


def test_what_the_rule_replaces_and_how_it_says_so() -> None:
    """The rule replaces only rule 25's 128x128 splits (so its tests above cannot pass without it), counts its ranges
    by the SMs and k-blocks, fits its blocks to N, and `explain` names it."""
    spec = _spec("bf16", 2415, 160, 14360)
    before = plan_schedule(spec, H200, bm=128, bn=128, split_k=3)
    assert wide_column_split(spec, H200, before) == Column(128, 256, 6, (128, 32))
    assert wide_column_split(spec, H200, plan_schedule(spec, H200, bm=64, bn=64)) is None  # (not a 128x128 split)
    assert wide_column_split(GemmSpec(2415, 288, 14360), H200, before) is None  # (N past 256)
    short = GemmSpec(2415, 160, 64 * 2 * WIDE_MIN_UNIT_KBLOCKS - 64)  # (two ranges would hold under 16 k-blocks)
    assert wide_column_split(short, H200, plan_schedule(short, H200, bm=128, bn=128, split_k=2)) is None
    assert wide_column_blocks(160) == (128, 32) and wide_column_blocks(240) == ()  # (four blocks: no column)
    whole = GemmSpec(2415, 256, 14336)  # (N = 256: the whole tile, untimed as a column)
    assert wide_column_split(whole, H200, plan_schedule(whole, H200, bm=128, bn=128, split_k=2)) is None
    text = explain(spec, H200).text()
    assert "one column, 6 ranges (rule 38)" in text and "19 row blocks x 1 column x 6 ranges in place of" in text
    forced = plan_schedule(spec, H200, bm=128, bn=128)  # (a forced tile stands)
    assert (forced.bm, forced.bn) == (128, 128)
