"""sm_90a's planner rule: a TMA producer warp and wgmma consumer warpgroups, cooperative or ping-pong; `plan` and its
phases, from the device's refusals and the forced options' checks through the shortcuts (rules 18, 23 and 25) and
the candidate search over `tiles.TILES` (rules 9-17, 21 and 24: `search.py`'s) to the choice of its best and rule
30's short-K ping-pong. The tile menu and its resources are `tiles.py`'s, the cost models `models.py`'s (rules 15
and 21), `latency.py`'s (23, 25 and 33) and `clusters.py`'s (24), the fused quantize and gate/up epilogues' limits
(rules 26-29) `fused.py`'s and rule 22's grouped GEMMs (`plan_grouped`, which comes before `plan` in
`plan_schedule`) `grouped.py`'s. `plan` is the target's (its declaration's `plan`, `warploom.targets.sm90`); every
rule of `warploom.planner`'s list but 19 and 20."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from warploom.device import H100_SXM, DeviceInfo
from warploom.dtypes import DType
from warploom.errors import NoTileFitsError, UnsupportedError
from warploom.planning.common import k_block, k_blocks, swap_decode, swap_tokens
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.planning.sm90.clusters import CLUSTER_PROMOTED_BLOCKS, cluster_problems
from warploom.planning.sm90.column import narrow_rows64, one_column_split, wide_column_split
from warploom.planning.sm90.fitted import fitted
from warploom.planning.sm90.fitted_cluster import cluster_tiles, fitted_cluster
from warploom.planning.sm90.latency import (
    WIDTH_STAGES,
    decode_split,
    latency_split,
    latency_stages,
    latency_tiles,
    latency_width,
)
from warploom.planning.sm90.models import stream_k_problems, uneven_split_builds
from warploom.planning.sm90.narrow import forced_narrow, narrow
from warploom.planning.sm90.ring import ring_to_k
from warploom.planning.sm90.rows64 import ROWS64_BM, ROWS64_BN, one_wave_rows64, rows64_tiles
from warploom.planning.sm90.search import CLUSTER_KNOBS, Best, Search, search
from warploom.planning.sm90.tiles import rows_aligned, swap_rows, tall_problems
from warploom.planning.trace import choose, collecting, note, overrule
from warploom.spec import Accumulation, GemmSpec, ScaleLayout, ScaleRecipe


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """`_plan`'s plan, on rule 31's narrow tile (`narrow.narrow`) where N leaves most of its one tile's columns
    empty and nothing about the tile was forced, or on the blocks forced (`options.n_blocks`; () keeps it whole);
    then rule 32's fitted tile, rule 37's fitted tile in a 2x1 cluster, rule 35's 64x128 tiles in one wave, rule 36's
    one column of split 64-row tiles, rule 38's one column of split 128-row ones, rule 39's columns of 64-row tiles
    fitted to N and rule 34's ring depth where nothing was forced."""
    if options.n_blocks:  # (a forced depth is the blocks' ring's, which keeps only their rows of B: checked there)
        chosen = _plan(spec, device, replace(options, stages=None))
        return forced_narrow(spec, device, chosen, options.n_blocks, options.stages)
    chosen = _plan(spec, device, options)
    if options.stream_k and not chosen.stream_k and chosen.bm != 128 and options.bm != 64:
        # (rules 16, 18, 23 and 25 take 64-row or swapped tiles before the search, which plans stream-K on 128-row
        # tiles, and on 64-row ones only where bm=64 is forced)
        raise UnsupportedError(f"stream_k={options.stream_k} (rule 21) cannot run {spec.short()}: its plan is "
                               f"{chosen.short()}, and stream-K shares the k-blocks of 128-row tiles, or of 64-row "
                               "ones where bm=64 is forced. Fix: drop stream_k, or pass bm=128 or bm=64 with it")
    if options.n_blocks is not None:
        return forced_narrow(spec, device, chosen, ())
    if _forces_tile(options):
        return chosen if options.stages is not None else ring_to_k(spec, chosen)
    chosen = narrow(spec, device, chosen)
    if not (options.pingpong or any(f is not None for f in (options.stream_k, options.cluster, options.swap_ab))):
        # (rule 32 fits whole tiles: a forced schedule stands)
        chosen = fitted(spec, device, chosen, lambda bm, bn, blocks: _plan(
            spec, device, replace(options, bm=bm, bn=bn, stream_k=0, tail_split=1, cluster=1, n_blocks=blocks)))
        clustered = fitted_cluster(spec, device, chosen)
        if clustered is not None:  # (rule 37: planned as if the cluster, tile and blocks were forced)
            overrule(f"2x128x{sum(clustered)}", "fitted tile in a 2x1 cluster (rule 37)",
                     f"{cluster_tiles(spec, clustered)} cluster tiles of 2x128x{sum(clustered)} "
                     f"({'+'.join(map(str, clustered))}) in place of {chosen.short()} ({chosen.grid} CTAs): one round "
                     "of the SMs' clusters, B multicast")
            with collecting(None):  # (the forced path, as plan_schedule(cluster=2, bm=, bn=, n_blocks=) takes it)
                chosen = plan(spec, device, replace(options, cluster=2, bm=128, bn=256, n_blocks=clustered))
        if one_wave_rows64(spec, device, chosen):  # (rule 35: planned as if the 64x128 tile were forced)
            overrule(f"{ROWS64_BM}x{ROWS64_BN}", "one wave (rule 35)",
                     f"{rows64_tiles(spec)} tiles in place of {chosen.short()} ({chosen.grid} CTAs): measured faster "
                     "where 64x128 tiles fit one wave of the SMs")
            with collecting(None):  # (its forced tile's own score is not a candidate)
                chosen = _plan(spec, device, replace(options, bm=ROWS64_BM, bn=ROWS64_BN))
        for rule, column_of, why in (
                (36, one_column_split, "A read once, on the SMs"),
                (38, wide_column_split, "N's columns computed once, A read once"),
                (39, narrow_rows64, "more of the SMs at work")):
            column = column_of(spec, device, chosen)
            if column is not None:  # (planned as if the tile, split and blocks were forced)
                overrule(f"{column.bm}x{column.tile_n}", f"{column.kind(spec.n)} (rule {rule})",
                         f"{column.describe(spec.m, spec.n)} in place of {chosen.short()} ({chosen.grid} CTAs): {why}")
                with collecting(None):  # (the forced path itself, as plan_schedule(bm=, bn=, split_k=, n_blocks=))
                    return plan(spec, device, replace(options, bm=column.bm, bn=column.bn, split_k=column.split,
                                                      n_blocks=column.blocks or None))
    return ring_to_k(spec, chosen)


def _plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
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
    best = search(Search.of(spec, device, o, bk, scale_partition))
    return _choose(spec, device, options, o, best)


_TILE_OPTIONS = ("bm", "bn", "stages", "consumer_partitions", "partial_blocks", "scale_partition", "split_k",
                 "tail_split")


def _forced_tile(options: PlanOptions) -> dict[str, object]:
    """The tile, its depth, its partitions or blocks, the scale partition or split-K, as the caller forced them."""
    return {name: getattr(options, name) for name in _TILE_OPTIONS if getattr(options, name) is not None}


def _forces_tile(options: PlanOptions) -> bool:
    """Whether the caller forced any of `_forced_tile`'s: the rules that pick a schedule of their own (18, 23, 25,
    30) then stand aside."""
    return bool(_forced_tile(options))


def _or_drop(o: PlanOptions, names: tuple[str, ...], problems: Callable[[PlanOptions], list[str]]) -> str:
    """The other half of a refusal's fix: ", or drop x=1, y=2", the forced options among `names` without each of
    which `problems` (the refusal's reasons, for these options) reads differently, where dropping them all leaves no
    reason; "" where a reason is the problem's own (its dtype, layout, epilogue or device), which only dropping the
    refused option mends."""
    default = PlanOptions()
    forced = [n for n in names if getattr(o, n) != getattr(default, n)]
    without = replace(o, **{n: getattr(default, n) for n in forced})
    before = problems(o)
    named = [n for n in forced if problems(replace(o, **{n: getattr(default, n)})) != before]
    if not named or problems(without):
        return ""
    return ", or drop " + ", ".join(f"{n}={getattr(o, n)!r}" for n in named)


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
    run `spec` with the other options (`cluster_problems`, one SM, promoted fp8 on 128-row tiles in other than
    CLUSTER_PROMOTED_BLOCKS blocks, fitted blocks on the 128x128 or 64x128 cluster tiles). A cluster's tiles are
    whole: no swap, stream-K or split-K."""
    knob = o.cluster
    # (True == 1 and 2.0 == 2 as keys: they planned as 1 and 2 where every other count refuses a float)
    if isinstance(knob, (bool, float)) or knob not in CLUSTER_KNOBS:
        raise UnsupportedError(f"cluster={knob!r}: expected None (rule 24 decides), 1 (one CTA per tile), 2 or "
                               "\"2x1\" (2-CTA clusters along M that multicast B) or \"1x2\" (along N, multicasting A)."
                               " Fix: pass one of those, or leave cluster out")
    if CLUSTER_KNOBS[knob] != 2:
        return o

    def reasons(q: PlanOptions) -> list[str]:
        one_sm = f"{device.name} has {device.sm_count} SM (a 2-CTA cluster runs on two)"
        return cluster_problems(spec, q.pingpong, q.scale_partition, q.split_k, q.tail_split, q.stream_k, q.swap_ab,
                                q.bm, q.bn, q.consumer_partitions, knob == "1x2") + [one_sm] * (device.sm_count < 2)

    problems = reasons(o)
    if problems:
        raise UnsupportedError(f"cluster={knob!r} (rule 24) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop cluster (or pass cluster=1)" + _or_drop(o, (
                                   "pingpong", "scale_partition", "split_k", "tail_split", "stream_k", "swap_ab", "bm",
                                   "bn", "consumer_partitions"), reasons))
    if o.n_blocks and (o.bm == 64 or o.bn == 128):
        raise UnsupportedError(f"cluster={knob!r} (rule 24) with n_blocks={o.n_blocks} and bm={o.bm}, bn={o.bn}: "
                               "expected a fitted tile's cluster on bm=128, bn=256 (rule 37's form; the 128x128 and "
                               "64x128 cluster tiles are whole). Fix: pass bm=128, bn=256 with n_blocks, or drop "
                               "n_blocks")
    if spec.accumulation is Accumulation.PROMOTED and o.bm != 64 and o.partial_blocks not in (
            None, CLUSTER_PROMOTED_BLOCKS):
        # (cluster_plan promotes each warpgroup's 128 columns in 64-column blocks: 128-column ones would not fit; a
        # 64x128 cluster tile's one warpgroup keeps its 64x128 block, and the blocks of one CTA a tile)
        raise UnsupportedError(f"cluster={knob!r} (rule 24) with partial_blocks={o.partial_blocks}: expected "
                               f"{CLUSTER_PROMOTED_BLOCKS} (promoted fp8 in a cluster promotes each warpgroup's "
                               "128 columns in two 64-column blocks). Fix: drop partial_blocks (or pass "
                               f"{CLUSTER_PROMOTED_BLOCKS}), or drop cluster")
    return replace(o, swap_ab=False, stream_k=0, split_k=1, tail_split=1)


def _stream_k_options(spec: GemmSpec, o: PlanOptions) -> PlanOptions:
    """Rule 21's refusals of a forced `stream_k` (`refuse_stream_k`). A stream-K plan is never swapped."""
    if not o.stream_k:
        return o

    def reasons(q: PlanOptions) -> list[str]:
        return stream_k_problems(spec, q.pingpong, q.scale_partition, q.split_k, q.tail_split, q.swap_ab, q.bm,
                                 q.prefetch_operands)

    refuse_stream_k(spec, o.stream_k, reasons(o), _or_drop(o, (
        "pingpong", "scale_partition", "split_k", "tail_split", "swap_ab", "bm", "prefetch_operands"), reasons))
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
    def reasons(q: PlanOptions) -> list[str]:
        return (spec.swap_problems() + (["ping-pong"] if q.pingpong else [])
                + (["split-K"] if q.split_k not in (None, 1) or q.tail_split not in (None, 1) else [])
                + (["the scale partition"] if q.scale_partition else []))

    problems = reasons(o)
    if problems:
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop swap_ab" + _or_drop(o, ("pingpong", "split_k", "tail_split",
                                                                  "scale_partition"), reasons))
    tokens = o.bn or swap_tokens(spec.m)
    rows = o.bm or swap_rows(spec.n, device.sm_count)
    try:
        swapped = plan(spec.swapped(), device, PlanOptions(
            bm=rows, bn=tokens, stages=o.stages, group_m=o.group_m, consumer_partitions=o.consumer_partitions,
            partial_blocks=o.partial_blocks, hoist_rows=o.hoist_rows, scalar_columns=o.scalar_columns,
            prefetch_operands=o.prefetch_operands, split_k=1, tail_split=1, swap_ab=False, stream_k=0,
            cluster=1))  # (a swapped plan runs one CTA a tile: rule 24 would cluster the swapped problem's tiles)
    except UnsupportedError as e:
        # (the swapped problem's refusal names its fix, for the options as passed: dropping swap_ab is another)
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {rows} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}; or drop "
                               "swap_ab") from None
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
    """Rule 23 (`latency_tiles`): whole 64-row tiles, where no tile, depth, stream-K, ping-pong or operand choice is
    forced: 64 wide in `latency_stages`' ring, or 16 or 32 wide in WIDTH_STAGES' where rule 33 (`latency_width`)
    prices them faster."""
    if (o.stream_k is not None or o.pingpong or _forces_tile(options) or o.prefetch_operands is not None
            or o.hoist_rows is not None or not latency_tiles(spec, device)):
        return None
    width = latency_width(spec, device)
    stages = latency_stages(spec) if width == 64 else WIDTH_STAGES
    with collecting(None):  # (the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=64, bn=width, stages=stages, group_m=o.group_m,
                                              scalar_columns=o.scalar_columns, split_k=1, tail_split=1,
                                              swap_ab=False, stream_k=0))


def _check_forced(spec: GemmSpec, o: PlanOptions, bk: int) -> bool:
    """The forced options' own limits, each refused with what to pass instead: split-K and its tail
    (`_check_split_k`), consumer partitions, rule 17's 256-row tile (`tall_problems`), partial blocks, ping-pong,
    and rule 12's scale partition, which this returns resolved (None: on for MX scales only)."""
    split_k, tail_split, consumer_partitions, bm = o.split_k, o.tail_split, o.consumer_partitions, o.bm
    if split_k is not None:
        _check_split_k(spec, split_k, bk, o.pingpong, o.scale_partition, (bm, o.bn))
    if tail_split is not None and tail_split != 1:
        if split_k not in (None, 1):
            raise UnsupportedError(f"tail_split={tail_split} with split_k={split_k}: a split-K tail follows whole "
                                   "tiles, and split-K splits them all. Fix: pass one of the two (drop tail_split, "
                                   "or drop split_k)")
        _check_split_k(spec, tail_split, bk, o.pingpong, o.scale_partition, (bm, o.bn), what="tail_split")
    if consumer_partitions not in (None, 1, 2, 3, 4):
        raise UnsupportedError(f"consumer_partitions={consumer_partitions!r}: expected 1 (one partition for all "
                               "consumer warpgroups), 2 (one per warpgroup), 3 or 4 (bm=192's or bm=256's "
                               "warpgroups). Fix: pass 1, 2, 3 or 4, or None to let the planner choose")
    if consumer_partitions in (3, 4) and bm != 64 * consumer_partitions:
        raise UnsupportedError(f"consumer_partitions={consumer_partitions} is for bm={64 * consumer_partitions} "
                               f"({consumer_partitions} consumer warpgroups). Fix: pass bm={64 * consumer_partitions}, "
                               "or consumer_partitions=1 or 2")
    if bm in (192, 256):
        def reasons(q: PlanOptions) -> list[str]:
            return tall_problems(spec, q.pingpong, bool(q.scale_partition), q.split_k, q.tail_split,
                                 q.consumer_partitions, bm)

        tall = reasons(o)
        if tall:
            raise UnsupportedError(f"bm={bm} (rule {17 if bm == 256 else 32}'s tile, {bm // 64} consumer "
                                   f"warpgroups) does not support {'; '.join(tall)} for {spec.short()}. Fix: use "
                                   "bm=128 (or drop bm)" + _or_drop(o, ("pingpong", "split_k", "tail_split",
                                                                        "consumer_partitions", "scale_partition"),
                                                                    reasons))
    if consumer_partitions == 2 and bm == 64:
        raise UnsupportedError("consumer_partitions=2 needs two consumer warpgroups, but bm=64 has one. Fix: "
                               "use bm=128 or consumer_partitions=1")
    if o.partial_blocks not in (None, 1, 2, 4):
        raise UnsupportedError(f"partial_blocks={o.partial_blocks!r}: expected 1 (promote the whole tile width), "
                               "2 (two column halves) or 4 (quarters, forced only: measured 9-16% slower than 2 at "
                               "128x256, session 19). Fix: pass 1, 2 or 4, or None to let the planner choose")
    if o.pingpong and consumer_partitions == 1:
        raise UnsupportedError("pingpong=True needs two consumer partitions (one warpgroup each), but "
                               "consumer_partitions=1. Fix: pass consumer_partitions=2 or None, or drop pingpong")
    scale_partition = o.scale_partition
    if scale_partition is None:
        # Rule 12: MX scales are single bytes, which cp.async (4, 8 or 16 bytes a copy) cannot move one by one:
        # the scale partition loads them with ordinary loads and decodes them on the way.
        scale_partition = spec.scale is ScaleRecipe.MX
    if spec.scale is ScaleRecipe.MX and not scale_partition:
        raise UnsupportedError("MX scales need the scale partition (cp.async cannot copy single bytes), got "
                               "scale_partition=False. Fix: drop scale_partition=False")
    if scale_partition and not spec.scale.is_blockwise:
        raise UnsupportedError(f"scale_partition=True needs blockwise scales, but {spec.short()} has "
                               f"{'no' if spec.scale is ScaleRecipe.NONE else spec.scale.value} scales. Fix: drop "
                               "scale_partition")
    if scale_partition and o.pingpong:
        raise UnsupportedError("the scale partition (scale_partition=True, and always for MX scales) with "
                               "pingpong=True is not built yet: a ping-pong consumer would have to skip the other's "
                               "scale stages too. Fix: use one of the two: drop pingpong"
                               + (" (MX scales always take the scale partition)" if spec.scale is ScaleRecipe.MX
                                  else ", or drop scale_partition"))
    return scale_partition


def _choose(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions, best: Best | None) -> Plan:
    """The search's winner, refused where a forced cluster found no cluster plan or no tile fit at all (with a hint
    for ping-pong and promoted fp8's whole-width partial); rule 30's ping-pong 128x128 where nothing is forced and
    `short_k_pingpong` prefers it."""
    pingpong, stages, bn = o.pingpong, o.stages, o.bn
    if CLUSTER_KNOBS[o.cluster] == 2 and (best is None or best[2].cluster != 2):
        form = "128x128 ping-pong" if pingpong else "2x1 cluster" if o.bm == 64 or bn == 128 else "128x256"
        raise UnsupportedError(f"cluster={o.cluster!r} (rule 24): no {form} plan fits {spec.short()} with "
                               f"stages={stages!r} on {device.name}. Fix: drop cluster or stages")
    if best is None:
        # (named by what the caller forced: `o` holds the rules' own picks too, which the caller cannot leave out)
        forced = _forced_tile(options) | ({"pingpong": True} if options.pingpong else {})
        if not forced:
            raise NoTileFitsError(f"no tile shape fits {spec.short()} on {device.name}: none of the planner's tiles "
                                   f"fits its {device.smem_per_block} bytes of shared memory a block and "
                                   f"{device.regs_per_sm} registers an SM. Fix: plan for a device that has an sm_90a "
                                   f"part's (warploom.H100_SXM: {H100_SXM.smem_per_block} and "
                                   f"{H100_SXM.regs_per_sm}), or correct the DeviceInfo")
        hint = ""
        if options.pingpong:
            hint = (": a ping-pong warpgroup holds a whole BM x BN fp32 accumulator, at most 128x128 (64x256), "
                    "plus a promoted fp8 partial of at most half that")
        if spec.accumulation is Accumulation.PROMOTED and options.bn == 256 and options.partial_blocks == 1:
            hint = ": promoted fp8 at bn=256 needs partial_blocks=2 (a whole-width partial exceeds the registers)"
        if options.bm == 192 and options.bn == 256:
            hint = (": a 192-row tile's warpgroups (160 registers) hold at most 224 of a 256-wide slot's columns; "
                    "pass n_blocks (e.g. (128, 64)) or bn=128")
        named = " ".join(f"{k}={v!r}" for k, v in forced.items())
        raise NoTileFitsError(f"no tile shape fits {spec.short()} with {named} on {device.name}{hint}. Fix: leave "
                               "them out for the planner's choice, or force a tile among `warploom plan --explain`'s "
                               "candidates")
    choose(f"{best[2].bm}x{best[2].bn}", best[0])  # (the search's winner, as it noted it)
    if (not pingpong and not _forces_tile(options) and o.stream_k is None and o.cluster is None
            and o.prefetch_operands is None and o.hoist_rows is None and short_k_pingpong(spec, best[2], device)):
        with collecting(None):  # (the forced call's own candidates are not this rule's)
            pp = plan(spec, device, PlanOptions(pingpong=True, group_m=o.group_m, scalar_columns=o.scalar_columns))
        note("128x128", "ping-pong (rule 30)", best[0],
             f"{k_blocks(spec)} k-blocks a tile: one warpgroup's epilogue runs beside the other's mainloop",
             chosen=True)
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


def refuse_stream_k(spec: GemmSpec, stream_k: int, problems: list[str], or_drop: str = "") -> None:
    """Rule 21's refusals of a forced `stream_k`: more pieces than a tile's k-blocks (a piece with none would leave
    its finisher waiting), or `problems` (`stream_k_problems`), each an UnsupportedError with the fix (`or_drop`:
    the conflicting options, `_or_drop`'s)."""
    k_tiles = k_blocks(spec)
    if stream_k > k_tiles:
        fix = f"stream_k between 2 and {k_tiles}, or 0" if k_tiles >= 2 else "stream_k=0 (whole tiles)"
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cuts a tile into more pieces than its {k_tiles} "
                               f"k-block(s) of K={spec.k}: a piece would have no k-block to add. Fix: pass {fix}")
    if problems:
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop stream_k" + or_drop)


def _check_split_k(spec: GemmSpec, split_k: int, bk: int, pingpong: bool, scale_partition: bool | None,
                   tile: tuple[int | None, int | None], what: str = "split_k") -> None:
    """Split-K's limits (also a split-K tail's, `what` = "tail_split"): a k-block for every range; ranges of equal
    counts where unequal ones do not build on the (bm, bn) `tile` (`models.uneven_split_builds`: per-column scales of
    B, promoted accumulation on other than a forced 64x64 split-K tile; elsewhere they may differ by one:
    `ir.Tiling.uneven_split`); and the partials summed before anything that is not linear in the accumulator (the
    bias, a fused epilogue, the output cast) could run."""
    if split_k == 1:
        return
    k_tiles = max(1, math.ceil(spec.k / bk))
    problems: list[str] = []
    changes: list[str] = []  # (what else, all together, lets the split run)
    own = False  # (a reason of the problem's own, which only dropping the split mends)
    if split_k < 1 or split_k > k_tiles:
        problems.append(f"{what}={split_k} must be at least 1 and at most the {k_tiles} k-blocks of {bk}")
        own = k_tiles < 2
        changes.append(f"{what} between 2 and {k_tiles}")
    elif k_tiles % split_k and not uneven_split_builds(spec, tile, what):
        if spec.scale.per_column_b:
            why = f"for {spec.scale.value} scales (their copier runs one count of k-blocks a range)"
            change = f"a {what} that divides {k_tiles} (e.g. {_divisors(k_tiles)})"
        else:
            why = "for promoted accumulation on other than 64x64 tiles (unequal ranges spill in their consumers)"
            change = (f"a {what} that divides {k_tiles} (e.g. {_divisors(k_tiles)})"
                      + (", or bm=64 with bn=64 (any count)" if what == "split_k" else ""))
        problems.append(f"{what}={split_k} must divide the {k_tiles} k-blocks of {bk} {why}")
        changes.append(change)
    if spec.bias_dtype is not None or spec.epilogue is not None:
        problems.append("a bias or a fused epilogue needs the whole sum")
        own = True
    if pingpong:
        problems.append("ping-pong consumers skip each other's tiles by whole k-loops")
        changes.append("pingpong=False")
    if spec.scale is ScaleRecipe.MX:
        problems.append("the scale partition, which MX scales always take, is not built for split-K units")
        own = True
    elif scale_partition:
        problems.append("the scale partition is not built for split-K units")
        changes.append("scale_partition=False")
    if problems:
        other = "" if own or not changes else f", or pass {' with '.join(changes)}"
        raise UnsupportedError(f"{what}={split_k} for {spec.short()}: {'; '.join(problems)}. Fix: drop {what}"
                               + other)


def _divisors(n: int) -> str:
    """The first four split counts above 1 that divide `n` k-blocks ("2, 4, 7, 8" for 56)."""
    return ", ".join(str(d) for d in [d for d in range(2, n + 1) if n % d == 0][:4])
