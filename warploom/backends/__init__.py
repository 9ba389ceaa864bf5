"""Backends by target name. Importing this imports no GPU library beyond Triton's pure-Python front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warploom.errors import TargetError

if TYPE_CHECKING:
    from warploom.ir.nodes import Module

# sm_90a: wgmma, run on the H100 (gluon_sm90.py). sm_100a: tcgen05 into tensor memory (gluon_sm100.py), planned by
# planner rule 19 and cross-compiled; gfx1250 is not implemented yet.
TARGETS = ("sm_90a", "sm_100a")


def check_target(target: str, module: Module | None = None) -> str:
    """`target` if warploom compiles for it, and for `module`'s schedule: a wgmma schedule is sm_90a's, a
    tensor-memory one sm_100a's."""
    if target not in TARGETS:
        raise TargetError(f"target: expected one of {TARGETS}, got {target!r}. Fix: pass target='sm_90a' or "
                          "'sm_100a' (gfx1250 is not implemented yet)")
    if module is not None and (target == "sm_100a") != module.blackwell:
        planned = "sm_100a" if module.blackwell else "sm_90a"
        raise TargetError(f"target: {module.name} is an {planned} schedule, got target={target!r}. Fix: compile it "
                          f"for {planned}, or plan for the other GPU (warploom.plan(..., device=B200 or H100_SXM))")
    return target
