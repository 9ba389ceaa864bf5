"""Planner rules 33 (rule 23's 64-row tiles 16 or 32 wide: `latency_width`) and 34 (a ring no deeper than the k-loop:
`ring_to_k`): the choices the H200 measurements set (docs/decisions/rule-33-latency-width.md, rule-34-ring-depth.md),
what each leaves alone, and scripts/fit_width.py over the measured sweeps. The narrow tiles' numerics are in
tests/sim (the planner's plans at random shapes) and tests/gpu/test_narrow_gpu.py. CPU only."""

from __future__ import annotations

import contextlib
import glob
import io
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.latency import WIDTH_MAX_TILES_OF_SMS, latency_width, width_us
from warploom.planning.sm90.ring import ring_to_k

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import fit_width  # noqa: E402


@pytest.mark.parametrize(("mnk", "width"), [
    ((141, 136, 1624), 16), ((547, 64, 608), 16), ((142, 336, 1208), 16), ((88, 80, 560), 16),
    ((2232, 80, 904), 32), ((284, 312, 984), 32), ((240, 328, 624), 32),
    # kept 64 wide: modeled no faster, or narrow tiles past 80% of the SMs (596x416x152: 130 tiles of 64x32 lost
    # 4.3%). (1806x88x1672, where 64x32 ran 14% faster, is rule 39's now: tests/unit/test_narrow_rows64.py.)
    ((596, 416, 152), 64), ((401, 496, 320), 64),
])
def test_width_measured_choices(mnk: tuple[int, int, int], width: int) -> None:
    spec = GemmSpec(*mnk)
    assert latency_width(spec, H200) == width
    plan = plan_schedule(spec, H200)
    assert (plan.bm, plan.bn, plan.split_k) == (64, width, 1)


def test_width_narrow_tiles_fill_at_most_the_cap() -> None:
    for m, n, k in [(141, 136, 1624), (2232, 80, 904), (596, 416, 152), (1000, 1000, 100), (64 * 9, 16 * 15, 1000)]:
        spec = GemmSpec(m, n, k)
        w = latency_width(spec, H200)
        if w < 64:
            assert math.ceil(m / 64) * math.ceil(n / w) <= H200.sm_count * WIDTH_MAX_TILES_OF_SMS


def test_width_is_a_priced_choice() -> None:
    spec = GemmSpec(141, 136, 1624)
    assert width_us(spec, 16) < width_us(spec, 32) < width_us(spec, 64)
    # the explanation names the widths it priced
    chosen = [c for c in explain(spec, H200).candidates if "rule 33" in c.why and c.chosen]
    assert [c.tile for c in chosen] == ["64x16"]


def test_width_leaves_other_kinds_alone() -> None:
    fp8 = GemmSpec(141, 144, 1664, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE)
    assert latency_width(fp8, H200) == 64  # fp8 not measured
    assert plan_schedule(fp8, H200).bn in (64, 128)
    # a forced tile stands
    assert plan_schedule(GemmSpec(141, 136, 1624), H200, bm=64, bn=64).bn == 64
    # rule 25's split keeps its 64x64 tiles (459x112x2632: 6 ranges ran 1.10x torch, 64x16 whole 0.92x)
    split = plan_schedule(GemmSpec(459, 112, 2632), H200)
    assert (split.bn, split.split_k) == (64, 6)


@pytest.mark.parametrize(("mnk", "stages"), [
    ((43, 216, 104), 2),  # rule 16's decode tile: 12 stages for 2 k-blocks before
    ((253, 136, 104), 2),
    ((5113, 120, 200), 4),
    ((1444, 1288, 232), 4),
    ((611, 88, 368), 6),
])
def test_ring_cut_to_the_k_blocks(mnk: tuple[int, int, int], stages: int) -> None:
    assert plan_schedule(GemmSpec(*mnk), H200).stages == stages


def test_ring_left_deep_where_it_holds_the_next_unit() -> None:
    # several tiles a CTA: the ring holds the next tile's first k-blocks
    many = GemmSpec(8192, 8192, 128)
    plan = plan_schedule(many, H100_SXM)
    assert plan.units(many.m, many.n) > plan.grid and plan.stages > 2
    # a forced depth stands, and a stream-K plan keeps its ring
    assert plan_schedule(GemmSpec(253, 136, 104), H200, bm=64, bn=16, stages=6).stages == 6
    spec = GemmSpec(656, 8048, 5280)
    sk = plan_schedule(spec, H100_SXM, stream_k=2, bm=128, bn=256)
    assert ring_to_k(spec, replace(sk, stages=6)).stages == 6


def test_ring_split_k_ranges_count_their_own_k_blocks() -> None:
    spec = GemmSpec(459, 112, 2632)  # 42 k-blocks in 6 ranges: 7 each
    plan = plan_schedule(spec, H200)
    assert plan.split_k == 6 and plan.stages <= 7
    assert ring_to_k(spec, replace(plan, stages=12)).stages == 7


def test_fit_width_prices_and_picks_the_measured_widths(monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/fit_width.py over the session-36 sweeps: the constants price every measured plan within an rms of 10%
    and pick a width within 3% of the fastest at 38 of the 40 shapes measured (the misses: 87x640x72,
    1806x88x1672)."""
    paths = sorted(glob.glob(str(ROOT / "docs" / "data" / "latency-width-*.json")))
    table = fit_width.rows(paths)
    assert len(table) >= 90
    assert math.sqrt(sum((r.model_us / r.us - 1) ** 2 for r in table) / len(table)) < 0.10
    agree, total, misses = fit_width.picks(table)
    assert total >= 40 and agree >= 38, misses
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        monkeypatch.setattr(sys, "argv", ["fit_width.py", *paths])
        fit_width.main()
    assert "shapes: the model's pick" in out.getvalue()
