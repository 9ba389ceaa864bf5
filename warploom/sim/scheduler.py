"""Seeded random scheduling: at each step, one enabled action chosen uniformly.

Actions are partition steps and asynchronous completions alike (`machine.py`), so a seed picks both the
interleaving of the partitions and when each TMA copy, wgmma and TMA store finishes. Most checks do not
depend on the schedule (they judge what the program has synchronized, see `machine.py`); the schedule
decides which deadlocks are reached and when the data moves.
"""

from __future__ import annotations

import random

from warploom.errors import InternalError
from warploom.sim.machine import Machine


class StepLimitError(InternalError):
    """A CTA ran past its step budget. Cannot happen for a finite program (every action retires an
    instruction or an async operation); raised rather than looping if that invariant breaks."""


def step_budget(machine: Machine) -> int:
    """An upper bound on the actions of one CTA: each instruction once, each async completion once."""
    return 2 * sum(len(t) for t in machine.prog.traces) + 16


def run_random(machine: Machine, rng: random.Random) -> None:
    """Run `machine` to its end (finished or deadlocked) under random scheduling, then its end checks."""
    budget = step_budget(machine)
    while machine.step <= budget:
        acts = machine.enabled()
        if not acts:
            machine.finish()
            return
        machine.apply(acts[rng.randrange(len(acts))])
    raise StepLimitError(f"CTA {machine.prog.geo.pid} of {machine.prog.module.name} ran past {budget} steps")
