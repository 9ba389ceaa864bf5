"""Lower a gfx1250 schedule IR module (planner rule 20, passes/gfx1250.py) to Triton Gluon for AMD gfx1250.

One ``@gluon.jit`` kernel, no ``gl.warp_specialize`` (Triton 3.6 cannot legalize it for gfx1250): its warps run the
module's one WORKGROUP partition. The rings are LDS buffers filled by Tensor Data Mover copies
(``tdm.async_load`` through descriptors made in the kernel from the base pointers and strides), waited for with
``tdm.async_wait`` (a count of copies in flight) and a barrier of the warps. The MMA is ``wmma`` on operand
fragments loaded from the slots. The epilogue's scales and bias, or a fused epilogue's graph (its operands by
ordinary loads, sm_90a's register math), are applied in the wmma layout, and each output is stored with masked
global stores. Every line that implements an IR op carries the op's text form as a comment, as on sm_90a.

Triton 3.6 predicates a copy through its descriptor, so a copy past the tile's last k-block still issues and counts;
the schedule does not rely on that: the IR treats it as never issued, and the tail's wait takes every copy.
"""

from __future__ import annotations

from warploom.backends.gluon_sm90 import GluonSource, PartitionEmitter, prelude, slot_index
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.spec import BLayout

_HEADER = """\
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.amd import AMDWMMALayout
from triton.experimental.gluon.language.amd.gfx1250 import tdm, wmma
"""

# LDS rows (BK elements) are padded by ir.LDS_ROW_PAD bytes, so the wmma operand loads of neighbouring rows fall in
# different banks; the TDM copy writes the padded layout itself.
_PAD_BYTES = ir.LDS_ROW_PAD


def wmma_k(a: DType) -> int:
    """The K of one gfx1250 wmma instruction: 32 for 16-bit inputs, 64 for fp8 (64 bytes of K per lane group)."""
    return 64 if a.bytes == 1 else 32


def k_width(a: DType) -> int:
    """Elements of K each lane holds contiguously in a wmma operand fragment (16 bytes)."""
    return 16 // a.bytes


def output_ptr(output: int) -> str:
    """The pointer parameter of kernel output `output` (c_ptr, c1_ptr, ...); its leading stride is `..._stride_m`."""
    return "c_ptr" if output == 0 else f"c{output}_ptr"


def kernel_params(m: ir.Module) -> tuple[str, ...]:
    """Base pointers and the leading strides of A, B and C (each's inner stride is 1), the scale and bias pointers
    the epilogue reads (a fused epilogue's: each graph operand's pointer, its strides compiled in, then each further
    output's pointer and leading stride), then M, N, K."""
    steps = {s for o, _ in ir.walk(m.partitions[0].body) if isinstance(o, ir.Epilogue) for s in o.steps}
    b_stride = "b_stride_n" if m.spec.b_layout is BLayout.K_MAJOR else "b_stride_k"
    ps = ["a_ptr", "b_ptr", "c_ptr", "a_stride_m", b_stride, "c_stride_m"]
    g = m.spec.epilogue
    if g is not None:
        ps += [f"{o.name}_ptr" for o in g.operands]
        for j in range(1, len(g.outputs)):
            ps += [output_ptr(j), f"c{j}_stride_m"]
    if steps & {ir.EpilogueStep.SCALE_ROWWISE, ir.EpilogueStep.SCALE_TENSORWISE}:
        ps += ["scale_a_ptr", "scale_b_ptr"]
    if steps & {ir.EpilogueStep.ADD_BIAS, ir.EpilogueStep.ADD_ROW_BIAS}:
        ps.append("bias_ptr")
    return (*ps, "M", "N", "K")


class _Gfx1250Emitter(PartitionEmitter):
    """The WORKGROUP partition, emitted as the kernel's own body (the epilogue steps lower as on sm_90a)."""

    _in_k = False  # whether the ops being emitted stand in the k-loop (a copy's block is then kk + ahead)

    def emit(self) -> None:
        b, m, t = self.buf, self.m, self.m.tiling
        warps_m = 2 if self.p.warps >= 4 else 1
        warps_n = self.p.warps // warps_m
        k_major = m.spec.b_layout is BLayout.K_MAJOR
        b.line("@gluon.jit")
        with b.block(f"def {m.name}({', '.join(kernel_params(m))})",
                     comment=f"{self.p.role.value}: {self.p.warps} warps copy (TDM) and compute (wmma)"):
            layout = self.api.wmma_layout(warps_m, warps_n, (16, 16, wmma_k(m.spec.a_dtype)))
            b.line(f"acc_layout: gl.constexpr = {layout}",
                   comment=f"wmma accumulator: {warps_m}x{warps_n} warps, each a "
                           f"{t.bm // warps_m}x{t.bn // warps_n} block of the tile")
            kw = k_width(m.spec.a_dtype)
            b.line(f"a_layout: gl.constexpr = gl.DotOperandLayout(0, acc_layout, {kw})")
            b.line(f"b_layout: gl.constexpr = gl.DotOperandLayout(1, acc_layout, {kw})")
            if m.spec.epilogue is not None:
                b.line("ep_layout: gl.constexpr = acc_layout", comment="the fused epilogue runs on the whole tile")
            b_block = ("BN", "BK") if k_major else ("BK", "BN")
            for name, block, d in (("a", ("BM", "BK"), m.spec.a_dtype), ("b", b_block, m.spec.b_dtype)):
                b.line(f"{name}_smem: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[{block[1]}, "
                       f"{_PAD_BYTES // d.bytes}]], [{block[0]}, {block[1]}], [1, 0])",
                       comment=f"{_PAD_BYTES} bytes of padding a row" if name == "a" else None)
            for r in m.rings:
                desc = f"{r.tensor.value.lower()}"
                b.line(f"{r.name} = gl.allocate_shared_memory({desc}_ptr.dtype.element_ty, [STAGES, {r.rows}, "
                       f"{r.cols}], {desc}_smem)", comment=f"ring {r.name}: {r.depth} x ({r.rows}, {r.cols}) "
                                                         f"{r.dtype.value} in LDS")
            b.line("pid = gl.program_id(0)")
            b.line("num_pid_m = gl.cdiv(M, BM)")
            b.line("num_pid_n = gl.cdiv(N, BN)")
            b.line("num_tiles = num_pid_m * num_pid_n")
            b.line("k_tiles = gl.cdiv(K, BK)")
            for c in self.p.cursors:
                b.line(f"{c.name} = 0", comment=f"cursor {c.name}: k-blocks read so far, across tiles")
            self.body(self.p.body)

    def loop(self, lp: ir.Loop) -> None:
        b = self.buf
        if lp.kind is ir.LoopKind.TILES:
            with b.block("for tile_id in range(pid, num_tiles, gl.num_programs(0))", comment="for tiles"):
                b.line("off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)")
                self._descriptors()
                for a in self.p.accumulators:  # (wmma's overwrite at k == 0: the tile's sum starts from zero)
                    b.line(f"{a.name} = gl.zeros([{a.rows}, {a.cols}], gl.float32, acc_layout)",
                           comment="the first k-block's wmma overwrites")
                self._in_k, self._offsets = False, set()
                self.body(lp.body)
        elif lp.kind is ir.LoopKind.K:
            with b.block("for kk in range(k_tiles)", comment="for k"):
                self._in_k = True
                self.body(lp.body)
                self._in_k = False
        else:
            raise NotImplementedError(f"gfx1250: no {lp.kind.value} loop (one software-pipelined partition)")

    def _descriptors(self) -> None:
        """The tile's TDM descriptors, based at its first row of A and of B (K-major) or first column of B (N-major):
        Triton 3.6 computes a copy's offset from the descriptor's base as row * stride in 32 bits, which from the
        tensors' own bases would pass 2^31 in a large A or weight (the planner refuses an N-major B whose K rows do)."""
        b = self.buf
        b.line("a_desc = tdm.make_tensor_descriptor(a_ptr + off_m.to(gl.int64) * a_stride_m, [M - off_m, K], "
               "[a_stride_m, 1], [BM, BK], a_smem)", "A's rows from the tile's first: 64-bit base, 32-bit offsets")
        if self.m.spec.b_layout is BLayout.K_MAJOR:
            b.line("b_desc = tdm.make_tensor_descriptor(b_ptr + off_n.to(gl.int64) * b_stride_n, [N - off_n, K], "
                   "[b_stride_n, 1], [BN, BK], b_smem)", "B as (N, K), K-major, from the tile's first row")
        else:
            b.line("b_desc = tdm.make_tensor_descriptor(b_ptr + off_n, [K, N - off_n], [b_stride_k, 1], [BK, BN], "
                   "b_smem)", "B as (K, N), N-major, from the tile's first column")

    def _k_block(self, ahead: int) -> tuple[str, str]:
        """A copy's k-block `ahead` past the current one (kk in the k-loop, 0 in the prologue), and its K origin."""
        if not self._in_k:
            return str(ahead), ("0" if ahead == 0 else f"{ahead} * BK")
        kb = "kk" if ahead == 0 else f"kk + {ahead}"
        return kb, ("kk * BK" if ahead == 0 else f"({kb}) * BK")

    def body(self, stmts: tuple[ir.Stmt, ...]) -> None:
        """As every backend's, but a run of `fused` tdm_loads (one k-block's) is one fused copy."""
        run: list[ir.TdmLoad] = []
        for s in (*stmts, None):
            if isinstance(s, ir.TdmLoad) and s.fused and (not run or run[0].ahead == s.ahead):
                run.append(s)
                continue
            if run:
                self._fused(run)
                run = []
            if isinstance(s, ir.TdmLoad) and s.fused:
                run.append(s)
            elif s is not None:
                super().body((s,))

    def _fused(self, run: list[ir.TdmLoad]) -> None:
        """One ``tdm.async_load_fused``: each member's descriptor moved to its block (bounds clamped, as
        ``tdm.async_load`` with offsets does) and predicated, with the warps that issue it."""
        self.api.require_tdm_fused(f"fused copy of {len(run)} tdm_loads")
        members = []
        for o in run:
            s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
            kb, k_origin = self._k_block(o.ahead)
            origin = {ir.Axis.M: "0", ir.Axis.N: "0", ir.Axis.K: k_origin}
            coord = ", ".join(origin[a] for a in o.coord)
            desc = f"tdm.update_tensor_descriptor({o.tensor.value.lower()}_desc, add_offsets=[{coord}], " \
                   f"pred={self.api.tdm_pred(f'{kb} < k_tiles')}, clamp_bounds=True)"
            members.append(f"({desc}, {o.ring}.index({s}), {o.warps})")
        self.buf.line(f"tdm.async_load_fused([{', '.join(members)}])", "; ".join(printer.op(o) for o in run))

    def op(self, o: ir.Op) -> None:
        b, c = self.buf, printer.op(o)
        match o:
            case ir.TdmLoad():
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                kb, k_origin = self._k_block(o.ahead)
                # (the descriptors start at the tile's rows and columns)
                origin = {ir.Axis.M: "0", ir.Axis.N: "0", ir.Axis.K: k_origin}
                coord = ", ".join(origin[a] for a in o.coord)
                desc = f"{o.tensor.value.lower()}_desc"
                pred = self.api.tdm_pred(f"{kb} < k_tiles")
                hint = self.api.tdm_hint(o.warps)
                b.line(f"tdm.async_load({desc}, [{coord}], {o.ring}.index({s}), pred={pred}{hint})", c)
            case ir.TdmWait():
                b.line(f"tdm.async_wait({o.pending})", c)
                if o.ahead and self._in_k:
                    # (An if/else of two waits would not compile: MLIR merges the branches into one wait whose count
                    # is a block argument, and the count must be an immediate.)
                    with b.block(f"if kk + {o.ahead} >= k_tiles",
                                 comment="the tile's last blocks: no copy of a later block was issued behind them"):
                        b.line("tdm.async_wait(0)")
            case ir.SyncWarps():
                b.line(self.api.barrier, c)
            case ir.Wmma():
                s = slot_index(o.slot, self.depth[o.slot.cursor], self.stages)
                k_major = self.m.spec.b_layout is BLayout.K_MAJOR
                b.line(f"a = {o.a_ring}.index({s}).load(a_layout)", c)
                b_view = f"{o.b_ring}.index({s})" + (".permute((1, 0))" if k_major else "")
                b.line(f"b = {b_view}.load(b_layout)", "B's slot read as (K, N)" if k_major else None)
                b.line(f"{o.acc} = wmma(a, b, {o.acc})")
            case ir.Advance():
                b.line(f"{o.cursor} += 1", c)
            case ir.Epilogue():
                b.line(comment=c)
                self.epilogue(o)  # (it records the index vectors it computed in self._offsets)
            case ir.LoadOperand():
                self.load_operand(o)
            case ir.ApplyEpilogue():
                self.apply_epilogue(o)
            case ir.StoreTile():
                out = self.m.spec.output_dtypes()[o.output or 0]
                value = o.acc if o.output is None else f"ep_out{o.output}"  # (apply_epilogue's, already cast)
                ptr, stride = output_ptr(o.output or 0), f"{output_ptr(o.output or 0).removesuffix('_ptr')}_stride_m"
                b.line(comment=c)
                if "offs_m" not in self._offsets:
                    b.line("offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))")
                if "offs_n" not in self._offsets:
                    b.line("offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))")
                b.line(f"c_ptrs = {ptr} + gl.expand_dims(offs_m, 1).to(gl.int64) * {stride} + "
                       "gl.expand_dims(offs_n, 0)", "C itself may pass 2^31 elements")
                if "c_mask" not in self._offsets:
                    b.line("c_mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)")
                self._offsets |= {"offs_m", "offs_n", "c_mask"}
                b.line(f"gl.store(c_ptrs, {value}{'' if o.output is not None else f'.to({out.gluon})'}, "
                       "mask=c_mask)")
            case _:
                raise NotImplementedError(f"gfx1250: no lowering for `{c}`")


def lower_gfx1250(m: ir.Module) -> GluonSource:
    """Generate Gluon source for a complete (verified) gfx1250 module."""
    assert m.gfx1250, f"{m.name} is {m.target.with_article} module, not a gfx1250 one"
    b = prelude(m, _HEADER)
    b.line()
    b.line()
    (part,) = m.partitions
    _Gfx1250Emitter(m, part, b).emit()
    return GluonSource(b.text(), m.name, kernel_params(m), part.warps, 0)
