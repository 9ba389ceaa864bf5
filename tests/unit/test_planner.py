"""The planner's heuristic choices, its resource bounds, and forced parameters."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from warploom import H100_SXM, Accumulation, BLayout, DeviceInfo, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.api import plan
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import epilogue_bytes, is_decode, max_stages, plan_schedule, stage_bytes, swap_rows
from warploom.targets import compile_schedule

E4, E5, BF16, FP16, FP32 = DType.E4M3, DType.E5M2, DType.BF16, DType.FP16, DType.FP32
TILES = [(128, 256), (128, 128), (64, 256), (64, 128)]


def fp8(m: int, n: int, k: int, *, scale: ScaleRecipe = ScaleRecipe.ROWWISE, promoted: bool = False,
        out: DType = BF16, bias: DType | None = None, a: DType = E4) -> GemmSpec:
    acc = Accumulation.PROMOTED if promoted else Accumulation.NATIVE
    return GemmSpec(m, n, k, a, E4, out, BLayout.K_MAJOR, scale, acc, bias)


SPECS = [
    GemmSpec(4096, 4096, 4096),
    GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
    GemmSpec(1, 4096, 4096, FP16, FP16, FP32),
    GemmSpec(8192, 8192, 8192, out_dtype=FP32),
    fp8(4096, 4096, 4096),
    fp8(4096, 4096, 4096, scale=ScaleRecipe.TENSORWISE, promoted=True, out=FP32, bias=FP32),
    fp8(64, 7168, 16384, a=E5),
    fp8(4097, 272, 8192, bias=BF16),
]


def test_bf16_4096_cubed_picks_the_probe_schedule() -> None:
    p = plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM)
    # The probe's 128x256x64; 4 stages since the epilogue stores 256-wide tiles in two 32 KiB halves.
    assert (p.bm, p.bn, p.bk, p.stages, p.epilogue_subtiles) == (128, 256, 64, 4, 2)
    assert p.consumer_warps == 8  # two consumer warpgroups of 64 rows
    assert p.consumer_partitions == 2  # ... each its own partition
    assert p.partial_blocks == 1  # nothing to promote
    assert p.grid == 132
    assert (p.producer_regs, p.consumer_regs) == (24, 240)
    assert p.short() == "128x256x64_s4_w8_g8_e2_p2"


@pytest.mark.parametrize("spec", [fp8(4096, 4096, 4096), fp8(100, 96, 48, scale=ScaleRecipe.TENSORWISE),
                                  fp8(4096, 4096, 4096, promoted=True), fp8(16, 4096, 4096, a=E5)],
                         ids=lambda s: s.short())
def test_fp8_uses_128_bytes_of_k(spec: GemmSpec) -> None:
    assert plan_schedule(spec, H100_SXM).bk == 128


@pytest.mark.parametrize("spec", [GemmSpec(4096, 4096, 4096), GemmSpec(1, 8, 1, FP16, FP16)], ids=str)
def test_16bit_uses_bk_64(spec: GemmSpec) -> None:
    assert plan_schedule(spec, H100_SXM).bk == 64


@pytest.mark.parametrize("m", [1, 16, 33, 64])
@pytest.mark.parametrize("make", [lambda m: GemmSpec(m, 8192, 8192), lambda m: fp8(m, 8192, 8192)],
                         ids=["bf16", "fp8"])
def test_small_m_uses_64_row_tiles(m: int, make) -> None:  # type: ignore[no-untyped-def]
    p = plan_schedule(make(m), H100_SXM)
    assert p.bm == 64
    assert p.consumer_warps == 4  # one warpgroup
    assert p.consumer_partitions == 1  # nothing to split


@pytest.mark.parametrize("m", [65, 128, 4096])
def test_large_m_uses_128_row_tiles(m: int) -> None:
    p = plan_schedule(GemmSpec(m, 8192, 8192), H100_SXM)
    assert p.bm == 128 and p.consumer_warps == 8 and p.consumer_partitions == 2


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("bm,bn", TILES)
def test_stages_fit_smem_for_every_candidate(spec: GemmSpec, bm: int, bn: int) -> None:
    p = plan_schedule(spec, H100_SXM, bm=bm, bn=bn)
    assert (p.bm, p.bn) == (bm, bn)
    assert 2 <= p.stages <= 6
    module, _ = compile_schedule(spec, p, H100_SXM)
    assert module.smem_bytes <= H100_SXM.smem_per_block
    staging = sum(b.bytes for b in module.buffers)
    one_more = (p.stages + 1) * stage_bytes(spec, bm, bn, p.bk) + staging + 1024
    if spec.accumulation is Accumulation.PROMOTED and bn == 256:
        # Promoted 256-wide tiles promote in two column blocks and stop at 3 stages where more fit.
        assert p.partial_blocks == 2 and p.stages == min(3, max_stages(spec, H100_SXM, bm, bn, p.bk))
        return
    # "as many as fit": one more stage (with the 1 KiB barrier reserve) would not fit, unless capped at 6.
    assert p.stages == 6 or one_more > H100_SXM.smem_per_block


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("sms", [132, 114, 8, 1])
def test_grid_is_at_most_one_cta_per_sm_and_per_tile(spec: GemmSpec, sms: int) -> None:
    dev = DeviceInfo("test", "sm_90a", sms, H100_SXM.smem_per_block)
    p = plan_schedule(spec, dev)
    m, n = (spec.n, spec.m) if p.swap_ab else (spec.m, spec.n)  # (a swapped plan tiles C^T: rule 18)
    tiles = math.ceil(m / p.bm) * math.ceil(n / p.bn)
    assert p.grid == min(sms, tiles) and p.units(spec.m, spec.n) == tiles


@pytest.mark.parametrize("bm,bn", TILES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_forced_tile_and_stages_are_honored(bm: int, bn: int, stages: int) -> None:
    spec = GemmSpec(4096, 4096, 4096)  # the planner alone would pick 128x256x64 s3
    p = plan_schedule(spec, H100_SXM, bm=bm, bn=bn, stages=stages, group_m=4)
    assert (p.bm, p.bn, p.stages, p.group_m) == (bm, bn, stages, 4)
    assert p.consumer_warps == 4 * bm // 64
    assert p.consumer_partitions == bm // 64


@pytest.mark.parametrize("split", [1, 2])
def test_forced_consumer_partitions_are_honored(split: int) -> None:
    p = plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, consumer_partitions=split)
    assert (p.bm, p.consumer_warps, p.consumer_partitions) == (128, 8, split)
    assert p.short().endswith("_e2_p2" if split == 2 else "_e2")


def test_forced_bm_alone_is_honored_for_large_m() -> None:
    p = plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=64)
    assert p.bm == 64 and p.consumer_warps == 4


@pytest.mark.parametrize("spec", [GemmSpec(4096, 4096, 4096), fp8(4096, 4096, 4096)], ids=lambda s: s.short())
@pytest.mark.parametrize("stages", [5, 6])
def test_forced_stages_never_yield_a_plan_that_overflows_smem(spec: GemmSpec, stages: int) -> None:
    # 128x256 at 5-6 stages needs > 227 KiB; the planner must pick a tile where `stages` fit, or refuse with a
    # user-facing UnsupportedError -- not hand back a plan that later fails verification as an InternalError.
    try:
        p = plan_schedule(spec, H100_SXM, stages=stages)
    except UnsupportedError:
        return
    assert p.stages == stages
    need = stages * stage_bytes(spec, p.bm, p.bn, p.bk) + epilogue_bytes(spec, p.bm, p.bn)
    assert need <= H100_SXM.smem_per_block, f"{p.short()} needs {need} bytes of shared memory"


def test_forced_single_stage_is_planned() -> None:
    # One stage is legal (PipelineMma then releases each slot right after its wgmma); the planner never
    # picks it by itself.
    assert plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, stages=1).stages == 1
    assert plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM).stages >= 2


@pytest.mark.parametrize("kwargs", [dict(stages=7), dict(bm=512), dict(bn=64), dict(bm=32, bn=128),
                                    dict(bm=256, bn=256)], ids=str)
def test_impossible_forced_parameters_raise_unsupported(kwargs: dict) -> None:
    with pytest.raises(UnsupportedError, match="no tile shape fits"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, **kwargs)


@pytest.mark.parametrize("spec", [fp8(4096, 4096, 4096, promoted=True),
                                  fp8(8192, 8192, 8192, scale=ScaleRecipe.TENSORWISE, promoted=True),
                                  fp8(4096, 4096, 4096, promoted=True, bias=BF16)], ids=lambda s: s.short())
def test_promoted_256_wide_tiles_promote_in_two_column_blocks(spec: GemmSpec) -> None:
    # 128x256 fits the register budget only with a 128-wide partial; 3 stages measured faster than 4.
    p = plan_schedule(spec, H100_SXM)
    assert (p.bm, p.bn, p.bk, p.stages, p.consumer_partitions, p.partial_blocks) == (128, 256, 128, 3, 2, 2)
    assert p.short() == "128x256x128_s3_w8_g8_e2_p2_h2"
    # A whole-width partial at 256 wide would need 256 registers per thread: refused even when forced.
    with pytest.raises(UnsupportedError):
        plan_schedule(spec, H100_SXM, bn=256, partial_blocks=1)


def test_promoted_small_m_uses_one_64_row_partition() -> None:
    p = plan_schedule(fp8(32, 8192, 8192, promoted=True, bias=BF16), H100_SXM)
    assert (p.bm, p.consumer_warps, p.consumer_partitions) == (64, 4, 1)
    assert p.short() == "64x128x128_s6_w4_g8"


@pytest.mark.parametrize("bm", [64, 128])
def test_promoted_forced_bn_256_takes_two_blocks(bm: int) -> None:
    p = plan_schedule(fp8(4096, 4096, 4096, promoted=True), H100_SXM, bm=bm, bn=256)
    assert (p.bm, p.bn, p.partial_blocks, p.consumer_partitions) == (bm, 256, 2, bm // 64)


def test_promoted_128_wide_tiles_keep_one_partial() -> None:
    p = plan_schedule(fp8(4096, 4096, 4096, promoted=True), H100_SXM, bn=128)
    assert (p.bn, p.partial_blocks, p.stages) == (128, 1, 6)
    assert p.short() == "128x128x128_s6_w8_g8_p2"


@pytest.mark.parametrize("spec", [fp8(4096, 4096, 4096), fp8(4096, 4096, 4096, scale=ScaleRecipe.TENSORWISE),
                                  GemmSpec(4096, 4096, 4096)], ids=lambda s: s.short())
def test_native_accumulation_keeps_one_block(spec: GemmSpec) -> None:
    # Column blocks are a promoted-fp8 device: fast accumulation and 16-bit inputs never get them, and asking is
    # refused by name (it was dropped without a word until session 36's API probe).
    assert plan_schedule(spec, H100_SXM).partial_blocks == 1
    assert plan_schedule(spec, H100_SXM, partial_blocks=1).partial_blocks == 1
    with pytest.raises(UnsupportedError, match=r"^partial_blocks=2: promoted fp8's column blocks.*Fix: drop"):
        plan_schedule(spec, H100_SXM, partial_blocks=2)
    assert "_h" not in plan_schedule(spec, H100_SXM).short()


def test_native_fp8_still_takes_bn_256_when_it_wins() -> None:
    # The PROMOTED rule must not leak into NATIVE accumulation.
    assert plan_schedule(fp8(4096, 4096, 4096), H100_SXM).bn == 256


def test_wave_quantization_prefers_the_tile_that_fills_the_sms() -> None:
    # 1024x2048: 128x256 gives 64 tiles (one partial wave of 132 SMs); 128x128 gives 128 tiles, still one wave,
    # so the 10%-less-efficient tile costs 0.5/0.9 of the time and beats it; rule 32's 128x160 (104 tiles, fewer
    # bytes from L2 a FLOP than 128x128's: `sm90.fitted.l2_floor`) beats both (not measured at this shape).
    p = plan_schedule(GemmSpec(1024, 2048, 4096), H100_SXM)
    assert (p.bm, p.tile_n, p.units(1024, 2048)) == (128, 160, 104)
    assert plan_schedule(GemmSpec(1024, 2048, 4096), H100_SXM, n_blocks=()).bn == 128


def test_smaller_smem_gives_fewer_stages() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    small = DeviceInfo("small", "sm_90a", 132, 166912)
    big, less = plan_schedule(spec, H100_SXM, bm=128, bn=128), plan_schedule(spec, small, bm=128, bn=128)
    assert less.stages < big.stages
    assert compile_schedule(spec, less, small)[0].smem_bytes <= small.smem_per_block


def test_rowwise_bias_keeps_the_256_wide_tile_with_a_per_block_epilogue() -> None:
    # Whole, the 256-wide scale_b and bias vectors spill beside the accumulator; per 64-column block they fit.
    spec = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    bias_dtype=DType.BF16)
    p = plan_schedule(spec, H100_SXM)
    assert (p.bn, p.block_epilogue, p.epilogue_subtiles, p.stages) == (256, True, 4, 4)
    assert not plan_schedule(spec, H100_SXM, bn=128).block_epilogue  # 128 wide: the whole tile's vectors fit
    no_bias = replace(spec, bias_dtype=None)
    assert not plan_schedule(no_bias, H100_SXM).block_epilogue  # scale vectors alone fit whole


def test_rowwise_bias_avoidance_does_not_apply_to_column_blocks() -> None:
    # The spill is of 256-wide scale_b and bias vectors beside a whole-tile accumulator; promoted fp8 at
    # 256 wide runs its epilogue on 128-wide blocks, so it keeps the wide tile.
    spec = fp8(4096, 4096, 4096, promoted=True, bias=BF16)
    assert (plan_schedule(spec, H100_SXM).bn, plan_schedule(spec, H100_SXM).partial_blocks) == (256, 2)


@pytest.mark.parametrize("split", [5, 8])
def test_bad_consumer_partitions_are_refused(split: object) -> None:
    with pytest.raises(UnsupportedError, match="consumer_partitions=.*expected 1 .*, 2 .*, 3 or 4"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, consumer_partitions=split)  # type: ignore[arg-type]


@pytest.mark.parametrize("split,error", [(0, ValueError), ("2", TypeError)])
def test_consumer_partitions_of_the_wrong_kind_are_named(split: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="^consumer_partitions: expected .*Fix:"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, consumer_partitions=split)  # type: ignore[arg-type]


def test_three_consumer_partitions_are_bm_192s() -> None:
    with pytest.raises(UnsupportedError, match="consumer_partitions=3 is for bm=192"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, consumer_partitions=3)


def test_two_consumer_partitions_need_two_warpgroups() -> None:
    with pytest.raises(UnsupportedError, match="bm=64 has one"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=64, consumer_partitions=2)
    # Left to choose, a small M under a forced split takes the 128-row tile rather than dropping the split.
    p = plan_schedule(GemmSpec(32, 4096, 4096), H100_SXM, consumer_partitions=2)
    assert (p.bm, p.consumer_partitions) == (128, 2)


@pytest.mark.parametrize("blocks", [3, 8])  # (0: not a positive int, refused by name: test_bad_input.py)
def test_bad_partial_blocks_are_refused(blocks: int) -> None:
    # 3 blocks of a 256-wide tile would leave column 255 outside every accumulator.
    with pytest.raises(UnsupportedError, match=r"partial_blocks=.*expected 1 .*, 2 .* or 4"):
        plan_schedule(fp8(4096, 4096, 4096, promoted=True), H100_SXM, partial_blocks=blocks)


def test_forced_whole_width_partial_names_the_fix() -> None:
    with pytest.raises(UnsupportedError, match="needs partial_blocks=2"):
        plan_schedule(fp8(4096, 4096, 4096, promoted=True), H100_SXM, bn=256, partial_blocks=1)


@pytest.mark.parametrize("scale,bias", [(ScaleRecipe.TENSORWISE, DType.BF16), (ScaleRecipe.ROWWISE, DType.BF16),
                                        (ScaleRecipe.ROWWISE, DType.FP32)], ids=str)
def test_promoted_fp32_output_with_bias_avoids_the_spilling_wide_tile(scale: ScaleRecipe, bias: DType) -> None:
    # ptxas spills 8-40 bytes on 128x256 p2 h2 with an fp32 output and these biases (compile tests below
    # check the chosen plan compiles without spills).
    spec = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, DType.FP32, scale=scale, bias_dtype=bias,
                    accumulation=Accumulation.PROMOTED)
    assert plan_schedule(spec, H100_SXM).bn == 128
    assert plan_schedule(spec, H100_SXM, bn=256).bn == 256  # still available when forced
    spec16 = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, bias_dtype=bias,
                      accumulation=Accumulation.PROMOTED)
    assert plan_schedule(spec16, H100_SXM).bn == 256


def test_decode_takes_64x64_tiles_with_a_deep_ring() -> None:
    """Rule 16 (measured, docs/benchmarks.md session 16): a decode GEMM (M <= 64, native accumulation, fused
    epilogue or not) takes 64x64 tiles with up to 12 stages; other tiles keep at most 6, and outside decode
    64-wide tiles are chosen only by rule 13 or when forced. A forced depth may exceed 6 where shared memory
    holds it."""
    E4M3 = DType.E4M3
    for decode in (GemmSpec(16, 8192, 8192), GemmSpec(1, 8192, 8192, DType.FP16, DType.FP16, DType.FP32),
                   GemmSpec(64, 4096, 8192, E4M3, E4M3, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
                   GemmSpec(1, 8192, 8192, E4M3, E4M3, scale=ScaleRecipe.TENSORWISE)):
        p = plan_schedule(decode, H100_SXM, swap_ab=False)  # (M <= 16 runs swapped by default: rule 18)
        assert (p.bm, p.bn, p.stages) == (64, 64, 12), decode.short()
        assert p.stages == max_stages(decode, H100_SXM, 64, 64, p.bk)
        assert plan_schedule(decode, H100_SXM, bn=128).stages == 6
        m, _ = compile_schedule(decode, p, H100_SXM)
        assert verify.complete(m, H100_SXM) == [] and m.smem_bytes <= H100_SXM.smem_per_block
    # Wide N: two waves of 64x64 tiles score worse than one of 64x128.
    assert plan_schedule(GemmSpec(1, 16384, 8192), H100_SXM, swap_ab=False).bn == 128
    # A fused epilogue is decode too (measured): the deepest ring up to 12 beside its operands' staging.
    fused = plan(torch.empty(16, 8192, dtype=torch.bfloat16, device="meta"),
                 torch.empty(8192, 8192, dtype=torch.bfloat16, device="meta").t(), epilogue=lambda acc, r: acc + r,
                 r=torch.empty(16, 8192, dtype=torch.bfloat16, device="meta"))
    assert (fused.plan.bm, fused.plan.bn) == (64, 64)
    assert fused.plan.stages == max_stages(fused.spec, H100_SXM, 64, 64, 64) and 2 <= fused.plan.stages <= 12
    # Not decode: promoted fp8, ping-pong, M > 64.
    exact = GemmSpec(16, 8192, 8192, E4M3, E4M3, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED)
    assert plan_schedule(exact, H100_SXM).bn == 128
    assert not is_decode(GemmSpec(16, 8192, 8192), pingpong=True)
    assert plan_schedule(GemmSpec(65, 8192, 8192), H100_SXM).bn != 64
    p = plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=64, bn=64)  # forced tile, not decode: at most 6
    assert p.stages == 6
    assert plan_schedule(GemmSpec(16, 8192, 8192), H100_SXM, bn=128, stages=8).stages == 8  # forced deeper
    with pytest.raises(UnsupportedError):
        plan_schedule(GemmSpec(1, 64, 64), H100_SXM, stages=14)  # 14 x 16 KiB does not fit beside the staging
    assert max_stages(GemmSpec(16, 8192, 8192), H100_SXM, 64, 64, 64, cap=3) == 3
    # Rule 16's tiles take no split-K tail (rule 15 was measured on 128x256 only); 1.09 waves of them lose to
    # one wave of 64x128 on score.
    assert plan_schedule(GemmSpec(16, 9216, 8192), H100_SXM, bn=64).tail_split == 1  # (forced: not swapped)
    assert plan_schedule(GemmSpec(16, 9216, 8192), H100_SXM, swap_ab=False).bn == 128


def test_swapped_decode_rule_18() -> None:
    """Rule 18 (docs/benchmarks.md sessions 17-18): M <= 16 decode GEMMs that can swap run C^T = B^T A^T on 64x16
    tiles with rule 16's deep ring (M <= 32: 64x32); the module runs the swapped spec and stores C transposed.
    Anything forced about the tile, depth or partitions keeps the plain plan; forcing swap_ab where it cannot run
    says why."""
    E4M3 = DType.E4M3
    for m in (1, 7, 16):
        for spec in (GemmSpec(m, 4096, 4096), GemmSpec(m, 14336, 4096, DType.FP16, DType.FP16, DType.FP32),
                     GemmSpec(m, 4096, 14336, E4M3, E4M3, scale=ScaleRecipe.ROWWISE),
                     GemmSpec(m, 8192, 8192, E4M3, DType.E5M2, scale=ScaleRecipe.TENSORWISE)):
            p = plan_schedule(spec, H100_SXM)
            assert p.swap_ab and (p.bm, p.bn, p.stages, p.split_k, p.tail_split) == (64, 16, 12, 1, 1), spec.short()
            assert p.grid == min(H100_SXM.sm_count, -(-spec.n // 64))
            module, _ = compile_schedule(spec, p, H100_SXM)
            assert module.tiling.swap_ab and module.spec == spec.swapped()
            assert (module.spec.m, module.spec.n, module.spec.a_dtype) == (spec.n, spec.m, spec.b_dtype)
            assert [(b.rows, b.cols) for b in module.buffers] == [(16, 64)]  # C's 16 rows by the tile's 64
            assert verify.complete(module, H100_SXM) == []
            assert plan_schedule(spec, H100_SXM, swap_ab=True) == p
    # 64-row tiles would leave a thin last round: 128-row ones (two warpgroups, 6 stages), as measured.
    # (N = 200 at K = 1024: at 4096 its 4 tiles' 64 k-blocks split instead, rule 25 at decode sizes)
    for n, k, rows in ((9216, 4096, 128), (28672, 4096, 128), (14336, 4096, 64), (16384, 4096, 64),
                       (8192, 4096, 64), (200, 1024, 64)):
        p = plan_schedule(GemmSpec(16, n, k), H100_SXM)
        assert p.swap_ab and (p.bm, p.bn) == (rows, 16), n
        assert swap_rows(n, H100_SXM.sm_count) == rows
    p = plan_schedule(GemmSpec(16, 9216, 8192), H100_SXM)
    assert (p.stages, p.consumer_partitions, p.grid) == (6, 2, 72)
    # 16 < M <= 32: 32 tokens wide, with the same choice of rows (session 19 measured 128x32 at N = 9216, 28672).
    for m in (17, 24, 32):
        p = plan_schedule(GemmSpec(m, 4096, 14336), H100_SXM)
        assert p.swap_ab and (p.bm, p.bn, p.stages) == (64, 32, 12)
        p = plan_schedule(GemmSpec(m, 9216, 8192), H100_SXM)
        assert p.swap_ab and (p.bm, p.bn, p.stages, p.consumer_partitions) == (128, 32, 6, 2)
        assert plan_schedule(GemmSpec(m, 9216, 8192), H100_SXM, swap_ab=True) == p
        assert plan_schedule(GemmSpec(m, 9216, 8192), H100_SXM, swap_ab=True, bm=64).bm == 64
    # Not swapped: M > 32; promoted fp8; N-major B; blockwise scales; any forced tile or depth.
    assert not plan_schedule(GemmSpec(33, 4096, 4096), H100_SXM).swap_ab
    exact = GemmSpec(16, 8192, 8192, E4M3, E4M3, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED)
    bias = GemmSpec(16, 8192, 8192, E4M3, E4M3, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
    nmajor = GemmSpec(16, 8192, 8192, b_layout=BLayout.N_MAJOR)
    blockwise = GemmSpec(16, 8192, 8192, E4M3, E4M3, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                         accumulation=Accumulation.PROMOTED)
    for spec in (exact, nmajor, blockwise):
        assert not plan_schedule(spec, H100_SXM).swap_ab, spec.short()
    # A bias swaps (along the swapped module's rows; measured in session 19).
    biased = build(bias, H100_SXM, plan_schedule(bias, H100_SXM))
    steps = {s for p in biased.module.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue)
             for s in o.steps}
    assert biased.plan.swap_ab and ir.EpilogueStep.ADD_ROW_BIAS in steps and ir.EpilogueStep.ADD_BIAS not in steps
    plain = GemmSpec(16, 8192, 8192)
    assert not plan_schedule(plain, H100_SXM, bn=64).swap_ab
    assert not plan_schedule(plain, H100_SXM, bm=64).swap_ab
    assert not plan_schedule(plain, H100_SXM, stages=8).swap_ab
    assert not plan_schedule(plain, H100_SXM, split_k=2).swap_ab
    assert not plan_schedule(plain, H100_SXM, consumer_partitions=1).swap_ab
    for spec, why in ((nmajor, "N-major B"), (blockwise, "blockwise scales")):
        with pytest.raises(UnsupportedError, match=why):
            plan_schedule(spec, H100_SXM, swap_ab=True)
    with pytest.raises(UnsupportedError, match="split-K"):
        plan_schedule(plain, H100_SXM, swap_ab=True, split_k=2)
    with pytest.raises(ValueError, match="cannot run swapped"):
        nmajor.swapped()
    # Forced: 128 rows above 16 tokens (128x32, forced only), and the fused-epilogue knobs pass through (replan).
    p = plan_schedule(GemmSpec(24, 4096, 4096), H100_SXM, swap_ab=True, bm=128)
    assert p.swap_ab and (p.bm, p.bn, p.stages) == (128, 32, 6)
    assert plan_schedule(plain, H100_SXM, swap_ab=True, hoist_rows=False).hoist_rows is False
    with pytest.raises(UnsupportedError, match="rule 18.*16x8192x8192.*no such plan"):
        plan_schedule(plain, H100_SXM, swap_ab=True, bn=256, bm=256)
    # The 12-stage cap is the swapped decode problem's: a forced 64x16 or 64x32 tile of a large GEMM keeps 6.
    assert plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=64, bn=32).stages == 6
    assert plan_schedule(GemmSpec(4096, 16, 4096), H100_SXM, bm=64, bn=16).stages == 12  # (N is 16 tokens wide)
    # Forced: another depth of the swapped problem.
    p = plan_schedule(plain, H100_SXM, swap_ab=True, stages=16)
    assert p.swap_ab and p.stages == 16 and p.short().endswith("_swap")


def test_forced_256_row_tiles_run_four_consumer_warpgroups() -> None:
    """Rule 17 (docs/benchmarks.md session 17): a 256x128 tile, forced (at these K never the planner's choice:
    measured equal to 128x256; at long K it is, test_measured_choices), runs four 64-row consumer partitions at 112
    registers, 64x64 epilogue halves and 4 stages; it is refused where its registers or structure were not built for
    it, with the reason."""
    for spec in (GemmSpec(4096, 7168, 2048), GemmSpec(8192, 8192, 1024, DType.FP16, DType.FP16, DType.FP16),
                 GemmSpec(1100, 648, 584, b_layout=BLayout.N_MAJOR), fp8(4096, 4096, 4096)):
        assert plan_schedule(spec, H100_SXM).bm != 256, spec.short()
        p = plan_schedule(spec, H100_SXM, bm=256)
        assert (p.bm, p.bn, p.stages, p.consumer_partitions, p.consumer_warps) == (256, 128, 4, 4, 16), spec.short()
        assert (p.consumer_regs, p.epilogue_subtiles, p.split_k, p.tail_split) == (112, 2, 1, 1)
        assert plan_schedule(spec, H100_SXM, bm=256, consumer_partitions=4) == p
        m, _ = compile_schedule(spec, p, H100_SXM)
        assert verify.complete(m, H100_SXM) == [] and m.smem_bytes <= H100_SXM.smem_per_block
        consumers = [q for q in m.partitions if q.role.value == "consumer"]
        assert [(q.warps, q.regs, q.rows.start) for q in consumers] == [(4, 112, r) for r in (0, 64, 128, 192)]
    for spec, kw, why in ((fp8(4096, 4096, 4096, promoted=True), {}, "promoted fp8"),
                          (GemmSpec(4096, 4096, 4096), dict(consumer_partitions=2), "consumer_partitions=2"),
                          (GemmSpec(4096, 4096, 4096), dict(pingpong=True), "ping-pong"),
                          (GemmSpec(4096, 4096, 4096), dict(split_k=2), "split-K"),
                          (fp8(4096, 4096, 4096, bias=BF16), {}, "a bias")):
        with pytest.raises(UnsupportedError, match=f"bm=256 .*{why}.*use bm=128"):
            plan_schedule(spec, H100_SXM, bm=256, **kw)
    fused = plan(torch.empty(4096, 2048, dtype=torch.bfloat16, device="meta"),
                 torch.empty(2048, 4096, dtype=torch.bfloat16, device="meta"), epilogue=lambda acc: acc * 2).spec
    with pytest.raises(UnsupportedError, match="bm=256 .*a fused epilogue"):
        plan_schedule(fused, H100_SXM, bm=256)
    with pytest.raises(UnsupportedError, match="consumer_partitions=4 is for bm=256"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=128, consumer_partitions=4)


def test_wave_fill_counts_the_last_rounds_idle_ctas() -> None:
    from warploom.planner import wave_fill

    e4 = DType.E4M3
    # Issue 5's worst shape without a tail (rule 15): 32 x 17 tiles of 128x128 on 132 SMs, 4.12 waves in 5 rounds.
    spec = GemmSpec(4096, 2112, 7168, e4, e4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                    accumulation=Accumulation.PROMOTED)
    w = wave_fill(spec, plan_schedule(spec, H100_SXM, bm=128, bn=128, tail_split=1))
    assert (w.units, w.ctas, w.rounds, w.last) == (544, 132, 5, 16)
    assert w.efficiency == pytest.approx(544 / 660) and "16 of 132 CTAs busy" in w.describe()
    square = GemmSpec(4096, 4096, 4096, DType.BF16, DType.BF16, DType.BF16)
    w = wave_fill(square, plan_schedule(square, H100_SXM, bm=128, bn=256))
    assert (w.units, w.rounds, w.last) == (512, 4, 116)
    small = GemmSpec(64, 4096, 7168, DType.BF16, DType.BF16, DType.BF16)
    w = wave_fill(small, plan_schedule(small, H100_SXM, bm=64, bn=128, split_k=4))
    assert (w.units, w.ctas, w.rounds, w.last) == (128, 128, 1, 128) and w.efficiency == 1.0
