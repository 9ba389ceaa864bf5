"""Element types warploom knows, with their sizes and their names in torch and in Gluon.

Importing this module does not import torch: the planner and the IR work on plain enums, and torch
is reached only through `DType.torch` when tensors exist.
"""

from __future__ import annotations

import enum
import functools
from typing import Any


class DType(enum.Enum):
    """An element type. The value is its short name, used in the IR's text form."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    E4M3 = "e4m3"
    E5M2 = "e5m2"
    E8M0 = "e8m0"  # an MX block scale: 2**(e - 127), 255 is NaN (a scale type, not an operand type)

    @property
    def bytes(self) -> int:
        return {DType.BF16: 2, DType.FP16: 2, DType.FP32: 4, DType.E4M3: 1, DType.E5M2: 1, DType.E8M0: 1}[self]

    @property
    def is_fp8(self) -> bool:
        return self in (DType.E4M3, DType.E5M2)

    @property
    def gluon(self) -> str:
        """The expression naming this dtype in generated Gluon source (``gl`` is the language module)."""
        return {
            DType.BF16: "gl.bfloat16",
            DType.FP16: "gl.float16",
            DType.FP32: "gl.float32",
            DType.E4M3: "gl.float8e4nv",
            DType.E5M2: "gl.float8e5",
            DType.E8M0: "gl.uint8",  # its bits, decoded by the kernel
        }[self]

    @property
    def torch(self) -> Any:
        import torch

        return {
            DType.BF16: torch.bfloat16,
            DType.FP16: torch.float16,
            DType.FP32: torch.float32,
            DType.E4M3: torch.float8_e4m3fn,
            DType.E5M2: torch.float8_e5m2,
            DType.E8M0: torch.float8_e8m0fnu,
        }[self]

    @staticmethod
    def from_torch(dt: Any) -> DType | None:
        """The DType for a torch dtype, or None when warploom has no such type."""
        return _from_torch().get(dt)


@functools.cache
def _from_torch() -> dict[Any, DType]:
    # Built on first use (not at import) so that importing warploom does not import torch.
    return {d.torch: d for d in DType}
