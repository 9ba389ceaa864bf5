"""Planner rule 29: a fused rowwise quantization whose rows span tiles along N (N > 256) runs in two passes.

Rule 27 keeps a row in one tile (N <= 256). Wider rows need the amax of every tile along N before any value is
divided, so the plan says where it is reduced (docs/decisions/rule-29-rowwise-amax-pass.md):

- pass 1, the GEMM on ordinary fused tiles (`amax_pass_bn`: rule 9's 128x256, or 128 wide for promoted fp8, whose
  warpgroups promote into one 128-wide accumulator each): each block of a tile computes y (the value quantized),
  folds its row amax into the tile's (ir.FoldAmax) and stores y, fp32, to an (M, N) workspace by TMA; after its last
  block the tile adds its rows' amax to an (M,) fp32 workspace by an atomic max (ir.AtomicAmax);
- pass 2, the cast kernel (one program a row): s = amax / fp8_max (1 where 0), q = the saturating cast of y / s.

Only graphs that store exactly the pair, ``return warploom.quantize(y, recipe="rowwise")``, take it
(`EpilogueGraph.quantized_pair`): any other output would be a third thing for pass 1 to store. Whole tiles only, as
rules 26 and 27 (`warploom.planning.sm90.quantized_problems` refuses the rest by name).
"""

from __future__ import annotations

from dataclasses import replace

from warploom.spec import Accumulation, GemmSpec

AMAX_PASS_BN = 256  # rule 29's tile width at fast accumulation: rule 9's fused 128x256 (8 blocks of 32 columns)
AMAX_PASS_PROMOTED_BN = 128  # promoted fp8: one 128-wide accumulator a consumer warpgroup (rule 26's tile)


def amax_pass_bn(spec: GemmSpec) -> int:
    """Rule 29's tile width: 256, or 128 for promoted fp8 (a 256-wide tile would promote into two accumulators,
    which `LowerEpilogue` does not walk a row's fold across)."""
    return AMAX_PASS_PROMOTED_BN if spec.accumulation is Accumulation.PROMOTED else AMAX_PASS_BN


def amax_pass_spec(spec: GemmSpec) -> GemmSpec:
    """The first pass's problem: `spec` with its graph's `amax_pass` (y, fp32, its one output), which the target's
    rule plans (its staging buffers are fp32) and `build_sequential` builds."""
    assert spec.epilogue is not None
    return replace(spec, epilogue=spec.epilogue.amax_pass())


def amax_pass_problem(spec: GemmSpec) -> str | None:
    """Why a rowwise quantization wider than a tile cannot take rule 29's two passes, if it cannot."""
    g = spec.epilogue
    assert g is not None
    if g.quantized_pair() is not None:
        return None
    got = ", ".join(f"{'groups' if o.layout.value == 'groups' else (o.dtype.value if o.dtype else 'out_dtype')}"
                    for o in g.outputs)
    return (f"N={spec.n} > 256 takes rule 29's two passes (an atomic row amax across the tiles along N, then a cast "
            f"kernel), which store the quantize pair only: expected the outputs (q fp8, s), as `return "
            f"warploom.quantize(y, recipe='rowwise')` gives, got ({got})")
