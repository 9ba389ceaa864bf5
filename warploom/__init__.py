"""warploom: a compiler of warp-specialized, pipelined, persistent GEMM kernels (Triton Gluon).

Importing warploom never touches a GPU.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from warploom.backends import gluon_api
from warploom.errors import (
    AlignmentError,
    ArgumentTypeError,
    DeviceError,
    DTypeError,
    InputError,
    InternalError,
    KernelHangError,
    NoTileFitsError,
    PlanError,
    ResourceError,
    ScaleError,
    ShapeError,
    TargetError,
    TritonVersionError,
    UnsupportedError,
    VerificationError,
    WarploomError,
)
from warploom.version import __version__

if TYPE_CHECKING:
    from warploom.api import matmul, plan, scaled_mm
    from warploom.device import H100_SXM, H200, DeviceInfo
    from warploom.dtypes import DType
    from warploom.gate_up import deinterleave_gate_up, interleave_gate_up, silu_mul_interleaved
    from warploom.grouped import grouped_mm, scaled_grouped_mm
    from warploom.kernel import Kernel
    from warploom.planning.plan import Plan
    from warploom.quantization import QuantRecipe, quantize
    from warploom.rows import aligned_rows
    from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, Grouping, ScaleLayout, ScaleRecipe

# A Triton outside the supported range (gluon_api.SUPPORTED) is refused here, at import: TritonVersionError. (It
# reads Triton's package metadata; neither Triton nor torch is imported.)
gluon_api.installed()

# The rest of the public names are imported on first use (PEP 562), so that `import warploom`, and with it the
# command line's `--help` and `--version`, does not wait for torch and Triton.
_LAZY = {
    "matmul": "warploom.api", "plan": "warploom.api", "scaled_mm": "warploom.api",
    "H100_SXM": "warploom.device", "H200": "warploom.device", "DeviceInfo": "warploom.device",
    "DType": "warploom.dtypes",
    "Kernel": "warploom.kernel", "Plan": "warploom.planning.plan", "Accumulation": "warploom.spec",
    "ALayout": "warploom.spec", "BLayout": "warploom.spec", "GemmSpec": "warploom.spec", "ScaleRecipe": "warploom.spec",
    "Grouping": "warploom.spec", "ScaleLayout": "warploom.spec", "grouped_mm": "warploom.api",
    "scaled_grouped_mm": "warploom.api", "quantize": "warploom.quantization",
    "QuantRecipe": "warploom.quantization", "interleave_gate_up": "warploom.gate_up",
    "deinterleave_gate_up": "warploom.gate_up", "silu_mul_interleaved": "warploom.gate_up",
    "aligned_rows": "warploom.rows",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'warploom' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # (later reads do not come here)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# The custom ops torch.ops.warploom.matmul, .scaled_mm, .grouped_mm and .scaled_grouped_mm are registered when
# warploom.api is imported (it imports warploom.grouped, and the grouped names come through it). A program
# that imported torch before warploom gets them at `import warploom`, as it always did (the API costs ~0.1 s more
# then); otherwise the first use of the API registers them.
if "torch" in sys.modules:
    from warploom import api  # noqa: F401


__all__ = [
    "H100_SXM", "H200", "Accumulation", "AlignmentError", "ArgumentTypeError", "ALayout", "BLayout", "DType",
    "DTypeError",
    "DeviceError", "DeviceInfo", "GemmSpec", "Grouping", "InputError", "InternalError", "Kernel", "KernelHangError",
    "NoTileFitsError", "Plan", "PlanError", "QuantRecipe", "ScaleError",
    "ScaleLayout", "ScaleRecipe", "ResourceError", "ShapeError", "TargetError", "TritonVersionError",
    "UnsupportedError", "VerificationError", "WarploomError", "__version__", "aligned_rows", "deinterleave_gate_up",
    "grouped_mm",
    "interleave_gate_up", "matmul", "plan", "quantize", "scaled_grouped_mm", "scaled_mm", "silu_mul_interleaved",
]
