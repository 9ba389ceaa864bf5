"""GPU tier for split-K (forced plans): work units over k-ranges store fp32 partial sums, a second kernel adds them
in order. Checked against fp32 references on shapes that are not tile multiples, bit-for-bit repeatable, and inside
a CUDA graph (the workspace is allocated per call)."""

from __future__ import annotations

import pytest
import torch

from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import dequantized

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def _kernel(spec: object, **kw: object) -> Kernel:
    dev = DeviceInfo.current()
    return build(spec, dev, plan_schedule(spec, dev, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("m,n,k,split,kw,n_major", [
    (1, 4096, 4096, 2, dict(bm=64, bn=128), False),
    (16, 8192, 8192, 4, dict(bm=64, bn=128), False),
    (64, 1000 // 8 * 8, 1280, 5, dict(bm=64, bn=64), True),
    (300, 520, 1024, 2, dict(bm=128, bn=128), False),
])
def test_bf16(m: int, n: int, k: int, split: int, kw: dict, n_major: bool) -> None:
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(k, n, device="cuda", dtype=torch.bfloat16) if n_major
         else torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t())
    kern = _kernel(checks.matmul_spec(a, b, None), split_k=split, **kw)
    assert kern.plan.split_k == split
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out)
        outs.append(out)
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    assert torch.equal(outs[0], outs[1])  # the in-order reduction: the same bits every run
    # The second call launched the main kernel directly (runtime/launch.py), compiled once.
    assert len(kern.launcher._main._compiled) == 1


@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_exact", "blockwise", "blockwise_1x128"])
@pytest.mark.parametrize("m,n,k,split,kw", [(128, 4096, 7168, 4, dict(bm=128, bn=128)),
                                            (64, 2112, 7168, 7, dict(bm=64, bn=128)),
                                            (200, 528, 1024, 2, dict(bm=128, bn=256))])
def test_fp8(recipe: str, m: int, n: int, k: int, split: int, kw: dict) -> None:
    torch.manual_seed(k)
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    kb = -(-k // 128)
    if recipe.startswith("rowwise"):
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref = (a.float() @ b.float()) * sa * sb
    else:
        sa = torch.rand(m, kb, device="cuda") + 0.5
        sb = torch.rand(kb, -(-n // 128) if recipe == "blockwise" else n, device="cuda") + 0.5
        da, db = dequantized(a, b, sa, sb)
        ref = da @ db
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, recipe == "rowwise_fast")
    kern = _kernel(spec, split_k=split, **kw)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb)
    assert not out.isnan().any()
    assert _err(out.float(), ref) < 1e-3


def test_fp32_output_and_cuda_graph() -> None:
    m, n, k = 48, 2048, 4096
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a, b, torch.float32), bm=64, bn=128, split_k=4)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kern.run(a, b, out)  # warm-up: compile and load both kernels outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        kern.run(a, b, out)
    a.copy_(torch.randn_like(a))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a.float() @ b.float(), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("m,n,k,split", [
    (191, 440, 14496, 8),  # 227 k-blocks: ranges of 29 and 28 (rule 25's own plan at this shape)
    (300, 520, 7 * 64 - 24, 3),  # 7 k-blocks, the last ragged: 3, 2, 2
    (128, 256, 5 * 64, 4),  # 2, 1, 1, 1
])
def test_bf16_unequal_ranges(m: int, n: int, k: int, split: int) -> None:
    """Split-K whose ranges differ by a k-block (`ir.Tiling.uneven_split`), against the fp32 product, repeatable,
    and the same kernel at another K with fewer k-blocks (but one for each range)."""
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a, b, None), bm=128, bn=128, split_k=split)
    assert kern.module.tiling.uneven_split and kern.plan.split_k == split
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out)
        outs.append(out)
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), atol=0.05 * k ** 0.5, rtol=0.02)
    assert torch.equal(outs[0], outs[1])
    k2 = split * 64 + 8
    a2, b2 = a[:, :k2].contiguous(), b[:k2]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a2, b2, out)
    torch.testing.assert_close(out.float(), a2.float() @ b2.float(), atol=0.05 * k2 ** 0.5, rtol=0.02)


def test_fp8_rowwise_unequal_ranges() -> None:
    m, n, k = 191, 448, 14496
    torch.manual_seed(5)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True)
    kern = _kernel(spec, bm=128, bn=128, split_k=5)
    assert kern.module.tiling.uneven_split
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb)
    assert _err(out.float(), (a.float() * sa) @ (b.float() * sb)) < 1e-4  # (dequantized is blockwise's)


@pytest.mark.parametrize("dtype,m,n,k,tile", [
    ("bf16", 122, 712, 7784, 64),  # M <= 128: 24 tiles of 64x64 in 5 unequal ranges
    ("bf16", 459, 112, 2632, 64),  # 16 tiles in 6 equal ranges
    ("fp8", 268, 112, 4944, 64),  # fp8 rowwise fast: 10 tiles in 7 unequal ranges
    # session 42's margins (rows not whole lines): 64x64 in 2; 128x128 in 4 unequal ranges; fp8 128x128 in 4, and
    # 96 wide (64+32, rule 31's narrow tile) in 5 unequal ranges
    ("bf16", 513, 368, 5160, 64),
    ("bf16", 2986, 112, 3728, 128),
    ("fp8", 731, 240, 8688, 128),
    ("fp8", 2090, 96, 7792, 128),
    # rule 38 (session 42; not yet run on a GPU): one column of 128-row tiles fitted to N, K split
    ("bf16", 2415, 160, 14360, 128),
    ("fp8", 2415, 160, 14368, 128),
    ("fp8", 1881, 224, 15088, 128),
])
def test_rule25_planned_splits(dtype: str, m: int, n: int, k: int, tile: int) -> None:
    """Rule 25's split-K as the planner plans it (nothing forced): right against the fp32 product on a poisoned
    output, and the same bits on a second run."""
    torch.manual_seed(m * n)
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        spec, scales, ref = checks.matmul_spec(a, b, None), (), a.float() @ b.float()
    else:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        spec, scales = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True), (sa, sb)
        ref = (a.float() * sa) @ (b.float() * sb)
    kern = _kernel(spec)
    assert kern.plan.bm == tile and kern.plan.split_k > 1, kern.plan.short()
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out, *scales)
        outs.append(out)
    assert _err(outs[0].float(), ref) < 1e-4
    if dtype == "bf16":
        torch.testing.assert_close(outs[0].float(), ref, atol=0.05 * k ** 0.5, rtol=0.02)
    assert torch.equal(outs[0], outs[1])
