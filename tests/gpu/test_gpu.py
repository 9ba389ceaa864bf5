"""GPU tier: warploom's kernels on a real Hopper GPU against an fp32 torch reference.

Run by scripts/gpu.sh on the device machine. Every test has a watchdog: a hung kernel kills the process
(faulthandler) instead of freezing the run, so a hang fails loudly.
"""

from __future__ import annotations

import pytest
import torch
from operands import fp8_scales

import warploom
import warploom.api  # registers torch.ops.warploom.*, whichever of torch and warploom a session imported first

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU")

def scale_free_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2Σxy / Σ(x² + y²): 0 for equal tensors, insensitive to a common scale."""
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def poisoned(m: int, n: int, dtype: torch.dtype) -> None:
    # Fill the allocator's next block with NaN so an unwritten output element cannot pass.
    torch.full((m, n), float("nan"), dtype=dtype, device="cuda")


SHAPES = [(296, 520, 1024), (1, 4096, 4096), (4097, 264, 8192), (128, 256, 64), (1000, 1000, 72)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b_major", ["k", "n"])
def test_matmul(m: int, n: int, k: int, dtype: torch.dtype, b_major: str) -> None:
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if b_major == "k" else torch.randn(k, n, device="cuda",
                                                                                              dtype=dtype)
    poisoned(m, n, dtype)
    out = warploom.matmul(a, b)
    ref = a.float() @ b.float()
    assert out.dtype == dtype and out.shape == (m, n)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), ref, atol=2e-2 * k**0.5 / 8, rtol=2e-2)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_matmul_out_dtype(out_dtype: torch.dtype) -> None:
    a = torch.randn(333, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
    out = warploom.matmul(a, b, out_dtype=out_dtype)
    assert out.dtype == out_dtype
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=3e-2, rtol=2e-2)


def _fp8(m: int, n: int, k: int, a_dt=torch.float8_e4m3fn, b_dt=torch.float8_e4m3fn):
    a = (torch.randn(m, k, device="cuda") * 2).to(a_dt)
    b = (torch.randn(n, k, device="cuda") * 2).to(b_dt).t()  # column-major, as torch._scaled_mm wants
    return a, b


FP8_SHAPES = [(296, 528, 1024), (1, 4096, 4096), (4097, 272, 8192), (64, 128, 128)]


@pytest.mark.parametrize("m,n,k", FP8_SHAPES)
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast_accum", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_scaled_mm(m: int, n: int, k: int, recipe: str, fast_accum: bool, with_bias: bool) -> None:
    torch.manual_seed(m * 7 + n + k)
    a, b = _fp8(m, n, k)
    sa, sb = fp8_scales(m, n, recipe == "tensorwise")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if with_bias else None
    poisoned(m, n, torch.bfloat16)
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast_accum)
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert not out.isnan().any()
    assert scale_free_error(out, ref) < 1e-3
    # Same accuracy class as torch's own kernel for the same flag.
    theirs = torch._scaled_mm(a, b, sa.reshape(sa.shape if recipe == "rowwise" else ()),
                              sb.reshape(sb.shape if recipe == "rowwise" else ()), bias=bias,
                              out_dtype=torch.bfloat16, use_fast_accum=fast_accum)
    assert scale_free_error(out, ref) <= 2 * scale_free_error(theirs, ref) + 1e-6


def test_scaled_mm_e5m2_b() -> None:
    a, b = _fp8(300, 256, 512, b_dt=torch.float8_e5m2)
    one = torch.ones((), device="cuda")
    out = warploom.scaled_mm(a, b, one, one, use_fast_accum=True)
    assert scale_free_error(out, a.float() @ b.float()) < 1e-3


@pytest.mark.parametrize("which", ["a", "b_n_major", "both"])
def test_operands_expanded_along_their_outer_dim(which: str) -> None:
    """A stride-0 outer dimension (`row.expand(M, K)`: every row of A the same, or every row of an N-major B) is
    accepted by the checks and by TMA, whose descriptors take a zero stride; the result is the product of what
    the views show. (An inner stride of 0 is refused before launch: tests/unit/test_bad_input.py.)"""
    torch.manual_seed(7)
    m, n, k = 300, 272, 528  # (fp8 needs K and N multiples of 16)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if which in ("a", "both"):
        a = torch.randn(1, k, device="cuda", dtype=torch.bfloat16).expand(m, k)
    if which in ("b_n_major", "both"):
        b = torch.randn(1, n, device="cuda", dtype=torch.bfloat16).expand(k, n)
    poisoned(m, n, torch.bfloat16)
    out = warploom.matmul(a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)
    fa = (torch.randn(1, k, device="cuda") * 2).to(torch.float8_e4m3fn).expand(m, k)
    fb = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    got = warploom.scaled_mm(fa, fb, sa, sb, use_fast_accum=True)
    assert scale_free_error(got, (fa.float() @ fb.float()) * sa * sb) < 1e-3


def test_persistent_many_tiles_per_cta() -> None:
    # 4096x4096 with 128x256 tiles: 512 tiles on 132 SMs, so CTAs run 3-4 tiles and the rings wrap.
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # a race would show as a moving error
        out = warploom.matmul(a, b)
        torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.25, rtol=2e-2)


def test_custom_op_opcheck() -> None:
    a = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.warploom.matmul.default, (a, b, None))
    a8, b8 = _fp8(128, 256, 128)
    sa, sb = torch.rand(128, 1, device="cuda"), torch.rand(1, 256, device="cuda")
    # opcheck's schema test compares inputs with arithmetic that torch has no fp8 CUDA kernel for
    # ("mul_cuda not implemented for Float8_e4m3fn"), so fp8 runs the fake-tensor and AOT tests only.
    torch.library.opcheck(torch.ops.warploom.scaled_mm.default, (a8, b8, sa, sb, None, torch.bfloat16, True),
                          test_utils=("test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic"))


def test_zero_sized() -> None:
    a = torch.randn(0, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    assert warploom.matmul(a, b).shape == (0, 128)
    a = torch.randn(16, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(0, 128, device="cuda", dtype=torch.bfloat16)
    out = warploom.matmul(a, b)
    assert out.shape == (16, 128) and bool((out == 0).all())


def test_bad_input_before_launch() -> None:
    a = torch.randn(64, 511, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(511, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(warploom.AlignmentError, match="a: .*16 bytes"):
        warploom.matmul(a, b)
    with pytest.raises(warploom.DeviceError, match="b"):
        warploom.matmul(torch.randn(64, 64, device="cuda", dtype=torch.bfloat16),
                        torch.randn(64, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("case", ["bf16_260x304x192", "bf16_260x300x192_out_fp32", "fp8_rowwise_bias_fast",
                                  "fp8_rowwise_bias_promoted"])
def test_simulator_matches_gpu(case: str) -> None:
    """The CPU simulator (Kernel.simulate on CPU copies) and the GPU compute the same GEMM: both match the
    fp32 reference, and each other as closely as their accumulators allow. (N = 300 needs an fp32 output:
    bf16 output rows must be 16-byte multiples.)"""
    torch.manual_seed(7)
    if case.startswith("bf16"):
        n = int(case.split("x")[1])
        out_dtype = torch.float32 if case.endswith("fp32") else torch.bfloat16
        a = torch.randn(260, 192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, 192, device="cuda", dtype=torch.bfloat16).t()
        args: tuple = (a, b)
        out = warploom.matmul(a, b, out_dtype=out_dtype)
        kernel = warploom.plan(a, b, out_dtype=out_dtype)
        ref = a.float() @ b.float()
    else:
        fast = case.endswith("fast")
        a, b = _fp8(130, 272, 256)
        sa, sb = torch.rand(130, 1, device="cuda") + 0.5, torch.rand(1, 272, device="cuda") + 0.5
        bias = torch.randn(272, device="cuda", dtype=torch.bfloat16)
        args = (a, b, sa, sb, bias)
        out = warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
        kernel = warploom.plan(a, b, sa, sb, bias=bias, use_fast_accum=fast)
        ref = (a.float() @ b.float()) * sa * sb + bias.float()
    sim = kernel.simulate(*(t.cpu() for t in args), record=False).raise_for_findings().output
    out, ref = out.cpu(), ref.cpu()
    assert sim.dtype == out.dtype and sim.shape == out.shape and not sim.isnan().any()
    assert scale_free_error(out, ref) < 1e-3 and scale_free_error(sim, ref) < 1e-3
    # bf16 and promoted fp8 accumulate in fp32 on both (only the summation order differs, then one rounding
    # to the output dtype); fast-accum fp8's tensor-core accumulator keeps fewer bits than the simulator's fp32.
    assert scale_free_error(out, sim) < (1e-3 if case.endswith("fast") else 1e-5)
    if case.startswith("bf16"):
        tol = dict(rtol=1e-5, atol=1e-4) if out.dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
        torch.testing.assert_close(out.float(), sim.float(), **tol)
