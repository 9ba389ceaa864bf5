"""The data the simulator moves, with torch on the CPU, when it runs with numerics.

Inputs are converted to fp32 once: every bf16, fp16 and fp8 value is exactly representable in fp32, so
this changes no value, and each wgmma is then ``acc (+)= a @ b`` in fp32 as the schedule says. The
simulator models the schedule, not the tensor core: fp8 NATIVE accumulation (reduced-precision on the
H100, like torch's use_fast_accum=True) is accumulated here in full fp32, so the simulator is not a
model of that kernel's rounding error. The epilogue runs in fp32 in the order the Gluon backend emits,
and `store_smem` casts to the output dtype (round to nearest even, like the GPU's cvt.rn). A fused epilogue
(`apply_epilogue`) is `warploom.epilogue.reference.evaluate_tile` on the block: that interpreter is the graph's
one meaning, so the simulator does not implement the ops a second time.

Ring slots and buffers start as NaN, so data read before it lands poisons the output visibly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from warploom import blocked, fp4
from warploom.epilogue.graph import OutputLayout
from warploom.epilogue.reference import block_amax, evaluate_tile, values_before_amax
from warploom.ir import nodes as ir
from warploom.ir.verify_scales import NVFP4_MMA_COLS
from warploom.sim.program import LoadTmemI, MmaI, PromoteI, ScaleCopyI, Tag, TcMmaI
from warploom.spec import SCALE_BLOCK, ALayout, BLayout, ScaleLayout, ScaleRecipe


@dataclass
class Operands:
    """The kernel's arguments for one simulated launch.

    Attributes:
        a: (M, K) fp32 copy of A.
        b_rows: B in its storage order as fp32: (N, K) for K-major B, (K, N) for N-major (the TMA
            descriptor's rows, as `warploom.runtime.launch` builds it).
        scale_a, scale_b: flattened fp32 scales, or None; blockwise scales stay 2-D (M, k-blocks) and
            (k-blocks, N-blocks or N); a 128x128 scale_a (M-blocks, k-blocks).
        bias: (N,) fp32 bias, or None.
        globals_: NVFP4: (2,) fp32, the global scales of A and B (ir.EpilogueStep.SCALE_GLOBAL), or None (a grouped
            module's (1 + G,): A's, then each expert's of B).
        outs: the (M, N) outputs, each in its dtype (`GemmSpec.output_dtypes`), written by TMA stores; 0 is C.
        writes: per output, the (M, N) count of the stores that wrote each element.
        epilogue: a fused epilogue's operand tensors by graph name, as passed (their own dtypes and strides:
            `evaluate_tile` reads them through their `OperandSpec`).
        workspace, ws_writes: split-K only: the (split_k * Mp, N) fp32 partial sums, NaN until stored, and the
            count of the stores that wrote each element (`ir.Tiling.split_k`).
        amax, amax_cols: rule 29's first pass only (`ir.Module.amax_pass`): the (M,) fp32 row amax workspace the
            tiles' atomic_amax ops add to (as the launch finds it), and per row the columns added to it so far.
    """

    a: torch.Tensor
    b_rows: torch.Tensor
    scale_a: torch.Tensor | None
    scale_b: torch.Tensor | None
    bias: torch.Tensor | None
    outs: tuple[torch.Tensor, ...]
    writes: tuple[torch.Tensor, ...]
    epilogue: Mapping[str, torch.Tensor]
    workspace: torch.Tensor | None = None
    ws_writes: torch.Tensor | None = None
    globals_: torch.Tensor | None = None
    amax: torch.Tensor | None = None
    amax_cols: torch.Tensor | None = None

    @property
    def out(self) -> torch.Tensor:
        return self.outs[0]

    @staticmethod
    def of(module: ir.Module, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None,
           scale_b: torch.Tensor | None, bias: torch.Tensor | None, outs: tuple[torch.Tensor, ...],
           epilogue: Mapping[str, torch.Tensor], span_tiles: int = 0,
           globals_: tuple[torch.Tensor, torch.Tensor] | None = None) -> Operands:
        """`span_tiles`: a ranged split-K launch's tile count (its compact workspace's size); `globals_`: NVFP4's
        global scales of A and B."""
        # (a grouped module's B is (G, K, N): its rows per group, (G, N, K) or (G, K, N))
        b_rows = b.transpose(-2, -1) if module.spec.b_layout is BLayout.K_MAJOR else b
        # MX fp4: the packed pairs of K as their (rows, K) values (MX fp8 x fp4: one operand's)
        a = fp4.unpack(a) if module.spec.fp4_a else a
        b_rows = fp4.unpack(b_rows) if module.spec.fp4_b else b_rows
        # sm_100a MX / NVFP4: torch's blocked scales stay flat, as the kernel's TMA boxes read them (`land`)
        if module.tmem_scales:
            scale_a = None if scale_a is None else scale_a.float().reshape(-1)
            scale_b = None if scale_b is None else scale_b.float().reshape(-1)
        # Blockwise scales stay 2-D: (M, k-blocks) and (k-blocks, N-blocks or N), read per (tile, k-block).
        keep = module.spec.scale.is_blockwise
        t = module.tiling
        ws = None
        if t.split_k > 1:
            ws = torch.full(t.workspace_shape(a.shape[0], outs[0].shape[1], span_tiles), float("nan"))
        return Operands(
            a.float().contiguous(), b_rows.float().contiguous(),
            None if scale_a is None else (scale_a.float() if keep else scale_a.reshape(-1).float()),
            None if scale_b is None else (scale_b.float() if keep else scale_b.reshape(-1).float()),
            None if bias is None else bias.float(), outs,
            tuple(torch.zeros(o.shape, dtype=torch.int16) for o in outs), epilogue,
            ws, None if ws is None else torch.zeros(ws.shape, dtype=torch.int16),
            None if globals_ is None else torch.cat([g.reshape(-1).float() for g in globals_]),
        )


def _block(src: torch.Tensor, r0: int, c0: int, rows: int, cols: int, fill: float = 0.0) -> torch.Tensor:
    """A TMA box: (rows, cols) from (r0, c0), `fill` (zero) where it leaves the tensor."""
    out = torch.full((rows, cols), fill, dtype=src.dtype)
    h, w = min(rows, src.shape[0] - r0), min(cols, src.shape[1] - c0)
    if h > 0 and w > 0:
        out[:h, :w] = src[r0:r0 + h, c0:c0 + w]
    return out


class CtaData:
    """One CTA's shared memory and registers, as tensors."""

    def __init__(self, module: ir.Module, ops: Operands, agents: int) -> None:
        self.m, self.ops = module, ops
        nan = float("nan")
        self.slots = {r.name: [torch.full((r.rows, r.cols), nan) for _ in range(r.depth)] for r in module.rings}
        self.bufs = {b.name: torch.full((b.rows, b.cols), nan).to(b.dtype.torch) for b in module.buffers}
        self.buf_dtype = {b.name: b.dtype.torch for b in module.buffers}
        # gl.zeros at the start of each partition function.
        self.accs = [{a.name: torch.zeros(a.rows, a.cols) for a in p.accumulators} for p in module.partitions]
        self.k_major = module.spec.b_layout is BLayout.K_MAJOR
        self.m_major = module.spec.a_layout is ALayout.M_MAJOR  # (A's slots hold (BK, BM) blocks)
        # Per partition: the outputs of its last apply_epilogue, each (rows, block cols) in its stored dtype.
        self.ep_outs: list[tuple[torch.Tensor, ...]] = [() for _ in module.partitions]
        # Per partition: a 1x128 quantization's running group amax, (rows, 1), from its last fold_amax.
        self.amax: list[torch.Tensor | None] = [None for _ in module.partitions]
        self.tmem_scales = {sb.name: torch.full((sb.rows, sb.cols), nan) for sb in module.tmem_scales}

    def land(self, ring: str, slot: int, tag: Tag) -> None:
        t = self.slots[ring][slot]
        # sm_100a MX / NVFP4: a TMA box of the k-block's 128x4 blocks of torch's blocked scales (NVFP4 at BK 128:
        # two a k-block), as tcgen05.cp reads them: (rows, 4 x blocks)
        if self.m.tmem_scales and tag.tensor in ("scale_a", "scale_b"):
            src = self.ops.scale_a if tag.tensor == "scale_a" else self.ops.scale_b
            assert src is not None
            # (TMA fills outside the padded tensor with zero bits: e8m0's 2**-127, e4m3's 0, against zero-filled A
            # and B)
            recipe = self.m.spec.scale
            rows = self.ops.a.shape[0] if tag.tensor == "scale_a" else self.ops.b_rows.shape[0]
            chunks = t.shape[1] // blocked.BLOCK_COLS
            col = blocked.chunk_coord(tag.origin[1] // self.m.tiling.bk, chunks)
            self.slots[ring][slot] = blocked.scale_box(
                src, rows, self.ops.a.shape[1] // recipe.scale_k, tag.origin[0] // blocked.BLOCK_ROWS, col,
                t.shape[0], chunks, 2.0 ** -127 if recipe is ScaleRecipe.MX else 0.0)
            return
        if self.m.ring(ring).tmem:  # seed 000: the scale partition's masked loads (1.0 outside)
            src = self.ops.scale_a if tag.tensor == "scale_a" else self.ops.scale_b
            assert src is not None
            if tag.group is not None:  # a grouped module's scale_b (G, N, K/v): its tile's expert's rows
                src = src[tag.group]
            rows = self.m.tiling.bm if tag.tensor == "scale_a" else self.m.tiling.bn  # (a narrow tile: its bn rows)
            r0, c0 = tag.origin[0], tag.origin[1] // self.m.spec.scale.scale_k
            if self.m.spec.scale_layout is ScaleLayout.BLOCKED:  # (flat: gathered at the kernel's blocked offsets)
                total = self.ops.a.shape[0] if tag.tensor == "scale_a" else self.ops.b_rows.shape[0]
                k_scales = -(-self.ops.a.shape[1] // self.m.spec.scale.scale_k)
                r = torch.arange(r0, r0 + rows)[:, None]
                c = torch.arange(c0, c0 + t.shape[1])[None, :]
                inside = (r < total) & (c < k_scales)
                at = torch.where(inside, blocked.offset(r, c, k_scales), 0)
                box = torch.where(inside, src.reshape(-1)[at], 1.0)
            else:
                box = _block(src, r0, c0, rows, t.shape[1], 1.0)
            self.slots[ring][slot] = torch.ones(t.shape)
            self.slots[ring][slot][:rows] = box
            return
        if tag.tensor in ("scale_a", "scale_b"):
            self.slots[ring][slot] = self._scales(tag, t.shape[1])
            return
        src = (self.ops.a.t() if self.m_major else self.ops.a) if tag.tensor == "A" else self.ops.b_rows
        if tag.group is not None:  # a grouped module's B: the group's matrix, zeros past its edges (3-D descriptor)
            src = src[tag.group]
        if tag.interleave:  # (a cluster's interleaved rows: blocks of rows `stride` apart, ir.Tiling.interleaved)
            q, stride = tag.interleave
            block = torch.cat([_block(src, tag.origin[0] + i * stride, tag.origin[1], q, t.shape[1])
                               for i in range(t.shape[0] // q)])
        else:
            block = _block(src, tag.origin[0], tag.origin[1], t.shape[0], t.shape[1])
        if tag.k_end is not None:  # a K-grouped module's A (m, k): the columns outside its group's K range are zeroed
            block[:, max(0, tag.k_end - tag.origin[1]):] = 0.0
            block[:, :max(0, tag.k_start - tag.origin[1])] = 0.0
        if tag.rows:  # a fitted tile's B blocks (ir.TmaLoad.blocks): the rows between and past them are not copied
            copied = torch.zeros(block.shape[0], dtype=torch.bool)
            for first, rows in tag.rows:
                copied[first:first + rows] = True
            block[~copied] = float("nan")
        self.slots[ring][slot] = block

    def _scales(self, tag: Tag, n: int) -> torch.Tensor:
        """A scale slot (1, n) as CopyScales fills it: scale_a's rows, or scale_b's 128-column blocks (or columns),
        of k-block tag.origin[1] from tile origin tag.origin[0]; 0 outside the scale tensor."""
        ops = self.ops
        start, kb = tag.origin
        recipe = self.m.spec.scale
        subs = self.m.tiling.bk // recipe.scale_k  # rows of a slot: MX's 32-deep slices, else 1
        if tag.tensor == "scale_a":
            assert ops.scale_a is not None
            src, first = ops.scale_a.t(), start  # (k-blocks or MX slices, M)
            if recipe.block_a:  # (k-blocks, M-blocks): each row reads its 128-row block's scale, as the kernel does
                src = src.repeat_interleave(SCALE_BLOCK, dim=1)[:, :ops.a.shape[0]]
        else:
            assert ops.scale_b is not None
            # (k-blocks, N) per column, (k-blocks, N-blocks) per 128x128 block; MX (N, slices), transposed
            src = ops.scale_b.t() if recipe is ScaleRecipe.MX else ops.scale_b
            if tag.group is not None:  # a grouped module's (E, k-blocks, N-blocks): its tile's group's block
                src = src[tag.group]
            first = start if recipe.per_column_b else start // SCALE_BLOCK
        # Outside the scale tensor the kernel reads 0 (cp.async zero-fill), or 1.0 for MX (its masked byte loads)
        fill = 1.0 if recipe is ScaleRecipe.MX else 0.0
        return _block(src, kb * subs, first, subs, n, fill)

    def mma(self, agent: int, ins: MmaI) -> None:
        a = self.slots[ins.a_ring][ins.a_slot]  # (BM, BK); M-major: (BK, BM), read transposed
        if self.m_major:
            a = a.t()
        if ins.a_rows is not None:
            a = a[ins.a_rows[0]:ins.a_rows[1]]  # a warpgroup's row block
        b = self.slots[ins.b_ring][ins.b_slot]  # (BN, BK) K-major, read as (BK, BN); or (BK, BN)
        if ins.b_cols is not None:  # a column block of N
            b = b[ins.b_cols[0]:ins.b_cols[1]] if self.k_major else b[:, ins.b_cols[0]:ins.b_cols[1]]
        if ins.k_cols is not None:  # a slice of K (MX)
            k0, k1 = ins.k_cols
            a = a[:, k0:k1]
            b = b[:, k0:k1] if self.k_major else b[k0:k1]
        prod = a @ (b.t() if self.k_major else b)  # (BM, BN), fp32 products and sums
        accs = self.accs[agent]
        accs[ins.acc] = accs[ins.acc] + prod if ins.use_acc else prod

    def scale_copy(self, ins: ScaleCopyI) -> None:
        """sm_100a: tcgen05_copy of a (rows, 4 x blocks) scale slot into a tensor-memory scale buffer: its first
        columns (a slot of fewer blocks than the buffer leaves the rest as it was)."""
        src = self.slots[ins.ring][ins.slot]
        self.tmem_scales[ins.dst][:, :src.shape[1]] = src

    def tc_mma(self, ins: TcMmaI) -> None:
        """sm_100a: the tensor-memory accumulator slot (+)= A slot @ B slot, in fp32; block-scaled, each 32-deep
        (NVFP4: 16-deep) slice of K of a row of A (of B) times that row's scale from its tensor-memory buffer."""
        a, b = self.slots[ins.a_ring][ins.a_slot], self.slots[ins.b_ring][ins.b_slot]
        if ins.scale_slots:  # seed 000: the slots of the tensor-memory scale rings
            (ra, ia, _), (rb, ib, _) = ins.scale_slots
            vec = self.m.spec.scale.scale_k
            row_a, row_b = self.slots[ra][ia][:a.shape[0]], self.slots[rb][ib][:b.shape[0]]
            if ins.k_cols:  # NVFP4: 64-deep MMA j (K 64j..) reads 4 columns from k_cols[j], as issued
                w = NVFP4_MMA_COLS
                row_a = torch.cat([row_a[:, c:c + w] for c in ins.k_cols], dim=1)
                row_b = torch.cat([row_b[:, c:c + w] for c in ins.k_cols], dim=1)
            a = a * row_a.repeat_interleave(vec, dim=1)
            b = b * row_b.repeat_interleave(vec, dim=1)
        elif ins.scales:
            (sa, _), (sb, _) = ins.scales
            vec = self.m.spec.scale.scale_k
            # (the MMA reads its operands' rows of each buffer: a 16- or 32-row B, rule 18's tokens, the first rows
            # of the 128 the copy brought)
            a = a * self.tmem_scales[sa][:a.shape[0]].repeat_interleave(vec, dim=1)
            b = b * self.tmem_scales[sb][:b.shape[0]].repeat_interleave(vec, dim=1)  # (a K-major (BN, BK) slot)
        prod = a @ (b.t() if self.k_major else b)
        tm = self.slots[ins.acc_ring]
        tm[ins.acc_slot] = tm[ins.acc_slot] + prod if ins.accumulate else prod

    def load_tmem(self, agent: int, ins: LoadTmemI) -> None:
        self.accs[agent][ins.acc] = self.slots[ins.acc_ring][ins.slot][:, ins.cols[0]:ins.cols[1]].clone()

    def promote(self, agent: int, ins: PromoteI) -> None:
        accs = self.accs[agent]
        if ins.scales is None:
            accs[ins.dst] = accs[ins.dst] + accs[ins.src]
            return
        (ar, ai, _), (br, bi, _) = ins.scales.a, ins.scales.b
        sub = ins.scales.sub
        sa = self.slots[ar][ai][sub]  # the tile's BM row scales (of the MX slice)
        if ins.rows is not None:
            sa = sa[ins.rows[0]:ins.rows[1]]
        sb = self.slots[br][bi][sub]
        c0, c1 = ins.cols or (0, accs[ins.dst].shape[1])
        if self.m.spec.scale.per_column_b:
            factor = sa[:, None] * sb[None, c0:c1]
        else:  # one scale per 128 columns: dst lies within one block (the verifier checks it)
            factor = sa[:, None] * sb[c0 // SCALE_BLOCK]
        # The kernel multiplies the scales first, then adds with one FMA; here the product and sum round apart.
        accs[ins.dst] = accs[ins.dst] + accs[ins.src] * factor

    def zero(self, agent: int, acc: str) -> None:
        self.accs[agent][acc] = torch.zeros_like(self.accs[agent][acc])

    def epilogue(self, agent: int, acc: str, steps: tuple[ir.EpilogueStep, ...], off_m: int, off_n: int,
                 block: tuple[int, int] | None = None, group: int = 0) -> None:
        """`steps` on columns `block` of `acc` (all of them when None), whose column 0 is output column off_n; a
        grouped module's rowwise scale_b is its `group`'s row of the (G, N) scales."""
        whole = self.accs[agent][acc]
        c0, c1 = block if block is not None else (0, whole.shape[1])
        x = whole[:, c0:c1]
        off_n += c0
        rows, cols = x.shape
        ops = self.ops
        m, n = ops.out.shape
        if self.m.tiling.swap_ab:  # (C is the transpose of this module's output)
            m, n = n, m
        # Masked loads with other=0.0, as the Gluon epilogue does for rows/columns past M/N.
        in_m = torch.arange(off_m, off_m + rows) < m
        in_n = torch.arange(off_n, off_n + cols) < n
        for s in steps:
            if s is ir.EpilogueStep.SCALE_TENSORWISE:
                assert ops.scale_a is not None and ops.scale_b is not None
                x = x * (ops.scale_a[0] * ops.scale_b[0])
            elif s is ir.EpilogueStep.SCALE_GLOBAL:
                assert ops.globals_ is not None
                x = x * (ops.globals_[0] * ops.globals_[1 + group])  # (a grouped module's: its expert's of B)
            elif s is ir.EpilogueStep.SCALE_ROWWISE:
                assert ops.scale_a is not None and ops.scale_b is not None
                sa = _masked(ops.scale_a, off_m, rows, in_m)
                sb = _masked(ops.scale_b, group * n + off_n, cols, in_n)
                x = x * sa[:, None] * sb[None, :]
            elif s is ir.EpilogueStep.ADD_ROW_BIAS:
                assert ops.bias is not None
                x = x + _masked(ops.bias, off_m, rows, in_m)[:, None]
            else:
                assert ops.bias is not None
                x = x + _masked(ops.bias, off_n, cols, in_n)[None, :]
        out = whole.clone()
        out[:, c0:c1] = x
        self.accs[agent][acc] = out

    def mn(self) -> tuple[int, int]:
        """The result's (M, N): an (M, N) output's shape (a groups output, a quantization's scales, is (M, groups))."""
        g = self.m.spec.epilogue
        j = 0 if g is None else next(j for j, o in enumerate(g.outputs) if o.layout is OutputLayout.FULL)
        m, n = self.ops.outs[j].shape
        return m, n

    def fold(self, agent: int, acc: str, cols: tuple[int, int], off_m: int, off_n: int, starts: bool,
             group: int = 0) -> None:
        """A fused quantization's fold_amax: this block's row amax (over its columns below N) into the group's
        running amax, or starting it (`starts`: the group's first block), NaN-propagating as torch.amax. `group`: a
        grouped module's tile's (the slice its per-group operands read, as `apply`'s)."""
        g = self.m.spec.epilogue
        assert g is not None
        x = self.accs[agent][acc][:, cols[0]:cols[1]]
        rows, width = x.shape
        m, n = self.mn()
        y = values_before_amax(g, x, self.ops.epilogue, range(off_m, off_m + rows), range(off_n, off_n + width),
                               out_shape=(m, n), group=group)
        b = block_amax(y, off_n, n)  # (rows, 1)
        old = self.amax[agent]
        self.amax[agent] = b if starts or old is None else torch.maximum(old, b)

    def atomic_amax(self, agent: int, off_m: int, cols: int, row_end: int | None = None) -> None:
        """Rule 29's atomic_amax: the partition's running row amax (its rows below M, a grouped module's below its
        group's end row, as C's stores are clipped) maxed into the amax workspace, NaN winning (the kernel's integer
        max of the bits puts NaN above +inf), and `cols` columns counted in."""
        amax, count = self.ops.amax, self.ops.amax_cols
        assert amax is not None and count is not None
        v = self.amax[agent]
        if v is None:  # (no fold in this tile: nothing to add; the machine reports it)
            return
        h = max(0, min(v.shape[0], amax.shape[0] - off_m, v.shape[0] if row_end is None else row_end - off_m))
        old = amax[off_m:off_m + h]
        new = v[:h, 0]
        amax[off_m:off_m + h] = torch.where(torch.isnan(old) | torch.isnan(new), float("nan"),
                                            torch.maximum(old, new))
        count[off_m:off_m + h] += cols

    def store_scales(self, agent: int, output: int, off_m: int, off_n: int, row_end: int | None = None) -> None:
        """A groups output's values of the last apply_epilogue: the block's rows of its group's column, rows
        below M (masked register stores), a grouped module's below its group's end row (as `tma_store` clips C)."""
        outs = self.ep_outs[agent]
        dst, writes = self.ops.outs[output], self.ops.writes[output]
        g = self.m.spec.epilogue
        assert g is not None
        col = g.amax().index(off_n)
        if output >= len(outs) or col >= dst.shape[1]:
            return
        v = outs[output][:, 0]
        h = max(0, min(v.shape[0], dst.shape[0] - off_m, v.shape[0] if row_end is None else row_end - off_m))
        dst[off_m:off_m + h, col] = v[:h].to(dst.dtype)
        writes[off_m:off_m + h, col] += 1

    def apply(self, agent: int, acc: str, cols: tuple[int, int], off_m: int, off_n: int,
              grouped: bool = False, group: int = 0, up_cols: tuple[int, int] | None = None) -> None:
        """The epilogue graph on columns `cols` of `acc`, which are output rows and columns from (off_m, off_n),
        of a tile of `group` (a grouped module's: the slice its per-group operands read).

        Operands are read from their tensors at this block's offsets: global memory is read-only, so a
        load_operand's registers hold exactly that unless the schedule loaded another block, which the machine
        reports (OPERAND_NOT_LOADED) rather than models."""
        g = self.m.spec.epilogue
        assert g is not None  # (program.py refuses apply_epilogue without a graph)
        x = self.accs[agent][acc][:, cols[0]:cols[1]]  # (rows, block cols) fp32
        rows, width = x.shape
        m, n = self.mn()
        if self.m.tiling.swap_ab:  # (the outputs are C, the graph's coordinates C^T's)
            m, n = n, m
        # A fused quantization reads the running amax its folds left (NaN where none: the machine reports that).
        amax = (self.amax[agent] if self.amax[agent] is not None else torch.full((rows, 1), float("nan"))) \
            if grouped else None
        if amax is None and g.group_amax() is not None:  # (rule 29's first pass: no output reads it)
            amax = torch.zeros(rows, 1)
        # A gate/up pair: x the gate block, `up` its up block, off_n and (m, n) the (M, N / 2) result's.
        up = None if up_cols is None else self.accs[agent][acc][:, up_cols[0]:up_cols[1]]
        self.ep_outs[agent] = evaluate_tile(g, x, self.ops.epilogue, range(off_m, off_m + rows),
                                            range(off_n, off_n + width), out_shape=(m, n),
                                            out_dtype=self.m.spec.out_dtype, amax=amax, group=group, up_tile=up)

    def store_smem(self, agent: int, acc: str, buffer: str, cols: tuple[int, int], output: int | None = None,
                   transposed: bool = False) -> None:
        if output is None:
            block = self.accs[agent][acc][:, cols[0]:cols[1]]
            self.bufs[buffer] = (block.t() if transposed else block).to(self.buf_dtype[buffer])
            return
        outs, buf = self.ep_outs[agent], self.bufs[buffer]
        tile = (outs[output].t() if transposed else outs[output]) if output < len(outs) else None
        if tile is not None and tile.shape == buf.shape:
            self.bufs[buffer] = tile.to(self.buf_dtype[buffer])
        else:  # no apply_epilogue of this block (a finding): the registers hold nothing meaningful
            self.bufs[buffer] = torch.full(buf.shape, float("nan")).to(self.buf_dtype[buffer])

    def tma_store(self, buffer: str, off_m: int, off_n: int, output: int = 0, workspace: bool = False,
                  row_end: int | None = None) -> None:
        if workspace:
            assert self.ops.workspace is not None and self.ops.ws_writes is not None
            _box_write(self.ops.workspace, self.ops.ws_writes, self.bufs[buffer], off_m, off_n)
            return
        tile = self.bufs[buffer]
        if row_end is not None:  # a grouped module's store: clipped at its group's end row
            tile = tile[:max(0, row_end - off_m)]
        self._write(tile, off_m, off_n, output)

    def store_tile(self, agent: int, acc: str, off_m: int, off_n: int, output: int | None = None) -> None:
        if output is None:
            self._write(self.accs[agent][acc].to(self.ops.out.dtype), off_m, off_n)
            return
        outs = self.ep_outs[agent]  # (gfx1250's fused epilogue: the whole tile's outputs, in their stored dtypes)
        acc_t = self.accs[agent][acc]
        tile = outs[output] if output < len(outs) and outs[output].shape == acc_t.shape else \
            torch.full(acc_t.shape, float("nan"))  # no apply_epilogue of this tile (a finding)
        self._write(tile, off_m, off_n, output)

    def _write(self, tile: torch.Tensor, off_m: int, off_n: int, output: int = 0) -> None:
        _box_write(self.ops.outs[output], self.ops.writes[output], tile, off_m, off_n)


def _box_write(out: torch.Tensor, writes: torch.Tensor, tile: torch.Tensor, off_m: int, off_n: int) -> None:
    h, w = min(tile.shape[0], out.shape[0] - off_m), min(tile.shape[1], out.shape[1] - off_n)
    if h > 0 and w > 0:  # TMA drops the out-of-bounds part of the box
        out[off_m:off_m + h, off_n:off_n + w] = tile[:h, :w].to(out.dtype)
        writes[off_m:off_m + h, off_n:off_n + w] += 1


def reduce_splits(workspace: torch.Tensor, split_k: int, out: torch.Tensor,
                  boxes: list[tuple[int, int, int, int]] | None = None) -> None:
    """The split-K reduction kernel's meaning: C = slab 0 + slab 1 + ... in fp32, in slab order, cast to C; only
    within `boxes` (row, column, rows, columns) when given (the tiles whose every k-range was simulated)."""
    m, n = out.shape
    mp = workspace.shape[0] // split_k
    for r0, c0, rows, cols in boxes if boxes is not None else [(0, 0, m, n)]:
        r1, c1 = min(r0 + rows, m), min(c0 + cols, n)
        acc = workspace[r0:r1, c0:c1].clone()
        for s in range(1, split_k):
            acc += workspace[s * mp + r0:s * mp + r1, c0:c1]
        out[r0:r1, c0:c1] = acc.to(out.dtype)


def reduce_span(workspace: torch.Tensor, split_k: int, out: torch.Tensor, boxes: list[tuple[int, int, int]],
                tiles: int) -> None:
    """A ranged split-K launch's reduction (`ir.Tiling.ranged`): for each (i, off_m, off_n) in `boxes`, the tile of
    C at (off_m, off_n) = the sum of its k-ranges' boxes i, tiles + i, 2 * tiles + i, ... of the compact
    workspace, in k-range order, cast to C and clipped to C's edges."""
    m, n = out.shape
    rows, cols = workspace.shape[0] // (split_k * tiles), workspace.shape[1]
    for i, r0, c0 in boxes:
        h, w = min(rows, m - r0), min(cols, n - c0)
        acc = workspace[i * rows:i * rows + h, :w].clone()
        for s in range(1, split_k):
            acc += workspace[(s * tiles + i) * rows:(s * tiles + i) * rows + h, :w]
        out[r0:r0 + h, c0:c0 + w] = acc.to(out.dtype)


def _masked(v: torch.Tensor, off: int, size: int, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(size)
    valid = int(mask.sum())
    if valid > 0:
        out[:valid] = v[off:off + valid]
    return out
