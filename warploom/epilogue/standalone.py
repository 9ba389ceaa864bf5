"""A standalone elementwise Gluon kernel that applies an epilogue graph to an (M, N) fp32 tensor.

It is the emitter's test harness: the compile-only tier cross-compiles it for sm_90a to prove that `emit`
and `load_operand` write valid Gluon for every op, and the GPU tier runs it against `reference.evaluate`.
It is not warp-specialized and does no GEMM: each program loads one [BM, BN] block of ``acc`` with a
BlockedLayout, loads the operands by kind, runs the emitted statements and stores every output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warploom.backends.codebuf import CodeBuffer
from warploom.backends.gluon_api import compile_options
from warploom.dtypes import DType
from warploom.epilogue import gluon, printer
from warploom.epilogue import graph as eg
from warploom.errors import InputError

# Triton's signature names of pointer element types.
_PTR = {DType.BF16: "*bf16", DType.FP16: "*fp16", DType.FP32: "*fp32", DType.E4M3: "*fp8e4nv", DType.E5M2: "*fp8e5"}


@dataclass(frozen=True)
class StandaloneKernel:
    """Generated source of one standalone epilogue kernel.

    Attributes:
        text: the Python module's source.
        name: the ``@gluon.jit`` function's name in it.
        signature: each parameter's Triton type (``*fp32``, ``i32``), in order.
        out_dtypes: each output's stored dtype.
        num_warps: warps per program.
        block: (BM, BN) of one program.
    """

    text: str
    name: str
    signature: dict[str, str]
    out_dtypes: tuple[DType, ...]
    num_warps: int
    block: tuple[int, int]


def source(g: eg.EpilogueGraph, out_dtype: DType, *, block: tuple[int, int] = (32, 64),
           num_warps: int = 4) -> StandaloneKernel:
    """The kernel for `g`: ``out_i[m, n] = output i of g at (m, n)`` over an (M, N) fp32 ``acc``."""
    bm, bn = block
    out_dtypes = tuple(o.resolve(out_dtype) for o in g.outputs)
    sig: dict[str, str] = {"acc_ptr": "*fp32"}
    for s in g.operands:
        sig[f"{s.name}_ptr"] = _PTR[s.dtype]
        sig[f"{s.name}_rs"] = "i32"
        sig[f"{s.name}_cs"] = "i32"
    for i, d in enumerate(out_dtypes):
        sig[f"out{i}_ptr"] = _PTR[d]
    sig["M"] = sig["N"] = "i32"

    b = CodeBuffer()
    b.line("from triton.experimental import gluon")
    b.line("from triton.experimental.gluon import language as gl")
    for imp in gluon.IMPORTS:
        b.line(imp)
    b.line()
    b.line(f"BM = gl.constexpr({bm})")
    b.line(f"BN = gl.constexpr({bn})")
    b.line()
    b.line()
    b.line("@gluon.jit")
    with b.block(f"def epilogue_kernel({', '.join(sig)})"):
        for ln in printer.text(g).splitlines():
            b.line(comment=ln)
        # 4 contiguous fp32 per thread along N (16-byte accesses); warps stacked along M.
        b.line(f"layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [{num_warps}, 1], [1, 0])")
        b.line("offs_m = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))  # [BM]")
        b.line("offs_n = gl.program_id(1) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))  # [BN]")
        b.line("mask_m = offs_m < M")
        b.line("mask_n = offs_n < N")
        b.line("mask = gl.expand_dims(mask_m, 1) & gl.expand_dims(mask_n, 0)  # [BM, BN]")
        # (64-bit: an (M, N) of 2^31 elements or more would wrap an i32 offs_m * N)
        b.line("offs = gl.expand_dims(offs_m.to(gl.int64) * N, 1) + gl.expand_dims(offs_n, 0)  # [BM, BN], row-major")
        b.line("acc = gl.load(acc_ptr + offs, mask=mask, other=0.0)  # [BM, BN] fp32")
        for s in g.operands:
            b.line(gluon.load_operand(s, f"{s.name}_v", f"{s.name}_ptr", offs_m="offs_m", offs_n="offs_n",
                                      mask_m="mask_m", mask_n="mask_n", rs=f"{s.name}_rs", cs=f"{s.name}_cs"))
        outs = [f"out{i}" for i in range(len(g.outputs))]
        for ln in gluon.emit(g, "acc", {s.name: f"{s.name}_v" for s in g.operands}, outs, out_dtype=out_dtype):
            b.line(ln)
        for o in outs:
            b.line(f"gl.store({o}_ptr + offs, {o}, mask=mask)")
    return StandaloneKernel(b.text(), "epilogue_kernel", sig, out_dtypes, num_warps, block)


def cross_compile(k: StandaloneKernel, arch: int = 90) -> Any:
    """Compile `k` for ``sm_<arch>`` without a GPU; returns Triton's compiled kernel (``.asm["ptx"]``, ...)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.runtime.loader import load

    fn = load(k.text, k.name)
    src = GluonASTSource(fn, k.signature, {}, {})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=compile_options(num_warps=k.num_warps))


def run(g: eg.EpilogueGraph, acc: Any, operands: Mapping[str, Any], out_dtype: DType) -> tuple[Any, ...]:
    """Apply `g` on the GPU: `acc` an (M, N) CUDA tensor, `operands` the tensors `g.operands` were classified
    from. Returns the outputs as (M, N) tensors of their stored dtypes."""
    import torch

    from warploom.runtime.loader import load

    k = source(g, out_dtype)
    fn = load(k.text, k.name)
    acc = acc.float().contiguous()
    m, n = acc.shape
    outs = tuple(torch.empty(m, n, dtype=d.torch, device=acc.device) for d in k.out_dtypes)
    args: list[Any] = [acc]
    for s in g.operands:
        t = operands[s.name]
        # The kernel addresses the operand by the spec's strides: a different tensor (a .cuda() copy of an
        # expanded view is materialized, for one) would be read wrongly, so refuse it.
        if tuple(t.shape) != s.shape or tuple(t.stride()) != s.strides:
            raise InputError(s.name, f"the tensor classified as {s.name} (shape {s.shape}, strides {s.strides})",
                             f"shape {tuple(t.shape)}, strides {tuple(t.stride())}",
                             "classify the tensors that are passed (on their device)")
        rs, cs = s.mn_strides()
        args += [t, rs, cs]
    args += [*outs, m, n]
    bm, bn = k.block
    fn[(-(-m // bm), -(-n // bn))](*args, **compile_options(num_warps=k.num_warps))
    return outs
