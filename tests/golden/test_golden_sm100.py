"""Golden text of sm_100a schedules (planner rule 19, passes/blackwell.py) and their generated Gluon.

Refresh after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/golden`` and read the diff.
"""
# ruff: noqa: E501 - golden schedule lines are as long as the IR prints them

from __future__ import annotations

import expecttest
from test_golden import assert_golden_file, issue4_kernel  # (pytest puts this folder on sys.path)

from warploom import Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleLayout, ScaleRecipe
from warploom.device import B200
from warploom.kernel import Kernel, build

E4 = DType.E4M3
SPECS = {
    "sm100_bf16_4096_kmajor": GemmSpec(4096, 4096, 4096),
    # fp8 rowwise scales and a bias, applied per 64-column block as the epilogue partition drains tensor memory.
    "sm100_fp8_rowwise_bias": GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                                       Accumulation.NATIVE, DType.BF16),
    # MX fp8 (seed 001): e8m0 scales in torch's blocked layout ride the A/B stage by TMA, tcgen05_copy puts them in
    # tensor memory before each block-scaled MMA (tcgen05_mma_scaled), whose completion releases the stage.
    "sm100_mxfp8_blocked": GemmSpec(1000, 520, 1056, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                                    Accumulation.PROMOTED, scale_layout=ScaleLayout.BLOCKED),
    # MX fp8 with row-major scales (seed 000): a 4-warp scale partition loads them and tcgen05.st's them into two
    # tensor-memory scale buffers; the block-scaled MMA releases a buffer when it completes.
    "sm100_mxfp8_rows": GemmSpec(1000, 520, 1056, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                                 Accumulation.PROMOTED),
    # NVFP4: e2m1 data two a byte, e4m3 scales per 16 of K (tensor-memory scale buffers of float8e4nv) on the same
    # path at BK 64, the global scales multiplied in the epilogue.
    "sm100_nvfp4_blocked": GemmSpec(1000, 520, 1056, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR,
                                    ScaleRecipe.NVFP4, Accumulation.PROMOTED, scale_layout=ScaleLayout.BLOCKED),
    # NVFP4 with row-major scales (seed 000) at BK 128: (128, 8) e4m3 buffers, the MMA's two 64-deep halves reading
    # columns 0..3 and 4..7 of them, the global scales in the epilogue.
    "sm100_nvfp4_rows": GemmSpec(1000, 520, 1152, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR,
                                 ScaleRecipe.NVFP4, Accumulation.PROMOTED),
    # Decode with row-major MX scales (seed 000, swap-AB): C^T = B^T A^T on 128x16 tiles, the partition's scale_a the
    # problem's scale_b (the weight's), a narrow tile's rows of scale_b past its 16 tokens 1.0.
    "sm100_mxfp8_rows_swap": GemmSpec(8, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                                      Accumulation.PROMOTED),
    # DeepSeek's fp32 blockwise scales (1x128 x 128x128), promoted: each k-block's MMA into a tensor-memory partial,
    # which the 8-warp epilogue partition loads, scales and adds into its register accumulator.
    "sm100_fp8_blockwise_deepseek": GemmSpec(4096, 7168, 7168, E4, E4, DType.BF16, BLayout.K_MAJOR,
                                             ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED),
    # An M-grouped MX fp8 GEMM (rule 22 on sm_100a): the group scan's tile loop, B at [group, n, k], C clipped at
    # each group's last row, and the scale partition loading each tile's expert's row-major scale_b at
    # sb_ptr + grp * sb_stride_g (unpadded per-expert scales: what tcgen05.cp's 128x4 chunks cannot read).
    "sm100_mxfp8_grouped_rows": GemmSpec(8192, 4096, 7168, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                                         Accumulation.PROMOTED, grouping=Grouping.OFFSETS, groups=8),
}


def kernel(name: str) -> Kernel:
    return build(SPECS[name], B200)


def blocked_partition_256() -> Kernel:
    """MX fp8 with blocked scales forced onto seed 000's partition at 128x256: the loads at their blocked addresses
    (warploom.blocked.offset), B's (256, 4) buffers in a layout of their own, one accumulator."""
    from warploom.planner import plan_schedule

    spec = GemmSpec(1000, 520, 1056, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    scale_layout=ScaleLayout.BLOCKED)
    return build(spec, B200, plan_schedule(spec, B200, bn=256, scale_partition=True))


class TestSm100Golden(expecttest.TestCase):
    def test_bf16_gluon(self) -> None:
        assert_golden_file("sm100_bf16_4096_kmajor.gluon.txt", kernel("sm100_bf16_4096_kmajor").source)

    def test_fp8_rowwise_bias_gluon(self) -> None:
        assert_golden_file("sm100_fp8_rowwise_bias.gluon.txt", kernel("sm100_fp8_rowwise_bias").source)

    def test_mxfp8_gluon(self) -> None:
        assert_golden_file("sm100_mxfp8_blocked.gluon.txt", kernel("sm100_mxfp8_blocked").source)

    def test_mxfp8_scale_partition_gluon(self) -> None:
        assert_golden_file("sm100_mxfp8_rows.gluon.txt", kernel("sm100_mxfp8_rows").source)

    def test_nvfp4_scale_partition_gluon(self) -> None:
        assert_golden_file("sm100_nvfp4_rows.gluon.txt", kernel("sm100_nvfp4_rows").source)

    def test_mxfp8_scale_partition_swap_gluon(self) -> None:
        assert_golden_file("sm100_mxfp8_rows_swap.gluon.txt", kernel("sm100_mxfp8_rows_swap").source)

    def test_mxfp8_blocked_scale_partition_256_gluon(self) -> None:
        assert_golden_file("sm100_mxfp8_blocked_partition_256.gluon.txt", blocked_partition_256().source)

    def test_nvfp4_gluon(self) -> None:
        assert_golden_file("sm100_nvfp4_blocked.gluon.txt", kernel("sm100_nvfp4_blocked").source)

    def test_mxfp8_grouped_scale_partition_gluon(self) -> None:
        assert_golden_file("sm100_mxfp8_grouped_rows.gluon.txt", kernel("sm100_mxfp8_grouped_rows").source)

    def test_fp8_blockwise_promoted_gluon(self) -> None:
        assert_golden_file("sm100_fp8_blockwise_deepseek.gluon.txt", kernel("sm100_fp8_blockwise_deepseek").source)

    def test_fused_gelu_residual_gluon(self) -> None:
        """Issue 4's epilogue on sm_100a: per 64-column block out of tensor memory, the residual by TMA."""
        assert_golden_file("sm100_fp8_fused_gelu_residual.gluon.txt", issue4_kernel(B200).source)

    def test_bf16_schedule(self) -> None:
        self.assertExpectedInline(kernel("sm100_bf16_4096_kmajor").schedule, """\
module warploom_bf16bf16_bf16_bk_major_128x256x64_s4_w4_g8_e4_tm2  # bf16xbf16->bf16 4096x4096x4096 b=k_major
  tiling bm=128 bn=256 bk=64 group_m=8 grid=148
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A bf16[4 x 128x64]
  ring b_ring: B bf16[4 x 256x64]
  ring acc_tm: acc fp32[2 x 128x256] in tensor memory
  buffer c_smem: C bf16[128x64]
  mbarrier ready[4] count=1 ready of a_ring, b_ring
  mbarrier empty[4] count=1 empty of a_ring, b_ring
  mbarrier acc_ready[2] count=1 ready of acc_tm
  mbarrier acc_empty[2] count=1 empty of acc_tm
  smem 213088 bytes, tmem 512 columns
  partition epilogue (epilogue, warps=4 regs=232 default):
    cursor t (depth 2)
    acc acc0: fp32[128x64]
    acc acc1: fp32[128x64] at col 64
    acc acc2: fp32[128x64] at col 128
    acc acc3: fp32[128x64] at col 192
    grid_dependency_wait
    for tiles:
      wait acc_ready[t] phase(t)
      load_tmem acc0 <- acc_tm[t][cols 0/4]
      tma_store_wait pending=0
      store_smem c_smem <- acc0
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 0/4]
      load_tmem acc1 <- acc_tm[t][cols 1/4]
      tma_store_wait pending=0
      store_smem c_smem <- acc1
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 1/4]
      load_tmem acc2 <- acc_tm[t][cols 2/4]
      tma_store_wait pending=0
      store_smem c_smem <- acc2
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 2/4]
      load_tmem acc3 <- acc_tm[t][cols 3/4]
      arrive acc_empty[t]
      tma_store_wait pending=0
      store_smem c_smem <- acc3
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 3/4]
      advance t
    tma_store_wait pending=0
  partition mma (mma, warps=1 regs=24):
    cursor c (depth 4)
    cursor t (depth 2)
    grid_dependency_wait
    for tiles:
      wait acc_empty[t] phase(t)^1
      for k:
        wait ready[c] phase(c)
        tcgen05_mma.async acc_tm[t] += a_ring[c] @ b_ring[c], then arrive empty[c]
        advance c
      tcgen05_commit acc_ready[t]
      advance t
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 4)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=49152
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[n, k] -> b_ring[p] on ready[p]
      advance p
""")
