"""Compile-only tier for rule 31's narrow tiles (`ir.Tiling.n_blocks`): each kernel cross-compiles for sm_90a with one
wgmma shape per column block (HGMMA.64xWx16 for bf16, QGMMA.64xWx32 for fp8: the block widths, never the tile's
whole BN), no spill, no serialized wgmma, its shared memory within the H100's; and the join of the blocks adds no
shared-memory round trip (the same shared stores and loads as the whole tile's kernel: a register-only reshuffle)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from warploom import H100_SXM, DType, GemmSpec, ScaleRecipe
from warploom.kernel import build
from warploom.planner import plan_schedule

E4 = DType.E4M3
SMEM_LIMIT = 232448
ROWWISE_BIAS = GemmSpec(10050, 80, 1280, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)

CASES = {
    # name: spec, forced options, column blocks
    "bf16_128x128_80": (GemmSpec(10050, 80, 1280), {"bm": 128, "bn": 128}, (64, 16)),
    "bf16_64x128_96": (GemmSpec(2090, 96, 7792), {"bm": 64, "bn": 128}, (64, 32)),
    "bf16_64x256_152": (GemmSpec(3794, 152, 1440), {"bm": 64, "bn": 256}, (128, 32)),
    "bf16_128x256_176": (GemmSpec(10047, 176, 72), {"bm": 128, "bn": 256}, (128, 32, 16)),
    "fp16_128x128_72": (GemmSpec(13332, 72, 5120, DType.FP16, DType.FP16, DType.FP16), {"bm": 128, "bn": 128},
                        (64, 16)),
    "bf16_split_k4": (GemmSpec(2090, 96, 7792), {"bm": 64, "bn": 128, "split_k": 4}, (64, 32)),
    "bf16_stream_k3": (GemmSpec(4990, 144, 7856), {"bm": 128, "bn": 256, "stream_k": 3}, (128, 16)),
    "e4m3_rowwise_bias_128x128_80": (ROWWISE_BIAS, {"bm": 128, "bn": 128}, (64, 16)),
}


def _shared_ops(sass: str) -> list[str]:
    return sorted(re.findall(r"\b(?:STS|LDS|STSM|LDSM)\S*", sass))


@pytest.mark.parametrize("name", CASES)
def test_narrow_compiles(name: str, spill_budget: int) -> None:
    spec, options, blocks = CASES[name]
    whole = plan_schedule(spec, H100_SXM, **options)  # type: ignore[arg-type]
    k = build(spec, H100_SXM, replace(whole, n_blocks=blocks))
    c = k.compile("sm_90a")
    kind, depth = ("QGMMA", 32) if spec.is_fp8 else ("HGMMA", 16)
    shapes = set(re.findall(rf"\b{kind}\.64x(\d+)x{depth}\b", c.sass))
    assert shapes == {str(w) for w in blocks}, c.summary()
    assert c.spills <= spill_budget, c.summary()
    assert not c.wgmma_serialized
    assert c.smem_bytes <= SMEM_LIMIT
    assert _shared_ops(c.sass) == _shared_ops(build(spec, H100_SXM, whole).compile("sm_90a").sass)
