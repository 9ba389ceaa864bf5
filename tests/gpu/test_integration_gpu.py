"""GPU tier: warploom inside CUDA graphs and torch.compile(fullgraph=True), as a model would use it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import warploom

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def _fp8(m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    return a, b, torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5


def test_cuda_graph_capture_replays_with_new_inputs() -> None:
    torch.manual_seed(0)
    a = torch.randn(300, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 264, device="cuda", dtype=torch.bfloat16)
    fa, fb, sa, sb = _fp8(300, 272, 256)
    res = torch.randn(300, 272, device="cuda", dtype=torch.bfloat16)

    def step() -> tuple[torch.Tensor, ...]:
        return (warploom.matmul(a, b),
                warploom.scaled_mm(fa, fb, sa, sb, use_fast_accum=True),
                warploom.scaled_mm(fa, fb, sa, sb, use_fast_accum=True,
                                   epilogue=lambda acc, residual: F.gelu(acc) + residual, residual=res))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = step()
    # New data in the same buffers: the replay must compute with it.
    a.copy_(torch.randn_like(a))
    fa.copy_(torch.randn(300, 256, device="cuda").to(torch.float8_e4m3fn))
    res.copy_(torch.randn_like(res))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), atol=0.1, rtol=2e-2)
    scaled = (fa.float() @ fb.float()) * sa * sb
    assert _err(outs[1], scaled) < 1e-3
    assert _err(outs[2], F.gelu(scaled) + res.float()) < 1e-3


class _Mlp(torch.nn.Module):
    """A bf16 projection and an fp8 rowwise projection, both through warploom's custom ops."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(h, d, device="cuda", dtype=torch.bfloat16) / d**0.5,
                                     requires_grad=False)
        self.w2 = torch.randn(d, h, device="cuda").to(torch.float8_e4m3fn)
        self.s2 = torch.rand(1, d, device="cuda") + 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(warploom.matmul(x, self.w1.t()))
        hq = h.to(torch.float8_e4m3fn)
        sx = torch.ones(x.shape[0], 1, device="cuda")
        return warploom.scaled_mm(hq, self.w2.t(), sx, self.s2, out_dtype=torch.bfloat16, use_fast_accum=True)


def test_torch_compile_fullgraph_over_the_custom_ops() -> None:
    torch.manual_seed(1)
    model = _Mlp(256, 512)
    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    got = compiled(x)
    assert got.shape == eager.shape and got.dtype == eager.dtype
    assert _err(got, eager) < 1e-3  # the same kernels, torch's own ops around them may fuse
    x2 = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    assert _err(compiled(x2), model(x2)) < 1e-3


def test_fast_launch_path_matches_the_jit_and_keeps_one_kernel_per_specialization() -> None:
    """After its first call a Launcher launches the compiled kernel directly (runtime/direct.py). Fresh tensors each
    call, on a side stream too; the JIT-dispatched launcher of the same kernel gives the same bits; the blockwise
    kernel's scale pointers at offsets of 4 bytes (not 16-byte aligned) are a different specialization."""
    from warploom.runtime.launch import Launcher

    torch.manual_seed(1)
    m, n, k = 300, 272, 512
    kern = warploom.plan(torch.empty(m, k, device="cuda", dtype=torch.bfloat16),
                         torch.empty(k, n, device="cuda", dtype=torch.bfloat16))
    fast, jit = Launcher(kern.module, kern.gluon, fast=True), Launcher(kern.module, kern.gluon, fast=False)
    side = torch.cuda.Stream()
    for i in range(4):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        got = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        want = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        with torch.cuda.stream(side if i % 2 else torch.cuda.current_stream()):
            fast(a, b, got)
            jit(a, b, want)
        torch.cuda.synchronize()
        torch.testing.assert_close(got.float(), a.float() @ b.float(), atol=0.1, rtol=0.02)
        assert torch.equal(got, want)
    assert len(fast._main._compiled) == 1

    fa, fb = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn), \
        (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    kb, nb = k // 128, -(-n // 128)
    bw = warploom.plan(fa, fb, torch.ones(m, kb, device="cuda"), torch.ones(kb, nb, device="cuda"))
    launcher = Launcher(bw.module, bw.gluon, fast=True)
    from warploom.reference import dequantized

    for offset in (0, 1, 0):  # 16-byte aligned, then 4 bytes past, then aligned again
        sa = (torch.rand(m * kb + 4, device="cuda") + 0.5)[offset:offset + m * kb].view(m, kb)
        sb = (torch.rand(kb * nb + 4, device="cuda") + 0.5)[offset:offset + kb * nb].view(kb, nb)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launcher(fa, fb, out, sa, sb)
        da, db = dequantized(fa, fb, sa, sb)
        assert _err(out.float(), da @ db) < 1e-3
    assert len(launcher._main._compiled) == 2


def test_split_k_reduction_launches_directly_with_the_jits_bits() -> None:
    """Split-K's reduction kernel takes the direct path too (runtime/launch.py): fresh tensors each call, the same
    bits as the launcher that sends both kernels through Triton's JIT."""
    from warploom.device import DeviceInfo
    from warploom.kernel import build
    from warploom.planner import plan_schedule
    from warploom.runtime.launch import Launcher

    torch.manual_seed(2)
    m, n, k = 64, 512, 2048
    probe = warploom.plan(torch.empty(m, k, device="cuda", dtype=torch.bfloat16),
                          torch.empty(k, n, device="cuda", dtype=torch.bfloat16))
    dev = DeviceInfo.current()
    kern = build(probe.spec, dev, plan_schedule(probe.spec, dev, split_k=4))
    assert kern.module.tiling.split_k == 4 and kern.gluon.reduce_kernel
    fast, jit = Launcher(kern.module, kern.gluon, fast=True), Launcher(kern.module, kern.gluon, fast=False)
    for _ in range(3):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        got = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        want = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        fast(a, b, got)
        jit(a, b, want)
        torch.cuda.synchronize()
        torch.testing.assert_close(got.float(), a.float() @ b.float(), atol=0.2, rtol=0.02)
        assert torch.equal(got, want)
    assert fast._reduce is not None and len(fast._reduce._compiled) == 1


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the checks an eager call runs: a remembered call runs none (warploom/eager.py)."""
    from warploom import checks

    seen: list[str] = []
    for name in ("matmul_spec_cached", "scaled_mm_spec_cached"):
        real = getattr(checks, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            seen.append(_name)
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(checks, name, counted)
    return seen


def test_eager_calls_remember_their_kernel_and_check_what_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """warploom/eager.py: repeated eager calls with fresh tensors of the same shapes, strides, dtypes and alignment
    skip the checks and reuse one remembered kernel, and stay correct; a tensor that differs in any of those is
    checked anew (a misaligned view is refused even after the aligned one was remembered)."""
    from warploom import AlignmentError, eager

    eager.forget()
    checked = _counting(monkeypatch)
    torch.manual_seed(3)
    m, n, k = 300, 272, 512
    for _ in range(3):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(warploom.matmul(a, b).float(), a.float() @ b.float(), atol=0.1, rtol=0.02)
    assert checked == ["matmul_spec_cached"] and len(eager._CALLS) == 1  # calls 2 and 3 were hits
    from warploom.errors import InputError

    with pytest.raises(InputError, match="resolve_neg"):  # a negated view of a remembered tensor: no hit
        warploom.matmul(torch._neg_view(a), b)
    flat = torch.randn(m * k + 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(AlignmentError):
        warploom.matmul(flat[1:1 + m * k].view(m, k), b)
    bt = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()  # same shape, K-major strides
    torch.testing.assert_close(warploom.matmul(a, bt).float(), a.float() @ bt.float(), atol=0.1, rtol=0.02)
    assert len(checked) == 4
    fa, fb, sa, sb = _fp8(m, n, k)
    for fast in (True, False, True, False):
        out = warploom.scaled_mm(fa, fb, sa, sb, use_fast_accum=fast)
        assert _err(out.float(), (fa.float() @ fb.float()) * sa * sb) < 1e-3
    assert checked.count("scaled_mm_spec_cached") == 2 and len(eager._CALLS) == 4
    kb, nb = k // 128, -(-n // 128)
    for _ in range(2):  # blockwise: scales go to the mainloop on a hit too
        bsa, bsb = torch.rand(kb, m, device="cuda").t() + 0.5, torch.rand(kb, nb, device="cuda") + 0.5
        from warploom.reference import dequantized

        da, db = dequantized(fa, fb, bsa, bsb)
        assert _err(warploom.scaled_mm(fa, fb, bsa, bsb).float(), da @ db) < 1e-3
    assert checked.count("scaled_mm_spec_cached") == 3
    # Every remembered call launched at least once, so each holds its bound launch (runtime/bound.Bound): the
    # hits above went through it.
    assert all(p.bound is not None for p in eager._CALLS.values())


def test_fused_eager_calls_are_remembered_and_follow_the_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fused call is remembered under its function's code and the values it reads (warploom/eager.py): fresh
    tensors reuse the kernel without checks, a closure value that changes gets its own; a matmul operand named
    `bias` reaches the kernel on a hit (it is not scaled_mm's bias)."""
    from warploom import eager

    eager.forget()
    checked = _counting(monkeypatch)
    torch.manual_seed(4)
    m, n, k = 300, 272, 256
    fa, fb, sa, sb = _fp8(m, n, k)
    for scale in (0.5, 0.5, 2.0, 2.0):
        res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        out = warploom.scaled_mm(fa, fb, sa, sb, use_fast_accum=True,
                                 epilogue=lambda acc, residual: acc * scale + residual, residual=res)  # noqa: B023
        ref = (fa.float() @ fb.float()) * sa * sb * scale + res.float()
        assert _err(out.float(), ref) < 1e-3
    assert len(eager._CALLS) == 2 and len(checked) == 2  # one per value of `scale` the function reads
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        out = warploom.matmul(a, b, epilogue=lambda acc, bias: acc + bias, bias=bias)
        torch.testing.assert_close(out.float(), a.float() @ b.float() + bias.float(), atol=0.1, rtol=0.02)
    assert len(checked) == 3
    assert all(p.bound is not None for p in eager._CALLS.values())  # bound since each one's first launch
