"""sm_100a's planner rule (rule 19): tcgen05 MMAs into tensor-memory accumulators, an MMA warp, an epilogue
partition; MX and NVFP4 block scales applied by the MMA, fp32 blockwise ones promoted through tensor-memory partials;
rule 18's swap-AB decode. `plan` is the target's (its declaration's `plan`, `warploom.targets.sm100`)."""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.device import DeviceInfo
from warploom.errors import UnsupportedError
from warploom.planning.common import (
    DECODE_STAGES,
    MAX_STAGES,
    SWAP_MAX_M,
    dense_operands,
    native_problems,
    nvfp4_bk,
    stage_bytes,
    swap_decode,
    swap_tokens,
)
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.spec import Accumulation, GemmSpec, ScaleLayout, ScaleRecipe
from warploom.target import Target

# The sm_90a schedule options rule 19 takes too (any other forced one is refused by name).
TAKES = frozenset({"swap_ab", "prefetch_operands", "scalar_columns"})


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """Rule 19, with rule 18's swap-AB decode (C^T = B^T A^T, the weight's rows on tcgen05's 128) where it applies:
    as on sm_90a, any forced tile, depth or split (1 on sm_100a) turns rule 18 off. Another sm_90a option is
    refused by name."""
    options.refuse_sm90_options(Target.SM100A, "rule 19", TAKES)
    bm, bn, stages, group_m, swap_ab = options.bm, options.bn, options.stages, options.group_m, options.swap_ab
    scalar_columns, prefetch_operands = options.scalar_columns, options.prefetch_operands
    if swap_ab is None:
        split_forced = options.split_k is not None or options.tail_split is not None
        swap_ab = all(f is None for f in (bm, bn, stages)) and not split_forced and swap_decode(spec)
    if not swap_ab:
        return plan_blackwell(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                              scalar_columns=scalar_columns, prefetch_operands=prefetch_operands)
    if spec.swap_problems():
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: "
                               f"{'; '.join(spec.swap_problems())}; drop swap_ab")
    tokens = bn or swap_tokens(spec.m)
    try:
        swapped = plan_blackwell(spec.swapped(), device, bm=bm, bn=tokens, stages=stages, group_m=group_m,
                                 scalar_columns=scalar_columns, prefetch_operands=prefetch_operands)
    except UnsupportedError as e:
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {bm or 128} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}") from None
    return replace(swapped, swap_ab=True)


# Rule 19 (sm_100a): tensor memory holds TMEM_COLUMNS fp32 columns per SM: two 256-wide accumulators.
_BLACKWELL_BUFFERS = 2
_BLACKWELL_EPILOGUE_BLOCKS = 4
_BLACKWELL_EPILOGUE_REGS = 232


def plan_blackwell(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                   stages: int | None = None, group_m: int = 8, scalar_columns: bool = True,
                   prefetch_operands: bool | None = None) -> Plan:
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
    if promoted:
        return _plan_blackwell_promoted(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m)
    if spec.scale is ScaleRecipe.NVFP4 and spec.epilogue is not None:
        raise UnsupportedError("sm_100a NVFP4 with a fused epilogue: its global scales are an epilogue step of the "
                               "plain kernel, and a fused graph would not apply them. Fix: drop the epilogue and "
                               "apply it to scaled_mm's result")
    # Row-major MX and NVFP4 scales (plain, unpadded, any stride) take seed 000's path: a scale partition loads them
    # with ordinary loads and tcgen05.st's them into two tensor-memory buffers (`scale_path`), so they never enter
    # the A/B stage and a narrow tile's rows need no 128-row chunk. NVFP4 keeps its k-block (`nvfp4_bk`): at BK 128
    # each buffer holds 8 e4m3 scales a row, of which the MMA's two 64-deep halves read columns 0..3 and 4..7.
    rowwise_scales = mx and spec.scale_layout is not ScaleLayout.BLOCKED
    if rowwise_scales and bn not in (None, 16, 32, 64, 128):
        raise UnsupportedError(f"sm_100a MX / NVFP4 with row-major scales: bn in (16, 32, 64, 128) (the scale "
                               f"partition's tensor-memory buffers hold 128 rows of scales; a 256-wide tile's B "
                               f"scales would need two), got {bn=}. Fix: leave bn to the planner, or pass "
                               "to_blocked(scale) for both scales (seed 001's tcgen05.cp path takes 256)")
    if mx and not rowwise_scales and bn not in (None, 16, 32, 64, 128, 256):
        raise UnsupportedError(f"sm_100a MX: bn in (16, 32, 64, 128, 256) (tcgen05.cp copies B's scales in 128-row "
                               f"chunks; a 16-, 32- or 64-wide tile copies one and reads its first rows), got {bn=}. "
                               "Fix: leave bn to the planner")
    if mx and not rowwise_scales and bn is not None and bn < 128 and spec.n > bn:
        # A narrow tile's scales are the first bn rows of the 128-row block at off_n // 128, which holds them only
        # for the tile at off_n = 0: a second tile's (rows bn ...) would need a copy from inside the block.
        raise UnsupportedError(f"sm_100a MX: a {bn}-wide tile reads its B scales from the first {bn} rows of a "
                               f"128-row tcgen05.cp chunk, so N must fit one tile, got N={spec.n} (rule 18 swaps "
                               f"decode with the tokens as N: at most {SWAP_MAX_M}; a 64-wide tile over a wider N "
                               "would need rows 64..127 of the chunk, which Triton 3.6 cannot address in a "
                               "tensor-memory scale buffer). Fix: bn=128, pass row-major scales (seed 000's scale "
                               "partition loads any tile's rows), or leave bn to the planner")
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
                     // stage_bytes(spec, bm, width, bk, scale_partition=rowwise_scales)), blocks, staging)

    # 256 wide unless the stages and staging buffers do not fit (many outputs or dense operands): the widest tile
    # with two stages, else the widest with one.
    # MX: 128 wide by default, so two accumulators (256 columns) leave tensor memory for the scale buffers and the
    # epilogue drains one tile under the next one's mainloop; a forced 256 gets one accumulator (256 + 12 scale
    # columns of 512; two would take all 512), so its epilogue does not overlap the mainloop. Not measured: no
    # sm_100a GPU is at hand.
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
    return Plan(bm=bm, bn=width, bk=bk, stages=s, consumer_warps=4, group_m=group_m,
                grid=min(device.sm_count, tiles), consumer_regs=_BLACKWELL_EPILOGUE_REGS, epilogue_subtiles=blocks,
                hoist_rows=True, scalar_columns=scalar_columns,
                prefetch_operands=dense if prefetch_operands is None else prefetch_operands,
                acc_buffers=1 if mx and width == 256 else _BLACKWELL_BUFFERS, block_scaled=mx,
                scale_partition=rowwise_scales, scale_warps=4 if rowwise_scales else 1, target=Target.SM100A)


def scale_path(plan: Plan, spec: GemmSpec | None = None) -> str:
    """Which way an sm_100a block-scaled plan brings its scales to the MMA, and why, with the tensor-memory trade
    (printed by `explain` and `warploom demo`)."""
    if not plan.block_scaled:
        return "no block scales"
    cols = plan.bk // (spec.scale.scale_k if spec is not None else 32)
    acc = plan.acc_buffers * plan.bn
    if plan.scale_partition:
        sc = 2 * 2 * cols
        nv = "" if spec is None or spec.scale is not ScaleRecipe.NVFP4 else (
            f" NVFP4: e4m3 scales per 16 of K, {cols} a row a k-block of {plan.bk}, read by {plan.bk // 64} "
            "64-deep kind::mxf4nvf4 MMA(s), each its own 4 columns; the fp32 global scales multiply the accumulator "
            "in the epilogue.")
        return (f"seed 000: row-major scales; a 4-warp scale partition loads each k-block's scales with ordinary "
                f"loads and tcgen05.st's them into one of two tensor-memory buffers per operand, the scaled MMA "
                f"releasing the buffer as it completes. Tensor memory: {plan.acc_buffers} accumulator(s) of "
                f"{plan.bn} columns ({acc}) + 2 x 2 scale buffers of {cols} columns ({sc}) = {acc + sc} of 512; two "
                f"accumulators (the epilogue drains one under the next tile's mainloop) and two scale buffers (the "
                f"partition fills one while the MMA reads the other) fit at 128 wide, so the planner keeps "
                f"{plan.bm}x{plan.bn} (256 wide would need all 512 columns for two accumulators).{nv} Not measured: "
                "no sm_100a GPU is at hand")
    sc = cols * (plan.bm // 128) + cols * max(1, plan.bn // 128)
    return (f"seed 001: blocked (to_blocked) scales ride the A/B stage by TMA and tcgen05.cp copies them into one "
            f"tensor-memory buffer per operand before each MMA (one thread's tcgen05 ops run in order, so one buffer "
            f"suffices). Tensor memory: {plan.acc_buffers} accumulator(s) ({acc} columns) + scales ({sc}) of 512")


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

