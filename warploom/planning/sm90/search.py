"""Step 3 of sm_90a's `plan`: the scored search over `tiles.TILES` (`search`), rules 9-17, 21 and 24 applied per tile:
the tile filter (rules 9, 12, 13 and 16-18's tiles), its depth and split (rules 14 and 16), rule 15's split-K tail
or rule 21's stream-K where they score better, its one-CTA plan (rules 9, 10, 12 and 17) and rule 24's 2-CTA cluster
of it, each noted for `explain`. `rule.plan` resolves the options before it (`Search.of`) and chooses from its best
(`rule._choose`, then rule 30); the tiles' resources are `tiles.py`'s, the cost models `models.py`'s (rules 15 and
21) and `clusters.py`'s (rule 24)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from warploom.device import DeviceInfo
from warploom.errors import UnsupportedError
from warploom.planning.common import SWAP_TOKENS, dense_operands, is_decode
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.planning.plan_check import I32_MAX, stream_k_iterations
from warploom.planning.sm90.clusters import (
    CLUSTER_MARGIN,
    CLUSTER_PARTIAL_MAX_PAD,
    cluster_measured,
    cluster_min_kblocks,
    cluster_plan,
    cluster_problems,
    cluster_row_pad,
    cluster_tiles,
    cta_kblocks,
)
from warploom.planning.sm90.models import (
    SK_PIECES,
    rule15_tail,
    stream_k_grid,
    stream_k_problems,
    stream_k_score,
    tail_score,
)
from warploom.planning.sm90.small_m import refused_tile, rule14_split, small_blockwise
from warploom.planning.sm90.tiles import (
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
    tall_problems,
    tile_efficiency,
)
from warploom.planning.trace import note
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe
from warploom.target import Target

# A forced depth may go deeper, as far as shared memory holds (to measure deeper rings).
FORCED_MAX_STAGES = 16
# Rule 17: four consumer warpgroups and the producer's: 4 x 128 x 112 + 128 x 24 = 60416 of the 65536 registers;
# rule 32's three: 3 x 128 x 160 + 128 x 24 = 64512.
_TALL_CONSUMER_REGS = {256: 112, 192: 160}


# Rule 24's forced cluster knob (`plan_schedule(cluster=...)`): its value -> CTAs per cluster; "1x2" puts them along
# N (ShareA), every other 2 along M (ShareB).
CLUSTER_KNOBS: dict[int | str | None, int | None] = {None: None, 1: 1, 2: 2, "2x1": 2, "1x2": 2}


@dataclass(frozen=True)
class Search:
    """What every candidate tile of one `plan` call shares.

    Attributes:
        spec, device: the problem and the GPU.
        o: the options as the phases before the loop resolved them (its `cluster` is the knob as passed, its
            `scale_partition` as forced).
        scale_partition: rule 12's scale partition, resolved (`rule._check_forced`).
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
    def of(spec: GemmSpec, device: DeviceInfo, o: PlanOptions, bk: int, scale_partition: bool) -> Search:
        """The shared context of `plan`'s candidates, once `rule._check_forced` has resolved the scale partition."""
        return Search(
            spec, device, o, CLUSTER_KNOBS[o.cluster], o.cluster == "1x2", bk, scale_partition,
            small_blockwise=small_blockwise(spec, o.pingpong, scale_partition),
            decode=is_decode(spec, o.pingpong), aligned=rows_aligned(spec),
            cap=FORCED_MAX_STAGES if o.stages is not None else None)  # (None: max_stages's own, rule 16's for decode)


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


Best = tuple[float, int, Plan]
"""The search's best candidate: (score, -area, plan), the lower the better."""


def search(s: Search) -> Best | None:
    """Steps 3 and 4 over `TILES`: each tile the filter lets through, at its depth and split (rules 14-16), with
    rule 15's tail or rule 21's stream-K where they score better, then rule 24's cluster of it; the best (score,
    -area, plan) found, ties going to the larger tile."""
    best: Best | None = None
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


def _tile(s: Search, cbm: int, cbn: int) -> _Tile | None:
    """The tile filter: None where `cbm` x `cbn` is not forced and no rule lets the planner choose it (rules 9, 12,
    13, 16, 17 and 18's tiles), or where its registers cannot hold it (ping-pong, promoted fp8)."""
    spec, o = s.spec, s.o
    bm, bn, pingpong = o.bm, o.bn, o.pingpong
    if (bm is not None and cbm != bm) or (bn is not None and cbn != bn):
        return None
    eff = tile_efficiency(spec, cbm, cbn)
    if cbm == 192 and (bm is None or cbn == 256 and sum(o.n_blocks or (256,)) > 224):
        return None  # rule 32's fitted tile: forced, or chosen by rule 32, its columns fitted within 160 registers
    if cbm == 256 and bm is None and (not long_k_16bit(spec) or tall_problems(
            spec, pingpong, bool(s.scale_partition), o.split_k, o.tail_split, o.consumer_partitions)):
        return None  # rule 17: otherwise forced (or tuned) only
    if pingpong and not pingpong_fits(spec, cbm, cbn, o.partial_blocks):
        return None
    if cbn == 64 and bn is None and not (s.small_blockwise or s.decode):
        return None  # forced only: see TILES
    if s.small_blockwise and bm is None and bn is None:
        why = refused_tile(spec, s.device, cbm, cbn)
        if why is not None:  # rule 13's 64x64 at long K and wide N (`small_m.wide_rows64`)
            note(f"{cbm}x{cbn}", "left out", math.inf, why)
            return None
    if cbn in SWAP_TOKENS and bn is None:
        return None  # rule 18: the swapped decode tile, forced (or by rule 18) only
    if cbn < min(SWAP_TOKENS) and bn is None:
        return None  # 64x8: forced only (see TILES)
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


def _depth(s: Search, t: _Tile) -> tuple[int, int] | None:
    """(split-K ranges, stages) of tile `t`: rule 14's split unless forced (a forced tail splits no tile), and the
    deepest ring that fits beside its staging (rule 16's for decode); None where a forced depth does not fit or a
    chosen one is not double buffered, or rule 9's wide epilogue gets under 3 stages."""
    spec, o = s.spec, s.o
    stages, split_k = o.stages, o.split_k
    ks = split_k if split_k is not None else rule14_split(spec, s.device, t.bm, t.bn, o.pingpong, s.scale_partition)
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


def _tail(s: Search, t: _Tile, ks: int, depth: int) -> tuple[int, int] | None:
    """Rule 15's split-K tail of tile `t`'s last wave (forced, or `rule15_tail`'s where the tiles are whole):
    (its k-ranges, its stages); (1, 0) for none. None where a forced tail's fp32 staging leaves no stage."""
    spec, o = s.spec, s.o
    ts, tail_s = 1, 0
    if ks == 1 and o.tail_split is None and (s.decode and (t.bm, t.bn) == (64, 64) or t.bm >= 192):
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


def _scored_plan(s: Search, t: _Tile) -> tuple[float, Plan] | None:
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


def _stream_k_step(s: Search, t: _Tile, tiles: int, score: float) -> tuple[int, float, int] | None:
    """Rule 21: the last, partial wave of whole tiles shared as k-block pieces, forced (`stream_k`) or where it
    scores better than `score`: (pieces, score, grid), or None for whole tiles."""
    spec, device, o = s.spec, s.device, s.o
    stream_k = o.stream_k
    # (the planner's own choice: native accumulation only; promoted fp8's two column-block accumulators ran its
    # fixup 40% slower at 6320x6848x5648, session 22, so it is forced only; so is it on 64-row tiles, where rule 25's
    # split-K ran ahead of it at every shape measured, session 41)
    if not ((stream_k or stream_k is None and spec.accumulation is Accumulation.NATIVE and t.bm == 128)
            and tiles % device.sm_count and not stream_k_problems(
            spec, o.pingpong, s.scale_partition, o.split_k, o.tail_split, False, t.bm, t.early)):
        return None
    k_tiles = math.ceil(spec.k / s.bk)
    if not stream_k and stream_k_iterations(device.sm_count, tiles, k_tiles, 1) > I32_MAX:
        return None  # (its helpers' 32-bit iteration products would overflow: plan_check refuses such a plan)
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


def _tile_plan(s: Search, t: _Tile, stages: int, ks: int, ts: int, tail_s: int, sk: int, grid: int) -> Plan:
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
    registers = mx_registers(spec, t.bm, pingpong)  # (rule 12's MX budgets never meet rule 17's 256-row tile)
    if t.bm >= 192:
        registers["consumer_regs"] = _TALL_CONSUMER_REGS[t.bm]
    return Plan(
        bm=t.bm, bn=t.bn, bk=s.bk, stages=stages, consumer_warps=8 if pingpong else 4 * (t.bm // 64),
        group_m=o.group_m, grid=grid,
        epilogue_subtiles=epilogue_subtiles(t.bn, pingpong, spec.epilogue is not None, t.bm, block, t.wide),
        block_epilogue=block,
        consumer_partitions=(2 if pingpong else 1 if t.bm == 64 else t.bm // 64 if t.bm >= 192
                             else (o.consumer_partitions or fused_parts)),
        partial_blocks=t.partial_blocks, hoist_rows=hoist, scalar_columns=o.scalar_columns,
        prefetch_operands=t.early, pingpong=pingpong, scale_partition=s.scale_partition, split_k=ks,
        tail_split=ts, tail_stages=tail_s,
        staging_slots=FUSED_WIDE_SLOTS if t.wide else 1,
        operand_slots=FUSED_WIDE_SLOTS if t.wide and t.early and dense_operands(spec) else 1,
        load_ahead=t.wide and not hoist and not walks, swap_ab=False, target=Target.SM90A, tdm_fused=False,
        stream_k=sk,
        block_scaled=False, promote_tmem=False, cluster_n=False, amax_pass=False,
        **registers,
    )


def _cluster_step(s: Search, t: _Tile, candidate: Plan, best: Best) -> Best:
    """Rule 24: the 2-CTA cluster of a whole-tile 128x256 candidate (128x128 ping-pong; with bm=64 forced the 64x128
    tile, with bn=128 the 128x128: `cluster_tiles`, forced only), which replaces `best` where it is forced or where
    nothing passes it over (`explain` notes why it is). Refuses a forced 1x2 cluster whose whole-row staging leaves
    too few stages."""
    spec, device, o = s.spec, s.device, s.o
    pingpong, cluster, along_n = o.pingpong, s.cluster, s.along_n
    cbm, cbn = t.bm, t.bn
    # (a forced cluster's tile and warpgroups were checked against `cluster_tiles` by `cluster_problems` already)
    tiles = {(128, 128)} if pingpong else {(128, 256)} if cluster != 2 else {
        (tbm, tbn) for tbm, tbn, _ in cluster_tiles(o.bm, o.bn, along_n)}
    if not ((cbm, cbn) in tiles and cluster != 1 and candidate.split_k == 1
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
