"""The cost models of sm_90a's rules that price whole schedules against each other, each fitted on the H100, and the
limits of the schedules they choose: rule 15's split-K tail (`rule15_tail`, `tail_score`) and rule 21's stream-K
(`stream_k_score`, `stream_k_problems`). Rules 23, 25 and 33's few-tile models are in `planning.sm90.latency`, rule
24's clusters in `planning.sm90.clusters`. `planning.sm90` and its search ask them."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import dense_operands
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

# Rule 15: what a split-K tail costs beyond its share of the work (its launch, each unit's pipeline fill and fp32
# store, the reduction): 8-10 us, whatever K, at 4096x2112x7168 (H100, scripts/exp/tail_parts.py, docs/benchmarks.md
# 2026-11-23 session 14). A whole round of 128x256 tiles took 0.84 us per k-block there, fp8 (BK 128) and bf16
# (BK 64) alike, so a round is priced at that per k-block: the tail's fixed cost weighs more as K shrinks.
TAIL_COST_US = 9.0
_ROUND_US_PER_KBLOCK = 0.84
# Rule 15: no tail below 36 k-blocks (rounds of ~30 us). fp8 at 24 and 32 k-blocks (3072^3, 2048x7168x4096) ran
# 4-8% slower with the tail than on 128x128 tiles without one; at 40-64 k-blocks (5120^3, 3072x3072x8192,
# 4096x2112x7168) the tail won; bf16 at 48 and 64 tied (docs/benchmarks.md, session 20).
_TAIL_MIN_KBLOCKS = 36


# Rule 21's cost model (stream-K, `stream_k_score`), fitted to forced stream-K plans against whole-tile ones on the
# H100 (docs/benchmarks.md, session 22; scripts/fit_stream_k.py refits it from docs/data, and a test keeps these within
# 0.05 rounds of its least-squares fit): a shared tile's k-blocks run SK_SLOWDOWN slower than a whole wave's (its
# pieces start at other k-blocks than their neighbours', so they share less in L2), and each piece beyond a tile's
# first costs SK_FIXUP_KBLOCKS k-blocks (the contributor's fp32 partial store, the finisher's wait and load). The
# planner tries SK_PIECES pieces per shared tile.
SK_SLOWDOWN = 0.5
SK_FIXUP_KBLOCKS = 8.0
SK_PIECES = (2, 3, 4)


def uneven_split_builds(spec: GemmSpec, tile: tuple[int | None, int | None], what: str = "split_k") -> bool:
    """Whether split-K (or a split-K tail, `what` = "tail_split") of `spec` on a (bm, bn) `tile` may cut K into
    ranges that differ by a k-block (`ir.Tiling.uneven_split`): not where the producer copies per-column scales of B
    in one flattened loop (`ScaleRecipe.per_column_b`), which runs one count a unit, and for promoted accumulation
    only on one warpgroup's 64x64 split-K tile (promoted 128x128 blockwise spilled 16 bytes with them under Triton
    3.9; the 64x64 tile, rowwise or blockwise, spilled nothing under 3.6 or 3.9, tests/compile: the one form
    compiled). `rule._check_split_k` refuses the others by name and rule 25 prices only counts that divide there."""
    if spec.scale.per_column_b:
        return False
    return spec.accumulation is not Accumulation.PROMOTED or (tile == (64, 64) and what == "split_k")


def stream_k_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool | None, split_k: int | None,
                       tail_split: int | None, swap_ab: bool | None, bm: int | None,
                       prefetch_operands: bool | None = None) -> list[str]:
    """Rule 21: why a stream-K plan cannot run `spec` with these options (empty: it can)."""
    problems = []
    if spec.epilogue is not None and prefetch_operands and dense_operands(spec):
        # (a contributor skips its tile's epilogue, so a copy started at the tile's start would never be read)
        problems.append("prefetch_operands=True (a dense operand's copy starts at the tile's start, before the "
                        "fixup; pass prefetch_operands=False)")
    if spec.scale.is_blockwise and spec.scale is not ScaleRecipe.BLOCKWISE_1X128_128X128:
        problems.append(f"{spec.scale.value} scales (stream-K's blockwise recipe is 1x128 x 128x128)")
    if pingpong:
        problems.append("ping-pong (its consumers take whole tiles in turn)")
    if scale_partition:
        problems.append("the scale partition")
    if split_k not in (None, 1) or tail_split not in (None, 1):
        problems.append("split_k or tail_split (stream-K shares the k-blocks itself)")
    if swap_ab:
        problems.append("swap_ab (decode's swapped tiles)")
    if bm not in (None, 64, 128):
        problems.append(f"bm={bm} (stream-K is built for 128- and 64-row tiles)")
    return problems


def stream_k_grid(tiles: int, sm_count: int, pieces: int) -> int:
    """Rule 21's CTAs: every SM where the tiles fill a wave, else as many as the pieces need (`ir.Tiling.stream_k`)."""
    return sm_count if tiles >= sm_count else min(sm_count, tiles * pieces)


def stream_k_score(tiles: int, k_tiles: int, sm_count: int, pieces: int, area: float) -> float:
    """Rule 21's score in step 3's units (rounds x BM * BN / efficiency): the whole waves, then the last wave's
    tiles shared by min(SMs, tiles x pieces) CTAs: each CTA's share of a tile, SK_SLOWDOWN slower, plus
    SK_FIXUP_KBLOCKS k-blocks for each piece beyond a tile's first."""
    whole, rest = divmod(tiles, sm_count)
    if not rest:
        return whole * area
    ctas = min(sm_count, rest * pieces)
    fixup = (ctas / rest - 1) * SK_FIXUP_KBLOCKS / max(1, k_tiles)
    return (whole + rest / ctas * (1 + SK_SLOWDOWN) + fixup) * area



def tail_score(tiles: int, grid: int, tail_split: int, area: float, k_tiles: int) -> float:
    """Rule 15's score of a plan with a split-K tail, in the units of step 3's (rounds x BM * BN / efficiency,
    `area`): the whole rounds, the tail's rounds of 1/tail_split of a tile, and TAIL_COST_US in rounds of a
    128x256 tile at this K (`_ROUND_US_PER_KBLOCK`). `grid` is the plan's (the launcher's tail_spans)."""
    whole, tail = divmod(tiles, grid)
    fixed = TAIL_COST_US / (_ROUND_US_PER_KBLOCK * max(1, k_tiles)) * 128 * 256 if tail else 0.0  # (no tail: none)
    return (whole + math.ceil(tail * tail_split / grid) / tail_split) * area + fixed


def rule15_tail(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, bk: int, pingpong: bool,
                 scale_partition: bool | None, eff: float) -> int:
    """Rule 15: where the tiles fill at least one whole wave, leave a last round at most half busy, and that round
    idles at least 10% of the whole CTA-time (a few waves: at 27 waves a tail could save 2% at most, within what
    its own cost is known to), run that round's tiles as split-K units over the most k-ranges (a divisor of the
    k-blocks, at most 8, each range at least 4 k-blocks) that keep them in one wave, if K has at least
    `_TAIL_MIN_KBLOCKS` k-blocks and its score (`tail_score`: a fixed cost that weighs more at short K) beats the
    plain last round; otherwise 1. Only where split-K is
    allowed (_check_split_k)."""
    if (spec.bias_dtype is not None or spec.epilogue is not None or pingpong or scale_partition
            or spec.scale is ScaleRecipe.MX):
        return 1
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    whole, tail = divmod(tiles, device.sm_count)
    k_tiles = math.ceil(spec.k / bk)
    if whole == 0 or tail == 0 or (whole + tail / device.sm_count) / (whole + 1) >= 0.9:
        return 1
    if k_tiles < _TAIL_MIN_KBLOCKS:
        return 1  # rounds under ~30 us: the tail's three launches cost more than the score's fixed cost says
    ts = max((d for d in range(2, 9) if k_tiles % d == 0 and k_tiles // d >= 4 and tail * d <= device.sm_count),
             default=1)
    area = bm * bn / eff
    if ts > 1 and tail_score(tiles, device.sm_count, ts, area, k_tiles) >= (whole + 1) * area:
        return 1  # the tail's fixed cost outweighs the idle part of the last round at this K
    return ts
