"""One mbarrier, modelled as the PTX ISA defines it (sm_90), plus the bookkeeping the checks need.

State: `count` arrivals expected per phase, `pending` arrivals still missing in the current phase, the
transaction count `tx` (bytes announced by expect-tx minus bytes completed by TMA), and `phase`, the
number of completed phases (a fresh barrier is in phase 0). A phase completes when pending == 0 and
tx == 0; then the phase flips and pending resets to count.

``try_wait.parity P`` returns once the phase of parity P has completed, i.e. while the current phase's
parity differs from P: a fresh barrier (phase 0) passes a wait on parity 1 at once. The hardware only
sees the parity; the checks compare it with the full phase index the IR's cursor arithmetic names.

Happens-before: what an agent publishes before arriving (the TMA data that landed on this barrier, a
slot it releases) is attached to the phase as *tokens*; a wait that observes the phase's completion
acquires them. A wgmma may only read data whose token its partition acquired, and a TMA load may only
overwrite data whose reader's release token the producer acquired.
"""

from __future__ import annotations

from typing import Any

# ("F", ring, slot, fill): the TMA data of fill #fill of ring[slot] landed.
# ("R", ring, slot, fill): a reader released fill #fill of ring[slot].
Token = tuple[str, str, int, int]


class MBarrier:
    """A mutable mbarrier; `clone` and `key` serve the exhaustive explorer."""

    __slots__ = ("count", "pending", "phase", "tx", "tokens", "last_tokens", "arrived")

    def __init__(self, count: int) -> None:
        self.count = count
        self.pending = count
        self.phase = 0
        self.tx = 0
        self.tokens: frozenset[Token] = frozenset()  # published in the current phase
        self.last_tokens: frozenset[Token] = frozenset()  # of the latest completed phase
        self.arrived: tuple[str, ...] = ()  # who arrived in the current phase (for messages only)

    def passes(self, parity: int) -> bool:
        """Whether ``mbarrier.wait(parity)`` returns now."""
        return (self.phase & 1) != parity

    def publish(self, token: Token) -> None:
        self.tokens = self.tokens | {token}

    def arrive(self, count: int, who: str) -> bool:
        """`count` arrivals (at most `pending`; the caller reports overflow). True when this completed a phase."""
        self.pending = max(0, self.pending - count)
        self.arrived = self.arrived + (who,)
        return self._maybe_complete()

    def expect(self, nbytes: int) -> None:
        self.tx += nbytes

    def complete_tx(self, nbytes: int) -> bool:
        self.tx -= nbytes
        return self._maybe_complete()

    def _maybe_complete(self) -> bool:
        if self.pending or self.tx:
            return False
        self.phase += 1
        self.pending = self.count
        self.last_tokens, self.tokens = self.tokens, frozenset()
        self.arrived = ()
        return True

    def describe(self) -> str:
        who = f" (arrived: {', '.join(self.arrived)})" if self.arrived else " (none arrived yet)"
        return (f"in phase {self.phase} with {self.pending} of {self.count} arrivals{who} and {self.tx} tx bytes "
                f"pending")

    def clone(self) -> MBarrier:
        b = MBarrier.__new__(MBarrier)
        b.count, b.pending, b.phase, b.tx = self.count, self.pending, self.phase, self.tx
        b.tokens, b.last_tokens, b.arrived = self.tokens, self.last_tokens, self.arrived
        return b

    def key(self) -> tuple[Any, ...]:
        return (self.pending, self.phase, self.tx, self.tokens, self.last_tokens)
