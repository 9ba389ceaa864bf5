"""Which Triton warploom supports, and the Gluon spellings its backends emit for it.

warploom supports Triton 3.6 through 3.9 (`SUPPORTED`). Gluon's API moves between those releases, so every
spelling that differs is decided here, once, from the installed Triton's minor version; the emitters
(backends/gluon_*.py) ask `current()` and never compare versions themselves. The changes, each checked by
cross-compiling under 3.6.0, 3.7.1, 3.8.0 and 3.9.0:

- 3.7: ``gl.thread_barrier()`` is gone, ``gl.barrier()`` replaces it; ``AMDWMMALayout`` takes the warps as
  linear-layout bases (``warp_bases``) instead of ``warps_per_cta``; ``tdm.async_load``'s predicate is an int32
  (3.7 rejects an i1; 3.8 converts one itself, and takes the int32 too); Triton runs ptxas with
  ``--regAllocOptLevel=2``, which runtime/cross.py's re-run of ptxas must pass too to report the same kernel.
- 3.8: the TMA copies are ``tma.async_load`` / ``tma.async_store`` and Ampere's cp.async copy is
  ``async_copy.async_load`` (the old names stay as aliases in 3.8 and raise in 3.9); ``get_tmem_reg_layout`` is
  gone: a tensor-memory register layout comes from the memory descriptor's type (``.get_reg_layout()``).
- 3.8: LLVM sinks a promoted fp8 kernel's ``acc = acc + partial`` below the next wgmma, so two partials live at
  once and the planner's 128x256 tiles spill 600-1500 bytes at 168 registers; a ``warpgroup_mma_wait(0,
  deps=(acc,))`` after the sum pins it (the scaled promotion of blockwise recipes always had that wait).
- 3.8: ``tdm.async_load(desc, offsets, ...)`` moves the descriptor by the offsets and clamps its bounds by them,
  which is what a copy at an offset meant in 3.6 (rows and columns past the descriptor's shape read zeros): the
  same spelling, the same copy.
- 3.8: ``tdm.async_load`` takes ``warp_used_hint``, a bitmask of the warps that issue the copy (seed 004,
  Triton #10056; ir/warps.py); 3.6 and 3.7 have no such argument, so a plan with warp masks is refused there
  (`require_tdm_warp_hint`), naming the option and the version it needs.
- 3.9: ``tdm.async_load_fused([(desc, dest, warp_used_hint), ...])`` issues 2 to 4 copies as one, each warp its
  member's (seed 004's copy group; the descriptors already moved by ``update_tensor_descriptor``). Issue 24 says
  3.8 has it too; only 3.9 is installed here to check, so warploom emits it from 3.9 (`tdm_fused`).
- 3.9: compiling without an explicit fp-fusion choice warns that the default changes in 3.10; warploom
  passes ``enable_fp_fusion`` (`FP_FUSION`) with every compile and launch. (3.9 also assembles sm_90a with its
  newer ptxas: runtime/cross.py asks Triton which one, ``get_ptxas``.)

Golden tests render a kernel for another version with `emitting_for`, which needs no other Triton installed.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from warploom.errors import TritonVersionError, UnsupportedError
from warploom.ir.warps import WarpMask

# The supported Triton releases: 3.6 (torch 2.11's) up to, not including, 3.10.
SUPPORTED = ((3, 6), (3, 10))
SUPPORTED_TEXT = "triton>=3.6,<3.10"  # (pip's spelling; pyproject.toml pins the same)

# Triton contracts a * b + c into an FMA unless told otherwise (enable_fp_fusion, on by default through 3.9, whose
# default changes in 3.10). warploom's numerics are measured with fusion on (epilogue/gluon.py), so every compile
# and launch asks for it explicitly, per kernel: TRITON_DEFAULT_FP_FUSION is left to the user's other kernels, and
# 3.9 does not warn. (TRITON_FORCE_DISABLE_FP_FUSION still turns it off, as Triton documents.)
FP_FUSION = True


class LaunchAbi(enum.Enum):
    """How the C function behind Triton's CUDA launcher takes a launch: after (grid, stream, function, cooperative,
    pdl), 3.6's takes the scratch buffers, the kernel metadata, launch metadata and hooks, then each expanded kernel
    argument; from 3.7 the driver's one function takes the metadata and hooks, the scratch buffers, the arguments'
    annotations and the kernel signature (both kept by the launcher), then the expanded arguments as one list."""

    SPREAD = "spread"
    PACKED = "packed"


@dataclass(frozen=True)
class GluonApi:
    """The Gluon spellings for one Triton minor version (`for_triton`).

    Attributes:
        triton: the (major, minor) version these spellings are for.
        barrier: a barrier of the CTA's (or partition's) threads, a statement.
        tma_load: the TMA copy of a box into shared memory, completing on an mbarrier.
        tma_store: the TMA copy of a shared-memory buffer to global memory.
        cp_async: Ampere's cp.async copy of per-thread elements into shared memory.
        wmma_warp_bases: whether ``AMDWMMALayout`` takes warp bases (else ``warps_per_cta``).
        tmem_layout_from_type: whether a tensor-memory register layout comes from the memory descriptor's
            ``get_reg_layout`` (else from ``get_tmem_reg_layout``).
        tdm_pred_i32: whether a TDM copy's predicate is passed as an int32 (else as the comparison's i1).
        tdm_warp_hint: whether ``tdm.async_load`` takes ``warp_used_hint`` (the warps that issue a copy).
        tdm_fused: whether ``tdm.async_load_fused`` exists (several copies issued as one, each warp its member's).
        pin_promotion: whether a promotion ``acc = acc + partial`` is pinned by a wait naming the sum.
        ptxas_flags: the flags Triton passes ptxas that change the code it assembles, which runtime/cross.py's
            re-run of ptxas passes too, so it reports the registers and spills of the kernel Triton built.
        launch_abi: the argument order of the C function behind Triton's CUDA launcher, which runtime/direct.py
            calls directly (`LaunchAbi`).
        tensordesc_launch_args: whether Triton's ``make_tensordesc_arg`` takes the launch's other arguments as a
            third (which the NVIDIA one does not read).
        tma_multicast: whether a Hopper TMA load takes ``multicast=True`` into a cluster's broadcast layout, and
            `mbarrier.allocate_mbarrier` the cluster's barriers (3.7: a 2-CTA cluster shares B, planner rule 24).
        smem_reinterpret: the shared-memory descriptor's method that views its memory as another shape and layout
            (a fitted tile's narrow staging buffers, `ir.Buffer.alias`).
    """

    triton: tuple[int, int]
    barrier: str
    tma_load: str
    tma_store: str
    cp_async: str
    wmma_warp_bases: bool
    tmem_layout_from_type: bool
    tdm_pred_i32: bool
    tdm_warp_hint: bool
    tdm_fused: bool
    pin_promotion: bool
    ptxas_flags: tuple[str, ...]
    launch_abi: LaunchAbi
    tensordesc_launch_args: bool
    tma_multicast: bool
    smem_reinterpret: str

    def wmma_layout(self, warps_m: int, warps_n: int, instr: tuple[int, int, int]) -> str:
        """A gfx1250 wmma accumulator layout over `warps_m` x `warps_n` warps (each a power of two).

        As warp bases, consecutive warps step along N first, then M: the layout ``warps_per_cta=[warps_m, warps_n]``
        meant (tests/compile/test_compile_layouts.py compares the two as linear layouts)."""
        shape = f"[{', '.join(map(str, instr))}]"
        if not self.wmma_warp_bases:
            return f"AMDWMMALayout(3, True, [{warps_m}, {warps_n}], {shape})"
        bases = [[0, 1 << i] for i in range(warps_n.bit_length() - 1)]
        bases += [[1 << i, 0] for i in range(warps_m.bit_length() - 1)]
        return f"AMDWMMALayout(3, True, {bases}, instr_shape={shape})"

    def tmem_reg_layout(self, ring: str, rows: str, cols: int, warps: int) -> str:
        """The register layout in which `warps` warps load a (rows, cols) fp32 column block of tensor-memory ring
        `ring` (tcgen05.ld), a constexpr expression.

        From 3.8 it is the block's own descriptor's (``.get_reg_layout``): the layout ``get_tmem_reg_layout`` gave
        for the same shape (tests/compile/test_compile_layouts.py compares the two as linear layouts)."""
        if self.tmem_layout_from_type:
            return f"{ring}.index(0).slice(0, {cols}).get_reg_layout({warps})"
        return f"get_tmem_reg_layout(gl.float32, [{rows}, {cols}], TensorMemoryLayout([{rows}, {cols}], " \
               f"col_stride=1), {warps})"

    def tmem_scales_layout(self, buf: str, dtype: str, rows: int, cols: int, warps: int) -> str:
        """The register layout in which `warps` warps store a (rows, cols) block of scales into tensor-memory scale
        buffer `buf` (tcgen05.st into a TensorMemoryScalesLayout), a constexpr expression; from 3.8 the
        descriptor's own, as `tmem_reg_layout`."""
        if self.tmem_layout_from_type:
            return f"{buf}.get_reg_layout({warps})"
        return f"get_tmem_reg_layout({dtype}, [{rows}, {cols}], TensorMemoryScalesLayout(), {warps})"

    def tdm_pred(self, cond: str) -> str:
        """A TDM copy's ``pred=`` argument for the comparison `cond`."""
        return f"({cond}).to(gl.int32)" if self.tdm_pred_i32 else cond

    def require_tdm_warp_hint(self, option: str) -> None:
        """Refuse `option` (a plan's or pass's warp masks) where this Triton's TDM copy has no ``warp_used_hint``."""
        if not self.tdm_warp_hint:
            raise UnsupportedError(f"{option}: TDM warp-usage masks need Triton >= 3.8 (tdm.async_load's "
                                   f"warp_used_hint); this is Triton {self.triton[0]}.{self.triton[1]}. Fix: drop "
                                   "the option (every warp issues its share), or install triton>=3.8,<3.10")

    def require_tdm_fused(self, option: str) -> None:
        """Refuse `option` (a fused copy) where this Triton has no ``tdm.async_load_fused`` warploom has checked."""
        if not self.tdm_fused:
            raise UnsupportedError(f"{option}: a fused TDM copy needs Triton >= 3.9 (tdm.async_load_fused); this is "
                                   f"Triton {self.triton[0]}.{self.triton[1]}. Fix: tdm_warps=TdmWarps.SPLIT (the same "
                                   "warps, two copies), or install triton>=3.9,<3.10")

    def require_multicast(self, option: str) -> None:
        """Refuse `option` (a cluster's B multicast, planner rule 24) where this Triton's Hopper TMA load has none."""
        if not self.tma_multicast:
            raise UnsupportedError(f"{option}: a 2-CTA cluster multicasts B with tma.async_load(..., multicast=True), "
                                   f"which needs Triton >= 3.7; this is Triton {self.triton[0]}.{self.triton[1]}. "
                                   "Fix: plan with cluster=1 (the planner does under this Triton), or install "
                                   "triton>=3.7,<3.10")

    def tdm_hint(self, mask: WarpMask | None) -> str:
        """The ``tdm.async_load`` arguments naming the warps that issue a copy: "" for every warp."""
        if mask is None:
            return ""
        self.require_tdm_warp_hint(f"a tdm_load with warps={mask}")
        return f", warp_used_hint={mask}"

    @property
    def blackwell_imports(self) -> tuple[str, ...]:
        """What `tmem_reg_layout`'s text needs from ``...nvidia.blackwell``."""
        return () if self.tmem_layout_from_type else ("get_tmem_reg_layout",)


# Every spelling that changed between the supported ends: (the first Triton with the new one, field, old, new).
_CHANGES: tuple[tuple[tuple[int, int], str, Any, Any], ...] = (
    ((3, 7), "barrier", "gl.thread_barrier()", "gl.barrier()"),
    ((3, 7), "wmma_warp_bases", False, True),
    ((3, 7), "tdm_pred_i32", False, True),
    ((3, 7), "ptxas_flags", (), ("--regAllocOptLevel=2",)),  # (Triton's workaround of a ptxas 13 bug)
    ((3, 7), "launch_abi", LaunchAbi.SPREAD, LaunchAbi.PACKED),
    ((3, 8), "tensordesc_launch_args", False, True),
    ((3, 7), "tma_multicast", False, True),
    ((3, 8), "tma_load", "tma.async_copy_global_to_shared", "tma.async_load"),
    ((3, 8), "tma_store", "tma.async_copy_shared_to_global", "tma.async_store"),
    ((3, 8), "cp_async", "async_copy.async_copy_global_to_shared", "async_copy.async_load"),
    ((3, 8), "tmem_layout_from_type", False, True),
    ((3, 8), "pin_promotion", False, True),
    ((3, 8), "tdm_warp_hint", False, True),
    ((3, 9), "tdm_fused", False, True),
    ((3, 9), "smem_reinterpret", "_reinterpret", "reinterpret"),
)


def parse(version: str) -> tuple[int, int]:
    """(major, minor) of a Triton version string: ``3.9.0``, ``3.7.1+git1a2b3c``, ``3.8.0rc1``."""
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    if found is None:
        raise TritonVersionError(version, f"{SUPPORTED_TEXT}, a version like 3.6.0")
    return int(found.group(1)), int(found.group(2))


def check(version: str) -> tuple[int, int]:
    """`version`'s (major, minor) if warploom supports it; else a `TritonVersionError` naming it and the range."""
    v = parse(version)
    if not SUPPORTED[0] <= v < SUPPORTED[1]:
        raise TritonVersionError(version, SUPPORTED_TEXT)
    return v


@functools.cache
def for_triton(version: tuple[int, int]) -> GluonApi:
    """The spellings for Triton `version` (major, minor) within `SUPPORTED`."""
    if not SUPPORTED[0] <= version < SUPPORTED[1]:
        raise TritonVersionError(".".join(map(str, version)), SUPPORTED_TEXT)
    return GluonApi(triton=version, **{field: new if version >= since else old
                                       for since, field, old, new in _CHANGES})


def installed_version() -> str:
    """The installed Triton's version string, read from its package metadata (Triton itself is not imported)."""
    import importlib.metadata

    for dist in ("triton", "pytorch-triton", "pytorch-triton-rocm"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    try:
        import triton
    except ImportError:
        raise TritonVersionError("none", SUPPORTED_TEXT) from None
    return str(triton.__version__)


@functools.cache
def installed() -> tuple[int, int]:
    """The installed Triton's (major, minor), checked against `SUPPORTED` (warploom's import calls this)."""
    return check(installed_version())


_forced: contextvars.ContextVar[GluonApi | None] = contextvars.ContextVar("warploom_gluon_api", default=None)


def current() -> GluonApi:
    """The spellings to emit now: the installed Triton's, or those `emitting_for` forces."""
    return _forced.get() or for_triton(installed())


@contextlib.contextmanager
def emitting_for(version: str) -> Iterator[GluonApi]:
    """Within the block, emit Gluon for Triton `version` (e.g. ``"3.9"``) whatever is installed: for golden tests of
    another version's source. (Kernels keep the source they generated: lower a module in the block, not a `Kernel`
    built before it.)"""
    api = for_triton(check(version))
    token = _forced.set(api)
    try:
        yield api
    finally:
        _forced.reset(token)


def compile_options(**options: Any) -> dict[str, Any]:
    """`options` for ``triton.compile`` or a JIT launch, with warploom's fp-fusion choice made explicit."""
    return {**options, "enable_fp_fusion": FP_FUSION}
