"""A hung kernel stops a benchmark run with a clear error instead of blocking it (`runtime.timing.finish_within`):
checked with a fake CUDA event, since no GPU is at hand here."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from warploom.errors import InternalError, KernelHangError
from warploom.runtime import timing


class _Event:
    """A CUDA event that completes after `polls` queries (never, for None)."""

    polls: int | None = 0

    def __init__(self) -> None:
        self.queries = 0

    def record(self) -> None:
        pass

    def query(self) -> bool:
        self.queries += 1
        return _Event.polls is not None and self.queries > _Event.polls


@pytest.fixture
def fake_event(monkeypatch: pytest.MonkeyPatch) -> type[_Event]:
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    return _Event


def test_a_kernel_that_finishes_passes(fake_event: Any) -> None:
    fake_event.polls = 3
    timing.finish_within("bf16 128x128x64", seconds=5.0)


def test_a_kernel_that_never_finishes_raises_naming_it(fake_event: Any) -> None:
    fake_event.polls = None
    with pytest.raises(KernelHangError, match=r"bf16 122x88x120 128x128x64_s6_w8_g8_p2_sk8g8: .*0\.05 s.*simulate"):
        timing.finish_within("bf16 122x88x120 128x128x64_s6_w8_g8_p2_sk8g8", seconds=0.05)
    assert issubclass(KernelHangError, InternalError)


def test_time_interleaved_times_every_run_once_a_round_in_turn() -> None:
    """Rounds interleave the runs (drift within a process hits all alike), and each run's times come back in round
    order, so callers take ratios round by round; the timing window reaches the timer."""
    from warploom.runtime.timing import time_interleaved

    order: list[tuple[str, dict[str, int]]] = []
    clock = iter(range(1, 100))

    def timer(fn: Any, **window: int) -> float:
        order.append((fn(), window))
        return float(next(clock))

    times = time_interleaved({"torch": lambda: "torch", "a": lambda: "a", "b": lambda: "b"}, 3, timer=timer,
                             warmup_ms=25, rep_ms=150)
    assert [name for name, _ in order] == ["torch", "a", "b"] * 3
    assert all(w == {"warmup_ms": 25, "rep_ms": 150} for _, w in order)
    assert times == {"torch": [1.0, 4.0, 7.0], "a": [2.0, 5.0, 8.0], "b": [3.0, 6.0, 9.0]}
    assert time_interleaved({"a": lambda: "a"}, 0, timer=timer) == {"a": []}
