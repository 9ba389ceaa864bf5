"""Experiment (session 24, Triton >= 3.7.1): does a 2-CTA cluster with TMA multicast of B close the unaligned-rows gap?

bf16 rows that are not whole 128-byte lines cost warploom 25-30% (docs/benchmarks.md, session 23): each unaligned
box row touches two L2 lines. A cluster of two CTAs stacked along M shares B's tile: the cluster's lead CTA loads
it once and TMA multicasts it into both CTAs' shared memory, so B's L2 traffic halves. This is a hand-written
kernel in the shape of warploom's 128x256 plan (a producer warp, two consumer warpgroups, a 4-stage ring,
persistent over tiles with a grouped raster), written once for a cluster of `CL` CTAs:

- CL = 1: one CTA, 128x256 per CTA, the consumers split N (128 columns each; warploom's own plan splits M);
- CL = 2: the cluster's tile is 256x256, A's box is split between the CTAs (cga_layout [[1, 0]]), B's box is
  broadcast (cga_layout [[0, 0]]) and multicast by the lead CTA. Each CTA's consumers release a stage on their own
  CTA's `empty` barrier (the A slot) and on the pair's barrier in the lead CTA (the B slot both CTAs read), which
  the lead's producer waits on before it multicasts again.

Run on the H100 with Triton >= 3.7.1 first on the path:

    python3 archive/exp/cluster_probe.py --sizes 4634x4968x3672,4608x4992x3712 --out cluster.json
    python3 archive/exp/cluster_probe.py --compile-only       # cross-compile both kernels for sm_90a (no GPU)
"""

from __future__ import annotations

import argparse
import functools
import json

TEMPLATE = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

CL = gl.constexpr({cl})
BM = gl.constexpr(128)
CM = gl.constexpr({cm})
BN = gl.constexpr(256)
HN = gl.constexpr(128)
EN = gl.constexpr(64)
BK = gl.constexpr(64)
STAGES = gl.constexpr({stages})
GROUP_M = gl.constexpr(8)


@gluon.jit
def tile_coords(tile_id, num_pid_m, num_pid_n):
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m * CM, pid_n * BN


@gluon.jit
def consumer(a_ring, b_ring, ready, empty, pair, c_smem, c_desc, M, N, K, HALF: gl.constexpr):
    pid = gl.program_id(0)
    num_pid_m = gl.cdiv(M, CM)
    num_pid_n = gl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = gl.cdiv(K, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, HN, 16], cga_layout={acc_cga})
    acc = gl.zeros([CM, HN], gl.float32, acc_layout)
    c = 0
    for tile_id in range(pid, num_tiles, gl.num_programs(0)):
        off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)
        for kk in range(k_tiles):
            mbarrier.wait(ready.index(c % STAGES), (c // STAGES) & 1)
            acc = warpgroup_mma(a_ring.index(c % STAGES), b_ring.index(c % STAGES).slice(HALF * HN, HN, dim=1), acc,
                                use_acc=kk > 0, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES), pred=kk > 0)
            {pair_arrive_prev}
            c += 1
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index((c + STAGES - 1) % STAGES))
        {pair_arrive_last}
        lo, hi = acc.reshape([CM, 2, EN]).permute(0, 2, 1).split()
        tma.store_wait(0)
        c_smem.store(lo.to(gl.bfloat16))
        fence_async_shared()
        tma.async_store(c_desc, [off_m, off_n + HALF * HN], c_smem)
        tma.store_wait(0)
        c_smem.store(hi.to(gl.bfloat16))
        fence_async_shared()
        tma.async_store(c_desc, [off_m, off_n + HALF * HN + EN], c_smem)
    tma.store_wait(0)


@gluon.jit
def consumer0(a_ring, b_ring, ready, empty, pair, c_smem0, c_desc, M, N, K):
    consumer(a_ring, b_ring, ready, empty, pair, c_smem0, c_desc, M, N, K, 0)


@gluon.jit
def consumer1(a_ring, b_ring, ready, empty, pair, c_smem1, c_desc, M, N, K):
    consumer(a_ring, b_ring, ready, empty, pair, c_smem1, c_desc, M, N, K, 1)


@gluon.jit
def producer(a_ring, b_ring, ready, empty, pair, a_desc, b_desc, M, N, K):
    pid = gl.program_id(0)
    num_pid_m = gl.cdiv(M, CM)
    num_pid_n = gl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = gl.cdiv(K, BK)
    p = 0
    for tile_id in range(pid, num_tiles, gl.num_programs(0)):
        off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)
        for kk in range(k_tiles):
            mbarrier.wait(empty.index(p % STAGES), ((p // STAGES) & 1) ^ 1)
            {pair_wait}
            mbarrier.expect(ready.index(p % STAGES), a_desc.nbytes_per_cta + b_desc.nbytes_per_cta)
            tma.async_load(a_desc, [off_m, kk * BK], ready.index(p % STAGES), a_ring.index(p % STAGES))
            tma.async_load(b_desc, [kk * BK, off_n], ready.index(p % STAGES), b_ring.index(p % STAGES),
                           multicast={multicast})
            p += 1


@gluon.jit
def cluster_gemm(a_desc, b_desc, c_desc, M, N, K):
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, CM, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    c_smem0 = gl.allocate_shared_memory(c_desc.dtype, [CM, EN], c_desc.layout)
    c_smem1 = gl.allocate_shared_memory(c_desc.dtype, [CM, EN], c_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    pair = mbarrier.allocate_mbarrier(batch=STAGES, two_ctas={two})
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
        mbarrier.init(pair.index(i), count=2)
    fence_async_shared()
    gl.warp_specialize([
        (consumer0, (a_ring, b_ring, ready, empty, pair, c_smem0, c_desc, M, N, K)),
        (consumer1, (a_ring, b_ring, ready, empty, pair, c_smem1, c_desc, M, N, K)),
        (producer, (a_ring, b_ring, ready, empty, pair, a_desc, b_desc, M, N, K)),
    ], [4, 1], [240, 24])
'''


def source(cl: int, stages: int = 4) -> str:
    pair = cl > 1
    return TEMPLATE.format(
        cl=cl, cm=128 * cl, stages=stages,
        acc_cga="[[1, 0]]" if pair else "[]",
        two="True" if pair else "False",
        multicast="True" if pair else "False",
        pair_wait="mbarrier.wait(pair.index(p % STAGES), ((p // STAGES) & 1) ^ 1)" if pair else "pass",
        pair_arrive_prev="mbarrier.arrive(pair.index((c + STAGES - 1) % STAGES), pred=kk > 0)" if pair else "pass",
        pair_arrive_last="mbarrier.arrive(pair.index((c + STAGES - 1) % STAGES))" if pair else "pass",
    )


def layouts(cl: int) -> dict[str, object]:
    from triton.experimental.gluon import language as gl

    split, bcast = ([[1, 0]], [[0, 0]]) if cl > 1 else ([], [])
    return {"a": gl.NVMMASharedLayout(128, 16, 2, cga_layout=split),
            "b": gl.NVMMASharedLayout(128, 16, 2, cga_layout=bcast),
            "c": gl.NVMMASharedLayout(128, 16, 2, cga_layout=split)}


def kernel(cl: int, stages: int = 4):
    from warploom.runtime.loader import load

    return load(source(cl, stages), "cluster_gemm")


def compile_only(cl: int, stages: int = 4) -> dict[str, object]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    lay = layouts(cl)
    cm = 128 * cl
    sig = {"a_desc": f"tensordesc<bf16[{cm}, 64],{lay['a']!r}>", "b_desc": f"tensordesc<bf16[64, 256],{lay['b']!r}>",
           "c_desc": f"tensordesc<bf16[{cm}, 64],{lay['c']!r}>", "M": "i32", "N": "i32", "K": "i32"}
    ck = triton.compile(GluonASTSource(kernel(cl, stages), sig, {}, {}), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": 4, "num_ctas": cl})
    ptx = ck.asm["ptx"]
    return {"cl": cl, "shared": ck.metadata.shared, "multicast": ptx.count(".multicast::cluster"),
            "wgmma": ptx.count("wgmma.mma_async")}


def run(a, b, cl: int, stages: int = 4):
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    lay = layouts(cl)
    cm = 128 * cl
    a_desc = TensorDescriptor.from_tensor(a, [cm, 64], lay["a"])
    b_desc = TensorDescriptor.from_tensor(b, [64, 256], lay["b"])
    c_desc = TensorDescriptor.from_tensor(c, [cm, 64], lay["c"])
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = -(-M // cm) * -(-N // 256)
    grid = (min(sms // cl, tiles),)

    def go():
        kernel(cl, stages)[grid](a_desc, b_desc, c_desc, M, N, K, num_warps=4, num_ctas=cl)
        return c
    return go


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4634x4968x3672,4608x4992x3712")
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.compile_only:
        for cl in (1, 2):
            print(compile_only(cl))
        return
    import torch
    import triton

    import warploom
    from warploom.runtime.timing import time_graph

    rows = []
    for size in args.sizes.split(","):
        M, N, K = map(int, size.split("x"))
        torch.manual_seed(0)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        fns = {"torch": functools.partial(torch.matmul, a, b), "warploom": functools.partial(warploom.matmul, a, b)}
        for cl in (1, 2):
            fns[f"probe_cl{cl}"] = run(a, b, cl)
        row = {"size": size, "triton": triton.__version__}
        for name, fn in list(fns.items()):
            try:
                out = fn()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 (an experiment: report and go on)
                print(f"{size} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                del fns[name]
                continue
            row[f"{name}_err"] = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        for _ in range(args.rounds):
            for name, fn in fns.items():
                ms = time_graph(fn)
                row.setdefault(f"{name}_ms", []).append(ms)
        for name in fns:
            best = min(row[f"{name}_ms"])
            row[f"{name}_tflops"] = 2 * M * N * K / best / 1e9
        row["ratios"] = {name: min(row["torch_ms"]) / min(row[f"{name}_ms"]) for name in fns}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
