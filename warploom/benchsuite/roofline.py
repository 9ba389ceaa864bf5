"""The roofline: how fast a case could run at best on a GPU, and what fraction of that a time reaches.

A GEMM is bound either by its tensor cores or by moving its tensors through memory once:

    attainable TFLOP/s = min(peak TFLOP/s of its dtype, bandwidth (TB/s) * arithmetic intensity (FLOP/byte))

with the arithmetic intensity 2MNK / bytes, bytes = A + B + output (+ scales, bias, residual) in their dtypes.
Large GEMMs sit under the compute roof, decode shapes (M <= 64) under the memory one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from warploom.benchsuite.shapes import Case

# A device-to-device copy on the H100 SXM measured 3.02 TB/s (bytes read + written) against the 3.35 datasheet.
DEFAULT_BANDWIDTH_TBPS = 3.0


@dataclass(frozen=True)
class Peaks:
    """A GPU's roofs.

    Attributes:
        name: for reports; bf16_tflops / fp8_tflops: dense tensor-core peaks (no sparsity);
        bandwidth_tbps: memory bandwidth in TB/s (10^12 bytes/s), best a measured copy's.
    """

    name: str
    bf16_tflops: float
    fp8_tflops: float
    bandwidth_tbps: float = DEFAULT_BANDWIDTH_TBPS

    def __post_init__(self) -> None:
        if min(self.bf16_tflops, self.fp8_tflops, self.bandwidth_tbps) <= 0:
            raise ValueError(f"Expected positive peaks but got {self}")


# Datasheet dense peaks of the H100 SXM, and of the H200, which has the same tensor cores and more bandwidth (a run
# measures its copy bandwidth: `report.peaks_for`).
H100_SXM = Peaks("H100 SXM", bf16_tflops=989.0, fp8_tflops=1979.0)
H200 = Peaks("H200", bf16_tflops=989.0, fp8_tflops=1979.0)


class Bound(enum.Enum):
    """Which roof limits a case."""

    COMPUTE = "compute"
    MEMORY = "memory"


def bytes_moved(case: Case) -> int:
    """Bytes every tensor of the case takes, read or written once: the least traffic the op can make."""
    return sum(t.nbytes for t in case.tensors())


def intensity(case: Case) -> float:
    """Arithmetic intensity, FLOP per byte moved."""
    return case.flops / bytes_moved(case)


def peak_tflops(case: Case, peaks: Peaks) -> float:
    return peaks.fp8_tflops if case.op.fp8 else peaks.bf16_tflops


def attainable_tflops(case: Case, peaks: Peaks) -> float:
    """min(compute roof, bandwidth roof at the case's intensity); TB/s * FLOP/byte = TFLOP/s."""
    return min(peak_tflops(case, peaks), peaks.bandwidth_tbps * intensity(case))


def bound(case: Case, peaks: Peaks) -> Bound:
    return Bound.MEMORY if peaks.bandwidth_tbps * intensity(case) < peak_tflops(case, peaks) else Bound.COMPUTE


def fraction(case: Case, tflops: float, peaks: Peaks) -> float:
    """The fraction (0..1, above 1 would be a measuring error) of the attainable rate that `tflops` reaches."""
    return tflops / attainable_tflops(case, peaks)


def tflops(case: Case, ms: float) -> float:
    """TFLOP/s of one call taking `ms` milliseconds."""
    return case.flops / ms / 1e9
