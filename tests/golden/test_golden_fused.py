"""Golden text of fused-epilogue kernels: the schedule IR (inline) and the generated Gluon (files fused_*.txt).

Two kernels, planned by the planner from the public front end on meta tensors: fp8 rowwise scaled_mm with a bias
and ``gelu(acc) + residual`` (every operand kind but a scalar: the scalar column read of scale_a, the hoisted
row loads of scale_b and bias, the dense residual through TMA), and a bf16 matmul with two outputs of two dtypes.
Beside the goldens, the placements the fused epilogue is about are asserted on their own, so a refreshed golden
cannot quietly lose them.

Refresh after an intended change with ``EXPECTTEST_ACCEPT=1 pytest tests/golden`` and read the diff.
"""
# ruff: noqa: E501 - golden schedule lines are as long as the IR prints them

from __future__ import annotations

import dataclasses
import difflib
import functools
from pathlib import Path

import expecttest
import torch
import torch.nn.functional as F

import warploom
from warploom import H100_SXM
from warploom.kernel import Kernel, build

EXPECTED = Path(__file__).parent / "expected"
BF16, FP32, E4 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


def t(*shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


@functools.cache
def fp8_rowwise_gelu_residual() -> Kernel:
    m, n, k = 300, 528, 256
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(m, 1), t(1, n), bias=t(n, dtype=BF16),
                         use_fast_accum=True, epilogue=lambda acc, residual: F.gelu(acc) + residual,
                         residual=t(m, n, dtype=BF16))


@functools.cache
def fp8_wide_gelu_residual() -> Kernel:
    """The same epilogue at 4096^3, where rule 9 takes the 256-wide tile: 8 slotted blocks, one consumer partition."""
    m = n = k = 4096
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(m, 1), t(1, n), bias=t(n, dtype=BF16),
                         use_fast_accum=True, epilogue=lambda acc, residual: F.gelu(acc) + residual,
                         residual=t(m, n, dtype=BF16))


@functools.cache
def bf16_two_outputs() -> Kernel:
    m, n, k = 296, 520, 1000
    return warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), bias=t(n, dtype=BF16),
                         epilogue=lambda acc, bias: (F.silu(acc + bias), (acc + bias).float()))


@functools.cache
def bf16_quantize_64col() -> Kernel:
    """warploom.quantize(acc + shift) (rule 26's 128-wide tile) with its epilogue forced into 64-column blocks: the
    walk folds both blocks' amax before either is divided, then stores the group's scale column."""
    m, n, k = 296, 528, 1000
    kern = warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), shift=t(n),
                         epilogue=lambda acc, shift: warploom.quantize(acc + shift))
    return build(kern.spec, H100_SXM, dataclasses.replace(kern.plan, epilogue_subtiles=2))


@functools.cache
def bf16_rowwise_256() -> Kernel:
    """warploom.quantize(silu(acc) * col_s, recipe="rowwise") at N = 240 (rule 27's 128x256 tile, rule 9's 8 blocks of
    32): all 8 folds (each through the opaque copy) before any division, then the (M, 1) scale column."""
    m, n, k = 296, 240, 1000
    return warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), col_s=t(m, 1),
                         epilogue=lambda acc, col_s: warploom.quantize(F.silu(acc) * col_s, recipe="rowwise"))


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


def function(source: str, name: str) -> list[str]:
    """The lines of the @gluon.jit function `name` of a generated source."""
    start = source.index(f"\ndef {name}(")
    end = source.find("\n@gluon.jit", start)
    return source[start + 1:end].splitlines()


def where(lines: list[str], text: str) -> int:
    """The index of the only line containing `text`."""
    hits = [i for i, ln in enumerate(lines) if text in ln]
    assert len(hits) == 1, f"{text!r} on lines {hits}"
    return hits[0]


def consumer_schedule(k: Kernel) -> list[str]:
    """The schedule text's lines of the (one, planner rule 9) consumer partition, stripped."""
    text = k.schedule
    return [ln.strip() for ln in text[text.index("  partition consumer"):text.index("  partition producer")].splitlines()]


class TestFusedPlacement(expecttest.TestCase):
    def test_fp8_scalar_column_read_and_hoisted_row_loads(self) -> None:
        k = fp8_rowwise_gelu_residual()
        for name, row0 in (("consumer", ""),):
            lines = function(k.source, name)
            k_end = where(lines, "c += 1  # advance c")
            wait = where(lines, "acc = warpgroup_mma_wait(0, deps=(acc,))")
            apply = where(lines, "ep_acc = gl.convert_layout(acc, ep_layout)  # apply_epilogue acc")
            # scale_b and bias: one value per column, loaded between the k-loop and the final wgmma wait.
            for op in ("scale_b", "bias"):
                i = where(lines, f"# load_operand {op} for acc as per_col: {op}: row, [1, BN]")
                assert k_end < i < wait
                assert f"{op}_acc_0 = gl.expand_dims(gl.load({op}_ptr + ep_cols_acc_0 * 1, mask=ep_cols_acc_0 < N" in lines[i]
            # scale_a: the scalar column read, one value per row broadcast over the block, after the wait.
            i = where(lines, "# load_operand scale_a for acc as per_row: scale_a: column, [BM, 1]")
            assert wait < i < apply
            assert "scale_a_acc_0 = gl.expand_dims(gl.load(scale_a_ptr + ep_rows * 1, mask=ep_rows < M" in lines[i]
            assert lines[i].split("  #")[0].endswith(", 1)")  # expanded along columns: [rows, 1]
            # The tile's row indices, computed once, at the tile's first operand load.
            rows = where(lines, f"ep_rows = off_m{row0} + gl.arange(0, 128, layout=gl.SliceLayout(1, ep_layout))")
            assert k_end < rows < i and sum("ep_rows = " in line for line in lines) == 1
            # The residual: a TMA copy into the partition's buffer (started in the epilogue: the planner's default
            # leaves prefetching off), waited on its private mbarrier, read once.
            buf = "residual_smem"
            copy = where(lines, f"tma.async_copy_global_to_shared(residual_desc, [off_m{row0}, off_n], {buf}_bar, {buf})")
            read = where(lines, f"residual_acc_0 = {buf}.load(ep_layout).to(gl.float32)")
            assert wait < copy < where(lines, f"mbarrier.wait({buf}_bar, {buf}_phase)") < read < apply
        assert "residual_ptr" not in k.source

    def test_fp8_schedule_places_the_loads(self) -> None:
        body = consumer_schedule(fp8_rowwise_gelu_residual())
        assert body.index("advance c") + 1 == body.index("load_operand scale_b for acc as per_col")
        assert body.index("load_operand bias for acc as per_col") + 1 == body.index("wgmma_wait pending=0")
        assert (body.index("wgmma_wait pending=0") < body.index("load_operand scale_a for acc as per_row")
                < body.index("load_operand residual for acc as tile via residual_smem") < body.index("apply_epilogue acc"))

    def test_bf16_two_outputs_store_through_their_own_buffers(self) -> None:
        k = bf16_two_outputs()
        lines = function(k.source, "consumer")
        assert lines[0].startswith("def consumer(a_ring, b_ring, ready_bars, empty_bars, c_smem, c_smem_1, c_desc, c1_desc, bias_ptr, M, N, K):")
        fence = where(lines, "fence_async_shared()  # fence_async_shared")
        assert where(lines, "c_smem.store(ep_out0)") < where(lines, "c_smem_1.store(ep_out1)") < fence
        assert fence < where(lines, "tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)")
        assert fence < where(lines, "tma.async_copy_shared_to_global(c1_desc, [off_m, off_n], c_smem_1)")
        assert "ep_out1 = ep_0  # output 1: %0 as fp32" in [ln.strip() for ln in lines]  # no cast: fp32
        assert f"def {k.module.name}(a_desc, b_desc, c_desc, c1_desc, bias_ptr, M, N, K):" in k.source


class TestFusedGluonGolden(expecttest.TestCase):
    def test_fp8_rowwise_gelu_residual(self) -> None:
        assert_golden_file("fused_fp8_rowwise_gelu_residual.gluon.txt", fp8_rowwise_gelu_residual().source)

    def test_bf16_two_outputs(self) -> None:
        assert_golden_file("fused_bf16_two_outputs.gluon.txt", bf16_two_outputs().source)

    def test_bf16_quantize_64col(self) -> None:
        k = bf16_quantize_64col()
        assert_golden_file("fused_bf16_quantize_64col.schedule.txt", k.schedule)
        assert_golden_file("fused_bf16_quantize_64col.gluon.txt", k.source)

    def test_bf16_rowwise_256(self) -> None:
        k = bf16_rowwise_256()
        assert (k.plan.bn, k.plan.epilogue_subtiles, k.plan.load_ahead) == (256, 8, False)
        assert_golden_file("fused_bf16_rowwise_256.schedule.txt", k.schedule)
        assert_golden_file("fused_bf16_rowwise_256.gluon.txt", k.source)

    def test_fp8_wide_gelu_residual(self) -> None:
        k = fp8_wide_gelu_residual()
        assert k.plan.short() == "128x256x128_s4_w8_g8_e8_nohoist_prefetch_ahead_ss2_os2"
        assert_golden_file("fused_fp8_wide_gelu_residual.schedule.txt", k.schedule)
        assert_golden_file("fused_fp8_wide_gelu_residual.gluon.txt", k.source)


class TestFusedScheduleGolden(expecttest.TestCase):
    def test_fp8_rowwise_gelu_residual(self) -> None:
        self.assertExpectedInline(fp8_rowwise_gelu_residual().schedule, """\
module warploom_e4m3e4m3_bf16_rowwise_bias_bk_major_128x128x128_s5_w8_g8_epbe88cf3ebd  # e4m3xe4m3->bf16 rowwise 300x528x256 b=k_major +epilogue
  tiling bm=128 bn=128 bk=128 group_m=8 grid=15
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A e4m3[5 x 128x128]
  ring b_ring: B e4m3[5 x 128x128]
  buffer c_smem: C bf16[128x128]
  buffer residual_smem: residual bf16[128x128]
  mbarrier ready[5] count=1 ready of a_ring, b_ring
  mbarrier empty[5] count=1 empty of a_ring, b_ring
  smem 229456 bytes
  epilogue:
    epilogue(acc, scale_a: column fp32, scale_b: row fp32, bias: row bf16, residual: dense bf16):
      %0 = mul acc, scale_a
      %1 = mul %0, scale_b
      %2 = add %1, bias
      %3 = gelu %2
      %4 = add %3, residual
      return %4
  partition consumer (consumer, warps=8 regs=240 default):
    cursor c (depth 5)
    acc acc: fp32[128x128]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      load_operand scale_b for acc as per_col
      load_operand bias for acc as per_col
      wgmma_wait pending=0
      arrive empty[c-1]
      load_operand scale_a for acc as per_row
      prefetch_operand residual for acc into residual_smem
      load_operand residual for acc as tile via residual_smem
      apply_epilogue acc
      tma_store_wait pending=0
      store_smem c_smem <- out0 of acc
      fence_async_shared
      tma_store c_smem -> C[m, n]
    tma_store_wait pending=0
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 5)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=32768
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[n, k] -> b_ring[p] on ready[p]
      advance p
""")

    def test_bf16_two_outputs(self) -> None:
        self.assertExpectedInline(bf16_two_outputs().schedule, """\
module warploom_bf16bf16_bf16_bk_major_128x128x64_s4_w8_g8_ep2745c9ef78  # bf16xbf16->bf16 296x520x1000 b=k_major +epilogue
  tiling bm=128 bn=128 bk=64 group_m=8 grid=15
  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it before touching memory, and the next grid may launch once every CTA has started
  ring a_ring: A bf16[4 x 128x64]
  ring b_ring: B bf16[4 x 128x64]
  buffer c_smem: C bf16[128x128]
  buffer c_smem_1: C1 fp32[128x128]
  mbarrier ready[4] count=1 ready of a_ring, b_ring
  mbarrier empty[4] count=1 empty of a_ring, b_ring
  smem 229440 bytes
  epilogue:
    epilogue(acc, bias: row bf16):
      %0 = add acc, bias
      %1 = silu %0
      return %1, %0 as fp32
  partition consumer (consumer, warps=8 regs=240 default):
    cursor c (depth 4)
    acc acc: fp32[128x128]
    grid_dependency_wait
    for tiles:
      for k:
        wait ready[c] phase(c)
        wgmma.async acc += a_ring[c] @ b_ring[c]
        wgmma_wait pending=1
        arrive empty[c-1]  if k > 0
        advance c
      load_operand bias for acc as per_col
      wgmma_wait pending=0
      arrive empty[c-1]
      apply_epilogue acc
      tma_store_wait pending=0
      store_smem c_smem <- out0 of acc
      store_smem c_smem_1 <- out1 of acc
      fence_async_shared
      tma_store c_smem -> C[m, n]
      tma_store c_smem_1 -> C1[m, n]
    tma_store_wait pending=0
  partition producer (producer, warps=1 regs=24):
    cursor p (depth 4)
    grid_dependency_wait
    for tiles*k:
      wait empty[p] phase(p)^1
      arrive_expect_tx ready[p] bytes=32768
      tma_load A[m, k] -> a_ring[p] on ready[p]
      tma_load B[n, k] -> b_ring[p] on ready[p]
      advance p
""")
