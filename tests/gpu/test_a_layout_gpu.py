"""GPU tier for a column-major A (`ALayout.M_MAJOR`, 16-bit): the weight gradient of a linear layer,
`grad_out.t() @ x`, without a copy, against torch on shapes that are not tile multiples, with both B layouts, eager
and through the bound launch, and under stream-K."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import ALayout, checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens,d_out,d_in", [(4096, 1000, 776), (1000, 4104, 2048), (520, 136, 264),
                                               (8192, 4096, 4096)])
def test_weight_gradient(dtype: torch.dtype, tokens: int, d_out: int, d_in: int) -> None:
    torch.manual_seed(tokens + d_out)
    grad_out = torch.randn(tokens, d_out, device="cuda", dtype=dtype)
    x = torch.randn(tokens, d_in, device="cuda", dtype=dtype)
    a = grad_out.t()  # (d_out, tokens), column-major
    assert checks.matmul_spec(a, x, None).a_layout is ALayout.M_MAJOR
    ref = a.float() @ x.float()
    for _ in range(3):  # the first call through the JIT, then the bound launch
        got = warploom.matmul(a, x)
        torch.testing.assert_close(got.float(), ref, atol=0.5, rtol=0.02)
    got_n = warploom.matmul(a, x.t().contiguous().t())  # B column-major (K-major) too
    torch.testing.assert_close(got_n.float(), ref, atol=0.5, rtol=0.02)


def test_stream_k() -> None:
    torch.manual_seed(1)
    a = torch.randn(5312, 384, device="cuda", dtype=torch.bfloat16).t()  # (384, 5312) column-major
    b = torch.randn(752, 5312, device="cuda", dtype=torch.bfloat16).t()
    spec = checks.matmul_spec(a, b, None)
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, stream_k=4))
    outs = []
    for _ in range(2):
        out = torch.full((384, 752), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), atol=0.5, rtol=0.02)
