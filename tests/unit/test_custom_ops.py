"""The torch.library custom ops without a GPU: opcheck, fake tensors, and tracing.

What torch.library.opcheck can cover here: every utility (test_schema, test_autograd_registration,
test_faketensor, test_aot_dispatch_dynamic) on meta tensors, where the fake implementation answers; and on
CPU tensors, where the real implementation runs the planned kernel on the simulator (small problems; see
tests/sim/test_cpu_tensors.py) or, for zero-sized ones, needs no kernel. test_schema cannot run scaled_mm
on CPU: its SchemaCheckMode compares fp8 tensors with a multiply torch's CPU backend lacks, so that
pairing is left out.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from traced import compile_keeping_graphs  # (pytest puts this folder on sys.path)

import warploom
import warploom.api  # registers torch.ops.warploom.*, whichever of torch and warploom a session imported first
from warploom.device import B200
from warploom.dtypes import DType
from warploom.reference import Inputs, make_inputs, reference
from warploom.spec import Accumulation, BLayout, GemmSpec, ScaleLayout, ScaleRecipe

BF16, FP32, E4 = torch.bfloat16, torch.float32, torch.float8_e4m3fn
UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
MATMUL = torch.ops.warploom.matmul.default
SCALED_MM = torch.ops.warploom.scaled_mm.default


def mm_args(m: int, n: int, k: int, device: str, b_major: str = "n", out_dtype: torch.dtype | None = None) -> tuple:
    a = torch.randn(m, k, device=device).to(BF16)
    b = torch.randn(k, n, device=device).to(BF16) if b_major == "n" else torch.randn(n, k, device=device).to(BF16).t()
    return (a, b, out_dtype)


def fp8_args(m: int, n: int, k: int, device: str, recipe: str = "rowwise", bias: bool = True,
             fast: bool = False) -> tuple:
    a = torch.randn(m, k, device=device).to(E4)
    b = torch.randn(n, k, device=device).to(E4).t()
    if recipe == "rowwise":
        sa, sb = torch.rand(m, 1, device=device) + 0.5, torch.rand(1, n, device=device) + 0.5
    else:
        sa, sb = torch.tensor(2.0, device=device), torch.tensor(0.5, device=device)
    bias_t = torch.randn(n, device=device).to(BF16) if bias else None
    return (a, b, sa, sb, bias_t, BF16, fast)


META_CASES: list[tuple[Any, tuple]] = [
    (MATMUL, mm_args(256, 256, 128, "meta")),
    (MATMUL, mm_args(296, 520, 1000, "meta", b_major="k", out_dtype=FP32)),
    (SCALED_MM, fp8_args(256, 256, 128, "meta")),
    (SCALED_MM, fp8_args(64, 512, 256, "meta", recipe="tensorwise", bias=False, fast=True)),
]


@pytest.mark.parametrize("util", UTILS)
@pytest.mark.parametrize("case", range(len(META_CASES)))
def test_opcheck_on_meta(case: int, util: str) -> None:
    op, args = META_CASES[case]
    assert torch.library.opcheck(op, args, test_utils=util) == {util: "SUCCESS"}


# Zero-sized problems (no kernel) and small ones, ragged against the tiles (the simulator runs them).
CPU_SIZES = [(0, 256, 128), (32, 0, 128), (32, 256, 0), (130, 208, 96)]


@pytest.mark.parametrize("util", UTILS)
@pytest.mark.parametrize("m,n,k", CPU_SIZES)
def test_opcheck_matmul_on_cpu(m: int, n: int, k: int, util: str) -> None:
    assert torch.library.opcheck(MATMUL, mm_args(m, n, k, "cpu"), test_utils=util) == {util: "SUCCESS"}


@pytest.mark.parametrize("util", [u for u in UTILS if u != "test_schema"])
@pytest.mark.parametrize("m,n,k", CPU_SIZES)
def test_opcheck_scaled_mm_on_cpu(m: int, n: int, k: int, util: str) -> None:
    args = fp8_args(m, n, k, "cpu", recipe="tensorwise")
    assert torch.library.opcheck(SCALED_MM, args, test_utils=util) == {util: "SUCCESS"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fake_tensors_get_fake_results_and_never_touch_storage(device: str) -> None:
    # FakeTensorMode is how torch.compile, export and shape-propagation tools run ops. Fake CUDA tensors can
    # be made without a GPU; warploom must answer with a fake result and must not read a data pointer
    # (torch warns that doing so "will error") nor plan or launch a kernel.
    torch.set_warn_always(True)  # data_ptr's warning is TORCH_WARN_ONCE otherwise
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with FakeTensorMode():
                a = torch.empty(256, 128, dtype=BF16, device=device)
                b = torch.empty(128, 512, dtype=BF16, device=device)
                out = warploom.matmul(a, b)
                a8 = torch.empty(256, 128, dtype=E4, device=device)
                b8 = torch.empty(512, 128, dtype=E4, device=device).t()
                sa, sb = torch.empty(256, 1, device=device), torch.empty(1, 512, device=device)
                out8 = warploom.scaled_mm(a8, b8, sa, sb, out_dtype=FP32)
    finally:
        torch.set_warn_always(False)
    for o, dt in ((out, BF16), (out8, FP32)):
        assert isinstance(o, FakeTensor)
        assert o.shape == (256, 512) and o.dtype == dt and o.device.type == device


def test_fake_path_still_refuses_bad_dtypes_and_shapes() -> None:
    with FakeTensorMode():
        a = torch.empty(64, 64, dtype=BF16)
        with pytest.raises(warploom.DTypeError, match="^b: "):
            torch.ops.warploom.matmul(a, torch.empty(64, 64, dtype=torch.float16), None)
        with pytest.raises(warploom.ShapeError, match="^b: "):
            torch.ops.warploom.matmul(a, torch.empty(32, 64, dtype=BF16), None)


def test_export_with_dynamic_m_keeps_the_custom_op() -> None:
    class Lin(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return warploom.matmul(a, b, out_dtype=FP32)

    a, b = torch.randn(256, 128).to(BF16), torch.randn(128, 256).to(BF16)
    ep = torch.export.export(Lin(), (a, b), dynamic_shapes=({0: torch.export.Dim("m")}, None))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [MATMUL]
    (out,) = [n for n in ep.graph.nodes if n.op == "output"][0].args[0]
    assert out.meta["val"].dtype == FP32 and out.meta["val"].shape[1] == 256


def test_compile_dynamic_traces_through_the_fake_impl() -> None:
    # torch.compile traces with fake tensors (symbolic M) before the real CPU call runs on the simulator: the
    # result must be the eager one, not a tracing failure inside warploom's fake implementation.
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: warploom.matmul(a, b), dynamic=True, backend="aot_eager", fullgraph=True)
    a, b = torch.randn(256, 128).to(BF16), torch.randn(128, 256).to(BF16)
    assert torch.equal(f(a, b), warploom.matmul(a, b))
    # Zero-sized inputs run for real on CPU, through the compiled graph.
    out = f(torch.randn(0, 128).to(BF16), b)
    assert out.shape == (0, 256)
    # Above the simulator's limit the real call's error comes through the compiled graph.
    big = torch.randn(1024, 1024).to(BF16)
    with pytest.raises(warploom.DeviceError, match="^a: .*WARPLOOM_SIM_MAX_FLOPS"):
        f(big, big)
    torch._dynamo.reset()


# NVFP4 (sm_100a; CPU tensors run on the simulator, planned for a B200): the public API's pairs [block scales, global
# scale] reach the op as its scale_a_global and scale_b_global tensors.
def nvfp4_args(m: int, n: int, k: int, device: str, bias: bool = False) -> tuple:
    spec = GemmSpec(m, n, k, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.NVFP4,
                    Accumulation.PROMOTED, DType.BF16 if bias else None, scale_layout=ScaleLayout.BLOCKED)
    x = make_inputs(spec, m, n, k, seed=3)
    t = [None if v is None else v.to(device) for v in (x.a, x.b, x.scale_a, x.scale_b, x.bias, x.global_a,
                                                       x.global_b)]
    return (t[0], t[1], t[2], t[3], t[4], BF16, False, t[5], t[6])


@pytest.mark.parametrize("util", UTILS)
def test_opcheck_nvfp4_on_meta(util: str) -> None:
    args = nvfp4_args(200, 272, 320, "meta", bias=True)
    assert torch.library.opcheck(SCALED_MM, args, test_utils=util) == {util: "SUCCESS"}


@pytest.mark.parametrize("util", [u for u in UTILS if u != "test_schema"])
def test_opcheck_nvfp4_on_cpu(util: str) -> None:
    assert torch.library.opcheck(SCALED_MM, nvfp4_args(130, 144, 320, "cpu"), test_utils=util) == {util: "SUCCESS"}


def _nvfp4_call(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, ga: torch.Tensor, sb: torch.Tensor,
                gb: torch.Tensor) -> torch.Tensor:
    return warploom.scaled_mm(a, b, [sa, ga], [sb, gb], out_dtype=FP32)


def test_compile_nvfp4_traces_the_custom_op_without_graph_breaks() -> None:
    # fullgraph=True: a graph break (the pairs, or a list the op's schema refused) fails the compile. The graph holds
    # the op once, with the global scales as tensors; its result is the simulator's, against the dequantized product.
    a, b, sa, sb, _, _, _, ga, gb = nvfp4_args(130, 144, 320, "cpu")
    out, graphs = compile_keeping_graphs(_nvfp4_call, a, b, sa, ga, sb, gb)
    (gm,) = graphs
    calls = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert calls == [torch.ops.warploom.scaled_mm], calls
    x = Inputs(a, b, sa, sb, None, ga, gb)
    assert out.dtype == FP32 and out.shape == (130, 144)
    torch.testing.assert_close(out, reference(x), rtol=1e-4, atol=1e-3)
    assert torch.equal(out, warploom.scaled_mm(a, b, [sa, ga], [sb, gb], out_dtype=FP32))
    # (the global scales are read: the compiled call with global_a doubled gives twice the product)
    torch.testing.assert_close(_nvfp4_call(a, b, sa, ga * 2, sb, gb), out * 2, rtol=1e-5, atol=1e-4)


def test_nvfp4_fake_tensors_and_meta_trace() -> None:
    a, b, sa, sb, bias, _, _, ga, gb = nvfp4_args(200, 272, 320, "meta", bias=True)
    out = warploom.scaled_mm(a, b, [sa, ga], [sb, gb], bias=bias)
    assert (out.device.type, out.shape, out.dtype) == ("meta", (200, 272), BF16)
    with FakeTensorMode() as mode:
        fa, fb, fsa, fsb, fga, fgb = (mode.from_tensor(t) for t in (a, b, sa, sb, ga, gb))
        fout = warploom.scaled_mm(fa, fb, [fsa, fga], [fsb, fgb])
    assert isinstance(fout, FakeTensor) and fout.shape == (200, 272) and fout.dtype == BF16


def test_nvfp4_bad_input_is_refused_as_before_through_the_op_and_its_fake() -> None:
    a, b, sa, sb, _, _, _, ga, gb = nvfp4_args(64, 128, 256, "cpu")
    for device in ("cpu", "meta"):
        a, b, sa, sb, ga, gb = (t.to(device) for t in (a, b, sa, sb, ga, gb))
        # a missing global scale: named by its place in the pair
        with pytest.raises(warploom.ScaleError, match=r"^scale_b\[1\]: .*global scale"):
            warploom.scaled_mm(a, b, [sa, ga], sb)
        with pytest.raises(warploom.ScaleError, match=r"^scale_a\[1\]: .*global scale"):
            torch.ops.warploom.scaled_mm(a, b, sa, sb, None, BF16, False, None, gb)
        # a global scale of the wrong dtype, and a pair of three
        with pytest.raises(warploom.ScaleError, match=r"^scale_a\[1\]: .*torch.float32"):
            warploom.scaled_mm(a, b, [sa, ga.to(torch.float16)], [sb, gb])
        with pytest.raises(warploom.ScaleError, match=r"^scale_a: .*two tensors"):
            warploom.scaled_mm(a, b, [sa, ga, ga], [sb, gb])
        # a pair's part that is not a tensor
        with pytest.raises(warploom.ArgumentTypeError, match=r"^scale_a\[1\]: .*Python number"):
            warploom.scaled_mm(a, b, [sa, 1.0], [sb, gb])
        # a global scale with fp8 data
        a8 = torch.empty(64, 256, dtype=E4, device=device)
        b8 = torch.empty(128, 256, dtype=E4, device=device).t()
        one = torch.ones((), device=device)
        with pytest.raises(warploom.ScaleError, match=r"^scale_a: .*NVFP4's fp4 data only"):
            warploom.scaled_mm(a8, b8, [one, ga], one)
    # an fp8 output is a fused epilogue's, which NVFP4's kernel does not run: refused by out_dtype, not by an
    # epilogue the caller never passed
    a, b, sa, sb, _, _, _, ga, gb = nvfp4_args(64, 128, 256, "cpu")
    for out in (torch.float8_e4m3fn, torch.float8_e5m2):
        with pytest.raises(warploom.UnsupportedError, match=rf"^out_dtype={out} with NVFP4 scales.*Fix: pass "
                                                            "out_dtype=torch.bfloat16"):
            warploom.scaled_mm(a, b, [sa, ga], [sb, gb], out_dtype=out)
        with pytest.raises(warploom.UnsupportedError, match=rf"^out_dtype={out} with NVFP4 scales"):
            warploom.plan(a, b, [sa, ga], [sb, gb], out_dtype=out, device=B200)


def _fp8_out_call(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    return warploom.scaled_mm(a, b, sa, sb, out_dtype=torch.float8_e4m3fn)


def test_an_fp8_output_goes_through_the_custom_op() -> None:
    """A plain fp8 output (no epilogue, no scale_result) is the op's: torch.compile(fullgraph=True) holds the op once,
    with the eager call's bits, and fake tensors get the fake's fp8 result (it once went straight to the fused
    path, which broke the graph on a data-dependent check and ran the simulator on fake tensors)."""
    torch.manual_seed(2)
    a = torch.randn(96, 64).to(torch.float8_e4m3fn)
    b = torch.randn(80, 64).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(96, 1) + 0.5, torch.rand(1, 80) + 0.5
    out, graphs = compile_keeping_graphs(_fp8_out_call, a, b, sa, sb)
    (gm,) = graphs
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.ops.warploom.scaled_mm]
    eager_out = _fp8_out_call(a, b, sa, sb)
    assert out.dtype == torch.float8_e4m3fn and torch.equal(out.view(torch.uint8), eager_out.view(torch.uint8))
    from warploom.reference import relative_error

    assert relative_error(eager_out.float(), (a.float() @ b.float()) * sa * sb) < 1e-3
    with FakeTensorMode() as mode:
        fake = _fp8_out_call(*(mode.from_tensor(t) for t in (a, b, sa, sb)))
    assert isinstance(fake, FakeTensor) and fake.dtype == torch.float8_e4m3fn and fake.shape == (96, 80)
