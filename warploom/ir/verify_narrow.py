"""The verifier's checks of a narrow tile (ir.Tiling.n_blocks, planner rule 31): its column blocks, the options it
excludes, and the consumers' block accumulators, their wgmma and their join."""

from __future__ import annotations

from warploom.ir import nodes as ir
from warploom.ir import printer


def check_narrow(m: ir.Module) -> list[str]:
    """A narrow tile (ir.Tiling.n_blocks, planner rule 31): column blocks of powers of two from 16 to 256, widest
    first, covering less than BN and at least the spec's N (the columns past them are never computed); a K-major B
    (its slot is sliced by rows, N), native accumulation (promotion adds into column blocks of its own), no swap,
    cluster or grouping; split-K, stream-K and the epilogue, fused or not, see the joined tile as any other, since the
    join stands before anything that reads the sum. Each consumer partition then
    has one accumulator per block, at the block's columns, that its k-loop's wgmma write (one per block, reading
    that block of B's slot), and a `JoinAcc` of exactly those blocks, in order, into a whole-tile accumulator before
    anything reads it; a JoinAcc appears only here.

    Allowed:   tiling(bm=128, bn=128, n_blocks=(64, 16)) over N = 80 (or 72), bf16 or fp8 rowwise fast, with split-K,
               stream-K or a fused epilogue too, consumers
               `mma acc_n0 <- b_ring[c][cols 0:64]`, `mma acc_n1 <- b_ring[c][cols 64:80]`, then `join acc <-
               acc_n0, acc_n1` after the k-loop's final wait.
    Forbidden: n_blocks=(64, 24) (not a power of two); (16, 64) (not widest first); (64, 64) at bn=128 (the whole
               tile); N = 96 with (64, 16); with swap_ab or a cluster; an N-major B; promoted fp8; a gate/up
               epilogue; a JoinAcc in a whole tile's module, in a producer, before the k-loop, outside the tiles
               loop or after a read of the tile's sum (its fixup, epilogue or store); a store of a block's
               accumulator."""
    t, errs = m.tiling, []
    blocks = t.n_blocks
    joins = [(p, o) for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.JoinAcc)]
    if not blocks:
        errs += [f"partition {p.name}: {printer.op(o)} in a module without n_blocks (a whole tile)" for p, o in joins]
        return errs
    spec = m.spec
    if not ir.narrow_widths(blocks):
        errs.append(f"n_blocks={blocks}: powers of two from 16 to 256, widest first")
        return errs
    width = sum(blocks)
    if width >= t.bn:
        errs.append(f"n_blocks={blocks}: {width} columns, not fewer than the tile's {t.bn} (a whole tile)")
    errs += [f"n_blocks={blocks} with {p}" for p in spec.narrow_problems(width)]
    if t.swap_ab or t.cluster > 1 or t.grouped:
        errs.append("n_blocks with swap_ab, a cluster or a grouped GEMM")
    want = [(cb.start, cb.cols) for cb in ir.column_blocks(blocks)]
    for p in m.partitions:
        mine = [o for q, o in joins if q is p]
        if p.role not in (ir.Role.CONSUMER, ir.Role.SEQUENTIAL):
            errs += [f"partition {p.name}: {printer.op(o)} in a {p.role.value} partition" for o in mine]
            continue
        if len(mine) != 1:
            errs.append(f"partition {p.name}: {len(mine)} joins of the narrow tile's blocks (one after its k-loop)")
            continue
        errs += _check_join(p, mine[0], t.bn, want)
    return errs


def _reads(o: ir.Op) -> set[str]:
    """The accumulators an op reads or sets (an epilogue operand's load only names the block it is for)."""
    if isinstance(o, ir.JoinAcc):
        return set(o.parts)
    if isinstance(o, ir.Fixup):
        return set(o.accs)
    if isinstance(o, ir.Promote):
        return {o.src, o.dst}
    if isinstance(o, (ir.Epilogue, ir.StoreSmem, ir.StoreTile, ir.ZeroAcc, ir.ApplyEpilogue, ir.FoldAmax,
                      ir.StoreScales, ir.AtomicAmax)):
        return {o.acc}
    return set()


def _check_join(p: ir.Partition, join: ir.JoinAcc, bn: int, want: list[tuple[int, int]]) -> list[str]:
    """One consumer's block accumulators, their wgmma, and its join: in the tiles loop, after the k-loop, before
    anything else names the whole tile's accumulator; nothing but the wgmma and the join names a block's."""
    errs = []
    where = f"partition {p.name}: {printer.op(join)}"
    accs = {a.name: a for a in p.accumulators}
    parts = [accs.get(n) for n in join.parts]
    if any(a is None for a in parts) or [(a.col0, a.cols) for a in parts if a] != want:
        errs.append(f"{where}: its parts must be accumulators at the blocks' columns {want}")
    whole = accs.get(join.acc)
    if whole is None or (whole.col0, whole.cols) != (0, bn):
        errs.append(f"{where} into an accumulator that is not the whole tile")
    order = list(ir.walk(p.body))
    mmas = [(o, loops) for o, loops in order if isinstance(o, ir.Mma)]
    got = sorted(((o.acc, (-1, -1) if o.n_cols is None else (o.n_cols.start, o.n_cols.cols)) for o, _ in mmas))
    if got != sorted(zip(join.parts, want, strict=False)):
        errs.append(f"partition {p.name}: the k-loop's wgmma must write each block's accumulator from that block of "
                    f"B's slot, once each (got {got})")
    at = next(i for i, (o, _) in enumerate(order) if o is join)
    if mmas and order[at][1] != mmas[0][1][:-1]:
        errs.append(f"{where} must stand in the tiles loop right around its k-loop, not {list(order[at][1])}")
    if any(isinstance(o, ir.Mma) for o, _ in order[at:]):
        errs.append(f"{where} must follow its tile's k-loop")
    if any(join.acc in _reads(o) for o, _ in order[:at]):
        errs.append(f"{where} must come before anything that reads {join.acc} (the tile's sum)")
    stray = sorted({n for o, _ in order if o is not join for n in _reads(o) & set(join.parts)})
    if stray:
        errs.append(f"partition {p.name}: {stray} read by other ops than their wgmma and the join")
    return errs
