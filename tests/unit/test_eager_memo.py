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


class GpuLike:
    """A CPU tensor that reports itself on GPU 0: what `eager.key` reads of a tensor, without a GPU."""

    def __init__(self, t: torch.Tensor, device: int = 0) -> None:
        self.t, self.device = t, device
        self.shape, self.dtype = t.shape, t.dtype
        self.is_cuda = True

    def stride(self) -> tuple[int, ...]:
        return self.t.stride()

    def get_device(self) -> int:
        return self.device

    def data_ptr(self) -> int:
        return self.t.data_ptr()

    def is_neg(self) -> bool:
        return self.t.is_neg()


def _lined(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of `t` at a 128-byte aligned address: copies whose keys match (a GPU allocation is; the key
    holds the address to 128 bytes)."""
    flat = torch.empty(t.numel() + 128, dtype=t.dtype)
    at = (-flat.data_ptr() % 128) // t.element_size()
    return flat[at:at + t.numel()].view(t.shape).copy_(t)


class _Moved(GpuLike):
    """`GpuLike` at an address `by` bytes on."""

    def __init__(self, t: torch.Tensor, by: int) -> None:
        super().__init__(t)
        self.by = by

    def data_ptr(self) -> int:
        return self.t.data_ptr() + self.by


def _tensor_part(t: torch.Tensor, operand: bool = False) -> tuple[object, ...]:
    """The per-tensor entry of a key, computed as `eager.key` does for a GPU tensor (the CPU has none)."""
    return (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() % (128 if operand else 16))


def test_the_key_holds_what_the_checks_read() -> None:
    a, b = _lined(torch.randn(64, 32).to(BF16)), _lined(torch.randn(32, 64).to(BF16))
    k = eager.key("matmul", (GpuLike(a), GpuLike(b)), None)
    assert k is not None and k == eager.key("matmul", (GpuLike(_lined(a)), GpuLike(_lined(b))), None)
    meta = checks.tensor_meta(a)
    assert meta is not None
    shape, strides, dtype, _, _, neg = meta
    # (a GPU tensor's address to 128 bytes, where its rows start: checks.row_align reads it)
    assert k[1] == (torch.Size(shape), strides, dtype, 0, a.data_ptr() % 128) and not neg
    others = [
        (GpuLike(torch.randn(64, 48).to(BF16)), GpuLike(b)),  # shape
        (GpuLike(torch.randn(32, 64).to(BF16).t()), GpuLike(b)),  # strides
        (GpuLike(torch.randn(64, 32).half()), GpuLike(b)),  # dtype
        (GpuLike(a, device=1), GpuLike(b)),  # device
        (GpuLike(torch.randn(64 * 32 + 8).to(BF16)[1:1 + 64 * 32].view(64, 32)), GpuLike(b)),  # address mod 16
        (_Moved(a, 16), GpuLike(b)),  # the address 16 bytes on: the same mod 16, not mod 128 (where rows start)
    ]
    for ts in others:
        assert eager.key("matmul", ts, None) not in (None, k)
    # A scale's address is held to TMA's 16 bytes only (it decides no row alignment): 16 bytes on, the same key.
    s = _lined(torch.rand(64, 1))
    scaled = eager.key("scaled_mm", (GpuLike(a), GpuLike(b), GpuLike(s)), None)
    assert scaled == eager.key("scaled_mm", (GpuLike(a), GpuLike(b), _Moved(s, 16)), None)
    assert scaled != eager.key("scaled_mm", (_Moved(a, 16), GpuLike(b), GpuLike(s)), None)
    # A negated view of a's storage (same shape, strides, address): never remembered, so never served as a.
    assert eager.key("matmul", (GpuLike(torch._neg_view(a)), GpuLike(b)), None) is None
    assert eager.key("matmul", (GpuLike(a), GpuLike(b)), BF16) != k  # out_dtype
    assert eager.key("matmul", (GpuLike(a), GpuLike(b), None), None) != k  # a missing optional tensor


def test_cpu_meta_and_fake_tensors_are_never_remembered() -> None:
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    assert eager.key("matmul", (a, b), None) is None  # the CPU simulator's path
    assert eager.key("matmul", (GpuLike(a), b), None) is None  # b on the CPU: the checks report it
    assert eager.key("matmul", (a.to("meta"), b.to("meta")), None) is None
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fa = torch.empty(64, 32, dtype=BF16, device="cuda")  # a fake CUDA tensor needs no GPU
    assert fa.get_device() == 0
    assert eager.key("matmul", (fa, GpuLike(b)), None) is None


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


def test_fused_calls_on_the_cpu_or_with_operands_that_are_not_tensors_get_no_key() -> None:
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    res = torch.randn(64, 64).to(BF16)
    assert eager.fused_key("matmul+", lambda acc, r: acc + r, (a, b), {"r": res}, None) is None  # CPU
    ga, gb = GpuLike(a), GpuLike(b)
    assert eager.fused_key("matmul+", lambda acc, r: acc + r, (ga, gb), {"r": 2.0}, None) is not None
    # A value the checks refuse (they name the operand): no key, so the call reaches them.
    assert eager.fused_key("matmul+", lambda acc, r: acc + r, (ga, gb), {"r": [1.0]}, None) is None


def test_fused_keys_follow_the_function_and_every_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    # On the CPU no tensor gets a key; stand in for GPU tensors by giving each its CPU metadata.
    monkeypatch.setattr(eager, "_tensor_key", _tensor_part)
    a, b = torch.randn(64, 32).to(BF16), torch.randn(32, 64).to(BF16)
    r1, r2 = _lined(torch.randn(64, 64).to(BF16)), torch.randn(64, 64).to(BF16).t()  # same shape, other strides
    assert eager.fused_key("matmul+", lambda acc, r: acc + r, (a, b), {"r": 0.0}, None) != \
        eager.fused_key("matmul+", lambda acc, r: acc + r, (a, b), {"r": -0.0}, None)  # x / -0.0 is -inf

    def add(acc: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return acc + r

    def sub(acc: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return acc - r

    k = eager.fused_key("matmul+", add, (a, b), {"r": r1}, None)
    assert k is not None and k == eager.fused_key("matmul+", add, (a, b), {"r": _lined(r1)}, None)
    assert k != eager.fused_key("matmul+", sub, (a, b), {"r": r1}, None)
    assert k != eager.fused_key("matmul+", add, (a, b), {"r": r2}, None)
    assert k != eager.fused_key("matmul+", add, (a, b), {"q": r1}, None)
    assert eager.fused_key("matmul+", add, (a, b), {"r": 2.0}, None) != \
        eager.fused_key("matmul+", add, (a, b), {"r": 3.0}, None)
    table = [1.0]
    assert eager.fused_key("matmul+", lambda acc: acc * table[0], (a, b), {}, None) is None  # reads a list


def test_closures_over_signed_zeros_are_different_graphs() -> None:
    from warploom.epilogue import memo

    def divide_by(eps: float) -> Any:
        return lambda acc: acc / eps

    assert memo.key(divide_by(0.0), ()) != memo.key(divide_by(-0.0), ())
    assert memo.key(divide_by(0.5), ()) == memo.key(divide_by(0.5), ())
