"""Backends by target name. Importing this imports no GPU library beyond Triton's pure-Python front end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warploom.errors import TargetError

if TYPE_CHECKING:
    from warploom.ir.nodes import Module

# sm_90a: wgmma, run on the H100 (gluon_sm90.py). sm_100a: tcgen05 into tensor memory (gluon_sm100.py), planned by
# planner rule 19 and cross-compiled. gfx1250: one software-pipelined partition of TDM copies and wmma
# (gluon_gfx1250.py), planned by rule 20 and cross-compiled.
TARGETS = ("sm_90a", "sm_100a", "gfx1250")
_DEVICES = {"sm_90a": "H100_SXM", "sm_100a": "B200", "gfx1250": "GFX1250"}


def check_target(target: str, module: Module | None = None) -> str:
    """`target` if warploom compiles for it, and for `module`'s schedule: a wgmma schedule is sm_90a's, a
    tensor-memory one sm_100a's, a TDM/wmma one gfx1250's."""
    if target not in TARGETS:
        raise TargetError(f"target: expected one of {TARGETS}, got {target!r}. Fix: pass one of them")
    if module is not None and target != module.target:
        from warploom.ir.nodes import with_article

        raise TargetError(f"target: {module.name} is {with_article(module.target)} schedule, got target={target!r}. "
                          f"Fix: compile it for {module.target}, or plan for that GPU (warploom.plan(..., "
                          f"device=warploom.device.{_DEVICES[target]}))")
    return target
