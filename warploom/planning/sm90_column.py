"""Rule 36 (docs/decisions/rule-36-one-column-split.md): where N is at most one 128-wide tile and K is long, one
column of 64-row tiles across all of N, its K split to fill the SMs.

Why: a GEMM of a few thousand rows, N of 65-128 and thousands of K (a mixture-of-experts router: tokens x experts x
hidden) reads A once per column of tiles. Rule 23's 64x64 tiles cover N in two columns and read A twice, on as many
CTAs as M has 64-row blocks (half the SMs at M = 2048); 128-row tiles split in 4-8 ranges leave the 64-row blocks'
CTAs idle. One column of 64 x N tiles (rule 31's blocks where N is not a power of two) split in 2-4 ranges reads A
once on all the SMs. On the H200 (bf16, CUDA graphs, session 38: docs/data/router-h200-2026-11-28-session38.json and
router96-...): 2048x96x4096 0.766 -> 1.047, 2090x96x7792 0.59 -> 0.945, 2048x128x4096 0.987 -> 1.092, 1024x96x7168
1.028 -> 1.075, 4096x128x7168 0.781 -> 0.825, and within 1-5% at the rest; at N = 64 (one column already) a split
gained nothing."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90_models import latency_kind
from warploom.planning.sm90_narrow import narrow_blocks
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
