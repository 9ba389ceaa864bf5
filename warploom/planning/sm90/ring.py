"""Rule 34 (docs/decisions/rule-34-ring-depth.md): a ring no deeper than the k-loop it feeds. Where each CTA runs one
work unit, a stage beyond the unit's k-blocks is never filled, yet each still costs the CTA's start its barriers
and its shared memory: on the H200 (bf16, CUDA graphs, session 36) every stage past the k-blocks cost 30-40 ns, and
the depth equal to the k-blocks ran fastest or within noise of it at six shapes of 2-6 k-blocks (43x216x104 on
64x64: 12 stages 0.78x torch, 2 stages 0.89x; 253x136x104 on 64x16: 6 stages 0.88x, 2 stages 0.93x)."""

from __future__ import annotations

import math
from dataclasses import replace

from warploom.planning.common import k_blocks
from warploom.planning.plan import Plan
from warploom.spec import Accumulation, GemmSpec

# A ring of fewer than two stages cannot overlap a copy with an MMA (and the verifier wants two).
MIN_STAGES = 2


def ring_to_k(spec: GemmSpec, plan: Plan) -> Plan:
    """`plan` with its ring cut to its units' k-blocks (at least MIN_STAGES) where each CTA runs one work unit (whole
    tiles or split-K ranges; native accumulation without a bias or fused epilogue, as measured; one CTA a tile,
    cooperative, no stream-K or split-K tail, no scale partition). Elsewhere a deeper ring holds the next unit's
    k-blocks (or feeds an epilogue's operand slots, unmeasured), and the plan is returned as it is."""
    if (plan.stream_k or plan.tail_split != 1 or plan.cluster != 1 or plan.pingpong or plan.scale_partition
            or spec.accumulation is not Accumulation.NATIVE or spec.grouped or spec.epilogue is not None
            or spec.bias_dtype is not None or plan.units(spec.m, spec.n) > plan.grid):
        return plan
    depth = max(MIN_STAGES, math.ceil(k_blocks(spec) / plan.split_k))
    return replace(plan, stages=depth) if depth < plan.stages else plan
