"""What tuning found: each candidate's trial, the winner, and where the answer came from."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from warploom.planner import Plan
from warploom.spec import GemmSpec


class Source(enum.Enum):
    """Where a TuneResult's plan came from."""

    TUNED = "tuned"  # candidates were checked and timed now
    CACHE = "cache"  # a valid cache entry (its trials are the ones measured when it was written)
    DEFAULT = "default"  # tuning is off (WARPLOOM_AUTOTUNE=0): the planner's choice, untried


@dataclass(frozen=True)
class Trial:
    """One candidate's outcome.

    Attributes:
        plan: the candidate.
        ms: its median time in milliseconds; None when it was disqualified.
        error: why it was disqualified (a wrong output, an exception); None when it ran correctly.
    """

    plan: Plan
    ms: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.ms is None) == (self.error is None):
            raise ValueError(f"Trial: expected exactly one of ms and error, got {self.ms=} {self.error=}")

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class TuneResult:
    """The outcome of `autotune`.

    Attributes:
        spec: the problem.
        plan: the schedule to run.
        source: tuned now, read from the cache, or the planner's default.
        trials: every candidate's outcome, the planner's default first; () for Source.DEFAULT.
        key: the cache key's digest (the cache file's name); "" for Source.DEFAULT.
    """

    spec: GemmSpec
    plan: Plan
    source: Source
    trials: tuple[Trial, ...] = ()
    key: str = ""

    def table(self) -> str:
        """The chosen schedule and every trial, fastest first; times relative to the planner's default."""
        lines = [f"autotune {self.spec.short()}: {self.plan.short()} ({self.source.value})"]
        base = self.trials[0].ms if self.trials else None
        ranked = sorted(self.trials, key=lambda t: (t.ms is None, t.ms or 0.0))
        for t in ranked:
            mark = "*" if t.plan == self.plan else " "
            if t.ms is None:
                lines.append(f" {mark} {t.plan.short():40s} {'-':>10s} {'':>8s}  disqualified: {t.error}")
            else:
                rel = f"{base / t.ms:7.3f}x" if base else f"{'':>8s}"
                lines.append(f" {mark} {t.plan.short():40s} {t.ms:8.4f}ms {rel}")
        return "\n".join(lines)
