"""GPU tier for eager calls of plans with more than one launch: split-K (its reduce after it) and a split-K tail
after the whole waves. From its second call on, such a call goes through its bound launches (runtime/bound.Bound,
as single-kernel calls always did): each call's workspace fresh, the same numbers as the first call's, on new
tensors of the remembered key, inside a CUDA graph too.

The shapes are zoo shapes the planner splits (rules 14 and 25, and rule 15's tails), each op as `warploom bench`
calls it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from graphs import captured

import warploom
from warploom import eager
from warploom.reference import dequantized

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def _bf16(m: int, n: int, k: int) -> tuple[Callable[[], Any], torch.Tensor, list[torch.Tensor]]:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return (lambda: warploom.matmul(a, b)), a.float() @ b.float(), [a, b]


def _rowwise(fast: bool) -> Callable[[int, int, int], tuple[Callable[[], Any], torch.Tensor, list[torch.Tensor]]]:
    def make(m: int, n: int, k: int) -> tuple[Callable[[], Any], torch.Tensor, list[torch.Tensor]]:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref = (a.float() @ b.float()) * sa * sb
        return (lambda: warploom.scaled_mm(a, b, sa, sb, use_fast_accum=fast)), ref, [a, b, sa, sb]

    return make


def _blockwise(m: int, n: int, k: int) -> tuple[Callable[[], Any], torch.Tensor, list[torch.Tensor]]:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    kb = -(-k // 128)
    sa, sb = (torch.rand(kb, m, device="cuda") + 0.5).t(), torch.rand(kb, -(-n // 128), device="cuda") + 0.5
    da, db = dequantized(a, b, sa, sb)
    return (lambda: warploom.scaled_mm(a, b, sa, sb)), da @ db, [a, b, sa, sb]


CASES = [
    ("bf16 73x104x3280", _bf16, (73, 104, 3280), "k"),
    ("bf16 295x1536x6064", _bf16, (295, 1536, 6064), "k"),
    ("bf16 2090x96x7792 fitted", _bf16, (2090, 96, 7792), "k"),  # (B, C and the workspace by block width)
    ("fp8 fast 469x96x4928", _rowwise(True), (469, 96, 4928), "k"),
    ("fp8 fast 428x9024x5840", _rowwise(True), (428, 9024, 5840), "t"),
    ("fp8 exact 405x1424x6576", _rowwise(False), (405, 1424, 6576), "k"),
    ("blockwise 4x816x10400", _blockwise, (4, 816, 10400), "k"),
    ("blockwise 428x9024x5840", _blockwise, (428, 9024, 5840), "t"),
]


@pytest.mark.parametrize("make,size,split", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_eager_split_calls_bind_and_match(make: Any, size: tuple[int, int, int], split: str) -> None:
    eager.forget()
    torch.manual_seed(sum(size))
    m, n, k = size
    call, ref, _ = make(m, n, k)
    first = call()  # through the launcher's general path, which binds the call's launches
    second = call()  # bound: the same tensors, the same bits
    assert _err(first.float(), ref) < 1e-3 and torch.equal(first, second)
    call3, ref3, _ = make(m, n, k)
    third = call3()  # bound, new tensors of the same key
    assert _err(third.float(), ref3) < 1e-3
    (prepared,) = eager._CALLS.values()
    plan = prepared.kernel.plan
    assert (plan.split_k > 1) if split == "k" else (plan.tail_split > 1), plan.short()  # (the zoo plan it names)
    # (split-K: the kernel and its reduce; a tail's: the whole waves', then the tail's kernel and reduce)
    assert prepared.bound is not None
    assert [len(steps) for _, steps in prepared.bound.parts] == ([2] if split == "k" else [1, 2])
    # In a CUDA graph: the bound call's workspace comes from the graph's pool; replays follow new input values.
    call, _, tensors = make(m, n, k)
    graph, captured_out = captured(call)
    _, ref2, tensors2 = make(m, n, k)
    for t, t2 in zip(tensors, tensors2, strict=True):
        t.copy_(t2)
    captured_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _err(captured_out.float(), ref2) < 1e-3
