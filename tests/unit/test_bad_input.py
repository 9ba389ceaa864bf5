"""Bad inputs to warploom.matmul / warploom.scaled_mm / warploom.plan, on CPU and meta tensors.

Each must raise the warploom error class for the mistake (a ValueError or TypeError subclass) whose message
starts with the argument's name and contains "Fix:". Zero-sized problems need no kernel and return what
torch returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import warploom
import warploom.api  # registers torch.ops.warploom.*, whichever of torch and warploom a session imported first
from warploom import AlignmentError, DeviceError, DTypeError, InputError, ScaleError, ShapeError
from warploom.errors import TargetError

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def t(*shape: int, dtype: torch.dtype = BF16, device: str = "cpu") -> torch.Tensor:
    if device == "meta" or dtype.is_floating_point and dtype.itemsize == 1:
        x = torch.empty(shape, dtype=FP32, device=device)
        if device != "meta":
            x.uniform_(-2, 2)
        return x.to(dtype)
    return torch.randn(shape, device=device).to(dtype)


def col_major(k: int, n: int, dtype: torch.dtype = E4, device: str = "cpu") -> torch.Tensor:
    """(K, N) with K contiguous, as fp8 wgmma and torch._scaled_mm want b."""
    return t(n, k, dtype=dtype, device=device).t()


def misaligned(rows: int, cols: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """A contiguous (rows, cols) CPU view whose base address is one element past a 16-byte boundary."""
    flat = torch.zeros(rows * cols + 16, dtype=dtype)
    off = next(i for i in range(1, 16) if (flat.data_ptr() + i * flat.element_size()) % 16)
    v = flat[off:off + rows * cols].view(rows, cols)
    assert v.data_ptr() % 16 and v.is_contiguous()
    return v


def raises(err: type[Exception], arg: str, fn: Callable[[], Any], *, match: str = "") -> Exception:
    with pytest.raises(err) as ei:
        fn()
    e = ei.value
    assert isinstance(e, (ValueError, TypeError)), f"{type(e).__name__} is not a ValueError/TypeError"
    msg = str(e)
    assert msg.startswith(f"{arg}: "), f"message does not name {arg!r} first: {msg}"
    assert "Fix: " in msg, msg
    assert getattr(e, "arg", arg) == arg
    if match:
        assert match in msg, msg
    return e


# -----------------------------------------------------------------------------------------------------------
# dtypes and shapes: caught on every path, including the meta (fake) one

DTYPE_SHAPE_CASES = {
    "fp32_inputs": (lambda d: (t(64, 64, dtype=FP32, device=d), t(64, 64, dtype=FP32, device=d)), DTypeError, "a"),
    "bf16_x_fp16": (lambda d: (t(64, 64, device=d), t(64, 64, dtype=FP16, device=d)), DTypeError, "b"),
    "fp8_via_matmul": (lambda d: (t(64, 64, dtype=E4, device=d), col_major(64, 64, device=d)), DTypeError, "a"),
    "int8": (lambda d: (t(64, 64, dtype=torch.int8, device=d), t(64, 64, device=d)), DTypeError, "a"),
    "mismatched_k": (lambda d: (t(64, 64, device=d), t(32, 64, device=d)), ShapeError, "b"),
    "a_3d": (lambda d: (t(2, 64, 64, device=d), t(64, 64, device=d)), ShapeError, "a"),
    "b_1d": (lambda d: (t(64, 64, device=d), t(64, device=d)), ShapeError, "b"),
}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", list(DTYPE_SHAPE_CASES))
def test_matmul_dtype_and_shape_errors(case: str, device: str) -> None:
    make, err, arg = DTYPE_SHAPE_CASES[case]
    a, b = make(device)
    raises(err, arg, lambda: warploom.matmul(a, b))
    raises(err, arg, lambda: torch.ops.warploom.matmul(a, b, None))  # the dispatcher path (fake impl on meta)
    raises(err, arg, lambda: warploom.plan(a, b))


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("out_dtype", [torch.int32, E4, torch.float64])
def test_matmul_bad_out_dtype(device: str, out_dtype: torch.dtype) -> None:
    a, b = t(64, 64, device=device), t(64, 64, device=device)
    raises(DTypeError, "out_dtype", lambda: warploom.matmul(a, b, out_dtype=out_dtype))
    raises(DTypeError, "out_dtype", lambda: warploom.plan(a, b, out_dtype=out_dtype))


# -----------------------------------------------------------------------------------------------------------
# strides and addresses: TMA's 16-byte rule


def test_k_511_bf16_breaks_the_16_byte_row_stride() -> None:
    # FIELD_NOTES: silently wrong at K=511 bf16 when unchecked (a 1022-byte row stride).
    a, b = t(64, 511), t(511, 64)
    raises(AlignmentError, "a", lambda: warploom.matmul(a, b), match="multiple of 16 bytes")
    raises(AlignmentError, "a", lambda: warploom.plan(a.to("meta"), b.to("meta")), match="1022 bytes")


def test_row_stride_of_511_elements() -> None:
    a = t(64, 511)[:, :504]  # 504 columns, 511-element (1022-byte) row stride
    raises(AlignmentError, "a", lambda: warploom.matmul(a, t(504, 64)), match="1022 bytes")
    b = t(64, 511).t()[:504]  # (504, 64) K-major with a 1022-byte column stride
    raises(AlignmentError, "b", lambda: warploom.matmul(t(64, 504), b), match="1022 bytes")


def test_non_contiguous_slice_of_a() -> None:
    a = t(64, 128)[:, ::2]
    raises(AlignmentError, "a", lambda: warploom.matmul(a, t(64, 64)), match="a.contiguous()")
    a_meta = torch.empty(64, 128, dtype=BF16, device="meta")[:, ::2]
    raises(AlignmentError, "a", lambda: warploom.plan(a_meta, t(64, 64, device="meta")))


def test_zero_strides_are_read_as_the_layout_they_are() -> None:
    # An (M, K) view with strides (0, 1) (a row expanded along M) is a K-major A whose descriptor takes the zero stride
    # (run on the GPU in tests/gpu/test_gpu.py); one with strides (1, 0) (a column expanded along K) is an M-major A
    # (ALayout.M_MAJOR), read transposed: the product comes out right either way. No unit stride is refused.
    col = t(64, 1).expand(64, 128)
    b = t(128, 64)
    assert warploom.plan(col, b).spec.a_layout is warploom.ALayout.M_MAJOR
    torch.testing.assert_close(warploom.matmul(col, b).float(), col.float() @ b.float(), atol=0.1, rtol=0.02)
    row = torch.empty(1, 128, dtype=BF16, device="meta").expand(64, 128)
    assert warploom.plan(row, t(128, 64, device="meta")).spec.k == 128
    raises(AlignmentError, "a", lambda: warploom.matmul(t(128, 128)[::2, ::2], b[:64]),
           match="row-major or column-major a")


def test_transposed_a_is_read_column_major_not_silently_misread() -> None:
    a = t(64, 64).t()  # column-major a: 16-bit wgmma reads it transposed (ALayout.M_MAJOR)
    b = t(64, 64)
    torch.testing.assert_close(warploom.matmul(a, b).float(), a.float() @ b.float(), atol=0.1, rtol=0.02)
    a8 = t(64, 64, dtype=torch.float8_e4m3fn).t()  # fp8 wgmma reads A K-major only
    b8 = t(64, 64, dtype=torch.float8_e4m3fn).t()
    one = torch.ones((), dtype=FP32)
    raises(AlignmentError, "a", lambda: warploom.scaled_mm(a8, b8, one, one), match="fp8 wgmma reads A K-major")


def test_b_with_no_unit_stride() -> None:
    b = t(128, 128)[::2, ::2]
    raises(AlignmentError, "b", lambda: warploom.matmul(t(64, 64), b))


@pytest.mark.parametrize("which", ["a", "b"])
def test_misaligned_base_pointer(which: str) -> None:
    a = misaligned(64, 64) if which == "a" else t(64, 64)
    b = misaligned(64, 64) if which == "b" else t(64, 64)
    raises(AlignmentError, which, lambda: warploom.matmul(a, b), match="base address aligned to 16 bytes")
    raises(AlignmentError, which, lambda: warploom.plan(a, b), match="clone()")


@pytest.mark.parametrize("n", [4, 12, 100])
def test_n_not_a_multiple_of_the_output_row_alignment(n: int) -> None:
    b = t(n, 64).t()  # K-major: its own strides are fine, only the output rows are too short
    raises(AlignmentError, "b", lambda: warploom.matmul(t(64, 64), b), match=f"N = {n}")


def test_fp32_output_needs_only_4_element_rows() -> None:
    k = warploom.plan(t(64, 64, device="meta"), t(12, 64, device="meta").t(), out_dtype=FP32)
    assert k.spec.n == 12


# -----------------------------------------------------------------------------------------------------------
# devices


@pytest.mark.parametrize("fn", ["matmul", "plan"])
def test_tensors_on_different_devices(fn: str) -> None:
    a, b = t(64, 64), t(64, 64, device="meta")
    f = getattr(warploom, fn)
    raises(DeviceError, "b", lambda: f(a, b), match="b.to(a.device)")
    raises(DeviceError, "b", lambda: f(b, a))


def test_cpu_tensors_above_the_simulator_limit_need_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small CPU problems run on the simulator (tests/sim/test_cpu_tensors.py); larger ones say how to go on.
    a, b = t(1024, 1024), t(1024, 1024)
    e = raises(DeviceError, "a", lambda: warploom.matmul(a, b), match="WARPLOOM_SIM_MAX_FLOPS=2147483648")
    assert "268,435,456 FLOPs" in str(e) and "1024x1024x1024" in str(e) and "need a GPU" in str(e)
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", str(2 * 64**3 - 1))  # the limit is read at each call
    a8, b8 = t(64, 64, dtype=E4), col_major(64, 64)
    one = torch.ones(())
    raises(DeviceError, "a", lambda: warploom.scaled_mm(a8, b8, one, one), match="at most 524,287 FLOPs")
    raises(DeviceError, "a", lambda: torch.ops.warploom.matmul(t(64, 64), t(64, 64), None))
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", str(2 * 64**3))
    assert warploom.scaled_mm(a8, b8, one, one).shape == (64, 64)


def test_bad_simulator_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw in ("1e9", "0", "-5"):  # (0 or less refused every CPU call, naming a limit no problem meets)
        monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", raw)
        raises(InputError, "WARPLOOM_SIM_MAX_FLOPS", lambda: warploom.matmul(t(64, 64), t(64, 64)),
               match=f"a positive integer number of FLOPs (2*M*N*K), e.g. 2147483648, got '{raw}'")


def test_validation_comes_before_the_simulator_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", "0")
    raises(AlignmentError, "a", lambda: warploom.matmul(t(64, 511), t(511, 64)))
    raises(DTypeError, "b", lambda: warploom.matmul(t(64, 64), t(64, 64, dtype=FP16)))


def test_meta_tensors_plan_and_trace_without_a_gpu() -> None:
    a, b = t(296, 1000, device="meta"), t(1000, 520, device="meta")
    assert warploom.plan(a, b).spec.m == 296
    out = warploom.matmul(a, b)
    assert out.device.type == "meta" and out.shape == (296, 520) and out.dtype == BF16


# -----------------------------------------------------------------------------------------------------------
# scaled_mm


def fp8_args(m: int = 64, n: int = 64, k: int = 64, device: str = "cpu", **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(a=t(m, k, dtype=E4, device=device), b=col_major(k, n, device=device),
                                scale_a=torch.ones(m, 1, device=device), scale_b=torch.ones(1, n, device=device))
    args.update(kw)
    return args


def call_scaled(args: dict[str, Any], how: str) -> Any:
    a = dict(args)
    if how == "scaled_mm":
        return warploom.scaled_mm(a.pop("a"), a.pop("b"), a.pop("scale_a"), a.pop("scale_b"), **a)
    return warploom.plan(a.pop("a"), a.pop("b"), a.pop("scale_a"), a.pop("scale_b"), **a)


SCALED_CASES = {
    "bf16_inputs": (lambda d: fp8_args(device=d, a=t(64, 64, device=d), b=t(64, 64, device=d).t()), DTypeError, "a"),
    "e4m3_x_bf16": (lambda d: fp8_args(device=d, b=t(64, 64, device=d).t()), DTypeError, "b"),
    "k_not_mult_16": (lambda d: fp8_args(k=40, device=d), ShapeError, "a"),
    "n_not_mult_16": (lambda d: fp8_args(n=40, device=d), ShapeError, "b"),
    "mismatched_k": (lambda d: fp8_args(device=d, b=col_major(32, 64, device=d)), ShapeError, "b"),
    "scale_a_bf16": (lambda d: fp8_args(device=d, scale_a=torch.ones(64, 1, dtype=BF16, device=d)), ScaleError,
                     "scale_a"),
    "scale_b_fp64": (lambda d: fp8_args(device=d, scale_b=torch.ones(1, 64, dtype=torch.float64, device=d)),
                     ScaleError, "scale_b"),
    "scale_a_shape": (lambda d: fp8_args(device=d, scale_a=torch.ones(64, 2, device=d)), ScaleError, "scale_a"),
    "scale_b_transposed": (lambda d: fp8_args(device=d, scale_b=torch.ones(64, 1, device=d)), ScaleError, "scale_b"),
    "scale_mixed_recipes": (lambda d: fp8_args(device=d, scale_a=torch.ones((), device=d)), ScaleError, "scale_a"),
    "bias_shape": (lambda d: fp8_args(device=d, bias=torch.ones(1, 64, dtype=BF16, device=d)), ShapeError, "bias"),
    "bias_int": (lambda d: fp8_args(device=d, bias=torch.ones(64, dtype=torch.int32, device=d)), DTypeError, "bias"),
    "out_dtype_int8": (lambda d: fp8_args(device=d, out_dtype=torch.int8), DTypeError, "out_dtype"),
    # fp8 outputs (issue 27 item 3): scale_result only scales an fp8 output (torch ignores it elsewhere: refused);
    # it is a float32 scalar, as torch requires; an fp8 output's bias is bf16 or fp16 (torch refuses fp32 there).
    "scale_result_bf16_out": (lambda d: fp8_args(device=d, scale_result=torch.ones((), device=d)), ScaleError,
                              "scale_result"),
    "scale_result_fp32_out": (lambda d: fp8_args(device=d, out_dtype=FP32, scale_result=torch.ones((), device=d)),
                              ScaleError, "scale_result"),
    "scale_result_two_elements": (lambda d: fp8_args(device=d, out_dtype=E4, scale_result=torch.ones(2, device=d)),
                                  ScaleError, "scale_result"),
    "scale_result_bf16": (lambda d: fp8_args(device=d, out_dtype=E5,
                                             scale_result=torch.ones((), dtype=BF16, device=d)),
                          ScaleError, "scale_result"),
    "fp8_out_fp32_bias": (lambda d: fp8_args(device=d, out_dtype=E4, bias=torch.ones(64, device=d)), DTypeError,
                          "bias"),
}


@pytest.mark.parametrize("how", ["scaled_mm", "plan"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", list(SCALED_CASES))
def test_scaled_mm_errors(case: str, device: str, how: str) -> None:
    make, err, arg = SCALED_CASES[case]
    raises(err, arg, lambda: call_scaled(make(device), how))


def test_refusals_torch_shares_say_so() -> None:
    """Where warploom refuses what torch._scaled_mm refuses on CUDA, the message says torch refuses it too."""
    bias32 = fp8_args(out_dtype=E4, bias=torch.ones(64))
    raises(DTypeError, "bias", lambda: call_scaled(bias32, "scaled_mm"), match="torch._scaled_mm refuses")


def test_scale_result_beside_an_epilogue_is_refused() -> None:
    args = fp8_args(scale_a=torch.ones(()), scale_b=torch.ones(()), out_dtype=E4, scale_result=torch.ones(()))
    raises(InputError, "scale_result", lambda: call_scaled({**args, "epilogue": lambda acc: acc}, "scaled_mm"),
           match="multiply by scale_result inside fn")


def test_fp8_b_must_be_column_major() -> None:
    args = fp8_args(b=t(64, 64, dtype=E4))  # row-major (K, N)
    raises(AlignmentError, "b", lambda: call_scaled(args, "scaled_mm"), match="b.t().contiguous().t()")


@pytest.mark.parametrize("arg", ["scale_a", "scale_b", "bias"])
def test_scaled_mm_argument_on_another_device(arg: str) -> None:
    meta = {"scale_a": torch.ones(64, 1, device="meta"), "scale_b": torch.ones(1, 64, device="meta"),
            "bias": torch.ones(64, dtype=BF16, device="meta")}
    args = fp8_args(**{arg: meta[arg]})
    for how in ("scaled_mm", "plan"):
        raises(DeviceError, arg, lambda h=how: call_scaled(args, h), match=f"{arg}.to(a.device)")


def test_plan_needs_both_scales_or_neither() -> None:
    a, b = t(64, 64, dtype=E4, device="meta"), col_major(64, 64, device="meta")
    raises(ScaleError, "scale_b", lambda: warploom.plan(a, b, torch.ones(()), None))
    raises(ScaleError, "scale_a", lambda: warploom.plan(a, b, None, torch.ones(())))


# -----------------------------------------------------------------------------------------------------------
# compile target


def test_bad_compile_target() -> None:
    k = warploom.plan(t(128, 64, device="meta"), t(64, 128, device="meta"))
    for target in ("sm_100a", "sm90a", "", "cuda"):
        e = raises(TargetError, "target", lambda tg=target: k.compile(tg), match=repr(target))
        assert isinstance(e, ValueError)


def test_every_error_class_is_exported() -> None:
    # Users catch warploom.<Error>; every class in warploom.errors must be reachable from the package.
    import warploom.errors as errors

    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)
               and v.__module__ == errors.__name__}
    assert "TargetError" in classes
    missing = sorted(c for c in classes if getattr(warploom, c, None) is not getattr(errors, c))
    assert missing == []
    assert not sorted(c for c in classes if c not in warploom.__all__)


def test_user_errors_are_value_or_type_errors_and_internal_ones_are_not() -> None:
    from warploom import errors

    for cls in (InputError, ShapeError, AlignmentError, DeviceError, ScaleError, errors.UnsupportedError,
                TargetError):
        assert issubclass(cls, ValueError) and issubclass(cls, errors.WarploomError)
    assert issubclass(DTypeError, TypeError)
    assert not issubclass(errors.InternalError, (ValueError, TypeError))
    assert issubclass(errors.VerificationError, errors.InternalError)


# -----------------------------------------------------------------------------------------------------------
# zero-sized problems: no kernel, torch's results


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("m,n,k", [(0, 64, 32), (32, 0, 32), (32, 64, 0), (0, 0, 0)])
@pytest.mark.parametrize("out_dtype", [None, FP32])
def test_matmul_zero_sized(device: str, m: int, n: int, k: int, out_dtype: torch.dtype | None) -> None:
    a, b = t(m, k, device=device), t(k, n, device=device)
    out = warploom.matmul(a, b, out_dtype=out_dtype)
    ref = torch.matmul(a, b).to(out_dtype or BF16)
    assert out.shape == ref.shape == (m, n) and out.dtype == ref.dtype and out.device == a.device
    if device == "cpu":
        torch.testing.assert_close(out, ref, atol=0, rtol=0)  # K = 0: exact zeros


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("m,n,k", [(0, 64, 32), (32, 0, 32), (32, 64, 0), (0, 0, 0)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("out_dtype", [BF16, FP32])
def test_scaled_mm_zero_sized_matches_torch(recipe: str, m: int, n: int, k: int, with_bias: bool,
                                            out_dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    a, b = t(m, k, dtype=E4), col_major(k, n)
    if recipe == "tensorwise":
        sa, sb = torch.tensor(2.0), torch.tensor(3.0)
    else:
        sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    bias = torch.randn(n).to(out_dtype if out_dtype is BF16 else BF16) if with_bias else None
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    if m == 0 or n == 0:
        ref = torch.empty((m, n), dtype=out_dtype)  # torch._scaled_mm on CPU refuses (0, 1) row scales
    elif out_dtype is BF16 or bias is None:
        ref = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    else:  # torch wants bias.dtype == out_dtype; warploom adds a bf16 bias to an fp32 output too
        ref = (torch.zeros(m, n) + bias.float()).to(out_dtype)
    assert out.shape == (m, n) and out.dtype == out_dtype
    torch.testing.assert_close(out, ref, atol=0, rtol=0)


def test_scaled_mm_zero_sized_on_meta() -> None:
    args = fp8_args(m=32, n=64, k=0, device="meta", bias=torch.ones(64, dtype=BF16, device="meta"))
    out = call_scaled(args, "scaled_mm")
    assert out.device.type == "meta" and out.shape == (32, 64) and out.dtype == BF16


# -----------------------------------------------------------------------------------------------------------
# issue 28: natural mistakes that used to crash or pass silently


@pytest.mark.parametrize("bad", [None, [[1.0]], "numpy", "sparse"])
def test_an_argument_that_is_not_a_dense_tensor(bad: Any) -> None:
    import numpy as np

    if bad == "numpy":
        bad = np.ones((64, 64))
    elif bad == "sparse":
        bad = t(64, 64).to_sparse()
    b = t(64, 64)
    for arg, fn in (("a", lambda: warploom.matmul(bad, b)), ("b", lambda: warploom.matmul(b, bad)),
                    ("a", lambda: warploom.plan(bad, b)),
                    ("a", lambda: warploom.matmul(bad, b, epilogue=lambda acc: acc * 2))):
        e = raises(warploom.ArgumentTypeError, arg, fn)
        assert isinstance(e, TypeError)


def test_missing_or_python_number_scales() -> None:
    a, b = t(64, 64, dtype=E4), col_major(64, 64)
    raises(warploom.ArgumentTypeError, "scale_a", lambda: warploom.scaled_mm(a, b, None, None),
           match="torch.ones((), device=a.device)")
    raises(warploom.ArgumentTypeError, "scale_a", lambda: warploom.scaled_mm(a, b, 1.0, 1.0, epilogue=lambda acc: acc),
           match="torch.tensor(1.0, device=a.device)")
    raises(warploom.ArgumentTypeError, "scale_b", lambda: warploom.scaled_mm(a, b, torch.ones(()), 2))
    raises(warploom.ArgumentTypeError, "bias", lambda: warploom.scaled_mm(a, b, torch.ones(()), torch.ones(()),
                                                                            bias=[0.0] * 64))


@pytest.mark.parametrize("device", ["H100", "B200", 0])
def test_plan_device_given_as_a_name(device: Any) -> None:
    raises(warploom.ArgumentTypeError, "device", lambda: warploom.plan(t(64, 64), t(64, 64), device=device),
           match="warploom.H100_SXM, H200")
    # (plan_schedule refuses it with the same words: one check, device.check_device)
    from warploom.planner import plan_schedule

    raises(warploom.ArgumentTypeError, "device", lambda: plan_schedule(warploom.GemmSpec(64, 64, 64), device),
           match="warploom.H100_SXM, H200")


def test_a_bias_the_kernel_would_not_read_is_refused() -> None:
    a, b = t(48, 64), t(64, 64)
    raises(InputError, "bias", lambda: warploom.plan(a.to("meta"), b.to("meta"), bias=t(64, device="meta")),
           match="epilogue=lambda acc, bias: acc + bias")
    k = warploom.plan(a, b)
    raises(InputError, "bias", lambda: k.simulate(a, b, bias=t(64)), match="planned without a bias")
    # Fused as an epilogue operand, it is read.
    bias = t(64)
    out = warploom.matmul(a, b, epilogue=lambda acc, bias: acc + bias, bias=bias)
    torch.testing.assert_close(out.float(), a.float() @ b.float() + bias.float(), atol=0.1, rtol=0.02)


def test_an_epilogue_returning_nothing() -> None:
    for ret in ((), []):
        raises(warploom.UnsupportedError, "epilogue", lambda r=ret: warploom.matmul(t(48, 64), t(64, 64),
                                                                                  epilogue=lambda acc: r),
               match="return acc")


@pytest.mark.parametrize("param", ["bias", "scale_a"])
def test_scaled_mm_epilogue_parameter_named_like_its_own_operand(param: str) -> None:
    args = fp8_args(bias=t(64))
    fn = eval(f"lambda acc, {param}: acc + {param}")  # noqa: S307 - the parameter's name is the point
    for how in ("scaled_mm", "plan"):
        raises(InputError, param, lambda h=how: call_scaled({**args, "epilogue": fn}, h),
               match="acc * scale_a * scale_b + bias")


@pytest.mark.parametrize("m,n,k", [(0, 3, 64), (5, 3, 0), (0, 3, 0), (3, 0, 7)])
@pytest.mark.parametrize("epilogue", [False, True])
def test_zero_sized_with_an_unaligned_other_dimension(m: int, n: int, k: int, epilogue: bool) -> None:
    a, b = t(m, k), t(k, n)
    fn = (lambda acc: acc * 2) if epilogue else None
    out = warploom.matmul(a, b, epilogue=fn)
    ref = torch.matmul(a, b) * (2 if epilogue else 1)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    torch.testing.assert_close(out, ref, atol=0, rtol=0)


def test_an_out_dtype_or_fast_accum_flag_of_the_wrong_kind() -> None:
    """Found by tests/unit/test_props_bad_input.py: the custom op's dispatcher raised a raw RuntimeError casting
    out_dtype="bf16" or use_fast_accum="yes"; None or a string as use_fast_accum passed as a truth value."""
    a, b = t(48, 64), t(64, 64)
    raises(DTypeError, "out_dtype", lambda: warploom.matmul(a, b, out_dtype="bf16"), match="'bf16'")
    a8, b8, one = t(48, 64, dtype=E4), col_major(64, 64), torch.ones(())
    raises(DTypeError, "out_dtype", lambda: warploom.scaled_mm(a8, b8, one, one, out_dtype="bf16"),
           match="torch.float8_e4m3fn or torch.float8_e5m2")  # (scaled_mm's own outputs, fp8 too)
    for flag in ("yes", None, 1):
        raises(warploom.ArgumentTypeError, "use_fast_accum", lambda f=flag: warploom.scaled_mm(a8, b8, one, one,
                                                                                             use_fast_accum=f))
        raises(warploom.ArgumentTypeError, "use_fast_accum", lambda f=flag: warploom.plan(a8, b8, one, one,
                                                                                        use_fast_accum=f))


def test_every_warploom_exception_derives_from_the_base() -> None:
    """Issue 26: the simulator's own errors (a malformed module, a run past its step budget) are warploom errors
    too, so `except warploom.WarploomError` catches everything warploom raises on purpose."""
    from warploom.errors import InternalError, WarploomError
    from warploom.sim.program import MalformedError
    from warploom.sim.scheduler import StepLimitError

    assert issubclass(MalformedError, WarploomError) and issubclass(MalformedError, ValueError)
    assert issubclass(StepLimitError, InternalError) and issubclass(StepLimitError, RuntimeError)


def test_cli_short_help_and_version() -> None:
    from click.testing import CliRunner

    from warploom.cli import main

    assert CliRunner().invoke(main, ["-h"]).exit_code == 0
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and "0.1.0" in res.output


# A Kernel's own calls (Kernel.run / Kernel.simulate) take tensors for the spec it was planned for: anything else was
# once dropped or read along the wrong axis without a word (a probe of the API, session 34).
def _meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _rowwise_kernel() -> Any:
    return warploom.plan(_meta(128, 256, dtype=E4), _meta(128, 256, dtype=E4).t(), _meta(128, 1, dtype=FP32),
                         _meta(1, 128, dtype=FP32))


@pytest.mark.parametrize("call", [
    # a blockwise kernel given scale_a of rowwise shape
    lambda: warploom.plan(_meta(128, 256, dtype=E4), _meta(128, 256, dtype=E4).t(), _meta(128, 2, dtype=FP32),
                          _meta(2, 1, dtype=FP32)).simulate(t(128, 256, dtype=E4), col_major(256, 128),
                                                            torch.rand(128, 1), torch.rand(2, 1)),
    # a rowwise kernel given its scales swapped
    lambda: _rowwise_kernel().simulate(t(128, 256, dtype=E4), col_major(256, 128), torch.rand(1, 128),
                                       torch.rand(128, 1)),
])
def test_kernel_refuses_scales_of_another_shape(call: Callable[[], Any]) -> None:
    with pytest.raises(ScaleError, match="Fix:"):
        call()


def test_kernel_refuses_scales_of_another_recipe() -> None:
    tensorwise = warploom.plan(_meta(128, 256, dtype=E4), _meta(128, 256, dtype=E4).t(), _meta(dtype=FP32),
                               _meta(dtype=FP32))
    with pytest.raises(InputError, match=r"^scale_a, scale_b: expected scale tensorwise.*got scale rowwise"):
        tensorwise.simulate(t(128, 256, dtype=E4), col_major(256, 128), torch.rand(128, 1), torch.rand(1, 128))
    assert _rowwise_kernel().simulate(t(128, 256, dtype=E4), col_major(256, 128), torch.rand(128, 1) + 0.5,
                                      torch.rand(1, 128) + 0.5).output.isfinite().all()


@pytest.mark.parametrize("recipe_shapes,m,k", [
    # a 128x128 x 128x128 kernel run at M = 1: its (1, K/128) scale_a is also the 1x128 shape, and means the same
    (((2, 2), (2, 2)), 1, 256),
    # a 1x128 x 1x128 kernel run at K = 128: its (M, 1) and (1, N) scales are also the rowwise shapes
    (((256, 2), (2, 256)), 64, 128),
])
def test_kernel_takes_scales_that_mean_its_recipe(recipe_shapes: tuple[tuple[int, int], tuple[int, int]], m: int,
                                                  k: int) -> None:
    """Scales whose shapes are the kernel's recipe's at the size it runs at are its recipe's, though a call with them
    alone would be planned for another (`checks.recipe_scale_shapes`): taken, and the product right."""
    (sa, sb) = recipe_shapes
    kern = warploom.plan(_meta(256, 256, dtype=E4), _meta(256, 256, dtype=E4).t(), _meta(*sa, dtype=FP32),
                         _meta(*sb, dtype=FP32))
    n = 256
    a, b = t(m, k, dtype=E4), col_major(k, n)
    kb = -(-k // 128)
    scale_a = torch.rand(1 if kern.spec.scale.value.startswith("blockwise_128x128") else m, kb) + 0.5
    scale_b = torch.rand(kb, 2 if kern.spec.scale.value.endswith("128x128") else n) + 0.5
    out = kern.simulate(a, b, scale_a, scale_b).output.double()
    rows = scale_a.repeat_interleave(128, 0)[:m] if scale_a.shape[0] < m else scale_a
    sa_full = rows.repeat_interleave(128, 1)[:, :k].double()
    cols = scale_b.repeat_interleave(128, 1)[:, :n] if scale_b.shape[1] < n else scale_b
    sb_full = cols.repeat_interleave(128, 0)[:k].double()
    ref = (a.double() * sa_full) @ (b.double() * sb_full)
    err = 1 - 2 * (out * ref).sum() / (out * out + ref * ref).sum()
    assert err < 1e-4, err


def test_kernel_run_refuses_cpu_tensors_before_any_launch() -> None:
    """Kernel.run on CPU tensors (the simulator's) once reached Triton's driver, which said "0 active drivers" on a
    machine without a GPU: refused by name, with the simulator as the fix."""
    kern = warploom.plan(_meta(128, 256), _meta(128, 256).t())
    with pytest.raises(InputError, match=r"^a: expected a tensor on a CUDA GPU.*Fix: .*Kernel.simulate"):
        kern.run(t(128, 256), col_major(256, 128, dtype=BF16), torch.empty(128, 128, dtype=BF16))


def test_kernel_refuses_scales_it_would_drop_and_tensors_of_another_layout() -> None:
    k = warploom.plan(_meta(128, 256), _meta(128, 256).t())
    a, b = t(128, 256), t(128, 256).t()
    with pytest.raises(InputError, match="^scale_a: expected None.*without scales.*Fix:"):
        k.simulate(a, b, torch.tensor(2.0), torch.tensor(3.0))
    with pytest.raises(InputError, match="^b: expected b_layout k_major.*got b_layout n_major"):
        k.run(a, t(256, 128), t(128, 128))  # (checked before the launch: no GPU needed to refuse it)
    with pytest.raises(InputError, match="^a: expected a_dtype bf16.*got a_dtype fp16"):
        k.simulate(a.half(), b.half())
    with pytest.raises(TypeError, match="^a: expected a torch.Tensor"):
        k.simulate(None, b)


def test_simulator_refuses_program_ids_and_seeds_by_name() -> None:
    k = warploom.plan(_meta(512, 512), _meta(512, 512).t())
    a, b = t(512, 512), t(512, 512).t()
    grid = k.plan.grid
    with pytest.raises(InputError, match=rf"^ctas: expected program ids in \[0, {grid}\).*got \[999\]"):
        k.simulate(a, b, ctas=[999])
    with pytest.raises(InputError, match="^ctas: expected program ids"):
        k.check_protocol(ctas=[-1])
    for bad in ("0", 0, [0.5]):
        with pytest.raises(TypeError, match="^ctas: expected"):
            k.simulate(a, b, ctas=bad)
    with pytest.raises(TypeError, match="^seeds: expected an iterable of ints.*Fix: pass seeds=\\[3\\]"):
        k.check_protocol(seeds=3)
    for seed in ("1", 1.0, True):
        with pytest.raises(TypeError, match="^seed: expected an int.*Fix: pass seed=0"):
            k.simulate(a, b, seed=seed)


@pytest.mark.parametrize("kw,error,name", [
    ({"stream_k": 2.0}, TypeError, "stream_k"), ({"stages": "4"}, TypeError, "stages"),
    ({"n_blocks": 64}, TypeError, "n_blocks"), ({"pingpong": "no"}, TypeError, "pingpong"),
    ({"swap_ab": "yes"}, TypeError, "swap_ab"), ({"bm": 0}, InputError, "bm"), ({"stages": -1}, InputError, "stages"),
    ({"stages": 0}, InputError, "stages"), ({"partial_blocks": 0}, InputError, "partial_blocks"),
    ({"split_k": True}, TypeError, "split_k"), ({"group_m": None}, TypeError, "group_m"),
    ({"sk_waves": None}, TypeError, "sk_waves"), ({"cluster": 2.0}, TypeError, "cluster"),
    ({"cluster": [2]}, TypeError, "cluster"), ({"cluster": True}, TypeError, "cluster"),
])
def test_plan_schedule_checks_its_options(kw: dict[str, Any], error: type[Exception], name: str) -> None:
    from warploom import H100_SXM, GemmSpec
    from warploom.planner import plan_schedule

    with pytest.raises(error, match=f"^{name}: expected.*Fix:"):
        plan_schedule(GemmSpec(512, 512, 512), H100_SXM, **kw)
    with pytest.raises(warploom.UnsupportedError, match=r"^cluster=3: expected None .*Fix:"):
        plan_schedule(GemmSpec(512, 512, 512), H100_SXM, cluster=3)  # (an int or a string of no cluster shape)
    with pytest.raises(TypeError, match="^spec: expected a warploom.GemmSpec"):
        plan_schedule((512, 512, 512), H100_SXM)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^device: expected a warploom.DeviceInfo"):
        plan_schedule(GemmSpec(512, 512, 512), "H100")  # type: ignore[arg-type]


def test_kernel_simulate_wants_cpu_tensors_and_plan_a_bool_flag() -> None:
    k = warploom.plan(_meta(128, 256), _meta(128, 256).t())
    with pytest.raises(DeviceError, match="^a: expected a CPU tensor.*Fix: pass a.cpu()"):
        k.simulate(_meta(128, 256), _meta(128, 256).t())
    with pytest.raises(DeviceError, match="^b: expected a CPU tensor.*Fix: pass b.cpu()"):  # (every tensor's device)
        k.simulate(t(128, 256), _meta(128, 256).t())
    with pytest.raises(TypeError, match="^use_fast_accum: expected a bool"):
        warploom.plan(_meta(128, 256), _meta(128, 256).t(), use_fast_accum="yes")


def test_check_protocol_takes_each_launchs_own_ids() -> None:
    """A split-K tail's launches take the ids of `ctas` in their own grids (the tail's is smaller), and stream-K runs
    every CTA: neither refuses an id the first launch has."""
    from warploom import H100_SXM, GemmSpec
    from warploom.kernel import build
    from warploom.planner import plan_schedule

    spec = GemmSpec(2000, 2056, 4608)
    tailed = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128, tail_split=2))
    assert tailed.check_protocol(seeds=[0], ctas=[131]).ctas == (131,)
    spec = GemmSpec(384, 752, 5312)
    streamed = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bn=128, stream_k=3))
    assert len(streamed.check_protocol(seeds=[0], ctas=[10**6]).ctas) == streamed.plan.grid


# Found by a probe of the grouped, gate/up and scaled entry points (session 35): each was a raw torch or Python error,
# a silently truncated result, or a message that blamed another argument.
def test_scaled_mm_takes_out_dtype_none_as_its_default() -> None:
    a, b = t(37, 48, dtype=E4), col_major(48, 32)
    assert warploom.scaled_mm(a, b, torch.ones(()), torch.ones(()), out_dtype=None).dtype == BF16


def test_negated_fp8_views_are_refused_by_name() -> None:
    a, b = t(37, 48, dtype=E4), col_major(48, 32)
    raises(InputError, "a", lambda: warploom.scaled_mm(torch._neg_view(a), b, torch.ones(()), torch.ones(())),
           match="resolve_neg()")


def test_matmul_has_no_out() -> None:
    raises(InputError, "out", lambda: warploom.matmul(t(37, 48), t(48, 24), out=torch.empty(37, 24, dtype=BF16)),
           match="use the result")


@pytest.mark.parametrize("call,arg,match", [
    (lambda w: warploom.interleave_gate_up(w, w, block=32, dim=1.0), "dim", "an int"),
    (lambda w: warploom.interleave_gate_up(w, w, block=32, dim=None), "dim", "an int"),
    (lambda w: warploom.deinterleave_gate_up(torch.randn(192, 24), block=32, dim=0.0), "dim", "an int"),
    (lambda w: warploom.interleave_gate_up(w.to_sparse(), w.to_sparse(), block=32), "w1", "to_dense()"),
    (lambda w: warploom.silu_mul_interleaved(torch.randn(5, 128).to_sparse(), block=32), "h", "to_dense()"),
    (lambda w: warploom.silu_mul_interleaved(torch.tensor(1.0), block=32), "h", "interleaved along its last"),
    (lambda w: warploom.deinterleave_gate_up(torch.randn(192, 24), block=32, rows=3), "rows", "64 < I <= 96"),
])
def test_gate_up_helpers_refuse_by_name(call: Callable[[torch.Tensor], Any], arg: str, match: str) -> None:
    e = raises((InputError, ShapeError, TypeError), arg, lambda: call(torch.randn(70, 24)), match=match)
    assert arg != "h" or "dim=" not in str(e).split("Fix:")[1], e  # (silu_mul_interleaved takes no dim=)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.complex64, E4])
def test_silu_mul_interleaved_refuses_what_it_would_truncate(dtype: torch.dtype) -> None:
    h = torch.full((1, 64), 3.0).to(dtype)
    raises(DTypeError, "h", lambda: warploom.silu_mul_interleaved(h, block=32), match="float32")


def _grouped_fp8() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = t(37, 48, dtype=E4)
    b = torch.randn(3, 40, 48).to(E4).transpose(-2, -1)
    return a, b, torch.tensor([10, 20, 37], dtype=torch.int32)


@pytest.mark.parametrize("sa,sb,arg,match", [
    ((37,), (3, 1, 40), "scale_b", "expected shape (3, 40) (rowwise"),  # (a 3-D scale_b beside a rowwise scale_a)
    ((37, 1), (3, 40), "scale_b", "expected shape (3, 1, 1) (blockwise"),  # (a blockwise scale_a, a rowwise scale_b)
])
def test_grouped_scales_blame_the_scale_that_does_not_fit(sa: tuple[int, ...], sb: tuple[int, ...], arg: str,
                                                          match: str) -> None:
    a, b, offs = _grouped_fp8()
    raises(ScaleError, arg, lambda: warploom.scaled_grouped_mm(a, b, torch.ones(sa), torch.ones(sb), offs),
           match=match)


def test_grouped_missing_scale_fix_is_one_it_takes() -> None:
    a, b, offs = _grouped_fp8()
    e = raises(TypeError, "scale_a", lambda: warploom.scaled_grouped_mm(a, b, None, torch.ones(3, 40), offs))
    assert "torch.ones((), " not in str(e), e  # (a grouped call has no tensorwise recipe)


def test_grouped_bounds_refused_by_name() -> None:
    from warploom.checks_grouped import _bounds

    a, b, offs = t(40, 64), torch.randn(3, 64, 64, dtype=BF16), torch.tensor([10, 25, 40], dtype=torch.int32)
    raises(InputError, "offs", lambda: warploom.grouped_mm(a, b, offs.to_sparse()), match="to_dense()")
    k_offs = torch.tensor([10, 100, 192], dtype=torch.int32).to_sparse()
    raises(InputError, "offs", lambda: warploom.grouped_mm(t(20, 192), t(192, 64), k_offs), match="to_dense()")
    raises(ShapeError, "offs", lambda: warploom.grouped_mm(a, b, offs[None]), match="offs.reshape(-1)")
    e = raises(ShapeError, "offs", lambda: warploom.grouped_mm(a, b, torch.tensor(40, dtype=torch.int32)))
    assert "experts" not in str(e).split("Fix:")[1], e
    # (a negated view reaches the CUDA kernel's pointer un-negated: the bounds' check refuses it; on the CPU the
    # dispatcher resolves it first)
    raises(InputError, "offs", lambda: _bounds("offs", torch._neg_view(-offs), 3, offs.device), match="resolve_neg")


# Found by a probe of the Kernel methods and the CLI (session 35).
def test_kernel_methods_of_a_launch_it_does_not_have_are_refused_by_name() -> None:
    k = warploom.plan(t(128, 128), t(128, 128).t())
    for call, name in ((lambda: k.spans(128, 128, 128), "spans"), (lambda: k.launches(128, 128, 128), "launches"),
                       (lambda: k.compile_tail(), "compile_tail"), (lambda: k.compile_cast(), "compile_cast")):
        with pytest.raises(warploom.errors.UnsupportedError, match=rf"^{name}: expected a kernel with .*Fix: "):
            call()


def test_kernel_sizes_outputs_and_devices_are_checked() -> None:
    from warploom import H100_SXM, GemmSpec
    from warploom.kernel import build
    from warploom.planner import plan_schedule

    spec = GemmSpec(256, 256, 512)
    tail = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, tail_split=2))
    raises(InputError, "m", lambda: tail.spans(-128, 256, 512))
    raises(InputError, "m", lambda: tail.spans(256.5, 256, 512))  # type: ignore[arg-type]
    # (a tail kernel's ids past every grid, and an empty selection, check nothing: refused as a plain kernel's are)
    raises(InputError, "ctas", lambda: tail.check_protocol(seeds=[0], ctas=[999]), match="program ids in [0, ")
    raises(InputError, "seeds", lambda: tail.check_protocol(seeds=[]))
    raises(InputError, "ctas", lambda: tail.check_protocol(ctas=[]))
    k = warploom.plan(t(128, 128), t(128, 128).t())
    a, b = t(128, 128), t(128, 128).t()
    raises(InputError, "out", lambda: k.simulate(a, b, out=torch.empty(1, 128, dtype=BF16).expand(128, 128)),
           match="do not overlap")
    raises(InputError, "out", lambda: k.simulate(a, b, out=torch.empty(128, 64, dtype=BF16)), match="shape (128, 128)")
    raises(DeviceError, "out", lambda: k.run(a, b, torch.empty(128, 128, dtype=BF16, device="meta")))


@pytest.mark.parametrize("argv,match", [
    (["plan", "--dtype", "blockwise", "--scales", "mx"], "--dtype blockwise sets its own"),
    (["plan", "--dtype", "blockwise", "--fast-accum"], "always promotes"),
    (["plan", "--dtype", "mxfp8", "--target", "sm_100a", "--scales", "tensorwise"], "--dtype mxfp8 sets its own"),
    (["plan", "--dtype", "bf16", "--no-fast-accum"], "has no fp8 accumulation"),
    (["sim", "--m", "64", "--n", "64", "--k", "64", "--timeline", "/proc/x.png"], "is not writable"),
    (["demo", "--out-dir", "/proc/x"], "is not writable"),
    (["sim", "--m", "64", "--n", "64", "--k", "64", "--timeline", "README.md/x.png"], "is a file, not a directory"),
    (["bench", "--merge", "docs/data/zoo-2-of-8-h200-2026-11-28-session35.json", "--out",
      "docs/data/zoo-2-of-8-h200-2026-11-28-session35.json"], "is one of the shards merged"),
])
def test_cli_refuses_options_it_would_drop_or_paths_it_cannot_write(argv: list[str], match: str) -> None:
    from click.testing import CliRunner

    from warploom.cli import main

    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2 and match in r.output, r.output


@pytest.mark.parametrize("kw,error,name", [
    ({"limit": "x"}, InputError, "limit"), ({"limit": 0}, InputError, "limit"), ({"limit": 2.5}, InputError, "limit"),
    ({"min_gain": float("nan")}, InputError, "min_gain"), ({"min_gain": -1.0}, InputError, "min_gain"),
    ({"min_gain": "x"}, InputError, "min_gain"), ({"plans": [1]}, InputError, "plans"),
    ({"plans": []}, InputError, "plans"), ({"space": "x"}, TypeError, "space"),
    ({"strides": "abc"}, TypeError, "strides"), ({"cache": "/tmp"}, TypeError, "cache"),
])
def test_autotune_checks_its_arguments_before_any_work(kw: dict[str, Any], error: type[Exception], name: str) -> None:
    """Found by a probe (session 35): these failed deep in the search, or made tuning meaningless (min_gain -1 keeps
    the default unless a candidate runs twice as fast), and an empty plans list read as a warploom bug."""
    from warploom import H100_SXM, GemmSpec
    from warploom.tune.autotune import Harness, autotune

    out = torch.zeros(1)
    called: list[object] = []
    h = Harness(lambda p: (called.append(p), lambda: None)[1], (out,), (out,), lambda c: 1.0)
    raises(error, name, lambda: autotune(GemmSpec(256, 256, 256), H100_SXM, h, progress=False, **kw))
    assert called == []
    raises(TypeError, "spec", lambda: autotune(None, H100_SXM, h))  # type: ignore[arg-type]


def test_the_tuning_cache_refuses_a_root_that_is_no_path() -> None:
    from warploom.tune import cache

    raises(TypeError, "root", lambda: cache.Cache(5))  # type: ignore[arg-type]
    raises(TypeError, "root", lambda: cache.clear_cache(5))  # type: ignore[arg-type]


# A Kernel's calls against what it was planned for, found by an API probe (session 36): each was run, and came out
# wrong without a word (MX scales of another shape: error 0.76; a longer bias read in part; a positional bias beside a
# fused kernel's operands dropped; an out overlapping a written while a was read).
def _mx_kernel() -> Any:
    return warploom.plan(_meta(64, 256, dtype=E4), _meta(128, 256, dtype=E4).t(),
                         _meta(64, 8, dtype=torch.float8_e8m0fnu), _meta(128, 8, dtype=torch.float8_e8m0fnu))


def _e8m0(*shape: int) -> torch.Tensor:
    return torch.ones(shape).to(torch.float8_e8m0fnu)


@pytest.mark.parametrize("scales,err,match", [
    ((_e8m0(8, 64), _e8m0(128, 8)), ScaleError, r"^scale_a: expected MX scales of shape \(64, 8\)"),
    ((_e8m0(64, 16), _e8m0(128, 8)), ScaleError, r"^scale_a: expected MX scales of shape \(64, 8\)"),
    ((torch.ones(64, 8), torch.ones(128, 8)), ScaleError, r"^scale_a: expected torch.float8_e8m0fnu"),
    # both in torch's blocked layout (sm_100a's), to a kernel planned for row-major ones (sm_90a's)
    ((_e8m0(1024), _e8m0(1024)), ScaleError, r"^scale_a, scale_b: expected MX scales in the row_major"),
])
def test_kernel_refuses_mx_scales_of_another_shape_or_layout(scales: tuple[torch.Tensor, torch.Tensor],
                                                              err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        _mx_kernel().simulate(t(64, 256, dtype=E4), col_major(256, 128), *scales)


def _bias_kernel() -> Any:
    return warploom.plan(_meta(64, 256, dtype=E4), _meta(128, 256, dtype=E4).t(), _meta(64, 1, dtype=FP32),
                         _meta(1, 128, dtype=FP32), bias=_meta(128))


@pytest.mark.parametrize("bias,err,match", [
    (torch.randn(144).to(BF16), ShapeError, r"^bias: expected shape \(128,\)"),
    (torch.randn(128, 1).to(BF16), ShapeError, r"^bias: expected shape \(128,\)"),
    (torch.ones(128, dtype=torch.int32), DTypeError, r"^bias: expected bf16"),
    (torch.randn(128, dtype=torch.float64), DTypeError, r"^bias: expected bf16"),
    (None, InputError, r"^bias: expected the \(128,\) bf16 bias"),
])
def test_kernel_refuses_a_bias_it_would_misread(bias: Any, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        _bias_kernel().simulate(t(64, 256, dtype=E4), col_major(256, 128), torch.rand(64, 1) + 0.5,
                                torch.rand(1, 128) + 0.5, bias)


def test_kernel_refuses_a_positional_bias_beside_a_fused_epilogue() -> None:
    r = t(64, 128)
    kern = warploom.plan(_meta(64, 256), _meta(128, 256).t(), epilogue=lambda acc, r: acc + r, r=_meta(64, 128))
    with pytest.raises(InputError, match=r"^bias: expected None: a fused kernel takes its bias as an operand"):
        kern.simulate(t(64, 256), col_major(256, 128, dtype=BF16), bias=torch.full((128,), 100.0).to(BF16),
                      operands={"r": r})


def test_kernel_refuses_an_out_overlapping_its_inputs() -> None:
    kern = warploom.plan(_meta(64, 256), _meta(128, 256).t())
    buf = t(64, 256)
    with pytest.raises(InputError, match=r"^out: expected memory apart from a's"):
        kern.simulate(buf, col_major(256, 128, dtype=BF16), out=buf[:, :128])


def test_plan_schedule_reads_a_generator_of_blocks_once_and_refuses_none_flags() -> None:
    from warploom import H100_SXM, GemmSpec
    from warploom.errors import ArgumentTypeError
    from warploom.planner import plan_schedule

    plan = plan_schedule(GemmSpec(1024, 80, 1024), H100_SXM, bm=128, bn=128, n_blocks=(w for w in (64, 16)))
    assert plan.n_blocks == (64, 16)
    for flag in ("scalar_columns", "pingpong"):
        with pytest.raises(ArgumentTypeError, match=f"^{flag}: expected True or False, got NoneType"):
            plan_schedule(GemmSpec(1024, 1024, 1024), H100_SXM, **{flag: None})


def test_plan_names_a_schedule_option_given_as_an_operand() -> None:
    with pytest.raises(InputError, match=r"^stages: expected epilogue operands only.*Fix: .*plan_schedule"):
        warploom.plan(_meta(64, 64), _meta(64, 64).t(), stages=3)


@pytest.mark.parametrize("field,value,err,match", [
    ("sm_count", 0, InputError, r"^device.sm_count: expected an int >= 1, got 0"),
    ("sm_count", "132", TypeError, r"^device.sm_count: expected an int >= 1, got str"),
    ("l2_bytes", -1, InputError, r"^device.l2_bytes"),
    ("arch", "sm_80", ValueError, r"^device.arch: warploom plans sm_90a .*got 'sm_80'.*Fix:"),
    ("arch", None, ValueError, r"^device.arch: .*got None"),
])
def test_plan_refuses_a_device_it_cannot_plan_for(field: str, value: Any, err: type, match: str) -> None:
    """A zero SM count once divided a model by zero, and an A100's sm_80 was planned as sm_90a without a word."""
    from dataclasses import replace

    from warploom import H100_SXM, GemmSpec
    from warploom.planner import plan_schedule

    with pytest.raises(err, match=match):
        plan_schedule(GemmSpec(256, 256, 256), replace(H100_SXM, **{field: value}))
