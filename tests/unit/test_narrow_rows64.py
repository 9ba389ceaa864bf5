"""Planner rule 39 (columns of 64-row tiles fitted to 64 < N <= 256, K split where long, `planning/sm90/column.py`):
the choices the H200 sweeps set (docs/decisions/rule-39-narrow-rows64.md, docs/data/narrow-rows64-*-session43*.json)
and what the rule leaves alone. tests/unit/test_measured_choices.py holds the planner against those sweeps' times.
CPU only."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.column import Column, narrow_rows64, read_rows
from warploom.spec import Accumulation

# (shape, bn, ranges, blocks): measured faster than the plan before the rule (H200, Triton 3.6, graph ratio against
# torch): the zoo's 1895x136x3704 0.593 -> 0.809 and 1806x88x1672 0.759 -> 0.848, session 38's 1024x256x4096 0.893 ->
# 0.997, and random shapes 0.792 -> 1.053, 0.752 -> 0.934, 0.772 -> 0.928, 0.988 -> 1.136, 0.741 -> 0.879, 0.765 ->
# 0.844, 0.793 -> 0.873, 0.684 -> 0.744
WON = [((1895, 136, 3704), 256, 4, (128, 16)), ((1806, 88, 1672), 32, 1, ()), ((1024, 256, 4096), 128, 4, ()),
       ((1804, 144, 3344), 256, 4, (128, 16)), ((1480, 176, 4728), 256, 5, (128, 32, 16)),
       ((1165, 224, 4728), 256, 6, ()), ((1234, 248, 5488), 256, 6, ()), ((2043, 152, 3184), 256, 4, (128, 32)),
       ((2593, 256, 4856), 256, 3, ()), ((2559, 208, 2976), 128, 1, (64, 16)), ((3954, 168, 1208), 128, 1, (64, 32))]
# measured slower with more 64-row tiles than the plan's (reading 17-54% more rows from L2, or N = 64): the plan stays
# (3834x200x1136 0.838 against 0.721, 7491x240x4904 0.831 against 0.695, 2640x104x1992 0.718 against 0.653,
# 1991x184x640 0.879 against 0.844, 3437x64x520 0.816 against 0.797), and where they tied or won past the bound
# (3950x144x552 tied, 3794x152x1440 and 800x184x1880 won: known misses). (shape, the plan's bm, bn, n_blocks)
LEFT = [((3834, 200, 1136), 128, 128, (64, 16)), ((7491, 240, 4904), 192, 256, (128, 16)),
        ((5380, 152, 4392), 128, 256, (128, 32)), ((2640, 104, 1992), 64, 64, ()), ((1991, 184, 640), 64, 64, ()),
        ((1857, 184, 480), 64, 64, ()), ((750, 192, 1472), 64, 64, ()), ((3437, 64, 520), 64, 64, ()),
        ((3950, 144, 552), 128, 128, (64, 16)), ((3794, 152, 1440), 128, 128, (64, 16)),
        ((800, 184, 1880), 64, 64, ())]


# fp8 rowwise with fast accumulation, whole columns only (H200, against the plan before): 3794x160x1440 0.965 -> 1.253,
# 1597x80x4192 1.535 -> 1.700, 1806x96x1680 1.264 -> 1.327, 88x80x560 1.233 -> 1.299, 611x96x368 1.212 -> 1.266,
# 2232x80x912 1.177-1.204 -> 1.216-1.218
WON_FP8 = [((3794, 160, 1440), 128, (64, 16)), ((1597, 80, 4192), 32, ()), ((1806, 96, 1680), 32, ()),
           ((88, 80, 560), 32, ()), ((611, 96, 368), 32, ()), ((2232, 80, 912), 32, ())]
# fp8's splits lost (64x176 in 5 ranges 1.432 against 64x64's 1.745, 64x160 in 4 1.101 against 1.158, 64x256 in 6
# 1.284 against 1.370): the plan stays
# 1480x176x8192 (64 k-blocks of 128) would split in 5 ranges were fp8 split
LEFT_FP8 = [(1480, 176, 4736), (2043, 160, 3184), (1234, 256, 5488), (1895, 144, 3712), (1480, 176, 8192)]


def _fp8(m: int, n: int, k: int) -> GemmSpec:
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)


@pytest.mark.parametrize("mnk,bn,blocks", WON_FP8)
def test_fp8_whole_columns_where_they_won(mnk: tuple[int, int, int], bn: int, blocks: tuple[int, ...]) -> None:
    plan = plan_schedule(_fp8(*mnk), H200)
    assert (plan.bm, plan.bn, plan.split_k, plan.n_blocks) == (64, bn, 1, blocks), plan.short()
    assert "(rule 39)" in explain(_fp8(*mnk), H200).text()  # (the rule's plan, not one another rule made)


@pytest.mark.parametrize("mnk", LEFT_FP8)
def test_fp8_is_not_split(mnk: tuple[int, int, int]) -> None:
    plan = plan_schedule(_fp8(*mnk), H200)
    assert (plan.bm, plan.bn, plan.split_k) == (64, 64, 1), plan.short()
    promoted = GemmSpec(*mnk, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                        accumulation=Accumulation.PROMOTED)  # (not rule 23's kind)
    assert narrow_rows64(promoted, H200, plan_schedule(promoted, H200)) is None


@pytest.mark.parametrize("mnk,bn,ranges,blocks", WON)
@pytest.mark.parametrize("device", [H200, H100_SXM])
def test_columns_of_rows64_where_they_won(mnk: tuple[int, int, int], bn: int, ranges: int, blocks: tuple[int, ...],
                                          device: object) -> None:
    plan = plan_schedule(GemmSpec(*mnk), device)  # type: ignore[arg-type]
    assert (plan.bm, plan.bn, plan.split_k, plan.n_blocks) == (64, bn, ranges, blocks), plan.short()
    assert plan.units(mnk[0], mnk[1]) <= 132


@pytest.mark.parametrize("mnk,bm,bn,blocks", LEFT)
def test_the_plan_stays_where_they_lost(mnk: tuple[int, int, int], bm: int, bn: int, blocks: tuple[int, ...]) -> None:
    spec = GemmSpec(*mnk)
    plan = plan_schedule(spec, H200)
    assert (plan.bm, plan.bn, plan.n_blocks, plan.split_k, plan.stream_k) == (bm, bn, blocks, 1, 0), plan.short()
    assert "(rule 39)" not in explain(spec, H200).text()


def test_what_the_rule_replaces_and_how_it_says_so() -> None:
    """The plans it replaced were others (so the tests above cannot pass without it), its L2 bound and its kinds,
    and `explain` names it."""
    spec = GemmSpec(1895, 136, 3704)
    before = plan_schedule(spec, H200, bm=64, bn=64)  # (rule 23's tile, 90 CTAs: the plan before the rule)
    assert narrow_rows64(spec, H200, before) == Column(64, 256, 4, (128, 16))
    assert read_rows(spec, before) == 30 * 3 * 128  # (30 row blocks x 3 columns x 64 + 64 rows)
    narrow = plan_schedule(GemmSpec(3794, 152, 1440), H200)  # (128x80: rule 31's blocks 64 + 16 of a 128 slot)
    assert read_rows(GemmSpec(3794, 152, 1440), narrow) == 30 * 2 * (128 + 80)  # (tile_n, not bn)
    # only whole tiles on one CTA each are replaced: not a split, stream-K, split-K tail, cluster or swap
    for forced in (dict(split_k=2), dict(stream_k=2), dict(tail_split=2), dict(swap_ab=True)):
        other = plan_schedule(spec, H200, bm=128, bn=128, **forced)  # type: ignore[arg-type]
        assert narrow_rows64(spec, H200, replace(other, bm=64, bn=64, grid=90)) is None, forced
    assert narrow_rows64(spec, H200, replace(before, cluster=2)) is None
    fp8 = _fp8(1895, 144, 3712)  # (fp8 takes no split: its whole columns do not beat the plan's 90 CTAs)
    assert narrow_rows64(fp8, H200, plan_schedule(fp8, H200)) is None
    assert narrow_rows64(GemmSpec(1895, 136, 3704, bias_dtype=DType.BF16), H200, before) is None
    assert narrow_rows64(GemmSpec(1895, 264, 3704), H200, before) is None  # (N past 256)
    split = plan_schedule(spec, H200, bm=128, bn=128, split_k=2)
    assert narrow_rows64(spec, H200, split) is None  # (a split plan is rules 25, 36 and 38's)
    assert plan_schedule(spec, H200, bm=64, bn=64).bn == 64  # (a forced tile stands)
    short = GemmSpec(1806, 88, 1672)  # (27 k-blocks: no split below NARROW64_SPLIT_MIN_KBLOCKS; three columns)
    assert narrow_rows64(short, H200, plan_schedule(short, H200, bm=64, bn=64)) == Column(64, 32, 1, ())
    text = explain(spec, H200).text()
    assert "one column, 4 ranges (rule 39)" in text and "30 row blocks x 1 column x 4 ranges in place of" in text
    text = explain(short, H200).text()
    assert "3 columns (rule 39)" in text and "29 row blocks x 3 columns in place of" in text
