"""The tuner's cost model: what a schedule costs in shared memory, registers and waves, before anything runs.

The autotuner times candidates on the device, which costs a JIT compile and a timing loop each, so most of the
search space is cut here first, by three estimates:

1. Shared memory: the A/B ring (stages x one A and one B tile) + the epilogue's staging buffers + a 1 KiB
   reserve for mbarriers and alignment: the planner's own accounting (`warploom.planner.max_stages`). Over the
   device's per-block limit the kernel cannot launch.
2. Registers per consumer thread: each consumer warpgroup owns 64 rows of the tile, so its fp32 accumulator
   is 64 x BN / 128 threads = BN / 2 registers (a ping-pong warpgroup owns whole tiles: BM x BN / 128).
   Beside it live either the mainloop's temporaries (promoted fp8: a (rows, BN / partial_blocks) partial)
   or the epilogue's (a per-column vector such as rowwise scale_b or bias
   costs BN_e / 4 registers in the wgmma layout, where each thread covers 2 of every 8 columns; a fused
   epilogue keeps about two tile-block-sized temporaries, BN_e each), never both: the partial is dead once
   the epilogue starts. Plus `_FIXED_REGS` for addresses, counters and barrier phases. Over the consumer's
   setmaxnreg budget the kernel spills. The constants reproduce the spills the planner measured with ptxas
   (planner.py steps 8 and 9): a whole-width promoted partial at BN = 256, 256-wide rowwise scale_b + bias,
   and a fused epilogue beside a 64 x 256 accumulator are over; the planner's choices are under.
3. Waves: a persistent grid of one CTA per SM walks `tiles` tiles in ceil(tiles / SMs) waves; the last one
   leaves SMs idle (wave efficiency = tiles / (waves x SMs)). The relative time is the planner's score,
   waves x BM x BN / tile efficiency (planner.py step 3): only ratios between candidates mean anything.

Not modelled (measured instead): the pipeline depth's effect on latency hiding, the raster group's on L2
hits, and the one-vs-two consumer partitions choice; they change neither resources nor waves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warploom.device import DeviceInfo
from warploom.planner import FUSED_WIDE_BLOCKS, Plan, plan_epilogue_bytes, stage_bytes, tail_score
from warploom.planning.plan import expect_plan
from warploom.planning.sm90.tiles import tile_efficiency
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

# Addresses, loop counters, barrier phases and the row-scale fragment of a consumer thread (an estimate: the
# smallest value that keeps every planner default under budget and every measured spill over it).
_FIXED_REGS = 40
# Rows of the tile each consumer warpgroup owns, and the threads sharing its accumulator.
_WG_ROWS, _WG_THREADS = 64, 128
# A fused epilogue works on column blocks of this width (warploom.passes.epilogue).
_FUSED_BLOCK = 128
# Shared memory the planner keeps back for mbarriers and alignment padding (planner.max_stages).
_SMEM_RESERVE = 1024


@dataclass(frozen=True)
class Estimate:
    """A schedule's estimated cost.

    Attributes:
        smem_bytes: rings + epilogue staging + reserve; smem_limit: the device's per-block limit.
        regs: estimated registers per consumer thread; reg_budget: its setmaxnreg budget (plan.consumer_regs).
        sm_regs: registers the CTA's budgets claim on the SM (warpgroup-padded); sm_regs_limit: the SM's.
        tiles: output tiles; waves: ceil(tiles / SMs); wave_efficiency: tiles / (waves x SMs), 1.0 when the
            last wave keeps every SM busy.
        time: relative time, waves x BM x BN / tile efficiency; comparable between plans of one spec only.
        epilogue_copies: consumer partitions that each unroll a wide fused epilogue (planner rule 9's 8 blocks) as
            code of their own; more than one thrashes the instruction cache (233 against 132 µs at 4096^3 on the
            H100, Nsight's no-instruction stalls 6.4 per issue against 0.7: docs/benchmarks.md, session 15).
    """

    smem_bytes: int
    smem_limit: int
    regs: int
    reg_budget: int
    sm_regs: int
    sm_regs_limit: int
    tiles: int
    waves: int
    wave_efficiency: float
    time: float
    epilogue_copies: int = 1

    @property
    def fits(self) -> bool:
        return self.why_not() is None

    def why_not(self) -> str | None:
        """Why the schedule would not run well (over a resource), or None when it fits."""
        if self.smem_bytes > self.smem_limit:
            return f"shared memory {self.smem_bytes} B > {self.smem_limit} B"
        if self.regs > self.reg_budget:
            return f"~{self.regs} registers per consumer thread > budget {self.reg_budget} (would spill)"
        if self.sm_regs > self.sm_regs_limit:
            return f"register budgets claim {self.sm_regs} > {self.sm_regs_limit} per SM"
        if self.epilogue_copies > 1:
            return (f"instruction cache: {self.epilogue_copies} consumer partitions each unroll the wide fused "
                    "epilogue (measured 1.75x slower than one)")
        return None


def consumer_registers(spec: GemmSpec, plan: Plan) -> int:
    """Estimated registers per consumer thread (module docstring, item 2)."""
    rows = plan.bm if plan.pingpong else _WG_ROWS  # the rows of each tile one warpgroup accumulates
    acc = rows * plan.tile_n // _WG_THREADS  # (rows, BN) fp32 over 128 threads (a fitted tile's: its tile_n columns)
    promoted = spec.accumulation is Accumulation.PROMOTED
    mainloop = rows * (plan.bn // plan.partial_blocks) // _WG_THREADS if promoted else 0
    if spec.epilogue is not None:
        # The columns one apply_epilogue computes. A 256-wide cooperative tile in fewer than rule 9's blocks spilled
        # (4 blocks: 628-872 bytes; 2: 2.4 KB): counted as 128-column blocks, over budget.
        block = plan.bn // plan.epilogue_subtiles
        if plan.bn == 256 and not plan.pingpong and plan.epilogue_subtiles < FUSED_WIDE_BLOCKS:
            block = _FUSED_BLOCK
        block = min(block, _FUSED_BLOCK)
        epilogue = 2 * rows * block // _WG_THREADS  # two live (rows, block) temporaries
    else:
        block = plan.bn // plan.partial_blocks if promoted else plan.tile_n
        vectors = int(spec.scale is ScaleRecipe.ROWWISE) + int(spec.bias_dtype is not None)
        epilogue = vectors * block // 4  # a (block,) vector in the wgmma layout: 2 of every 8 columns per thread
    return acc + max(mainloop, epilogue) + _FIXED_REGS


def estimate(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Estimate:
    """The cost model's view of `plan` for `spec` on `device`."""
    plan = expect_plan(plan, "pass plan_schedule(spec, device), or one of warploom.tune.candidates(spec, device)")
    ring = plan.stages * stage_bytes(spec, plan.bm, plan.tile_n, plan.bk)  # (a fitted tile keeps tile_n rows of B)
    smem = ring + plan_epilogue_bytes(spec, plan)
    # setmaxnreg works per warpgroup: a 1-warp producer still holds a warpgroup's registers (ir/verify.py).
    padded = -(-plan.producer_warps // 4) * 4
    sm_regs = 32 * (padded * plan.producer_regs + plan.consumer_warps * plan.consumer_regs)
    # Split-K: tiles x k-ranges work units, each 1/split_k of a tile's work (the planner's score, rule 14).
    tiles = plan.units(spec.m, spec.n)
    waves = math.ceil(tiles / device.sm_count)
    # (the planner's per-FLOP efficiency of the tile shape for this spec, so that the two never disagree)
    eff = tile_efficiency(spec, plan.bm, plan.bn) * plan.split_k
    area = plan.bm * plan.tile_n / eff
    time, fill = waves * area, tiles / (waves * device.sm_count)
    if plan.tail_split > 1:  # rule 15: whole waves of the plan's grid, then the rest as split-K units (as launched)
        time = tail_score(tiles, plan.grid, plan.tail_split, area, math.ceil(spec.k / plan.bk))
        whole, tail = divmod(tiles, plan.grid)
        fill = tiles / ((whole + math.ceil(tail * plan.tail_split / plan.grid) / plan.tail_split) * plan.grid)
    return Estimate(
        smem_bytes=smem + _SMEM_RESERVE, smem_limit=device.smem_per_block,
        regs=consumer_registers(spec, plan), reg_budget=plan.consumer_regs,
        sm_regs=sm_regs, sm_regs_limit=device.regs_per_sm,
        tiles=tiles, waves=waves, wave_efficiency=fill, time=time,
        epilogue_copies=plan.consumer_partitions if spec.epilogue is not None and plan.bn == 256 and
        plan.epilogue_subtiles >= FUSED_WIDE_BLOCKS and not plan.pingpong else 1,
    )
