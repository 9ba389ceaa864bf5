"""The timeline plot: one row per partition and one async lane, waits in their own colour."""

from __future__ import annotations

from pathlib import Path

import pytest

from warploom.device import H100_SXM
from warploom.kernel import build
from warploom.planner import Plan
from warploom.reference import make_inputs
from warploom.sim import draw_timeline, simulate
from warploom.spec import GemmSpec


def test_draw_timeline(tmp_path: Path) -> None:
    spec = GemmSpec(130, 120, 150)
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    m = build(spec, H100_SXM, Plan(bm=64, bn=64, bk=32, stages=3, consumer_warps=4, group_m=2, grid=2)).module
    res = simulate(m, x.a, x.b)
    out = draw_timeline(res, tmp_path / "timeline.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    with pytest.raises(ValueError, match="record=True"):
        draw_timeline(simulate(m, x.a, x.b, record=False), tmp_path / "none.png")
