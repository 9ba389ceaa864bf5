"""Real planner output must simulate clean and match a torch fp32 reference.

Sweeps stages 1-6 against k-step counts at the edges of the ring (1, S-1, S, S+1, 2S+1), with several
tiles per persistent CTA (a grid of 2 over 6 tiles), shapes that are not tile multiples, outputs
poisoned with NaN, and every dtype and recipe; plus real planner plans on small problems.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import Plan, plan_schedule
from warploom.sim import FindingKind, SimResult, check_protocol, simulate
from warploom.sim.reference import Inputs, make_inputs, reference, relative_error
from warploom.spec import Accumulation, BLayout, GemmSpec, ScaleRecipe

# 130 x 120 is 3 x 2 tiles of 64 x 64: a grid of 2 gives each CTA 3 tiles, the last row and column ragged.
M, N = 130, 120
STAGES = range(1, 7)

def k_steps(stages: int) -> list[int]:
    return sorted({1, stages - 1, stages, stages + 1, 2 * stages + 1} - {0})


def small_plan(stages: int, bk: int, bm: int = 64, bn: int = 64) -> Plan:
    return Plan(bm=bm, bn=bn, bk=bk, stages=stages, consumer_warps=4 * (bm // 64), group_m=2, grid=2)


def spec_of(dtype: DType, k: int, *, out: DType = DType.BF16, scale: ScaleRecipe = ScaleRecipe.NONE,
            acc: Accumulation = Accumulation.NATIVE, bias: DType | None = None,
            layout: BLayout = BLayout.K_MAJOR, b_dtype: DType | None = None, m: int = M, n: int = N) -> GemmSpec:
    return GemmSpec(m, n, k, dtype, b_dtype or dtype, out, layout, scale, acc, bias)


def run(spec: GemmSpec, plan: Plan, seed: int = 0) -> tuple[SimResult, Inputs]:
    """Simulate under schedule `seed` (the inputs are the same for every seed)."""
    module = build(spec, H100_SXM, plan).module
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    out = torch.full((spec.m, spec.n), float("nan"), dtype=spec.out_dtype.torch)  # poison: unwritten shows
    return simulate(module, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed, out=out), x


def assert_matches(spec: GemmSpec, res: SimResult, x: Inputs) -> None:
    assert res.ok, res.report.summary()
    out = res.output
    assert not out.isnan().any(), "some output elements were never written"
    ref = reference(x)
    if spec.is_fp8:
        err = relative_error(out.float(), ref)
        assert err < 1e-3, f"fp8 relative error {err:.2e}"
    else:
        tol = {DType.BF16: (1e-2, 1e-2), DType.FP16: (2e-3, 2e-3), DType.FP32: (1e-5, 1e-4)}[spec.out_dtype]
        torch.testing.assert_close(out.float(), ref, rtol=tol[0], atol=tol[1])


CASES = [pytest.param(s, ks, id=f"s{s}-k{ks}") for s in STAGES for ks in k_steps(s)]


@pytest.mark.parametrize("stages,ks", CASES)
def test_bf16_native_stages_by_k_steps(stages: int, ks: int) -> None:
    spec = spec_of(DType.BF16, ks * 32 - 5)  # K not a multiple of BK = 32
    res, x = run(spec, small_plan(stages, bk=32))
    assert_matches(spec, res, x)


@pytest.mark.parametrize("stages,ks", CASES)
def test_fp8_rowwise_promoted_stages_by_k_steps(stages: int, ks: int) -> None:
    spec = spec_of(DType.E4M3, ks * 64 - 16, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED)
    res, x = run(spec, small_plan(stages, bk=64))
    assert_matches(spec, res, x)


@pytest.mark.parametrize("stages,ks", [(2, 5), (3, 3), (4, 9)], ids=lambda v: str(v))
@pytest.mark.parametrize("spec_kw", [
    dict(dtype=DType.BF16),
    dict(dtype=DType.BF16, layout=BLayout.N_MAJOR),
    dict(dtype=DType.FP16, out=DType.FP16),
    dict(dtype=DType.FP16, out=DType.FP32, layout=BLayout.N_MAJOR),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.TENSORWISE),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.TENSORWISE, acc=Accumulation.PROMOTED),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE, bias=DType.BF16),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.FP32, out=DType.FP16),
    dict(dtype=DType.E4M3, b_dtype=DType.E5M2, scale=ScaleRecipe.TENSORWISE, bias=DType.BF16, out=DType.FP32),
], ids=lambda kw: "-".join(f"{v.value if hasattr(v, 'value') else v}" for v in kw.values()))
def test_dtypes_and_recipes(spec_kw: dict, stages: int, ks: int) -> None:
    fp8 = spec_kw["dtype"].is_fp8
    bk = 64 if fp8 else 32
    spec = spec_of(k=ks * bk - (16 if fp8 else 3), **spec_kw)
    res, x = run(spec, small_plan(stages, bk=bk))
    assert_matches(spec, res, x)


@pytest.mark.parametrize("grid,group_m", [(1, 1), (3, 1), (3, 3), (4, 8)])
def test_persistent_grids_and_rasters(grid: int, group_m: int) -> None:
    spec = spec_of(DType.BF16, 4 * 32 - 1, m=200, n=330)  # 4 x 6 tiles
    res, x = run(spec, replace(small_plan(3, bk=32), grid=grid, group_m=group_m))
    assert_matches(spec, res, x)


def test_numerics_catch_protocol_clean_bugs() -> None:
    """Bugs the protocol cannot see (an accumulator overwritten at every k-block, a dropped bias) are
    clean to the checks but must fail the comparison with the reference."""
    spec = spec_of(DType.E4M3, 5 * 64, scale=ScaleRecipe.ROWWISE, bias=DType.BF16)
    module = build(spec, H100_SXM, small_plan(3, bk=64)).module
    cons = module.partition("consumer")
    x = make_inputs(spec, spec.m, spec.n, spec.k)

    def mutated(fn: object) -> ir.Module:
        return module.with_partition(replace(cons, body=rewrite(cons.body, fn)))  # type: ignore[arg-type]

    for bad in (mutated(lambda o: (replace(o, overwrite=ir.Guard.ALWAYS),) if isinstance(o, ir.Mma) else (o,)),
                mutated(lambda o: (replace(o, steps=o.steps[:1]),) if isinstance(o, ir.Epilogue) else (o,))):
        res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, x.bias)
        assert res.ok and not res.output.isnan().any()
        with pytest.raises(AssertionError, match="relative error"):
            assert_matches(spec, res, x)


def test_every_seed_gives_the_same_output() -> None:
    """The data a schedule computes must not depend on the interleaving."""
    spec = spec_of(DType.BF16, 7 * 32 - 5)
    outs = [run(spec, small_plan(3, bk=32), seed=s)[0].output for s in range(3)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_real_planner_plan_128x256x64() -> None:
    spec = GemmSpec(300, 520, 200)  # 3 x 3 tiles of 128 x 256, one per CTA
    plan = plan_schedule(spec, H100_SXM, bm=128, bn=256)
    assert (plan.bm, plan.bn, plan.bk) == (128, 256, 64)
    res, x = run(spec, plan)
    assert res.report.k_steps == 9 * 4
    assert_matches(spec, res, x)


def test_real_planner_default_plans() -> None:
    for spec in (GemmSpec(300, 260, 200),
                 spec_of(DType.E4M3, 384, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.BF16,
                         m=200, n=272)):
        res, x = run(spec, plan_schedule(spec, H100_SXM))
        assert_matches(spec, res, x)


@pytest.mark.parametrize("spec", [
    GemmSpec(4096, 4096, 4096),
    GemmSpec(64, 8192, 8192),
    spec_of(DType.E4M3, 4096, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.BF16, m=4096, n=4096),
    spec_of(DType.E4M3, 7168, scale=ScaleRecipe.TENSORWISE, m=1000, n=4096),
], ids=lambda s: s.short().replace(" ", "_"))
def test_planner_plans_at_real_sizes_under_many_schedules(spec: GemmSpec) -> None:
    """Protocol only (no data), one CTA per distinct tile count, 12 random schedules each."""
    kernel = build(spec, H100_SXM)
    report = check_protocol(kernel.module, spec.m, spec.n, spec.k, seeds=range(12))
    assert report.ok and report.steps > 1000


def test_every_pass_stage_keeps_the_meaning() -> None:
    """The sequential program and every stage from ring planning on compute the same GEMM cleanly; right
    after partitioning, producer and consumer share rings with no synchronization, which must be flagged."""
    spec = spec_of(DType.BF16, 5 * 32 - 5)
    kernel = build(spec, H100_SXM, small_plan(3, bk=32))
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    for stage, module in kernel.trace.stages:
        res = simulate(module, x.a, x.b)
        if stage == "SplitProducer":
            assert res.report.kinds() & {FindingKind.READ_UNACQUIRED, FindingKind.READ_BEFORE_LANDED}, stage
        else:
            assert_matches(spec, res, x)
            assert stage != "build_sequential" or module.partitions[0].role is ir.Role.SEQUENTIAL
