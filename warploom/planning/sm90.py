"""sm_90a's planner rule: a TMA producer warp and wgmma consumer warpgroups, cooperative or ping-pong; `plan` and
its phases, from the device's refusals and the forced options' checks through the shortcuts (rules 18, 23 and 25)
and the candidate search over `sm90_tiles.TILES` (rules 9-17, 21 and 24) to rule 30's short-K ping-pong. The tile
menu and its resources are `sm90_tiles.py`'s, the cost models (rules 15, 21, 23-25) `sm90_models.py`'s, the fused
quantize and gate/up epilogues' limits (rules 26-29) `sm90_fused.py`'s and rule 22's grouped GEMMs
(`plan_grouped`, which comes before `plan` in `plan_schedule`) `sm90_grouped.py`'s. `plan` is the target's (its
declaration's `plan`, `warploom.targets.sm90`); every rule of `warploom.planner`'s list but 19 and 20."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.errors import UnsupportedError
from warploom.planning.common import (
    SWAP_TOKENS,
    dense_operands,
    is_decode,
    k_block,
    k_blocks,
    swap_decode,
    swap_tokens,
)
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.planning.sm90_models import (
    CLUSTER_MARGIN,
    CLUSTER_PARTIAL_MAX_PAD,
    CLUSTER_PROMOTED_BLOCKS,
    SK_PIECES,
    cluster_measured,
    cluster_min_kblocks,
    cluster_plan,
    cluster_problems,
    cluster_row_pad,
    cta_kblocks,
    decode_split,
    latency_split,
    latency_stages,
    latency_tiles,
    rule15_tail,
    stream_k_grid,
    stream_k_problems,
    stream_k_score,
    tail_score,
)
from warploom.planning.sm90_tiles import (
    FUSED_WIDE_SLOTS,
    TILES,
    block_epilogue,
    epilogue_subtiles,
    fused_wide,
    long_k_16bit,
    max_stages,
    mx_registers,
    pingpong_fits,
    rows_aligned,
    swap_rows,
    tall_problems,
    tile_efficiency,
)
from warploom.planning.trace import collecting, note
from warploom.spec import Accumulation, GemmSpec, ScaleLayout, ScaleRecipe
from warploom.target import Target

# Rule 13's recipes: measured on the H100 (MX's 32-deep promotions were not, and keep 128-row tiles).
_SMALL_M_RECIPES = (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128)
# A forced depth may go deeper, as far as shared memory holds (to measure deeper rings).
_FORCED_MAX_STAGES = 16
# Rule 17: four consumer warpgroups and the producer's: 4 x 128 x 112 + 128 x 24 = 60416 of the 65536 registers.
_TALL_CONSUMER_REGS = 112


# Rule 24's forced cluster knob (`plan_schedule(cluster=...)`): its value -> CTAs per cluster; "1x2" puts them along
# N (ShareA), every other 2 along M (ShareB).
CLUSTER_KNOBS: dict[int | str | None, int | None] = {None: None, 1: 1, 2: 2, "2x1": 2, "1x2": 2}


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """The sm_90a target's rule (its declaration's `plan`): rules 1-18 and 21-25 (and the refusal of an AMD GPU
    other than gfx1250), after `warploom.planner.plan_schedule` ran rules 26 and 22 and the options' own checks
    (a TDM warp choice is gfx1250's, refused there). Rule 18's swapped problem, rules 23 and 25's forced tiles and
    rule 22's dense plan come back here with options of their own.

    `options` stay as the caller forced them (the shortcuts and rule 30 ask whether anything was); `o` is what the
    phases before the candidate loop resolved them to."""
    _refuse_device(spec, device)
    # A forced 2-CTA cluster takes no swap, stream-K or split-K; a forced stream-K no swap and no early operand
    # copies: the shortcuts below see the options as these two phases left them.
    o = _cluster_options(spec, device, options)
    o = _stream_k_options(spec, o)
    # The shortcuts re-enter `plan` with options of their own; in this order rule 25's decode ranges win over rule
    # 18's swap, and the swap over rule 25's other split tiles and rule 23's.
    shortcut = _decode_split(spec, device, options, o)
    if shortcut is not None:
        return shortcut
    if o.swap_ab is None:
        o = replace(o, swap_ab=not o.pingpong and not _forces_tile(options) and swap_decode(spec))
    if o.swap_ab:
        return _plan_swapped(spec, device, o)
    shortcut = _latency_split(spec, device, options, o)
    if shortcut is None:
        shortcut = _latency_tiles(spec, device, options, o)
    if shortcut is not None:
        return shortcut
    bk = k_block(spec)
    scale_partition = _check_forced(spec, o, bk)
    best = _search(_Search.of(spec, device, o, bk, scale_partition))
    return _choose(spec, device, options, o, best)


def _forces_tile(options: PlanOptions) -> bool:
    """Whether the caller forced the tile, its depth, its partitions or blocks, the scale partition or split-K:
    the rules that pick a schedule of their own (18, 23, 25, 30) then stand aside."""
    return any(f is not None for f in (options.bm, options.bn, options.stages, options.consumer_partitions,
                                       options.partial_blocks, options.scale_partition, options.split_k,
                                       options.tail_split))


def _refuse_device(spec: GemmSpec, device: DeviceInfo) -> None:
    """What sm_90a cannot run at all: an AMD GPU other than gfx1250 (rule 20's), fp4 (no fp4 MMA) and MX scales in
    torch's blocked layout (sm_100a's)."""
    if device.arch.startswith("gfx") and not device.gfx1250:
        raise UnsupportedError(f"{device.name} ({device.arch}): among AMD GPUs warploom plans gfx1250 only (rule 20). "
                               "Fix: plan for device=GFX1250 to inspect its schedule, or run on an sm_90a GPU")
    if spec.is_fp4:
        raise UnsupportedError(f"{device.name} (sm_90a) has no fp4 MMA: MX fp4 and NVFP4 (e2m1) plan for sm_100a's "
                               f"block-scaled tcgen05 MMA only, got {spec.scale.value} scales. Fix: plan for an "
                               "sm_100a device (device=B200), or quantize to torch.float8_e4m3fn with MX scales for "
                               "sm_90a")
    if spec.scale_layout is ScaleLayout.BLOCKED:
        raise UnsupportedError(f"{device.name} (sm_90a) reads MX scales row-major, (M, K/32) and (N, K/32), element by "
                               "element; torch's blocked layout is sm_100a's (tcgen05.cp). Fix: pass the scales before "
                               "to_blocked, or plan for an sm_100a device (device=B200)")


def _cluster_options(spec: GemmSpec, device: DeviceInfo, o: PlanOptions) -> PlanOptions:
    """Rule 24's forced knob (`cluster=`): refuse a value outside `CLUSTER_KNOBS`, and a 2-CTA cluster that cannot
    run `spec` with the other options (`cluster_problems`, one SM, promoted fp8 in other than
    CLUSTER_PROMOTED_BLOCKS blocks). A cluster's tiles are whole: no swap, stream-K or split-K."""
    knob = o.cluster
    if isinstance(knob, bool) or knob not in CLUSTER_KNOBS:  # (True == 1 as a key: it planned one CTA per tile)
        raise UnsupportedError(f"cluster={knob!r}: expected None (rule 24 decides), 1 (one CTA per tile), 2 or "
                               "\"2x1\" (2-CTA clusters along M that multicast B) or \"1x2\" (along N, multicasting A)")
    if CLUSTER_KNOBS[knob] != 2:
        return o
    problems = cluster_problems(spec, o.pingpong, o.scale_partition, o.split_k, o.tail_split, o.stream_k, o.swap_ab,
                                o.bm, o.bn, o.consumer_partitions, knob == "1x2")
    if device.sm_count < 2:
        problems.append(f"{device.name} has {device.sm_count} SM (a 2-CTA cluster runs on two)")
    if problems:
        raise UnsupportedError(f"cluster={knob!r} (rule 24) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop cluster (or the option that conflicts with it)")
    if spec.accumulation is Accumulation.PROMOTED and o.partial_blocks not in (None, CLUSTER_PROMOTED_BLOCKS):
        # (cluster_plan promotes each warpgroup's 128 columns in 64-column blocks: 128-column ones would not fit)
        raise UnsupportedError(f"cluster={knob!r} (rule 24) with partial_blocks={o.partial_blocks}: expected "
                               f"{CLUSTER_PROMOTED_BLOCKS} (promoted fp8 in a cluster promotes each warpgroup's "
                               "128 columns in two 64-column blocks). Fix: drop partial_blocks (or pass "
                               f"{CLUSTER_PROMOTED_BLOCKS}), or drop cluster")
    return replace(o, swap_ab=False, stream_k=0, split_k=1, tail_split=1)


def _stream_k_options(spec: GemmSpec, o: PlanOptions) -> PlanOptions:
    """Rule 21's refusals of a forced `stream_k` (`refuse_stream_k`). A stream-K plan is never swapped."""
    if not o.stream_k:
        return o
    problems = stream_k_problems(spec, o.pingpong, o.scale_partition, o.split_k, o.tail_split, o.swap_ab, o.bm,
                                 o.prefetch_operands)
    refuse_stream_k(spec, o.stream_k, problems)
    # (a forced stream-K plan copies dense operands when its epilogue runs)
    return replace(o, prefetch_operands=False, swap_ab=False)


def _chooses_freely(options: PlanOptions, o: PlanOptions) -> bool:
    """Whether nothing that rule 25's forced tiles would override was forced: no tile, depth, split,
    stream-K, ping-pong, early operand copies or hoisted rows."""
    return (o.stream_k is None and o.split_k is None and o.tail_split is None and not o.pingpong
            and not _forces_tile(options) and o.prefetch_operands is None and o.hoist_rows is None)


def _decode_split(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 25 at decode sizes (`decode_split`): 64x64 tiles with K split in ranges, where nothing is forced (nor
    rule 18's swap: it stands aside only where the caller left swap_ab to the rules)."""
    if o.swap_ab is not None or not _chooses_freely(options, o):
        return None
    ranges = decode_split(spec, device)
    if ranges <= 1:
        return None
    with collecting(None):  # (the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=64, bn=64, group_m=o.group_m, scalar_columns=o.scalar_columns,
                                              split_k=ranges, tail_split=1, swap_ab=False, stream_k=0))


def _plan_swapped(spec: GemmSpec, device: DeviceInfo, o: PlanOptions) -> Plan:
    """Rule 18: C^T = B^T A^T, planned as its own problem (`GemmSpec.swapped`) on tiles of `swap_rows` rows of N by
    `swap_tokens` of M (or the forced bm and bn), refused with ping-pong, split-K or the scale partition."""
    problems = spec.swap_problems()
    problems += ["ping-pong"] if o.pingpong else []
    problems += ["split-K"] if o.split_k not in (None, 1) or o.tail_split not in (None, 1) else []
    problems += ["the scale partition"] if o.scale_partition else []
    if problems:
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: {'; '.join(problems)}; "
                               "drop swap_ab")
    tokens = o.bn or swap_tokens(spec.m)
    rows = o.bm or swap_rows(spec.n, device.sm_count)
    try:
        swapped = plan(spec.swapped(), device, PlanOptions(
            bm=rows, bn=tokens, stages=o.stages, group_m=o.group_m, consumer_partitions=o.consumer_partitions,
            partial_blocks=o.partial_blocks, hoist_rows=o.hoist_rows, scalar_columns=o.scalar_columns,
            prefetch_operands=o.prefetch_operands, split_k=1, tail_split=1, swap_ab=False, stream_k=0,
            cluster=1))  # (a swapped plan runs one CTA a tile: rule 24 would cluster the swapped problem's tiles)
    except UnsupportedError as e:
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {rows} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}") from None
    return replace(swapped, swap_ab=True)


def _latency_split(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 25 (`latency_split`): square tiles with K split in ranges, where nothing is forced."""
    if not _chooses_freely(options, o):
        return None
    split = latency_split(spec, device)
    if split.ranges <= 1:
        return None
    with collecting(None):  # (as below: the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=split.size, bn=split.size, group_m=o.group_m,
                                              scalar_columns=o.scalar_columns, split_k=split.ranges,
                                              tail_split=1, swap_ab=False, stream_k=0))


def _latency_tiles(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 23 (`latency_tiles`): whole 64x64 tiles in `latency_stages`' ring, where no tile, depth, stream-K,
    ping-pong or operand choice is forced."""
    if (o.stream_k is not None or o.pingpong or _forces_tile(options) or o.prefetch_operands is not None
            or o.hoist_rows is not None or not latency_tiles(spec, device)):
        return None
    with collecting(None):  # (the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=64, bn=64, stages=latency_stages(spec), group_m=o.group_m,
                                              scalar_columns=o.scalar_columns, split_k=1, tail_split=1,
                                              swap_ab=False, stream_k=0))


def _check_forced(spec: GemmSpec, o: PlanOptions, bk: int) -> bool:
    """The forced options' own limits, each refused with what to pass instead: split-K and its tail
    (`_check_split_k`), consumer partitions, rule 17's 256-row tile (`tall_problems`), partial blocks, ping-pong,
    and rule 12's scale partition, which this returns resolved (None: on for MX scales only)."""
    split_k, tail_split, consumer_partitions, bm = o.split_k, o.tail_split, o.consumer_partitions, o.bm
    if split_k is not None:
        _check_split_k(spec, split_k, bk, o.pingpong, o.scale_partition)
    if tail_split is not None and tail_split != 1:
        if split_k not in (None, 1):
            raise UnsupportedError(f"tail_split={tail_split} with split_k={split_k}: a split-K tail follows whole "
                                   "tiles, and split-K splits them all; pass one of the two")
        _check_split_k(spec, tail_split, bk, o.pingpong, o.scale_partition, what="tail_split")
    if consumer_partitions not in (None, 1, 2, 4):
        raise UnsupportedError(f"consumer_partitions={consumer_partitions!r}: expected 1 (one partition for all "
                               "consumer warpgroups), 2 (one per warpgroup) or 4 (bm=256's four warpgroups); pass "
                               "1, 2 or 4, or None to let the planner choose")
    if consumer_partitions == 4 and bm != 256:
        raise UnsupportedError("consumer_partitions=4 is for bm=256 (four consumer warpgroups); pass bm=256, or "
                               "1 or 2 partitions")
    if bm == 256:
        tall = tall_problems(spec, o.pingpong, bool(o.scale_partition), split_k, tail_split, consumer_partitions)
        if tall:
            raise UnsupportedError(f"bm=256 (rule 17's tile, four consumer warpgroups) does not support "
                                   f"{'; '.join(tall)} for {spec.short()}; use bm=128")
    if consumer_partitions == 2 and bm == 64:
        raise UnsupportedError("consumer_partitions=2 needs two consumer warpgroups, but bm=64 has one; "
                               "use bm=128 or consumer_partitions=1")
    if o.partial_blocks not in (None, 1, 2, 4):
        raise UnsupportedError(f"partial_blocks={o.partial_blocks!r}: expected 1 (promote the whole tile width), "
                               "2 (two column halves) or 4 (quarters, forced only: measured 9-16% slower than 2 at "
                               "128x256, session 19); pass 1, 2 or 4, or None to let the planner choose")
    if o.pingpong and consumer_partitions == 1:
        raise UnsupportedError("pingpong=True needs two consumer partitions (one warpgroup each), but "
                               "consumer_partitions=1; pass consumer_partitions=2 or None")
    scale_partition = o.scale_partition
    if scale_partition is None:
        # Rule 12: MX scales are single bytes, which cp.async (4, 8 or 16 bytes a copy) cannot move one by one:
        # the scale partition loads them with ordinary loads and decodes them on the way.
        scale_partition = spec.scale is ScaleRecipe.MX
    if spec.scale is ScaleRecipe.MX and not scale_partition:
        raise UnsupportedError("MX scales need the scale partition (cp.async cannot copy single bytes); drop "
                               "scale_partition=False")
    if scale_partition and not spec.scale.is_blockwise:
        raise UnsupportedError(f"scale_partition=True needs blockwise scales, but {spec.short()} has "
                               f"{spec.scale.value} ones; drop scale_partition")
    if scale_partition and o.pingpong:
        raise UnsupportedError("the scale partition (scale_partition=True, and always for MX scales) with "
                               "pingpong=True is not built yet: a ping-pong consumer would have to skip the other's "
                               "scale stages too; use one of the two")
    return scale_partition


@dataclass(frozen=True)
class _Search:
    """What every candidate tile of one `plan` call shares.

    Attributes:
        spec, device: the problem and the GPU.
        o: the options as the phases before the loop resolved them (its `cluster` is the knob as passed, its
            `scale_partition` as forced).
        scale_partition: rule 12's scale partition, resolved (`_check_forced`).
        cluster, along_n: rule 24's knob as CTAs per cluster (`CLUSTER_KNOBS`; None: rule 24 decides) and whether
            they lie along N ("1x2").
        bk: the k-block.
        small_blockwise, decode, aligned: rule 13's small-M blockwise case, rule 16's decode case, `rows_aligned`.
        cap: the ring's depth limit for `max_stages` (None: its own, rule 16's for decode).
    """

    spec: GemmSpec
    device: DeviceInfo
    o: PlanOptions
    cluster: int | None
    along_n: bool
    bk: int
    scale_partition: bool
    small_blockwise: bool
    decode: bool
    aligned: bool
    cap: int | None

    @staticmethod
    def of(spec: GemmSpec, device: DeviceInfo, o: PlanOptions, bk: int, scale_partition: bool) -> _Search:
        """The shared context of `plan`'s candidates, once `_check_forced` has resolved the scale partition."""
        return _Search(
            spec, device, o, CLUSTER_KNOBS[o.cluster], o.cluster == "1x2", bk, scale_partition,
            # Rule 13, as measured: the plain cooperative kernel with its scales in the A/B stages.
            small_blockwise=(spec.scale in _SMALL_M_RECIPES and spec.m <= 128 and not o.pingpong
                             and not scale_partition),
            decode=is_decode(spec, o.pingpong), aligned=rows_aligned(spec),
            cap=_FORCED_MAX_STAGES if o.stages is not None else None)  # (None: max_stages's own, rule 16's for decode)


@dataclass(frozen=True)
class _Tile:
    """A candidate tile that `_tile` let through.

    Attributes:
        bm, bn: its shape. eff: `tile_efficiency`. partial_blocks: promoted fp8's column blocks (1 if native).
        wide: rule 9's wide fused epilogue (`fused_wide`). early: dense operands copied early (rule 9).
    """

    bm: int
    bn: int
    eff: float
    partial_blocks: int
    wide: bool
    early: bool


_Best = tuple[float, int, Plan]


def _search(s: _Search) -> _Best | None:
    """Steps 3 and 4 over `TILES`: each tile the filter lets through, at its depth and split (rules 14-16), with
    rule 15's tail or rule 21's stream-K where they score better, then rule 24's cluster of it; the best (score,
    -area, plan) found, ties going to the larger tile."""
    best: _Best | None = None
    for cbm, cbn, _ in TILES:
        tile = _tile(s, cbm, cbn)
        if tile is None:
            continue
        scored = _scored_plan(s, tile)
        if scored is None:
            continue
        score, candidate = scored
        key = (score, -cbm * cbn, candidate)
        if s.cluster == 2:
            key = (math.inf, 0, candidate)  # (forced: only rule 24's candidate below may win)
        if best is None or key[:2] < best[:2]:
            best = key
        best = _cluster_step(s, tile, candidate, best)
    return best


def _tile(s: _Search, cbm: int, cbn: int) -> _Tile | None:
    """The tile filter: None where `cbm` x `cbn` is not forced and no rule lets the planner choose it (rules 9, 12,
    13, 16, 17 and 18's tiles), or where its registers cannot hold it (ping-pong, promoted fp8)."""
    spec, o = s.spec, s.o
    bm, bn, pingpong = o.bm, o.bn, o.pingpong
    if (bm is not None and cbm != bm) or (bn is not None and cbn != bn):
        return None
    eff = tile_efficiency(spec, cbm, cbn)
    if cbm == 256 and bm is None and (not long_k_16bit(spec) or tall_problems(
            spec, pingpong, bool(s.scale_partition), o.split_k, o.tail_split, o.consumer_partitions)):
        return None  # rule 17: otherwise forced (or tuned) only
    if pingpong and not pingpong_fits(spec, cbm, cbn, o.partial_blocks):
        return None
    if cbn == 64 and bn is None and not (s.small_blockwise or s.decode):
        return None  # forced only: see TILES
    if cbn in SWAP_TOKENS and bn is None:
        return None  # rule 18: the swapped decode tile, forced (or by rule 18) only
    if bm is None and cbm == 64 and spec.m > 64 and not s.small_blockwise:
        return None  # a 64-row tile only pays when M itself is small
    if cbm == 64 and o.consumer_partitions == 2 and not pingpong:
        return None  # one warpgroup cannot be split in two row blocks
    promoted = spec.accumulation is Accumulation.PROMOTED
    # Promoted fp8 at 256 wide promotes in two column blocks: a 64x256 accumulator and a 64x256 partial
    # per warpgroup would need 256 registers per thread, a 64x128 partial leaves room (192).
    # Likewise a ping-pong warpgroup's whole 128x128 (64x256) accumulator.
    wide = cbn == 256 or (pingpong and cbm * cbn >= 128 * 128)
    blocks = (o.partial_blocks or (2 if wide else 1)) if promoted else 1
    if promoted and cbn == 256 and blocks == 1:
        return None  # acc + whole-width partial: 256 registers per thread
    if bn is None and cbn == 256 and spec.scale is ScaleRecipe.MX:
        return None  # rule 12: MX at 256 wide spills 248-440 bytes whatever the budgets (ptxas, 2026-11-23)
    wide = fused_wide(spec, cbn, pingpong)
    # Rule 9 copies a dense operand's blocks early, through two buffers each (forced off: one, as at 128 wide).
    early = (wide and bool(dense_operands(spec))) if o.prefetch_operands is None else o.prefetch_operands
    if bn is None and cbn == 256 and spec.epilogue is not None and not wide:
        return None  # rule 9: promoted fp8 and ping-pong keep fused epilogues 128 wide
    if (bn is None and promoted and cbn == 256 and spec.bias_dtype
            and spec.out_dtype.bytes == 4 and not (spec.scale is ScaleRecipe.TENSORWISE
                                                   and spec.bias_dtype.bytes == 4)):
        return None  # fp32 output + bias on the promoted 256-wide tile spills 8-40 bytes (ptxas, 2026-11-22)
    return _Tile(cbm, cbn, eff, blocks, wide, early)


def _depth(s: _Search, t: _Tile) -> tuple[int, int] | None:
    """(split-K ranges, stages) of tile `t`: rule 14's split unless forced (a forced tail splits no tile), and the
    deepest ring that fits beside its staging (rule 16's for decode); None where a forced depth does not fit or a
    chosen one is not double buffered, or rule 9's wide epilogue gets under 3 stages."""
    spec, o = s.spec, s.o
    stages, split_k = o.stages, o.split_k
    ks = split_k if split_k is not None else _rule14_split(spec, s.device, t.bm, t.bn, o.pingpong, s.scale_partition)
    if o.tail_split is not None and o.tail_split > 1:
        ks = 1  # a forced tail follows whole tiles: rule 14 does not split them
    fit = max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, split_k=ks, prefetch=t.early,
                     cap=s.cap)
    if split_k is None and ks > 1 and stages is not None and stages > fit:
        ks = 1  # a forced depth that only fits beside the output's staging tile, not the fp32 partials'
        fit = max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, prefetch=t.early,
                         cap=s.cap)
    promoted = spec.accumulation is Accumulation.PROMOTED
    # Promoted fp8 measured 1-3% faster at 3 stages than at 4 (docs/benchmarks.md, sweeps of 2026-11-22).
    depth = (min(fit, 3) if promoted and t.bn == 256 else fit) if stages is None else stages
    if depth < 1 or depth > fit or (stages is None and depth < 2):
        return None  # a forced depth must still fit; chosen depths are at least double buffered
    if t.wide and o.bn is None and stages is None and depth < 3:
        return None  # rule 9: the slotted wide epilogue was measured at 3-4 stages; with many outputs, 128 wide
    return ks, depth


def _tail(s: _Search, t: _Tile, ks: int, depth: int) -> tuple[int, int] | None:
    """Rule 15's split-K tail of tile `t`'s last wave (forced, or `rule15_tail`'s where the tiles are whole):
    (its k-ranges, its stages); (1, 0) for none. None where a forced tail's fp32 staging leaves no stage."""
    spec, o = s.spec, s.o
    ts, tail_s = 1, 0
    if ks == 1 and o.tail_split is None and (s.decode and (t.bm, t.bn) == (64, 64) or t.bm == 256):
        ts = 1  # rules 16 and 17's tiles take no split-K tail: unmeasured there (rule 15's cost is 128x256's)
    elif ks == 1:
        ts = o.tail_split if o.tail_split is not None else rule15_tail(spec, s.device, t.bm, t.bn, s.bk, o.pingpong,
                                                                       s.scale_partition, t.eff)
    if ts > 1:
        tail_s = min(depth, max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, split_k=ts))
        if tail_s < 2 and o.tail_split is None:
            ts = 1  # the tail's fp32 staging leaves no double-buffered ring
        elif tail_s < 1:
            return None
    return ts, tail_s


def _scored_plan(s: _Search, t: _Tile) -> tuple[float, Plan] | None:
    """Tile `t`'s plan and score (step 4: rounds of work units times the tile's cost per FLOP), at `_depth`'s split
    and ring, with `_tail`'s split-K tail, or rule 21's stream-K (`_stream_k_step`) where it scores better; each
    noted for `explain`. None where `_depth` or `_tail` refuse it."""
    spec, device = s.spec, s.device
    depth = _depth(s, t)
    if depth is None:
        return None
    ks, stages = depth
    tail = _tail(s, t, ks, stages)
    if tail is None:
        return None
    ts, tail_s = tail
    tiles = max(1, math.ceil(spec.m / t.bm) * math.ceil(spec.n / t.bn)) * ks  # work units
    # A unit of a split tile does 1/ks of its work (the reduction's cost is rule 14's thresholds).
    score = math.ceil(tiles / device.sm_count) * t.bm * t.bn / t.eff / ks
    grid = min(device.sm_count, tiles)
    if ts > 1:
        score = tail_score(tiles, grid, ts, t.bm * t.bn / t.eff, math.ceil(spec.k / s.bk))
    note(f"{t.bm}x{t.bn}", "split-K tail" if ts > 1 else "split-K" if ks > 1 else "whole tiles", score,
         f"{tiles} units, {math.ceil(tiles / device.sm_count)} round(s) of {device.sm_count} CTAs"
         + (f", the last wave's {tiles % device.sm_count} tiles in {ts} k-ranges" if ts > 1 else ""))
    sk = 0
    if ks == 1:
        stream = _stream_k_step(s, t, tiles, score)
        if stream is not None:
            sk, score, grid = stream
            ts, tail_s = 1, 0
    return score, _tile_plan(s, t, stages, ks, ts, tail_s, sk, grid)


def _stream_k_step(s: _Search, t: _Tile, tiles: int, score: float) -> tuple[int, float, int] | None:
    """Rule 21: the last, partial wave of whole tiles shared as k-block pieces, forced (`stream_k`) or where it
    scores better than `score`: (pieces, score, grid), or None for whole tiles."""
    spec, device, o = s.spec, s.device, s.o
    stream_k = o.stream_k
    # (the planner's own choice: native accumulation only; promoted fp8's two column-block accumulators ran its
    # fixup 40% slower at 6320x6848x5648, session 22, so it is forced only)
    if not ((stream_k or stream_k is None and spec.accumulation is Accumulation.NATIVE)
            and tiles % device.sm_count and not stream_k_problems(
            spec, o.pingpong, s.scale_partition, o.split_k, o.tail_split, False, t.bm, t.early)):
        return None
    k_tiles = math.ceil(spec.k / s.bk)
    best: tuple[int, float, int] | None = None
    # (chosen by the planner only where every shared tile gets exactly `pieces` pieces: pieces that start
    # at other k-blocks than whole pieces of their neighbours lost up to 30% in L2, session 22; and never
    # more pieces than k-blocks, which would leave a CTA nothing to add to its tile)
    for pieces in (stream_k,) if stream_k else (p for p in SK_PIECES if tiles % device.sm_count * p
                                                <= device.sm_count and p <= k_tiles):
        sk_score = stream_k_score(tiles, k_tiles, device.sm_count, pieces, t.bm * t.bn / t.eff)
        note(f"{t.bm}x{t.bn}", f"stream-K, {pieces} pieces", sk_score,
             f"{tiles // device.sm_count} whole wave(s), then {tiles % device.sm_count} tiles over "
             f"{min(device.sm_count, tiles % device.sm_count * pieces)} CTAs")
        if stream_k or sk_score < score:
            score = sk_score
            best = pieces, sk_score, stream_k_grid(tiles, device.sm_count, pieces)
    return best


def _tile_plan(s: _Search, t: _Tile, stages: int, ks: int, ts: int, tail_s: int, sk: int, grid: int) -> Plan:
    """The one-CTA plan of tile `t` at this depth and split: rule 9's partitions, hoisting and slots for a fused
    epilogue, rule 10's block epilogue, rule 12's MX register budgets, rule 17's four warpgroups."""
    spec, o = s.spec, s.o
    pingpong = o.pingpong
    block = block_epilogue(spec, t.bn, pingpong)
    # Rule 9: fused epilogues run their consumer warpgroups as one partition (its code once, not twice);
    # the wide one loads vectors a block ahead instead of hoisting all 8 blocks' (which would spill).
    # (Promoted fp8 keeps two: its promotions in the k-loop need each warpgroup to release slots on its own,
    # measured 10% for plain promoted kernels; fused ones at one partition are unmeasured.)
    fused_parts = 1 if spec.epilogue is not None and spec.accumulation is Accumulation.NATIVE else 2
    # hoist_rows None: hoisted row vectors of every column block stay live beside a ping-pong warpgroup's whole
    # accumulator and spill (200 bytes at 128x128 in quarters; its epilogue overlaps the other's mainloop anyway),
    # and beside the wide fused epilogue's 8 blocks (rule 9, which loads each block's one block ahead instead).
    hoist = o.hoist_rows if o.hoist_rows is not None else not (pingpong or t.wide)
    # Rule 27's 256-wide rowwise walk loads each block right before its fold, every fold before any division:
    # loads a block ahead (which go before the previous block's division) would follow their block's fold.
    # (rule 29's first pass walks nothing: each block folds and stores in turn, so its loads may go ahead)
    walks = spec.epilogue is not None and spec.epilogue.reads_amax()
    return Plan(
        bm=t.bm, bn=t.bn, bk=s.bk, stages=stages, consumer_warps=8 if pingpong else 4 * (t.bm // 64),
        group_m=o.group_m, grid=grid,
        epilogue_subtiles=epilogue_subtiles(t.bn, pingpong, spec.epilogue is not None, t.bm, block, t.wide),
        block_epilogue=block,
        consumer_partitions=(2 if pingpong else 1 if t.bm == 64 else 4 if t.bm == 256
                             else (o.consumer_partitions or fused_parts)),
        partial_blocks=t.partial_blocks, hoist_rows=hoist, scalar_columns=o.scalar_columns,
        prefetch_operands=t.early, pingpong=pingpong, scale_partition=s.scale_partition, split_k=ks,
        tail_split=ts, tail_stages=tail_s,
        staging_slots=FUSED_WIDE_SLOTS if t.wide else 1,
        operand_slots=FUSED_WIDE_SLOTS if t.wide and t.early and dense_operands(spec) else 1,
        load_ahead=t.wide and not hoist and not walks, swap_ab=False, target=Target.SM90A, tdm_fused=False,
        stream_k=sk,
        block_scaled=False, promote_tmem=False, cluster_n=False, amax_pass=False,
        **mx_registers(spec, t.bm, pingpong),
        **({"consumer_regs": _TALL_CONSUMER_REGS} if t.bm == 256 else {}),
    )


def _cluster_step(s: _Search, t: _Tile, candidate: Plan, best: _Best) -> _Best:
    """Rule 24: the 2-CTA cluster of a whole-tile 128x256 candidate (128x128 ping-pong, forced only), which
    replaces `best` where it is forced or where nothing passes it over (`explain` notes why it is). Refuses a
    forced 1x2 cluster whose whole-row staging leaves too few stages."""
    spec, device, o = s.spec, s.device, s.o
    pingpong, cluster, along_n = o.pingpong, s.cluster, s.along_n
    cbm, cbn = t.bm, t.bn
    if not ((cbm, cbn) == ((128, 128) if pingpong else (128, 256)) and cluster != 1 and candidate.split_k == 1
            and candidate.tail_split == 1 and (
                cluster == 2 or not pingpong and device.sm_count >= 2 and not (  # (a cluster needs two SMs)
                    s.aligned or cluster_problems(spec, pingpong, s.scale_partition, o.split_k, o.tail_split,
                                                  o.stream_k, o.swap_ab, o.bm, o.bn, o.consumer_partitions)))):
        return best
    # (ping-pong clusters are forced only: unmeasured, issue 24; `pingpong` is itself forced)
    # (1x2: its warpgroups store whole 64x256 blocks, twice the staging of the row split's halves)
    whole_rows = max_stages(spec, device, cbm, cbn, s.bk, cap=s.cap, subtiles=1)
    # (a partial wave's gain: at a long K, on cluster tiles that pad M little)
    long_k, pad = long_k_16bit(spec), cluster_row_pad(spec)
    partial = long_k and pad <= CLUSTER_PARTIAL_MAX_PAD
    cl_plan, cl_score, cl_tiles = cluster_plan(candidate, spec, device, t.eff, s.aligned, along_n, whole_rows,
                                               partial)
    # (why rule 24 passes it over unforced: `explain` says so beside its score)
    kblocks, floor = cta_kblocks(spec, cl_tiles, device), cluster_min_kblocks(spec)
    passed_over = [why for why, holds in (
        (f"under a whole wave of {device.sm_count // 2} clusters"
         + (f" (a long K, but 256-row tiles pad M by {pad:.0%}, over {CLUSTER_PARTIAL_MAX_PAD:.0%})" if long_k
            else ""), cl_tiles < device.sm_count // 2 and not partial),
        (f"not {100 - round(100 * CLUSTER_MARGIN)}% ahead of the best", cl_score >= CLUSTER_MARGIN * best[0]),
        (f"{kblocks:.0f} k-blocks a CTA, under the floor of {floor}", kblocks < floor),
        ("forced only for promoted or blockwise fp8 and fused epilogues (not measured)",
         not cluster_measured(spec))) if holds]
    note(f"{cbm}x{cbn}", "2-CTA clusters" + (" along N" if along_n else " of ping-pong consumers" if pingpong
                                             else ""), cl_score,
         f"{cl_tiles} cluster tiles of {'128x512' if along_n else f'{2 * cbm}x{cbn}'}, "
         f"{math.ceil(cl_tiles / (device.sm_count // 2))} round(s) of {device.sm_count // 2} clusters, "
         f"{'A' if along_n else 'B'} multicast" + ("" if s.aligned else ", rows unaligned")
         + (f", a long K: the partial wave gains too (M padded {pad:.1%})"
            if partial and cl_tiles < device.sm_count // 2 else "")
         + (f"; not taken: {'; '.join(passed_over)}" if passed_over and cluster != 2 else ""))
    if along_n and (whole_rows < 1 or o.stages is not None and o.stages > whole_rows):
        raise UnsupportedError(f"cluster={o.cluster!r} (rule 24) with stages={o.stages}: expected at most "
                               f"{whole_rows} stages of {spec.short()} beside a 1x2 cluster's whole-row "
                               f"staging on {device.name}. Fix: pass stages <= {whole_rows}, or use "
                               "cluster=2 (2x1)")
    if cluster == 2 or not passed_over:
        return cl_score, -cbm * cbn, cl_plan
    return best


def _choose(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions, best: _Best | None) -> Plan:
    """The search's winner, refused where a forced cluster found no cluster plan or no tile fit at all (with a hint
    for ping-pong and promoted fp8's whole-width partial); rule 30's ping-pong 128x128 where nothing is forced and
    `short_k_pingpong` prefers it."""
    pingpong, stages, bn, partial_blocks = o.pingpong, o.stages, o.bn, o.partial_blocks
    if CLUSTER_KNOBS[o.cluster] == 2 and (best is None or best[2].cluster != 2):
        raise UnsupportedError(f"cluster={o.cluster!r} (rule 24): no "
                               f"{'128x128 ping-pong' if pingpong else '128x256'} plan fits {spec.short()} with "
                               f"stages={stages!r} on {device.name}. Fix: drop cluster or stages")
    if best is None:
        hint = ""
        if pingpong:
            hint = (": a ping-pong warpgroup holds a whole BM x BN fp32 accumulator, at most 128x128 (64x256), "
                    "plus a promoted fp8 partial of at most half that")
        if spec.accumulation is Accumulation.PROMOTED and bn == 256 and partial_blocks == 1:
            hint = ": promoted fp8 at bn=256 needs partial_blocks=2 (a whole-width partial exceeds the registers)"
        raise UnsupportedError(f"no tile shape fits {spec.short()} with bm={o.bm!r} bn={bn!r} stages={stages!r} "
                               f"partial_blocks={partial_blocks!r} on {device.name}{hint}")
    if (not pingpong and not _forces_tile(options) and o.stream_k is None and o.cluster is None
            and o.prefetch_operands is None and o.hoist_rows is None and short_k_pingpong(spec, best[2], device)):
        with collecting(None):  # (the forced call's own candidates are not this rule's)
            pp = plan(spec, device, PlanOptions(pingpong=True, group_m=o.group_m, scalar_columns=o.scalar_columns))
        note("128x128", "ping-pong (rule 30)", best[0],
             f"{k_blocks(spec)} k-blocks a tile: one warpgroup's epilogue runs beside the other's mainloop")
        return pp
    return best[2]


# Rule 30 (docs/decisions/rule-30-short-k-pingpong.md): fp8 rowwise with fast accumulation over a short K runs
# ping-pong consumers on 128x128 tiles. At PINGPONG_MAX_KBLOCKS k-blocks or fewer a cooperative 128x256 tile's
# epilogue is a large part of its time and stalls both warpgroups; ping-pong runs one warpgroup's epilogue beside the
# other's mainloop (H100, Triton 3.9, session 28: +0.5-10% at five such shapes, -2.5% at 17 k-blocks). Under Triton 3.6
# the same kernel ran 9% slower than the cooperative one at 4096x7168x2048 (session 10), so the rule needs
# PINGPONG_MIN_TRITON, the version it was measured under (3.7 and 3.8 were not).
PINGPONG_MAX_KBLOCKS = 16
PINGPONG_MIN_TRITON = (3, 9)


def short_k_pingpong(spec: GemmSpec, chosen: Plan, device: DeviceInfo) -> bool:
    """Rule 30: whether the planner's cooperative plan `chosen` gives way to ping-pong 128x128. e4m3 rowwise into
    bf16, fast accumulation, no bias or fused epilogue, not grouped (what was measured); rows that are whole 128-byte
    lines (`rows_aligned`: on unaligned rows 128x128 pays for partial lines, and ping-pong ran 20-35% slower than rule
    24's clusters at four such shapes); `chosen` 128x256 whole tiles in one CTA; at most PINGPONG_MAX_KBLOCKS
    k-blocks; at least a wave of 128x128 tiles; the installed Triton at least PINGPONG_MIN_TRITON."""
    from warploom.backends import gluon_api

    return (gluon_api.current().triton >= PINGPONG_MIN_TRITON
            and spec.a_dtype is DType.E4M3 and spec.b_dtype is DType.E4M3 and spec.out_dtype is DType.BF16
            and spec.scale is ScaleRecipe.ROWWISE
            and spec.accumulation is Accumulation.NATIVE
            and spec.bias_dtype is None and spec.epilogue is None and not spec.grouped and rows_aligned(spec)
            and (chosen.bm, chosen.bn) == (128, 256) and chosen.cluster == 1 and not chosen.stream_k
            and chosen.split_k == 1 and chosen.tail_split == 1 and not chosen.swap_ab
            and k_blocks(spec) <= PINGPONG_MAX_KBLOCKS
            and math.ceil(spec.m / 128) * math.ceil(spec.n / 128) >= device.sm_count)


def refuse_stream_k(spec: GemmSpec, stream_k: int, problems: list[str]) -> None:
    """Rule 21's refusals of a forced `stream_k`: more pieces than a tile's k-blocks (a piece with none would leave
    its finisher waiting), or `problems` (`stream_k_problems`), each an UnsupportedError with the fix."""
    k_tiles = k_blocks(spec)
    if stream_k > k_tiles:
        fix = f"stream_k between 2 and {k_tiles}, or 0" if k_tiles >= 2 else "stream_k=0 (whole tiles)"
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cuts a tile into more pieces than its {k_tiles} "
                               f"k-block(s) of K={spec.k}: a piece would have no k-block to add. Fix: pass {fix}")
    if problems:
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop stream_k (or the option that conflicts with it)")


def _rule14_split(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, pingpong: bool,
                  scale_partition: bool | None) -> int:
    """Rule 14: blockwise fp8 with M <= 128 on 128-wide tiles, when the tiles fill at most a third of the SMs and
    K has at least 32 k-blocks, splits K into the most ranges (a divisor of the k-blocks, at most 8) that keep the
    work units within one wave; otherwise 1."""
    if (spec.scale not in _SMALL_M_RECIPES or spec.m > 128 or bn != 128 or spec.bias_dtype is not None
            or spec.epilogue is not None or pingpong or scale_partition):
        return 1
    k_tiles = math.ceil(spec.k / 128)
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    if tiles > device.sm_count // 3 or k_tiles < 32:
        return 1
    return max(d for d in range(1, 9) if k_tiles % d == 0 and tiles * d <= device.sm_count)



def _check_split_k(spec: GemmSpec, split_k: int, bk: int, pingpong: bool, scale_partition: bool | None,
                   what: str = "split_k") -> None:
    """Split-K's limits (also a split-K tail's, `what` = "tail_split"): a k-block for every range; ranges of equal
    counts where the producer copies per-column scales of B in one flattened loop (`ScaleRecipe.per_column_b`),
    which runs one count a unit, and for promoted accumulation, whose consumers spilled with unequal ones
    (elsewhere they may differ by one: `ir.Tiling.uneven_split`); and the partials summed before anything that is
    not linear in the accumulator (the bias, a fused epilogue, the output cast) could run."""
    if split_k == 1:
        return
    k_tiles = max(1, math.ceil(spec.k / bk))
    problems = []
    if split_k < 1 or split_k > k_tiles:
        problems.append(f"{what}={split_k} must be at least 1 and at most the {k_tiles} k-blocks of {bk}")
    elif k_tiles % split_k and spec.scale.per_column_b:
        problems.append(f"{what}={split_k} must divide the {k_tiles} k-blocks of {bk} for {spec.scale.value} "
                        "scales (their copier runs one count of k-blocks a range)")
    elif k_tiles % split_k and spec.accumulation is Accumulation.PROMOTED:
        # (the unit's range arithmetic beside the promotion's scale indexing spilled 16 bytes under Triton 3.9 at
        # 128x128 blockwise, tests/compile)
        problems.append(f"{what}={split_k} must divide the {k_tiles} k-blocks of {bk} for promoted accumulation "
                        "(unequal ranges spill in its consumers)")
    if spec.bias_dtype is not None or spec.epilogue is not None:
        problems.append(f"a bias or a fused epilogue needs the whole sum (pass {what}=1)")
    if pingpong:
        problems.append("ping-pong consumers skip each other's tiles by whole k-loops (use pingpong=False)")
    if scale_partition or spec.scale is ScaleRecipe.MX:
        problems.append("the scale partition is not built for split-K units (use scale_partition=False; not MX)")
    if problems:
        raise UnsupportedError(f"{what}={split_k} for {spec.short()}: " + "; ".join(problems))
