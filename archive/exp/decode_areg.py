"""Experiment (session 16, for the next device run): a decode kernel whose ring carries B alone, A from registers.

Planner rule 16's decode kernel (64x64 tiles, 12 stages) stages A through shared memory like any tile. At M <= 16,
most of each A tile is TMA zero-fill, so half of the ring holds no useful bytes. This hand-written probe (not
compiler output) gives the consumer A from registers. It loads the next k-block's rows with `gl.load` while the
current one's wgmma runs, and wgmma takes them in its register-A form (archive/exp/a_regs_probe.py). The producer
TMA-loads B alone, so the ring may be about twice as deep in shared memory. The output is a few rows, stored with
a masked `gl.store`.

`--cross` compiles every variant for sm_90a on the CPU, with registers, spills and ptxas's wgmma warnings. Without
it (on the GPU), it checks each variant against the fp32 product, then times it (CUDA graphs of 10 calls, median
of interleaved rounds) against warploom's own plan and torch, at N = K = 8192, M in {1, 16, 64}. bf16 runs against
torch.matmul; fp8 (e4m3, unit tensorwise scales) against torch._scaled_mm.

    PYTHONPATH=. python3 archive/exp/decode_areg.py --cross
    PYTHONPATH=. python3 archive/exp/decode_areg.py [--rounds 5]      # on the GPU
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _rows import checked, decode_problem, interleaved_ms, write_rows  # noqa: E402

SOURCE = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

BN = gl.constexpr(BN_VALUE)
BK = gl.constexpr(BK_VALUE)
STAGES = gl.constexpr(STAGES_VALUE)
INSTR_K = gl.constexpr(INSTR_K_VALUE)
K_WIDTH = gl.constexpr(K_WIDTH_VALUE)
A_VEC = gl.constexpr(A_VEC_VALUE)


@gluon.jit
def consumer(b_ring, ready_bars, empty_bars, a_ptr, c_ptr, M, N, K, stride_am, stride_cm):  # 4 warps
    pid = gl.program_id(0)
    num_tiles = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BN, INSTR_K])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=K_WIDTH)
    # A is read in 16-byte vectors along K (a pointer per vector, not per element: per-element pointers for
    # 64 x BK spilled) and moved into wgmma's operand layout by convert_layout.
    ld_layout: gl.constexpr = gl.BlockedLayout([1, A_VEC], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, ld_layout))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, ld_layout))
    a_offs = gl.expand_dims(rows, 1) * stride_am + gl.expand_dims(cols, 0)
    row_ok = gl.expand_dims(rows, 1) < M  # rows past M read nothing and hold zeros
    out_rows = gl.arange(0, 64, layout=gl.SliceLayout(1, acc_layout))
    acc = gl.zeros([64, BN], gl.float32, acc_layout)
    c = 0
    for tile_id in range(pid, num_tiles, gl.num_programs(0)):
        off_n = tile_id * BN
        # K is a multiple of BK (the host checks): a k-block is all in or all out, a scalar condition.
        a_next = gl.load(a_ptr + a_offs, mask=row_ok, other=0.0)
        for kk in range(k_tiles):
            a_cur = a_next
            # The next k-block's A rows: their load latency hides behind this k-block's ready wait and wgmma.
            kn = (kk + 1) * BK
            a_next = gl.load(a_ptr + a_offs + kn, mask=row_ok & (kn < K), other=0.0)
            mbarrier.wait(ready_bars.index(c % STAGES), (c // STAGES) & 1)
            acc = warpgroup_mma(gl.convert_layout(a_cur, a_layout), b_ring.index(c % STAGES).permute((1, 0)), acc,
                                use_acc=kk > 0, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES), pred=kk > 0)
            c += 1
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES))
        out_cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
        c_offs = gl.expand_dims(out_rows, 1) * stride_cm + gl.expand_dims(out_cols, 0)
        ok = (gl.expand_dims(out_rows, 1) < M) & (gl.expand_dims(out_cols, 0) < N)
        gl.store(c_ptr + c_offs, acc.to(gl.bfloat16), mask=ok)


@gluon.jit
def producer(b_ring, ready_bars, empty_bars, b_desc, N, K):  # 1 warp
    pid = gl.program_id(0)
    num_tiles = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    p = 0
    my_tiles = gl.cdiv(num_tiles - pid, gl.num_programs(0))
    for t in range(my_tiles * k_tiles):
        tile_id = pid + (t // k_tiles) * gl.num_programs(0)
        kk = t % k_tiles
        mbarrier.wait(empty_bars.index(p % STAGES), ((p // STAGES) & 1) ^ 1)
        mbarrier.expect(ready_bars.index(p % STAGES), b_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(b_desc, [tile_id * BN, kk * BK], ready_bars.index(p % STAGES),
                                        b_ring.index(p % STAGES))
        p += 1


@gluon.jit
def decode_areg(a_ptr, b_desc, c_ptr, M, N, K, stride_am, stride_cm):
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (consumer, (b_ring, ready_bars, empty_bars, a_ptr, c_ptr, M, N, K, stride_am, stride_cm)),
        (producer, (b_ring, ready_bars, empty_bars, b_desc, N, K)),
    ], [1], [PRODUCER_REGS])
'''

# name: (BN, STAGES). One 128-byte swizzle atom of K per row: BK 64 for bf16, 128 for fp8 (16 KiB per 128-row B).
VARIANTS = {"n64_s24": (64, 24), "n64_s12": (64, 12), "n128_s12": (128, 12), "n128_s8": (128, 8)}
DTYPES = {"bf16": (64, 16, 2, 16), "fp8e4nv": (128, 32, 4, 8)}  # BK, wgmma K, A's k_width, element bits


def _load(dtype: str, bn: int, stages: int) -> Any:
    bk, ik, kw, _ = DTYPES[dtype]
    text = SOURCE
    for key, v in {"BN_VALUE": bn, "BK_VALUE": bk, "STAGES_VALUE": stages, "INSTR_K_VALUE": ik,
                   "K_WIDTH_VALUE": kw, "A_VEC_VALUE": 128 // DTYPES[dtype][3],
                   "PRODUCER_REGS": os.environ.get("PRODUCER_REGS", "24")}.items():
        text = text.replace(key, str(v))
    from warploom.runtime.loader import load

    return load(text, "decode_areg")


def _layout(dtype: str) -> Any:
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(128, DTYPES[dtype][3], 2)


def cross() -> None:
    import triton
    from a_regs_probe import sass_and_ptxas
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for dtype in DTYPES:
        bk = DTYPES[dtype][0]
        for name, (bn, stages) in VARIANTS.items():
            sig = {"a_ptr": f"*{dtype}", "b_desc": f"tensordesc<{dtype}[{bn}, {bk}],{_layout(dtype)!r}>",
                   "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_cm": "i32"}
            # What the JIT derives on the device: 16-byte aligned pointers, N, K and strides divisible by 16.
            attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(sig) if p != "M"}
            try:
                ck = triton.compile(GluonASTSource(_load(dtype, bn, stages), sig, {}, attrs),
                                    target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": 240})
            except Exception as e:  # reported: a variant that does not fit is a finding
                print(f"{dtype} {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            _, log = sass_and_ptxas(ck)
            regs = re.findall(r"Used (\d+) registers", log)
            spills = re.findall(r"(\d+) bytes spill stores", log)
            warn = [x for x in log.splitlines() if "wgmma" in x.lower() or "C7514" in x or "C7515" in x]
            print(f"{dtype} {name}: shared {ck.metadata.shared} B, registers {regs}, spill stores {spills}, "
                  f"wgmma warnings {warn or 'none'}", flush=True)


def _launch(fn: Any, grid: int, a: Any, desc: Any, out: Any, m: int, n: int, k: int) -> Any:
    assert k % (128 // a.element_size()) == 0, "the probe reads whole k-blocks of A"
    fn[(grid,)](a, desc, out, m, n, k, a.stride(0), out.stride(0), num_warps=4)
    return out


def gpu(rounds: int) -> None:
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    rows = []
    n = k = 8192
    for dtype in DTYPES:
        bk = DTYPES[dtype][0]
        kernels = {name: (_load(dtype, bn, s), bn) for name, (bn, s) in VARIANTS.items()}
        for m in (1, 16, 64):
            a, w, runs, ref = decode_problem(dtype, m, n, k)
            for name, (fn, bn) in kernels.items():
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                desc = TensorDescriptor.from_tensor(w, [bn, bk], _layout(dtype))
                grid = min(132, -(-n // bn))
                runs[name] = functools.partial(_launch, fn, grid, a, desc, out, m, n, k)
            checked(runs, ref, f"{dtype} M={m}")
            medians = interleaved_ms(runs, rounds)
            t_torch = medians["torch"]
            for name, ms in medians.items():
                rows.append({"dtype": dtype, "m": m, "variant": name, "ms": ms, "ratio": t_torch / ms,
                             "tbps": (a.numel() * a.element_size() + w.numel() * w.element_size() + m * n * 2)
                             / ms / 1e9})
                print(f"{dtype} M={m:3d} {name:40s} {ms * 1e3:8.1f} us  ratio vs torch {t_torch / ms:.3f}", flush=True)
    print(write_rows(rows, "decode-areg.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cross() if args.cross else gpu(args.rounds)


if __name__ == "__main__":
    main()
