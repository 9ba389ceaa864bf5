"""The host half of a launch, on CPU: whatever the input checks accept, the launcher must be able to describe.

The kernel launch itself needs a GPU, but building the TMA descriptors and the argument list does not:
Triton's TensorDescriptor validates TMA's rules (16-byte base, 16-byte strides, unit inner stride) on any
tensor. With the JIT function replaced by a recorder, `Kernel.run` does everything but launch, so a gap
between `warploom.checks` and what TMA or the compiled kernel assumes shows up here instead of as an
AssertionError (or a misaligned-address fault) on the GPU.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch

from warploom import H100_SXM, AlignmentError, checks
from warploom.kernel import Kernel, build

BF16, FP32, E4 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


class RecordingJit:
    """Stands in for the @gluon.jit function: ``fn[grid](*args, **options)`` records instead of launching."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **options: Any) -> None:
            self.calls.append((grid, args, options))

        return launch


@pytest.fixture
def jit(monkeypatch: pytest.MonkeyPatch) -> RecordingJit:
    rec = RecordingJit()
    monkeypatch.setattr("warploom.runtime.launch.load", lambda text, name: rec)
    return rec


def offset_view(shape: tuple[int, ...], dtype: torch.dtype = FP32) -> torch.Tensor:
    """A contiguous CPU tensor of `shape` whose address is one element past a 16-byte boundary."""
    n = math.prod(shape)
    flat = torch.rand(n + 16).to(dtype) + 0.5
    off = next(i for i in range(1, 16) if (flat.data_ptr() + i * flat.element_size()) % 16)
    v = flat[off:off + n].view(shape)
    assert v.data_ptr() % 16
    return v


def host_launch(jit: RecordingJit, a: torch.Tensor, b: torch.Tensor, scale_a: Any = None, scale_b: Any = None,
                bias: Any = None) -> tuple[Kernel, dict[str, Any], tuple[int, ...]]:
    """Validate like the API, then run the kernel's host side. Returns the kernel, its named args and grid."""
    if scale_a is None:
        spec = checks.matmul_spec(a, b)
    else:
        spec = checks.scaled_mm_spec(a, b, scale_a, scale_b, bias, BF16, True)
    k = dataclasses.replace(build(spec, H100_SXM))  # a fresh Kernel: its cached launcher is ours alone
    out = torch.empty(spec.m, spec.n, dtype=spec.out_dtype.torch)
    assert k.run(a, b, out, scale_a, scale_b, bias) is out
    (grid, args, options) = jit.calls[-1]
    params = k.gluon.params
    assert len(args) == len(params)
    assert options["num_warps"] == k.gluon.num_warps and options["maxnreg"] == k.gluon.maxnreg
    assert options["enable_fp_fusion"] is True  # explicit, whatever Triton's default (backends/gluon_api.py)
    return k, dict(zip(params, args, strict=True)), grid


def check_args(k: Kernel, args: dict[str, Any], grid: tuple[int, ...], a: torch.Tensor, b: torch.Tensor) -> None:
    m, kk = a.shape
    n = b.shape[1]
    assert (args["M"], args["N"], args["K"]) == (m, n, kk)
    tiles = math.ceil(m / k.plan.bm) * math.ceil(n / k.plan.tile_n)
    assert grid == (min(k.plan.grid, tiles),)
    assert list(args["a_desc"].shape) == [m, kk]
    b_rows = [n, kk] if k.spec.b_layout.value == "k_major" else [kk, n]
    # (a fitted tile's B and C go by a descriptor per block width too: b_desc_w64, c_desc_w16, ...)
    b_descs = [v for name, v in args.items() if name == "b_desc" or name.startswith("b_desc_w")]
    c_descs = [v for name, v in args.items() if name == "c_desc" or name.startswith("c_desc_w")]
    assert b_descs and all(list(d.shape) == b_rows for d in b_descs)
    assert c_descs and all(list(d.shape) == [m, n] for d in c_descs)
    # cross.py compiles every *_ptr argument with tt.divisibility=16: the launcher must honour that promise.
    for name, v in args.items():
        if name.endswith("_ptr"):
            ptr = v.data_ptr()
            assert ptr % 16 == 0, f"{name} at {ptr:#x} is not 16-byte aligned"


# -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k,b_major", [(4096, 4096, 4096, "k"), (296, 520, 1000, "n"), (1, 64, 512, "n"),
                                           (1000, 1000, 72, "k")])
def test_matmul_host_side(jit: RecordingJit, m: int, n: int, k: int, b_major: str) -> None:
    a = torch.randn(m, k).to(BF16)
    b = torch.randn(k, n).to(BF16) if b_major == "n" else torch.randn(n, k).to(BF16).t()
    kern, args, grid = host_launch(jit, a, b)
    check_args(kern, args, grid, a, b)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_scaled_mm_host_side(jit: RecordingJit, recipe: str, with_bias: bool) -> None:
    m, n, k = 296, 528, 1024
    a, b = torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t()
    sa, sb = (torch.rand(()), torch.rand(())) if recipe == "tensorwise" else (torch.rand(m, 1), torch.rand(1, n))
    bias = torch.randn(n).to(BF16) if with_bias else None
    kern, args, grid = host_launch(jit, a, b, sa, sb, bias)
    check_args(kern, args, grid, a, b)
    assert ("bias_ptr" in args) == with_bias
    assert args["scale_a_ptr"].numel() == (1 if recipe == "tensorwise" else m)


@pytest.mark.parametrize("m,k", [(1, 511), (1, 100), (1, 9)])
def test_one_row_a_with_an_odd_k(jit: RecordingJit, m: int, k: int) -> None:
    # A (1, K) tensor's row stride is K elements; the checks skip it (a size-1 dimension's stride is never
    # used), but TensorDescriptor (like cuTensorMapEncodeTiled) requires every outer stride to be a multiple of
    # 16 bytes. Either the checks refuse it or the launcher must describe it (e.g. with a padded stride).
    a, b = torch.randn(m, k).to(BF16), torch.randn(k, 64).to(BF16)
    try:
        checks.matmul_spec(a, b)
    except AlignmentError:
        return
    kern, args, grid = host_launch(jit, a, b)
    check_args(kern, args, grid, a, b)


@pytest.mark.parametrize("which", ["scale_a", "scale_b", "bias", "tensorwise_scale"])
def test_misaligned_scale_or_bias_pointer(jit: RecordingJit, which: str) -> None:
    # Scale and bias pointers are not TMA operands, so nothing checks their addresses; yet the kernel is
    # compiled assuming 16-byte alignment for them. A view at an odd offset must be refused by the checks
    # or copied to an aligned buffer by the launcher.
    m, n, k = 128, 256, 128
    a, b = torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t()
    sa, sb, bias = torch.rand(m, 1), torch.rand(1, n), torch.randn(n).to(BF16)
    if which == "scale_a":
        sa = offset_view((m, 1))
    elif which == "scale_b":
        sb = offset_view((1, n))
    elif which == "bias":
        bias = offset_view((n,), BF16)
    else:
        sa, sb = offset_view(()), torch.rand(())
    try:
        checks.scaled_mm_spec(a, b, sa, sb, bias, BF16, True)
    except AlignmentError:
        return
    kern, args, grid = host_launch(jit, a, b, sa, sb, bias)
    check_args(kern, args, grid, a, b)


@pytest.mark.parametrize("m,n,k,split", [(130, 264, 1024, 4), (1, 4096, 512, 2)])
def test_split_k_host_side(jit: RecordingJit, m: int, n: int, k: int, split: int) -> None:
    """Split-K: the main kernel gets a (split * Mp, N) fp32 workspace descriptor and a grid over work units; the
    reduction kernel then gets the workspace, C and its strides, M, N and Mp."""
    from warploom.planner import plan_schedule

    a, b = torch.randn(m, k).to(BF16), torch.randn(k, n).to(BF16)
    spec = checks.matmul_spec(a, b)
    kern = dataclasses.replace(build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=64, bn=128, split_k=split)))
    out = torch.empty(m, n, dtype=BF16)
    assert kern.run(a, b, out) is out
    (grid, args, _), (rgrid, rargs, ropts) = jit.calls
    named = dict(zip(kern.gluon.params, args, strict=True))
    mp = math.ceil(m / 64) * 64
    ws = named["workspace_desc"]
    assert list(ws.shape) == [split * mp, n] and ws.base.dtype == FP32 and list(ws.block_shape) == [64, 128]
    assert "c_desc" not in named
    assert grid == (min(H100_SXM.sm_count, math.ceil(m / 64) * math.ceil(n / 128) * split),)
    assert rargs[0] is ws.base and rargs[1] is out and rargs[2:] == (out.stride(0), out.stride(1), m, n, mp)
    # (flat over C where N is a multiple of 16, else 16 x 64 blocks: 264 is not, 4096 is)
    blocks = math.ceil(m * n / 1024) if n % 16 == 0 else math.ceil(m / 16) * math.ceil(n / 64)
    # (the reduce follows its GEMM, which lets it launch early: launched dependently, passes/launch.py)
    assert rgrid == (blocks,) and ropts == {"num_warps": 4, "enable_fp_fusion": True, "launch_pdl": True}


def test_split_k_kernel_refuses_another_k(jit: RecordingJit) -> None:
    from warploom.errors import ShapeError
    from warploom.planner import plan_schedule

    a, b = torch.randn(16, 640).to(BF16), torch.randn(640, 256).to(BF16)
    spec = checks.matmul_spec(a, b)
    kern = dataclasses.replace(build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=64, bn=128, split_k=5)))
    a2, b2 = torch.randn(16, 704).to(BF16), torch.randn(704, 256).to(BF16)  # 11 k-blocks
    with pytest.raises(ShapeError, match="split into 5 equal ranges"):
        kern.run(a2, b2, torch.empty(16, 256, dtype=BF16))
    assert not jit.calls  # refused before any launch


def _meta_specs() -> list[tuple[str, Any]]:
    """(id, (a, b, scale_a, scale_b, bias, operands)) on CPU: plain, K-major B, rowwise + bias, blockwise, MX, fused."""
    a, bn = torch.randn(256, 512).to(BF16), torch.randn(512, 384).to(BF16)
    f8a, f8b = torch.randn(256, 512).to(E4), torch.randn(384, 512).to(E4).t()
    rows, cols, bias = torch.rand(256, 1) + 0.5, torch.rand(1, 384) + 0.5, torch.randn(384).to(BF16)
    bw_a, bw_b = (torch.rand(4, 256) + 0.5).t(), torch.rand(4, 3) + 0.5
    e8 = torch.float8_e8m0fnu
    mx_a = torch.randint(120, 130, (256, 16), dtype=torch.uint8).view(e8)
    mx_b = torch.randint(120, 130, (384, 16), dtype=torch.uint8).view(e8)
    return [("bf16", (a, bn, None, None, None, None)),
            ("bf16_kmajor", (a, torch.randn(384, 512).to(BF16).t(), None, None, None, None)),
            ("fp8_rowwise_bias", (f8a, f8b, rows, cols, bias, None)),
            ("blockwise", (f8a, f8b, bw_a, bw_b, None, None)),
            ("mx", (f8a, f8b, mx_a, mx_b, None, None)),
            ("fused", (a, bn, None, None, None, {"r": torch.randn(256, 384).to(BF16)})),
            # Rule 18's swapped kernels: A's descriptor reads B (by its base), B's reads A, the scales trade places.
            ("swap_bf16", (a[:16], torch.randn(384, 512).to(BF16).t(), None, None, None, None)),
            ("swap_fp8_rowwise", (f8a[:24], f8b, rows[:24], cols, None, None)),
            ("swap_fp8_rowwise_bias", (f8a[:8], f8b, rows[:8], cols, bias, None)),
            # ... and with a fused epilogue whose (M, 1) operand is a row of C^T (read through its pointer).
            ("swap_fused", (a[:16], torch.randn(384, 512).to(BF16).t(), None, None, None,
                            {"r": torch.randn(16, 1).to(BF16)}))]


@pytest.mark.parametrize("case", _meta_specs(), ids=lambda c: c[0])
def test_positional_arguments_are_what_the_getters_read(jit: RecordingJit, case: tuple[str, Any]) -> None:
    """A bound launch fills a positional argument from the call's (a, b, out, scale_a, scale_b, bias) directly
    (`Launcher._positional`) instead of through its getter: for every parameter so marked the two must agree, a
    descriptor's by its base tensor. Epilogue operands and MX's byte views are never positional."""
    from warploom.api import plan
    from warploom.runtime.bound import Call
    from warploom.runtime.direct import aligned_copy

    name, (a, b, sa, sb, bias, operands) = case
    fused = {"epilogue": lambda acc, r: acc + r, **operands} if operands else {}
    if sa is None:
        kern = plan(a, b, **fused)
    else:
        kern = plan(a, b, sa, sb, bias=bias, use_fast_accum=name != "blockwise" and name != "mx")
    launcher = dataclasses.replace(kern).launcher
    out = torch.empty(a.shape[0], b.shape[1], dtype=kern.spec.out_dtype.torch)
    call = Call(a, b, out, sa, sb, bias, operands or {}, ())
    x = (a, b, out, sa, sb, bias)
    params = kern.gluon.params
    assert {params[i] for i in launcher._positional} >= {"a_desc", "b_desc", "c_desc"}
    for i, (at, aligned) in launcher._positional.items():
        read = launcher._bases.get(i, launcher._args[i])(call)
        assert read is x[at] or (aligned and read is aligned_copy(x[at])), params[i]
    named = {params[i] for i in launcher._positional}
    ints = {"M", "N", "K", "sa_stride_m", "sa_stride_k", "sb_stride_k", "sb_stride_n"}
    if name in ("mx", "fused", "swap_fused"):
        assert not named & {"sa_ptr", "sb_ptr", "scale_a_ptr", "scale_b_ptr", "bias_ptr", "r_ptr", "r_desc"}
    else:  # every tensor argument positional: a Bound of this kernel takes the fast path
        assert set(params) - ints == named, set(params) - ints - named
    if name == "fp8_rowwise_bias":
        assert {"scale_a_ptr", "scale_b_ptr", "bias_ptr"} <= named
    if name == "blockwise":
        assert {"sa_ptr", "sb_ptr"} <= named
    if name.startswith("swap"):
        assert kern.plan.swap_ab
        where = {params[i]: at for i, (at, _) in launcher._positional.items()}
        assert (where["a_desc"], where["b_desc"], where["c_desc"]) == (1, 0, 2)
    if name.startswith("swap_fp8"):
        assert (where["scale_a_ptr"], where["scale_b_ptr"]) == (4, 3)
    if name == "swap_fp8_rowwise_bias":
        assert where["bias_ptr"] == 5


@pytest.mark.parametrize("m,n,k,recipe", [(1, 4096, 512, None), (16, 520, 1000, None), (5, 208, 1024, "tensorwise"),
                                          (16, 336, 256, "rowwise")])
def test_swapped_decode_host_side(jit: RecordingJit, m: int, n: int, k: int, recipe: str | None) -> None:
    # Rule 18's kernel runs C^T = B^T A^T: its A descriptor is over B's (N, K) rows, its B's over A's (M, K) rows,
    # its output descriptor over C itself (with (BN, BM) boxes), M and N trade places, and so do rowwise scales.
    if recipe is None:
        a, b = torch.randn(m, k).to(BF16), torch.randn(n, k).to(BF16).t()
        sa = sb = None
    else:
        a, b = torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t()
        sa, sb = (torch.rand(()), torch.rand(())) if recipe == "tensorwise" else (torch.rand(m, 1), torch.rand(1, n))
    kern, args, grid = host_launch(jit, a, b, sa, sb)
    assert kern.plan.swap_ab and kern.module.tiling.swap_ab and (kern.plan.bm, kern.plan.bn) == (64, 16)
    assert (args["M"], args["N"], args["K"]) == (n, m, k)
    assert grid == (min(kern.plan.grid, math.ceil(n / 64) * math.ceil(m / 16)),)
    assert list(args["a_desc"].shape) == [n, k] and args["a_desc"].base.data_ptr() == b.data_ptr()
    assert list(args["b_desc"].shape) == [m, k] and args["b_desc"].base.data_ptr() == a.data_ptr()
    assert list(args["c_desc"].shape) == [m, n] and list(args["c_desc"].block_shape) == [16, 64]
    if recipe is not None:
        assert args["scale_a_ptr"].data_ptr() == sb.data_ptr() and args["scale_b_ptr"].data_ptr() == sa.data_ptr()


@pytest.mark.parametrize("mode", ["auto", "1", "0"])
def test_which_launches_are_dependent(jit: RecordingJit, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Programmatic dependent launch (passes/launch.py): the kernels that always follow another kernel of the same
    call (a split-K tail's ranged kernel and its reduce, after the whole waves) carry `launch_pdl` unless
    WARPLOOM_PDL=0; the call's first kernel only with WARPLOOM_PDL=1."""
    from warploom.planner import plan_schedule

    monkeypatch.setenv("WARPLOOM_PDL", mode)
    m, n, k = 2048, 2048, 4096  # 16 x 16 tiles of 128x128: a wave of 132 CTAs and a tail of 124 tiles
    a, b = torch.randn(m, k).to(BF16), torch.randn(k, n).to(BF16)
    spec = checks.matmul_spec(a, b)
    kern = dataclasses.replace(build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128, tail_split=4)))
    assert kern.tail is not None and kern.module.dependent_launch and kern.tail.dependent_launch
    assert kern.run(a, b, torch.empty(m, n, dtype=BF16)) is not None
    pdl = [opts.get("launch_pdl", False) for _, _, opts in jit.calls]
    first, later = mode == "1", mode != "0"
    assert pdl == [first, later, later], (mode, pdl)  # the whole waves, the tail's units, the tail's reduce
