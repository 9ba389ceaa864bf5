"""Lower an sm_100a schedule IR module (planner rule 19, passes/blackwell.py) to Triton Gluon for Blackwell.

The kernel has the shape of the sm_90a one (backends/gluon_sm90.py: one ``@gluon.jit`` function per partition,
rings, mbarriers and ``gl.warp_specialize``), and its producer, waits, arrivals, epilogue math and stores lower the
same way. What differs is the MMA: tensor memory holds the accumulators (``allocate_tensor_memory``), the MMA warp
issues ``tcgen05_mma`` with the stage's empty barrier as its completion barrier and ``tcgen05_commit``s each
finished tile to the epilogue, and the epilogue partition reads column blocks of tensor memory into registers in
the layout of the tcgen05 load instruction (`gluon_api.GluonApi.tmem_reg_layout`).
"""

from __future__ import annotations

from warploom.backends import gluon_api
from warploom.backends.codebuf import CodeBuffer
from warploom.backends.gluon_grouped import GroupedEmitter
from warploom.backends.gluon_sm90 import (
    GluonSource,
    PartitionEmitter,
    as_is,
    lower,
    scale_desc,
    scale_offsets_wide,
    slot_index,
    tmem_buffers,
    use_acc,
    wide,
)
from warploom.blocked import BLOCK_COLS
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.ir.verify_scales import NVFP4_MMA_COLS
from warploom.spec import BLayout


def _header(api: gluon_api.GluonApi, scales: bool = False, copies: bool = True) -> str:
    """The imports (what `GluonApi.tmem_reg_layout` needs is the Triton version's; MX adds the scaled ops, and seed
    001's path, not `copies`, tcgen05_copy)."""
    scaled = ["TensorMemoryScalesLayout", "tcgen05_mma_scaled", *(["tcgen05_copy"] if copies else [])] \
        if scales else []
    names = sorted(["TensorMemoryLayout", "allocate_tensor_memory", "fence_async_shared", *api.blackwell_imports,
                    "mbarrier", "tcgen05_commit", "tcgen05_mma", "tma", *scaled])
    imports = "".join(f"    {n},\n" for n in names)
    return ("from triton.experimental import gluon\n"
            "from triton.experimental.gluon import language as gl\n"
            f"from triton.experimental.gluon.language.nvidia.blackwell import (\n{imports})\n")


class _Sm100Emitter(PartitionEmitter):
    """The sm_90a partition emitter with the tcgen05 ops and the tensor-memory register layout."""

    pins_promotion = False  # (fp32 blockwise promotes tensor-memory partials: no wgmma to order it against)

    def layouts(self) -> None:
        stores = [o for o, _ in ir.walk(self.p.body) if isinstance(o, ir.StoreTmemScales)]
        # seed 000's scale partition: a k-block's (128, cols) scales as tcgen05.st takes them; a 256-wide tile's B
        # scales (256, cols), in a layout of their own (`_scale_names`)
        for rows in sorted({self.m.ring(o.ring).rows for o in stores}):
            r = next(self.m.ring(o.ring) for o in stores if self.m.ring(o.ring).rows == rows)
            lay_name, rows_name, cols_name = _scale_names(rows)
            lay = self.api.tmem_scales_layout(tmem_buffers(r)[0], r.dtype.gluon, r.rows, r.cols, self.p.warps)
            self.buf.line(f"{lay_name}: gl.constexpr = {lay}",
                          comment=f"a k-block's scales of {rows} rows, as tcgen05.st takes them from the threads")
            self.buf.line(f"{rows_name} = gl.arange(0, {r.rows}, layout=gl.SliceLayout(1, {lay_name}))")
            self.buf.line(f"{cols_name} = gl.arange(0, {r.cols}, layout=gl.SliceLayout(0, {lay_name}))")
        if stores:
            self.buf.line(f"k_scales = gl.cdiv(K, {self.m.spec.scale.scale_k})", "scales a row of A or B")
        if not self.p.accumulators:
            return
        widths = {a.cols for a in self.p.accumulators}
        assert len(widths) == 1, "sm_100a: the epilogue's column blocks are all one width (passes/blackwell.py)"
        (w,) = widths
        ring = next(o.acc_ring for o, _ in ir.walk(self.p.body) if isinstance(o, ir.LoadTmem))
        self.buf.line(f"acc_layout: gl.constexpr = {self.api.tmem_reg_layout(ring, 'BM', w, self.p.warps)}",
                      comment="a column block of a tensor-memory accumulator, as tcgen05.ld hands it to the threads")
        for a in self.p.accumulators:
            self.buf.line(f"{a.name} = gl.zeros([{a.rows}, {a.cols}], gl.float32, acc_layout)")
        if self.m.spec.epilogue is not None:  # the fused epilogue's block layout is the block's own
            self.buf.line("ep_layout: gl.constexpr = acc_layout", comment="a fused epilogue block, as loaded")

    def _coord(self, axis: ir.Axis, tensor: ir.Tensor | None = None) -> str:
        # MX fp4: a TMA descriptor over the packed bytes, two values of K a byte (MX fp8 x fp4: the fp4 operand's
        # alone; Triton doubles the coordinate of a padded one's, whose descriptor counts values)
        s = self.m.spec
        if axis is ir.Axis.K and (tensor is ir.Tensor.A and s.fp4_a or tensor is ir.Tensor.B and s.fp4_b):
            return f"{self.kb} * (BK // 2)"
        return super()._coord(axis, tensor)

    def op(self, o: ir.Op) -> None:
        b, c = self.buf, printer.op(o)
        match o:
            case ir.TcMma():
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                t = slot_index(o.acc_slot, self.depth[o.acc_slot.cursor], self.stages)
                use = use_acc(o.overwrite)
                done = f", mbarriers=[{o.release}_bars.index({s})]" if o.release else ""
                if o.scales is not None and o.scales.slot is not None:
                    # seed 000: the buffers are allocations of their own (`tmem_buffers`): a branch per slot, which
                    # ptxas merges into one MMA reading the selected address
                    sc, sl = o.scales, o.scales.slot
                    # (NVFP4: Triton issues the k-block as 64-deep MMAs, each reading its own 4 scale columns; the
                    # verifier refuses any other k_cols, so this is all a kernel can say)
                    w = NVFP4_MMA_COLS
                    assert sc.k_cols == tuple(range(0, len(sc.k_cols) * w, w)), f"{sc.k_cols=}: not Triton's"
                    q = slot_index(sl, self.depth[sl.cursor], self.stages)
                    bars = f"{o.release}_bars.index({s}), " if o.release else ""
                    done = f", mbarriers=[{bars}{o.release_scales}_bars.index({q})]" if o.release_scales else done
                    sa, sb = tmem_buffers(self.m.ring(sc.a)), tmem_buffers(self.m.ring(sc.b))
                    for j in range(len(sa)):
                        head = "else" if j == len(sa) - 1 and j else f"{'if' if j == 0 else 'elif'} {q} == {j}"
                        with b.block(head):
                            b.line(f"tcgen05_mma_scaled({o.a_ring}.index({s}), {self._b_view(o.b_ring, s, None)}, "
                                   f"{o.acc_ring}.index({t}), {sa[j]}, {sb[j]}, \"{sc.a_type}\", \"{sc.b_type}\", "
                                   f"use_acc={use}{done})", c if j == 0 else None)
                    return
                if o.scales is not None:
                    sc = o.scales
                    b.line(f"tcgen05_mma_scaled({o.a_ring}.index({s}), {self._b_view(o.b_ring, s, None)}, "
                           f"{o.acc_ring}.index({t}), {sc.a}, {sc.b}, \"{sc.a_type}\", \"{sc.b_type}\", "
                           f"use_acc={use}{done})", c)
                    return
                b.line(f"tcgen05_mma({o.a_ring}.index({s}), {self._b_view(o.b_ring, s, None)}, "
                       f"{o.acc_ring}.index({t}), use_acc={use}{done})", c)
            case ir.TmaLoad() if o.tensor in (ir.Tensor.SCALE_A, ir.Tensor.SCALE_B):
                # MX / NVFP4: the (tile, k-block)'s 128x4 blocks of torch's blocked scales, a (BM/128, chunks, 2, 256)
                # box at [row block, k-block x chunks] (blocked.chunk_coord: NVFP4 at BK 128 takes two chunks a
                # k-block); each block 512 contiguous bytes
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                off = "off_m" if o.tensor is ir.Tensor.SCALE_A else "off_n"
                chunks = self.m.ring(o.ring).cols // BLOCK_COLS
                col = self.kb if chunks == 1 else f"{self.kb} * {chunks}"
                b.line(f"{self.api.tma_load}({scale_desc(o.tensor)}, [{off} // 128, {col}, 0, 0], "
                       f"{o.barrier}_bars.index({s}), {o.ring}.index({s}))", c)
            case ir.ScaleCopy():
                # The slot's blocks viewed as the (rows, 4 x chunks) scales tcgen05.cp reads: row r of block (i, j) is
                # byte (r % 32) * 16 + (r // 32) * 4 + c of it, so (i, j, 2, 256) -> (i, j, 32, 4, 4), permuted to
                # (i, r // 32, r % 32, j, c) and flattened (blocked.scale_box); Triton copies each 128x4 chunk with
                # one tcgen05.cp into columns 4 j .. 4 j + 3 of the buffer
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                r = self.m.ring(o.ring)
                b.line(f"{o.ring}_s = {o.ring}.index({s}).reshape(({r.rows // 128}, {r.cols // 4}, 32, 4, 4))"
                       f".permute((0, 3, 2, 1, 4)).reshape(({r.rows}, {r.cols}))", f"(rows, {r.cols}) {r.dtype.value}")
                b.line(f"tcgen05_copy({o.ring}_s, {o.dst})", c)
            case ir.StoreTmemScales():
                self._store_tmem_scales(o, c)
            case ir.Arrive() if self.p.role is ir.Role.SCALES and self.p.warps > 1:
                # the arrival is one thread's: every warp's tcgen05.st (each waited by tcgen05.wait::st) first
                b.line(self.api.barrier, "every warp's scales stored before the arrival that publishes them")
                super().op(o)
            case ir.Commit():
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                b.line(f"tcgen05_commit({o.barrier}_bars.index({s}))", c)
            case ir.LoadTmem():
                t = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                w = self.m.ring(o.acc_ring).cols // o.parts
                b.line(f"{o.acc} = {o.acc_ring}.index({t}).slice({o.part * w}, {w}).load(acc_layout)", c)
            case _:
                super().op(o)


    def _store_tmem_scales(self, o: ir.StoreTmemScales, c: str) -> None:
        """Seed 000: the (tile, k-block)'s row-major scales by masked byte loads (any strides; 1.0 outside the problem
        and past a narrow tile's rows: e8m0 bits 127, or NVFP4's e4m3 1.0), then tcgen05.st into the slot's buffer."""
        b, r = self.buf, self.m.ring(o.ring)
        a_side = o.tensor is ir.Tensor.SCALE_A
        pre, off, size, tile = ("sa", "off_m", "M", "BM") if a_side else ("sb", "off_n", "N", "BN")
        stride = "sa_stride_m" if a_side else "sb_stride_n"
        w = wide if scale_offsets_wide(self.m.spec) else as_is
        rows, cols = f"{o.ring}_rows", f"{o.ring}_cols"
        _, rows_name, cols_name = _scale_names(r.rows)
        one = "1.0" if r.dtype is DType.E4M3 else "127"  # (e8m0 loads as its bits, e4m3 as float8e4nv values)
        b.line(f"{rows} = {off} + {rows_name}", "the tile's rows" if a_side else "the tile's columns of B")
        b.line(f"{cols} = {self.kb} * {r.cols} + {cols_name}", "this k-block's scales of each")
        mask = f"({rows}[:, None] < {size}) & ({cols}[None, :] < k_scales)"
        if r.rows > self.m.tiling.bn and not a_side:  # (a narrow tile: the buffer's rows past BN stay 1.0)
            mask = f"({rows_name}[:, None] < {tile}) & {mask}"
        if o.blocked:
            # torch's blocked layout (to_blocked), flat: 128x4 blocks of 512 bytes, cdiv(k_scales, 4) a block row;
            # row r, scale c at (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4 of its block (warploom.blocked.offset)
            rr, cc = f"{w(rows)}[:, None]", f"{w(cols)}[None, :]"
            at = (f"({rr} // 128 * gl.cdiv(k_scales, 4) + {cc} // 4) * 512 + {rr} % 32 * 16 + {rr} % 128 // 32 * 4 "
                  f"+ {cc} % 4")
            b.line(f"{o.ring}_v = gl.load({pre}_ptr + {at}, mask={mask}, other={one})", c)
        else:  # (a grouped module's scale_b: its tile's expert's (N, K/v) rows, `sb_base`)
            base = f"{pre}_ptr" if a_side else self.sb_base
            b.line(f"{o.ring}_v = gl.load({base} + {w(rows)}[:, None] * {stride} + {w(cols)}[None, :] * "
                   f"{pre}_stride_k, mask={mask}, other={one})", c)
        q = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
        bufs = tmem_buffers(r)
        for j, buf in enumerate(bufs):
            head = "else" if j == len(bufs) - 1 and j else f"{'if' if j == 0 else 'elif'} {q} == {j}"
            with b.block(head):
                b.line(f"{buf}.store({o.ring}_v)", f"tcgen05.st into {o.ring}[{j}]")


def _scale_names(rows: int) -> tuple[str, str, str]:
    """The scale partition's register layout and row and column index names for buffers of `rows` rows (128: the
    plain names; a 256-wide tile's B buffers theirs)."""
    sfx = "" if rows == 128 else f"_{rows}"
    return f"scale_layout{sfx}", f"scale_rows{sfx}", f"scale_cols{sfx}"


class _GroupedSm100Emitter(GroupedEmitter, _Sm100Emitter):
    """An M-grouped sm_100a module's partition (rule 22 on sm_100a): sm_90a's grouped tile loop over the group scan,
    B at [group, n, k] through its 3-D descriptor and C's stores clipped at the group's last row
    (backends/gluon_grouped.py), around the tcgen05 ops. The epilogue partition reads each column block from tensor
    memory into registers and stages it as the sm_90a consumer does, so a group's ragged last tile takes the same
    masked read-back of its staging buffer. The MMA warp walks the scan's tile count only (it addresses its rings,
    never a tile's group or rows).

    MX and NVFP4 (seed 000's scale partition): scale_a (total_M, K/v) is in the grouped row space, so the partition
    loads the tile's rows as they are (rows past the group's end read the next expert's scales and feed only dropped
    rows); scale_b (G, N, K/v), row-major and unpadded, is read at the tile's expert, ``sb_ptr + grp *
    sb_stride_g``, by the same masked loads and tcgen05.st as the dense kernel's (tcgen05.cp would need each
    expert's scales padded and swizzled into 128x4 chunks). NVFP4's global scale of B is per expert, (G,) fp32,
    multiplied in the epilogue at ``global_b_ptr + grp``; A's is one for all rows."""

    def __init__(self, m: ir.Module, p: ir.Partition, buf: CodeBuffer) -> None:
        super().__init__(m, p, buf)
        grp = "grp.to(gl.int64)" if scale_offsets_wide(m.spec) else "grp"
        self.sb_base = f"(sb_ptr + {grp} * sb_stride_g)"  # (MX / NVFP4: the tile's expert's scale rows)
        self.global_b = "global_b_ptr + grp"  # (NVFP4: the tile's expert's global scale of B, (G,) fp32)

    def _b_slot(self, ring: str, slot: str) -> str:
        # the 3-D box's one group as (BN, BK) (MX fp4: (BN, BK // 2) packed bytes, the descriptor's K)
        assert self.m.spec.b_layout is BLayout.K_MAJOR or not self.m.spec.fp4_b, "fp4 B is K-major"
        if self.m.spec.fp4_b:
            return f"{ring}.index({slot}).reshape([BN, BK // 2])"
        return super()._b_slot(ring, slot)


def lower_sm100(m: ir.Module) -> GluonSource:
    """Generate Gluon source for a complete (verified) sm_100a module (a grouped one's partitions through
    `_GroupedSm100Emitter`)."""
    assert m.blackwell, f"{m.name} is an sm_90a module: backends/gluon_sm90.py lowers it"
    tmem_rings = any(r.tmem for r in m.rings)  # (seed 000's scale partition)
    emitter = _GroupedSm100Emitter if m.tiling.grouped else _Sm100Emitter
    return lower(m, emitter, _header(gluon_api.current(), scales=bool(m.tmem_scales) or tmem_rings,
                                           copies=not tmem_rings))
