"""Kernel: a planned GEMM with its schedule IR, its generated Gluon, and ways to compile and run it."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from warploom.backends import check_target
from warploom.backends.gluon_sm90 import GluonSource, lower
from warploom.device import DeviceInfo
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.passes import Trace, compile_schedule
from warploom.planner import Plan, plan_schedule
from warploom.runtime.cross import Compiled
from warploom.spec import GemmSpec

if TYPE_CHECKING:  # warploom.sim is imported when used: importing warploom stays cheap
    import torch

    from warploom.sim import CheckReport, SimResult

# Set to 1 to run the simulator's protocol checks on every kernel `build` plans (see `build`).
SIM_CHECK_ENV = "WARPLOOM_SIM_CHECK"


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

    def run(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
            operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        """Launch on the GPU holding the tensors (already validated against `spec`).

        With a fused epilogue, `operands` maps each of the graph's operand names to its tensor (for scaled_mm
        including scale_a, scale_b and bias), and `extra_outs` are the outputs after `out`."""
        return self.launcher(a, b, out, scale_a, scale_b, bias, operands=operands, extra_outs=extra_outs)

    @functools.cached_property
    def launcher(self) -> Any:
        from warploom.runtime.launch import Launcher

        return Launcher(self.module, self.gluon)

    def simulate(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                 scale_b: torch.Tensor | None = None, bias: torch.Tensor | None = None, *, seed: int = 0,
                 ctas: Iterable[int] | None = None, out: torch.Tensor | None = None,
                 record: bool = True, operands: Mapping[str, torch.Tensor] | None = None) -> SimResult:
        """Run this kernel's schedule on the CPU simulator for CPU tensors ``a (M, K) @ b (K, N)``.

        Any M, N, K (they are run-time arguments of the kernel, as on the GPU). `ctas` picks program ids
        of the persistent grid (default: all); tiles of the others stay NaN. See `warploom.sim.simulate`.
        """
        from warploom.sim import simulate

        if operands is not None:  # a fused epilogue: its operands, for scaled_mm its scales and bias too
            # (blockwise scales are the mainloop's, never graph operands: they stay positional)
            return simulate(self.module, a, b, scale_a, scale_b, seed=seed, ctas=ctas, record=record,
                            operands=operands)
        return simulate(self.module, a, b, scale_a, scale_b, bias, seed=seed, ctas=ctas, out=out, record=record)

    def check_protocol(self, *, seeds: Iterable[int] = range(4), ctas: Iterable[int] | None = None,
                       raise_on_finding: bool = True) -> CheckReport:
        """The simulator's protocol checks (no data) at the spec's size under each seed's schedule.

        By default one CTA per distinct tile count runs. Raises `warploom.sim.ProtocolError` on findings
        unless `raise_on_finding` is False. See `warploom.sim.check_protocol`.
        """
        from warploom.sim import check_protocol

        s = self.spec
        return check_protocol(self.module, s.m, s.n, s.k, seeds=seeds, ctas=ctas, raise_on_finding=raise_on_finding)


@functools.lru_cache(maxsize=64)
def _compiled(k: Kernel, target: str) -> Compiled:
    from warploom.runtime.cross import cross_compile

    return cross_compile(k.module, k.gluon, target)


@functools.lru_cache(maxsize=1024)
def build(spec: GemmSpec, device: DeviceInfo, plan: Plan | None = None) -> Kernel:
    """Plan (unless `plan` is given), run the pass pipeline and verify; cached per (spec, device, plan).

    With ``WARPLOOM_SIM_CHECK=1`` in the environment, each kernel built also runs the simulator's protocol
    checks at the spec's size (one CTA per distinct tile count, 2 schedules), and a finding raises
    `warploom.sim.ProtocolError`. A debugging aid: read on a cache miss only, so a launch pays nothing.
    """
    plan = plan or plan_schedule(spec, device)
    module, trace = compile_schedule(spec, plan, device)
    kernel = Kernel(spec, plan, device, module, trace)
    if os.environ.get(SIM_CHECK_ENV, "0") not in ("", "0") and spec.m and spec.n and spec.k:
        kernel.check_protocol(seeds=range(2))  # an empty problem launches nothing: nothing to check
    return kernel
