"""Epilogue operand classification at every boundary: shape and strides, expand vs real, degenerate M or N.

Every case runs on CPU tensors and again on meta tensors (and one on fake tensors): classification reads only
shapes, strides, dtypes and devices.
"""

from __future__ import annotations

import pytest
import torch

from warploom.dtypes import DType
from warploom.epilogue.classify import classify, classify_all
from warploom.epilogue.operands import OperandKind, OperandSpec
from warploom.errors import AlignmentError, DeviceError, DTypeError, InputError, ShapeError

DENSE, COLUMN, ROW, SCALAR = OperandKind.DENSE, OperandKind.COLUMN, OperandKind.ROW, OperandKind.SCALAR
M, N = 6, 10


def make(kind: str, device: str) -> torch.Tensor:
    """Named operand layouts for a (M, N) = (6, 10) output."""
    f = {"device": device}
    return {
        "dense": lambda: torch.empty(M, N, **f),
        "dense_padded_rows": lambda: torch.empty(M, N + 6, **f)[:, :N],  # row stride 16 >= N
        "column": lambda: torch.empty(M, 1, **f),
        "column_expanded": lambda: torch.empty(M, 1, **f).expand(M, N),  # strides (1, 0)
        "column_strided": lambda: torch.empty(M, 3, **f)[:, 1:2],  # (M, 1) with row stride 3
        "row_1d": lambda: torch.empty(N, **f),
        "row_2d": lambda: torch.empty(1, N, **f),
        "row_expanded": lambda: torch.empty(N, **f).expand(M, N),  # strides (0, 1)
        "row_strided": lambda: torch.empty(2 * N, **f)[::2],  # (N,) with stride 2
        "scalar_0d": lambda: torch.empty((), **f),
        "scalar_1": lambda: torch.empty(1, **f),
        "scalar_11": lambda: torch.empty(1, 1, **f),
        "scalar_expanded": lambda: torch.empty((), **f).expand(M, N),  # strides (0, 0)
    }[kind]()


CASES = [
    ("dense", DENSE, (N, 1)),
    ("dense_padded_rows", DENSE, (N + 6, 1)),
    ("column", COLUMN, (1, 0)),
    ("column_expanded", COLUMN, (1, 0)),
    ("column_strided", COLUMN, (3, 0)),
    ("row_1d", ROW, (0, 1)),
    ("row_2d", ROW, (0, 1)),
    ("row_expanded", ROW, (0, 1)),
    ("row_strided", ROW, (0, 2)),
    ("scalar_0d", SCALAR, (0, 0)),
    ("scalar_1", SCALAR, (0, 0)),
    ("scalar_11", SCALAR, (0, 0)),
    ("scalar_expanded", SCALAR, (0, 0)),
]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("layout,kind,mn", CASES, ids=[c[0] for c in CASES])
def test_kind_and_addressing(layout: str, kind: OperandKind, mn: tuple[int, int], device: str) -> None:
    t = make(layout, device)
    s = classify("x", t, (M, N))
    assert s.kind is kind
    assert s.mn_strides() == mn
    assert s.shape == tuple(t.shape) and s.strides == tuple(t.stride()) and s.dtype is DType.FP32


@pytest.mark.parametrize("layout", [c[0] for c in CASES])
def test_mn_strides_address_the_broadcast_value(layout: str) -> None:
    """Element (m, n) of what torch broadcasts to (M, N) sits at m * rs + n * cs from the data pointer."""
    t = make(layout, "cpu")
    storage = torch.as_strided(t, (t.untyped_storage().nbytes() // 4,), (1,), 0)
    storage.copy_(torch.randn(storage.shape))  # distinct values everywhere, so a wrong address shows
    s = classify("x", t, (M, N))
    want = torch.broadcast_to(t, (M, N))
    got = torch.as_strided(t, (M, N), s.mn_strides(), t.storage_offset())
    assert torch.equal(got, want)


def test_expand_is_told_from_a_real_tensor_by_strides() -> None:
    v = torch.randn(M, 1)
    assert classify("x", v.expand(M, N), (M, N)).kind is COLUMN
    assert classify("x", v.expand(M, N).contiguous(), (M, N)).kind is DENSE
    b = torch.randn(N)
    assert classify("x", b.expand(M, N), (M, N)).kind is ROW
    assert classify("x", b.expand(M, N).contiguous(), (M, N)).kind is DENSE


def test_trailing_stride_boundary() -> None:
    """(M, N) with trailing stride 1 is dense, 0 is a per-row column, anything else needs .contiguous()."""
    base = torch.empty(M * N * 2)
    assert classify("x", base.as_strided((M, N), (N, 1)), (M, N)).kind is DENSE
    assert classify("x", base.as_strided((M, N), (N, 0)), (M, N)).kind is COLUMN
    with pytest.raises(AlignmentError, match=r"x: .*row-major.*strides \(10, 2\).*Fix: pass x\.contiguous\(\)"):
        classify("x", base.as_strided((M, N), (N, 2)), (M, N))


def test_column_major_dense_is_refused_with_contiguous_fix() -> None:
    t = torch.empty(N, M).t()  # (M, N) with strides (1, M)
    with pytest.raises(AlignmentError) as ei:
        classify("residual", t, (M, N))
    msg = str(ei.value)
    assert msg.startswith("residual: ") and "strides (1, 6)" in msg and "residual.contiguous()" in msg


def test_overlapping_rows_are_refused() -> None:
    t = torch.empty(M * N).as_strided((M, N), (3, 1))  # rows overlap: row stride 3 < N
    with pytest.raises(AlignmentError, match="row stride >= 10"):
        classify("x", t, (M, N))


@pytest.mark.parametrize("shape,fix", [
    ((N, M), r"x looks transposed: pass x\.t\(\)\.contiguous\(\)"),
    ((M,), r"one value per output row: pass x\[:, None\]"),
    ((N, 1), r"one value per output column: pass x\.reshape\(1, 10\)"),
    ((1, M), r"one value per output row: pass x\.reshape\(6, 1\)"),
    ((2 * M, N), r"slice or reshape x"),
    ((M, 2 * N), r"slice or reshape x"),
    ((2, M, N), r"reshape x to 2-D"),
    ((1, 1, N), r"reshape x to 2-D"),
])
def test_wrong_shape_names_operand_expected_got_and_fix(shape: tuple[int, ...], fix: str) -> None:
    t = torch.empty(shape, device="meta")
    with pytest.raises(ShapeError, match=fix) as ei:
        classify("x", t, (M, N))
    msg = str(ei.value)
    assert msg.startswith("x: expected an epilogue operand that broadcasts to the (6, 10) output")
    assert f"got shape {shape} with strides {tuple(t.stride())}" in msg
    assert ei.value.arg == "x"


def test_square_output_reads_1d_as_row_like_torch() -> None:
    # With M == N a 1-D operand broadcasts along n, as torch does: a per-column (ROW) vector.
    assert classify("x", torch.empty(7), (7, 7)).kind is ROW
    assert classify("x", torch.empty(7, 1), (7, 7)).kind is COLUMN


@pytest.mark.parametrize("shape,strides,kind", [
    ((1, N), (N, 1), ROW),  # M == 1: dense and row at once; ROW is cheaper and exact
    ((N,), (1,), ROW),
    ((1, 1), (1, 1), SCALAR),
    ((1, N), (0, 1), ROW),
])
def test_single_row_output(shape: tuple[int, ...], strides: tuple[int, ...], kind: OperandKind) -> None:
    t = torch.empty(64).as_strided(shape, strides)
    s = classify("x", t, (1, N))
    assert s.kind is kind and s.mn_strides()[0] == 0


@pytest.mark.parametrize("shape,strides,kind", [
    ((M, 1), (1, 1), COLUMN),  # N == 1: dense and column at once; COLUMN
    ((M, 1), (5, 1), COLUMN),
    ((1,), (1,), SCALAR),
    ((), (), SCALAR),
])
def test_single_column_output(shape: tuple[int, ...], strides: tuple[int, ...], kind: OperandKind) -> None:
    t = torch.empty(64).as_strided(shape, strides)
    s = classify("x", t, (M, 1))
    assert s.kind is kind and s.mn_strides()[1] == 0


def test_single_element_output_everything_is_scalar() -> None:
    for shape in [(), (1,), (1, 1)]:
        assert classify("x", torch.empty(shape), (1, 1)).kind is SCALAR
    with pytest.raises(ShapeError):
        classify("x", torch.empty(2), (1, 1))


def test_size_one_dimension_stride_is_ignored() -> None:
    # torch gives size-1 dimensions arbitrary strides; they must not matter.
    for st in [(1, 1), (7, 1), (0, 1), (123, 1)]:
        s = classify("x", torch.empty(200).as_strided((1, N), st), (M, N))
        assert s.kind is ROW and s.mn_strides() == (0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_operand_dtypes(dtype: torch.dtype) -> None:
    assert classify("x", torch.empty(N, dtype=dtype), (M, N)).dtype is DType.from_torch(dtype)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float64, torch.int32, torch.bool])
def test_bad_dtype(dtype: torch.dtype) -> None:
    with pytest.raises(DTypeError, match=r"^x: expected .*float32.*Fix: pass x\.float\(\)"):
        classify("x", torch.empty(N, dtype=dtype, device="meta"), (M, N))


def test_device_must_match() -> None:
    with pytest.raises(DeviceError, match=r"^bias: expected an epilogue operand on cuda:0.*got a tensor on meta"):
        classify("bias", torch.empty(N, device="meta"), (M, N), device=torch.device("cuda", 0))
    assert classify("bias", torch.empty(N, device="meta"), (M, N), device=torch.device("meta")).kind is ROW


def test_fake_tensors() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        s = classify_all({"bias": torch.empty(N), "res": torch.empty(M, N), "sa": torch.empty(M, 1).expand(M, N)},
                         (M, N))
    assert [x.kind for x in s] == [ROW, DENSE, COLUMN]
    assert [x.name for x in s] == ["bias", "res", "sa"]


@pytest.mark.parametrize("name", ["acc", "1x", "class", "a-b", ""])
def test_bad_names(name: str) -> None:
    with pytest.raises(InputError, match="Python identifier other than 'acc'"):
        classify(name, torch.empty(N), (M, N))


def test_spec_checks_itself() -> None:
    with pytest.raises(ValueError, match="unit inner stride"):
        OperandSpec("x", DENSE, DType.FP32, (M, N), (1, M))
    with pytest.raises(ValueError, match="same length"):
        OperandSpec("x", ROW, DType.FP32, (N,), (1, 1))
    with pytest.raises(ValueError, match="dtype"):
        OperandSpec("x", ROW, DType.E4M3, (N,), (1,))


def test_kind_join_is_broadcasting() -> None:
    assert ROW.join(COLUMN) is DENSE and SCALAR.join(ROW) is ROW and COLUMN.join(COLUMN) is COLUMN
    assert all(k.join(DENSE) is DENSE and k.join(SCALAR) is k for k in OperandKind)


@pytest.mark.parametrize("make,kind", [
    (lambda: torch.randn(40), OperandKind.COLUMN),  # (N,) row of C: a column of C^T
    (lambda: torch.randn(1, 40), OperandKind.COLUMN),
    (lambda: torch.randn(40, 1).t(), OperandKind.COLUMN),  # a (1, N) view with a non-unit stride
    (lambda: torch.randn(6, 1), OperandKind.ROW),  # (M, 1) column of C: a row of C^T
    (lambda: torch.randn(6, 1).expand(6, 40), OperandKind.ROW),
    (lambda: torch.tensor(2.0), OperandKind.SCALAR),
])
def test_transposed_operands_read_the_same_elements(make: object, kind: OperandKind) -> None:
    """Planner rule 18 reads an epilogue operand of C as one of C^T: element (n, m) of the transposed spec, at its
    mn_strides, is element (m, n) of the original, in the same storage."""
    t = make()  # type: ignore[operator]
    spec = classify("x", t, (6, 40))
    tr = spec.transposed()
    assert tr.kind is kind and tr.transposed().kind is spec.kind
    (rs, cs), (trs, tcs) = spec.mn_strides(), tr.mn_strides()
    assert (trs, tcs) == (cs, rs)
    for mm, nn in ((0, 0), (5, 39), (3, 17)):
        assert mm * rs + nn * cs == nn * trs + mm * tcs


def test_a_dense_operand_cannot_be_transposed() -> None:
    spec = classify("r", torch.randn(6, 40), (6, 40))
    assert spec.kind is OperandKind.DENSE
    with pytest.raises(ValueError, match="unit inner stride"):
        spec.transposed()


def test_a_python_number_operand_gets_a_clear_error() -> None:
    """Review finding (session 19): a Python number as an operand raised AttributeError inside classify."""
    with pytest.raises(InputError, match=r"s: expected an epilogue operand that is a torch.Tensor.*torch.tensor"):
        classify("s", 0.5, (6, 40))
