"""Compile-only tier for sm_100a (planner rule 19): cross-compile a matrix of Blackwell kernels on the CPU.

Each must compile with Triton's Blackwell ptxas, issue its MMAs as tcgen05 (UTCHMMA for 16-bit inputs, UTCQMMA for
fp8), read its accumulators from tensor memory (LDTM), not spill, and fit the B200's shared memory. Nothing here
runs: no sm_100a GPU is at hand.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleLayout, ScaleRecipe
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
    # Decode, swapped (rule 18 on sm_100a): 128x16 and 128x32 tiles, 12 stages.
    ("bf16_swap_16x14336x4096", GemmSpec(16, 14336, 4096), {}),
    ("e4m3_rowwise_bias_swap_24x4096x4096", f8(24, 4096, 4096, RW, bias=BF16), {}),
]


def _fused(spec_args: tuple[Any, ...], fn: Any, **operands: Any) -> GemmSpec:
    import warploom

    return warploom.plan(*spec_args, epilogue=fn, device=B200, **operands).spec


def _meta(*shape: int, dtype: Any = None) -> Any:
    import torch

    return torch.empty(*shape, dtype=dtype or torch.float32, device="meta")


def fused_matrix() -> list[tuple[str, GemmSpec, dict[str, int]]]:
    """Fused epilogues: issue 4's (fp8 rowwise + bias, erf GELU, a dense residual) and two outputs with a column
    operand; built from meta tensors, as a user's call would."""
    import torch
    import torch.nn.functional as F

    e4, bf = torch.float8_e4m3fn, torch.bfloat16
    m, n, k = 4096, 4096, 4096
    issue4 = _fused((_meta(m, k, dtype=e4), _meta(n, k, dtype=e4).t(), _meta(m, 1), _meta(1, n)),
                    lambda acc, residual: F.gelu(acc) + residual, residual=_meta(m, n, dtype=bf),
                    bias=_meta(n, dtype=bf), use_fast_accum=True)
    two = _fused((_meta(1000, 264, dtype=bf), _meta(520, 264, dtype=bf).t()),
                 lambda acc, bias, col: (F.silu(acc + bias) * col, (acc + bias).float()),
                 bias=_meta(520, dtype=bf), col=_meta(1000, 1))
    return [("fused_fp8_rowwise_bias_gelu_residual", issue4, {}), ("fused_bf16_two_outputs_column", two, {})]


@pytest.mark.parametrize("spec,forced", [pytest.param(s, f, id=i) for i, s, f in MATRIX + fused_matrix()])
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


def _mx(m: int, n: int, k: int, a: DType = E4, b: DType = E4) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, BF16, K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    scale_layout=ScaleLayout.BLOCKED)


@pytest.mark.parametrize("spec,bn,copies", [
    pytest.param(_mx(1000, 520, 1056), 128, 2, id="mxfp8_128x128_odd"),
    pytest.param(_mx(4096, 4096, 4096), 256, 3, id="mxfp8_128x256"),
    pytest.param(_mx(296, 528, 1024, a=E5), 128, 2, id="mxfp8_e5m2xe4m3_128x128"),
    # bn=64 (forced, N <= 64): B's whole 128-row chunk copied, the N = 64 MMA reading its first rows
    pytest.param(_mx(1000, 64, 1056), 64, 2, id="mxfp8_128x64_n64"),
])
def test_mx_compiles_to_block_scaled_tcgen05(spec: GemmSpec, bn: int, copies: int) -> None:
    """Seed 001 on sm_100a: each k-block's scales ride the A/B stage (TMA, counted by its expect-tx), tcgen05.cp
    copies them to tensor memory (UTCCP: one per 128 rows of A and of B) and the block-scaled MMA reads them."""
    from warploom.planner import plan_schedule

    plan = plan_schedule(spec, B200, bn=bn)
    assert (plan.bn, plan.acc_buffers) == (bn, 1 if bn == 256 else 2)
    c = build(spec, B200, plan).compile()
    assert "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale" in c.ptx
    assert c.block_scaled_mmas() == c.count("UTCQMMA") == 4, c.summary()  # BK = 128: four 32-deep MMAs
    assert c.count("UTCCP") == copies, c.summary()
    assert c.count("LDTM") > 0 and c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block


def _nvfp4(m: int, n: int, k: int) -> GemmSpec:
    return replace(_mx(m, n, k, a=DType.E2M1, b=DType.E2M1), scale=ScaleRecipe.NVFP4)


# One e8m0 scale per 32 of K (MX fp4): PTX's kind::mxf4 scale_vec::2X, 64 of K an instruction (two a 128-deep
# k-block), spelled block32 by Triton 3.9. One e4m3 scale per 16 (NVFP4): kind::mxf4nvf4 scale_vec::4X (block16 under
# Triton 3.9, checked there), 64 of K an instruction: one a 64-deep k-block (K not a multiple of 128), two a 128-deep
# one, whose (rows, 8) scale buffers take two 128x4 chunks a row block, each its own UTCCP.
_MXF4 = r"kind::mxf4\.block_scale\.(scale_vec::2X|block32)\b"
_NVF4 = r"kind::mxf4nvf4\.block_scale\.(scale_vec::4X|block16)\b"


@pytest.mark.parametrize("spec,bn,bk,copies,kind,mmas", [
    pytest.param(_mx(1000, 520, 1056, a=DType.E2M1, b=DType.E2M1), 128, 128, 2, _MXF4, 2, id="mxfp4_128x128_odd"),
    pytest.param(_mx(4096, 4096, 4096, a=DType.E2M1, b=DType.E2M1), 256, 128, 3, _MXF4, 2, id="mxfp4_128x256"),
    pytest.param(_nvfp4(1000, 520, 1056), 128, 64, 2, _NVF4, 1, id="nvfp4_128x128_odd"),
    # BK 128: two chunks a row block, so twice the UTCCP (A's 2, B's 2 or 4) and two MMAs a k-block
    pytest.param(_nvfp4(1000, 520, 1152), 128, 128, 4, _NVF4, 2, id="nvfp4_128x128_bk128_odd"),
    pytest.param(_nvfp4(4096, 4096, 4096), 256, 128, 6, _NVF4, 2, id="nvfp4_128x256"),
    # bn=64 (forced, N <= 64): B's whole 128-row block of scales copied, the N = 64 MMA reading its first rows
    pytest.param(_nvfp4(1000, 64, 1024), 64, 128, 4, _NVF4, 2, id="nvfp4_128x64_n64"),
    pytest.param(_mx(520, 48, 1056, a=DType.E2M1, b=DType.E2M1), 64, 128, 2, _MXF4, 2, id="mxfp4_128x64_n48"),
])
def test_fp4_compiles_to_block_scaled_utcomma(spec: GemmSpec, bn: int, bk: int, copies: int, kind: str,
                                              mmas: int) -> None:
    """MX fp4 and NVFP4 on seed 001's path: the packed operands' TMA boxes are (rows, BK/2) bytes, and the MMA is
    block-scaled UTCOMMA with its scales copied by tcgen05.cp. NVFP4's e4m3 scales (tensor-memory scale buffers of
    float8e4nv, which tells Gluon the scale format) per 16 of K make it kind::mxf4nvf4 scale_vec::4X, one MMA at
    BK 64 and two at BK 128 (K a multiple of 128); its global scales multiply the accumulator in the epilogue."""
    from warploom.planner import plan_schedule

    plan = plan_schedule(spec, B200, bn=bn)
    assert (plan.bk, plan.bn) == (bk, bn)
    c = build(spec, B200, plan).compile()
    assert re.search(r"tcgen05\.mma\.cta_group::1\." + kind, c.ptx)
    assert c.block_scaled_mmas() == c.count("UTCOMMA") == mmas and c.count("UTCQMMA") == 0, c.summary()
    assert c.count("UTCCP") == copies, c.summary()
    assert c.count("LDTM") > 0 and c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block


def test_plain_fp8_mma_is_not_block_scaled() -> None:
    """The block-scale count tells the two apart (so the test above can fail)."""
    c = build(f8(4096, 4096, 4096, TW), B200).compile()
    assert c.count("UTCQMMA") > 0 and c.block_scaled_mmas() == 0 and c.count("UTCCP") == 0


@pytest.mark.parametrize("spec,tokens,kind,mma,mmas,copies", [
    pytest.param(_nvfp4(16, 4096, 4096), 16, _NVF4, "UTCOMMA", 2, 4, id="nvfp4_swap_16x4096x4096"),
    pytest.param(_nvfp4(24, 528, 1056), 32, _NVF4, "UTCOMMA", 1, 2, id="nvfp4_swap_24x528x1056_odd"),
    pytest.param(_mx(24, 4096, 4096), 32, r"kind::mxf8f6f4\.block_scale\b", "UTCQMMA", 4, 2, id="mxfp8_swap_24"),
    pytest.param(_mx(8, 4096, 4096, a=DType.E2M1, b=DType.E2M1), 16, _MXF4, "UTCOMMA", 2, 2, id="mxfp4_swap_8"),
])
def test_block_scaled_decode_compiles_swapped(spec: GemmSpec, tokens: int, kind: str, mma: str, mmas: int,
                                              copies: int) -> None:
    """Rule 18 with block scales: a 128-row tile of the weight by 16 or 32 tokens, the MMA's N the tokens, each
    operand's scales one 128x4 chunk a k-block (NVFP4 at BK 128: two) copied by tcgen05.cp (UTCCP: the tokens' a
    whole 128-row block, of which the MMA reads the first rows), a block-scaled UTCOMMA / UTCQMMA of N = 16 or 32."""
    from warploom.planner import plan_schedule

    plan = plan_schedule(spec, B200)
    assert (plan.swap_ab, plan.bm, plan.bn) == (True, 128, tokens)
    c = build(spec, B200, plan).compile()
    assert re.search(r"tcgen05\.mma\.cta_group::1\." + kind, c.ptx)
    assert c.block_scaled_mmas() == c.count(mma) == mmas, c.summary()
    assert c.count("UTCCP") == copies, c.summary()
    assert c.count("LDTM") > 0 and c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block


@pytest.mark.parametrize("spec,swapped", [
    pytest.param(_mx(1000, 528, 1056, b=DType.E2M1), False, id="mxfp8xmxfp4_128x128_odd"),
    pytest.param(_mx(296, 528, 1024, a=E5, b=DType.E2M1), False, id="mxfp8e5m2xmxfp4_128x128"),
    pytest.param(_mx(16, 4096, 4096, b=DType.E2M1), True, id="mxfp8xmxfp4_swap_16"),
])
def test_mx_fp8_x_fp4_compiles_to_kind_mxf8f6f4(spec: GemmSpec, swapped: bool) -> None:
    """MX fp8 x fp4: one block-scaled kind::mxf8f6f4 UTCQMMA per 32 of K (four a 128-deep k-block), UTCCP for both
    operands' e8m0 scales, and the fp4 operand's slots padded to a value a byte (its descriptor fp4_padded, so the
    kernel's shared memory holds every stage's operands at a byte a value: Triton compiles an unpadded fp4 slot too,
    which kind::mxf8f6f4 would misread)."""
    from warploom.planner import plan_schedule
    from warploom.runtime.cross import signature

    plan = plan_schedule(spec, B200)
    assert plan.swap_ab is swapped and plan.bk == 128
    kern = build(spec, B200, plan)
    fp4 = "a_desc" if swapped else "b_desc"
    assert "fp4_padded=True" in signature(kern.module, kern.gluon)[fp4]
    c = kern.compile()
    assert re.search(r"tcgen05\.mma\.cta_group::1\.kind::mxf8f6f4\.block_scale\b", c.ptx)
    assert c.block_scaled_mmas() == c.count("UTCQMMA") == 4 and c.count("UTCOMMA") == 0, c.summary()
    assert c.count("UTCCP") == 2, c.summary()
    assert c.count("LDTM") > 0 and c.spills == 0, c.ptxas_log
    assert plan.stages * (plan.bm + plan.bn) * plan.bk <= c.smem_bytes <= B200.smem_per_block


def _blockwise(m: int, n: int, k: int, recipe: ScaleRecipe = ScaleRecipe.BLOCKWISE_1X128_128X128,
               bias: DType | None = None) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, BF16, K_MAJOR, recipe, Accumulation.PROMOTED, bias)


@pytest.mark.parametrize("spec", [
    pytest.param(_blockwise(4096, 7168, 7168), id="deepseek_1x128_128x128"),
    pytest.param(_blockwise(300, 272, 1000, bias=BF16), id="1x128_128x128_odd_bias"),
    pytest.param(_blockwise(256, 384, 1152, ScaleRecipe.BLOCKWISE_1X128_1X128), id="1x128_1x128"),
])
def test_fp32_blockwise_compiles_to_tcgen05_partials(spec: GemmSpec) -> None:
    """fp32 blockwise on sm_100a (passes/blackwell_promote.py): each k-block's MMA (four plain, not block-scaled, fp8
    UTCQMMA of K 32 at BK 128) writes a tensor-memory partial, which the 8-warp promoting partition reads (LDTM: two
    64-column blocks), scales and adds in registers. No wgmma, no block-scaled MMA, no tcgen05.cp, no spills."""
    kern = build(spec, B200)
    assert kern.plan.promote_tmem
    c = kern.compile()
    assert c.count("UTCQMMA") == 4 and c.block_scaled_mmas() == 0, c.summary()
    assert c.count("UTCCP") == 0 and c.count("HGMMA") == c.count("QGMMA") == 0, c.summary()
    assert c.count("LDTM") == 2, c.summary()
    assert c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block
    assert re.search(r"tcgen05\.mma\.cta_group::1\.kind::f8f6f4", c.ptx), "expected plain fp8 tcgen05 MMAs"


def _mx_rows(m: int, n: int, k: int, a: DType = E4, b: DType = E4) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, BF16, K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED)


def _nvfp4_rows(m: int, n: int, k: int) -> GemmSpec:
    return replace(_mx_rows(m, n, k, a=DType.E2M1, b=DType.E2M1), scale=ScaleRecipe.NVFP4)


def _blocked(spec: GemmSpec) -> GemmSpec:
    return replace(spec, scale_layout=ScaleLayout.BLOCKED)


@pytest.mark.parametrize("spec,forced,tile,mma,mmas,kind", [
    pytest.param(_mx_rows(1000, 520, 1056), {}, (False, 128), "UTCQMMA", 4, r"kind::mxf8f6f4\.block_scale",
                 id="mxfp8_rows_128x128"),
    pytest.param(_mx_rows(296, 528, 1024, a=E5), {}, (False, 128), "UTCQMMA", 4, r"kind::mxf8f6f4\.block_scale",
                 id="mxfp8_rows_e5m2xe4m3"),
    # a 64-wide tile over a wider N: each tile's own rows of scale_b (seed 001's chunk holds only the first 64)
    pytest.param(_mx_rows(1000, 520, 1056), dict(bn=64), (False, 64), "UTCQMMA", 4, r"kind::mxf8f6f4\.block_scale",
                 id="mxfp8_rows_128x64"),
    pytest.param(_mx_rows(40, 200, 1056), dict(bn=32), (False, 32), "UTCQMMA", 4, r"kind::mxf8f6f4\.block_scale",
                 id="mxfp8_rows_128x32"),
    pytest.param(_mx_rows(1000, 520, 1056, a=DType.E2M1, b=DType.E2M1), {}, (False, 128), "UTCOMMA", 2, _MXF4,
                 id="mxfp4_rows_128x128"),
    # NVFP4: (128, 8) e4m3 buffers at BK 128, the second of its two 64-deep MMAs reading columns 4..7; BK 64 (K not
    # a multiple of 128): (128, 4) and one MMA; a 64-wide tile over a wider N
    pytest.param(_nvfp4_rows(1000, 520, 1152), {}, (False, 128), "UTCOMMA", 2, _NVF4,
                 id="nvfp4_rows_128x128_bk128"),
    pytest.param(_nvfp4_rows(1000, 520, 1056), {}, (False, 128), "UTCOMMA", 1, _NVF4,
                 id="nvfp4_rows_128x128_bk64"),
    pytest.param(_nvfp4_rows(300, 200, 1024), dict(bn=64), (False, 64), "UTCOMMA", 2, _NVF4,
                 id="nvfp4_rows_128x64"),
    # MX fp8 x fp4: kind::mxf8f6f4, four 32-deep MMAs a k-block, the fp4 operand a value a byte
    pytest.param(_mx_rows(1000, 528, 1056, b=DType.E2M1), {}, (False, 128), "UTCQMMA", 4,
                 r"kind::mxf8f6f4\.block_scale\b", id="mxfp8xmxfp4_rows_128x128"),
    # blocked scales through the partition: a 64-wide tile over a wider N (tcgen05.cp cannot serve it), or forced
    pytest.param(_blocked(_mx_rows(1000, 520, 1056)), dict(bn=64), (False, 64), "UTCQMMA", 4,
                 r"kind::mxf8f6f4\.block_scale", id="mxfp8_blocked_128x64"),
    pytest.param(_blocked(_nvfp4_rows(300, 200, 1152)), dict(bn=64), (False, 64), "UTCOMMA", 2, _NVF4,
                 id="nvfp4_blocked_128x64_bk128"),
    pytest.param(_blocked(_mx_rows(1000, 520, 1056, a=DType.E2M1, b=DType.E2M1)), dict(scale_partition=True),
                 (False, 128), "UTCOMMA", 2, _MXF4, id="mxfp4_blocked_forced_128x128"),
    # swap-AB decode with row-major scales: 128 rows of the weight by 16 or 32 tokens
    pytest.param(_mx_rows(8, 4096, 4096), {}, (True, 16), "UTCQMMA", 4, r"kind::mxf8f6f4\.block_scale",
                 id="mxfp8_rows_swap_8"),
    pytest.param(_mx_rows(24, 4096, 4096, a=DType.E2M1, b=DType.E2M1), {}, (True, 32), "UTCOMMA", 2, _MXF4,
                 id="mxfp4_rows_swap_24"),
    pytest.param(_nvfp4_rows(16, 4096, 4096), {}, (True, 16), "UTCOMMA", 2, _NVF4, id="nvfp4_rows_swap_16"),
    pytest.param(_mx_rows(12, 4096, 4096, b=DType.E2M1), {}, (True, 16), "UTCQMMA", 4,
                 r"kind::mxf8f6f4\.block_scale\b", id="mxfp8xmxfp4_rows_swap_12"),
    # 256 wide: one accumulator, B's scale buffers of 256 rows
    pytest.param(_mx_rows(1000, 520, 1056), dict(bn=256), (False, 256), "UTCQMMA", 4,
                 r"kind::mxf8f6f4\.block_scale", id="mxfp8_rows_128x256"),
    pytest.param(_nvfp4_rows(1000, 520, 1152), dict(bn=256), (False, 256), "UTCOMMA", 2, _NVF4,
                 id="nvfp4_rows_128x256_bk128"),
    pytest.param(_nvfp4_rows(1000, 520, 1056), dict(bn=256), (False, 256), "UTCOMMA", 1, _NVF4,
                 id="nvfp4_rows_128x256_bk64"),
    pytest.param(_blocked(_mx_rows(1000, 520, 1056)), dict(bn=256, scale_partition=True), (False, 256), "UTCQMMA",
                 4, r"kind::mxf8f6f4\.block_scale", id="mxfp8_blocked_forced_128x256"),
])
def test_scale_partition_compiles_to_block_scaled_tcgen05_without_copies(spec: GemmSpec, forced: dict[str, Any],
                                                                          tile: tuple[bool, int], mma: str, mmas: int,
                                                                          kind: str) -> None:
    """Seed 000 on sm_100a: the scale partition's tcgen05.st (STTM) fills the tensor-memory scale buffers, so the
    MMAs are block-scaled (UTCQMMA / UTCOMMA of the recipe's kind) with no tcgen05.cp (UTCCP) at all; nothing spills,
    the 4-warp scale partition included. Row-major scales at 128, 64 and 32 wide; blocked ones loaded at their
    blocked addresses (a narrow tile over a wider N, or forced); swap-AB decode with row-major scales; 256-wide tiles
    (one accumulator, 256-row B scale buffers)."""
    from warploom.planner import plan_schedule

    plan = plan_schedule(spec, B200, **forced)
    assert plan.scale_partition and plan.block_scaled and (plan.swap_ab, plan.bn) == tile
    assert plan.acc_buffers == (1 if plan.bn == 256 else 2)
    c = build(spec, B200, plan).compile()
    assert re.search(r"tcgen05\.mma\.cta_group::1\." + kind, c.ptx)
    assert c.block_scaled_mmas() == c.count(mma) == mmas, c.summary()
    assert c.count("UTCCP") == 0 and c.count("STTM") > 0, c.summary()
    assert c.count("LDTM") > 0 and c.spills == 0, c.ptxas_log
    assert c.smem_bytes <= B200.smem_per_block
