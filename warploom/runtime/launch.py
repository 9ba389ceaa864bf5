"""Launch a planned kernel on a CUDA device: what a call launches, in which order, over which tiles.

Everything that does not depend on the tensors (the JIT function, shared layouts, which argument is which, where
each argument comes from) is prepared once per kernel in a `Launcher`. A call runs its parts in order (`_parts`:
the whole grid, or a split-K tail's whole waves and then its tail) and each part's kernels (`_steps`: the main
kernel, split-K's reduce), each through a `DirectLaunch` (runtime/direct.py: the JIT's first launch, then the
compiled kernel directly). `Launcher.bind` turns a remembered eager call's launches into a `Bound`
(runtime/bound.py), a template filled in per call; `Kernel.run` and a call's first launch take the general path
here, which derives every argument again.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton.runtime.driver import driver

from warploom.backends.gluon_api import compile_options
from warploom.backends.gluon_cast import CAST_WARPS, check_outputs
from warploom.backends.gluon_raster import SK_PARAMS
from warploom.backends.gluon_reduce import REDUCE_BLOCK, reduce_grid
from warploom.backends.gluon_sm90 import (
    WORKSPACE_DESC,
    GluonSource,
    buffer_desc,
    output_desc,
)
from warploom.errors import DeviceError, rowwise_too_wide, split_k_mismatch
from warploom.ir import nodes as ir
from warploom.ir.raster import Span, launch_grid, tail_spans
from warploom.runtime.bound import WORKSPACE_AT, Bound, BoundStep, Call, Step
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.direct import DescSlot, DirectLaunch, aligned_copy
from warploom.runtime.loader import load
from warploom.spec import ALayout, BLayout, ScaleRecipe


def _constant(value: int, call: Call) -> int:
    """A getter of an integer argument fixed when the launch was made (split-K's reduce: M, N, slab rows, tiles)."""
    return value


# Split-K's reduce reads the workspace and writes the output through pointers; its integers follow (`_steps`).
_REDUCE_GETTERS: tuple[Callable[[Call], Any], ...] = (
    lambda c: c.workspace, lambda c: c.out, lambda c: c.out.stride(0), lambda c: c.out.stride(1))
_REDUCE_POSITIONAL = {0: (WORKSPACE_AT, False), 1: (2, False)}


class Launcher:
    """Launches one kernel. Inputs were validated by the caller."""

    def __init__(self, m: ir.Module, src: GluonSource, fast: bool | None = None,
                 tail: tuple[ir.Module, GluonSource] | None = None, follows: bool = False) -> None:
        """`tail`: a plan with a split-K tail's second kernel (`Plan.tail_split`): then `m` and it are ranged, and
        a call runs the whole waves of tiles in `m` and the rest in the tail (`ir.raster.tail_spans`).
        `follows`: this launcher's kernels run after another kernel of the same call (a split-K tail's, after the
        whole waves), so its first kernel is launched dependently as a call's second kernels are (`_pdl`). Where a
        call's M leaves no whole wave the tail runs first and is still launched so: right either way (it waits), at
        the cost a dependent launch has after a kernel that does not trigger (some 0.15 us).

        An sm_100a or gfx1250 module is refused here, where every launching path (Kernel.run, the eager and fused
        calls of the public API) builds its launcher: warploom cross-compiles such kernels but has not run one on a
        GPU."""
        if m.target != "sm_90a":
            from warploom.errors import TargetError
            raise TargetError(f"{m.name} is {m.target.with_article} kernel, which warploom cross-compiles but has not "
                              f"run on {m.target.with_article} GPU yet (none is at hand). Fix: "
                              f"Kernel.compile('{m.target}') to inspect it, or plan for the sm_90a GPU you run on")
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        self._bm, self._bn, self._grid_max = m.tiling.bm, m.tiling.bn, m.tiling.grid
        self._tn = m.tiling.tile_n  # (a tile's columns of C: its stride along N, ir.Tiling.tile_n)
        self._tiling, self._planned_k, self._planned_n = m.tiling, m.spec.k, m.spec.n
        # (a rowwise quantizing epilogue takes its row's amax on one tile: no wider N than planned for, rule 27)
        # (rule 29's first pass, ir.Module.amax_pass, spans the tiles along N: any N)
        self._rowwise = m.spec.epilogue is not None and m.spec.epilogue.rowwise() and m.amax_pass is None
        # Stream-K (ir.Tiling.stream_k): the workspace and flags, made once per device (`stream_k_buffers`).
        self.stream_k_buffers = StreamKBuffers(m.tiling)
        # WARPLOOM_FAST_LAUNCH=0 keeps every call on Triton's JIT dispatch (an escape hatch, and the baseline
        # scripts/profile_host.py measures against).
        fast = os.environ.get("WARPLOOM_FAST_LAUNCH", "1") != "0" if fast is None else fast
        k_major = m.spec.b_layout is BLayout.K_MAJOR
        m_major = m.spec.a_layout is ALayout.M_MAJOR
        blocks = descriptor_blocks(m)
        descs = {i: DescSlot(blocks[p][1], shared_layout(*blocks[p]), TensorDescriptor)
                 for i, p in enumerate(src.params) if p in blocks}
        pdl = _pdl(m, first=False)
        self._main = DirectLaunch(load(src.text, src.kernel), compile_options(num_warps=src.num_warps,
                                                                         maxnreg=src.maxnreg,
                                                                         **_ctas(src.num_ctas),
                                                                         **_pdl(m, first=not follows)), descs,
                                  fast)
        self._reduce = None
        if src.reduce_kernel:  # split-K's second kernel: every argument a pointer or an integer
            self._reduce = DirectLaunch(load(src.text, src.reduce_kernel), compile_options(num_warps=4, **pdl), {},
                                        fast)
        self._cast = None
        self._cast_fp8 = m.amax_pass.fp8 if m.amax_pass is not None else None  # (q's dtype: the cast kernel's)
        if src.cast_kernel:  # rule 29's second pass (backends/gluon_cast.py): pointers and integers too
            self._cast = DirectLaunch(load(src.text, src.cast_kernel), compile_options(num_warps=CAST_WARPS, **pdl),
                                      {}, fast)
        # A swapped module (rule 18, ir.Tiling.swap_ab) runs C^T = B^T A^T: a call's tensors are the problem's, so
        # its A descriptor is over B's (N, K) rows, its B (K-major) over A's (M, K) rows, and its output tiles go to
        # C through a descriptor over C itself with (BN, BM) boxes; scales trade places, and M and N.
        self._swap = swap = m.tiling.swap_ab
        getters: dict[str, Callable[[Call], Any]] = {
            # B's descriptor is over its storage order: (N, K) rows for K-major B, (K, N) rows otherwise.
            # A's over its storage order too: (M, K) rows, or (K, M) rows for an M-major A.
            "a_desc": (lambda c: c.b.t()) if swap else (lambda c: c.a.t()) if m_major else (lambda c: c.a),
            "b_desc": (lambda c: c.a) if swap else (lambda c: c.b.t()) if k_major else (lambda c: c.b),
            "c_desc": lambda c: c.out,
            WORKSPACE_DESC: lambda c: c.workspace,
        }
        # A fitted tile's B goes by a descriptor per block width (ir.TmaLoad.blocks), over B as b_desc would be.
        getters |= {p: getters["b_desc"] for p in src.params if p.startswith("b_desc_w")}
        for j in range(1, len(m.spec.output_dtypes())):
            getters[output_desc(j)] = functools.partial(lambda j, c: c.extra_outs[j - 1], j)
        for bf in m.buffers:
            if bf.tensor is ir.Tensor.OPERAND:
                getters[f"{bf.operand}_desc"] = functools.partial(lambda name, c: c.operands[name], bf.operand)
            elif bf.alias:  # (a fitted tile's narrower block: C or the workspace, through a box of its width)
                getters[buffer_desc(bf)] = getters[WORKSPACE_DESC if bf.tensor is ir.Tensor.WORKSPACE else "c_desc"]
        # A descriptor's tensor as a view of one whose address it shares, where the getter makes a view (B's
        # transpose): a bound launch looks encodings up by address and skips the view (~1.3 us) when it finds one.
        self._bases: dict[int, Callable[[Call], Any]] = {
            i: (lambda c: c.b) for i, p in enumerate(src.params)
            if (p == "a_desc" if swap else p == "b_desc" or p.startswith("b_desc_w")) and k_major}
        fused = m.spec.epilogue is not None
        scale_args = _scale_args(m.spec.scale) if m.spec.scale.is_blockwise else {}
        self._args: list[Callable[[Call], Any]] = []
        for p in src.params:
            if p in scale_args:
                self._args.append(scale_args[p])
            elif p in blocks:  # the tensor to describe (DirectLaunch makes the descriptor)
                self._args.append(getters[p])
            elif re.fullmatch(r"c\d+_(ptr|stride_m)", p):  # a fused 1x128 quantization's scales (its output j)
                j = int(p[1:p.index("_")])
                self._args.append(functools.partial(lambda j, c: c.extra_outs[j - 1], j) if p.endswith("_ptr")
                                  else functools.partial(lambda j, c: c.extra_outs[j - 1].stride(0), j))
            elif p == "amax_ptr":  # rule 29's row amax workspace (before the fused operands: it ends in _ptr)
                self._args.append(lambda c: c.amax)
            elif p in SK_PARAMS:  # (before the fused operands: these end in _ptr too)
                self._args.append(functools.partial(lambda i, c: self.stream_k_buffers(c.out.device)[i],
                                                    SK_PARAMS.index(p)))
            elif fused and p.endswith("_ptr"):
                # Operands keep their own strides (compiled into the kernel): the storage goes as it is.
                self._args.append(functools.partial(lambda name, c: c.operands[name], p.removesuffix("_ptr")))
            elif p == ("scale_b_ptr" if swap else "scale_a_ptr"):
                self._args.append(lambda c: aligned_copy(c.scale_a))
            elif p == ("scale_a_ptr" if swap else "scale_b_ptr"):
                self._args.append(lambda c: aligned_copy(c.scale_b))
            elif p == "bias_ptr":
                self._args.append(lambda c: aligned_copy(c.bias))
            elif swap and p in ("M", "N"):
                self._args.append((lambda c: c.b.shape[1]) if p == "M" else (lambda c: c.a.shape[0]))
            else:
                self._args.append({"M": lambda c: c.a.shape[0], "N": lambda c: c.b.shape[1],
                                   "K": lambda c: c.a.shape[1], "tile_lo": lambda c: c.span.lo,
                                   "tile_hi": lambda c: c.span.hi}[p])
        # Where each argument comes from when it is a call's positional tensor as it is, or through `aligned_copy`:
        # (position in (a, b, out, scale_a, scale_b, bias, workspace), aligned), by parameter index; a descriptor's
        # by its base tensor. A bound launch fills these in without a `Call` or a getter.
        direct = {"a_desc": (1 if swap else 0, False), "b_desc": (0 if swap else 1, False), "c_desc": (2, False),
                  WORKSPACE_DESC: (WORKSPACE_AT, False)}
        if not fused:
            direct |= {"scale_a_ptr": (4 if swap else 3, True), "scale_b_ptr": (3 if swap else 4, True),
                       "bias_ptr": (5, True)}
            if m.spec.scale.is_blockwise and m.spec.scale is not ScaleRecipe.MX:
                direct |= {"sa_ptr": (3, False), "sb_ptr": (4, False)}
        # (a fitted tile's per-width descriptors: over B, C and split-K's workspace, as b_desc's, c_desc's and its)
        direct |= {p: direct[p[:6]] for p in src.params if p.startswith(("b_desc_w", "c_desc_w"))}
        direct |= {p: direct[WORKSPACE_DESC] for p in src.params if p.startswith(WORKSPACE_DESC + "_w")}
        self._positional = {i: direct[p] for i, p in enumerate(src.params) if p in direct}
        self._tail = None if tail is None else Launcher(*tail, fast=fast, follows=True)

    def _grid(self, m: int, n: int, split_k: int, span: Span | None) -> int:
        """Programs launched: `launch_grid`'s CTAs, except a stream-K kernel's, which is the planned grid whatever the
        tiles (its CTAs share the k-blocks, not whole tiles); a cluster's program is a cluster (ir.Tiling.cluster)."""
        if self._tiling.stream_k:
            return self._grid_max
        cluster = self._tiling.cluster
        return launch_grid(m, n, self._bm, self._tn, self._grid_max, split_k, span, cluster=cluster,
                           cluster_n=self._tiling.cluster_n) // cluster

    def _mn(self, a: Any, b: Any) -> tuple[int, int]:
        """The kernel's M and N for a call's A and B: a swapped kernel's are the problem's N and M."""
        return (b.shape[1], a.shape[0]) if self._swap else (a.shape[0], b.shape[1])

    @property
    def can_bind(self) -> bool:
        """Whether `bind` can ever give a launch: every plan's kernels but rule 29's two passes (whose amax
        workspace must be zeroed for each call: `_two_passes`)."""
        return self._cast is None

    def bind(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
             operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Bound | None:
        """This call's launches for calls whose tensors have these tensors' shapes, strides, dtypes, devices and
        16-byte alignments (what an eager call's key holds: `warploom.eager`), or None where there are none yet.

        Those fix every argument's specialization, each kernel's grid, the device, a split-K workspace's shape and
        a ranged kernel's tiles, so the `Bound` launches the kernels compiled for this call's specialization (a
        split-K plan's and its reduce's, a tail's after the whole waves') without deriving any of them again. The
        Bound does not check that a later call matches: its caller must (eager.py calls it only under the key it
        was bound for). None until a call like this one has launched directly (it compiled the kernels), and
        always where `can_bind` is False."""
        if not self.can_bind:
            return None
        device = a.get_device()
        parts: list[tuple[tuple[int, int] | None, list[BoundStep]]] = []
        import torch

        for launcher, span in self._parts(a, b):
            m, n = launcher._mn(a, b)
            try:  # (a workspace like the calls' own: its descriptor's encoding and its pointer's specialization)
                ws = launcher._workspace(a.shape[1], m, n, span, out.device)
            except torch.cuda.OutOfMemoryError:
                return None  # (the call itself launched: it stays on the general path, which allocates per call)
            call = Call(a, b, out, scale_a, scale_b, bias, operands or {}, extra_outs, ws, span)
            steps = []
            for step in launcher._steps(m, n, span, ws is not None):
                args = [g(call) for g in step.getters]
                compiled = step.direct.compiled_for(device, args)
                if compiled is None:
                    return None
                steps.append(BoundStep(step, compiled, args, span))
            parts.append((None if ws is None else (int(ws.shape[0]), int(ws.shape[1])), steps))
        return Bound(self, device, parts)

    def __call__(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
                 operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        # Triton launches on the current device; the kernel belongs on the tensors' (torch's rule for its ops).
        dev = a.get_device()
        if dev < 0 and getattr(self._main, "on_gpu", False):  # (a test's stand-in takes CPU tensors)
            raise DeviceError("a", "a tensor on a CUDA GPU: Kernel.run launches there", f"a tensor on {a.device}",
                             "move a, b and out to the GPU (.cuda()), or run Kernel.simulate(a, b) on the CPU "
                             "simulator")
        if dev >= 0 and dev != driver.active.get_current_device():
            import torch

            with torch.cuda.device(dev):
                return self._launch(a, b, out, scale_a, scale_b, bias, operands, extra_outs)
        return self._launch(a, b, out, scale_a, scale_b, bias, operands, extra_outs)

    def _launch(self, a: Any, b: Any, out: Any, scale_a: Any, scale_b: Any, bias: Any,
                operands: Mapping[str, Any] | None, extra_outs: Sequence[Any]) -> Any:
        for launcher, span in self._parts(a, b):
            launcher._run(a, b, out, scale_a, scale_b, bias, operands, extra_outs, span)
        return out

    def _parts(self, a: Any, b: Any) -> list[tuple[Launcher, Span | None]]:
        """The launchers a call runs, in order, with their tiles: this one over all of C (a ranged kernel's as the
        span of every tile); with a split-K tail, this one over the whole waves and the tail over the rest, each
        only where it has tiles (`ir.raster.tail_spans`)."""
        if not self._tiling.ranged:
            return [(self, None)]
        m, n = self._mn(a, b)
        tiles = -(-m // self._bm) * -(-n // self._tn)
        if self._tail is None:  # a ranged kernel on its own covers all of C
            return [(self, Span(0, tiles))]
        whole, rest = tail_spans(tiles, self._grid_max, self._tail._tiling.splits_evenly(a.shape[1]))
        return [(launcher, span) for launcher, span in ((self, whole), (self._tail, rest)) if span.tiles]

    def _workspace(self, k: int, m: int, n: int, span: Span | None, device: Any) -> Any:
        """Split-K's fp32 partial sums for one call (None without split-K), after checking that the kernel can
        split this K as it was built to."""
        if self._tiling.split_k == 1:
            return None
        import torch

        if not self._tiling.splits_evenly(k):
            raise split_k_mismatch(self._tiling.bk, self._tiling.split_k, self._planned_k, k,
                                   self._tiling.uneven_split)
        return torch.empty(self._tiling.workspace_shape(m, n, span.tiles if span else 0), dtype=torch.float32,
                           device=device)

    def _steps(self, m: int, n: int, span: Span | None, split: bool) -> list[Step]:
        """The kernels `_run` launches for an M x N output over `span`: the main one, then split-K's reduce where
        the call has a workspace (`split`), one program per REDUCE_BLOCK elements of each ranged tile's box, or
        `reduce_grid`'s over C."""
        main = Step(self._main, self._grid(m, n, self._tiling.split_k, span), self._args, self._positional,
                    self._bases)
        if not split:
            return [main]
        assert self._reduce is not None
        ints: tuple[int, ...]
        if span is not None:
            grid, ints = span.tiles * (self._bm * self._bn // REDUCE_BLOCK), (m, n, span.lo, span.hi)
        else:
            grid, ints = reduce_grid(m, n), (m, n, self._tiling.slab_rows(m))
        getters: list[Callable[[Call], Any]] = [*_REDUCE_GETTERS, *(functools.partial(_constant, v) for v in ints)]
        return [main, Step(self._reduce, grid, getters, _REDUCE_POSITIONAL, {})]

    def _run(self, a: Any, b: Any, out: Any, scale_a: Any, scale_b: Any, bias: Any,
             operands: Mapping[str, Any] | None, extra_outs: Sequence[Any], span: Span | None) -> Any:
        m, n = self._mn(a, b)
        if self._rowwise and n > self._bn:
            raise rowwise_too_wide(self._bn, self._planned_n, n)
        if self._cast is not None:
            return self._two_passes(a, b, out, scale_a, scale_b, bias, operands, extra_outs, m, n)
        workspace = self._workspace(a.shape[1], m, n, span, out.device)
        call = Call(a, b, out, scale_a, scale_b, bias, operands or {}, extra_outs, workspace, span)
        for step in self._steps(m, n, span, workspace is not None):
            step.direct.launch(step.grid, [g(call) for g in step.getters])
        return out

    def _two_passes(self, a: Any, b: Any, q: Any, scale_a: Any, scale_b: Any, bias: Any,
                    operands: Mapping[str, Any] | None, extra_outs: Sequence[Any], m: int, n: int) -> Any:
        """Planner rule 29: the first pass stores y (fp32) to a workspace and adds each tile's row amax to an (M,)
        amax workspace; the cast kernel then writes q (`q`, the call's first output) and s (its second). Both
        workspaces are allocated per call: the amax must start at zero for every call, and torch.zeros is a memset
        that a CUDA graph replays (inside a capture both come from the graph's pool), so nothing of one call reaches
        the next, on any stream."""
        assert self._cast is not None
        if len(extra_outs) != 1:
            from warploom.errors import InputError

            raise InputError("extra_outs", "(s,): the (M, 1) fp32 scales, beside q as out", f"{len(extra_outs)} "
                             "tensor(s)", "pass extra_outs=(torch.empty(M, 1, dtype=torch.float32, device=q.device),)")
        s = extra_outs[0]
        assert self._cast_fp8 is not None
        # (the cast kernel takes q's and s's row strides alone: anything else would be written elsewhere, silently)
        check_outputs(self._cast_fp8, m, n, q, s, ("out", "extra_outs[0]"), a.device)
        ws, amax = amax_workspaces(m, n, q.device)
        call = Call(a, b, ws, scale_a, scale_b, bias, operands or {}, (), None, None, amax)
        self._main.launch(self._grid(m, n, 1, None), [g(call) for g in self._args])
        self._cast.launch(m, [ws, ws.stride(0), amax, q, q.stride(0), s, s.stride(0), m, n])
        return q


def amax_workspaces(m: int, n: int, device: Any) -> tuple[Any, Any]:
    """Rule 29's per-call workspaces on `device`: y's (M, N) fp32, its rows padded to 16 bytes (TMA's row rule; N
    itself need not be a multiple of 4; a grouped call's always is, so its row stride is N), and the (M,) int32 row
    amax, zeroed. Out of memory is a ResourceError with the unfused fix."""
    import torch

    try:
        ws = torch.empty(m, -(-n // 4) * 4, dtype=torch.float32, device=device)[:, :n]
        return ws, torch.zeros(m, dtype=torch.int32, device=device)
    except torch.cuda.OutOfMemoryError as e:
        from warploom.errors import ResourceError

        raise ResourceError(f"rule 29's workspace: {m * n * 4 + m * 4} bytes on {device} could not be allocated (out "
                            "of memory). Fix: free GPU memory, or return the value and quantize it with "
                            "warploom.quantize(out, recipe='rowwise')") from e


class StreamKBuffers:
    """A stream-K kernel's fp32 workspace (one BM x BN slot per CTA) and int32 flags (one per CTA and consumer
    partition, zero between launches: each finisher resets the flags it consumed), by device: called with a device,
    they are made on first use and kept. Launches of one kernel share them, so they must not run concurrently on two
    streams. A CTA contributes at most one partial a launch (its first shared unit), so grid slots suffice whatever
    the tile count: a grouped kernel's, known on the device only, too."""

    def __init__(self, tiling: ir.Tiling) -> None:
        self._tiling = tiling
        self._bufs: dict[int, tuple[Any, Any]] = {}

    def __call__(self, device: Any) -> tuple[Any, Any]:
        import torch

        key = device.index if device.index is not None else torch.cuda.current_device()
        bufs = self._bufs.get(key)
        if bufs is None:
            t = self._tiling
            try:
                bufs = (torch.empty(t.grid * t.bm, t.bn, dtype=torch.float32, device=device),
                        torch.zeros(t.grid * 4, dtype=torch.int32, device=device))
            except torch.cuda.OutOfMemoryError as e:
                from warploom.errors import ResourceError

                raise ResourceError(f"stream-K workspace: {stream_k_workspace_bytes(t)} bytes on {device} could not "
                                    "be allocated (out of memory). Fix: free GPU memory, or plan with "
                                    "stream_k=0 (warploom.planner.plan_schedule)") from e
            self._bufs[key] = bufs
        return bufs


def stream_k_workspace_bytes(t: ir.Tiling) -> int:
    """The device memory a stream-K kernel keeps per device: grid BM x BN fp32 slots and 4 int32 flags per CTA."""
    return t.grid * t.bm * t.bn * 4 + t.grid * 4 * 4 if t.stream_k else 0


def _pdl(m: ir.Module, first: bool) -> dict[str, bool]:
    """Triton's `launch_pdl` for a kernel of a module that may be launched dependently (`ir.Module.dependent_launch`:
    its kernels wait for the previous grid before touching memory, so either launch is correct).

    A call's second kernels (split-K's reduce, rule 29's cast, a split-K tail's) follow its first, which lets them
    launch as soon as all its CTAs have started: they are launched dependently unless WARPLOOM_PDL=0. The first
    kernel follows whatever ran before it, and PDL pays there only after a kernel that lets it start early: 0.6-0.9 us
    sooner per call after another warploom GEMM, but some 0.15 us later after a kernel launched without PDL, as
    torch's are (H200; docs/decisions/dependent-launch.md). So it is launched dependently only with WARPLOOM_PDL=1,
    for graphs whose GEMMs follow warploom's or other PDL-aware kernels. WARPLOOM_PDL=0 is also the escape hatch
    for a driver or profiler that refuses the attribute."""
    mode = os.environ.get("WARPLOOM_PDL", "auto")
    if mode not in ("auto", "1", "0"):
        from warploom.errors import UnsupportedError

        raise UnsupportedError(f"WARPLOOM_PDL={mode!r}: expected auto (the default: a call's second kernels "
                               "launched with programmatic dependent launch), 1 (every kernel) or 0 (none). Fix: set "
                               "it to one of those, or unset it")
    on = mode == "1" if first else mode != "0"
    return {"launch_pdl": True} if m.dependent_launch and on else {}


def _ctas(num_ctas: int) -> dict[str, int]:
    """The launch option of a cluster kernel's CTAs per cluster (none for one CTA: Triton's default)."""
    return {"num_ctas": num_ctas} if num_ctas > 1 else {}


def _scale_args(recipe: ScaleRecipe) -> dict[str, Callable[[Call], Any]]:
    """Blockwise scales go as they are: the kernel reads them element by element with their own strides. scale_b
    is (k-blocks, N or N-blocks), except MX's (N, K/32) and NVFP4's row-major (N, K/16), a row per column of B; MX
    scales go as their bytes, which the kernel decodes (Triton has no e8m0 pointer type), NVFP4's e4m3 as they are."""
    import torch

    mx = recipe is ScaleRecipe.MX
    kb = 1 if recipe.microscaled else 0  # scale_b's k dimension

    def ptr(t: Any) -> Any:
        return t.view(torch.uint8) if mx else t

    return {
        "sa_ptr": lambda c: ptr(c.scale_a), "sb_ptr": lambda c: ptr(c.scale_b),
        "sa_stride_m": lambda c: c.scale_a.stride(0), "sa_stride_k": lambda c: c.scale_a.stride(1),
        "sb_stride_k": lambda c: c.scale_b.stride(kb), "sb_stride_n": lambda c: c.scale_b.stride(1 - kb),
    }


