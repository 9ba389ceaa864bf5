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
    # MX fp4: 4-bit floats (1 sign, 2 exponent, 1 mantissa bit: 0, 0.5 ... 6), packed two per byte along K as torch's
    # float4_e2m1fn_x2 (element 2i in the low nibble); sizes in warploom count single values, so use `bits`
    E2M1 = "e2m1"

    @property
    def bits(self) -> int:
        return {DType.BF16: 16, DType.FP16: 16, DType.FP32: 32, DType.E4M3: 8, DType.E5M2: 8, DType.E8M0: 8,
                DType.E2M1: 4}[self]

    @property
    def bytes(self) -> int:
        """Bytes of one element; an error for e2m1, whose element is half a byte (count with `bits`)."""
        if self.bits % 8:
            raise ValueError(f"{self.value} elements are {self.bits} bits: count their size with DType.bits")
        return self.bits // 8

    @property
    def is_fp8(self) -> bool:
        return self in (DType.E4M3, DType.E5M2)

    @property
    def block_scaled(self) -> bool:
        """Whether inputs of this type come with scales (fp8, or MX fp4's e2m1)."""
        return self.is_fp8 or self is DType.E2M1

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
            DType.E2M1: "gl.uint8",  # two values a byte, as tcgen05_mma_scaled reads them ("e2m1")
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
            DType.E2M1: torch.float4_e2m1fn_x2,
        }[self]

    @staticmethod
    def from_torch(dt: Any) -> DType | None:
        """The DType for a torch dtype, or None when warploom has no such type."""
        return _from_torch().get(dt)


@functools.cache
def _from_torch() -> dict[Any, DType]:
    # Built on first use (not at import) so that importing warploom does not import torch.
    return {d.torch: d for d in DType}
