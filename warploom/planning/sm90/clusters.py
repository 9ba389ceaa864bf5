"""Rule 24 on sm_90a (docs/decisions/rule-24-clusters.md): where 2-CTA clusters sharing an operand tile by TMA
multicast pay (`cluster_measured`, `cluster_plan`), what they cannot run (`cluster_problems`), and the tiles they are
built for (`CLUSTER_TILES`). `planning.sm90`'s search scores them beside one CTA a tile."""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.device import DeviceInfo
from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.spec import Accumulation, ALayout, GemmSpec, ScaleRecipe

# Rule 24 (docs/decisions/rule-24-clusters.md): two CTAs of a cluster stacked along M share B's box, which the lead
# multicasts. Where A's or B's rows are not whole 128-byte lines, each box row touches two L2 lines and 128x256 tiles
# lose a fifth while the machine streams (bf16 4634x4968x3672: 457 TFLOP/s on one CTA per tile, 578 in clusters,
# torch 630; H100, Triton 3.9); on aligned rows clusters ran 1-2% slower (4608x4992x3712, 8192^3). The gain needs
# the L2 busy: with no whole wave of clusters (2848x736x3088: 36 cluster tiles) they lost 5%, and a whole wave and a
# part against stream-K's shared part lost 10% (656x8048x5280). So the gain is counted on whole waves only (a last,
# partial wave leaves L2 idle enough), and clusters are chosen for unaligned rows with at least one whole wave of
# them, where that score beats the best one-CTA plan's by CLUSTER_MARGIN. (18 shapes, bf16 and fp8 rowwise: the
# model's misses cost 2-5% at 1168x6960x1104 bf16, 6320x6848x5648 bf16 and 4634x4976x3680 fp8; docs/decisions.)
CLUSTER_UNALIGNED_GAIN = 1.27
CLUSTER_MARGIN = 0.95
# ...and only where each CTA runs enough k-blocks (its k-blocks per tile times the cluster tiles per cluster): with
# few, its fixed costs (the ring's first fill, the epilogues, the cluster's handshakes) outweigh what B's halved
# traffic saves. Side by side at 9 zoo shapes (session 26: graph timing, H100, Triton 3.9) clusters lost 5-23% for
# bf16 at 3.5-29.5 k-blocks a CTA (1072x5728x80, 917x5184x608, 685x6144x1680, 1232x7504x720, 5344x2192x144,
# 8666x816x160) and won from 36 (4310x1504x1528 and up, session 24); fp8 rowwise won from 13.6 (1232x7504x720 +13%,
# 685x6144x1680 +6%, 1168x6960x1104 +13%) and was mixed below (14215x528x192 -10%, 917x5184x608 -8%,
# 5344x2192x144 +9%). docs/decisions/rule-24-clusters.md has the table.
CLUSTER_MIN_KBLOCKS = {1: 12, 2: 32}  # by the operands' element bytes
# Partial waves: at a long K (step 3's long-K regime, 16-bit operands) a partial wave of clusters under one whole wave
# gains too, where its 256-row cluster tiles pad M by at most CLUSTER_PARTIAL_MAX_PAD (`cluster_row_pad`). Measured
# under one wave (bf16, H100, Triton 3.9, session 31; clusters against one CTA a tile): 12108x160x14264 (48 cluster
# tiles, 223 k-blocks, pad 1.5%) 0.82x torch against 0.64x; 1256x1720x11240 (pad 1.9%) and 2007x2008x12112 (2.0%)
# even; 1057x2048x7112 (pad 21%) 0.81-0.84x against 0.78-0.80x; 527x4680x6416 (pad 46%: 19 of its 114 CTAs have no
# rows) 0.75x against 0.83x; 168x8424x12040 (pad 52%) 0.73x against stream-K's 0.77x. 2848x736x3088's loss above had
# 48 k-blocks. A partial round after whole waves still counts at no gain: not measured.
CLUSTER_PARTIAL_MAX_PAD = 0.05


def cluster_row_pad(spec: GemmSpec) -> float:
    """Rule 24: the rows a cluster's 256-row tiles add beyond M, as a fraction of M (0 for an empty M)."""
    return math.ceil(spec.m / 256) * 256 / spec.m - 1 if spec.m else 0.0


# Promoted fp8 in a cluster: each consumer warpgroup's 128 columns in two 64-column accumulators (`cluster_plan`).
CLUSTER_PROMOTED_BLOCKS = 4


def cluster_min_kblocks(spec: GemmSpec) -> int:
    """Rule 24: the fewest k-blocks a CTA must run (`cta_kblocks`) for the planner to choose clusters for `spec`."""
    return CLUSTER_MIN_KBLOCKS.get(spec.a_dtype.bytes, CLUSTER_MIN_KBLOCKS[2])


def cta_kblocks(spec: GemmSpec, cluster_tiles: int, device: DeviceInfo) -> float:
    """Rule 24: the k-blocks each CTA of a full grid of 2-CTA clusters runs over `cluster_tiles` cluster tiles."""
    return k_blocks(spec) * cluster_tiles / (device.sm_count // 2)


def cluster_measured(spec: GemmSpec) -> bool:
    """Rule 24: whether the planner may choose clusters for `spec` unforced: the recipes its evidence was measured on
    (native accumulation without a fused epilogue graph). Promoted fp8, blockwise scales and fused epilogues run in
    clusters when forced (`cluster=2`) until a sweep measures them (scripts/gpu.sh clusters)."""
    return spec.accumulation is Accumulation.NATIVE and spec.epilogue is None  # (blockwise scales are promoted)


# Rule 24's tiles, (BM, BN, consumer warpgroups): 128x256 is the planner's; 128x128 and 64x128 (one warpgroup a CTA)
# are taken only where forced with bn=128 or bm=64, and by the tuner (docs/decisions/forced-cluster-tiles.md: 64x128
# in a 2x1 cluster ran 5-19% faster than the plan at nine mid-size shapes and 4-32% slower at others, with no rule
# found that tells them apart).
CLUSTER_TILES = ((128, 256, 2), (128, 128, 2), (64, 128, 1))


def cluster_tiles(bm: int | None, bn: int | None, along_n: bool = False) -> tuple[tuple[int, int, int], ...]:
    """The `CLUSTER_TILES` a forced tile (None: not forced) names: 64x128 where bm=64 is forced, 128x128 where bn=128
    is (and bm is not 64), else rule 24's 128x256 (the smaller ones are forced only, and 2x1 only: a 1x2 cluster's
    tile is 128x256)."""
    if along_n:
        return CLUSTER_TILES[:1]
    if bm == 64:
        return tuple(t for t in CLUSTER_TILES if t[0] == 64)
    return tuple(t for t in CLUSTER_TILES if t[:2] == (128, 128)) if bn == 128 else CLUSTER_TILES[:1]


def cluster_tile(bm: int | None, bn: int | None, consumer_partitions: int | None, along_n: bool = False) -> bool:
    """Whether a forced tile (None: not forced) is one of the `cluster_tiles` it names."""
    return any(bm in (None, tbm) and bn in (None, tbn) and consumer_partitions in (None, parts)
               for tbm, tbn, parts in cluster_tiles(bm, bn, along_n))


def cluster_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool | None, split_k: int | None,
                     tail_split: int | None, stream_k: int | None, swap_ab: bool | None, bm: int | None,
                     bn: int | None, consumer_partitions: int | None, along_n: bool = False) -> list[str]:
    """Rule 24: why 2-CTA clusters (along N sharing A: `along_n`) cannot run `spec` with these options (empty: they
    can)."""
    from warploom.backends import gluon_api

    problems = []
    if along_n:
        # A 1x2 cluster's program splits every tile's columns between its CTAs, so whatever cuts a tile's columns
        # within a CTA (promoted fp8's column-block partials, a fused epilogue's or rule 10's column blocks) would
        # cut across them instead; its C stores go in whole 256-wide rows of each warpgroup.
        if spec.accumulation is Accumulation.PROMOTED:
            problems.append("promoted fp8 or blockwise scales in a 1x2 cluster (their column-block partials would "
                            "cut across the CTAs' columns; use cluster=2, the 2x1 form)")
        if spec.epilogue is not None or spec.scale is ScaleRecipe.ROWWISE and spec.bias_dtype is not None:
            problems.append("a fused epilogue graph, or rowwise scales with a bias (rule 10's column blocks), in a "
                            "1x2 cluster (their column blocks would cut across the CTAs' columns; use cluster=2, the "
                            "2x1 form)")
    if not gluon_api.current().tma_multicast:
        problems.append("this Triton's Hopper TMA has no multicast (Triton >= 3.7 has)")
    if spec.a_layout is ALayout.M_MAJOR:
        problems.append("an M-major A (each CTA's rows must be one box of A)")
    if spec.grouped:
        problems.append("a grouped GEMM")
    if spec.epilogue is not None and spec.accumulation is Accumulation.PROMOTED:
        # (rule 9 keeps a promoted fp8 fused epilogue 128 wide, where the cluster's 128x256 tile spilled)
        problems.append("a fused epilogue graph with promoted fp8 accumulation (rule 9 keeps it on 128-wide tiles; "
                        "use use_fast_accum=True)")
    if scale_partition:
        problems.append("the scale partition")
    if pingpong and along_n:
        problems.append("ping-pong in a 1x2 cluster (built 2x1 only, sharing B: use cluster=2)")
    elif pingpong and (spec.accumulation is Accumulation.PROMOTED or spec.epilogue is not None):
        # (built and simulated for native accumulation only: promoted fp8's and a fused graph's ping-pong clusters
        # have no simulator, compile or GPU tests yet)
        problems.append("ping-pong with promoted fp8, blockwise scales or a fused epilogue graph (ping-pong clusters "
                        "run native accumulation only: use use_fast_accum=True and no epilogue, or pingpong=False)")
    if split_k not in (None, 1) or tail_split not in (None, 1) or stream_k:
        problems.append("split_k, tail_split or stream_k (a cluster runs whole tiles)")
    if swap_ab:
        problems.append("swap_ab")
    if pingpong and (bm not in (None, 128) or bn not in (None, 128)):
        problems.append("a ping-pong tile other than 128x128 (each warpgroup's whole tile)")
    elif (along_n or not pingpong) and not cluster_tile(bm, bn, consumer_partitions, along_n):
        problems.append("a 1x2 cluster's tile other than 128x256 with two consumer warpgroups" if along_n else
                        "a tile other than 128x256 or 128x128 (bn=128) with two consumer warpgroups, or 64x128 "
                        "(bm=64) with one")
    return problems


def cluster_plan(plan: Plan, spec: GemmSpec, device: DeviceInfo, eff: float, aligned: bool,
                 along_n: bool = False, stages: int = 0, partial_gains: bool = False) -> tuple[Plan, float, int]:
    """Rule 24's plan from the 128x256 `plan` (or, ping-pong, the 128x128 one), its score in step 3's units (rounds of
    the device's clusters over the cluster tiles of 2 BM x BN, each CTA's BM x BN; whole rounds at the unaligned rows'
    gain) and its cluster tiles.

    `along_n`: the 1x2 form (ShareA), cluster tiles of 128 x 512 sharing A, scored the same way at the same gain
    (unmeasured: the planner plans it only when forced, `cluster="1x2"`). Its warpgroups keep their 64-row blocks
    and store them whole (`epilogue_subtiles` 1: a column block would cut across the CTAs), so its staging takes
    twice the row split's, in `stages` (the most that fit beside it).

    `partial_gains`: a partial wave under one whole wave gains too ('Partial waves' beside CLUSTER_PARTIAL_MAX_PAD)."""
    tiles = (math.ceil(spec.m / 128) * math.ceil(spec.n / 512) if along_n
             else math.ceil(spec.m / (2 * plan.bm)) * math.ceil(spec.n / plan.bn))
    clusters = device.sm_count // 2
    gain = 1.0 if aligned else CLUSTER_UNALIGNED_GAIN
    partial_gain = gain if partial_gains and tiles < clusters else 1.0
    score = (tiles // clusters / gain + (tiles % clusters > 0) / partial_gain) * plan.bm * plan.bn / eff
    if plan.pingpong:
        # Ping-pong (forced only): each warpgroup keeps its whole 128x128 tile, and both CTAs run the same tile
        # sequence offset by BM rows, so its consumers, stages and staging stay the one-CTA plan's.
        return replace(plan, cluster=2, grid=2 * max(1, min(clusters, tiles))), score, tiles
    if along_n:
        return replace(plan, cluster=2, cluster_n=True, consumer_partitions=2, epilogue_subtiles=1, stream_k=0,
                       stages=min(plan.stages, stages), grid=2 * max(1, min(clusters, tiles))), score, tiles
    # Each warpgroup stores its 128-row column block in blocks half as wide as its 64-row block's were: the staging
    # buffers take the shared memory they took, beside the same ring. Promoted fp8 promotes each warpgroup's 128
    # columns in two 64-column blocks (CLUSTER_PROMOTED_BLOCKS): a 128x128 accumulator and a 128x128 partial would
    # take 256 registers a thread; two 128x64 blocks and a 128x64 partial take the 192 of the row split's.
    if plan.bm == 64:  # (one warpgroup a CTA keeps its 64x128 block: the CTA's rows of the 128-row cluster tile)
        return replace(plan, cluster=2, stream_k=0, grid=2 * max(1, min(clusters, tiles))), score, tiles
    blocks = CLUSTER_PROMOTED_BLOCKS if spec.accumulation is Accumulation.PROMOTED else plan.partial_blocks
    return replace(plan, cluster=2, consumer_partitions=2, epilogue_subtiles=2 * plan.epilogue_subtiles, stream_k=0,
                   partial_blocks=blocks, grid=2 * max(1, min(clusters, tiles))), score, tiles
