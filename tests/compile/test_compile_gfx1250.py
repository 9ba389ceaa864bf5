"""Compile-only tier for gfx1250 (planner rule 20): cross-compile a matrix of AMD kernels on the CPU.

Each must compile through Triton's AMD backend to AMDGCN that multiplies with wmma (the instruction for its input
types), copies A and B with the Tensor Data Mover (tensor_load_to_lds) and waits for them by count
(s_wait_tensorcnt), uses no scratch memory (no VGPR spills), and fits the LDS of a gfx1250 workgroup. Nothing here
runs: no gfx1250 is at hand.
"""

from __future__ import annotations

import re

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import GFX1250
from warploom.kernel import build
from warploom.planner import plan_schedule

BF16, FP16, FP32, E4, E5 = DType.BF16, DType.FP16, DType.FP32, DType.E4M3, DType.E5M2
TW, RW = ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE


def f8(m: int, n: int, k: int, recipe: ScaleRecipe, bias: DType | None = None, a: DType = E4, b: DType = E4,
       out: DType = BF16) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, out, BLayout.K_MAJOR, recipe, Accumulation.NATIVE, bias)


# (id, spec, forced plan options, the wmma instruction expected)
MATRIX: list[tuple[str, GemmSpec, dict[str, int], str]] = [
    ("bf16_4096_kmajor", GemmSpec(4096, 4096, 4096), {}, "v_wmma_f32_16x16x32_bf16"),
    ("bf16_296x520x1000_nmajor", GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR), {}, "v_wmma_f32_16x16x32_bf16"),
    ("fp16_out_fp32_odd", GemmSpec(4097, 264, 8192, FP16, FP16, FP32), {}, "v_wmma_f32_16x16x32_f16"),
    ("bf16_64x64_s2", GemmSpec(1000, 1000, 72), dict(bm=64, bn=64, stages=2), "v_wmma_f32_16x16x32_bf16"),
    ("bf16_128x256_s4", GemmSpec(2048, 2048, 2048), dict(bn=256, stages=4), "v_wmma_f32_16x16x32_bf16"),
    ("bf16_decode_16x14336x4096", GemmSpec(16, 14336, 4096), {}, "v_wmma_f32_16x16x32_bf16"),
    ("e4m3_tensorwise", f8(4096, 4096, 4096, TW), {}, "v_wmma_f32_16x16x64_fp8_fp8"),
    ("e4m3_rowwise_bias", f8(4096, 4096, 4096, RW, bias=BF16), {}, "v_wmma_f32_16x16x64_fp8_fp8"),
    # (wmma in the transposed layout takes B as the instruction's first operand: e4m3 B, e5m2 A -> fp8_bf8)
    ("e5m2xe4m3_rowwise_bias_fp32_out", f8(296, 528, 1024, RW, bias=FP32, a=E5, out=FP32), {},
     "v_wmma_f32_16x16x64_fp8_bf8"),
]


@pytest.mark.parametrize("spec,forced,wmma", [pytest.param(s, f, w, id=i) for i, s, f, w in MATRIX])
def test_compiles_to_wmma_and_tdm(spec: GemmSpec, forced: dict[str, int], wmma: str) -> None:
    kern = build(spec, GFX1250, plan_schedule(spec, GFX1250, **forced))
    c = kern.compile()
    s = c.summary()
    assert c.target == "gfx1250"
    assert set(re.findall(r"v_wmma_\w+", c.sass)) == {wmma}, s
    # Per k-block a wmma per 16x16 block of a warp's share of the tile and per instruction K of the k-block.
    t = kern.module.tiling
    per_warp = t.bm * t.bn // (16 * 16 * kern.plan.consumer_warps) * (t.bk // (64 if spec.a_dtype.bytes == 1 else 32))
    assert c.count("v_wmma") == per_warp, s
    # The prologue's copies (stages - 1 blocks of A and B) and the k-loop's (one block of each).
    assert c.count("tensor_load_to_lds") == 2 * kern.plan.stages, s
    # The k-loop's counting wait (the copies of the blocks behind the one needed stay in flight: 2 (stages - 2)), and
    # where that is not 0 its tail's wait for all (LLVM may duplicate either when it rotates the loop).
    waits = {int(n, 16) for n in re.findall(r"^\s*s_wait_tensorcnt 0x([0-9a-f]+)", c.sass, re.M)}
    assert waits == {0, 2 * (kern.plan.stages - 2)}, (waits, s)
    assert c.count("s_barrier_wait") >= 1, s
    assert c.spills == 0, c.ptxas_log
    assert 0 < c.smem_bytes <= GFX1250.smem_per_block, s
    assert not re.search(r"^\s*global_load\w*\s", c.sass, re.M) or spec.scale is not ScaleRecipe.NONE or \
        spec.bias_dtype is not None, "A and B travel by TDM only: no ordinary global loads in a plain GEMM"


def test_compile_rejects_other_targets_for_a_gfx1250_kernel() -> None:
    from warploom.errors import TargetError

    kern = build(GemmSpec(512, 512, 512), GFX1250)
    with pytest.raises(TargetError, match="gfx1250 schedule"):
        kern.compile("sm_100a")
