"""Experiment (session 13): does a dedicated epilogue partition make issue 4's fused epilogue overlap the mainloop?

The probe kernel (ep_probe.gluon.tmpl, hand-written, not compiler output) hands each finished 128x128 fp32 accumulator
from the two consumer warpgroups to a 4-warp epilogue partition through shared memory; the epilogue partition reads
it in column blocks of EW, applies scales + bias + gelu + residual and TMA-stores, while the consumers run the next
tile's mainloop. Timed against warploom's current fused kernel and torch eager in the same run.

Result (docs/benchmarks.md, session 13): at 128x128 the partition hides the epilogue (160 -> 151 us at 4096^3) but
the 128x128 mainloop is the limit; the 256-wide tile spills under the 128-register cap of 16 warps, and with a
2-warp partition (cap 168) the epilogue runs 4x slower than the mainloop. Not built into the IR.

    PYTHONPATH=. python3 archive/exp/epilogue_partition.py --cross     # registers and spills, no GPU
    PYTHONPATH=. python3 archive/exp/epilogue_partition.py             # GPU: correctness and timing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

import warploom
from warploom.backends.gluon_sm90 import GluonSource
from warploom.ir import nodes as ir

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from bench_epilogue import epilogue, problem, torch_fn  # noqa: E402  (scripts/: the benchmark's problem)

HERE = Path(__file__).parent
PARAMS = ("a_desc", "b_desc", "c_desc", "scale_a_ptr", "scale_b_ptr", "bias_ptr", "residual_desc", "M", "N", "K")
NVMMA32 = "gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)"
VARIANTS = {  # v1 (ep_probe.gluon.tmpl), name: (EW, acc smem layout, worker registers [consumer1, epilogue, producer])
    "ew64_nvmma": (64, NVMMA32, "160, 160, 32"),
}
# v2 (ep_probe2.gluon.tmpl): name: BN, BK, STAGES, EW, epilogue warps, epilogue layout
V2 = {
    "n256_k64_s4_ew16_w2": (256, 64, 4, 16, 2, "gl.BlockedLayout([1, 8], [16, 2], [2, 1], [1, 0])"),
    "n256_k64_s4_ew32_w2": (256, 64, 4, 32, 2, "gl.BlockedLayout([1, 8], [8, 4], [2, 1], [1, 0])"),
    "n256_k128_s2_ew16_w2": (256, 128, 2, 16, 2, "gl.BlockedLayout([1, 8], [16, 2], [2, 1], [1, 0])"),
    "n256_k64_s3_ew16_w2": (256, 64, 3, 16, 2, "gl.BlockedLayout([1, 8], [16, 2], [2, 1], [1, 0])"),
    "n128_k128_s4_ew32_w4": (128, 128, 4, 32, 4, "gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])"),
}
# v3 (ep_probe3.gluon.tmpl): v2's fields, TMA for the residual and the output
V3 = {
    "v3_n256_k64_s3_ew32_w2": (256, 64, 3, 32, 2, "gl.BlockedLayout([1, 8], [8, 4], [2, 1], [1, 0])"),
    "v3_n256_k64_s3_ew16_w2": (256, 64, 3, 16, 2, "gl.BlockedLayout([1, 8], [16, 2], [2, 1], [1, 0])"),
    "v3_n256_k64_s3_ew8_w2": (256, 64, 3, 8, 2, "gl.BlockedLayout([1, 8], [32, 1], [2, 1], [1, 0])"),
}


def source(name: str) -> GluonSource:
    ew, layout, regs = VARIANTS[name]
    text = (HERE / "ep_probe.gluon.tmpl").read_text()
    text = text.replace("EW_VALUE", str(ew)).replace("ACC_LAYOUT", layout).replace("REGS", regs)
    return GluonSource(text, "ep_probe", PARAMS, 4, 128)


def source2(name: str) -> GluonSource:
    v3 = name in V3
    bn, bk, stages, ew, epw, lay = V3[name] if v3 else V2[name]
    warps = -(-(4 + 4 + epw + 1) // 4) * 4
    cap = min(248, 65536 // (32 * warps) // 8 * 8)
    # Workers sharing a warpgroup share a budget; with every budget at the cap nothing moves.
    text = (HERE / ("ep_probe3.gluon.tmpl" if v3 else "ep_probe2.gluon.tmpl")).read_text()
    for k, v in {"BN_VALUE": bn, "BK_VALUE": bk, "STAGES_VALUE": stages, "EW_VALUE": ew, "EPW_VALUE": epw,
                 "EP_LAYOUT": lay, "ACC_LAYOUT": NVMMA32, "REGS": f"{cap}, {cap}, {cap}"}.items():
        text = text.replace(k, str(v))
    return GluonSource(text, "ep_probe", PARAMS if v3 else PARAMS2, 4, cap)


PARAMS2 = ("a_desc", "b_desc", "c_ptr", "scale_a_ptr", "scale_b_ptr", "bias_ptr", "residual_ptr", "M", "N", "K")


def fused_kernel(m: int, n: int, k: int, device: str) -> warploom.kernel.Kernel:
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device).t()
    sa, sb = torch.empty(m, 1, device=device), torch.empty(1, n, device=device)
    bias = torch.empty(n, dtype=torch.bfloat16, device=device)
    res = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    return warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=True, epilogue=epilogue, residual=res)


def probe_module(kern: Any, ew: int) -> ir.Module:
    """The fused kernel's module with its C and residual buffers as the probe's (128 x EW): cross_compile reads the
    descriptor boxes from it."""
    m = kern.module
    bufs = tuple(dataclasses.replace(b, rows=128, cols=ew) for b in m.buffers)
    return dataclasses.replace(m, buffers=bufs)


def cross() -> None:
    from warploom.targets import cross_compile

    kern = fused_kernel(4096, 4096, 4096, "meta")
    for name, (ew, _, _) in VARIANTS.items():
        c = cross_compile(probe_module(kern, ew), source(name))
        print(name, c.summary(), flush=True)
    import warploom.runtime.cross as cross_mod

    cross_mod.signature = signature2  # type: ignore[assignment]  # the v2 probe's own parameters
    for name, (bn, bk, _, ew, *_rest) in ({} if os.environ.get("ONLY_V3") else V2 | {}).items() | V3.items():
        m2 = probe_module2(kern, bn, bk)
        if name in V3:
            m2 = dataclasses.replace(m2, buffers=probe_module(kern, ew).buffers)
        c = cross_compile(m2, source2(name))
        print(name, c.summary(), flush=True)


def probe_module2(kern: Any, bn: int, bk: int) -> ir.Module:
    """The fused kernel's module retiled to the v2 probe's A and B boxes (cross_compile reads them from it)."""
    m = kern.module
    return dataclasses.replace(m, buffers=(), tiling=dataclasses.replace(m.tiling, bn=bn, bk=bk))


def signature2(m: ir.Module, src: GluonSource) -> dict[str, str]:
    from warploom.runtime.cross import descriptor_blocks, shared_layout

    sig = {p: "i32" for p in src.params}
    for p, (d, blk) in descriptor_blocks(m).items():
        sig[p] = f"tensordesc<fp8e4nv[{', '.join(map(str, blk))}],{shared_layout(d, blk)!r}>"
    for p, (d, blk) in descriptor_blocks(m).items():
        if p in ("c_desc", "residual_desc"):
            sig[p] = f"tensordesc<bf16[{', '.join(map(str, blk))}],{shared_layout(d, blk)!r}>"
    ptrs = dict(c_ptr="*bf16", residual_ptr="*bf16", bias_ptr="*bf16", scale_a_ptr="*fp32", scale_b_ptr="*fp32")
    sig.update({k: v for k, v in ptrs.items() if k in sig})
    return sig


def gpu(out: str) -> None:
    rows = [gpu_shape(m, n, k) for m, n, k in [(4096, 4096, 4096), (8192, 8192, 4096)]]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(rows, indent=1))


def recorder(row: dict[str, Any], ref: torch.Tensor) -> Any:
    """record(name, fn): check fn's output against `ref` (scale-free error), time it (CUDA graph), add to `row`."""
    from warploom.runtime.timing import time_graph as _time_graph

    m, n, k = row["shape"]

    def record(name: str, fn: Any) -> None:
        y = fn().double()
        torch.cuda.synchronize()
        e = float(1 - 2 * (y * ref).sum() / (y * y + ref * ref).sum())
        us = _time_graph(fn) * 1e3
        row[name] = {"us": us, "err": e}
        print(f"{m}x{n}x{k} {name:22s} {us:8.1f} us  err {e:.2e}", flush=True)

    return record


def start(m: int, n: int, k: int) -> tuple[tuple[torch.Tensor, ...], dict[str, Any], Any]:
    """One shape's inputs (bench_epilogue's problem), its result row and recorder, with torch eager recorded."""
    *tensors, ref = problem(m, n, k)
    row: dict[str, Any] = {"shape": [m, n, k]}
    record = recorder(row, ref.double())
    record("torch_eager", lambda: torch_fn(*tensors))
    return tuple(tensors), row, record


def gpu_shape(m: int, n: int, k: int) -> dict[str, Any]:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from warploom.dtypes import DType
    from warploom.runtime.cross import shared_layout
    from warploom.runtime.loader import load

    (a, b, sa, sb, bias, res), row, record = start(m, n, k)
    record("warploom_fused", lambda: warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=True,
                                                        epilogue=epilogue, residual=res))
    todo = [(name, source(name), ew, 128, 128) for name, (ew, _, _) in VARIANTS.items()]
    todo += [(name, source2(name), ew, bn, bk) for name, (bn, bk, _, ew, *_r) in V3.items()]
    for name, src, ew, bn, bk in todo:
        fn = load(src.text, src.kernel)
        out_t = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

        def d(t: Any, blk: list[int], dt: DType) -> Any:
            return TensorDescriptor.from_tensor(t, blk, shared_layout(dt, blk))

        args = [d(a, [128, bk], DType.E4M3), d(b.t(), [bn, bk], DType.E4M3), d(out_t, [128, ew], DType.BF16),
                sa.reshape(-1), sb.reshape(-1), bias, d(res, [128, ew], DType.BF16), m, n, k]
        grid = min(132, (m // 128) * (n // bn))

        def run(fn: Any = fn, args: list[Any] = args, out_t: Any = out_t, grid: int = grid,
                cap: int = src.maxnreg) -> Any:
            fn[(grid,)](*args, num_warps=4, maxnreg=cap)
            return out_t

        try:
            record(f"probe_{name}", run)
        except Exception as exc:  # noqa: BLE001 - an experiment: report and go on
            print(name, "failed:", repr(exc)[:400], flush=True)
    return row


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "out"), "ep_probe.json"))
    args = ap.parse_args()
    cross() if args.cross else gpu(args.out)
