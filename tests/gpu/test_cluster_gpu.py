"""GPU tier for 2-CTA clusters (Plan.cluster, planner rule 24, Triton >= 3.7): two CTAs stacked along M, B multicast by
the cluster's lead CTA into both CTAs' slots. Checked against fp32 references on shapes that are not tile multiples
(ragged cluster tiles, a last cluster tile with one CTA's rows past M, rows that are not 128-byte lines), for bf16
with either B layout, fp16, and fp8 rowwise (fast accumulation, with a bias into fp32) and tensorwise; forced, promoted
fp8 (rowwise, tensorwise), blockwise fp8 (both recipes) and fused epilogue graphs (bf16, fp8 rowwise fast); and 1x2
clusters (cluster="1x2": two CTAs along N, A multicast) for bf16 and fp8 rowwise and tensorwise; 2x1 clusters of
ping-pong consumers (pingpong=True, cluster=2, issue 24) for bf16 and fp8 rowwise and tensorwise, bit-equal to
ping-pong in one CTA;
repeatable bit for bit, in a CUDA graph, and the planner's own choice where rows are unaligned. Under Triton 3.6
(no Hopper multicast) the module is skipped: warploom plans no clusters there (tests/unit/test_cluster.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graphs import replayed
from operands import fp8_pair, fp8_scales

from warploom import checks
from warploom.backends import gluon_api
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.skipif(not gluon_api.for_triton(gluon_api.installed()).tma_multicast,
                                 reason="Triton < 3.7: no TMA multicast on Hopper, so no clusters"),
              pytest.mark.timeout(300, method="thread")]

# (M, N, K): one cluster tile and a ragged one; a last cluster tile whose second CTA has no rows (M <= 128 past a
# cluster tile); many tiles on unaligned rows; K a single k-block.
# (N a multiple of 16: fp8's rule, as torch._scaled_mm's; K is rounded up to one for fp8.)
SHAPES = [(300, 528, 200), (384, 1008, 1000), (2000, 2112, 1008), (4634, 4976, 3672), (130, 272, 64)]


def _kernel(spec: object, knob: int | str = 2, pingpong: bool = False) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, cluster=knob, pingpong=pingpong))  # type: ignore[arg-type]
    assert kern.module.tiling.cluster == 2 and kern.module.tiling.cluster_n == (knob == "1x2")
    assert kern.plan.pingpong == pingpong
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
    assert kern.plan.cluster == 2 and not kern.plan.cluster_n, kern.plan.short()  # (2x1: rule 24 plans no 1x2)
    eager = warploom.matmul(a, b)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
@pytest.mark.parametrize("m,n,k", SHAPES[:4])
def test_fp8_promoted(recipe: str, m: int, n: int, k: int) -> None:
    """Promoted fp8 (each warpgroup's 128 columns in two 64-column accumulators) against the fp32 product."""
    torch.manual_seed(m + 2 * n)
    k = -(-k // 16) * 16
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False))
    assert kern.plan.partial_blocks == 4
    out = _run(kern, m, n, torch.bfloat16, a, b, sa, sb)
    assert _err(out, (a.float() @ b.float()) * sa * sb) < 1e-3


def _blockwise_scales(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Positive scales over 2**-4..2**4, column-major (torch's layout for 1x128 scales)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = torch.exp2(torch.randint(-4, 5, (rows, cols), device="cuda", generator=g).float())
    return (s * (torch.rand(rows, cols, device="cuda", generator=g) + 0.5)).t().contiguous().t()


@pytest.mark.parametrize("recipe", ["128x128", "1x128"])
@pytest.mark.parametrize("m,n,k", [(300, 528, 1024), (2000, 2112, 1008), (4096, 7168, 7168)])
def test_blockwise(recipe: str, m: int, n: int, k: int) -> None:
    """Blockwise fp8: each CTA copies its own rows' scale_a, and the tile's scale_b for itself."""
    kb, nb = -(-k // 128), -(-n // 128)
    torch.manual_seed(k)
    a, b = fp8_pair(m, n, k)
    sa, sb = _blockwise_scales(m, kb, 1), _blockwise_scales(kb, nb if recipe == "128x128" else n, 2)
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False))
    out = _run(kern, m, n, torch.bfloat16, a, b, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    assert _err(out.float(), da @ db) < 1e-3


def _fused_kernel(kern: Kernel) -> Kernel:
    """The planned fused kernel `kern` (warploom.plan's) rebuilt with its cluster forced."""
    return _kernel(kern.spec)


@pytest.mark.parametrize("m,n,k", [(300, 528, 200), (2000, 2112, 1008), (4634, 4968, 3672)])
def test_fused_bf16(m: int, n: int, k: int) -> None:
    """Rule 9's wide fused epilogue (a row bias, a dense residual, a column scale; two outputs) in clusters."""
    import warploom

    torch.manual_seed(n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ops = {"shift": torch.randn(n, device="cuda", dtype=torch.bfloat16),
           "res": torch.randn(m, n, device="cuda", dtype=torch.bfloat16), "col": torch.rand(m, 1, device="cuda") + 0.5}

    def fn(acc: torch.Tensor, shift: torch.Tensor, res: torch.Tensor, col: torch.Tensor) -> object:
        return F.gelu(acc + shift) * col + res, (acc + shift).float()

    kern = _fused_kernel(warploom.plan(a, b, epilogue=fn, **ops))
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        out1 = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        kern.run(a, b, out, operands=ops, extra_outs=(out1,))
        outs.append((out, out1))
    ref = fn(a.float() @ b.float(), **{k_: v.float() for k_, v in ops.items()})
    for j, (got, want) in enumerate(zip(outs[0], ref, strict=True)):  # type: ignore[arg-type]
        assert torch.equal(got, outs[1][j]) and not got.isnan().any(), f"output {j}"
        torch.testing.assert_close(got.float(), want.float(), atol=6e-2, rtol=2e-2)


@pytest.mark.parametrize("m,n,k", [(300, 528, 672), (2000, 2112, 1008)])
def test_fused_fp8_rowwise(m: int, n: int, k: int) -> None:
    """fp8 rowwise fast with scaled_mm's bias, then the user's GELU and residual, in clusters."""
    import warploom

    torch.manual_seed(m)
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, False)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    def fn(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc) + residual

    kern = _fused_kernel(warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=fn, residual=res))
    ops = {"scale_a": sa, "scale_b": sb, "bias": bias, "residual": res}
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, operands=ops)
    assert not out.isnan().any(), "every element of C written"
    # the same bits again, replayed in a CUDA graph over a poisoned output
    again = torch.empty_like(out)
    assert torch.equal(replayed(lambda: kern.run(a, b, again, operands=ops), again), out)
    # Fast accumulation's rounding puts a few of 4M elements (where GELU and the residual nearly cancel) past an
    # elementwise tolerance, torch._scaled_mm's own output alike: the cluster's claim is the same bits as one CTA a
    # tile, and the numerics are judged scale-free as every fp8 test's.
    dev = DeviceInfo.current()
    single = build(kern.spec, dev, plan_schedule(kern.spec, dev, cluster=1))
    assert single.module.tiling.cluster == 1
    alone = torch.full_like(out, float("nan"))
    single.run(a, b, alone, operands=ops)
    assert torch.equal(out, alone), "a 2x1 cluster's result differs from one CTA a tile's"
    ref = fn((a.float() @ b.float()) * sa * sb + bias.float(), res.float())
    assert _err(out, ref) < 1e-3


# 1x2 (ShareA): one cluster tile of 128 x 512 and ragged ones; rank 1 of the last cluster tile past N (528 = 512 + 16);
# many cluster tiles on unaligned rows; M a single 128-row tile.
ALONG_N = [(300, 528, 200), (384, 1008, 1000), (2000, 2112, 1008), (4634, 4976, 3672), (100, 1304, 64)]


@pytest.mark.parametrize("b_k_major", [False, True])
@pytest.mark.parametrize("m,n,k", ALONG_N)
def test_1x2_bf16(m: int, n: int, k: int, b_k_major: bool) -> None:
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if b_k_major else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = _run(_kernel(checks.matmul_spec(a, b, None), "1x2"), m, n, torch.bfloat16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("recipe", ["rowwise_fast", "tensorwise", "rowwise_fp32"])
@pytest.mark.parametrize("m,n,k", ALONG_N[:4])
def test_1x2_fp8(recipe: str, m: int, n: int, k: int) -> None:
    torch.manual_seed(m + 3 * n)
    k = -(-k // 16) * 16
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    out_dtype = torch.float32 if "fp32" in recipe else torch.bfloat16
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, None, out_dtype, True), "1x2")
    out = _run(kern, m, n, out_dtype, a, b, sa, sb)
    assert _err(out, (a.float() @ b.float()) * sa * sb) < 1e-3


def test_1x2_in_a_cuda_graph() -> None:
    """The 1x2 kernel replayed in a CUDA graph over a poisoned output gives the eager launch's bits."""
    torch.manual_seed(2)
    m, n, k = 4634, 4968, 3672
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    kern = _kernel(checks.matmul_spec(a, b, None), "1x2")
    eager = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, eager)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager) and not out.isnan().any()
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


# 2x1 clusters of ping-pong consumers (issue 24): each warpgroup's whole 128x128 tile, both CTAs the same tiles offset
# by 128 rows. (130, 272, 64): rank 1 of the only cluster tile row holds 2 rows; (100, 272, 136): none.
PINGPONG = [(300, 528, 200), (2000, 2112, 1008), (4634, 4976, 3672), (130, 272, 64), (100, 272, 136)]


def _one_cta(kern: Kernel) -> Kernel:
    """`kern`'s ping-pong plan in one CTA per tile: the same tiles, k-blocks and order, so the same bits."""
    dev = DeviceInfo.current()
    one = build(kern.spec, dev, plan_schedule(kern.spec, dev, cluster=1, pingpong=True))
    assert one.plan.cluster == 1 and one.plan.pingpong and (one.plan.bm, one.plan.bn) == (kern.plan.bm, kern.plan.bn)
    return one


@pytest.mark.parametrize("b_k_major", [False, True])
@pytest.mark.parametrize("m,n,k", PINGPONG)
def test_pingpong_bf16(m: int, n: int, k: int, b_k_major: bool) -> None:
    torch.manual_seed(m + 5 * n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if b_k_major else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    kern = _kernel(checks.matmul_spec(a, b, None), pingpong=True)
    out = _run(kern, m, n, torch.bfloat16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    assert torch.equal(out, _run(_one_cta(kern), m, n, torch.bfloat16, a, b))


@pytest.mark.parametrize("recipe", ["rowwise_fast", "tensorwise", "rowwise_bias_fp32"])
@pytest.mark.parametrize("m,n,k", PINGPONG)
def test_pingpong_fp8(recipe: str, m: int, n: int, k: int) -> None:
    torch.manual_seed(m + 7 * n)
    k = -(-k // 16) * 16
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if "bias" in recipe else None
    out_dtype = torch.float32 if "fp32" in recipe else torch.bfloat16
    kern = _kernel(checks.scaled_mm_spec(a, b, sa, sb, bias, out_dtype, True), pingpong=True)
    out = _run(kern, m, n, out_dtype, a, b, sa, sb, bias)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert _err(out, ref) < 1e-3
    assert torch.equal(out, _run(_one_cta(kern), m, n, out_dtype, a, b, sa, sb, bias))


def test_pingpong_in_a_cuda_graph() -> None:
    """The ping-pong cluster kernel replayed in a CUDA graph over a poisoned output gives the eager launch's bits."""
    torch.manual_seed(3)
    m, n, k = 4634, 4968, 3672
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    kern = _kernel(checks.matmul_spec(a, b, None), pingpong=True)
    eager = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, eager)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager) and not out.isnan().any()


# 2x1 clusters of fitted tiles (n_blocks with cluster=2, ir.Tiling.interleaved): each CTA holds its rows of the
# cluster tile in 64-row blocks, one per consumer warpgroup, and the lead multicasts each of B's block boxes. Ragged
# cluster tiles, rows that are not 128-byte lines, a last cluster tile whose second CTA's rows lie past M, three blocks.
FITTED = [(300, 528, 200, (128, 16)), (1256, 1720, 1000, (128, 16)), (3097, 920, 2920, (128, 64)),
          (130, 200, 64, (128, 32)), (2000, 2112, 1008, (128, 64, 16))]


def _fitted(spec: object, blocks: tuple[int, ...], cluster: int = 2) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, cluster=cluster, bm=128, bn=256,  # type: ignore[arg-type]
                                          n_blocks=blocks))
    assert kern.module.tiling.interleaved == (cluster == 2) and kern.plan.n_blocks == blocks
    return kern


@pytest.mark.parametrize("m,n,k,blocks", FITTED)
def test_fitted_bf16(m: int, n: int, k: int, blocks: tuple[int, ...]) -> None:
    """Against fp32, and bit for bit against the same fitted tile in one CTA (the same k order per element)."""
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec = checks.matmul_spec(a, b, None)
    out = _run(_fitted(spec, blocks), m, n, torch.bfloat16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    assert torch.equal(out, _run(_fitted(spec, blocks, cluster=1), m, n, torch.bfloat16, a, b))


@pytest.mark.parametrize("recipe", ["rowwise_fast", "tensorwise", "rowwise_bias_fp32"])
@pytest.mark.parametrize("m,n,k,blocks", [(300, 528, 208, (128, 16)), (1256, 1728, 1008, (128, 16)),
                                          (3097, 928, 2928, (128, 64))])  # (fp8: N a multiple of 16, as torch's)
def test_fitted_fp8(recipe: str, m: int, n: int, k: int, blocks: tuple[int, ...]) -> None:
    torch.manual_seed(m + 3 * n)
    k = -(-k // 16) * 16
    a, b = fp8_pair(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if "bias" in recipe else None
    out_dtype = torch.float32 if "fp32" in recipe else torch.bfloat16
    out = _run(_fitted(checks.scaled_mm_spec(a, b, sa, sb, bias, out_dtype, True), blocks), m, n, out_dtype, a, b,
               sa, sb, bias)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert _err(out, ref) < 1e-3


def _bf16_k_major(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
            torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t())


def _assert_replays_as_eager(kern: Kernel, a: torch.Tensor, b: torch.Tensor) -> None:
    """`kern` replayed in a CUDA graph writes every element of C, with the bits of an eager call."""
    eager = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, eager)
    out = torch.empty_like(eager)
    replayed(lambda: kern.run(a, b, out), out)
    assert torch.equal(out, eager) and not out.isnan().any()


def test_fitted_in_a_cuda_graph() -> None:
    a, b = _bf16_k_major(1256, 1720, 2000, seed=5)
    _assert_replays_as_eager(_fitted(checks.matmul_spec(a, b, None), (128, 16)), a, b)


# Rule 24's forced 128x128 and 64x128 tiles (CLUSTER_TILES): cluster tiles of 256x128 and 128x128, B multicast. A
# mid-size shape of the zoo where 64x128 clusters ran faster, tall-narrow rows that are not 128-byte lines, a ragged
# last cluster tile whose second CTA's rows lie past M.
SMALL_TILES = [(300, 528, 200), (662, 1096, 3752), (6262, 120, 2120), (130, 272, 64)]


def _small(spec: object, bm: int, cluster: int = 2, stages: int | None = None) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, cluster=cluster, bm=bm, bn=128,  # type: ignore[arg-type]
                                          stages=stages))
    assert (kern.plan.cluster, kern.plan.bm, kern.plan.bn) == (cluster, bm, 128)
    return kern


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("b_k_major", [False, True])
@pytest.mark.parametrize("m,n,k", SMALL_TILES)
def test_small_tiles_bf16(m: int, n: int, k: int, b_k_major: bool, bm: int) -> None:
    """Against fp32; 64x128, bit for bit against the same tile one CTA a tile (the same warpgroup MMAs, in the same k
    order). (A 128x128 cluster's warpgroups each take 128 cluster rows by 64 columns where one CTA's take 64 rows by
    128: other wgmma shapes, whose sums may round apart, as the 128x256 form's.)"""
    torch.manual_seed(m + n + k + bm)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if b_k_major
         else torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
    spec = checks.matmul_spec(a, b, None)
    kern = _small(spec, bm)
    out = _run(kern, m, n, torch.bfloat16, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    if bm == 64:
        one = _small(spec, bm, cluster=1, stages=kern.plan.stages)
        assert torch.equal(out, _run(one, m, n, torch.bfloat16, a, b))


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_bias_fp32", "tensorwise_promoted", "blockwise_128x128"])
@pytest.mark.parametrize("m,n,k", [(300, 528, 208), (6256, 128, 2128)])
def test_small_tiles_fp8(recipe: str, m: int, n: int, k: int, bm: int) -> None:
    torch.manual_seed(m + 5 * n + bm)
    a, b = fp8_pair(m, n, k)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if "bias" in recipe else None
    out_dtype = torch.float32 if "fp32" in recipe else torch.bfloat16
    if recipe == "blockwise_128x128":
        sa, sb = _blockwise_scales(m, -(-k // 128), 1), _blockwise_scales(-(-k // 128), -(-n // 128), 2)
        da, db = dequantized(a, b, sa, sb)
        ref = da @ db
    else:
        sa, sb = fp8_scales(m, n, recipe.startswith("tensorwise"))
        ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    spec = checks.scaled_mm_spec(a, b, sa, sb, bias, out_dtype, "fast" in recipe or "bias" in recipe)
    out = _run(_small(spec, bm), m, n, out_dtype, a, b, sa, sb, bias)
    assert _err(out, ref) < 1e-3


def test_small_tiles_in_a_cuda_graph() -> None:
    a, b = _bf16_k_major(6262, 120, 2120, seed=6)
    _assert_replays_as_eager(_small(checks.matmul_spec(a, b, None), 64), a, b)
