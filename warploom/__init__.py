"""warploom: a compiler of warp-specialized, pipelined, persistent GEMM kernels (Triton Gluon).

Importing warploom never touches a GPU.
"""

from __future__ import annotations

from warploom.api import matmul, plan, scaled_mm
from warploom.backends import gluon_api
from warploom.device import H100_SXM, DeviceInfo
from warploom.dtypes import DType
from warploom.errors import (
    AlignmentError,
    ArgumentTypeError,
    DeviceError,
    DTypeError,
    InputError,
    InternalError,
    ResourceError,
    ScaleError,
    ShapeError,
    TargetError,
    TritonVersionError,
    UnsupportedError,
    VerificationError,
    WarploomError,
)
from warploom.kernel import Kernel
from warploom.planner import Plan
from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, ScaleLayout, ScaleRecipe

__version__ = "0.1.0"

# A Triton outside the supported range (gluon_api.SUPPORTED) is refused here, at import: TritonVersionError.
gluon_api.installed()

__all__ = [
    "H100_SXM", "Accumulation", "AlignmentError", "ArgumentTypeError", "ALayout", "BLayout", "DType", "DTypeError",
    "DeviceError", "DeviceInfo", "GemmSpec", "InputError", "InternalError", "Kernel", "Plan", "ScaleError",
    "ScaleLayout", "ScaleRecipe", "ResourceError", "ShapeError", "TargetError", "TritonVersionError",
    "UnsupportedError",
    "VerificationError", "WarploomError", "matmul", "plan", "scaled_mm",
]
