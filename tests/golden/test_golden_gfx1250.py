"""Golden text of gfx1250 schedules (planner rule 20, passes/gfx1250.py) and their generated Gluon.

Refresh after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/golden`` and read the diff.
"""

from __future__ import annotations

import expecttest
from test_golden import assert_golden_file, issue4_kernel  # (pytest puts this folder on sys.path)

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import GFX1250
from warploom.kernel import Kernel, build

E4 = DType.E4M3
SPECS = {
    "gfx1250_bf16_4096_kmajor": GemmSpec(4096, 4096, 4096),
    # fp8 rowwise scales and a bias, applied in the wmma layout before the masked store; B N-major is bf16-only.
    "gfx1250_fp8_rowwise_bias": GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                                         Accumulation.NATIVE, DType.BF16),
    "gfx1250_bf16_nmajor_odd": GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
}


def kernel(name: str) -> Kernel:
    return build(SPECS[name], GFX1250)


class TestGfx1250Golden(expecttest.TestCase):
    def test_bf16_gluon(self) -> None:
        assert_golden_file("gfx1250_bf16_4096_kmajor.gluon.txt", kernel("gfx1250_bf16_4096_kmajor").source)

    def test_fp8_rowwise_bias_gluon(self) -> None:
        assert_golden_file("gfx1250_fp8_rowwise_bias.gluon.txt", kernel("gfx1250_fp8_rowwise_bias").source)

    def test_bf16_nmajor_gluon(self) -> None:
        assert_golden_file("gfx1250_bf16_nmajor_odd.gluon.txt", kernel("gfx1250_bf16_nmajor_odd").source)

    def test_fused_gelu_residual_gluon(self) -> None:
        """Issue 4's epilogue on gfx1250: the graph on the whole tile in the wmma layout, operands by ordinary loads."""
        assert_golden_file("gfx1250_fp8_fused_gelu_residual.gluon.txt", issue4_kernel(GFX1250).source)

    def test_bf16_schedule(self) -> None:
        self.assertExpectedInline(kernel("gfx1250_bf16_4096_kmajor").schedule, """\
module warploom_bf16bf16_bf16_bk_major_128x128x64_s3_w4_g8_tdm  # bf16xbf16->bf16 4096x4096x4096 b=k_major
  tiling bm=128 bn=128 bk=64 group_m=8 grid=256
  ring a_ring: A bf16[3 x 128x64]
  ring b_ring: B bf16[3 x 128x64]
  smem 98304 bytes
  partition main (workgroup, warps=4 default):
    cursor c (depth 3)
    acc acc: fp32[128x128]
    for tiles:
      tdm_load A[m, k] -> a_ring[c]
      tdm_load B[n, k] -> b_ring[c]
      tdm_load A[m, k+1] -> a_ring[c+1]
      tdm_load B[n, k+1] -> b_ring[c+1]
      for k:
        tdm_wait pending=2 while k+1 < k_tiles, else 0
        sync_warps
        tdm_load A[m, k+2] -> a_ring[c+2]
        tdm_load B[n, k+2] -> b_ring[c+2]
        wmma acc += a_ring[c] @ b_ring[c]
        advance c
      store_tile C[m, n] <- acc
    tdm_wait pending=0
""")
