"""GPU tier for 2-CTA clusters (Plan.cluster, planner rule 24, Triton >= 3.7): two CTAs stacked along M, B multicast by
the cluster's lead CTA into both CTAs' slots. Checked against fp32 references on shapes that are not tile multiples
(ragged cluster tiles, a last cluster tile with one CTA's rows past M, rows that are not 128-byte lines), for bf16
with either B layout, fp16, and fp8 rowwise (fast accumulation, with a bias into fp32) and tensorwise;
repeatable bit for bit, in a CUDA graph, and the planner's own choice where rows are unaligned. Under Triton 3.6
(no Hopper multicast) the module is skipped: warploom plans no clusters there (tests/unit/test_cluster.py)."""

from __future__ import annotations

import pytest
import torch
from graphs import replayed
from operands import fp8_pair, fp8_scales

from warploom import checks
from warploom.backends import gluon_api
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.skipif(not gluon_api.for_triton(gluon_api.installed()).tma_multicast,
                                 reason="Triton < 3.7: no TMA multicast on Hopper, so no clusters"),
              pytest.mark.timeout(300, method="thread")]

# (M, N, K): one cluster tile and a ragged one; a last cluster tile whose second CTA has no rows (M <= 128 past a
# cluster tile); many tiles on unaligned rows; K a single k-block.
# (N a multiple of 16: fp8's rule, as torch._scaled_mm's; K is rounded up to one for fp8.)
SHAPES = [(300, 528, 200), (384, 1008, 1000), (2000, 2112, 1008), (4634, 4976, 3672), (130, 272, 64)]


def _kernel(spec: object) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, cluster=2))  # type: ignore[arg-type]
    assert kern.module.tiling.cluster == 2
    return kern


def _run(kern: Kernel, m: int, n: int, dtype: torch.dtype, *args: object) -> torch.Tensor:
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        kern.run(*args[:2], out, *args[2:])
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert not outs[0].isnan().any(), "every element of C written"
    return outs[0]


@pytest.mark.parametrize("b_k_major", [False, True])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_bf16(m: int, n: int, k: int, b_k_major: bool) -> None:
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if b_k_major else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = _run(_kernel(checks.matmul_spec(a, b, None)), m, n, torch.bfloat16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("m,n,k", SHAPES[:3])
def test_fp16(m: int, n: int, k: int) -> None:
    torch.manual_seed(n)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    out = _run(_kernel(checks.matmul_spec(a, b, None)), m, n, torch.float16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.05, rtol=0.01)


@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_bias_fp32", "tensorwise"])
@pytest.mark.parametrize("m,n,k", SHAPES[:4])
def test_fp8(recipe: str, m: int, n: int, k: int) -> None:
    torch.manual_seed(m + n)
    k = -(-k // 16) * 16  # (fp8 rows are 16-byte aligned: K a multiple of 16)
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if "bias" in recipe else None
    out_dtype = torch.float32 if "fp32" in recipe else torch.bfloat16
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, bias, out_dtype, True))
    out = _run(kern, m, n, out_dtype, a, b, sa, sb, bias)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert _err(out, ref) < 1e-3


def test_planner_choice_and_cuda_graph() -> None:
    """Rule 24 takes clusters for unaligned bf16 rows (4634x4968x3672: rows of 7344 and 9936 bytes); through
    warploom.matmul, and replayed in a CUDA graph, the kernel gives the same bits."""
    import warploom

    torch.manual_seed(1)
    m, n, k = 4634, 4968, 3672
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    kern = build(checks.matmul_spec(a, b, None), DeviceInfo.current())
    assert kern.plan.cluster == 2, kern.plan.short()
    eager = warploom.matmul(a, b)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
