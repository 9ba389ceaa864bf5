"""`explain` names one chosen candidate, the final plan's (`planning/trace.py`): where a later rule replaces the plan an
earlier one took (rule 35's 64x128 tiles in one wave in place of rule 25's split, rule 36's one column in place of
rule 23's tiles at rule 33's width), the earlier row says it was replaced and by which rule. CPU only."""

from __future__ import annotations

import pytest

from warploom import H100_SXM, H200, DType, GemmSpec, ScaleRecipe
from warploom.benchsuite.shapes import ZOO
from warploom.device import DeviceInfo
from warploom.planner import explain
from warploom.planning.trace import Candidate, collecting, note, overrule


@pytest.mark.parametrize(("mnk", "rule", "replaced"), [
    ((494, 1528, 2496), 35, "128x128  split-K, 2 ranges"),  # rule 25 split 128x128 tiles' K in two
    ((2090, 96, 7792), 36, "64x64    latency tile width"),  # rule 23's 64-row tiles, 64 wide by rule 33
])
def test_only_the_overriding_rules_plan_is_chosen(mnk: tuple[int, int, int], rule: int, replaced: str) -> None:
    e = explain(GemmSpec(*mnk), H200)
    lines = e.text().splitlines()
    chosen = [line for line in lines if "chosen" in line]
    assert len(chosen) == 1 and f"(rule {rule})" in chosen[0], e.text()
    assert e.chosen is not None and f"(rule {rule})" in e.chosen.kind
    assert e.chosen.tile == f"{e.plan.bm}x{e.plan.tile_n}", (e.chosen, e.plan.short())
    row = next(line for line in lines if line.lstrip().startswith(replaced))
    assert row.endswith(f"; replaced by {e.chosen.tile} {e.chosen.kind}"), e.text()


@pytest.mark.parametrize("device", [H100_SXM, H200])
def test_every_explanation_chooses_one_plan(device: DeviceInfo) -> None:
    """Over the zoo's first 60 shapes, bf16 and fp8 rowwise: exactly one candidate stands chosen (the search's winner,
    or the rule's that replaced it), of the plan's tile."""
    for shape in ZOO[:60]:
        for spec in (GemmSpec(shape.m, shape.n, shape.k),
                     GemmSpec(shape.m, shape.n, -(-shape.k // 16) * 16, DType.E4M3, DType.E4M3, DType.BF16,
                              scale=ScaleRecipe.ROWWISE)):
            e = explain(spec, device)
            final = [c for c in e.candidates if c.final]
            assert len(final) == 1, e.text()
            assert final[0].tile in (f"{e.plan.bm}x{e.plan.bn}", f"{e.plan.bm}x{e.plan.tile_n}"), e.text()


def test_a_later_choice_replaces_the_earlier() -> None:
    trace: list[Candidate] = []
    with collecting(trace):
        note("128x128", "whole tiles", 2.0, "passed over")
        note("128x128", "split-K, 2 ranges", 1.0, "taken", chosen=True)
        overrule("64x128", "one wave (rule 35)", "measured faster")
    passed, split, wave = trace
    assert passed.verdict == "" and wave.verdict == "chosen" and wave.score < split.score
    assert split.replaced_by == wave and split.verdict == "replaced by 64x128 one wave (rule 35)"
    with pytest.raises(ValueError, match="expects chosen=True"):
        Candidate("64x64", "latency tile", 1.0, "", replaced_by=wave)
