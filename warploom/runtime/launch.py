"""Launch a planned kernel on a CUDA device: TMA descriptors, the persistent grid, the JIT call.

Everything that does not depend on the tensors (the JIT function, shared layouts, which argument is
which) is prepared once per kernel in a `Launcher`, so an eager call only builds descriptors and launches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from warploom.backends.gluon_sm90 import GluonSource, output_desc
from warploom.ir import nodes as ir
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.loader import load
from warploom.spec import BLayout, ScaleRecipe


@dataclass(frozen=True)
class Call:
    """One launch's tensors. A fused epilogue's operands (for scaled_mm, scale_a, scale_b and bias among
    them) are in `operands`; its outputs after the first in `extra_outs`."""

    a: Any
    b: Any
    out: Any
    scale_a: Any = None
    scale_b: Any = None
    bias: Any = None
    operands: Mapping[str, Any] = field(default_factory=dict)
    extra_outs: Sequence[Any] = ()


class Launcher:
    """Launches one kernel. Inputs were validated by the caller."""

    def __init__(self, m: ir.Module, src: GluonSource) -> None:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        self._fn = load(src.text, src.kernel)
        self._bm, self._bn, self._grid_max = m.tiling.bm, m.tiling.bn, m.tiling.grid
        self._opts = {"num_warps": src.num_warps, "maxnreg": src.maxnreg}
        k_major = m.spec.b_layout is BLayout.K_MAJOR
        blocks = descriptor_blocks(m)
        getters: dict[str, Callable[[Call], Any]] = {
            # B's descriptor is over its storage order: (N, K) rows for K-major B, (K, N) rows otherwise.
            "a_desc": lambda c: c.a,
            "b_desc": (lambda c: c.b.t()) if k_major else (lambda c: c.b),
            "c_desc": lambda c: c.out,
        }
        for j in range(1, len(m.spec.output_dtypes())):
            getters[output_desc(j)] = functools.partial(lambda j, c: c.extra_outs[j - 1], j)
        for bf in m.buffers:
            if bf.tensor is ir.Tensor.OPERAND:
                getters[f"{bf.operand}_desc"] = functools.partial(lambda name, c: c.operands[name], bf.operand)
        fused = m.spec.epilogue is not None
        scale_args = _scale_args(m.spec.scale) if m.spec.scale.is_blockwise else {}
        self._args: list[Callable[[Call], Any]] = []
        for p in src.params:
            if p in scale_args:
                self._args.append(scale_args[p])
            elif p in blocks:
                d, blk = blocks[p]
                self._args.append(functools.partial(_desc, TensorDescriptor, getters[p], blk, shared_layout(d, blk)))
            elif fused and p.endswith("_ptr"):
                # Operands keep their own strides (compiled into the kernel): the storage goes as it is.
                self._args.append(functools.partial(lambda name, c: c.operands[name], p.removesuffix("_ptr")))
            elif p == "scale_a_ptr":
                self._args.append(lambda c: _aligned(c.scale_a.reshape(-1)))
            elif p == "scale_b_ptr":
                self._args.append(lambda c: _aligned(c.scale_b.reshape(-1)))
            elif p == "bias_ptr":
                self._args.append(lambda c: _aligned(c.bias))
            else:
                self._args.append({"M": lambda c: c.a.shape[0], "N": lambda c: c.b.shape[1],
                                   "K": lambda c: c.a.shape[1]}[p])

    def __call__(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
                 operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        call = Call(a, b, out, scale_a, scale_b, bias, operands or {}, extra_outs)
        args = [g(call) for g in self._args]
        tiles = -(-a.shape[0] // self._bm) * -(-b.shape[1] // self._bn)
        self._fn[(min(self._grid_max, tiles),)](*args, **self._opts)
        return out


def _scale_args(recipe: ScaleRecipe) -> dict[str, Callable[[Call], Any]]:
    """Blockwise scales go as they are: the kernel reads them element by element with their own strides. scale_b
    is (k-blocks, N or N-blocks), except MX's (N, K/32), a row per column of B; MX scales go as their bytes, which
    the kernel decodes (Triton has no e8m0 pointer type)."""
    import torch

    mx = recipe is ScaleRecipe.MX
    kb = 1 if mx else 0  # scale_b's k dimension

    def ptr(t: Any) -> Any:
        return t.view(torch.uint8) if mx else t

    return {
        "sa_ptr": lambda c: ptr(c.scale_a), "sb_ptr": lambda c: ptr(c.scale_b),
        "sa_stride_m": lambda c: c.scale_a.stride(0), "sa_stride_k": lambda c: c.scale_a.stride(1),
        "sb_stride_k": lambda c: c.scale_b.stride(kb), "sb_stride_n": lambda c: c.scale_b.stride(1 - kb),
    }


def _aligned(t: Any) -> Any:
    """`t` contiguous at a 16-byte aligned address (kernels assume it for vector loads): a copy if needed."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _desc(cls: Any, get: Callable[[Call], Any], blk: list[int], layout: Any, call: Call) -> Any:
    return cls.from_tensor(get(call), blk, layout)
