"""Where operands' rows start (`GemmSpec.a_row_align`, `checks.row_align`) and `warploom.aligned_rows`: the checks
read a view's row stride (and a GPU tensor's address) instead of assuming contiguous rows of K, the spec keeps one
spelling per problem, and the planner prices rows padded to whole 128-byte lines as whole lines."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import H200
from warploom.errors import AlignmentError, ArgumentTypeError, InputError, ShapeError
from warploom.planner import plan_schedule
from warploom.planning.sm90.fitted import sector_aligned
from warploom.planning.sm90.tiles import rows_aligned
from warploom.spec import GemmSpec, ScaleRecipe, align_of

BF16 = torch.bfloat16


def _bf16_spec(a: torch.Tensor, b: torch.Tensor) -> GemmSpec:
    return checks.matmul_spec(a, b, None)


def test_contiguous_rows_keep_the_spec_a_hand_would_write() -> None:
    for k in (4096, 1352, 4104):  # whole lines, 16 bytes past one, 16 past
        spec = _bf16_spec(torch.randn(64, k, dtype=BF16), torch.randn(96, k, dtype=BF16).t())
        assert spec == GemmSpec(64, 96, k) and spec.a_row_align == spec.b_row_align == 0
        assert spec.row_align("a") == spec.row_align("b") == align_of(2 * k)
    assert rows_aligned(GemmSpec(64, 96, 4096)) and not rows_aligned(GemmSpec(64, 96, 1352))
    assert sector_aligned(GemmSpec(64, 96, 1360)) and not sector_aligned(GemmSpec(64, 96, 1352))


def test_padded_rows_are_whole_lines_and_offset_strides_are_not() -> None:
    k = 1352  # rows of 2704 bytes: 16 past a line
    a = warploom.aligned_rows(torch.randn(64, k, dtype=BF16))
    w = warploom.aligned_rows(torch.randn(96, k, dtype=BF16))
    assert a.stride() == (1408, 1) and w.t().stride() == (1, 1408)
    spec = _bf16_spec(a, w.t())
    assert (spec.a_row_align, spec.b_row_align) == (128, 128) and rows_aligned(spec) and sector_aligned(spec)
    assert spec.short().endswith("a_rows=128B b_rows=128B")
    # Rows of whole lines as K goes (4096) but a wider stride 16 bytes past a line (4104): not whole lines.
    view = torch.randn(64, 4104, dtype=BF16)[:, :4096]
    spec = _bf16_spec(view, torch.randn(96, 4096, dtype=BF16).t())
    assert spec.row_align("a") == 16 and spec.row_align("b") == 128 and not rows_aligned(spec)
    # One row: its stride says nothing (only a GPU tensor's address would).
    one = torch.randn(4104, dtype=BF16)[:1352].view(1, 1352)
    assert _bf16_spec(one, w.t()).a_row_align == 128


def test_fp8_padded_rows() -> None:
    a = warploom.aligned_rows(torch.randn(64, 1360).to(torch.float8_e4m3fn))
    w = warploom.aligned_rows(torch.randn(96, 1360).to(torch.float8_e4m3fn))
    spec = checks.scaled_mm_spec(a, w.t(), torch.rand(64, 1), torch.rand(1, 96), None, BF16, True)
    assert spec.scale is ScaleRecipe.ROWWISE and (spec.row_align("a"), spec.row_align("b")) == (128, 128)
    contiguous = checks.scaled_mm_spec(torch.randn(64, 1360).to(torch.float8_e4m3fn),
                                       torch.randn(96, 1360).to(torch.float8_e4m3fn).t(), torch.rand(64, 1),
                                       torch.rand(1, 96), None, BF16, True)
    assert contiguous.row_align("a") == 16 and contiguous.a_row_align == 0  # (1360 bytes: 80 past a line)


def test_the_planner_prices_padded_rows_as_whole_lines() -> None:
    m, n, k = 265, 10920, 14120  # contiguous: 192-row fitted tiles; padded: 128x256 (measured, session 47)
    given = GemmSpec(m, n, k)
    padded = GemmSpec(m, n, k, a_row_align=128, b_row_align=128)
    assert (plan_schedule(given, H200).bm, plan_schedule(padded, H200).bm) == (192, 128)


def test_a_spec_has_one_spelling_and_swaps_its_rows() -> None:
    assert GemmSpec(64, 96, 4096, a_row_align=128) == GemmSpec(64, 96, 4096)  # (contiguous rows of 8192 bytes)
    assert hash(GemmSpec(64, 96, 4096, b_row_align=128)) == hash(GemmSpec(64, 96, 4096))
    spec = GemmSpec(64, 96, 1352, a_row_align=128, b_row_align=32)
    swapped = spec.swapped()
    assert (swapped.m, swapped.n, swapped.row_align("a"), swapped.row_align("b")) == (96, 64, 32, 128)


@pytest.mark.parametrize("value", [8, 100, 256, -16])
def test_a_row_align_that_is_not_a_line_divisor_is_refused(value: int) -> None:
    with pytest.raises(InputError, match="a_row_align"):
        GemmSpec(64, 96, 1352, a_row_align=value)


@pytest.mark.parametrize("value", [128.0, True, "128"])
def test_a_row_align_that_is_not_an_int_is_refused(value: object) -> None:
    with pytest.raises(ArgumentTypeError, match="b_row_align"):
        GemmSpec(64, 96, 1352, b_row_align=value)  # type: ignore[arg-type]


def test_aligned_rows_keeps_values_and_layout() -> None:
    w = torch.randn(96, 1352, dtype=BF16)
    for t in (w, w.t()):
        p = warploom.aligned_rows(t)
        assert p.shape == t.shape and p.dtype == t.dtype and torch.equal(p, t)
        assert (p.stride(1) == 1) == (t.stride(1) == 1) and max(p.stride()) * 2 % 128 == 0
    # Rows already whole lines, at a line's address: the tensor itself.
    flat = torch.empty(96 * 64 + 64, dtype=BF16)
    at = (-flat.data_ptr() % 128) // 2
    lined = flat[at:at + 96 * 64].view(96, 64)
    assert warploom.aligned_rows(lined) is lined


def test_aligned_rows_keeps_a_single_row_or_column() -> None:
    col = torch.randn(1352, 1, dtype=BF16)  # (a size-1 dimension has any stride: the long side is the row)
    assert warploom.aligned_rows(col) is col and warploom.aligned_rows(col.t()) is not None


def test_aligned_rows_refuses_what_is_not_a_matrix() -> None:
    with pytest.raises(ArgumentTypeError, match="^t: "):
        warploom.aligned_rows([[1.0]])
    with pytest.raises(ArgumentTypeError, match="^t: .*to_dense"):
        warploom.aligned_rows(torch.randn(4, 4).to_sparse())
    with pytest.raises(ShapeError, match="^t: .*2-D"):
        warploom.aligned_rows(torch.randn(8))
    with pytest.raises(AlignmentError, match="^t: .*unit stride"):
        warploom.aligned_rows(torch.randn(8, 8)[::2, ::2])


def test_explain_says_where_rows_start_and_the_fix() -> None:
    from warploom.device import B200
    from warploom.planner import explain

    text = explain(GemmSpec(656, 8048, 5280, b_row_align=128), H200).text()
    assert "rows: A's on 64-byte boundaries, not whole 128-byte L2 lines" in text and "aligned_rows" in text
    assert "rows:" not in explain(GemmSpec(656, 8048, 5280, a_row_align=128, b_row_align=128), H200).text()
    assert "rows:" not in explain(GemmSpec(656, 8048, 5280), B200).text()  # (measured on sm_90a only)


def test_the_tuner_times_copies_with_the_callers_strides() -> None:
    from warploom.tune.gpu import _strided_like

    wide = torch.randn(64, 1408, dtype=BF16)[:, :1352]  # rows padded to whole lines
    values = torch.randn(64, 1352).to(BF16)
    copy = _strided_like(wide, values)
    assert copy.stride() == wide.stride() and torch.equal(copy, values)
    assert checks.row_align(copy, 0) == checks.row_align(wide, 0) == 128
    empty = torch.empty(0, 8, dtype=BF16)
    assert _strided_like(empty, empty).shape == (0, 8)
