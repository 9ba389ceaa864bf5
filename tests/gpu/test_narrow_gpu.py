"""GPU tier for rules 31 and 32's narrow and fitted tiles (`ir.Tiling.n_blocks`): tiles of tile_n = sum(blocks)
columns, each power-of-two column block its own wgmma, accumulator, B box and stores, and rule 32's 192-row tiles (A
in 64-row boxes). Against fp32 references (bf16 by assert_close, fp8 by a scale-free error), outputs poisoned with
NaN, shapes that are not tile multiples and many tiles along N (where a store past a tile's tile_n columns would
overwrite its neighbour's): forced blocks on every schedule that takes them, the planner's own choice through the
public API, and CUDA graph replays."""

from __future__ import annotations

import pytest
import torch
from graphs import replayed

import warploom
from warploom import checks
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.planner import plan_schedule

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _scale_free(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())


@pytest.mark.parametrize("m,n,k,kw,blocks", [
    (10050, 80, 1280, dict(bm=128, bn=128), (64, 16)),
    (3000, 72, 520, dict(bm=64, bn=128), (64, 16)),
    (3794, 152, 1440, dict(bm=64, bn=256), (128, 32)),
    (1000, 176, 264, dict(bm=128, bn=256), (128, 32, 16)),
    (2090, 96, 7792, dict(bm=64, bn=128, split_k=4), (64, 32)),
    (4990, 144, 2056, dict(bm=128, bn=256, stream_k=3), (128, 16)),
    # fitted tiles, many along N (rule 32)
    (1679, 2456, 2000, dict(bm=192, bn=256, stream_k=0, cluster=1), (128, 64)),
    (1000, 1000, 520, dict(bm=192, bn=256, stream_k=0, cluster=1), (128, 32, 16)),
    (777, 1104, 304, dict(bm=128, bn=256, stream_k=0, cluster=1), (128, 16)),
    (900, 712, 3000, dict(bm=128, bn=128, split_k=3), (64, 32, 16)),
    (2000, 904, 2048, dict(bm=128, bn=256, stream_k=2), (128, 32)),
    (600, 1000, 264, dict(bm=256, bn=128, stream_k=0, cluster=1), (64, 32, 16)),
])
def test_bf16_forced(m: int, n: int, k: int, kw: dict, blocks: tuple[int, ...]) -> None:
    torch.manual_seed(m + n)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    dev = DeviceInfo.current()
    spec = checks.matmul_spec(a, b, None)
    kern = build(spec, dev, plan_schedule(spec, dev, **kw, n_blocks=blocks))  # (regridded and restaged for its blocks)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
def test_fp8_rowwise_planned(bias: bool) -> None:
    """The planner's own narrow plan, through warploom.scaled_mm, inside a CUDA graph."""
    torch.manual_seed(3)
    m, n, k = 10050, 80, 1280
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bv = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None
    assert warploom.plan(a, b, sa, sb, bias=bv, use_fast_accum=True).plan.n_blocks == (64, 16)
    ref = (a.float() @ b.float()) * sa * sb + (bv.float() if bv is not None else 0)
    out = warploom.scaled_mm(a, b, sa, sb, bias=bv, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert _scale_free(out, ref) < 1e-2
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = warploom.scaled_mm(a, b, sa, sb, bias=bv, out_dtype=torch.bfloat16, use_fast_accum=True)
    y.fill_(float("nan"))
    g.replay()
    assert torch.equal(y, out)


def test_bf16_planned_narrow_runs_a_wider_n() -> None:
    """Rule 31's narrow plan for N = 72; the same kernel on N = 504 runs seven 80-column tiles along N."""
    torch.manual_seed(4)
    a = torch.randn(13332, 5120, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(72, 5120, device="cuda", dtype=torch.bfloat16).t()
    assert warploom.plan(a, b).plan.n_blocks == (64, 16)
    torch.testing.assert_close(warploom.matmul(a, b).float(), a.float() @ b.float(), atol=0.5, rtol=0.02)
    kern = build(checks.matmul_spec(a, b, None), DeviceInfo.current())
    wide = torch.randn(504, 5120, device="cuda", dtype=torch.bfloat16).t()
    out = torch.full((13332, 504), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, wide, out)
    torch.testing.assert_close(out.float(), a.float() @ wide.float(), atol=0.5, rtol=0.02)


@pytest.mark.parametrize("m,n,k,want", [
    (1679, 2456, 2000, (192, (128, 64))),
    (3838, 576, 2768, (128, (128, 16))),
    (1536, 1536, 1536, (128, (128, 16))),
])
def test_bf16_rule32_planned_in_a_graph(m: int, n: int, k: int, want: tuple[int, tuple[int, ...]]) -> None:
    """Rule 32's own fitted plans through warploom.matmul, eager and replayed in a CUDA graph."""
    torch.manual_seed(m)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    plan = warploom.plan(a, b).plan
    assert (plan.bm, plan.n_blocks) == want
    out = warploom.matmul(a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.5, rtol=0.02)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = warploom.matmul(a, b)
    y.fill_(float("nan"))
    g.replay()
    assert torch.equal(y, out)


def test_fp8_rowwise_bias_fitted_forced() -> None:
    """fp8 rowwise with a bias on forced fitted tiles (rule 32 plans 16-bit operands only)."""
    torch.manual_seed(5)
    m, n, k = 1500, 1008, 1024
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    bv = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dev = DeviceInfo.current()
    spec = checks.scaled_mm_spec(a, b, sa, sb, bv, torch.bfloat16, True)
    kern = build(spec, dev, plan_schedule(spec, dev, bm=128, bn=256, stream_k=0, cluster=1, n_blocks=(128, 32)))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb, bv)
    ref = (a.float() @ b.float()) * sa * sb + bv.float()
    assert _scale_free(out, ref) < 1e-2


def _planned_matches_fp32(m: int, n: int, k: int, dtype: torch.dtype, want: tuple[object, ...],
                          fields: tuple[str, ...]) -> None:
    """The planner's plan for bf16/fp16 M x N x K has `fields` equal to `want` (so the test cannot pass on another
    tile); then warploom.matmul against an fp32 reference, and the plan's kernel replayed in a CUDA graph over a
    poisoned output."""
    torch.manual_seed(m * 7 + n)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t()
    dev = DeviceInfo.current()
    spec = checks.matmul_spec(a, b, None)
    planned = plan_schedule(spec, dev)
    assert tuple(getattr(planned, f) for f in fields) == want, planned.short()
    ref = a.float() @ b.float()
    torch.testing.assert_close(warploom.matmul(a, b).float(), ref, atol=0.15, rtol=0.02)
    kern = build(spec, dev, planned)
    out = torch.empty((m, n), device="cuda", dtype=dtype)
    torch.testing.assert_close(replayed(lambda: kern.run(a, b, out), out).float(), ref, atol=0.15, rtol=0.02)


@pytest.mark.parametrize("m,n,k,width", [
    (141, 136, 1624, 16), (547, 64, 608, 16), (88, 80, 560, 16), (253, 136, 104, 16), (121, 112, 80, 16),
    (2232, 80, 904, 32), (284, 312, 984, 32), (1210, 128, 184, 32), (100, 944, 448, 32),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_latency_width_planned(m: int, n: int, k: int, width: int, dtype: torch.dtype) -> None:
    """Rule 33's 64x16 and 64x32 latency tiles as the planner takes them."""
    _planned_matches_fp32(m, n, k, dtype, (64, width, 1), ("bm", "bn", "split_k"))


@pytest.mark.parametrize("m,n,k", [(5113, 120, 200), (1072, 464, 200), (118, 6288, 96), (208, 3472, 64),
                                   (7268, 104, 392), (1700, 392, 136), (2244, 360, 2000), (146, 3672, 4008),
                                   (6262, 120, 2120)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_one_wave_rows64_planned(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    """Rule 35's 64x128 tiles in one wave as the planner takes them, at short K and in place of split-K."""
    _planned_matches_fp32(m, n, k, dtype, (64, 128, (), 1), ("bm", "bn", "n_blocks", "split_k"))


def _planned_fp8_matches_fp32(m: int, n: int, k: int, want: tuple[object, ...]) -> None:
    """fp8 rowwise with fast accumulation: the planner's plan has (bm, bn, n_blocks, split_k) equal to `want` (so the
    test cannot pass on another tile); then warploom.scaled_mm against the fp32 reference of the dequantized product,
    and the plan's kernel over a poisoned output."""
    torch.manual_seed(m + n)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True)
    planned = plan_schedule(spec, DeviceInfo.current())
    assert (planned.bm, planned.bn, planned.n_blocks, planned.split_k) == want, planned.short()
    ref = (a.float() @ b.float()) * sa * sb
    got = warploom.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    assert _scale_free(got, ref) < 1e-2
    kern = build(spec, DeviceInfo.current(), planned)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb, None)
    assert _scale_free(out, ref) < 1e-2


@pytest.mark.parametrize("m,n,k", [(405, 1424, 6576), (118, 6288, 96), (2240, 368, 2000), (6256, 128, 2112)])
def test_one_wave_rows64_fp8_planned(m: int, n: int, k: int) -> None:
    """Rule 35's 64x128 tiles for fp8 rowwise with fast accumulation, as the planner takes them: warploom.scaled_mm
    against the fp32 reference of the dequantized product, and the plan's kernel over a poisoned output."""
    _planned_fp8_matches_fp32(m, n, k, (64, 128, (), 1))


@pytest.mark.parametrize("m,n,k,ranges,blocks", [(2048, 96, 4096, 4, (64, 32)), (2048, 128, 4096, 4, ()),
                                                 (4096, 96, 7168, 2, (64, 32)), (1597, 80, 4192, 4, (64, 16))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_one_column_split_planned(m: int, n: int, k: int, ranges: int, blocks: tuple[int, ...],
                                  dtype: torch.dtype) -> None:
    """Rule 36's one column of 64-row tiles across N, K split in ranges, as the planner takes it."""
    _planned_matches_fp32(m, n, k, dtype, (64, 128, ranges, blocks), ("bm", "bn", "split_k", "n_blocks"))


@pytest.mark.parametrize("m,n,k,bn,ranges,blocks", [(1895, 136, 3704, 256, 4, (128, 16)), (1806, 88, 1672, 32, 1, ()),
                                                    (2364, 120, 3064, 128, 3, ()),
                                                    (1480, 176, 4728, 256, 5, (128, 32, 16))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_narrow_rows64_planned(m: int, n: int, k: int, bn: int, ranges: int, blocks: tuple[int, ...],
                               dtype: torch.dtype) -> None:
    """Rule 39's columns of 64-row tiles fitted to N (K split where long), as the planner takes them."""
    _planned_matches_fp32(m, n, k, dtype, (64, bn, ranges, blocks), ("bm", "bn", "split_k", "n_blocks"))


@pytest.mark.parametrize("m,n,k,bn,blocks", [(3794, 160, 1440, 128, (64, 16)), (1806, 96, 1680, 32, ()),
                                             (1597, 80, 4192, 32, ())])
def test_narrow_rows64_planned_fp8(m: int, n: int, k: int, bn: int, blocks: tuple[int, ...]) -> None:
    """Rule 39's whole columns of 64-row tiles for fp8 rowwise with fast accumulation, as the planner takes them:
    against the fp32 reference of the dequantized product, and the plan's kernel over a poisoned output."""
    _planned_fp8_matches_fp32(m, n, k, (64, bn, blocks, 1))
