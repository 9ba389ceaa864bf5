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
column computes N and reads A once, and its ranges can put more CTAs to work than the two columns' fewer ranges.

Rule 39 (the same file: columns of 64-row tiles fitted to N, K split where long): where 64 < N <= 256 and the plan's
whole tiles leave SMs idle, 64-row tiles fitted to N in 1-3 columns, split where K is long, as many units as fit the
SMs (`narrow_rows64`), but only where they read at most NARROW64_MAX_L2 of the plan's rows from L2."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90.latency import SPLIT_MAX, latency_kind
from warploom.planning.sm90.narrow import blocks_of, narrow_blocks
from warploom.spec import GemmSpec


@dataclass(frozen=True)
class Column:
    """What rules 36, 38 and 39 plan in place of the other rules' choice, as if forced: `bm` x `bn` tiles (on column
    `blocks` of the bn-wide slot where not (); rule 31's) split in `split` k-ranges (1: whole)."""

    bm: int
    bn: int
    split: int
    blocks: tuple[int, ...]

    @property
    def tile_n(self) -> int:
        """A tile's columns of C: sum(blocks), else bn (as `Plan.tile_n`)."""
        return sum(self.blocks) or self.bn

    def columns(self, n: int) -> int:
        """The columns of tiles across N."""
        return -(-n // self.tile_n)

    def kind(self, n: int) -> str:
        """`explain`'s schedule column: "one column, 4 ranges", "3 columns"."""
        columns = self.columns(n)
        return ("one column" if columns == 1 else f"{columns} columns") + (f", {self.split} ranges" * (self.split > 1))

    def describe(self, m: int, n: int) -> str:
        """`explain`'s reason: "30 row blocks x 1 column x 4 ranges"."""
        columns = self.columns(n)
        return (f"{-(-m // self.bm)} row blocks x {columns} column{'s' * (columns > 1)}"
                + f" x {self.split} ranges" * (self.split > 1))


COLUMN_BM, COLUMN_BN = 64, 128
# From this many k-blocks (64 of bf16 each): the gains were measured at 64-122.
COLUMN_MIN_KBLOCKS = 64
# At most this many ranges: 2 and 4 were measured (4 at 16-33 row blocks, 2 at 64).
COLUMN_MAX_SPLIT = 4
# At least this many 64-row blocks: fewer cannot fill the SMs in COLUMN_MAX_SPLIT ranges (and decode has its rules).
COLUMN_MIN_ROW_BLOCKS = 16


def one_column_split(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Column | None:
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
    return Column(COLUMN_BM, COLUMN_BN, split, blocks)


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


def wide_column_split(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Column | None:
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
    return Column(WIDE_BM, WIDE_BN, split, blocks) if wasteful or ctas >= WIDE_MIN_CTAS * before else None


# Rule 39 (docs/decisions/rule-39-narrow-rows64.md; H200, Triton 3.6, session 43): where 64 < N <= 256 and the plan
# (whole tiles, nothing forced) leaves SMs idle, 64-row tiles fitted to N in one to NARROW64_MAX_COLUMNS columns, K
# split where it is long, as many units as fit the SMs. Against the plans before it (bf16, graph ratio against torch):
# 1895x136x3704 0.593 -> 0.809 (one column of 64x144 in 4 ranges), 1806x88x1672 0.759 -> 0.848 (three of 64x32),
# 1804x144x3344 0.792 -> 1.053; the plans it keeps were the fastest measured where they already had the most units
# (6262x120x2120, 7268x104x392, 5113x120x200, 2232x80x904, 753x216x800). Splits lost below NARROW64_SPLIT_MIN_KBLOCKS
# k-blocks (1806x88x1672 two columns in two ranges 0.752; 3794x152x1440 in two ranges of 11-12 k-blocks 0.560). Tiles
# reading 17-54% more rows from L2 than the plan's lost 3-17% at six random shapes (3834x200x1136 0.838 -> 0.721,
# 7491x240x4904 0.831 -> 0.695), hence NARROW64_MAX_L2 (it also keeps 3794x152x1440's +18%, a known miss). Four
# columns never add units under that bound (64 wide, they are rule 23's 64x64 tiles), and with N > 64 three columns
# are at least 32 wide. fp8 with fast accumulation takes whole columns only: they won at all seven shapes timed
# (3794x160x1440 0.965 -> 1.253, 1597x80x4192 1.535 -> 1.700), while 64-row splits of its 128-deep k-blocks lost at
# three of seven (1480x176x4736 1.745 -> 1.432), and none was timed from NARROW64_SPLIT_MIN_KBLOCKS (K = 6144) on.
NARROW64_BM = 64
NARROW64_MAX_COLUMNS = 3
NARROW64_SPLIT_MIN_KBLOCKS = 48
NARROW64_MIN_UNIT_KBLOCKS = 12
NARROW64_MAX_L2 = 1.15


def narrow_rows64(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Column | None:
    """Rule 39: the columns of 64-row tiles fitted to 64 < N <= 256 and the split that replace `plan`, or None.

    Where: rule 23's kind (16-bit operands, or fp8 with native accumulation: rowwise timed, tensorwise taken alike),
    and `plan` whole tiles on one CTA each (no split, stream-K, tail, cluster or swap). The candidates: 1 to
    NARROW64_MAX_COLUMNS columns, each round_up(N / columns, 16) wide as rule 31's blocks of the next power-of-two
    slot (or the whole slot where that fills more than three quarters of it: N = 224 is 64x256); for 16-bit operands
    K split in ranges of NARROW64_MIN_UNIT_KBLOCKS or more where it has NARROW64_SPLIT_MIN_KBLOCKS. A candidate whose
    tiles read more than NARROW64_MAX_L2 times the rows of A and B that `plan`'s read (`read_rows`) is out. The most
    units that fit the SMs win, fewer columns on a tie (A read fewer times), where that is more than `plan`'s CTAs."""
    if not (latency_kind(spec, device) and NARROW64_BM < spec.n <= WIDE_BN
            and (plan.split_k, plan.stream_k, plan.tail_split, plan.cluster, plan.swap_ab) == (1, 0, 1, 1, False)):
        return None
    rows, k_tiles = math.ceil(spec.m / NARROW64_BM), k_blocks(spec)
    long_k = spec.a_dtype.bits == 16 and k_tiles >= NARROW64_SPLIT_MIN_KBLOCKS
    splits = range(1, SPLIT_MAX + 1) if long_k else range(1, 2)
    most_rows = NARROW64_MAX_L2 * read_rows(spec, plan)
    best: tuple[tuple[int, int], Column] | None = None
    for columns in range(1, NARROW64_MAX_COLUMNS + 1):
        width = -(-spec.n // (16 * columns)) * 16
        bn = 1 << (width - 1).bit_length()
        whole = Column(NARROW64_BM, bn, 1, narrow_blocks(width, bn))
        cols = whole.columns(spec.n)
        if read_rows(spec, whole) > most_rows:
            continue
        for split in splits:
            units = rows * cols * split
            if units > device.sm_count or (split > 1 and k_tiles / split < NARROW64_MIN_UNIT_KBLOCKS):
                break
            key = (units, -cols)
            if best is None or key > best[0]:
                best = key, replace(whole, split=split)
    if best is None or best[0][0] <= plan.grid:
        return None
    return best[1]


def read_rows(spec: GemmSpec, tiles: Plan | Column) -> int:
    """The rows of A and B (K long each) that whole tiles of `tiles` (a plan's, or a candidate column's) read from
    L2 in all: each tile reads bm of A and tile_n of B."""
    return math.ceil(spec.m / tiles.bm) * math.ceil(spec.n / tiles.tile_n) * (tiles.bm + tiles.tile_n)
