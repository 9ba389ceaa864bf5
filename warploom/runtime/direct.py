"""One kernel's launches (`DirectLaunch`): Triton's JIT for the first call of each argument specialization, the
kernel it compiled directly after that, through the C function behind Triton's launcher (`CEntry`).

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triton import knobs
from triton.knobs import HookChain
from triton.runtime.driver import driver

from warploom.backends.gluon_api import GluonApi, LaunchAbi, for_triton, installed


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
        self._compiled: dict[tuple[Any, ...], CompiledLaunch] = {}

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

    def compiled_for(self, device: int, args: list[Any]) -> CompiledLaunch | None:
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
            reads_args = getattr(self._fn, "launch_metadata", None) is not None
            self._compiled[key] = CompiledLaunch(kernel, self._descs, reads_args, key)


class CompiledLaunch:
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
        enter, leave = live_hook(enter), live_hook(leave)
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


def live_hook(hook: Any) -> Any:
    """`hook`, or None for one that calls nothing (an empty `HookChain`, Triton's default)."""
    return None if isinstance(hook, HookChain) and not hook.calls else hook


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


def aligned_copy(t: Any) -> Any:
    """`t`'s elements in order at a 16-byte aligned address (kernels read them through a pointer, with vector
    loads): `t` itself when it is contiguous and aligned (the launcher reads only its address and dtype, the
    same as of its flattened view's), else an aligned contiguous copy."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()
