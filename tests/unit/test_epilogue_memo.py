"""The captured-graph memo (warploom/epilogue/memo.py): a hit only where the traced function cannot mean
anything else, a retrace wherever it might."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from warploom.epilogue import memo
from warploom.epilogue import printer as ep

cap = importlib.import_module("warploom.epilogue.capture")  # the module (the package exports its function)
M, N = 8, 16
ALPHA = 0.5


def _helper(x: torch.Tensor) -> torch.Tensor:
    return x * ALPHA


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    memo.clear()
    calls: list[Any] = []
    real = cap._trace

    def counting(fn: Callable[..., Any], names: list[str]) -> Any:
        calls.append(fn)
        return real(fn, names)

    monkeypatch.setattr(cap, "_trace", counting)
    yield calls
    memo.clear()


def ops(dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    return {"residual": torch.randn(M, N).to(dtype)}


def graph(fn: Callable[..., Any], operands: dict[str, torch.Tensor] | None = None) -> str:
    return ep.text(cap.capture(fn, operands if operands is not None else ops(), out_shape=(M, N)))


def test_the_same_function_is_traced_once(traces: list[Any]) -> None:
    def fn(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc) + residual

    assert graph(fn) == graph(fn)
    assert len(traces) == 1


def test_a_lambda_written_inline_in_a_loop_hits(traces: list[Any]) -> None:
    texts = {graph(lambda acc, residual: torch.sigmoid(acc) * residual) for _ in range(3)}
    assert len(texts) == 1 and len(traces) == 1


def test_closure_values_are_part_of_the_key(traces: list[Any]) -> None:
    def make(scale: float) -> Callable[..., torch.Tensor]:
        return lambda acc, residual: acc * scale + residual

    a, b = graph(make(2.0)), graph(make(3.0))
    assert a != b and "2.0" in a and "3.0" in b  # the constant is baked into each graph
    assert graph(make(2.0)) == a and len(traces) == 2


def test_a_rebound_global_retraces(traces: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fn = lambda acc, residual: acc * ALPHA + residual  # noqa: E731
    first = graph(fn)
    monkeypatch.setitem(fn.__globals__, "ALPHA", 0.25)
    second = graph(fn)
    assert first != second and "0.25" in second and len(traces) == 2


def test_mutable_or_user_values_are_never_cached(traces: list[Any]) -> None:
    box = [2.0]
    boxed = lambda acc, residual: acc * box[0] + residual  # noqa: E731
    graph(boxed)
    box[0] = 5.0
    assert "5.0" in graph(boxed)  # traced again: the list could have changed, and did
    via_helper = lambda acc, residual: _helper(acc) + residual  # noqa: E731
    graph(via_helper)
    graph(via_helper)
    assert len(traces) == 4


def test_operand_classification_is_part_of_the_key(traces: list[Any]) -> None:
    fn = lambda acc, residual: acc + residual  # noqa: E731
    bf, fp = graph(fn, ops(torch.bfloat16)), graph(fn, ops(torch.float16))
    assert bf != fp and len(traces) == 2
    row = graph(fn, {"residual": torch.randn(N)})  # a row vector instead of a dense tensor
    assert row not in (bf, fp) and len(traces) == 3


def test_fused_spec_is_remembered_per_operand_metadata(traces: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from warploom import checks, fused
    from warploom.errors import AlignmentError

    a, b = torch.randn(M, 32, dtype=torch.bfloat16), torch.randn(32, N, dtype=torch.bfloat16)
    spec = checks.matmul_spec(a, b)
    fn = lambda acc, residual: F.gelu(acc) + residual  # noqa: E731
    res = torch.randn(M, N, dtype=torch.bfloat16)
    first, ops1 = fused.fused_spec(spec, a, fn, {"residual": res})
    monkeypatch.setattr(fused, "_fused_spec", lambda *_, **__: pytest.fail("classified and captured again"))
    other = torch.randn(M, N, dtype=torch.bfloat16)
    again, ops2 = fused.fused_spec(spec, a, fn, {"residual": other})
    assert again is first and ops1["residual"] is res and ops2["residual"] is other  # this call's tensors
    monkeypatch.undo()
    # A dense operand whose base address breaks the TMA rule has other metadata: checked, and rejected.
    storage = torch.randn(M * N + 1, dtype=torch.bfloat16)
    with pytest.raises(AlignmentError, match="residual"):
        fused.fused_spec(spec, a, fn, {"residual": storage[1:].view(M, N)})
    assert len(traces) == 1


def test_a_matmul_operand_named_bias_survives_a_memo_hit(traces: list[Any]) -> None:
    # matmul has no bias of its own, so an epilogue operand may be called `bias`; a remembered spec must hand the
    # kernel that operand, not scaled_mm's (absent) bias. CPU tensors: the simulator runs the kernel each time.
    import warploom

    torch.manual_seed(0)
    a, b = torch.randn(64, 64).to(torch.bfloat16), torch.randn(64, 32).to(torch.bfloat16)
    for _ in range(3):
        bias = torch.randn(32).to(torch.bfloat16)
        out = warploom.matmul(a, b, epilogue=lambda acc, bias: acc + bias, bias=bias)
        torch.testing.assert_close(out.float(), a.float() @ b.float() + bias.float(), atol=0.1, rtol=0.02)
    assert len(traces) == 1  # traced once: calls 2 and 3 were memo hits


def test_a_user_modules_attributes_are_part_of_the_key(traces: list[Any]) -> None:
    # Issue 28 #1: a config module read as `cfg.S` was keyed by identity, so `cfg.S = 3.0` kept the graph of 2.0.
    import types

    import warploom

    cfg = types.ModuleType("cfg")
    cfg.S = 2.0  # type: ignore[attr-defined]
    fn = lambda acc, residual: acc * cfg.S + residual  # noqa: E731
    assert "2.0" in graph(fn) and "2.0" in graph(fn) and len(traces) == 1  # an unchanged value still hits
    cfg.S = 3.0  # type: ignore[attr-defined]
    assert "3.0" in graph(fn) and len(traces) == 2
    cfg.sub = types.ModuleType("cfg.sub")  # type: ignore[attr-defined]
    cfg.sub.S = 5.0  # type: ignore[attr-defined]
    nested = lambda acc, residual: acc * cfg.sub.S + residual  # noqa: E731
    graph(nested)
    cfg.sub.S = 7.0  # type: ignore[attr-defined]
    assert "7.0" in graph(nested)
    cfg.sub.S = [1.0]  # type: ignore[attr-defined]  # not a value the key can hold: traced on every call
    assert memo.key(nested, ()) is None
    # End to end, through the eager call's own key (warploom/eager.py) and the simulator.
    a, b = torch.randn(48, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16)
    scaled = lambda acc: acc * cfg.S  # noqa: E731
    cfg.S = 2.0  # type: ignore[attr-defined]
    two = warploom.matmul(a, b, epilogue=scaled).float()
    cfg.S = 3.0  # type: ignore[attr-defined]
    three = warploom.matmul(a, b, epilogue=scaled).float()
    torch.testing.assert_close(three, two * 1.5, atol=0.5, rtol=0.02)
