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
from warploom.reference import make_inputs, reference, relative_error
from warploom.sim import compare_kernel
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


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


@pytest.mark.parametrize("m,n,k", [(1, 72, 200), (5, 200, 256), (16, 128, 64), (29, 304, 128)])
@pytest.mark.parametrize("forced", [{}, {"bm": 128}, {"hoist_rows": False}, {"scalar_columns": False}],
                         ids=["planned", "bm128", "nohoist", "nocolscalar"])
def test_fused_epilogue_swapped(m: int, n: int, k: int, forced: dict[str, object]) -> None:
    """A fused epilogue without dense operands swaps (planner rule 18, EpilogueGraph.transposed): the (N,) bias is
    read as a column of C^T, the (M, 1) operand as a row, the scalar as it is; two outputs (bf16 and fp32) go to
    C transposed. Simulated against the fp32 function, outputs poisoned."""
    import torch.nn.functional as F

    import warploom
    from warploom.sim import simulate

    torch.manual_seed(m + n)
    a, w = torch.randn(m, k).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16)
    bias, col, s = torch.randn(n).to(torch.bfloat16), torch.randn(m, 1), torch.tensor(0.75)

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.silu(acc + bias) * col + s, (acc + bias).to(torch.float32)

    spec = warploom.plan(a, w.t(), epilogue=fn, bias=bias, col=col, s=s).spec
    plan = plan_schedule(spec, H100_SXM, swap_ab=True if forced else None, **forced)  # type: ignore[arg-type]
    assert plan.swap_ab
    kern = build(spec, H100_SXM, plan)
    assert kern.module.spec == spec.swapped() and kern.module.spec.epilogue is not None
    kinds = {o.name: o.kind.value for o in kern.module.spec.epilogue.operands}
    assert kinds == {"bias": "column", "col": "row" if m > 1 else "scalar", "s": "scalar"}  # (one element: scalar)
    outs = [torch.full((m, n), float("nan"), dtype=torch.bfloat16), torch.full((m, n), float("nan"))]
    res = simulate(kern.module, a, w.t(), operands={"bias": bias, "col": col, "s": s}, outs=outs, seed=m)
    res.raise_for_findings()
    ref, pre = fn(a.float() @ w.float().t(), bias.float(), col, s)
    assert not outs[0].isnan().any() and not outs[1].isnan().any()
    assert _err(outs[0], ref) < 1e-4
    torch.testing.assert_close(outs[1], pre, atol=1e-4, rtol=1e-5)


def test_fused_fp8_rowwise_swapped_scales_trade_kinds() -> None:
    """scaled_mm's scales and bias are graph operands of a fused epilogue: swapped, scale_a is a row of C^T and
    scale_b and the bias columns."""
    import torch.nn.functional as F

    import warploom

    m, n, k = 7, 256, 384
    a, w = torch.randn(m, k).to(torch.float8_e4m3fn), torch.randn(n, k).to(torch.float8_e4m3fn)
    sa, sb, bias = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5, torch.randn(n).to(torch.bfloat16)

    def fn(acc: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc, approximate="tanh")

    kern = warploom.plan(a, w.t(), sa, sb, bias=bias, use_fast_accum=True, epilogue=fn)
    assert kern.plan.swap_ab  # rule 18: a fused epilogue without dense operands swaps by default
    assert kern.module.spec.epilogue is not None
    kinds = {o.name: o.kind.value for o in kern.module.spec.epilogue.operands}
    assert kinds == {"scale_a": "row", "scale_b": "column", "bias": "column"}
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    kern.simulate(a, w.t(), out=out, operands={"scale_a": sa, "scale_b": sb, "bias": bias}).raise_for_findings()
    ref = fn((a.float() @ w.float().t()) * sa * sb + bias.float())
    assert _err(out, ref) < 1e-4


def test_a_dense_operand_keeps_the_fused_epilogue_unswapped() -> None:
    import warploom
    from warploom.errors import UnsupportedError

    a, w = torch.randn(8, 256).to(torch.bfloat16), torch.randn(512, 256).to(torch.bfloat16)
    r = torch.randn(8, 512).to(torch.bfloat16)
    kern = warploom.plan(a, w.t(), epilogue=lambda acc, r: acc + r, r=r)
    assert not kern.plan.swap_ab
    assert kern.spec.swap_problems() == ["a dense epilogue operand (r: its rows are contiguous in C, so C^T's would "
                                         "be strided)"]
    with pytest.raises(UnsupportedError, match="dense epilogue operand"):
        plan_schedule(kern.spec, H100_SXM, swap_ab=True)


def test_a_swapped_fused_kernels_errors_say_they_are_in_its_terms_and_its_outputs_comments_are_swapped() -> None:
    """Review findings (session 19): the simulator checks a swapped kernel's tensors in C^T's terms, so a refusal
    says so; the generated comment of a second output's store names C1[n, m] as the first's names C[n, m]."""
    import warploom
    from warploom.errors import ShapeError

    a, w = torch.randn(5, 128).to(torch.bfloat16), torch.randn(200, 128).to(torch.bfloat16)
    bias = torch.randn(200).to(torch.bfloat16)
    kern = warploom.plan(a, w.t(), epilogue=lambda acc, bias: (acc + bias, acc.to(torch.float32)), bias=bias)
    assert kern.plan.swap_ab
    with pytest.raises(ShapeError) as e:
        kern.simulate(a, w.t(), operands={"bias": torch.randn(208).to(torch.bfloat16)})
    assert any("swapped kernel" in n for n in getattr(e.value, "__notes__", []))
    stores = [ln for ln in kern.source.splitlines() if "tma.async_copy_shared_to_global" in ln]
    assert any("C[n, m]" in ln for ln in stores) and any("C1[n, m]" in ln for ln in stores), stores
    assert not any("[m, n]" in ln for ln in stores)
