"""Backends by target name. Importing this imports no GPU library beyond Triton's pure-Python front end."""

from __future__ import annotations

from warploom.errors import TargetError

TARGETS = ("sm_90a",)


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise TargetError(f"target: expected one of {TARGETS}, got {target!r}. Fix: pass target='sm_90a' "
                          "(sm_100a and gfx1250 are not implemented yet)")
    return target
