"""Clusters: two CTAs stacked along M share B's tile, which the lead CTA multicasts (planner rule 24's ShareB); or
two CTAs side by side along N share A's (ShareA, `ir.Tiling.cluster_n`), the mirror image.

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

With ping-pong consumers (forced `pingpong=True, cluster=2`, issue 24) SplitConsumers has given each warpgroup whole
tiles in turn, and the warpgroup that read a slot use releases it once: the cluster barrier repeats that release and
count (one a CTA). Both CTAs walk the same cluster tiles in the same order, so a slot holds the same B box in both.

ShareA is the same protocol with A's ring in B's place: CTA r computes columns r * BN of a BM x (2 * BN) cluster tile,
loads its own B box and the lead multicasts A's. Its consumer warpgroups keep the row split (SplitConsumers'
default): a warpgroup's rows are one block of A's box, which every CTA holds whole, while a column block would not
be one block of the cluster's B box (the mirror of ShareB's reason for splitting by columns).

A fitted tile (rule 32, `ir.Tiling.n_blocks`) in a 2x1 cluster keeps its consumers' row split too: split by columns,
one warpgroup of a 128 + 16 tile would take 128 columns and the other 16. Its CTAs interleave their rows of the cluster
tile in 64-row blocks (`ir.Tiling.interleaved`): A's slot is one box per warpgroup (`ir.Ring.row_boxes`), each the
cluster's 128 rows split between the CTAs, so warpgroup w of CTA r computes rows 128 w + 64 r .. of the cluster tile.
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
        return share(m, self.cluster, ir.Tensor.B)


@dataclass(frozen=True)
class ShareA:
    """Attributes:
    cluster: CTAs per cluster along N (1: no cluster, the module is unchanged)."""

    cluster: int = 1

    def __call__(self, m: ir.Module) -> ir.Module:
        return share(m, self.cluster, ir.Tensor.A)


def share(m: ir.Module, cluster: int, tensor: ir.Tensor) -> ir.Module:
    """`m` with `tensor`'s loads multicast by the lead of `cluster` CTAs (B: stacked along M; A: along N), guarded
    by an EMPTY cluster barrier every consumer also releases, and a cluster barrier before exit."""
    if cluster == 1:
        return m
    empty = m.barrier("empty")
    shared = ir.Barriers(CLUSTER_EMPTY, empty.depth, empty.count, tuple(r.name for r in m.rings
                                                                        if r.tensor is tensor),
                         ir.Purpose.EMPTY, cluster=True)

    def producer(o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.Wait) and o.barrier == empty.name:
            return o, replace(o, barrier=CLUSTER_EMPTY)
        if isinstance(o, ir.TmaLoad) and o.tensor is tensor:
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
    tiling = replace(m.tiling, cluster=cluster, cluster_n=tensor is ir.Tensor.A, exit_sync=True)
    rings = m.rings
    if tiling.interleaved:  # (a fitted tile's: A's slot one box per consumer warpgroup, each split between the CTAs)
        rings = tuple(replace(r, row_boxes=r.rows // ir.INTERLEAVE) if r.tensor is ir.Tensor.A else r for r in rings)
    return replace(m, tiling=tiling, partitions=parts, rings=rings, barriers=m.barriers + (shared,))
