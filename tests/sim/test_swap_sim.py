"""Rule 18's swapped kernels (C^T = B^T A^T, tiles stored into C transposed) on the simulator.

Stages 1-6 against k-step counts at the ring's edges, several tiles per persistent CTA (a grid of 2), M from 1 to
16 and N not a tile multiple, outputs poisoned with NaN; bf16, fp16 to fp32, and fp8 tensorwise and rowwise (whose
scales trade sides). Also: the protocol checks at the planner's plans, and the verifier and simulator refusing a
swapped module that stores C untransposed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import Plan, plan_schedule
from warploom.sim import compare_kernel
from warploom.sim.reference import make_inputs, reference, relative_error
from warploom.spec import BLayout, GemmSpec, ScaleRecipe

N = 200  # 64-row tiles of C^T: 4, the last 8 rows


def swapped_plan(stages: int, bk: int, bm: int = 64, bn: int = 16) -> Plan:
    return Plan(bm=bm, bn=bn, bk=bk, stages=stages, consumer_warps=4 * (bm // 64), group_m=2, grid=2,
                swap_ab=True)


CASES = [pytest.param(s, ks, id=f"s{s}-k{ks}") for s in range(1, 7)
         for ks in sorted({1, s - 1, s, s + 1, 2 * s + 1} - {0})]


def check(spec: GemmSpec, plan: Plan, seed: int = 0) -> None:
    kern = build(spec, H100_SXM, plan)
    assert kern.module.tiling.swap_ab and kern.module.spec == spec.swapped()
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=seed)
    out = torch.full((spec.m, spec.n), float("nan"), dtype=spec.out_dtype.torch)  # poison: unwritten shows
    res = kern.simulate(x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed, out=out)
    assert res.ok, res.report.summary()
    assert res.output is out and not out.isnan().any(), "some output elements were never written"
    ref = reference(x)
    if spec.is_fp8:
        assert relative_error(out.float(), ref) < 1e-3
    else:
        tol = {DType.BF16: (1e-2, 1e-2), DType.FP16: (2e-3, 2e-3), DType.FP32: (1e-5, 1e-4)}[spec.out_dtype]
        torch.testing.assert_close(out.float(), ref, rtol=tol[0], atol=tol[1])
    # compare_kernel (the CLI's check) judges the same tiles in C^T
    assert compare_kernel(kern, x, seed=seed).ok


@pytest.mark.parametrize("stages,ks", CASES)
@pytest.mark.parametrize("m", [1, 13])
def test_bf16_swapped_stages_by_k_steps(m: int, stages: int, ks: int) -> None:
    spec = GemmSpec(m, N, ks * 32 - 5)  # K not a multiple of BK = 32
    check(spec, swapped_plan(stages, 32))


@pytest.mark.parametrize("scale", [ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE])
@pytest.mark.parametrize("stages,ks", [(1, 1), (2, 3), (4, 9)])
def test_fp8_swapped_scales(stages: int, ks: int, scale: ScaleRecipe) -> None:
    spec = GemmSpec(16, 208, ks * 64 - 16, DType.E4M3, DType.E5M2, DType.BF16, scale=scale)
    check(spec, swapped_plan(stages, 64))


@pytest.mark.parametrize("bias", [DType.BF16, DType.FP32])
@pytest.mark.parametrize("stages,ks", [(1, 2), (3, 7)])
@pytest.mark.parametrize("m", [5, 16, 29])
def test_fp8_rowwise_bias_swapped(m: int, stages: int, ks: int, bias: DType) -> None:
    """A bias swaps as a row vector of C^T (EpilogueStep.ADD_ROW_BIAS): masked past N, added after the scales."""
    spec = GemmSpec(m, 200, ks * 64 - 16, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    bias_dtype=bias)
    check(spec, swapped_plan(stages, 64, bn=16 if m <= 16 else 32))


def test_a_bias_step_in_the_wrong_orientation_is_refused() -> None:
    spec = GemmSpec(16, N, 256, DType.E4M3, DType.E4M3, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
    module = build(spec, H100_SXM, swapped_plan(2, 64)).module
    flipped = replace(module, partitions=tuple(replace(p, body=rewrite(p.body, lambda o: (replace(
        o, steps=tuple(ir.EpilogueStep.ADD_BIAS if s is ir.EpilogueStep.ADD_ROW_BIAS else s for s in o.steps)),)
        if isinstance(o, ir.Epilogue) else (o,))) for p in module.partitions))
    assert any("bias runs along its rows" in e for e in verify.structural(flipped))
    assert verify.structural(module) == []


@pytest.mark.parametrize("bm,bn,m", [(128, 16, 7), (64, 32, 24), (64, 64, 40)])
def test_other_swapped_tiles(bm: int, bn: int, m: int) -> None:
    """Two warpgroups over 128 rows of C^T (one partition, its buffer 128 wide), and 32 and 64 tokens wide."""
    check(GemmSpec(m, 300, 200, DType.FP16, DType.FP16, DType.FP32), swapped_plan(3, 32, bm, bn))


@pytest.mark.parametrize("spec", [GemmSpec(1, 4096, 4096), GemmSpec(16, 14336, 4096),
                                  GemmSpec(5, 4096, 14336, DType.E4M3, DType.E4M3, scale=ScaleRecipe.ROWWISE)],
                         ids=lambda s: s.short())
def test_planned_swapped_kernels_check_clean(spec: GemmSpec) -> None:
    kern = build(spec, H100_SXM)
    assert kern.plan.swap_ab
    assert kern.check_protocol(seeds=range(3)).ok


def test_a_swapped_module_with_an_untransposed_buffer_is_refused() -> None:
    """The verifier names a staging buffer of C that is not the transposed block; N-major B cannot swap."""
    spec = GemmSpec(16, N, 256)
    module = build(spec, H100_SXM, swapped_plan(2, 64)).module
    bad = replace(module, buffers=tuple(replace(b, rows=b.cols, cols=b.rows) for b in module.buffers))
    assert any("transposed block of C" in e for e in verify.structural(bad))
    nmajor = replace(module, spec=replace(module.spec, b_layout=BLayout.N_MAJOR))
    assert any("N-major B" in e for e in verify.structural(nmajor))
    assert verify.structural(module) == []
    assert isinstance(module.buffers[0], ir.Buffer) and (module.buffers[0].rows, module.buffers[0].cols) == (16, 64)


def test_planner_plans_simulate() -> None:
    """The planner's own swapped plans on small decode problems, all CTAs, against the reference."""
    for spec in (GemmSpec(3, 520, 264), GemmSpec(16, 136, 72, DType.E4M3, DType.E4M3, scale=ScaleRecipe.ROWWISE),
                 GemmSpec(27, 200, 136, DType.E4M3, DType.E4M3, scale=ScaleRecipe.ROWWISE)):
        plan = plan_schedule(spec, H100_SXM)
        assert plan.swap_ab
        check(spec, plan, seed=1)
