"""Render a results JSON: a two-panel plot (TFLOP/s and % of roofline against problem size) and a markdown
section for docs/benchmarks.md (every row, then per op the geometric-mean ratio over large shapes and the
worst ratio). CPU only: `warploom bench --report results.json --plot p.png --markdown m.md`. A zoo run renders
through report_zoo.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from warploom.benchsuite import roofline
from warploom.benchsuite.results import Environment, Results, Row
from warploom.benchsuite.roofline import H100_SXM, H200, Peaks
from warploom.benchsuite.shapes import Case, Op, Suite
from warploom.benchsuite.tables import (
    cell,
    finished,
    geomean_of,
    header,
    ops_present,
    ratio_text,
    shape_text,
    tflops_text,
    torch_notes,
    torch_wrong,
)

# "Large": at least 2 * 2048^3 FLOPs, where launch and host costs vanish next to the kernel: squares from 2048,
# every LLM prefill shape; not the decode shapes (2 * 64 * 8192^2 is 8.6 GFLOP) nor 1024^3.
LARGE_FLOPS = 2 * 2048**3


def is_large(case: Case) -> bool:
    return case.flops >= LARGE_FLOPS


def peaks_for(env: Environment, bandwidth_tbps: float | None = None) -> Peaks:
    """The run's GPU's compute peaks (the H200's where its device says so, else the H100 SXM's), with the bandwidth
    given, else the run's measured copy, else the default."""
    bw = bandwidth_tbps or env.copy_tbps or roofline.DEFAULT_BANDWIDTH_TBPS
    return dataclasses.replace(H200 if "H200" in env.device else H100_SXM, bandwidth_tbps=bw)


@dataclass(frozen=True)
class OpSummary:
    """One op's headline over a run.

    Attributes:
        op; large: how many large shapes ran and matched; geomean_ratio / geomean_graph_ratio /
        geomean_compile_ratio: geometric means over those large shapes of the eager, CUDA-graph and
        torch.compile ratios (each over the large shapes where it was measured; None where none was);
        worst: the op's row (any size) with the lowest headline ratio (graph where measured, else eager).
    """

    op: Op
    large: int
    geomean_ratio: float | None
    geomean_graph_ratio: float | None
    geomean_compile_ratio: float | None
    worst: Row | None


def summarize(results: Results) -> tuple[OpSummary, ...]:
    out = []
    for op in ops_present(results.rows):
        done = finished(r for r in results.rows if r.case.op is op)
        large = [r for r in done if is_large(r.case)]
        worst = min(done, key=lambda r: r.headline_ratio or math.inf, default=None)
        out.append(OpSummary(op, len(large), geomean_of(r.ratio for r in large),
                             geomean_of(r.graph_ratio for r in large), geomean_of(r.compile_ratio for r in large),
                             worst))
    return tuple(out)


def markdown(results: Results, peaks: Peaks, plot: str | None = None) -> str:
    """A docs/benchmarks.md section: how it was measured, every row, the per-op summary; `plot` is the
    image's path as the page should link it."""
    if results.env.suite == Suite.ZOO.value:
        from warploom.benchsuite import report_zoo

        return report_zoo.markdown(results, peaks, plot)
    env = results.env
    lines = header(results, peaks)
    if plot:
        lines += [f"![warploom bench {env.suite}]({plot})", ""]
    lines += [
        "| op | M×N×K | shape | warploom TFLOP/s | torch TFLOP/s | ratio | graph ratio | compile ratio "
        "| % roofline warploom / torch | error warploom / torch | plan |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_table_row(r, peaks) for r in results.rows]
    lines += ["", "Per op: geometric means over the large shapes (at least 2·2048³ FLOP) that ran and matched; "
              "worst: the lowest ratio over every size (graph where measured, else eager).", "",
              "| op | large shapes | geomean ratio | geomean graph ratio | geomean compile ratio | worst |",
              "|---|---|---|---|---|---|"]
    for s in summarize(results):
        worst = "–"
        if s.worst is not None:
            kind = "graph" if s.worst.graph_ratio is not None else "eager"
            worst = (f"{ratio_text(s.worst.headline_ratio)} ({shape_text(s.worst.case)}, {s.worst.case.shape.name}, "
                     f"{kind})")
        lines.append(f"| {s.op.label} | {s.large} | {ratio_text(s.geomean_ratio)} | "
                     f"{ratio_text(s.geomean_graph_ratio)} | {ratio_text(s.geomean_compile_ratio)} | {worst} |")
    failed = [r for r in results.rows if not r.ok]
    if failed:
        lines += ["", f"Failed or mismatched: {len(failed)} of {len(results.rows)} rows (left out of the summary)."]
    lines += torch_notes(results.rows) + torch_wrong(results.rows)
    return "\n".join(lines) + "\n"


def _table_row(r: Row, peaks: Peaks) -> str:
    c = r.case
    head = f"| {c.op.label} | {shape_text(c)} | {c.shape.name} |"
    if r.ours is None or r.torch is None:
        return f"{head} – | – | – | – | – | – | – | {r.plan or '–'} (**failed**: {cell(r.failure)}) |"
    ours_tf, torch_tf = r.tflops(r.ours), r.tflops(r.torch)
    assert ours_tf is not None and torch_tf is not None
    bound = "C" if roofline.bound(c, peaks) is roofline.Bound.COMPUTE else "M"
    roof = (f"{100 * roofline.fraction(c, ours_tf, peaks):.0f}% / {100 * roofline.fraction(c, torch_tf, peaks):.0f}%"
            f" ({bound})")
    errors = f"{r.ours.err:.1e} / {r.torch.err:.1e}"
    plan = r.plan + ("" if r.ok else f" (**mismatch**: {cell(r.failure)})")
    return (f"{head} {tflops_text(ours_tf)} | {tflops_text(torch_tf)} | {ratio_text(r.ratio)} | "
            f"{ratio_text(r.graph_ratio)} | {ratio_text(r.compile_ratio)} | {roof} | {errors} | {plan} |")


def plot(results: Results, peaks: Peaks, path: Path) -> Path:
    """Save a PNG: TFLOP/s (left) and % of roofline (right) against GFLOP per call, per op; warploom filled
    circles, torch crosses of the same color (the zoo: report_zoo's ratio scatter). Returns the path."""
    if results.env.suite == Suite.ZOO.value:
        from warploom.benchsuite import report_zoo

        return report_zoo.plot(results, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, roof) = plt.subplots(1, 2, figsize=(14, 5.5))
    top = 110.0
    for i, op in enumerate(ops_present(results.rows)):
        rows = sorted(finished(r for r in results.rows if r.case.op is op), key=lambda r: r.case.flops)
        if not rows:
            continue
        gflop = [r.case.flops / 1e9 for r in rows]
        for who, marker, fill in (("warploom", "o", f"C{i}"), ("torch", "x", f"C{i}")):
            tf = [r.tflops(r.ours if who == "warploom" else r.torch) or math.nan for r in rows]
            pct = [100 * roofline.fraction(r.case, t, peaks) for r, t in zip(rows, tf, strict=True)]
            speed.plot(gflop, tf, marker, color=fill, label=f"{op.label}: {who}", alpha=0.85)
            roof.plot(gflop, pct, marker, color=fill, alpha=0.85)
            top = max(top, *(p + 10 for p in pct if math.isfinite(p)))
    for ax in (speed, roof):
        ax.set_xscale("log")
        ax.set_xlabel("GFLOP per call (2MNK)")
        ax.grid(True, which="both", alpha=0.3)
    speed.set_yscale("log")
    speed.set_ylabel("TFLOP/s")
    speed.set_title("throughput (graph time where measured)")
    roof.axhline(100, color="k", lw=0.8)
    roof.set_ylim(0, top)  # above 100%: a roof set too low (pass the measured --bandwidth)
    roof.set_ylabel("% of roofline")
    roof.set_title(f"% of min({peaks.name} peak, {peaks.bandwidth_tbps:.2f} TB/s × FLOP/byte)")
    speed.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"warploom bench ({results.env.suite}) on {results.env.device}, {results.env.date}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
