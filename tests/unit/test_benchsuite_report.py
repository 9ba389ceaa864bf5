"""`warploom bench`'s rendering from a synthetic results JSON (plot, markdown, summary) and its command line on the
CPU: `--report` renders, a run without CUDA fails with a clear message."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from warploom.benchsuite import report
from warploom.benchsuite.results import Environment, Measurement, Results, Row
from warploom.benchsuite.roofline import H100_SXM
from warploom.benchsuite.shapes import DECODE, LLM_SHAPES, SQUARES, Case, Op, Shape
from warploom.cli import main

BF16, FAST = Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST
SQ = {s.m: s for s in SQUARES}
LLM = {s.name: s for s in LLM_SHAPES}


def row(op: Op, shape: Shape, ours_ms: float, torch_ms: float, graph: tuple[float, float] | None = None,
        compiled_ms: float | None = None) -> Row:
    og, tg = graph if graph else (None, None)
    compiled = Measurement(compiled_ms, None, 2e-6) if compiled_ms else None
    return Row(Case(op, shape), Measurement(ours_ms, og, 1.5e-6), Measurement(torch_ms, tg, 1.4e-6), compiled,
               40.0 if compiled else None, "128x256x64_s4_w8_g8_e2_p2")


def synthetic() -> Results:
    env = Environment("NVIDIA H100 80GB HBM3", "2.11.0+cu130", "3.6.0", "2026-11-23 09:30:00", "gpu-host",
                      "python3 -m warploom.cli bench --suite quick --out r.json", "quick", {}, copy_tbps=3.02)
    rows = (
        row(BF16, SQ[4096], 0.190, 0.180, compiled_ms=0.200),       # large: ratio 0.947
        row(BF16, SQ[8192], 1.600, 1.700),                          # large: 1.0625
        row(BF16, LLM["llama3-8b gate_up"], 1.000, 0.950),          # large: 0.95
        row(BF16, SQ[1024], 0.010, 0.012),                          # small: 1.2, not in the geomean
        row(BF16, DECODE[1], 0.050, 0.040, graph=(0.030, 0.024)),   # decode: graph 0.8, the worst
        row(FAST, SQ[4096], 0.100, 0.105, graph=(0.098, 0.102)),    # large: 1.05, graph 1.0408
        row(FAST, DECODE[0], 0.040, 0.030, graph=(0.020, 0.021)),   # decode: graph 1.05
        Row(Case(Op.FUSED_EPILOGUE, DECODE[0]), None, None, ok=False, failure="UnsupportedError: M = 1 | later"),
    )
    return Results(env, rows)


def summary_line(md: str, op: Op) -> str:
    return next(line for line in md.splitlines() if line.startswith(f"| {op.label} | ") and line.count("|") == 7)


def test_summary_geomeans_over_large_shapes_and_the_worst_row() -> None:
    res = synthetic()
    bf16 = report.summarize(res)[0]
    assert bf16.op is BF16 and bf16.large == 3
    assert bf16.geomean_ratio == pytest.approx(math.exp((math.log(0.18 / 0.19) + math.log(1.7 / 1.6)
                                                         + math.log(0.95 / 1.0)) / 3))
    assert bf16.geomean_graph_ratio is None
    assert bf16.geomean_compile_ratio == pytest.approx(0.2 / 0.19)
    assert bf16.worst is res.rows[4] and bf16.worst.headline_ratio == pytest.approx(0.8)
    assert [s.op for s in report.summarize(res)] == [BF16, FAST, Op.FUSED_EPILOGUE]
    assert report.summarize(res)[2].worst is None and report.summarize(res)[2].large == 0


def test_markdown_section() -> None:
    res = synthetic()
    md = report.markdown(res, report.peaks_for(res.env), plot="img/bench.png")
    gm = (0.18 / 0.19 * 1.7 / 1.6 * 0.95) ** (1 / 3)  # computed apart from report.geomean: 0.9853
    line = summary_line(md, BF16)
    assert f"| 3 | {gm:.3f}× | – | {0.2 / 0.19:.3f}× |" in line
    assert "0.800× (16×8192×8192, decode M=16, graph)" in line
    fast = summary_line(md, FAST)
    assert f"| 1 | {1.05:.3f}× | {0.102 / 0.098:.3f}× | – |" in fast
    assert "![warploom bench quick](img/bench.png)" in md and "3.02 TB/s (measured copy)" in md
    assert "python3 -m warploom.cli bench --suite quick --out r.json" in md
    # Table rows: bf16 4096^3 at 2*4096^3 / 0.19 ms = 723 TFLOP/s, 73% of the 989 roof (compute-bound).
    sq = next(line for line in md.splitlines() if "| 4096×4096×4096 | square 4096 |" in line and "bf16" in line)
    assert "| 723 | 764 | 0.947× | – | 1.053× | 73% / 77% (C) | 1.5e-06 / 1.4e-06 | 128x256x64" in sq
    # Decode M=1 fp8 at 2*8192^2 / 0.020 ms = 6.7 TFLOP/s; memory-bound.
    dec = next(line for line in md.splitlines() if "| 1×8192×8192 |" in line and "fast accum" in line)
    assert "| 6.7 | 6.4 | 0.750× | 1.050× |" in dec and "(M)" in dec
    assert "**failed**: UnsupportedError: M = 1 \\| later" in md
    assert "Failed or mismatched: 1 of 8 rows" in md


def test_peaks_for_prefers_the_given_bandwidth_then_the_measured_copy() -> None:
    env = synthetic().env
    assert report.peaks_for(env).bandwidth_tbps == 3.02
    assert report.peaks_for(env, 4.4).bandwidth_tbps == 4.4
    assert report.peaks_for(Environment("d", "t", "tr", "date")).bandwidth_tbps == 3.0
    assert report.peaks_for(env).bf16_tflops == H100_SXM.bf16_tflops


def test_plot_is_written(tmp_path: Path) -> None:
    res = synthetic()
    png = report.plot(res, report.peaks_for(res.env), tmp_path / "img" / "bench.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_cli_report_renders_plot_and_markdown(tmp_path: Path) -> None:
    res_path = tmp_path / "results.json"
    synthetic().save(res_path)
    png, md = tmp_path / "img" / "bench.png", tmp_path / "bench.md"
    r = CliRunner().invoke(main, ["bench", "--report", str(res_path), "--plot", str(png), "--markdown", str(md)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG" and "0.985" in r.output  # the console summary's geomean
    text = md.read_text()
    assert "![warploom bench quick](img/bench.png)" in text and f"{0.2 / 0.19:.3f}×" in text
    r = CliRunner().invoke(main, ["bench", "--report", str(res_path), "--bandwidth", "2.0"])
    assert r.exit_code == 0 and "2.00 TB/s (given; the run's copy measured 3.02 TB/s)" in r.output  # markdown to stdout


def test_cli_report_refuses_a_foreign_file(tmp_path: Path) -> None:
    bad = tmp_path / "bench.json"
    bad.write_text('{"env": {}, "rows": []}')  # warploom.bench's format, not the suite's
    r = CliRunner().invoke(main, ["bench", "--report", str(bad)])
    assert r.exit_code == 2 and "--report" in r.output and "warploom-bench/1" in r.output
    r = CliRunner().invoke(main, ["bench", "--report", str(bad), "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "pass one of them" in r.output


def test_cli_run_without_cuda_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = CliRunner().invoke(main, ["bench", "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 1 and "CUDA GPU" in r.output and "--report results.json" in r.output
    assert not (tmp_path / "r.json").exists()
    r = CliRunner().invoke(main, ["bench"])
    assert r.exit_code == 2 and "pass --out results.json" in r.output
    r = CliRunner().invoke(main, ["bench", "--ops", "matmul_bf16,matmul_fp4", "--out", "x.json"])
    assert r.exit_code == 2 and "scaled_mm_fp8_tensorwise" in r.output and "matmul_fp4" in r.output
