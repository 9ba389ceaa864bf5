"""The planner's heuristic choices, its resource bounds, and forced parameters."""

from __future__ import annotations

import math

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DeviceInfo, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.passes import compile_schedule
from warploom.planner import epilogue_bytes, plan_schedule, stage_bytes

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
    assert p.grid == 132
    assert (p.producer_regs, p.consumer_regs) == (24, 240)


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


@pytest.mark.parametrize("m", [65, 128, 4096])
def test_large_m_uses_128_row_tiles(m: int) -> None:
    p = plan_schedule(GemmSpec(m, 8192, 8192), H100_SXM)
    assert p.bm == 128 and p.consumer_warps == 8


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("bm,bn", TILES)
def test_stages_fit_smem_for_every_candidate(spec: GemmSpec, bm: int, bn: int) -> None:
    if spec.accumulation is Accumulation.PROMOTED and bn == 256:
        with pytest.raises(UnsupportedError):
            plan_schedule(spec, H100_SXM, bm=bm, bn=bn)
        return
    p = plan_schedule(spec, H100_SXM, bm=bm, bn=bn)
    assert (p.bm, p.bn) == (bm, bn)
    assert 2 <= p.stages <= 6
    module, _ = compile_schedule(spec, p, H100_SXM)
    assert module.smem_bytes <= H100_SXM.smem_per_block
    # "as many as fit": one more stage (with the 1 KiB barrier reserve) would not fit, unless capped at 6.
    staging = sum(b.bytes for b in module.buffers)
    one_more = (p.stages + 1) * stage_bytes(spec, bm, bn, p.bk) + staging + 1024
    assert p.stages == 6 or one_more > H100_SXM.smem_per_block


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("sms", [132, 114, 8, 1])
def test_grid_is_at_most_one_cta_per_sm_and_per_tile(spec: GemmSpec, sms: int) -> None:
    dev = DeviceInfo("test", "sm_90a", sms, H100_SXM.smem_per_block)
    p = plan_schedule(spec, dev)
    tiles = math.ceil(spec.m / p.bm) * math.ceil(spec.n / p.bn)
    assert p.grid == min(sms, tiles)


@pytest.mark.parametrize("bm,bn", TILES)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_forced_tile_and_stages_are_honored(bm: int, bn: int, stages: int) -> None:
    spec = GemmSpec(4096, 4096, 4096)  # the planner alone would pick 128x256x64 s3
    p = plan_schedule(spec, H100_SXM, bm=bm, bn=bn, stages=stages, group_m=4)
    assert (p.bm, p.bn, p.stages, p.group_m) == (bm, bn, stages, 4)
    assert p.consumer_warps == 4 * bm // 64


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


@pytest.mark.parametrize("kwargs", [dict(stages=7), dict(stages=0), dict(bm=256), dict(bn=64), dict(bm=32, bn=128)],
                         ids=str)
def test_impossible_forced_parameters_raise_unsupported(kwargs: dict) -> None:
    with pytest.raises(UnsupportedError, match="no tile shape fits"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, **kwargs)


@pytest.mark.parametrize("spec", [fp8(4096, 4096, 4096, promoted=True),
                                  fp8(8192, 8192, 8192, scale=ScaleRecipe.TENSORWISE, promoted=True),
                                  fp8(32, 8192, 8192, promoted=True, bias=BF16)], ids=lambda s: s.short())
def test_promoted_avoids_bn_256(spec: GemmSpec) -> None:
    assert plan_schedule(spec, H100_SXM).bn != 256
    with pytest.raises(UnsupportedError):
        plan_schedule(spec, H100_SXM, bn=256)


def test_native_fp8_still_takes_bn_256_when_it_wins() -> None:
    # The PROMOTED rule must not leak into NATIVE accumulation.
    assert plan_schedule(fp8(4096, 4096, 4096), H100_SXM).bn == 256


def test_wave_quantization_prefers_the_tile_that_fills_the_sms() -> None:
    # 1024x2048: 128x256 gives 64 tiles (one partial wave of 132 SMs); 128x128 gives 128 tiles, still one wave,
    # so the 10%-less-efficient tile costs 0.5/0.9 of the time and must win.
    p = plan_schedule(GemmSpec(1024, 2048, 4096), H100_SXM)
    assert (p.bm, p.bn) == (128, 128)


def test_smaller_smem_gives_fewer_stages() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    small = DeviceInfo("small", "sm_90a", 132, 166912)
    big, less = plan_schedule(spec, H100_SXM, bm=128, bn=128), plan_schedule(spec, small, bm=128, bn=128)
    assert less.stages < big.stages
    assert compile_schedule(spec, less, small)[0].smem_bytes <= small.smem_per_block


def test_rowwise_bias_avoids_the_spilling_256_wide_tile() -> None:
    spec = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    bias_dtype=DType.BF16)
    assert plan_schedule(spec, H100_SXM).bn == 128
    assert plan_schedule(spec, H100_SXM, bn=256).bn == 256  # still available when forced, for measurement
