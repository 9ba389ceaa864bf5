"""Rule 36 (docs/decisions/rule-36-one-column-split.md): where N is at most one 128-wide tile and K is long, one
column of 64-row tiles across all of N, its K split to fill the SMs.

Why: a GEMM of a few thousand rows, N of 65-128 and thousands of K (a mixture-of-experts router: tokens x experts x
hidden) reads A once per column of tiles. Rule 23's 64x64 tiles cover N in two columns and read A twice, on as many
CTAs as M has 64-row blocks (half the SMs at M = 2048); 128-row tiles split in 4-8 ranges leave the 64-row blocks'
CTAs idle. One column of 64 x N tiles (rule 31's blocks where N is not a power of two) split in 2-4 ranges reads A
once on all the SMs. On the H200 (bf16, CUDA graphs, session 38: docs/data/router-h200-2026-11-28-session38.json and
router96-...): 2048x96x4096 0.766 -> 1.047, 2090x96x7792 0.59 -> 0.945, 2048x128x4096 0.987 -> 1.092, 1024x96x7168
1.028 -> 1.075, 4096x128x7168 0.781 -> 0.825, and within 1-5% at the rest; at N = 64 (one column already) a split
gained nothing.

Rule 38 (the same file: one column across N, its K split): where rule 25 splits 128x128 tiles over 128 < N < 256, one
column of 128-row tiles fitted to N (rule 32's blocks: 160 = 128 + 32) split in as many ranges as fill the SMs
(`wide_column_split`). Two 128-wide columns compute 256 columns of which N are kept, and read A twice; one fitted
column computes N and reads A once, and its ranges can put more CTAs to work than the two columns' fewer ranges."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90_models import SPLIT_MAX, latency_kind
from warploom.planning.sm90_narrow import blocks_of, narrow_blocks
from warploom.spec import GemmSpec

COLUMN_BM, COLUMN_BN = 64, 128
# From this many k-blocks (64 of bf16 each): the gains were measured at 64-122.
COLUMN_MIN_KBLOCKS = 64
# At most this many ranges: 2 and 4 were measured (4 at 16-33 row blocks, 2 at 64).
COLUMN_MAX_SPLIT = 4
# At least this many 64-row blocks: fewer cannot fill the SMs in COLUMN_MAX_SPLIT ranges (and decode has its rules).
COLUMN_MIN_ROW_BLOCKS = 16


def one_column_split(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> tuple[int, tuple[int, ...]] | None:
    """Rule 36: the split and column blocks (rule 31's; () where N fills most of 128) of one column of 64x128 tiles
    that replaces `plan` (the other rules' choice, nothing forced), or None: 16-bit operands of rule 23's kind
    (`latency_kind`), 64 < N <= 128, at least COLUMN_MIN_KBLOCKS k-blocks, and COLUMN_MIN_ROW_BLOCKS to half the SMs'
    count of 64-row blocks, split in as many ranges as fill the SMs, at most COLUMN_MAX_SPLIT. A plan that already is
    this column stands."""
    rows = math.ceil(spec.m / COLUMN_BM)
    if not (spec.a_dtype.bits == 16 and latency_kind(spec, device) and COLUMN_BM < spec.n <= COLUMN_BN
            and k_blocks(spec) >= COLUMN_MIN_KBLOCKS and COLUMN_MIN_ROW_BLOCKS <= rows <= device.sm_count // 2):
        return None
    split = min(COLUMN_MAX_SPLIT, device.sm_count // rows)
    blocks = narrow_blocks(spec.n, COLUMN_BN)  # (() where N fills most of the tile: the whole 128 columns)
    if (plan.bm, plan.bn, plan.split_k, plan.n_blocks) == (COLUMN_BM, COLUMN_BN, split, blocks):
        return None
    return split, blocks


# Rule 38 (docs/decisions/rule-38-wide-column-split.md; H200, Triton 3.6, session 42): one column of 128-row tiles
# fitted to 128 < N < 256 in place of rule 25's 128x128 split, against it at six shapes of the zoo's kind: bf16
# 2415x160x14360 0.579 -> 0.869 (6 ranges), fp8 rowwise fast 2415x160x14368 1.344 -> 1.880 (6), fp8 1881x224x15088
# 1.198 -> 1.641 (6; 1.608 in 8); lost or tied where the plan's second column wastes little and the column adds no
# CTAs: bf16 1881x224x15088 0.908 -> 0.860 (8 ranges, the plan's 120 CTAs), bf16 731x240x8688 0.990 -> 0.838 (16),
# fp8 731x240x8688 1.672 -> 1.659 (16 ranges of 4 k-blocks). So the column replaces the split where the two columns
# waste WIDE_MIN_WASTE of their 256 columns on no fewer CTAs, or where its ranges (at least WIDE_MIN_UNIT_KBLOCKS
# k-blocks each, at most SPLIT_MAX) put WIDE_MIN_CTAS times the plan's CTAs to work.
WIDE_BM, WIDE_BN = 128, 256
WIDE_MIN_WASTE = 0.25
WIDE_MIN_CTAS = 1.5
WIDE_MIN_UNIT_KBLOCKS = 16
WIDE_MAX_BLOCKS = 3


def wide_column_blocks(n: int) -> tuple[int, ...]:
    """Rule 38's column blocks for N columns: round_up(N, 16) as powers of two from 16, widest first (224: 128 + 64 +
    32), or () where that takes more than WIDE_MAX_BLOCKS or all 256 (neither was timed: no column then)."""
    width = -(-n // 16) * 16
    blocks = blocks_of(width)
    return blocks if len(blocks) <= WIDE_MAX_BLOCKS and width < WIDE_BN else ()


def wide_column_split(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> tuple[int, tuple[int, ...]] | None:
    """Rule 38: the split and column blocks of one column of 128 x N tiles (`wide_column_blocks`, at most three) that
    replaces `plan`, rule 25's split of 128x128 tiles over 128 < N < 256 (rule 23's kind, nothing forced), or None. The
    most ranges that fit the SMs, at most SPLIT_MAX, each of at least WIDE_MIN_UNIT_KBLOCKS k-blocks; taken where the
    plan's two columns waste WIDE_MIN_WASTE of their columns and the column runs at least the plan's CTAs, or where
    the column's ranges run WIDE_MIN_CTAS times its CTAs (fewer CTAs than the plan was not timed but at 731x240, where
    it lost)."""
    blocks = wide_column_blocks(spec.n)
    if not (latency_kind(spec, device) and WIDE_BM < spec.n <= WIDE_BN and blocks and plan.split_k > 1
            and (plan.bm, plan.bn, plan.n_blocks, plan.cluster) == (128, 128, (), 1)):
        return None
    rows, k_tiles = math.ceil(spec.m / WIDE_BM), k_blocks(spec)
    fits = [r for r in range(2, SPLIT_MAX + 1) if rows * r <= device.sm_count and k_tiles / r >= WIDE_MIN_UNIT_KBLOCKS]
    if not fits:
        return None
    split = max(fits)
    ctas, before = rows * split, plan.units(spec.m, spec.n)
    wasteful = 1 - spec.n / (2 * plan.bn) >= WIDE_MIN_WASTE and ctas >= before
    return (split, blocks) if wasteful or ctas >= WIDE_MIN_CTAS * before else None
