"""The pieces the benchmark reports share (report.py for the suites, report_zoo.py for the zoo): geometric means,
the rows that count, and the text of a markdown cell, a ratio, a TFLOP/s figure, a shape, the section's header."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from warploom.benchsuite.results import Results, Row
from warploom.benchsuite.roofline import Peaks
from warploom.benchsuite.shapes import Case, Op


def geomean(xs: Iterable[float]) -> float:
    vals = list(xs)
    if not vals or min(vals) <= 0:
        raise ValueError(f"Expected a non-empty list of positive numbers but got {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def finished(rows: Iterable[Row]) -> list[Row]:
    """Rows that ran and matched: the ones whose speed means something."""
    return [r for r in rows if r.ok and r.ours is not None and r.torch is not None]


def geomean_of(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return geomean(vals) if vals else None


def ops_present(rows: Sequence[Row]) -> list[Op]:
    """The ops present, in Op order."""
    present = {r.case.op for r in rows}
    return [op for op in Op if op in present]


def ratio_text(v: float | None, fmt: str = ".3f", suffix: str = "×") -> str:
    return "–" if v is None else f"{v:{fmt}}{suffix}"


def tflops_text(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def shape_text(case: Case) -> str:
    return f"{case.m}×{case.n}×{case.k}"


def header(results: Results, peaks: Peaks) -> list[str]:
    """The section's title and how it was measured."""
    env = results.env
    if not env.copy_tbps:
        measured = "assumed: the run measured no copy"
    elif math.isclose(env.copy_tbps, peaks.bandwidth_tbps):
        measured = "measured copy"
    else:
        measured = f"given; the run's copy measured {env.copy_tbps:.2f} TB/s"
    return [
        f"## {env.date[:10]} — `warploom bench --suite {env.suite}`",
        "",
        f"- Device: {env.device}, torch {env.torch}, triton {env.triton} (run of {env.date}"
        + (f" on {env.host}" if env.host else "") + ").",
        f"- Command: `{env.command}`." if env.command else "- Command: not recorded.",
        "- Ratio: torch ms / warploom ms in the same process (above 1: warploom is faster). *ratio*: eager "
        "Python calls (`do_bench` median, host overhead included); *graph*: CUDA graph of 10 calls (kernel "
        "time; decode shapes, or every shape with `--graph`); *compile*: "
        "`torch.compile(mode=\"max-autotune-no-cudagraphs\")` of the same torch function, graph times where measured.",
        "- TFLOP/s and % of roofline use the graph time where measured, else the eager time. Roofline: "
        f"min(peak, bandwidth × FLOP/byte) with {peaks.name} dense peaks bf16 {peaks.bf16_tflops:.0f} / fp8 "
        f"{peaks.fp8_tflops:.0f} TFLOP/s and {peaks.bandwidth_tbps:.2f} TB/s ({measured}); bytes = A + B + "
        "output (+ scales, bias, residual); C: compute-bound, M: memory-bound.",
        "- Error: scale-free 1 − 2Σxy/Σ(x²+y²) against the fp32 reference, warploom / torch.",
        *([f"- Shards: {env.shard} (a part of the suite)."] if env.shard else []),
        "",
    ]


def cell(text: str) -> str:
    """Text safe inside a markdown table cell: one line, no column bars."""
    return " ".join(text.split()).replace("|", "\\|")[:200]


# The scale-free error against the fp32 reference that a right output stays below: bf16 outputs alone round at
# ~1e-6, fp8 fast accumulation at large K stays below 1e-5 over every stored zoo row. warploom's output may be off by
# this much (`run.check`); a contender off by more computed another product: torch's blockwise _scaled_mm under
# torch 2.11 where ceil(K/128) is not a multiple of 4 and N > 128 (cuBLASLt reads scale_b's rows that far apart,
# torch passes them unpadded), 16-24 of 28 zoo shapes a shard, errors 2.5e-4 to 0.99.
ERR_FLOOR = 1e-4


def torch_wrong(rows: Sequence[Row]) -> list[str]:
    """The lines naming, per op, the rows where torch's output was off the fp32 reference (`ERR_FLOOR`): its kernel
    was timed all the same, so the ratio compares the two kernels' times, but torch's result was not the product."""
    lines: list[str] = []
    for op in ops_present(rows):
        mine = [r for r in rows if r.case.op is op]
        wrong = [r for r in mine if r.torch is not None and r.torch.err > ERR_FLOOR]
        if wrong:
            lines += ["", f"{op.label}: torch's output was off the fp32 reference at {len(wrong)} of {len(mine)} rows "
                      f"(its kernel timed all the same; warploom's matched the reference at {sum(r.ok for r in wrong)} "
                      "of them): " + ", ".join(f"{shape_text(r.case)} {r.torch.err:.2g}"
                                               for r in wrong if r.torch is not None)]
    return lines


def torch_notes(rows: Sequence[Row]) -> list[str]:
    """The lines saying where torch's contender differed from its usual call (`Row.torch_note`); none if nowhere."""
    noted = [r for r in rows if r.torch_note]
    if not noted:
        return []
    return ["", f"torch's contender differed at {len(noted)} of {len(rows)} rows (its time includes the difference):",
            ""] + [f"- {r.case.op.label} {shape_text(r.case)} ({r.case.shape.name}): {r.torch_note}" for r in noted]
