"""sm_100a's planner rule (rule 19): tcgen05 MMAs into tensor-memory accumulators, an MMA warp, an epilogue
partition; MX and NVFP4 block scales applied by the MMA, fp32 blockwise ones promoted through tensor-memory partials;
rule 18's swap-AB decode. `plan` is the target's (its declaration's `plan`, `warploom.targets.sm100`)."""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.device import TMEM_COLUMNS, DeviceInfo
from warploom.errors import UnsupportedError
from warploom.planning.common import (
    DECODE_STAGES,
    MAX_STAGES,
    dense_operands,
    native_problems,
    nvfp4_bk,
    stage_bytes,
    swap_decode,
    swap_tokens,
)
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.spec import Accumulation, GemmSpec, Grouping, ScaleLayout, ScaleRecipe
from warploom.target import Target

# The sm_90a schedule options rule 19 takes too (any other forced one is refused by name). scale_partition picks
# MX / NVFP4's scale path (`scale_partition_rule`).
TAKES = frozenset({"swap_ab", "prefetch_operands", "scalar_columns", "scale_partition"})


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """Rule 19, with rule 18's swap-AB decode (C^T = B^T A^T, the weight's rows on tcgen05's 128) where it applies:
    as on sm_90a, any forced tile, depth or split (1 on sm_100a) turns rule 18 off. Another sm_90a option is
    refused by name."""
    options.refuse_sm90_options(Target.SM100A, "rule 19", TAKES)
    bm, bn, stages, group_m, swap_ab = options.bm, options.bn, options.stages, options.group_m, options.swap_ab
    scalar_columns, prefetch_operands = options.scalar_columns, options.prefetch_operands
    scale_partition = options.scale_partition
    if swap_ab is None:
        split_forced = options.split_k is not None or options.tail_split is not None
        swap_ab = all(f is None for f in (bm, bn, stages)) and not split_forced and swap_decode(spec, tmem_scales=True)
    if not swap_ab:
        return plan_blackwell(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                              scalar_columns=scalar_columns, prefetch_operands=prefetch_operands,
                              scale_partition=scale_partition)
    # (row-major MX / NVFP4 scales swap too here: the scale partition reads scale_a's (M, K/32) rows and scale_b's
    # (N, K/32) rows alike, so the swapped kernel's scale_a is the problem's scale_b; `GemmSpec.swap_problems`)
    problems = spec.swap_problems(tmem_scales=True)
    if problems:
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: "
                               f"{'; '.join(problems)}. Fix: drop swap_ab")
    tokens = bn or swap_tokens(spec.m)
    try:
        swapped = plan_blackwell(spec.swapped(tmem_scales=True), device, bm=bm, bn=tokens, stages=stages,
                                 group_m=group_m, scalar_columns=scalar_columns, prefetch_operands=prefetch_operands,
                                 scale_partition=scale_partition)
    except UnsupportedError as e:
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {bm or 128} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}; or drop "
                               "swap_ab") from None
    return replace(swapped, swap_ab=True)


# Rule 19 (sm_100a): tensor memory holds TMEM_COLUMNS fp32 columns per SM: two 256-wide accumulators.
_BLACKWELL_BUFFERS = 2
_BLACKWELL_EPILOGUE_BLOCKS = 4
_BLACKWELL_EPILOGUE_REGS = 232


def plan_blackwell(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                   stages: int | None = None, group_m: int = 8, scalar_columns: bool = True,
                   prefetch_operands: bool | None = None, scale_partition: bool | None = None) -> Plan:
    """Rule 19: the plan of a plain GEMM on an sm_100a device (tensor-memory accumulators, an MMA warp, an epilogue
    partition). Raises UnsupportedError, naming what to change, for what the sm_100a schedule does not cover yet."""
    # MX fp8 (seed 001): the tcgen05 block-scaled MMA applies the e8m0 scales per 32 of K and accumulates in fp32
    # itself, so nothing is promoted; the scales ride the A/B stages and tcgen05.cp copies them to tensor memory.
    # NVFP4 takes the same path with e4m3 scales per 16 and its global scale in the epilogue.
    mx = spec.scale.microscaled
    # fp32 blockwise (DeepSeek 1x128 x 128x128 and its kin): the block-scaled MMA takes only e8m0 / e4m3 scales, so
    # these are promoted, through tensor-memory partials (`promotion_path`, passes/blackwell_promote.py).
    promoted = spec.scale.is_blockwise and not mx
    problems = native_problems(replace(spec, scale=ScaleRecipe.TENSORWISE, accumulation=Accumulation.NATIVE,
                                        scale_layout=ScaleLayout.ROW_MAJOR, b_dtype=spec.a_dtype)) \
        if mx or promoted else native_problems(spec)
    if problems:
        raise UnsupportedError(f"sm_100a (planner rule 19) plans native accumulation with tensorwise, rowwise, MX "
                               f"(fp8, fp4), NVFP4, fp32 blockwise (promoted) or no scales so far; {spec.short()} has "
                               f"{'; '.join(problems)}. Fix: plan it "
                               "for an sm_90a device (device=H100_SXM)")
    if scale_partition is not None and not mx:
        raise UnsupportedError(f"scale_partition={scale_partition}: the sm_100a schedule (rule 19) takes it only for "
                               f"MX / NVFP4 block scales (it picks how they reach tensor memory); {spec.short()} has "
                               f"{'no' if spec.scale is ScaleRecipe.NONE else spec.scale.value} scales. Fix: drop "
                               "scale_partition")
    if promoted:
        return _plan_blackwell_promoted(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m)
    if spec.scale is ScaleRecipe.NVFP4 and spec.epilogue is not None:
        raise UnsupportedError("sm_100a NVFP4 with a fused epilogue: its global scales are an epilogue step of the "
                               "plain kernel, and a fused graph would not apply them. Fix: drop the epilogue and "
                               "apply it to scaled_mm's result")
    # Seed 000 or seed 001 (`scale_partition_rule`): row-major scales always take the scale partition; blocked ones
    # tcgen05.cp from the A/B stage, unless the tile's scale rows are not the first of the 128-row chunk it copies.
    partition = mx and scale_partition_rule(spec, bn, scale_partition)
    bm = bm or 128
    if bm != 128 or bn not in (None, 16, 32, 64, 128, 256):
        raise UnsupportedError(f"sm_100a tiles: bm=128 (one CTA's tcgen05 MMA) and bn in (16, 32, 64, 128, 256), got "
                               f"{bm=} {bn=}. Fix: leave bm and bn to the planner")
    # 128 of K a k-block for 8-bit (128 bytes a row) and 4-bit inputs (64 bytes: MX fp4 keeps one 128x4 chunk of
    # scales per k-block, what tcgen05.cp copies), 64 for 16-bit. NVFP4: a 128x4 chunk of e4m3 scales covers 4 x 16
    # of K, so a 128-deep k-block takes two chunks a row block (one (rows, 8) tcgen05_copy, two UTCCP) and one
    # tcgen05_mma_scaled, which Triton issues as two 64-deep kind::mxf4nvf4 MMAs, the second reading the buffer's
    # columns 4..7; half the k-blocks, waits and stage hand-offs of BK 64. K not a multiple of 128 keeps BK 64 (its
    # last k-block would be half padding). Stages of 128 fit every NVFP4 tile (no fused epilogue: 6 at 128x256).
    bk = nvfp4_bk(spec) if spec.scale is ScaleRecipe.NVFP4 else 128 if spec.a_dtype.bits <= 8 else 64
    def fits(width: int) -> tuple[int, int, int]:
        """(stages that fit, epilogue blocks, staging bytes) at this width: one staging block per output and one per
        dense operand of a fused epilogue (passes/blackwell.py)."""
        blocks = max(1, min(_BLACKWELL_EPILOGUE_BLOCKS, width // 64))  # (a swapped decode tile: one block)
        staging = bm * (width // blocks) * (sum(d.bytes for d in spec.output_dtypes())
                                            + sum(d.bytes for d in dense_operands(spec)))
        # A swapped decode tile (16 or 32 tokens wide) streams the weight: a deep ring, as rule 16's on sm_90a.
        cap = DECODE_STAGES if width <= 32 else MAX_STAGES
        barriers = 8 * 2 * (cap + _BLACKWELL_BUFFERS)
        return (min(cap, (device.smem_per_block - staging - barriers)
                     // stage_bytes(spec, bm, width, bk, scale_partition=partition)), blocks, staging)

    # 256 wide unless the stages and staging buffers do not fit (many outputs or dense operands): the widest tile
    # with two stages, else the widest with one.
    # MX: 128 wide by default, so two accumulators (256 columns) leave tensor memory for the scale buffers and the
    # epilogue drains one tile under the next one's mainloop; a forced 256 gets one accumulator (`tmem_budget`: two
    # would take all 512 columns before the scales), so its epilogue does not overlap the mainloop. Not measured:
    # no sm_100a GPU is at hand.
    widths = (bn,) if bn is not None else (128,) if mx else (256, 128, 64)
    width = next((w for w in widths if fits(w)[0] >= (stages or 2)),
                 next((w for w in widths if fits(w)[0] >= 1), widths[-1]))
    fit, blocks, staging = fits(width)
    s = fit if stages is None else stages
    if not 1 <= s <= fit:
        raise UnsupportedError(f"sm_100a: {s} stages of {bm}x{width}x{bk} do not fit beside the epilogue's "
                               f"{staging}-byte staging buffers in {device.smem_per_block} bytes (at most {fit}). Fix: "
                               "fewer stages, a narrower bn, or fewer outputs or dense operands")
    tiles = max(1, math.ceil(spec.m / bm) * math.ceil(spec.n / width))
    dense = bool(dense_operands(spec))
    acc_buffers = tmem_budget(spec, bm, width, bk, partition)[0] if mx else _BLACKWELL_BUFFERS
    return Plan(bm=bm, bn=width, bk=bk, stages=s, consumer_warps=4, group_m=group_m,
                grid=min(device.sm_count, tiles), consumer_regs=_BLACKWELL_EPILOGUE_REGS, epilogue_subtiles=blocks,
                hoist_rows=True, scalar_columns=scalar_columns,
                prefetch_operands=dense if prefetch_operands is None else prefetch_operands,
                acc_buffers=acc_buffers, block_scaled=mx, scale_partition=partition, scale_warps=4 if partition else 1,
                target=Target.SM100A)


SCALE_BUFFERS = 2  # seed 000: the partition fills one buffer while the MMA reads the other (passes/blackwell_scales.py)


def scale_partition_rule(spec: GemmSpec, bn: int | None, forced: bool | None = None) -> bool:
    """Rule 19's scale path for MX / NVFP4 (issue 25): True for seed 000's scale partition, False for seed 001's
    tcgen05.cp from the A/B stage. `forced` is the caller's ``scale_partition`` (None: this rule decides).

    - **Row-major scales: the partition, always.** tcgen05.cp copies 128x4 chunks of torch's blocked layout from
      shared memory; row-major bytes are not in it (padding and swizzling them would be a pass over the scales
      per call, per expert for MoE). Forcing seed 001 on them is refused by name.
    - **Blocked scales: tcgen05.cp, unless the tile's rows are not the first rows of a chunk.** Seed 001's scales
      ride the A/B stage under its one barrier, so they are fetched `stages` k-blocks ahead of their MMA (up to 6;
      12 for decode) and the MMA warp copies them asynchronously in issue order; the partition's loads run only
      its two buffers ahead, with their global-memory latency between a buffer's release and its refill, and take
      a warpgroup of 48 to 104 registers. What seed 001 wastes is at most (128 - BN) x 4 bytes of a stage for a
      narrow tile (448 of the 18,944 of a swapped MX fp8 decode stage at N = 16: 2.4%), and tensor memory gains
      nothing from the partition either: its tcgen05.st writes all 128 lanes of the buffer too. So blocked scales
      take the partition only where tcgen05.cp cannot serve the tile: a 16-, 32- or 64-wide tile over an N wider
      than the tile (every tile but the first reads rows inside a 128-row chunk, which Triton cannot address in a
      tensor-memory scale buffer; the partition loads the tile's own rows from the blocked layout). Forcing
      ``scale_partition=True`` takes it anywhere (the partition reads the blocked layout at any tile); forcing
      False where tcgen05.cp cannot serve the tile is refused by name.

    Not measured (no sm_100a GPU): the rule rests on the lookahead and the bytes above, not on timings."""
    row_major = spec.scale_layout is not ScaleLayout.BLOCKED
    narrow = bn is not None and bn < 128 and spec.n > bn
    if forced is False and (row_major or narrow):
        why = ("row-major scales are not in torch's blocked layout, whose 128x4 chunks tcgen05.cp copies" if row_major
               else f"a {bn}-wide tile over N={spec.n} reads its B scales from inside a 128-row tcgen05.cp chunk "
               "(rows 64..127 for every second 64-wide tile), which Triton cannot address in a tensor-memory scale "
               "buffer")
        raise UnsupportedError(f"scale_partition=False (seed 001's tcgen05.cp path) on sm_100a for {spec.short()}"
                               f"{f' at bn={bn}' if bn else ''}: {why}. Fix: drop scale_partition (the planner "
                               "takes seed 000's scale partition here)"
                               + ("" if row_major else ", or bn=128"))
    if forced is not None:
        return forced
    return row_major or narrow


def scale_columns(spec: GemmSpec, bm: int, bn: int, bk: int, partition: bool) -> int:
    """Tensor-memory columns of an MX / NVFP4 plan's scale buffers: BK / scale_k 32-bit columns per 128 rows of each
    operand's tile (a 256-wide B tile: two 128-row chunks, twice the columns), two buffers each on seed 000's
    path (`SCALE_BUFFERS`), one on seed 001's (one thread's tcgen05.cp and MMA run in issue order)."""
    cols = bk // spec.scale.scale_k
    return (SCALE_BUFFERS if partition else 1) * cols * (-(-bm // 128) + -(-bn // 128))


def tmem_budget(spec: GemmSpec, bm: int, bn: int, bk: int, partition: bool) -> tuple[int, int]:
    """(accumulators, columns used) of an MX / NVFP4 plan's tensor memory: two BN-column fp32 accumulators (the
    epilogue drains one under the next tile's mainloop) where they fit beside the scale buffers in TMEM_COLUMNS,
    else one. At 128 wide: 256 + 16 (MX) of 512 with the partition; at 256 wide two accumulators take all 512, so
    one: 256 + 24 (MX, partition: A's 2 x 4 and B's 2 x 8), 256 + 48 (NVFP4 at BK 128). Raises UnsupportedError,
    naming the columns, where not even one fits."""
    sc = scale_columns(spec, bm, bn, bk, partition)
    for accs in (_BLACKWELL_BUFFERS, 1):
        if accs * bn + sc <= TMEM_COLUMNS:
            return accs, accs * bn + sc
    raise UnsupportedError(f"sm_100a {spec.scale.value}: a {bm}x{bn} tile's fp32 accumulator ({bn} columns) and its "
                           f"scale buffers ({sc} columns) exceed tensor memory's {TMEM_COLUMNS} columns. Fix: a "
                           "narrower bn, or leave bn to the planner")


def scale_path(plan: Plan, spec: GemmSpec | None = None) -> str:
    """Which way an sm_100a block-scaled plan brings its scales to the MMA, and why (`scale_partition_rule`), with
    the tensor-memory columns it uses (printed by `explain` and `warploom demo`)."""
    if not plan.block_scaled:
        return "no block scales"
    cols = plan.bk // (spec.scale.scale_k if spec is not None else 32)
    acc = plan.acc_buffers * plan.bn
    b_chunks = -(-plan.bn // 128)
    swap = " (swap-AB decode: the kernel's A is the problem's B and its scale_a the problem's scale_b)" \
        if plan.swap_ab else ""
    if plan.scale_partition:
        sc = SCALE_BUFFERS * cols * (1 + b_chunks)
        blocked = spec is not None and spec.scale_layout is ScaleLayout.BLOCKED
        n = 0 if spec is None else spec.m if plan.swap_ab else spec.n  # (the kernel's N)
        why = (f"a {plan.bn}-wide tile over N={n} reads rows inside a 128-row chunk, which tcgen05.cp cannot serve"
               if plan.bn < 128 and n > plan.bn else "as forced (scale_partition=True)")
        src = (f"blocked (to_blocked) scales ({why}); the partition loads the tile's own rows at their blocked "
               "addresses" if blocked else "row-major scales (tcgen05.cp copies only the blocked layout)")
        nv = "" if spec is None or spec.scale is not ScaleRecipe.NVFP4 else (
            f" NVFP4: e4m3 scales per 16 of K, {cols} a row a k-block of {plan.bk}, read by {plan.bk // 64} "
            "64-deep kind::mxf4nvf4 MMA(s), each its own 4 columns; the fp32 global scales multiply the accumulator "
            "in the epilogue.")
        accs = ("two accumulators (the epilogue drains one under the next tile's mainloop)" if plan.acc_buffers > 1
                else f"one accumulator (two of {plan.bn} columns would take all 512 before the scales, so the "
                "epilogue does not overlap the next tile's mainloop)")
        return (f"seed 000: {src}; a 4-warp scale partition loads each k-block's scales with ordinary "
                f"loads and tcgen05.st's them into one of two tensor-memory buffers per operand, the scaled MMA "
                f"releasing the buffer as it completes{swap}. Tensor memory: {plan.acc_buffers} accumulator(s) of "
                f"{plan.bn} columns ({acc}) + 2 x ({cols} + {cols * b_chunks}) scale columns ({sc}) = {acc + sc} of "
                f"512: {accs}, and two scale buffers (the partition fills one while the MMA reads the other).{nv} "
                "Not measured: no sm_100a GPU is at hand")
    sc = cols * (plan.bm // 128) + cols * b_chunks
    return (f"seed 001: blocked (to_blocked) scales ride the A/B stage by TMA, fetched as many k-blocks ahead as the "
            f"ring's stages, and tcgen05.cp copies them into one tensor-memory buffer per operand before each MMA "
            f"(one thread's tcgen05 ops run in order, so one buffer suffices){swap}; the planner keeps this path for "
            f"blocked scales wherever the tile's rows start a 128-row chunk (seed 000's partition would run only "
            f"two buffers ahead). Tensor memory: {plan.acc_buffers} accumulator(s) ({acc} columns) + scales ({sc}) "
            f"= {acc + sc} of 512")


# Rule 19, fp32 blockwise: tensor-memory partials of 128x128 fp32 (128 columns each); four take all 512 columns.
PROMOTED_PARTIALS = 4
_PROMOTED_TILE = 128
_PROMOTING_WARPS = 8


def promotion_path(plan: Plan) -> str:
    """Which way an sm_100a plan accumulates, and why (printed by `explain` and `warploom demo`)."""
    if not plan.promote_tmem:
        return ("native: the tcgen05 MMA accumulates in tensor memory (block-scaled MMAs apply e8m0 / e4m3 scales "
                "themselves)" if plan.acc_buffers else "registers (sm_90a wgmma)")
    cols = plan.acc_buffers * plan.bn
    return (f"promoted through tensor memory: fp32 block scales are no power of two, so the block-scaled MMA (e8m0 "
            f"scales) cannot apply them; each k-block's MMA writes a fresh {plan.bm}x{plan.bn} partial into one of "
            f"{plan.acc_buffers} tensor-memory buffers ({cols} of 512 columns), which the epilogue partition loads, "
            f"multiplies by scale_a[row] x scale_b[block] and adds into a register accumulator (over "
            f"{plan.consumer_warps} warps, {plan.bm * plan.bn // (32 * plan.consumer_warps)} fp32 registers a "
            "thread), as DeepGEMM's sm100 fp32-scale kernel does. The accumulator lives in registers, "
            "not in a second tensor-memory buffer: that would cost a tcgen05.ld and a tcgen05.st of it every "
            f"k-block, and the columns it takes would leave {plan.acc_buffers - 1} partials; {plan.acc_buffers} "
            f"let the MMA warp run {plan.acc_buffers} k-blocks ahead, over the tile's stores. Not measured: no "
            "sm_100a GPU is at hand")


def _plan_blackwell_promoted(spec: GemmSpec, device: DeviceInfo, *, bm: int | None, bn: int | None,
                             stages: int | None, group_m: int) -> Plan:
    """Rule 19 for fp32 blockwise scales: 128x128 tiles, PROMOTED_PARTIALS tensor-memory partials, the accumulator
    in the epilogue partition's registers (`promotion_path` says why)."""
    if spec.epilogue is not None:
        raise UnsupportedError(f"sm_100a fp32 blockwise ({spec.scale.value}) with a fused epilogue: its register "
                               "accumulator and partial leave the promoting partition no registers for the graph. "
                               "Fix: drop the epilogue and apply it to scaled_mm's result, or plan for an sm_90a "
                               "device (device=H100_SXM)")
    if (bm or _PROMOTED_TILE, bn or _PROMOTED_TILE) != (_PROMOTED_TILE, _PROMOTED_TILE):
        raise UnsupportedError(f"sm_100a fp32 blockwise tiles are 128x128 (the accumulator lives in the 4-warp "
                               "epilogue partition's registers: 64 columns a thread over 8 warps; 256 would "
                               "spill), got "
                               f"{bm=} {bn=}. Fix: leave bm and bn to the planner")
    bm = bn = _PROMOTED_TILE
    bk = 128  # one k-block per 128-deep scale block
    blocks = bn // 64
    staging = bm * (bn // blocks) * spec.out_dtype.bytes
    barriers = 8 * 2 * (MAX_STAGES + PROMOTED_PARTIALS)
    fit = min(MAX_STAGES, (device.smem_per_block - staging - barriers) // stage_bytes(spec, bm, bn, bk))
    s = fit if stages is None else stages
    if not 2 <= s <= fit:
        raise UnsupportedError(f"sm_100a fp32 blockwise: {s} stages of {bm}x{bn}x{bk} (with their scales) do not fit "
                               f"beside the {staging}-byte staging buffer in {device.smem_per_block} bytes (2 to "
                               f"{fit}). Fix: another depth, or leave stages to the planner")
    tiles = max(1, math.ceil(spec.m / bm) * math.ceil(spec.n / bn))
    # Eight promoting warps (two warpgroups, each half of every 64-column block): with four (128 accumulator
    # registers a thread) ptxas spilled 128 bytes at 248 registers, with 64- and with 32-column partial blocks alike
    # (Triton 3.6, ptxas for sm_100a); with eight, none at 168 registers.
    return Plan(bm=bm, bn=bn, bk=bk, stages=s, consumer_warps=_PROMOTING_WARPS, group_m=group_m,
                grid=min(device.sm_count, tiles), consumer_regs=_BLACKWELL_EPILOGUE_REGS, epilogue_subtiles=blocks,
                acc_buffers=PROMOTED_PARTIALS, promote_tmem=True, target=Target.SM100A)


# Rule 22 on sm_100a: a grouped GEMM's tile from its rows per group, every tile 128 rows (tcgen05's M).
GROUPED_WIDE_ROWS = 256


def grouped_width(spec: GemmSpec, rows_per_group: float) -> int:
    """Rule 22's tile width on sm_100a: 256 from `GROUPED_WIDE_ROWS` rows a group, as on sm_90a (at most half a
    128-row tile is lost per group, and the wide tile reads A once per 256 columns), else 128; always 128 for MX /
    NVFP4, rule 19's width for block scales (two accumulators beside the scale buffers). No 64-row tile: tcgen05's
    one-CTA MMA is 128 rows here (`plan_blackwell`), so decode-sized groups keep 128 rows, half of them past the
    group's end at 64 rows a group. Not measured: no sm_100a GPU is at hand."""
    return 256 if rows_per_group >= GROUPED_WIDE_ROWS and not spec.scale.microscaled else 128


def plan_blackwell_grouped(spec: GemmSpec, device: DeviceInfo, *, bm: int | None, bn: int | None,
                           stages: int | None, group_m: int, stream_k: int | None,
                           consumer_partitions: int | None = None, partial_blocks: int | None = None,
                           scale_partition: bool | None = None) -> Plan:
    """Rule 22 on sm_100a: an M-grouped GEMM's plan is rule 19's for the same GEMM ungrouped at `grouped_width`'s
    tile (or the forced one), with the grid at the SM count (the tile count is known on the device only; CTAs
    without a tile exit at once). Whole tiles: no stream-K (not built on sm_100a). Refuses by name what the sm_100a
    grouped kernel does not take (`GemmSpec.sm100_grouped_problems`), and the sm_90a options forced on it (never
    ignored: its one epilogue partition, and per-expert scales through the scale partition only)."""
    problems = spec.sm100_grouped_problems()
    if stream_k:
        problems.append(f"stream_k={stream_k} (stream-K is not built on sm_100a)")
    # (forced options this plan has no use for: refused, never dropped, as `PlanOptions.refuse_sm90_options` does)
    forced = [f"{k}={v}" for k, v in (("consumer_partitions", consumer_partitions),
                                      ("partial_blocks", partial_blocks)) if v is not None]
    if scale_partition is False:
        forced.append("scale_partition=False")
    if forced:
        why = ("options the sm_100a grouped kernel has no use for: it has rule 19's one epilogue partition (no sm_90a "
               "consumer partitions or partial blocks) and reads per-expert scales through the scale partition only")
        if not problems:
            raise UnsupportedError(f"{', '.join(forced)}: {why} ({spec.short()} on {device.name}). Fix: drop them")
        problems.append(f"{', '.join(forced)} ({why})")
    if problems:
        # (sm_90a runs every other grouped GEMM, but not block-scaled ones: those need what sm_100a takes)
        fix = (f"pass row-major scales (scale_b (G, N, K/{spec.scale.scale_k})) on an M-grouped call with offs, "
               "without stream_k or an epilogue, and MX fp8 or fp4 on both operands" if spec.scale.microscaled
               else "plan it for an sm_90a device (device=H100_SXM)")
        raise UnsupportedError(f"grouped GEMMs (rule 22) on sm_100a ({device.name}) do not take "
                               f"{'; '.join(problems)}: {spec.short()}. Fix: {fix}")
    width = bn or grouped_width(spec, spec.m / max(spec.groups, 1))
    dense = replace(spec, grouping=Grouping.NONE, groups=0)
    dense_plan = plan_blackwell(dense, device, bm=bm, bn=width, stages=stages, group_m=group_m)
    return replace(dense_plan, grid=device.sm_count)


def grouped_path(spec: GemmSpec, plan: Plan) -> str:
    """Why an sm_100a grouped plan has its tile (rule 22 on sm_100a, `grouped_width`), and what its kernel does per
    group (printed by `explain`)."""
    rows = spec.m / max(spec.groups, 1)
    why = (f"forced bn={plan.bn}" if plan.bn != grouped_width(spec, rows) else
           f"{rows:.0f} rows a group on average: 128 rows (tcgen05's), {plan.bn} wide "
           + ("(block scales keep rule 19's 128: two accumulators beside the scale buffers)" if spec.scale.microscaled
              else f"({'from' if plan.bn == 256 else 'under'} {GROUPED_WIDE_ROWS} rows a group)"))
    v = spec.scale.scale_k if spec.scale.microscaled else 0
    nv = " NVFP4's global scale of B per expert, (G,), in the epilogue." if spec.scale is ScaleRecipe.NVFP4 else ""
    scales = (f" {spec.scale.value} scales: scale_a in the grouped row space, scale_b (G, N, K/{v}) read at the "
              f"tile's expert (sb_ptr + grp * sb_stride_g) by seed 000's scale partition, unpadded.{nv}"
              if spec.scale.microscaled else "")
    return (f"rule 22 on sm_100a: {why}; whole tiles over the (group, tile) pairs of the on-device scan of offs, "
            f"the grid at the {plan.grid} SMs, B through a 3-D descriptor at [group, n, k], C's stores clipped at "
            f"each group's last row (a ragged last tile's blocks read back and stored masked).{scales} Not measured: "
            "no sm_100a GPU is at hand")
