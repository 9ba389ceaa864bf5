"""A plan: one schedule's parameters (`Plan`), chosen by its target's planner rule (`warploom.planner.plan_schedule`)
or given by hand, and how its work units fill the persistent grid (`wave_fill`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warploom.errors import ArgumentTypeError, PlanError, plan_field
from warploom.ir.nodes import MAX_REGS, MIN_REGS, narrow_widths
from warploom.spec import GemmSpec
from warploom.target import Target

# Rule 4's register budgets (setmaxnreg): the producer's and the consumers', at one CTA per SM.
PRODUCER_REGS = 24
CONSUMER_REGS = 240


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
            sm_100a MX / NVFP4 (`block_scaled`): a 4-warp partition tcgen05.st's the scales into two tensor-memory
            buffers (passes/blackwell_scales.py, `scale_path`) instead of tcgen05.cp from the stage: row-major
            scales always, blocked ones where `planning.sm100.scale_partition_rule` says (or forced).
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
        sk_waves: with `stream_k`, 0, or 1: one whole wave of tiles joins the last, partial one in the shared region
            (`ir.Tiling.sk_waves`), so every CTA runs about (rest + grid) / grid tiles' k-blocks instead of one whole
            tile and then a share of the rest (forced only: issue 23's lever for tiles just over a whole wave).
        cluster: rule 24 (sm_90a, Triton >= 3.7): 1, or 2 CTAs of a thread-block cluster stacked along M share B's
            tile, which the lead CTA multicasts (`ir.Tiling.cluster`, passes/cluster.py); the consumer warpgroups
            then split each tile by columns. `grid` stays the CTAs launched (an even number).
            With `pingpong` (issue 24, forced only) each warpgroup keeps whole tiles: both CTAs run the same tile
            sequence, offset by BM rows, so each ring slot holds the same B box in both.
        cluster_n: with cluster 2, the CTAs stand side by side along N instead (1x2) and share A's tile (passes/
            cluster.py ShareA, `ir.Tiling.cluster_n`); the consumer warpgroups keep the row split. No ping-pong.
        amax_pass: rule 29 (planning/amax_pass.py): the kernel is the first of two passes of a fused rowwise
            quantization across the tiles along N (fp32 y to a workspace, an atomic row amax), which a cast kernel
            follows (`ir.AmaxPass`); the other fields plan that first pass.
        n_blocks: rules 31 and 32: () for a whole tile, or a *narrow or fitted tile* of sum(n_blocks) < bn columns
            (`tile_n`, its stride along N), in blocks of these widths (powers of two from 16, widest first), each
            with its own wgmma, B box and stores (`ir.Tiling.n_blocks`).
    """

    bm: int
    bn: int
    bk: int
    stages: int
    consumer_warps: int
    group_m: int
    grid: int
    producer_warps: int = 1
    producer_regs: int = PRODUCER_REGS
    consumer_regs: int = CONSUMER_REGS
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
    sk_waves: int = 0
    tdm_warps_a: int = 0
    tdm_warps_b: int = 0
    tdm_fused: bool = False
    cluster: int = 1
    cluster_n: bool = False
    amax_pass: bool = False
    n_blocks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", Target.named(self.target, "Plan(target=...)"))  # (a cache gives its name)
        if (self.acc_buffers > 0) != (self.target is Target.SM100A):
            raise PlanError(f"Plan(acc_buffers={self.acc_buffers}, target={self.target}): tensor-memory accumulator "
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
                raise plan_field(name, v, f"an int >= {least}", f"pass {name} as an int >= {least}, or leave it to "
                                 "plan_schedule")
        self._check_lowering()
        if self.staging_slots < 1 or self.epilogue_subtiles % self.staging_slots:
            raise PlanError(f"Plan(staging_slots={self.staging_slots}) must divide epilogue_subtiles="
                             f"{self.epilogue_subtiles}: a tile's blocks cycle through the slots, and the next tile "
                             "must start on a slot whose store is the oldest in flight")
        if self.operand_slots < 1:
            raise PlanError(f"Plan(operand_slots={self.operand_slots}): expected at least 1")
        if self.load_ahead and self.hoist_rows:
            raise PlanError("Plan(load_ahead=True) loads each block's operands one block early; hoist_rows=True "
                             "already loads them all before the final wgmma wait: pass hoist_rows=False")
        if self.stream_k and (self.split_k > 1 or self.tail_split > 1 or self.pingpong or self.swap_ab):
            raise PlanError(f"Plan(stream_k={self.stream_k}) shares whole tiles' k-blocks among CTAs itself: it takes "
                             "no split_k, "
                             "tail_split, pingpong or swap_ab")
        if self.sk_waves not in (0, 1) or (self.sk_waves and not self.stream_k):
            raise PlanError(f"Plan(sk_waves={self.sk_waves!r}): expected 0, or 1 with stream_k (the whole wave it adds "
                             "to stream-K's shared region)")
        if self.cluster not in (1, 2):
            raise PlanError(f"Plan(cluster={self.cluster!r}): expected 1 or 2 CTAs per cluster")
        if self.cluster > 1 and (self.split_k > 1 or self.tail_split > 1 or self.stream_k
                                 or self.swap_ab or self.target is not Target.SM90A or self.grid % self.cluster):
            raise PlanError(f"Plan(cluster={self.cluster}) runs whole tiles on sm_90a on an even grid: it takes no "
                             "split_k, tail_split, stream_k or swap_ab, and grid="
                             f"{self.grid} must be a multiple of {self.cluster}")
        if self.cluster_n and self.cluster == 1:
            raise PlanError("Plan(cluster_n=True) places a cluster's CTAs along N: it needs cluster=2")
        if self.cluster_n and self.pingpong:
            raise PlanError("Plan(cluster_n=True, pingpong=True): ping-pong clusters are built 2x1 only (the CTAs "
                             "along M sharing B). Fix: cluster_n=False, or pingpong=False")
        if self.promote_tmem and self.target is not Target.SM100A:
            raise PlanError(f"Plan(promote_tmem=True, target={self.target}): promotion through tensor-memory "
                             "partials is sm_100a's")
        if self.amax_pass and (self.split_k > 1 or self.tail_split > 1 or self.stream_k or self.pingpong
                               or self.swap_ab or self.cluster > 1 or self.target is not Target.SM90A):
            raise PlanError("Plan(amax_pass=True) is rule 29's first pass of a rowwise quantization on sm_90a's whole "
                             "tiles: it takes no split_k, tail_split, stream_k, pingpong, swap_ab or cluster")
        object.__setattr__(self, "n_blocks", tuple(self.n_blocks))  # (JSON and sweeps give a list)
        if self.n_blocks:
            b = self.n_blocks
            if not narrow_widths(b) or sum(b) >= self.bn:
                raise PlanError(f"Plan(n_blocks={b}): expected powers of two from 16, widest first, covering fewer "
                                f"than bn={self.bn} columns (e.g. (64, 16) for N = 80 at bn=128)")
            if (self.pingpong or self.swap_ab or self.cluster_n or self.amax_pass or self.partial_blocks > 1
                    or self.target is not Target.SM90A):
                raise PlanError(f"Plan(n_blocks={b}) is rule 31's narrow or rule 32's fitted tile: sm_90a tiles of "
                                 "cooperative consumers, so no pingpong, swap_ab, 1x2 cluster, amax_pass or "
                                 "partial_blocks")
            if self.cluster > 1 and (self.bm != 128 or self.consumer_partitions != 2):
                raise PlanError(f"Plan(n_blocks={b}, cluster={self.cluster}) with bm={self.bm} and "
                                f"consumer_partitions={self.consumer_partitions}: a cluster's fitted tiles interleave "
                                "the CTAs' rows in 64-row blocks, one consumer partition each (bm=128 and two "
                                "consumer partitions, ir.Tiling.interleaved)")
            if self.tail_split > 1:
                raise PlanError(f"Plan(n_blocks={b}) with tail_split={self.tail_split}: the tail's reduction writes "
                                "whole BN-wide tiles, past a fitted tile's columns")
            if self.staging_slots > 1:
                raise PlanError(f"Plan(n_blocks={b}) with staging_slots={self.staging_slots}: a narrow block's staging "
                                "shares the first slot's memory (ir.Buffer.alias), which only one slot keeps free "
                                "before each write")
        if self.bm == 192 and (self.consumer_partitions != 3 or self.pingpong):
            raise PlanError(f"Plan(bm=192) with consumer_partitions={self.consumer_partitions}: rule 32's 192-row tile "
                            "runs one cooperative partition per warpgroup (3), each reading its own 64-row box of A")
        if self.tail_split > 1 and self.tail_stages < 1:
            raise PlanError(f"Plan(tail_split={self.tail_split}) needs tail_stages >= 1: the tail kernel's ring depth "
                             "(the planner sets it; by hand, at most what fits beside its fp32 staging tile)")

    def _check_lowering(self) -> None:
        """What every target's lowering needs of the tile and the warps, whatever the problem (`plan_check` checks
        the plan against its spec and GPU): a plan edited by hand (``replace(plan, bk=100)``) failed deep in a pass,
        the Gluon emitter or Triton's compiler."""
        for name in ("bm", "bn", "bk"):
            v = getattr(self, name)
            if v & (v - 1) and not (name == "bm" and v == 192):  # (rule 32's 192 rows are three 64-row boxes of A)
                raise plan_field(name, v, "a power of two (Triton's block shapes are)" + (", or 192" if name == "bm"
                                                                                          else ""),
                                 f"{name}={1 << (v.bit_length() - 1)}, or leave the tile to plan_schedule")
        if self.consumer_warps % 4:  # (wgmma, a tcgen05 epilogue's tensor-memory loads and wmma take warpgroups)
            raise plan_field("consumer_warps", self.consumer_warps, "a multiple of 4: whole warpgroups",
                             "consumer_warps=4 * (bm // 64) on sm_90a (8 with pingpong), as plan_schedule sets it")
        if self.target is Target.GFX1250:
            return  # (one partition of consumer_warps: no producer or scale warps, no setmaxnreg budgets)
        for name in ("producer_warps", "scale_warps"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):  # (Triton's warp_specialize refuses other partition sizes)
                raise plan_field(name, v, "a power of two of warps (1, 2, 4, ...): a partition's size",
                                 f"{name}=1" if name == "producer_warps" else f"{name}=4 (sm_100a) or 1 (sm_90a)")
        for name in ("producer_regs", "consumer_regs"):
            v = getattr(self, name)
            if not MIN_REGS <= v <= MAX_REGS or v % 8:
                raise plan_field(name, v, f"a multiple of 8 in [{MIN_REGS}, {MAX_REGS}]: a setmaxnreg budget",
                                 f"{name}={PRODUCER_REGS if name == 'producer_regs' else CONSUMER_REGS}, as "
                                 "plan_schedule sets it")

    def units(self, m: int, n: int) -> int:
        """Work units of an M x N output: its tiles (at least one), times the k-ranges of split-K. (A swapped plan's
        tiles cover C^T: bm tiles N and bn tiles M.)"""
        if self.swap_ab:
            m, n = n, m
        return max(1, math.ceil(m / self.bm) * math.ceil(n / self.tile_n)) * self.split_k

    @property
    def tile_n(self) -> int:
        """A tile's columns of C, its stride along N: sum(n_blocks) for a narrow or fitted tile, else bn
        (`ir.Tiling.tile_n`)."""
        return sum(self.n_blocks) if self.n_blocks else self.bn

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
        sk = f"_sk{self.stream_k}{f'w{self.sk_waves}' if self.sk_waves else ''}g{self.grid}" if self.stream_k else ""
        sk += (f"_c1x{self.cluster}" if self.cluster_n else f"_c{self.cluster}") if self.cluster > 1 else ""
        sk += "_amax" if self.amax_pass else ""  # (rule 29's first pass: a kernel of another name)
        sk += f"_n{'_'.join(map(str, self.n_blocks))}" if self.n_blocks else ""  # (rule 31; in an identifier)
        return (f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_w{self.consumer_warps}_g{self.group_m}"
                f"{sub}{split}{blocks}{ks}{sk}{ablate}{'_swap' if self.swap_ab else ''}{tm}")


def expect_plan(plan: object, fix: str) -> Plan:
    """`plan` if it is a `Plan`; anything else (a dict, a plan's name, None where one is required) is refused by name,
    with `fix`, before any field of it is read."""
    if not isinstance(plan, Plan):
        raise ArgumentTypeError("plan", "a warploom Plan", f"{type(plan).__name__} {plan!r}", fix)
    return plan


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
