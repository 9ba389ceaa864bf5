"""Compile tier for M-grouped GEMMs on sm_100a (rule 22 on sm_100a; backends/gluon_sm100.py's grouped emitter):
each cross-compiles for sm_100a with Triton's Blackwell ptxas, issues tcgen05 MMAs (UTCHMMA for bf16 / fp16; the
block-scaled UTCQMMA of kind::mxf8f6f4 for MX fp8, UTCOMMA of kind::mxf4 for MX fp4 and kind::mxf4nvf4 for NVFP4,
whose scales the partition tcgen05.st's: STTM, no UTCCP), reads its accumulators from tensor memory (LDTM), loads B
through its 3-D descriptor, has both store paths (TMA inside a group, masked global stores across its end), does
not spill and fits the B200's shared memory. Nothing runs: no sm_100a GPU is at hand."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.device import B200
from warploom.kernel import build

OFF, E4 = Grouping.OFFSETS, DType.E4M3


def _mx(m: int, n: int, k: int, groups: int = 8, dt: DType = E4) -> GemmSpec:
    return GemmSpec(m, n, k, dt, dt, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    grouping=OFF, groups=groups)


# (recipe, fp4) -> (the PTX MMA kind, its SASS instruction, MMAs a 128-deep k-block): MX fp8's 32-deep kind::mxf8f6f4,
# MX fp4's and NVFP4's 64-deep ones
BLOCK_SCALED = {
    (ScaleRecipe.MX, False): (r"kind::mxf8f6f4\.block_scale", "UTCQMMA", 4),
    (ScaleRecipe.MX, True): (r"kind::mxf4\.block_scale", "UTCOMMA", 2),
    (ScaleRecipe.NVFP4, True): (r"kind::mxf4nvf4\.block_scale", "UTCOMMA", 2),
}

CASES = [
    ("bf16_offsets_128x256", GemmSpec(8192, 4096, 7168, grouping=OFF, groups=8), 256),
    ("bf16_offsets_128x128", GemmSpec(1024, 4096, 7168, grouping=OFF, groups=8), 128),
    ("fp16_nmajor_offsets", GemmSpec(2048, 2048, 1024, DType.FP16, DType.FP16, DType.FP16, BLayout.N_MAJOR,
                                     grouping=OFF, groups=8), 256),
    ("mxfp8_offsets_128x128", _mx(8192, 4096, 7168), 128),
    ("mxfp8_offsets_decode", _mx(8 * 48, 4096, 7168), 128),  # 48 rows an expert: most of each tile past its end
    ("mxfp4_offsets_128x128", _mx(8192, 4096, 7168, dt=DType.E2M1), 128),
    ("nvfp4_offsets_128x128", replace(_mx(8192, 4096, 7168, dt=DType.E2M1), scale=ScaleRecipe.NVFP4), 128),
]


@pytest.mark.parametrize("name,spec,bn", CASES, ids=[c[0] for c in CASES])
def test_grouped_sm100_compiles(name: str, spec: GemmSpec, bn: int) -> None:
    k = build(spec, B200)
    assert (k.plan.bm, k.plan.bn) == (128, bn)
    c = k.compile()
    assert c.target == "sm_100a"
    assert c.count("HGMMA") == c.count("QGMMA") == 0  # no wgmma: sm_100a has none
    if spec.scale is ScaleRecipe.NVFP4:  # (B's global scale per expert)
        assert "gl.load(global_b_ptr + grp)" in k.gluon.text
    if spec.scale.microscaled:
        kind, mma, mmas = BLOCK_SCALED[spec.scale, spec.is_fp4]
        assert re.search(r"tcgen05\.mma\.cta_group::1\." + kind, c.ptx)
        assert c.block_scaled_mmas() == c.count(mma) == mmas, c.summary()
        assert c.count("UTCCP") == 0 and c.count("STTM") > 0, c.summary()  # seed 000: tcgen05.st, no tcgen05.cp
        assert "(sb_ptr + grp * sb_stride_g)" in k.gluon.text  # scale_b at the tile's expert, unpadded
    else:
        assert c.count("UTCHMMA") > 0, c.summary()
    assert c.count("LDTM") > 0, c.summary()
    assert c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block
    assert "cp.async.bulk.tensor.3d.shared" in c.ptx  # B's 3-D descriptor, at [group, n, k]
    assert "st.global" in c.ptx and "cp.async.bulk.tensor.2d.global.shared" in c.ptx  # masked and TMA stores
