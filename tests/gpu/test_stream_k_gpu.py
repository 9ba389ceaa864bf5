"""GPU tier for stream-K (Plan.stream_k, rule 21): the last wave's tiles shared as k-block pieces among CTAs in the
same kernel, joined through the fp32 workspace and its flags (ir.Fixup). Checked against fp32 references on shapes
that are not tile multiples, with and without whole waves, at 2 to 4 pieces, bit-for-bit repeatable (the fixup's
order is fixed), with the flags left zero for the next launch, and inside a CUDA graph; the planner's own choice too."""

from __future__ import annotations

import pytest
import torch
from graphs import replayed
from operands import fp8_pair, fp8_scales

from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]

# (M, N, K, bn, pieces): fewer tiles than SMs, a wave and a bit, several waves; ragged M, N and K.
SHAPES = [(384, 752, 5312, 128, 4), (1200, 544, 1232, 128, 2), (2000, 2112, 1008, 256, 3),
          (656, 8048, 5280, 256, 2), (4100, 4104, 2048, 256, 4)]


def _kernel(spec: object, bn: int, pieces: int) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bn=bn, stream_k=pieces))  # type: ignore[arg-type]
    assert kern.module.tiling.stream_k == pieces
    return kern


def _twice(kern: Kernel, m: int, n: int, dtype: torch.dtype, *args: object) -> list[torch.Tensor]:
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        kern.run(*args[:2], out, *args[2:])
        outs.append(out)
    _, flags = kern.launcher.stream_k_buffers(outs[0].device)
    assert int(flags.abs().sum()) == 0, "every flag a contributor released was reset by its finisher"
    assert torch.equal(outs[0], outs[1])  # a fixed fixup order: the same bits every run
    return outs


@pytest.mark.parametrize("m,n,k,bn,pieces", SHAPES)
def test_bf16(m: int, n: int, k: int, bn: int, pieces: int) -> None:
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a, b, None), bn, pieces)
    out = _twice(kern, m, n, torch.bfloat16, a, b)[0]
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_exact", "tensorwise", "rowwise_bias"])
@pytest.mark.parametrize("m,n,k,bn,pieces", SHAPES[:4])
def test_fp8(recipe: str, m: int, n: int, k: int, bn: int, pieces: int) -> None:
    torch.manual_seed(m + n)
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if recipe == "rowwise_bias" else None
    fast = recipe != "rowwise_exact"
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, bias, torch.bfloat16, fast), bn, pieces)
    out = _twice(kern, m, n, torch.bfloat16, a, b, sa, sb, bias)[0]
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert not out.isnan().any()
    assert _err(out, ref) < 1e-3


def test_cuda_graph_and_planner_choice() -> None:
    """Among one-CTA plans the planner takes stream-K at 656x8048x5280 (a thin second wave of 128x256 tiles, 83
    k-blocks: rule 21; with Triton >= 3.7 rule 24's clusters come first there, tests/gpu/test_cluster_gpu.py);
    replayed in a CUDA graph, the kernel gives the eager call's bits."""
    torch.manual_seed(0)
    m, n, k = 656, 8048, 5280
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec, dev = checks.matmul_spec(a, b, None), DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, cluster=1))
    assert kern.plan.stream_k, kern.plan.short()
    eager = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, eager)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("bn", [128, 256])
def test_fused_epilogue(bn: int) -> None:
    """gelu(acc + bias) + residual on the finisher's whole sum (each tile's epilogue once)."""
    import warploom

    torch.manual_seed(bn)
    m, n, k = 1200, 1000, 3000
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)

    def f(acc: torch.Tensor, res: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(acc + bias) + res

    spec = warploom.plan(a, b, epilogue=f, res=res, bias=bias).spec
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bn=bn, stream_k=3))
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out, operands={"res": res, "bias": bias})
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float()) + res.float()
    torch.testing.assert_close(outs[0].float(), ref, atol=0.5, rtol=0.02)


def test_blockwise_1x128_128x128() -> None:
    from warploom.reference import dequantized

    torch.manual_seed(5)
    m, n, k = 656, 2064, 5248
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    kb = k // 128
    sa = (torch.rand(kb, m, device="cuda") + 0.5).t()
    sb = torch.rand(kb, -(-n // 128), device="cuda") + 0.5
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)
    kern = _kernel(spec, 128, 2)
    out = _twice(kern, m, n, torch.bfloat16, a, b, sa, sb)[0]
    da, db = dequantized(a, b, sa, sb)
    assert _err(out, da @ db) < 1e-3


@pytest.mark.parametrize("m,n,k,bn,pieces", [(73, 104, 4096, 64, 8), (43, 88, 7960, 64, 4), (469, 88, 4864, 64, 4),
                                             (130, 200, 960, 128, 3)])
def test_64_row_tiles_match_split_k(m: int, n: int, k: int, bn: int, pieces: int) -> None:
    """Forced stream-K on one-warpgroup 64-row tiles (the finisher's batched gather: every flag, then 4 or 2 partials
    in flight): right against fp32 on a poisoned output, repeatable, its flags reset; and where each tile is cut in
    `pieces` equal runs of k-blocks (all but 43x88x7960's 125), bit-equal to split-K in as many ranges (both add the
    later partials in k order)."""
    torch.manual_seed(m + n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec, dev = checks.matmul_spec(a, b, None), DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, bm=64, bn=bn, stream_k=pieces))
    assert (kern.plan.bm, kern.module.tiling.stream_k) == (64, pieces)
    out = _twice(kern, m, n, torch.bfloat16, a, b)[0]
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    if -(-k // 64) % pieces == 0:
        split = build(spec, dev, plan_schedule(spec, dev, bm=64, bn=bn, split_k=pieces))
        theirs = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        split.run(a, b, theirs)
        assert torch.equal(out, theirs)
