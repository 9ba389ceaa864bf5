"""sm_100a (Blackwell, planner rule 19): tcgen05 MMAs into tensor-memory accumulators, issued by an MMA warp; MX and
NVFP4 scales copied into tensor memory (tcgen05.cp); fp32 blockwise scales promoted from tensor-memory partials.
Planned, simulated and cross-compiled; no Blackwell GPU is at hand to run it."""

from __future__ import annotations

import functools

from warploom.backends.gluon_sm100 import lower_sm100
from warploom.device import B200
from warploom.ir import nodes as ir
from warploom.ir import ops_sm100, verify
from warploom.passes import pipeline_sm100
from warploom.planning import sm100 as planning
from warploom.runtime.cross import cross_compile_cuda
from warploom.target import Target
from warploom.targets.declaration import Declaration

# Triton's GPUTarget: CUDA compute capability 100, 32-thread warps.
GPU = ("cuda", 100, 32)

DECLARATION = Declaration(
    target=Target.SM100A,
    device=B200,
    plan=planning.plan,
    pipeline=pipeline_sm100,
    emit=lower_sm100,
    compile=functools.partial(cross_compile_cuda, target=Target.SM100A, arch=GPU[1]),
    gpu=GPU,
    ops=ops_sm100.OWN_OPS | {ir.Wait, ir.Arrive, ir.ArriveExpectTx, ir.TmaLoad, ir.Epilogue, ir.StoreSmem,
                             ir.FenceAsync, ir.TmaStore, ir.StoreWait, ir.Advance, ir.LoadOperand,
                             ir.PrefetchOperand, ir.ApplyEpilogue,
                             # fp32 blockwise (passes/blackwell_promote.py): cp.async scale copies, the promotion of
                             # partials
                             ir.CopyScales, ir.ZeroAcc, ir.Promote,
                             # programmatic dependent launch (passes/launch.py), as on sm_90a
                             ir.GridDependencyWait},
    checks=(verify.check_sm100,),
    counts=(("UTCHMMA", "16-bit tcgen05 MMAs"), ("UTCQMMA", "fp8 tcgen05 MMAs"),
            ("UTCOMMA", "fp4 tcgen05 MMAs"), ("UTCCP", "tcgen05.cp scale copies"), ("LDTM", "tensor-memory loads")),
    runs=False,
)
