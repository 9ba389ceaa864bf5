"""Clusters: two CTAs stacked along M share B's tile, which the lead CTA multicasts (planner rule 24).

Two CTAs of a Hopper thread-block cluster that compute the rows 0:BM and BM:2BM of one cluster tile read the
same B box every k-block. Multicast lets the cluster's lead CTA (rank 0) copy it once: TMA writes it into both
CTAs' slots and completes its bytes on both CTAs' READY barriers, so B's traffic from L2 halves. That is the
lever where each box row costs more than its bytes (rows that are not whole 128-byte lines touch two L2 lines:
docs/decisions/rule-24-clusters.md).

The lead may refill a B slot only when both CTAs released it, so each CTA's consumers also release every
slot on an EMPTY barrier of the cluster's, held by the lead (`ir.Barriers.cluster`), on which the lead's
producer waits before the stage's copies (another CTA's wait on it does nothing). A CTA's own EMPTY barrier
still guards its own A slot:

    producer (each CTA), per (tile, k):          consumer (each CTA), per (tile, k):
      wait empty[p] phase(p)^1                     wait ready[c] phase(c)
      wait cluster_empty[p] phase(p)^1  (lead)     wgmma acc += a[c] @ b[c]
      arrive_expect_tx ready[p] bytes=A+B          arrive empty[c]
      tma_load A -> a[p] on ready[p]               arrive cluster_empty[c]   (on the lead's)
      tma_load B -> b[p] on ready[p] multicast (lead)

and every CTA ends with a cluster barrier (`ir.Tiling.exit_sync`): the other CTA's releases of the last stages
arrive on the lead's barrier after the lead's last wait on it, so the lead must not exit before they came.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.ir import nodes as ir
from warploom.passes.util import rewrite

CLUSTER_EMPTY = "cluster_empty"


@dataclass(frozen=True)
class ShareB:
    """Attributes:
    cluster: CTAs per cluster along M (1: no cluster, the module is unchanged)."""

    cluster: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        if self.cluster == 1:
            return m
        empty = m.barrier("empty")
        shared = ir.Barriers(CLUSTER_EMPTY, empty.depth, empty.count, tuple(r.name for r in m.rings
                                                                            if r.tensor is ir.Tensor.B),
                             ir.Purpose.EMPTY, cluster=True)

        def producer(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if isinstance(o, ir.Wait) and o.barrier == empty.name:
                return o, replace(o, barrier=CLUSTER_EMPTY)
            if isinstance(o, ir.TmaLoad) and o.tensor is ir.Tensor.B:
                return (replace(o, multicast=True),)
            return (o,)

        def consumer(o: ir.Op) -> tuple[ir.Stmt, ...]:
            if isinstance(o, ir.Arrive) and o.barrier == empty.name:
                return o, replace(o, barrier=CLUSTER_EMPTY)
            return (o,)

        parts = tuple(replace(p, body=rewrite(p.body, producer if p.role is ir.Role.PRODUCER else consumer))
                      for p in m.partitions)
        # (exit_sync: the lead's cluster barrier takes the other CTA's releases of the last stages after the lead's
        # last wait on it, so no CTA may exit before every CTA of the cluster is done)
        return replace(m, tiling=replace(m.tiling, cluster=self.cluster, exit_sync=True), partitions=parts,
                       barriers=m.barriers + (shared,))
