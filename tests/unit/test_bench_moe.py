"""scripts/bench_moe.py's CPU-checkable parts: its arguments, the routing (offs as torch's grouped ops want them),
and the MoE layer at a tiny size on the CPU: torch's grouped ops against a per-expert loop, and warploom's grouped
GEMMs (the simulator) against torch's layer, bf16 and fp8 rowwise; fp8 blockwise: the 1x128 and 128x128
quantization (shapes, scale layouts, values), the float reference of the dequantized layer, torch's per-expert
_scaled_mm loop (its call form against torch's stride checks, with a CPU stand-in for the kernel), and warploom's
layer, two-GEMM and one-GEMM, against the reference."""

from __future__ import annotations

import importlib.util
import math
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
    assert (args.experts, args.kinds, args.tokens, args.top_k) == ([8, 32], [
        "bf16", "bf16-unfused", "bf16-gateup", "fp8", "fp8-gateup", "fp8-blockwise", "fp8-blockwise-gateup",
        "fp8-blockwise-fusedq"], 4096, 0)
    assert set(moe.KINDS) == set(moe.TOLERANCE)
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
    got = moe.moe_forward(x, layer, moe.torch_gemms(moe.Recipe.BF16), 2)
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
    fused = moe.moe_forward(x, layer, moe.warploom_gemms(), 2)
    assert grouped_calls == [(32, False), (32, True), (64, False)]  # gate (N = I), up with the epilogue, down (N = D)
    assert moe.relative_error(fused, _loop_layer(x, layer, 2)) < 1e-2


def test_warploom_layer_on_cpu_matches_torch_fp8() -> None:
    layer = moe.Layer.random(device="cpu", **TINY)
    x = torch.randn(16, 64).bfloat16()
    ours = moe.moe_forward(x, layer, moe.warploom_gemms(moe.Recipe.ROWWISE, moe.Form.UNFUSED), 2)
    want = moe.moe_forward(x, layer, moe.reference_gemms(moe.Recipe.ROWWISE), 2)  # (torch's has no CPU kernel)
    assert moe.relative_error(ours, want) < moe.TOLERANCE["fp8"]
    assert moe.relative_error(ours, _loop_layer(x, layer, 2)) < 0.1  # fp8 against the bf16 layer: loosely


# The gate/up interleave's block is 128 rows (fp8: 64): the one-GEMM kinds need I a multiple of it.
TINY_IL = {"experts": 4, "hidden": 128, "inter": 128}


def test_gateup_layer_runs_one_interleaved_gemm_and_matches_the_loop(grouped_calls: list[tuple[int, bool]]) -> None:
    """"bf16-gateup": one grouped GEMM of N = 2I over the interleaved weights with the SiLU-mul in its epilogue,
    then down; the same layer as the per-expert fp32 loop."""
    layer = moe.Layer.random(device="cpu", **TINY_IL)
    x = torch.randn(16, 128).bfloat16()
    got = moe.moe_forward(x, layer, moe.warploom_gemms(moe.Recipe.BF16, moe.Form.ONE_GEMM), 2,
                          layer.interleaved(128))
    assert grouped_calls == [(256, True), (128, False)]  # gate/up (N = 2I) with the epilogue, down (N = D)
    assert moe.relative_error(got, _loop_layer(x, layer, 2)) < 1e-2
    row = moe.case(4, 16, "bf16-gateup", hidden=128, inter=128, top_k=2, device="cpu", time_it=False)
    assert "error" not in row and row["err_vs_torch"] < 1e-2, row


def test_fp8_gateup_layer_matches_torch_fp8() -> None:
    """"fp8-gateup": the rowwise fp8 weights and their scales interleaved, the SiLU-mul fused, against torch's fp8
    layer (its dequantized float layer on the CPU)."""
    layer = moe.Layer.random(device="cpu", **TINY_IL)
    x = torch.randn(16, 128).bfloat16()
    ours = moe.moe_forward(x, layer, moe.warploom_gemms(moe.Recipe.ROWWISE, moe.Form.ONE_GEMM), 2,
                           layer.interleaved(64, moe.Recipe.ROWWISE))
    want = moe.moe_forward(x, layer, moe.reference_gemms(moe.Recipe.ROWWISE), 2)
    assert moe.relative_error(ours, want) < moe.TOLERANCE["fp8-gateup"]


# fp8 blockwise (DeepSeek-V3's recipe): activations 1x128, weights 128x128. Scale blocks are 128 wide: the two-GEMM
# form cuts w13's scales at I, so I is a multiple of 128.
TINY_BW = {"experts": 4, "hidden": 128, "inter": 256}


def test_quantize_blocks_shapes_layouts_and_values() -> None:
    """Each block's scale is its amax / 448 (ragged blocks: their valid values'), the data its values over it in
    e4m3, and dequantize inverts it to e4m3's precision; activations' 1x128 scales come column-major."""
    torch.manual_seed(0)
    w = torch.randn(3, 300, 200).bfloat16()  # (E, N, K), both ragged against 128
    data, scale = moe.quantize_blocks(w, 128)
    assert data.shape == w.shape and data.dtype == torch.float8_e4m3fn and scale.shape == (3, 3, 2)
    assert scale.dtype == torch.float32
    blk = w[1, 256:300, 128:200].float()  # (expert 1, the ragged corner block)
    torch.testing.assert_close(scale[1, 2, 1], blk.abs().amax() / 448)
    want = (blk / scale[1, 2, 1]).to(torch.float8_e4m3fn)
    torch.testing.assert_close(data[1, 256:300, 128:200].float(), want.float())
    back = moe.dequantize(data, scale, 128)
    full = moe.dequantize(torch.ones(w.shape).to(torch.float8_e4m3fn), scale, 128)  # (each value's block scale)
    assert ((back - w.float()).abs() <= w.float().abs() / 16 + full * 2**-9).all()  # (3 mantissa bits; subnormals)

    x = torch.randn(40, 300).bfloat16()  # (R, K)
    q, s = moe.quantize_1x128(x)
    assert q.shape == x.shape and s.shape == (40, 3) and s.stride() == (1, 40)  # (torch's and DeepGEMM's layout)
    torch.testing.assert_close(s[:, 2], x[:, 256:].float().abs().amax(-1) / 448)
    assert moe.relative_error(moe.dequantize(q, s, 1), x) < 0.05


def test_blockwise_weights_halves_and_interleave() -> None:
    """Layer.blockwise stores (E, N/128, K/128) scales; halves() cuts w13 and its scales at I; the interleaved
    blockwise w13 is the interleaved bf16 weight quantized (each scale block one gate and one up block)."""
    import warploom

    layer = moe.Layer.random(device="cpu", **TINY_BW)
    (w13, s13), (w2, s2) = layer.weights(moe.Recipe.BLOCKWISE)
    assert (w13.shape, s13.shape, w2.shape, s2.shape) == ((4, 512, 128), (4, 4, 1), (4, 128, 256), (4, 1, 2))
    gate, up = moe.halves((w13, s13), 128)
    assert [t.shape for t in (*gate, *up)] == [(4, 256, 128), (4, 2, 1)] * 2
    torch.testing.assert_close(moe.dequantize(*up, 128), moe.dequantize(w13, s13, 128)[:, 256:])
    with pytest.raises(ValueError, match="multiple of 128"):
        moe.halves(moe.quantize_blocks(torch.randn(2, 192, 128), 128), 128)  # (I = 96: a scale block spans both)
    il, s_il = layer.interleaved(64, moe.Recipe.BLOCKWISE)
    assert il.shape == (4, 512, 128) and s_il.shape == (4, 4, 1)
    g, u = warploom.deinterleave_gate_up(moe.dequantize(il, s_il, 128), block=64)
    assert moe.relative_error(g, layer.w13[:, :256]) < 0.05 and moe.relative_error(u, layer.w13[:, 256:]) < 0.05


def test_blockwise_reference_is_the_dequantized_product() -> None:
    """reference_gemms' mm: expert g's rows of a * scale_a[r, k // 128] times (w[g] * scale_b[g, n // 128,
    k // 128])^T, written here element-index by element-index."""
    torch.manual_seed(1)
    a, w = torch.randn(20, 256).bfloat16(), torch.randn(3, 130, 256).bfloat16()
    (qa, sa), (qw, sw) = moe.quantize_1x128(a), moe.quantize_blocks(w, 128)
    offs = torch.tensor([5, 5, 20], dtype=torch.int32)
    got = moe.reference_gemms(moe.Recipe.BLOCKWISE).mm(qa, sa, qw, sw, offs)
    k, n = torch.arange(256), torch.arange(130)
    da = qa.float() * sa[:, k // 128]
    want = torch.cat([da[:5] @ (qw[0].float() * sw[0][n // 128][:, k // 128]).t(),
                      da[5:] @ (qw[2].float() * sw[2][n // 128][:, k // 128]).t()])
    torch.testing.assert_close(got, want)


def _torch_scaled_mm_on_cpu(a, b, scale_a, scale_b, out_dtype):  # noqa: ANN001, ANN202
    """A CPU stand-in for torch._scaled_mm's 1x128 x 128x128 path that first checks what torch's CUDA build checks
    (ScaledBlas.cpp: scale_a (M, K/128) strides (1, M), b column-major, scale_b (K/128, N/128) column-major) and what
    cuBLASLt's blockwise heuristic takes: M a multiple of 16 (the H100, torch 2.11 + cu130: a per-expert call on a
    routing's ragged row counts raised CUBLAS_STATUS_NOT_SUPPORTED in cublasLtMatmulAlgoGetHeuristic; every call
    bench_blockwise.py ran had M a multiple of 64), which also keeps scale_a's leading dimension 16-byte aligned."""
    (m, k), n = a.shape, b.shape[1]
    assert m % moe.TORCH_BLOCKWISE_ROWS == 0, f"M={m}: cuBLASLt's blockwise heuristic refuses it"
    assert b.stride(0) == 1, "b: column-major (K, N)"

    def strides(t: torch.Tensor) -> list[int | None]:
        return [st if size > 1 else None for size, st in zip(t.shape, t.stride(), strict=True)]  # (torch's too)

    kb, nb = -(-k // 128), -(-n // 128)
    assert scale_a.shape == (m, kb) and strides(scale_a) == strides(torch.empty(kb, m).t()), scale_a.stride()
    assert scale_b.shape == (kb, nb) and strides(scale_b) == strides(torch.empty(nb, kb).t()), scale_b.stride()
    da = moe.dequantize(a, scale_a, 1)
    db = moe.dequantize(b.t(), scale_b.t(), 128).t()
    return (da @ db).to(out_dtype)


def test_torch_blockwise_loop_calls_scaled_mm_as_torch_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's blockwise layer (one _scaled_mm per non-empty expert over host row ends) passes torch's stride checks
    and, with a CPU stand-in for the kernel, is the dequantized layer."""
    monkeypatch.setattr(torch, "_scaled_mm", _torch_scaled_mm_on_cpu)
    layer = moe.Layer.random(device="cpu", **{**TINY_BW, "hidden": 256})  # (K = 256: two scale blocks along K)
    x = torch.randn(16, 256).bfloat16()
    ends = [0, *moe.route(x, layer.router, 2)[2].tolist()]
    assert any((e - s) % 16 for s, e in zip(ends[:-1], ends[1:], strict=True))  # (ragged: windows of 16 rows)
    got = moe.moe_forward(x, layer, moe.torch_blockwise_gemms(ends), 2)
    want = moe.moe_forward(x, layer, moe.reference_gemms(moe.Recipe.BLOCKWISE), 2)
    assert moe.relative_error(got, want) < moe.TOLERANCE["fp8-blockwise"]
    assert moe.relative_error(got, _loop_layer(x, layer, 2)) < 0.1  # fp8 against the bf16 layer: loosely


@pytest.fixture
def scaled_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool]]:
    """Each warploom.scaled_grouped_mm call's (N, scale_b's dimensions, whether it took an epilogue), in order."""
    import warploom

    calls: list[tuple[int, int, bool]] = []
    real = warploom.scaled_grouped_mm

    def spy(a, b, sa, sb, offs, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append((b.shape[-1], sb.dim(), "epilogue" in kw))
        return real(a, b, sa, sb, offs, **kw)

    monkeypatch.setattr(warploom, "scaled_grouped_mm", spy)
    return calls


@pytest.mark.parametrize("kind,want_calls", [
    ("fp8-blockwise", [(256, 3, False), (256, 3, True), (128, 3, False)]),  # gate, up with the SiLU-mul, down
    ("fp8-blockwise-gateup", [(512, 3, True), (128, 3, False)]),  # interleaved gate/up (N = 2I) fused, down
    ("fp8-blockwise-fusedq", [(256, 3, False), (256, 3, True), (128, 3, False)])])  # up's epilogue quantizes h
def test_blockwise_layer_on_cpu_matches_the_dequantized_layer(kind: str, want_calls: list[tuple[int, int, bool]],
                                                              scaled_calls: list[tuple[int, int, bool]]) -> None:
    """warploom's blockwise layers (the simulator) against the float layer of their dequantized operands, with the
    SiLU-mul fused; torch's loop has no CPU kernel, which the row says rather than failing."""
    row = moe.case(4, 16, kind, hidden=128, inter=256, top_k=2, device="cpu", time_it=False)
    assert "error" not in row and row["err_vs_reference"] < moe.TOLERANCE[kind], row
    assert scaled_calls == want_calls  # (the reference and torch's loop call no warploom GEMM)
    assert "torch_err_vs_reference" in row or "torch_error" in row
    assert ("h_quantized" in row) == (kind == "fp8-blockwise-fusedq")


def test_fused_quantization_feeds_the_down_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8-blockwise-fusedq: the up GEMM returns warploom.quantize's (q, s) pair, which the down GEMM takes as it is
    (no torch quantization of h in warploom's layer; torch's layer keeps its own), and the row's line says so."""
    import warploom

    seen: list[tuple[torch.dtype, tuple[int, ...]]] = []
    real = warploom.scaled_grouped_mm

    def spy(a, b, sa, sb, offs, **kw):  # noqa: ANN001, ANN003, ANN202
        out = real(a, b, sa, sb, offs, **kw)
        seen.append((a.dtype, tuple(sa.shape)))
        return out

    monkeypatch.setattr(warploom, "scaled_grouped_mm", spy)
    quantized = []
    monkeypatch.setattr(moe, "quantize_1x128", lambda t: quantized.append(t.shape) or moe.quantize_blocks(t, 1))
    monkeypatch.setitem(moe.ACTIVATION, moe.Recipe.BLOCKWISE, moe.quantize_1x128)
    layer = moe.Layer.random(4, 128, 256, "cpu")
    x = torch.randn(16, 128).bfloat16()
    moe.moe_forward(x, layer, moe.warploom_gemms(moe.Recipe.BLOCKWISE, moe.Form.QUANTIZED), 2)
    assert quantized == [(16, 128)]  # (x alone, once a token before its dispatch: h came quantized from the up GEMM)
    assert seen[-1] == (torch.float8_e4m3fn, (32, 2))  # the down GEMM's A and scale_a: the epilogue's (q, s)
    with pytest.raises(ValueError, match="1x128 recipe's"):
        moe.warploom_gemms(moe.Recipe.ROWWISE, moe.Form.QUANTIZED)
    line = moe.summary({"warploom_ms": 1.0, "torch_ms": 1.0, "speedup": 1.0, "err_vs_reference": 0,
                        "h_quantized": "warploom: in the epilogue; torch: unchanged"})
    assert "h quantized: warploom: in the epilogue; torch: unchanged" in line


def test_summary_says_what_torch_ran() -> None:
    """A blockwise row's line names torch's per-expert loop (or why it did not run) and the bf16 grouped time."""
    base = {"warploom_ms": 2.0, "torch_bf16_ms": 3.0, "speedup_vs_bf16": 1.5, "err_vs_reference": 0.01}
    line = moe.summary({**base, "torch_ms": 4.0, "speedup": 2.0})
    assert "4.000" in line and "per-expert _scaled_mm loop" in line and "bf16 grouped 3.000 ms, x 1.500" in line
    line = moe.summary({**base, "torch_error": "RuntimeError: no blockwise kernel"})
    assert "no blockwise kernel" in line and "-" in line
    assert "bf16 grouped" not in moe.summary({"warploom_ms": 1.0, "torch_ms": 1.0, "speedup": 1.0, "err_vs_torch": 0})


@pytest.mark.parametrize("ends", [[0, 0, 5, 37, 40], [0, 20], [0, 16, 16, 32]])
def test_torch_blockwise_windows_pad_each_experts_rows(ends: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each expert's _scaled_mm runs on a window of its rows rounded up to TORCH_BLOCKWISE_ROWS: the rows around it
    (or zero rows, where A has fewer than a window) computed and dropped; the product is still the dequantized one,
    expert by expert, empty experts skipped."""
    monkeypatch.setattr(torch, "_scaled_mm", _torch_scaled_mm_on_cpu)
    torch.manual_seed(2)
    r = ends[-1]
    a, w = torch.randn(r, 256).bfloat16(), torch.randn(len(ends) - 1, 256, 256).bfloat16()
    (qa, sa), (qw, sw) = moe.quantize_1x128(a), moe.quantize_blocks(w, 128)
    offs = torch.tensor(ends[1:], dtype=torch.int32)
    got = moe.torch_blockwise_gemms(ends).mm(qa, sa, qw, sw, offs)
    want = moe.reference_gemms(moe.Recipe.BLOCKWISE).mm(qa, sa, qw, sw, offs)
    assert got.shape == (r, 256)
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


def test_case_falls_back_to_wider_windows_and_checks_torchs_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where this torch refuses 16-row windows, `case` runs torch's loop on 128-row ones and says so; torch's loop
    and its bf16 layer are each checked against the dequantized layer before they would be timed."""
    def wide_only(a, b, scale_a, scale_b, out_dtype):  # noqa: ANN001, ANN202
        if a.shape[0] % 128:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmulAlgoGetHeuristic`")
        return _torch_scaled_mm_on_cpu(a, b, scale_a, scale_b, out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", wide_only)
    row = moe.case(4, 16, "fp8-blockwise", hidden=128, inter=256, top_k=2, device="cpu", time_it=False)
    assert "error" not in row and "torch_error" not in row, row
    assert "multiple of 128" in row["torch_layer"] and row["torch_err_vs_reference"] < moe.TOLERANCE["fp8-blockwise"]
    assert row["torch_bf16_err_vs_reference"] < moe.BF16_VS_FP8

    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, *_, **__: torch.zeros(a.shape[0], b.shape[1]))
    row = moe.case(4, 16, "fp8-blockwise", hidden=128, inter=256, top_k=2, device="cpu", time_it=False)
    assert "not timed" in row["torch_error"] and "error" not in row  # (warploom's layer still measured)


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops run under it, as (name, output shape, output dtype): a kernel each on the GPU, or a view."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.ops.append((str(func.overloadpacket.__name__), tuple(out.shape), out.dtype))
        return out


_VIEWS = {"view", "t", "alias", "unsqueeze", "squeeze", "unflatten", "flatten", "_unsafe_view", "slice", "expand"}


def _full_passes(ops: list[tuple[str, tuple[int, ...], torch.dtype]], numel: int) -> list[tuple[str, torch.dtype]]:
    return [(name, dtype) for name, shape, dtype in ops if name not in _VIEWS and math.prod(shape) == numel]


@pytest.mark.parametrize("quantize", ["quantize_rows", "quantize_1x128"])
def test_activation_quantization_is_a_few_full_passes(quantize: str) -> None:
    """The activations' quantization (the same code for both layers, in the timed call) reads the bf16 tensor for its
    amax without an fp32 copy, then one fp32 quotient and its e4m3 cast: at 8 experts the former 7 full passes over
    x_sorted (8192 x 7168) and h, fp32 copies, |.| and a clamp, cost about a millisecond of the fp8 layers' 3.1 ms.
    The values are the plain formula's, bit for bit."""
    torch.manual_seed(3)
    t = (torch.randn(64, 512) * torch.rand(64, 1) * 10).bfloat16()
    with _Ops() as seen:
        q, s = getattr(moe, quantize)(t)
    passes = _full_passes(seen.ops, t.numel())
    assert len(passes) <= 2 and sum(dtype == torch.float32 for _, dtype in passes) <= 1, passes
    assert len([op for op in seen.ops if op[0] not in _VIEWS]) <= 7, seen.ops  # (kernels: the rest on the scales)
    group = 512 if quantize == "quantize_rows" else 128
    blocks = t.float().unflatten(-1, (-1, group))
    want_s = blocks.abs().amax(-1).clamp(min=1e-12) / moe.E4M3_MAX
    want_q = (blocks / want_s[..., None]).clamp(-moe.E4M3_MAX, moe.E4M3_MAX).to(torch.float8_e4m3fn).flatten(-2)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(s.reshape(want_s.shape), want_s)


@pytest.mark.parametrize("kind", ["fp8", "fp8-blockwise"])
def test_layer_quantizes_tokens_before_the_dispatch(kind: str) -> None:
    """x is quantized once per token (T rows) and its fp8 rows gathered, not quantized after the gather (T * k rows):
    a scale per row (rowwise) or per row and 128 columns (1x128) is the same either way, and the gather moves a byte
    an element; the only fp32 pass over (R, D) left in the layer is the combine's weighting of y (bf16 times the fp32
    weights, one kernel: no fp32 copy of y first)."""
    recipe, _ = moe.KINDS[kind]
    layer = moe.Layer.random(device="cpu", **TINY_BW)
    x = torch.randn(16, 128).bfloat16()
    gemms = moe.reference_gemms(recipe)
    moe.moe_forward(x, layer, gemms, 2)  # (the weights' scales, cached, made outside the count)
    with _Ops() as seen:
        moe.moe_forward(x, layer, moe.Gemms("spy", recipe, lambda *ops: torch.zeros(
            ops[0].shape[0], ops[2].shape[1], dtype=torch.bfloat16)), 2)
    r, d = 32, 128
    assert [op[0] for op in seen.ops if op[1] == (r, d) and op[2] == torch.float32] == ["mul"], seen.ops
