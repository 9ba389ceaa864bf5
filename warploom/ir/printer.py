"""Deterministic text form of the schedule IR: what `Kernel.schedule` prints and golden tests compare."""

from __future__ import annotations

from warploom.ir import nodes as ir


def slot(s: ir.Slot) -> str:
    if s.offset == 0:
        return s.cursor
    return f"{s.cursor}{s.offset:+d}"


def parity(p: ir.Parity) -> str:
    base = f"phase({slot(ir.Slot(p.cursor, p.offset))})"
    return base + "^1" if p.flip else base


def _guard(g: ir.Guard) -> str:
    return "" if g is ir.Guard.ALWAYS else f"  if {g.value}"


def output_name(tensor: ir.Tensor, output: int) -> str:
    """C for the kernel's first output; C1, C2, ... for a fused epilogue's further outputs."""
    return tensor.value if output == 0 else f"{tensor.value}{output}"


def op(o: ir.Op) -> str:
    """One op as one line."""
    match o:
        case ir.Wait():
            return f"wait {o.barrier}[{slot(o.slot)}] {parity(o.parity)}"
        case ir.Arrive():
            cnt = "" if o.count == 1 else f" count={o.count}"
            return f"arrive {o.barrier}[{slot(o.slot)}]{cnt}{_guard(o.guard)}"
        case ir.ArriveExpectTx():
            return f"arrive_expect_tx {o.barrier}[{slot(o.slot)}] bytes={o.nbytes}"
        case ir.TmaLoad():
            coord = ", ".join(a.value for a in o.coord)
            on = f" on {o.barrier}[{slot(o.slot)}]" if o.barrier else " sync"
            who = "the lead CTA" if o.lead_only else "every CTA"
            mc = f" multicast ({who}, into every CTA of the cluster)" if o.multicast else ""
            return f"tma_load {o.tensor.value}[{coord}] -> {o.ring}[{slot(o.slot)}]{on}{mc}"
        case ir.Mma():
            kind = "wgmma.async" if o.is_async else "wgmma"
            ow = "" if o.overwrite is ir.Guard.FIRST_K else f" overwrite={o.overwrite.value}"
            cols = f"[:, {o.n_cols.start}:{o.n_cols.start + o.n_cols.cols}]" if o.n_cols else ""
            if o.k_cols:
                cols += f" k[{o.k_cols.start}:{o.k_cols.start + o.k_cols.cols}]"
            return f"{kind} {o.acc} += {o.a_ring}[{slot(o.slot)}] @ {o.b_ring}[{slot(o.slot)}]{cols}{ow}"
        case ir.MmaWait():
            return f"wgmma_wait pending={o.pending}"
        case ir.Promote() if o.scales is not None:
            sc, sl = o.scales, slot(o.scales.slot)
            sub = "" if sc.sub is None else f"[{sc.sub}]"
            return f"promote {o.dst} += {o.src} * {sc.a_ring}[{sl}]{sub}[rows] * {sc.b_ring}[{sl}]{sub}[cols]"
        case ir.Promote():
            return f"promote {o.dst} += {o.src}"
        case ir.CopyScales():
            on = f" on {o.barrier}[{slot(o.slot)}]" if o.barrier else " sync"
            if o.sync and o.barrier:
                on = f" sync, published by the next arrive on {o.barrier}[{slot(o.slot)}]"
            return f"copy_scales {o.tensor.value}[tile, k] -> {o.ring}[{slot(o.slot)}]{on}"
        case ir.ZeroAcc():
            return f"zero {o.acc}"
        case ir.Epilogue():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            return f"epilogue {o.acc}{part}: " + "; ".join(s.value for s in o.steps)
        case ir.StoreTile() if o.output is not None:
            return f"store_tile {output_name(ir.Tensor.C, o.output)}[m, n] <- out{o.output} of {o.acc}"
        case ir.StoreTile():
            return f"store_tile C[m, n] <- {o.acc}"
        case ir.StoreWait():
            return f"tma_store_wait pending={o.pending}"
        case ir.StoreSmem():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            src = f"{o.acc}{part}" if o.output is None else f"out{o.output} of {o.acc}{part}"
            return f"store_smem {o.buffer} <- {src}"
        case ir.LoadOperand():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            via = f" via {o.buffer}" if o.buffer else ""
            return f"load_operand {o.operand} for {o.acc}{part} as {o.read.value}{via}"
        case ir.PrefetchOperand():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            synced = " (synced by the store)" if o.synced else ""
            return f"prefetch_operand {o.operand} for {o.acc}{part} into {o.buffer}{synced}"
        case ir.ApplyEpilogue():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            up = "" if o.up is None else f" with up {o.acc}[cols {o.up}/{o.parts}]"
            return f"apply_epilogue {o.acc}{part}{up}"
        case ir.FoldAmax():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            return f"fold_amax {o.acc}{part}"
        case ir.StoreScales():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            return f"store_scales out{o.output} of {o.acc}{part}"
        case ir.AtomicAmax():
            return f"atomic_amax {o.acc} -> amax[m]"
        case ir.GridDependencyWait():
            return "grid_dependency_wait"
        case ir.FenceAsync():
            return "fence_async_shared"
        case ir.TmaStore():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            n = "n/2" if o.halved else "n"
            return f"tma_store {o.buffer} -> {output_name(o.tensor, o.output)}[m, {n}]{part}"
        case ir.Advance():
            return f"advance {o.cursor}"
        case ir.SkipTiles():
            return f"skip {o.cursor} by {o.tiles} tile{'s' if o.tiles != 1 else ''}"
        case ir.TcMma():
            ow = "" if o.overwrite is ir.Guard.FIRST_K else f" overwrite={o.overwrite.value}"
            rel = f", then arrive {o.release}[{slot(o.slot)}]" if o.release else ""
            ts = o.scales
            per = "" if ts is None or ts.vec == 32 else f", a scale per {ts.vec}"
            at = "" if ts is None or ts.slot is None else f"[{slot(ts.slot)}]"
            if ts is not None and ts.k_cols:  # (seed 000's NVFP4: each 64-deep MMA's first scale column)
                per += f", columns from {', '.join(map(str, ts.k_cols))}"
            by = f" scaled by {ts.a}{at} x {ts.b}{at} ({ts.a_type} x {ts.b_type}{per})" if ts else ""
            if o.release_scales and ts is not None and ts.slot is not None:
                rel += f" and {o.release_scales}[{slot(ts.slot)}]"
            return (f"tcgen05_mma.async {o.acc_ring}[{slot(o.acc_slot)}] += {o.a_ring}[{slot(o.slot)}] @ "
                    f"{o.b_ring}[{slot(o.slot)}]{by}{ow}{rel}")
        case ir.ScaleCopy():
            return f"tcgen05_copy {o.ring}[{slot(o.slot)}] -> {o.dst}"
        case ir.StoreTmemScales():
            src = " (blocked)" if o.blocked else ""
            return f"store_tmem_scales {o.tensor.value}[tile, k]{src} -> {o.ring}[{slot(o.slot)}] (for {o.barrier})"
        case ir.Commit():
            return f"tcgen05_commit {o.barrier}[{slot(o.slot)}]"
        case ir.LoadTmem():
            part = "" if o.parts == 1 else f"[cols {o.part}/{o.parts}]"
            return f"load_tmem {o.acc} <- {o.acc_ring}[{slot(o.slot)}]{part}"
        case ir.TdmLoad():
            coord = ", ".join(a.value if a is not ir.Axis.K or not o.ahead else f"k+{o.ahead}" for a in o.coord)
            issue = ("" if o.warps is None else f" warps={o.warps}") + (" fused" if o.fused else "")
            return f"tdm_load {o.tensor.value}[{coord}] -> {o.ring}[{slot(o.slot)}]{issue}"
        case ir.Wmma():
            ow = "" if o.overwrite is ir.Guard.FIRST_K else f" overwrite={o.overwrite.value}"
            return f"wmma {o.acc} += {o.a_ring}[{slot(o.slot)}] @ {o.b_ring}[{slot(o.slot)}]{ow}"
        case ir.TdmWait():
            tail = f" while k+{o.ahead} < k_tiles, else 0" if o.ahead else ""
            issue = "" if o.warps is None else f" warps={o.warps}"
            return f"tdm_wait pending={o.pending}{tail}{issue}"
        case ir.SyncWarps():
            return "sync_warps"
        case ir.Fixup():
            return f"fixup {', '.join(o.accs)}"
    raise TypeError(f"unknown op {o!r}")


def _body(body: tuple[ir.Stmt, ...], indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for s in body:
        if isinstance(s, ir.Loop):
            every = f"[{s.start}::{s.step}]" if s.step != 1 else ""  # a ping-pong consumer's alternate tiles
            out.append(f"{pad}for {s.kind.value}{every}:")
            _body(s.body, indent + 1, out)
        else:
            out.append(pad + op(s))


def module(m: ir.Module) -> str:
    """The whole module, one declaration or op per line."""
    t = m.tiling
    out = [
        f"module {m.name}  # {m.spec.short()}",
        f"  tiling bm={t.bm} bn={t.bn} bk={t.bk} group_m={t.group_m} grid={t.grid}"
        + (f" split_k={t.split_k}" if t.split_k > 1 else "") + (" ranged" if t.ranged else "")
        + (" swap_ab (stores C transposed)" if t.swap_ab else "")
        + (f" stream_k={t.stream_k} (the last wave's tiles in up to {t.stream_k} pieces)" if t.stream_k else "")
        + (f" sk_waves={t.sk_waves} (and {t.sk_waves} whole wave shared with them)" if t.sk_waves else "")
        + ((f" cluster=1x{t.cluster} (CTAs along N sharing A)" if t.cluster_n else
            f" cluster={t.cluster} (CTAs along M sharing B)") if t.cluster > 1 else "")
        + (" exit_sync (a cluster barrier before exit)" if t.exit_sync else "")
        + (f" n_blocks={'+'.join(map(str, t.n_blocks))} (a narrow tile: wgmma over its first "
           f"{sum(t.n_blocks)} columns)" if t.n_blocks else "")
        + (f" interleaved (each CTA {ir.INTERLEAVE} rows of every {ir.INTERLEAVE * t.cluster} of the cluster tile)"
           if t.interleaved else ""),
    ]
    if m.dependent_launch:
        out.append("  dependent_launch: starts while the previous grid finishes (PDL); each partition waits for it "
                   "before touching memory, and the next grid may launch once every CTA has started")
    if m.amax_pass is not None:  # (rule 29: C is the workspace of y, the cast kernel runs after the launch)
        out.append(f"  amax_pass: C is y's fp32 (M, N) workspace, amax the (M,) row amax (zeroed per call); then "
                   f"cast q = {m.amax_pass.fp8.value}(y / s), s = amax / fp8_max, {m.amax_pass.chunk} columns a step")
    for r in m.rings:
        where = " in tensor memory" if r.in_tmem or r.tmem else " padded (one value a byte)" if r.padded else \
            f" as {r.row_boxes} boxes of 64 rows" if r.row_boxes else ""
        out.append(f"  ring {r.name}: {r.tensor.value} {r.dtype.value}[{r.depth} x {r.rows}x{r.cols}]{where}")
    for sb in m.tmem_scales:
        out.append(f"  scale buffer {sb.name}: {sb.tensor.value} {sb.dtype.value}[{sb.rows}x{sb.cols}] in tensor "
                   f"memory, columns {sb.col0}..{sb.col0 + sb.columns - 1}")
    for b in m.buffers:
        what = b.operand if b.tensor is ir.Tensor.OPERAND else output_name(b.tensor, b.output)
        out.append(f"  buffer {b.name}: {what} {b.dtype.value}[{b.rows}x{b.cols}]")
    for br in m.barriers:
        of = f" of {', '.join(br.rings)}" if br.rings else ""
        lead = " per cluster, in the lead CTA" if br.cluster else ""
        out.append(f"  mbarrier {br.name}[{br.depth}] count={br.count} {br.purpose.value}{of}{lead}")
    out.append(f"  smem {m.smem_bytes} bytes" + (f", tmem {m.tmem_columns} columns" if m.blackwell else ""))
    if m.spec.epilogue is not None:
        from warploom.epilogue import printer as ep

        out.append("  epilogue:")
        out += ["    " + line for line in ep.text(m.spec.epilogue).splitlines()]
    for p in m.partitions:
        flags = " default" if p.default else ""
        regs = f" regs={p.regs}" if p.regs else ""
        rows = f" rows={p.rows.start}:{p.rows.start + p.rows.rows}" if p.rows else ""
        out.append(f"  partition {p.name} ({p.role.value}, warps={p.warps}{regs}{rows}{flags}):")
        for c in p.cursors:
            out.append(f"    cursor {c.name} (depth {c.depth})")
        for a in p.accumulators:
            at = f" at col {a.col0}" if a.col0 else ""
            out.append(f"    acc {a.name}: fp32[{a.rows}x{a.cols}]{at}")
        _body(p.body, 2, out)
    return "\n".join(out) + "\n"
