"""The grouped custom ops, torch.ops.warploom.grouped_mm and .scaled_grouped_mm, without a GPU: opcheck on meta and
CPU tensors (the real implementation runs the simulator: tiny problems), fake tensors, and a torch.compile trace.

As in test_custom_ops.py, test_schema is left out for fp8 on CPU (its SchemaCheckMode compares fp8 tensors with a
multiply torch's CPU backend lacks).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from traced import compile_keeping_graphs  # (pytest puts this folder on sys.path)

import warploom
import warploom.api  # noqa: F401  (registers torch.ops.warploom.*, whichever of torch and warploom came first)

BF16, FP32, E4, I32 = torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.int32
UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
GROUPED = torch.ops.warploom.grouped_mm.default
SCALED = torch.ops.warploom.scaled_grouped_mm.default


def _offs(device: str, *ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=I32).to(device)


def m_grouped(device: str, out_dtype: torch.dtype | None = None) -> tuple:
    """a (total_M, K) with offs over b (G, K, N): (total_M, N)."""
    a, b = torch.randn(80, 64).to(BF16), torch.randn(3, 64, 128).to(BF16)
    return (a.to(device), b.to(device), _offs(device, 16, 16, 72), None, out_dtype)


def masked(device: str) -> tuple:
    """a (G, M_max, K) with masked_m: (G, M_max, N)."""
    a, b = torch.randn(2, 32, 64).to(BF16), torch.randn(2, 64, 128).to(BF16)
    return (a.to(device), b.to(device), None, _offs(device, 32, 5), None)


def batched(device: str) -> tuple:
    """a (G, M, K) x b (G, K, N), every row: (G, M, N)."""
    a, b = torch.randn(2, 24, 64).to(BF16), torch.randn(2, 64, 128).to(BF16).transpose(-2, -1).contiguous()
    return (a.to(device), b.transpose(-2, -1).to(device), None, None, FP32)


def k_grouped(device: str) -> tuple:
    """a (M, total_K) x b (total_K, N) column-major with offs over K: (G, M, N)."""
    a, b = torch.randn(32, 96).to(BF16), torch.randn(128, 96).to(BF16)
    return (a.to(device), b.to(device).t(), _offs(device, 40, 40, 96), None, None)


def _fp8(*shape: int) -> torch.Tensor:
    return (torch.randn(*shape) * 0.5).to(E4)


def rowwise(device: str, fast: bool = False) -> tuple:
    """fp8 M-grouped rowwise: scale_a (total_M,), scale_b (G, N)."""
    a, b = _fp8(80, 64), _fp8(3, 128, 64).transpose(-2, -1)
    sa, sb = torch.rand(80) + 0.5, torch.rand(3, 128) + 0.5
    return tuple(t.to(device) for t in (a, b, sa, sb, _offs("cpu", 16, 40, 80))) + (None, BF16, fast)


def blockwise(device: str) -> tuple:
    """fp8 M-grouped blockwise: scale_a (total_M, ceil(K/128)), scale_b (G, ceil(K/128), ceil(N/128))."""
    a, b = _fp8(64, 256), _fp8(2, 128, 256).transpose(-2, -1)
    sa, sb = torch.rand(64, 2) + 0.5, torch.rand(2, 2, 1) + 0.5
    return tuple(t.to(device) for t in (a, b, sa, sb, _offs("cpu", 24, 64))) + (None, BF16, False)


def masked_blockwise(device: str) -> tuple:
    """fp8 masked blockwise: a (G, M_max, K), scale_a (G, M_max, ceil(K/128))."""
    a, b = _fp8(2, 32, 128), _fp8(2, 128, 128).transpose(-2, -1)
    sa, sb = torch.rand(2, 32, 1) + 0.5, torch.rand(2, 1, 1) + 0.5
    return tuple(t.to(device) for t in (a, b, sa, sb)) + (None, _offs(device, 7, 32), BF16, False)


def k_grouped_blockwise(device: str) -> tuple:
    """fp8 K-grouped blockwise: scale_a (M, ceil(total_K/128)), scale_b (ceil(total_K/128), ceil(N/128))."""
    a, b = _fp8(32, 256), _fp8(128, 256).t()
    sa, sb = torch.rand(32, 2) + 0.5, torch.rand(2, 1) + 0.5
    return tuple(t.to(device) for t in (a, b, sa, sb, _offs("cpu", 128, 256))) + (None, BF16, False)


def k_grouped_rowwise(device: str) -> tuple:
    """fp8 K-grouped rowwise: torch's scale_a (G * M,) and scale_b (G * N,)."""
    a, b = _fp8(32, 96), _fp8(128, 96).t()
    sa, sb = torch.rand(2 * 32) + 0.5, torch.rand(2 * 128) + 0.5
    return tuple(t.to(device) for t in (a, b, sa, sb, _offs("cpu", 40, 96))) + (None, BF16, False)


BF16_CASES: list[Callable[[str], tuple]] = [m_grouped, masked, batched, k_grouped]
FP8_CASES: list[Callable[[str], tuple]] = [rowwise, blockwise, masked_blockwise, k_grouped_blockwise,
                                           k_grouped_rowwise]


@pytest.mark.parametrize("util", UTILS)
@pytest.mark.parametrize("case", BF16_CASES + FP8_CASES, ids=lambda f: f.__name__)
def test_opcheck_on_meta(case: Callable[[str], tuple], util: str) -> None:
    op = GROUPED if case in BF16_CASES else SCALED
    assert torch.library.opcheck(op, case("meta"), test_utils=util) == {util: "SUCCESS"}


@pytest.mark.parametrize("util", UTILS)
@pytest.mark.parametrize("case", BF16_CASES, ids=lambda f: f.__name__)
def test_opcheck_grouped_mm_on_cpu(case: Callable[[str], tuple], util: str) -> None:
    torch.manual_seed(0)
    assert torch.library.opcheck(GROUPED, case("cpu"), test_utils=util) == {util: "SUCCESS"}


@pytest.mark.parametrize("util", [u for u in UTILS if u != "test_schema"])
@pytest.mark.parametrize("case", FP8_CASES, ids=lambda f: f.__name__)
def test_opcheck_scaled_grouped_mm_on_cpu(case: Callable[[str], tuple], util: str) -> None:
    torch.manual_seed(0)
    assert torch.library.opcheck(SCALED, case("cpu"), test_utils=util) == {util: "SUCCESS"}


def _public(case: Callable[[str], tuple], device: str, fake: bool = False) -> Any:
    """The public function's call for a case's op arguments; `fake`: as fake tensors of the same sizes and strides
    on `device` (under FakeTensorMode, which makes fake CUDA tensors without a GPU)."""
    args = case("cpu" if fake else device)
    if fake:
        args = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
                     if isinstance(t, torch.Tensor) else t for t in args)
    if case in BF16_CASES:
        a, b, offs, masked_m, out_dtype = args
        return warploom.grouped_mm(a, b, offs, masked_m=masked_m, out_dtype=out_dtype)
    a, b, sa, sb, offs, masked_m, out_dtype, fast = args
    return warploom.scaled_grouped_mm(a, b, sa, sb, offs, masked_m=masked_m, out_dtype=out_dtype,
                                      use_fast_accum=fast)


SHAPES = {m_grouped: ((80, 128), BF16), masked: ((2, 32, 128), BF16), batched: ((2, 24, 128), FP32),
          k_grouped: ((3, 32, 128), BF16), rowwise: ((80, 128), BF16), blockwise: ((64, 128), BF16),
          masked_blockwise: ((2, 32, 128), BF16), k_grouped_blockwise: ((2, 32, 128), BF16),
          k_grouped_rowwise: ((2, 32, 128), BF16)}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("case", BF16_CASES + FP8_CASES, ids=lambda f: f.__name__)
def test_fake_tensors_get_the_result_shape_and_never_touch_storage(case: Callable[[str], tuple],
                                                                   device: str) -> None:
    # An MoE model run under FakeTensorMode (torch.compile, export, shape propagation): fake CUDA tensors need no GPU,
    # and warploom must neither read a data pointer (torch warns that this "will error") nor read offs' values.
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with FakeTensorMode():
                out = _public(case, device, fake=True)
    finally:
        torch.set_warn_always(False)
    assert isinstance(out, FakeTensor) and out.device.type == device
    assert (tuple(out.shape), out.dtype) == SHAPES[case]


@pytest.mark.parametrize("case", BF16_CASES + FP8_CASES, ids=lambda f: f.__name__)
def test_meta_tensors_get_meta_results(case: Callable[[str], tuple]) -> None:
    out = _public(case, "meta")
    assert (out.device.type, tuple(out.shape), out.dtype) == ("meta", *SHAPES[case])


def test_bad_input_on_meta_is_refused_naming_the_argument() -> None:
    a, b, offs, _, _ = m_grouped("meta")
    with pytest.raises(warploom.DTypeError, match="^offs: "):
        warploom.grouped_mm(a, b, offs.long())
    with pytest.raises(warploom.ShapeError, match="^b: "):
        warploom.grouped_mm(a, b[:, :32], offs)
    with pytest.raises(warploom.DTypeError, match="^out_dtype: "):
        warploom.grouped_mm(a, b, offs, out_dtype="bf16")  # type: ignore[arg-type]
    with pytest.raises(warploom.ArgumentTypeError, match="^a: "):
        warploom.grouped_mm(None, b, offs)  # type: ignore[arg-type]
    with pytest.raises(warploom.InputError, match="^offs: "):
        warploom.grouped_mm(a, b, [16, 16, 72])  # type: ignore[arg-type]
    with pytest.raises(warploom.DTypeError, match="^b: "):
        torch.ops.warploom.grouped_mm(a, b.half(), offs)
    sa8, sb8, offs8 = rowwise("meta")[2:5]
    a8, b8 = rowwise("meta")[:2]
    with pytest.raises(warploom.ScaleError, match="^scale_b: "):
        warploom.scaled_grouped_mm(a8, b8, sa8, sb8[:, :64], offs8)
    with pytest.raises(warploom.ArgumentTypeError, match="^use_fast_accum: "):
        warploom.scaled_grouped_mm(a8, b8, sa8, sb8, offs8, use_fast_accum="no")  # type: ignore[arg-type]
    with pytest.raises(warploom.ArgumentTypeError, match="^scale_a: "):
        warploom.scaled_grouped_mm(a8, b8, None, sb8, offs8)  # type: ignore[arg-type]
    with pytest.raises(warploom.DTypeError, match="^out_dtype: "):
        torch.ops.warploom.scaled_grouped_mm(a8, b8, sa8, sb8, offs8, None, FP32, False)


def _moe(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = warploom.grouped_mm(x, w, offs)
    return warploom.grouped_mm(torch.relu(h), w2, offs, out_dtype=FP32)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_traces_grouped_mm_and_matches_eager(dynamic: bool) -> None:
    torch.manual_seed(0)
    x, w, offs = m_grouped("cpu")[:3]
    w2 = torch.randn(3, 128, 64).to(BF16)
    out, graphs = compile_keeping_graphs(_moe, x, w, offs, w2, dynamic=dynamic)
    (gm,) = graphs
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count(torch.ops.warploom.grouped_mm) == 2, calls
    assert out.dtype == FP32 and out.shape == (80, 64)
    assert torch.equal(out, _moe(x, w, offs, w2))


def test_compile_fullgraph_traces_scaled_grouped_mm() -> None:
    torch.manual_seed(0)
    a, b, sa, sb, offs, _, _, _ = blockwise("cpu")
    f = torch.compile(lambda *t: warploom.scaled_grouped_mm(*t), backend="aot_eager", fullgraph=True)
    torch._dynamo.reset()
    try:
        out = f(a, b, sa, sb, offs)
    finally:
        torch._dynamo.reset()
    assert torch.equal(out, warploom.scaled_grouped_mm(a, b, sa, sb, offs))


def _ref_grads(x: torch.Tensor, w: torch.Tensor, bounds: list[int] | None, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """fp32 gradients of sum(grouped product * g): M-grouped over `bounds` (rows past the last bound in no group),
    or batched (bounds None)."""
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    if bounds is None:
        y = xr @ wr
    else:
        y = torch.zeros(x.shape[0], w.shape[-1])
        for e in range(w.shape[0]):
            y[bounds[e]:bounds[e + 1]] = xr[bounds[e]:bounds[e + 1]] @ wr[e]
    (y * g).sum().backward()
    assert xr.grad is not None and wr.grad is not None
    return xr.grad, wr.grad


@pytest.mark.parametrize("layout", ["m_grouped", "batched"])
def test_backward_through_warploom_kernels_against_fp32(layout: str) -> None:
    """grouped_mm's autograd: grad_a by grouped_mm(grad, b^T) (rows of no group zero), grad_b by the K-grouped
    weight-gradient kernel (M-grouped) or the 3-D product (batched), on the simulator, against fp32 autograd of the
    per-expert loop; b passed as a transposed view, as a model's (experts, N, K) weights are."""
    torch.manual_seed(1)
    if layout == "m_grouped":  # (53 rows: a^T's rows are padded to 16 bytes for the weight gradient's kernel)
        x = torch.randn(53, 64).to(BF16).requires_grad_()
        offs, bounds = torch.tensor([10, 10, 40], dtype=torch.int32), [0, 10, 10, 40]
    else:
        x = torch.randn(3, 21, 64).to(BF16).requires_grad_()  # (21 rows: padded for the weight gradient too)
        offs, bounds = None, None
    w = torch.randn(3, 48, 64).to(BF16).requires_grad_()
    g = torch.randn(*x.shape[:-1], 48)
    if layout == "m_grouped":
        g[40:] = 0  # (rows of no group: the forward leaves them unwritten, their gradient is zero either way)
    y = warploom.grouped_mm(x, w.transpose(-2, -1), offs)
    (y.float() * g).sum().backward()
    rx, rw = _ref_grads(x, w.transpose(-2, -1), bounds, g)
    assert x.grad is not None and w.grad is not None and x.grad.dtype == BF16
    torch.testing.assert_close(x.grad.float(), rx, atol=0.15, rtol=0.02)
    torch.testing.assert_close(w.grad.float(), rw.transpose(-2, -1), atol=0.15, rtol=0.02)
    if layout == "m_grouped":
        assert torch.equal(x.grad[40:], torch.zeros_like(x.grad[40:]))


def test_backward_of_a_masked_call_is_refused_by_name() -> None:
    x = torch.randn(3, 16, 64).to(BF16).requires_grad_()
    w = torch.randn(3, 64, 48).to(BF16)
    y = warploom.grouped_mm(x, w, masked_m=torch.tensor([16, 0, 5], dtype=torch.int32))
    with pytest.raises(warploom.UnsupportedError, match=r"backward of a masked grouped_mm: expected an M-grouped"):
        y.float().sum().backward()
