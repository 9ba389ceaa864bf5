"""A remembered eager call's launches as templates (`Bound`, made by `runtime.launch.Launcher.bind`): the eager key
fixes every integer argument, grid, specialization and descriptor shape, so a call fills in its tensors and the
encodings of their descriptors, looked up by address, and calls the C launcher of each kernel. `Call` is a launch's
tensors as the getters (`runtime.launch.Launcher`) read them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton import knobs
from triton.runtime.driver import driver

from warploom.ir.raster import Span
from warploom.runtime.direct import CompiledLaunch, DirectLaunch, aligned_copy, live_hook


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


def _call_of(x: tuple[Any, ...], operands: Mapping[str, Any] | None, extra_outs: Sequence[Any],
             span: Span | None) -> Call:
    """The `Call` of a bound launch's tensors `x` (a, b, out, scale_a, scale_b, bias, workspace)."""
    return Call(x[0], x[1], x[2], x[3], x[4], x[5], operands or {}, extra_outs, x[WORKSPACE_AT], span)


class BoundStep:
    """One kernel of a bound launch: its compiled kernel and grid, and the C launcher's arguments as a template.

    The eager key fixes every integer argument (shapes, strides, a ranged kernel's tiles) and each descriptor's
    shape and strides, so the arguments after the kernel's metadata are kept as a template (`_flat`) in which a call
    fills in its tensors and the encodings of their descriptors, looked up by address (`_encoded`)."""

    __slots__ = ("_encoded", "_flat", "_slots", "compiled", "direct", "getters", "grid", "span")

    _MAX_ENCODED = 64

    def __init__(self, step: Step, compiled: CompiledLaunch, args: list[Any], span: Span | None = None) -> None:
        self.direct, self.grid, self.getters, self.compiled, self.span = (step.direct, step.grid, step.getters,
                                                                          compiled, span)
        self._flat: list[Any] = []  # the C launcher's arguments after the kernel's metadata; None where a call's go
        # (flat position, getter, descriptor position or -1, getter of a tensor at the descriptor's address,
        # (position in the call's tensors, through `aligned_copy`) or None: `Step.positional`)
        self._slots: list[tuple[int, Callable[[Call], Any], int, Callable[[Call], Any], tuple[int, bool] | None]] = []
        self._encoded: dict[tuple[int, int], Any] = {}
        if compiled.c_launch is None:  # every call goes through CompiledLaunch.launch
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

    `launcher` is the general path (a `runtime.launch.Launcher`, called with the call's tensors): a call made while
    another device is current, or after the JIT's debug or instrumentation knobs changed or a pre-run hook was added,
    goes through it, which handles each; one with live launch hooks, or of a kernel without a C entry point, goes
    through `CompiledLaunch.launch`, which gives hooks their metadata."""

    __slots__ = ("_empty", "_steps", "device", "launcher", "parts")  # (_empty: torch.empty of fp32)

    def __init__(self, launcher: Callable[..., Any], device: int,
                 parts: Sequence[tuple[tuple[int, int] | None, Sequence[BoundStep]]]) -> None:
        self.launcher, self.device, self.parts = launcher, device, tuple((shape, tuple(steps))
                                                                          for shape, steps in parts)
        self._steps = tuple(step for _, steps in self.parts for step in steps)  # (every kernel, for the knobs check)
        self._empty: Any = None
        if any(shape is not None for shape, _ in self.parts):
            import torch

            self._empty = functools.partial(torch.empty, dtype=torch.float32)

    def __call__(self, a: Any, b: Any, out: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None, *,
                 operands: Mapping[str, Any] | None = None, extra_outs: Sequence[Any] = ()) -> Any:
        general = driver.active.get_current_device() != self.device
        for step in self._steps:  # (a loop, not all() over a generator: this runs on every eager call)
            general = general or not step.direct.same_knobs(step.compiled.key)
        if general:
            return self.launcher(a, b, out, scale_a, scale_b, bias, operands=operands, extra_outs=extra_outs)
        stream = driver.active.get_current_stream(self.device)
        enter, leave = live_hook(knobs.runtime.launch_enter_hook), live_hook(knobs.runtime.launch_exit_hook)
        for shape, steps in self.parts:
            x = (a, b, out, scale_a, scale_b, bias, None if shape is None else self._empty(shape, device=out.device))
            for step in steps:
                step.launch(stream, x, operands, extra_outs, enter, leave)
        return out
