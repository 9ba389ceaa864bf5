"""A column-major A (`ALayout.M_MAJOR`: `x.t()` of a contiguous x, as a backward pass's `grad_out.t() @ x` passes it)
for 16-bit inputs: wgmma reads its (BK, BM) slots transposed, no copy. Planned, simulated against the fp32 product on
shapes that are not tile multiples (every tile family, with an N-major B too, stream-K), cross-compiled; fp8 and the
other targets refuse it by name."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import ALayout, checks
from warploom.device import B200, GFX1250, H100_SXM
from warploom.errors import AlignmentError, UnsupportedError
from warploom.kernel import build
from warploom.planner import plan_schedule


def _col_major(m: int, k: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(k, m).to(dtype).t()  # (M, K) with strides (1, M)


@pytest.mark.parametrize("m,n,k,forced", [
    (200, 264, 1000, {}), (384, 128, 520, {"bn": 256}), (40, 256, 384, {}), (136, 272, 4096, {"stream_k": 3}),
    (256, 200, 664, {"bm": 64, "bn": 128}),
    (296, 200, 520, {"bm": 256, "bn": 128})])  # (rule 17's tile, which rule 3's long-K regime plans)
@pytest.mark.parametrize("b_n_major", [False, True])
def test_simulated_against_fp32(m: int, n: int, k: int, forced: dict, b_n_major: bool) -> None:
    torch.manual_seed(m + n + k)
    a = _col_major(m, k)
    b = torch.randn(k, n).bfloat16() if b_n_major else torch.randn(n, k).bfloat16().t()
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    assert spec.a_layout is ALayout.M_MAJOR and "a=m_major" in spec.short()
    kern = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, **forced))
    assert kern.module.ring("a_ring").rows == kern.plan.bk  # (BK, BM) slots: A's storage order
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    res = kern.simulate(a, b, out=out, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.2, rtol=0.02)


def test_public_call_on_cpu_is_the_product() -> None:
    torch.manual_seed(0)
    grad_out, x = torch.randn(96, 200).bfloat16(), torch.randn(96, 136).bfloat16()
    got = warploom.matmul(grad_out.t(), x)  # a weight gradient: (200, 96) column-major @ (96, 136)
    torch.testing.assert_close(got.float(), grad_out.float().t() @ x.float(), atol=0.2, rtol=0.02)


@pytest.mark.parametrize("bm,bn", [(128, 256), (128, 128), (64, 64)])
def test_cross_compiles(bm: int, bn: int) -> None:
    a = torch.empty_strided((512, 1024), (1, 512), dtype=torch.float16, device="meta")
    b = torch.empty(1024, 512, dtype=torch.float16, device="meta")
    spec = checks.matmul_spec(a, b, None)
    c = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).compile("sm_90a")
    assert c.spills == 0 and c.count("HGMMA") > 0 and not c.wgmma_serialized


def test_fp8_and_other_targets_refuse_it_by_name() -> None:
    a8 = torch.empty_strided((256, 256), (1, 256), dtype=torch.float8_e4m3fn, device="meta")
    b8 = torch.empty(256, 256, dtype=torch.float8_e4m3fn, device="meta").t()
    s = torch.empty((), device="meta")
    with pytest.raises(AlignmentError, match=r"^a: .*fp8 wgmma reads A K-major.*strides \(1, 256\).*contiguous"):
        warploom.plan(a8, b8, s, s)
    a = torch.empty_strided((256, 256), (1, 256), dtype=torch.bfloat16, device="meta")
    b = torch.empty(256, 256, dtype=torch.bfloat16, device="meta")
    for dev in (B200, GFX1250):
        with pytest.raises(UnsupportedError, match="column-major A"):
            warploom.plan(a, b, device=dev)
    with pytest.raises(AlignmentError, match="^a: .*multiple of 16 bytes"):
        warploom.plan(torch.empty_strided((130, 256), (1, 130), dtype=torch.bfloat16, device="meta"), b)
