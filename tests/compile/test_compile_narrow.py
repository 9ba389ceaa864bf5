"""Compile-only tier for rules 31 and 32's narrow and fitted tiles (`ir.Tiling.n_blocks`): each kernel cross-compiles
for sm_90a with one wgmma shape per column block (HGMMA.64xWx16 for bf16, QGMMA.64xWx32 for fp8: the block widths,
never the tile's whole BN), no spill, no serialized wgmma, its shared memory within the H100's, and B copied by one TMA
box per block (UTMALDG: A's box, or rule 32's 192-row tile's three 64-row ones, plus one per block)."""

from __future__ import annotations

import re

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
    # rule 32's fitted tiles, several along N
    "fitted_192x192": (GemmSpec(1679, 2456, 2000), {"bm": 192, "bn": 256, "stream_k": 0, "cluster": 1}, (128, 64)),
    "fitted_192x208": (GemmSpec(2188, 4312, 760), {"bm": 192, "bn": 256, "stream_k": 0, "cluster": 1}, (128, 64, 16)),
    "fitted_128x176": (GemmSpec(1679, 2456, 2000), {"bm": 128, "bn": 256, "stream_k": 0, "cluster": 1}, (128, 32, 16)),
    "fitted_256x112": (GemmSpec(3000, 3000, 3000), {"bm": 256, "bn": 128, "stream_k": 0, "cluster": 1}, (64, 32, 16)),
}


@pytest.mark.parametrize("name", CASES)
def test_narrow_compiles(name: str, spill_budget: int) -> None:
    spec, options, blocks = CASES[name]
    k = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, **options, n_blocks=blocks))  # type: ignore[arg-type]
    c = k.compile("sm_90a")
    kind, depth = ("QGMMA", 32) if spec.is_fp8 else ("HGMMA", 16)
    shapes = set(re.findall(rf"\b{kind}\.64x(\d+)x{depth}\b", c.sass))
    assert shapes == {str(w) for w in blocks}, c.summary()
    assert c.spills <= spill_budget, c.summary()
    assert not c.wgmma_serialized
    assert c.smem_bytes <= SMEM_LIMIT
    # one producer: A's box (three for 192 rows), then one per block of B, in its one k-loop
    assert len(re.findall(r"\bUTMALDG\b", c.sass)) == k.module.ring("a_ring").boxes + len(blocks), c.summary()


# Rule 38's planned plans (session 42): one column of 128-row tiles fitted to N, K split
WIDE_COLUMN = {
    "bf16_column_160_split6": (GemmSpec(2415, 160, 14360), (128, 32), 6),
    "e4m3_column_160_split6": (GemmSpec(2415, 160, 14368, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), (128, 32), 6),
    "e4m3_column_224_split7": (GemmSpec(1881, 224, 15088, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
                               (128, 64, 32), 7),
}


@pytest.mark.parametrize("name", WIDE_COLUMN)
def test_wide_column_split_compiles(name: str, spill_budget: int) -> None:
    """Rule 38's plans as the planner makes them (nothing forced): one wgmma shape per column block, the split's
    partials to the workspace (the reduce kernel compiles with it), no spill or serialized wgmma."""
    spec, blocks, split = WIDE_COLUMN[name]
    k = build(spec, H100_SXM)
    assert (k.plan.bm, k.plan.bn, k.plan.n_blocks, k.plan.split_k) == (128, 256, blocks, split), k.plan.short()
    c = k.compile("sm_90a")
    kind, depth = ("QGMMA", 32) if spec.is_fp8 else ("HGMMA", 16)
    assert set(re.findall(rf"\b{kind}\.64x(\d+)x{depth}\b", c.sass)) == {str(w) for w in blocks}, c.summary()
    assert c.spills <= spill_budget and not c.wgmma_serialized and c.smem_bytes <= SMEM_LIMIT, c.summary()


# Rule 39's planned plans (session 43): columns of 64-row tiles fitted to N, K split where long
NARROW_ROWS64 = {
    "bf16_rows64_144_split4": (GemmSpec(1895, 136, 3704), 256, (128, 16), 4),
    "bf16_rows64_32_columns3": (GemmSpec(1806, 88, 1672), 32, (), 1),
    "bf16_rows64_176_split5": (GemmSpec(1480, 176, 4728), 256, (128, 32, 16), 5),
    "bf16_rows64_256_split6": (GemmSpec(1165, 224, 4728), 256, (), 6),
    "e4m3_rows64_80_columns2": (GemmSpec(3794, 160, 1440, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), 128,
                                (64, 16), 1),
    "e4m3_rows64_32_columns3": (GemmSpec(1597, 80, 4192, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), 32, (), 1),
}


@pytest.mark.parametrize("name", NARROW_ROWS64)
def test_narrow_rows64_compiles(name: str, spill_budget: int) -> None:
    """Rule 39's plans as the planner makes them (nothing forced): one warpgroup's wgmma shape per column block (the
    tile's own width where it is whole), no spill or serialized wgmma."""
    spec, bn, blocks, split = NARROW_ROWS64[name]
    k = build(spec, H100_SXM)
    assert (k.plan.bm, k.plan.bn, k.plan.n_blocks, k.plan.split_k) == (64, bn, blocks, split), k.plan.short()
    c = k.compile("sm_90a")
    kind, depth = ("QGMMA", 32) if spec.is_fp8 else ("HGMMA", 16)
    widths = set(re.findall(rf"\b{kind}\.64x(\d+)x{depth}\b", c.sass))
    assert widths == {str(w) for w in (blocks or (bn,))}, c.summary()
    assert c.spills <= spill_budget and not c.wgmma_serialized and c.smem_bytes <= SMEM_LIMIT, c.summary()
