"""torch's swizzled "blocked" layout of MX scales (``to_blocked``; cuBLAS's SWIZZLE_32_4_4), both ways.

A (rows, K/32) scale matrix is padded to whole 128x4 blocks (rows to a multiple of 128, scales to a multiple of 4;
padding is zero), and each block becomes 512 contiguous bytes in which the scale of row r and column c sits at
``(r % 32) * 16 + (r // 32) * 4 + c``; blocks follow each other by 128 rows, then by 4 scales. sm_100a's MX kernels
(seed 001) copy the k-block's blocks with TMA (NVFP4 at BK 128: two chunks of 4 scales per 128 rows) and hand them
to tcgen05.cp as they are: `scale_box` is what one such copy brings, the simulator's model of it.
"""

from __future__ import annotations

from typing import Any

import torch

BLOCK_ROWS, BLOCK_COLS = 128, 4  # one block: what one tcgen05.cp 32x128b.warpx4 copies (512 bytes)


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


def offset(r: Any, c: Any, cols: int | Any) -> Any:
    """Where the scale of row `r` and column `c` of a (rows, `cols`) matrix lies in its blocked layout (ints or
    integer tensors alike): block (r // 128, c // 4), of cdiv(cols, 4) a block row, 512 bytes each; inside it
    ``(r % 32) * 16 + (r % 128 // 32) * 4 + c % 4``. Seed 000's scale partition loads blocked scales at these
    offsets (backends/gluon_sm100.py writes the same expression; the simulator gathers with this function)."""
    return ((r // BLOCK_ROWS) * ((cols + BLOCK_COLS - 1) // BLOCK_COLS) + c // BLOCK_COLS) * 512 \
        + (r % 32) * 16 + (r % BLOCK_ROWS // 32) * 4 + c % BLOCK_COLS


def chunk_coord(k_block: int, chunks: int) -> int:
    """The block column (the TMA coordinate along K of the 4-D (row blocks, block columns, 2, 256) view) where
    k-block `k_block` starts, at `chunks` 128x4 blocks a k-block: NVFP4's 128-deep k-block spans two (4 x 16 of K
    each), so k-block kb starts at block 2 * kb. The Gluon backend writes the same product (backends/gluon_sm100.py)."""
    return k_block * chunks


def scale_box(flat: torch.Tensor, rows: int, cols: int, row_block: int, col_block: int, box_rows: int,
              box_chunks: int, fill: float) -> torch.Tensor:
    """What one TMA box of blocked scales brings and tcgen05.cp reads: the (box_rows / 128, box_chunks) blocks at
    [row_block, col_block] of `flat` (the blocked layout of a (rows, cols) matrix), `fill` in blocks past its edges
    (TMA's zero bytes), viewed as the kernel views the slot: (box_rows, 4 * box_chunks), row r of block column j at
    column 4 j + c."""
    rb, cb = -(-rows // BLOCK_ROWS), -(-cols // BLOCK_COLS)
    blocks = flat.reshape(rb, cb, 512)
    out = torch.full((box_rows // BLOCK_ROWS, box_chunks, 512), fill, dtype=flat.dtype)
    h, w = min(out.shape[0], rb - row_block), min(box_chunks, cb - col_block)
    if h > 0 and w > 0:
        out[:h, :w] = blocks[row_block:row_block + h, col_block:col_block + w]
    # (row block, block column, r % 32, r // 32, c) -> (row block, r // 32, r % 32, block column, c)
    return out.reshape(-1, box_chunks, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(box_rows, box_chunks * BLOCK_COLS)
