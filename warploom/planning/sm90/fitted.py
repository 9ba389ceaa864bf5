"""Planner rule 32 (docs/decisions/rule-32-fitted-tiles.md): a tile fitted to the shape, as cuBLAS fits its own.

Why: the zoo's worst bf16 shapes quantize badly on power-of-two tiles. 1679x2456x2000 makes 140 tiles of 128x256
for 132 SMs: two rounds, the second 6% full. cuBLAS runs it on 192 x 176 tiles (126: one round; its kernel names,
`scripts/torch_kernels.py`, docs/data/torch-kernels-2026-11-28-session33.json), and on widths like 88, 112, 184
or 208 elsewhere. A fitted tile here is BM = 128, 192 (three consumer warpgroups, A copied in 64-row boxes:
`ir.Ring.boxes`) or 256 rows by tile_n columns, any multiple of 16 up to 256, in at most three power-of-two column
blocks (`ir.Tiling.n_blocks`: each block its own wgmma, accumulator, B box and stores).

The choice is by rounds of the persistent grid: each candidate's time is its rounds (tiles over the SMs, rounded up)
times its tile's area, each column block beyond the first adding BLOCK_COST of the tile's (a block's wgmma reads the
A slot again from shared memory). The plan the other rules chose is priced the same way (stream-K by rule 21's
model, rule 15's split-K tail by its own), and the fitted tile replaces it only FIT_MARGIN ahead: measured on the
H100 (session 33, docs/data/fitted-*-session33.json), fitted tiles gained 4-42% where they cut a round or most of a
tile's padding, and lost where they cut neither.

A round is never faster than L2 delivers its tiles' operands (`l2_floor`): every CTA reads BM + tile_n rows of K, so
a narrower tile on more SMs reads more bytes a FLOP, and where rows are only 16-byte aligned each 128-byte box row
touches five 32-byte sectors instead of four, and L2 delivers about half (session 34,
docs/data/fitlongk-*-session34.json). The rates are the part's (`L2Rates`): measured on the H100 SXM and on the H200,
told apart by their L2's size; another part is priced as an H100.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from warploom.device import H200, DeviceInfo
from warploom.errors import NoTileFitsError
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90.models import stream_k_score, tail_score
from warploom.planning.sm90.narrow import blocks_of, narrow_problems, with_blocks
from warploom.planning.sm90.tiles import rows_aligned, tall_problems, tile_efficiency
from warploom.planning.trace import collecting, note
from warploom.spec import GemmSpec

# Each column block beyond a tile's first costs this fraction of the tile's time (its wgmma reads A's slot again).
BLOCK_COST = 0.1
# Per-FLOP efficiency of a tile under 128 columns (a warpgroup's wgmma reads more shared memory per FLOP), as
# step 3's menu prices 64- against 128-wide tiles; and where A's or B's rows are not whole 128-byte lines, a tile at
# most 128 wide is priced as step 3 prices 128x128 there (`tiles._MISALIGNED_128` against its 0.90).
NARROW_EFFICIENCY = 0.8
MISALIGNED_FACTOR = 0.8


@dataclass(frozen=True)
class L2Rates:
    """What L2 delivers to the SMs in `l2_floor`, in bytes a microsecond, where A's and B's rows are whole 128-byte
    lines, where they start on 32-byte sectors, and where they are only 16-byte aligned."""

    lines: float
    sectors: float
    halves: float


# The H100 SXM's, fitted to forced fitted tiles against the plans before them (bf16, session 34, docs/data/fitlongk-*,
# l2floor-* and l2large-*-session34.json): 1256x1720x11200 on 120 tiles of 128x144 sustained 8.7 TB/s and ran 25%
# faster than on 70 of 128x256, while at K = 11240 (rows of 22480 bytes) the same tiles sustained 5.1 TB/s and ran
# 19% slower. Of the 32 plan pairs measured there the model orders all but 656x8048x5280 (fitted 2% ahead of its
# stream-K) and three within 1% as measured; seven of them have 16-byte rows (192x224 or 192x208 against 128x256 or
# stream-K: +5-33%).
H100_L2 = L2Rates(lines=9e6, sectors=9e6, halves=5e6)
# The H200's (60 MiB of L2 against 50): the same pairs and six more, remeasured there (session 35,
# docs/data/l2floor-h200-2026-11-28-session35.log). On rows of whole lines the H100's rate made 128x256 on every SM
# L2-bound, and the fitted tiles it chose lost 2-18% (1024x2048x4096 128x160 against 128x128: 0.80 against 0.98;
# 4096x57344x8192 192x192 against 128x256's stream-K: 0.97 against 1.01); 128x128 there fed its SMs 10 TB/s with its
# ring's fill and epilogue in the time. At 12 TB/s the planner takes back 128x256 or 128x128 at 1024x2048x4096 and
# at four of the suite's large shapes (+1.7% to +4% at three of them, -0.6% at 4096x10240x8192), and 128x144 at
# 1256x1720x11200 (+3.4%); it loses 2637x1904x6464 (128x160 5.6% behind 192x224) and 7202x4384x9472 (128x256 4.9%
# behind 192x192). Rows that are not whole lines kept the H100's rates (3841x840x4816: 192x144 0.92 against
# 128x256's 0.76).
H200_L2 = L2Rates(lines=12e6, sectors=9e6, halves=5e6)
# An SM's 16-bit wgmma FLOPs a microsecond (989 TFLOP/s over 132 SMs), the floor's unit against the tile's area.
SM_FLOPS_PER_US = 7.49e6
# ...counted from L2_MIN_KBLOCKS k-blocks a tile (measured from 64: 4096x28672x4096 +2%, 67-74 k-blocks +5% to
# +15%): a shorter k-loop spends more of its time on the ring's fill and the epilogue, where the other rules'
# measurements stand.
L2_MIN_KBLOCKS = 64
# A fitted tile must be this far ahead of the plan the other rules chose.
FIT_MARGIN = 0.92
# The widest tile_n a tile of these rows holds in its warpgroups' registers (64 x tile_n fp32 a warpgroup: 112
# registers at 256 rows, 160 at 192, 240 at 128).
MAX_WIDTH = {128: 256, 192: 224, 256: 128}
MAX_BLOCKS = 3
# At least this fraction of a wave of the plan's tiles: every gain measured had 40 tiles or more (a few tiles are
# bound by their k-loop's latency, rules 23 and 25's regime, where a smaller tile's area saves nothing measured).
MIN_WAVE = 0.25


@dataclass(frozen=True)
class Fit:
    """A fitted candidate: `bm` x `tile_n` in power-of-two `blocks` (widest first) of a `bn`-wide slot (the next
    power of two), its tiles, rounds and score."""

    bm: int
    bn: int
    blocks: tuple[int, ...]
    tiles: int
    rounds: int
    score: float


def candidates(spec: GemmSpec, device: DeviceInfo) -> list[Fit]:
    """Every fitted tile rule 32 may choose for `spec`, scored (rounds x area x the blocks' cost / efficiency)."""
    fits = []
    for bm, widest in MAX_WIDTH.items():
        for width in range(64, widest + 1, 16):
            blocks = blocks_of(width)
            if len(blocks) > MAX_BLOCKS or len(blocks) == 1:
                continue  # (one block is a whole power-of-two tile: the other rules' menu)
            tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / width)
            rounds = math.ceil(tiles / device.sm_count)
            eff = (1.0 if width >= 128 else NARROW_EFFICIENCY) * (
                1.0 if width > 128 or rows_aligned(spec) else MISALIGNED_FACTOR)
            area = bm * width * (1 + BLOCK_COST * (len(blocks) - 1)) / eff
            score = rounds_time(spec, device, tiles, area, bm, width)
            fits.append(Fit(bm, 1 << (width - 1).bit_length(), blocks, tiles, rounds, score))
    return fits


def rounds_time(spec: GemmSpec, device: DeviceInfo, tiles: int, area: float, rows_a: float, rows_b: float) -> float:
    """`tiles` whole tiles of `area` on the persistent grid, in rule 32's units: each round its tile's area, or the
    time L2 takes to deliver a round's CTAs their rows (`l2_floor`). A last, partial round is priced as a whole one:
    priced at its own CTAs' floor, the model kept 128x256 at 13930x480x4328, 1867x10448x14768 and 4096x10240x8192,
    where the fitted tile measured 3-5% faster (session 34)."""
    floor = l2_floor(spec, device, min(tiles, device.sm_count), rows_a, rows_b)
    return math.ceil(tiles / device.sm_count) * max(area, floor)


def current_score(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> float:
    """`plan`'s time in rule 32's units: its rounds (`rounds_time`), rule 21's stream-K model with the L2 floor on its
    whole waves (its shared tiles' slowdown was fitted with L2's share in it), or rule 15's tail model on rounds at
    least as long as the floor (the tail's units spread over the grid's CTAs)."""
    tiles = plan.units(spec.m, spec.n)
    area = plan.bm * plan.bn / tile_efficiency(spec, plan.bm, plan.bn)
    # (rule 24's 2x1 cluster: the lead multicasts B's box, so a CTA brings half of B's rows from L2 on average; a 1x2
    # cluster is only ever forced, and a forced schedule never reaches rule 32)
    rows_b = plan.bn / 2 if plan.cluster > 1 else plan.bn
    if plan.stream_k:
        return stream_k_score(tiles, k_blocks(spec), device.sm_count, plan.stream_k, area) \
            + tiles // device.sm_count * (max(area, l2_floor(spec, device, device.sm_count, plan.bm, rows_b)) - area)
    if plan.tail_split > 1:
        return tail_score(tiles, plan.grid, plan.tail_split,
                          max(area, l2_floor(spec, device, min(tiles, plan.grid), plan.bm, rows_b)), k_blocks(spec))
    return rounds_time(spec, device, tiles, area, plan.bm, rows_b)


def sector_aligned(spec: GemmSpec) -> bool:
    """Whether A's and B's rows (as stored: `GemmSpec.row_align`) start on 32-byte L2 sectors: a 128-byte box row
    then touches four, and five where they do not (TMA takes rows of 16-byte multiples: warploom's checks refuse
    others)."""
    return spec.row_align("a") >= 32 and spec.row_align("b") >= 32


def l2_rates(device: DeviceInfo) -> L2Rates:
    """`device`'s L2 rates: the H200's for an L2 of 60 MiB or more, else the H100 SXM's."""
    return H200_L2 if device.l2_bytes >= H200.l2_bytes else H100_L2


def l2_floor(spec: GemmSpec, device: DeviceInfo, ctas: int, rows_a: float, rows_b: float) -> float:
    """The least time of a round of `ctas` CTAs, in rule 32's units (a tile's area: its FLOPs a k-block over 128): the
    time L2 takes to deliver each CTA's rows of A and of B for a k-block (0 under L2_MIN_KBLOCKS)."""
    if k_blocks(spec) < L2_MIN_KBLOCKS:
        return 0.0
    rates = l2_rates(device)
    bandwidth = rates.lines if rows_aligned(spec) else rates.sectors if sector_aligned(spec) else rates.halves
    return ctas * (rows_a + rows_b) * SM_FLOPS_PER_US / bandwidth


def fitted(spec: GemmSpec, device: DeviceInfo, plan: Plan,
           build: Callable[[int, int, tuple[int, ...]], Plan]) -> Plan:
    """Rule 32: `plan` replaced by the best fitted tile where one scores FIT_MARGIN ahead of it, for 16-bit operands'
    whole-tile, stream-K, split-K tail (rule 15's) or 2-CTA cluster plans (rule 24's, priced as its tiles one CTA each
    but for L2, where a CTA brings half of the multicast B on average: at 1679x2456x2000 192x192 ran 0.92x against the
    cluster's 0.57x, Triton 3.9.0, session 34) of 128 or 256 rows that a narrow tile (rule 31), split-K or a swap did
    not take (fp8 was not measured on fitted tiles: forced only); `build(bm, bn, blocks)` plans that tile whole, one
    CTA a tile (the planner's own depth and partitions), which the blocks then fit."""
    if (plan.n_blocks or plan.split_k > 1 or plan.swap_ab or plan.pingpong or plan.bm < 128
            or spec.a_dtype.bits != 16 or narrow_problems(spec, replace(plan, cluster=1, tail_split=1))
            or plan.units(spec.m, spec.n) < device.sm_count * MIN_WAVE):
        return plan
    now = current_score(spec, device, plan)
    # Never more rounds than the plan's tiles take (more, narrower tiles lost: 2188x4312x760 on 4 rounds of 128x160
    # against 3 of 128x256, 0.76 against 0.83). At a long K the operands' bytes from L2 bind (`l2_floor`: 527x4680x6416
    # on one round of 128x192 ran 0.78 against 128x256's 0.85, and its one round of 192x112 0.86 against 0.81).
    rounds = math.ceil(plan.units(spec.m, spec.n) / device.sm_count)
    fits = [f for f in candidates(spec, device) if f.rounds <= rounds
            and not (f.bm >= 192 and tall_problems(spec, False, False, None, None, None, f.bm))]
    if not fits:
        return plan
    # (a tie, to rounding, goes to fewer blocks, then more rows: 14215x520x184's 192x192 and 128x176 price alike)
    best = min(fits, key=lambda f: (round(f.score, 3), len(f.blocks), -f.bm))
    # (the explain table's other rows are the search's scores, without the L2 floor: the line says how the two
    # compare with it)
    fits_better = best.score < FIT_MARGIN * now
    whole, kept = None, f"; the plan kept: not {100 - round(100 * FIT_MARGIN)}% ahead"
    if fits_better:
        with collecting(None):  # (the forced tile's own search is not a candidate: its winner would replace this one)
            try:
                whole = build(best.bm, best.bn, best.blocks)
            except NoTileFitsError:  # (its forced search found no ring and registers that fit the part)
                kept = f"; the plan kept: no {best.bm}x{best.bn} tile fits {device.name}"
    note(f"{best.bm}x{sum(best.blocks)}", "fitted tile (rule 32)", best.score,
         f"{best.tiles} tiles of {best.bm}x{sum(best.blocks)} ({'+'.join(map(str, best.blocks))}), {best.rounds} "
         f"round(s), against the plan's {plan.units(spec.m, spec.n)} units: {best.score / now:.2f} of its time with "
         "L2's floor" + ("" if whole is not None else kept), chosen=whole is not None)
    if whole is None:
        return plan
    return with_blocks(spec, device, whole, best.blocks)
