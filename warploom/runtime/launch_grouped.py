"""Launch a grouped sm_90a kernel (ir.Tiling.grouping): its descriptors, group bounds and persistent grid.

The arguments are what backends/gluon_grouped.py's kernel reads: A's 2-D descriptor over all rows, B's 3-D one over
its (G, N, K) (K-major) or (G, K, N) storage, C's 2-D one and C's pointer (the clipped stores), the int32 bounds
and G, the rowwise scales (or the blockwise ones with their strides, scale_b's expert stride too), then M, N, K.
Nothing is read from the bounds on the host, so a launch can be captured in a CUDA graph and replayed after the
bounds changed in place. The grid is the planned one (the SM count): the kernel finds its tile count on the device,
and CTAs without a tile exit. A stream-K kernel (ir.Tiling.stream_k) also takes its fp32 workspace and int32 flags
(`StreamKBuffers`: a slot and flags per CTA, the most a launch can use whatever its routing; made once per device,
the flags left zero by each launch's finishers, so a graph replays them as they are). Launches go through
`DirectLaunch`, as the other kernels' do (the first through Triton's JIT, later ones directly).

Planner rule 29's grouped first pass (`ir.Module.amax_pass`) runs as `launch.Launcher._two_passes` runs the dense
one: y's (M, N) fp32 workspace and the (M,) amax workspace allocated per call (the amax zeroed: a memset a CUDA
graph replays), the first pass storing y there, then the cast kernel, one program a row of C, which also reads the
bounds and casts the rows of some group only (backends/gluon_cast.py): rows of none keep what q and s held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from warploom.backends.gluon_api import compile_options
from warploom.backends.gluon_cast import CAST_WARPS, check_outputs
from warploom.backends.gluon_raster import SK_PARAMS
from warploom.backends.gluon_sm90 import GluonSource
from warploom.ir import nodes as ir
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.direct import DescSlot, DirectLaunch, aligned_copy
from warploom.runtime.launch import StreamKBuffers, amax_workspaces
from warploom.runtime.loader import load
from warploom.spec import BLayout, ScaleRecipe


class GroupedLauncher:
    """Launches one grouped kernel on already-checked tensors (`checks_grouped.grouped_call`)."""

    def __init__(self, m: ir.Module, src: GluonSource) -> None:
        """An sm_100a grouped module (rule 22 on sm_100a) is refused as `launch.Launcher` refuses dense ones:
        warploom cross-compiles and simulates it but has not run it on a GPU."""
        if not m.tiling.grouped:
            raise ValueError(f"{m.name}: GroupedLauncher runs grouped modules only (launch.Launcher runs the rest)")
        if m.target != "sm_90a":
            from warploom.errors import TargetError
            raise TargetError(f"{m.name} is {m.target.with_article} grouped kernel, which warploom cross-compiles and "
                              f"simulates but has not run on {m.target.with_article} GPU yet (none is at hand). Fix: "
                              f"Kernel.compile('{m.target}') to inspect it, warploom.sim.grouped.simulate_grouped to "
                              "run it on the CPU, or plan for the sm_90a GPU you run on")
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        blocks = descriptor_blocks(m)
        descs = {i: DescSlot(blocks[p][1], shared_layout(*blocks[p]), TensorDescriptor)
                 for i, p in enumerate(src.params) if p in blocks}
        self._params = src.params
        self._grid = m.tiling.grid
        self._k_major = m.spec.b_layout is BLayout.K_MAJOR
        self._blockwise = m.spec.scale.is_blockwise
        self._recipe = m.spec.scale
        # Stream-K (ir.Tiling.stream_k): the kernel splits the last round from its own tile count, so the workspace
        # is the worst case's, a slot per CTA (every CTA contributes at most one partial), kept per device.
        self.stream_k_buffers = StreamKBuffers(m.tiling) if m.tiling.stream_k else None
        self._main = DirectLaunch(load(src.text, src.kernel), compile_options(num_warps=src.num_warps,
                                                                         maxnreg=src.maxnreg), descs, True)
        self._cast = None  # rule 29's second pass: pointers and integers only
        self._cast_fp8 = m.amax_pass.fp8 if m.amax_pass is not None else None
        if src.cast_kernel:
            self._cast = DirectLaunch(load(src.text, src.cast_kernel), compile_options(num_warps=CAST_WARPS), {},
                                      True)

    def __call__(self, a: Any, b: Any, bounds: Any, out: Any, scale_a: Any = None, scale_b: Any = None,
                 operands: Any = None, extra_outs: Sequence[Any] = ()) -> Any:
        """`a` (M, K), `b` (G, K, N), `bounds` (G,) int32 on the device, `out` (M, N) contiguous; K-grouped
        (Grouping.K_OFFSETS): `b` (total_K, N), `out` (G * M, N); `operands` a fused epilogue's, by graph name, and
        its outputs after the first in `extra_outs` (a fused quantization's scales, (M, ceil(N/128)), by pointer and
        row stride, `gluon_sm90.scale_outputs`). Rowwise scales flattened; blockwise ones (M, k-blocks) and
        (G, k-blocks, N-blocks) (K-grouped: (k-blocks, N-blocks) over total_K), any strides. Rule 29's two passes:
        `out` is q (M, N) fp8 and `extra_outs` (s,), s (M, 1) fp32 (module docstring)."""
        if self._cast is not None:
            return self._two_passes(a, b, bounds, out, scale_a, scale_b, operands, extra_outs)
        return self._launch(a, b, bounds, out, scale_a, scale_b, operands, extra_outs)

    def _launch(self, a: Any, b: Any, bounds: Any, out: Any, scale_a: Any, scale_b: Any, operands: Any,
                extra_outs: Sequence[Any], amax: Any = None) -> Any:
        args = {
            "a_desc": a, "b_desc": b.transpose(-2, -1) if self._k_major else b, "c_desc": out, "c_ptr": out,
            "group_ptr": bounds, "E": bounds.shape[0], "M": a.shape[0], "N": b.shape[-1], "K": a.shape[1],
            "scale_a_ptr": None if scale_a is None or self._blockwise else aligned_copy(scale_a),
            "scale_b_ptr": None if scale_b is None or self._blockwise else aligned_copy(scale_b),
        }
        if self._blockwise:
            args |= grouped_scale_args(self._recipe, scale_a, scale_b)
        for j, t in enumerate(extra_outs, start=1):  # (a scale output's pointer and row stride)
            args |= {f"c{j}_ptr": t, f"c{j}_stride_m": t.stride(0)}
        for name, t in (operands or {}).items():  # a fused epilogue's: dense ones by TMA, the rest by pointer
            args[f"{name}_desc"] = args[f"{name}_ptr"] = t
        if amax is not None:  # rule 29's first pass: the (M,) row amax its tiles add to
            args["amax_ptr"] = amax
        if self.stream_k_buffers is not None:
            args |= dict(zip(SK_PARAMS, self.stream_k_buffers(out.device), strict=True))
        self._main.launch(self._grid, [args[p] for p in self._params])
        return out

    def _two_passes(self, a: Any, b: Any, bounds: Any, q: Any, scale_a: Any, scale_b: Any, operands: Any,
                    extra_outs: Sequence[Any]) -> Any:
        """Planner rule 29 on a grouped GEMM: the first pass stores y (fp32) to a per-call workspace and adds each
        tile's row amax, clipped at its group's end row, to a zeroed (M,) amax; the cast kernel then writes q and s
        in the rows of some group (launch.Launcher._two_passes says why both workspaces are per call)."""
        from warploom.errors import InputError

        assert self._cast is not None and self._cast_fp8 is not None
        if len(extra_outs) != 1:
            raise InputError("extra_outs", "(s,): the (M, 1) fp32 scales, beside q as out", f"{len(extra_outs)} "
                             "tensor(s)", "pass extra_outs=(torch.empty(M, 1, dtype=torch.float32, device=q.device),)")
        s = extra_outs[0]
        m, n = a.shape[0], b.shape[-1]
        check_outputs(self._cast_fp8, m, n, q, s, ("out", "extra_outs[0]"), a.device)
        # (N is a multiple of 4 on every grouped call, checks_grouped: the workspace's row stride is N, which the
        # clipped stores' masked path assumes)
        assert n % 4 == 0, f"N={n}: a grouped call's N is a multiple of 4 (checks_grouped)"
        ws, amax = amax_workspaces(m, n, q.device)
        self._launch(a, b, bounds, ws, scale_a, scale_b, operands, (), amax)
        self._cast.launch(m, [ws, ws.stride(0), amax, q, q.stride(0), s, s.stride(0), m, n, bounds,
                              bounds.shape[0]])
        return q


def grouped_scale_args(recipe: ScaleRecipe, scale_a: Any, scale_b: Any) -> dict[str, Any]:
    """The scale parameters of a grouped kernel whose scales it reads element by element, with their own strides:
    blockwise scale_a (M, k-blocks) and scale_b (G, k-blocks, N-blocks) (K-grouped: (k-blocks, N-blocks), no expert
    stride); sm_100a's MX / NVFP4 scale_a (M, K/v) and scale_b (G, N, K/v), a row per column of B, so N's stride is
    scale_b's second to last and K's its last, as `launch._scale_args` takes the dense ones; MX's e8m0 as their bytes
    (Triton has no e8m0 pointer type)."""
    import torch

    kb = -1 if recipe.microscaled else -2  # scale_b's k dimension

    def ptr(t: Any) -> Any:
        return t.view(torch.uint8) if recipe is ScaleRecipe.MX else t

    return {"sa_ptr": ptr(scale_a), "sb_ptr": ptr(scale_b), "sa_stride_m": scale_a.stride(0),
            "sa_stride_k": scale_a.stride(1), "sb_stride_g": scale_b.stride(0),
            "sb_stride_k": scale_b.stride(kb), "sb_stride_n": scale_b.stride(-3 - kb)}
