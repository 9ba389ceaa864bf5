"""GPU tier: every schedule shape the planner can choose, forced, on shapes that are not tile multiples.

The planner's defaults are exercised by test_gpu.py; here each structural option (one or two consumer
partitions, promoted accumulation in one or two column blocks, 1 to 6 stages) runs on the H100 and is
checked against an fp32 reference, so an option that is not the default today still works.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(120, method="thread")]  # a hung kernel fails the test instead of the run


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


@pytest.mark.parametrize("partitions", [1, 2])
@pytest.mark.parametrize("stages", [1, 2, 4])
@pytest.mark.parametrize("bn", [128, 256])
def test_bf16_plans(partitions: int, stages: int, bn: int) -> None:
    torch.manual_seed(stages * bn + partitions)
    m, n, k = 777, 648, 9 * 64 + 8
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec = checks.matmul_spec(a, b, None)
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bn=bn, stages=stages, consumer_partitions=partitions))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("layout", ["k_major", "n_major"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("stages", [1, 3, 4])
def test_256_row_plans(stages: int, dtype: torch.dtype, layout: str) -> None:
    """Rule 17's tile: four 64-row consumer warpgroups. 1100 rows are 5 tile rows, the last (1024-1099) with its
    second warpgroup's block ragged and the other two wholly outside; K is not a multiple of BK."""
    torch.manual_seed(stages)
    m, n, k = 1100, 648, 9 * 64 + 8
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if layout == "k_major" else \
        torch.randn(k, n, device="cuda", dtype=dtype)
    spec = checks.matmul_spec(a, b, None)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, bm=256, stages=stages)
    assert (plan.bm, plan.bn, plan.consumer_partitions, plan.consumer_regs) == (256, 128, 4, 112)
    kern = build(spec, dev, plan)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    kern.run(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)


def test_256_row_plans_fp8_and_an_odd_bf16_shape() -> None:
    """Forced on fp8 rowwise (native) with fp32 output; and on bf16 where N is 32 tiles and a bit."""
    torch.manual_seed(17)
    m, n, k = 1030, 528, 5 * 128 + 32
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.float32, True)
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bm=256))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    kern.run(a, b, out, sa, sb)
    assert not out.isnan().any()
    assert _err(out, (a.float() @ b.float()) * sa * sb) < 1e-5
    a16 = torch.randn(2000, 1000, device="cuda", dtype=torch.bfloat16)
    b16 = torch.randn(1000, 4104, device="cuda", dtype=torch.bfloat16)
    spec16 = checks.matmul_spec(a16, b16, None)
    kern16 = build(spec16, dev, plan_schedule(spec16, dev, bm=256))
    out16 = torch.full((2000, 4104), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern16.run(a16, b16, out16)
    torch.testing.assert_close(out16.float(), a16.float() @ b16.float(), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize(("partitions", "blocks", "bn"), [(1, 1, 128), (2, 1, 128), (1, 2, 256), (2, 2, 256),
                                                          (2, 2, 128)])
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("bias", [False, True])
def test_fp8_promoted_plans(partitions: int, blocks: int, bn: int, stages: int, bias: bool) -> None:
    torch.manual_seed(partitions * 10 + blocks + stages)
    m, n, k = 300, 528, 5 * 128 + 32
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    bb = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    spec = checks.scaled_mm_spec(a, b, sa, sb, bb, torch.bfloat16, False)
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bn=bn, stages=stages, consumer_partitions=partitions,
                                          partial_blocks=blocks))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb, bb)
    ref = (a.float() @ b.float()) * sa * sb + (bb.float() if bias else 0)
    assert not out.isnan().any()
    assert _err(out, ref) < 1e-5  # promoted accumulation: bf16 output rounding only
    theirs = torch._scaled_mm(a, b, sa, sb, bias=bb, out_dtype=torch.bfloat16, use_fast_accum=False)
    assert _err(out, ref) <= 1.5 * _err(theirs, ref) + 1e-7


@pytest.mark.parametrize(("bm", "bn"), [(128, 128), (64, 256), (64, 128)])
@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("grid", [1, 5, 132])  # 1 CTA: every tile alternates; 5: odd and even tile counts
def test_bf16_pingpong_plans(bm: int, bn: int, stages: int, grid: int) -> None:
    torch.manual_seed(bm + bn + stages + grid)
    m, n, k = 777, 648, 9 * 64 + 8
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec = checks.matmul_spec(a, b, None)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, bm=bm, bn=bn, stages=stages, pingpong=True)
    kern = build(spec, dev, dataclasses.replace(plan, grid=min(grid, plan.grid)))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize(("bm", "bn"), [(128, 128), (64, 256)])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("grid", [3, 132])
def test_fp8_pingpong_plans(bm: int, bn: int, fast: bool, grid: int) -> None:
    torch.manual_seed(bm + grid + fast)
    m, n, k = 1000, 1040, 5 * 128 + 32
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    bb = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    spec = checks.scaled_mm_spec(a, b, sa, sb, bb, torch.bfloat16, fast)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, bm=bm, bn=bn, pingpong=True)
    kern = build(spec, dev, dataclasses.replace(plan, grid=min(grid, plan.grid)))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb, bb)
    ref = (a.float() @ b.float()) * sa * sb + bb.float()
    theirs = torch._scaled_mm(a, b, sa, sb, bias=bb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    assert not out.isnan().any()
    assert _err(out, ref) <= 1.5 * _err(theirs, ref) + 1e-7


@pytest.mark.parametrize("bias_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("grid", [3, 132])
def test_fp8_rowwise_bias_per_block_epilogue(bias_dtype: torch.dtype, grid: int) -> None:
    # Rule 10: the planner's 256-wide rowwise + bias plan applies scales and bias per 64-column block.
    torch.manual_seed(grid)
    m, n, k = 1000, 1040, 5 * 128 + 32
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    bb = torch.randn(n, device="cuda", dtype=bias_dtype)
    spec = checks.scaled_mm_spec(a, b, sa, sb, bb, torch.bfloat16, True)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, bn=256)
    assert plan.block_epilogue and plan.epilogue_subtiles == 4
    kern = build(spec, dev, dataclasses.replace(plan, grid=min(grid, plan.grid)))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb, bb)
    ref = (a.float() @ b.float()) * sa * sb + bb.float()
    theirs = torch._scaled_mm(a, b, sa, sb, bias=bb.to(torch.bfloat16), out_dtype=torch.bfloat16, use_fast_accum=True)
    assert not out.isnan().any()
    assert _err(out, ref) <= 1.5 * _err(theirs, ref) + 1e-7
