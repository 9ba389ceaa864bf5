"""Launch a planned kernel on a CUDA device: TMA descriptors, the persistent grid, the JIT call."""

from __future__ import annotations

from typing import Any

from warploom.backends.gluon_sm90 import GluonSource
from warploom.ir import nodes as ir
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.loader import load
from warploom.spec import BLayout


def launch(m: ir.Module, src: GluonSource, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None,
           bias: Any = None) -> Any:
    """Run `src` (lowered from `m`) computing ``out = epilogue(a @ b)``; inputs were validated by the caller."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    fn = load(src.text, src.kernel)
    blocks = descriptor_blocks(m)
    # B's descriptor is over its storage order: (N, K) rows for K-major B, (K, N) rows otherwise.
    b_rows = b.t() if m.spec.b_layout is BLayout.K_MAJOR else b
    tensors = {"a_desc": a, "b_desc": b_rows, "c_desc": out}
    args: list[Any] = []
    for p in src.params:
        if p in blocks:
            d, blk = blocks[p]
            args.append(TensorDescriptor.from_tensor(tensors[p], blk, shared_layout(d, blk)))
        elif p == "scale_a_ptr":
            args.append(scale_a.reshape(-1).contiguous())
        elif p == "scale_b_ptr":
            args.append(scale_b.reshape(-1).contiguous())
        elif p == "bias_ptr":
            args.append(bias.contiguous())
        else:
            args.append({"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}[p])
    t = m.tiling
    tiles = -(-a.shape[0] // t.bm) * -(-b.shape[1] // t.bn)
    grid = (min(t.grid, tiles),)
    fn[grid](*args, num_warps=src.num_warps, maxnreg=src.maxnreg)
    return out
