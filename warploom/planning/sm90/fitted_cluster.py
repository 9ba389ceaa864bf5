"""Planner rule 37 (docs/decisions/rule-37-fitted-clusters.md): rule 32's fitted tile inside rule 24's 2x1 cluster,
where the cluster tiles make one round of the SMs at a long K on rows that are not whole 128-byte lines.

Why: cuBLAS runs the large shapes warploom trailed on fitted tiles inside 2-8 CTA clusters (docs/benchmarks.md, session
37). Either alone fell short: rule 32's fitted tiles fill the SMs but bring all of B from L2, where a 128-byte box row
of a 16-byte-aligned row touches five sectors; rule 24's clusters halve B's traffic but on 256-wide tiles that leave
SMs idle. Together (`ir.Tiling.interleaved`: the consumers keep their row split, each CTA its 64-row blocks of the
cluster tile), at Triton 3.9.0 on the H200 (session 39, docs/data/fitcluster-*-session39*.json, rule37-*):
1256x1720x11240 0.70 -> 0.81 (128+16), 3097x920x2920 0.75 -> 0.90 and 1057x2048x7112 0.75 -> 0.83 (128+64); where the
cluster tiles took more than a round of the SMs (3841x840x4816, 4619x1408x1352, 2637x1904x6464) or M's last cluster
row was mostly padding (527x4680x6416) they lost; 3838x576x2768 (44 k-blocks) lost 6% on a 128+32 tile wider than
its plan's and 1.3% on its plan's own 128+16 tile in the cluster. fp8 rowwise with fast accumulation gained more at
the zoo's fp8 forms of the same shapes: 1256x1728x11248 0.83 -> 1.14, 1057x2048x7120 0.81 -> 1.12 (both from 128x128
with a split-K tail), 3097x928x2928 0.87 -> 0.99. Below 0.8 of a round of clusters bf16 still gained (12108x160x14264
0.71 -> 0.85) and fp8 lost (MIN_FILL).
"""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.backends import gluon_api
from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.planning.sm90.narrow import narrow_problems
from warploom.planning.sm90.tiles import rows_aligned
from warploom.spec import Accumulation, ALayout, GemmSpec, ScaleRecipe

# The fitted tiles measured in a cluster: 128 rows, blocks 128 + 16 or 128 + 64 (128 + 32 lost at its one shape).
BLOCKS = ((128, 16), (128, 64))
CLUSTER = 2
# The cluster tiles must fill at least this much of one round of the SMs' clusters, by operand width: 16-bit gained at
# every fill timed, 0.67 to 0.98 (12108x160x14264 at 0.73 +21%, 2577x512x3720 at 0.67 +9%); fp8 gained at 0.83-0.98
# and lost at 0.73 (12108x160x14272, -3%) and 0.67 (2577x512x3728, -8%).
MIN_FILL = {16: 0.65, 8: 0.8}
# At least this many k-blocks, by operand width: 16-bit gains had 46 to 176, and 3838x576x2768 (44) lost 1.3% on the
# same tile as its plan; fp8's (128-byte k-blocks) 23 to 88, every one timed.
MIN_KBLOCKS = {16: 45, 8: 23}
# M's cluster rows (256 each), and N's tiles' columns, at most this much more than M and N (527 rows on three, 1.46,
# lost).
MAX_PADDING = 1.25


def fitted_cluster(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> tuple[int, ...] | None:
    """Rule 37's blocks for `spec` in place of `plan` (128-row tiles, whole or fitted, one CTA a tile or rule 24's
    cluster, with a split-K tail or stream-K's shared last wave: no split, swap or ping-pong), or None: 16-bit
    operands, or fp8 rowwise with fast accumulation and no bias, into a 16-bit C, a K-major A, on rows that are not
    whole lines, at least MIN_KBLOCKS k-blocks,
    Triton's Hopper multicast, and a width of BLOCKS whose cluster tiles fill one round of the SMs' clusters at least
    MIN_FILL (the fullest; a tie goes to the wider tile), padding M and N by at most MAX_PADDING."""
    # (what was timed: 16-bit operands into a 16-bit C, and fp8 rowwise without a bias; never an M-major A, which a
    # cluster refuses: each CTA's rows must be one box of A)
    timed = spec.out_dtype.bits == 16 and (spec.a_dtype.bits == 16 or spec.scale is ScaleRecipe.ROWWISE
                                            and spec.bias_dtype is None)
    if (not timed or spec.a_layout is not ALayout.K_MAJOR or spec.accumulation is not Accumulation.NATIVE
            or rows_aligned(spec)
            or k_blocks(spec) < MIN_KBLOCKS[spec.a_dtype.bits] or not gluon_api.current().tma_multicast
            or plan.bm != 128 or plan.split_k > 1 or plan.swap_ab or plan.pingpong or plan.cluster_n
            or narrow_problems(spec, replace(plan, cluster=1, tail_split=1, stream_k=0))):
        return None
    rows = math.ceil(spec.m / (CLUSTER * plan.bm))
    if rows * CLUSTER * plan.bm > MAX_PADDING * spec.m:
        return None
    clusters = device.sm_count // CLUSTER
    fills = [(rows * math.ceil(spec.n / sum(b)) / clusters, sum(b), b) for b in BLOCKS
             if math.ceil(spec.n / sum(b)) * sum(b) <= MAX_PADDING * spec.n]
    fits = [(fill, width, b) for fill, width, b in fills if MIN_FILL[spec.a_dtype.bits] <= fill <= 1.0]
    return max(fits)[2] if fits else None


def cluster_tiles(spec: GemmSpec, blocks: tuple[int, ...]) -> int:
    """The cluster tiles of rule 37's tile (2 x 128 rows by sum(blocks) columns) over `spec`'s C."""
    return math.ceil(spec.m / (CLUSTER * 128)) * math.ceil(spec.n / sum(blocks))
