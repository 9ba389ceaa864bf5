"""MX fp4 values (e2m1: 1 sign, 2 exponent, 1 mantissa bit) packed two per byte, as torch's float4_e2m1fn_x2.

Byte j of a row holds elements 2j (low nibble) and 2j + 1 (high nibble) of K, so an (M, K) fp4 matrix is stored
(M, K/2) and a K-major B (N, K/2), what sm_100a's block-scaled tcgen05 MMA (``kind::mxf4``) reads. The eight
magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4 and 6; bit 3 is the sign.
"""

from __future__ import annotations

import torch

# A nibble's value, by its 4 bits.
_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """(rows, cols) float4_e2m1fn_x2 (any strides) -> the (rows, 2 * cols) fp32 values, element 2j from byte j's low
    nibble."""
    bits = packed.view(torch.uint8).to(torch.int64)  # (rows, cols)
    table = torch.tensor(_VALUES)
    pairs = torch.stack((table[bits & 0xF], table[bits >> 4]), dim=-1)  # (rows, cols, 2)
    return pairs.flatten(-2)


def pack(values: torch.Tensor) -> torch.Tensor:
    """(rows, 2 * cols) fp32 values each exactly one of e2m1's -> (rows, cols) float4_e2m1fn_x2; `unpack`'s inverse."""
    table = torch.tensor(_VALUES)
    hits = values.unsqueeze(-1) == table  # (rows, k, 16); +0.0 == -0.0, so zeros take code 0
    if not bool(hits.any(-1).all()):
        raise ValueError("pack: every value must be one of e2m1's (0, +-0.5, +-1, +-1.5, +-2, +-3, +-4, +-6)")
    codes = hits.to(torch.uint8).argmax(-1).to(torch.uint8)  # (rows, k)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).view(torch.float4_e2m1fn_x2)
