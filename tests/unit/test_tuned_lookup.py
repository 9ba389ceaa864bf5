"""Ordinary calls run the plan `warploom.tune` cached (tune/lookup.py), without a GPU: a cache entry is written
the way a tune writes one, and `warploom.plan` / `warploom.matmul` on CPU tensors (the simulator) must use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import H100_SXM
from warploom.planner import plan_schedule
from warploom.tune.cache import Cache, Entry
from warploom.tune.key import CacheKey
from warploom.tune.lookup import forget
from warploom.tune.result import Trial


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("WARPLOOM_AUTOTUNE", raising=False)
    forget()
    yield tmp_path
    forget()


def _store(a: torch.Tensor, b: torch.Tensor, **forced: int) -> None:
    spec = checks.matmul_spec(a, b)
    key = CacheKey(spec, H100_SXM, (tuple(a.stride()), tuple(b.stride())))
    default, tuned = plan_schedule(spec, H100_SXM), plan_schedule(spec, H100_SXM, **forced)
    trials = (Trial(default, ms=1.0), Trial(tuned, ms=0.9))  # the winner was timed correct, as a tune records
    assert Cache().store(key, Entry(key.text(), tuned, trials)) is not None
    forget()  # as autotune does after storing


def test_a_tuned_plan_is_used_by_plan_and_matmul(cache_dir: Path) -> None:
    a = torch.randn(200, 256).bfloat16()
    b = torch.randn(320, 256).bfloat16().t()
    default = warploom.plan(a, b).plan
    assert (default.bm, default.bn) != (64, 128)
    _store(a, b, bm=64, bn=128)
    tuned = warploom.plan(a, b).plan
    assert (tuned.bm, tuned.bn) == (64, 128)
    torch.testing.assert_close(warploom.matmul(a, b).float(), a.float() @ b.float(), atol=0.05, rtol=1e-2)
    # Another layout of the same shapes is another problem: the entry's strides do not match it.
    assert warploom.plan(a, b.contiguous()).plan == warploom.plan(a.contiguous(), b.contiguous()).plan


def test_clearing_the_cache_or_turning_tuning_off_restores_the_planner(cache_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.randn(200, 256).bfloat16()
    b = torch.randn(320, 256).bfloat16().t()
    default = warploom.plan(a, b).plan
    _store(a, b, bm=64, bn=128)
    assert warploom.plan(a, b).plan != default
    monkeypatch.setenv("WARPLOOM_AUTOTUNE", "0")
    forget()
    assert warploom.plan(a, b).plan == default
    monkeypatch.delenv("WARPLOOM_AUTOTUNE")
    forget()
    assert warploom.plan(a, b).plan != default
    assert Cache().clear() == 1
    assert warploom.plan(a, b).plan == default


def test_a_corrupt_entry_is_ignored_with_a_warning(cache_dir: Path) -> None:
    from warploom.tune import StaleCacheWarning

    a = torch.randn(200, 256).bfloat16()
    b = torch.randn(320, 256).bfloat16().t()
    default = warploom.plan(a, b).plan
    _store(a, b, bm=64, bn=128)
    (entry,) = [p for p in Path(cache_dir).rglob("*.json")]
    entry.write_text(entry.read_text().replace('"bn": 128', '"bn": 256'))  # the checksum no longer matches
    forget()
    with pytest.warns(StaleCacheWarning):
        assert warploom.plan(a, b).plan == default
