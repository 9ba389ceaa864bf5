"""The autotune loop with a fake device: disqualification, poisoning, timing, the cache, env vars, printing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Plan, ScaleRecipe
from warploom.planner import plan_schedule
from warploom.tune import cache as cache_mod
from warploom.tune import settings
from warploom.tune.accuracy import mismatch, scale_free_error
from warploom.tune.autotune import Harness, TuneError, autotune
from warploom.tune.cache import Cache, StaleCacheWarning
from warploom.tune.candidates import candidates
from warploom.tune.key import CacheKey
from warploom.tune.result import Source, TuneResult

SPEC = GemmSpec(1024, 2048, 128)  # (more 64x64 tiles than SMs: rule 23 leaves it to the tile score)
PLANS = [c.plan for c in candidates(SPEC, H100_SXM, limit=4)]
# The fakes' outputs: small, as the loop never looks at their size (a real harness's are (SPEC.m, SPEC.n)).
M, N = 16, 32


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(settings.CACHE_DIR_ENV, str(tmp_path))
    for env in (settings.AUTOTUNE_ENV, settings.CLEAR_ENV, settings.VERBOSE_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(cache_mod, "_cleared", set())
    return tmp_path


class FakeDevice:
    """Runs each plan as told: "right" writes the reference, "wrong" a 2% error, "nothing" writes nothing,
    "raise" fails to build, "drift" is right once and wrong when run again (as under the timer). Records
    which plans were launched and timed."""

    def __init__(self, behaviour: dict[Plan, tuple[str, float]], ref: torch.Tensor | None = None) -> None:
        torch.manual_seed(0)
        self.ref = torch.randn(M, N, dtype=torch.float64) if ref is None else ref
        self.out = torch.empty(M, N, dtype=torch.bfloat16)
        self.behaviour = behaviour
        self.launched: list[Plan] = []
        self.timed: list[Plan] = []

    def launch(self, plan: Plan) -> Callable[[], object]:
        self.launched.append(plan)
        kind, _ = self.behaviour[plan]
        if kind == "raise":
            raise RuntimeError("ptxas: out of registers\nmore detail")
        runs = [0]

        def call() -> None:
            runs[0] += 1
            if kind == "right" or (kind == "drift" and runs[0] == 1):
                self.out.copy_(self.ref)
            elif kind in ("wrong", "drift"):
                self.out.copy_(self.ref * 1.02 + 0.5)
        return call

    def time(self, call: Callable[[], object]) -> float:
        plan = self.launched[-1]
        self.timed.append(plan)
        for _ in range(3):
            call()
        return self.behaviour[plan][1]

    def harness(self) -> Harness:
        return Harness(self.launch, (self.out,), (self.ref,), self.time)


def run(dev: FakeDevice, **kw: Any) -> TuneResult:
    return autotune(SPEC, H100_SXM, dev.harness(), plans=list(dev.behaviour), progress=False, **kw)


def test_the_plans_are_distinct() -> None:
    assert len(PLANS) == 4 and len(set(PLANS)) == 4


def test_the_fastest_correct_candidate_wins() -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.7), PLANS[2]: ("right", 0.9),
                      PLANS[3]: ("right", 0.8)})
    r = autotune(SPEC, H100_SXM, dev.harness(), limit=4, progress=False)
    assert r.source is Source.TUNED and r.plan == PLANS[1]
    assert [t.plan for t in r.trials] == PLANS  # the cost model's candidates, the default first
    assert [t.ms for t in r.trials] == [1.0, 0.7, 0.9, 0.8]
    assert dev.timed == PLANS


def test_a_fast_wrong_candidate_is_disqualified_and_the_next_fastest_wins() -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("wrong", 0.1), PLANS[2]: ("right", 0.6),
                      PLANS[3]: ("right", 0.8)})
    r = run(dev)
    assert r.plan == PLANS[2]
    bad = r.trials[1]
    assert bad.ms is None and "wrong output" in (bad.error or "") and "elements off by more than" in (bad.error or "")
    assert PLANS[1] not in dev.timed  # never timed


def test_outputs_are_poisoned_so_a_candidate_that_writes_nothing_fails() -> None:
    # The default runs first and leaves a correct output behind; "nothing" would pass on it unpoisoned.
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("nothing", 0.1), PLANS[2]: ("right", 0.9)})
    r = run(dev)
    assert r.plan == PLANS[2]
    assert "NaN or inf where the reference is finite" in (r.trials[1].error or "")
    assert PLANS[1] not in dev.timed


def test_a_candidate_that_raises_is_disqualified_with_its_reason() -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("raise", 0.1)})
    r = run(dev)
    assert r.plan == PLANS[0]
    assert r.trials[1].error == "raised RuntimeError: ptxas: out of registers"


def test_a_candidate_wrong_only_under_the_timer_is_disqualified() -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("drift", 0.1)})
    r = run(dev)
    assert r.plan == PLANS[0]
    assert (r.trials[1].error or "").startswith("wrong output after timing")


def test_ties_and_wins_within_noise_go_to_the_default() -> None:
    assert run(FakeDevice({PLANS[0]: ("right", 0.5), PLANS[1]: ("right", 0.5)})).plan == PLANS[0]
    within = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.995)}
    assert run(FakeDevice(within), use_cache=False).plan == PLANS[0]  # 0.5% faster: noise
    assert run(FakeDevice(within), use_cache=False, min_gain=0.0).plan == PLANS[1]
    assert run(FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.98)}), use_cache=False).plan == PLANS[1]


def test_no_correct_candidate_raises_listing_each_failure() -> None:
    dev = FakeDevice({PLANS[0]: ("wrong", 1.0), PLANS[1]: ("raise", 0.5), PLANS[2]: ("nothing", 0.1)})
    with pytest.raises(TuneError) as e:
        run(dev)
    text = str(e.value)
    for p in PLANS[:3]:
        assert p.short() in text
    assert "WARPLOOM_AUTOTUNE=0" in text
    assert not list((Path(settings.cache_root()) / "autotune").glob("*.json"))  # nothing cached


def test_a_second_call_hits_the_cache_and_times_nothing(cache_dir: Path) -> None:
    behaviour = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}
    first = run(FakeDevice(behaviour))
    dev = FakeDevice(behaviour)
    second = run(dev)
    assert second.source is Source.CACHE and second.plan == PLANS[1]
    assert second.trials == first.trials
    assert dev.timed == [] and dev.launched == [PLANS[1]]  # one checked run of the cached plan


def test_strides_are_part_of_the_key() -> None:
    behaviour = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}
    run(FakeDevice(behaviour), strides=((128, 1), (1, 128)))
    dev = FakeDevice(behaviour)
    assert run(dev, strides=((136, 1), (1, 128))).source is Source.TUNED
    assert dev.timed == PLANS[:2]


def test_a_cached_plan_that_now_computes_wrong_is_retuned() -> None:
    run(FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}))
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("wrong", 0.5)})
    with pytest.warns(StaleCacheWarning, match="wrong output"):
        r = run(dev)
    assert r.source is Source.TUNED and r.plan == PLANS[0]
    cached = Cache().load(CacheKey(SPEC, H100_SXM))
    assert cached is not None and cached.plan == PLANS[0]


def test_a_truncated_cache_file_is_retuned_and_replaced() -> None:
    behaviour = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}
    run(FakeDevice(behaviour))
    path = Cache().path(CacheKey(SPEC, H100_SXM))
    path.write_text(path.read_text()[:40])
    dev = FakeDevice(behaviour)
    with pytest.warns(StaleCacheWarning, match="not valid JSON"):
        assert run(dev).source is Source.TUNED
    assert dev.timed == PLANS[:2]
    assert run(FakeDevice(behaviour)).source is Source.CACHE


def test_autotune_off_returns_the_default_untried(monkeypatch: pytest.MonkeyPatch, cache_dir: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(settings.AUTOTUNE_ENV, "0")
    dev = FakeDevice({PLANS[0]: ("wrong", 1.0), PLANS[1]: ("right", 0.5)})
    r = run(dev, verbose=True)
    assert f"{r.plan.short()} (default)" in capsys.readouterr().err
    assert r.source is Source.DEFAULT and r.plan == plan_schedule(SPEC, H100_SXM)
    assert dev.launched == [] and not (cache_dir / "autotune").exists()


def test_the_clear_env_var_forces_a_retune(monkeypatch: pytest.MonkeyPatch) -> None:
    behaviour = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}
    run(FakeDevice(behaviour))
    monkeypatch.setenv(settings.CLEAR_ENV, "1")
    dev = FakeDevice(behaviour)
    assert run(dev).source is Source.TUNED and dev.timed == PLANS[:2]
    assert run(FakeDevice(behaviour)).source is Source.CACHE  # cleared once only


def test_use_cache_false_neither_reads_nor_writes(cache_dir: Path) -> None:
    behaviour = {PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)}
    run(FakeDevice(behaviour), use_cache=False)
    assert not list(cache_dir.rglob("*.json"))


def test_verbose_prints_the_chosen_schedule_and_the_table(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("wrong", 0.1), PLANS[2]: ("right", 0.5)})
    run(dev, verbose=True)
    err = capsys.readouterr().err
    assert f"autotune {SPEC.short()}: {PLANS[2].short()} (tuned)" in err
    assert f"* {PLANS[2].short()}" in err and "2.000x" in err and "disqualified: wrong output" in err
    monkeypatch.setenv(settings.VERBOSE_ENV, "1")
    run(FakeDevice(dev.behaviour))
    assert f"{PLANS[2].short()} (cache)" in capsys.readouterr().err
    run(FakeDevice(dev.behaviour), verbose=False)
    assert capsys.readouterr().err == ""


def test_the_progress_bar_runs() -> None:
    dev = FakeDevice({PLANS[0]: ("right", 1.0), PLANS[1]: ("right", 0.5)})
    r = autotune(SPEC, H100_SXM, dev.harness(), plans=PLANS[:2], progress=True)
    assert r.plan == PLANS[1]


def test_an_empty_problem_is_not_tuned() -> None:
    spec = dataclasses.replace(SPEC, k=0)
    dev = FakeDevice({PLANS[0]: ("right", 1.0)})
    r = autotune(spec, H100_SXM, dev.harness(), progress=False)
    assert r.source is Source.DEFAULT and dev.launched == []


# --- the accuracy check ----------------------------------------------------------------------------------------

def test_bf16_rounding_passes_and_real_errors_fail() -> None:
    torch.manual_seed(1)
    ref = torch.randn(128, 64, dtype=torch.float64) * 30
    assert mismatch(ref.to(torch.bfloat16), ref, fp8_inputs=False) is None
    assert mismatch(ref.half(), ref, fp8_inputs=False) is None
    assert mismatch(ref.float(), ref, fp8_inputs=False) is None
    off = ref.clone()
    off[64:, 32:] = 0  # one wrong tile quadrant
    assert "elements off by more than" in (mismatch(off.to(torch.bfloat16), ref, fp8_inputs=False) or "")
    one = ref.clone()
    one[5, 7] += 3  # one element, 10% of the typical magnitude
    assert mismatch(one.to(torch.bfloat16), ref, fp8_inputs=False) is not None
    assert "shape" in (mismatch(ref[:, :32].to(torch.bfloat16), ref, fp8_inputs=False) or "")


def test_nan_only_counts_where_the_reference_is_finite() -> None:
    ref = torch.ones(4, 4, dtype=torch.float64)
    out = ref.clone()
    out[0, 0] = float("nan")
    assert "1 of 16 elements are NaN" in (mismatch(out, ref, fp8_inputs=False) or "")
    ref[0, 0] = float("nan")  # e.g. a fused log of a negative number
    assert mismatch(out, ref, fp8_inputs=False) is None


def test_the_fp8_metric_is_scale_free() -> None:
    torch.manual_seed(2)
    ref = torch.randn(64, 64, dtype=torch.float64)
    noisy = ref * (1 + 0.01 * torch.randn_like(ref))  # fast accumulation's size of error
    assert scale_free_error(noisy, ref) < 1e-3
    assert mismatch(noisy.to(torch.bfloat16), ref, fp8_inputs=True) is None
    assert "scale-free error" in (mismatch((2 * ref).to(torch.bfloat16), ref, fp8_inputs=True) or "")
    assert mismatch(ref.t().contiguous(), ref, fp8_inputs=True) is not None
    assert scale_free_error(torch.zeros(3), torch.zeros(3)) == 0.0


def test_an_fp8_spec_uses_the_scale_free_check() -> None:
    spec = GemmSpec(M, N, 128, DType.E4M3, DType.E4M3, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                    Accumulation.PROMOTED)
    plans = [c.plan for c in candidates(spec, H100_SXM, limit=2)]
    torch.manual_seed(3)
    ref = torch.randn(M, N, dtype=torch.float64)
    # 1% elementwise noise fails bf16's tolerance but is within fp8's scale-free bound.
    noisy = ref * (1 + 0.01 * torch.randn_like(ref))
    assert mismatch(noisy.to(torch.bfloat16), ref, fp8_inputs=False) is not None
    out = torch.empty(M, N, dtype=torch.bfloat16)
    timed: list[Plan] = []

    def launch(plan: Plan) -> Callable[[], object]:
        return lambda: out.copy_(noisy)

    def time(call: Callable[[], object]) -> float:
        timed.append(plans[len(timed)])
        return 1.0

    r = autotune(spec, H100_SXM, Harness(launch, (out,), (ref,), time), plans=plans, progress=False)
    assert all(t.ok for t in r.trials) and timed == plans


def test_the_harness_needs_a_reference_per_output() -> None:
    out = torch.empty(2)
    with pytest.raises(ValueError, match="one reference per output"):
        Harness(lambda p: lambda: None, (out, out), (out,), lambda c: 1.0)
