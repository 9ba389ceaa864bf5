"""Compile-only tier for sm_100a (planner rule 19): cross-compile a matrix of Blackwell kernels on the CPU.

Each must compile with Triton's Blackwell ptxas, issue its MMAs as tcgen05 (UTCHMMA for 16-bit inputs, UTCQMMA for
fp8), read its accumulators from tensor memory (LDTM), not spill, and fit the B200's shared memory. Nothing here
runs: no sm_100a GPU is at hand.
"""

from __future__ import annotations

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import B200
from warploom.kernel import build

BF16, FP16, FP32, E4, E5 = DType.BF16, DType.FP16, DType.FP32, DType.E4M3, DType.E5M2
K_MAJOR, N_MAJOR = BLayout.K_MAJOR, BLayout.N_MAJOR
TW, RW = ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE


def f8(m: int, n: int, k: int, recipe: ScaleRecipe, bias: DType | None = None, a: DType = E4, b: DType = E4,
       out: DType = BF16) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, out, K_MAJOR, recipe, Accumulation.NATIVE, bias)


MATRIX: list[tuple[str, GemmSpec, dict[str, int]]] = [
    ("bf16_4096_kmajor", GemmSpec(4096, 4096, 4096), {}),
    ("bf16_296x520x1000_nmajor", GemmSpec(296, 520, 1000, b_layout=N_MAJOR), {}),
    ("fp16_out_fp32_odd", GemmSpec(4097, 264, 8192, FP16, FP16, FP32), {}),
    ("bf16_128x128_s6", GemmSpec(2048, 2048, 2048), dict(bn=128, stages=6)),
    ("bf16_128x64", GemmSpec(1000, 1000, 72), dict(bn=64)),
    ("e4m3_tensorwise", f8(4096, 4096, 4096, TW), {}),
    ("e4m3_rowwise_bias", f8(4096, 4096, 4096, RW, bias=BF16), {}),
    ("e5m2xe4m3_rowwise_bias_fp32_out", f8(296, 528, 1024, RW, bias=FP32, a=E5, out=FP32), {}),
]


@pytest.mark.parametrize("spec,forced", [pytest.param(s, f, id=i) for i, s, f in MATRIX])
def test_compiles_to_tcgen05(spec: GemmSpec, forced: dict[str, int]) -> None:
    from warploom.planner import plan_schedule

    kern = build(spec, B200, plan_schedule(spec, B200, **forced))
    c = kern.compile()
    assert c.target == "sm_100a"
    mma = "UTCQMMA" if spec.a_dtype.bytes == 1 else "UTCHMMA"
    assert c.count(mma) > 0, c.summary()
    assert c.count("HGMMA") == c.count("QGMMA") == 0  # no wgmma: sm_100a has none
    assert c.count("LDTM") > 0, c.summary()
    assert c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block
