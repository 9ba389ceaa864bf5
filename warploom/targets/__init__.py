"""The targets, each declared once: what warploom plans, lowers, compiles and runs for it.

A `Declaration` gathers everything that differs between targets, which used to be spread over if-chains in the
kernel, the pass list, the compile step and the CLI: the planner rule that plans it, its passes after
`build_sequential`, its Gluon emitter, how it cross-compiles (Triton's `GPUTarget`), the IR ops its complete
schedules may hold, the verifier's rules of its own, the instruction counts its compile summary reports, and whether
warploom launches its kernels. This package stands above the schedule IR, the planner's rules (`warploom.planning`),
the passes, the backends and the runtime, and hands each what it needs (the pass list to `passes.run_pipeline`, the
op set and the checks to `ir.verify.check`), so none of them imports it; `planner.plan_schedule`, above it, looks up
the device's target here and calls its rule. A fourth target is one more module here and one more
`warploom.target.Target`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from warploom.backends.gluon_sm90 import GluonSource
from warploom.device import DeviceInfo
from warploom.ir import nodes as ir
from warploom.ir import verify as verify_module
from warploom.passes import Trace, run_pipeline
from warploom.planning.plan import Plan
from warploom.planning.plan_check import check_fits, check_plan
from warploom.runtime.cross import Compiled
from warploom.spec import GemmSpec
from warploom.target import Target
from warploom.targets import gfx1250, sm90, sm100
from warploom.targets.declaration import Declaration

__all__ = ["DECLARED", "Declaration", "check_target", "compile_schedule", "cross_compile", "declared", "emit",
           "op_types", "problems", "verify"]


# Every target, declared once (a test checks each Target has its declaration).
DECLARED: dict[Target, Declaration] = {d.target: d for d in (sm90.DECLARATION, sm100.DECLARATION, gfx1250.DECLARATION)}


def declared(target: Target | str) -> Declaration:
    """The declaration of `target` (a Target or its name; an unknown name is a `TargetError` naming the choices)."""
    return DECLARED[Target.named(target)]


def check_target(target: str, module: ir.Module | None = None) -> Target:
    """`target` if warploom compiles for it, and for `module`'s schedule (whose target the plan declared)."""
    t = Target.named(target)
    if module is not None and t is not module.target:
        from warploom.errors import TargetError

        raise TargetError(f"target: {module.name} is {module.target.with_article} schedule, got target={target!r}. "
                          f"Fix: compile it for {module.target}, or plan for {t.with_article} GPU (warploom.plan(..., "
                          f"device=...), e.g. the {declared(t).device.name}'s DeviceInfo in warploom.device)")
    return t


def compile_schedule(spec: GemmSpec, plan: Plan, device: DeviceInfo) -> tuple[ir.Module, Trace]:
    """The verified module of `plan` for `spec`: the plan against the spec and device, build_sequential, then its
    target's passes, each verified, then the module's resources against the device, then the complete module
    against the device, the target's op set and its own checks."""
    # A plan's mistakes are the user's (a PlanError naming the field), a module the verifier rejects warploom's.
    check_plan(spec, plan, device)
    d = declared(plan.target)
    m, trace = run_pipeline(spec, plan, d.pipeline(plan))
    check_fits(plan, m, device, lambda: deepest_stages(spec, plan, device))
    verify_module.check(m, "pipeline end", device, ops=d.ops, checks=d.checks)
    return m, trace


def deepest_stages(spec: GemmSpec, plan: Plan, device: DeviceInfo) -> int:
    """The most stages below `plan`'s whose module fits the device's shared memory (0: none), by bisection over the
    depth (a module's shared memory grows with its stages), each depth built again (a millisecond or two: the error
    path only; a forced depth may be any int, 10**30 among them)."""
    least = 2 if plan.target is Target.GFX1250 else 1  # (gfx1250's pipeline reads one slot while it fills another)

    def fits(stages: int) -> bool:
        smaller = replace(plan, stages=stages)
        m, _ = run_pipeline(spec, smaller, declared(plan.target).pipeline(smaller))
        return m.shared_bytes <= device.smem_per_block

    lo, hi = least - 1, plan.stages - 1  # (lo fits, or is below the least depth; the answer is in lo..hi)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo if lo >= least else 0


def verify(m: ir.Module, stage: str, device: DeviceInfo | None = None) -> ir.Module:
    """`ir.verify.check` with the module's target's op set and checks (used when `device` is given: a complete
    module)."""
    d = declared(m.target)
    return verify_module.check(m, stage, device, ops=d.ops, checks=d.checks)


def problems(m: ir.Module, device: DeviceInfo) -> list[str]:
    """Every problem of a complete module, as a list: `ir.verify.problems` with its target's op set and checks."""
    d = declared(m.target)
    return verify_module.problems(m, device, ops=d.ops, checks=d.checks)


def emit(m: ir.Module) -> GluonSource:
    """The Gluon of a module, by its declared target."""
    return declared(m.target).emit(m)


def cross_compile(m: ir.Module, src: GluonSource, target: Target | str | None = None) -> Compiled:
    """Cross-compile `m`'s Gluon `src` for `target` (default: the module's own), which must be the module's."""
    d = declared(check_target(str(target or m.target), m))
    return replace(d.compile(m, src), counted=tuple(name for name, _ in d.counts))


def op_types(modules: Sequence[ir.Module]) -> set[type[Any]]:
    """Every op type in `modules`' partitions (what `Declaration.ops` must cover for them)."""
    return {type(o) for m in modules for p in m.partitions for o, _ in ir.walk(p.body)}
