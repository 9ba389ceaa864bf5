"""Compile-only tier: cross-compile a matrix of kernels for sm_90a on the CPU and read ptxas and the SASS.

Each kernel must compile, run its MMAs on the tensor cores' async path (HGMMA for 16-bit inputs, QGMMA for
fp8), not spill, fit the H100's 227 KiB of shared memory, and not have its wgmma serialized by ptxas
(advisory C7514 and kin: a silent performance cliff). About 30 kernels at 0.5-2 s each.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule

BF16, FP16, FP32, E4, E5 = DType.BF16, DType.FP16, DType.FP32, DType.E4M3, DType.E5M2
K_MAJOR, N_MAJOR = BLayout.K_MAJOR, BLayout.N_MAJOR
TW, RW = ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE
BW, BW1, MX = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128, ScaleRecipe.MX
NATIVE, PROMOTED = Accumulation.NATIVE, Accumulation.PROMOTED
SMEM_LIMIT = 232448  # H100 opt-in shared memory per block


def mm(m: int, n: int, k: int, dt: DType = BF16, layout: BLayout = K_MAJOR, out: DType | None = None) -> GemmSpec:
    return GemmSpec(m, n, k, dt, dt, out or dt, layout)


def f8(m: int, n: int, k: int, recipe: ScaleRecipe, acc: Accumulation = NATIVE, bias: DType | None = None,
       a: DType = E4, b: DType = E4, out: DType = BF16) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, out, K_MAJOR, recipe, acc, bias)


# (id, spec, forced plan parameters or {} for the planner's choice)
MATRIX: list[tuple[str, GemmSpec, dict[str, int]]] = [
    # 16-bit: planner's choices
    ("bf16_4096_kmajor", mm(4096, 4096, 4096), {}),
    ("bf16_296x520x1000_nmajor", mm(296, 520, 1000, layout=N_MAJOR), {}),
    ("fp16_1000x1000x72_kmajor", mm(1000, 1000, 72, FP16), {}),
    ("bf16_decode_1x4096x4096", mm(1, 4096, 4096), {}),
    ("fp16_decode_64x8192x8192_nmajor", mm(64, 8192, 8192, FP16, N_MAJOR), {}),
    # Rule 18: swap-AB decode (C^T = B^T A^T on 64x16 tiles, stored into C transposed), planned and forced.
    ("bf16_swap_16x14336x4096", mm(16, 14336, 4096), {}),
    ("fp16_swap_out_fp32_3x1000x520", mm(3, 1000, 520, FP16, out=FP32), {}),
    ("bf16_swap_128x16_forced", mm(16, 4096, 4096), dict(bm=128, bn=16, swap_ab=True)),
    ("bf16_64x16_unswapped_forced", mm(4096, 16, 4096), dict(bm=64, bn=16)),
    ("bf16_swap_64x32_27x1000x520", mm(27, 1000, 520), {}),
    # Rule 33: rule 23's 64-row tiles 16 or 32 wide (planned), and 8 wide (wgmma's narrowest, forced only); rule 34
    # cuts the ring of one-tile CTAs to their k-blocks (2 at 43x216x104).
    ("bf16_latency_64x16_planned", mm(141, 136, 1624), {}),
    ("fp16_latency_64x32_planned", mm(2232, 80, 904, FP16), {}),
    ("bf16_64x8_forced", mm(141, 136, 1624), dict(bm=64, bn=8)),
    ("bf16_ring_cut_43x216x104", mm(43, 216, 104), {}),
    ("fp16_swap_128x32_forced_out_fp32", mm(24, 4096, 4096, FP16, out=FP32), dict(bm=128, swap_ab=True)),
    ("bf16_out_fp32", mm(4096, 4096, 4096, out=FP32), {}),
    ("bf16_out_fp16_nmajor", mm(4097, 264, 8192, layout=N_MAJOR, out=FP16), {}),
    # Rules 3 and 17 at long K (16-bit operands, >= 96 k-blocks): the planner's 256x128 (N = 360 in three columns),
    # with an fp32 output (3 stages), and 128x256's stream-K where M = 168 leaves two row tiles.
    ("bf16_long_k_256x128_planned", mm(10837, 360, 8728), {}),
    ("bf16_long_k_256x128_out_fp32_planned", mm(10837, 360, 8728, out=FP32), {}),
    ("bf16_long_k_128x256_stream_k_planned", mm(168, 8424, 12040), {}),
    # Rule 17 (forced): 256x128 with four consumer warpgroups at 112 registers each.
    ("bf16_short_k_256x128", mm(4096, 7168, 2048), dict(bm=256)),
    ("fp16_256x128_nmajor_odd", mm(2000, 4104, 1000, FP16, N_MAJOR), dict(bm=256, bn=128)),
    ("e4m3_rowwise_256x128_forced", f8(4096, 4096, 4096, RW), dict(bm=256, bn=128)),
    ("e4m3_tensorwise_out_fp32_256x128_forced", f8(4096, 4096, 4096, TW, out=FP32), dict(bm=256, bn=128)),
    # 16-bit: forced tiles and stages
    ("bf16_128x256_s3_nmajor", mm(4096, 4096, 4096, layout=N_MAJOR), dict(bm=128, bn=256, stages=3)),
    ("fp16_128x128_s2", mm(2048, 2048, 2048, FP16), dict(bm=128, bn=128, stages=2)),
    ("bf16_64x256_kmajor", mm(4096, 4096, 4096), dict(bm=64, bn=256)),
    ("fp16_64x128_s6_nmajor", mm(300, 4000, 1000, FP16, N_MAJOR), dict(bm=64, bn=128, stages=6)),
    ("fp16_out_fp32_128x128", mm(333, 512, 384, FP16, out=FP32), dict(bm=128, bn=128)),
    # fp8 native (use_fast_accum=True)
    ("e4m3_tensorwise_4096", f8(4096, 4096, 4096, TW), {}),
    ("e4m3_rowwise_4096", f8(4096, 4096, 4096, RW), {}),
    # The planner's choice for this spec; spilled 288 bytes before the split-store epilogue, 272 after: keep it.
    # The planner's choice: it avoids 128x256 here, where forcing it spills 272 bytes (see planner.py).
    ("e4m3_rowwise_bias_planned", f8(4096, 4096, 4096, RW, bias=BF16), {}),
    ("e4m3_rowwise_bias_fp32_odd", f8(296, 528, 1024, RW, bias=FP32), {}),
    ("e5m2xe4m3_tensorwise", f8(4096, 4096, 4096, TW, a=E5), {}),
    ("e4m3xe5m2_rowwise_decode_64x128", f8(16, 8192, 8192, RW, b=E5), dict(bm=64, bn=128)),
    # e5m2 x e5m2 (issue 27 item 4; torch refuses it on CUDA, wgmma does not): QGMMA.F32.E5M2.E5M2.
    ("e5m2xe5m2_tensorwise", f8(4096, 4096, 4096, TW, a=E5, b=E5), {}),
    ("e5m2xe5m2_rowwise_promoted", f8(4096, 4096, 4096, RW, PROMOTED, a=E5, b=E5), {}),
    ("e4m3_tensorwise_swap_1x4096x4096", f8(1, 4096, 4096, TW), {}),
    ("e5m2xe4m3_rowwise_swap_16x4096x14336", f8(16, 4096, 14336, RW, a=E5), {}),
    ("e4m3_rowwise_swap_64x32_32x4096x14336", f8(32, 4096, 14336, RW), {}),
    ("e4m3_rowwise_bias_swap", f8(16, 4096, 4096, RW, bias=BF16), {}),
    ("e4m3_tensorwise_bias_out_fp32_swap_64x32", f8(20, 1008, 512, TW, bias=FP32, out=FP32), {}),
    ("e4m3_rowwise_bias_swap_128x32_24x9216x8192", f8(24, 9216, 8192, RW, bias=BF16), {}),
    ("e4m3_rowwise_64x256", f8(64, 7168, 16384, RW), dict(bm=64, bn=256)),
    ("e4m3_tensorwise_out_fp32", f8(4096, 4096, 4096, TW, out=FP32), {}),
    ("e4m3_tensorwise_128x128_s4_bias_fp16_out_fp16", f8(1000, 1008, 4096, TW, bias=FP16, out=FP16),
     dict(bm=128, bn=128, stages=4)),
    # fp8 promoted (use_fast_accum=False)
    ("e4m3_tensorwise_promoted", f8(4096, 4096, 4096, TW, PROMOTED), {}),
    ("e4m3_rowwise_bias_promoted", f8(4096, 4096, 4096, RW, PROMOTED, BF16), {}),
    ("e5m2xe4m3_rowwise_bias_promoted_fp32", f8(300, 256, 512, RW, PROMOTED, FP32, a=E5, out=FP32), {}),
    # fp32 output + bias spilled 40 bytes on the promoted 128x256 tile: the planner takes 128x128 here.
    ("e4m3_tensorwise_bias_promoted_out_fp32_planned", f8(4096, 4096, 4096, TW, PROMOTED, BF16, out=FP32), {}),
    ("e4m3_rowwise_promoted_64x128", f8(64, 4096, 4096, RW, PROMOTED), dict(bm=64, bn=128)),
    # Rule 23 on promoted accumulation (session 45): the planner's 64x64 tiles, 8 stages at a long K, 4 at a short one.
    ("e4m3_rowwise_promoted_latency_64x64_s8_planned", f8(513, 368, 5168, RW, PROMOTED), {}),
    ("e4m3_rowwise_promoted_latency_64x64_s4_planned", f8(2450, 192, 80, RW, PROMOTED), {}),
    ("e4m3_blockwise_latency_64x64_s8_planned", f8(589, 656, 6016, BW, PROMOTED), {}),
    # Rule 25 on promoted accumulation (session 46): 64x64 units in unequal ranges (77 k-blocks in 6), 128x128 in
    # equal ones (123 in 3, 118 in 2), as planned.
    ("e4m3_rowwise_promoted_split_64x64_k6_planned", f8(469, 96, 4928, RW, PROMOTED), {}),
    ("e4m3_blockwise_split_128x128_k3_planned", f8(292, 1536, 15712, BW, PROMOTED), {}),
    ("e4m3_rowwise_promoted_split_128x128_k2_planned", f8(1881, 224, 15088, RW, PROMOTED), {}),
    # Promoted K split in unequal ranges on one warpgroup's 64x64 tile (forced; 62 k-blocks in 3): no spill, where
    # 128x128 blockwise in unequal ranges spilled 16 bytes under 3.9 and is refused them.
    ("e4m3_rowwise_promoted_64x64_uneven_k3", f8(4992, 144, 7856, RW, PROMOTED), dict(bm=64, bn=64, split_k=3)),
    ("e4m3_blockwise_64x64_uneven_k3", f8(4992, 144, 7856, BW, PROMOTED), dict(bm=64, bn=64, split_k=3)),
    # Rules 13 and 14 at small M (session 48), as planned: 64x64 in 8 unequal ranges (82 k-blocks), 64x128 whole.
    ("e4m3_blockwise_rule14_64x64_k8_planned", f8(4, 816, 10400, BW, PROMOTED), {}),
    ("e4m3_blockwise_rule13_64x128_planned", f8(4, 7536, 4848, BW, PROMOTED), {}),
    # The planner's defaults for 128-row tiles, spelt out: one consumer partition per warpgroup (p2), and
    # promoted fp8 at 128x256 in two column blocks (h2) with 3 stages (test_defaults_are_the_planner_choice).
    ("bf16_128x256_p2", mm(4096, 4096, 4096), dict(bm=128, bn=256, stages=4, consumer_partitions=2)),
    ("e4m3_fast_128x256_p2", f8(4096, 4096, 4096, TW), dict(bm=128, bn=256, stages=4, consumer_partitions=2)),
    ("e4m3_promoted_128x256_p2_h2", f8(4096, 4096, 4096, TW, PROMOTED),
     dict(bm=128, bn=256, stages=3, consumer_partitions=2, partial_blocks=2)),
    ("e4m3_rowwise_bias_promoted_128x256_p2_h2", f8(4096, 4096, 4096, RW, PROMOTED, BF16),
     dict(bm=128, bn=256, stages=3, consumer_partitions=2, partial_blocks=2)),
    # 128 tiles of 128x128 fill 132 SMs better than 64 of 128x256.
    ("e4m3_promoted_128x128_p2", f8(1024, 2048, 4096, TW, PROMOTED),
     dict(bm=128, bn=128, stages=6, consumer_partitions=2, partial_blocks=1)),
    # ... and the single 8-warp consumer partition they replaced, still available when forced.
    ("bf16_128x256_p1_nmajor", mm(4096, 4096, 4096, layout=N_MAJOR), dict(bm=128, bn=256, consumer_partitions=1)),
    ("e4m3_promoted_128x256_p1_h2", f8(4096, 4096, 4096, RW, PROMOTED),
     dict(bm=128, bn=256, consumer_partitions=1, partial_blocks=2)),
    # Rule 10: rowwise scales + bias on the 256-wide tile, applied per 64-column block (whole, they spill).
    ("e4m3_rowwise_bias_128x256_block_epilogue", f8(4096, 4096, 4096, RW, bias=BF16),
     dict(bm=128, bn=256, stages=4)),
    # Ping-pong warpgroups (not the default): a whole 128x128 or 64x256 accumulator per warpgroup.
    ("bf16_128x128_pingpong", mm(4096, 4096, 4096), dict(bm=128, bn=128, pingpong=True)),
    ("e4m3_fast_64x256_pingpong", f8(4096, 4096, 4096, TW), dict(bm=64, bn=256, pingpong=True)),
    ("e4m3_promoted_128x128_pingpong_h2", f8(4096, 4096, 4096, RW, PROMOTED), dict(bm=128, bn=128, pingpong=True)),
    # Blockwise scales (issue 5): copied by cp.async through the A/B stages, each k-block's partial promoted with
    # them. Without its pinning wait, the scaled promotion of the first column block sank below the second
    # block's wgmma and 128x256 spilled 1360 bytes.
    ("e4m3_blockwise_128x128_planned", f8(4096, 4096, 4096, BW, PROMOTED), {}),
    ("e4m3_blockwise_1x128_planned", f8(4096, 4096, 4096, BW1, PROMOTED), {}),
    ("e4m3_blockwise_128x128_deepseek_128x256_p2_h2", f8(4096, 7168, 16384, BW, PROMOTED),
     dict(bm=128, bn=256, stages=3, consumer_partitions=2, partial_blocks=2)),
    ("e4m3_blockwise_1x128_128x128", f8(4096, 2112, 7168, BW1, PROMOTED), dict(bm=128, bn=128)),
    ("e4m3_blockwise_decode_64x128", f8(64, 7168, 2048, BW, PROMOTED), dict(bm=64, bn=128)),
    # Split-K (forced): units over k-ranges storing fp32 partials, and the reduction kernel (compiled too).
    ("bf16_decode_64x128_split2", mm(16, 8192, 8192), dict(bm=64, bn=128, split_k=2)),
    ("e4m3_rowwise_decode_64x128_split4", f8(64, 8192, 8192, RW), dict(bm=64, bn=128, split_k=4)),
    ("e4m3_blockwise_m128_128x128_split4", f8(128, 4096, 7168, BW, PROMOTED), dict(bm=128, bn=128, split_k=4)),
    # Rule 25 at decode sizes (planned): 64x64 units, 82 k-blocks in 7 unequal ranges, 73 in 8.
    ("bf16_decode_planned_split7", mm(8, 104, 5240), {}),
    ("e4m3_rowwise_decode_planned_split8", f8(8, 112, 9344, RW), {}),
    # ... in unequal ranges (ir.Tiling.uneven_split): 227 k-blocks in 6 and 5, a tail's 56 in 3. (Promoted
    # accumulation is refused unequal ranges: blockwise 128x128 in 3 spilled 16 bytes under Triton 3.9.)
    ("bf16_uneven_split6_191x440x14496", mm(191, 440, 14496), dict(bm=128, bn=128, split_k=6)),
    ("e4m3_rowwise_uneven_split5", f8(191, 448, 14496, RW), dict(bm=128, bn=128, split_k=5)),
    ("bf16_q_a_128x128_uneven_tail3", mm(4096, 2112, 7168), dict(bm=128, bn=128, tail_split=3)),
    # Stream-K (rule 21, forced): the last wave's tiles shared as k-block pieces; the fixup's partition barrier and
    # flag atomics (the planner's own choice at 384x752x5312 is stream-K too: tests/gpu/test_stream_k_gpu.py).
    ("bf16_stream_k4_384x752x5312", mm(384, 752, 5312), dict(bn=128, stream_k=4)),
    ("e4m3_rowwise_promoted_stream_k2", f8(1200, 544, 1232, RW, PROMOTED), dict(bn=128, stream_k=2)),
    # ... on one-warpgroup 64-row tiles (forced): the finisher's batched gather of up to 8 pieces.
    ("bf16_stream_k8_64x64_43x88x7960", mm(43, 88, 7960), dict(bm=64, bn=64, stream_k=8)),
    ("bf16_stream_k3_64x128_2090x96x7792", mm(2090, 96, 7792), dict(bm=64, bn=128, stream_k=3)),
    ("e4m3_rowwise_stream_k4_64x64", f8(100, 208, 2048, RW), dict(bm=64, bn=64, stream_k=4)),
    # ... with a whole wave joining the shared tiles (sk_waves, forced): 144 tiles of 128x256 on 132 SMs.
    ("bf16_stream_k2_waves1_685x6136x1680", mm(685, 6136, 1680), dict(stream_k=2, sk_waves=1)),
    # Rule 15: DeepSeek-V3's q_a + kv_a projection at 4096 tokens, 2.18 waves of 128x256 tiles: two whole waves in
    # one ranged kernel, the 24 tiles left over as split-K units in a second (planned, and forced at 128x128).
    ("e4m3_rowwise_q_a_planned_tail4", f8(4096, 2112, 7168, RW), {}),
    ("e4m3_blockwise_q_a_planned_tail4", f8(4096, 2112, 7168, BW, PROMOTED), {}),
    ("bf16_q_a_128x128_tail8", mm(4096, 2112, 7168), dict(bm=128, bn=128, tail_split=8)),
    # Rules 13 and 14 for small M, as planned: 64x64 (M = 64, N = 7168), 64x128 (M = 128, N = 7168), and split-K
    # 128x128 in 4 k-ranges (M = 128, N = 4096).
    ("e4m3_blockwise_m64_planned_64x64", f8(64, 7168, 16384, BW, PROMOTED), {}),
    ("e4m3_blockwise_1x128_m128_planned_64x128", f8(128, 7168, 16384, BW1, PROMOTED), {}),
    ("e4m3_blockwise_m128_planned_split4", f8(128, 4096, 7168, BW, PROMOTED), {}),
    # The dedicated scale partition (seed 000), forced: its warp shares the producer's warpgroup.
    ("e4m3_blockwise_scale_partition_128x256", f8(4096, 4096, 4096, BW, PROMOTED), dict(bn=256, scale_partition=True)),
    ("e4m3_blockwise_1x128_scale_partition_64x128", f8(64, 7168, 2048, BW1, PROMOTED),
     dict(bm=64, bn=128, scale_partition=True)),
    # MX fp8 (rule 12): the scale partition decodes e8m0 scales at 40 registers (24 and 32 spilled 136-280 bytes).
    ("e4m3_mx_planned", f8(4096, 4096, 4096, MX, PROMOTED), {}),
    ("e5m2xe4m3_mx_128x128", f8(4096, 2112, 7168, MX, PROMOTED, a=E5), dict(bm=128, bn=128)),
    ("e4m3_mx_bias_out_fp32_64x128", f8(64, 7168, 2048, MX, PROMOTED, BF16, out=FP32), dict(bm=64, bn=128)),
    ("e5m2xe4m3_blockwise_bias_out_fp32_64x256", f8(300, 528, 1008, BW, PROMOTED, BF16, a=E5, out=FP32),
     dict(bm=64, bn=256)),
    # 128x128 blocks of A (issue 27 item 4): each row's cp.async reads its block's scale.
    ("e4m3_blockwise_a128x128_1x128_planned", f8(4096, 4096, 4096, ScaleRecipe.BLOCKWISE_128X128_1X128, PROMOTED),
     {}),
    ("e4m3_blockwise_a128x128_128x128_planned", f8(4096, 7168, 16384, ScaleRecipe.BLOCKWISE_128X128_128X128,
                                                   PROMOTED), {}),
    ("e4m3_blockwise_a128x128_128x128_bias_300x528x1008", f8(300, 528, 1008, ScaleRecipe.BLOCKWISE_128X128_128X128,
                                                             PROMOTED, BF16), {}),
]
# The ids above whose forced parameters are exactly what the planner picks by itself.
DEFAULTS = ["bf16_128x256_p2", "e4m3_fast_128x256_p2", "e4m3_promoted_128x256_p2_h2",
            "e4m3_rowwise_bias_promoted_128x256_p2_h2", "e4m3_promoted_128x128_p2",
            "e4m3_rowwise_bias_128x256_block_epilogue", "e4m3_blockwise_128x128_deepseek_128x256_p2_h2"]

_TIMES: list[float] = []


@pytest.fixture(scope="module", autouse=True)
def private_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Generated sources go to a private directory, not the user's warploom cache."""
    old = os.environ.get("WARPLOOM_CACHE_DIR")
    os.environ["WARPLOOM_CACHE_DIR"] = str(tmp_path_factory.mktemp("warploom-cache"))
    yield
    if old is None:
        os.environ.pop("WARPLOOM_CACHE_DIR", None)
    else:
        os.environ["WARPLOOM_CACHE_DIR"] = old
    if _TIMES:
        print(f"\ncompile tier: {len(_TIMES)} kernels, {sum(_TIMES):.1f} s compiling "
              f"(max {max(_TIMES):.1f} s)")


def kernel(spec: GemmSpec, forced: dict[str, int]) -> Kernel:
    plan = plan_schedule(spec, H100_SXM, **forced) if forced else None
    k = build(spec, H100_SXM, plan)
    for key, v in forced.items():
        assert getattr(k.plan, key) == v
    return k


@pytest.mark.parametrize("name", DEFAULTS)
def test_defaults_are_the_planner_choice(name: str) -> None:
    (spec, forced) = [(s, f) for i, s, f in MATRIX if i == name][0]
    assert plan_schedule(spec, H100_SXM) == plan_schedule(spec, H100_SXM, **forced)


@pytest.mark.parametrize("spec,forced", [(s, f) for _, s, f in MATRIX], ids=[i for i, _, _ in MATRIX])
def test_cross_compiles_for_sm90a(spec: GemmSpec, forced: dict[str, int], spill_budget: int) -> None:
    k = kernel(spec, forced)
    # A plan with a split-K tail (rule 15) launches two kernels: both must build, and build as well.
    for module, compile_it in ((k.module, k.compile), (k.tail, k.compile_tail)):
        if module is None:
            continue
        t0 = time.perf_counter()
        c = compile_it()
        _TIMES.append(time.perf_counter() - t0)
        s = c.summary()
        mma, other = ("QGMMA", "HGMMA") if spec.is_fp8 else ("HGMMA", "QGMMA")
        assert c.target == "sm_90a"
        assert c.count(mma) > 0, f"no {mma} in the SASS: {s}"
        assert c.count(other) == 0, s
        assert c.registers > 0, s
        spills = c.spills
        assert spills <= spill_budget, f"{module.name} spills {spills} bytes: {s}\n{c.ptxas_log}"
        assert 0 < c.smem_bytes <= SMEM_LIMIT, s
        assert c.smem_bytes >= module.smem_bytes  # the IR's account is a lower bound of what Triton allocates
        assert not c.wgmma_serialized, c.ptxas_log
        assert "setmaxnreg" in c.ptx  # warp specialization redistributes registers
        # programmatic dependent launch (passes/launch.py): each partition waits for the previous grid, the kernel
        # lets the next one launch before its partitions fork
        assert module.dependent_launch
        assert c.ptx.count("griddepcontrol.wait") >= len(module.partitions), s
        assert c.ptx.count("griddepcontrol.launch_dependents") == 1, s


def test_e5m2_x_e5m2_is_one_wgmma_of_both_formats() -> None:
    """The claim checks.py once refused it by ("e5m2 x e5m2 has no fp8 wgmma") is false: sm_90a's wgmma takes two
    e5m2 operands (PTX wgmma...e5m2.e5m2, SASS QGMMA...E5M2.E5M2)."""
    c = kernel(f8(512, 512, 512, TW, a=E5, b=E5), {}).compile()
    assert "wgmma.mma_async.sync.aligned" in c.ptx and ".f32.e5m2.e5m2" in c.ptx
    assert c.count("QGMMA") > 0 and "E5M2.E5M2" in c.sass
