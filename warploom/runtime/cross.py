"""Cross-compile a kernel for sm_90a, sm_100a or gfx1250 without a GPU, and read its resources.

NVIDIA: registers and spills are only reported by the driver after a GPU load, so we re-run the ptxas that
Triton ships with ``-v`` on the PTX, and disassemble the cubin with its cuobjdump. gfx1250: Triton's AMD backend
writes the AMDGCN assembly, whose kernel metadata gives VGPRs, spills and LDS.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

from warploom.backends import gluon_api
from warploom.backends.gluon_reduce import RANGED_REDUCE_PARAMS, REDUCE_PARAMS
from warploom.backends.gluon_sm90 import (
    GLOBAL_PARAMS,
    GluonSource,
    b_blocks,
    buffer_desc,
    cga_bases,
    scale_desc,
)
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.runtime.loader import load
from warploom.spec import ALayout, BLayout, ScaleRecipe

_SIG = {DType.BF16: "bf16", DType.FP16: "fp16", DType.FP32: "fp32", DType.E4M3: "fp8e4nv", DType.E5M2: "fp8e5",
        DType.E8M0: "u8", DType.E2M1: "u8"}


@dataclass(frozen=True)
class Compiled:
    """A cross-compiled kernel.

    Attributes:
        target: e.g. ``sm_90a``.
        ptx, cubin, sass: the compiler's outputs (SASS as cuobjdump prints it).
        registers: registers per thread at the kernel's entry (ptxas -v).
        spills: spill stores + spill loads, bytes.
        smem_bytes: shared memory the kernel allocates.
        ptxas_log: ptxas's own report, including performance advisories such as C7514 (wgmma serialized); gfx1250:
            the AMDGCN metadata's register and spill counts in words.
        counted: the instructions `summary` counts (the target's declaration says which, `warploom.targets`).
    """

    target: str
    ptx: str
    cubin: bytes
    sass: str
    registers: int
    spills: int
    smem_bytes: int
    ptxas_log: str
    counted: tuple[str, ...] = ()

    def count(self, mnemonic: str) -> int:
        """How many SASS instructions start with `mnemonic` (e.g. HGMMA, QGMMA, SETMAXNREG); gfx1250: how many
        AMDGCN instructions do (e.g. v_wmma, tensor_load_to_lds, s_wait_tensorcnt, s_barrier)."""
        if self.target == "gfx1250":
            return len(re.findall(rf"^\s*{mnemonic}", self.sass, re.M))
        return len(re.findall(rf"\b{mnemonic}\b", self.sass))

    def block_scaled_mmas(self) -> int:
        """sm_100a: tcgen05 MMAs with block scales (UTCQMMA / UTCOMMA whose scale factors follow the instruction
        descriptor as a tensor-memory operand; a plain one ends at the descriptor)."""
        return len(re.findall(r"\bUTC[QO]MMA\b[^;]*idesc\[\w+\], tmem\[", self.sass))

    @property
    def wgmma_serialized(self) -> bool:
        """ptxas advisory C7514/C7515...: wgmma pipelines serialized (a silent performance cliff)."""
        return bool(re.search(r"C75(0[89]|1\d)", self.ptxas_log)) and "wgmma" in self.ptxas_log.lower()

    def summary(self) -> dict[str, Any]:
        """The target, registers, spills and shared memory, and how many of each counted instruction the SASS (or
        AMDGCN) has; sm_90a also whether ptxas serialized its wgmma."""
        mma: dict[str, Any] = {k: self.count(k) for k in self.counted}
        if self.target == "sm_90a":
            mma["wgmma_serialized"] = self.wgmma_serialized
        return {"target": self.target, "registers": self.registers, "spills": self.spills,
                "smem_bytes": self.smem_bytes, **mma}


def _gl_dtype(d: DType) -> Any:
    from triton.experimental.gluon import language as gl

    return {DType.BF16: gl.bfloat16, DType.FP16: gl.float16, DType.FP32: gl.float32,
            DType.E4M3: gl.float8e4nv, DType.E5M2: gl.float8e5, DType.E8M0: gl.uint8, DType.E2M1: gl.uint8}[d]


Block = tuple[DType, list[int], tuple[tuple[int, int], ...], bool]


def descriptor_blocks(m: ir.Module) -> dict[str, Block]:
    """Each TMA descriptor's element type, box (block) shape, cluster layout (`cga_bases`) and whether its e2m1
    values are padded to a byte each in shared memory (`ir.Ring.padded`: MX fp8 x fp4's fp4 operand)."""
    t, s = m.tiling, m.spec
    cm, cn = t.cluster_mn
    b_block = [t.bn * cn, t.bk] if s.b_layout is BLayout.K_MAJOR else [t.bk, t.bn * cn]
    a_block = [t.bk, t.bm] if s.a_layout is ALayout.M_MAJOR else [t.bm * cm, t.bk]
    # MX fp4: descriptors over the packed bytes, (rows, BK / 2) (MX fp8 x fp4: the fp4 operand's)
    if s.fp4_a:
        a_block = [t.bm, t.bk // 2]
    if s.fp4_b:
        b_block = [t.bn, t.bk // 2]
    if t.b_per_group:  # (B's 3-D descriptor over (G, N, K) or (G, K, N): one group's block)
        b_block = [1, *b_block]
    if any(r.tensor is ir.Tensor.A and r.boxes > 1 for r in m.rings):  # (A copied as 64-row boxes, `ir.Ring.boxes`:
        # rule 32's 192-row tile; a cluster of fitted tiles, whose box is every CTA's 64 rows, `ir.Tiling.interleaved`)
        a_block = [64 * cm if t.interleaved else 64, t.bk]
    split, whole = cga_bases(t.cluster, True, t.cluster_n), cga_bases(t.cluster, False, t.cluster_n)
    # (a 1x2 cluster's: A whole in every CTA, B's columns split, a K-major B box's along its first dimension)
    a_cga, b_cga = (whole, cga_bases(t.cluster, True, s.b_layout is not BLayout.K_MAJOR)) if t.cluster_n else \
        (split, whole)
    padded = {r.tensor: r.padded for r in m.rings}
    blocks: dict[str, Block] = {"a_desc": (s.a_dtype, a_block, a_cga, padded.get(ir.Tensor.A, False)),
                                "b_desc": (s.b_dtype, b_block, b_cga, padded.get(ir.Tensor.B, False))}
    for cb in b_blocks(m):  # (a fitted tile's B: a box per block width, ir.TmaLoad.blocks; K-major B only)
        blocks[f"b_desc_w{cb.cols}"] = (s.b_dtype, [cb.cols, t.bk], b_cga, False)
    for bf in m.buffers:
        if bf.tensor is ir.Tensor.C:
            blocks[buffer_desc(bf)] = (bf.dtype, [bf.rows * cm, bf.cols * cn], split, False)
        elif bf.tensor is ir.Tensor.WORKSPACE:  # split-K: fp32 partial sums
            blocks[buffer_desc(bf)] = (bf.dtype, [bf.rows, bf.cols], (), False)
        elif bf.tensor is ir.Tensor.OPERAND:
            # (a cluster's dense operand: every CTA its rows of the cluster tile's block, as C)
            blocks[f"{bf.operand}_desc"] = (bf.dtype, [bf.rows * cm, bf.cols * cn], split, False)
    for r in m.rings:
        if r.byte_scales:  # sm_100a MX / NVFP4: the k-block's 128x4 blocks of torch's blocked scales
            blocks[scale_desc(r.tensor)] = (r.dtype, [r.rows // 128, r.cols // 4, 2, 256], (), False)
    return blocks


def shared_layout(dtype: DType, block: list[int], cga: tuple[tuple[int, int], ...] = (), padded: bool = False) -> Any:
    from triton.experimental.gluon import language as gl

    if padded:  # MX fp8 x fp4's fp4 operand: (rows, BK/2) bytes of pairs, a value a byte in shared memory
        return gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(dtype), fp4_padded=True)
    # The blocked scales' 4-D boxes (MX e8m0, NVFP4 e4m3; no other descriptor has four dimensions): unswizzled, so a
    # slot viewed as (rows, 4) is a layout tcgen05.cp reads
    if dtype is DType.E8M0 or len(block) == 4:
        return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=len(block))
    if cga:  # (3.6's get_default_for has no cga_layout: only Triton >= 3.7 builds cluster kernels, gluon_api)
        return gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(dtype), cga_layout=[list(c) for c in cga])
    return gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(dtype))


# Stream-K's workspace and flags (backends/gluon_raster.SK_PARAMS).
SK_TYPES = {"sk_ws_ptr": "*fp32", "sk_flags_ptr": "*i32"}


def signature(m: ir.Module, src: GluonSource) -> dict[str, str]:
    sig: dict[str, str] = {}
    blocks = descriptor_blocks(m)
    for p in src.params:
        if p in blocks:
            d, blk, cga, padded = blocks[p]
            # Exactly how Triton's JIT mangles a Gluon TensorDescriptor argument.
            sig[p] = f"tensordesc<{_SIG[d]}[{', '.join(map(str, blk))}],{shared_layout(d, blk, cga, padded)!r}>"
        elif p in ("sa_ptr", "sb_ptr") and m.spec.scale is ScaleRecipe.MX:
            sig[p] = "*u8"  # e8m0 scales go as their bytes (runtime/launch.py)
        elif p in ("sa_ptr", "sb_ptr") and m.spec.scale is ScaleRecipe.NVFP4:
            sig[p] = "*fp8e4nv"  # row-major e4m3 scales (seed 000's scale partition) go as they are
        elif p in ("scale_a_ptr", "scale_b_ptr", "sa_ptr", "sb_ptr", *GLOBAL_PARAMS):
            sig[p] = "*fp32"
        elif p == "amax_ptr":  # rule 29's row amax: the int32 bits of non-negative floats (ir.AtomicAmax)
            sig[p] = "*i32"
        elif p in SK_TYPES:
            sig[p] = SK_TYPES[p]
        elif p == "group_ptr":
            sig[p] = "*i32"
        elif p == "c_ptr":  # (a grouped module's C, for its clipped stores)
            sig[p] = f"*{_SIG[m.spec.out_dtype]}"
        elif p == "bias_ptr" and m.spec.epilogue is None:
            assert m.spec.bias_dtype is not None
            sig[p] = f"*{_SIG[m.spec.bias_dtype]}"
        elif re.fullmatch(r"c\d+_ptr", p):  # (a fused 1x128 quantization's scales: gluon_sm90.scale_outputs)
            sig[p] = "*fp32"
        elif p.endswith("_ptr"):
            assert m.spec.epilogue is not None
            sig[p] = f"*{_SIG[m.spec.epilogue.operand(p.removesuffix('_ptr')).dtype]}"
        else:
            sig[p] = "i32"
    return sig


def _ptxas(arch: int) -> str:
    """The ptxas Triton itself assembles `arch` with, so the re-run reads the same PTX version: Triton ships a newer one
    for Blackwell (the older rejects the PTX version sm_100a kernels need), which from 3.9 assembles sm_90a too."""
    from triton.backends.nvidia.compiler import get_ptxas

    return str(get_ptxas(arch).path)


def _cuobjdump() -> str:
    from triton import knobs

    return str(knobs.nvidia.cuobjdump.path)


def cross_compile_cuda(m: ir.Module, src: GluonSource, *, target: str, arch: int) -> Compiled:
    """An NVIDIA kernel (Triton's compute capability `arch`, ptxas's --gpu-name `target`) to PTX, cubin and SASS,
    with ptxas's register and spill report."""
    from triton.experimental.gluon._runtime import GluonASTSource

    fn = load(src.text, src.kernel)
    # Pointers are 16-byte aligned (checked on the host), which lets Triton vectorize scale loads.
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(src.params) if p.endswith("_ptr")}
    ast = GluonASTSource(fn, signature(m, src), {}, attrs)
    options = gluon_api.compile_options(num_warps=src.num_warps, num_stages=1, num_ctas=src.num_ctas,
                                           maxnreg=src.maxnreg)
    if src.reduce_kernel is not None:
        _compile_reduce(m, src, options)
    return _assemble(ast, options, target, arch)


def cross_compile_cast(m: ir.Module, src: GluonSource, *, target: str = "sm_90a", arch: int = 90) -> Compiled:
    """Rule 29's cast kernel (`GluonSource.cast_kernel`, backends/gluon_cast.py) to PTX, cubin and SASS, with ptxas's
    register and spill report, as `cross_compile_cuda` does the module's own kernel."""
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.backends.gluon_cast import CAST_WARPS, cast_params

    assert m.amax_pass is not None and src.cast_kernel is not None, f"{m.name} has no cast kernel (rule 29)"
    params = cast_params(m.tiling.grouping)  # (a grouped first pass's: the bounds and G too)
    sig = {p: "i32" for p in params}
    sig.update(ws_ptr="*fp32", amax_ptr="*i32", q_ptr=f"*{_SIG[m.amax_pass.fp8]}", s_ptr="*fp32")
    if "group_ptr" in params:
        sig["group_ptr"] = "*i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params) if p in ("ws_ptr", "amax_ptr")}
    options = gluon_api.compile_options(num_warps=CAST_WARPS, num_stages=1)
    return _assemble(GluonASTSource(load(src.text, src.cast_kernel), sig, {}, attrs), options, target, arch)


def _assemble(ast: Any, options: dict[str, Any], target: str, arch: int) -> Compiled:
    """`ast` compiled by Triton for compute capability `arch`, re-assembled by ptxas -v for its report."""
    import triton
    from triton.backends.compiler import GPUTarget

    ck = triton.compile(ast, target=GPUTarget("cuda", arch, 32), options=options)
    ptx, cubin = ck.asm["ptx"], ck.asm["cubin"]
    with tempfile.TemporaryDirectory() as d:
        ptx_path, cubin_path = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(ptx_path, "w") as f:
            f.write(ptx)
        with open(cubin_path, "wb") as f:
            f.write(cubin)
        flags = gluon_api.for_triton(gluon_api.installed()).ptxas_flags  # (those Triton assembled the cubin with)
        r = subprocess.run([_ptxas(arch), "-v", *flags, f"--gpu-name={target}", ptx_path, "-o",
                            os.path.join(d, "re.cubin")], capture_output=True, text=True, check=False)
        log = r.stdout + r.stderr
        sass = subprocess.run([_cuobjdump(), "-sass", cubin_path], capture_output=True, text=True,
                              check=True).stdout
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return Compiled(
        target=str(target), ptx=ptx, cubin=cubin, sass=sass,
        registers=int(regs.group(1)) if regs else -1,
        spills=int(spill.group(1)) + int(spill.group(2)) if spill else -1,
        smem_bytes=int(ck.metadata.shared), ptxas_log=log,
    )


def cross_compile_gfx1250(m: ir.Module, src: GluonSource) -> Compiled:
    """gfx1250 (Triton's AMD backend, no GPU needed): the kernel's AMDGCN assembly, and its metadata's VGPR count,
    scratch bytes per lane (`spills`: spilled VGPRs land there; SGPRs spill into VGPR lanes, which costs no memory,
    and `ptxas_log` notes their count) and LDS bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = {p: "i32" for p in src.params}
    sig.update(a_ptr=f"*{_SIG[m.spec.a_dtype]}", b_ptr=f"*{_SIG[m.spec.b_dtype]}",
               c_ptr=f"*{_SIG[m.spec.output_dtypes()[0]]}")  # (a fused epilogue's output 0 has its own dtype)
    if "scale_a_ptr" in sig:
        sig.update(scale_a_ptr="*fp32", scale_b_ptr="*fp32")
    g = m.spec.epilogue
    if g is not None:  # (scaled_mm's scales and bias are graph operands here)
        sig.update({f"{o.name}_ptr": f"*{_SIG[o.dtype]}" for o in g.operands})
        sig.update({f"c{j}_ptr": f"*{_SIG[d]}" for j, d in enumerate(m.spec.output_dtypes()) if j})
    elif "bias_ptr" in sig:
        assert m.spec.bias_dtype is not None
        sig["bias_ptr"] = f"*{_SIG[m.spec.bias_dtype]}"
    # As Triton's JIT specializes a launch: pointers are 16-byte aligned (checked on the host), and integers that
    # are multiples of 16 say so, here the planned sizes and contiguous strides. Without it C's masked stores go
    # out one element at a time, each behind a branch.
    sp = m.spec
    ints = {"M": sp.m, "N": sp.n, "K": sp.k, "a_stride_m": sp.k, "b_stride_n": sp.k, "b_stride_k": sp.n,
            **{f"c{j}_stride_m": sp.n for j in range(len(sp.output_dtypes()))}, "c_stride_m": sp.n}
    attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(src.params)
             if p.endswith("_ptr") or ints.get(p, 1) % 16 == 0}
    fn = load(src.text, src.kernel)
    ck = triton.compile(GluonASTSource(fn, sig, {}, attrs), target=GPUTarget("hip", "gfx1250", 32),
                        options=gluon_api.compile_options(num_warps=src.num_warps, num_stages=1))
    asm = ck.asm["amdgcn"]

    def meta(key: str) -> int:
        found = re.search(rf"\.{key}:\s*(\d+)", asm)
        return int(found.group(1)) if found else -1

    note = (f"vgprs {meta('vgpr_count')}, sgprs {meta('sgpr_count')}, vgpr spills {meta('vgpr_spill_count')}, "
            f"sgpr spills {meta('sgpr_spill_count')} (into VGPR lanes), scratch {meta('private_segment_fixed_size')} "
            "bytes")
    return Compiled(target="gfx1250", ptx=ck.asm.get("llir", ""), cubin=ck.asm.get("hsaco", b""), sass=asm,
                    registers=meta("vgpr_count"), spills=meta("private_segment_fixed_size"),
                    smem_bytes=int(ck.metadata.shared), ptxas_log=note)


def _compile_reduce(m: ir.Module, src: GluonSource, options: dict[str, Any]) -> None:
    """Compile split-K's reduction kernel too, so a cross-compile proves both kernels of the module build."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    assert src.reduce_kernel is not None
    fn = load(src.text, src.reduce_kernel)
    sig = {p: "i32" for p in (RANGED_REDUCE_PARAMS if m.tiling.ranged else REDUCE_PARAMS)}
    sig.update(ws_ptr="*fp32", c_ptr=f"*{_SIG[m.spec.out_dtype]}")
    triton.compile(GluonASTSource(fn, sig, {}, {}), target=GPUTarget("cuda", 90, 32),
                   options={**options, "num_warps": 4, "maxnreg": None})
