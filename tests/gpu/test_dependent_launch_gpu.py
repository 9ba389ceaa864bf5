"""Programmatic dependent launch on the GPU (ir.Module.dependent_launch, passes/launch.py): warploom's kernels start
while the grid before them finishes and wait for it before touching memory. The hazards that wait guards against,
made real: a chain where each GEMM reads the output the previous one wrote (read after write), and writes the buffer
the previous one read (write after read), back to back in a CUDA graph and on a stream, for whole tiles, split-K (a
reduce kernel after the GEMM) and stream-K, against an fp32 chain on the host's reference."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import relative_error
from warploom.runtime.launch import Launcher

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

# (M, width, plan overrides): each layer is (M, width) @ (width, width); tiny layers make the kernels short, so
# the next launch overlaps most of the previous kernel (the race window without the wait is widest)
CHAINS = {
    "whole": (64, 256, {}),
    "split_k": (64, 512, {"bm": 64, "bn": 64, "split_k": 4}),
    "stream_k": (256, 384, {"bn": 128, "stream_k": 2}),
    "ragged": (100, 200, {}),
}
LAYERS = 12


def _chain(m: int, width: int, kw: dict[str, object]) -> tuple[list[torch.Tensor], torch.Tensor, Kernel]:
    """The layer weights (scaled to keep the values O(1)), the input, and the planned kernel of one layer."""
    torch.manual_seed(m + width)
    ws = [(torch.randn(width, width, device="cuda") / width ** 0.5).bfloat16() for _ in range(LAYERS)]
    x = torch.randn(m, width, device="cuda").bfloat16()
    spec = warploom.plan(x, ws[0]).spec
    dev = DeviceInfo.current()
    return ws, x, build(spec, dev, plan_schedule(spec, dev, **kw))  # type: ignore[arg-type]


def _launcher(kern: Kernel, mode: str, monkeypatch: pytest.MonkeyPatch) -> Launcher:
    """A fresh launcher of `kern` built under WARPLOOM_PDL=`mode` (read when a launcher is built)."""
    with monkeypatch.context() as mp:
        mp.setenv("WARPLOOM_PDL", mode)
        return Launcher(kern.module, kern.gluon)


def _reference(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """The chain as the kernels round it: fp32 products, each layer's output rounded to bf16."""
    y = x
    for w in ws:
        y = (y.float() @ w.float()).bfloat16()
    return y.float()


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_a_chain_of_dependent_gemms_in_a_graph_is_right(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two buffers in turn: layer i reads buffer i % 2 and writes the other, which layer i - 1 read. Every kernel
    launched with PDL (WARPLOOM_PDL=1), captured as one graph (PDL edges between the launches), replayed over
    poisoned buffers with a new input each time."""
    m, width, kw = CHAINS[name]
    ws, x, kern = _chain(m, width, kw)
    assert kern.module.dependent_launch
    run = _launcher(kern, "1", monkeypatch)
    assert run._main._opts.get("launch_pdl") is True
    bufs = [torch.empty(m, width, device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    def forward() -> None:
        for i, w in enumerate(ws):
            run(bufs[i % 2], w, bufs[(i + 1) % 2])

    bufs[0].copy_(x)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # (warm: Triton compiles on the first call)
        forward()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()
    for trial in range(3):
        x = torch.randn(m, width, device="cuda").bfloat16() * (1 + trial)
        bufs[1].fill_(float("nan"))
        bufs[0].copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        out = bufs[LAYERS % 2].float()
        assert not out.isnan().any(), f"{name}: NaN left in the output (trial {trial})"
        err = relative_error(out, _reference(x, ws))
        assert err < 2e-3, f"{name}: error {err:.3e} against the fp32 chain (trial {trial})"


@pytest.mark.parametrize("name", ["whole", "split_k"])
def test_a_chain_on_a_stream_is_right(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same chain launched eagerly on a stream, every kernel with PDL (WARPLOOM_PDL=1)."""
    m, width, kw = CHAINS[name]
    ws, x, kern = _chain(m, width, kw)
    run = _launcher(kern, "1", monkeypatch)
    bufs = [x.clone(), torch.full((m, width), float("nan"), device="cuda", dtype=torch.bfloat16)]
    for i, w in enumerate(ws):
        run(bufs[i % 2], w, bufs[(i + 1) % 2])
    torch.cuda.synchronize()
    assert relative_error(bufs[LAYERS % 2].float(), _reference(x, ws)) < 2e-3


def test_which_kernels_are_launched_dependently(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default a call's second kernel (split-K's reduce) is launched with PDL and its first kernel plainly;
    WARPLOOM_PDL=1 launches both with it, WARPLOOM_PDL=0 neither; the results are the same bits."""
    m, width, kw = CHAINS["split_k"]
    ws, x, kern = _chain(m, width, kw)
    monkeypatch.delenv("WARPLOOM_PDL", raising=False)
    modes = {"auto": (False, True), "1": (True, True), "0": (False, False)}
    outs = []
    for mode, (first, second) in modes.items():
        run = Launcher(kern.module, kern.gluon) if mode == "auto" else _launcher(kern, mode, monkeypatch)
        assert run._reduce is not None
        assert (run._main._opts.get("launch_pdl", False), run._reduce._opts.get("launch_pdl", False)) == \
            (first, second), mode
        out = torch.full((m, width), float("nan"), device="cuda", dtype=torch.bfloat16)
        run(x, ws[0], out)
        outs.append(out)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert relative_error(outs[0].float(), x.float() @ ws[0].float()) < 1e-3
