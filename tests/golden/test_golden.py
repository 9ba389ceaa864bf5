"""Golden text of the schedule IR (inline) and the generated Gluon (files) for eight representative specs.

Refresh after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/golden`` and read the diff:
it is the change to the kernels warploom emits. The specs use the planner's own choice, so a planner
change shows up here too.
"""
# ruff: noqa: E501 - golden schedule lines are as long as the IR prints them

from __future__ import annotations

import difflib
from pathlib import Path

import expecttest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build

EXPECTED = Path(__file__).parent / "expected"
E4 = DType.E4M3

SPECS = {
    # The headline 16-bit case: an nn.Linear-style (K-major) weight.
    "bf16_4096_kmajor": GemmSpec(4096, 4096, 4096),
    # Odd shape, row-major B (wgmma reads it MN-major), no dimension a tile multiple.
    "bf16_296x520x1000_nmajor": GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
    # fp8 rowwise scales + bias, tensor-core accumulation (torch's use_fast_accum=True).
    "fp8_rowwise_bias_native": GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                                        Accumulation.NATIVE, DType.BF16),
    # fp8 tensorwise with per-k-block promotion into an fp32 accumulator.
    "fp8_tensorwise_promoted": GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR,
                                        ScaleRecipe.TENSORWISE, Accumulation.PROMOTED),
    # DeepSeek-V3's blockwise recipe: scales copied through the A/B stages, promoted per k-block with them.
    "fp8_blockwise_1x128_128x128": GemmSpec(4096, 7168, 16384, E4, E4, DType.BF16, BLayout.K_MAJOR,
                                            ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED),
    # The same recipe at a DeepSeek-V3 small-batch shape: 32 tiles of 128x128, so planner rule 14 splits K in 4:
    # work units, fp32 partials to the workspace, and the reduction kernel.
    "fp8_blockwise_m128_splitk": GemmSpec(128, 4096, 7168, E4, E4, DType.BF16, BLayout.K_MAJOR,
                                          ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED),
    # DeepSeek-V3's q_a + kv_a at 4096 tokens, 2.18 waves of 128x256 tiles: rule 15 runs the two whole waves in a
    # ranged kernel and the 24 tiles left over in a ranged split-K kernel with a compact workspace (both emitted).
    "fp8_rowwise_q_a_tail": GemmSpec(4096, 2112, 7168, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE),
    # Decode at M = 16 with rowwise scales: rule 18 runs C^T = B^T A^T on 64x16 tiles (the weight's rows fill
    # wgmma's 64), swaps the scales, and stores each tile into C transposed.
    "fp8_rowwise_decode_swap": GemmSpec(16, 4096, 14336, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE),
}


def issue4_kernel(device: DeviceInfo) -> Kernel:
    """Issue 4's fused epilogue at 4096^3 (fp8 rowwise + bias, erf GELU, a dense bf16 residual), planned for `device`:
    the golden tier of every target holds its Gluon."""
    import torch
    import torch.nn.functional as F

    import warploom

    def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device="meta")

    e4, bf = torch.float8_e4m3fn, torch.bfloat16
    return warploom.plan(meta(4096, 4096, dtype=e4), meta(4096, 4096, dtype=e4).t(), meta(4096, 1), meta(1, 4096),
                         bias=meta(4096, dtype=bf), use_fast_accum=True, device=device,
                         epilogue=lambda acc, residual: F.gelu(acc) + residual, residual=meta(4096, 4096, dtype=bf))


def kernel(name: str) -> Kernel:
    return build(SPECS[name], H100_SXM)


def assert_golden_file(name: str, actual: str) -> None:
    path = EXPECTED / name
    if expecttest.ACCEPT:
        path.write_text(actual)
        return
    assert path.exists(), f"{path} is missing: run with EXPECTTEST_ACCEPT=1 to create it"
    expected = path.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            f"expected/{name}", "generated"))
        raise AssertionError(f"generated text differs from {path} (EXPECTTEST_ACCEPT=1 to accept):\n{diff}")


class TestGluonGolden(expecttest.TestCase):
    def test_bf16_4096_kmajor(self) -> None:
        assert_golden_file("bf16_4096_kmajor.gluon.txt", kernel("bf16_4096_kmajor").source)

    def test_bf16_296x520x1000_nmajor(self) -> None:
        assert_golden_file("bf16_296x520x1000_nmajor.gluon.txt", kernel("bf16_296x520x1000_nmajor").source)

    def test_fp8_rowwise_bias_native(self) -> None:
        assert_golden_file("fp8_rowwise_bias_native.gluon.txt", kernel("fp8_rowwise_bias_native").source)

    def test_fp8_tensorwise_promoted(self) -> None:
        assert_golden_file("fp8_tensorwise_promoted.gluon.txt", kernel("fp8_tensorwise_promoted").source)

    def test_fp8_blockwise_1x128_128x128(self) -> None:
        assert_golden_file("fp8_blockwise_1x128_128x128.gluon.txt", kernel("fp8_blockwise_1x128_128x128").source)

    def test_fp8_blockwise_m128_splitk(self) -> None:
        assert kernel("fp8_blockwise_m128_splitk").plan.split_k == 4
        assert_golden_file("fp8_blockwise_m128_splitk.gluon.txt", kernel("fp8_blockwise_m128_splitk").source)


    def test_fp8_rowwise_q_a_tail(self) -> None:
        assert kernel("fp8_rowwise_q_a_tail").plan.tail_split == 4
        assert_golden_file("fp8_rowwise_q_a_tail.gluon.txt", kernel("fp8_rowwise_q_a_tail").source)

    def test_fp8_rowwise_decode_swap(self) -> None:
        assert kernel("fp8_rowwise_decode_swap").plan.swap_ab
        assert_golden_file("fp8_rowwise_decode_swap.gluon.txt", kernel("fp8_rowwise_decode_swap").source)


class TestScheduleGolden(expecttest.TestCase):
    def test_bf16_4096_kmajor(self) -> None:
        self.assertExpectedInline(kernel("bf16_4096_kmajor").schedule, """\
module warploom_bf16bf16_bf16_bk_major_128x256x64_s4_w8_g8_e2_p2  # bf16xbf16->bf16 4096x4096x4096 b=k_major
  tiling bm=128 bn=256 bk=64 group_m=8 grid=132
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A bf16[4 x 128x64]
  ring b_ring: B bf16[4 x 256x64]
  buffer c_smem0: C bf16[64x128]
  buffer c_smem1: C bf16[64x128]
  mbarrier ready[4] count=1 ready of a_ring, b_ring
  mbarrier empty[4] count=2 empty of a_ring, b_ring
  smem 229440 bytes
  partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):
    cursor c (depth 4)
    acc acc: fp32[64x256]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 0/2]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 0/2]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 1/2]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 1/2]
    tma_store_wait pending=0
  partition consumer1 (consumer, warps=4 regs=240 rows=64:128):
    cursor c (depth 4)
    acc acc: fp32[64x256]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 0/2]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 0/2]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 1/2]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 1/2]
    tma_store_wait pending=0
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

    def test_bf16_296x520x1000_nmajor(self) -> None:
        self.assertExpectedInline(kernel("bf16_296x520x1000_nmajor").schedule, """\
module warploom_bf16bf16_bf16_bn_major_128x128x64_s6_w8_g8_p2  # bf16xbf16->bf16 296x520x1000 b=n_major
  tiling bm=128 bn=128 bk=64 group_m=8 grid=15
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A bf16[6 x 128x64]
  ring b_ring: B bf16[6 x 64x128]
  buffer c_smem0: C bf16[64x128]
  buffer c_smem1: C bf16[64x128]
  mbarrier ready[6] count=1 ready of a_ring, b_ring
  mbarrier empty[6] count=2 empty of a_ring, b_ring
  smem 229472 bytes
  partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):
    cursor c (depth 6)
    acc acc: fp32[64x128]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc
      fence_async_shared
      tma_store c_smem0 -> C[m, n]
    tma_store_wait pending=0
  partition consumer1 (consumer, warps=4 regs=240 rows=64:128):
    cursor c (depth 6)
    acc acc: fp32[64x128]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc
      fence_async_shared
      tma_store c_smem1 -> C[m, n]
    tma_store_wait pending=0
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 6)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=32768
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[k, n] -> b_ring[p] on ready[p]
      advance p
""")

    def test_fp8_rowwise_bias_native(self) -> None:
        self.assertExpectedInline(kernel("fp8_rowwise_bias_native").schedule, """\
module warploom_e4m3e4m3_bf16_rowwise_bias_bk_major_128x256x128_s4_w8_g8_e4_p2  # e4m3xe4m3->bf16 rowwise 4096x4096x4096 b=k_major
  tiling bm=128 bn=256 bk=128 group_m=8 grid=132
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A e4m3[4 x 128x128]
  ring b_ring: B e4m3[4 x 256x128]
  buffer c_smem0: C bf16[64x64]
  buffer c_smem1: C bf16[64x64]
  mbarrier ready[4] count=1 ready of a_ring, b_ring
  mbarrier empty[4] count=2 empty of a_ring, b_ring
  smem 213056 bytes
  partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):
    cursor c (depth 4)
    acc acc: fp32[64x256]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      epilogue acc[cols 0/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 0/4]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 0/4]
      epilogue acc[cols 1/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 1/4]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 1/4]
      epilogue acc[cols 2/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 2/4]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 2/4]
      epilogue acc[cols 3/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc[cols 3/4]
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 3/4]
    tma_store_wait pending=0
  partition consumer1 (consumer, warps=4 regs=240 rows=64:128):
    cursor c (depth 4)
    acc acc: fp32[64x256]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      epilogue acc[cols 0/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 0/4]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 0/4]
      epilogue acc[cols 1/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 1/4]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 1/4]
      epilogue acc[cols 2/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 2/4]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 2/4]
      epilogue acc[cols 3/4]: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc[cols 3/4]
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 3/4]
    tma_store_wait pending=0
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

    def test_fp8_tensorwise_promoted(self) -> None:
        self.assertExpectedInline(kernel("fp8_tensorwise_promoted").schedule, """\
module warploom_e4m3e4m3_bf16_tensorwise_promoted_bk_major_128x256x128_s3_w8_g8_e2_p2_h2  # e4m3xe4m3->bf16 tensorwise promoted 4096x4096x4096 b=k_major
  tiling bm=128 bn=256 bk=128 group_m=8 grid=132
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A e4m3[3 x 128x128]
  ring b_ring: B e4m3[3 x 256x128]
  buffer c_smem0: C bf16[64x128]
  buffer c_smem1: C bf16[64x128]
  mbarrier ready[3] count=1 ready of a_ring, b_ring
  mbarrier empty[3] count=2 empty of a_ring, b_ring
  smem 180272 bytes
  partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):
    cursor c (depth 3)
    acc acc0: fp32[64x128]
    acc acc1: fp32[64x128] at col 128
    acc partial: fp32[64x128]
    grid_dependency_wait
    for tiles:
      zero acc0
      zero acc1
      for k:
        wait ready[c] phase(c)
        wgmma.async partial += a_ring[c] @ b_ring[c][:, 0:128] overwrite=always
        wgmma_wait pending=0
        promote acc0 += partial
        wgmma.async partial += a_ring[c] @ b_ring[c][:, 128:256] overwrite=always
        wgmma_wait pending=0
        arrive empty[c]
        promote acc1 += partial
        advance c
      epilogue acc0: acc *= scale_a[0] * scale_b[0]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc0
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 0/2]
      epilogue acc1: acc *= scale_a[0] * scale_b[0]
      tma_store_wait pending=0
      store_smem c_smem0 <- acc1
      fence_async_shared
      tma_store c_smem0 -> C[m, n][cols 1/2]
    tma_store_wait pending=0
  partition consumer1 (consumer, warps=4 regs=240 rows=64:128):
    cursor c (depth 3)
    acc acc0: fp32[64x128]
    acc acc1: fp32[64x128] at col 128
    acc partial: fp32[64x128]
    grid_dependency_wait
    for tiles:
      zero acc0
      zero acc1
      for k:
        wait ready[c] phase(c)
        wgmma.async partial += a_ring[c] @ b_ring[c][:, 0:128] overwrite=always
        wgmma_wait pending=0
        promote acc0 += partial
        wgmma.async partial += a_ring[c] @ b_ring[c][:, 128:256] overwrite=always
        wgmma_wait pending=0
        arrive empty[c]
        promote acc1 += partial
        advance c
      epilogue acc0: acc *= scale_a[0] * scale_b[0]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc0
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 0/2]
      epilogue acc1: acc *= scale_a[0] * scale_b[0]
      tma_store_wait pending=0
      store_smem c_smem1 <- acc1
      fence_async_shared
      tma_store c_smem1 -> C[m, n][cols 1/2]
    tma_store_wait pending=0
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 3)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=49152
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[n, k] -> b_ring[p] on ready[p]
      advance p
""")

    def test_fp8_rowwise_decode_swap(self) -> None:
        self.assertExpectedInline(kernel("fp8_rowwise_decode_swap").schedule, """\
module warploom_e4m3e4m3_bf16_rowwise_bk_major_64x16x128_s12_w4_g8_swap  # e4m3xe4m3->bf16 rowwise 4096x16x14336 b=k_major
  tiling bm=64 bn=16 bk=128 group_m=8 grid=64 swap_ab (stores C transposed)
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A e4m3[12 x 64x128]
  ring b_ring: B e4m3[12 x 16x128]
  buffer c_smem: C bf16[16x64]
  mbarrier ready[12] count=1 ready of a_ring, b_ring
  mbarrier empty[12] count=1 empty of a_ring, b_ring
  smem 125120 bytes
  partition consumer (consumer, warps=4 regs=240 default):
    cursor c (depth 12)
    acc acc: fp32[64x16]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      wgmma_wait pending=0
      arrive empty[c-1]
      epilogue acc: acc *= scale_a[m, None] * scale_b[None, n]
      tma_store_wait pending=0
      store_smem c_smem <- acc
      fence_async_shared
      tma_store c_smem -> C[m, n]
    tma_store_wait pending=0
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 12)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=10240
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[n, k] -> b_ring[p] on ready[p]
      advance p
""")
