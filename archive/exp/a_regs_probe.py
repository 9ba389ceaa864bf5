"""Experiment (session 16, CPU only): can a decode kernel feed wgmma its A operand from registers?

Planner rule 16's decode tiles (64x64) stage A through shared memory like any tile. At M <= 16, most of those 64
rows are TMA zero-fill, so about half of each stage holds no useful bytes. The ring carries B, the bytes a decode
GEMM streams. If A came from registers (wgmma's register-A form), the same shared memory could hold twice as many
useful stages in flight.

This compiles a minimal Gluon kernel for sm_90a, with A loaded by `gl.load` into a `DotOperandLayout` and B by TMA
into shared memory, and `warpgroup_mma(a_regs, b_smem, acc, is_async=True)`. It prints what the SASS issues.

Result (2026-11-23, triton 3.6.0): both forms compile with no spills, and shared memory holds B's tile alone
(8200 bytes with the mbarrier):
- bf16: `HGMMA.64x64x16.F32.BF16 R24, R56, gdesc[UR4], R24` (A in R56.., B by descriptor), 80 registers;
- fp8: `QGMMA.64x64x32.F32.E4M3.E4M3 R24, R56, gdesc[UR4], R24`, 117 registers (k_width 4).
So a decode schedule whose ring carries only B is expressible in Gluon; not built or timed yet.

    python3 archive/exp/a_regs_probe.py
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

SOURCE = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)


@gluon.jit
def probe(a_ptr, b_desc, c_ptr, M, K, stride_am, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
          INSTR_K: gl.constexpr, K_WIDTH: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, INSTR_K])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=K_WIDTH)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, a_layout))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, a_layout))
    phase = 0
    for k in range(0, K, BK):
        mbarrier.expect(bar, b_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(b_desc, [0, k], bar, b_smem)
        offs = gl.expand_dims(rows, 1) * stride_am + gl.expand_dims(cols, 0) + k
        a = gl.load(a_ptr + offs, mask=gl.expand_dims(rows, 1) < M, other=0.0)  # rows past M: zeros
        mbarrier.wait(bar, phase)
        phase ^= 1
        acc = warpgroup_mma(a, b_smem.permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
    out_rows = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    out_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    c_offs = gl.expand_dims(out_rows, 1) * BN + gl.expand_dims(out_cols, 0)
    gl.store(c_ptr + c_offs, acc.to(gl.bfloat16), mask=gl.expand_dims(out_rows, 1) < M)
'''


def compile_probe(dtype: str = "bf16", bn: int = 64) -> Any:
    """bf16: BK 64, wgmma k16; fp8 (e4m3): BK 128, k32. One 128-byte swizzle atom of K per row either way."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.runtime.loader import load

    bits, bk, instr_k, k_width = (16, 64, 16, 2) if dtype == "bf16" else (8, 128, 32, 4)
    layout = gl.NVMMASharedLayout(128, bits, 2)
    sig = {"a_ptr": f"*{dtype}", "b_desc": f"tensordesc<{dtype}[{bn}, {bk}],{layout!r}>", "c_ptr": "*bf16",
           "M": "i32", "K": "i32", "stride_am": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr",
           "INSTR_K": "constexpr", "K_WIDTH": "constexpr"}
    consts = {"BM": 64, "BN": bn, "BK": bk, "INSTR_K": instr_k, "K_WIDTH": k_width}
    return triton.compile(GluonASTSource(load(SOURCE, "probe"), sig, consts, {}), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": 4})


def sass_and_ptxas(ck: Any) -> tuple[str, str]:
    """The cubin's SASS (cuobjdump) and ptxas -v's report on the PTX, with the tools Triton ships."""
    import subprocess

    from warploom.runtime.cross import _cuobjdump, _ptxas

    with tempfile.TemporaryDirectory() as d:
        cubin, ptx = os.path.join(d, "k.cubin"), os.path.join(d, "k.ptx")
        with open(cubin, "wb") as f:
            f.write(ck.asm["cubin"])
        with open(ptx, "w") as f:
            f.write(ck.asm["ptx"])
        sass = subprocess.run([_cuobjdump(), "-sass", cubin], capture_output=True, text=True, check=True).stdout
        r = subprocess.run([_ptxas(90), "-v", "--gpu-name=sm_90a", ptx, "-o", os.path.join(d, "re.cubin")],
                           capture_output=True, text=True, check=False)
    return sass, r.stdout + r.stderr


def main() -> None:
    for dtype in ("bf16", "fp8e4nv"):
        try:
            ck = compile_probe(dtype)
        except Exception as e:  # reported: which form Triton refuses is the finding
            print(f"{dtype}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        sass, log = sass_and_ptxas(ck)
        mma = [line.strip() for line in sass.splitlines() if "GMMA" in line]
        regs = re.search(r"Used (\d+) registers", log)
        spills = re.search(r"(\d+) bytes spill stores", log)
        print(f"{dtype}: registers {regs.group(1) if regs else '?'}, spill stores "
              f"{spills.group(1) if spills else '?'} bytes, shared {ck.metadata.shared} bytes; {len(mma)} wgmma:")
        for line in mma:
            print("   ", re.sub(r"\s+", " ", line)[:160])


if __name__ == "__main__":
    main()
