"""Programmatic dependent launch (PDL): the kernel starts while the grid before it finishes.

In a stream (or a CUDA graph) a kernel normally starts only after the previous one's last CTA has exited and its
writes are flushed; the launch, the CTA's setup (shared memory, barrier inits, the partitions' registers) and the
first TMA latency then run with the GPU idle. That idle stretch is most of the gap between warploom's and cuBLAS's
kernels at a few microseconds (docs/decisions/dependent-launch.md). With PDL (Hopper and later: the launch attribute
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, Triton's `launch_pdl`) the kernel may start as soon as the
previous grid allows it, so the setup overlaps that grid's tail:

    kernel:                                          every partition:
      allocate shared memory, init the barriers        grid_dependency_wait   (griddepcontrol.wait)
      launch_dependents  (the next grid may start)     ... its loads, MMAs and stores, as before
      fork the partitions

The wait is the first op of each partition, ahead of any access to global memory: the grid before may be writing
this kernel's operands, or reading the buffer this kernel writes. `launch_dependents` only lets the next grid be
scheduled (on the SMs this one leaves free); that grid waits in turn for this one to finish before it touches
memory. Launched without the attribute, the wait returns at once, so the module is correct either way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir


@dataclass(frozen=True)
class DependentLaunch:
    """Attributes:
    enabled: launch with PDL (every partition waits for the previous grid first); off, the module is unchanged."""

    enabled: bool = True

    def __call__(self, m: ir.Module) -> ir.Module:
        if not self.enabled:
            return m
        parts = tuple(replace(p, body=(ir.GridDependencyWait(), *p.body)) for p in m.partitions)
        return replace(m, partitions=parts, dependent_launch=True)
