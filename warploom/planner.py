"""The planner: choose a schedule's parameters (tile shape, stages, warps, registers, raster, grid) for a spec.

The heuristic, in order, one line per rule; why each rule holds, with its measurements, is in docs/decisions/:
1. candidate tiles: BK = 128 bytes of K; BM 128, or 64 when M <= 64: docs/decisions/rule-01-candidate-tiles.md
2. stages: as many as fit beside the staging tile (2-6; decode up to 12): docs/decisions/rule-02-stages.md
3. score: tile-waves / tile efficiency; lowest wins, ties to the larger tile: docs/decisions/rule-03-tile-wave-score.md
4. registers: producer 24, consumers 240, at one CTA per SM: docs/decisions/rule-04-registers.md
5. GROUP_M = 8; grid = min(SMs, tiles): docs/decisions/rule-05-raster-and-grid.md
6. 256-wide tiles store in two 128-column halves, for a 4th stage: docs/decisions/rule-06-epilogue-halves.md
7. a 128-row tile's two consumer warpgroups run as two partitions: docs/decisions/rule-07-consumer-partitions.md
8. promoted fp8: 128-column blocks, 3 stages; 128x128 where it spills: docs/decisions/rule-08-promoted-fp8-blocks.md
9. fused epilogues: 128x256 in 8 blocks, one consumer partition, slots: docs/decisions/rule-09-fused-epilogue-wide.md
10. rowwise scales + bias on 256-wide tiles: per stored 64-column block: docs/decisions/rule-10-rowwise-bias-blocks.md
11. blockwise scales ride the A/B stages; a scale partition only if forced: docs/decisions/rule-11-blockwise-scales.md
12. MX fp8 always takes the scale partition, on 128x128 tiles: docs/decisions/rule-12-mx-scale-partition.md
13. blockwise fp8 at M <= 128 also scores 64-row and 64x64 tiles: docs/decisions/rule-13-small-m-blockwise.md
14. split-K for small-M blockwise whose tiles fill at most a third of the SMs: docs/decisions/rule-14-split-k.md
15. a split-K tail for a thin last wave (not below 36 k-blocks): docs/decisions/rule-15-split-k-tail.md
16. decode (M <= 64) scores 64x64 tiles with a ring of up to 12 stages: docs/decisions/rule-16-decode-tiles.md
17. 256x128 tiles with four consumer warpgroups: at long K (16-bit operands, >= 96 k-blocks) a candidate a little
    behind 128x256, otherwise forced or tuned only: docs/decisions/rule-17-tall-tiles.md
18. swap-AB decode at M <= 32: C^T = B^T A^T on 16- or 32-token tiles: docs/decisions/rule-18-swap-ab-decode.md
19. sm_100a: tcgen05 into two tensor-memory accumulators, a 4-warp epilogue partition: docs/decisions/rule-19-sm100a.md
20. gfx1250: one 4-warp partition, TDM copies and wmma, software-pipelined, 128x128: docs/decisions/rule-20-gfx1250.md
21. stream-K: the last wave's tiles shared as 2-4 k-block pieces, a fixup: docs/decisions/rule-21-stream-k.md
22. grouped GEMMs: 128x256 from 256 rows a group, 64x128 to 64, else 128x128 (sm_100a: 128 rows always):
    docs/decisions/rule-22-grouped.md
23. a few tiles: 64x64 where a latency model beats 128x128's best (native accumulation, and promoted fp8 rowwise or
    blockwise 1x128 x 128x128): docs/decisions/rule-23-latency-tiles.md
24. 2-CTA clusters multicast B where rows are not 128-byte lines (Triton >= 3.7; 1x2 sharing A, promoted, blockwise
    and fused clusters when forced): docs/decisions/rule-24-clusters.md
25. a few tiles over a long K: split-K in up to 8 ranges (also decode): docs/decisions/rule-25-latency-split-k.md
26. a fused 1x128 quantization: cooperative 128-wide tiles, whole tiles (grouped: M-grouped and masked, on rule
    22's tile rows): docs/decisions/rule-26-fused-quantize.md
27. a fused rowwise quantization: one tile spans N (N <= 256), whole tiles: docs/decisions/rule-27-fused-rowwise.md
28. a fused gate/up epilogue (silu_mul_interleaved): BN = 2 * block, whole tiles:
    docs/decisions/k-grouped-and-gate-epilogue.md
29. a fused rowwise quantization with N > 256 (or N <= 256 that rule 27's tile cannot hold): an atomic row amax
    across the tiles, then a cast kernel: docs/decisions/rule-29-rowwise-amax-pass.md
30. fp8 rowwise fast accumulation, at most 16 k-blocks, Triton >= 3.9: ping-pong 128x128:
    docs/decisions/rule-30-short-k-pingpong.md
31. N one tile wide, at most 3/4 of a 128- or 256-wide tile: a narrow tile, its wgmma in power-of-two column blocks
    of round_up(N, 16) only: docs/decisions/rule-31-narrow-tiles.md
32. 16-bit operands whose tiles quantize badly: a tile fitted to the shape, 128, 192 or 256 rows by any multiple of
    16 columns in power-of-two blocks, where it takes fewer rounds or less area: docs/decisions/rule-32-fitted-tiles.md
33. rule 23's 64-row tiles 16 or 32 wide (16-bit operands) where a width model prices them faster, filling at most 80%
    of the SMs: docs/decisions/rule-33-latency-width.md
34. where each CTA runs one work unit, a ring no deeper than the unit's k-blocks (at least 2):
    docs/decisions/rule-34-ring-depth.md
35. at most 80 k-blocks, rule 23's kind on 128-row tiles at most 128 wide, whole or K split in two: one wave of
    64x128 tiles instead, within 90% of the SMs: docs/decisions/rule-35-short-k-rows64.md
36. 16-bit operands of rule 23's kind, 64 < N <= 128, at least 64 k-blocks: one column of 64-row tiles across N, K
    split in up to 4 ranges to fill the SMs: docs/decisions/rule-36-one-column-split.md
37. Triton >= 3.7, 16-bit or fp8 rowwise fast operands on rows not whole lines, at least 45 (fp8: 23) k-blocks, a
    128-row plan: a fitted tile (128 + 16 or 128 + 64) in a 2x1 cluster where its cluster tiles fill one round (65%;
    fp8 80%): docs/decisions/rule-37-fitted-clusters.md

Where the rules live: each target's rule in its own module of `warploom.planning` (sm_90a's, every rule but 19 and 20:
`planning/sm90/rule.py`, its candidate search (rules 9-17, 21 and 24) in `planning/sm90/search.py`, its tile menu in
`planning/sm90/tiles.py`, its cost models in `planning/sm90/models.py` (rules 15 and 21), `planning/sm90/latency.py`
(rules 23, 25 and 33) and `planning/sm90/clusters.py` (rule 24), rule 31's narrow tile in
`planning/sm90/narrow.py`, rule 32's fitted tile in `planning/sm90/fitted.py`, rule 34's ring depth in
`planning/sm90/ring.py`, rule 35's 64x128 tiles in `planning/sm90/rows64.py`, rule 36's column in
`planning/sm90/column.py`, rule 37's fitted clusters in `planning/sm90/fitted_cluster.py`, its fused epilogues' limits
(rules 26-29) in `planning/sm90/fused.py`, rule 22's grouped GEMMs in `planning/sm90/grouped.py`; rule 19:
`planning/sm100.py`; rule 20: `planning/gfx1250.py`), which the target's declaration (`warploom.targets`) names as its
`plan`. `plan_schedule` stands above the registry: it runs what comes before any target's rule (rule 26's fused
quantization, rule 28's gate/up pairs, rule 22's grouped GEMMs, the options' own checks) and calls the device's
target's. The names below are re-exported from `warploom.planning`, so `warploom.planner.X` stays the public
spelling. """

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.device import DeviceInfo
from warploom.errors import UnsupportedError
from warploom.planning.amax_pass import AMAX_PASS_BNS, amax_pass_bn, amax_pass_problem, amax_pass_spec
from warploom.planning.common import (
    NVFP4_DEEP_BK,
    SWAP_MAX_M,
    SWAP_TOKENS,
    dense_operands,
    is_decode,
    k_block,
    k_blocks,
    nvfp4_bk,
    scale_rows,
    scale_slot_bytes,
    stage_bytes,
    swap_decode,
    swap_tokens,
)
from warploom.planning.gfx1250 import plan_gfx1250, tdm_warps_reason
from warploom.planning.options import PlanOptions, TdmWarps, check_arguments
from warploom.planning.plan import Plan, WaveFill, wave_fill
from warploom.planning.sm90.clusters import (
    CLUSTER_MARGIN,
    CLUSTER_MIN_KBLOCKS,
    CLUSTER_UNALIGNED_GAIN,
    cluster_min_kblocks,
    cluster_plan,
    cluster_problems,
    cta_kblocks,
)
from warploom.planning.sm90.fused import (
    QUANT_BN,
    ROWWISE_MAX_N,
    gate_up_problems,
    quantized_problems,
    rowwise_bn,
    two_passes,
    wide_row_problem,
)
from warploom.planning.sm90.grouped import grouped_tile, last_round, plan_grouped
from warploom.planning.sm90.latency import (
    DECODE_KBLOCK_US,
    DECODE_SM_BYTES_PER_US,
    DECODE_SPLIT_FIXED_US,
    DECODE_SPLIT_MARGIN,
    DECODE_SPLIT_MAX,
    DECODE_SPLIT_MIN_KBLOCKS,
    DECODE_SPLIT_RANGE_US,
    HBM_BYTES_PER_US,
    LATENCY_DEEP_KBLOCKS,
    LATENCY_KBLOCK_US,
    LATENCY_L2_BYTES_PER_US,
    LATENCY_SHARED_ROWS,
    LATENCY_STAGES,
    LATENCY_START_US,
    SPLIT_FIXED_US,
    SPLIT_MARGIN_64,
    SPLIT_MARGIN_64_UNALIGNED,
    SPLIT_MARGIN_128,
    SPLIT_MARGIN_128_PROMOTED,
    SPLIT_MAX,
    SPLIT_MAX_TILES_OF_SMS,
    SPLIT_MIN_KBLOCKS,
    SPLIT_RANGE_US,
    decode_split,
    decode_time,
    latency_kind,
    latency_split,
    latency_stages,
    latency_tiles,
    latency_times,
    latency_us,
    split_time,
    square_tiles,
)
from warploom.planning.sm90.models import (
    SK_FIXUP_KBLOCKS,
    SK_PIECES,
    SK_SLOWDOWN,
    TAIL_COST_US,
    stream_k_grid,
    stream_k_score,
    tail_score,
)
from warploom.planning.sm90.rule import PINGPONG_MAX_KBLOCKS, PINGPONG_MIN_TRITON, short_k_pingpong
from warploom.planning.sm90.tiles import (
    FUSED_WIDE_BLOCKS,
    FUSED_WIDE_SLOTS,
    TILES,
    block_epilogue,
    epilogue_bytes,
    epilogue_subtiles,
    fused_wide,
    max_stages,
    plan_epilogue_bytes,
    rows_aligned,
    swap_rows,
)
from warploom.planning.sm100 import (
    PROMOTED_PARTIALS,
    grouped_path,
    plan_blackwell,
    promotion_path,
    scale_path,
)
from warploom.planning.trace import Candidate, collecting
from warploom.spec import Accumulation, GemmSpec, Grouping
from warploom.target import Target
from warploom.targets import declared

__all__ = [
    "AMAX_PASS_BNS",
    "CLUSTER_MARGIN", "CLUSTER_MIN_KBLOCKS", "CLUSTER_UNALIGNED_GAIN", "DECODE_KBLOCK_US", "DECODE_SM_BYTES_PER_US",
    "DECODE_SPLIT_MARGIN", "DECODE_SPLIT_MAX", "DECODE_SPLIT_MIN_KBLOCKS", "FUSED_WIDE_BLOCKS", "FUSED_WIDE_SLOTS",
    "HBM_BYTES_PER_US",
    "LATENCY_DEEP_KBLOCKS", "LATENCY_SHARED_ROWS",
    "LATENCY_KBLOCK_US", "LATENCY_L2_BYTES_PER_US", "LATENCY_STAGES", "LATENCY_START_US",
    "NVFP4_DEEP_BK", "PINGPONG_MAX_KBLOCKS", "PINGPONG_MIN_TRITON",
    "PROMOTED_PARTIALS", "QUANT_BN", "ROWWISE_MAX_N", "SK_FIXUP_KBLOCKS", "SK_PIECES", "SK_SLOWDOWN",
    "SPLIT_FIXED_US", "SPLIT_MARGIN_64", "SPLIT_MARGIN_64_UNALIGNED", "SPLIT_MARGIN_128", "SPLIT_MAX",
    "SPLIT_MARGIN_128_PROMOTED", "SPLIT_MIN_KBLOCKS", "SPLIT_RANGE_US",
    "SPLIT_MAX_TILES_OF_SMS",
    "DECODE_SPLIT_FIXED_US",
    "DECODE_SPLIT_RANGE_US",
    "SWAP_MAX_M", "SWAP_TOKENS", "TAIL_COST_US", "TILES", "Candidate", "Explanation", "Plan", "PlanOptions",
    "TdmWarps", "WaveFill", "block_epilogue", "cluster_min_kblocks", "cluster_plan", "cluster_problems",
    "cta_kblocks", "decode_split", "decode_time",
    "epilogue_bytes", "epilogue_subtiles", "explain", "fused_wide", "grouped_reason", "grouped_tile", "is_decode",
    "k_block", "k_blocks", "latency_kind", "latency_split", "latency_stages", "latency_tiles", "latency_times",
    "latency_us", "max_stages", "nvfp4_bk", "plan_blackwell", "plan_epilogue_bytes", "plan_gfx1250", "plan_grouped",
    "plan_schedule", "promotion_path", "scale_path", "grouped_path", "gate_up_problems", "amax_pass_bn",
    "amax_pass_problem", "amax_pass_spec",
    "quantized_problems", "rows_aligned", "rowwise_bn", "scale_rows", "short_k_pingpong",
    "scale_slot_bytes", "split_time", "square_tiles", "stage_bytes", "stream_k_grid", "stream_k_score",
    "swap_decode", "swap_rows", "swap_tokens", "tail_score", "tdm_warps_reason", "two_passes", "wave_fill",
    "wide_row_problem",
]


def plan_schedule(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                  stages: int | None = None, group_m: int = 8, consumer_partitions: int | None = None,
                  partial_blocks: int | None = None, hoist_rows: bool | None = None, scalar_columns: bool = True,
                  prefetch_operands: bool | None = None, pingpong: bool = False,
                  scale_partition: bool | None = None, split_k: int | None = None,
                  tail_split: int | None = None, swap_ab: bool | None = None,
                  stream_k: int | None = None, tdm_warps: TdmWarps | None = None,
                  cluster: int | str | None = None, sk_waves: int = 0,
                  n_blocks: tuple[int, ...] | None = None) -> Plan:
    """Pick a Plan for `spec` on `device`; any of bm/bn/stages may be forced (for tests and ablations), and
    split_k (1: never split; None: rule 14 decides), tail_split (1: no split-K tail; None: rule 15 decides) and
    swap_ab (None: rule 18 decides, when nothing about the tile, depth or partitions is forced; True: plan the
    swapped problem, with bm and bn as given for it, by default 64 x 16 on sm_90a (`swap_rows`, `swap_tokens`) and
    128 x 16 on sm_100a (rule 19)) and stream_k (None: rule 21 decides; 0: none; s >= 2: a stream-K plan with at
    most s pieces per shared tile, refused where it cannot run) and tdm_warps (gfx1250 only: `TdmWarps`, the warps
    that issue each TDM copy; None: every warp, as before seed 004) and cluster (None: rule 24 decides; 1: one CTA
    per tile; 2 or "2x1": 2-CTA clusters along M multicasting B; "1x2": along N multicasting A; refused where they
    cannot run) and sk_waves (1, with a forced stream_k: one whole wave joins the shared tiles, `Plan.sk_waves`;
    forced only: it lost at all seven zoo shapes measured, session 30) and n_blocks (None: rule 31 decides; (): a whole
    tile; e.g. (64, 16): a narrow tile's wgmma column blocks, refused where they cannot run)."""
    if n_blocks is not None and not isinstance(n_blocks, (tuple, str, bytes)) and hasattr(n_blocks, "__iter__"):
        n_blocks = tuple(n_blocks)  # (a generator checked by iterating it would reach the rules empty)
    check_arguments(spec, device, {
        "bm": bm, "bn": bn, "stages": stages, "group_m": group_m, "consumer_partitions": consumer_partitions,
        "partial_blocks": partial_blocks, "hoist_rows": hoist_rows, "scalar_columns": scalar_columns,
        "prefetch_operands": prefetch_operands, "pingpong": pingpong, "scale_partition": scale_partition,
        "split_k": split_k, "tail_split": tail_split, "swap_ab": swap_ab, "stream_k": stream_k, "tdm_warps": tdm_warps,
        "sk_waves": sk_waves, "n_blocks": n_blocks, "cluster": cluster})
    if sk_waves:
        if sk_waves != 1 or not stream_k:
            raise UnsupportedError(f"sk_waves={sk_waves!r} (with stream_k={stream_k!r}): expected 1 with a forced "
                                   "stream_k of 2 to 16 (a whole wave joins the tiles stream-K shares). Fix: pass "
                                   "stream_k=2 with sk_waves=1, or drop sk_waves")
        plan = plan_schedule(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                             consumer_partitions=consumer_partitions, partial_blocks=partial_blocks,
                             hoist_rows=hoist_rows, scalar_columns=scalar_columns, prefetch_operands=prefetch_operands,
                             pingpong=pingpong, scale_partition=scale_partition, split_k=split_k,
                             tail_split=tail_split, swap_ab=swap_ab, stream_k=stream_k, tdm_warps=tdm_warps,
                             cluster=cluster, n_blocks=n_blocks)
        if not plan.stream_k:  # (the rules planned whole tiles: a wave that joins no shared tiles)
            raise UnsupportedError(f"sk_waves={sk_waves} with stream_k={stream_k}: the plan for {spec.short()} has no "
                                   f"stream-K region ({plan.short()}: its tiles fill whole waves, or another rule "
                                   "planned them whole) for a wave to join. Fix: drop sk_waves")
        return replace(plan, sk_waves=sk_waves)
    # (what the caller forced, before rules 26-29 set some of them: rule 22 refuses those it does not read)
    unread_by_22 = {"hoist_rows": hoist_rows is not None, "scalar_columns": not scalar_columns,
                    "prefetch_operands": prefetch_operands is not None,
                    "tdm_warps": tdm_warps not in (None, TdmWarps.EVERY)}
    two_pass = False  # rule 29: a rowwise quantization across tiles along N, in two passes
    if spec.epilogue is not None and spec.epilogue.group_amax() is not None:  # rules 26, 27 and 29
        rowwise = spec.epilogue.rowwise()
        two_pass = two_passes(spec)
        problems = quantized_problems(spec, device, bn=bn, pingpong=pingpong, partial_blocks=partial_blocks,
                                      split_k=split_k, tail_split=tail_split, swap_ab=swap_ab, stream_k=stream_k,
                                      cluster=cluster, prefetch_operands=prefetch_operands)
        if problems:
            rule = "rowwise, rule 29" if two_pass else "rowwise, rule 27" if rowwise else "1x128, rule 26"
            unfused = "recipe='rowwise'" if rowwise else "recipe='1x128'"
            raise UnsupportedError(f"warploom.quantize in a fused epilogue ({rule}) cannot run {spec.short()}: "
                                   f"{'; '.join(problems)}. Fix: drop the conflicting option, or return the value "
                                   f"itself (out_dtype=torch.bfloat16 or torch.float32) and quantize the call's "
                                   f"result with warploom.quantize(out, {unfused})")
        bn = (bn or amax_pass_bn(spec)) if two_pass else rowwise_bn(spec.n) if rowwise else QUANT_BN
        swap_ab, split_k, tail_split, stream_k, cluster, prefetch_operands = False, 1, 1, 0, 1, False
    block = spec.epilogue.gate_up() if spec.epilogue is not None else None
    if block is not None:  # rule 28
        problems = gate_up_problems(spec, device, bn=bn, pingpong=pingpong, partial_blocks=partial_blocks,
                                    split_k=split_k, tail_split=tail_split, swap_ab=swap_ab, stream_k=stream_k,
                                    cluster=cluster)
        if problems:
            raise UnsupportedError(f"warploom.silu_mul_interleaved in a fused epilogue (block={block}, rule 28) cannot "
                                   f"run {spec.short()}: {'; '.join(problems)}. Fix: drop the conflicting option, "
                                   "or run the GEMM unfused and call warploom.silu_mul_interleaved(out, "
                                   f"block={block}) on its result")
        bn, swap_ab, split_k, tail_split, stream_k, cluster, partial_blocks = 2 * block, False, 1, 1, 0, 1, None
    if stream_k is not None and stream_k not in (0, *range(2, 17)):
        raise UnsupportedError(f"stream_k={stream_k!r}: expected None (the planner decides), 0 (no stream-K) or the "
                               "most pieces a shared tile is cut into, 2 to 16. Fix: pass one of those (e.g. "
                               "stream_k=2), or leave stream_k out")
    if partial_blocks not in (None, 1) and spec.accumulation is not Accumulation.PROMOTED:
        # (column blocks are promoted fp8's partial sums: elsewhere the option was dropped without a word)
        raise UnsupportedError(f"partial_blocks={partial_blocks!r}: promoted fp8's column blocks (use_fast_accum="
                               f"False); {spec.short()} accumulates natively, in one block. Fix: drop partial_blocks")
    if spec.grouped:  # rule 22 (stream-K where plan_grouped's last round is under half full, or forced)
        refused = {"pingpong": pingpong, "scale_partition": bool(scale_partition), "split_k": split_k not in (None, 1),
                   "tail_split": tail_split not in (None, 1), "swap_ab": bool(swap_ab),
                   "cluster": cluster not in (None, 1), "n_blocks": bool(n_blocks),
                   **unread_by_22}  # (options rule 22 does not read: they were dropped without a word)
        if any(refused.values()):
            raise UnsupportedError(f"grouped GEMMs (rule 22) run tiles of one group each, so {spec.short()} "
                                   f"cannot take {', '.join(k for k, v in refused.items() if v)} (their tiles or "
                                   "partitions are not a group's). Fix: drop them")
        # (rule 29 on a grouped GEMM: rule 22 plans the first pass, its y staged and stored in fp32)
        grouped = plan_grouped(amax_pass_spec(spec) if two_pass else spec, device, bm=bm, bn=bn, stages=stages,
                               group_m=group_m, consumer_partitions=consumer_partitions,
                               partial_blocks=partial_blocks, stream_k=stream_k, scale_partition=scale_partition)
        if not two_pass:
            return grouped
        if spec.is_fp8 and dense_operands(spec) and grouped.epilogue_subtiles == 1:
            # fp8 with a dense operand (an MoE gate) stores y in 64-column blocks: beside the grouped tile's scan
            # state and its scales the 128-column block spilled 108-116 bytes (ptxas, Triton 3.9, silu(gate) * acc at
            # 8192x4096x7168 over 8 experts: rowwise fast, blockwise), blocks of 64, 32 or 16, or two consumer
            # partitions, none; 3.6 spilled nothing either way, nor bf16 at 128 under both.
            grouped = replace(grouped, epilogue_subtiles=2)
        return replace(grouped, amax_pass=True)
    if tdm_warps not in (None, TdmWarps.EVERY) and not device.gfx1250:
        raise UnsupportedError(f"tdm_warps={tdm_warps}: TDM warp masks (rule 20, seed 004) are gfx1250's; "
                               f"{device.name} has no TDM (sm_90a's producer already issues each TMA copy from one "
                               "elected thread). Fix: drop tdm_warps, or plan for device=GFX1250")
    options = PlanOptions(bm=bm, bn=bn, stages=stages, group_m=group_m, consumer_partitions=consumer_partitions,
                          partial_blocks=partial_blocks, hoist_rows=hoist_rows, scalar_columns=scalar_columns,
                          prefetch_operands=prefetch_operands, pingpong=pingpong, scale_partition=scale_partition,
                          split_k=split_k, tail_split=tail_split, swap_ab=swap_ab, stream_k=stream_k,
                          tdm_warps=tdm_warps, cluster=cluster,
                          n_blocks=None if n_blocks is None else tuple(n_blocks))
    if two_pass:  # rule 29: the target's rule plans the first pass (its y staged and stored in fp32)
        return replace(declared(device.target).plan(amax_pass_spec(spec), device, options), amax_pass=True)
    return declared(device.target).plan(spec, device, options)  # (its target's rule: warploom.planning)


@dataclass(frozen=True)
class Explanation:
    """What `plan_schedule` considered for a problem and what it chose (`explain`, `Kernel.explain`)."""

    spec: GemmSpec
    device: str
    plan: Plan
    candidates: tuple[Candidate, ...]
    grouped: str = ""  # rule 22's last round, chosen without scoring (`grouped_reason`): what and why
    rows: str = ""  # where A's and B's rows start, when not on whole L2 lines (`rows_reason`)

    def text(self) -> str:
        lines = [f"{self.spec.short()} on {self.device}: {self.plan.short()}"]
        if self.grouped:  # (the candidates below are the ungrouped problem's: rule 22 plans on them)
            lines.append(f"  {self.grouped}")
        if self.rows:
            lines.append(f"  {self.rows}")
        g = self.spec.epilogue
        if g is not None and g.rowwise():  # which of the rowwise quantization's paths (rules 27 and 29)
            n, bn = self.spec.n, self.plan.bn
            wide = wide_row_problem(self.spec)
            why = (f"a grouped GEMM's N={n} > {QUANT_BN} (rule 27's {ROWWISE_MAX_N}-wide tile is dense-only)"
                   if self.spec.grouped else f"N={n} > {ROWWISE_MAX_N}" if wide is None else
                   f"rule 27's one {ROWWISE_MAX_N}-wide tile cannot hold N={n} with {wide}, so the row")
            lines.append(f"  rowwise quantization, rule 29: {why} spans {bn}-wide tiles: each tile stores y (fp32) to "
                         "a workspace and adds its rows' amax to an (M,) amax by an atomic max; a cast kernel then "
                         "writes q and s" if self.plan.amax_pass else
                         f"  rowwise quantization, rule 27: one {bn}-wide tile holds N={n}, its amax taken in the "
                         "tile (one pass)")
        if self.plan.n_blocks:
            blocks = self.plan.n_blocks
            lines.append(f"  narrow tile, rule 31: N={self.spec.n} fills {sum(blocks)} of the tile's {self.plan.bn} "
                         f"columns: wgmma over those only, in blocks {'+'.join(map(str, blocks))}"
                         if self.spec.n <= sum(blocks) else
                         f"  fitted tile, rule 32: {self.plan.units(self.spec.m, self.spec.n)} tiles of "
                         f"{self.plan.bm}x{sum(blocks)} (blocks {'+'.join(map(str, blocks))} of a "
                         f"{self.plan.bn}-wide slot)" if self.plan.cluster == 1 else
                         f"  fitted tile in 2x1 clusters, rule 37: {self.plan.units(self.spec.m, self.spec.n)} tiles "
                         f"of {self.plan.bm}x{sum(blocks)} (blocks {'+'.join(map(str, blocks))} of a "
                         f"{self.plan.bn}-wide slot), each CTA 64 rows of every 128 of a {2 * self.plan.bm}-row "
                         "cluster tile, B multicast")
        if not self.candidates:
            lines.append("  (chosen by a rule without scoring: swap-AB decode, sm_100a, gfx1250 or forced options)")
            if self.plan.promote_tmem:
                lines.append(f"  accumulation: {promotion_path(self.plan)}")
            if self.plan.block_scaled:
                lines.append(f"  scales: {scale_path(self.plan, self.spec)}")
            if self.spec.grouped and self.plan.acc_buffers:  # (sm_100a: tensor-memory accumulators)
                lines.append(f"  grouped: {grouped_path(self.spec, self.plan)}")
            return "\n".join(lines)
        best = min(c.score for c in self.candidates)
        lines.append(f"  {'tile':8s} {'schedule':20s} {'score':>6s}  (1.00: the best; lower is faster)")
        for c in sorted(self.candidates, key=lambda c: c.score):
            lines.append(f"  {c.tile:8s} {c.kind:20s} {c.score / best:6.2f}  {c.why}"
                         + (f"; {c.verdict}" if c.verdict else ""))
        return "\n".join(lines)

    @property
    def chosen(self) -> Candidate | None:
        """The candidate that is the plan: the one the rules took last (each later rule's choice marks the one before
        replaced); None where a rule chose without scoring."""
        return next((c for c in self.candidates if c.final), None)


def explain(spec: GemmSpec, device: DeviceInfo, **forced: object) -> Explanation:
    """Plan `spec` as `plan_schedule` does and list every candidate it scored, with its score and wave arithmetic:
    why the winner won. (Ties go to the larger tile; rules that pick without scoring list none.)"""
    trace: list[Candidate] = []
    with collecting(trace):
        plan = plan_schedule(spec, device, **forced)  # type: ignore[arg-type]
    return Explanation(spec, device.name, plan, tuple(trace),
                       grouped_reason(spec, device, plan, forced.get("stream_k") is not None),
                       rows_reason(spec, device))


def rows_reason(spec: GemmSpec, device: DeviceInfo) -> str:
    """On sm_90a, where A's or B's rows do not start on whole 128-byte L2 lines (`rows_aligned`): where they start,
    what it costs and the fix (`warploom.aligned_rows`); "" otherwise (a grouped problem's operands included)."""
    if device.target is not Target.SM90A or spec.grouped or rows_aligned(spec):
        return ""
    at = " and ".join(f"{x.upper()}'s on {spec.row_align(x)}-byte boundaries" for x in ("a", "b")
                      if spec.row_align(x) < 128)
    return (f"rows: {at}, not whole 128-byte L2 lines (L2 serves their boxes at about half the rate; the plan is "
            "priced so): warploom.aligned_rows(w) pads a weight's rows once (docs/decisions/aligned-rows.md)")


def grouped_reason(spec: GemmSpec, device: DeviceInfo, plan: Plan, forced: bool = False) -> str:
    """Rule 22's last round in `explain`'s words: whole tiles or stream-K pieces, and why (`last_round`), or that a
    `stream_k` was forced (`forced`; said even where the default at the plan's tile would be the same: a forced fp8
    stream-K runs a 128-wide tile, the default a 256-wide one); "" for an ungrouped problem."""
    if not spec.grouped:
        return ""
    if spec.grouping is Grouping.K_OFFSETS:
        return "rule 22: whole tiles (a K-grouped GEMM's tiles run their groups' K ranges: no stream-K)"
    pieces, why = last_round(spec, device, plan.bm, plan.bn)
    chosen = f"stream-K in {plan.stream_k} pieces" if plan.stream_k else "whole tiles"
    if plan.stream_k == pieces and not forced:
        return f"rule 22: {why}"
    return f"rule 22: {chosen}, forced (by default {why})"

