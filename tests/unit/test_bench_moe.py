"""scripts/bench_moe.py's CPU-checkable parts: its arguments, the routing (offs as torch's grouped ops want them),
and the MoE layer at a tiny size on the CPU: torch's grouped ops against a per-expert loop, and warploom's grouped
GEMMs (the simulator) against torch's layer, bf16 and fp8 rowwise."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("bench_moe", ROOT / "scripts" / "bench_moe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_moe"] = mod  # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


moe = _load()
TINY = {"experts": 4, "hidden": 64, "inter": 32}


def test_parse_defaults_and_lists() -> None:
    args = moe.parse([])
    assert (args.experts, args.kinds, args.tokens, args.top_k) == (
        [8, 32], ["bf16", "bf16-unfused", "bf16-gateup", "fp8", "fp8-gateup"], 4096, 0)
    args = moe.parse(["--experts", "4", "--kinds", "fp8", "--top-k", "3"])
    assert (args.experts, args.kinds, args.top_k) == ([4], ["fp8"], 3)


def test_parse_refuses_an_unknown_kind() -> None:
    with pytest.raises(SystemExit):
        moe.parse(["--kinds", "bf16,fp4"])


def test_route_sorts_rows_by_expert() -> None:
    torch.manual_seed(0)
    x, router = torch.randn(10, 16), torch.randn(16, 5)
    token, weight, offs = moe.route(x, router, 2)
    assert offs.dtype == torch.int32 and offs.shape == (5,) and int(offs[-1]) == 20
    probs = (x @ router).softmax(-1)
    top = probs.topk(2, dim=-1).indices
    ends = [0, *offs.tolist()]
    for g in range(5):  # expert g's rows are exactly the tokens that chose g
        assert sorted(token[ends[g]:ends[g + 1]].tolist()) == sorted((top == g).any(-1).nonzero().flatten().tolist())
    sums = torch.zeros(10).index_add_(0, token, weight)
    torch.testing.assert_close(sums, torch.ones(10))  # each token's k weights sum to 1


def _loop_layer(x: torch.Tensor, layer, top_k: int) -> torch.Tensor:
    """The layer with a Python loop over experts in fp32: an independent reference."""
    token, weight, offs = moe.route(x, layer.router, top_k)
    ends, inter = [0, *offs.tolist()], layer.w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float32)
    for g in range(layer.w13.shape[0]):
        rows = token[ends[g]:ends[g + 1]]
        h = x[rows].float() @ layer.w13[g].float().t()
        h = (F.silu(h[:, :inter]) * h[:, inter:]).bfloat16().float()
        out.index_add_(0, rows, (h @ layer.w2[g].float().t()) * weight[ends[g]:ends[g + 1], None])
    return out


def test_torch_layer_on_cpu_matches_a_loop_over_experts() -> None:
    layer = moe.Layer.random(device="cpu", **TINY)
    x = torch.randn(16, 64).bfloat16()
    got = moe.moe_forward(x, layer, moe.torch_gemms(False), 2)
    assert got.shape == x.shape and got.dtype == torch.bfloat16
    assert moe.relative_error(got, _loop_layer(x, layer, 2)) < 1e-2


@pytest.mark.parametrize("kind", ["bf16", "bf16-unfused"])
def test_warploom_layer_on_cpu_matches_torch_bf16(kind: str) -> None:
    row = moe.case(4, 16, kind, hidden=64, inter=32, top_k=2, device="cpu", time_it=False)
    assert "error" not in row and row["err_vs_torch"] < 1e-2, row


@pytest.fixture
def grouped_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Each warploom.grouped_mm call's (N, whether it took an epilogue), in order."""
    import warploom

    calls: list[tuple[int, bool]] = []
    real = warploom.grouped_mm

    def spy(a, b, offs, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append((b.shape[-1], "epilogue" in kw))
        return real(a, b, offs, **kw)

    monkeypatch.setattr(warploom, "grouped_mm", spy)
    return calls


def test_bf16_layer_fuses_the_silu_mul(grouped_calls: list[tuple[int, bool]]) -> None:
    """warploom's "bf16" layer: the gate GEMM, then the up GEMM with silu(gate) * acc as its epilogue, then down."""
    layer = moe.Layer.random(device="cpu", **TINY)
    x = torch.randn(16, 64).bfloat16()
    fused = moe.moe_forward(x, layer, moe.warploom_gemms(False), 2)
    assert grouped_calls == [(32, False), (32, True), (64, False)]  # gate (N = I), up with the epilogue, down (N = D)
    assert moe.relative_error(fused, _loop_layer(x, layer, 2)) < 1e-2


def _emulated_fp8() -> object:
    """torch._scaled_grouped_mm has no CPU kernel: the same product from the dequantized operands in fp32."""
    def mm(a, sa, w, sw, offs):
        a32 = a.float() * sa[:, None]
        w32 = w.float() * sw[:, :, None]
        ends, out = [0, *offs.tolist()], torch.zeros(a.shape[0], w.shape[1])
        for g in range(w.shape[0]):
            out[ends[g]:ends[g + 1]] = a32[ends[g]:ends[g + 1]] @ w32[g].t()
        return out.bfloat16()
    return moe.Gemms("emulated", True, mm)


def test_warploom_layer_on_cpu_matches_torch_fp8() -> None:
    layer = moe.Layer.random(device="cpu", **TINY)
    x = torch.randn(16, 64).bfloat16()
    ours = moe.moe_forward(x, layer, moe.warploom_gemms(True), 2)
    want = moe.moe_forward(x, layer, _emulated_fp8(), 2)
    assert moe.relative_error(ours, want) < moe.TOLERANCE["fp8"]
    assert moe.relative_error(ours, _loop_layer(x, layer, 2)) < 0.1  # fp8 against the bf16 layer: loosely


# The gate/up interleave's block is 128 rows (fp8: 64): the one-GEMM kinds need I a multiple of it.
TINY_IL = {"experts": 4, "hidden": 128, "inter": 128}


def test_gateup_layer_runs_one_interleaved_gemm_and_matches_the_loop(grouped_calls: list[tuple[int, bool]]) -> None:
    """"bf16-gateup": one grouped GEMM of N = 2I over the interleaved weights with the SiLU-mul in its epilogue,
    then down; the same layer as the per-expert fp32 loop."""
    layer = moe.Layer.random(device="cpu", **TINY_IL)
    x = torch.randn(16, 128).bfloat16()
    got = moe.moe_forward(x, layer, moe.warploom_gemms(False, interleaved=True), 2, layer.interleaved(128))
    assert grouped_calls == [(256, True), (128, False)]  # gate/up (N = 2I) with the epilogue, down (N = D)
    assert moe.relative_error(got, _loop_layer(x, layer, 2)) < 1e-2
    row = moe.case(4, 16, "bf16-gateup", hidden=128, inter=128, top_k=2, device="cpu", time_it=False)
    assert "error" not in row and row["err_vs_torch"] < 1e-2, row


def test_fp8_gateup_layer_matches_torch_fp8() -> None:
    """"fp8-gateup": the rowwise fp8 weights and their scales interleaved, the SiLU-mul fused, against torch's fp8
    layer (emulated on the CPU)."""
    layer = moe.Layer.random(device="cpu", **TINY_IL)
    x = torch.randn(16, 128).bfloat16()
    ours = moe.moe_forward(x, layer, moe.warploom_gemms(True, interleaved=True), 2, layer.interleaved(64))
    want = moe.moe_forward(x, layer, _emulated_fp8(), 2)
    assert moe.relative_error(ours, want) < moe.TOLERANCE["fp8-gateup"]
