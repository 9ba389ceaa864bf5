"""Launch a planned kernel on a CUDA device: TMA descriptors, the persistent grid, the JIT call.

Everything that does not depend on the tensors (the JIT function, shared layouts, which argument is
which) is prepared once per kernel in a `Launcher`, so an eager call only builds descriptors and launches.

The first call of each argument specialization goes through Triton's JIT dispatch, which compiles (or finds
the cached binary) and launches; its compiled kernel is kept under the specialization Triton derived from the
arguments (`native_specialize_impl`, the same function its binder calls: dtypes, 16-byte alignment, i32/i64,
divisibility by 16, ones made constant). Later calls with the same specialization launch that kernel directly,
skipping the JIT's per-call argument binding, option parsing and cache-key hashing (issue 6: host overhead).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from warploom.backends.gluon_sm90 import REDUCE_BLOCK, REDUCE_PARAMS, WORKSPACE_DESC, GluonSource, output_desc
from warploom.errors import split_k_mismatch
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
    workspace: Any = None  # split-K: the (split_k * Mp, N) fp32 partial sums


class Launcher:
    """Launches one kernel. Inputs were validated by the caller."""

    def __init__(self, m: ir.Module, src: GluonSource, fast: bool | None = None) -> None:
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        self._bm, self._bn, self._grid_max = m.tiling.bm, m.tiling.bn, m.tiling.grid
        self._tiling, self._planned_k = m.tiling, m.spec.k
        # WARPLOOM_FAST_LAUNCH=0 keeps every call on Triton's JIT dispatch (an escape hatch, and the baseline
        # scripts/profile_host.py measures against).
        fast = os.environ.get("WARPLOOM_FAST_LAUNCH", "1") != "0" if fast is None else fast
        k_major = m.spec.b_layout is BLayout.K_MAJOR
        blocks = descriptor_blocks(m)
        self._main = _Direct(load(src.text, src.kernel), {"num_warps": src.num_warps, "maxnreg": src.maxnreg},
                             [i for i, p in enumerate(src.params) if p not in blocks], fast)
        self._reduce = None
        if src.reduce_kernel:  # split-K's second kernel: every argument a pointer or an integer
            # Through the JIT on every call for now: the direct path was measured on the GPU for main kernels only.
            self._reduce = _Direct(load(src.text, src.reduce_kernel), {"num_warps": 4},
                                   list(range(len(REDUCE_PARAMS))), False)
        getters: dict[str, Callable[[Call], Any]] = {
            # B's descriptor is over its storage order: (N, K) rows for K-major B, (K, N) rows otherwise.
            "a_desc": lambda c: c.a,
            "b_desc": (lambda c: c.b.t()) if k_major else (lambda c: c.b),
            "c_desc": lambda c: c.out,
            WORKSPACE_DESC: lambda c: c.workspace,
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
        m, n = a.shape[0], b.shape[1]
        split_k = self._tiling.split_k
        workspace = None
        if split_k > 1:
            import torch

            if not self._tiling.splits_evenly(a.shape[1]):
                raise split_k_mismatch(self._tiling.bk, split_k, self._planned_k, a.shape[1])
            workspace = torch.empty((split_k * self._tiling.slab_rows(m), n), dtype=torch.float32,
                                    device=out.device)
        call = Call(a, b, out, scale_a, scale_b, bias, operands or {}, extra_outs, workspace)
        args = [g(call) for g in self._args]
        tiles = -(-m // self._bm) * -(-n // self._bn) * split_k  # work units
        grid = min(self._grid_max, tiles)
        self._main.launch(grid, args)
        if workspace is not None:
            assert self._reduce is not None
            self._reduce.launch(-(-m * n // REDUCE_BLOCK), [workspace, out, out.stride(0), out.stride(1), m, n,
                                                            self._tiling.slab_rows(m)])
        return out


class _Direct:
    """One JIT function's launches (module docstring): the first call of each argument specialization goes through
    Triton's JIT, later ones launch the kernel it compiled. `varying` are the positions of the arguments whose
    specialization can change between calls (not the TMA descriptors, which the kernel fixes)."""

    def __init__(self, fn: Any, opts: dict[str, Any], varying: list[int], fast: bool) -> None:
        self._fn, self._opts, self._varying, self._fast = fn, opts, varying, fast
        self._backend: Any = None  # Triton's backend and specializer, once the JIT has run
        self._specialize: Any = None
        self._compiled: dict[tuple[Any, ...], Any] = {}

    def launch(self, grid: int, args: list[Any]) -> None:
        from triton import knobs
        from triton.runtime.driver import driver

        if not self._fast or self._backend is None or getattr(self._fn, "pre_run_hooks", None):
            self._jit(grid, args)  # (pre-run hooks, e.g. a tool's, see every call through the JIT)
            return
        device = driver.active.get_current_device()
        key = self._key(device, args)
        kernel = self._compiled.get(key)
        if kernel is None:
            self._jit(grid, args, key)
            return
        stream = driver.active.get_current_stream(device)
        # Launch hooks (profilers; some environments install one) get what the JIT would give them.
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        meta = kernel.launch_metadata((grid, 1, 1), stream, *args)
        kernel.run(grid, 1, 1, stream, kernel.function, kernel.packed_metadata, meta, enter, leave, *args)

    def _key(self, device: int, args: list[Any]) -> tuple[Any, ...]:
        """What Triton's JIT keys its kernel cache on that can change between calls of this kernel: the device
        (each loads its own binary), the debug and instrumentation knobs, and the specialization of the arguments
        that vary: pointers (dtype, 16-byte alignment) and integers (strides; M, N, K). A descriptor's is its
        dtype, block and layout, which the kernel fixes."""
        from triton import knobs

        return (device, knobs.runtime.debug, knobs.compilation.instrumentation_mode,
                *(self._specialize(self._backend, args[i], False, True, True) for i in self._varying))

    def _jit(self, grid: int, args: list[Any], key: tuple[Any, ...] | None = None) -> None:
        """Launch through Triton's JIT dispatch and remember the kernel it ran under `key`."""
        from triton._C.libtriton import native_specialize_impl
        from triton.runtime.driver import driver

        kernel = self._fn[(grid,)](*args, **self._opts)
        if kernel is None or not hasattr(self._fn, "device_caches"):
            self._fast = False  # not Triton's JIT (a test's stand-in): nothing compiled to launch directly
            return
        if self._backend is None:
            self._backend = self._fn.device_caches[driver.active.get_current_device()][3]
            self._specialize = native_specialize_impl
            key = self._key(driver.active.get_current_device(), args)
        if key is not None and len(self._compiled) < 64:
            self._compiled[key] = kernel


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
