"""scripts/sanitize.py's cases (the GPU sanitizer sweep, `scripts/gpu.sh sanitize`) each still plan the schedule
family they name: a planner change must not turn the sweep into copies of one schedule. CPU only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.kernel import build

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sanitize  # noqa: E402


@pytest.mark.parametrize("name", list(sanitize.CASES))
def test_case_plans_its_family_and_builds(name: str) -> None:
    case = sanitize.CASES[name]
    with emitting_for("3.9" if case.needs_multicast else "3.6"):
        plan = sanitize.plan_of(name, H100_SXM)  # (raises if the family changed)
        kern = build(case.spec, H100_SXM, plan)
    assert kern.spec.m == case.shape[0] and kern.spec.n == case.shape[1] and kern.spec.k == case.shape[2]


def test_the_cases_cover_every_family() -> None:
    plans = {}
    for name, case in sanitize.CASES.items():
        with emitting_for("3.9" if case.needs_multicast else "3.6"):
            plans[name] = sanitize.plan_of(name, H100_SXM)
    ps = plans.values()
    assert any(p.pingpong for p in ps) and any(p.split_k > 1 for p in ps) and any(p.tail_split > 1 for p in ps)
    assert any(p.stream_k for p in ps) and any(p.swap_ab for p in ps) and any(p.cluster > 1 for p in ps)
    recipes = {sanitize.CASES[n].spec.scale for n in plans}
    assert len(recipes) >= 5  # none, tensorwise, rowwise, blockwise, MX


# (fp8_fused_quantize launches through Kernel.run, which needs a GPU; tests/sim covers its kernel)
@pytest.mark.parametrize("name", [n for n in sanitize.SPECIAL if n != "fp8_fused_quantize"])
def test_public_api_cases_are_right_on_the_simulator(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases run through warploom's public calls compute, on the CPU simulator, what their references say (so
    a wrong reference cannot pass as a sanitizer finding on the GPU, nor a right one hide a wrong kernel)."""
    monkeypatch.setattr(sanitize, "DEVICE", "cpu")
    # (bf16_grouped_stream_k's 4300x2048x1024, 1.8e10 FLOPs, is what the sanitizers ran on the H100: about 8 s here)
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", str(2 * 10 ** 10))
    assert sanitize.SPECIAL[name]() < sanitize.TOLERANCE
