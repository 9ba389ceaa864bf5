"""torch's swizzled "blocked" layout of MX scales (``to_blocked``; cuBLAS's SWIZZLE_32_4_4), both ways.

A (rows, K/32) scale matrix is padded to whole 128x4 blocks (rows to a multiple of 128, scales to a multiple of 4;
padding is zero), and each block becomes 512 contiguous bytes in which the scale of row r and column c sits at
``(r % 32) * 16 + (r // 32) * 4 + c``; blocks follow each other by 128 rows, then by 4 scales. sm_100a's MX kernels
(seed 001) copy one block per 128 rows and k-block with TMA and hand it to tcgen05.cp as is.
"""

from __future__ import annotations

import torch


def to_blocked(scales: torch.Tensor) -> torch.Tensor:
    """(rows, cols) scales -> the flat blocked layout (torch's ``to_blocked``), zero-padded."""
    rows, cols = scales.shape
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = torch.zeros((rp, cp), dtype=scales.dtype, device=scales.device)
    padded[:rows, :cols] = scales
    blocks = padded.view(rp // 128, 4, 32, cp // 4, 4).permute(0, 3, 2, 1, 4)  # (row block, col block, r%32, r//32, c)
    return blocks.contiguous().flatten()


def from_blocked(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The flat blocked layout -> the padded (rows up to 128s, cols up to 4s) scale matrix; `to_blocked`'s inverse."""
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    blocks = flat.reshape(rp // 128, cp // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)  # (row block, r//32, r%32, col block, c)
    return blocks.reshape(rp, cp)
