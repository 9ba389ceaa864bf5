"""Planner rule 29: a fused rowwise quantization whose rows span tiles along N runs in two passes.

Rule 27 keeps a row in one tile (N <= 256). Wider rows, and rows of 128 < N <= 256 whose 256-wide tile rule 27
cannot run (promoted fp8, per-column or dense operands: `sm90.fused.wide_row_problem`; they take 128-wide tiles here),
need the amax of every tile along N before any value is divided, so the plan says where it is reduced
(docs/decisions/rule-29-rowwise-amax-pass.md):

- pass 1, the GEMM on ordinary fused tiles (`amax_pass_bn`: the tile rules 1-9 choose for the first pass's epilogue,
  128x128 or rule 9's 128x256; 128 wide for promoted fp8 and for graphs with operands, which spill at 256 wide):
  each block of a tile computes y (the value quantized), folds its row amax into the tile's (ir.FoldAmax) and
  stores y, fp32, to an (M, N) workspace by TMA; after its last block the tile adds its rows' amax to an (M,) fp32
  workspace by an atomic max (ir.AtomicAmax);
- pass 2, the cast kernel (one program a row): s = amax / fp8_max (1 where 0), q = the saturating cast of y / s.

A grouped GEMM (M-grouped or masked) takes it at every rowwise N > 128 (rule 27's 256-wide tile is dense-only): rule
22 plans its first pass, whose atomic max stops at each group's end row, and its cast kernel casts the rows of some
group only (docs/decisions/rule-29-rowwise-amax-pass.md, "Grouped GEMMs").

Only graphs that store exactly the pair, ``return warploom.quantize(y, recipe="rowwise")``, take it
(`EpilogueGraph.quantized_pair`): any other output would be a third thing for pass 1 to store. Whole tiles only, as
rules 26 and 27 (`warploom.planning.sm90.fused.quantized_problems` refuses the rest by name).
"""

from __future__ import annotations

from dataclasses import replace

from warploom.spec import Accumulation, GemmSpec

AMAX_PASS_NARROW_BN = 128  # rule 29's tile where a 256-wide one spills (below), or promotes into two accumulators
AMAX_PASS_BNS = (128, 256)  # the widths a first pass may take


def amax_pass_bn(spec: GemmSpec) -> int | None:
    """Rule 29's tile width: None (the target rule's own choice for the first pass: rules 1-9 score its tiles as any
    fused epilogue's, 128x256 for large problems), or 128 where 256 does not run well:

    - promoted fp8: a 256-wide tile promotes into two accumulators, and a tile's fold walks one;
    - a graph reading any operand (scaled_mm's scales and bias among them): at 128x256 the block's operand values,
      y and its fold do not fit beside the accumulator's 128 of the consumer's 168 registers. ptxas spilled 16-184
      bytes under Triton 3.6 (silu(acc) * col_s; scaled_mm's rowwise scales and bias with a SiLU; whichever order
      the fold, the store and an opaque copy took) and 36 under 3.9 for tensorwise fp8 scalars with a GELU, where
      128x128 spills nothing. acc alone (any elementwise function of it) spills nothing at 256 wide."""
    assert spec.epilogue is not None
    if spec.accumulation is Accumulation.PROMOTED or spec.epilogue.operands:
        return AMAX_PASS_NARROW_BN
    return None


def amax_pass_spec(spec: GemmSpec) -> GemmSpec:
    """The first pass's problem: `spec` with its graph's `amax_pass` (y, fp32, its one output), which the target's
    rule plans (its staging buffers are fp32) and `build_sequential` builds."""
    assert spec.epilogue is not None
    return replace(spec, epilogue=spec.epilogue.amax_pass())


def amax_pass_outputs(spec: GemmSpec) -> str:
    """What rule 29's two passes store (the quantize pair alone) against what `spec`'s graph stores."""
    g = spec.epilogue
    assert g is not None
    got = ", ".join(f"{'groups' if o.layout.value == 'groups' else (o.dtype.value if o.dtype else 'out_dtype')}"
                    for o in g.outputs)
    return f"expected the outputs (q fp8, s), as `return warploom.quantize(y, recipe='rowwise')` gives, got ({got})"


def amax_pass_problem(spec: GemmSpec) -> str | None:
    """Why a rowwise quantization wider than a tile cannot take rule 29's two passes, if it cannot."""
    g = spec.epilogue
    assert g is not None
    if g.quantized_pair() is not None:
        return None
    wide = f"a grouped GEMM's N={spec.n} > 128" if spec.grouped else f"N={spec.n} > 256"
    return (f"{wide} takes rule 29's two passes (an atomic row amax across the tiles along N, then a cast "
            f"kernel), which store the quantize pair only: {amax_pass_outputs(spec)}")
