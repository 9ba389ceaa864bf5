"""Compile-only tier for 2-CTA clusters (planner rule 24): under Triton >= 3.7 each kernel cross-compiles for sm_90a
as a cluster of 2 (``.reqnctapercluster 2``) whose B copies (1x2: A's) are TMA multicasts and which ends with a
cluster barrier, with its MMAs on the async tensor-core path, no spill (but the known 3.9 blockwise findings,
conftest.py) and no serialized wgmma; under Triton 3.6, which has no Hopper multicast, building one is refused with
the version it needs."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.backends import gluon_api
from warploom.kernel import build
from warploom.planner import plan_schedule

E4 = DType.E4M3
MATRIX = {
    "bf16_nmajor_unaligned": GemmSpec(4634, 4968, 3672, b_layout=BLayout.N_MAJOR),
    "bf16_kmajor_ragged": GemmSpec(300, 528, 200),
    "fp16": GemmSpec(1000, 1000, 1000, DType.FP16, DType.FP16, DType.FP16),
    "e4m3_rowwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
    "e4m3_rowwise_bias_out_fp32": GemmSpec(2000, 2112, 1008, E4, E4, DType.FP32, scale=ScaleRecipe.ROWWISE,
                                           bias_dtype=DType.BF16),
    "e4m3_tensorwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),
    # promoted fp8 (each warpgroup's 128 columns in two 64-column accumulators) and blockwise scales (each CTA
    # copies its own rows' scale_a and the cluster tile's scale_b)
    "e4m3_rowwise_promoted": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                      accumulation=Accumulation.PROMOTED),
    "e4m3_tensorwise_promoted": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                                         accumulation=Accumulation.PROMOTED),
    "e4m3_blockwise_128x128": GemmSpec(4000, 7168, 7168, E4, E4, DType.BF16,
                                       scale=ScaleRecipe.BLOCKWISE_1X128_128X128, accumulation=Accumulation.PROMOTED),
    "e4m3_blockwise_1x128": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_1X128,
                                     accumulation=Accumulation.PROMOTED),
}


def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _fused_bf16() -> GemmSpec:
    """Rule 9's wide fused epilogue (a row bias, a dense residual, a column scale) on ragged bf16 rows."""
    m, n, k = 4634, 4968, 3672
    return warploom.plan(_meta(m, k, dtype=torch.bfloat16), _meta(k, n, dtype=torch.bfloat16),
                         epilogue=lambda acc, shift, res, col: F.gelu(acc + shift) * col + res,
                         shift=_meta(n, dtype=torch.bfloat16), res=_meta(m, n, dtype=torch.bfloat16),
                         col=_meta(m, 1)).spec


def _fused_fp8() -> GemmSpec:
    """fp8 rowwise fast with scaled_mm's bias, then a GELU and a residual, and a second fp32 output."""
    m, n, k = 2000, 2112, 1008
    return warploom.plan(_meta(m, k).to(torch.float8_e4m3fn), _meta(n, k).to(torch.float8_e4m3fn).t(), _meta(m, 1),
                         _meta(1, n), bias=_meta(n, dtype=torch.bfloat16), use_fast_accum=True,
                         epilogue=lambda acc, res: (F.gelu(acc) + res, acc.float()),
                         res=_meta(m, n, dtype=torch.bfloat16)).spec


FUSED = {"fused_bf16_gelu_residual_col": _fused_bf16, "fused_e4m3_rowwise_gelu_two_outputs": _fused_fp8}
# 1x2 clusters (ShareA, cluster="1x2"): A multicast, B's and C's boxes split along N
ALONG_N = {
    "1x2_bf16_nmajor_unaligned": GemmSpec(4634, 4968, 3672, b_layout=BLayout.N_MAJOR),
    "1x2_bf16_kmajor_ragged": GemmSpec(300, 528, 200),
    "1x2_e4m3_rowwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
    "1x2_e4m3_tensorwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),
}

# 2x1 clusters of ping-pong consumers (issue 24, forced: pingpong=True, cluster=2): each warpgroup's whole 128x128 tile
PINGPONG = {
    "pp_bf16_nmajor_unaligned": GemmSpec(4634, 4968, 3672, b_layout=BLayout.N_MAJOR),
    "pp_bf16_kmajor_ragged": GemmSpec(300, 528, 200),
    "pp_e4m3_rowwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
    "pp_e4m3_tensorwise": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),
    "pp_e4m3_rowwise_bias_out_fp32": GemmSpec(2000, 2112, 1008, E4, E4, DType.FP32, scale=ScaleRecipe.ROWWISE,
                                              bias_dtype=DType.BF16),
}

MULTICAST = gluon_api.for_triton(gluon_api.installed()).tma_multicast


@pytest.mark.skipif(not MULTICAST, reason="Triton < 3.7: no Hopper multicast (the refusal is tested below)")
@pytest.mark.parametrize("name", list(MATRIX) + list(FUSED) + list(ALONG_N) + list(PINGPONG))
def test_cluster_kernels_cross_compile(name: str, spill_budget: int) -> None:
    spec = (MATRIX[name] if name in MATRIX else FUSED[name]() if name in FUSED else ALONG_N[name] if name in ALONG_N
            else PINGPONG[name])
    k = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, cluster="1x2" if name in ALONG_N else 2,
                                            pingpong=name in PINGPONG))
    assert k.module.tiling.cluster_n == (name in ALONG_N)
    assert k.plan.pingpong == (name in PINGPONG)
    c = k.compile()
    s = c.summary()
    mma, other = ("QGMMA", "HGMMA") if spec.is_fp8 else ("HGMMA", "QGMMA")
    assert ".reqnctapercluster 2" in c.ptx, "a cluster of 2 CTAs"
    assert c.ptx.count(".multicast::cluster") >= 1, "B's box (1x2: A's) multicast by the lead CTA"
    # ir.Tiling.exit_sync, which the lowering does not emit: Triton ends the kernel with a cluster barrier (a
    # non-relaxed arrive and its wait; the relaxed pair after the mbarrier inits is another)
    assert "barrier.cluster.arrive.aligned;" in c.ptx and "barrier.cluster.wait" in c.ptx, "a cluster barrier at exit"
    assert c.count(mma) > 0 and c.count(other) == 0, s
    if name in PINGPONG:
        # The cluster EMPTY barrier counts 1 arrival a CTA (the ping-pong warpgroup that read the slot use), which
        # Triton's two-CTA barrier scales by the CTAs sharing it: 2 on the lead, as the simulator's protocol; every
        # other ping-pong barrier (ready, empty, turns) counts 1. Only the lead waits on it and multicasts.
        inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", c.ptx)
        assert inits.count("2") == k.plan.stages and set(inits) == {"1", "2"}, inits
        assert "mbarrier.arrive.shared::cluster.b64" in c.ptx, "each warpgroup's release on the lead's barrier"
    assert c.spills <= spill_budget, f"{k.module.name} spills {c.spills} bytes: {s}\n{c.ptxas_log}"
    if spill_budget:  # (the known 3.9 finding, conftest.py: the same PTX without --regAllocOptLevel=2 spills nothing)
        assert _spills_without_flags(c.ptx) == 0
    assert k.module.smem_bytes <= c.smem_bytes <= H100_SXM.smem_per_block, s
    assert not c.wgmma_serialized, c.ptxas_log


def _spills_without_flags(ptx: str) -> int:
    """Spill bytes of `ptx` assembled for sm_90a by Triton's own ptxas with no extra flags."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    from warploom.runtime.cross import _ptxas

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.ptx"
        path.write_text(ptx)
        r = subprocess.run([_ptxas(90), "-v", "--gpu-name=sm_90a", str(path), "-o", str(Path(d) / "k.cubin")],
                           capture_output=True, text=True, check=True)
    found = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stdout + r.stderr)
    assert found, r.stdout + r.stderr
    return int(found.group(1)) + int(found.group(2))


@pytest.mark.skipif(MULTICAST, reason="this Triton has Hopper multicast (the kernels are compiled above)")
def test_cluster_refused_without_multicast() -> None:
    for knob in (2, "1x2"):
        with pytest.raises(UnsupportedError, match=r"Triton >= 3\.7"):
            plan_schedule(MATRIX["bf16_nmajor_unaligned"], H100_SXM, cluster=knob)


# Fitted tiles in 2x1 clusters (rule 37, ir.Tiling.interleaved): B's block boxes each multicast by the lead, A copied
# as one box per consumer warpgroup, the hand-written kernel's form (archive/exp/fitted_cluster).
FITTED = {
    "fitted_bf16_128_16": (GemmSpec(1256, 1720, 11240), (128, 16)),
    "fitted_bf16_128_64": (GemmSpec(3097, 920, 2920), (128, 64)),
    "fitted_bf16_three_blocks": (GemmSpec(2000, 2112, 1008), (128, 64, 16)),
    "fitted_e4m3_rowwise": (GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), (128, 16)),
}


@pytest.mark.skipif(not MULTICAST, reason="Triton < 3.7: no Hopper multicast")
@pytest.mark.parametrize("name", list(FITTED))
def test_fitted_cluster_kernels_cross_compile(name: str) -> None:
    spec, blocks = FITTED[name]
    k = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, cluster=2, bm=128, bn=256, n_blocks=blocks))
    assert k.module.tiling.interleaved
    c = k.compile()
    s = c.summary()
    assert ".reqnctapercluster 2" in c.ptx, "a cluster of 2 CTAs"
    loads = re.findall(r"UTMALDG[^\n]*", c.sass)
    # (each B block's box multicast by the lead; A's two boxes, one per warpgroup, each CTA's own)
    assert sum("MULTICAST" in line for line in loads) == len(blocks), loads
    assert len(loads) == len(blocks) + 2, loads
    mma, other = ("QGMMA", "HGMMA") if spec.is_fp8 else ("HGMMA", "QGMMA")
    assert c.count(mma) > 0 and c.count(other) == 0, s
    assert c.spills == 0, f"{k.module.name} spills {c.spills} bytes: {s}\n{c.ptxas_log}"
    assert k.module.smem_bytes <= c.smem_bytes <= H100_SXM.smem_per_block, s
    assert not c.wgmma_serialized, c.ptxas_log


# Rule 24's forced 128x128 and 64x128 tiles in 2x1 clusters (CLUSTER_TILES): B's one box multicast by the lead, A's
# own box a CTA; 64x128: one consumer warpgroup a CTA.
SMALL_TILES = {
    "c64x128_bf16_nmajor_unaligned": (GemmSpec(4634, 4968, 3672, b_layout=BLayout.N_MAJOR), 64),
    "c64x128_bf16_tall_narrow": (GemmSpec(6262, 120, 2120), 64),
    "c64x128_e4m3_rowwise_bias_out_fp32": (MATRIX["e4m3_rowwise_bias_out_fp32"], 64),
    "c64x128_e4m3_blockwise_128x128": (MATRIX["e4m3_blockwise_128x128"], 64),
    "c128x128_bf16_kmajor_ragged": (GemmSpec(300, 528, 200), 128),
    "c128x128_e4m3_rowwise_promoted": (MATRIX["e4m3_rowwise_promoted"], 128),
}


@pytest.mark.skipif(not MULTICAST, reason="Triton < 3.7: no Hopper multicast")
@pytest.mark.parametrize("name", list(SMALL_TILES))
def test_128_and_64_row_tile_clusters_cross_compile(name: str, spill_budget: int) -> None:
    spec, bm = SMALL_TILES[name]
    k = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, cluster=2, bm=bm, bn=128))
    assert (k.plan.bm, k.plan.cluster, k.plan.consumer_partitions) == (bm, 2, 2 if bm == 128 else 1)
    c = k.compile()
    s = c.summary()
    assert ".reqnctapercluster 2" in c.ptx, "a cluster of 2 CTAs"
    loads = re.findall(r"UTMALDG[^\n]*", c.sass)
    assert loads and any("MULTICAST" in line for line in loads), loads
    mma, other = ("QGMMA", "HGMMA") if spec.is_fp8 else ("HGMMA", "QGMMA")
    assert c.count(mma) > 0 and c.count(other) == 0, s
    assert c.spills <= spill_budget, f"{k.module.name} spills {c.spills} bytes: {s}\n{c.ptxas_log}"
    assert k.module.smem_bytes <= c.smem_bytes <= H100_SXM.smem_per_block, s
    assert not c.wgmma_serialized, c.ptxas_log
