"""Kernel: a planned GEMM with its schedule IR, its generated Gluon, and ways to compile and run it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from warploom.backends import check_target
from warploom.backends.gluon_sm90 import GluonSource, lower
from warploom.device import DeviceInfo
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.passes import Trace, compile_schedule
from warploom.planner import Plan, plan_schedule
from warploom.runtime.cross import Compiled
from warploom.spec import GemmSpec


@dataclass(frozen=True)
class Kernel:
    """A planned kernel.

    Attributes:
        spec: the problem.
        plan: the schedule parameters the planner chose.
        device: the GPU it was planned for.
        module: the finished schedule IR.
        trace: the IR after each pass.
    """

    spec: GemmSpec
    plan: Plan
    device: DeviceInfo
    module: ir.Module
    trace: Trace

    @property
    def schedule(self) -> str:
        """The schedule IR as text."""
        return printer.module(self.module)

    @functools.cached_property
    def gluon(self) -> GluonSource:
        return lower(self.module)

    @property
    def source(self) -> str:
        """The generated Gluon source."""
        return self.gluon.text

    def compile(self, target: str = "sm_90a") -> Compiled:
        """Cross-compile without a GPU; the result has .sass, .registers, .spills, .smem_bytes."""
        return _compiled(self, check_target(target))

    def run(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> Any:
        """Launch on the GPU holding the tensors (already validated against `spec`)."""
        return self.launcher(a, b, out, scale_a, scale_b, bias)

    @functools.cached_property
    def launcher(self) -> Any:
        from warploom.runtime.launch import Launcher

        return Launcher(self.module, self.gluon)


@functools.lru_cache(maxsize=64)
def _compiled(k: Kernel, target: str) -> Compiled:
    from warploom.runtime.cross import cross_compile

    return cross_compile(k.module, k.gluon, target)


@functools.lru_cache(maxsize=1024)
def build(spec: GemmSpec, device: DeviceInfo, plan: Plan | None = None) -> Kernel:
    """Plan (unless `plan` is given), run the pass pipeline and verify; cached per (spec, device, plan)."""
    plan = plan or plan_schedule(spec, device)
    module, trace = compile_schedule(spec, plan, device)
    return Kernel(spec, plan, device, module, trace)
