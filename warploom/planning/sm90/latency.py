"""Rules 23, 25 and 33 on sm_90a: where a problem has few tiles, what limits it is latency, not the tensor cores, and
these models price the schedules that spread it (docs/decisions/rule-23-latency-tiles.md, rule-25-latency-split-k.md,
rule-33-latency-width.md): rule 23's 64x64 tiles (`latency_tiles`, for native accumulation and, as measured, promoted
fp8: `promoted_latency_kind`), rule 25's K split into ranges (`latency_split`, promoted fp8 too, and `decode_split`
at decode sizes),
rule 33's narrower 64-row tiles (`latency_width`). `planning.sm90` takes their plans before its search."""

from __future__ import annotations

import math
from dataclasses import dataclass

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.planning.common import k_blocks
from warploom.planning.sm90.models import SK_FIXUP_KBLOCKS, SK_PIECES, SK_SLOWDOWN, uneven_split_builds
from warploom.planning.sm90.tiles import rows_aligned
from warploom.planning.trace import note
from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, ScaleRecipe

# Rule 23's latency model (docs/decisions/rule-23-latency-tiles.md): where a problem has few tiles, each CTA's time
# is a fixed start (launch, barriers, the ring's first fill, the epilogue) plus its k-blocks one after another, each
# latency-bound rather than bound by the tensor cores. Fitted on the H100 (bf16, CUDA graphs; fp8's k-blocks of 128
# bytes of K priced alike) with scripts/sweep_plans.py; per k-block: 128x128 at 6 stages, 64x64 at 4-8.
LATENCY_START_US = {128: 4.2, 64: 3.35}
LATENCY_KBLOCK_US = {128: 0.33, 64: 0.17}
# ...but never faster than L2 delivers the tiles' operand bytes (each tile reads BM + BN rows of K): with many CTAs
# streaming a long K, 64x64's doubled bytes per FLOP bind. The runs above sustained 5.6-7.6 TB/s from L2 at 72-120
# CTAs (2415x160x14360 bf16 on 114 tiles of 64x64 ran at 0.50x torch, against 0.65x for 128x128 by stream-K).
LATENCY_L2_BYTES_PER_US = 7.5e6
# 64x64's ring: 4 stages, 8 from LATENCY_DEEP_KBLOCKS k-blocks on (long K hides more load latency; short K lost 5%
# to the deeper ring's start at 8 stages).
LATENCY_STAGES = (4, 8)
LATENCY_DEEP_KBLOCKS = 32


def piece_kblocks(k_tiles: int, pieces: int) -> float:
    """Rule 23's k-blocks one after another for a 128x128 tile cut into `pieces` stream-K pieces (1: whole): a
    piece's share, SK_SLOWDOWN slower, plus SK_FIXUP_KBLOCKS for each piece beyond the first."""
    if pieces == 1:
        return float(k_tiles)
    return k_tiles / pieces * (1 + SK_SLOWDOWN) + (pieces - 1) * SK_FIXUP_KBLOCKS


def latency_times(spec: GemmSpec, device: DeviceInfo) -> tuple[float, float, int]:
    """Rule 23's modeled microseconds: 64x64 tiles whole, then 128x128 at its best count of stream-K pieces (1: whole
    tiles, and always for promoted accumulation, which the planner never gives stream-K; pieces as rule 21 cuts them,
    each k-block SK_SLOWDOWN slower, SK_FIXUP_KBLOCKS per extra piece), and that count. Each is its start plus the
    longer of its k-blocks' latency and its tiles' operand bytes from L2."""
    k_tiles = k_blocks(spec)
    tiles = square_tiles(spec, 128)
    best = (piece_kblocks(k_tiles, 1), 1)
    # (stream-K's pieces only where the planner runs them: native accumulation, `search._stream_k_step`; promoted
    # fp8 priced against pieces it never gets kept 128x128 on a third of the SMs at 292x1536x15712 blockwise)
    pieces = SK_PIECES if spec.accumulation is Accumulation.NATIVE else ()
    for p in (q for q in pieces if q <= k_tiles and tiles * q <= device.sm_count):
        best = min(best, (piece_kblocks(k_tiles, p), p))
    return latency_us(spec, 64, k_tiles), latency_us(spec, 128, best[0]), best[1]


def square_tiles(spec: GemmSpec, size: int) -> int:
    """How many size x size tiles C takes."""
    return math.ceil(spec.m / size) * math.ceil(spec.n / size)


def latency_us(spec: GemmSpec, size: int, kblocks: float) -> float:
    """Rule 23's model of a CTA on a size x size tile (64 or 128) running `kblocks` k-blocks one after another: its
    start plus the longer of those k-blocks' latency and every such tile's operand bytes from L2 (each tile reads
    BM + BN rows of K)."""
    row_bytes = spec.k * spec.a_dtype.bytes  # (one row of A or B: K elements)
    return LATENCY_START_US[size] + max(kblocks * LATENCY_KBLOCK_US[size],
                                        square_tiles(spec, size) * 2 * size * row_bytes / LATENCY_L2_BYTES_PER_US)


# Rule 25 (docs/decisions/rule-25-latency-split-k.md): with few tiles (at most half the SMs' worth of 128x128 ones,
# SPLIT_MAX_TILES_OF_SMS, or 64x64 ones whose ranges fit one wave) and a long K, split-K's ranges (one wave of units,
# then the reduce kernel) beat stream-K's few pieces and whole 64x64 tiles.
# Priced in rule 23's microseconds: the units' start and k-blocks (or their bytes from L2) plus the reduce, a fixed
# SPLIT_FIXED_US and SPLIT_RANGE_US a range (the workspace's partials written and summed), fitted to forced splits
# of 4, 8 and 16 at six shapes (H100, bf16, CUDA graphs, session 26). It must beat 64x64 by SPLIT_MARGIN_64, whose
# model reads high at 64 k-blocks (513x368x4096: modeled 14.2 us, ran 10.7; split in 8 ran 11.5), and 128x128 by
# SPLIT_MARGIN_128. Where A's and B's rows are not whole 128-byte lines the 64x64 model reads low instead (513x368x5160:
# 17.1 us modeled, ran 18.5; 513x368x4096, whole lines: 14.2 modeled, ran 10.7), so the split needs only beat it by
# SPLIT_MARGIN_64_UNALIGNED (session 42, H200: at 0.8 and 0.95 whole tiles stayed at six zoo shapes, all of rows not
# whole lines, where the split, modeled 15-20% faster than 64x64 or level with 128x128, ran 3-37% faster: bf16
# 513x368x5160, 2986x112x3728, 73x7472x4784; fp8 731x240x8688, 2090x96x7792, 73x7472x4784; 0.9 would split fp8
# 295x1536x6064 too, 2% slower; 513x368x4096 split in 4 at 0.85 ran 9% slower than its 64x64 tiles).
# At most SPLIT_MAX ranges: the reduce's cost grew faster than the k-loop shrank beyond 8. Counts
# of 128x128 tiles that divide the k-blocks come first (those were measured; the model prices 3-5 ranges below what
# ran best at 513x368x4096 and 1881x224x14336); only where none does are the ranges unequal, priced by the longest
# (`ir.Tiling.uneven_split`); 64x64 tiles take any count (SPLIT_TIE_64).
SPLIT_FIXED_US = 1.0
SPLIT_RANGE_US = 0.3
SPLIT_MARGIN_64 = 0.8
SPLIT_MARGIN_64_UNALIGNED = 0.85
SPLIT_MARGIN_128 = 1.0
# Promoted fp8 (rowwise with use_fast_accum=False, blockwise 1x128 x 128x128: `promoted_latency_kind`) splits as native
# does, its one warpgroup's 64x64 units in unequal ranges too, but beats 128x128 only by SPLIT_MARGIN_128_PROMOTED
# (session 46, H200: at the zoo's 24 promoted shapes rule 25 newly splits, the splits modeled 0.45-0.84 of 128x128 ran
# 1-170% faster; those modeled 0.92-0.93, 73x7472x4784 and 146x3680x4016 exact and 148x3680x4016 blockwise, ran 4-8%
# slower, so they keep their whole tiles).
SPLIT_MARGIN_128_PROMOTED = 0.9
SPLIT_MAX = 8
SPLIT_MIN_KBLOCKS = 32
# Up to half the SMs' worth of tiles (2-3 ranges then fit one wave): at 2416x160x14368 (38 tiles) and 112x5264x3472
# (42) 2-3 ranges ran 0-13% faster than stream-K's pieces in two sessions (H100, Triton 3.9, sessions 27-28); session
# 26's splits there were of 4-16 ranges, more than one wave, and ran behind stream-K.
SPLIT_MAX_TILES_OF_SMS = 0.5
# At most two 64-row blocks (M <= LATENCY_SHARED_ROWS) whose 64x64 tiles fit one wave: rule 23's 64x64 tiles ran
# ahead of the split and of 128x128 stream-K every time (128x4096x7168 bf16 0.93 against 0.77 and 0.71, fp8 1.68-1.74
# against 1.11 and 1.06; 128x2112x7168 bf16 0.79 against 0.77 and 0.70; sessions 27-28): their operand rows are
# shared across concurrent tiles in L2 at rates (9.7-14 TB/s equivalent) rule 23's L2 term does not price, and
# raising it broke other shapes. There rule 23 takes 64x64 whatever the model says, and rule 25 splits only 64x64.
LATENCY_SHARED_ROWS = 128
# 64x64 tiles split too (session 31, H100, bf16, Triton 3.6): where a long K runs on a few 64x64 tiles, ranges of
# them fill the machine as 128x128's do. 122x712x7784 (24 tiles, M <= 128) ran 0.87x torch in 5 ranges against
# 0.52x whole; 459x112x2632 (16 tiles) 1.00x in 6 against 0.66x; 1895x136x3704 (90 tiles: no room) none.
# Their count: the most ranges modeled within SPLIT_TIE_64 of the best. Near the L2 floor, which more ranges do not
# lower, the range cost makes the model prefer few ranges, but more ran faster: 5 over 4 at 122x712x7784 (modeled
# 2.5% slower), 6 over 5 at 459x112x2632 (2.8%) -- as 4 over 3 did at 1881x224x14336 on 128x128 (rule-25 doc).
SPLIT_TIE_64 = 1.05


def split_time(spec: GemmSpec, ranges: int, size: int = 128) -> float:
    """Rule 25's modeled microseconds for size x size tiles (128 or 64) split into `ranges` k-ranges (one wave of
    units): the longest range's start and k-blocks (or the tiles' bytes from L2), then the reduce."""
    return latency_us(spec, size, math.ceil(k_blocks(spec) / ranges)) + SPLIT_FIXED_US + SPLIT_RANGE_US * ranges


@dataclass(frozen=True)
class LatencySplit:
    """Rule 25's choice: `size` x `size` tiles (128 or 64) split into `ranges` k-ranges; ranges 1: no split."""

    size: int = 128
    ranges: int = 1


NO_SPLIT = LatencySplit()


def _split_candidates(spec: GemmSpec, device: DeviceInfo, k_tiles: int) -> list[tuple[float, int, int]]:
    """Rule 25's splits as (modeled us, tile size, ranges): 128x128 (not at shared rows, where 64x64 tiles ran ahead
    of any 128x128 plan) with counts that divide the k-blocks first, and 64x64 with any count; each in one wave of
    at most SPLIT_MAX units per tile."""
    found = []
    tiles = square_tiles(spec, 128)
    if tiles <= device.sm_count * SPLIT_MAX_TILES_OF_SMS and not shared_row_tiles(spec, device):
        fits = [r for r in range(2, SPLIT_MAX + 1) if tiles * r <= device.sm_count]
        # (equal ranges where some count divides the k-blocks: unequal 128x128 ones took too few ranges, below;
        # and only equal ones where 128x128 tiles cannot take unequal ranges: promoted accumulation)
        equal = [r for r in fits if k_tiles % r == 0]
        found += [(split_time(spec, r), 128, r)
                  for r in (equal or (fits if uneven_split_builds(spec, (128, 128)) else []))]
    tiles64 = square_tiles(spec, 64)
    times64 = {r: split_time(spec, r, 64) for r in range(2, SPLIT_MAX + 1) if tiles64 * r <= device.sm_count}
    if times64:
        # (the most ranges near the best, SPLIT_TIE_64; 64x64 competes at its best time: the tie picks a count)
        fastest = min(times64.values())
        found.append((fastest, 64, max(r for r, t in times64.items() if t <= fastest * SPLIT_TIE_64)))
    return found


def latency_split(spec: GemmSpec, device: DeviceInfo) -> LatencySplit:
    """Rule 25: which tiles split-K cuts into how many k-ranges (`NO_SPLIT`: none). Only rule 23's problems (more
    than 64 rows, native accumulation or promoted fp8 as `promoted_latency_kind` says, no bias or fused epilogue,
    K-major operands, sm_90a) with SPLIT_MIN_KBLOCKS k-blocks whose units fit one wave: 128x128 tiles (at most
    SPLIT_MAX_TILES_OF_SMS of the SMs' worth; dividing the k-blocks where some count does, else, native only,
    unequal, the first taking one more: `ir.Tiling.uneven_split`) or 64x64 tiles (any count; at shared rows the only
    split). Chosen where `split_time` beats rule 23's 64x64 and 128x128 times by the margins (64x64's by rows that are
    whole lines or not: `rows_aligned`; 128x128's by SPLIT_MARGIN_128_PROMOTED for promoted accumulation)."""
    if not (latency_kind(spec, device) or promoted_latency_kind(spec, device)) or spec.n == 0:
        return NO_SPLIT  # (an empty output: nothing to split, as `decode_split`)
    k_tiles = k_blocks(spec)
    if k_tiles < SPLIT_MIN_KBLOCKS:
        return NO_SPLIT
    found = _split_candidates(spec, device, k_tiles)
    if not found:
        return NO_SPLIT
    t, size, ranges = min(found)
    t64, t128, pieces = latency_times(spec, device)
    if square_tiles(spec, 64) > device.sm_count:
        t64 = math.inf  # rule 23 plans no 64x64 tiles beyond one wave
    if shared_row_tiles(spec, device):
        t128 = math.inf  # (rule 23 takes 64x64 there whatever its model says of 128x128)
    units = square_tiles(spec, size) * ranges
    margin64 = SPLIT_MARGIN_64 if rows_aligned(spec) else SPLIT_MARGIN_64_UNALIGNED
    margin128 = SPLIT_MARGIN_128 if spec.accumulation is Accumulation.NATIVE else SPLIT_MARGIN_128_PROMOTED
    splits = t < margin64 * t64 and t < margin128 * t128
    note(f"{size}x{size}", f"split-K, {ranges} ranges", t,
          f"{units} units of {k_tiles // ranges}" + (f"-{k_tiles // ranges + 1}" if k_tiles % ranges else "")
          + " k-blocks, then the reduce (rule 25, modeled us"
          + (f"; the most ranges within {SPLIT_TIE_64 - 1:.0%} of the fastest count" if size == 64 else "") + ")",
          chosen=splits)
    note("64x64", "latency tile", t64, "rule 23's model (rule 25 compares)")
    if math.isfinite(t128):  # (at shared rows rule 25 weighs no 128x128 plan)
        note("128x128", "whole tiles" if pieces == 1 else f"stream-K, {pieces} pieces", t128,
              "rule 23's model (rule 25 compares)")
    return LatencySplit(size, ranges) if splits else NO_SPLIT


# Rule 25 at decode sizes (`decode_split`, docs/decisions/rule-25-latency-split-k.md): M <= 64 over a long K on a few
# 64-wide tiles runs each tile's k-blocks one after another on a handful of SMs. Split in ranges, each 64x64 unit
# streams its share of B; the reduce sums partials of M x N, a few kilobytes. A 64-row tile's k-block at rule 16's
# deep ring takes DECODE_KBLOCK_US (8x104x5240 and 2x104x1488 swapped, 0.094-0.112; rule 23's 64x64 at 8 stages,
# 0.108-0.125), and no faster than the units stream B: DECODE_SM_BYTES_PER_US a CTA (those two shapes' 2 CTAs moved
# 60-69 B/ns each), HBM_BYTES_PER_US in all (a device-to-device copy's rate).
DECODE_KBLOCK_US = 0.11
DECODE_SM_BYTES_PER_US = 60e3
HBM_BYTES_PER_US = 3.0e6
DECODE_SPLIT_MAX = 8
DECODE_SPLIT_MIN_KBLOCKS = 24
DECODE_SPLIT_MARGIN = 0.9
# The split's own cost: the reduce kernel's launch and start, and per range its units' partials and the reduce's
# reads of them. Fitted to forced splits of 3-8 ranges at nine decode shapes (H100, bf16, CUDA graphs, session 28;
# docs/data/splitk-decode-*session28*), beyond the units' start and k-blocks: DECODE_SPLIT_FIXED_US plus
# DECODE_SPLIT_RANGE_US a range (rms 1.1 us). 6-8 ranges ran best; 12-16 ran 10-70% slower than 8 (hence
# DECODE_SPLIT_MAX), which the first fit, pricing the partials by their bytes alone, had chosen.
DECODE_SPLIT_FIXED_US = 3.1
DECODE_SPLIT_RANGE_US = 0.135


def decode_time(spec: GemmSpec, tiles: int, ranges: int) -> float:
    """Modeled microseconds of `tiles` 64-row tiles of a decode GEMM, each split in `ranges` k-ranges (1: whole; more:
    plus the reduce): the start, then the longer of a range's k-blocks and the units streaming B."""
    units = tiles * ranges
    stream = spec.n * spec.k * spec.b_dtype.bytes / min(units * DECODE_SM_BYTES_PER_US, HBM_BYTES_PER_US)
    loop = max(math.ceil(k_blocks(spec) / ranges) * DECODE_KBLOCK_US, stream)
    reduce = 0.0 if ranges == 1 else DECODE_SPLIT_FIXED_US + DECODE_SPLIT_RANGE_US * ranges
    return LATENCY_START_US[64] + loop + reduce


def decode_split(spec: GemmSpec, device: DeviceInfo) -> int:
    """Rule 25 at decode sizes: into how many k-ranges (1: none) a decode GEMM's 64x64 tiles split. Decode (M <= 64)
    of rule 23's kind otherwise (native accumulation, no bias or fused epilogue, not blockwise, not grouped, K-major
    operands, sm_90a), on at most a quarter of the SMs' worth of 64-wide tiles and DECODE_SPLIT_MIN_KBLOCKS k-blocks;
    at most DECODE_SPLIT_MAX ranges, the units in one wave (unequal ranges where none divides:
    `ir.Tiling.uneven_split`); chosen where `decode_time` beats the whole tiles' (rules 16 and 18) by
    DECODE_SPLIT_MARGIN."""
    if not (0 < spec.m <= 64 and spec.n > 0 and _latency_kind_beyond_rows(spec, device)):
        return 1
    k_tiles = k_blocks(spec)
    tiles = math.ceil(spec.n / 64)
    if tiles > device.sm_count // 4 or k_tiles < DECODE_SPLIT_MIN_KBLOCKS:
        return 1
    fits = [r for r in range(2, min(DECODE_SPLIT_MAX, k_tiles) + 1) if tiles * r <= device.sm_count]
    if not fits:
        return 1
    t, ranges = min((decode_time(spec, tiles, r), r) for r in fits)
    whole = decode_time(spec, tiles, 1)
    splits = t < DECODE_SPLIT_MARGIN * whole
    note("64x64", f"split-K, {ranges} ranges", t,
         f"{tiles * ranges} units of {math.ceil(k_tiles / ranges)} k-blocks at most, then the reduce (rule 25 at "
         "decode sizes, modeled us)", chosen=splits)
    note("64-row", "whole tiles", whole, f"{tiles} CTAs streaming {k_tiles} k-blocks each (rule 25 compares)")
    return ranges if splits else 1


def _latency_schedule(spec: GemmSpec, device: DeviceInfo) -> bool:
    """What rules 23 and 25's kinds share whatever the accumulation: no bias or fused epilogue, not grouped, K-major
    A and B, sm_90a."""
    return not (spec.epilogue is not None or spec.bias_dtype is not None or spec.grouped
                or spec.a_layout is not ALayout.K_MAJOR or spec.b_layout is not BLayout.K_MAJOR
                or not device.arch.startswith("sm_90"))


def _latency_kind_beyond_rows(spec: GemmSpec, device: DeviceInfo) -> bool:
    """`latency_kind` without its row bound: native accumulation, no blockwise scales, and `_latency_schedule`."""
    return (spec.accumulation is Accumulation.NATIVE and not spec.scale.is_blockwise
            and _latency_schedule(spec, device))


def latency_kind(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Whether `spec` is of the kind rules 23 and 25 were measured on: more than 64 rows (decode has rules 16 and
    18, and `decode_split`), native accumulation (bf16, fp16, fp8 fast), no bias or fused epilogue, no blockwise
    scales, not grouped, K-major A and B, on sm_90a."""
    return spec.m > 64 and _latency_kind_beyond_rows(spec, device)


# Rule 13's bound: blockwise fp8 with at most this many rows scores 64-row tiles in the search, and rule 14 splits K.
SMALL_M_BLOCKWISE_ROWS = 128


def promoted_latency_kind(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Whether `spec` is `latency_kind`'s but for its promoted accumulation: fp8 rowwise with use_fast_accum=False
    above 64 rows, or blockwise 1x128 x 128x128 scales (always promoted) above rule 13's SMALL_M_BLOCKWISE_ROWS.
    Rule 23 takes it (one warpgroup promotes its 64x64 partial each k-block), as measured on the H200 at 58 rowwise
    and 38 blockwise zoo shapes (e4m3 operands, bf16 output; 16-bit outputs taken alike), and so does rule 25 (split
    K; 24 zoo shapes, session 46); rule 33 (narrower tiles) does not: unmeasured. Tensorwise, the other blockwise
    recipes, e5m2 operands and fp32 or fp8 outputs: unmeasured."""
    # (blockwise at M <= SMALL_M_BLOCKWISE_ROWS stays with rules 13 and 14, measured there: 64-row tiles, K split)
    return (spec.m > 64 and spec.accumulation is Accumulation.PROMOTED
            and spec.a_dtype is spec.b_dtype is DType.E4M3 and spec.out_dtype in (DType.BF16, DType.FP16)
            and (spec.scale is ScaleRecipe.ROWWISE
                 or (spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128 and spec.m > SMALL_M_BLOCKWISE_ROWS))
            and _latency_schedule(spec, device))


def latency_stages(spec: GemmSpec) -> int:
    """Rule 23's ring depth for 64x64 tiles (LATENCY_STAGES by K)."""
    k_tiles = k_blocks(spec)
    return LATENCY_STAGES[k_tiles >= LATENCY_DEEP_KBLOCKS]


def shared_row_tiles(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Whether `spec`'s 64x64 tiles lie over at most two row blocks (M <= LATENCY_SHARED_ROWS) and fit one wave: there
    rule 23 takes them whatever its model says, and rule 25 splits only 64x64 tiles."""
    return spec.m <= LATENCY_SHARED_ROWS and square_tiles(spec, 64) <= device.sm_count


def latency_tiles(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Rule 23: whether `spec` runs on 64x64 tiles (`latency_stages` deep): a GEMM of more than 64 rows (decode has
    rules 16 and 18) with native accumulation (bf16, fp16, fp8 fast), or promoted fp8 rowwise or blockwise 1x128 x
    128x128 (`promoted_latency_kind`), and no bias or fused epilogue, whose 64x64 tiles fit in one wave, where the
    latency model prices them below 128x128's best or M <= LATENCY_SHARED_ROWS (two 64-row blocks: measured ahead
    whatever the model said). (More 64x64 tiles than SMs turned L2-bound: 100x5264x3464 bf16, 166 tiles, ran at
    0.36x torch against 0.58x for 42 of 128x128. A bias, fused epilogues and operands that are not K-major: not
    measured at these sizes.) The model's constants were fitted on native accumulation; promoted fp8 took them as
    they are, and every zoo shape where they chose 64x64 over 128x128 ran faster
    (docs/decisions/rule-23-latency-tiles.md)."""
    if not (latency_kind(spec, device) or promoted_latency_kind(spec, device)):
        return False
    tiles64 = square_tiles(spec, 64)
    if tiles64 > device.sm_count:
        return False
    t64, t128, pieces = latency_times(spec, device)
    if t64 >= t128 and not shared_row_tiles(spec, device):
        return False
    k_tiles = k_blocks(spec)
    note("64x64", f"latency tile, {latency_stages(spec)} stages", t64,
          f"{tiles64} CTAs: {LATENCY_START_US[64]} us + {k_tiles} k-blocks x {LATENCY_KBLOCK_US[64]} us, or its "
          "bytes from L2 (rule 23, modeled us)"
          + (f"; taken over the model at M <= {LATENCY_SHARED_ROWS} (LATENCY_SHARED_ROWS: measured ahead)"
             if t64 >= t128 else ""),
          chosen=not width_priced(spec))  # (rule 33's row is the plan's where it prices the width)
    note("128x128", "whole tiles" if pieces == 1 else f"stream-K, {pieces} pieces", t128,
          f"{LATENCY_START_US[128]} us + its k-blocks x {LATENCY_KBLOCK_US[128]} us, or its bytes from L2 (rule 23, "
          "modeled us)")
    return True



# Rule 33 (docs/decisions/rule-33-latency-width.md): rule 23's 64-row tiles 16 or 32 columns wide where 64-wide ones
# leave SMs idle. A 64-row tile's k-block is bound by what its one CTA loads (64 + BN rows of K), so narrower tiles
# over more SMs finish sooner, until their operand bytes from L2 (A read once per column of tiles) bind. Each width is
# priced as rule 23 prices 64x64, a start plus the longer of its k-blocks and its tiles' bytes from L2, with
# constants of its own, fitted on the H200 (bf16, CUDA graphs; 64x16, 64x32 and 64x64 forced at 19 of the zoo's few-tile
# shapes, one wave each, rms 9%: docs/data/latency-width-h200-2026-11-28-session36-*.json). They choose the width
# only: rule 23's own model still decides 64-row tiles against 128x128. 16-bit operands only (fp8's not measured).
# Narrow tiles fill at most WIDTH_MAX_TILES_OF_SMS of the SMs: at 108-132 CTAs they lost to 64x64 at all eight shapes
# measured (401x496x320 -1.6%, 596x416x152 -4.3%, 513x368x5160 -9%, 108x2072x2984 -21%), and won at 105 (2232x80x904).
# They run a ring of WIDTH_STAGES, the depth they were measured at.
LATENCY_WIDTHS = (16, 32, 64)
WIDTH_MAX_TILES_OF_SMS = 0.8
WIDTH_STAGES = 6
WIDTH_START_US = {16: 3.03, 32: 3.03, 64: 3.44}
WIDTH_KBLOCK_US = {16: 0.116, 32: 0.124, 64: 0.129}
WIDTH_L2_BYTES_PER_US = 6.0e6


def width_us(spec: GemmSpec, width: int) -> float:
    """Rule 33's modeled microseconds for 64 x `width` tiles, each CTA running all of K: its start plus the longer of
    its k-blocks and every tile's operand bytes (64 + `width` rows of K) from L2."""
    tiles = math.ceil(spec.m / 64) * math.ceil(spec.n / width)
    row_bytes = spec.k * spec.a_dtype.bytes
    return WIDTH_START_US[width] + max(k_blocks(spec) * WIDTH_KBLOCK_US[width],
                                       tiles * (64 + width) * row_bytes / WIDTH_L2_BYTES_PER_US)


def latency_width(spec: GemmSpec, device: DeviceInfo) -> int:
    """Rule 33: how wide rule 23's 64-row tiles are, 16, 32 or 64 (`LATENCY_WIDTHS`): the fastest by `width_us`
    among 64 (whose tiles rule 23 fits in one wave) and the narrower widths whose tiles fill at most
    WIDTH_MAX_TILES_OF_SMS of the SMs; 64 on a tie, and for operands other than 16-bit ones."""
    if not width_priced(spec):
        return 64
    rows = math.ceil(spec.m / 64)
    times = {w: width_us(spec, w) for w in LATENCY_WIDTHS
             if w == 64 or rows * math.ceil(spec.n / w) <= device.sm_count * WIDTH_MAX_TILES_OF_SMS}
    best = min(times, key=lambda w: (times[w], -w))
    for w, t in times.items():
        note(f"64x{w}", "latency tile width", t, f"{rows * math.ceil(spec.n / w)} CTAs (rule 33, modeled us)",
             chosen=w == best)
    return best


def width_priced(spec: GemmSpec) -> bool:
    """Whether rule 33 prices the width of rule 23's tiles: 16-bit operands (fp8's were not measured)."""
    return spec.a_dtype.bytes == 2 and spec.b_dtype.bytes == 2
