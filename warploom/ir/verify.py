"""The schedule IR verifier, run after every pass.

`structural` holds at every stage: names resolve, cursors belong to the partition using them, depths
agree, exactly one default partition, loads fill rings of their own tensor. `complete` holds for a
finished kernel: every ring has a producer and a consumer partition, every wait a matching arrival on
another partition, expect-tx bytes equal the bytes loaded on that barrier, arrival counts match the
arriving partitions, no accumulator is read with wgmma in flight, no partition exits with a TMA store
in flight, blockwise scale copies precede the arrival that can complete their stage, and registers and
shared memory fit the device.

Allowed (complete):   wait ready[c] phase(c) / wgmma.async acc += a[c] @ b[c] / wgmma_wait 1 / ...
Forbidden (complete): epilogue acc after wgmma.async without wgmma_wait pending=0 in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

from warploom.device import TMEM_COLUMNS, DeviceInfo
from warploom.dtypes import DType
from warploom.epilogue.graph import OutputLayout
from warploom.errors import VerificationError
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.ir.verify_amax import check_amax_pass
from warploom.ir.verify_cluster import check_cluster
from warploom.ir.verify_narrow import check_narrow
from warploom.ir.verify_promote import check_partials
from warploom.ir.verify_scales import check_scale_partition, check_tmem_scales
from warploom.ir.warps import WarpMask, affine_basis, axis_aligned, fewest_copies, uncovered_rows
from warploom.spec import SCALE_BLOCK, Grouping
from warploom.target import Target

GROUPS = OutputLayout.GROUPS


def structural(m: ir.Module) -> list[str]:
    errs: list[str] = []
    for kind, items in (("ring", m.rings), ("buffer", m.buffers), ("barrier", m.barriers),
                        ("partition", m.partitions)):
        names = [i.name for i in items]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            errs.append(f"duplicate {kind} names {sorted(dup)}")
    defaults = [p.name for p in m.partitions if p.default]
    if len(defaults) != 1:
        errs.append(f"exactly one default partition expected, got {defaults}")
    ring_names = {r.name: r for r in m.rings}
    bar_names = {b.name: b for b in m.barriers}
    bks = m.spec.scale.k_blocks
    if bks and m.tiling.bk not in bks:
        want = " or ".join(map(str, bks))
        errs.append(f"{m.spec.scale.value} scales take a k-block of {want} elements of K: bk={m.tiling.bk}, "
                    f"expected {want}")
    errs += _check_split_k(m)
    errs += _check_swap(m)
    errs += _check_stream_k(m)
    errs += check_narrow(m)
    errs += _check_grouped(m)
    errs += _check_rowwise(m)
    errs += check_amax_pass(m)
    errs += check_cluster(m)
    errs += _check_declared_target(m)
    errs += _check_dependent_launch(m)
    for b in m.barriers:
        for rn in b.rings:
            if rn not in ring_names:
                errs.append(f"barrier {b.name} guards unknown ring {rn}")
            elif ring_names[rn].depth != b.depth:
                errs.append(f"barrier {b.name} has depth {b.depth} but ring {rn} has {ring_names[rn].depth}")
    for p in m.partitions:
        curs = {c.name: c for c in p.cursors}
        accs = {a.name for a in p.accumulators}
        where = f"partition {p.name}"

        def slot(s: ir.Slot, depth: int, what: str, where: str = where, curs: dict = curs) -> None:
            c = curs.get(s.cursor)
            if c is None:
                errs.append(f"{where}: {what} uses cursor {s.cursor!r} it does not own")
            elif c.depth != depth:
                errs.append(f"{where}: {what} indexes depth {depth} with cursor {c.name} of depth {c.depth}")

        for o, loops in ir.walk(p.body):
            line = f"{type(o).__name__}"
            match o:
                case ir.Wait() | ir.Arrive() | ir.ArriveExpectTx():
                    if o.barrier not in bar_names:
                        errs.append(f"{where}: {line} on unknown barrier {o.barrier}")
                    else:
                        slot(o.slot, bar_names[o.barrier].depth, f"{line} {o.barrier}")
                    if isinstance(o, ir.Wait) and o.parity.cursor != o.slot.cursor:
                        errs.append(f"{where}: wait {o.barrier} slot and parity use different cursors")
                case ir.TmaLoad():
                    r = ring_names.get(o.ring)
                    if r is None:
                        errs.append(f"{where}: load into unknown ring {o.ring}")
                        continue
                    if r.tensor is not o.tensor:
                        errs.append(f"{where}: load of {o.tensor.value} into ring {r.name} of {r.tensor.value}")
                    slot(o.slot, r.depth, f"load into {r.name}")
                    if o.barrier is not None and o.barrier not in bar_names:
                        errs.append(f"{where}: load completes unknown barrier {o.barrier}")
                case ir.TdmLoad():
                    r = ring_names.get(o.ring)
                    if r is None or r.tensor is not o.tensor:
                        errs.append(f"{where}: tdm_load of {o.tensor.value} into {o.ring}, not a ring of it")
                    else:
                        slot(o.slot, r.depth, f"tdm_load into {r.name}")
                    if o.ahead < 0:
                        errs.append(f"{where}: tdm_load {o.ahead} k-blocks ahead: copies run ahead of the math, "
                                    "never behind it")
                case ir.TdmWait():
                    if o.pending < 0 or o.ahead < 0:
                        errs.append(f"{where}: {printer.op(o)}: pending and ahead are counts, at least 0")
                case ir.Mma() | ir.TcMma() | ir.Wmma():
                    kind = {ir.Mma: "wgmma", ir.TcMma: "tcgen05", ir.Wmma: "wmma"}[type(o)]
                    for rn, t in ((o.a_ring, ir.Tensor.A), (o.b_ring, ir.Tensor.B)):
                        r = ring_names.get(rn)
                        if r is None or r.tensor is not t:
                            errs.append(f"{where}: {kind} operand {rn} is not a ring of {t.value}")
                        else:
                            slot(o.slot, r.depth, f"{kind} read of {rn}")
                    if not isinstance(o, ir.TcMma):
                        if o.acc not in accs:
                            errs.append(f"{where}: {kind} into unknown accumulator {o.acc}")
                    else:
                        _tmem_ring(ring_names, o.acc_ring, o.acc_slot, f"{where}: tcgen05 MMA into", slot, errs)
                        if o.release is not None and o.release not in bar_names:
                            errs.append(f"{where}: tcgen05 MMA releases unknown barrier {o.release}")
                        if o.release_scales is not None and o.release_scales not in bar_names:
                            errs.append(f"{where}: tcgen05 MMA releases unknown barrier {o.release_scales}")
                        if o.scales is not None and o.scales.slot is not None:  # seed 000: tensor-memory scale rings
                            for rn, t in ((o.scales.a, ir.Tensor.SCALE_A), (o.scales.b, ir.Tensor.SCALE_B)):
                                r = ring_names.get(rn)
                                if r is None or not r.tmem or r.tensor is not t:
                                    errs.append(f"{where}: tcgen05 MMA scale operand {rn} is not a tensor-memory "
                                                f"scale ring of {t.value}")
                                else:
                                    slot(o.scales.slot, r.depth, f"tcgen05 scale read of {rn}")
                        if p.role is not ir.Role.MMA:
                            errs.append(f"{where}: tcgen05 MMA in a {p.role.value} partition (one MMA warp issues "
                                        "them)")
                case ir.StoreTmemScales():
                    r = ring_names.get(o.ring)
                    if r is None or not r.tmem or r.tensor is not o.tensor:
                        errs.append(f"{where}: store_tmem_scales of {o.tensor.value} into {o.ring}, not a "
                                    "tensor-memory scale ring of it")
                    else:
                        slot(o.slot, r.depth, f"store_tmem_scales into {r.name}")
                    if o.barrier not in bar_names:
                        errs.append(f"{where}: store_tmem_scales published by unknown barrier {o.barrier}")
                case ir.Commit():
                    if o.barrier not in bar_names:
                        errs.append(f"{where}: tcgen05_commit to unknown barrier {o.barrier}")
                    else:
                        slot(o.slot, bar_names[o.barrier].depth, f"tcgen05_commit {o.barrier}")
                case ir.LoadTmem():
                    _tmem_ring(ring_names, o.acc_ring, o.slot, f"{where}: load_tmem from", slot, errs)
                    acc = next((a for a in p.accumulators if a.name == o.acc), None)
                    ring = ring_names.get(o.acc_ring)
                    if acc is None:
                        errs.append(f"{where}: load_tmem into unknown accumulator {o.acc}")
                    elif ring is not None and ring.tensor is ir.Tensor.PARTIAL and o.parts >= 1 and (
                            acc.cols != ring.cols // o.parts):
                        # (a partial's register block is reused for every block: only its width must agree)
                        errs.append(f"{where}: load_tmem of block {o.part} of {o.parts} of {o.acc_ring} into {o.acc}, "
                                    f"which is {acc.cols} columns wide, not {ring.cols // o.parts}")
                    elif ring is not None and ring.tensor is not ir.Tensor.PARTIAL and o.parts >= 1 and (
                            acc.col0, acc.cols) != (o.part * ring.cols // o.parts, ring.cols // o.parts):
                        # (an accumulator's block must be the one it holds: the epilogue places it by its col0)
                        errs.append(f"{where}: load_tmem of block {o.part} of {o.parts} of {o.acc_ring} into {o.acc}, "
                                    f"which holds tile columns {acc.col0}..{acc.col0 + acc.cols - 1}")
                case ir.CopyScales():
                    r = ring_names.get(o.ring)
                    if r is None or r.tensor is not o.tensor or o.tensor not in (ir.Tensor.SCALE_A, ir.Tensor.SCALE_B):
                        errs.append(f"{where}: copy_scales of {o.tensor.value} into {o.ring}, not a scale ring of it")
                    else:
                        slot(o.slot, r.depth, f"copy_scales into {r.name}")
                    if o.barrier is not None and o.barrier not in bar_names:
                        errs.append(f"{where}: copy_scales tracked by unknown barrier {o.barrier}")
                    if not m.spec.scale.is_blockwise:
                        errs.append(f"{where}: copy_scales but the spec's recipe {m.spec.scale.value} is not blockwise")
                case ir.Promote():
                    for a in (o.src, o.dst):
                        if a not in accs:
                            errs.append(f"{where}: promote uses unknown accumulator {a}")
                    if o.scales is not None:
                        for rn, t in ((o.scales.a_ring, ir.Tensor.SCALE_A), (o.scales.b_ring, ir.Tensor.SCALE_B)):
                            r = ring_names.get(rn)
                            if r is None or r.tensor is not t:
                                errs.append(f"{where}: promote scale operand {rn} is not a ring of {t.value}")
                            else:
                                slot(o.scales.slot, r.depth, f"promote read of {rn}")
                                sub = o.scales.sub
                                if (sub is None) != (r.rows == 1) or (sub is not None and not 0 <= sub < r.rows):
                                    errs.append(f"{where}: promote reads slice {sub} of {rn}, whose slots hold "
                                                f"{r.rows} slice(s) of scales")
                        _check_scale_block(m, p, o, where, errs)
                    elif m.spec.scale.is_blockwise and o.dst in accs:
                        errs.append(f"{where}: promote {o.dst} without scales, but the recipe "
                                    f"{m.spec.scale.value} scales every k-block")
                case (ir.Epilogue() | ir.StoreTile() | ir.ZeroAcc() | ir.LoadOperand() | ir.ApplyEpilogue()
                      | ir.PrefetchOperand() | ir.FoldAmax() | ir.StoreScales()):
                    if o.acc not in accs:
                        errs.append(f"{where}: {line} of unknown accumulator {o.acc}")
                    _check_fused(m, o, where, line, errs)
                case ir.StoreSmem() | ir.TmaStore():
                    if o.buffer not in {b.name for b in m.buffers}:
                        errs.append(f"{where}: {line} uses unknown buffer {o.buffer}")
                    g = m.spec.epilogue
                    halved = g is not None and g.gate_up() is not None and o.output is not None
                    if isinstance(o, ir.TmaStore) and o.halved != halved:
                        errs.append(f"{where}: {line}: " + ("a gate/up graph's output is (M, N / 2): its store "
                                                            "must be halved" if halved else
                                                            "a halved store of a full-width output"))
                    if g is not None and o.output is not None and 0 <= o.output < len(g.outputs) and \
                            g.outputs[o.output].layout is GROUPS:
                        errs.append(f"{where}: {line}: output {o.output} is a groups output (scales), "
                                    "stored by store_scales, not through a staging buffer")
                case ir.Advance() | ir.SkipTiles():
                    if o.cursor not in curs:
                        errs.append(f"{where}: advances cursor {o.cursor!r} it does not own")
            gfx = isinstance(o, (ir.TdmLoad, ir.Wmma, ir.TdmWait, ir.SyncWarps))
            if gfx and p.role not in (ir.Role.WORKGROUP, ir.Role.SEQUENTIAL):
                errs.append(f"{where}: {printer.op(o)} in a {p.role.value} partition: TDM copies and wmma are "
                            "gfx1250's, in its one workgroup partition")
            if not gfx and p.role is ir.Role.WORKGROUP and (isinstance(o, _NO_GFX1250_LOWERING) or (
                    isinstance(o, ir.LoadOperand) and o.buffer is not None)):
                errs.append(f"{where}: {printer.op(o)} in a gfx1250 workgroup partition: an NVIDIA op (TMA, "
                            "mbarriers, staging buffers, promotion)")
            if p.role is ir.Role.WORKGROUP and isinstance(o, ir.Wmma) and o.overwrite is not ir.Guard.FIRST_K:
                # (the backend starts each tile's accumulator at zero and always accumulates)
                errs.append(f"{where}: {printer.op(o)}: a gfx1250 wmma overwrites its accumulator exactly at a "
                            "tile's first k-block")
            if isinstance(o, (ir.Arrive,)) and o.guard is not ir.Guard.ALWAYS and ir.LoopKind.K not in loops \
                    and ir.LoopKind.FLAT not in loops:
                errs.append(f"{where}: guard {o.guard.value} outside a k-loop")
    return errs


# Ops a gfx1250 (WORKGROUP) partition has no lowering for: mbarriers, TMA, wgmma, tcgen05, the TMA-store epilogue,
# promotion.
_NO_GFX1250_LOWERING = (ir.Wait, ir.Arrive, ir.ArriveExpectTx, ir.TmaLoad, ir.CopyScales, ir.Mma, ir.MmaWait,
                        ir.Promote, ir.TcMma, ir.Commit, ir.LoadTmem, ir.StoreSmem, ir.FenceAsync, ir.TmaStore,
                        ir.StoreWait, ir.SkipTiles, ir.PrefetchOperand, ir.ZeroAcc)


def _check_tdm(m: ir.Module, p: ir.Partition, errs: list[str]) -> None:
    """gfx1250's software pipeline (passes/gfx1250.py), statically; the simulator checks every run of it exactly.

    The partition's one cursor counts the k-blocks it has read, so the copy of block k + a must fill slot c + a, and
    a < depth (a copy `depth` blocks ahead overwrites the slot the wmma is about to read); the tile's prologue copies
    every block before the k-loop's first copy. In the k-loop, a sync_warps stands between the tdm_wait and the wmma
    (each warp waits for its own shares of a copy) and before a copy into the slot the previous block was read
    from. The wait leaves at most `pending` copies in flight: no
    more than the copies of the blocks that can have been issued behind block k, and its tail (`ahead`) covers
    those blocks, so near the tile's end, where fewer were issued, it waits for all."""
    depth = {c.name: c.depth for c in p.cursors}
    where = f"partition {p.name}"
    for tiles in (s for s in p.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES):
        prologue = [s for s in tiles.body if isinstance(s, ir.TdmLoad)]
        k_loops = [s for s in tiles.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K]
        for o in prologue + [s for lp in k_loops for s in lp.body if isinstance(s, ir.TdmLoad)]:
            d = depth.get(o.slot.cursor, 0)
            if o.slot.offset != o.ahead:
                errs.append(f"{where}: {printer.op(o)} copies block k+{o.ahead} into slot {printer.slot(o.slot)}: the "
                            f"cursor counts blocks read, so that block's slot is {o.slot.cursor}+{o.ahead}")
            if not 0 <= o.ahead < d:
                errs.append(f"{where}: {printer.op(o)} runs {o.ahead} blocks ahead of a {d}-slot ring: it would "
                            "overwrite a slot still to be read")
        for lp in k_loops:
            # The loop copies blocks k + a; the prologue must copy each tensor's blocks 0 .. a - 1 of the tile.
            for t in {s.tensor: None for s in lp.body if isinstance(s, ir.TdmLoad)}:
                a = min(s.ahead for s in lp.body if isinstance(s, ir.TdmLoad) and s.tensor is t)
                have = {o.ahead for o in prologue if o.tensor is t}
                missing = sorted(set(range(a)) - have)
                if missing:
                    errs.append(f"{where}: the k-loop copies {t.value} from block k+{a}, but the tile's prologue "
                                f"copies only its blocks {sorted(have)}: blocks {missing} are never copied")
            # A wait counts one warp's copies: with warp masks (seed 004) the fewest any issuing warp has per block.
            per_block = fewest_copies([s.warps for s in lp.body if isinstance(s, ir.TdmLoad)], p.warps) or 1
            # The blocks whose copies can be issued behind block k when its wait runs: the prologue's, the loop's
            # copies before the wait (k + a), and those after it in the previous iteration (k - 1 + a).
            first_wait = next((i for i, s in enumerate(lp.body) if isinstance(s, ir.TdmWait)), len(lp.body))
            behind = max([o.ahead for o in prologue] + [s.ahead - (i > first_wait) for i, s in enumerate(lp.body)
                                                         if isinstance(s, ir.TdmLoad)] + [0])
            waited = synced = False
            for s in lp.body:
                if isinstance(s, ir.TdmWait):
                    waited, synced = True, False
                    if s.pending > per_block * behind:
                        errs.append(f"{where}: {printer.op(s)}: at most {behind} blocks' copies ({per_block * behind}) "
                                    "are issued behind the block it waits for, so it may return before that block")
                    if s.pending and s.ahead < behind:
                        errs.append(f"{where}: {printer.op(s)}: near the tile's end fewer than {behind} blocks were "
                                    f"issued behind the one it waits for; its tail must start {behind} blocks out")
                elif isinstance(s, ir.SyncWarps):
                    synced = True
                elif isinstance(s, ir.TdmLoad):
                    if s.ahead == depth.get(s.slot.cursor, 0) - 1 and not synced:
                        errs.append(f"{where}: {printer.op(s)} overwrites the slot the previous block was read from "
                                    "with no sync_warps before it in the k-loop: a warp may still be reading it")
                elif isinstance(s, ir.Wmma) and not (waited and synced):
                    errs.append(f"{where}: {printer.op(s)} without a tdm_wait and then a sync_warps before it in the "
                                "k-loop: its slot may not have landed in every warp's share")


def _check_tdm_warps(m: ir.Module, p: ir.Partition, errs: list[str]) -> None:
    """gfx1250's warp-usage masks (seed 004, ir/warps.py): a copy's `warps` must be an affine subspace of the warp
    ids (see `affine_basis`: {base XOR span(basis)}, e.g. 0b0001, 0b0101, 0b1100; not 0b0111 or 0b1011) whose bits
    vary one at a time (Triton selects the warps by one mask check: not 0b1001), and after re-tiling over its K
    warps the partition's warps must copy every row of the block once (`uncovered_rows`: a warp the partition does
    not have copies nothing). A tdm_wait retires the copies of the warps it names: exactly the warps that issue
    copies (a warp that issued nothing has nothing to wait for; an issuing warp left out never learns its shares
    landed), and its `pending` counts one warp's copies (at most the fewest any issuing warp has behind)."""
    where = f"partition {p.name}"
    every = WarpMask.every(p.warps)
    issuing = 0
    for o, _ in ir.walk(p.body):
        if not isinstance(o, ir.TdmLoad):
            continue
        mask = o.warps or every
        issuing |= mask.bits
        if o.warps is None:
            continue
        if affine_basis(mask) is None:
            errs.append(f"{where}: {printer.op(o)}: warps {mask} = {list(mask.members)} is not an affine subspace of "
                        "the warp ids (a set {base XOR span(basis)} of 2^d warps, closed under XOR). Fix: a mask such "
                        "as 0b0001, 0b0011, 0b0101 or 0b1111")
            continue
        if not axis_aligned(mask):
            errs.append(f"{where}: {printer.op(o)}: warps {mask} is affine but its warps differ in several bits at "
                        "once; Triton's warp_used_hint selects warps by whole bits (e.g. 0b0101, not 0b1001)")
        rows = m.ring(o.ring).rows
        gaps = uncovered_rows(mask, p.warps, rows)
        if gaps:
            missing = ", ".join(f"{g.start}..{g.stop - 1}" for g in gaps)
            errs.append(f"{where}: {printer.op(o)}: warps {mask} re-tiled over its {len(mask.members)} warps leave "
                        f"rows {missing} of the {rows}-row block uncopied (the partition has warps 0..{p.warps - 1})")
    _fused_copies(p, p.body, errs)
    if not issuing:
        return
    for o, _ in ir.walk(p.body):
        if not isinstance(o, ir.TdmWait):
            continue
        waits = (o.warps or every).bits
        if waits & ~issuing:
            idle = WarpMask(waits & ~issuing)
            errs.append(f"{where}: {printer.op(o)} waits on warps {list(idle.members)}, which issue no tdm_load")
        if issuing & ~waits:
            left = WarpMask(issuing & ~waits)
            errs.append(f"{where}: {printer.op(o)} leaves out warps {list(left.members)}, which issue tdm_loads: "
                        "they never learn their shares landed")


def _fused_copies(p: ir.Partition, body: tuple[ir.Stmt, ...], errs: list[str]) -> None:
    """A fused copy (adjacent `fused` tdm_loads, Triton 3.9's ``tdm.async_load_fused``) has 2 to 4 members of one
    k-block, each naming its warps, no warp in two (each warp issues one member's instruction)."""
    runs: list[list[ir.TdmLoad]] = [[]]
    for s in body:
        if isinstance(s, ir.Loop):
            _fused_copies(p, s.body, errs)
        if isinstance(s, ir.TdmLoad) and s.fused and (not runs[-1] or runs[-1][0].ahead == s.ahead):
            runs[-1].append(s)
        else:
            runs.append([s] if isinstance(s, ir.TdmLoad) and s.fused else [])
    for run in (r for r in runs if r):
        text = "; ".join(printer.op(o) for o in run)
        if not 2 <= len(run) <= 4:
            errs.append(f"partition {p.name}: fused copy [{text}] has {len(run)} member(s); "
                        "tdm.async_load_fused takes 2 to 4")
        seen = 0
        for o in run:
            if o.warps is None or o.warps.bits & seen:
                errs.append(f"partition {p.name}: fused copy [{text}]: each member needs its own warps, disjoint "
                            f"from the others' ({printer.op(o)} has {o.warps})")
            seen |= o.warps.bits if o.warps else 0


def _tmem_ring(rings: dict[str, ir.Ring], name: str, s: ir.Slot, what: str, slot: Any, errs: list[str]) -> None:
    r = rings.get(name)
    if r is None or not r.in_tmem:
        errs.append(f"{what} {name}, not a tensor-memory ring")
    else:
        slot(s, r.depth, f"{what.split(': ')[-1]} {name}")


def check_sm100(m: ir.Module) -> list[str]:
    """sm_100a's own rules of a complete module (its declaration, `warploom.targets`, hands them to `check`):
    tensor-memory rings fit the SM's 512 columns, hold whole BM x BN fp32 tiles of 128 rows (one CTA's tcgen05 MMA)
    and overlap no scale buffer, the scale buffers follow ir/verify_scales.py's rules, and tensor-memory partials
    ir/verify_promote.py's."""
    errs = []
    if m.tmem_columns > TMEM_COLUMNS:
        scales = " and scales" if m.tmem_scales else ""
        errs.append(f"tensor memory: {m.tmem_columns} columns of accumulators{scales}, the SM has {TMEM_COLUMNS}")
    # The accumulator ring takes columns 0 ... depth * cols; each scale buffer its own columns after them.
    spans = [(0, sum(r.depth * r.cols for r in m.rings if r.in_tmem), "the accumulators")]
    spans += [(b.col0, b.col0 + b.columns, f"scale buffer {b.name}") for b in m.tmem_scales]
    # (seed 000's scale rings take no fixed columns: Triton allocates them after the accumulators, and
    # tmem_columns counts them against 512 above)
    for i, (lo, hi, what) in enumerate(spans):
        errs += [f"tensor memory: {what} (columns {lo}..{hi - 1}) overlaps {w2} (columns {l2}..{h2 - 1})"
                 for l2, h2, w2 in spans[i + 1:] if lo < h2 and l2 < hi]
    for r in m.rings:
        if r.in_tmem and ((r.rows, r.cols) != (m.tiling.bm, m.tiling.bn) or r.rows != 128):
            errs.append(f"tensor-memory ring {r.name} holds ({r.rows}, {r.cols}) tiles; expected the (128, "
                        f"{m.tiling.bn}) tile")
    return errs + check_tmem_scales(m) + check_scale_partition(m) + check_partials(m)


def check_gfx1250(m: ir.Module) -> list[str]:
    """gfx1250's own rules of a complete module (its declaration hands them to `check`): its workgroup partition
    sets no register budget, pipelines its TDM copies soundly (`_check_tdm`) and names its copies' warps soundly
    (`_check_tdm_warps`)."""
    errs: list[str] = []
    for p in m.partitions:
        if p.role is not ir.Role.WORKGROUP:
            continue
        if p.regs:
            errs.append(f"partition {p.name}: regs={p.regs}: a gfx1250 partition has no register budget (setmaxnreg "
                        "is NVIDIA's)")
        _check_tdm(m, p, errs)
        _check_tdm_warps(m, p, errs)
    return errs


def _check_device_target(m: ir.Module, device: DeviceInfo) -> list[str]:
    """Only a device of the module's target runs it."""
    if m.target is device.target:
        return []
    what = _TARGET_OPS[m.target]
    return [f"{m.target.with_article} schedule ({what}) for {device.name} ({device.arch}), which runs "
            f"{device.target} schedules and has no {what}"]


def _check_declared_target(m: ir.Module) -> list[str]:
    """The structure agrees with the target the plan declared: tensor-memory rings are sm_100a's, a WORKGROUP
    partition gfx1250's (its passes make them; a module of another target that has one was built wrong)."""
    errs = [f"ring {r.name} in tensor memory in {m.target.with_article} schedule (tensor memory is sm_100a's)"
            for r in m.rings if r.in_tmem and m.target is not Target.SM100A]
    errs += [f"partition {p.name} is a workgroup partition in {m.target.with_article} schedule (gfx1250's)"
             for p in m.partitions if p.role is ir.Role.WORKGROUP and m.target is not Target.GFX1250]
    return errs


def _check_dependent_launch(m: ir.Module) -> list[str]:
    """A module launched with PDL (`ir.Module.dependent_launch`) may start while the previous grid still writes its
    operands or reads its output: every partition's first op is the grid-dependency wait, ahead of any access to
    global memory. A wait belongs to such a module only (elsewhere it promises an overlap no launch makes), once a
    partition, and PDL is NVIDIA's (griddepcontrol: sm_90a and later)."""
    errs: list[str] = []
    if m.dependent_launch and m.target is Target.GFX1250:
        errs.append("dependent_launch in a gfx1250 schedule: programmatic dependent launch (griddepcontrol) is "
                    "NVIDIA's, sm_90a and later")
    for p in m.partitions:
        waits = sum(isinstance(o, ir.GridDependencyWait) for o, _ in ir.walk(p.body))
        first = p.body[0] if p.body else None
        if m.dependent_launch and not isinstance(first, ir.GridDependencyWait):
            head = "nothing" if first is None else f"a {first.kind.value} loop" if isinstance(first, ir.Loop) \
                else printer.op(first)
            errs.append(f"partition {p.name}: a dependent launch (PDL) starts while the previous grid may still "
                        f"write this kernel's operands or read its output, but the partition begins with {head}, "
                        "not grid_dependency_wait: wait before touching memory")
        if m.dependent_launch and waits > 1:
            errs.append(f"partition {p.name}: {waits} grid_dependency_waits; one, its first op, is the wait")
        if waits and not m.dependent_launch:
            errs.append(f"partition {p.name}: grid_dependency_wait in a module not launched dependently "
                        "(dependent_launch off): the wait has nothing to wait for")
    return errs


# What makes a schedule its target's, for the verifier's device check.
_TARGET_OPS = {"sm_90a": "wgmma", "sm_100a": "tensor-memory accumulators", "gfx1250": "TDM copies and wmma"}


def _check_swap(m: ir.Module) -> list[str]:
    """A swapped module (ir.Tiling.swap_ab) runs a problem that can swap back (`GemmSpec.swap_problems`: its spec
    is the swapped one, whose own swap is the problem's), whole tiles, and stages C's blocks transposed: each
    staging buffer of C is (columns of the block, rows of the tile)."""
    t = m.tiling
    # The problem's (N,) bias runs along a swapped module's rows, and along an unswapped one's columns.
    wrong = ir.EpilogueStep.ADD_BIAS if t.swap_ab else ir.EpilogueStep.ADD_ROW_BIAS
    errs = [f"partition {p.name}: {printer.op(o)} in a{' swapped' if t.swap_ab else 'n unswapped'} module: the bias "
            f"runs along its {'rows' if t.swap_ab else 'columns'}"
            for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) and wrong in o.steps]
    if not t.swap_ab:
        return errs
    errs += [f"swap_ab with {p}" for p in m.spec.swap_problems(tmem_scales=m.blackwell)]
    if t.split_k > 1 or t.ranged:
        errs.append("swap_ab with split-K or a ranged kernel (its stores are whole tiles of C)")
    for bf in m.buffers:
        if bf.tensor is ir.Tensor.C and (bf.cols % 64 or bf.rows > t.bn):
            errs.append(f"swap_ab: buffer {bf.name} is ({bf.rows}, {bf.cols}); a transposed block of C is (at most "
                        f"BN={t.bn}, the tile's rows)")
    return errs


def _check_rowwise(m: ir.Module) -> list[str]:
    """A fused rowwise quantization's amax is the whole row's, folded within one tile (planner rule 27): the tile
    must hold every column of N, whole (no split or swap cuts its sum or turns its rows).

    Allowed:   N=200 at BN=256, whole tiles; N=300 at BN=256 in rule 29's first pass (`ir.Module.amax_pass`: its
               tiles add their columns' amax to the row's by an atomic max, and a cast kernel divides after them).
    Forbidden: N=300 at BN=256 otherwise (two tiles along N would each scale by their half's amax)."""
    g, t = m.spec.epilogue, m.tiling
    if g is None or not g.rowwise():
        return []
    errs = []
    if m.spec.n > t.bn and m.amax_pass is None:
        errs.append(f"a rowwise quantization's tile must hold its whole row: N={m.spec.n} > BN={t.bn} (each tile "
                    "along N would scale by its own columns' amax)")
    if t.split_k > 1 or t.ranged or t.swap_ab:
        errs.append("a rowwise quantization with split-K, a ranged kernel or swap-AB: its amax is of whole rows "
                    "of the whole sum")
    return errs


def _check_stream_k(m: ir.Module) -> list[str]:
    """Stream-K (ir.Tiling.stream_k): whole tiles of its own, so no split-K, ranges, swap or ping-pong; a Fixup only
    there, directly in a tiles loop after its k-loop and before anything else reads the accumulators (the epilogue
    must see the tile's whole sum, and a contributor skips what follows it), naming accumulators the partition owns;
    the workspace's int32 offsets (grid x BM x BN) in range; no more pieces than a tile has k-blocks."""
    t, errs = m.tiling, []
    if t.sk_waves and not t.stream_k:
        errs.append(f"sk_waves={t.sk_waves} without stream_k: only stream-K shares a region of tiles")
    if t.stream_k:
        if t.stream_k < 2:
            errs.append(f"stream_k={t.stream_k}: a shared tile is cut into at least 2 pieces")
        if t.split_k > 1 or t.ranged or t.swap_ab:
            errs.append("stream_k with split-K, a ranged launch or swap_ab (stream-K units cover whole tiles of C)")
        if t.sk_waves not in (0, 1):
            errs.append(f"sk_waves={t.sk_waves}: 0, or 1 whole wave joining the shared region")
        if t.grid * t.bm * t.bn >= 2**31:
            errs.append(f"stream_k: a workspace of {t.grid} x {t.bm} x {t.bn} fp32 passes 32-bit offsets")
        k_tiles = -(-m.spec.k // t.bk)
        if t.stream_k > k_tiles:
            # More CTAs than the shared tiles' iterations leaves some with an empty range: a finisher would wait
            # for the partial of a peer that never stores one (a hang on the GPU).
            errs.append(f"stream_k={t.stream_k}: more pieces than a tile's {k_tiles} k-blocks of {t.bk} (K={m.spec.k})")
    for p in m.partitions:
        accs = {a.name for a in p.accumulators}
        for loop in _loops(p.body):
            for i, s in enumerate(loop.body):
                if not isinstance(s, ir.Fixup):
                    continue
                where = f"partition {p.name}: {printer.op(s)}"
                if not t.stream_k:
                    errs.append(f"{where} in a module without stream-K")
                if loop.kind is not ir.LoopKind.TILES or loop.step != 1:
                    errs.append(f"{where} must stand directly in a (non-ping-pong) tiles loop")
                before = loop.body[:i]
                if not any(isinstance(x, ir.Loop) and x.kind is ir.LoopKind.K for x in before):
                    errs.append(f"{where} stands before its tile's k-loop: it joins the unit's finished sum")
                if any(isinstance(x, (ir.Epilogue, ir.StoreTile, ir.StoreSmem, ir.ApplyEpilogue)) for x in before):
                    errs.append(f"{where} follows an op that reads the accumulator as the tile's sum")
                if set(s.accs) - accs or not s.accs:
                    errs.append(f"{where} names accumulators {sorted(set(s.accs) - accs)} it does not own")
        if t.stream_k and p.role in (ir.Role.CONSUMER, ir.Role.SEQUENTIAL) and not any(
                isinstance(o, ir.Fixup) for o, _ in ir.walk(p.body)):
            errs.append(f"partition {p.name}: a stream-K consumer without a fixup would store partial sums as tiles")
    return errs


def _check_grouped(m: ir.Module) -> list[str]:
    """A grouped module (ir.Tiling.grouping) runs tiles of one group each, on sm_90a: its tile ids come from the
    group scan, so no split-K, ranges, swap or ping-pong (their tile arithmetic counts C's tiles); stream-K only
    M-grouped or masked (its units are tile ids and k-blocks, each placed by the scan; every tile has K's k-blocks);
    the spec's grouping matches the tiling's, and the spec is one a grouped kernel takes
    (`GemmSpec.grouped_problems`).

    Allowed:   tiling(grouping=offsets or masked) over a bf16, fp8 rowwise or fp8 blockwise 1x128 x 128x128
               spec of that grouping, cooperative consumers; with stream_k=2..16 too;
               tiling(grouping=k_offsets) over a bf16, fp16, fp8 rowwise or fp8 blockwise 1x128 x 128x128 spec
               grouped=k_offsets; on any of them a fused epilogue with one output, its per-group operands of
               the module's group count.
    Forbidden: tiling(grouping=offsets, split_k=2); tiling(grouping=k_offsets, stream_k=2); a ping-pong
               consumer's `for tiles[1::2]`; an sm_100a module; a spec `GemmSpec.grouped_problems` refuses; a
               per-group epilogue operand (`OperandSpec.per_group`) in a module that is not grouped, or of another
               group count."""
    t, errs = m.tiling, []
    if t.grouping is not m.spec.grouping:
        errs.append(f"tiling grouping {t.grouping.value} but spec grouping {m.spec.grouping.value}")
    g = m.spec.epilogue
    per_group = [o for o in g.operands if o.per_group] if g is not None else []
    if per_group and (not t.grouped or any(o.shape[0] != m.spec.groups for o in per_group)):
        errs.append(f"per-group epilogue operands ({', '.join(o.name for o in per_group)}) outside a grouped "
                    f"module of as many groups ({m.spec.groups}) as their first dimension: a tile reads "
                    "the slice of its group")
    if not t.grouped:
        return errs
    if t.split_k > 1 or t.ranged or t.swap_ab:
        errs.append("grouping with split-K, a ranged launch or swap_ab (their tiles are C's, not a group's)")
    if t.stream_k and t.grouping is Grouping.K_OFFSETS:
        errs.append("stream-K in a K-grouped module (its tiles' k-blocks are their groups' K ranges, not one count "
                    "for every tile as stream-K's shares need)")
    errs += [f"grouping with {p}" for p in m.spec.grouped_problems()]
    if m.gfx1250:
        errs.append("grouping on gfx1250 (built for sm_90a and sm_100a only)")
    if not m.blackwell:
        errs += [f"grouping on {m.target} with {p}" for p in m.spec.sm90_grouped_problems()]
    if m.blackwell:  # (rule 22 on sm_100a: M-grouped, whole tiles)
        errs += [f"grouping on sm_100a with {p}" for p in m.spec.sm100_grouped_problems()]
        if t.stream_k:
            errs.append("stream-K in a grouped sm_100a module (not built on sm_100a)")
    for p in m.partitions:
        for loop in _loops(p.body):
            if loop.kind is ir.LoopKind.TILES and loop.step != 1:
                errs.append(f"partition {p.name}: a ping-pong tiles loop in a grouped module")
    return errs


def _check_split_k(m: ir.Module) -> list[str]:
    """Split-K (ir.Tiling): every range has a k-block, and units of one count unless the tiling says they differ
    (`uneven_split`, only where K's k-blocks do not divide, and never with a per-column scale copier's flattened
    loop); the units store partial sums, so nothing that is not linear in the accumulator may run before the
    reduction (bias, a fused epilogue, a cast); stores go to the workspace exactly when the k-blocks are split; no
    ping-pong tile skipping (SkipTiles counts whole tiles of k-blocks)."""
    t, errs = m.tiling, []
    splitting = t.split_k > 1
    k_tiles = max(1, -(-m.spec.k // t.bk))
    if t.split_k < 1 or t.split_k > k_tiles:
        errs.append(f"split_k={t.split_k} for {k_tiles} k-blocks: every range needs one")
    elif k_tiles % t.split_k and not t.uneven_split:
        errs.append(f"split_k={t.split_k} does not divide the {k_tiles} k-blocks: units would differ in length "
                    "(uneven_split is off)")
    elif t.uneven_split and not k_tiles % t.split_k:
        errs.append(f"uneven_split with split_k={t.split_k} dividing the {k_tiles} k-blocks (the equal ranges' "
                    "kernel is built there)")
    if t.uneven_split and (not splitting or m.spec.scale.per_column_b):
        errs.append("uneven_split needs split-K and no per-column scales of B (their copier's flattened loop runs "
                    "one count of k-blocks a unit)")
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.TmaStore) and (o.tensor is ir.Tensor.WORKSPACE) != splitting:
                errs.append(f"partition {p.name}: {printer.op(o)} with split_k={t.split_k}: split-K units store "
                            "to the workspace, whole tiles to their outputs")
            if splitting and isinstance(o, ir.Epilogue) and {ir.EpilogueStep.ADD_BIAS,
                                                              ir.EpilogueStep.ADD_ROW_BIAS} & set(o.steps):
                errs.append(f"partition {p.name}: {printer.op(o)} adds the bias to a split-K partial sum "
                            "(it would be added split_k times)")
            if splitting and isinstance(o, (ir.ApplyEpilogue, ir.LoadOperand, ir.PrefetchOperand, ir.SkipTiles)):
                errs.append(f"partition {p.name}: {printer.op(o)} in a split-K kernel (fused epilogues and "
                            "ping-pong need whole tiles)")
    if splitting:
        for b in m.buffers:
            if b.tensor is ir.Tensor.WORKSPACE and b.dtype is not DType.FP32:
                errs.append(f"buffer {b.name} stages {b.dtype.value} partial sums: the workspace is fp32")
    return errs


def _check_scale_block(m: ir.Module, p: ir.Partition, o: ir.Promote, where: str, errs: list[str]) -> None:
    """With one scale per 128 columns, a promoted accumulator block must lie within one 128-column block of B."""
    acc = next((a for a in p.accumulators if a.name == o.dst), None)
    if acc is None or not m.spec.scale.block_b:
        return
    first, last = acc.col0 // SCALE_BLOCK, (acc.col0 + acc.cols - 1) // SCALE_BLOCK
    if first != last:
        errs.append(f"{where}: promote {o.dst} (tile columns {acc.col0}..{acc.col0 + acc.cols - 1}) spans two "
                    f"{SCALE_BLOCK}-column scale blocks of B: split the accumulator at {SCALE_BLOCK} columns")


def _check_fused(m: ir.Module, o: ir.Op, where: str, line: str, errs: list[str]) -> None:
    """Fused-epilogue ops need the spec's graph, and a load must name one of its operands (a store, one of its
    outputs)."""
    g = m.spec.epilogue
    if isinstance(o, ir.StoreTile) and o.output is not None and (g is None or not 0 <= o.output < len(g.outputs)):
        errs.append(f"{where}: {line} of epilogue output {o.output}, which the spec's graph does not have")
    if not isinstance(o, (ir.LoadOperand, ir.ApplyEpilogue, ir.PrefetchOperand, ir.FoldAmax, ir.StoreScales)):
        return
    if g is None:
        errs.append(f"{where}: {line} but the spec has no fused epilogue")
    elif isinstance(o, ir.FoldAmax) and g.group_amax() is None:
        errs.append(f"{where}: {line} but the epilogue graph has no group amax")
    elif isinstance(o, ir.StoreScales) and (not 0 <= o.output < len(g.outputs)
                                            or g.outputs[o.output].layout is not GROUPS):
        errs.append(f"{where}: {line}: expected a groups output (scales) of the graph")
    elif isinstance(o, (ir.LoadOperand, ir.PrefetchOperand)) and o.operand not in {s.name for s in g.operands}:
        errs.append(f"{where}: {line}: the epilogue has no operand {o.operand!r}")
    elif isinstance(o, ir.ApplyEpilogue) and (o.up is None) != (g.gate_up() is None):
        errs.append(f"{where}: {line}: " + ("a gate/up graph's block needs its up block (`with up`)" if o.up is None
                                            else "an up block, but the graph has no gate/up halves"))
    elif isinstance(o, ir.ApplyEpilogue) and o.up is not None and o.up != o.part + o.parts // 2:
        errs.append(f"{where}: {line}: expected the gate block in the tile's left half and its up block "
                    f"{o.part + o.parts // 2} (the same columns of the right half)")
    if isinstance(o, (ir.LoadOperand, ir.PrefetchOperand)) and o.buffer is not None:
        buf = next((b for b in m.buffers if b.name == o.buffer), None)
        if buf is None or buf.tensor is not ir.Tensor.OPERAND or buf.operand != o.operand:
            errs.append(f"{where}: {line}: {o.buffer} is not a staging buffer of operand {o.operand}")


def _check_loaded(p: ir.Partition, m: ir.Module, errs: list[str]) -> None:
    """Every ApplyEpilogue finds each operand of the graph loaded for its block earlier in the same tile."""
    g = m.spec.epilogue
    if g is None:
        return

    def tile(body: tuple[ir.Stmt, ...]) -> None:
        loaded: set[tuple[str, str, int]] = set()
        folded: set[tuple[str, int]] = set()  # (acc, part) blocks folded into their group's amax
        staged: dict[str, ir.PrefetchOperand] = {}  # a staging buffer's copy in flight
        for s in body:
            if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES:
                tile(s.body)
            elif isinstance(s, ir.PrefetchOperand):
                if s.buffer in staged:
                    errs.append(f"partition {p.name}: {printer.op(s)} while {printer.op(staged[s.buffer])} is not "
                                "loaded yet")
                staged[s.buffer] = s
            elif isinstance(s, ir.LoadOperand) and s.buffer is not None:
                pre = staged.pop(s.buffer, None)
                if pre is None or (pre.operand, pre.acc, pre.part, pre.parts) != (s.operand, s.acc, s.part, s.parts):
                    errs.append(f"partition {p.name}: {printer.op(s)} without a prefetch_operand of that block "
                                "before it in the tile")
                loaded.add((s.operand, s.acc, s.part))
            elif isinstance(s, ir.LoadOperand):
                loaded.add((s.operand, s.acc, s.part))
            elif isinstance(s, (ir.ApplyEpilogue, ir.FoldAmax)):
                for spec in g.operands:
                    if (spec.name, s.acc, s.part) not in loaded:
                        errs.append(f"partition {p.name}: {printer.op(s)} before operand {spec.name} is loaded "
                                    "for that block")
                    up = s.up if isinstance(s, ir.ApplyEpilogue) else None
                    if up is not None and spec.kind.varies_n and (spec.name, s.acc, up) not in loaded:
                        errs.append(f"partition {p.name}: {printer.op(s)} before operand {spec.name} is loaded "
                                    "for its up block")
                if isinstance(s, ir.FoldAmax):
                    folded.add((s.acc, s.part))
                elif g.reads_amax():  # (rule 29's first pass computes y, which does not read it)
                    missing = [j for j in _group_blocks(m, p, s) if (s.acc, j) not in folded]
                    if missing:
                        errs.append(f"partition {p.name}: {printer.op(s)} reads its group's amax before the "
                                    f"fold_amax of block(s) {missing} of {s.acc}: the scale would miss columns")

    tile(p.body)
    _check_synced(p, errs)


def _group_blocks(m: ir.Module, p: ir.Partition, o: ir.ApplyEpilogue) -> list[int]:
    """The blocks of `o`'s accumulator in the same group as its block (128 columns, or a rowwise quantization's
    whole tile; a group never spans accumulators: LowerEpilogue refuses those)."""
    acc = next((a for a in p.accumulators if a.name == o.acc), None)
    g = m.spec.epilogue
    if acc is None or g is None:
        return []
    w, amax = acc.cols // o.parts, g.amax()
    group = amax.index(acc.col0 + o.part * w)
    return [j for j in range(o.parts) if amax.index(acc.col0 + j * w) == group]


def _check_synced(p: ir.Partition, errs: list[str]) -> None:
    """A `synced` prefetch skips its own barrier and fence (ir.PrefetchOperand): every read of its buffer before it
    must be followed by a fence_async_shared and then a tma_store (whose barrier Triton emits). Each tile loop runs
    twice, so the previous tile's reads count at the next tile's start."""
    for loop in (s for s in p.body if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES):
        unfenced: set[str] = set()  # buffers read since the last fence
        fenced: set[str] = set()  # read, then fenced, with no TMA store yet
        bad: dict[str, None] = {}
        for s in loop.body + loop.body:
            if isinstance(s, ir.LoadOperand) and s.buffer is not None:
                unfenced.add(s.buffer)
            elif isinstance(s, ir.FenceAsync):
                fenced |= unfenced
                unfenced = set()
            elif isinstance(s, ir.TmaStore):
                fenced = set()
            elif isinstance(s, ir.PrefetchOperand) and s.synced and s.buffer in unfenced | fenced:
                bad[f"partition {p.name}: {printer.op(s)}, but no fence_async_shared and tma_store follow the last "
                    f"read of {s.buffer} before it: drop `synced` (the prefetch then syncs the threads itself)"] = None
        errs.extend(bad)


def complete(m: ir.Module, device: DeviceInfo) -> list[str]:
    errs = structural(m)
    if errs:
        return errs
    writers: dict[str, set[str]] = {}
    readers: dict[str, set[str]] = {}
    waits: dict[str, set[str]] = {}
    arrivals: dict[str, set[str]] = {}
    for p in m.partitions:
        where = f"partition {p.name}"
        if p.role is ir.Role.SEQUENTIAL:
            errs.append(f"{where} is still sequential: the partitioning pass did not run")
        # (a gfx1250 workgroup partition has no budget: check_gfx1250, which its declaration hands to `check`)
        if p.role is not ir.Role.WORKGROUP and (not ir.MIN_REGS <= p.regs <= ir.MAX_REGS or p.regs % 8):
            errs.append(f"{where}: regs={p.regs}, expected a multiple of 8 in [{ir.MIN_REGS}, {ir.MAX_REGS}]")
        for body in _loop_bodies(p.body):
            _check_expect_tx(m, body, where, errs)
        for o, _ in ir.walk(p.body):
            match o:
                case ir.TmaLoad() | ir.CopyScales():
                    writers.setdefault(o.ring, set()).add(p.name)
                    if o.barrier is None:
                        errs.append(f"{where}: synchronous load into {o.ring}: rings were not planned")
                case ir.TdmLoad():
                    writers.setdefault(o.ring, set()).add(p.name)
                case ir.Mma() | ir.Wmma():
                    readers.setdefault(o.a_ring, set()).add(p.name)
                    readers.setdefault(o.b_ring, set()).add(p.name)
                case ir.TcMma():
                    readers.setdefault(o.a_ring, set()).add(p.name)
                    readers.setdefault(o.b_ring, set()).add(p.name)
                    writers.setdefault(o.acc_ring, set()).add(p.name)
                    if o.release is not None:  # its completion arrives on the ring's empty barrier
                        arrivals.setdefault(o.release, set()).add(p.name)
                    if o.release_scales is not None:  # seed 000: and on the scale buffers'
                        arrivals.setdefault(o.release_scales, set()).add(p.name)
                    if o.scales is not None and o.scales.slot is not None:
                        readers.setdefault(o.scales.a, set()).add(p.name)
                        readers.setdefault(o.scales.b, set()).add(p.name)
                case ir.StoreTmemScales():
                    writers.setdefault(o.ring, set()).add(p.name)
                case ir.Commit():
                    arrivals.setdefault(o.barrier, set()).add(p.name)
                case ir.LoadTmem():
                    readers.setdefault(o.acc_ring, set()).add(p.name)
                case ir.ScaleCopy():
                    readers.setdefault(o.ring, set()).add(p.name)
                case ir.Promote() if o.scales is not None:
                    readers.setdefault(o.scales.a_ring, set()).add(p.name)
                    readers.setdefault(o.scales.b_ring, set()).add(p.name)
                case ir.Wait():
                    waits.setdefault(o.barrier, set()).add(p.name)
                case ir.Arrive() | ir.ArriveExpectTx():
                    arrivals.setdefault(o.barrier, set()).add(p.name)
                case ir.StoreTile() if p.role is not ir.Role.WORKGROUP:  # (gfx1250 stores from registers)
                    errs.append(f"{where}: abstract store_tile left: the epilogue pass did not run")
        _check_async(p, errs)
        _check_loaded(p, m, errs)
    for r in m.rings:
        w, rd = writers.get(r.name, set()), readers.get(r.name, set())
        if not w or not rd:
            errs.append(f"ring {r.name} needs a producer and a consumer partition, has writers {sorted(w)} "
                        f"and readers {sorted(rd)}")
        elif m.gfx1250:
            if w != rd or len(m.partitions) != 1:
                errs.append(f"ring {r.name}: a gfx1250 kernel is one partition that both copies and reads, got "
                            f"writers {sorted(w)} and readers {sorted(rd)}")
        elif w & rd:
            errs.append(f"ring {r.name} is written and read by the same partition {sorted(w & rd)}")
    # How many partitions share the tiles each partition's tile loop visits (its step; 1: every tile).
    share = {p.name: max([lp.step for lp in _loops(p.body) if lp.kind is ir.LoopKind.TILES] or [1])
             for p in m.partitions}
    for b in m.barriers:
        wt, ar = waits.get(b.name, set()), arrivals.get(b.name, set())
        if not wt:
            errs.append(f"barrier {b.name} is never waited on")
        if not ar:
            errs.append(f"barrier {b.name} is waited on but never arrived at")
        elif ar & wt:
            errs.append(f"barrier {b.name} is arrived at and waited on by the same partition {sorted(ar & wt)}")
        elif (per_phase := len(ar) if b.purpose is ir.Purpose.ORDER
              else sum(Fraction(1, share[n]) for n in ar)) != b.count:
            # A ping-pong consumer takes every other tile, so it arrives in every other use of a slot.
            alternate = " (ping-pong: each in alternate tiles)" if any(share[n] > 1 for n in ar) else ""
            errs.append(f"barrier {b.name} expects {b.count} arrivals per phase but {per_phase} partitions "
                        f"arrive ({sorted(ar)}){alternate}")
    errs += _check_device_target(m, device)
    smem = m.shared_bytes
    if smem > device.smem_per_block:
        errs.append(f"shared memory {smem} bytes exceeds the {device.smem_per_block} of {device.name}")
    # setmaxnreg works per warpgroup: the last warpgroup's padding warps hold registers too, and small workers
    # packed into one warpgroup must share a budget.
    regs = m.register_need
    small = {p.regs for p in m.workers if p.warps % 4}
    if len(small) > 1:
        errs.append(f"workers of fewer than 4 warps share a warpgroup, so setmaxnreg needs one budget for them, got "
                    f"{sorted(small)}")
    if regs > device.regs_per_sm:
        errs.append(f"register budgets need {regs} registers, the SM has {device.regs_per_sm}")
    return errs


def _loops(body: tuple[ir.Stmt, ...]) -> Iterator[ir.Loop]:
    for s in body:
        if isinstance(s, ir.Loop):
            yield s
            yield from _loops(s.body)


def _loop_bodies(body: tuple[ir.Stmt, ...]) -> Iterator[tuple[ir.Stmt, ...]]:
    yield body
    for s in body:
        if isinstance(s, ir.Loop):
            yield from _loop_bodies(s.body)


def _check_expect_tx(m: ir.Module, body: tuple[ir.Stmt, ...], where: str, errs: list[str]) -> None:
    expected: dict[str, int] = {}
    loaded: dict[str, int] = {}
    arrived: set[str] = set()
    for s in body:
        if isinstance(s, ir.CopyScales) and s.barrier in arrived:
            # The arrival before it may complete the phase while the copy is still in flight.
            errs.append(f"{where}: {printer.op(s)} after this partition's arrival on {s.barrier}: scale copies "
                        "must be issued before the arrival that can complete the stage's phase")
        if isinstance(s, (ir.Arrive, ir.ArriveExpectTx)):
            arrived.add(s.barrier)
        if isinstance(s, ir.ArriveExpectTx):
            expected[s.barrier] = expected.get(s.barrier, 0) + s.nbytes
        elif isinstance(s, ir.TmaLoad) and s.barrier is not None:
            loaded[s.barrier] = loaded.get(s.barrier, 0) + ir.load_bytes(m.ring(s.ring), s)
    for b in sorted(set(expected) | set(loaded)):
        if expected.get(b, 0) != loaded.get(b, 0):
            errs.append(f"{where}: expect-tx on {b} announces {expected.get(b, 0)} bytes but the loads "
                        f"completing on it bring {loaded.get(b, 0)}")


def _check_async(p: ir.Partition, errs: list[str]) -> None:
    """Abstractly run the body (each loop twice, to reach its steady state) counting wgmma in flight
    and TMA stores outstanding."""
    state = {"mma": 0, "store": 0}
    reads_acc = (ir.Promote, ir.Epilogue, ir.StoreSmem, ir.StoreTile, ir.ZeroAcc, ir.ApplyEpilogue, ir.FoldAmax)

    def run(body: tuple[ir.Stmt, ...]) -> None:
        for s in body:
            if isinstance(s, ir.Loop):
                run(s.body)
                run(s.body)
            elif isinstance(s, ir.Mma) and s.is_async:
                state["mma"] += 1
            elif isinstance(s, ir.MmaWait):
                state["mma"] = min(state["mma"], s.pending)
            elif isinstance(s, reads_acc) and state["mma"]:
                errs.append(f"partition {p.name}: {type(s).__name__} reads an accumulator with "
                            f"{state['mma']} wgmma in flight (missing wgmma_wait pending=0)")
            elif isinstance(s, ir.TmaStore):
                state["store"] += 1
            elif isinstance(s, ir.StoreWait):
                state["store"] = min(state["store"], s.pending)

    run(p.body)
    if state["mma"]:
        errs.append(f"partition {p.name} exits with {state['mma']} wgmma in flight")
    if state["store"]:
        errs.append(f"partition {p.name} exits with {state['store']} TMA stores in flight")


# A target's own rules of a complete module (`warploom.targets.Declaration.checks`): the problems found.
Check = Callable[[ir.Module], list[str]]


def problems(m: ir.Module, device: DeviceInfo, *, ops: frozenset[type] | None = None,
             checks: Sequence[Check] = ()) -> list[str]:
    """Every problem of a complete module: `complete`'s, an op outside its target's op set `ops` (when given), and
    its target's own `checks`' (`warploom.targets` hands both down)."""
    errs = complete(m, device)
    if ops is not None:
        errs += sorted({f"{type(o).__name__} in partition {p.name}: not an op of {m.target.with_article} schedule"
                        for p in m.partitions for o, _ in ir.walk(p.body) if type(o) not in ops})
    return errs + [e for c in checks for e in c(m)]


def check(m: ir.Module, stage: str, device: DeviceInfo | None = None, *,
          ops: frozenset[type] | None = None, checks: Sequence[Check] = ()) -> ir.Module:
    """Raise VerificationError listing every problem: the structural ones, or, `device` given (the module must be
    complete), `problems`' with the target's op set `ops` and own `checks` (`warploom.targets.verify` passes the
    module's target's)."""
    errs = structural(m) if device is None else problems(m, device, ops=ops, checks=checks)
    if errs:
        raise VerificationError(stage, errs)
    return m
