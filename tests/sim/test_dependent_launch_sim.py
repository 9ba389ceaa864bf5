"""Programmatic dependent launch (ir.Module.dependent_launch, passes/launch.py) in the simulator: every NVIDIA
schedule waits for the previous grid before its partitions touch global memory, runs clean and right, and a partition
that touches memory first is reported (EARLY_GLOBAL_ACCESS) by the random simulator and the explorer alike."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warploom import Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.device import H100_SXM
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import relative_error
from warploom.sim import FindingKind, explore, simulate
from warploom.sim.program import GLOBAL_OPS
from warploom.targets import DECLARED

K = FindingKind

# (spec, plan overrides): whole tiles, split-K (a reduce kernel after), stream-K (workspace flags), fp8 rowwise
CASES = {
    "bf16": (GemmSpec(200, 136, 200), {}),
    "bf16_split_k": (GemmSpec(130, 96, 640), {"bm": 64, "bn": 64, "split_k": 2}),
    "bf16_stream_k": (GemmSpec(300, 520, 384), {"bn": 128, "stream_k": 2}),
    "fp8_rowwise": (GemmSpec(136, 200, 256, DType.E4M3, DType.E4M3, scale=ScaleRecipe.ROWWISE,
                             accumulation=Accumulation.NATIVE), {}),
}


def _module(name: str) -> ir.Module:
    spec, kw = CASES[name]
    plan = plan_schedule(spec, H100_SXM, **kw)
    if plan.stream_k:  # (5 CTAs share the 15 tiles: pieces and fixups on every CTA simulated)
        plan = dataclasses.replace(plan, grid=5)
    return build(spec, H100_SXM, plan).module


def _inputs(spec: GemmSpec) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(spec.m + spec.n + spec.k)
    a, b = torch.randn(spec.m, spec.k), torch.randn(spec.k, spec.n)
    if spec.scale is ScaleRecipe.ROWWISE:
        return (a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), torch.rand(spec.m, 1) + 0.5,
                torch.rand(1, spec.n) + 0.5)
    return a.bfloat16(), b.bfloat16()


def _without_wait(module: ir.Module, role: ir.Role) -> ir.Module:
    """`module` with the grid-dependency wait dropped from its `role` partitions (the planted bug)."""
    parts = tuple(dataclasses.replace(p, body=p.body[1:]) if p.role is role else p for p in module.partitions)
    return dataclasses.replace(module, partitions=parts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_partition_waits_first_and_runs_right(name: str) -> None:
    """The pass puts the wait first in every partition of a dependently launched module, and the schedule still
    computes the product with no finding."""
    module = _module(name)
    assert module.dependent_launch
    assert all(isinstance(p.body[0], ir.GridDependencyWait) for p in module.partitions)
    spec = CASES[name][0]
    ins = _inputs(spec)
    res = simulate(module, *ins, seed=1)
    assert res.report.ok, res.report.summary()
    a, b = ins[0].float(), ins[1].float()
    ref = a @ b if len(ins) == 2 else (a @ b) * ins[2] * ins[3]
    assert relative_error(res.output.float(), ref) < 1e-4


@pytest.mark.parametrize("role", [ir.Role.PRODUCER, ir.Role.CONSUMER])
def test_a_partition_touching_memory_before_its_wait_is_reported(role: ir.Role) -> None:
    """The producer's TMA loads (the previous grid may be writing A and B) or the consumers' C stores (it may be
    reading C) before the wait: reported once per partition, naming the first such op."""
    module = _without_wait(_module("bf16"), role)
    ins = _inputs(CASES["bf16"][0])
    res = simulate(module, *ins, seed=0)
    found = [f for f in res.findings if f.kind is K.EARLY_GLOBAL_ACCESS]
    assert res.report.kinds() == {K.EARLY_GLOBAL_ACCESS}, res.report.summary()
    parts = [p for p in module.partitions if p.role is role]
    assert sorted(f.partition for f in found) == sorted(p.name for p in parts) * len({f.cta for f in found})
    first = "tma_load" if role is ir.Role.PRODUCER else "tma_store"
    assert all(f.op.startswith(first) for f in found), [f.op for f in found]


def test_the_explorer_finds_the_missing_wait() -> None:
    """Found by the exhaustive explorer too (a split-K module: the workspace stores are the consumers' first global
    access)."""
    module = _module("bf16_split_k")
    spec = CASES["bf16_split_k"][0]
    clean = explore(module, spec.m, spec.n, spec.k, max_states=50_000)
    assert clean.ok, clean.summary()
    rep = explore(_without_wait(module, ir.Role.CONSUMER), spec.m, spec.n, spec.k, max_states=50_000,
                  stop_at_first=True)
    assert K.EARLY_GLOBAL_ACCESS in rep.kinds(), rep.summary()


def test_a_plain_launch_needs_no_wait() -> None:
    """A module not launched dependently touches memory whenever it likes: the same bodies without the wait and
    without the flag are clean (the finding is the launch's, not the op order's)."""
    module = _module("bf16")
    plain = dataclasses.replace(module, dependent_launch=False,
                                partitions=tuple(dataclasses.replace(p, body=p.body[1:]) for p in module.partitions))
    res = simulate(plain, *_inputs(CASES["bf16"][0]), seed=0)
    assert res.report.ok, res.report.summary()


# Every op a target lowers that touches only shared memory, tensor memory, barriers or registers (or, for the
# abstract ones, nothing the GPU runs): the complement of GLOBAL_OPS among the targets' ops.
NOT_GLOBAL = {ir.Wait, ir.Arrive, ir.ArriveExpectTx, ir.Mma, ir.MmaWait, ir.Promote, ir.ZeroAcc, ir.StoreSmem,
              ir.FenceAsync, ir.StoreWait, ir.Advance, ir.SkipTiles, ir.ApplyEpilogue, ir.FoldAmax,
              ir.GridDependencyWait, ir.TcMma, ir.ScaleCopy, ir.Commit, ir.LoadTmem, ir.Wmma, ir.TdmWait, ir.SyncWarps}


def test_every_op_a_target_lowers_is_classed_global_or_not() -> None:
    """Each op type any target declares is either in GLOBAL_OPS (the simulator checks it against the wait) or known
    here not to touch global memory: a new op must be put on one side (else a partition could read memory before
    its wait unnoticed)."""
    declared = set().union(*(d.ops for d in DECLARED.values()))
    assert declared == (set(GLOBAL_OPS) & declared) | (NOT_GLOBAL & declared), sorted(
        t.__name__ for t in declared - set(GLOBAL_OPS) - NOT_GLOBAL)
    assert not set(GLOBAL_OPS) & NOT_GLOBAL
    # (StoreTmemScales: sm_100a's scale partition loads its scales from global memory; CopyScales: cp.async)
    assert {ir.TmaLoad, ir.TmaStore, ir.CopyScales, ir.StoreTmemScales, ir.Fixup, ir.AtomicAmax} <= set(GLOBAL_OPS)
