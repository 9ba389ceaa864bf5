"""GPU tier: the autotuner on the H100: a bf16 and an fp8 rowwise tune, each checked against an fp32 reference,
then tuned again to show the cache answers without timing anything. Three candidates each keep it short (each
candidate costs a JIT compile and ~0.2 s of timing)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from warploom.tune import cache as cache_mod
from warploom.tune import settings
from warploom.tune.gpu import time_graph, tune_matmul, tune_scaled_mm

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(120, method="thread")]  # a hung kernel fails the test instead of the run

LIMIT = 3


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(settings.CACHE_DIR_ENV, str(tmp_path))
    for env in (settings.AUTOTUNE_ENV, settings.CLEAR_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(cache_mod, "_cleared", set())
    return tmp_path


class CountingTimer:
    """`time_graph`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, call: Callable[[], object]) -> float:
        self.calls += 1
        return time_graph(call)


def _scale_free_error(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def _entries(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "autotune").glob("*.json"))


def test_tune_bf16_then_hit_the_cache(cache_dir: Path) -> None:
    torch.manual_seed(0)
    m = n = k = 1024
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    timer = CountingTimer()
    kernel = tune_matmul(a, b, limit=LIMIT, timer=timer, progress=False, verbose=True)
    assert 1 <= timer.calls <= LIMIT
    assert len(_entries(cache_dir)) == 1
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel.run(a, b, out)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)

    again = CountingTimer()
    hit = tune_matmul(a, b, limit=LIMIT, timer=again, progress=False, verbose=True)
    assert again.calls == 0 and hit.plan == kernel.plan


def test_tune_fp8_rowwise_then_hit_the_cache(cache_dir: Path) -> None:
    torch.manual_seed(1)
    m, n, k = 1024, 2048, 1024
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    timer = CountingTimer()
    kernel = tune_scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False, limit=LIMIT, timer=timer,
                            progress=False, verbose=True)
    assert 1 <= timer.calls <= LIMIT
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel.run(a, b, out, sa, sb)
    ref = (a.float() @ b.float()) * sa * sb
    assert not out.isnan().any()
    assert _scale_free_error(out, ref) < 1e-4

    again = CountingTimer()
    hit = tune_scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False, limit=LIMIT, timer=again,
                         progress=False)
    assert again.calls == 0 and hit.plan == kernel.plan
    assert len(_entries(cache_dir)) == 1


@pytest.mark.parametrize("mx", [False, True])
def test_tune_blockwise(cache_dir: Path, mx: bool) -> None:
    """Blockwise and MX candidates are checked against the dequantized product (not a rowwise one)."""
    from warploom.reference import dequantized

    torch.manual_seed(2)
    m, n, k = 1024, 2048, 1024
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    if mx:
        sa = torch.randint(120, 135, (m, k // 32), device="cuda", dtype=torch.uint8).view(torch.float8_e8m0fnu)
        sb = torch.randint(120, 135, (n, k // 32), device="cuda", dtype=torch.uint8).view(torch.float8_e8m0fnu)
    else:
        sa = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
        sb = torch.rand(k // 128, n // 128, device="cuda") + 0.5
    kernel = tune_scaled_mm(a, b, sa, sb, limit=LIMIT, timer=CountingTimer(), progress=False)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel.run(a, b, out, sa, sb)
    da, db = dequantized(a, b, sa, sb)
    assert not out.isnan().any()
    assert _scale_free_error(out, da @ db) < 1e-4


@pytest.mark.parametrize("fp8", [False, True])
def test_tune_decode_times_swapped_and_unswapped_tiles(cache_dir: Path, fp8: bool) -> None:
    """A decode GEMM's candidates mix rule 18's swapped tiles and unswapped ones (tune/candidates.py): every one
    must compute the right product (a disqualified candidate is never timed), and the winner runs correctly."""
    from warploom import checks
    from warploom.device import DeviceInfo
    from warploom.tune.candidates import candidates

    torch.manual_seed(3)
    m, n, k = 13, 4096, 1024
    a = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda")
    timer = CountingTimer()
    if fp8:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        spec = checks.scaled_mm_spec(a, w.t(), sa, sb, bias, torch.bfloat16, True)
        kernel = tune_scaled_mm(a, w.t(), sa, sb, bias=bias, use_fast_accum=True, limit=5, timer=timer,
                                progress=False)
        ref = (a.float() @ w.float().t()) * sa * sb + bias.float()
        args: tuple[object, ...] = (sa, sb, bias)
    else:
        a, w = a.to(torch.bfloat16), w.to(torch.bfloat16)
        spec = checks.matmul_spec(a, w.t(), None)
        kernel = tune_matmul(a, w.t(), limit=5, timer=timer, progress=False)
        ref = a.float() @ w.float().t()
        args = ()
    tried = candidates(spec, DeviceInfo.current(), limit=5)
    assert {c.plan.swap_ab for c in tried} == {False, True}
    assert timer.calls == len(tried)  # all correct, all timed
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel.run(a, w.t(), out, *args)
    assert not out.isnan().any() and _scale_free_error(out, ref) < 1e-4
