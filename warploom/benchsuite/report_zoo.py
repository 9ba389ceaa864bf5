"""Render a zoo run (`warploom bench --suite zoo`): per op the geometric-mean ratio over every shape, a scatter of
the ratio against problem size, and the 10 worst shapes with the plan warploom chose for each.

The zoo's 1,120 rows would bury a table of every row, so the markdown leaves them to the JSON and shows where
warploom loses instead. report.markdown and report.plot hand a zoo run here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warploom.benchsuite import roofline, shapes
from warploom.benchsuite.results import Results, Row
from warploom.benchsuite.roofline import Peaks
from warploom.benchsuite.shapes import Op
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

WORST = 10  # rows per op in the worst table
MAX_FAILED = 20  # failed rows listed by name; the rest counted
# Ratio ticks on the plot's log axis: readable numbers rather than powers of 2, denser near 1 where it matters.
RATIO_TICKS = (0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0)


@dataclass(frozen=True)
class ZooSummary:
    """One op over the zoo.

    Attributes:
        op; ran: rows that ran and matched; failed: rows that did not (refused, crashed or mismatched);
        geomean_ratio / geomean_graph_ratio / geomean_compile_ratio: geometric means over every row that ran
        (each over the rows where it was measured; None where none was); faster: rows whose headline ratio
        (graph where measured, else eager) is at least 1; worst: the WORST rows of lowest headline ratio, lowest
        first.
    """

    op: Op
    ran: int
    failed: int
    geomean_ratio: float | None
    geomean_graph_ratio: float | None
    geomean_compile_ratio: float | None
    faster: int
    worst: tuple[Row, ...]


def summarize(results: Results) -> tuple[ZooSummary, ...]:
    out = []
    for op in ops_present(results.rows):
        rows = [r for r in results.rows if r.case.op is op]
        done = finished(rows)
        worst = sorted(done, key=lambda r: r.headline_ratio or math.inf)[:WORST]
        out.append(ZooSummary(op, len(done), len(rows) - len(done), geomean_of(r.ratio for r in done),
                              geomean_of(r.graph_ratio for r in done), geomean_of(r.compile_ratio for r in done),
                              sum(1 for r in done if (r.headline_ratio or 0) >= 1), tuple(worst)))
    return tuple(out)


def markdown(results: Results, peaks: Peaks, plot: str | None = None) -> str:
    """A docs/benchmarks.md section for a zoo run; `plot` is the image's path as the page should link it."""
    lines = header(results, peaks)
    lo, hi = shapes.ZOO_LO, shapes.ZOO_HI
    lines += [
        f"- The zoo: {shapes.ZOO_COUNT} shapes with M, N, K each log-uniform in {lo}..{hi} and "
        f"{shapes.ZOO_SMALL_M} with M in 1..{lo} (`random.Random({shapes.ZOO_SEED})`); N and K multiples of "
        f"{shapes.ZOO_BF16_ALIGN} for bf16 and {shapes.ZOO_FP8_ALIGN} for fp8 (TMA's 16-byte rows), any M (blockwise: "
        f"rounded up to a multiple of {shapes.ZOO_BLOCKWISE_M_ALIGN}, as torch's blockwise kernel needs); "
        f"redrawn above 2·8192³ FLOP ({shapes.ZOO_MAX_FLOPS / 1e12:.2f} TFLOP). Every row is in the JSON; "
        "geomeans are over every shape that ran and matched, small ones too.",
        "",
    ]
    if plot:
        lines += [f"![warploom bench zoo]({plot})", ""]
    summaries = summarize(results)
    lines += ["| op | shapes ran | geomean ratio | geomean graph ratio | geomean compile ratio | faster than torch "
              "| failed |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {s.op.label} | {s.ran} of {len(shapes.ZOO)} | {ratio_text(s.geomean_ratio)} | "
              f"{ratio_text(s.geomean_graph_ratio)} | {ratio_text(s.geomean_compile_ratio)} | {s.faster} of {s.ran} | "
              f"{s.failed} |"
              for s in summaries]
    for s in summaries:
        lines += ["", f"### {s.op.label}: the {len(s.worst)} worst", "",
                  "| # | M×N×K | shape | GFLOP | ratio | graph ratio | warploom TFLOP/s | torch TFLOP/s "
                  "| % roofline warploom / torch | plan |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [_worst_row(i, r, peaks) for i, r in enumerate(s.worst, 1)]
    lines += _failed(results.rows) + torch_notes(results.rows) + torch_wrong(results.rows)
    return "\n".join(lines) + "\n"


def _worst_row(i: int, r: Row, peaks: Peaks) -> str:
    c = r.case
    ours_tf, torch_tf = r.tflops(r.ours), r.tflops(r.torch)
    assert ours_tf is not None and torch_tf is not None  # worst rows ran
    roof = f"{100 * roofline.fraction(c, ours_tf, peaks):.0f}% / {100 * roofline.fraction(c, torch_tf, peaks):.0f}%"
    return (f"| {i} | {shape_text(c)} | {c.shape.name} | {c.flops / 1e9:.3g} | {ratio_text(r.ratio)} | "
            f"{ratio_text(r.graph_ratio)} | "
            f"{tflops_text(ours_tf)} | {tflops_text(torch_tf)} | {roof} | {r.plan or '–'} |")


def _failed(rows: Sequence[Row]) -> list[str]:
    bad = [r for r in rows if not r.ok]
    if not bad:
        return []
    lines = ["", f"Failed or mismatched: {len(bad)} of {len(rows)} rows (left out of the geomeans).", "",
             "| op | M×N×K | shape | failure |", "|---|---|---|---|"]
    lines += [f"| {r.case.op.label} | {shape_text(r.case)} | {r.case.shape.name} | {cell(r.failure)} |"
              for r in bad[:MAX_FAILED]]
    if len(bad) > MAX_FAILED:
        lines.append(f"| … | | | {len(bad) - MAX_FAILED} more in the JSON |")
    return lines


def plot(results: Results, path: Path) -> Path:
    """Save a PNG: per op a panel of ratio (log) against GFLOP per call (log), CUDA-graph ratios filled, eager
    ratios hollow, a line at 1 (above: warploom faster). Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = summarize(results)
    cols = min(3, max(1, len(summaries)))
    rows_n = -(-max(1, len(summaries)) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 4.4 * rows_n), squeeze=False, sharey=True,
                             constrained_layout=True)
    for ax, s in zip(axes.flat, summaries, strict=False):
        done = finished(r for r in results.rows if r.case.op is s.op)
        gflop = [r.case.flops / 1e9 for r in done]
        for label, ratios, face in (("graph", [r.graph_ratio for r in done], "C0"),
                                    ("eager", [r.ratio for r in done], "none")):
            pts = [(g, v) for g, v in zip(gflop, ratios, strict=True) if v is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.scatter(xs, ys, s=14, facecolors=face, edgecolors="C0", linewidths=0.7, alpha=0.8, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_yticks(RATIO_TICKS, [f"{t:g}" for t in RATIO_TICKS])
        ax.set_yticks([], minor=True)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_xlabel("GFLOP per call (2MNK)")
        ax.set_title(f"{s.op.label}\ngeomean graph {ratio_text(s.geomean_graph_ratio)}, "
                     f"eager {ratio_text(s.geomean_ratio)}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes.flat[len(summaries):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("torch ms / warploom ms")
    fig.suptitle(f"warploom bench zoo on {results.env.device}, {results.env.date}"
                 + (f" (shards {results.env.shard})" if results.env.shard else ""))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
