"""Blockwise fp8 recipes without a GPU: how scales are recognised, refused, planned and simulated end to end.

scale_a (M, ceil(K/128)) with scale_b (ceil(K/128), ceil(N/128)) is 1x128 x 128x128 (DeepSeek-V3); with scale_b
(ceil(K/128), N) it is 1x128 x 1x128. Any strides are accepted (the kernel copies scales element by element);
torch.nn.functional.scaled_mm's 128x128 scale_b with K-blocks padded to a multiple of 4 is accepted too.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import H100_SXM, H200
from warploom.errors import ScaleError
from warploom.kernel import build
from warploom.planner import decode_split, latency_split, latency_tiles, plan_schedule, stage_bytes
from warploom.reference import Inputs, dequantized, reference, relative_error
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

E4 = torch.float8_e4m3fn
BW, BW1 = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128


def fp8(m: int, n: int, k: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(m * 7 + n * 3 + k)
    a = (torch.randn(m, k, generator=g) * 2).to(E4)
    b = (torch.randn(n, k, generator=g) * 2).to(E4).t()
    return a.to(device), b.to(device)


def recipe(m: int, n: int, k: int, sa: torch.Tensor, sb: torch.Tensor) -> ScaleRecipe:
    a, b = fp8(m, n, k, "meta")
    return checks.scaled_mm_spec(a, b, sa.to("meta"), sb.to("meta")).scale


@pytest.mark.parametrize("m,n,k", [(256, 384, 1024), (1, 16, 4096), (300, 528, 1008), (64, 7168, 2048)])
def test_recipes_by_shape(m: int, n: int, k: int) -> None:
    kb, nb = -(-k // 128), -(-n // 128)
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(kb, nb)) is BW
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(kb, n)) is BW1
    # torch's layouts: 1x128 scales outer-dim-major, F.scaled_mm's K-blocks padded to 4 for 128x128.
    assert recipe(m, n, k, torch.ones(kb, m).t(), torch.ones(kb, nb)) is BW
    padded = -(-kb // 4) * 4
    assert recipe(m, n, k, torch.ones(m, kb), torch.ones(nb, padded).t()) is BW
    # Expanded (stride-0) views are scales like any other.
    assert recipe(m, n, k, torch.ones(1, kb).expand(m, kb), torch.ones(kb, 1).expand(kb, n)) is BW1


def test_one_k_block_of_per_column_scales_is_rowwise() -> None:
    """K <= 128: 1x128 x 1x128 scales are (M, 1) and (1, N), the rowwise shapes, with the rowwise meaning."""
    assert recipe(64, 256, 128, torch.ones(64, 1), torch.ones(1, 256)) is ScaleRecipe.ROWWISE
    assert recipe(64, 256, 128, torch.ones(64, 1), torch.ones(1, 2)) is BW


def test_blockwise_is_always_promoted() -> None:
    a, b = fp8(128, 256, 512, "meta")
    for fast in (False, True):
        spec = checks.scaled_mm_spec(a, b, torch.ones(128, 4, device="meta"), torch.ones(4, 2, device="meta"),
                                     use_fast_accum=fast)
        assert spec.accumulation is Accumulation.PROMOTED
    with pytest.raises(ValueError, match="must be PROMOTED"):
        GemmSpec(128, 256, 512, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW)


@pytest.mark.parametrize("sa_shape,sb_shape,arg", [
    ((128, 5), (4, 2), "scale_a"),  # one K-block too many
    ((128, 4), (4, 3), "scale_b"),  # N-blocks of another N
    ((128, 4), (2, 2), "scale_b"),  # K-blocks of another K
    ((128, 4), (2, 4), "scale_b"),  # (N-blocks, K-blocks): must be passed transposed (a view)
    ((4, 128), (4, 2), "scale_a"),  # (K-blocks, M)
])
def test_wrong_shapes_name_the_argument(sa_shape: tuple[int, int], sb_shape: tuple[int, int], arg: str) -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError) as e:
        checks.scaled_mm_spec(a, b, torch.ones(sa_shape, device="meta"), torch.ones(sb_shape, device="meta"))
    assert e.value.arg == arg
    assert "BlockWise128x128" in str(e.value) and "(128, 4)" in str(e.value)


def test_wrong_scale_dtype() -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError, match="scale_b: expected a torch.float32"):
        checks.scaled_mm_spec(a, b, torch.ones(128, 4, device="meta"),
                              torch.ones(4, 2, device="meta", dtype=torch.bfloat16))


def test_planner_counts_the_scale_slots() -> None:
    spec = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW,
                    accumulation=Accumulation.PROMOTED)
    per_col = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW1,
                       accumulation=Accumulation.PROMOTED)
    plain = 128 * 128 + 256 * 128
    assert stage_bytes(spec, 128, 256, 128) == plain + 4 * (128 + 2)
    assert stage_bytes(per_col, 128, 256, 128) == plain + 4 * (128 + 256)
    for s in (spec, per_col):
        for kw in ({}, {"bn": 128}, {"bm": 64, "bn": 128}):
            p = plan_schedule(s, H100_SXM, **kw)
            warploom.kernel.build(s, H100_SXM, p)  # the complete verifier checks shared memory against the SM


LAYOUTS = [(lay, per_col) for lay in ("row", "col", "expanded") for per_col in (False, True)] + [("padded", False)]


@pytest.mark.parametrize("layout,per_col", LAYOUTS)
def test_cpu_scaled_mm_matches_dequantized_product(layout: str, per_col: bool) -> None:
    """The public API on CPU tensors runs the planned kernel on the simulator: every scale layout, ragged tiles."""
    m, n, k = 96, 272, 640
    kb, nb = 5, 3
    a, b = fp8(m, n, k)
    cols = n if per_col else nb
    g = torch.Generator().manual_seed(1)
    sa, sb = torch.rand(m, kb, generator=g) + 0.5, torch.rand(kb, cols, generator=g) + 0.5
    if layout == "col":
        sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()
    elif layout == "expanded":
        sa, sb = sa[:1].expand(m, kb), sb[:, :1].expand(kb, cols)
    elif layout == "padded":  # torch pads only the 128x128 layout's K-blocks, to 8 here; padding never read
        sb = torch.cat([sb, torch.full((3, cols), float("nan"))]).t().contiguous().t()
    out = warploom.scaled_mm(a, b, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    assert out.dtype == torch.bfloat16 and not out.isnan().any()
    assert relative_error(out.float(), da @ db) < 1e-5
    assert relative_error(out.float(), reference(Inputs(a, b, sa, sb[:kb]))) < 1e-5


def test_cpu_blockwise_bias_and_zero_sizes() -> None:
    a, b = fp8(64, 128, 256)
    sa, sb = torch.rand(64, 2) + 0.5, torch.rand(2, 1) + 0.5
    bias = torch.randn(128)
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32)
    da, db = dequantized(a, b, sa, sb)
    assert relative_error(out, da @ db + bias) < 1e-10
    a0, b0 = fp8(64, 128, 0)
    out = warploom.scaled_mm(a0, b0, torch.ones(64, 0), torch.ones(0, 1), bias=bias.bfloat16())
    assert torch.equal(out, bias.bfloat16().expand(64, 128))


def test_plan_on_meta_names_the_recipe_and_schedule() -> None:
    a, b = fp8(4096, 7168, 16384, "meta")
    k = warploom.plan(a, b, torch.ones(128, 4096, device="meta").t(), torch.ones(128, 56, device="meta"))
    assert k.spec.scale is BW
    assert "copy_scales scale_a[tile, k] -> sa_ring[p] on ready[p]" in k.schedule
    assert "promote acc0 += partial * sa_ring[c][rows] * sb_ring[c][cols]" in k.schedule
    assert "async_copy.async_copy_global_to_shared(sa_ring.index(p % STAGES)" in k.source


def test_cpu_fused_epilogue_with_blockwise_scales() -> None:
    """A fused epilogue gets the blockwise-scaled accumulator plus bias; only the bias and the user's operands are
    graph operands (the scales are the mainloop's)."""
    m, n, k = 96, 272, 640
    a, b = fp8(m, n, k)
    g = torch.Generator().manual_seed(2)
    sa, sb = torch.rand(m, 5, generator=g) + 0.5, torch.rand(5, 3, generator=g) + 0.5
    bias, res = torch.randn(n, generator=g).bfloat16(), torch.randn(m, n, generator=g).bfloat16()
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias,
                             epilogue=lambda acc, residual: torch.nn.functional.gelu(acc) + residual, residual=res)
    da, db = dequantized(a, b, sa, sb)
    ref = torch.nn.functional.gelu(da @ db + bias.float()) + res.float()
    assert relative_error(out.float(), ref) < 1e-5
    plan = warploom.plan(a, b, sa, sb, bias=bias, epilogue=lambda acc, residual: acc + residual, residual=res)
    assert plan.spec.scale is BW
    assert sorted(s.name for s in plan.spec.epilogue.operands) == ["bias", "residual"]


@pytest.mark.parametrize("m,n,k,tile", [
    (128, 4096, 7168, (64, 64)),  # 128-row tiles: 32 CTAs; 64x64: 128, one wave
    (128, 2112, 7168, (64, 64)),
    (128, 7168, 16384, (64, 128)),  # 64x64 would be 224 CTAs, two waves (measured 0.52x torch)
    (64, 7168, 16384, (64, 128)),  # rule 13's 56 tiles of 64x128 at a long K (1.085x against 64x64's 1.095x)
    (1, 4096, 7168, (64, 64)),
    (129, 4096, 7168, (128, 128)),  # past rule 13's M
    (4096, 7168, 16384, (128, 256)),
])
def test_small_m_blockwise_takes_small_tiles(m: int, n: int, k: int, tile: tuple[int, int]) -> None:
    """Rule 13 (split-K off): blockwise fp8 with M <= 128 also scores 64-row and 64x64 tiles (measured at
    DeepSeek-V3's shapes); other recipes keep their tiles (MX was not measured there; promoted rowwise above 64 rows
    takes rule 23's 64x64 where bf16 would), except
    that bf16 with M <= 64 is rule 16's decode (64x64 with a deep ring), or at M <= 32 rule 18's swapped one, and above
    64 rows rule 23's latency tiles where 64x64 fills at most one wave."""
    for recipe in (BW, ScaleRecipe.BLOCKWISE_1X128_1X128):
        s = GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=recipe,
                     accumulation=Accumulation.PROMOTED)
        p = plan_schedule(s, H100_SXM, split_k=1)
        # (rule 13's 64x128 at M <= 64 was measured on 1x128 x 128x128 scales: 1x128 x 1x128 keeps 64x64)
        assert (p.bm, p.bn) == ((64, 64) if recipe is not BW and m <= 64 and tile == (64, 128) else tile)
    for other in (GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=ScaleRecipe.MX,
                           accumulation=Accumulation.PROMOTED),
                  GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=ScaleRecipe.ROWWISE,
                           accumulation=Accumulation.PROMOTED)):
        p = plan_schedule(other, H100_SXM)
        if latency_tiles(other, H100_SXM):  # promoted rowwise above 64 rows: rule 23's 64x64, as native
            assert other.scale is ScaleRecipe.ROWWISE and m > 64 and (p.bm, p.bn) == (64, 64)
        else:
            assert p.bn != 64 and (p.bm == 128 or m <= 64)
    p = plan_schedule(GemmSpec(m, n, k), H100_SXM)
    if m <= 32:  # rule 18: swapped, 64x16 tiles of C^T (64x32 above M = 16)
        assert p.swap_ab and (p.bm, p.bn, p.stages) == (64, 16, 12)
    elif m <= 64:
        assert (p.bm, p.bn, p.stages) == (64, 64, 12)
    else:  # rule 23: 64x64 where its latency model wins (one wave of them at most), or rule 25 splits 64x64 tiles
        plain = GemmSpec(m, n, k)
        split = latency_split(plain, H100_SXM)
        tiles64 = split.size == 64 if split.ranges > 1 else latency_tiles(plain, H100_SXM)
        assert (p.bn == 64) == tiles64 and p.split_k == split.ranges


@pytest.mark.parametrize("m,n,k,wide", [
    (4, 7536, 4848, True),  # 59 tiles of 64x128, 38 k-blocks (session 48, H200: 0.771x -> 0.946x)
    (4, 5504, 4400, True),  # 43 tiles, 35 k-blocks (0.849x -> 1.054x)
    (8, 8000, 8400, True),  # 63 tiles (0.991x -> 1.204x)
    (64, 7168, 2048, False),  # 16 k-blocks: 64x64 ran 20% ahead (session 20)
    (4, 5616, 176, False),  # 2 k-blocks (level, session 46)
    (16, 4096, 7168, False),  # 32 tiles: under 0.3 of the SMs (rule 14 splits them)
    (16, 18000, 7168, False),  # 141 tiles: past one wave
    (65, 7168, 7168, False),  # two 64-row blocks: not measured
])
def test_rule13_takes_64x128_over_64x64_where_they_fill_the_sms(m: int, n: int, k: int, wide: bool) -> None:
    from warploom.planning.sm90.small_m import refused_tile, wide_rows64

    s = GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW, accumulation=Accumulation.PROMOTED)
    assert wide_rows64(s, H200) == wide
    assert (refused_tile(s, H200, 64, 64) is not None) == wide  # (elsewhere 64x64 stays a candidate)
    assert all(refused_tile(s, H200, bm, bn) is None for bm, bn in ((64, 128), (128, 128), (64, 256)))
    if wide:
        p = plan_schedule(s, H200)
        assert (p.bm, p.bn, p.split_k) == (64, 128, 1)
    forced = plan_schedule(s, H200, bm=64, bn=64)  # forcing the tile still gives it
    assert (forced.bm, forced.bn) == (64, 64)
    # Measured on 1x128 x 128x128 scales without bias or fused epilogue only: the others keep 64x64 a candidate.
    for other in (dataclasses.replace(s, scale=ScaleRecipe.BLOCKWISE_1X128_1X128),
                  dataclasses.replace(s, bias_dtype=warploom.DType.BF16)):
        assert not wide_rows64(other, H200) and refused_tile(other, H200, 64, 64) is None


@pytest.mark.parametrize("m,n,k,ranges", [
    (4, 816, 10400, 8),  # 82 k-blocks = 2 x 41: 64x128 only in 2 ranges (session 48, H200: 0.800x -> 1.560x)
    (8, 1008, 9008, 8),  # 71 k-blocks, a prime: 64x128 whole (0.742x -> 1.565x)
    (16, 640, 12000, 8),  # 94 = 2 x 47 (0.731x -> 1.670x)
    (32, 896, 7408, 8),  # 58 = 2 x 29 (1.206x -> 2.052x)
    (8, 112, 5248, 8),  # 41 k-blocks over 2 tiles (1.126x -> 2.136x)
    (16, 3840, 5248, 1),  # 60 tiles of 64x64: 8 ranges of each would not fit one wave (not measured)
    (48, 1536, 9008, 1),  # 24 tiles: 192 units
])
def test_rule14_splits_64x64_tiles_unequally_where_128_wide_ones_cannot(m: int, n: int, k: int,
                                                                       ranges: int) -> None:
    """Rule 14 on 64x64 tiles: where K's k-blocks have no divisor from 3 to 8 that keeps the 64x128 units in one
    wave, 64x64 tiles split in up to 8 unequal ranges (ir.Tiling.uneven_split), which promoted accumulation builds
    on 64x64 tiles only; 1x128 x 1x128 scales (per-column scale_b) build no unequal ranges and keep 64x128."""
    s = GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW, accumulation=Accumulation.PROMOTED)
    p = plan_schedule(s, H200)
    if ranges == 1:  # (outside the measured regime: rule 14 splits no 64x64 tile)
        assert p.bn != 64 or p.split_k == 1
        return
    assert (p.bm, p.bn, p.split_k) == (64, 64, ranges) and p.grid == -(-m // 64) * -(-n // 64) * ranges
    module = build(s, H200, p).module
    assert module.tiling.uneven_split == bool(-(-k // 128) % ranges)
    per_column = dataclasses.replace(s, scale=ScaleRecipe.BLOCKWISE_1X128_1X128)
    q = plan_schedule(per_column, H200)
    assert (q.bm, q.bn) != (64, 64) or q.split_k == 1


@pytest.mark.parametrize("m,n,k,plan", [
    (64, 4096, 7168, (64, 128, 4)),  # 32 tiles of 64x128, 56 k-blocks: 4 ranges, 128 units (measured 1.53x)
    (64, 2112, 7168, (64, 128, 7)),  # 17 tiles: 7 ranges, 119 units (1.92x)
    (1, 2112, 7168, (64, 128, 7)),
    (128, 4096, 7168, (128, 128, 4)),  # (1.18x)
    (128, 2112, 7168, (128, 128, 7)),  # (1.58x)
    (64, 7168, 2048, (64, 64, 1)),  # 16 k-blocks: too short (measured 0.87x split against 0.97x)
    (24, 96, 4000, (64, 128, 8)),  # 32 k-blocks in 8 on 64x128 (zoo: 2.065x), not rule 14's 64x64 split
    (44, 96, 7968, (64, 128, 7)),  # 63 = 7 x 9 (zoo: 1.633x)
    (4, 5584, 9504, (64, 128, 3)),  # 75 = 3 x 25, 44 tiles (zoo: 1.312x); 88 of 64x64 would not fit 8 ranges
    (128, 7168, 16384, (64, 128, 1)),  # 56 tiles of 128x128: more than a third of the SMs
    (129, 2112, 7168, (64, 64, 1)),  # past M = 128: no split; rule 23's 64x64, 99 tiles in one wave (session 45)
])
def test_rule14_splits_k_for_few_tiles(m: int, n: int, k: int, plan: tuple[int, int, int]) -> None:
    for recipe in (BW, ScaleRecipe.BLOCKWISE_1X128_1X128):
        s = GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=recipe,
                     accumulation=Accumulation.PROMOTED)
        p = plan_schedule(s, H100_SXM)
        # (rule 23 takes promoted blockwise as measured, 1x128 x 128x128 only: 1x128 x 1x128 keeps 128x128 past M=128)
        want = (128, 128, 1) if m > 128 and recipe is not BW else plan
        assert (p.bm, p.bn, p.split_k) == want
        assert p.grid == min(132, -(-m // p.bm) * -(-n // p.bn) * p.split_k)
    # Not for a bias (summed once) or MX (its scale partition); rowwise and bf16 only by rule 25: `latency_split`
    # above 64 rows, `decode_split` (64x64 units) at decode sizes.
    for other in (GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, warploom.DType.BF16, scale=BW,
                           accumulation=Accumulation.PROMOTED, bias_dtype=warploom.DType.BF16),
                  GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=ScaleRecipe.MX,
                           accumulation=Accumulation.PROMOTED)):
        assert plan_schedule(other, H100_SXM).split_k == 1
    for native in (GemmSpec(m, n, k, warploom.DType.E4M3, warploom.DType.E4M3, scale=ScaleRecipe.ROWWISE),
                   GemmSpec(m, n, k)):
        ranges = latency_split(native, H100_SXM).ranges if m > 64 else decode_split(native, H100_SXM)
        assert plan_schedule(native, H100_SXM).split_k == ranges


def test_scale_partition_is_forced_only_and_checked() -> None:
    from warploom.errors import UnsupportedError

    s = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW,
                 accumulation=Accumulation.PROMOTED)
    assert not plan_schedule(s, H100_SXM).scale_partition  # rule 11: in-stage by default
    p = plan_schedule(s, H100_SXM, scale_partition=True)
    assert p.scale_partition and p.short().endswith("_sp") and p.consumer_regs == 240
    with pytest.raises(UnsupportedError, match="not built yet"):
        plan_schedule(s, H100_SXM, scale_partition=True, pingpong=True)
    rowwise = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=ScaleRecipe.ROWWISE)
    with pytest.raises(UnsupportedError, match="needs blockwise scales"):
        plan_schedule(rowwise, H100_SXM, scale_partition=True)


def test_small_workers_sharing_a_warpgroup_need_one_budget() -> None:
    """Triton packs the 1-warp producer and scale partition into one warpgroup; setmaxnreg is per warpgroup."""
    from dataclasses import replace

    from warploom.ir import verify

    s = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW,
                 accumulation=Accumulation.PROMOTED)
    m = warploom.kernel.build(s, H100_SXM, plan_schedule(s, H100_SXM, scale_partition=True)).module
    assert m.launched_warps == 12
    assert m.register_need == 32 * (8 * 240 + 4 * 24)
    bad = m.with_partition(replace(m.partition("scales"), regs=40))
    assert any("needs one budget" in e for e in verify.complete(bad, H100_SXM))


# MX fp8: e8m0 scales per 32 of K, scale_a (M, K/32) and scale_b (N, K/32).

def e8m0(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(118, 137, (rows, cols), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)


def test_mx_recipe_and_plan() -> None:
    a, b = fp8(4096, 4096, 4096, "meta")
    k = warploom.plan(a, b, e8m0(4096, 128).to("meta"), e8m0(4096, 128).to("meta"))
    assert k.spec.scale is ScaleRecipe.MX and k.spec.accumulation is Accumulation.PROMOTED
    # Rule 12: the scale partition (single-byte scales), its warpgroup at 40 registers, the consumers at 232.
    assert k.plan.scale_partition and k.plan.producer_regs == 40 and k.plan.consumer_regs == 232
    assert k.plan.bn == 128  # 256 wide spills beside the decoding warp (rule 12)
    assert k.schedule.count("k[96:128]") == 2  # each warpgroup's last 32-deep slice of the k-block
    assert "gl.exp2(sa_bits - 127.0)" in k.source
    # A last k-block of fewer than 4 slices (K a multiple of 32, not 128) must not read past the scales.
    assert "(kk * 4 + j < K // 32)" in k.source
    from warploom.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="MX scales need the scale partition"):
        plan_schedule(k.spec, H100_SXM, scale_partition=False)


@pytest.mark.parametrize("sa_shape,sb_shape,arg,match", [
    ((128, 17), (256, 16), "scale_a", r"\(128, 16\)"),
    ((128, 16), (16, 256), "scale_b", r"\(256, 16\)"),  # (K/32, N): the weight's scales are (N, K/32)
])
def test_mx_bad_shapes(sa_shape: tuple[int, int], sb_shape: tuple[int, int], arg: str, match: str) -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError, match=match) as e:
        checks.scaled_mm_spec(a, b, e8m0(*sa_shape).to("meta"), e8m0(*sb_shape).to("meta"))
    assert e.value.arg == arg


def test_mx_mixed_scale_dtypes_and_k() -> None:
    a, b = fp8(128, 256, 512, "meta")
    with pytest.raises(ScaleError, match="float8_e8m0fnu like the other scale"):
        checks.scaled_mm_spec(a, b, e8m0(128, 16).to("meta"), torch.ones(256, 16, device="meta"))
    a, b = fp8(128, 256, 528, "meta")  # K = 528: a multiple of 16, not of 32
    from warploom.errors import ShapeError

    with pytest.raises(ShapeError, match="multiple of 32"):
        checks.scaled_mm_spec(a, b, e8m0(128, 16).to("meta"), e8m0(256, 16).to("meta"))


@pytest.mark.parametrize("layout", ["row", "col"])
def test_cpu_mx_matches_dequantized_product(layout: str) -> None:
    m, n, k = 96, 272, 640
    a, b = fp8(m, n, k)
    sa, sb = e8m0(m, k // 32, 1), e8m0(n, k // 32, 2)
    if layout == "col":
        sa, sb = sa.t().contiguous().t(), sb.t().contiguous().t()
    out = warploom.scaled_mm(a, b, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    assert relative_error(out.float(), da @ db) < 1e-5
    # A fused epilogue sees the MX-scaled accumulator.
    res = torch.randn(m, n).bfloat16()
    fused = warploom.scaled_mm(a, b, sa, sb, epilogue=lambda acc, r: torch.relu(acc) + r, r=res)
    assert relative_error(fused.float(), torch.relu(da @ db) + res.float()) < 1e-5


def test_mx_nan_scale_poisons_its_row() -> None:
    """e8m0 255 is NaN: that row's every output is NaN, as the dequantized product says; others stay finite."""
    m, n, k = 64, 128, 256
    a, b = fp8(m, n, k)
    sa, sb = e8m0(m, 8, 3), e8m0(n, 8, 4)
    sa.view(torch.uint8)[5, 2] = 255
    out = warploom.scaled_mm(a, b, sa, sb)
    assert out[5].isnan().all() and not out[torch.arange(m) != 5].isnan().any()


def test_multi_warp_copiers_sync_before_the_stage_arrival() -> None:
    """cp.async copies spread over several warps: every warp must have registered its copies with the barrier
    before the one thread's arrival that can complete the phase."""
    from dataclasses import replace

    s = GemmSpec(4096, 4096, 4096, warploom.DType.E4M3, warploom.DType.E4M3, scale=BW,
                 accumulation=Accumulation.PROMOTED)
    one = warploom.kernel.build(s, H100_SXM, plan_schedule(s, H100_SXM)).source
    four = warploom.kernel.build(s, H100_SXM, replace(plan_schedule(s, H100_SXM), producer_warps=4)).source
    assert "every warp's copies tracked" not in one
    assert four.count("every warp's copies tracked") == 2  # after each of the two scale copies


def test_rule23_takes_promoted_rowwise_and_blockwise_as_measured() -> None:
    """Rule 23's 64x64 latency tiles for promoted accumulation (session 45): fp8 rowwise with use_fast_accum=False above
    64 rows and blockwise 1x128 x 128x128 above rule 13's 128, where its model picks them (both measured faster at
    every zoo shape it changed); not with a bias, not for the unmeasured recipes, and not where rules 13 and 14 plan
    small-M blockwise."""
    from warploom.planning.sm90.latency import promoted_latency_kind

    e4 = warploom.DType.E4M3

    def spec(m: int, n: int, k: int, scale: ScaleRecipe, **kw: object) -> GemmSpec:
        return GemmSpec(m, n, k, e4, e4, scale=scale, accumulation=Accumulation.PROMOTED, **kw)  # type: ignore[arg-type]

    for s in (spec(513, 368, 5168, ScaleRecipe.ROWWISE), spec(589, 656, 6016, BW)):
        p = plan_schedule(s, H100_SXM)
        assert promoted_latency_kind(s, H100_SXM) and (p.bm, p.bn, p.stages, p.split_k) == (64, 64, 8, 1), p.short()
    # (732x240x8688's 64x64 tiles, 1.47x torch, gave way to rule 25's split in session 46: 1.92x)
    p = plan_schedule(spec(732, 240, 8688, BW), H100_SXM)
    assert (p.bm, p.bn, p.split_k) == (128, 128, 4), p.short()
    assert plan_schedule(spec(2450, 192, 80, ScaleRecipe.ROWWISE), H100_SXM).short() == "64x64x128_s4_w4_g8"
    for s in (spec(732, 240, 8688, BW1), spec(732, 240, 8688, ScaleRecipe.TENSORWISE),
              spec(732, 240, 8688, ScaleRecipe.ROWWISE, bias_dtype=warploom.DType.BF16),
              spec(64, 240, 8688, ScaleRecipe.ROWWISE), spec(128, 4096, 7168, BW)):
        assert not promoted_latency_kind(s, H100_SXM)
        assert not latency_tiles(s, H100_SXM), s.short()
    # small-M blockwise keeps rule 14's split 128x128 (measured 1.18x), not rule 23's whole 64x64
    p = plan_schedule(spec(128, 4096, 7168, BW), H100_SXM)
    assert (p.bm, p.bn, p.split_k) == (128, 128, 4)
