"""checks.*_spec_cached: eager calls skip re-checking tensors whose metadata passed before, and only those."""

from __future__ import annotations

import pytest
import torch

from warploom import checks
from warploom.errors import AlignmentError, ScaleError, ShapeError


def fp8(m: int, n: int) -> torch.Tensor:
    return torch.randn(m, n).to(torch.float8_e4m3fn)


def test_a_passing_check_is_remembered_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    first = checks.matmul_spec_cached(a, b)
    assert first == checks.matmul_spec(a, b)
    monkeypatch.setattr(checks, "matmul_spec", lambda *_: pytest.fail("checked again"))
    # Other tensors with the same metadata reuse it (the data is not part of a spec).
    assert checks.matmul_spec_cached(torch.randn_like(a), torch.randn_like(b)) is first


def test_anything_the_checks_read_changes_the_key() -> None:
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    checks.matmul_spec_cached(a, b)
    # The same shapes, but a base address off the 16-byte TMA rule: rejected, not served from the cache.
    storage = torch.randn(64 * 128 + 1, dtype=torch.bfloat16)
    with pytest.raises(AlignmentError, match="base address"):
        checks.matmul_spec_cached(storage[1:].view(64, 128), b)
    with pytest.raises(ShapeError):
        checks.matmul_spec_cached(a, torch.randn(64, 32, dtype=torch.bfloat16))
    assert checks.matmul_spec_cached(a, b, torch.float32).out_dtype.value == "fp32"


def test_scaled_mm_key_covers_scales_and_bias() -> None:
    a, b = fp8(64, 128), fp8(32, 128).t()
    sa, sb = torch.rand(64, 1), torch.rand(1, 32)
    rowwise = checks.scaled_mm_spec_cached(a, b, sa, sb)
    assert rowwise.scale.value == "rowwise"
    tensorwise = checks.scaled_mm_spec_cached(a, b, torch.rand(()), torch.rand(()))
    assert tensorwise.scale.value == "tensorwise"
    with pytest.raises(ScaleError, match="torch.float32"):
        checks.scaled_mm_spec_cached(a, b, sa.double(), sb)
    biased = checks.scaled_mm_spec_cached(a, b, sa, sb, torch.randn(32, dtype=torch.bfloat16))
    assert biased.bias_dtype is not None and rowwise.bias_dtype is None
    assert checks.scaled_mm_spec_cached(a, b, sa, sb, use_fast_accum=True).accumulation.value == "native"


def test_meta_tensors_are_checked_every_time_and_never_remembered() -> None:
    a = torch.empty(64, 128, dtype=torch.bfloat16, device="meta")
    b = torch.empty(128, 32, dtype=torch.bfloat16, device="meta")
    before = dict(checks._SPECS)
    assert checks.matmul_spec_cached(a, b) == checks.matmul_spec(a, b)
    assert checks._SPECS == before


def test_a_negated_view_is_refused_even_after_its_storage_passed() -> None:
    """torch._neg_view keeps the storage and sets a bit; kernels read the storage, so the result would be silently
    negated. The bit is part of the key: a remembered spec for the plain tensor does not serve its negated view."""
    import warploom
    from warploom.errors import InputError

    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    checks.matmul_spec_cached(a, b)
    neg = torch._neg_view(a)
    assert neg.is_neg() and neg.data_ptr() == a.data_ptr()
    with pytest.raises(InputError, match=r"resolve_neg") as e:
        checks.matmul_spec_cached(neg, b)
    assert e.value.arg == "a"
    checks.matmul_spec_cached(neg.resolve_neg(), b)  # the fix the message names
    fa, fb = fp8(64, 128), fp8(32, 128).t()
    sa, sb = torch.rand(64, 1), torch.rand(1, 32)
    checks.scaled_mm_spec_cached(fa, fb, sa, sb)
    with pytest.raises(InputError, match=r"scale_b\.resolve_neg"):
        checks.scaled_mm_spec_cached(fa, fb, sa, torch._neg_view(sb))
    # Epilogue operands too (classified before any kernel is planned).
    res = torch.randn(64, 32, dtype=torch.bfloat16)
    with pytest.raises(InputError, match=r"residual\.resolve_neg"):
        warploom.plan(a, b, epilogue=lambda acc, residual: acc + residual, residual=torch._neg_view(res))
