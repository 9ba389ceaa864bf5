"""Rule 22 on sm_90a: a grouped GEMM's plan (`plan_grouped`): its tile by the rows a group holds (`grouped_tile`),
the rest as `planning.sm90.rule.plan` gives the same GEMM ungrouped at that tile, and the last, partial round of tiles
shared as stream-K pieces where it is expected under half full (`last_round_stream_k`, rule 21's kernel over the
group scan's tiles). A Blackwell device's grouped plan is `planning.sm100`'s."""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.errors import NoTileFitsError, UnsupportedError
from warploom.planning.common import k_blocks
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.planning.sm90.models import stream_k_problems
from warploom.planning.sm90.rule import plan, refuse_stream_k
from warploom.planning.sm90.tiles import fused_wide
from warploom.planning.sm100 import plan_blackwell_grouped
from warploom.spec import GemmSpec, Grouping, ScaleRecipe


def grouped_tile(rows_per_group: float) -> tuple[int, int]:
    """Rule 22's tile for a grouped GEMM with this many rows per group on average (the planner cannot see the
    routing: it changes every call, and reading it would sync the host). A group's last tile is partly empty, so
    the tile grows with the rows: 128x256 from 256 rows (at most half a 128-row tile is lost per group, and the
    wide tile reads A once per 256 columns), 64x128 for decode-sized groups of at most 64 rows (a 128-row tile
    would compute at least half zeros), 128x128 in between. Not yet measured against each other on the H100."""
    if rows_per_group >= 256:
        return 128, 256
    if rows_per_group <= 64:
        return 64, 128
    return 128, 128


# Rule 22's last round (H100, Triton 3.9, session 29, bf16 over ragged routings): stream-K's k-block pieces beat whole
# tiles where the expected last round is under half full (8 experts x 8192 rows, N=4096 K=7168, a quarter full:
# 0.761 ms against 0.817 in 4 pieces; N=7168 K=2048, 0.42 full: 0.398 against 0.412 in 2) and lost where it is
# three quarters full (32 experts x 16384 rows, N=2048 K=7168: 0.925 against 0.863). Four pieces paid off at 112
# k-blocks and lost at 32, where two did.
GROUPED_SK_MAX_FILL = 0.5
GROUPED_SK4_MIN_KBLOCKS = 64
# fp8 rowwise (promoted and fast) on its 128x256 tile (H200, Triton 3.6, session 42, ragged routing): 8 experts x 8192
# rows, N=4096 K=7168 (0.24 full, 56 k-blocks of 128): whole tiles 0.460 / 0.431 ms (promoted / fast), 2 pieces 0.446
# / 0.415, 4 pieces 0.442 / 0.415; N=7168 K=2048 (0.42 full, 16 k-blocks): 0.249 / 0.230 whole, 2 pieces 0.257 / 0.237
# (lost). So fp8 shares from GROUPED_SK_FP8_MIN_KBLOCKS (between the two measured), and only below
# GROUPED_SK_FP8_MAX_TRITON: Triton 3.9 assembles the finisher's fp32 partial beside the 128x256 accumulator at the
# 168-register cap with --regAllocOptLevel=2 and spills 1000-1350 bytes (3.6: promoted none, fast 48; 3.7 and 3.8 not
# compiled here).
GROUPED_SK_FP8_MIN_KBLOCKS = 32
GROUPED_SK_FP8_MAX_TRITON = (3, 9)


def expected_grouped_tiles(spec: GemmSpec, bm: int, bn: int) -> float:
    """An M-grouped GEMM's expected tile count on `bm` x `bn` tiles: the rows' own tiles plus half a tile a group
    for each group's ragged last one (the planner cannot see the routing; a uniform remainder wastes half a tile)."""
    return (math.ceil(spec.m / bm) + spec.groups / 2) * math.ceil(spec.n / bn)


def last_round_stream_k(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int) -> int:
    """Rule 22's default stream-K pieces for an M-grouped GEMM (0: whole tiles): where the expected last
    round of tiles (`expected_grouped_tiles`) fills under GROUPED_SK_MAX_FILL of the SMs after at least one full
    round, its tiles are shared in 4 pieces (at least GROUPED_SK4_MIN_KBLOCKS k-blocks, and the expected last round's
    tiles in 4 within the SMs) or 2. fp8 rowwise shares it too from GROUPED_SK_FP8_MIN_KBLOCKS k-blocks, under a
    Triton below GROUPED_SK_FP8_MAX_TRITON (`_fp8_problem`). Masked layouts keep whole tiles (its 64-row tiles beat
    every 128-row variant, stream-K included, by 3-12%, session 29), as do other fp8 recipes and fused epilogues
    (unmeasured with it). `last_round` says why."""
    return last_round(spec, device, bm, bn)[0]


def _fp8_problem(spec: GemmSpec) -> str | None:
    """Why an fp8 M-grouped GEMM keeps whole tiles in its last round, or None where rule 22 may share it."""
    from warploom.backends import gluon_api

    if spec.scale is not ScaleRecipe.ROWWISE or (spec.a_dtype, spec.b_dtype) != (DType.E4M3, DType.E4M3):
        return (f"fp8 {spec.scale.value} scales of {spec.a_dtype.value} x {spec.b_dtype.value} are unmeasured with it "
                "(e4m3 rowwise only)")
    if k_blocks(spec) < GROUPED_SK_FP8_MIN_KBLOCKS:
        return f"fp8 shares it from {GROUPED_SK_FP8_MIN_KBLOCKS} k-blocks ({k_blocks(spec)} here)"
    if gluon_api.current().triton >= GROUPED_SK_FP8_MAX_TRITON:
        low = ".".join(map(str, GROUPED_SK_FP8_MAX_TRITON))
        return f"fp8's finisher spills under Triton {low} and later (the 128x256 accumulator beside a partial)"
    return None


def last_round(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int) -> tuple[int, str]:
    """`last_round_stream_k`'s pieces and why, in `explain`'s words."""
    if (spec.grouping is not Grouping.OFFSETS or spec.epilogue is not None
            or spec.bias_dtype is not None or spec.groups < 1 or bm != 128):
        return 0, ("whole tiles: the last round is shared by default only for M-grouped GEMMs on 128-row tiles "
                   "without a fused epilogue or bias (stream_k=s forces it)")
    fp8 = _fp8_problem(spec) if spec.a_dtype.bytes == 1 else None
    if fp8 is not None:
        return 0, f"whole tiles: {fp8} (stream_k=s forces it)"
    tiles = expected_grouped_tiles(spec, bm, bn)
    rounds = tiles / device.sm_count
    fill = rounds - math.floor(rounds)
    why = (f"{tiles:g} tiles expected (the rows' {math.ceil(spec.m / bm)} plus half a tile for each of {spec.groups} "
           f"groups, times {math.ceil(spec.n / bn)} columns of tiles) on {device.sm_count} SMs")
    if rounds < 1:
        return 0, f"{why}: under one round: whole tiles"
    last = f"{why}: the last of {math.ceil(rounds)} rounds {fill:.2f} full"
    if not 0 < fill < GROUPED_SK_MAX_FILL:
        return 0, f"{last}, not under {GROUPED_SK_MAX_FILL}: whole tiles"
    # (4 pieces only where the expected last round's tiles in 4 still fit the SMs, so each shared tile gets exactly
    # 4: pieces starting at other k-blocks than their neighbours' lost up to 30% in L2, rule 21's session 22)
    rest = math.ceil(fill * device.sm_count)
    pieces = 4 if k_blocks(spec) >= GROUPED_SK4_MIN_KBLOCKS and rest * 4 <= device.sm_count else 2
    if pieces > k_blocks(spec):
        return 0, f"{last}, but {k_blocks(spec)} k-block(s) cannot be cut in {pieces}: whole tiles"
    return pieces, (f"{last}, under {GROUPED_SK_MAX_FILL}: shared as stream-K in {pieces} pieces "
                    f"({k_blocks(spec)} k-blocks)")


def plan_grouped(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                 stages: int | None = None, group_m: int = 8, consumer_partitions: int | None = None,
                 partial_blocks: int | None = None, stream_k: int | None = None,
                 scale_partition: bool | None = None) -> Plan:
    """Rule 22: a grouped GEMM's plan (`GemmSpec.grouping`). The tile is `grouped_tile`'s (or forced); the rest is
    what the other rules give the same GEMM ungrouped at that tile (stages, registers, partitions, epilogue), with
    whole tiles (no split-K, tail or swap: a grouped kernel's tiles are its groups') and the grid at the SM count:
    the tile count is known on the device only, and CTAs without a tile exit at once.

    `stream_k` (0: whole tiles; None: `last_round_stream_k`'s choice): an M-grouped or masked plan whose last,
    partial round of tiles is shared as (tile, k-block) pieces, at most `stream_k` a tile, split on the device from
    the scan's tile count (rule 21's kernel over the group scan's tile ids). The default shares it for bf16/fp16
    M-grouped GEMMs whose expected last round is under half full, and e4m3 rowwise ones below Triton 3.9 from 32
    k-blocks, as measured (docs/decisions/rule-22-grouped.md).

    A Blackwell device's grouped plan is `plan_blackwell_grouped`'s (rule 22 on sm_100a), which refuses the sm_90a
    options forced here (`consumer_partitions`, `partial_blocks`) and a `scale_partition` forced off by name; MX
    scales, which only sm_100a's grouped kernel takes, are refused on sm_90a by name."""
    if device.gfx1250:
        raise UnsupportedError(f"grouped GEMMs (rule 22) are built for sm_90a and sm_100a; {device.name} is "
                               f"{device.arch}. Fix: plan for an sm_90a device (H100_SXM) or an sm_100a one (B200)")
    if device.blackwell:
        return plan_blackwell_grouped(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                                      stream_k=stream_k, consumer_partitions=consumer_partitions,
                                      partial_blocks=partial_blocks, scale_partition=scale_partition)
    if spec.sm90_grouped_problems():
        raise UnsupportedError(f"grouped GEMMs (rule 22) on {device.name} do not take "
                               f"{'; '.join(spec.sm90_grouped_problems())}: {spec.short()}. Fix: plan it for an "
                               "sm_100a device (device=B200)")
    if stream_k and spec.grouping is Grouping.K_OFFSETS:
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: a K-grouped GEMM's tiles "
                               "run their groups' K ranges, not one count of k-blocks to share. Fix: drop stream_k "
                               "(stream-K runs M-grouped and masked grouped GEMMs)")
    # (a K-grouped spec's M is each group's rows already: its groups split K)
    tile = grouped_tile(spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m / max(spec.groups, 1))
    if tile[1] == 256 and spec.epilogue is not None and not fused_wide(spec, 256):
        # Rule 9: promoted fp8 keeps a fused epilogue 128 wide (fp8 rowwise promoted with a SiLU-mul epilogue at
        # 128x256 spilled 1432 bytes: ptxas, Triton 3.6, 8192x4096x7168 over 8 experts)
        tile = (tile[0], 128)
    if stream_k and spec.a_dtype.bytes == 1 and tile[1] == 256:
        # Forced fp8 stream-K keeps 128 wide: the grouped fp8 rowwise 128x256 kernel's fixup beside its per-block
        # scales and the tile's group, origin and row end spilled 876-1344 bytes (ptxas, Triton 3.9, 8192x4096x7168
        # over 8 experts; the dense one 64), 128x128 none; under 3.6, 48 bytes fast and none promoted, where rule 22's
        # own last round takes 128x256 (`_fp8_problem`) and a forced one still the 128-wide tile (bn=256 forces that)
        tile = (tile[0], 128)
    forced_tile = bm is not None or bn is not None
    bm, bn = bm or tile[0], bn or (tile[1] if bm in (None, tile[0]) else 128)
    if stream_k is None:
        stream_k = last_round_stream_k(spec, device, bm, bn)
        if stream_k and stream_k_problems(spec, False, None, None, None, False, bm):
            stream_k = 0
    if consumer_partitions is None and spec.epilogue is not None and (bm, bn) == (128, 128):
        # Rule 9 runs a fused epilogue's two warpgroups as one partition; beside a grouped tile's scan state (group,
        # origin, row end) a dense gate and a per-expert bias spilled 88-92 bytes at 128x128 (ptxas, Triton 3.9,
        # M-grouped and masked alike; 56 without --regAllocOptLevel=2); two partitions, none under 3.6 or 3.9. A
        # fused quantization is the other way round: one partition, as every 128-wide one (a SiLU-mul gate quantized
        # 1x128 at 8192x4096x7168 over 8 experts spilled 8 bytes in two with fp8 rowwise fast under Triton 3.6, 36
        # with promoted blockwise under 3.9, whatever the walk's blocks; none in one).
        consumer_partitions = 1 if spec.epilogue.group_amax() is not None else 2
    dense = replace(spec, grouping=Grouping.NONE, groups=0)
    # (stream-K: no dense operand copied at the tile's start, which a contributor would skip, as rule 21's)
    try:
        dense_plan = plan(dense, device, PlanOptions(bm=bm, bn=bn, stages=stages, group_m=group_m,
                                                     consumer_partitions=consumer_partitions,
                                                     partial_blocks=partial_blocks, split_k=1, tail_split=1,
                                                     swap_ab=False, stream_k=0,
                                                     prefetch_operands=False if stream_k else None))
    except NoTileFitsError:
        if forced_tile:
            raise
        # (its message would name rule 22's own tile as forced, and tell the caller to leave out what it never passed)
        raise NoTileFitsError(f"no tile shape fits {spec.short()} on {device.name}: no ring of rule 22's {bm}x{bn} "
                               f"tile (for {spec.m / max(spec.groups, 1):g} rows a group) fits its "
                               f"{device.smem_per_block} bytes of shared memory a block and its registers. Fix: plan "
                               "for a device that has an sm_90a part's (warploom.H100_SXM), or force a smaller tile "
                               "(bm=64, bn=128)") from None
    if stream_k:
        refuse_stream_k(spec, stream_k, stream_k_problems(spec, False, None, None, None, False, dense_plan.bm))
    # Rule 10's per-block scales for fp8 rowwise on a 256-wide tile even without a bias: beside a grouped tile's
    # group, origin and row end the whole-width scale vectors spilled 16 bytes (ptxas, 8192x4096x7168), per block none.
    block = dense_plan.block_epilogue or (spec.scale is ScaleRecipe.ROWWISE and dense_plan.bn == 256)
    # Blockwise fp8 on 128x256 stores 64x64 blocks, not 64x128: a group's ragged last tile reads its staged block
    # back for the masked stores, and a 64x128 one beside the promoted mainloop's accumulator spilled 52 bytes
    # (ptxas, Triton 3.6, 8192x4096x7168 over 8 experts); 64x64 ones, none.
    subtiles = dense_plan.epilogue_subtiles
    if spec.scale.is_blockwise and dense_plan.bn == 256:
        subtiles = max(subtiles, 4)
    return replace(dense_plan, grid=device.sm_count, block_epilogue=block, epilogue_subtiles=subtiles,
                   stream_k=stream_k or 0)
