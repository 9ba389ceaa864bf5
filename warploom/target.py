"""The compilation targets warploom plans, lowers and compiles for: one axis, declared where it is decided.

A `Plan` says which target it is for (the planner's rule for the device decides), the module built from it carries
the same (`ir.Module.target`), and the target's declaration (`warploom.targets`) says what the target plans,
lowers, compiles and runs. Nothing infers a target from a schedule's structure; the verifier checks that the
structure agrees with the declared target.
"""

from __future__ import annotations

import enum

from warploom.errors import TargetError


class Target(enum.StrEnum):
    """A compilation target, by the name Triton and the CLI use (a str, so plans stay plain JSON in caches)."""

    SM90A = "sm_90a"  # Hopper: wgmma, warp-specialized, run on the H100
    SM100A = "sm_100a"  # Blackwell: tcgen05 MMAs into tensor memory (planner rule 19)
    GFX1250 = "gfx1250"  # AMD: one software-pipelined partition of TDM copies and wmma (planner rule 20)

    @property
    def with_article(self) -> str:
        """The name after its article, as it is read: an sm_90a, a gfx1250."""
        return f"{'an' if self.value.startswith('sm') else 'a'} {self.value}"

    @staticmethod
    def named(name: object, argument: str = "target") -> Target:
        """The target called `name` (a Target or its name); a `TargetError` naming `argument` otherwise."""
        try:
            return Target(name)  # type: ignore[arg-type]  # (a name from a cache or a caller: anything)
        except ValueError:
            names = tuple(t.value for t in Target)
            raise TargetError(f"{argument}: expected one of {names}, got {name!r}. Fix: pass one of them") from None
