"""The candidates a planner rule scored, collected for `warploom.planner.explain` (and dropped otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One plan the planner scored (`explain`).

    Attributes:
        tile: BM x BN.
        kind: whole tiles, a split-K tail, split-K or stream-K with its pieces.
        score: step 3's score (rounds x BM * BN / efficiency; lower is faster).
        why: the wave arithmetic behind the score.
    """

    tile: str
    kind: str
    score: float
    why: str



_TRACE: ContextVar[list[Candidate] | None] = ContextVar("warploom_planner_trace", default=None)


def note(tile: str, kind: str, score: float, why: str) -> None:
    """Record a scored candidate, if something collects them."""
    trace = _TRACE.get()
    if trace is not None:
        trace.append(Candidate(tile, kind, score, why))


def overrule(tile: str, kind: str, why: str) -> None:
    """Record a plan a measured rule took over the scored candidates (rule 35), listed first: scored just below the
    best so far, as the rule's measurements rank it."""
    trace = _TRACE.get()
    if trace is not None:
        best = min((c.score for c in trace), default=1.0)
        trace.append(Candidate(tile, kind, best * (1 - 1e-9), why))


@contextmanager
def collecting(trace: list[Candidate] | None) -> Iterator[None]:
    """Within it, `note` appends to `trace` (None: drops what it is given, as a rule's inner forced call does)."""
    token = _TRACE.set(trace)
    try:
        yield
    finally:
        _TRACE.reset(token)
