"""Rule 35 (docs/decisions/rule-35-short-k-rows64.md): one wave of 64x128 tiles where the planner chose 128-row tiles
128 columns wide or narrower that leave SMs idle, or split such tiles' K in two.

Why: a GEMM of a few k-blocks on a few 128-row tiles is bound by each CTA's latency (its ring's fill, its few
wgmma, its epilogue's stores), not by the tensor cores; 64-row tiles halve each CTA's share and put twice as many
SMs to work. cuBLAS runs 64- or 80-row tiles there (nvjet 64x80 and 80x64 at 5113x120x200 and 1072x464x200,
`archive/exp/tiny_overhead.py`). On the H200 (bf16, CUDA graphs, session 37, every zoo shape of at most 16 k-blocks
whose plan was 128-row tiles in one partial wave: docs/data/rows64-h200-2026-11-28-session37.json) 64x128 gained
8-12% wherever its tiles stayed within 0.88 of the SMs' count at most 7 k-blocks (118x6288x96 0.869 -> 0.975,
1072x464x200 0.744 -> 0.823), 1-2% at 108 and 114 tiles, and lost from 123 tiles on (a second wave: -3% to -43%).
64x256 tiles won only where 64x128 took a second wave, by at most 5%: not taken.

At longer K the same tiles replace two kinds of plan (session 38, the zoo's 16 shapes of the domain past 7
k-blocks, docs/data/rows64long-h200-2026-11-28-session38.json): 128-row tiles in one wave (146x3672x4008 0.374 ->
0.575, 73x7472x4784 0.584 -> 0.682), and 128-row tiles whose K rule 25 splits in two to fill the SMs (2244x360x2000
0.697 -> 1.060, 494x1528x2496 0.528 -> 0.967, 662x1096x3752 0.682 -> 0.766), where the 64-row tiles take as many
SMs with no partial sums to add. Both up to 75 k-blocks; at 103 (405x1424x6576) a tie, and where M is under 128
(100x5264x3464, whose 64-row tiles pad as many rows as its 128-row ones) -6%. Splits of 3 or more (tiles a third of
the SMs or fewer) lost 11-43% on 64x128 tiles: left alone. fp8 with fast accumulation (its k-block as many bytes)
gained 7-33% at all six shapes timed (docs/data/rows64fp8-h200-2026-11-28-session38.json: 496x1536x2496 0.981 ->
1.301, 405x1424x6576 in two ranges 0.909 -> 0.973)."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90.latency import latency_kind
from warploom.spec import GemmSpec

ROWS64_BM, ROWS64_BN = 64, 128
# At most this fraction of the SMs' count of 64x128 tiles: 116 (0.88 of 132) gained 11%, 123 lost.
ROWS64_MAX_TILES_OF_SMS = 0.9
# At most this many k-blocks: gains measured at 1-7 and 32-75 (the zoo has none of 8-31 in the rule's domain), a tie at
# 103.
ROWS64_MAX_KBLOCKS = 80
# A plan whose K is split in 2 gives way from this many rows (100x5264x3464 lost 6%, every one of 405 rows on gained).
ROWS64_SPLIT_MIN_M = 128


def rows64_tiles(spec: GemmSpec) -> int:
    """How many 64x128 tiles cover C."""
    return math.ceil(spec.m / ROWS64_BM) * math.ceil(spec.n / ROWS64_BN)


def one_wave_rows64(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> bool:
    """Rule 35: whether `plan` (the other rules' choice, nothing forced) gives way to one wave of 64x128 tiles: a
    problem of rule 23's kind (`latency_kind`: native accumulation, no bias or fused epilogue, K-major, sm_90a), at
    most ROWS64_MAX_KBLOCKS k-blocks, a plan of whole 128-row tiles at most 128 columns wide (rule 31's narrow ones
    too) in one CTA each, or their K split in two from ROWS64_SPLIT_MIN_M rows, cooperative, and 64x128 tiles within
    ROWS64_MAX_TILES_OF_SMS of the SMs."""
    split = plan.split_k == 2 and spec.m >= ROWS64_SPLIT_MIN_M
    return (latency_kind(spec, device) and k_blocks(spec) <= ROWS64_MAX_KBLOCKS
            and plan.bm == 128 and plan.tile_n <= 128 and (plan.split_k == 1 or split) and plan.tail_split == 1
            and not (plan.stream_k or plan.pingpong or plan.swap_ab or plan.cluster > 1)
            and rows64_tiles(spec) <= ROWS64_MAX_TILES_OF_SMS * device.sm_count)
