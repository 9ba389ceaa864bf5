"""Launch a planned kernel on a CUDA device: TMA descriptors, the persistent grid, the JIT call.

Everything that does not depend on the tensors (the JIT function, shared layouts, which argument is
which) is prepared once per kernel in a `Launcher`, so an eager call only builds descriptors and launches.

The first call of each argument specialization goes through Triton's JIT dispatch, which compiles (or finds
the cached binary) and launches; its compiled kernel is kept under the specialization Triton derived from the
arguments (`native_specialize_impl`, the same function its binder calls: dtypes, 16-byte alignment, i32/i64,
divisibility by 16, ones made constant). Later calls with the same specialization launch that kernel directly,
skipping the JIT's per-call argument binding, option parsing and cache-key hashing (issue 6: host overhead).

A direct launch also skips Triton's per-call TMA descriptor work where it can: the JIT path builds a validated
`TensorDescriptor` per descriptor argument and its launcher encodes each (`cuTensorMapEncodeTiled`) on every call.
A direct launch encodes a tensor's descriptor the way Triton's launcher does (`make_tensordesc_arg`, with the
kernel's own descriptor metadata) once per (address, shape, strides), keeps the encoding, and calls the compiled
launcher's C entry point with the expanded arguments. A descriptor encodes only the address, sizes, strides and
box, so a cached one is valid for any tensor with the same four. Where the Triton launcher does not have the
expected shape (scratch memory, no descriptor metadata, no C entry point found), the direct launch passes
`TensorDescriptor`s to the compiled kernel's own launcher instead.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton import knobs
from triton.knobs import HookChain
from triton.runtime.driver import driver

from warploom.backends.gluon_api import GluonApi, LaunchAbi, compile_options, for_triton, installed
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
from warploom.runtime.cross import descriptor_blocks, shared_layout
from warploom.runtime.loader import load
from warploom.spec import ALayout, BLayout, ScaleRecipe


@dataclass(slots=True)
class Call:
    """One launch's tensors. A fused epilogue's operands (for scaled_mm, scale_a, scale_b and bias among them) are
    in `operands`; its outputs after the first in `extra_outs`. Not frozen: one is built per launch, and a frozen
    dataclass's __init__ costs ~2 us more."""

    a: Any
    b: Any
    out: Any
    scale_a: Any = None
    scale_b: Any = None
    bias: Any = None
    operands: Mapping[str, Any] = field(default_factory=dict)
    extra_outs: Sequence[Any] = ()
    workspace: Any = None  # split-K: the fp32 partial sums (ir.Tiling.workspace_shape)
    span: Any = None  # a ranged kernel's tiles (ir.raster.Span)
    amax: Any = None  # rule 29's first pass: the (M,) int32 row amax workspace, zeroed for the call


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


@dataclass(frozen=True)
class DescSlot:
    """A TMA descriptor parameter: its box and shared layout; the argument is the tensor it describes."""

    block: list[int]
    layout: Any
    cls: Any  # Triton's TensorDescriptor

    def descriptor(self, t: Any) -> Any:
        return self.cls.from_tensor(t, self.block, self.layout)


def _describe(descs: dict[int, DescSlot], args: list[Any]) -> list[Any]:
    """`args` with each descriptor position's tensor turned into its TensorDescriptor (Triton's validated form)."""
    return [descs[i].descriptor(a) if i in descs else a for i, a in enumerate(args)]


@dataclass(frozen=True)
class _DescArg:
    """What Triton's `make_tensordesc_arg` reads of a TensorDescriptor, without its per-call validation (the first
    call of the kernel's specialization went through the validated one, and the caller's checks hold for later
    tensors)."""

    base: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    padding: str = "zero"
    round_f32_to_tf32: bool = False  # (read from 3.7: fp32 boxes rounded to tf32 by the copy; warploom's never are)


class DirectLaunch:
    """One JIT function's launches (module docstring): the first call of each argument specialization goes through
    Triton's JIT, later ones launch the kernel it compiled. `descs` are the positions of the TMA descriptor
    arguments (given as the tensors they describe); the others are the ones whose specialization can change between
    calls (a descriptor's is fixed by the kernel)."""

    def __init__(self, fn: Any, opts: dict[str, Any], descs: dict[int, DescSlot], fast: bool) -> None:
        self._fn, self._opts, self._descs, self._fast = fn, opts, descs, fast
        self._backend: Any = None  # Triton's backend and specializer, once the JIT has run
        self._specialize: Any = None
        self._compiled: dict[tuple[Any, ...], _Compiled] = {}

    @property
    def on_gpu(self) -> bool:
        """Whether the function launched is Triton's JIT (a test's stand-in records the launch instead)."""
        return hasattr(self._fn, "device_caches")

    def launch(self, grid: int, args: list[Any]) -> None:
        # (knobs and driver are imported at module level: an import statement per launch cost ~1 us, profiled)
        if not self._fast or self._backend is None or getattr(self._fn, "pre_run_hooks", None):
            self._jit(grid, args)  # (pre-run hooks, e.g. a tool's, see every call through the JIT)
            return
        device = driver.active.get_current_device()
        key = self._key(device, args)
        compiled = self._compiled.get(key)
        if compiled is None:
            self._jit(grid, args, key)
            return
        stream = driver.active.get_current_stream(device)
        # Launch hooks (profilers; some environments install one) get what the JIT would give them.
        compiled.launch(grid, stream, knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, args)

    def compiled_for(self, device: int, args: list[Any]) -> _Compiled | None:
        """The kernel compiled for these arguments' specialization on `device`, if a launch compiled it and direct
        launches are on."""
        if not self._fast or self._backend is None:
            return None
        return self._compiled.get(self._key(device, args))

    def same_knobs(self, key: tuple[Any, ...]) -> bool:
        """Whether a direct launch keyed `key` (`_key`) still is what the JIT would launch: the same debug and
        instrumentation knobs, and no pre-run hooks (those see every call through the JIT)."""
        return (key[1] == knobs.runtime.debug and key[2] == knobs.compilation.instrumentation_mode
                and not getattr(self._fn, "pre_run_hooks", None))

    def _key(self, device: int, args: list[Any]) -> tuple[Any, ...]:
        """What Triton's JIT keys its kernel cache on that can change between calls of this kernel: the device
        (each loads its own binary), the debug and instrumentation knobs, and the specialization of the arguments
        that vary: pointers (dtype, 16-byte alignment) and integers (strides; M, N, K). A descriptor's is its
        dtype, block and layout, which the kernel fixes."""
        return (device, knobs.runtime.debug, knobs.compilation.instrumentation_mode,
                *(self._specialize(self._backend, a, False, True, True) for i, a in enumerate(args)
                  if i not in self._descs))

    def _jit(self, grid: int, args: list[Any], key: tuple[Any, ...] | None = None) -> None:
        """Launch through Triton's JIT dispatch and remember the kernel it ran under `key`."""
        from triton._C.libtriton import native_specialize_impl

        kernel = self._fn[(grid,)](*_describe(self._descs, args), **self._opts)
        if kernel is None or not hasattr(self._fn, "device_caches"):
            self._fast = False  # not Triton's JIT (a test's stand-in): nothing compiled to launch directly
            return
        if self._backend is None:
            self._backend = self._fn.device_caches[driver.active.get_current_device()][3]
            self._specialize = native_specialize_impl
            key = self._key(driver.active.get_current_device(), args)
        if key is not None and len(self._compiled) < 64:
            # A launch_metadata callback of the JIT function reads the arguments: give it descriptors then.
            self._compiled[key] = _Compiled(kernel, self._descs, getattr(self._fn, "launch_metadata", None) is not None,
                                            key)


class _Compiled:
    """One compiled specialization's direct launch (module docstring)."""

    _MAX_ENCODED = 256  # descriptor encodings kept (address, shape, strides): a few per tensor a model reuses

    def __init__(self, kernel: Any, descs: dict[int, DescSlot], hook_reads_args: bool,
                 key: tuple[Any, ...] = ()) -> None:
        self.kernel, self.descs, self.hook_reads_args, self.key = kernel, descs, hook_reads_args, key
        run = kernel.run  # Triton's launcher (loads the binary on first use)
        meta = getattr(kernel.metadata, "tensordesc_meta", None)
        self.c_launch = _c_entry(run) if not descs or (meta and len(meta) == len(descs)) else None
        self.meta = dict(zip(sorted(descs), meta or (), strict=False))
        self.run = run
        self._encoded: dict[tuple[Any, ...], list[Any]] = {}

    def launch(self, grid: int, stream: int, enter: Any, leave: Any, args: list[Any]) -> None:
        k = self.kernel
        meta = None
        # Triton's default hooks are empty HookChains: a launch with them calls nothing, so it passes no hooks and
        # skips building their metadata (~2 us a launch on the H100 host). A live hook, enter or exit, gets what the
        # JIT gives it: the metadata (name, function, stream; the arguments only for a launch_metadata callback).
        enter, leave = _live(enter), _live(leave)
        if enter is not None or leave is not None:
            meta = k.launch_metadata((grid,), stream, *(_describe(self.descs, args) if self.hook_reads_args else args))
        if self.c_launch is None:
            self.run(grid, 1, 1, stream, k.function, k.packed_metadata, meta, enter, leave,
                     *_describe(self.descs, args))
            return
        flat: list[Any] = []
        for i, a in enumerate(args):
            if i in self.descs:
                flat.extend(self._encode(i, a))
            else:
                flat.append(a)
        self.c_launch(grid, stream, k.function, k.packed_metadata, meta, enter, leave, flat)

    def _encode(self, i: int, t: Any) -> list[Any]:
        """[CUtensorMap, *shape, *strides] for tensor `t` at descriptor position i, as Triton's launcher expands a
        TensorDescriptor (its `make_tensordesc_arg`), remembered per (address, shape, strides)."""
        key = (i, t.data_ptr(), t.shape, t.stride())
        enc = self._encoded.get(key)
        if enc is None:
            enc = _encode_descriptor(_DescArg(t, tuple(t.shape), t.stride()), self.meta[i])
            if len(self._encoded) >= self._MAX_ENCODED:
                self._encoded.clear()
            self._encoded[key] = enc
        return enc


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


def _live(hook: Any) -> Any:
    """`hook`, or None for one that calls nothing (an empty `HookChain`, Triton's default)."""
    return None if isinstance(hook, HookChain) and not hook.calls else hook


# A call's positional tensors, as a bound launch indexes them: (a, b, out, scale_a, scale_b, bias, workspace).
WORKSPACE_AT = 6


@dataclass(frozen=True, slots=True)
class Step:
    """One kernel launch of a call (`Launcher._steps`): the kernel, its grid, a getter per parameter that reads the
    argument off a `Call`, which tensor arguments are the call's positional ones (`Launcher._positional`) and which
    descriptors are views of a tensor whose address they share (`Launcher._bases`)."""

    direct: DirectLaunch
    grid: int
    getters: Sequence[Callable[[Call], Any]]
    positional: Mapping[int, tuple[int, bool]]
    bases: Mapping[int, Callable[[Call], Any]]


def _constant(value: int, call: Call) -> int:
    """A getter of an integer argument fixed when the launch was made (split-K's reduce: M, N, slab rows, tiles)."""
    return value


def _call_of(x: tuple[Any, ...], operands: Mapping[str, Any] | None, extra_outs: Sequence[Any],
             span: Span | None) -> Call:
    """The `Call` of a bound launch's tensors `x` (a, b, out, scale_a, scale_b, bias, workspace)."""
    return Call(x[0], x[1], x[2], x[3], x[4], x[5], operands or {}, extra_outs, x[WORKSPACE_AT], span)


# Split-K's reduce reads the workspace and writes the output through pointers; its integers follow (`_steps`).
_REDUCE_GETTERS: tuple[Callable[[Call], Any], ...] = (
    lambda c: c.workspace, lambda c: c.out, lambda c: c.out.stride(0), lambda c: c.out.stride(1))
_REDUCE_POSITIONAL = {0: (WORKSPACE_AT, False), 1: (2, False)}


class BoundStep:
    """One kernel of a bound launch: its compiled kernel and grid, and the C launcher's arguments as a template.

    The eager key fixes every integer argument (shapes, strides, a ranged kernel's tiles) and each descriptor's
    shape and strides, so the arguments after the kernel's metadata are kept as a template (`_flat`) in which a call
    fills in its tensors and the encodings of their descriptors, looked up by address (`_encoded`)."""

    __slots__ = ("_encoded", "_flat", "_slots", "compiled", "direct", "getters", "grid", "span")

    _MAX_ENCODED = 64

    def __init__(self, step: Step, compiled: _Compiled, args: list[Any], span: Span | None = None) -> None:
        self.direct, self.grid, self.getters, self.compiled, self.span = (step.direct, step.grid, step.getters,
                                                                          compiled, span)
        self._flat: list[Any] = []  # the C launcher's arguments after the kernel's metadata; None where a call's go
        # (flat position, getter, descriptor position or -1, getter of a tensor at the descriptor's address,
        # (position in the call's tensors, through `aligned_copy`) or None: `Step.positional`)
        self._slots: list[tuple[int, Callable[[Call], Any], int, Callable[[Call], Any], tuple[int, bool] | None]] = []
        self._encoded: dict[tuple[int, int], Any] = {}
        if compiled.c_launch is None:  # every call goes through _Compiled.launch
            return
        for i, (get, x) in enumerate(zip(step.getters, args, strict=True)):
            at = step.positional.get(i)
            if i in compiled.descs:
                self._slots.append((len(self._flat), get, i, step.bases.get(i, get), at))
                enc = compiled._encode(i, x)
                self._encoded[(i, x.data_ptr())] = enc[0]
                self._flat.extend([None, *enc[1:]])  # (the encoding's shape and strides stay)
            elif isinstance(x, int):  # M, N, K, strides, tile ranges: all read off shapes and strides
                self._flat.append(x)
            else:  # a tensor the kernel reads through a pointer (scales, bias, epilogue operands, a workspace)
                self._slots.append((len(self._flat), get, -1, get, at))
                self._flat.append(None)

    def launch(self, stream: Any, x: tuple[Any, ...], operands: Mapping[str, Any] | None,
               extra_outs: Sequence[Any], enter: Any, leave: Any) -> None:
        """Launch on `stream` for the call's tensors `x` (a, b, out, scale_a, scale_b, bias, workspace); `enter` and
        `leave` are the launch hooks, None where there are none."""
        c = self.compiled
        if c.c_launch is None or enter is not None or leave is not None:
            whole = _call_of(x, operands, extra_outs, self.span)
            c.launch(self.grid, stream, enter, leave, [g(whole) for g in self.getters])
            return
        flat = self._flat.copy()
        encoded = self._encoded
        call: Call | None = None  # built only for a slot with no position or a descriptor to encode (~0.5 us, CPU)
        for pos, get, i, base, at in self._slots:
            if at is not None:
                t = x[at[0]]
                if i < 0:
                    flat[pos] = aligned_copy(t) if at[1] else t
                    continue
                enc = encoded.get((i, t.data_ptr()))
                if enc is not None:
                    flat[pos] = enc
                    continue
            if call is None:
                call = _call_of(x, operands, extra_outs, self.span)
            if i < 0:
                flat[pos] = get(call)
                continue
            key = (i, base(call).data_ptr())
            enc = encoded.get(key)
            flat[pos] = enc if enc is not None else self._encode(key, get(call))
        k = c.kernel
        c.c_launch(self.grid, stream, k.function, k.packed_metadata, None, None, None, flat)

    def _encode(self, key: tuple[int, int], t: Any) -> Any:
        """Encode and remember the descriptor of `t` at (descriptor position, address) `key`: its shape and strides
        are the eager key's, so the address alone tells a bound launch's encodings apart."""
        enc = self.compiled._encode(key[0], t)[0]
        if len(self._encoded) >= self._MAX_ENCODED:
            self._encoded.clear()
        self._encoded[key] = enc
        return enc


class Bound:
    """A remembered eager call's launches (`Launcher.bind`): the compiled kernels, grids and device its key fixes,
    in parts, one per launcher the call runs (`Launcher._parts`: a split-K tail's after the whole waves'), each
    with its split-K workspace's shape (None without one; allocated for every call, as the general path does: a
    workspace kept between calls would be shared by calls on two streams) and its kernels (`BoundStep`: the main
    one, then split-K's reduce).

    A call made while another device is current, or after the JIT's debug or instrumentation knobs changed or a
    pre-run hook was added, goes through the launcher's general path, which handles each; one with live launch
    hooks, or of a kernel without a C entry point, goes through `_Compiled.launch`, which gives hooks their
    metadata."""

    __slots__ = ("_empty", "device", "launcher", "parts")  # (_empty: torch.empty of fp32)

    def __init__(self, launcher: Launcher, device: int,
                 parts: Sequence[tuple[tuple[int, int] | None, Sequence[BoundStep]]]) -> None:
        self.launcher, self.device, self.parts = launcher, device, tuple((shape, tuple(steps))
                                                                          for shape, steps in parts)
        self._empty: Any = None
        if any(shape is not None for shape, _ in self.parts):
            import torch

            self._empty = functools.partial(torch.empty, dtype=torch.float32)

    def __call__(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
                 operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        if driver.active.get_current_device() != self.device or not all(
                step.direct.same_knobs(step.compiled.key) for _, steps in self.parts for step in steps):
            return self.launcher(a, b, out, scale_a, scale_b, bias, operands=operands, extra_outs=extra_outs)
        stream = driver.active.get_current_stream(self.device)
        enter, leave = _live(knobs.runtime.launch_enter_hook), _live(knobs.runtime.launch_exit_hook)
        for shape, steps in self.parts:
            x = (a, b, out, scale_a, scale_b, bias, None if shape is None else self._empty(shape, device=out.device))
            for step in steps:
                step.launch(stream, x, operands, extra_outs, enter, leave)
        return out


@dataclass(frozen=True, slots=True)
class CEntry:
    """The C function behind Triton's CUDA launcher (`_c_entry`), called with a launch's expanded arguments in the
    order the installed Triton's takes them (`GluonApi.launch_abi`)."""

    fn: Callable[..., Any]
    abi: LaunchAbi
    cooperative: bool
    pdl: bool
    signature: tuple[Any, ...] = ()  # PACKED: the launcher's argument annotations and kernel signature

    def __call__(self, grid: int, stream: int, function: Any, packed_metadata: Any, meta: Any, enter: Any,
                 leave: Any, flat: list[Any]) -> None:
        """Launch `grid` CTAs (clusters) of `function` with the expanded kernel arguments `flat`; no scratch memory
        (`_c_entry` refuses kernels that need it)."""
        if self.abi is LaunchAbi.PACKED:
            self.fn(grid, 1, 1, stream, function, self.cooperative, self.pdl, packed_metadata, meta, enter, leave,
                    None, None, *self.signature, flat)
        else:
            self.fn(grid, 1, 1, stream, function, self.cooperative, self.pdl, None, None, packed_metadata, meta,
                    enter, leave, *flat)


def _c_entry(run: Any) -> CEntry | None:
    """The C launch function behind Triton's CUDA launcher `run`, or None where the launcher is not shaped as
    expected. `CudaLauncher.launch` is the C function itself (the driver's `launch` from 3.7, the kernel's compiled
    module's in 3.6), or, for a kernel with descriptor arguments, `wrap_handle_tensordesc`'s closure over it (free
    variable `launcher`), which expands each TensorDescriptor into its encoding, shape and strides. Kernels that
    need scratch memory keep Triton's launcher, which allocates it, and so do those under GSan (3.8: it appends
    arguments of its own)."""
    abi = _installed_api().launch_abi
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    if not hasattr(run, "launch_cooperative_grid") or not hasattr(run, "launch_pdl"):
        return None
    signature: tuple[Any, ...] = ()
    if abi is LaunchAbi.PACKED:
        if getattr(run, "gsan_enabled", False) or not hasattr(run, "arg_annotations") \
                or not hasattr(run, "kernel_signature"):
            return None
        signature = (run.arg_annotations, run.kernel_signature)
    fn = getattr(run, "launch", None)
    if getattr(fn, "__name__", "") != "launch":
        code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
        if code is None or cells is None or "launcher" not in code.co_freevars:
            return None
        fn = cells[code.co_freevars.index("launcher")].cell_contents
    if not callable(fn):
        return None
    return CEntry(fn, abi, bool(run.launch_cooperative_grid), bool(run.launch_pdl), signature)


@functools.cache
def _installed_api() -> GluonApi:
    """The installed Triton's capabilities (read once: its version does not change in a process)."""
    return for_triton(installed())


def _encode_descriptor(arg: _DescArg, meta: Any) -> list[Any]:
    """[CUtensorMap, *shape, *strides]: Triton's `make_tensordesc_arg` for `arg` with the kernel's descriptor
    metadata `meta` (from 3.8 it takes the launch's other arguments too, which the NVIDIA one does not read)."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    if _installed_api().tensordesc_launch_args:
        return make_tensordesc_arg(arg, meta, None)
    return make_tensordesc_arg(arg, meta)


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


def aligned_copy(t: Any) -> Any:
    """`t`'s elements in order at a 16-byte aligned address (kernels read them through a pointer, with vector
    loads): `t` itself when it is contiguous and aligned (the launcher reads only its address and dtype, the
    same as of its flattened view's), else an aligned contiguous copy."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()

