"""The eager call memo (warploom/eager.py): what a remembered call is keyed on, and when it is dropped.

The hit path itself launches a kernel (tests/gpu/test_integration_gpu.py runs it); here: the key holds everything
the input checks read, calls that must not be remembered get no key, and a new tuned plan drops the memo.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from warploom import checks, eager
from warploom.tune import lookup

BF16 = torch.bfloat16


def _tensor_part(t: torch.Tensor) -> tuple[object, ...]:
    """The per-tensor entry of a key, computed as `eager.key` does for a GPU tensor (the CPU has none)."""
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)


def test_the_key_holds_what_the_checks_read() -> None:
    a = torch.randn(64, 32).to(BF16)
    meta = checks.tensor_meta(a)
    assert meta is not None
    shape, strides, dtype, device, align = meta
    assert _tensor_part(a) == (torch.Size(shape), strides, dtype, -1, align)
    b = torch.randn(32, 64).to(BF16).t()  # same shape as a.t(), other strides
    assert _tensor_part(b)[1] != _tensor_part(a.t().contiguous())[1]
    flat = torch.randn(64 * 32 + 8).to(BF16)
    off = flat[1:1 + 64 * 32].view(64, 32)  # 2 bytes past the allocation's start
    assert _tensor_part(off)[4] != _tensor_part(flat[:64 * 32].view(64, 32))[4]


def test_cpu_meta_and_fake_tensors_are_never_remembered() -> None:
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    assert eager.key("matmul", (a, b), None) is None  # the CPU simulator's path
    assert eager.key("matmul", (a.to("meta"), b.to("meta")), None) is None
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fa = mode.from_tensor(a)
    assert eager.key("matmul", (fa, b), None) is None


def test_remember_get_and_forget() -> None:
    eager.forget()
    key = ("matmul", ("a",), ("b",), None)
    assert eager.get(key) is None and eager.get(None) is None
    sentinel = eager.Prepared(kernel=None, m=1, n=1, out_dtype=BF16)  # type: ignore[arg-type]
    eager.remember(key, sentinel)
    eager.remember(None, sentinel)  # no key: not remembered
    assert eager.get(key) is sentinel and len(eager._CALLS) == 1
    lookup.forget()  # a tune stored a winner: remembered kernels may be stale
    assert eager.get(key) is None


def test_the_memo_is_bounded() -> None:
    eager.forget()
    sentinel = eager.Prepared(kernel=None, m=1, n=1, out_dtype=BF16)  # type: ignore[arg-type]
    for i in range(eager._MAX + 5):
        eager.remember(("k", i), sentinel)
    assert len(eager._CALLS) <= eager._MAX
    eager.forget()


def test_fused_calls_on_the_cpu_or_with_uncacheable_functions_get_no_key() -> None:
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    res = torch.randn(64, 64).to(BF16)
    assert eager.fused_key("matmul+", lambda acc, r: acc + r, (a, b), {"r": res}, None) is None  # CPU
    table = [1.0]
    assert eager.fused_key("matmul+", lambda acc: acc * table[0], (a.to("meta"), b.to("meta")), {}, None) is None


def test_fused_keys_follow_the_function_and_every_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    # On the CPU no tensor gets a key; stand in for GPU tensors by giving each its CPU metadata.
    def gpu_key(op: str, tensors: tuple[Any, ...], *rest: Any) -> tuple[Any, ...]:
        return (op, *(None if t is None else _tensor_part(t) for t in tensors), *rest)

    monkeypatch.setattr(eager, "key", gpu_key)
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    r1, r2 = torch.randn(64, 64).to(BF16), torch.randn(64, 64).to(BF16).t()  # same shape, other strides

    def add(acc: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return acc + r

    def sub(acc: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return acc - r

    k = eager.fused_key("matmul+", add, (a, b), {"r": r1}, None)
    assert k is not None and k == eager.fused_key("matmul+", add, (a, b), {"r": r1.clone()}, None)
    assert k != eager.fused_key("matmul+", sub, (a, b), {"r": r1}, None)
    assert k != eager.fused_key("matmul+", add, (a, b), {"r": r2}, None)
    assert k != eager.fused_key("matmul+", add, (a, b), {"q": r1}, None)
    assert eager.fused_key("matmul+", add, (a, b), {"r": 2.0}, None) != \
        eager.fused_key("matmul+", add, (a, b), {"r": 3.0}, None)
    table = [1.0]
    assert eager.fused_key("matmul+", lambda acc: acc * table[0], (a, b), {}, None) is None  # reads a list
