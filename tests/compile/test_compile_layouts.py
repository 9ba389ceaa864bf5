"""The version-dependent layouts the backends emit (backends/gluon_api.py) are the same linear layouts under every
supported Triton: the installed Triton builds the layout from the text emitted for it, and it must equal the bases
recorded here, which Triton 3.6 (``warps_per_cta``, ``get_tmem_reg_layout``) and 3.9 (warp bases, the descriptor's
``get_reg_layout``) both produce. CI runs this under both ends (scripts/test.sh).
"""

from __future__ import annotations

from typing import Any

import pytest

from warploom.backends import gluon_api


def _linear(layout: Any, shape: list[int]) -> str:
    from triton._C.libtriton import gluon_ir, ir

    ctx = ir.context()
    ir.load_dialects(ctx)
    builder = gluon_ir.GluonOpBuilder(ctx)
    return str(builder.to_linear_layout(layout._to_ir(builder), shape))


def _bases(reg: str, lane: str, warp: str, shape: list[int]) -> str:
    return f"DistributedLinearLayout(reg_bases={reg}, lane_bases={lane}, warp_bases={warp}, block_bases=[], " \
           f"shape={shape})"


_WMMA_LANES = "[[1, 0], [2, 0], [4, 0], [8, 0], [0, 8]]"
# (warps_m, warps_n, instruction K) -> the accumulator's linear layout over a 128x128 tile
WMMA = {
    (2, 2, 32): _bases("[[0, 1], [0, 2], [0, 4], [0, 32], [0, 64], [32, 0], [64, 0]]", _WMMA_LANES,
                       "[[0, 16], [16, 0]]", [128, 128]),
    (2, 4, 32): _bases("[[0, 1], [0, 2], [0, 4], [0, 64], [32, 0], [64, 0]]", _WMMA_LANES,
                       "[[0, 16], [0, 32], [16, 0]]", [128, 128]),
    (1, 1, 32): _bases("[[0, 1], [0, 2], [0, 4], [0, 16], [0, 32], [0, 64], [16, 0], [32, 0], [64, 0]]",
                       _WMMA_LANES, "[]", [128, 128]),
    (1, 2, 64): _bases("[[0, 1], [0, 2], [0, 4], [0, 32], [0, 64], [16, 0], [32, 0], [64, 0]]", _WMMA_LANES,
                       "[[0, 16]]", [128, 128]),
}


@pytest.mark.parametrize("warps_m,warps_n,k", list(WMMA))
def test_wmma_layout(warps_m: int, warps_n: int, k: int) -> None:
    from triton.experimental.gluon.language.amd import AMDWMMALayout

    text = gluon_api.current().wmma_layout(warps_m, warps_n, (16, 16, k))
    assert _linear(eval(text, {"AMDWMMALayout": AMDWMMALayout}), [128, 128]) == WMMA[warps_m, warps_n, k]


_TMEM_LANES = "[[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]]"
# (rows, the ring's columns, the block's columns, warps) -> the tcgen05.ld register layout of the block
TMEM = {
    (128, 256, 64, 4): _bases("[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [0, 32]]", _TMEM_LANES,
                              "[[32, 0], [64, 0]]", [128, 64]),
    (128, 256, 128, 8): _bases("[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [0, 32]]", _TMEM_LANES,
                               "[[32, 0], [64, 0], [0, 64]]", [128, 128]),
    (64, 128, 64, 4): _bases("[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]]", "[[1, 0], [2, 0], [4, 0], [8, 0], [0, 32]]",
                             "[[16, 0], [32, 0]]", [64, 64]),
    (128, 256, 32, 4): _bases("[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]]", _TMEM_LANES, "[[32, 0], [64, 0]]",
                              [128, 32]),
}


@pytest.mark.parametrize("rows,ring_cols,cols,warps", list(TMEM))
def test_tmem_reg_layout(rows: int, ring_cols: int, cols: int, warps: int) -> None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia import blackwell

    api = gluon_api.current()
    if api.tmem_layout_from_type:
        # `ring.index(0).slice(0, cols)` outside a kernel: the slice's type keeps the ring slot's layout and allocation
        # shape (Triton's tensor_memory_descriptor.slice); the compile tier compiles the emitted text itself.
        assert api.tmem_reg_layout("acc_tm", "BM", cols, warps) == \
            f"acc_tm.index(0).slice(0, {cols}).get_reg_layout({warps})"
        slot = blackwell.TensorMemoryLayout([rows, ring_cols], col_stride=1)
        ty = blackwell.tensor_memory_descriptor_type(gl.float32, [rows, cols], slot, [rows, ring_cols])
        layout = ty.get_reg_layout(warps)
    else:
        text = api.tmem_reg_layout("acc_tm", str(rows), cols, warps)
        layout = eval(text, {"gl": gl, "get_tmem_reg_layout": blackwell.get_tmem_reg_layout,
                             "TensorMemoryLayout": blackwell.TensorMemoryLayout})
    assert _linear(layout, [rows, cols]) == TMEM[rows, ring_cols, cols, warps]
