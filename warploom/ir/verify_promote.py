"""The verifier's rules for sm_100a promotion through tensor-memory partials (fp32 blockwise scales,
passes/blackwell_promote.py); `verify.check_sm100` runs them.

Within each k-loop body, in program order:
- a tcgen05 MMA into a partial overwrites it (each k-block a fresh partial: one that accumulated would add the
  previous k-block's product again, scaled by this k-block's scales), after a wait on the partial's empty barrier at
  its slot, and a `tcgen05_commit` on the partial's ready barrier at that slot follows it;
- a `load_tmem` from a partial comes after a wait on the partial's ready barrier at its slot (the commit published
  the MMA's product: read earlier, the partial is the previous use's), and the reader arrives on the empty barrier
  at that slot after its last `load_tmem` of the body;
- a promotion reads a register block that a `load_tmem` from a partial filled since the previous promotion.

Allowed: ``wait part_ready[p]; load_tmem partial <- part_tm[p]; arrive part_empty[p]; promote acc0 += partial``.
Forbidden: the same without the wait (the MMA may not have completed), or ``promote`` twice from one load.
"""

from __future__ import annotations

from warploom.ir import nodes as ir
from warploom.ir import printer


def check_partials(m: ir.Module) -> list[str]:
    """The rules above for every tensor-memory partial ring of `m` (none: no errors)."""
    partials = {r.name for r in m.rings if r.tensor is ir.Tensor.PARTIAL}
    if not partials:
        return []
    ready = {b.name: b.rings for b in m.barriers if b.purpose is ir.Purpose.READY}
    empty = {b.name: b.rings for b in m.barriers if b.purpose is ir.Purpose.EMPTY}
    errs: list[str] = []
    for p in m.partitions:
        for body in _k_bodies(p.body):
            _check_body(p.name, body, partials, ready, empty, errs)
    return errs


def _k_bodies(body: tuple[ir.Stmt, ...]) -> list[tuple[ir.Stmt, ...]]:
    out: list[tuple[ir.Stmt, ...]] = []
    for s in body:
        if isinstance(s, ir.Loop):
            out += [s.body] if s.kind is ir.LoopKind.K else _k_bodies(s.body)
    return out


def _check_body(part: str, body: tuple[ir.Stmt, ...], partials: set[str], ready: dict[str, tuple[str, ...]],
                empty: dict[str, tuple[str, ...]], errs: list[str]) -> None:
    waited: set[tuple[str, ir.Slot]] = set()  # (ring, slot) whose ready (R) or empty (E) phase this body acquired
    loaded: set[str] = set()  # register blocks filled from a partial and not promoted yet
    pending_commit: list[tuple[str, ir.Slot, str]] = []
    last_load: dict[tuple[str, ir.Slot], int] = {}
    released: dict[tuple[str, ir.Slot], int] = {}
    where = f"partition {part}"
    for i, s in enumerate(body):
        text = printer.op(s) if not isinstance(s, ir.Loop) else "loop"
        match s:
            case ir.Wait() if s.barrier in ready or s.barrier in empty:
                kind = "R" if s.barrier in ready else "E"
                for r in (ready.get(s.barrier) or empty.get(s.barrier) or ()):
                    if r in partials:
                        waited.add((f"{kind}:{r}", s.slot))
            case ir.TcMma() if s.acc_ring in partials:
                if s.overwrite is not ir.Guard.ALWAYS:
                    errs.append(f"{where}: `{text}` adds to a tensor-memory partial; each k-block's MMA must "
                                "overwrite a fresh one (overwrite=always)")
                if (f"E:{s.acc_ring}", s.acc_slot) not in waited:
                    errs.append(f"{where}: `{text}` writes {s.acc_ring} without a wait on its empty barrier at that "
                                "slot in the k-block: the partial may not have been read yet")
                pending_commit.append((s.acc_ring, s.acc_slot, text))
            case ir.Commit():
                for r in ready.get(s.barrier, ()):
                    pending_commit = [c for c in pending_commit if (c[0], c[1]) != (r, s.slot)]
            case ir.LoadTmem() if s.acc_ring in partials:
                if (f"R:{s.acc_ring}", s.slot) not in waited:
                    errs.append(f"{where}: `{text}` reads a partial before a wait on its ready barrier at that slot: "
                                "the MMA writing it may not have completed (its commit publishes it)")
                loaded.add(s.acc)
                last_load[(s.acc_ring, s.slot)] = i
            case ir.Arrive() if s.barrier in empty:
                for r in empty[s.barrier]:
                    if r in partials:
                        released[(r, s.slot)] = i
            case ir.Promote():
                if s.src not in loaded:
                    errs.append(f"{where}: `{text}` promotes {s.src}, which no load_tmem from a partial filled "
                                "since the last promotion of it")
                loaded.discard(s.src)
    errs += [f"{where}: `{t}` is not followed by a tcgen05_commit on {r}'s ready barrier at that slot: the reader "
             "would wait forever" for r, _, t in pending_commit]
    for key, i in last_load.items():
        if released.get(key, -1) < i:
            errs.append(f"{where}: no arrive on {key[0]}'s empty barrier after the last load_tmem of it in the "
                        "k-block: the MMA warp could never refill it, or would refill it while it is read")
