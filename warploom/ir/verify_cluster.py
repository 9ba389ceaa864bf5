"""The verifier's rules for a cluster's modules (`ir.Tiling.cluster`, planner rule 24, passes/cluster.py).

A cluster's CTAs stack along M and share B (ShareB), or stand along N and share A (ShareA, `Tiling.cluster_n`): the
lead CTA multicasts the shared operand's box into every CTA's slot, so the slot may be refilled only when every CTA
released it. Statically that means:

- a cluster is 1 or 2 CTAs, on sm_90a, for whole tiles (no split-K, ranged launch, stream-K, swap or grouping), with
  a K-major A (each CTA's rows of the cluster tile are one box of A's); a 2x1 cluster's consumers split tiles by
  columns, never by rows (a row block of a warpgroup is not one block of the cluster's A box), but for narrow or
  fitted tiles (`Tiling.interleaved`), whose consumers each compute one 64-row block, A's slot a box per block.
  Promoted fp8, blockwise scales and fused epilogue graphs are per CTA already (each CTA promotes, copies scale_a
  for and stores its own rows; not where the CTAs interleave);
- every load of the shared operand is multicast, and nothing else is; a multicast is the lead's alone
  (`TmaLoad.lead_only`: a copy of every CTA would write each slot, and bring its bytes to each barrier, once per CTA);
- ping-pong consumers (each warpgroup whole tiles in turn, passes/split_consumers.py; issue 24) run in 2x1 clusters
  only: both CTAs walk the same tile sequence offset by BM rows, so each slot holds the same B box in both; a 1x2
  cluster's ping-pong tiles would be side by side along N, which nothing lowers;
- a 1x2 cluster's consumers read B's slots whole (no `Mma.n_cols`) and take no column block of a tile (no op with
  `parts` > 1): a column block is not one block of its B or C box; and it has no scale ring or operand buffer
  (their layouts are the 2x1 form's);
- the module ends with a cluster barrier (`Tiling.exit_sync`): no CTA exits while the other may still arrive on its
  barriers;
- each multicast ring is guarded by an EMPTY cluster barrier (`Barriers.cluster`), which the producer waits on, with
  the load's slot, before the load in the same loop body, and on which every partition that reads the ring
  arrives, as often as on the CTA's own EMPTY barrier, and whose count per CTA is that barrier's (each slot use
  releases the same on both: one arrival of the ping-pong warpgroup that read it, or one of each cooperative
  warpgroup);
- cluster barriers exist only in a cluster's modules.

The protocol itself (no copy into a slot another CTA still reads, no phase passed early) is the simulator's to
check, on both CTAs of a cluster at once.
"""

from __future__ import annotations

from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.spec import ALayout


def check_cluster(m: ir.Module) -> list[str]:
    t, errs = m.tiling, []
    shared = [b for b in m.barriers if b.cluster]
    multicast = [(p, o) for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TmaLoad) and o.multicast]
    if t.cluster == 1:
        if t.cluster_n:
            errs.append("cluster_n (CTAs along N) in a module without a cluster")
        errs += [f"barrier {b.name} is a cluster's (held by the lead CTA) in a module without a cluster"
                 for b in shared]
        errs += [f"partition {p.name}: {printer.op(o)} multicasts in a module without a cluster" for p, o in multicast]
        if t.exit_sync:
            errs.append("exit_sync (a cluster barrier before exit) in a module without a cluster")
        return errs
    if not t.exit_sync:
        errs.append(f"cluster={t.cluster} without exit_sync: a CTA could exit while the other still arrives on its "
                    "cluster barriers (the releases of the last stages) or multicasts into it. Fix: set "
                    "Tiling.exit_sync (ShareB does)")
    if t.cluster != 2:
        errs.append(f"cluster={t.cluster}: warploom builds clusters of 2 CTAs")
    if m.blackwell or m.gfx1250:
        errs.append(f"cluster={t.cluster} on {m.target}: clusters with B multicast are built for sm_90a")
    if t.split_k > 1 or t.ranged or t.stream_k or t.swap_ab or t.grouped:
        errs.append(f"cluster={t.cluster} with split-K, a ranged launch, stream-K, swap_ab or grouping: a cluster runs "
                    "whole tiles of C")
    if m.spec.a_layout is ALayout.M_MAJOR:
        errs.append(f"cluster={t.cluster} with an M-major A: each CTA's rows of the cluster tile must be one box of A")
    tensor = ir.Tensor.A if t.cluster_n else ir.Tensor.B  # (the operand every CTA of the cluster reads whole)
    per_cta = [r.name for r in m.rings if r.tensor in (ir.Tensor.SCALE_A, ir.Tensor.SCALE_B)] + [
        bf.name for bf in m.buffers if bf.tensor is ir.Tensor.OPERAND]
    if t.cluster_n and per_cta:
        errs.append(f"{', '.join(per_cta)} in a 1x2 cluster's module: blockwise scale rings and fused-epilogue "
                    "operand buffers are laid out for 2x1 clusters only (each CTA's rows). Fix: cluster=2")
    pingpong = [p.name for p in m.partitions if p.role is ir.Role.CONSUMER and _takes_turns(p)]
    if pingpong and t.cluster_n:
        errs.append(f"partitions {', '.join(pingpong)} take tiles in turn (ping-pong) in a 1x2 cluster's module: "
                    "ping-pong clusters are built 2x1 only (the CTAs along M sharing B). Fix: cluster=2, or "
                    "pingpong=False")
    errs += _interleave_errors(m, per_cta)
    for p in m.partitions:
        if p.rows is not None and not t.cluster_n and not t.interleaved:
            errs.append(f"partition {p.name} computes a row block of each tile in a cluster's module: split the "
                        "consumers by columns (a warpgroup's rows are not one block of the cluster's A box)")
        cols = [o for o, _ in ir.walk(p.body) if isinstance(o, ir.Mma) and o.n_cols is not None
                or getattr(o, "parts", 1) > 1]
        if cols and t.cluster_n:
            errs.append(f"partition {p.name}: {printer.op(cols[0])} takes a column block of the tile (of B's slot or "
                        "of the accumulator) in a 1x2 cluster's module: a column block is not one block of the "
                        "cluster's B or C box. Fix: split the consumers by rows and store their rows whole "
                        "(epilogue_subtiles=1)")
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.TmaLoad) and (o.tensor is tensor) != o.multicast:
                errs.append(f"partition {p.name}: {printer.op(o)} in a cluster's module: {tensor.value}'s loads, and "
                            f"only {tensor.value}'s, are multicast (every CTA of the cluster reads the same "
                            f"{tensor.value} box)")
    for p, o in multicast:
        if not o.lead_only:
            errs.append(f"partition {p.name}: {printer.op(o)} is issued by every CTA of the cluster: each slot would "
                        f"be written {t.cluster} times and each barrier receive {t.cluster} times the box's bytes. "
                        "Fix: only the lead multicasts (lead_only)")
        guards = [b for b in shared if o.ring in b.rings and b.purpose is ir.Purpose.EMPTY]
        if not guards:
            errs.append(f"partition {p.name}: {printer.op(o)} has no EMPTY cluster barrier guarding {o.ring}: the lead "
                        "would refill a slot another CTA may still read")
            continue
        for g in guards:
            if not _waited_before(p.body, g.name, o):
                errs.append(f"partition {p.name}: {printer.op(o)} is not preceded by a wait on "
                            f"{g.name}[{o.slot.cursor}] in its loop: the lead would refill a slot another CTA may "
                            "still read")
            errs += _release_errors(m, g, o.ring)
    return errs


def _interleave_errors(m: ir.Module, per_cta: list[str]) -> list[str]:
    """A 2x1 cluster of fitted tiles (`Tiling.interleaved`): each consumer warpgroup one 64-row block of the tile and
    A's slot one box per block, so that each warpgroup's rows in every CTA are one buffer of the cluster's (the rows
    each CTA holds of the cluster tile, `Tiling.cta_row`, are what the simulator loads and stores); scale rings and
    fused-epilogue operand buffers are laid out for contiguous rows only."""
    t = m.tiling
    boxed = [r for r in m.rings if r.row_boxes]
    if not t.interleaved:
        return [f"ring {r.name} as {r.row_boxes} boxes of 64 rows (row_boxes) in a module whose CTAs do not interleave "
                "their rows (a 2x1 cluster of narrow or fitted tiles)" for r in boxed]
    errs = [f"{', '.join(per_cta)} in an interleaved cluster's module: blockwise scale rings and fused-epilogue "
            "operand buffers hold each CTA's rows as one block. Fix: drop n_blocks or cluster"] if per_cta else []
    if m.spec.epilogue is not None:
        errs.append("a fused epilogue in an interleaved cluster's module (not built: its operands' rows are each "
                    "CTA's as one block). Fix: drop n_blocks or cluster")
    a_rings = [r for r in m.rings if r.tensor is ir.Tensor.A]
    errs += [f"ring {r.name}: A's slot of {r.rows} rows in an interleaved cluster's module must be {r.rows // 64} "
             f"boxes of 64 rows, one per consumer warpgroup (row_boxes), got {r.boxes}"
             for r in a_rings if r.rows % ir.INTERLEAVE or r.boxes != r.rows // ir.INTERLEAVE]
    for p in m.partitions:
        if p.role is ir.Role.CONSUMER and (p.rows is None or p.rows.rows != ir.INTERLEAVE
                                           or p.rows.start % ir.INTERLEAVE):
            errs.append(f"partition {p.name} in an interleaved cluster's module must compute one {ir.INTERLEAVE}-row "
                        "block of each tile (one box of A's slot), got "
                        + ("the whole tile" if p.rows is None else f"rows {p.rows.start}..+{p.rows.rows}")
                        + ". Fix: consumer_partitions=bm // 64")
    return errs


def _takes_turns(p: ir.Partition) -> bool:
    """Whether `p` is a ping-pong consumer: its tiles loop steps over the other warpgroups' tiles."""
    return any(isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES and s.step > 1 for s in p.body)


def _waited_before(body: tuple[ir.Stmt, ...], barrier: str, load: ir.TmaLoad) -> bool:
    """Whether `load` stands in a loop body after a wait on `barrier` with the load's slot."""
    waited = False
    for s in body:
        if isinstance(s, ir.Loop):
            if _waited_before(s.body, barrier, load):
                return True
            continue
        if isinstance(s, ir.Wait) and s.barrier == barrier and s.slot == load.slot:
            waited = True
        if s == load:
            return waited
    return False


def _release_errors(m: ir.Module, shared: ir.Barriers, ring: str) -> list[str]:
    """Every partition that reads `ring` arrives on the cluster barrier `shared` as often as on its own EMPTY ones."""
    own = {b.name for b in m.barriers if b.purpose is ir.Purpose.EMPTY and not b.cluster and ring in b.rings}
    errs = [f"{shared.name} counts {shared.count} arrival(s) a CTA, {b.name} {b.count}: each CTA's consumers release "
            f"every use of a {ring} slot as often on both, so the lead would "
            f"{'refill it early' if shared.count < b.count else 'wait forever to refill it'}. Fix: count={b.count}"
            for b in m.barriers if b.name in own and b.count != shared.count]
    for p in m.partitions:
        if not any(isinstance(o, ir.Mma) and ring in (o.a_ring, o.b_ring) for o, _ in ir.walk(p.body)):
            continue
        arrives = [(o, d) for o, d in ir.walk(p.body) if isinstance(o, ir.Arrive)]
        mine = sorted((o.guard.value, o.slot.offset, d) for o, d in arrives if o.barrier in own)
        theirs = sorted((o.guard.value, o.slot.offset, d) for o, d in arrives if o.barrier == shared.name)
        if mine != theirs:
            errs.append(f"partition {p.name} reads {ring} but does not release it on {shared.name} where it releases "
                        f"it on {', '.join(sorted(own))}: the lead's next multicast would wait forever")
    return errs
