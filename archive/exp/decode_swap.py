"""Experiment (session 17, issue 6 item 2): swap-AB decode, C^T = B^T A^T, so N fills wgmma's 64 rows.

Planner rule 16's decode kernel runs 64x64 tiles: at M <= 16 most of each stage's A half is TMA zero-fill, and
the wgmma computes 64 rows of which M are real. Swapped, each stage holds a 64 x BK tile of the weight (B's
storage, N rows, K-contiguous: wgmma's A operand) and an MT x BK tile of the activation (A, K-contiguous: wgmma's
B operand, K-major), with MT = 8, 16 or 64 >= M. The accumulator is 64 x MT: output columns by output rows. A
stage is nearly all useful bytes (bf16, MT = 16: 8 KiB of weight, 2 KiB of activation), so the ring can be deeper
for the same shared memory. The output, a few rows, goes out through a masked `gl.store`. A hand-written probe
(not compiler output), in the shape of `decode_areg.py`.

    PYTHONPATH=. python3 archive/exp/decode_swap.py --cross
    PYTHONPATH=. python3 archive/exp/decode_swap.py [--rounds 5]      # on the GPU: $OUT/decode-swap.json
"""

from __future__ import annotations

import argparse
import functools
import itertools
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

BN = gl.constexpr(64)
MT = gl.constexpr(MT_VALUE)
BK = gl.constexpr(BK_VALUE)
STAGES = gl.constexpr(STAGES_VALUE)
INSTR_K = gl.constexpr(INSTR_K_VALUE)


@gluon.jit
def consumer(w_ring, x_ring, ready_bars, empty_bars, c_ptr, M, N, K, stride_cm):  # 4 warps
    pid = gl.program_id(0)
    num_tiles = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, MT, INSTR_K])
    st_layout: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [0, 1])  # a thread per output column
    n_idx = gl.arange(0, BN, layout=gl.SliceLayout(1, st_layout))  # accumulator rows: output columns
    m_idx = gl.arange(0, MT, layout=gl.SliceLayout(0, st_layout))  # accumulator columns: output rows
    acc = gl.zeros([BN, MT], gl.float32, acc_layout)
    c = 0
    for tile_id in range(pid, num_tiles, gl.num_programs(0)):
        off_n = tile_id * BN
        for kk in range(k_tiles):
            mbarrier.wait(ready_bars.index(c % STAGES), (c // STAGES) & 1)
            acc = warpgroup_mma(w_ring.index(c % STAGES), x_ring.index(c % STAGES).permute((1, 0)), acc,
                                use_acc=kk > 0, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES), pred=kk > 0)
            c += 1
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES))
        # Through a blocked layout (a 64 x MT bf16 shuffle in shared memory): storing the wgmma layout itself with
        # pointers made ptxas serialize the wgmma (C7514), here where both operands come from shared memory.
        out_v = gl.convert_layout(acc.to(gl.bfloat16), st_layout)
        cols = off_n + n_idx
        c_offs = gl.expand_dims(m_idx, 0) * stride_cm + gl.expand_dims(cols, 1)
        ok = (gl.expand_dims(m_idx, 0) < M) & (gl.expand_dims(cols, 1) < N)
        gl.store(c_ptr + c_offs, out_v, mask=ok)


@gluon.jit
def producer(w_ring, x_ring, ready_bars, empty_bars, w_desc, x_desc, N, K):  # 1 warp
    pid = gl.program_id(0)
    num_tiles = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    p = 0
    my_tiles = gl.cdiv(num_tiles - pid, gl.num_programs(0))
    for t in range(my_tiles * k_tiles):
        tile_id = pid + (t // k_tiles) * gl.num_programs(0)
        kk = t % k_tiles
        mbarrier.wait(empty_bars.index(p % STAGES), ((p // STAGES) & 1) ^ 1)
        mbarrier.expect(ready_bars.index(p % STAGES), w_desc.block_type.nbytes + x_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [tile_id * BN, kk * BK], ready_bars.index(p % STAGES),
                                        w_ring.index(p % STAGES))
        tma.async_copy_global_to_shared(x_desc, [0, kk * BK], ready_bars.index(p % STAGES),
                                        x_ring.index(p % STAGES))
        p += 1


@gluon.jit
def decode_swap(w_desc, x_desc, c_ptr, M, N, K, stride_cm):
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    x_ring = gl.allocate_shared_memory(x_desc.dtype, [STAGES, MT, BK], x_desc.layout)
    ready_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready_bars.index(i), count=1)
        mbarrier.init(empty_bars.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (consumer, (w_ring, x_ring, ready_bars, empty_bars, c_ptr, M, N, K, stride_cm)),
        (producer, (w_ring, x_ring, ready_bars, empty_bars, w_desc, x_desc, N, K)),
    ], [1], [24])
'''

# name: (MT, STAGES), per M measured. One 128-byte swizzle atom of K per row: BK 64 for bf16, 128 for fp8.
VARIANTS = {1: {"mt8_s20": (8, 20), "mt16_s12": (16, 12), "mt16_s20": (16, 20)},
            16: {"mt16_s12": (16, 12), "mt16_s20": (16, 20)},
            64: {"mt64_s8": (64, 8), "mt64_s12": (64, 12)}}
DTYPES = {"bf16": (64, 16, 16), "fp8e4nv": (128, 32, 8)}  # BK, wgmma K, element bits


def _load(dtype: str, mt: int, stages: int) -> Any:
    bk, ik, _ = DTYPES[dtype]
    text = SOURCE
    for key, v in {"MT_VALUE": mt, "BK_VALUE": bk, "STAGES_VALUE": stages, "INSTR_K_VALUE": ik}.items():
        text = text.replace(key, str(v))
    from warploom.runtime.loader import load

    return load(text, "decode_swap")


def _layout(dtype: str) -> Any:
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(128, DTYPES[dtype][2], 2)


def cross() -> None:
    import triton
    from a_regs_probe import sass_and_ptxas
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for dtype in DTYPES:
        bk = DTYPES[dtype][0]
        seen = set()
        for variants in VARIANTS.values():
            for name, (mt, stages) in variants.items():
                if name in seen:
                    continue
                seen.add(name)
                lay = f"{_layout(dtype)!r}"
                sig = {"w_desc": f"tensordesc<{dtype}[64, {bk}],{lay}>",
                       "x_desc": f"tensordesc<{dtype}[{mt}, {bk}],{lay}>",
                       "c_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_cm": "i32"}
                attrs = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(sig) if p in ("c_ptr", "N", "K")}
                try:
                    ck = triton.compile(GluonASTSource(_load(dtype, mt, stages), sig, {}, attrs),
                                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": 240})
                except Exception as e:  # reported: a variant that does not fit is a finding
                    print(f"{dtype} {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                    continue
                sass, log = sass_and_ptxas(ck)
                regs = re.findall(r"Used (\d+) registers", log)
                spills = re.findall(r"(\d+) bytes spill stores", log)
                warn = [x for x in log.splitlines() if "C7514" in x or "C7515" in x]
                mma = sorted({m for m in re.findall(r"[HQ]GMMA\.\S+", sass)})
                print(f"{dtype} {name}: shared {ck.metadata.shared} B, registers {regs}, spill stores {spills}, "
                      f"wgmma warnings {warn or 'none'}, {mma}", flush=True)


def _launch(fn: Any, grid: int, wd: Any, xd: Any, out: Any, m: int, n: int, k: int) -> Any:
    fn[(grid,)](wd, xd, out, m, n, k, out.stride(0), num_warps=4)
    return out


def _one(dtype: str, m: int, n: int, k: int, rounds: int) -> list[dict[str, Any]]:
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    bk = DTYPES[dtype][0]
    a, w, runs, ref = decode_problem(dtype, m, n, k)
    for name, (mt, stages) in VARIANTS[m].items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        wd = TensorDescriptor.from_tensor(w, [64, bk], _layout(dtype))
        xd = TensorDescriptor.from_tensor(a, [mt, bk], _layout(dtype))
        runs[name] = functools.partial(_launch, _load(dtype, mt, stages), min(132, -(-n // 64)), wd, xd, out, m, n, k)
    checked(runs, ref, f"{dtype} M={m}")
    medians = interleaved_ms(runs, rounds)
    t_torch = medians["torch"]
    rows = []
    for name, ms in medians.items():
        moved = a.numel() * a.element_size() + w.numel() * w.element_size() + m * n * 2
        rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "variant": name, "ms": ms, "ratio": t_torch / ms,
                     "tbps": moved / ms / 1e9})
        print(f"{dtype} {m}x{n}x{k} {name:38s} {ms * 1e3:8.1f} us  ratio vs torch {t_torch / ms:.3f}", flush=True)
    return rows


def gpu(rounds: int, nk: list[tuple[int, int]], ms: list[int]) -> None:
    rows = []
    for (n, k), dtype, m in itertools.product(nk, DTYPES, ms):
        rows += _one(dtype, m, n, k, rounds)
    print(write_rows(rows, "decode-swap.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nk", default="8192x8192", help="N x K pairs, comma-separated")
    ap.add_argument("--m", default="1,16,64", help="M values (each of 1, 16, 64)")
    args = ap.parse_args()
    nk = [(int(x.split("x")[0]), int(x.split("x")[1])) for x in args.nk.split(",")]
    cross() if args.cross else gpu(args.rounds, nk, [int(x) for x in args.m.split(",")])


if __name__ == "__main__":
    main()
