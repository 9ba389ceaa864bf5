"""Experiment (session 33): do tiles fitted to the shape, as cuBLAS's are, close the zoo's bf16 gap?

cuBLAS runs the zoo's worst bf16 shapes on tiles whose sides are not powers of two, chosen so that the tiles fill
about one wave of 132 SMs (`scripts/torch_kernels.py`, session 33): 1679x2456x2000 on 192 x 176 tiles (126 tiles;
warploom's 128x256 makes 140: two rounds, the second 6% full), 3838x576x2768 on 88 x 192 (132 tiles), 3097x920x2920
on 128 x 184 (125). Triton's tensors and shared buffers must be powers of two, but offsets need not be: this kernel
builds a BM x WN tile from

- G consumer warpgroups of 64 rows each (BM = 64 G: 128, 192, 256), A copied as G boxes of 64 rows;
- column blocks of power-of-two widths that sum to WN (176 = 128 + 32 + 16), each with its own B box, wgmma and
  C box, so no copy reads or writes past the tile's WN columns (the next tile's).

It is hand-written Gluon (not warploom's IR), bf16 with K-major A and B only, to measure before building it into the
schedule IR. `--compile` cross-compiles every candidate for sm_90a on the CPU (registers, spills); on the GPU it
checks each against torch and times it and torch, interleaved, with CUDA graphs.

    python3 archive/exp/fitted_tiles.py --compile 1679x2456x2000:192x176 3838x576x2768:128x192
    python3 archive/exp/fitted_tiles.py --out fitted.json 1679x2456x2000:192x176,128x256   # on the GPU
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

BK = 64
SMEM = 232448 - 2048  # (the H100's per-block shared memory, less the barriers' and Triton's own)


def blocks_of(wn: int) -> list[int]:
    """WN as power-of-two column blocks, widest first (184 -> 128, 32, 16, 8); wgmma's N steps by 8 for bf16."""
    assert wn % 8 == 0 and 8 <= wn <= 256, wn
    return [1 << b for b in range(8, 2, -1) if wn & (1 << b)]


def stages_for(g: int, wn: int) -> int:
    per_stage = (64 * g + wn) * BK * 2
    staging = g * 64 * 64 * 2
    return min(6, (SMEM - staging) // per_stage)


def regs_for(g: int) -> int:
    return {2: 240, 3: 160, 4: 112}[g]


def source(g: int, wn: int, stages: int, new_names: bool) -> str:
    blocks = blocks_of(wn)
    offs = [sum(blocks[:j]) for j in range(len(blocks))]
    nb = len(blocks)
    load = "async_load" if new_names else "async_copy_global_to_shared"
    store = "async_store" if new_names else "async_copy_shared_to_global"
    b_rings = ", ".join(f"b_ring{j}" for j in range(nb))
    b_descs = ", ".join(f"b_desc{j}" for j in range(nb))
    c_descs = ", ".join(f"c_desc{j}" for j in range(nb))
    lines = [
        "from triton.experimental import gluon",
        "from triton.experimental.gluon import language as gl",
        "from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, "
        "warpgroup_mma, warpgroup_mma_wait",
        "",
        f"G = gl.constexpr({g})",
        f"BM = gl.constexpr({64 * g})",
        f"WN = gl.constexpr({wn})",
        f"BK = gl.constexpr({BK})",
        f"STAGES = gl.constexpr({stages})",
        "GROUP_M = gl.constexpr(8)",
        "C64: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)",
        "",
        "",
        "@gluon.jit",
        "def tile_coords(tile_id, num_pid_m, num_pid_n):",
        "    num_pid_in_group = GROUP_M * num_pid_n",
        "    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M",
        "    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_M)",
        "    pid_m = first_pid_m + (tile_id % group_size_m)",
        "    pid_n = (tile_id % num_pid_in_group) // group_size_m",
        "    return pid_m * BM, pid_n * WN",
        "",
    ]
    for p in range(g):
        c_smems = f"c_smem{p}"
        accs = ", ".join(f"acc{j}" for j in range(nb))
        lines += [
            "",
            "@gluon.jit",
            f"def consumer{p}(a_ring, {b_rings}, ready_bars, empty_bars, {c_smems}, {c_descs}, M, N, K):",
            "    pid = gl.program_id(0)",
            "    num_pid_m = gl.cdiv(M, BM)",
            "    num_pid_n = gl.cdiv(N, WN)",
            "    num_tiles = num_pid_m * num_pid_n",
            "    k_tiles = gl.cdiv(K, BK)",
        ]
        for j, w in enumerate(blocks):
            lines += [
                f"    layout{j}: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], "
                f"instr_shape=[16, {w}, 16])",
                f"    acc{j} = gl.zeros([64, {w}], gl.float32, layout{j})",
            ]
        lines += [
            "    c = 0",
            "    for tile_id in range(pid, num_tiles, gl.num_programs(0)):",
            "        off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)",
            "        for kk in range(k_tiles):",
            "            mbarrier.wait(ready_bars.index(c % STAGES), (c // STAGES) & 1)",
            f"            a = a_ring.index((c % STAGES) * G + {p})",
        ]
        for j in range(nb):
            lines.append(f"            acc{j} = warpgroup_mma(a, b_ring{j}.index(c % STAGES).permute((1, 0)), acc{j}, "
                         "use_acc=kk > 0, is_async=True)")
        lines += [
            f"            {accs} = warpgroup_mma_wait({nb}, deps=({accs},))",
            "            mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES), pred=kk > 0)",
            "            c += 1",
            f"        {accs} = warpgroup_mma_wait(0, deps=({accs},))",
            "        mbarrier.arrive(empty_bars.index((c + STAGES - 1) % STAGES))",
            "        tma.store_wait(0)",
        ]
        # each block in pieces of at most 64 columns through one 64x64 staging buffer (reinterpreted for the
        # narrower blocks' boxes), each piece's store waited for before the buffer's next use
        for j, w in enumerate(blocks):
            pieces = [(f"acc{j}", 0, w)]
            while pieces[0][2] > 64:
                nxt = []
                for name, o, pw in pieces:
                    lines.append(f"        {name}_lo, {name}_hi = {name}.reshape([64, 2, {pw // 2}]).permute(0, 2, 1)"
                                 ".split()")
                    nxt += [(f"{name}_lo", o, pw // 2), (f"{name}_hi", o + pw // 2, pw // 2)]
                pieces = nxt
            for name, o, pw in pieces:
                buf = f"c_smem{p}" if pw == 64 else f"c_smem{p}._reinterpret(gl.bfloat16, [64, {pw}], c_desc{j}.layout)"
                lines += [
                    "        tma.store_wait(0)",
                    f"        cbuf = {buf}",
                    f"        cbuf.store({name}.to(gl.bfloat16))",
                    "        fence_async_shared()",
                    f"        tma.{store}(c_desc{j}, [off_m + {64 * p}, off_n + {offs[j] + o}], cbuf)",
                ]
        lines += ["    tma.store_wait(0)", ""]
    nbytes = (64 * g + wn) * BK * 2
    lines += [
        "",
        "@gluon.jit",
        f"def producer(a_ring, {b_rings}, ready_bars, empty_bars, a_desc, {b_descs}, M, N, K):",
        "    pid = gl.program_id(0)",
        "    num_pid_m = gl.cdiv(M, BM)",
        "    num_pid_n = gl.cdiv(N, WN)",
        "    num_tiles = num_pid_m * num_pid_n",
        "    k_tiles = gl.cdiv(K, BK)",
        "    p = 0",
        "    for tile_id in range(pid, num_tiles, gl.num_programs(0)):",
        "        off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)",
        "        for kk in range(k_tiles):",
        "            mbarrier.wait(empty_bars.index(p % STAGES), ((p // STAGES) & 1) ^ 1)",
        f"            mbarrier.expect(ready_bars.index(p % STAGES), {nbytes})",
    ]
    for q in range(g):
        lines.append(f"            tma.{load}(a_desc, [off_m + {64 * q}, kk * BK], ready_bars.index(p % STAGES), "
                     f"a_ring.index((p % STAGES) * G + {q}))")
    for j in range(nb):
        lines.append(f"            tma.{load}(b_desc{j}, [off_n + {offs[j]}, kk * BK], "
                     f"ready_bars.index(p % STAGES), b_ring{j}.index(p % STAGES))")
    lines += ["            p += 1", ""]
    params = ", ".join(["a_desc", *[f"b_desc{j}" for j in range(nb)], *[f"c_desc{j}" for j in range(nb)],
                        "M", "N", "K"])
    lines += [
        "",
        "@gluon.jit",
        f"def fitted({params}):",
        f"    a_ring = gl.allocate_shared_memory(a_desc.dtype, [{stages * g}, 64, BK], a_desc.layout)",
    ]
    for j, w in enumerate(blocks):
        lines.append(f"    b_ring{j} = gl.allocate_shared_memory(b_desc{j}.dtype, [{stages}, {w}, BK], "
                     f"b_desc{j}.layout)")
    for p in range(g):
        lines.append(f"    c_smem{p} = gl.allocate_shared_memory(gl.bfloat16, [64, 64], C64)")
    lines += [
        f"    ready_bars = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
        f"    empty_bars = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
        f"    for i in gl.static_range({stages}):",
        "        mbarrier.init(ready_bars.index(i), count=1)",
        f"        mbarrier.init(empty_bars.index(i), count={g})",
        "    fence_async_shared()",
        "    gl.warp_specialize([",
    ]
    for p in range(g):
        lines.append(f"        (consumer{p}, (a_ring, {b_rings}, ready_bars, empty_bars, c_smem{p}, {c_descs}, "
                     "M, N, K)),")
    lines += [
        f"        (producer, (a_ring, {b_rings}, ready_bars, empty_bars, a_desc, {b_descs}, M, N, K)),",
        f"    ], [{', '.join(['4'] * (g - 1) + ['1'])}], [{', '.join([str(regs_for(g))] * (g - 1) + ['24'])}])",
        "",
    ]
    return "\n".join(lines)


def desc_blocks(g: int, wn: int) -> list[list[int]]:
    blocks = blocks_of(wn)
    return [[64, BK], *[[w, BK] for w in blocks], *[[64, min(w, 64)] for w in blocks]]


def _load(text: str) -> Any:
    import importlib.util
    import os
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "fitted_kernel.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("fitted_kernel", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.fitted


def _new_names() -> bool:
    from triton.experimental.gluon.language.nvidia.hopper import tma

    return hasattr(tma, "async_load") and not hasattr(tma, "async_copy_global_to_shared")


def compile_one(g: int, wn: int) -> str:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.runtime.cross import _assemble

    stages = stages_for(g, wn)
    fn = _load(source(g, wn, stages, _new_names()))
    sig = {}
    names = ["a_desc", *[f"b_desc{j}" for j in range(len(blocks_of(wn)))],
             *[f"c_desc{j}" for j in range(len(blocks_of(wn)))]]
    for name, blk in zip(names, desc_blocks(g, wn), strict=True):
        layout = gl.NVMMASharedLayout.get_default_for(blk, gl.bfloat16)
        sig[name] = f"tensordesc<bf16[{', '.join(map(str, blk))}],{layout!r}>"
    sig.update(M="i32", N="i32", K="i32")
    c = _assemble(GluonASTSource(fn, sig, {}, {}), {"num_warps": 4, "num_stages": 1}, "sm_90a", 90)
    return (f"{64 * g}x{wn} s{stages}: smem {c.smem_bytes}, {c.ptx.count('wgmma.mma_async')} wgmma, "
            f"registers {c.registers}, spills {c.spills}, serialized {'C7514' in c.ptxas_log}")


def run_one(m: int, n: int, k: int, g: int, wn: int, rounds: int = 5) -> dict[str, Any]:
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    stages = stages_for(g, wn)
    fn = _load(source(g, wn, stages, _new_names()))
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tensors = [a, *[b] * len(blocks_of(wn)), *[c] * len(blocks_of(wn))]
    descs = [TensorDescriptor.from_tensor(t, blk, gl.NVMMASharedLayout.get_default_for(blk, gl.bfloat16))
             for t, blk in zip(tensors, desc_blocks(g, wn), strict=True)]
    tiles = math.ceil(m / (64 * g)) * math.ceil(n / wn)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = min(tiles, sms)

    def ours() -> None:
        fn[(grid,)](*descs, m, n, k, num_warps=4)

    def theirs() -> None:
        torch.matmul(a, b.t())

    ours()
    torch.cuda.synchronize()
    ref = (a.double() @ b.double().t())
    err = ((c.double() - ref).norm() / ref.norm()).item()
    t_ours, t_torch = [], []
    for _ in range(rounds):
        t_ours.append(triton.testing.do_bench_cudagraph(ours, rep=30))
        t_torch.append(triton.testing.do_bench_cudagraph(theirs, rep=30))
    t_ours.sort()
    t_torch.sort()
    return {"m": m, "n": n, "k": k, "tile": f"{64 * g}x{wn}", "stages": stages, "tiles": tiles, "err": err,
            "ours_ms": t_ours[rounds // 2], "torch_ms": t_torch[rounds // 2],
            "ratio": t_torch[rounds // 2] / t_ours[rounds // 2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="MxNxK:BMxWN[,BMxWN...]")
    ap.add_argument("--compile", action="store_true", help="cross-compile for sm_90a only (no GPU)")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for case in args.cases:
        size, tiles = case.split(":")
        m, n, k = map(int, size.split("x"))
        for t in tiles.split(","):
            bm, wn = map(int, t.split("x"))
            if args.compile:
                print(size, compile_one(bm // 64, wn), flush=True)
                continue
            try:
                r = run_one(m, n, k, bm // 64, wn)
            except Exception as e:  # (report and go on: one refused tile should not cost the call)
                print(size, t, "failed:", repr(e)[:300], flush=True)
                continue
            rows.append(r)
            print(f"{size:>16} {r['tile']:>8} s{r['stages']} {r['tiles']:4d} tiles  ratio {r['ratio']:.3f}  "
                  f"ours {r['ours_ms'] * 1e3:7.1f} us  torch {r['torch_ms'] * 1e3:7.1f} us  err {r['err']:.1e}",
                  flush=True)
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
