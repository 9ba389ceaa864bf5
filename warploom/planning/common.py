"""What more than one target's planner rule reads: k-blocks, a stage's shared memory, the dense operands of a fused
epilogue, rule 18's swap-AB decode test, and what rules 19 and 20 do not plan yet."""

from __future__ import annotations

import math

from warploom.dtypes import DType
from warploom.spec import Accumulation, ALayout, GemmSpec, ScaleLayout, ScaleRecipe

# Rule 2: a ring holds at most this many stages (decode's more: DECODE_STAGES).
MAX_STAGES = 6
# Rule 16: decode's 64x64 tiles take up to this many stages (measured; 13 would also fit beside bf16's staging).
DECODE_STAGES = 12
# Rule 18: problems with at most this many rows run swapped, on tiles as wide (the tokens' side of C^T) as the first
# of SWAP_TOKENS that holds M.
SWAP_MAX_M = 32
SWAP_TOKENS = (16, 32)


def k_block(spec: GemmSpec) -> int:
    """BK on sm_90a and gfx1250: 128 bytes of K (128 fp8 elements, 64 16-bit ones), one 128-byte swizzle row."""
    return 128 if spec.is_fp8 else 64


def k_blocks(spec: GemmSpec) -> int:
    """How many k-blocks of `k_block(spec)` K takes (the last one partial)."""
    return math.ceil(spec.k / k_block(spec))


def native_problems(spec: GemmSpec) -> list[str]:
    """What rules 19 and 20 (sm_100a, gfx1250) do not plan yet: promoted accumulation, scales other than tensorwise
    and rowwise."""
    problems = []
    if spec.accumulation is Accumulation.PROMOTED and spec.scale in (ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE):
        problems.append("promoted fp8 accumulation (pass use_fast_accum=True)")
    elif spec.accumulation is Accumulation.PROMOTED and spec.scale is ScaleRecipe.NONE:
        problems.append("promoted accumulation")  # (fast accumulation is an fp8 option: nothing to pass)
    if spec.scale not in (ScaleRecipe.NONE, ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE):
        problems.append(f"{spec.scale.value} scales (tensorwise and rowwise are planned)")
    if spec.a_layout is not ALayout.K_MAJOR:
        problems.append("a column-major A (pass a.contiguous())")
    return problems



def scale_slot_bytes(spec: GemmSpec, bm: int, bn: int, bk: int) -> int:
    """One k-block's fp32 scales of a blockwise recipe: BM of A and BN/128 (or BN) of B per 128 of K; MX 4 of each
    (one per 32 of K) per row and column."""
    if not spec.scale.is_blockwise:
        return 0
    subs = bk // spec.scale.scale_k
    if spec.scale_layout is ScaleLayout.BLOCKED:  # sm_100a MX: the raw e8m0 bytes, as TMA copies them
        return subs * (scale_rows(bm) + scale_rows(bn))
    return 4 * subs * (bm + spec.scale.b_scales(bn))


NVFP4_DEEP_BK = 128


def nvfp4_bk(spec: GemmSpec) -> int:
    """Rule 19's NVFP4 k-block: 128 (two 128x4 chunks of e4m3 scales a row block) when K is a multiple of 128,
    else 64 (one chunk)."""
    return NVFP4_DEEP_BK if spec.k % NVFP4_DEEP_BK == 0 else 64


def scale_rows(rows: int) -> int:
    """sm_100a MX / NVFP4: the rows of a tile's blocked scales a stage holds: whole 128-row blocks of torch's blocked
    layout (to_blocked pads the rows to 128), what one tcgen05.cp 32x128b.warpx4 copies. A 16- or 32-wide tile
    (rule 18's tokens) copies one whole block, of which its MMA reads the first 16 or 32 rows."""
    return -(-rows // 128) * 128


def stage_bytes(spec: GemmSpec, bm: int, bn: int, bk: int, scale_partition: bool = False) -> int:
    """Shared memory of one pipeline stage: an A tile and a B tile, and the k-block's scales unless a scale
    partition holds them in a ring of its own."""
    scales = 0 if scale_partition else scale_slot_bytes(spec, bm, bn, bk)
    # (MX fp8 x fp4: the fp4 operand lies one value a byte in shared memory, `ir.Ring.padded`)
    a_bits, b_bits = (8, 8) if spec.mixed_fp4 else (spec.a_dtype.bits, spec.b_dtype.bits)
    return ((bm * bk) * a_bits + (bn * bk) * b_bits) // 8 + scales



def dense_operands(spec: GemmSpec) -> list[DType]:
    return [s.dtype for s in spec.epilogue.operands if s.kind.value == "dense"] if spec.epilogue else []



def is_decode(spec: GemmSpec, pingpong: bool = False) -> bool:
    """Rule 16: a decode-sized GEMM (M <= 64) that streams B with native accumulation (fused epilogue or not)."""
    return spec.m <= 64 and spec.accumulation is Accumulation.NATIVE and not spec.scale.is_blockwise and not pingpong


def swap_tokens(m: int) -> int:
    """Rule 18: the swapped tile's width (C^T's columns: tokens) for M rows: 16, or 32 above 16 (also above 32, when
    forced)."""
    return next((w for w in SWAP_TOKENS if m <= w), SWAP_TOKENS[-1])


def swap_decode(spec: GemmSpec, tmem_scales: bool = False) -> bool:
    """Rule 18: whether the planner runs `spec` swapped (C^T = B^T A^T on 16- or 32-wide tiles): a decode GEMM of at
    most SWAP_MAX_M rows that can swap (`GemmSpec.swap_problems`; a fused epilogue too, unless it reads a dense
    operand). `tmem_scales`: sm_100a's (rule 19), where MX / NVFP4 swap with row-major scales too."""
    return (0 < spec.m <= SWAP_MAX_M and (is_decode(spec) or _block_scaled_decode(spec, tmem_scales))
            and not spec.swap_problems(tmem_scales))


def _block_scaled_decode(spec: GemmSpec, tmem_scales: bool) -> bool:
    """Rule 18 on sm_100a (rule 19): MX or NVFP4 at decode sizes, with scales in torch's blocked layout (seed 001)
    or, `tmem_scales`, row-major (seed 000's scale partition). Their `accumulation` says PROMOTED, but the tcgen05
    block-scaled MMA applies the scales and accumulates in fp32 itself (nothing is promoted), so the problem streams
    B as rule 16's decode does. (Only sm_100a plans blocked scales.)"""
    return spec.m <= 64 and (spec.scale_layout is ScaleLayout.BLOCKED or tmem_scales and spec.scale.microscaled)

