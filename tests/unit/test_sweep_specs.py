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


def test_plan_changes_lines_force_the_old_plan_exactly(tmp_path: Path) -> None:
    """scripts/plan_changes.py: a shape whose plan differs becomes a comment and a sweep line whose first variant,
    the old plan's differing fields replaced after planning (sweep_plans' "plan" entry), is the old plan itself."""
    import dataclasses

    import plan_changes

    from warploom.device import H200
    from warploom.planner import plan_schedule
    from warploom.spec import GemmSpec

    spec = GemmSpec(1895, 136, 3704)
    record = plan_changes.record

    old, new = plan_schedule(spec, H200, bm=128, bn=128), plan_schedule(spec, H200)
    assert old != new
    key = "matmul_bf16|1895x136x3704"
    lines = plan_changes.spec_lines({key: record(old), "matmul_bf16|64x64x64": record(new)},
                                    {key: record(new), "matmul_bf16|64x64x64": record(new)})
    assert lines[0] == f"# {old.short()} -> {new.short()}" and len(lines) == 2
    f = tmp_path / "specs.txt"
    f.write_text("\n".join(lines) + "\n")
    ((case, size, variants),) = sweep_plans.read_specs(str(f))
    assert (case, size) == ("bf16", "1895x136x3704") and variants[1] == {}
    forced = {k: v for k, v in variants[0].items() if k != "plan"}
    assert dataclasses.replace(plan_schedule(spec, H200, **forced), **variants[0]["plan"]) == old


def test_plan_changes_dump_runs_in_a_tree() -> None:
    """The script plans in both trees through its `_DUMP` snippet: run here on the work tree, it gives every zoo shape
    of the op with its plan's name and fields, and a tree against itself changes nothing."""
    import plan_changes

    from warploom.benchsuite.shapes import zoo_shapes

    root = str(Path(__file__).resolve().parents[2])
    got = plan_changes.plans(root, ["scaled_mm_fp8_blockwise"])
    assert len(got) == len(zoo_shapes())
    key, first = next(iter(got.items()))
    assert key.startswith("scaled_mm_fp8_blockwise|") and {"short", "fields"} <= set(first)
    assert first["fields"]["bm"] in (64, 128, 192, 256)
    assert plan_changes.spec_lines(got, got) == []
