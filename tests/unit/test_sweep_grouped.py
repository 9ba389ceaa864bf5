"""scripts/sweep_grouped.py's CPU-checkable parts: its --case list, the grouped spec it plans per case (the one
warploom.scaled_grouped_mm plans), and its variant rows, where a plan the planner refuses or a kernel that fails
is a row with its error and the sweep goes on (the GPU measurement itself: `bash scripts/gpu.sh grouped`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_grouped as bench  # noqa: E402
import sweep_grouped as sweep  # noqa: E402

from warploom.checks_grouped import GroupedCall, grouped_call  # noqa: E402
from warploom.device import H100_SXM  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import Plan, plan_schedule  # noqa: E402
from warploom.reference import relative_error  # noqa: E402
from warploom.sim.grouped import simulate_grouped  # noqa: E402
from warploom.spec import Accumulation, Grouping, ScaleRecipe  # noqa: E402


def test_case_list_defaults_to_bf16_and_refuses_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep.parse_args([]).case == [sweep.Case.BF16]  # (existing calls sweep what they swept)
    args = sweep.parse_args(["--case", "fp8,fp8-fast", "--masked"])
    assert args.case == [sweep.Case.FP8, sweep.Case.FP8_FAST] and args.masked
    assert [(c.fp8, c.fast) for c in sweep.Case] == [(False, False), (True, False), (True, True)]
    with pytest.raises(SystemExit):
        sweep.parse_args(["--case", "fp8,e5m2"])
    assert "expected a comma list of bf16, fp8, fp8-fast, got 'fp8,e5m2'" in capsys.readouterr().err


def test_default_variants_per_case() -> None:
    """fp8's default variants hold no stream-K Plan fields (the planner's fp8 stream-K tile is 128 wide, which a
    field replaced on its 128x256 plan is not: module docstring); --variants replaces either list."""
    args = sweep.parse_args([])
    assert {"stream_k": 2} in sweep.variants_of(args, sweep.Case.BF16)
    assert not [v for v in sweep.variants_of(args, sweep.Case.FP8_FAST) if "stream_k" in v]
    assert sweep.variants_of(sweep.parse_args(["--variants", '[{"bn": 128}]']), sweep.Case.FP8) == [{"bn": 128}]


E, CAP, N, K = 4, 16, 64, 128  # (the CPU tests' small problem: E experts of CAP rows, or E * CAP rows grouped)
Operands = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def _call(case: sweep.Case, masked: bool = False) -> tuple[GroupedCall, Operands]:
    """The sweep's call of `case` on small CPU operands (`bench_grouped.operands`: a, w, scale_a, scale_b), as
    sweep_shape / sweep_masked build it; offs with an empty expert, bench_grouped's masked counts."""
    torch.manual_seed(0)
    ops = bench.operands(case.fp8, (E, CAP) if masked else (E * CAP,), E, N, K, device="cpu")
    a, w, sa, sb = ops
    b = w.transpose(1, 2)
    if masked:
        return grouped_call(a, b, None, bench.masked_counts(E, CAP), torch.bfloat16, sa, sb, case.fast), ops
    offs = torch.tensor([0, 10, 40, E * CAP], dtype=torch.int32)
    return grouped_call(a, b, offs, None, torch.bfloat16, sa, sb, case.fast), ops


@pytest.mark.parametrize("masked", [False, True])
def test_fp8_cases_plan_scaled_grouped_mms_spec(masked: bool) -> None:
    """fp8 is rowwise with promoted accumulation, fp8-fast with the tensor core's, bf16 out: the spec
    warploom.scaled_grouped_mm builds (it calls grouped_call with these arguments) and torch's use_fast_accum."""
    for case, acc in ((sweep.Case.FP8, Accumulation.PROMOTED), (sweep.Case.FP8_FAST, Accumulation.NATIVE)):
        spec = _call(case, masked)[0].spec
        assert (spec.scale, spec.accumulation, spec.out_dtype.torch) == (ScaleRecipe.ROWWISE, acc, torch.bfloat16)
        assert spec.grouping is (Grouping.MASKED if masked else Grouping.OFFSETS)
    assert _call(sweep.Case.BF16, masked)[0].spec.scale is ScaleRecipe.NONE


def test_a_refused_or_failing_variant_is_a_row_with_its_error() -> None:
    """Masked fp8 with stream-K forced and a split_k, which a grouped kernel cannot take, is refused by name: a row
    with the error, and the next variants (bm=128, stream-K's tile 128 wide; a kernel off torch's) still come."""
    spec = dataclasses.replace(_call(sweep.Case.FP8_FAST, masked=True)[0].spec, m=8 * 64, n=4096, k=7168, groups=8)
    measured: list[str] = []

    def measure(plan: Plan) -> tuple[float, float]:
        measured.append(plan.short())
        if len(measured) > 1:
            raise AssertionError("error 5.000e-01 against torch's")
        return 0.5, 1e-3

    rows = [sweep.measured(spec, H100_SXM, kw, {"stream_k": 2}, False, measure)
            for kw in ({"split_k": 2}, {"bm": 128}, {})]
    assert rows[0]["error"].startswith("UnsupportedError: grouped GEMMs") and "split_k" in rows[0]["error"]
    assert "plan" not in rows[0] and "ms" not in rows[0]
    assert (rows[1]["ms"], rows[1]["err"], rows[1]["forced"]) == (0.5, 1e-3, {"stream_k": 2})
    assert rows[1]["plan"] == measured[0] and measured[0].startswith("128x128x128") and "sk2" in measured[0]
    rows.append(sweep.measured(spec, H100_SXM, {"bm": 128}, {"stream_k": 2}, False, measure))
    assert rows[-1]["error"] == "AssertionError: error 5.000e-01 against torch's" and "plan" in rows[-1]


def test_fp8_stream_k_goes_forced() -> None:
    """M-grouped fp8 with --forced '{"stream_k": 2}': the planner's 128-wide stream-K tile, and a variant's
    {"stream_k": 4} replaced on it is the plan plan_schedule(stream_k=4) gives (so gpu.sh's fp8 stream-K line
    measures the planner's plans); the same field replaced on the unforced 128x256 plan is not."""
    plans: list[Plan] = []

    def measure(plan: Plan) -> tuple[float, float]:
        plans.append(plan)
        return 1.0, 0.0

    for case in (sweep.Case.FP8, sweep.Case.FP8_FAST):
        spec = dataclasses.replace(_call(case)[0].spec, m=8192, n=4096, k=7168, groups=8)
        plans.clear()
        rows = [sweep.measured(spec, H100_SXM, kw, {"stream_k": 2}, True, measure) for kw in ({}, {"stream_k": 4})]
        assert not [r for r in rows if "error" in r] and [p.bn for p in plans] == [128, 128]
        assert plans == [plan_schedule(spec, H100_SXM, stream_k=2), plan_schedule(spec, H100_SXM, stream_k=4)]
        assert dataclasses.replace(plan_schedule(spec, H100_SXM), stream_k=2) != plans[0]


@pytest.mark.parametrize("masked", [False, True])
def test_sweep_launch_arguments_give_torchs_product(masked: bool) -> None:
    """What checked_ms hands the grouped launcher (the call's a, b and bounds, then `launch_scales`) run on the CPU
    simulator, which takes them in the same order: the rowwise product of each expert's rows; and the dense
    baseline (`dense_call`) is the product of A with expert 1's weight, in each case's recipe."""
    for case in sweep.Case:
        call, (a, w, sa, sb) = _call(case, masked)
        a2 = a.reshape(E * CAP, K)
        scale_a = torch.ones(E * CAP) if sa is None else sa.reshape(-1)
        scale_b = torch.ones(E, N) if sb is None else sb
        out = torch.zeros(E * CAP, N, dtype=torch.bfloat16)
        simulate_grouped(build(call.spec, H100_SXM).module, call.a, call.b, call.bounds,
                         *sweep.launch_scales(sa, sb), out=out).raise_for_findings()
        ends = call.bounds.tolist()
        for g in range(E):
            lo, hi = (g * CAP, g * CAP + ends[g]) if masked else ([0, *ends][g], ends[g])
            want = a2[lo:hi].float() @ w[g].float().t() * scale_a[lo:hi, None] * scale_b[g]
            assert relative_error(out[lo:hi].float(), want) < 1e-3, (case, g)
        dense = sweep.dense_call(a2, w, None if sa is None else sa.reshape(-1), sb, case)()
        assert relative_error(dense.float(), a2.float() @ w[1].float().t() * scale_a[:, None] * scale_b[1]) < 1e-3


def test_baselines_are_checked_before_they_are_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's baselines beside torch's op (the bf16 loop of torch.mm, warploom's dense kernel) are each checked
    before timing, as the variants are: a loop whose rows are torch's, a dense product against A times expert 1's
    weight in fp32 (fp8: dequantized); a wrong one is an error in the row, not a time."""
    timed: list[object] = []
    monkeypatch.setattr(sweep, "time_graph", lambda fn: timed.append(fn) or 0.25)
    call, (a, w, sa, sb) = _call(sweep.Case.FP8)
    a2 = a.reshape(E * CAP, K)
    sa2 = sa.reshape(-1) if sa is not None else None
    dense = sweep.dense_call(a2, w, sa2, sb, sweep.Case.FP8)
    base: dict[str, object] = {}
    sweep.checked_baseline(base, "dense", dense, sweep.dense_reference(a2, w, sa2, sb))
    assert base["dense_ms"] == 0.25 and base["dense_err"] < 1e-3 and timed == [dense]
    base = {}
    sweep.checked_baseline(base, "dense", lambda: torch.zeros(E * CAP, N), sweep.dense_reference(a2, w, sa2, sb))
    assert "dense_ms" not in base and "against" in base["dense_error"] and len(timed) == 1

    ab, wb, _, _ = bench.operands(False, (E * CAP,), E, N, K, device="cpu")
    offs = torch.tensor([0, 10, 40, E * CAP], dtype=torch.int32)
    loop = bench.torch_loop(ab, wb, offs, device="cpu")
    want = torch.cat([ab[lo:hi].float() @ wb[g].float().t() for g, (lo, hi) in enumerate([(0, 0), (0, 10), (10, 40),
                                                                                           (40, E * CAP)])])
    sweep.checked_baseline(base, "loop", loop, want)
    assert base["loop_ms"] == 0.25 and base["loop_err"] < 1e-2
