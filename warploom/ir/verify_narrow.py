"""The verifier's checks of a narrow or fitted tile (ir.Tiling.n_blocks, planner rules 31 and 32): its column blocks,
the options it excludes, the consumers' block accumulators and their wgmma, B's copies of the blocks' rows, and the
stores that keep within the tile's tile_n columns; and of rule 32's 192-row tiles, whose A slot is three 64-row
boxes (`ir.Ring.boxes`)."""

from __future__ import annotations

from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.spec import ALayout


def check_narrow(m: ir.Module) -> list[str]:
    """A narrow or fitted tile (ir.Tiling.n_blocks): column blocks of powers of two from 16 to 256, widest first,
    covering tile_n < BN columns, which are the tile's stride along N (any N: the tiles along N are cdiv(N, tile_n)); a
    K-major B (its slot is sliced by rows, N), native accumulation (promotion adds into column blocks of its own), no
    fused epilogue, swap, 1x2 cluster, grouping or ranged launch (whose reduction writes whole BN-wide boxes into C);
    in a 2x1 cluster the CTAs interleave their rows (`ir.Tiling.interleaved`, ir/verify_cluster.py).
    Each consumer partition has exactly one accumulator per block, at the block's columns, that its k-loop's wgmma
    write (one per block, reading that block of B's slot); each is finished on its own (fixup, epilogue, stores).
    Every TMA store writes a box within one block: origin part * BN / parts inside [start, start + cols) of a block
    and width BN / parts at most the block's (so no box reaches past tile_n, into the next tile's columns).

    Allowed:   tiling(bm=128, bn=256, n_blocks=(128, 32, 16)) over any N (tiles of 176 columns), bf16 or fp8 rowwise
               fast, with split-K or stream-K too, consumers `mma acc_n0 <- b_ring[c][cols 0:128]`,
               `mma acc_n1 <- b_ring[c][cols 128:160]`, `mma acc_n2 <- b_ring[c][cols 160:176]`, each block stored
               in boxes of its width (128, 32, 16).
    Forbidden: n_blocks=(64, 24) (not a power of two); (16, 64) (not widest first); (64, 64) at bn=128 (the whole
               tile); with swap_ab, a 1x2 cluster or a ranged launch; an N-major B; promoted fp8; a fused epilogue; a
               block without its wgmma, or a wgmma over other columns; a 64-wide store of the 16-wide block at
               column 160 (it would write columns 176..223, the next tile's)."""
    t, errs = m.tiling, _check_boxes(m)
    blocks = t.n_blocks
    if not blocks:
        errs += [f"ring {r.name}: row blocks {r.blocks} in a module without n_blocks" for r in m.rings if r.blocks]
        return errs
    if not ir.narrow_widths(blocks):
        errs.append(f"n_blocks={blocks}: powers of two from 16 to 256, widest first")
        return errs
    width = sum(blocks)
    if width >= t.bn:
        errs.append(f"n_blocks={blocks}: {width} columns, not fewer than the tile's {t.bn} (a whole tile)")
    errs += [f"n_blocks={blocks} with {p}" for p in m.spec.narrow_problems()]
    if t.swap_ab or (t.cluster > 1 and not t.interleaved) or t.grouped or t.ranged:
        errs.append("n_blocks with swap_ab, a 1x2 cluster, a grouped GEMM or a ranged launch")
    want = ir.column_blocks(blocks)
    for r in m.rings:
        if r.blocks and r.blocks != want:
            errs.append(f"ring {r.name}: row blocks {r.blocks}, expected the tile's {want}")
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.TmaLoad) and (o.blocks or m.ring(o.ring).blocks) and o.blocks != want:
                errs.append(f"partition {p.name}: {printer.op(o)} must copy exactly the tile's blocks of B's rows "
                            f"{want}: the slot holds those (`ir.Ring.blocks`), and a wider box would read the next "
                            "tile's")
        if p.role not in (ir.Role.CONSUMER, ir.Role.SEQUENTIAL):
            continue
        errs += _check_blocks(p, want)
        errs += _check_stores(m, p, want)
    return errs


def _check_boxes(m: ir.Module) -> list[str]:
    """A ring whose rows are not a power of two (`ir.Ring.boxes`): only A's, K-major, of 64-row boxes, not in a
    cluster, read by consumer warpgroups of 64 rows each once the consumers are split by rows (each its own box;
    before that the program reads whole slots, and is not lowered: the backend refuses such a read)."""
    errs = []
    for r in m.rings:
        if r.rows & (r.rows - 1) == 0 or r.in_tmem or r.tmem:
            continue
        if r.tensor is not ir.Tensor.A or r.rows % 64 or m.spec.a_layout is not ALayout.K_MAJOR \
                or (m.tiling.cluster > 1 and not m.tiling.interleaved):
            errs.append(f"ring {r.name}: {r.rows} rows, not a power of two: only a K-major A's ring outside a cluster "
                        "(or in an interleaved one) may be stored as 64-row boxes (rule 32's 192-row tile)")
            continue
        for p in m.partitions:
            reads = [o for o, _ in ir.walk(p.body) if isinstance(o, ir.Mma) and o.a_ring == r.name]
            split = any(q.rows is not None for q in m.partitions)
            if reads and split and (p.rows is None or p.rows.rows != 64 or p.rows.start % 64):
                errs.append(f"partition {p.name}: reads ring {r.name} of {r.rows}-row slots stored as 64-row boxes, "
                            "but its rows are not one box (one consumer partition per warpgroup)")
    return errs


def _check_blocks(p: ir.Partition, want: tuple[ir.ColBlock, ...]) -> list[str]:
    """One consumer's block accumulators and their wgmma: one accumulator at each block's columns, written by one
    wgmma each that reads that block of B's slot."""
    errs = []
    got = sorted((a.col0, a.cols) for a in p.accumulators)
    if got != [(cb.start, cb.cols) for cb in want]:
        errs.append(f"partition {p.name}: accumulators at columns {got}, expected one per block {want}")
    accs = {a.name: a for a in p.accumulators}
    for o, _ in ir.walk(p.body):
        if isinstance(o, ir.Mma):
            a = accs.get(o.acc)
            if a is None or o.n_cols is None or (o.n_cols.start, o.n_cols.cols) != (a.col0, a.cols):
                errs.append(f"partition {p.name}: {printer.op(o)} must read its accumulator's block of B's slot")
    mmas = sorted(o.acc for o, _ in ir.walk(p.body) if isinstance(o, ir.Mma))
    if mmas != sorted(accs):
        errs.append(f"partition {p.name}: one wgmma per block accumulator a k-block (got {mmas})")
    return errs


def _check_stores(m: ir.Module, p: ir.Partition, want: tuple[ir.ColBlock, ...]) -> list[str]:
    """Each TMA store's box within one block of the tile."""
    errs = []
    buffers = {b.name: b for b in m.buffers}
    for o, _ in ir.walk(p.body):
        if not isinstance(o, ir.TmaStore) or o.buffer not in buffers:
            continue
        start, cols = o.part * (m.tiling.bn // o.parts), buffers[o.buffer].cols
        if not any(cb.start <= start and start + cols <= cb.start + cb.cols for cb in want):
            errs.append(f"partition {p.name}: {printer.op(o)} writes columns [{start}, {start + cols}) of the "
                        f"tile, across its blocks {[(cb.start, cb.start + cb.cols) for cb in want]} (past tile_n "
                        f"= {m.tiling.tile_n}, it would write the next tile's)")
    return errs
