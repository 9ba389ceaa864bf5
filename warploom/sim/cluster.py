"""The CTAs of a thread-block cluster (`ir.Tiling.cluster`, planner rule 24), simulated together.

The CTAs of one cluster share what the module says they share, and nothing else:

- a multicast load (`ir.TmaLoad.multicast`) is issued by the lead (rank 0) alone, as one copy in flight in the
  lead's machine; when it lands, it fills its ring slot in every CTA and completes its bytes on every CTA's
  barrier of that slot (`Machine._land`). Its issue is checked against every CTA's slot: a wgmma of any CTA that
  may still read it, or a fill that CTA read but never released to the lead, is a finding (`Machine._overwrite`).
  A multicast every CTA issues (not `lead_only`, a planted bug) is one copy per CTA, each into every CTA: the
  second copy of a box into a slot is DOUBLE_WRITE.
- a cluster barrier (`ir.Barriers.cluster`) is one `MBarrier`, the lead's, in every CTA's machine: all CTAs'
  arrivals count on it (its count is the per-CTA count times the cluster's CTAs), and a non-lead CTA's wait on it
  resolves to nothing (`program._Interp`). A non-lead CTA's release on it names that CTA, so only its own
  consumers' arrivals let the lead refill its slots.

A CTA exits when its partitions have finished, unless the module ends with a cluster barrier (`ir.Tiling.exit_sync`):
then every CTA exits once all have finished. Another CTA's write into a CTA (an arrival on its barrier, a multicast
landing in it) must be ordered before that CTA's exit by a wait of the CTA that observed it; one that is not, or
comes after the exit, is WRITE_AFTER_EXIT (`Machine.leave`). So, like every check of the simulator, it does not
depend on the interleaving: without the barrier, the other CTA's releases of the last stages on the lead's cluster
barrier, which no wait of the lead observes, are found on every schedule.

The CTAs' actions interleave at random, one enabled action of any CTA at a time, so every cross-CTA race the
schedule can reach (the lead's next multicast before a slow CTA's wgmma retired) is reachable. The exhaustive
explorer runs every interleaving of one cluster's CTAs instead (`explore._Cluster`, linked the same way).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from warploom.ir import nodes as ir
from warploom.sim.machine import Machine
from warploom.sim.scheduler import StepLimitError, step_budget


def whole_clusters(module: ir.Module, pids: Iterable[int]) -> tuple[int, ...]:
    """Every CTA of each cluster that one of `pids` belongs to (CTA pid = cluster id * cluster + rank), in order:
    a cluster's CTAs wait on each other, so none runs alone."""
    c = module.tiling.cluster
    return tuple(pids) if c == 1 else tuple(sorted({p // c * c + r for p in pids for r in range(c)}))


def link(machines: Sequence[Machine]) -> None:
    """Make `machines` (one cluster's CTAs, lead first) one cluster: the lead's cluster barriers are every CTA's."""
    lead = machines[0]
    for mach in machines:
        assert mach.rank == machines.index(mach), "a cluster's machines in rank order"
        mach.cluster = tuple(machines)
        for name in mach.cluster_bars:
            mach.bars[name] = lead.bars[name]


def run_cluster(machines: Sequence[Machine], rng: random.Random) -> None:
    """Run one cluster's CTAs (linked, lead first) to their end under random scheduling: each step, one enabled
    action of any of them; then each CTA's end checks (a CTA still waiting is deadlocked). Without a cluster barrier
    before exit, a CTA exits as soon as its own partitions have finished."""
    link(machines)
    early_exit = not machines[0].prog.module.tiling.exit_sync
    budget = sum(step_budget(mach) for mach in machines)
    steps = 0
    while True:
        acts = [(mach, a) for mach in machines for a in mach.enabled()]
        if not acts:
            break
        if steps > budget:
            lead = machines[0]
            raise StepLimitError(f"cluster of CTA {lead.prog.geo.pid} of {lead.prog.module.name} ran past {budget} "
                                 "steps")
        mach, act = acts[rng.randrange(len(acts))]
        mach.apply(act)
        steps += 1
        if early_exit:
            for m in machines:
                if not m.exited and m.done():
                    m.leave()
    for mach in machines:
        mach.finish()
