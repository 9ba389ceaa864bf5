"""Launch a planned kernel on a CUDA device: TMA descriptors, the persistent grid, the JIT call.

Everything that does not depend on the tensors (the JIT function, shared layouts, which argument is
which) is prepared once per kernel in a `Launcher`, so an eager call only builds descriptors and launches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from warploom.backends.gluon_sm90 import GluonSource
from warploom.ir import nodes as ir
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.loader import load
from warploom.spec import BLayout


class Launcher:
    """Launches one kernel. Inputs were validated by the caller."""

    def __init__(self, m: ir.Module, src: GluonSource) -> None:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        self._fn = load(src.text, src.kernel)
        self._bm, self._bn, self._grid_max = m.tiling.bm, m.tiling.bn, m.tiling.grid
        self._opts = {"num_warps": src.num_warps, "maxnreg": src.maxnreg}
        k_major = m.spec.b_layout is BLayout.K_MAJOR
        blocks = descriptor_blocks(m)
        getters: dict[str, Callable[..., Any]] = {
            # B's descriptor is over its storage order: (N, K) rows for K-major B, (K, N) rows otherwise.
            "a_desc": lambda a, b, o, sa, sb, bias: a,
            "b_desc": (lambda a, b, o, sa, sb, bias: b.t()) if k_major else (lambda a, b, o, sa, sb, bias: b),
            "c_desc": lambda a, b, o, sa, sb, bias: o,
        }
        self._args: list[Callable[..., Any]] = []
        for p in src.params:
            if p in blocks:
                d, blk = blocks[p]
                layout = shared_layout(d, blk)
                get = getters[p]
                self._args.append(functools.partial(_desc, TensorDescriptor, get, blk, layout))
            elif p == "scale_a_ptr":
                self._args.append(lambda a, b, o, sa, sb, bias: _aligned(sa.reshape(-1)))
            elif p == "scale_b_ptr":
                self._args.append(lambda a, b, o, sa, sb, bias: _aligned(sb.reshape(-1)))
            elif p == "bias_ptr":
                self._args.append(lambda a, b, o, sa, sb, bias: _aligned(bias))
            else:
                self._args.append({"M": lambda a, b, *_: a.shape[0], "N": lambda a, b, *_: b.shape[1],
                                   "K": lambda a, b, *_: a.shape[1]}[p])

    def __call__(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> Any:
        args = [g(a, b, out, scale_a, scale_b, bias) for g in self._args]
        tiles = -(-a.shape[0] // self._bm) * -(-b.shape[1] // self._bn)
        self._fn[(min(self._grid_max, tiles),)](*args, **self._opts)
        return out


def _aligned(t: Any) -> Any:
    """`t` contiguous at a 16-byte aligned address (kernels assume it for vector loads): a copy if needed."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _desc(cls: Any, get: Callable[..., Any], blk: list[int], layout: Any, *tensors: Any) -> Any:
    return cls.from_tensor(get(*tensors), blk, layout)
