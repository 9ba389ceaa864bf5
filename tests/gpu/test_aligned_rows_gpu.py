"""GPU tier: operands whose rows are padded to whole 128-byte lines (`warploom.aligned_rows`, or any view of wider
rows), which the planner now plans as whole lines (`GemmSpec.a_row_align`): the kernels read the padded rows by
their strides and give the product of the values, not of the padding.

Shapes are drawn at random (seeded), K never a multiple of 64 (bf16) or 128 (fp8), so that the contiguous rows
are not whole lines and the padding is real; the padding is filled with NaN first (a kernel that read it would
show it), and a NaN buffer of the output's size is freed just before each call.
"""

from __future__ import annotations

import random

import pytest
import torch

import warploom
from warploom.reference import relative_error as scale_free_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")


def _shapes(count: int, seed: int, k_step: int, line: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    out: list[tuple[int, int, int]] = []
    while len(out) < count:
        m, n, k = rng.randint(1, 3000), 16 * rng.randint(1, 400), k_step * rng.randint(1, 6000 // k_step)
        if k % line:
            out.append((m, n, k))
    return out


def _padded(t: torch.Tensor) -> torch.Tensor:
    """`warploom.aligned_rows(t)` with its padding poisoned: NaN (fp8: its NaN byte) past each row's end."""
    p = warploom.aligned_rows(t)
    store = p if p.stride(1) == 1 else p.t()  # (the rows as stored)
    pitch = max(store.stride(0), store.size(1))
    full = torch.as_strided(store, (store.size(0), pitch), (pitch, 1))
    full[:, store.size(1):] = float("nan")
    return p


@pytest.mark.parametrize(("m", "n", "k"), _shapes(10, seed=47, k_step=8, line=64))
@pytest.mark.parametrize("which", ["a", "b", "both"])
def test_bf16_aligned_rows(m: int, n: int, k: int, which: str) -> None:
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16)
    ap = _padded(a) if which in ("a", "both") else a
    bp = _padded(w).t() if which in ("b", "both") else w.t()
    spec = warploom.plan(ap, bp).spec
    assert spec.row_align("a") == (128 if which in ("a", "both") else spec.contiguous_row_align("a"))
    assert spec.row_align("b") == (128 if which in ("b", "both") else spec.contiguous_row_align("b"))
    torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)  # poison what the output may reuse
    out = warploom.matmul(ap, bp)
    torch.testing.assert_close(out.float(), a.float() @ w.float().t(), rtol=2e-2, atol=2e-2 * k**0.5 / 8)


@pytest.mark.parametrize(("m", "n", "k"), _shapes(8, seed=48, k_step=16, line=128))
@pytest.mark.parametrize("fast", [True, False])
def test_fp8_rowwise_aligned_rows(m: int, n: int, k: int, fast: bool) -> None:
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    ap, bp = _padded(a), _padded(w).t()
    assert warploom.plan(ap, bp, sa, sb, use_fast_accum=fast).spec.row_align("a") == 128
    torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = warploom.scaled_mm(ap, bp, sa, sb, use_fast_accum=fast)
    assert not out.isnan().any()
    assert scale_free_error(out, (a.float() @ w.float().t()) * sa * sb) < 1e-5


def test_rows_already_on_lines_are_kept_and_an_offset_view_is_not() -> None:
    w = torch.randn(96, 1408, device="cuda", dtype=torch.bfloat16)  # (a fresh allocation starts on a line)
    assert warploom.aligned_rows(w) is w
    view = torch.randn(64 * 1352 + 8, device="cuda", dtype=torch.bfloat16)[8:].view(64, 1352)  # 16 bytes on
    spec = warploom.plan(warploom.aligned_rows(view), w[:, :1352].t()).spec
    assert (spec.row_align("a"), spec.row_align("b")) == (128, 128)
    assert warploom.plan(torch.randn(64 * 1408 + 8, device="cuda", dtype=torch.bfloat16)[8:8 + 64 * 1408]
                         .view(64, 1408), w.t()).spec.row_align("a") == 16


def test_the_tuner_times_copies_at_the_callers_rows() -> None:
    from warploom.tune.gpu import _random_like

    view = torch.randn(64 * 1408 + 8, device="cuda", dtype=torch.bfloat16)[8:8 + 64 * 1408].view(64, 1408)
    copy = _random_like(view)
    assert copy.data_ptr() % 128 == view.data_ptr() % 128 == 16 and copy.stride() == view.stride()
