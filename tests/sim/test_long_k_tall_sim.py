"""Rule 17's 256x128 tile as the planner's own choice (rule 3's long-K regime: 16-bit operands, at least
LONG_K_BLOCKS k-blocks), not forced: on devices of a few SMs, where small problems fill more than a round of
128x256 tiles, the planner takes it for ragged M and N, a column-major A, an N-major B and each output dtype, and
the simulated kernel is the fp32 product. (The forced tile's cases: test_a_layout, test_clean_sweep.)"""

from __future__ import annotations

import pytest
import torch

from warploom import H100_SXM, ALayout, BLayout, DeviceInfo, DType, GemmSpec
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.planning.sm90.tiles import LONG_K_BLOCKS

TORCH = {DType.BF16: torch.bfloat16, DType.FP16: torch.float16, DType.FP32: torch.float32}


@pytest.mark.parametrize("m,n,sms,dt,out,a_layout,b_layout", [
    (512, 128, 2, DType.BF16, DType.BF16, ALayout.K_MAJOR, BLayout.K_MAJOR),  # two whole tiles, one each
    (296, 24, 1, DType.BF16, DType.FP32, ALayout.M_MAJOR, BLayout.N_MAJOR),  # a 40-row last tile, N in one column
    (776, 72, 3, DType.FP16, DType.FP16, ALayout.M_MAJOR, BLayout.K_MAJOR),
    (520, 264, 3, DType.FP16, DType.BF16, ALayout.K_MAJOR, BLayout.N_MAJOR),  # 9 tiles in 3 rounds (128x256: 10 in 4)
], ids=str)
def test_planned_256_row_tile_at_long_k(m: int, n: int, sms: int, dt: DType, out: DType, a_layout: ALayout,
                                        b_layout: BLayout) -> None:
    k = 64 * LONG_K_BLOCKS + 8  # (the regime's 96 k-blocks and a ragged 97th)
    spec = GemmSpec(m, n, k, dt, dt, out, b_layout, a_layout=a_layout)
    device = DeviceInfo(f"H100 of {sms} SMs", "sm_90a", sms, H100_SXM.smem_per_block)
    plan = plan_schedule(spec, device)
    assert (plan.bm, plan.bn, plan.consumer_partitions, plan.split_k, plan.tail_split, plan.stream_k) == (
        256, 128, 4, 1, 1, 0), plan.short()
    torch.manual_seed(m + n)
    a = torch.randn(k, m).to(TORCH[dt]).t() if a_layout is ALayout.M_MAJOR else torch.randn(m, k).to(TORCH[dt])
    b = torch.randn(k, n).to(TORCH[dt]) if b_layout is BLayout.N_MAJOR else torch.randn(n, k).to(TORCH[dt]).t()
    c = torch.full((m, n), float("nan"), dtype=TORCH[out])
    res = build(spec, device, plan).simulate(a, b, out=c, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.02)
