"""gfx1250's planner rule (rule 20): one software-pipelined partition of TDM copies and wmma, 128x128 tiles, and the
warps that issue each copy (`TdmWarps`). `plan` is the target's (its declaration's `plan`,
`warploom.targets.gfx1250`)."""

from __future__ import annotations

import math

from warploom.device import DeviceInfo
from warploom.errors import UnsupportedError
from warploom.ir.nodes import LDS_ROW_PAD
from warploom.planning.common import k_block, native_problems
from warploom.planning.options import PlanOptions, TdmWarps
from warploom.planning.plan import Plan
from warploom.spec import BLayout, GemmSpec
from warploom.target import Target


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """Rule 20; any sm_90a schedule option is refused by name (the gfx1250 schedule has none of them)."""
    options.refuse_sm90_options(Target.GFX1250, "rule 20")
    return plan_gfx1250(spec, device, bm=options.bm, bn=options.bn, stages=options.stages, group_m=options.group_m,
                        tdm_warps=options.tdm_warps)


# Rule 20 (gfx1250): 4 warps, each a 64x64 quarter of a 128x128 tile; 3 stages (two blocks' copies in flight).
_GFX1250_TILE = 128
_GFX1250_WARPS = 4
_GFX1250_STAGES = 3


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
    choice = TdmWarps.EVERY if tdm_warps is None else tdm_warps
    if choice is not TdmWarps.EVERY:
        gluon_api.current().require_tdm_warp_hint(f"tdm_warps=TdmWarps.{choice.name}")
    if choice is TdmWarps.FUSED:
        gluon_api.current().require_tdm_fused(f"tdm_warps=TdmWarps.{choice.name}")

    problems = native_problems(spec)
    if spec.b_layout is BLayout.N_MAJOR and spec.k * spec.n >= 2**31:
        # (each tile's descriptors start at its rows of A and B, or columns of an N-major B: Triton 3.6 offsets a copy
        # from there in 32 bits, and an N-major B's copies still step over all of its K rows)
        problems.append(f"an N-major B of K x N = {spec.k * spec.n} elements (2^31 or more: pass it K-major)")
    if problems:
        # (MX and NVFP4 run on sm_100a only; every other recipe on sm_90a)
        elsewhere = ("plan for an sm_100a device (device=B200)" if spec.scale.microscaled else
                     "plan it for an sm_90a device (device=H100_SXM)")
        raise UnsupportedError(f"gfx1250 (planner rule 20) plans native accumulation with tensorwise, rowwise or no "
                               f"scales so far; {spec.short()} has {'; '.join(problems)}. Fix: {elsewhere}")
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
