"""Rule 21's constants stand next to the measurements they come from: scripts/fit_stream_k.py refits them from the
session-22 sweeps in docs/data, and the planner's must describe those measurements about as well as the fit does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from warploom.planner import SK_FIXUP_KBLOCKS, SK_SLOWDOWN

ROOT = Path(__file__).parents[2]


def _script() -> object:
    spec = importlib.util.spec_from_file_location("fit_stream_k", ROOT / "scripts" / "fit_stream_k.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fit_stream_k"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_planner_constants_describe_the_measurements() -> None:
    fit = _script()
    data = sorted((ROOT / "docs" / "data").glob("stream-k-variants-*-2026-11-26-session22.json"))
    eqs = fit.equations(data)  # type: ignore[attr-defined]
    assert len(eqs) >= 15
    slow, fixup = fit.fit(eqs)  # type: ignore[attr-defined]
    best = fit.mean_residual(eqs, slow, fixup)  # type: ignore[attr-defined]
    ours = fit.mean_residual(eqs, SK_SLOWDOWN, SK_FIXUP_KBLOCKS)  # type: ignore[attr-defined]
    assert best <= ours < best + 0.05, (slow, fixup, best, ours)  # within 0.05 rounds of the least-squares fit
    assert 0.5 * slow <= SK_SLOWDOWN <= 2 * slow and 0.5 * fixup <= SK_FIXUP_KBLOCKS <= 2 * fixup
