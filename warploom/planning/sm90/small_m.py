"""Rules 13 and 14 on sm_90a: blockwise fp8 with at most SMALL_M_BLOCKWISE_ROWS rows (docs/decisions/
rule-13-small-m-blockwise.md, rule-14-split-k.md). Each k-block of a one-warpgroup tile runs wgmma, waits for it,
and promotes the partial with its scales: a latency-bound chain, so the choice is how many CTAs run it and how much
each k-block of them computes. `small_blockwise` says whether a problem is of this kind, `refused_tile` which of the
search's tiles rule 13 leaves out, `rule14_split` how many K ranges a tile's work is cut into."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.sm90.latency import SMALL_M_BLOCKWISE_ROWS
from warploom.planning.sm90.models import uneven_split_builds
from warploom.spec import GemmSpec, ScaleRecipe

# Rule 13's recipes: measured on the H100 and H200 (MX's 32-deep promotions were not, and keep 128-row tiles).
SMALL_M_RECIPES = (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128)
# Rule 14: K long enough to split (the splits lost at 16 k-blocks, session 12), into at most this many ranges.
RULE14_MIN_KBLOCKS = 32
RULE14_MAX_RANGES = 8
# Rule 14 on 64x64 tiles: where the 128-wide tiles' split (ranges dividing K's k-blocks) stays under this many
# ranges, 64x64 tiles split in up to RULE14_MAX_RANGES unequal ones take the problem (session 48, H200: 128-wide in
# 2 ranges or whole 0.73-0.81x torch, 64x64 in 8 unequal ones 1.55-1.67x; 3 to 8 ranges on 128-wide tiles ran
# 1.31-2.07x in the zoo and are kept).
RULE14_MIN_WIDE_RANGES = 3
# Rule 13 at M <= 64: 64x128 tiles in place of 64x64 where they fill at least this share of the SMs in one wave and
# K has RULE14_MIN_KBLOCKS k-blocks (session 48, H200: +1% to +31% at 7 of 8 shapes with 43-63 such tiles, -1% at
# the eighth; at 16 k-blocks 64x64 ran 20% ahead, session 20).
WIDE_ROWS64_MIN_FILL = 0.3


def small_blockwise(spec: GemmSpec, pingpong: bool, scale_partition: bool | None) -> bool:
    """Whether rules 13 and 14 plan `spec`: blockwise scales of `SMALL_M_RECIPES`, at most SMALL_M_BLOCKWISE_ROWS
    rows, the plain cooperative kernel with its scales in the A/B stages (not ping-pong, no scale partition)."""
    return (spec.scale in SMALL_M_RECIPES and spec.m <= SMALL_M_BLOCKWISE_ROWS and not pingpong
            and not scale_partition)


def wide_rows64(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Rule 13 at M <= 64: whether 64x128 tiles replace 64x64 ones. A 64x128 k-block costs a one-warpgroup CTA
    little more than a 64x64 one (the chain above), so where 64x128 tiles alone keep WIDE_ROWS64_MIN_FILL of the SMs
    busy in one wave over a long K, half as many CTAs finish sooner. As measured: 1x128 x 128x128 scales, no bias or
    fused epilogue."""
    tiles = math.ceil(spec.m / 64) * math.ceil(spec.n / 128)
    return (spec.m <= 64 and spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128 and spec.bias_dtype is None
            and spec.epilogue is None and k_blocks(spec) >= RULE14_MIN_KBLOCKS
            and WIDE_ROWS64_MIN_FILL * device.sm_count <= tiles <= device.sm_count)


def refused_tile(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int) -> str | None:
    """Why rule 13 leaves the unforced `bm` x `bn` tile out of a `small_blockwise` problem's search, or None: 64x64
    where `wide_rows64` holds. (128x128 in place of the search's 64x256 above 64 rows, measured +3% to +22% at 3 of
    4 shapes and -4% at the fourth, session 48, is not taken: without 64x256 the search's score picks 64x64 tiles
    there, unmeasured, and the model has no term for two warpgroups promoting in turn.)"""
    if (bm, bn) == (64, 64) and wide_rows64(spec, device):
        tiles = math.ceil(spec.n / 128)
        return (f"rule 13: {tiles} tiles of 64x128 fill {tiles / device.sm_count:.0%} of the SMs in one wave at "
                f"{k_blocks(spec)} k-blocks")
    return None


def rule14_split(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, pingpong: bool,
                 scale_partition: bool | None) -> int:
    """Rule 14: split-K ranges for a `small_blockwise` problem without bias or fused epilogue, 1 for none.

    128-wide tiles filling at most a third of the SMs, K of at least RULE14_MIN_KBLOCKS k-blocks: the most ranges
    (dividing the k-blocks, at most RULE14_MAX_RANGES) that keep the work units within one wave. 64x64 tiles, where
    that split of 64x128 tiles stays under RULE14_MIN_WIDE_RANGES (K's k-blocks have no larger divisor that fits),
    M is one 64-row block and RULE14_MAX_RANGES ranges of every tile fit one wave (as measured: 10-16 tiles):
    RULE14_MAX_RANGES ranges that differ by a k-block at most (`ir.Tiling.uneven_split`, which promoted
    accumulation builds on 64x64 tiles only)."""
    k_tiles = k_blocks(spec)
    if (not small_blockwise(spec, pingpong, scale_partition) or spec.bias_dtype is not None
            or spec.epilogue is not None or k_tiles < RULE14_MIN_KBLOCKS):
        return 1
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    if (bm, bn) == (64, 64):
        if (spec.m > 64 or not uneven_split_builds(spec, (64, 64)) or tiles * RULE14_MAX_RANGES > device.sm_count
                or rule14_split(spec, device, 64, 128, pingpong, scale_partition) >= RULE14_MIN_WIDE_RANGES):
            return 1
        return RULE14_MAX_RANGES  # (K has RULE14_MIN_KBLOCKS k-blocks or more: one for every range)
    if bn != 128 or tiles > device.sm_count // 3:
        return 1
    return max(d for d in range(1, RULE14_MAX_RANGES + 1) if k_tiles % d == 0 and tiles * d <= device.sm_count)
