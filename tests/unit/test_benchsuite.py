"""warploom.benchsuite without a GPU: the shape lists, the roofline arithmetic, the results' JSON, and each op's
run path (inputs, reference, check, row) on the CPU, where warploom runs on its simulator and timing is faked."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from warploom.benchsuite import roofline
from warploom.benchsuite.results import Environment, Measurement, Results, ResultsFormatError, Row
from warploom.benchsuite.roofline import H100_SXM, Peaks
from warploom.benchsuite.run import Options, check, inputs, reference, run_case
from warploom.benchsuite.shapes import (
    ALL_SHAPES,
    DECODE,
    LLM_SHAPES,
    SQUARES,
    Case,
    Group,
    Op,
    Shape,
    Suite,
    cases,
)

ROOT = Path(__file__).resolve().parents[2]


def mnk(shapes: tuple[Shape, ...]) -> set[tuple[int, int, int]]:
    return {(s.m, s.n, s.k) for s in shapes}


def test_squares_and_decode_shapes() -> None:
    assert mnk(SQUARES) == {(s, s, s) for s in (1024, 2048, 4096, 8192)}
    assert mnk(DECODE) == {(1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192)}
    assert {s.group for s in SQUARES} == {Group.SQUARE} and {s.group for s in DECODE} == {Group.DECODE}


def test_llm_shapes_are_the_weight_shapes_at_4096_tokens() -> None:
    llama8 = {(6144, 4096), (4096, 4096), (2 * 14336, 4096), (4096, 14336)}  # qkv, o_proj, gate_up, down
    llama70 = {(10240, 8192), (8192, 8192), (2 * 28672, 8192), (8192, 28672)}
    deepseek = {(7168, 16384), (4096, 7168), (2112, 7168), (7168, 2048)}
    assert mnk(LLM_SHAPES) == {(4096, n, k) for n, k in llama8 | llama70 | deepseek}
    assert len(LLM_SHAPES) == 12 and {s.group for s in LLM_SHAPES} == {Group.LLM}
    byname = {s.name: (s.n, s.k) for s in LLM_SHAPES}
    assert byname["llama3-70b gate_up"] == (57344, 8192) and byname["llama3-8b down"] == (4096, 14336)


def test_suites() -> None:
    assert len({s.name for s in ALL_SHAPES}) == len(ALL_SHAPES) == 19
    full = cases(Suite.FULL)
    assert len(full) == len(set(full)) == len(Op) * len(ALL_SHAPES)
    quick = cases(Suite.QUICK)
    assert len(quick) <= 10 and {c.op for c in quick} == set(Op)
    assert {c.shape.group for c in quick} == set(Group) - {Group.ZOO}
    fp8 = cases(Suite.FULL, ops=(Op.SCALED_MM_FP8_TENSORWISE,), groups=(Group.DECODE,))
    assert [(c.op, c.m) for c in fp8] == [(Op.SCALED_MM_FP8_TENSORWISE, m) for m in (1, 16, 64)]
    blockwise = cases(Suite.FULL, ops=(Op.SCALED_MM_FP8_BLOCKWISE,), groups=(Group.DECODE,))
    assert [c.m for c in blockwise] == [4, 16, 64]  # (M = 1 rounded up to 4: torch's blockwise kernel's rule)


def test_cases_and_shapes_validate_themselves() -> None:
    with pytest.raises(ValueError, match="Expected N and K multiples of 16"):
        Case(Op.SCALED_MM_FP8_ROWWISE_FAST, Shape(64, 1000, 64, Group.SQUARE, "odd"))
    Case(Op.MATMUL_BF16, Shape(64, 1000, 64, Group.SQUARE, "odd"))  # bf16 has no such rule
    with pytest.raises(ValueError, match="Expected M, N, K >= 1"):
        Shape(0, 64, 64, Group.DECODE, "empty")


def case(op: Op, m: int, n: int, k: int) -> Case:
    return Case(op, Shape(m, n, k, Group.DECODE if m <= 64 else Group.SQUARE, "t"))


def test_roofline_compute_bound_square() -> None:
    c = case(Op.MATMUL_BF16, 4096, 4096, 4096)
    assert roofline.bytes_moved(c) == 3 * 4096 * 4096 * 2 == 100_663_296
    assert roofline.intensity(c) == pytest.approx(2 * 4096**3 / 100_663_296) == pytest.approx(4096 / 3)
    assert roofline.attainable_tflops(c, H100_SXM) == 989.0  # 3.0 TB/s * 1365 FLOP/B = 4096 > 989
    assert roofline.bound(c, H100_SXM) is roofline.Bound.COMPUTE
    assert roofline.fraction(c, 741.75, H100_SXM) == pytest.approx(0.75)
    fp8 = case(Op.SCALED_MM_FP8_ROWWISE_FAST, 4096, 4096, 4096)
    assert roofline.attainable_tflops(fp8, H100_SXM) == 1979.0


def test_roofline_memory_bound_decode() -> None:
    c = case(Op.MATMUL_BF16, 1, 8192, 8192)
    assert roofline.bytes_moved(c) == (8192 + 8192 * 8192 + 8192) * 2 == 134_250_496
    attain = 3.0 * (2 * 8192 * 8192) / 134_250_496  # 2.99927 TFLOP/s
    assert roofline.attainable_tflops(c, H100_SXM) == pytest.approx(attain) == pytest.approx(2.99927, rel=1e-5)
    assert roofline.bound(c, H100_SXM) is roofline.Bound.MEMORY
    faster = Peaks("fast memory", 989.0, 1979.0, bandwidth_tbps=4.5)
    assert roofline.attainable_tflops(c, faster) == pytest.approx(1.5 * attain)
    # fp8 rowwise, M = 16: A 16*8192 + B 8192^2 (1 byte) + out 16*8192*2 + scales (16 + 8192) * 4 bytes.
    r = case(Op.SCALED_MM_FP8_ROWWISE_FAST, 16, 8192, 8192)
    assert roofline.bytes_moved(r) == 131_072 + 67_108_864 + 262_144 + 64 + 32_768 == 67_534_912
    assert roofline.attainable_tflops(r, H100_SXM) == pytest.approx(3.0 * 2 * 16 * 8192**2 / 67_534_912)
    assert roofline.tflops(r, 0.1) == pytest.approx(2 * 16 * 8192**2 / 1e8)


def test_roofline_counts_each_ops_operands() -> None:
    m, n, k = 256, 512, 128
    row = roofline.bytes_moved(case(Op.SCALED_MM_FP8_ROWWISE_EXACT, m, n, k))
    assert roofline.bytes_moved(case(Op.SCALED_MM_FP8_TENSORWISE, m, n, k)) == row - (m + n) * 4 + 8
    assert roofline.bytes_moved(case(Op.FUSED_EPILOGUE, m, n, k)) == row + n * 2 + m * n * 2
    with pytest.raises(ValueError, match="positive"):
        Peaks("x", 989.0, 1979.0, bandwidth_tbps=0.0)


@pytest.mark.parametrize("op", list(Op))
def test_inputs_are_the_tensors_the_roofline_counts(op: Op) -> None:
    c = case(op, 64, 96, 128)
    torch.manual_seed(0)
    x = inputs(c, "cpu")
    out_bytes = c.m * c.n * 2
    assert sum(t.numel() * t.element_size() for t in x.values()) + out_bytes == roofline.bytes_moved(c)
    assert x["a"].shape == (64, 128) and x["b"].shape == (128, 96) and x["b"].stride() == (1, 128)  # K-major b
    assert all(t.float().abs().sum() > 0 for t in x.values())


def results() -> Results:
    env = Environment("NVIDIA H100 80GB HBM3", "2.11.0", "3.6.0", "2026-11-23 10:00:00", "host", "warploom bench",
                      "quick", {"compile": True, "graph": False}, copy_tbps=3.02)
    rows = (
        Row(case(Op.MATMUL_BF16, 4096, 4096, 4096), Measurement(0.2, None, 1.4e-6), Measurement(0.19, None, 1.4e-6),
            Measurement(0.21, None, 1.4e-6), 41.5, "128x256x64_s4", True, ""),
        Row(case(Op.FUSED_EPILOGUE, 16, 8192, 8192), Measurement(0.05, 0.03, 2e-6), Measurement(0.06, 0.035, 3e-6)),
        Row(case(Op.SCALED_MM_FP8_TENSORWISE, 1, 8192, 8192), None, None, ok=False, failure="UnsupportedError: no"),
    )
    return Results(env, rows)


def test_results_json_round_trip(tmp_path: Path) -> None:
    r = results()
    assert Results.from_json(json.loads(json.dumps(r.to_json()))) == r
    r.save(tmp_path / "sub" / "r.json")
    assert Results.load(tmp_path / "sub" / "r.json") == r
    derived = r.to_json()["rows"][0]["derived"]
    assert derived["ratio"] == pytest.approx(0.19 / 0.2) and derived["compile_ratio"] == pytest.approx(0.21 / 0.2)
    assert r.rows[1].graph_ratio == pytest.approx(0.035 / 0.03) and r.rows[1].headline_ratio == r.rows[1].graph_ratio
    assert r.rows[2].ratio is None and r.rows[2].headline_ratio is None


def test_results_reject_other_files(tmp_path: Path) -> None:
    with pytest.raises(ResultsFormatError, match="expected a JSON object with format"):
        Results.from_json({"env": {}, "rows": []})
    bad = results().to_json()
    del bad["rows"][0]["ours"]
    with pytest.raises(ResultsFormatError, match=r"rows\[0\]\.ours: missing"):
        Results.from_json(bad)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ResultsFormatError, match="x.json: expected UTF-8 JSON"):
        Results.load(tmp_path / "x.json")


class FakeTimer:
    """Calls each contender once (so it must run) and reports fixed times."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def eager(self, fn: Any) -> float:
        fn()
        self.calls.append("eager")
        return 2.0

    def graph(self, fn: Any) -> float:
        fn()
        self.calls.append("graph")
        return 1.0


# The planner's choice at 128x192x256 (rule 23 takes 64x64 tiles without a bias or epilogue, promoted fp8 too).
PLANS = {Op.MATMUL_BF16: "64x16x64_s4_w4_g8", Op.SCALED_MM_FP8_ROWWISE_FAST: "64x64x128_s2_w4_g8",
         Op.SCALED_MM_FP8_ROWWISE_EXACT: "64x64x128_s4_w4_g8", Op.SCALED_MM_FP8_TENSORWISE: "64x64x128_s2_w4_g8",
         Op.FUSED_EPILOGUE: "128x128x128_s5_w8_g8", Op.SCALED_MM_FP8_BLOCKWISE: "64x64x128_s6_w4_g8"}


def _dequantized_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """Blockwise scales as torch's ops on the CPU can run them (its CPU _scaled_mm has no blockwise kernel)."""
    from warploom.reference import dequantized

    x, w = dequantized(a, b, scale_a, scale_b)
    return (x @ w).to(torch.bfloat16)


@pytest.mark.parametrize("op", list(Op))
def test_run_case_on_the_cpu_simulator(op: Op, monkeypatch: pytest.MonkeyPatch) -> None:
    from warploom.benchsuite import run as bench_run

    if op is Op.SCALED_MM_FP8_BLOCKWISE:
        monkeypatch.setitem(bench_run.TORCH_FNS, op, _dequantized_mm)
    timer = FakeTimer()
    compiled: list[Any] = []
    r = run_case(Case(op, Shape(128, 192, 256, Group.DECODE, "t")), Options(device="cpu", compile=True), timer,
                 compiler=lambda fn: compiled.append(fn) or fn)
    assert r.ok, r.failure
    assert r.ours is not None and r.torch is not None and r.compiled is not None and compiled
    assert r.ours.err < 1e-5 and r.torch.err < 1e-5 and r.plan == PLANS[op], r.plan
    assert r.ours.graph_ms == 1.0 and timer.calls.count("graph") == 3  # a decode-group case: graph-timed
    assert r.ratio == 1.0 and r.compile_ratio == 1.0 and r.compile_s is not None


def test_run_case_graph_timing_only_when_asked() -> None:
    c = Case(Op.MATMUL_BF16, Shape(128, 128, 128, Group.SQUARE, "t"))
    timer = FakeTimer()
    r = run_case(c, Options(device="cpu"), timer)
    assert r.ours is not None and r.ours.graph_ms is None and timer.calls == ["eager", "eager"]
    assert r.compiled is None
    r = run_case(c, Options(device="cpu", graph=True), FakeTimer())
    assert r.ours is not None and r.ours.graph_ms == 1.0


def test_run_case_records_a_shape_warploom_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    import warploom
    from warploom.errors import UnsupportedError

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedError("not this one")

    monkeypatch.setattr(warploom, "plan", refuse)
    r = run_case(case(Op.MATMUL_BF16, 64, 64, 64), Options(device="cpu"), FakeTimer())
    assert not r.ok and r.ours is None and r.failure == "UnsupportedError: not this one"


def test_torch_refusing_its_fused_bias_adds_it_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuBLASLt refuses some shapes' bias epilogue (191x448x14496 on the H100): the fused case then times torch with
    the bias added by a second kernel, and the row still checks warploom against the fp32 reference. Any other
    error of torch's stays an error."""
    from warploom.benchsuite import run as bench_run

    def refusing(**x: Any) -> Any:
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmulAlgoGetHeuristic(`")

    monkeypatch.setitem(bench_run.TORCH_FNS, Op.FUSED_EPILOGUE, refusing)
    c = Case(Op.FUSED_EPILOGUE, Shape(128, 192, 256, Group.DECODE, "t"))
    r = run_case(c, Options(device="cpu"), FakeTimer())
    assert r.ok, r.failure
    assert r.torch is not None and r.torch.err < 1e-5  # the bias was added: torch's output matches the reference
    # The row says so, through the JSON and in the report.
    assert r.torch_note == bench_run.BIAS_APART
    res = replace(results(), rows=(r,))
    assert Results.from_json(json.loads(json.dumps(res.to_json()))).rows[0].torch_note == bench_run.BIAS_APART
    from warploom.benchsuite.report import markdown

    assert f"128×192×256 (t): {bench_run.BIAS_APART}" in markdown(res, H100_SXM)
    assert "torch_note" not in results().to_json()["rows"][0]  # (unnoted rows write what they always wrote)

    def broken(**x: Any) -> Any:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setitem(bench_run.TORCH_FNS, Op.FUSED_EPILOGUE, broken)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        run_case(c, Options(device="cpu"), FakeTimer())


def test_torch_refusing_a_case_is_a_failed_row_that_says_so() -> None:
    """torch's CPU _scaled_mm has no blockwise kernel and says so (its scaling check): the row fails with torch's
    reason, after warploom's output was computed, and the suite goes on; its blockwise inputs are the layouts torch's
    GPU kernel takes (both scales column-major)."""
    from warploom.benchsuite.run import TORCH_REFUSED

    c = Case(Op.SCALED_MM_FP8_BLOCKWISE, Shape(100, 192, 272, Group.ZOO, "t"))
    torch.manual_seed(0)
    x = inputs(c, "cpu")
    assert x["scale_a"].shape == (100, 3) and x["scale_a"].stride() == (1, 100)
    assert x["scale_b"].shape == (3, 2) and x["scale_b"].stride() == (1, 3)
    r = run_case(c, Options(device="cpu"), FakeTimer())
    assert not r.ok and r.ours is None and r.failure.startswith(f"{TORCH_REFUSED}: Invalid scaling configuration")
    assert r.plan and "warploom's error" not in r.failure  # (warploom planned, ran and matched it)


def test_a_torch_wanting_padded_blockwise_scales_gets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch that takes blockwise scale_b only with its transpose's rows padded to 4 scales (as cuBLASLt reads
    them) gets that layout, with the same values, and the row says so; one that refuses both is a refused row."""
    from warploom.benchsuite import run as bench_run

    seen: list[tuple[int, ...]] = []

    def padded_only(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> Any:
        seen.append(scale_b.stride())
        if scale_b.stride(1) % 4:
            raise ValueError("Invalid scaling configuration. (a torch that wants padded rows)")
        return _dequantized_mm(a, b, scale_a, scale_b)

    monkeypatch.setitem(bench_run.TORCH_FNS, Op.SCALED_MM_FP8_BLOCKWISE, padded_only)
    c = Case(Op.SCALED_MM_FP8_BLOCKWISE, Shape(128, 192, 640, Group.DECODE, "t"))  # 5 k-blocks: 5 -> 8 apart
    r = run_case(c, Options(device="cpu"), FakeTimer())
    assert r.ok and r.torch is not None and r.torch.err < 1e-5, r.failure  # (the same values: torch matched)
    assert r.torch_note == bench_run.PADDED_SCALE_B and seen[:2] == [(1, 5), (1, 8)]

    def refusing(**x: Any) -> Any:
        raise ValueError("Invalid scaling configuration. (no blockwise at all)")

    monkeypatch.setitem(bench_run.TORCH_FNS, Op.SCALED_MM_FP8_BLOCKWISE, refusing)
    r = run_case(c, Options(device="cpu"), FakeTimer())
    assert not r.ok and r.failure.startswith(bench_run.TORCH_REFUSED)


def test_a_wrong_torch_sets_no_bar_and_is_named_in_the_report() -> None:
    """Where torch's output is off the fp32 reference (torch 2.11's blockwise kernel at ceil(K/128) % 4 != 0 reads
    scale_b at another stride), warploom's output is held to ERR_FLOOR, not to 4x torch's error, and the report
    names the row."""
    from warploom.benchsuite.report import markdown
    from warploom.benchsuite.run import ERR_FLOOR
    from warploom.benchsuite.tables import torch_wrong

    c = case(Op.SCALED_MM_FP8_BLOCKWISE, 128, 128, 256)
    torch.manual_seed(0)
    ref = reference(c, inputs(c, "cpu"))
    wrong = (ref * torch.linspace(0.5, 1.5, 128)).to(torch.bfloat16)  # another product: error ~1e-2
    off = ref.to(torch.bfloat16).clone()
    off[:32] *= 1.05  # off by ~3e-4: more than ERR_FLOOR, far less than 4x torch's wrong error
    from warploom.benchsuite.run import err

    assert ERR_FLOOR < err(off, ref) < err(wrong, ref) / 4
    assert "against the fp32 reference" in check(c, off, wrong, ref)
    assert check(c, ref.to(torch.bfloat16), wrong, ref) == ""
    rows = (Row(c, Measurement(0.2, 0.1, 1.4e-6), Measurement(0.2, 0.1, 0.3)),
            Row(case(Op.SCALED_MM_FP8_BLOCKWISE, 64, 128, 256), Measurement(0.2, 0.1, 1.4e-6),
                Measurement(0.2, 0.1, 1.4e-6)))
    assert torch_wrong(rows) == ["", "fp8 blockwise 1x128 x 128x128: torch's output was off the fp32 reference at 1 "
                                     "of 2 rows (its kernel timed all the same; warploom's matched the reference at 1 "
                                     "of them): 128×128×256 0.3"]
    assert "torch's output was off the fp32 reference at 1 of 2 rows" in markdown(replace(results(), rows=rows),
                                                                                  H100_SXM)
    assert torch_wrong(rows[1:]) == []


def test_blockwise_reference_applies_the_scales_per_block() -> None:
    """The blockwise reference scales each 128 of K by its own scale (not the product by a row and column factor):
    doubling the scale of A's second k-block doubles that block's share only."""
    c = Case(Op.SCALED_MM_FP8_BLOCKWISE, Shape(64, 192, 256, Group.ZOO, "t"))
    torch.manual_seed(1)
    x = inputs(c, "cpu")
    ones = {**x, "scale_a": torch.ones(256 // 128, 64).t(), "scale_b": torch.ones(2, 2).t().contiguous().t()}
    a, b = x["a"].float(), x["b"].float()
    first, second = a[:, :128] @ b[:128], a[:, 128:] @ b[128:]
    torch.testing.assert_close(reference(c, ones), first + second, rtol=1e-5, atol=1e-4)
    ones["scale_a"] = torch.tensor([[1.0] * 64, [2.0] * 64]).t()
    torch.testing.assert_close(reference(c, ones), first + 2 * second, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", [Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST])
def test_check_catches_wrong_outputs(op: Op) -> None:
    c = case(op, 128, 128, 256)
    torch.manual_seed(0)
    x = inputs(c, "cpu")
    ref = reference(c, x)
    good = ref.to(torch.bfloat16)
    assert check(c, good, good, ref) == ""
    tile = good.clone()
    tile[:64, :64] = 0  # one wrong tile out of four
    assert "against the fp32 reference" in check(c, tile, good, ref)
    if op is Op.MATMUL_BF16:  # one wrong element: the global metric averages it away, the element-wise check not
        one = good.clone()
        one[3, 5] += ref.abs().max().to(torch.bfloat16) / 5
        assert "differs from torch.matmul" in check(c, one, good, ref)
        from warploom.benchsuite.run import ERR_FLOOR, err

        assert err(one, ref) < ERR_FLOOR
    assert "expected a (128, 128) bfloat16 output" in check(c, good.float(), good, ref)
    assert "against the fp32 reference" in check(c, torch.full_like(good, math.nan), good, ref)


def test_run_suite_saves_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    import warploom
    from warploom.benchsuite.run import run_suite

    plan = warploom.plan

    def refuse_fp8(*args: Any, **kwargs: Any) -> Any:
        if args[0].dtype == torch.float8_e4m3fn:
            raise ValueError("no fp8 today")
        return plan(*args, **kwargs)

    monkeypatch.setattr(warploom, "plan", refuse_fp8)
    todo = (case(Op.MATMUL_BF16, 64, 64, 64), case(Op.SCALED_MM_FP8_TENSORWISE, 64, 64, 64))
    con = Console(record=True, width=200)
    out = tmp_path / "r.json"
    res = run_suite(todo, Options(device="cpu", ops=("matmul_bf16",)), out, "quick", con, FakeTimer())
    assert Results.load(out) == res and [r.ok for r in res.rows] == [True, False]
    assert res.env.options["ops"] == ["matmul_bf16"] and res.env.device.startswith("cpu")
    assert "shapes" not in res.env.options  # (a run of the suite's every size records none)
    # A run of chosen sizes (`--shapes`) records them: its results never merge as shards of the whole suite.
    part = run_suite(todo[:1], Options(device="cpu", shapes=("64x64x64",)), tmp_path / "p.json", "quick", con,
                     FakeTimer())
    assert Results.load(tmp_path / "p.json") == part and part.env.options["shapes"] == ["64x64x64"]
    text = con.export_text()
    assert "ratio 1.000, graph 1.000" in text and "FAILED: ValueError: no fp8 today" in text


def test_importing_the_suite_touches_no_gpu_nor_triton() -> None:
    code = ("import sys, warploom.benchsuite, warploom.benchsuite.run, warploom.benchsuite.report, warploom.cli\n"
            "import torch\nassert not torch.cuda.is_initialized()\nprint('triton' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False"
