"""`warploom bench`'s rendering from a synthetic results JSON (plot, markdown, summary) and its command line on the
CPU: `--report` renders, a run without CUDA fails with a clear message."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from warploom.benchsuite import report
from warploom.benchsuite.results import Environment, Measurement, Results, ResultsFormatError, Row
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
    # (the report names the run's GPU: an H200 run's peaks are the H200's)
    assert report.peaks_for(dataclasses.replace(env, device="NVIDIA H200")).name == "H200"
    assert report.peaks_for(env).name == "H100 SXM"


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


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """Set the field at a dotted path (``rows.0.ours.eager_ms``) of a results JSON."""

    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value

    return edit


def _write(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], object]:
    def write(p: Path) -> None:
        data = synthetic().to_json()
        edit(data)
        p.write_text(json.dumps(data))  # (NaN and Infinity as JSON's writer spells them)

    return write


def _replace(make: Callable[[Path], object]) -> Callable[[Path], object]:
    return lambda p: (p.unlink(), make(p))


# Issue 28 #16: each makes `bench --report` and `--merge` a usage error naming the file and the reason.
RESULTS_CORRUPTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "not UTF-8": (lambda p: p.write_bytes(b'{"format": "\xff\xfe"}'), "expected UTF-8 JSON, got UnicodeDecodeError"),
    "deep nesting": (lambda p: p.write_text("[" * 200_000 + "]" * 200_000), "got RecursionError"),
    "a 5000-digit int": (lambda p: p.write_text("9" * 5000), "got ValueError: Exceeds the limit"),
    "a 400-digit time": (_write(_set("rows.0.ours.eager_ms", 10**400)), "an integer of 401 digits"),
    "a 400-digit M": (_write(_set("rows.0.m", 10**400)), r"rows\[0\]\.m: expected a dimension in \[1, 1099511627776\]"),
    "a zero time": (_write(_set("rows.0.ours.eager_ms", 0)), r"rows\[0\]\.ours: eager_ms: expected a time in ms"),
    "a negative time": (_write(_set("rows.1.torch.eager_ms", -1.5)), r"rows\[1\]\.torch: eager_ms: expected a time"),
    "an infinite time": (_write(_set("rows.0.ours.eager_ms", math.inf)), "got inf"),
    "a NaN graph time": (_write(_set("rows.4.ours.graph_ms", math.nan)), r"rows\[4\]\.ours: graph_ms: .* got nan"),
    "a string time": (_write(_set("rows.0.torch.eager_ms", "1.0")), "eager_ms: expected a JSON number, got '1.0'"),
    "a bool time": (_write(_set("rows.0.torch.eager_ms", True)), "eager_ms: expected a JSON number, got True"),
    "a non-numeric copy_tbps": (_write(_set("env.copy_tbps", "fast")), "env.copy_tbps: expected a JSON number or null"),
    "a negative copy_tbps": (_write(_set("env.copy_tbps", -3.0)), r"env: copy_tbps: expected a bandwidth in TB/s"),
    "an infinite copy_tbps": (_write(_set("env.copy_tbps", math.inf)), "copy_tbps: .* got inf"),
    "a number for the date": (_write(_set("env.date", 20261123)), "env.date: expected a JSON string"),
    "options not an object": (_write(_set("env.options", [1])), "env.options: expected a JSON object"),
    "nested options": (_write(_set("env.options", {"ops": [[[]]]})), "env.options.ops: expected a JSON scalar"),
    "a list at the top": (lambda p: p.write_text("[1, 2]"), "expected a JSON object with format 'warploom-bench/1'"),
    "rows an object": (_write(_set("rows", {"0": {}})), "rows: expected a JSON array"),
    "a row a string": (_write(_set("rows", ["x"])), r"rows\[0\]: expected an object, got 'x'"),
    "a string for ok": (_write(_set("rows.0.ok", "no")), r"rows\[0\]\.ok: expected a JSON bool"),
    "an empty file": (lambda p: p.write_text(""), "expected UTF-8 JSON, got JSONDecodeError"),
    "a FIFO": (_replace(os.mkfifo), "expected a regular file of at most 64 MiB, got .* is not a regular file"),
    "a link to /dev/zero": (_replace(lambda p: p.symlink_to("/dev/zero")), "is not a regular file"),
}


@pytest.mark.parametrize("how", ["--report", "--merge"])
@pytest.mark.parametrize("name", list(RESULTS_CORRUPTIONS))
def test_cli_refuses_a_damaged_results_file(tmp_path: Path, name: str, how: str) -> None:
    corrupt, match = RESULTS_CORRUPTIONS[name]
    path = tmp_path / "r.json"
    synthetic().save(path)
    corrupt(path)
    with pytest.raises(ResultsFormatError, match=match):
        Results.load(path)
    args = [how, str(path)] + (["--out", str(tmp_path / "all.json")] if how == "--merge" else [])
    r = CliRunner().invoke(main, ["bench", *args])
    assert r.exit_code == 2, (r.output, r.exception)
    assert f"Invalid value for {how}: {path}: expected" in " ".join(r.output.split())


@pytest.mark.parametrize("how", ["--report", "--merge"])
def test_cli_refuses_a_missing_file_or_a_directory(tmp_path: Path, how: str) -> None:
    for path, what in ((tmp_path / "none.json", "does not exist"), (tmp_path, "is a directory")):
        args = [how, str(path)] + (["--out", str(tmp_path / "all.json")] if how == "--merge" else [])
        r = CliRunner().invoke(main, ["bench", *args])
        assert r.exit_code == 2 and what in r.output, r.output
        with pytest.raises(ResultsFormatError, match="expected a regular file"):
            Results.load(path)


def test_measurements_and_environments_validate_themselves() -> None:
    for ms in (0.0, -1.0, math.inf, math.nan, 1e-9, 1e10):
        with pytest.raises(ValueError, match="eager_ms: expected a time in ms"):
            Measurement(ms, None, 0.0)
        with pytest.raises(ValueError, match="graph_ms: expected a time in ms"):
            Measurement(1.0, ms, 0.0)
    for bw in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="copy_tbps: expected a bandwidth"):
            dataclasses.replace(synthetic().env, copy_tbps=bw)
    assert Measurement(1.0, None, math.nan).err != 0  # a NaN error is what a run of NaNs measured: kept
