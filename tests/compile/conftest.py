"""What the compile tier allows per installed Triton (CI runs it under the oldest and the newest: scripts/test.sh).

Known finding (Triton 3.9.0, 2026-11-26): 3.9 assembles sm_90a with its Blackwell ptxas (CUDA 13.4) and
``--regAllocOptLevel=2`` (Triton's workaround of a ptxas 13 bug), and that spills a little on the fp8 kernels below
at their 168-register cap; under 3.6 through 3.8 (ptxas 12.8 / 12.9) they spill nothing. Without the flag 3.9's
ptxas spills nothing either, but Triton builds the kernel with it (runtime/cross.py re-runs ptxas the same way).

Under 3.6 (ptxas 12.8) two cases spill too (SPILLS_36): a fused rowwise quantization's 128x256 walk with silu and a
column operand, and the grouped fp8 rowwise fast plan whose last round is stream-K, at the same 168-register cap.
"""

from __future__ import annotations

import pytest

from warploom.backends import gluon_api

# test id -> spill bytes measured under Triton 3.9.0 (the bound the test holds them to there)
SPILLS_39 = {
    "e4m3_blockwise_128x128_planned": 56,
    "e4m3_blockwise_1x128_planned": 112,
    "e4m3_blockwise_128x128_deepseek_128x256_p2_h2": 56,
    "e4m3_blockwise_m128_128x128_split4": 16,
    "e4m3_blockwise_q_a_planned_tail4": 64,
    "e4m3_blockwise_m128_planned_split4": 16,
    # rule 25's promoted split (session 46): the same 16 bytes as rule 14's 128x128 split above (rowwise's spills none)
    "e4m3_blockwise_split_128x128_k3_planned": 16,
    "e4m3_blockwise_scale_partition_128x256": 64,
    "headline-nohoist_nocolscalar": 32,
    # 128x128 blocks of A (2026-11-27): the same promoted 128x256 mainloop as the blockwise kernels above
    "e4m3_blockwise_a128x128_1x128_planned": 120,
    "e4m3_blockwise_a128x128_128x128_planned": 8,
    # the grouped blockwise kernel (rule 22, 2026-11-27): the same promoted 128x256 mainloop, scale_b per expert
    "e4m3_blockwise_offsets_128x256": 52,
    # its K-grouped twin (the weight gradient, 2026-11-27): the same mainloop beside the group's K range and A's
    # zeroing; 3.9's ptxas without --regAllocOptLevel=2 spills nothing on it either (nor does 3.6's)
    "e4m3_blockwise_k_grouped_128x256": 72,
    # a blockwise GEMM's fused 1x128 quantization walked in 64-column blocks (2026-11-27; its planned 128-column block
    # spills nothing under 3.9 either)
    "fp8_blockwise_silu_64col_blocks": 8,
    # a fused rowwise quantization's 128x256 walk (rule 27, 2026-11-27): the whole accumulator at the 168-register
    # cap beside each block's fold and division (every other case of test_compile_quantize.py spills nothing)
    "rowwise_bf16_silu_col_e5m2_n208": 8,
    "rowwise_fp8_tensorwise_silu_n256": 8,
    # blockwise fp8 in 2-CTA clusters (rule 24, 2026-11-27): the same promoted 128x256 mainloop, each warpgroup's 128
    # columns in two 64-column blocks; the same PTX through 3.9's ptxas without --regAllocOptLevel=2 spills nothing
    "e4m3_blockwise_128x128": 116,
    "e4m3_blockwise_1x128": 16,
}

# test id -> spill bytes measured under Triton 3.6 (ptxas 12.8), where a case spills at all
SPILLS_36 = {
    # rule 27's 128x256 walk with silu and a column operand (2026-11-27): 16 bytes stored and loaded at the
    # 168-register cap; without either (gelu alone, a column operand alone, tensorwise fp8) it spills nothing
    "rowwise_bf16_silu_col_e5m2_n208": 32,
    # rule 22's fp8 rowwise fast 128x256 plan at 8192x4096x7168 over 8 experts with its last round as stream-K pieces
    # (session 42): the stream-K bookkeeping beside the accumulator at the cap, 48 bytes (measured 2.7% faster than
    # whole tiles with them); the promoted plan and the whole-tile one spill nothing
    "e4m3_rowwise_fast_offsets": 48,
}


@pytest.fixture
def spill_budget(request: pytest.FixtureRequest) -> int:
    """The spill bytes this parametrized case may have under the installed Triton: 0, except the known findings."""
    return (SPILLS_36 if gluon_api.installed() < (3, 9) else SPILLS_39).get(request.node.callspec.id, 0)
