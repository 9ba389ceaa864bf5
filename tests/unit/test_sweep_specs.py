"""scripts/sweep_plans.py --specs: per-shape variant lists read from a file (CPU only: the parsing, not the timing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sweep_plans  # noqa: E402


def test_specs_lines_become_jobs(tmp_path: Path) -> None:
    f = tmp_path / "specs.txt"
    f.write_text('# a comment\nbf16|1895x136x3704|[{}, {"bm": 64, "bn": 256, "split_k": 4}]\n\n'
                 'fp8|3794x160x1440|[{}]\n')
    assert sweep_plans.read_specs(str(f)) == [
        ("bf16", "1895x136x3704", [{}, {"bm": 64, "bn": 256, "split_k": 4}]), ("fp8", "3794x160x1440", [{}])]


@pytest.mark.parametrize("line", ["bf17|64x64x64|[{}]", "bf16|64x64x64", 'bf16|64x64x64|{"bm": 64}'])
def test_a_bad_line_is_named(tmp_path: Path, line: str) -> None:
    f = tmp_path / "specs.txt"
    f.write_text(line + "\n")
    with pytest.raises(ValueError, match="line 1: expected"):
        sweep_plans.read_specs(str(f))
