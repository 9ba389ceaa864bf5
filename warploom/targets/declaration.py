"""What a target declares (`warploom.targets` gathers the declarations)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from warploom.device import DeviceInfo
from warploom.ir import nodes as ir
from warploom.ir.verify import Check
from warploom.passes import Pass
from warploom.planning.options import PlanOptions
from warploom.planning.plan import Plan
from warploom.spec import GemmSpec
from warploom.target import Target

if TYPE_CHECKING:
    from warploom.backends.gluon_sm90 import GluonSource
    from warploom.runtime.cross import Compiled


@dataclass(frozen=True)
class Declaration:
    """One target (module docstring).

    Attributes:
        target: which.
        device: the GPU its plans default to (`warploom.plan(..., device=...)` names it in errors).
        plan: its planner rule (`warploom.planning.<target>.plan`), which `planner.plan_schedule` calls for a
            device of this target with the options it was asked to force (`PlanOptions`).
        pipeline: its passes after `build_sequential`, in order, for a plan.
        emit: its Gluon emitter.
        compile: its cross-compile step (no GPU needed): the Gluon to a `Compiled` with SASS or AMDGCN.
        gpu: Triton's `GPUTarget` arguments (backend, arch, warp size).
        ops: the IR ops a complete schedule for it may hold (the verifier refuses any other).
        checks: the verifier's rules of its own for a complete module (`ir.verify.check` runs those it is handed).
        counts: the instructions its compile summary counts (`Compiled.summary`, `warploom demo`), and what they
            are, in words.
        runs: whether warploom launches its kernels here (else it plans, simulates and cross-compiles them).
    """

    target: Target
    device: DeviceInfo
    plan: Callable[[GemmSpec, DeviceInfo, PlanOptions], Plan]
    pipeline: Callable[[Plan], list[Pass]]
    emit: Callable[[ir.Module], GluonSource]
    compile: Callable[[ir.Module, GluonSource], Compiled]
    gpu: tuple[str, int | str, int]
    ops: frozenset[type]
    checks: tuple[Check, ...]
    counts: tuple[tuple[str, str], ...]
    runs: bool
