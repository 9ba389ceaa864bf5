"""The eager fast path: a call whose tensors look like an earlier call's reuses that call's checked spec and kernel.

An eager `matmul` or `scaled_mm` on CUDA tensors validates its arguments (`warploom.checks`), builds a `GemmSpec`,
looks up the tuned plan and the built kernel: tens of microseconds of Python per call, more than a small GEMM's
kernel takes (issue 6: an eager call should add at most 10 us). All of it depends only on what the checks read of
each tensor (shape, strides, dtype, device, base address modulo 16, a and b's modulo 128 where their rows start;
negated views are never remembered) and the
call's other arguments, so the first call remembers its kernel under exactly those (`key`), and later calls with
the same key allocate the output and launch. Only calls that passed their checks and need a kernel are remembered
(empty shapes and K = 0 are computed without one, CPU tensors run on the simulator); `forget()` drops everything,
and `warploom.tune.lookup.forget` calls it whenever the tuned plan for a problem may have changed.

Calls with a fused epilogue (`fused_key`, `PreparedFused`) are keyed on the epilogue function as
`warploom.epilogue.memo` keys its captured graph (code, closure, globals and defaults the code reads, by value), and
on every operand by name: a function whose graph cannot be remembered is never remembered here either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from warploom.checks import address_grain, is_fake
from warploom.epilogue import memo
from warploom.kernel import Kernel

_MAX = 1024
_CALLS: dict[tuple[Any, ...], Prepared | PreparedFused] = {}


@dataclass(slots=True)
class Prepared:
    """What a remembered call launches: the kernel and the output's shape and dtype. After its first launch, the
    kernel's launch bound to the call's key (`Launcher.bind`: the key fixes the specialization, grid and device),
    or None where the kernel has none (rule 29's two passes). Not frozen: `bound` is set after a launch."""

    kernel: Kernel
    m: int
    n: int
    out_dtype: Any  # torch.dtype
    bound: Any = None  # runtime.bound.Bound

    def __call__(self, a: Any, b: Any, scale_a: Any = None, scale_b: Any = None, bias: Any = None) -> Any:
        # (sizes as separate arguments: torch's parser takes them ~0.7 us faster than a tuple, measured on CPU)
        if self.bound is None:
            self.kernel.launcher  # noqa: B018 - built first: it refuses what may not launch before any allocation
        out = torch.empty(self.m, self.n, dtype=self.out_dtype, device=a.device)
        if self.bound is not None:
            return self.bound(a, b, out, scale_a, scale_b, bias)
        _launch_and_bind(self, a, b, out, scale_a, scale_b, bias)
        return out


def _launch_and_bind(p: Prepared | PreparedFused, *args: Any, **kw: Any) -> None:
    """Launch `p`'s kernel through its launcher's general path, then bind the launch to the call's key. Bind stays
    None after a launch through the JIT that kept no kernel, so the next call tries again; never where the kernel
    cannot bind (rule 29's two passes)."""
    launcher = p.kernel.launcher
    launcher(*args, **kw)
    if launcher.can_bind:
        p.bound = launcher.bind(*args, **kw)


def key(op: str, tensors: tuple[Any, ...], *rest: Any) -> tuple[Any, ...] | None:
    """The call's key: per tensor what `checks.tensor_meta` reads (the device as its index), then the other
    arguments. None for a call that must not be remembered: a tensor not on a GPU (the CPU simulator's path, or a
    mistake the checks report) or without storage (meta, fake)."""
    metas: list[Any] = [op]
    for i, t in enumerate(tensors):
        part = None if t is None else _tensor_key(t, operand=i < 2)  # (a and b first: where their rows start)
        if t is not None and part is None:
            return None
        metas.append(part)
    return (*metas, *rest)


def _tensor_key(t: Any, operand: bool = False) -> tuple[Any, ...] | None:
    """What the checks read of one tensor, or None for one that is not on a GPU or has no storage, or is a negated
    view (the checks refuse it: it must never match its un-negated storage's key)."""
    device = t.get_device()  # -1 on the CPU and for meta tensors
    if device < 0 or is_fake(t) or t.is_neg():
        return None
    return (t.shape, t.stride(), t.dtype, device, t.data_ptr() % address_grain(t, operand))


@dataclass(slots=True)
class PreparedFused:
    """A remembered call with a fused epilogue: the kernel, the outputs' dtypes, and which tensors the kernel takes
    as graph operands (`names`, scaled_mm's scales and bias among them unless blockwise: those are the mainloop's);
    its launch bound to the key after the first, as `Prepared`'s."""

    kernel: Kernel
    m: int
    n: int
    out_dtypes: tuple[Any, ...]  # torch.dtype per output
    names: tuple[str, ...]
    blockwise: bool
    bound: Any = None  # runtime.bound.Bound

    def __call__(self, a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, operands: dict[str, Any]) -> Any:
        # The user's operands last: matmul may name one `bias` (scaled_mm refuses those names for its own).
        tensors = {"scale_a": scale_a, "scale_b": scale_b, "bias": bias, **operands}
        if self.bound is None:
            self.kernel.launcher  # noqa: B018 - built first: it refuses what may not launch before any allocation
        # (M, N) each, but a fused 1x128 quantization's scales: (M, ceil(N/128))
        shapes = self.kernel.spec.output_shapes(self.m, self.n)
        outs = tuple(torch.empty(shape, dtype=d, device=a.device) for shape, d in zip(shapes, self.out_dtypes,
                                                                                      strict=True))
        sa, sb = (scale_a, scale_b) if self.blockwise else (None, None)
        graph_operands = {n: tensors[n] for n in self.names}
        args = (a, b, outs[0], sa, sb)
        if self.bound is not None:
            self.bound(*args, operands=graph_operands, extra_outs=outs[1:])
        else:
            _launch_and_bind(self, *args, operands=graph_operands, extra_outs=outs[1:])
        return outs[0] if len(outs) == 1 else outs


def fused_key(op: str, fn: Any, tensors: tuple[Any, ...], operands: dict[str, Any], *rest: Any
              ) -> tuple[Any, ...] | None:
    """`key` for a call with epilogue `fn` and its `operands` (tensors or Python numbers), or None."""
    base = key(op, tensors, *rest)
    fn_key = memo.key(fn, ()) if base is not None else None
    if base is None or fn_key is None:
        return None
    ops: list[Any] = []
    for name, v in operands.items():
        if v is None or isinstance(v, (bool, int, float)):
            ops.append((name, memo.value_key(v)))
            continue
        part = _tensor_key(v) if isinstance(v, torch.Tensor) else None  # (else the checks name what is wrong)
        if part is None:
            return None
        ops.append((name, part))
    return (*base, fn_key, tuple(ops))


def get(k: tuple[Any, ...] | None) -> Any:
    return None if k is None else _CALLS.get(k)


def remember(k: tuple[Any, ...] | None, prepared: Prepared | PreparedFused) -> None:
    if k is None:
        return
    if len(_CALLS) >= _MAX:
        _CALLS.clear()
    _CALLS[k] = prepared


def forget() -> None:
    """Drop every remembered call (the tuned plan of a problem may have changed)."""
    _CALLS.clear()
