"""gfx1250 (AMD, planner rule 20): one software-pipelined partition whose warps both copy (the Tensor Data Mover)
and compute (wmma); the epilogue stores from registers. Planned, simulated and cross-compiled; no gfx1250 is at hand
to run it."""

from __future__ import annotations

from warploom.backends.gluon_gfx1250 import lower_gfx1250
from warploom.device import GFX1250
from warploom.ir import nodes as ir
from warploom.ir import ops_gfx1250, verify
from warploom.passes import pipeline_gfx1250
from warploom.planning import gfx1250 as planning
from warploom.runtime.cross import cross_compile_gfx1250
from warploom.target import Target
from warploom.targets.declaration import Declaration

DECLARATION = Declaration(
    target=Target.GFX1250,
    device=GFX1250,
    plan=planning.plan,
    pipeline=pipeline_gfx1250,
    emit=lower_gfx1250,
    compile=cross_compile_gfx1250,
    gpu=("hip", "gfx1250", 32),
    ops=ops_gfx1250.OWN_OPS | {ir.Epilogue, ir.StoreTile, ir.Advance, ir.LoadOperand, ir.ApplyEpilogue},
    checks=(verify.check_gfx1250,),
    counts=(("v_wmma", "wmma instructions"), ("tensor_load_to_lds", "Tensor Data Mover copies"),
            ("s_wait_tensorcnt", "waits on TDM copies"), ("s_barrier", "workgroup barriers")),
    runs=False,
)
