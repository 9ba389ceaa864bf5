"""The candidates a planner rule scored, collected for `warploom.planner.explain` (and dropped otherwise), and which of
them the rules took: a rule that takes its own candidate marks the one taken before it replaced by it (rule 32's fitted
tile in place of the search's winner, rule 30's ping-pong, rules 35-37's measured plans), so that one candidate, the
final plan's, stands chosen."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Candidate:
    """One plan the planner scored (`explain`).

    Attributes:
        tile: BM x BN.
        kind: whole tiles, a split-K tail, split-K or stream-K with its pieces.
        score: step 3's score (rounds x BM * BN / efficiency; lower is faster).
        why: the wave arithmetic behind the score.
        chosen: whether its rule took it (the others were weighed and passed over).
        replaced_by: the candidate a later rule took in its place; None while it stands (only a chosen one is
            replaced).
    """

    tile: str
    kind: str
    score: float
    why: str
    chosen: bool = False
    replaced_by: Candidate | None = None

    def __post_init__(self) -> None:
        if self.replaced_by is not None and not self.chosen:
            raise ValueError(f"Candidate({self.tile} {self.kind}): replaced_by={self.replaced_by.kind!r} expects "
                             "chosen=True (a later rule replaces only a candidate an earlier rule took)")

    @property
    def final(self) -> bool:
        """Whether it is the plan: taken, and not replaced since."""
        return self.chosen and self.replaced_by is None

    @property
    def verdict(self) -> str:
        """What became of it: "chosen", "replaced by 64x128 one wave (rule 35)", or "" (weighed only)."""
        if self.replaced_by is not None:
            return f"replaced by {self.replaced_by.tile} {self.replaced_by.kind}"
        return "chosen" if self.chosen else ""


_TRACE: ContextVar[list[Candidate] | None] = ContextVar("warploom_planner_trace", default=None)


def _take(trace: list[Candidate], taken: Candidate) -> None:
    """Mark the candidate that stood chosen in `trace` (at most one does) replaced by `taken`, a rule's later
    choice."""
    trace[:] = [replace(c, replaced_by=taken) if c.final else c for c in trace]


def note(tile: str, kind: str, score: float, why: str, *, chosen: bool = False) -> None:
    """Record a scored candidate, if something collects them; `chosen`: its rule takes it, in place of the candidate
    taken before."""
    trace = _TRACE.get()
    if trace is not None:
        candidate = Candidate(tile, kind, score, why, chosen)
        if chosen:
            _take(trace, candidate)
        trace.append(candidate)


def choose(tile: str, score: float) -> None:
    """Mark the search's winner chosen: the last candidate noted of `tile` at `score` (its plan's tile and score, as
    the search noted them)."""
    trace = _TRACE.get()
    if trace is None:
        return
    i = next((i for i in reversed(range(len(trace))) if (trace[i].tile, trace[i].score) == (tile, score)), None)
    if i is not None and not trace[i].chosen:
        taken = replace(trace[i], chosen=True)
        _take(trace, taken)
        trace[i] = taken


def overrule(tile: str, kind: str, why: str) -> None:
    """Record a plan a measured rule took over the scored candidates (rules 35-37), listed first: scored just below
    the best so far, as the rule's measurements rank it; the candidate taken before it is marked replaced."""
    trace = _TRACE.get()
    if trace is not None:
        best = min((c.score for c in trace), default=1.0)
        note(tile, kind, best * (1 - 1e-9), why, chosen=True)


@contextmanager
def collecting(trace: list[Candidate] | None) -> Iterator[None]:
    """Within it, `note` appends to `trace` (None: drops what it is given, as a rule's inner forced call does)."""
    token = _TRACE.set(trace)
    try:
        yield
    finally:
        _TRACE.reset(token)
