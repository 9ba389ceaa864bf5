"""`warploom bench`: warploom against torch (cuBLAS) and torch.compile on square, LLM and decode shapes.

    shapes.py    the ops, the shape lists (squares, Llama-3 8B/70B, DeepSeek-V3, decode, the random zoo), the suites
                 and their shards
    roofline.py  attainable TFLOP/s of a case (compute or memory roof) and the fraction a time reaches
    results.py   rows of measurements and their environment, to and from JSON; merging a suite's shards
    run.py       inputs, reference, correctness check and timing of each case on the GPU (imported lazily)
    report.py    the plot and the markdown section for docs/benchmarks.md, from a results JSON (CPU)
    report_zoo.py  the same for a zoo run: ratio scatter per op, geomeans, the 10 worst shapes and their plans

Importing this package touches no GPU and does not import triton.
"""

from __future__ import annotations

from warploom.benchsuite.results import Environment, Measurement, Results, Row
from warploom.benchsuite.roofline import H100_SXM, Peaks
from warploom.benchsuite.shapes import ALL_SHAPES, ZOO, Case, Group, Op, Shape, Shard, Suite, cases

__all__ = ["ALL_SHAPES", "H100_SXM", "ZOO", "Case", "Environment", "Group", "Measurement", "Op", "Peaks", "Results",
           "Row", "Shape", "Shard", "Suite", "cases"]
