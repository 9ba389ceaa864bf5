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
17. 256x128 tiles with four consumer warpgroups: forced or tuned only: docs/decisions/rule-17-tall-tiles.md
18. swap-AB decode at M <= 32: C^T = B^T A^T on 16- or 32-token tiles: docs/decisions/rule-18-swap-ab-decode.md
19. sm_100a: tcgen05 into two tensor-memory accumulators, a 4-warp epilogue partition: docs/decisions/rule-19-sm100a.md
20. gfx1250: one 4-warp partition, TDM copies and wmma, software-pipelined, 128x128: docs/decisions/rule-20-gfx1250.md
21. stream-K: the last wave's tiles shared as 2-4 k-block pieces, a fixup: docs/decisions/rule-21-stream-k.md
22. grouped GEMMs: 128x256 from 256 rows a group, 64x128 to 64, else 128x128: docs/decisions/rule-22-grouped.md
23. a few tiles: 64x64 where a latency model beats 128x128's best: docs/decisions/rule-23-latency-tiles.md
24. 2-CTA clusters multicast B where rows are not 128-byte lines (Triton >= 3.7): docs/decisions/rule-24-clusters.md
25. a few tiles over a long K: split-K in up to 8 ranges: docs/decisions/rule-25-latency-split-k.md
26. a fused 1x128 quantization: cooperative 128-wide tiles, whole tiles: docs/decisions/rule-26-fused-quantize.md
"""

from __future__ import annotations

import enum
import math
from contextvars import ContextVar
from dataclasses import dataclass, replace

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.ir.nodes import LDS_ROW_PAD
from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, Grouping, ScaleLayout, ScaleRecipe
from warploom.target import Target

# (BM, BN) candidates with their relative per-FLOP efficiency (see step 3 above).
TILES: tuple[tuple[int, int, float], ...] = (
    (128, 256, 1.00),
    (128, 128, 0.90),
    (64, 256, 0.85),
    (64, 128, 0.75),
    # Chosen by rules 13 (small-M blockwise) and 16 (decode, with a deeper ring); otherwise only when forced.
    (64, 64, 0.60),
    # Rule 17: forced or tuned only (measured equal to 128x256).
    (256, 128, 1.00),
    # Rule 18's swapped decode tiles (the swapped problem's N is the tokens: 16 or 32), 64 or 128 rows of the
    # weight (`swap_rows`).
    (64, 16, 0.25),
    (128, 16, 0.25),
    (64, 32, 0.35),
    (128, 32, 0.35),
)
# Rule 13's recipes: measured on the H100 (MX's 32-deep promotions were not, and keep 128-row tiles).
_SMALL_M_RECIPES = (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128)
_MAX_STAGES = 6
# Step 3: 128x128's efficiency where A's or B's rows are not multiples of 128 bytes (`rows_aligned`): 3000^3 bf16 ran
# 128x256 in 3 rounds 17% faster than 128x128 in 5, while 3072^3 (aligned rows, the same tile counts) ran 128x128
# 1-3% faster (H100, session 22).
_MISALIGNED_128 = 0.72
# A forced depth may go deeper, as far as shared memory holds (to measure deeper rings).
_FORCED_MAX_STAGES = 16
# Rule 16: decode's 64x64 tiles take up to this many stages (measured; 13 would also fit beside bf16's staging).
_DECODE_STAGES = 12
# Rule 18: problems with at most this many rows run swapped, on tiles as wide (the tokens' side of C^T) as the first
# of SWAP_TOKENS that holds M.
SWAP_MAX_M = 32
SWAP_TOKENS = (16, 32)
# Rule 15: what a split-K tail costs beyond its share of the work (its launch, each unit's pipeline fill and fp32
# store, the reduction): 8-10 us, whatever K, at 4096x2112x7168 (H100, scripts/exp/tail_parts.py, docs/benchmarks.md
# 2026-11-23 session 14). A whole round of 128x256 tiles took 0.84 us per k-block there, fp8 (BK 128) and bf16
# (BK 64) alike, so a round is priced at that per k-block: the tail's fixed cost weighs more as K shrinks.
TAIL_COST_US = 9.0
_ROUND_US_PER_KBLOCK = 0.84
# Rule 15: no tail below 36 k-blocks (rounds of ~30 us). fp8 at 24 and 32 k-blocks (3072^3, 2048x7168x4096) ran
# 4-8% slower with the tail than on 128x128 tiles without one; at 40-64 k-blocks (5120^3, 3072x3072x8192,
# 4096x2112x7168) the tail won; bf16 at 48 and 64 tied (docs/benchmarks.md, session 20).
_TAIL_MIN_KBLOCKS = 36
_PRODUCER_REGS = 24
_CONSUMER_REGS = 240
# Rule 17: four consumer warpgroups and the producer's: 4 x 128 x 112 + 128 x 24 = 60416 of the 65536 registers.
_TALL_CONSUMER_REGS = 112


@dataclass(frozen=True)
class Plan:
    """A schedule's parameters, chosen by `plan_schedule` or given by hand for measurement.

    Attributes:
        bm, bn, bk: tile sizes.
        stages: depth of the A/B shared-memory rings.
        consumer_warps: warps of the MMA consumer partition (4 per warpgroup; BM/64 warpgroups).
        producer_warps: warps of the TMA producer partition.
        producer_regs, consumer_regs: per-thread register budgets (setmaxnreg).
        group_m: grouped raster size.
        grid: persistent CTAs (at most one per SM).
        epilogue_subtiles: column blocks the epilogue stores a tile in.
        consumer_partitions: 1: one partition holds all consumer warpgroups (they release slots
            together); 2: one partition per warpgroup, each owning a row block (passes/split_consumers.py).
        partial_blocks: promoted fp8 only: column blocks of the accumulator, promoted one at a time
            through a block-wide partial (2 lets a 256-wide tile promote within the register budget).
        hoist_rows: fused epilogues only: load row-vector and scalar operands before the accumulator's
            final wgmma wait, so their latency hides under the last MMAs (seed 003); False loads them
            in the epilogue, for measurement.
        scalar_columns: fused epilogues only: read a column-vector operand as one value per row; False
            reads it as a full tile gather (the naive way), for measurement.
        prefetch_operands: fused epilogues only: start each dense operand's TMA copy at the tile's start
            (passes/epilogue.py PrefetchOperands); False starts it in the epilogue, just before its load. The
            planner turns it on for the slotted 256-wide epilogue (rule 9) and leaves it off at 128 wide (there
            measured 1-4% slower on the H100, docs/benchmarks.md 2026-11-23).
        pingpong: two consumer warpgroups take whole BM x BN tiles in turn (seed 002), so one's epilogue
            overlaps the other's mainloop; False: cooperative, both split each tile by rows.
        block_epilogue: apply scales and bias per stored column block (passes/epilogue.py, block_steps)
            rather than to the whole accumulator: rule 10 of the heuristic.
        scale_partition: blockwise recipes: copy the scales in a partition of their own into a ring of
            `scale_stages` slots (passes/scales.py, seed 000) rather than through the A/B stages (rule 11).
            sm_100a MX / NVFP4 (`block_scaled`): row-major scales, which a 4-warp partition tcgen05.st's into two
            tensor-memory buffers (passes/blackwell_scales.py, `scale_path`) instead of tcgen05.cp from the stage.
        scale_warps: warps of that partition.
        split_k: split each tile's k-blocks into this many equal ranges, each a work unit of its own whose
            fp32 partial goes to a workspace; a second kernel sums the partials in order (deterministic) into C.
            More CTAs when the output has fewer tiles than SMs: rule 14 chooses it for small-M blockwise fp8.
        tail_split: a split-K tail (rule 15): the tiles that fill whole waves of the grid run as whole tiles in
            one kernel, the tiles left over (a last, mostly idle round) as split-K units over this many k-ranges
            in a second; both are ranged kernels (`ir.Tiling.ranged`). 1: no tail, one kernel over all tiles.
        tail_stages: the tail kernel's stages (its fp32 staging tile leaves less shared memory for the ring).
        staging_slots: staging buffers per output that stored column blocks alternate through, so a block's smem
            writes need wait only for the store `staging_slots` blocks back (1: every block waits for the last).
            Must divide the tile's column blocks (`epilogue_subtiles`).
        operand_slots: fused epilogues only: staging buffers per dense operand, so block j's TMA copy starts as
            soon as block j - operand_slots has been read (with `prefetch_operands`, the first operand_slots
            blocks' copies land under the mainloop).
        load_ahead: fused epilogues only, with hoist_rows off: load block j + 1's row, column and scalar operands
            before block j's math, so their latency hides under it (only two blocks' vectors are live).
        swap_ab: run the transposed problem C^T = B^T A^T (rule 18, `GemmSpec.swapped`): the other fields are the
            swapped problem's plan (bm tiles the problem's N, bn its M), and the kernel stores C transposed.
        acc_buffers: sm_100a (rule 19): accumulators in tensor memory, this many BM x BN fp32 buffers, so the
            epilogue partition drains one while the MMA warp fills the next; 0: an sm_90a plan (registers).
        block_scaled: sm_100a MX fp8 (rule 19, seed 001): the tcgen05 block-scaled MMA applies the e8m0 scales; they
            ride the A/B stages and tcgen05.cp copies each stage's into tensor memory (passes/blackwell.py).
        promote_tmem: sm_100a fp32 blockwise (rule 19, `promotion_path`): the `acc_buffers` tensor-memory buffers
            hold each k-block's unscaled partial product, which the epilogue partition loads, multiplies by
            scale_a[row] x scale_b[block] and adds into an fp32 accumulator in its registers
            (passes/blackwell_promote.py); False: they hold the accumulators themselves.
        target: the compilation target (`warploom.target.Target`, declared in `warploom.targets`): sm_90a; sm_100a
            (rule 19, with `acc_buffers`); gfx1250 (rule 20): one software-pipelined partition of `consumer_warps`
            warps both copies (Tensor Data Mover) and computes (wmma) through a ring of `stages` slots; no producer,
            no mbarriers.
        tdm_warps_a, tdm_warps_b: gfx1250 (rule 20, seed 004): bitmasks of the warps that issue A's and B's copies
            (Triton >= 3.8's ``warp_used_hint``); 0: every warp issues its share (today's default).
        tdm_fused: gfx1250: each k-block's A and B copies are one fused copy (``tdm.async_load_fused``, Triton 3.9).
        stream_k: rule 21: 0, or the tiles of the last, partial wave are shared out evenly as (tile, k-block)
            iterations, each tile in at most this many pieces, and the pieces joined through an fp32 workspace in the
            same kernel (`ir.Tiling.stream_k`); `grid` may then exceed the tiles.
        cluster: rule 24 (sm_90a, Triton >= 3.7): 1, or 2 CTAs of a thread-block cluster stacked along M share B's
            tile, which the lead CTA multicasts (`ir.Tiling.cluster`, passes/cluster.py); the consumer warpgroups
            then split each tile by columns. `grid` stays the CTAs launched (an even number).
    """

    bm: int
    bn: int
    bk: int
    stages: int
    consumer_warps: int
    group_m: int
    grid: int
    producer_warps: int = 1
    producer_regs: int = _PRODUCER_REGS
    consumer_regs: int = _CONSUMER_REGS
    epilogue_subtiles: int = 1
    consumer_partitions: int = 1
    partial_blocks: int = 1
    hoist_rows: bool = True
    scalar_columns: bool = True
    prefetch_operands: bool = False
    pingpong: bool = False
    block_epilogue: bool = False
    scale_partition: bool = False
    scale_warps: int = 1
    scale_stages: int = 2
    split_k: int = 1
    tail_split: int = 1
    tail_stages: int = 0
    staging_slots: int = 1
    operand_slots: int = 1
    load_ahead: bool = False
    swap_ab: bool = False
    acc_buffers: int = 0
    block_scaled: bool = False
    promote_tmem: bool = False
    target: Target = Target.SM90A
    stream_k: int = 0
    tdm_warps_a: int = 0
    tdm_warps_b: int = 0
    tdm_fused: bool = False
    cluster: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", Target.named(self.target, "Plan(target=...)"))  # (a cache gives its name)
        if (self.acc_buffers > 0) != (self.target is Target.SM100A):
            raise ValueError(f"Plan(acc_buffers={self.acc_buffers}, target={self.target}): tensor-memory accumulator "
                             "buffers are sm_100a's and every sm_100a plan has at least one")
        # Every count is checked here, once: a Plan from a cache file or a forced knob with group_m=0 would
        # otherwise divide by zero in the raster, far from its cause.
        positive = ("bm", "bn", "bk", "stages", "consumer_warps", "group_m", "grid", "epilogue_subtiles",
                    "consumer_partitions", "partial_blocks", "scale_warps", "scale_stages", "split_k", "tail_split")
        counts = ("producer_warps", "producer_regs", "consumer_regs", "tail_stages", "acc_buffers", "tdm_warps_a",
                  "tdm_warps_b")
        for name in positive + counts:
            v, least = getattr(self, name), int(name in positive)
            if type(v) is not int or v < least:
                raise ValueError(f"Plan({name}={v!r}): expected an int >= {least}")
        if self.staging_slots < 1 or self.epilogue_subtiles % self.staging_slots:
            raise ValueError(f"Plan(staging_slots={self.staging_slots}) must divide epilogue_subtiles="
                             f"{self.epilogue_subtiles}: a tile's blocks cycle through the slots, and the next tile "
                             "must start on a slot whose store is the oldest in flight")
        if self.operand_slots < 1:
            raise ValueError(f"Plan(operand_slots={self.operand_slots}): expected at least 1")
        if self.load_ahead and self.hoist_rows:
            raise ValueError("Plan(load_ahead=True) loads each block's operands one block early; hoist_rows=True "
                             "already loads them all before the final wgmma wait: pass hoist_rows=False")
        if self.stream_k and (self.split_k > 1 or self.tail_split > 1 or self.pingpong or self.swap_ab):
            raise ValueError(f"Plan(stream_k={self.stream_k}) shares whole tiles' k-blocks among CTAs itself: it takes "
                             "no split_k, "
                             "tail_split, pingpong or swap_ab")
        if self.cluster not in (1, 2):
            raise ValueError(f"Plan(cluster={self.cluster!r}): expected 1 or 2 CTAs per cluster")
        if self.cluster > 1 and (self.split_k > 1 or self.tail_split > 1 or self.stream_k or self.pingpong
                                 or self.swap_ab or self.target is not Target.SM90A or self.grid % self.cluster):
            raise ValueError(f"Plan(cluster={self.cluster}) runs whole tiles on sm_90a on an even grid: it takes no "
                             "split_k, tail_split, stream_k, pingpong or swap_ab, and grid="
                             f"{self.grid} must be a multiple of {self.cluster}")
        if self.promote_tmem and self.target is not Target.SM100A:
            raise ValueError(f"Plan(promote_tmem=True, target={self.target}): promotion through tensor-memory "
                             "partials is sm_100a's")
        if self.tail_split > 1 and self.tail_stages < 1:
            raise ValueError(f"Plan(tail_split={self.tail_split}) needs tail_stages >= 1: the tail kernel's ring depth "
                             "(the planner sets it; by hand, at most what fits beside its fp32 staging tile)")

    def units(self, m: int, n: int) -> int:
        """Work units of an M x N output: its tiles (at least one), times the k-ranges of split-K. (A swapped plan's
        tiles cover C^T: bm tiles N and bn tiles M.)"""
        if self.swap_ab:
            m, n = n, m
        return max(1, math.ceil(m / self.bm) * math.ceil(n / self.bn)) * self.split_k

    def tail(self) -> Plan:
        """The plan of the split-K tail kernel of a plan with one (`tail_split`): the same tiles and warps, its
        k-blocks in tail_split ranges."""
        assert self.tail_split > 1 and self.split_k == 1, "only a data-parallel plan with a tail has a tail plan"
        return replace(self, split_k=self.tail_split, stages=self.tail_stages)

    def short(self) -> str:
        sub = f"_e{self.epilogue_subtiles}" if self.epilogue_subtiles > 1 else ""
        split = f"_p{self.consumer_partitions}" if self.consumer_partitions > 1 else ""
        split += "_pp" if self.pingpong else ""
        blocks = f"_h{self.partial_blocks}" if self.partial_blocks > 1 else ""
        # (the kernel name keys the on-disk source cache, so the scale ring's depth and warps must appear)
        sp = "" if not self.scale_partition else "_sp" if (self.scale_stages, self.scale_warps) == (2, 1) else \
            f"_sp{self.scale_stages}w{self.scale_warps}"
        ablate = (sp + ("" if self.hoist_rows else "_nohoist") + ("" if self.scalar_columns else "_nocolscalar")
                  + ("_prefetch" if self.prefetch_operands else "") + ("_ahead" if self.load_ahead else "")
                  + (f"_ss{self.staging_slots}" if self.staging_slots > 1 else "")
                  + (f"_os{self.operand_slots}" if self.operand_slots > 1 else ""))
        ks = f"_k{self.split_k}" if self.split_k > 1 else ""
        ks += f"_t{self.tail_split}" if self.tail_split > 1 else ""
        tm = f"_tm{self.acc_buffers}" if self.acc_buffers else "_tdm" if self.target is Target.GFX1250 else ""
        tm += "p" if self.promote_tmem else ""  # (sm_100a fp32 blockwise: the buffers hold partials)
        if self.tdm_warps_a or self.tdm_warps_b:
            tm += f"_wa{self.tdm_warps_a:x}b{self.tdm_warps_b:x}" + ("f" if self.tdm_fused else "")
        sk = f"_sk{self.stream_k}g{self.grid}" if self.stream_k else ""
        sk += f"_c{self.cluster}" if self.cluster > 1 else ""
        return (f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_w{self.consumer_warps}_g{self.group_m}"
                f"{sub}{split}{blocks}{ks}{sk}{ablate}{'_swap' if self.swap_ab else ''}{tm}")


def rows_aligned(spec: GemmSpec) -> bool:
    """Whether A's and B's rows (as stored, contiguous: K elements, or N for an N-major B) are whole 128-byte lines."""
    a_row = spec.k if spec.a_layout is ALayout.K_MAJOR else spec.m
    b_row = spec.k if spec.b_layout is BLayout.K_MAJOR else spec.n
    return a_row * spec.a_dtype.bits % 1024 == 0 and b_row * spec.b_dtype.bits % 1024 == 0


def k_block(spec: GemmSpec) -> int:
    """BK on sm_90a and gfx1250: 128 bytes of K (128 fp8 elements, 64 16-bit ones), one 128-byte swizzle row."""
    return 128 if spec.is_fp8 else 64


def k_blocks(spec: GemmSpec) -> int:
    """How many k-blocks of `k_block(spec)` K takes (the last one partial)."""
    return math.ceil(spec.k / k_block(spec))


def _native_problems(spec: GemmSpec) -> list[str]:
    """What rules 19 and 20 (sm_100a, gfx1250) do not plan yet: promoted accumulation, scales other than tensorwise
    and rowwise."""
    problems = []
    if spec.accumulation is Accumulation.PROMOTED:
        problems.append("promoted fp8 accumulation (pass use_fast_accum=True)")
    if spec.scale not in (ScaleRecipe.NONE, ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE):
        problems.append(f"{spec.scale.value} scales (tensorwise and rowwise are planned)")
    if spec.a_layout is not ALayout.K_MAJOR:
        problems.append("a column-major A (pass a.contiguous())")
    return problems


# Rule 19 (sm_100a): tensor memory holds TMEM_COLUMNS fp32 columns per SM: two 256-wide accumulators.
_BLACKWELL_BUFFERS = 2
_BLACKWELL_EPILOGUE_BLOCKS = 4
_BLACKWELL_EPILOGUE_REGS = 232


def plan_blackwell(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                   stages: int | None = None, group_m: int = 8, scalar_columns: bool = True,
                   prefetch_operands: bool | None = None) -> Plan:
    """Rule 19: the plan of a plain GEMM on an sm_100a device (tensor-memory accumulators, an MMA warp, an epilogue
    partition). Raises UnsupportedError, naming what to change, for what the sm_100a schedule does not cover yet."""
    from warploom.errors import UnsupportedError

    # MX fp8 (seed 001): the tcgen05 block-scaled MMA applies the e8m0 scales per 32 of K and accumulates in fp32
    # itself, so nothing is promoted; the scales ride the A/B stages and tcgen05.cp copies them to tensor memory.
    # NVFP4 takes the same path with e4m3 scales per 16 and its global scale in the epilogue.
    mx = spec.scale.microscaled
    # fp32 blockwise (DeepSeek 1x128 x 128x128 and its kin): the block-scaled MMA takes only e8m0 / e4m3 scales, so
    # these are promoted, through tensor-memory partials (`promotion_path`, passes/blackwell_promote.py).
    promoted = spec.scale.is_blockwise and not mx
    problems = _native_problems(replace(spec, scale=ScaleRecipe.TENSORWISE, accumulation=Accumulation.NATIVE,
                                        scale_layout=ScaleLayout.ROW_MAJOR, b_dtype=spec.a_dtype)) \
        if mx or promoted else _native_problems(spec)
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
    # Row-major MX scales (plain, unpadded, any stride; GemmSpec keeps NVFP4's blocked) take seed 000's path: a
    # scale partition loads them with ordinary loads and tcgen05.st's them into two tensor-memory buffers
    # (`scale_path`), so they never enter the A/B stage and a narrow tile's rows need no 128-row chunk.
    rowwise_scales = mx and spec.scale_layout is not ScaleLayout.BLOCKED
    if rowwise_scales and bn not in (None, 16, 32, 64, 128):
        raise UnsupportedError(f"sm_100a MX with row-major scales: bn in (16, 32, 64, 128) (the scale "
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
                                            + sum(d.bytes for d in _dense_operands(spec)))
        # A swapped decode tile (16 or 32 tokens wide) streams the weight: a deep ring, as rule 16's on sm_90a.
        cap = _DECODE_STAGES if width <= 32 else _MAX_STAGES
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
    dense = bool(_dense_operands(spec))
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
        return (f"seed 000: row-major scales; a 4-warp scale partition loads each k-block's scales with ordinary "
                f"loads and tcgen05.st's them into one of two tensor-memory buffers per operand, the scaled MMA "
                f"releasing the buffer as it completes. Tensor memory: {plan.acc_buffers} accumulator(s) of "
                f"{plan.bn} columns ({acc}) + 2 x 2 scale buffers of {cols} columns ({sc}) = {acc + sc} of 512; two "
                f"accumulators (the epilogue drains one under the next tile's mainloop) and two scale buffers (the "
                f"partition fills one while the MMA reads the other) fit at 128 wide, so the planner keeps "
                f"{plan.bm}x{plan.bn} (256 wide would need all 512 columns for two accumulators). Not measured: no "
                "sm_100a GPU is at hand")
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
    from warploom.errors import UnsupportedError

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
    barriers = 8 * 2 * (_MAX_STAGES + PROMOTED_PARTIALS)
    fit = min(_MAX_STAGES, (device.smem_per_block - staging - barriers) // stage_bytes(spec, bm, bn, bk))
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


# Rule 20 (gfx1250): 4 warps, each a 64x64 quarter of a 128x128 tile; 3 stages (two blocks' copies in flight).
_GFX1250_TILE = 128
_GFX1250_WARPS = 4
_GFX1250_STAGES = 3


class TdmWarps(enum.Enum):
    """Rule 20's choice of the warps that issue each TDM copy (seed 004; ir/warps.py). The value is the reason.

    EVERY: every warp its share of both copies (no hint: Triton 3.6 and 3.7 have none). SPLIT: warp 0 issues A's
    whole block and warp 1 B's, so each issuing warp has one copy per block in flight and the other warps only
    compute. ONE: warp 0 issues both. FUSED: SPLIT's warps, each k-block's two copies issued as one fused copy."""

    EVERY = ("every warp issues its share of A's and B's copies: the default, and all Triton < 3.8 can express; no "
             "gfx1250 is at hand to measure a split against it")
    SPLIT = "warp 0 issues A's copies and warp 1 B's (one wave each), the other warps only compute"
    ONE = "warp 0 issues both copies, the other warps only compute"
    FUSED = ("warp 0 loads A's block and warp 1 B's through one fused copy (tdm.async_load_fused), the other warps "
             "only compute")

    def masks(self) -> tuple[int, int]:
        """(A's, B's) issuing-warp bitmasks; 0: every warp."""
        return {TdmWarps.EVERY: (0, 0), TdmWarps.SPLIT: (0b0001, 0b0010), TdmWarps.ONE: (0b0001, 0b0001),
                TdmWarps.FUSED: (0b0001, 0b0010)}[self]


def tdm_warps_reason(plan: Plan) -> str:
    """Why `plan`'s TDM copies are issued by the warps they are (rule 20's `TdmWarps` choice, in words)."""
    for choice in TdmWarps:
        if choice.masks() == (plan.tdm_warps_a, plan.tdm_warps_b) and (choice is TdmWarps.FUSED) == plan.tdm_fused:
            return choice.value
    return f"forced by hand: A from warps 0x{plan.tdm_warps_a:x}, B from 0x{plan.tdm_warps_b:x}"


def plan_gfx1250(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                 stages: int | None = None, group_m: int = 8, tdm_warps: TdmWarps | None = None) -> Plan:
    """Rule 20: the plan of a plain GEMM on a gfx1250 device (one software-pipelined partition of TDM copies and
    wmma). Raises UnsupportedError, naming what to change, for what the gfx1250 schedule does not cover yet.

    `tdm_warps` picks the warps that issue each copy (`TdmWarps`, reasons in its values; `tdm_warps_reason`); None
    is EVERY, today's schedule, under every Triton (a split is not measured: no gfx1250 is at hand). Any other
    choice needs Triton >= 3.8 and is refused, naming the option, under 3.6 and 3.7."""
    from warploom.backends import gluon_api
    from warploom.errors import UnsupportedError

    choice = TdmWarps.EVERY if tdm_warps is None else tdm_warps
    if choice is not TdmWarps.EVERY:
        gluon_api.current().require_tdm_warp_hint(f"tdm_warps=TdmWarps.{choice.name}")
    if choice is TdmWarps.FUSED:
        gluon_api.current().require_tdm_fused(f"tdm_warps=TdmWarps.{choice.name}")

    problems = _native_problems(spec)
    if spec.b_layout is BLayout.N_MAJOR and spec.k * spec.n >= 2**31:
        # (each tile's descriptors start at its rows of A and B, or columns of an N-major B: Triton 3.6 offsets a copy
        # from there in 32 bits, and an N-major B's copies still step over all of its K rows)
        problems.append(f"an N-major B of K x N = {spec.k * spec.n} elements (2^31 or more: pass it K-major)")
    if problems:
        raise UnsupportedError(f"gfx1250 (planner rule 20) plans native accumulation with tensorwise, rowwise or no "
                               f"scales so far; {spec.short()} has {'; '.join(problems)}. Fix: "
                               "plan it for an sm_90a device (device=H100_SXM)")
    bm, bn = bm or _GFX1250_TILE, bn or _GFX1250_TILE
    if bm not in (64, 128, 256) or bn not in (64, 128, 256):
        raise UnsupportedError(f"gfx1250 tiles: bm and bn in (64, 128, 256), got {bm=} {bn=}. Fix: leave them to "
                               "the planner")
    bk = k_block(spec)
    # Each LDS row (BK elements of A or B) carries LDS_ROW_PAD bytes of padding, as Module.lds_bytes counts.
    fit = device.smem_per_block // ((bm + bn) * (bk * spec.a_dtype.bytes + LDS_ROW_PAD))
    s = min(_GFX1250_STAGES, fit) if stages is None else stages
    if not 2 <= s <= fit:
        raise UnsupportedError(f"gfx1250: {s} stages of {bm}x{bn}x{bk} in {device.smem_per_block} bytes of LDS (2 to "
                               f"{fit} fit; the software pipeline needs at least 2). Fix: another depth or tile")
    tiles = max(1, math.ceil(spec.m / bm) * math.ceil(spec.n / bn))
    return Plan(bm=bm, bn=bn, bk=bk, stages=s, consumer_warps=_GFX1250_WARPS, group_m=group_m,
                grid=min(device.sm_count, tiles), producer_warps=0, producer_regs=0, consumer_regs=0,
                target=Target.GFX1250,
                tdm_warps_a=choice.masks()[0], tdm_warps_b=choice.masks()[1], tdm_fused=choice is TdmWarps.FUSED)


def scale_slot_bytes(spec: GemmSpec, bm: int, bn: int, bk: int) -> int:
    """One k-block's fp32 scales of a blockwise recipe: BM of A and BN/128 (or BN) of B per 128 of K; MX 4 of each
    (one per 32 of K) per row and column."""
    if not spec.scale.is_blockwise:
        return 0
    subs = bk // spec.scale.scale_k
    if spec.scale_layout is ScaleLayout.BLOCKED:  # sm_100a MX: the raw e8m0 bytes, as TMA copies them
        return subs * (scale_rows(bm) + scale_rows(bn))
    return 4 * subs * (bm + spec.scale.b_scales(bn))


NVFP4_DEEP_BK = 128


def nvfp4_bk(spec: GemmSpec) -> int:
    """Rule 19's NVFP4 k-block: 128 (two 128x4 chunks of e4m3 scales a row block) when K is a multiple of 128,
    else 64 (one chunk)."""
    return NVFP4_DEEP_BK if spec.k % NVFP4_DEEP_BK == 0 else 64


def scale_rows(rows: int) -> int:
    """sm_100a MX / NVFP4: the rows of a tile's blocked scales a stage holds: whole 128-row blocks of torch's blocked
    layout (to_blocked pads the rows to 128), what one tcgen05.cp 32x128b.warpx4 copies. A 16- or 32-wide tile
    (rule 18's tokens) copies one whole block, of which its MMA reads the first 16 or 32 rows."""
    return -(-rows // 128) * 128


def stage_bytes(spec: GemmSpec, bm: int, bn: int, bk: int, scale_partition: bool = False) -> int:
    """Shared memory of one pipeline stage: an A tile and a B tile, and the k-block's scales unless a scale
    partition holds them in a ring of its own."""
    scales = 0 if scale_partition else scale_slot_bytes(spec, bm, bn, bk)
    # (MX fp8 x fp4: the fp4 operand lies one value a byte in shared memory, `ir.Ring.padded`)
    a_bits, b_bits = (8, 8) if spec.mixed_fp4 else (spec.a_dtype.bits, spec.b_dtype.bits)
    return ((bm * bk) * a_bits + (bn * bk) * b_bits) // 8 + scales


def epilogue_subtiles(bn: int, pingpong: bool = False, fused: bool = False, bm: int = 128, block: bool = False,
                      wide: bool = False) -> int:
    # Ping-pong stores 128-wide tiles in halves too: its epilogue hides under the other warpgroup's mainloop,
    # so the extra store wait costs little, and the smem saved buys a stage. A fused epilogue beside a whole
    # 128x128 (64x256) accumulator works in quarters: in halves its temporaries spill (1544 bytes, ptxas).
    if wide:
        return FUSED_WIDE_BLOCKS  # rule 9
    if (pingpong and fused and bm * bn >= 128 * 128) or block:
        return 4  # (block: per-block rowwise scales and bias, 64 columns at a time; 128 still spill)
    # Rule 17's 256x128 stores 64x64 halves per warpgroup: their staging (32 KiB) leaves room for a 4th stage.
    return 2 if bn == 256 or (pingpong and bn == 128) or bm == 256 else 1


FUSED_WIDE_BLOCKS = 8  # rule 9: 32-column blocks; in 4 blocks the erf GELU spilled 628-872 bytes (ptxas, session 15)
FUSED_WIDE_SLOTS = 2  # rule 9: staging slots of the stores, and buffers of each dense operand


def fused_wide(spec: GemmSpec, bn: int, pingpong: bool = False) -> bool:
    """Rule 9: a fused epilogue on a 256-wide cooperative tile runs in FUSED_WIDE_BLOCKS slotted column blocks."""
    return (spec.epilogue is not None and bn == 256 and not pingpong
            and spec.accumulation is Accumulation.NATIVE)


def _dense_operands(spec: GemmSpec) -> list[DType]:
    return [s.dtype for s in spec.epilogue.operands if s.kind.value == "dense"] if spec.epilogue else []


def epilogue_bytes(spec: GemmSpec, bm: int, bn: int, pingpong: bool = False, split_k: int = 1,
                   prefetch: bool = True) -> int:
    """The epilogue's staging buffers: for the TMA store (one column block of the tile per output, in each
    staging slot), and for each dense operand of a fused epilogue (one block per operand slot, two for rule 9's
    early copies unless `prefetch` is off; warploom.passes.epilogue). Ping-pong consumers each stage whole tiles
    of their own: twice the buffers of cooperative ones, which share each tile's rows."""
    wide = fused_wide(spec, bn, pingpong)
    sub = epilogue_subtiles(bn, pingpong, spec.epilogue is not None, bm, block_epilogue(spec, bn, pingpong), wide)
    slots, operand_slots = (FUSED_WIDE_SLOTS, FUSED_WIDE_SLOTS if prefetch else 1) if wide else (1, 1)
    return _staging_bytes(spec, bm * bn // sub, 2 if pingpong else 1, slots, operand_slots, split_k)


def plan_epilogue_bytes(spec: GemmSpec, plan: Plan) -> int:
    """`epilogue_bytes` of the buffers `plan` itself declares: its blocks and slots, which may be forced by hand."""
    return _staging_bytes(spec, plan.bm * plan.bn // plan.epilogue_subtiles, 2 if plan.pingpong else 1,
                          plan.staging_slots, plan.operand_slots, plan.split_k)


def _staging_bytes(spec: GemmSpec, block: int, copies: int, slots: int, operand_slots: int, split_k: int) -> int:
    """`copies` x (`slots` staging blocks of `block` elements per output + `operand_slots` per dense operand)."""
    # Split-K units stage their fp32 partials (the workspace's dtype), not the output.
    outs = (DType.FP32,) if split_k > 1 else spec.output_dtypes()
    per_elem = slots * sum(d.bytes for d in outs) + operand_slots * sum(d.bytes for d in _dense_operands(spec))
    return copies * block * per_elem


def is_decode(spec: GemmSpec, pingpong: bool = False) -> bool:
    """Rule 16: a decode-sized GEMM (M <= 64) that streams B with native accumulation (fused epilogue or not)."""
    return spec.m <= 64 and spec.accumulation is Accumulation.NATIVE and not spec.scale.is_blockwise and not pingpong


# Rule 18's tile rows: a round of CTAs streaming the weight is bound by each SM's TMA rate (~44 B/ns, docs/benchmarks.md
# session 17) until about this many CTAs saturate HBM (~3 TB/s); a round takes as long as this many CTAs would, or
# as its CTAs, whichever is more.
_HBM_CTAS = 68


def swap_rows(n: int, sm_count: int) -> int:
    """Rule 18: 64 or 128 rows of the weight (N) per swapped tile, whichever streams N in less modeled time: the
    rounds of the persistent grid, each costing rows x max(its CTAs, _HBM_CTAS). 128 wins where 64-row tiles leave
    a thin last round (N = 9216: 144 tiles, 12 in the second round; measured 0.86x torch against 1.07x, bf16 M =
    16), 64 (ties too) where all fit in one."""
    def cost(bm: int) -> int:
        tiles, total = math.ceil(n / bm), 0
        while tiles > 0:
            ctas = min(tiles, sm_count)
            total += bm * max(ctas, _HBM_CTAS)
            tiles -= ctas
        return total

    return min((64, 128), key=cost)


def swap_tokens(m: int) -> int:
    """Rule 18: the swapped tile's width (C^T's columns: tokens) for M rows: 16, or 32 above 16 (also above 32, when
    forced)."""
    return next((w for w in SWAP_TOKENS if m <= w), SWAP_TOKENS[-1])


def swap_decode(spec: GemmSpec) -> bool:
    """Rule 18: whether the planner runs `spec` swapped (C^T = B^T A^T on 16- or 32-wide tiles): a decode GEMM of at
    most SWAP_MAX_M rows that can swap (`GemmSpec.swap_problems`; a fused epilogue too, unless it reads a dense
    operand)."""
    return 0 < spec.m <= SWAP_MAX_M and (is_decode(spec) or _block_scaled_decode(spec)) and not spec.swap_problems()


def _block_scaled_decode(spec: GemmSpec) -> bool:
    """Rule 18 on sm_100a (rule 19): MX or NVFP4 with scales in torch's blocked layout at decode sizes. Their
    `accumulation` says PROMOTED, but the tcgen05 block-scaled MMA applies the scales and accumulates in fp32 itself
    (nothing is promoted), so the problem streams B as rule 16's decode does. (Only sm_100a plans blocked scales.)"""
    return spec.m <= 64 and spec.scale_layout is ScaleLayout.BLOCKED


def _tall_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool, split_k: int | None,
                   tail_split: int | None, consumer_partitions: int | None) -> list[str]:
    """Rule 17: why a 256-row tile cannot run `spec` with these options (empty: it can). Its four warpgroups have 112
    registers each: room for a 64x128 accumulator, not for a promoted partial beside it, nor measured with a fused
    epilogue, split-K units or ping-pong."""
    problems = []
    if spec.accumulation is not Accumulation.NATIVE:
        problems.append("promoted fp8 (a 64x128 partial beside the accumulator needs more than 112 registers)")
    if spec.epilogue is not None:
        problems.append("a fused epilogue (not built for four consumer warpgroups)")
    if spec.bias_dtype is not None:
        problems.append("a bias (rowwise scales with a bias spill 1040 bytes at 112 registers, ptxas)")
    if pingpong:
        problems.append("ping-pong")
    if scale_partition:
        problems.append("the scale partition")
    if split_k not in (None, 1) or tail_split not in (None, 1):
        problems.append("split-K")
    if consumer_partitions not in (None, 4):
        problems.append(f"consumer_partitions={consumer_partitions} (a 256-row tile runs one partition per "
                        "warpgroup: 4)")
    return problems


def max_stages(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, bk: int, pingpong: bool = False,
               scale_partition: bool = False, scale_stages: int = 2, split_k: int = 1, prefetch: bool = True,
               cap: int | None = None) -> int:
    """The most stages that fit in shared memory beside the epilogue (and the scale partition's ring), at most
    `cap`: by default 6, or 12 for a decode GEMM's 64x64 tiles (rule 16) and a swapped one's 64x16 and 64x32 (rule
    18, whose swapped problem has at most SWAP_MAX_M columns)."""
    if cap is None:
        # Rules 16 and 18 (a swapped decode problem's N is its tokens: at most SWAP_MAX_M).
        decode = ((bm, bn) == (64, 64) and is_decode(spec, pingpong)
                  or bm == 64 and bn in SWAP_TOKENS and spec.n <= SWAP_MAX_M and not pingpong)
        cap = _DECODE_STAGES if decode else _MAX_STAGES
    # 1 KiB reserve covers the mbarriers and alignment padding between allocations.
    free = device.smem_per_block - epilogue_bytes(spec, bm, bn, pingpong, split_k, prefetch) - 1024
    if scale_partition:
        free -= scale_stages * scale_slot_bytes(spec, bm, bn, bk)
    return min(cap, free // stage_bytes(spec, bm, bn, bk, scale_partition))


QUANT_BN = 128  # rule 26: a fused 1x128 quantization's tile width, one scale group (256 would take rule 9's blocks)


def quantized_problems(spec: GemmSpec, device: DeviceInfo, *, bn: int | None = None, pingpong: bool = False,
                       partial_blocks: int | None = None, split_k: int | None = None, tail_split: int | None = None,
                       swap_ab: bool | None = None, stream_k: int | None = None, cluster: int | None = None,
                       prefetch_operands: bool | None = None) -> list[str]:
    """Rule 26: why a spec whose fused epilogue quantizes 1x128 (a `GroupAmax` in its graph) cannot be planned, if
    it cannot. Such a plan is sm_90a's cooperative 128-wide tile: each tile holds whole 128-column groups, so a
    group's amax is tile-local (LowerEpilogue folds the group's blocks before its scale and division), and none of
    the schedules that cut a tile's sum or columns otherwise (split-K, a tail, stream-K, swap-AB, clusters). Promoted
    fp8 (and so the blockwise recipes) promotes a 128-wide tile into one accumulator, which holds the group whole."""
    out = []
    if device.blackwell or device.gfx1250:
        out.append(f"the fused quantization is built for sm_90a, not {device.name}")
    if partial_blocks not in (None, 1):
        out.append(f"partial_blocks={partial_blocks}: promoted fp8 in 128-column blocks keeps a group in one "
                   "accumulator (the walk over a group's blocks stays in one)")
    if spec.grouped:
        out.append("a grouped GEMM")
    if _dense_operands(spec) and prefetch_operands:
        out.append("prefetch_operands=True: a dense operand's early copies follow the stores, which the walk over a "
                   "group puts after every block's load")
    if bn is not None and bn != QUANT_BN:
        out.append(f"bn={bn}: the tile must be {QUANT_BN} wide (one scale group)")
    given = {"pingpong": pingpong or None, "split_k": None if split_k in (None, 1) else split_k,
             "tail_split": None if tail_split in (None, 1) else tail_split, "swap_ab": swap_ab or None,
             "stream_k": stream_k or None, "cluster": None if cluster in (None, 1) else cluster}
    out += [f"{k}={v}" for k, v in given.items() if v is not None]
    return out


# The planners of the other targets, by target: the rule, and which of sm_90a's schedule options it takes too (a
# forced option it does not take is refused by name rather than ignored).
_OTHER_RULES: dict[Target, tuple[str, frozenset[str]]] = {
    Target.SM100A: ("rule 19", frozenset({"swap_ab", "prefetch_operands", "scalar_columns"})),
    Target.GFX1250: ("rule 20", frozenset()),
}


def _plan_sm100(spec: GemmSpec, device: DeviceInfo, *, bm: int | None, bn: int | None, stages: int | None,
                group_m: int, scalar_columns: bool, prefetch_operands: bool | None, swap_ab: bool | None,
                split_forced: bool) -> Plan:
    """Rule 19, with rule 18's swap-AB decode (C^T = B^T A^T, the weight's rows on tcgen05's 128) where it applies:
    as on sm_90a, any forced tile, depth or split (1 on sm_100a) turns rule 18 off."""
    from warploom.errors import UnsupportedError

    if swap_ab is None:
        swap_ab = all(f is None for f in (bm, bn, stages)) and not split_forced and swap_decode(spec)
    if not swap_ab:
        return plan_blackwell(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                              scalar_columns=scalar_columns, prefetch_operands=prefetch_operands)
    if spec.swap_problems():
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: "
                               f"{'; '.join(spec.swap_problems())}; drop swap_ab")
    tokens = bn or swap_tokens(spec.m)
    try:
        plan = plan_blackwell(spec.swapped(), device, bm=bm, bn=tokens, stages=stages, group_m=group_m,
                              scalar_columns=scalar_columns, prefetch_operands=prefetch_operands)
    except UnsupportedError as e:
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {bm or 128} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}") from None
    return replace(plan, swap_ab=True)


def plan_schedule(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                  stages: int | None = None, group_m: int = 8, consumer_partitions: int | None = None,
                  partial_blocks: int | None = None, hoist_rows: bool | None = None, scalar_columns: bool = True,
                  prefetch_operands: bool | None = None, pingpong: bool = False,
                  scale_partition: bool | None = None, split_k: int | None = None,
                  tail_split: int | None = None, swap_ab: bool | None = None,
                  stream_k: int | None = None, tdm_warps: TdmWarps | None = None, cluster: int | None = None) -> Plan:
    """Pick a Plan for `spec` on `device`; any of bm/bn/stages may be forced (for tests and ablations), and
    split_k (1: never split; None: rule 14 decides), tail_split (1: no split-K tail; None: rule 15 decides) and
    swap_ab (None: rule 18 decides, when nothing about the tile, depth or partitions is forced; True: plan the
    swapped problem, with bm and bn as given for it, by default 64 x 16 on sm_90a (`swap_rows`, `swap_tokens`) and
    128 x 16 on sm_100a (rule 19)) and stream_k (None: rule 21 decides; 0: none; s >= 2: a stream-K plan with at
    most s pieces per shared tile, refused where it cannot run) and tdm_warps (gfx1250 only: `TdmWarps`, the warps
    that issue each TDM copy; None: every warp, as before seed 004) and cluster (None: rule 24 decides; 1: one CTA
    per tile; 2: 2-CTA clusters multicasting B, refused where they cannot run)."""
    from warploom.errors import UnsupportedError

    if spec.epilogue is not None and spec.epilogue.group_amax() is not None:  # rule 26
        problems = quantized_problems(spec, device, bn=bn, pingpong=pingpong, partial_blocks=partial_blocks,
                                      split_k=split_k, tail_split=tail_split, swap_ab=swap_ab, stream_k=stream_k,
                                      cluster=cluster, prefetch_operands=prefetch_operands)
        if problems:
            raise UnsupportedError(f"warploom.quantize in a fused epilogue (1x128, rule 26) cannot run {spec.short()}: "
                                   f"{'; '.join(problems)}. Fix: drop the conflicting option, or return the value "
                                   "itself and quantize the call's result with warploom.quantize")
        bn, swap_ab, split_k, tail_split, stream_k, cluster, prefetch_operands = QUANT_BN, False, 1, 1, 0, 1, False
    if spec.grouped:  # rule 22
        refused = {"pingpong": pingpong, "scale_partition": bool(scale_partition), "split_k": split_k not in (None, 1),
                  "tail_split": tail_split not in (None, 1), "swap_ab": bool(swap_ab),
                  "stream_k": stream_k not in (None, 0), "cluster": cluster not in (None, 1)}
        if any(refused.values()):
            raise UnsupportedError(f"grouped GEMMs (rule 22) run whole tiles of one group each, so {spec.short()} "
                                   f"cannot take {', '.join(k for k, v in refused.items() if v)} (their tiles or "
                                   "partitions are not a group's). Fix: drop them")
        return plan_grouped(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                            consumer_partitions=consumer_partitions, partial_blocks=partial_blocks)
    if stream_k is not None and stream_k not in (0, *range(2, 17)):
        raise UnsupportedError(f"stream_k={stream_k!r}: expected None (the planner decides), 0 (no stream-K) or the "
                               "most "
                               "pieces a shared tile is cut into, 2 to 16")
    if tdm_warps not in (None, TdmWarps.EVERY) and not device.gfx1250:
        raise UnsupportedError(f"tdm_warps={tdm_warps}: TDM warp masks (rule 20, seed 004) are gfx1250's; "
                               f"{device.name} has no TDM (sm_90a's producer already issues each TMA copy from one "
                               "elected thread). Fix: drop tdm_warps, or plan for device=GFX1250")
    if device.arch.startswith("gfx") and not device.gfx1250:
        raise UnsupportedError(f"{device.name} ({device.arch}): among AMD GPUs warploom plans gfx1250 only (rule 20). "
                               "Fix: plan for device=GFX1250 to inspect its schedule, or run on an sm_90a GPU")
    if device.target is not Target.SM90A:  # rules 19 and 20: their own planners, without sm_90a's options
        given = {"consumer_partitions": consumer_partitions, "partial_blocks": partial_blocks,
                 "pingpong": pingpong or None, "scale_partition": scale_partition,
                 "split_k": None if split_k == 1 else split_k, "tail_split": None if tail_split == 1 else tail_split,
                 "hoist_rows": hoist_rows, "stream_k": stream_k or None, "cluster": None if cluster == 1 else cluster,
                 "swap_ab": swap_ab or None, "prefetch_operands": prefetch_operands,
                 "scalar_columns": None if scalar_columns else False}
        rule, kept = _OTHER_RULES[device.target]
        forced_here = {k: v for k, v in given.items() if v is not None and k not in kept}
        if forced_here:
            names = ", ".join(f"{k}={v}" for k, v in forced_here.items())
            raise UnsupportedError(f"{names}: sm_90a schedule options; the {device.target} schedule ({rule}) has none "
                                   "of them. Fix: drop them, or plan for an sm_90a device")
        if device.gfx1250:
            return plan_gfx1250(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m, tdm_warps=tdm_warps)
        return _plan_sm100(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m, scalar_columns=scalar_columns,
                           prefetch_operands=prefetch_operands, swap_ab=swap_ab,
                           split_forced=split_k is not None or tail_split is not None)
    if spec.is_fp4:
        raise UnsupportedError(f"{device.name} (sm_90a) has no fp4 MMA: MX fp4 and NVFP4 (e2m1) plan for sm_100a's "
                               f"block-scaled tcgen05 MMA only, got {spec.scale.value} scales. Fix: plan for an "
                               "sm_100a device (device=B200), or quantize to torch.float8_e4m3fn with MX scales for "
                               "sm_90a")
    if spec.scale_layout is ScaleLayout.BLOCKED:
        raise UnsupportedError(f"{device.name} (sm_90a) reads MX scales row-major, (M, K/32) and (N, K/32), element by "
                               "element; torch's blocked layout is sm_100a's (tcgen05.cp). Fix: pass the scales before "
                               "to_blocked, or plan for an sm_100a device (device=B200)")
    forced = (bm, bn, stages, consumer_partitions, partial_blocks, scale_partition, split_k, tail_split)
    if cluster not in (None, 1, 2):
        raise UnsupportedError(f"cluster={cluster!r}: expected None (rule 24 decides), 1 (one CTA per tile) or 2 "
                               "(2-CTA clusters that multicast B)")
    if cluster == 2:
        problems = cluster_problems(spec, pingpong, scale_partition, split_k, tail_split, stream_k, swap_ab, bm, bn,
                                    consumer_partitions)
        if problems:
            raise UnsupportedError(f"cluster=2 (rule 24) cannot run {spec.short()}: {'; '.join(problems)}. Fix: drop "
                                   "cluster (or the option that conflicts with it)")
        swap_ab, stream_k, split_k, tail_split = False, 0, 1, 1
    if stream_k:
        problems = _stream_k_problems(spec, pingpong, scale_partition, split_k, tail_split, swap_ab, bm,
                                      prefetch_operands)
        prefetch_operands = False  # (a forced stream-K plan copies dense operands when its epilogue runs)
        k_tiles = k_blocks(spec)
        if stream_k > k_tiles:
            fix = f"stream_k between 2 and {k_tiles}, or 0" if k_tiles >= 2 else "stream_k=0 (whole tiles)"
            raise UnsupportedError(f"stream_k={stream_k} (rule 21) cuts a tile into more pieces than its {k_tiles} "
                                   f"k-block(s) of K={spec.k}: a piece would have no k-block to add. Fix: pass {fix}")
        if problems:
            raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: {'; '.join(problems)}. "
                                   "Fix: "
                                   "drop stream_k (or the option that conflicts with it)")
        swap_ab = False
    if (swap_ab is None and stream_k is None and split_k is None and tail_split is None and not pingpong
            and all(f is None for f in forced) and prefetch_operands is None and hoist_rows is None):
        ranges = decode_split(spec, device)
        if ranges > 1:
            token = _TRACE.set(None)  # (the forced call's own candidates are not this rule's)
            try:
                return plan_schedule(spec, device, bm=64, bn=64, group_m=group_m, scalar_columns=scalar_columns,
                                     split_k=ranges, tail_split=1, swap_ab=False, stream_k=0)
            finally:
                _TRACE.reset(token)
    if swap_ab is None:
        swap_ab = not pingpong and all(f is None for f in forced) and swap_decode(spec)
    if swap_ab:
        problems = spec.swap_problems()
        problems += ["ping-pong"] if pingpong else []
        problems += ["split-K"] if split_k not in (None, 1) or tail_split not in (None, 1) else []
        problems += ["the scale partition"] if scale_partition else []
        if problems:
            raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: {'; '.join(problems)}; "
                                   "drop swap_ab")
        tokens = bn or swap_tokens(spec.m)
        rows = bm or swap_rows(spec.n, device.sm_count)
        try:
            plan = plan_schedule(spec.swapped(), device, bm=rows, bn=tokens, stages=stages, group_m=group_m,
                                 consumer_partitions=consumer_partitions, partial_blocks=partial_blocks,
                                 hoist_rows=hoist_rows, scalar_columns=scalar_columns,
                                 prefetch_operands=prefetch_operands, split_k=1, tail_split=1, swap_ab=False,
                                 stream_k=0)
        except UnsupportedError as e:
            raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {rows} rows of N "
                                   f"by {tokens} of M, and the swapped problem has no such plan: {e}") from None
        return replace(plan, swap_ab=True)

    if (stream_k is None and split_k is None and tail_split is None and not pingpong
            and all(f is None for f in forced) and prefetch_operands is None and hoist_rows is None):
        ranges = latency_split(spec, device)
        if ranges > 1:
            token = _TRACE.set(None)  # (as below: the forced call's own candidates are not this rule's)
            try:
                return plan_schedule(spec, device, bm=128, bn=128, group_m=group_m, scalar_columns=scalar_columns,
                                     split_k=ranges, tail_split=1, swap_ab=False, stream_k=0)
            finally:
                _TRACE.reset(token)
    if (stream_k is None and not pingpong and all(f is None for f in forced) and prefetch_operands is None
            and hoist_rows is None and latency_tiles(spec, device)):
        token = _TRACE.set(None)  # (the forced call's own candidates are not this rule's)
        try:
            plan = plan_schedule(spec, device, bm=64, bn=64, stages=latency_stages(spec), group_m=group_m,
                                 scalar_columns=scalar_columns, split_k=1, tail_split=1, swap_ab=False, stream_k=0)
        finally:
            _TRACE.reset(token)
        return plan

    bk = k_block(spec)
    if split_k is not None:
        _check_split_k(spec, split_k, bk, pingpong, scale_partition)
    if tail_split is not None and tail_split != 1:
        if split_k not in (None, 1):
            raise UnsupportedError(f"tail_split={tail_split} with split_k={split_k}: a split-K tail follows whole "
                                   "tiles, and split-K splits them all; pass one of the two")
        _check_split_k(spec, tail_split, bk, pingpong, scale_partition, what="tail_split")
    if consumer_partitions not in (None, 1, 2, 4):
        raise UnsupportedError(f"consumer_partitions={consumer_partitions!r}: expected 1 (one partition for all "
                               "consumer warpgroups), 2 (one per warpgroup) or 4 (bm=256's four warpgroups); pass "
                               "1, 2 or 4, or None to let the planner choose")
    if consumer_partitions == 4 and bm != 256:
        raise UnsupportedError("consumer_partitions=4 is for bm=256 (four consumer warpgroups); pass bm=256, or "
                               "1 or 2 partitions")
    if bm == 256:
        tall = _tall_problems(spec, pingpong, bool(scale_partition), split_k, tail_split, consumer_partitions)
        if tall:
            raise UnsupportedError(f"bm=256 (rule 17's tile, four consumer warpgroups) does not support "
                                   f"{'; '.join(tall)} for {spec.short()}; use bm=128")
    if consumer_partitions == 2 and bm == 64:
        raise UnsupportedError("consumer_partitions=2 needs two consumer warpgroups, but bm=64 has one; "
                               "use bm=128 or consumer_partitions=1")
    if partial_blocks not in (None, 1, 2, 4):
        raise UnsupportedError(f"partial_blocks={partial_blocks!r}: expected 1 (promote the whole tile width), "
                               "2 (two column halves) or 4 (quarters, forced only: measured 9-16% slower than 2 at "
                               "128x256, session 19); pass 1, 2 or 4, or None to let the planner choose")
    # hoist_rows None: hoisted row vectors of every column block stay live beside a ping-pong warpgroup's whole
    # accumulator and spill (200 bytes at 128x128 in quarters; its epilogue overlaps the other's mainloop anyway),
    # and beside the wide fused epilogue's 8 blocks (rule 9, which loads each block's one block ahead instead).
    if pingpong and consumer_partitions == 1:
        raise UnsupportedError("pingpong=True needs two consumer partitions (one warpgroup each), but "
                               "consumer_partitions=1; pass consumer_partitions=2 or None")
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
    if scale_partition and pingpong:
        raise UnsupportedError("the scale partition (scale_partition=True, and always for MX scales) with "
                               "pingpong=True is not built yet: a ping-pong consumer would have to skip the other's "
                               "scale stages too; use one of the two")
    # Rule 13, as measured: the plain cooperative kernel with its scales in the A/B stages.
    small_blockwise = spec.scale in _SMALL_M_RECIPES and spec.m <= 128 and not pingpong and not scale_partition
    decode = is_decode(spec, pingpong)
    best: tuple[float, int, Plan] | None = None
    aligned = rows_aligned(spec)
    for cbm, cbn, eff in TILES:
        if (bm is not None and cbm != bm) or (bn is not None and cbn != bn):
            continue
        if (cbm, cbn) == (128, 128) and not aligned:
            eff = _MISALIGNED_128
        if pingpong and not _pingpong_fits(spec, cbm, cbn, partial_blocks):
            continue
        if cbn == 64 and bn is None and not (small_blockwise or decode):
            continue  # forced only: see TILES
        if cbm == 256 and bm is None:
            continue  # rule 17: forced (or tuned) only
        if cbn in SWAP_TOKENS and bn is None:
            continue  # rule 18: the swapped decode tile, forced (or by rule 18) only
        if bm is None and cbm == 64 and spec.m > 64 and not small_blockwise:
            continue  # a 64-row tile only pays when M itself is small
        if cbm == 64 and consumer_partitions == 2 and not pingpong:
            continue  # one warpgroup cannot be split in two row blocks
        promoted = spec.accumulation is Accumulation.PROMOTED
        # Promoted fp8 at 256 wide promotes in two column blocks: a 64x256 accumulator and a 64x256 partial
        # per warpgroup would need 256 registers per thread, a 64x128 partial leaves room (192).
        # Likewise a ping-pong warpgroup's whole 128x128 (64x256) accumulator.
        wide = cbn == 256 or (pingpong and cbm * cbn >= 128 * 128)
        blocks = (partial_blocks or (2 if wide else 1)) if promoted else 1
        if promoted and cbn == 256 and blocks == 1:
            continue  # acc + whole-width partial: 256 registers per thread
        if bn is None and cbn == 256 and spec.scale is ScaleRecipe.MX:
            continue  # rule 12: MX at 256 wide spills 248-440 bytes whatever the budgets (ptxas, 2026-11-23)
        wide = fused_wide(spec, cbn, pingpong)
        # Rule 9 copies a dense operand's blocks early, through two buffers each (forced off: one, as at 128 wide).
        early = (wide and bool(_dense_operands(spec))) if prefetch_operands is None else prefetch_operands
        if bn is None and cbn == 256 and spec.epilogue is not None and not wide:
            continue  # rule 9: promoted fp8 and ping-pong keep fused epilogues 128 wide
        if (bn is None and promoted and cbn == 256 and spec.bias_dtype
                and spec.out_dtype.bytes == 4 and not (spec.scale is ScaleRecipe.TENSORWISE
                                                       and spec.bias_dtype.bytes == 4)):
            continue  # fp32 output + bias on the promoted 256-wide tile spills 8-40 bytes (ptxas, 2026-11-22)
        block = block_epilogue(spec, cbn, pingpong)
        ks = split_k if split_k is not None else _rule14_split(spec, device, cbm, cbn, pingpong, scale_partition)
        if tail_split is not None and tail_split > 1:
            ks = 1  # a forced tail follows whole tiles: rule 14 does not split them
        cap = _FORCED_MAX_STAGES if stages is not None else None  # (None: max_stages's own, rule 16's for decode)
        fit = max_stages(spec, device, cbm, cbn, bk, pingpong, scale_partition, split_k=ks, prefetch=early, cap=cap)
        if split_k is None and ks > 1 and stages is not None and stages > fit:
            ks = 1  # a forced depth that only fits beside the output's staging tile, not the fp32 partials'
            fit = max_stages(spec, device, cbm, cbn, bk, pingpong, scale_partition, prefetch=early, cap=cap)
        # Promoted fp8 measured 1-3% faster at 3 stages than at 4 (docs/benchmarks.md, sweeps of 2026-11-22).
        s = (min(fit, 3) if promoted and cbn == 256 else fit) if stages is None else stages
        if s < 1 or s > fit or (stages is None and s < 2):
            continue  # a forced depth must still fit; chosen depths are at least double buffered
        if wide and bn is None and stages is None and s < 3:
            continue  # rule 9: the slotted wide epilogue was measured at 3-4 stages; with many outputs, 128 wide
        tiles = max(1, math.ceil(spec.m / cbm) * math.ceil(spec.n / cbn)) * ks  # work units
        # A unit of a split tile does 1/ks of its work (the reduction's cost is rule 14's thresholds).
        score = math.ceil(tiles / device.sm_count) * cbm * cbn / eff / ks
        ts, tail_s = 1, 0
        if ks == 1 and tail_split is None and (decode and (cbm, cbn) == (64, 64) or cbm == 256):
            ts = 1  # rules 16 and 17's tiles take no split-K tail: unmeasured there (rule 15's cost is 128x256's)
        elif ks == 1:
            ts = tail_split if tail_split is not None else _rule15_tail(spec, device, cbm, cbn, bk, pingpong,
                                                                         scale_partition, eff)
        if ts > 1:
            tail_s = min(s, max_stages(spec, device, cbm, cbn, bk, pingpong, scale_partition, split_k=ts))
            if tail_s < 2 and tail_split is None:
                ts = 1  # the tail's fp32 staging leaves no double-buffered ring
            elif tail_s < 1:
                continue
        grid = min(device.sm_count, tiles)
        if ts > 1:
            score = tail_score(tiles, grid, ts, cbm * cbn / eff, math.ceil(spec.k / bk))
        sk = 0
        _note(f"{cbm}x{cbn}", "split-K tail" if ts > 1 else "split-K" if ks > 1 else "whole tiles", score,
              f"{tiles} units, {math.ceil(tiles / device.sm_count)} round(s) of {device.sm_count} CTAs"
              + (f", the last wave's {tiles % device.sm_count} tiles in {ts} k-ranges" if ts > 1 else ""))
        # (the planner's own choice: native accumulation only; promoted fp8's two column-block accumulators ran its
        # fixup 40% slower at 6320x6848x5648, session 22, so it is forced only)
        if (stream_k or stream_k is None and spec.accumulation is Accumulation.NATIVE) and ks == 1 \
                and tiles % device.sm_count and not _stream_k_problems(
                spec, pingpong, scale_partition, split_k, tail_split, False, cbm, early):
            k_tiles = math.ceil(spec.k / bk)
            # (chosen by the planner only where every shared tile gets exactly `pieces` pieces: pieces that start
            # at other k-blocks than whole pieces of their neighbours lost up to 30% in L2, session 22; and never
            # more pieces than k-blocks, which would leave a CTA nothing to add to its tile)
            for pieces in (stream_k,) if stream_k else (p for p in SK_PIECES if tiles % device.sm_count * p
                                                          <= device.sm_count and p <= k_tiles):
                sk_score = stream_k_score(tiles, k_tiles, device.sm_count, pieces, cbm * cbn / eff)
                _note(f"{cbm}x{cbn}", f"stream-K, {pieces} pieces", sk_score,
                      f"{tiles // device.sm_count} whole wave(s), then {tiles % device.sm_count} tiles over "
                      f"{min(device.sm_count, tiles % device.sm_count * pieces)} CTAs")
                if stream_k or sk_score < score:
                    sk, score, ts, tail_s = pieces, sk_score, 1, 0
                    grid = stream_k_grid(tiles, device.sm_count, pieces)
        # Rule 9: fused epilogues run their consumer warpgroups as one partition (its code once, not twice);
        # the wide one loads vectors a block ahead instead of hoisting all 8 blocks' (which would spill).
        # (Promoted fp8 keeps two: its promotions in the k-loop need each warpgroup to release slots on its own,
        # measured 10% for plain promoted kernels; fused ones at one partition are unmeasured.)
        fused_parts = 1 if spec.epilogue is not None and spec.accumulation is Accumulation.NATIVE else 2
        hoist = hoist_rows if hoist_rows is not None else not (pingpong or wide)
        plan = Plan(
            bm=cbm, bn=cbn, bk=bk, stages=s, consumer_warps=8 if pingpong else 4 * (cbm // 64),
            group_m=group_m, grid=grid,
            epilogue_subtiles=epilogue_subtiles(cbn, pingpong, spec.epilogue is not None, cbm, block, wide),
            block_epilogue=block,
            consumer_partitions=(2 if pingpong else 1 if cbm == 64 else 4 if cbm == 256
                                 else (consumer_partitions or fused_parts)),
            partial_blocks=blocks, hoist_rows=hoist, scalar_columns=scalar_columns,
            prefetch_operands=early, pingpong=pingpong, scale_partition=scale_partition, split_k=ks,
            tail_split=ts, tail_stages=tail_s,
            staging_slots=FUSED_WIDE_SLOTS if wide else 1,
            operand_slots=FUSED_WIDE_SLOTS if wide and early and _dense_operands(spec) else 1,
            load_ahead=wide and not hoist, swap_ab=False, target=Target.SM90A, tdm_fused=False, stream_k=sk,
            block_scaled=False, promote_tmem=False,
            **_mx_registers(spec, cbm, pingpong),
            **({"consumer_regs": _TALL_CONSUMER_REGS} if cbm == 256 else {}),
        )
        key = (score, -cbm * cbn, plan)
        if cluster == 2:
            key = (math.inf, 0, plan)  # (forced: only rule 24's candidate below may win)
        if best is None or key[:2] < best[:2]:
            best = key
        if (cbm, cbn) == (128, 256) and cluster != 1 and ks == 1 and ts == 1 and (cluster == 2 or not (
                aligned or cluster_problems(spec, pingpong, scale_partition, split_k, tail_split, stream_k, swap_ab,
                                            bm, bn, consumer_partitions))):
            cl_plan, cl_score, cl_tiles = cluster_plan(plan, spec, device, eff, aligned)
            _note("128x256", "2-CTA clusters", cl_score,
                  f"{cl_tiles} cluster tiles of 256x256, {math.ceil(cl_tiles / (device.sm_count // 2))} round(s) of "
                  f"{device.sm_count // 2} clusters, B multicast" + ("" if aligned else ", rows unaligned"))
            if cluster == 2 or (cl_tiles >= device.sm_count // 2 and cl_score < CLUSTER_MARGIN * best[0]
                                and cta_kblocks(spec, cl_tiles, device) >= cluster_min_kblocks(spec)):
                best = (cl_score, -cbm * cbn, cl_plan)
    if cluster == 2 and (best is None or best[2].cluster != 2):
        raise UnsupportedError(f"cluster=2 (rule 24): no 128x256 plan fits {spec.short()} with {stages=} on "
                               f"{device.name}. Fix: drop cluster or stages")
    if best is None:
        hint = ""
        if pingpong:
            hint = (": a ping-pong warpgroup holds a whole BM x BN fp32 accumulator, at most 128x128 (64x256), "
                    "plus a promoted fp8 partial of at most half that")
        if spec.accumulation is Accumulation.PROMOTED and bn == 256 and partial_blocks == 1:
            hint = ": promoted fp8 at bn=256 needs partial_blocks=2 (a whole-width partial exceeds the registers)"
        raise UnsupportedError(f"no tile shape fits {spec.short()} with {bm=} {bn=} {stages=} {partial_blocks=} "
                               f"on {device.name}{hint}")
    return best[2]


# Rule 21's cost model (stream-K, `stream_k_score`), fitted to forced stream-K plans against whole-tile ones on the
# H100 (docs/benchmarks.md, session 22; scripts/fit_stream_k.py refits it from docs/data, and a test keeps these within
# 0.05 rounds of its least-squares fit): a shared tile's k-blocks run SK_SLOWDOWN slower than a whole wave's (its
# pieces start at other k-blocks than their neighbours', so they share less in L2), and each piece beyond a tile's
# first costs SK_FIXUP_KBLOCKS k-blocks (the contributor's fp32 partial store, the finisher's wait and load). The
# planner tries SK_PIECES pieces per shared tile.
SK_SLOWDOWN = 0.5
SK_FIXUP_KBLOCKS = 8.0
SK_PIECES = (2, 3, 4)


# Rule 23's latency model (docs/decisions/rule-23-latency-tiles.md): where a problem has few tiles, each CTA's time
# is a fixed start (launch, barriers, the ring's first fill, the epilogue) plus its k-blocks one after another, each
# latency-bound rather than bound by the tensor cores. Fitted on the H100 (bf16, CUDA graphs; fp8's k-blocks of 128
# bytes of K priced alike) with scripts/sweep_plans.py; per k-block: 128x128 at 6 stages, 64x64 at 4-8.
LATENCY_START_US = {128: 4.2, 64: 3.35}
LATENCY_KBLOCK_US = {128: 0.33, 64: 0.17}
# ...but never faster than L2 delivers the tiles' operand bytes (each tile reads BM + BN rows of K): with many CTAs
# streaming a long K, 64x64's doubled bytes per FLOP bind. The runs above sustained 5.6-7.6 TB/s from L2 at 72-120
# CTAs (2415x160x14360 bf16 on 114 tiles of 64x64 ran at 0.50x torch, against 0.65x for 128x128 by stream-K).
LATENCY_L2_BYTES_PER_US = 7.5e6
# 64x64's ring: 4 stages, 8 from LATENCY_DEEP_KBLOCKS k-blocks on (long K hides more load latency; short K lost 5%
# to the deeper ring's start at 8 stages).
LATENCY_STAGES = (4, 8)
LATENCY_DEEP_KBLOCKS = 32


def latency_times(spec: GemmSpec, device: DeviceInfo) -> tuple[float, float, int]:
    """Rule 23's modeled microseconds: 64x64 tiles whole, then 128x128 at its best count of stream-K pieces (1: whole
    tiles; pieces as rule 21 cuts them, each k-block SK_SLOWDOWN slower, SK_FIXUP_KBLOCKS per extra piece), and
    that count. Each is its start plus the longer of its k-blocks' latency and its tiles' operand bytes from L2."""
    k_tiles = k_blocks(spec)
    tiles = square_tiles(spec, 128)
    best = (float(k_tiles), 1)
    for p in (q for q in SK_PIECES if q <= k_tiles and tiles * q <= device.sm_count):
        best = min(best, (k_tiles / p * (1 + SK_SLOWDOWN) + (p - 1) * SK_FIXUP_KBLOCKS, p))
    return latency_us(spec, 64, k_tiles), latency_us(spec, 128, best[0]), best[1]


def square_tiles(spec: GemmSpec, size: int) -> int:
    """How many size x size tiles C takes."""
    return math.ceil(spec.m / size) * math.ceil(spec.n / size)


def latency_us(spec: GemmSpec, size: int, kblocks: float) -> float:
    """Rule 23's model of a CTA on a size x size tile (64 or 128) running `kblocks` k-blocks one after another: its
    start plus the longer of those k-blocks' latency and every such tile's operand bytes from L2 (each tile reads
    BM + BN rows of K)."""
    row_bytes = spec.k * spec.a_dtype.bytes  # (one row of A or B: K elements)
    return LATENCY_START_US[size] + max(kblocks * LATENCY_KBLOCK_US[size],
                                        square_tiles(spec, size) * 2 * size * row_bytes / LATENCY_L2_BYTES_PER_US)


# Rule 25 (docs/decisions/rule-25-latency-split-k.md): with at most a quarter of the SMs' worth of 128x128 tiles and
# a long K, split-K's ranges (one wave of units, then the reduce kernel) beat stream-K's few pieces and 64x64 tiles.
# Priced in rule 23's microseconds: the units' start and k-blocks (or their bytes from L2) plus the reduce, a fixed
# SPLIT_FIXED_US and SPLIT_RANGE_US a range (the workspace's partials written and summed), fitted to forced splits
# of 4, 8 and 16 at six shapes (H100, bf16, CUDA graphs, session 26). It must beat 64x64 by SPLIT_MARGIN_64, whose
# model reads high at 64 k-blocks (513x368x4096: modeled 14.2 us, ran 10.7; split in 8 ran 11.5), and 128x128 by
# SPLIT_MARGIN_128. At most SPLIT_MAX ranges: the reduce's cost grew faster than the k-loop shrank beyond 8. Counts
# that divide the k-blocks come first (those were measured; the model prices 3-5 ranges below what ran best at
# 513x368x4096 and 1881x224x14336); only where none does are the ranges unequal, priced by the longest
# (`ir.Tiling.uneven_split`, which has run on the simulator and the compile tier only).
SPLIT_FIXED_US = 1.0
SPLIT_RANGE_US = 0.3
SPLIT_MARGIN_64 = 0.8
SPLIT_MARGIN_128 = 0.95
SPLIT_MAX = 8
SPLIT_MIN_KBLOCKS = 32


def split_time(spec: GemmSpec, ranges: int) -> float:
    """Rule 25's modeled microseconds for 128x128 tiles split into `ranges` k-ranges (one wave of units)."""
    return latency_us(spec, 128, math.ceil(k_blocks(spec) / ranges)) + SPLIT_FIXED_US + SPLIT_RANGE_US * ranges


def latency_split(spec: GemmSpec, device: DeviceInfo) -> int:
    """Rule 25: into how many k-ranges (1: none) split-K cuts `spec`'s 128x128 tiles. Only rule 23's problems (more
    than 64 rows, native accumulation, no bias or fused epilogue, K-major operands, sm_90a) with at most a quarter
    of the SMs' worth of tiles and SPLIT_MIN_KBLOCKS k-blocks; the ranges keep the units in one wave and number at
    most SPLIT_MAX, dividing the k-blocks where some count does (else unequal, the first taking one more:
    `ir.Tiling.uneven_split`); chosen where `split_time` beats rule 23's 64x64 and 128x128 times by the margins.
    (Beyond a quarter of the SMs the ranges that fit one wave are 2-3, and stream-K's pieces ran ahead:
    2415x160x14336, 100x5264x3072.)"""
    if not latency_kind(spec, device):
        return 1
    k_tiles = k_blocks(spec)
    tiles = square_tiles(spec, 128)
    if tiles > device.sm_count // 4 or k_tiles < SPLIT_MIN_KBLOCKS:
        return 1
    fits = [r for r in range(2, SPLIT_MAX + 1) if tiles * r <= device.sm_count]
    # (equal ranges where some count divides the k-blocks: what was measured; unequal ones only where none does)
    options = [r for r in fits if k_tiles % r == 0] or fits
    if not options:
        return 1
    t, ranges = min((split_time(spec, r), r) for r in options)
    t64, t128, pieces = latency_times(spec, device)
    if square_tiles(spec, 64) > device.sm_count:
        t64 = math.inf  # rule 23 plans no 64x64 tiles beyond one wave
    _note("128x128", f"split-K, {ranges} ranges", t,
          f"{tiles * ranges} units of {k_tiles // ranges}" + (f"-{k_tiles // ranges + 1}" if k_tiles % ranges else "")
          + " k-blocks, then the reduce (rule 25, modeled us)")
    _note("64x64", "latency tile", t64, "rule 23's model (rule 25 compares)")
    _note("128x128", "whole tiles" if pieces == 1 else f"stream-K, {pieces} pieces", t128,
          "rule 23's model (rule 25 compares)")
    if t < SPLIT_MARGIN_64 * t64 and t < SPLIT_MARGIN_128 * t128:
        return ranges
    return 1


# Rule 25 at decode sizes (`decode_split`, docs/decisions/rule-25-latency-split-k.md): M <= 64 over a long K on a few
# 64-wide tiles runs each tile's k-blocks one after another on a handful of SMs. Split in ranges, each 64x64 unit
# streams its share of B; the reduce sums partials of M x N, a few kilobytes. A 64-row tile's k-block at rule 16's
# deep ring takes DECODE_KBLOCK_US (8x104x5240 and 2x104x1488 swapped, 0.094-0.112; rule 23's 64x64 at 8 stages,
# 0.108-0.125), and no faster than the units stream B: DECODE_SM_BYTES_PER_US a CTA (those two shapes' 2 CTAs moved
# 60-69 B/ns each), HBM_BYTES_PER_US in all (a device-to-device copy's rate).
DECODE_KBLOCK_US = 0.11
DECODE_SM_BYTES_PER_US = 60e3
HBM_BYTES_PER_US = 3.0e6
DECODE_SPLIT_MAX = 16
DECODE_SPLIT_MIN_KBLOCKS = 24
DECODE_SPLIT_MARGIN = 0.8
# The reduce's traffic: each range's fp32 partials written and read back, at what rule 25's fit implies for its
# 0.3 us a range at 191x440 (0.67 MB a range): what matters here is that decode's partials are small.
SPLIT_REDUCE_BYTES_PER_US = 2.2e6


def decode_time(spec: GemmSpec, tiles: int, ranges: int) -> float:
    """Modeled microseconds of `tiles` 64-row tiles of a decode GEMM, each split in `ranges` k-ranges (1: whole; more:
    plus the reduce): the start, then the longer of a range's k-blocks and the units streaming B."""
    units = tiles * ranges
    stream = spec.n * spec.k * spec.b_dtype.bytes / min(units * DECODE_SM_BYTES_PER_US, HBM_BYTES_PER_US)
    loop = max(math.ceil(k_blocks(spec) / ranges) * DECODE_KBLOCK_US, stream)
    reduce = 0.0 if ranges == 1 else (SPLIT_FIXED_US + ranges * spec.m * spec.n * 2 * DType.FP32.bytes
                                      / SPLIT_REDUCE_BYTES_PER_US)
    return LATENCY_START_US[64] + loop + reduce


def decode_split(spec: GemmSpec, device: DeviceInfo) -> int:
    """Rule 25 at decode sizes: into how many k-ranges (1: none) a decode GEMM's 64x64 tiles split. Decode (M <= 64)
    of rule 23's kind otherwise (native accumulation, no bias or fused epilogue, not blockwise, not grouped, K-major
    operands, sm_90a), on at most a quarter of the SMs' worth of 64-wide tiles and DECODE_SPLIT_MIN_KBLOCKS k-blocks;
    at most DECODE_SPLIT_MAX ranges, the units in one wave (unequal ranges where none divides:
    `ir.Tiling.uneven_split`); chosen where `decode_time` beats the whole tiles' (rules 16 and 18) by
    DECODE_SPLIT_MARGIN."""
    if not (0 < spec.m <= 64 and _latency_kind_beyond_rows(spec, device)):
        return 1
    k_tiles = k_blocks(spec)
    tiles = math.ceil(spec.n / 64)
    if tiles > device.sm_count // 4 or k_tiles < DECODE_SPLIT_MIN_KBLOCKS:
        return 1
    fits = [r for r in range(2, min(DECODE_SPLIT_MAX, k_tiles) + 1) if tiles * r <= device.sm_count]
    if not fits:
        return 1
    t, ranges = min((decode_time(spec, tiles, r), r) for r in fits)
    whole = decode_time(spec, tiles, 1)
    _note("64x64", f"split-K, {ranges} ranges", t,
          f"{tiles * ranges} units of {math.ceil(k_tiles / ranges)} k-blocks at most, then the reduce (rule 25 at "
          "decode sizes, modeled us)")
    _note("64-row", "whole tiles", whole, f"{tiles} CTAs streaming {k_tiles} k-blocks each (rule 25 compares)")
    return ranges if t < DECODE_SPLIT_MARGIN * whole else 1


def _latency_kind_beyond_rows(spec: GemmSpec, device: DeviceInfo) -> bool:
    """`latency_kind` without its row bound: native accumulation, no bias or fused epilogue, no blockwise scales, not
    grouped, K-major A and B, sm_90a."""
    return not (spec.epilogue is not None or spec.bias_dtype is not None
                or spec.accumulation is not Accumulation.NATIVE or spec.scale.is_blockwise or spec.grouped
                or spec.a_layout is not ALayout.K_MAJOR or spec.b_layout is not BLayout.K_MAJOR
                or not device.arch.startswith("sm_90"))


def latency_kind(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Whether `spec` is of the kind rules 23 and 25 were measured on: more than 64 rows (decode has rules 16 and
    18), native accumulation (bf16, fp16, fp8 fast), no bias or fused epilogue, no blockwise scales, not grouped,
    K-major A and B, on sm_90a."""
    return spec.m > 64 and _latency_kind_beyond_rows(spec, device)


def latency_stages(spec: GemmSpec) -> int:
    """Rule 23's ring depth for 64x64 tiles (LATENCY_STAGES by K)."""
    k_tiles = k_blocks(spec)
    return LATENCY_STAGES[k_tiles >= LATENCY_DEEP_KBLOCKS]


def latency_tiles(spec: GemmSpec, device: DeviceInfo) -> bool:
    """Rule 23: whether `spec` runs on 64x64 tiles (`latency_stages` deep): a GEMM of more than 64 rows (decode has
    rules 16 and 18) with native accumulation (bf16, fp16, fp8 fast) and no bias or fused epilogue, whose 64x64
    tiles fit in one wave, where the latency model prices them below 128x128's best. (More 64x64 tiles than SMs
    turned L2-bound: 100x5264x3464 bf16, 166 tiles, ran at 0.36x torch against 0.58x for 42 of 128x128.
    Promoted fp8, a bias, fused epilogues and operands that are not K-major: not measured at these sizes.)"""
    if not latency_kind(spec, device):
        return False
    tiles64 = square_tiles(spec, 64)
    if tiles64 > device.sm_count:
        return False
    t64, t128, pieces = latency_times(spec, device)
    if t64 >= t128:
        return False
    k_tiles = k_blocks(spec)
    _note("64x64", f"latency tile, {latency_stages(spec)} stages", t64,
          f"{tiles64} CTAs: {LATENCY_START_US[64]} us + {k_tiles} k-blocks x {LATENCY_KBLOCK_US[64]} us, or its "
          "bytes from L2 (rule 23, modeled us)")
    _note("128x128", "whole tiles" if pieces == 1 else f"stream-K, {pieces} pieces", t128,
          f"{LATENCY_START_US[128]} us + its k-blocks x {LATENCY_KBLOCK_US[128]} us, or its bytes from L2 (rule 23, "
          "modeled us)")
    return True


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


def plan_grouped(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                 stages: int | None = None, group_m: int = 8, consumer_partitions: int | None = None,
                 partial_blocks: int | None = None) -> Plan:
    """Rule 22: a grouped GEMM's plan (`GemmSpec.grouping`). The tile is `grouped_tile`'s (or forced); the rest is
    what the other rules give the same GEMM ungrouped at that tile (stages, registers, partitions, epilogue), with
    whole tiles only (no split-K, tail, stream-K or swap: a grouped kernel's tiles are its groups') and the grid
    at the SM count: the tile count is known on the device only, and CTAs without a tile exit at once."""
    from warploom.errors import UnsupportedError

    if device.blackwell or device.gfx1250:
        raise UnsupportedError(f"grouped GEMMs (rule 22) are built for sm_90a; {device.name} is {device.arch}. Fix: "
                               "plan for an sm_90a device (H100_SXM)")
    # (a K-grouped spec's M is each group's rows already: its groups split K)
    tile = grouped_tile(spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m / max(spec.groups, 1))
    bm, bn = bm or tile[0], bn or (tile[1] if bm in (None, tile[0]) else 128)
    dense = replace(spec, grouping=Grouping.NONE, groups=0)
    plan = plan_schedule(dense, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                         consumer_partitions=consumer_partitions, partial_blocks=partial_blocks, split_k=1,
                         tail_split=1, swap_ab=False, stream_k=0)
    # Rule 10's per-block scales for fp8 rowwise on a 256-wide tile even without a bias: beside a grouped tile's
    # group, origin and row end the whole-width scale vectors spilled 16 bytes (ptxas, 8192x4096x7168), per block none.
    block = plan.block_epilogue or (spec.scale is ScaleRecipe.ROWWISE and plan.bn == 256)
    # Blockwise fp8 on 128x256 stores 64x64 blocks, not 64x128: a group's ragged last tile reads its staged block
    # back for the masked stores, and a 64x128 one beside the promoted mainloop's accumulator spilled 52 bytes
    # (ptxas, Triton 3.6, 8192x4096x7168 over 8 experts); 64x64 ones, none.
    subtiles = max(plan.epilogue_subtiles, 4) if spec.scale.is_blockwise and plan.bn == 256 else plan.epilogue_subtiles
    return replace(plan, grid=device.sm_count, block_epilogue=block, epilogue_subtiles=subtiles)


def _stream_k_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool | None, split_k: int | None,
                       tail_split: int | None, swap_ab: bool | None, bm: int | None,
                       prefetch_operands: bool | None = None) -> list[str]:
    """Rule 21: why a stream-K plan cannot run `spec` with these options (empty: it can)."""
    problems = []
    if spec.epilogue is not None and prefetch_operands and _dense_operands(spec):
        # (a contributor skips its tile's epilogue, so a copy started at the tile's start would never be read)
        problems.append("prefetch_operands=True (a dense operand's copy starts at the tile's start, before the "
                        "fixup; pass prefetch_operands=False)")
    if spec.scale.is_blockwise and spec.scale is not ScaleRecipe.BLOCKWISE_1X128_128X128:
        problems.append(f"{spec.scale.value} scales (stream-K's blockwise recipe is 1x128 x 128x128)")
    if pingpong:
        problems.append("ping-pong (its consumers take whole tiles in turn)")
    if scale_partition:
        problems.append("the scale partition")
    if split_k not in (None, 1) or tail_split not in (None, 1):
        problems.append("split_k or tail_split (stream-K shares the k-blocks itself)")
    if swap_ab:
        problems.append("swap_ab (decode's swapped tiles)")
    if bm not in (None, 128):
        problems.append(f"bm={bm} (stream-K is built for 128-row tiles)")
    return problems


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


def cluster_min_kblocks(spec: GemmSpec) -> int:
    """Rule 24: the fewest k-blocks a CTA must run (`cta_kblocks`) for the planner to choose clusters for `spec`."""
    return CLUSTER_MIN_KBLOCKS.get(spec.a_dtype.bytes, CLUSTER_MIN_KBLOCKS[2])


def cta_kblocks(spec: GemmSpec, cluster_tiles: int, device: DeviceInfo) -> float:
    """Rule 24: the k-blocks each CTA of a full grid of 2-CTA clusters runs over `cluster_tiles` cluster tiles."""
    return k_blocks(spec) * cluster_tiles / (device.sm_count // 2)


def cluster_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool | None, split_k: int | None,
                     tail_split: int | None, stream_k: int | None, swap_ab: bool | None, bm: int | None,
                     bn: int | None, consumer_partitions: int | None) -> list[str]:
    """Rule 24: why 2-CTA clusters cannot run `spec` with these options (empty: they can)."""
    from warploom.backends import gluon_api

    problems = []
    if not gluon_api.current().tma_multicast:
        problems.append("this Triton's Hopper TMA has no multicast (Triton >= 3.7 has)")
    if spec.a_layout is ALayout.M_MAJOR:
        problems.append("an M-major A (each CTA's rows must be one box of A)")
    if spec.epilogue is not None:
        problems.append("a fused epilogue graph")
    if spec.accumulation is Accumulation.PROMOTED or spec.scale.is_blockwise:
        problems.append("promoted fp8 or blockwise scales (their partials and scale rings are per row block)")
    if spec.grouped:
        problems.append("a grouped GEMM")
    if pingpong or scale_partition:
        problems.append("ping-pong or the scale partition")
    if split_k not in (None, 1) or tail_split not in (None, 1) or stream_k:
        problems.append("split_k, tail_split or stream_k (a cluster runs whole tiles)")
    if swap_ab:
        problems.append("swap_ab")
    if bm not in (None, 128) or bn not in (None, 256) or consumer_partitions not in (None, 2):
        problems.append("a tile other than 128x256 with two consumer warpgroups")
    return problems


def cluster_plan(plan: Plan, spec: GemmSpec, device: DeviceInfo, eff: float,
                 aligned: bool) -> tuple[Plan, float, int]:
    """Rule 24's plan from the 128x256 `plan`, its score in step 3's units (rounds of the device's clusters over the
    cluster tiles of 256 x 256, each CTA's 128x256; whole rounds at the unaligned rows' gain) and its cluster tiles."""
    tiles = math.ceil(spec.m / 256) * math.ceil(spec.n / 256)
    clusters = device.sm_count // 2
    gain = 1.0 if aligned else CLUSTER_UNALIGNED_GAIN
    score = (tiles // clusters / gain + (tiles % clusters > 0)) * 128 * 256 / eff
    # Each warpgroup stores its 128-row column block in blocks half as wide as its 64-row block's were: the staging
    # buffers take the shared memory they took, beside the same ring.
    return replace(plan, cluster=2, consumer_partitions=2, epilogue_subtiles=2 * plan.epilogue_subtiles, stream_k=0,
                   grid=2 * min(clusters, tiles)), score, tiles


def stream_k_grid(tiles: int, sm_count: int, pieces: int) -> int:
    """Rule 21's CTAs: every SM where the tiles fill a wave, else as many as the pieces need (`ir.Tiling.stream_k`)."""
    return sm_count if tiles >= sm_count else min(sm_count, tiles * pieces)


def stream_k_score(tiles: int, k_tiles: int, sm_count: int, pieces: int, area: float) -> float:
    """Rule 21's score in step 3's units (rounds x BM * BN / efficiency): the whole waves, then the last wave's
    tiles shared by min(SMs, tiles x pieces) CTAs: each CTA's share of a tile, SK_SLOWDOWN slower, plus
    SK_FIXUP_KBLOCKS k-blocks for each piece beyond a tile's first."""
    whole, rest = divmod(tiles, sm_count)
    if not rest:
        return whole * area
    ctas = min(sm_count, rest * pieces)
    fixup = (ctas / rest - 1) * SK_FIXUP_KBLOCKS / max(1, k_tiles)
    return (whole + rest / ctas * (1 + SK_SLOWDOWN) + fixup) * area


@dataclass(frozen=True)
class Candidate:
    """One plan the planner scored (`explain`).

    Attributes:
        tile: BM x BN.
        kind: whole tiles, a split-K tail, split-K or stream-K with its pieces.
        score: step 3's score (rounds x BM * BN / efficiency; lower is faster).
        why: the wave arithmetic behind the score.
    """

    tile: str
    kind: str
    score: float
    why: str


_TRACE: ContextVar[list[Candidate] | None] = ContextVar("warploom_planner_trace", default=None)


def _note(tile: str, kind: str, score: float, why: str) -> None:
    trace = _TRACE.get()
    if trace is not None:
        trace.append(Candidate(tile, kind, score, why))


@dataclass(frozen=True)
class Explanation:
    """What `plan_schedule` considered for a problem and what it chose (`explain`, `Kernel.explain`)."""

    spec: GemmSpec
    device: str
    plan: Plan
    candidates: tuple[Candidate, ...]

    def text(self) -> str:
        lines = [f"{self.spec.short()} on {self.device}: {self.plan.short()}"]
        if not self.candidates:
            lines.append("  (chosen by a rule without scoring: swap-AB decode, sm_100a, gfx1250 or forced options)")
            if self.plan.promote_tmem:
                lines.append(f"  accumulation: {promotion_path(self.plan)}")
            if self.plan.block_scaled:
                lines.append(f"  scales: {scale_path(self.plan, self.spec)}")
            return "\n".join(lines)
        best = min(c.score for c in self.candidates)
        lines.append(f"  {'tile':8s} {'schedule':20s} {'score':>6s}  (1.00: the best; lower is faster)")
        for c in sorted(self.candidates, key=lambda c: c.score):
            lines.append(f"  {c.tile:8s} {c.kind:20s} {c.score / best:6.2f}  {c.why}")
        return "\n".join(lines)


def explain(spec: GemmSpec, device: DeviceInfo, **forced: object) -> Explanation:
    """Plan `spec` as `plan_schedule` does and list every candidate it scored, with its score and wave arithmetic:
    why the winner won. (Ties go to the larger tile; rules that pick without scoring list none.)"""
    trace: list[Candidate] = []
    token = _TRACE.set(trace)
    try:
        plan = plan_schedule(spec, device, **forced)  # type: ignore[arg-type]
    finally:
        _TRACE.reset(token)
    return Explanation(spec, device.name, plan, tuple(trace))


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


def tail_score(tiles: int, grid: int, tail_split: int, area: float, k_tiles: int) -> float:
    """Rule 15's score of a plan with a split-K tail, in the units of step 3's (rounds x BM * BN / efficiency,
    `area`): the whole rounds, the tail's rounds of 1/tail_split of a tile, and TAIL_COST_US in rounds of a
    128x256 tile at this K (`_ROUND_US_PER_KBLOCK`). `grid` is the plan's (the launcher's tail_spans)."""
    whole, tail = divmod(tiles, grid)
    fixed = TAIL_COST_US / (_ROUND_US_PER_KBLOCK * max(1, k_tiles)) * 128 * 256 if tail else 0.0  # (no tail: none)
    return (whole + math.ceil(tail * tail_split / grid) / tail_split) * area + fixed


def _rule15_tail(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, bk: int, pingpong: bool,
                 scale_partition: bool | None, eff: float) -> int:
    """Rule 15: where the tiles fill at least one whole wave, leave a last round at most half busy, and that round
    idles at least 10% of the whole CTA-time (a few waves: at 27 waves a tail could save 2% at most, within what
    its own cost is known to), run that round's tiles as split-K units over the most k-ranges (a divisor of the
    k-blocks, at most 8, each range at least 4 k-blocks) that keep them in one wave, if K has at least
    `_TAIL_MIN_KBLOCKS` k-blocks and its score (`tail_score`: a fixed cost that weighs more at short K) beats the
    plain last round; otherwise 1. Only where split-K is
    allowed (_check_split_k)."""
    if (spec.bias_dtype is not None or spec.epilogue is not None or pingpong or scale_partition
            or spec.scale is ScaleRecipe.MX):
        return 1
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    whole, tail = divmod(tiles, device.sm_count)
    k_tiles = math.ceil(spec.k / bk)
    if whole == 0 or tail == 0 or (whole + tail / device.sm_count) / (whole + 1) >= 0.9:
        return 1
    if k_tiles < _TAIL_MIN_KBLOCKS:
        return 1  # rounds under ~30 us: the tail's three launches cost more than the score's fixed cost says
    ts = max((d for d in range(2, 9) if k_tiles % d == 0 and k_tiles // d >= 4 and tail * d <= device.sm_count),
             default=1)
    area = bm * bn / eff
    if ts > 1 and tail_score(tiles, device.sm_count, ts, area, k_tiles) >= (whole + 1) * area:
        return 1  # the tail's fixed cost outweighs the idle part of the last round at this K
    return ts


def _check_split_k(spec: GemmSpec, split_k: int, bk: int, pingpong: bool, scale_partition: bool | None,
                   what: str = "split_k") -> None:
    """Split-K's limits (also a split-K tail's, `what` = "tail_split"): a k-block for every range; ranges of equal
    counts where the producer copies per-column scales of B in one flattened loop (`ScaleRecipe.per_column_b`),
    which runs one count a unit, and for promoted accumulation, whose consumers spilled with unequal ones
    (elsewhere they may differ by one: `ir.Tiling.uneven_split`); and the partials summed before anything that is
    not linear in the accumulator (the bias, a fused epilogue, the output cast) could run."""
    from warploom.errors import UnsupportedError

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


def _mx_registers(spec: GemmSpec, bm: int, pingpong: bool) -> dict[str, int]:
    """Rule 12's budgets: the scale partition decodes MX scales in registers; at 128x256 the kernel spilled 136 and
    280 bytes with 24 and 32 for its warpgroup, none with 40 or 48 (ptxas, 2026-11-23). It shares that warpgroup
    (and so its budget) with the producer. Beside two consumer warpgroups at 232, 40 is what keeps the default
    partition (consumer0) at 232 too: Gluon gives it what is left of maxnreg (168) x 384 threads after the
    workers' budgets, 224 with 48."""
    if spec.scale is not ScaleRecipe.MX:
        return {}
    return {"producer_regs": 40, "consumer_regs": 232 if bm == 128 or pingpong else _CONSUMER_REGS}


def _pingpong_fits(spec: GemmSpec, bm: int, bn: int, partial_blocks: int | None) -> bool:
    """Whether one warpgroup (128 threads) can hold a whole tile's accumulator: at most 128 fp32 registers a
    thread (128x128 or 64x256), plus, for promoted fp8, a partial of one column block."""
    regs = bm * bn // 128
    if spec.accumulation is Accumulation.PROMOTED:
        regs += regs // (partial_blocks or (2 if bn >= 128 else 1))
    return bm * bn <= 128 * 128 and regs <= 192


def block_epilogue(spec: GemmSpec, bn: int, pingpong: bool = False) -> bool:
    """Rule 10: rowwise scales and a bias on a 256-wide cooperative tile (no fused epilogue) go per 64-column
    block. Whole, the 256-wide scale_b and bias vectors beside the accumulator spill 272 bytes (ptxas), which
    kept this common case on 128x128 tiles until 2026-11-23; per block, 0 bytes."""
    return (bn == 256 and not pingpong and spec.scale is ScaleRecipe.ROWWISE and spec.bias_dtype is not None
            and spec.epilogue is None and spec.accumulation is Accumulation.NATIVE)


@dataclass(frozen=True)
class WaveFill:
    """How a plan's work units (tiles, or split-K units) fill the persistent grid, one unit per CTA at a time.

    With `units` over `ctas` CTAs the kernel takes `rounds` = ceil(units / ctas) unit-times, of which
    units / ctas do work on average: `efficiency`. The last round runs `last` units, so a problem just past a
    whole number of waves leaves most SMs idle in it (wave quantization; issue 6 item 3). A plan with a split-K
    tail (rule 15) runs `units` whole tiles in `rounds` full rounds, then `tail` tiles as tail * tail_split units
    of 1/tail_split of a tile each."""

    units: int
    ctas: int
    rounds: int
    last: int
    tail: int = 0
    tail_split: int = 1

    @property
    def tail_rounds(self) -> int:
        return -(-self.tail * self.tail_split // self.ctas)

    @property
    def waves(self) -> float:
        return (self.units + self.tail) / self.ctas

    @property
    def efficiency(self) -> float:
        return self.waves / (self.rounds + self.tail_rounds / self.tail_split)

    def describe(self) -> str:
        if self.tail_split > 1:
            rounds = self.rounds + self.tail_rounds / self.tail_split
            return (f"{self.units} whole tiles over {self.ctas} CTAs in {self.rounds} rounds, then {self.tail} tiles "
                    f"as {self.tail * self.tail_split} split-K units of 1/{self.tail_split} tile in {self.tail_rounds} "
                    f"round(s): {self.waves:.2f} waves of work in {rounds:.2f} rounds ({self.efficiency:.0%} of the "
                    "CTA-time does work, before the tail's own cost)")
        return (f"{self.units} work units over {self.ctas} CTAs: {self.waves:.2f} waves in {self.rounds} rounds, the "
                f"last with {self.last} of {self.ctas} CTAs busy ({self.efficiency:.0%} of the CTA-time does work)")


def wave_fill(spec: GemmSpec, plan: Plan) -> WaveFill:
    """`plan`'s wave fill at `spec`'s size."""
    units = plan.units(spec.m, spec.n)
    ctas = min(plan.grid, units)
    if plan.tail_split > 1:  # whole waves of tiles, then the rest split (runtime.launch, ir.raster.tail_spans)
        whole, tail = divmod(units, plan.grid)
        return WaveFill(whole * plan.grid, plan.grid, whole, plan.grid if whole else 0, tail, plan.tail_split)
    rounds = -(-units // ctas)
    return WaveFill(units, ctas, rounds, units - (rounds - 1) * ctas)
