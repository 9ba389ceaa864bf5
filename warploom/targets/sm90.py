"""sm_90a (Hopper): a TMA producer warp, wgmma consumer warpgroups (cooperative or ping-pong), the epilogue through
shared memory and TMA stores; every planner rule but 19 and 20. The one target warploom runs (on the H100)."""

from __future__ import annotations

import functools

from warploom.backends.gluon_sm90 import GluonSource
from warploom.device import H100_SXM
from warploom.ir import nodes as ir
from warploom.passes import pipeline_sm90
from warploom.planning.sm90 import rule as planning
from warploom.runtime.cross import cross_compile_cuda
from warploom.target import Target
from warploom.targets.declaration import Declaration


def emit(m: ir.Module) -> GluonSource:
    """Grouped GEMMs (rule 22) have an emitter of their own: a tile-to-group map on the device, masked stores at
    group edges."""
    if m.tiling.grouped:
        from warploom.backends.gluon_grouped import lower_grouped

        return lower_grouped(m)
    from warploom.backends.gluon_sm90 import lower

    return lower(m)


# Triton's GPUTarget: CUDA compute capability 90, 32-thread warps.
GPU = ("cuda", 90, 32)

DECLARATION = Declaration(
    target=Target.SM90A,
    device=H100_SXM,
    plan=planning.plan,
    pipeline=pipeline_sm90,
    emit=emit,
    compile=functools.partial(cross_compile_cuda, target=Target.SM90A, arch=GPU[1]),
    gpu=GPU,
    ops=frozenset({ir.Wait, ir.Arrive, ir.ArriveExpectTx, ir.TmaLoad, ir.CopyScales, ir.Mma, ir.MmaWait, ir.Promote,
                   ir.ZeroAcc, ir.Epilogue, ir.StoreSmem, ir.FenceAsync, ir.TmaStore, ir.StoreWait, ir.Advance,
                   ir.SkipTiles, ir.LoadOperand, ir.PrefetchOperand, ir.ApplyEpilogue, ir.Fixup,
                   ir.FoldAmax, ir.StoreScales, ir.AtomicAmax, ir.GridDependencyWait}),
    checks=(),
    counts=(("HGMMA", "16-bit wgmma instructions"), ("QGMMA", "fp8 wgmma instructions")),
    runs=True,
)
