"""GPU tier: rule 18's swap-AB decode kernels (C^T = B^T A^T on 64x16 or 64x32 tiles, stored into C transposed).

Through the public API (the eager path: first call through the JIT, later ones through the bound launch), with
poisoned outputs through `Kernel.run`, under CUDA-graph capture, and forced variants; shapes whose N is not a tile
multiple and whose K is not a k-block multiple, M from 1 to 32.
"""

from __future__ import annotations

import pytest
import torch
from operands import fp8_scales

import warploom
from warploom import checks, eager
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(120, method="thread")]  # a hung kernel fails the test instead of the run

E4 = torch.float8_e4m3fn


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (5, 1000, 520), (16, 14336, 1032), (11, 136, 64), (27, 1000, 520),
                                   (32, 4096, 4096)])
def test_swapped_matmul(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    torch.manual_seed(m * 7 + n)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype)
    kern = warploom.plan(a, w.t())
    assert kern.plan.swap_ab and kern.module.tiling.swap_ab, kern.plan.short()
    ref = a.float() @ w.float().t()
    for i in range(2):  # the second call launches through the bound (direct) path
        if i:
            prepared = eager.get(eager.key("matmul", (a, w.t()), None))
            assert prepared is not None and prepared.bound is not None  # (a swapped kernel binds like any other)
        out = warploom.matmul(a, w.t())
        assert out.shape == (m, n) and out.dtype == dtype
        torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=2e-2)
        a.copy_(torch.randn_like(a))  # new data, same tensors: the bound launch must read it
        ref = a.float() @ w.float().t()
    poisoned = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    kern.run(a, w.t(), poisoned)
    torch.testing.assert_close(poisoned.float(), ref, atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 14336), (16, 1008, 528), (7, 272, 128), (24, 1008, 528)])
def test_swapped_scaled_mm(m: int, n: int, k: int, out_dtype: torch.dtype, recipe: str) -> None:
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda").to(E4)
    w = torch.randn(n, k, device="cuda").to(E4)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    kern = warploom.plan(a, w.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=True)
    assert kern.plan.swap_ab, kern.plan.short()
    for _ in range(2):  # the second call, on new data in the same tensors, launches through the bound path
        ref = (a.float() @ w.float().t()) * sa * sb
        out = warploom.scaled_mm(a, w.t(), sa, sb, out_dtype=out_dtype, use_fast_accum=True)
        assert out.shape == (m, n) and out.dtype == out_dtype
        assert _err(out, ref) < 1e-3
        a.copy_(torch.randn(m, k, device="cuda").to(E4))
        sa.copy_(torch.rand_like(sa) + 0.5)
        sb.copy_(torch.rand_like(sb) + 0.5)
    ref = (a.float() @ w.float().t()) * sa * sb
    poisoned = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    kern.run(a, w.t(), poisoned, sa, sb)
    assert not poisoned.isnan().any() and _err(poisoned, ref) < 1e-3


def test_swapped_matmul_in_a_cuda_graph() -> None:
    """Decode runs under CUDA graphs: a captured swapped call replays on new inputs."""
    torch.manual_seed(3)
    a = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    warploom.matmul(a, w.t())  # compile and bind outside the capture
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = warploom.matmul(a, w.t())
    torch.cuda.current_stream().wait_stream(s)
    a.copy_(torch.randn_like(a))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), a.float() @ w.float().t(), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("forced", [dict(bm=128), dict(stages=4), dict(bn=64)])
def test_forced_swapped_plans(forced: dict[str, int]) -> None:
    """Other tiles and depths of the swapped problem: 128 rows of N in two warpgroups, a shallow ring, 64 tokens
    wide (M = 20 rows in one tile)."""
    torch.manual_seed(len(forced))
    m, n, k = (20, 648, 9 * 64 + 8) if forced.get("bn") == 64 else (9, 648, 9 * 64 + 8)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    spec = checks.matmul_spec(a, w.t(), None)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, swap_ab=True, **forced)  # type: ignore[arg-type]
    assert plan.swap_ab and all(getattr(plan, key) == v for key, v in forced.items())
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    build(spec, dev, plan).run(a, w.t(), out)
    torch.testing.assert_close(out.float(), a.float() @ w.float().t(), atol=0.1, rtol=2e-2)


@pytest.mark.parametrize("bias_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (13, 1008, 528), (29, 272, 256), (24, 9216, 1024)])
def test_swapped_scaled_mm_with_a_bias(m: int, n: int, k: int, bias_dtype: torch.dtype) -> None:
    """A bias swaps as a row vector of C^T (EpilogueStep.ADD_ROW_BIAS), the planner's default (rule 18), through
    Kernel.run on a poisoned output and through the public API; N = 9216 at M = 24 runs 128x32 tiles."""
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda").to(E4)
    w = torch.randn(n, k, device="cuda").to(E4)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bias = (torch.randn(n, device="cuda") * 4).to(bias_dtype)
    spec = checks.scaled_mm_spec(a, w.t(), sa, sb, bias, torch.bfloat16, True)
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev)
    assert plan.swap_ab and plan.bm == (128 if n == 9216 else 64)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    build(spec, dev, plan).run(a, w.t(), out, sa, sb, bias)
    ref = (a.float() @ w.float().t()) * sa * sb + bias.float()
    assert not out.isnan().any() and _err(out, ref) < 1e-3
    public = warploom.scaled_mm(a, w.t(), sa, sb, bias=bias, use_fast_accum=True)
    assert _err(public, ref) < 1e-3


@pytest.mark.parametrize("m,n,k", [(1, 4096, 1024), (13, 1008, 528), (29, 272, 256)])
def test_forced_swapped_fused_epilogue(m: int, n: int, k: int) -> None:
    """A fused epilogue without dense operands runs swapped when forced: the bias (a row of C) is read as a column
    of C^T, the per-row operand as a row, a scalar as it is; two outputs, bf16 and fp32, stored transposed."""
    import torch.nn.functional as F

    torch.manual_seed(m + n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    col, s = torch.randn(m, 1, device="cuda"), torch.tensor(0.75, device="cuda")

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.silu(acc + bias) * col + s, (acc + bias).to(torch.float32)

    spec = warploom.plan(a, w.t(), epilogue=fn, bias=bias, col=col, s=s).spec
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, swap_ab=True)
    assert plan.swap_ab
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    pre = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    build(spec, dev, plan).run(a, w.t(), out, operands={"bias": bias, "col": col, "s": s}, extra_outs=(pre,))
    ref, ref_pre = fn(a.float() @ w.float().t(), bias.float(), col, s)
    assert not out.isnan().any() and not pre.isnan().any()
    torch.testing.assert_close(pre, ref_pre, atol=1e-3, rtol=1e-4)
    assert _err(out, ref) < 1e-4


@pytest.mark.parametrize("m", [1, 16, 24])
def test_forced_swapped_fused_scaled_mm(m: int) -> None:
    """fp8 rowwise scaled_mm + bias, then tanh GELU, swapped: scale_a and scale_b trade kinds in the graph."""
    import torch.nn.functional as F

    torch.manual_seed(m)
    n, k = 9216, 1024
    a = torch.randn(m, k, device="cuda").to(E4)
    w = torch.randn(n, k, device="cuda").to(E4)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)

    def fn(acc: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc, approximate="tanh")

    spec = warploom.plan(a, w.t(), sa, sb, bias=bias, use_fast_accum=True, epilogue=fn).spec
    dev = DeviceInfo.current()
    plan = plan_schedule(spec, dev, swap_ab=True)
    assert plan.swap_ab and plan.bm == 128  # N = 9216: 128-row tiles (swap_rows)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    build(spec, dev, plan).run(a, w.t(), out, operands={"scale_a": sa, "scale_b": sb, "bias": bias})
    ref = fn((a.float() @ w.float().t()) * sa * sb + bias.float())
    assert not out.isnan().any() and _err(out, ref) < 1e-3


@pytest.mark.parametrize("m,n,k", [(1, 4096, 1024), (13, 1008, 528), (29, 272, 256)])
def test_public_swapped_fused_matmul(m: int, n: int, k: int) -> None:
    """The public API's fused call at decode M takes rule 18's swapped plan by default: the first call through the
    JIT, later ones (new data in the same tensors, incl. the operands) through the bound launch."""
    import torch.nn.functional as F

    torch.manual_seed(m * 3 + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    col = torch.randn(m, 1, device="cuda")

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        return F.silu(acc + bias) * col

    assert warploom.plan(a, w.t(), epilogue=fn, bias=bias, col=col).plan.swap_ab
    for _ in range(3):
        ref = fn(a.float() @ w.float().t(), bias.float(), col)
        out = warploom.matmul(a, w.t(), epilogue=fn, bias=bias, col=col)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        assert not out.isnan().any() and _err(out, ref) < 1e-4
        a.copy_(torch.randn_like(a))
        bias.copy_(torch.randn_like(bias))
        col.copy_(torch.randn_like(col))


@pytest.mark.parametrize("m", [1, 16, 32])
def test_public_swapped_fused_scaled_mm(m: int) -> None:
    """fp8 rowwise scaled_mm with a bias and a fused GELU through the public API, swapped by default (rule 18);
    repeated calls on new data take the bound launch."""
    import torch.nn.functional as F

    torch.manual_seed(m + 5)
    n, k = 4096, 2048
    a = torch.randn(m, k, device="cuda").to(E4)
    w = torch.randn(n, k, device="cuda").to(E4)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)

    def fn(acc: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc)

    assert warploom.plan(a, w.t(), sa, sb, bias=bias, use_fast_accum=True, epilogue=fn).plan.swap_ab
    for _ in range(3):
        ref = fn((a.float() @ w.float().t()) * sa * sb + bias.float())
        out = warploom.scaled_mm(a, w.t(), sa, sb, bias=bias, use_fast_accum=True, epilogue=fn)
        assert out.shape == (m, n) and not out.isnan().any() and _err(out, ref) < 1e-3
        a.copy_(torch.randn(m, k, device="cuda").to(E4))
        sa.copy_(torch.rand_like(sa) + 0.5)
        bias.copy_(torch.randn_like(bias))
