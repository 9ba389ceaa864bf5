"""A plan against the problem and the GPU it is built for: what `Plan.__post_init__` cannot see alone.

`warploom.targets.compile_schedule` runs `check_plan` before the first pass and `check_fits` on the finished module,
before the verifier: a plan written or edited by hand (``replace(plan_schedule(spec, device), bk=100)``, a forced
depth, a tuning-cache entry) is refused as a `PlanError` naming the field, what it must be and the fix. Without
them it failed in a pass (a bare ValueError), in the verifier (a `VerificationError`, which reads as warploom's
bug), in the Gluon emitter or in Triton's compiler. The planner's own plans pass both: the verifier stays the
check of warploom's passes.

Allowed: ``replace(plan, stages=3)`` where three stages fit, ``bk=32`` for bf16 (two wgmma k-steps).
Refused: ``bk=8`` for bf16 (one wgmma takes 16 of K), ``consumer_warps=4`` at bm=128 on sm_90a (a warpgroup per 64
rows), a plan for another target's GPU, ``grid`` past the SMs, stages whose rings overflow shared memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from warploom.device import TMEM_COLUMNS, DeviceInfo
from warploom.errors import plan_field
from warploom.ir import nodes as ir
from warploom.planning.plan import Plan
from warploom.spec import GemmSpec
from warploom.target import Target

# An MMA takes 32 bytes of K a step on every target (wgmma: 16 bf16 or 32 fp8 elements; tcgen05 likewise, 64 fp4).
_MMA_K_BYTES = 32
_FIX = "or leave it to plan_schedule(spec, device)"


def check_plan(spec: GemmSpec, plan: Plan, device: DeviceInfo) -> None:
    """Refuse `plan`'s fields that `spec` on `device` cannot run, before any pass: its target, grid, k-block, and
    its target's tile and warp rules."""
    if plan.target is not device.target:
        raise plan_field("target", str(plan.target), f"{device.target}, the target of {device.name} ({device.arch})",
                         f"plan for this device (plan_schedule(spec, device)), or build for {plan.target.with_article} "
                         "GPU's DeviceInfo")
    if plan.grid > device.sm_count:  # (persistent CTAs, one an SM: stream-K's and clusters' CTAs wait on each other)
        raise plan_field("grid", plan.grid, f"at most {device.sm_count}, the SMs of {device.name}",
                         f"grid={device.sm_count}, {_FIX}")
    bits = min(spec.a_dtype.bits, spec.b_dtype.bits)
    least = _MMA_K_BYTES * 8 // bits
    if plan.bk < least:
        raise plan_field("bk", plan.bk, f"at least {least}: one MMA step's K of {spec.a_dtype.value} x "
                         f"{spec.b_dtype.value} ({_MMA_K_BYTES} bytes)", f"bk={max(least, 64)}, {_FIX}")
    k_blocks = spec.scale.k_blocks
    if k_blocks and plan.bk not in k_blocks:
        want = " or ".join(map(str, k_blocks))
        raise plan_field("bk", plan.bk, f"{want}: {spec.scale.value} scales change every {k_blocks[-1]} of K, "
                         "and each k-block's partial is promoted with its own", f"bk={k_blocks[-1]}")
    if plan.scale_partition and not spec.scale.is_blockwise:
        raise plan_field("scale_partition", True, f"False: {spec.short()} has no blockwise scales to copy",
                         "scale_partition=False")
    _check_i32(spec, plan)
    if plan.target is Target.SM90A:
        _check_sm90(plan)
    elif plan.target is Target.SM100A:
        if plan.bm != 128 or not 16 <= plan.bn <= 256:
            field, value = ("bm", plan.bm) if plan.bm != 128 else ("bn", plan.bn)
            raise plan_field(field, value, "bm=128 (one CTA's tcgen05 MMA, a 128-lane accumulator) and bn in "
                             "16 ... 256", f"bm=128 and bn=128, {_FIX}")
    elif plan.stages < 2:
        raise plan_field("stages", plan.stages, "at least 2: gfx1250's software pipeline copies one slot while it "
                         "reads another", f"stages=2, {_FIX}")


# The kernels' 32-bit integers (their sizes are i32 arguments, `spec.oversized`; TMA coordinates are signed 32-bit).
I32_MAX = 2**31 - 1


def stream_k_iterations(grid: int, tiles: int, k_tiles: int, sk_waves: int = 0) -> int:
    """The largest product stream-K's helpers form in i32 (backends/gluon_raster.py's ``sk_range`` and ``sk_owner``:
    (pid + 1) times the shared iterations, sk_tiles * k_tiles, with sk_tiles at most the grid's waves it shares)."""
    return grid * min(tiles, grid * (1 + sk_waves)) * k_tiles


def _check_i32(spec: GemmSpec, plan: Plan) -> None:
    """Refuse a plan whose kernel would compute an offset past 2^31 in 32 bits from its counts (the sizes alone pass
    `spec.oversized`): stream-K's iteration products, and split-K's workspace row coordinate split * MP + m."""
    m, n = (spec.n, spec.m) if plan.swap_ab else (spec.m, spec.n)
    k_tiles = -(-spec.k // plan.bk)
    if plan.stream_k and stream_k_iterations(plan.grid, plan.units(spec.m, spec.n), k_tiles,
                                             plan.sk_waves) > I32_MAX:
        raise plan_field("stream_k", plan.stream_k, f"no stream-K at K = {spec.k} on {plan.grid} CTAs: its helpers "
                         "count (tile, k-block) iterations times the grid in 32 bits, which this passes",
                         f"stream_k=0 (whole tiles, or split_k), {_FIX}")
    if plan.split_k > 1 and plan.split_k * -(-m // plan.bm) * plan.bm > I32_MAX:
        raise plan_field("split_k", plan.split_k, f"split_k * M (rounded up to BM) at most {I32_MAX}: each k-range's "
                         "slab of the workspace starts at row split * MP, a 32-bit TMA coordinate",
                         f"split_k=1, {_FIX}")


def _check_sm90(plan: Plan) -> None:
    """sm_90a's wgmma runs on a warpgroup of 4 warps over 64 rows and at most 256 columns; the Gluon epilogue splits
    a tile's columns in halves (backends/gluon_sm90.py `_column_block`)."""
    if plan.bm % 64 or plan.bm > 256:
        raise plan_field("bm", plan.bm, "64, 128, 192 or 256: a warpgroup's wgmma covers 64 rows, and a CTA holds at "
                         "most four consumer warpgroups", f"bm=128, {_FIX}")
    if not 8 <= plan.bn <= 256:
        raise plan_field("bn", plan.bn, "8 ... 256: a wgmma's N", f"bn=256, {_FIX}")
    warps = 8 if plan.pingpong else 4 * (plan.bm // 64)
    if plan.consumer_warps != warps:
        how = "two warpgroups taking whole tiles in turn (pingpong)" if plan.pingpong else \
            f"a warpgroup per 64 rows of a {plan.bm}-row tile"
        raise plan_field("consumer_warps", plan.consumer_warps, f"{warps}: {how}", f"consumer_warps={warps}, {_FIX}")
    groups = warps // 4
    if plan.consumer_partitions not in ((groups,) if plan.pingpong else (1, groups)):
        every = "" if plan.pingpong else ", or 1 holding them all"
        raise plan_field("consumer_partitions", plan.consumer_partitions, f"{groups}: one partition a warpgroup{every}",
                         f"consumer_partitions={groups}, {_FIX}")
    s = plan.epilogue_subtiles
    if s & (s - 1) or s > 16 or plan.bn // s < 8:
        raise plan_field("epilogue_subtiles", s, f"1, 2, 4, 8 or 16 column blocks of at least 8 of the tile's "
                         f"{plan.bn} columns", f"epilogue_subtiles={min(2, plan.bn // 8)}, {_FIX}")


def check_fits(plan: Plan, m: ir.Module, device: DeviceInfo, deepest: Callable[[], int]) -> None:
    """Refuse `plan` when its finished module `m` needs more of `device` than a CTA may have: shared memory (the
    field is `stages`; `deepest()` finds the most that fit, rebuilding the module at fewer), registers under the
    setmaxnreg budgets, sm_100a's tensor memory. A split-K tail's plan (`Plan.tail`) names `tail_stages`."""
    if m.shared_bytes > device.smem_per_block:
        # (a tail plan is the only one with both: `Plan.tail` gives its split_k the tail's k-ranges)
        field = "tail_stages" if plan.tail_split > 1 and plan.split_k > 1 else "stages"
        most = deepest()
        fix = f"{field}={most}, {_FIX}" if most else "a smaller tile (bm, bn or bk), or leave the plan to plan_schedule"
        depth = f"at most {most} stages" if most else "stages (none fit)"
        raise plan_field(field, plan.stages, f"{depth} of {plan.bm}x{plan.bn}x{plan.bk}, whose rings and the "
                         f"epilogue's buffers must fit the {device.smem_per_block} bytes of shared memory a block of "
                         f"{device.name} may take", fix, got=f"{plan.stages}, which need {m.shared_bytes} bytes")
    if not m.gfx1250 and m.register_need > device.regs_per_sm:
        budget = next((c for c in range(plan.consumer_regs - 8, ir.MIN_REGS - 1, -8)
                       if _with_consumer_regs(m, c).register_need <= device.regs_per_sm), None)
        raise plan_field("consumer_regs", plan.consumer_regs, f"budgets whose warps' registers fit the SM's "
                         f"{device.regs_per_sm}", f"consumer_regs={budget}, {_FIX}" if budget else
                         f"fewer warps, {_FIX}", got=f"{m.register_need} registers")
    if m.blackwell and m.tmem_columns > TMEM_COLUMNS:  # (a buffer is a BM x BN fp32 tile: BN columns)
        most = plan.acc_buffers - -(-(m.tmem_columns - TMEM_COLUMNS) // plan.bn)
        raise plan_field("acc_buffers", plan.acc_buffers, f"tensor-memory buffers within the SM's {TMEM_COLUMNS} "
                         f"columns ({plan.bn} each, beside any scales)",
                         f"acc_buffers={most}, {_FIX}" if most >= 1 else f"a narrower tile, {_FIX}",
                         got=f"{m.tmem_columns} columns")


def _with_consumer_regs(m: ir.Module, regs: int) -> ir.Module:
    """`m` with `regs` for the partitions `Plan.consumer_regs` budgets (passes/registers.py AssignRegisters)."""
    roles = (ir.Role.CONSUMER, ir.Role.EPILOGUE)
    return replace(m, partitions=tuple(replace(p, regs=regs) if p.role in roles else p for p in m.partitions))
