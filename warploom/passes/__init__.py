"""The pass pipeline: from the sequential program to a warp-specialized persistent kernel.

Each pass is a frozen dataclass (its fields are its options) called as ``Module -> Module``. Each target's list
below (`pipeline_sm90`, `pipeline_sm100`, `pipeline_gfx1250`, named by its declaration in `warploom.targets`) is the
only place its order is written; each line says why the pass stands where it does.
The structural verifier runs after every pass; the complete verifier after the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.ir.warps import WarpMask
from warploom.passes.blackwell import PlaceScaleCopies, SplitMma
from warploom.passes.blackwell_promote import SplitMmaPromoted
from warploom.passes.blackwell_scales import PlaceScalePartition
from warploom.passes.build import build_sequential
from warploom.passes.cluster import ShareA, ShareB
from warploom.passes.epilogue import HoistOperands, LowerEpilogue, PrefetchOperands
from warploom.passes.gfx1250 import PipelineTdm
from warploom.passes.launch import DependentLaunch
from warploom.passes.partition import SplitProducer
from warploom.passes.persistent import FlattenProducer
from warploom.passes.pipeline_mma import PipelineMma
from warploom.passes.registers import AssignRegisters
from warploom.passes.rings import PlanRings
from warploom.passes.scales import SplitScales
from warploom.passes.split_consumers import SplitConsumers
from warploom.planning.plan import Plan
from warploom.spec import GemmSpec
from warploom.target import Target

Pass = Callable[[ir.Module], ir.Module]


def pipeline_sm90(plan: Plan) -> list[Pass]:
    """sm_90a: a TMA producer warp, wgmma consumer warpgroups, the epilogue through shared memory and TMA."""
    return [
        # First: every later pass speaks of producer and consumer, and sync needs two parties.
        SplitProducer(producer_warps=plan.producer_warps),
        # Blockwise scales with a partition of their own (seed 000): it takes the producer's scale copies, so
        # after SplitProducer; before PlanRings, which gives its ring barriers of its own.
        SplitScales(enabled=plan.scale_partition, warps=plan.scale_warps),
        # Needs the partitions to know who waits on what; deepens rings before MMA pipelining, which
        # relies on slots c-1 still being unreleased (depth >= 2 for overlap).
        PlanRings(stages=plan.stages, scale_stages=plan.scale_stages),
        # Needs the empty-barrier arrivals placed by PlanRings, which it defers by one k-block.
        PipelineMma(),
        # After the consumer's final k-loop exists, so every warpgroup gets the same pipelined program;
        # before epilogue lowering, which gives each storing partition its own staging buffer.
        SplitConsumers(partitions=plan.consumer_partitions, pingpong=plan.pingpong,
                       by_columns=plan.cluster > 1 and not plan.cluster_n and not plan.pingpong and not plan.n_blocks),
        # (A fitted tile's consumers keep the row split in a cluster: a column split would give one warpgroup 128 of
        # 144 columns; its CTAs interleave their rows instead, ir.Tiling.interleaved.)
        # A cluster's B multicast (rule 24; or A's, 1x2): after SplitConsumers, whose arrivals on the empty barrier
        # the cluster's barrier repeats (with the same count: ping-pong's one release a slot use, the cooperative
        # split's one per warpgroup), and after PlanRings made the waits and arrivals it pairs.
        ShareA(cluster=plan.cluster) if plan.cluster_n else ShareB(cluster=plan.cluster),
        # After all producer ops exist: flattening must see the final loop body.
        FlattenProducer(),
        # Independent of the mainloop; last of the body rewrites so the staging buffer is declared once.
        LowerEpilogue(subtiles=plan.epilogue_subtiles, scalar_columns=plan.scalar_columns,
                      block_steps=plan.block_epilogue, staging_slots=plan.staging_slots,
                      operand_slots=plan.operand_slots),
        # After epilogue lowering made the operand loads, which it moves ahead of the final wgmma wait (or each
        # block's one block early).
        HoistOperands(enabled=plan.hoist_rows, ahead=plan.load_ahead),
        # After epilogue lowering made the dense operands' prefetches; moves them to the tile's start (and
        # each later block's behind the previous block's load), which only needs the final tile body.
        PrefetchOperands(enabled=plan.prefetch_operands),
        # Budgets depend on the final set of partitions.
        AssignRegisters(producer=plan.producer_regs, consumer=plan.consumer_regs),
        # Last: a wait ahead of each partition's first op, which no other pass reads or moves (PDL).
        DependentLaunch(),
    ]


def pipeline_sm100(plan: Plan) -> list[Pass]:
    """sm_100a (planner rule 19): tcgen05 MMAs into tensor memory, issued by a warp of their own."""
    return [
        # First, as on sm_90a: the producer and the consumer.
        SplitProducer(producer_warps=plan.producer_warps),
        # MX (seed 001): tcgen05.cp of each stage's scales into tensor memory before its MMA. Before PlanRings, so
        # the copies count as readers of the stage (its wait precedes them); it needs nothing PlanRings makes.
        PlaceScaleCopies(acc_columns=plan.acc_buffers * plan.bn),
        # The ready/empty handshake of the A/B stages; the consumer's wait and release mark what SplitMma moves.
        PlanRings(stages=plan.stages),
        # The consumer becomes the MMA warp and the epilogue partition, around tensor-memory accumulators (fp32
        # blockwise: partials, which the epilogue partition promotes into registers); the MMA's completion
        # replaces the consumer's release of each stage (blockwise: shares it with the promotion's).
        SplitMmaPromoted(partials=plan.acc_buffers, epilogue_warps=plan.consumer_warps) if plan.promote_tmem else
        SplitMma(acc_buffers=plan.acc_buffers, subtiles=plan.epilogue_subtiles, scalar_columns=plan.scalar_columns),
        # After SplitMma made the epilogue partition's prefetches: the first block's dense operand copy moves to the
        # tile's start (it lands while the partition waits for the accumulator), later ones behind the store of the
        # block that last read the buffer. (HoistOperands has no mainloop to hide loads under here.)
        PrefetchOperands(enabled=plan.prefetch_operands),
        # Row-major MX / NVFP4 scales (seed 000): a scale partition tcgen05.st's each k-block's scales into one of two
        # tensor-memory buffers for the MMA warp, whose scaled MMA releases the buffer as it completes. After
        # SplitMma, which made the MMA warp it feeds; it owns its barriers, so PlanRings has nothing to add.
        PlaceScalePartition(enabled=plan.block_scaled and plan.scale_partition),
        # The producer's loop, flattened as on sm_90a.
        FlattenProducer(),
        # Last: the MMA warp and the producer issue only (one budget: they share a warpgroup), the epilogue
        # partition holds a column block of the accumulator and its math; sm_100a's scale partition (its own
        # warpgroup) keeps the budget PlaceScalePartition sized to its k-block's scales and their addresses.
        AssignRegisters(producer=plan.producer_regs, consumer=plan.consumer_regs),
        # Last, as on sm_90a: each partition waits for the previous grid before it touches memory (PDL).
        DependentLaunch(),
    ]


def pipeline_gfx1250(plan: Plan) -> list[Pass]:
    """gfx1250 (planner rule 20): no warp specialization, so no partitioning: the sequential program becomes one
    software-pipelined partition whose warps both copy and compute. Its epilogue stays in registers (store_tile is
    a masked store from them) and it sets no register budgets (setmaxnreg is NVIDIA's)."""
    return [
        # The only pass: rings deepen to `stages`, copies run ahead of the wmma in one program (passes/gfx1250.py).
        # (Seed 004: the warps that issue A's and B's copies, if the plan names them.)
        PipelineTdm(stages=plan.stages, warps=(WarpMask(plan.tdm_warps_a) if plan.tdm_warps_a else None,
                                               WarpMask(plan.tdm_warps_b) if plan.tdm_warps_b else None),
                    fused=plan.tdm_fused),
    ]


@dataclass(frozen=True)
class Trace:
    """The module after each stage (`Kernel.trace`), for inspection and the pass tests."""

    stages: tuple[tuple[str, ir.Module], ...]


def run_pipeline(spec: GemmSpec, plan: Plan, passes: Sequence[Pass]) -> tuple[ir.Module, Trace]:
    """build_sequential, then `passes` (the plan's target's, `warploom.targets`), each verified structurally; the
    caller (`warploom.targets.compile_schedule`) checks the finished module against the device."""
    if plan.swap_ab:  # rule 18: the module runs the transposed problem, and stores its tiles into C transposed
        spec = spec.swapped(tmem_scales=plan.target is Target.SM100A)
    m = verify.check(build_sequential(spec, plan), "build_sequential")
    stages = [("build_sequential", m)]
    for p in passes:
        m = verify.check(p(m), type(p).__name__)
        stages.append((type(p).__name__, m))
    return m, Trace(tuple(stages))
