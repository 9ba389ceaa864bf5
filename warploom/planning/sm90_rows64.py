"""Rule 35 (docs/decisions/rule-35-short-k-rows64.md): at short K, one wave of 64x128 tiles where the planner chose
128-row tiles 128 columns wide or narrower that leave SMs idle.

Why: a GEMM of a few k-blocks on a few 128-row tiles is bound by each CTA's latency (its ring's fill, its few
wgmma, its epilogue's stores), not by the tensor cores; 64-row tiles halve each CTA's share and put twice as many
SMs to work. cuBLAS runs 64- or 80-row tiles there (nvjet 64x80 and 80x64 at 5113x120x200 and 1072x464x200,
`archive/exp/tiny_overhead.py`). On the H200 (bf16, CUDA graphs, session 37, every zoo shape of at most 16 k-blocks
whose plan was 128-row tiles in one partial wave: docs/data/rows64-h200-2026-11-28-session37.json) 64x128 gained
8-12% wherever its tiles stayed within 0.88 of the SMs' count at most 7 k-blocks (118x6288x96 0.869 -> 0.975,
1072x464x200 0.744 -> 0.823), 1-2% at 108 and 114 tiles, and lost from 123 tiles on (a second wave: -3% to -43%).
64x256 tiles won only where 64x128 took a second wave, by at most 5%: not taken."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90_models import latency_kind
from warploom.spec import GemmSpec

ROWS64_BM, ROWS64_BN = 64, 128
# At most this fraction of the SMs' count of 64x128 tiles: 116 (0.88 of 132) gained 11%, 123 lost.
ROWS64_MAX_TILES_OF_SMS = 0.9
# At most this many k-blocks: the gains were measured at 1-7 (the zoo had no shape of 8-16 in the rule's domain).
ROWS64_MAX_KBLOCKS = 7


def rows64_tiles(spec: GemmSpec) -> int:
    """How many 64x128 tiles cover C."""
    return math.ceil(spec.m / ROWS64_BM) * math.ceil(spec.n / ROWS64_BN)


def short_k_rows64(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> bool:
    """Rule 35: whether `plan` (the other rules' choice, nothing forced) gives way to one wave of 64x128 tiles: 16-bit
    operands of rule 23's kind (`latency_kind`: native accumulation, no bias or fused epilogue, K-major, sm_90a), at
    most ROWS64_MAX_KBLOCKS k-blocks, a plan of whole 128-row tiles at most 128 columns wide (rule 31's narrow ones
    too) in one CTA each, cooperative, and 64x128 tiles within ROWS64_MAX_TILES_OF_SMS of the SMs."""
    return (spec.a_dtype.bits == 16 and latency_kind(spec, device) and k_blocks(spec) <= ROWS64_MAX_KBLOCKS
            and plan.bm == 128 and plan.tile_n <= 128 and plan.split_k == 1 and plan.tail_split == 1
            and not (plan.stream_k or plan.pingpong or plan.swap_ab or plan.cluster > 1)
            and rows64_tiles(spec) <= ROWS64_MAX_TILES_OF_SMS * device.sm_count)
