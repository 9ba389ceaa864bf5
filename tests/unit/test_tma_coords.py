"""TMA loads start at 16-byte multiples along their innermost axis (the generated Gluon, read without a GPU).

An H100 raises "an illegal instruction was encountered" for a TMA copy whose innermost coordinate is not a multiple
of 16 bytes, whatever the descriptor allows. So every load's innermost coordinate must be built from values that
are multiples of 16 bytes by construction: k-block counts times BK, tile origins along N, and a K-grouped module's
group start rounded down (``k_base``); never a bound read from the device, such as the group start ``k_start``
itself (the K-grouped weight gradient's crash with offsets ending at any column). The simulator checks the values
(FindingKind.TMA_MISALIGNED); this checks the source, names included.
"""

from __future__ import annotations

import ast

import pytest

from warploom import H100_SXM, BLayout, DType, GemmSpec, Grouping
from warploom.kernel import build

# names whose values are multiples of 16 bytes along an innermost axis, in every kernel below
ALIGNED = frozenset({"kk", "BK", "BN", "k0", "k_base", "off_n"})

K, OFF, MASK = Grouping.K_OFFSETS, Grouping.OFFSETS, Grouping.MASKED
SPECS = [
    ("dense_bf16", GemmSpec(4096, 4096, 4096)),
    ("offsets_bf16", GemmSpec(8192, 4096, 7168, grouping=OFF, groups=8)),
    ("masked_bf16", GemmSpec(8 * 64, 4096, 7168, grouping=MASK, groups=8)),
    ("k_grouped_bf16_128x256", GemmSpec(2048, 4096, 8192, grouping=K, groups=8)),
    ("k_grouped_bf16_128x128", GemmSpec(200, 7168, 16384, grouping=K, groups=32)),
    ("k_grouped_fp16_n_major", GemmSpec(1024, 1024, 8192, DType.FP16, DType.FP16, DType.FP16, BLayout.N_MAJOR,
                                        grouping=K, groups=4)),
]


def tma_load_inner_coords(text: str) -> list[ast.expr]:
    """The innermost coordinate of every TMA copy into shared memory in a kernel's source (both spellings)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("async_copy_global_to_shared", "async_load")):
            coords = node.args[1]
            assert isinstance(coords, ast.List), ast.unparse(node)
            out.append(coords.elts[-1])
    return out


@pytest.mark.parametrize("name,spec", SPECS, ids=[s[0] for s in SPECS])
def test_tma_load_inner_coordinates_are_aligned_by_construction(name: str, spec: GemmSpec) -> None:
    coords = tma_load_inner_coords(build(spec, H100_SXM).gluon.text)
    assert coords
    for c in coords:
        names = {n.id for n in ast.walk(c) if isinstance(n, ast.Name)}
        assert names <= ALIGNED, f"{name}: innermost TMA coordinate `{ast.unparse(c)}` uses {names - ALIGNED}"


def test_k_grouped_start_is_rounded_to_16_bytes_and_its_head_masked() -> None:
    """The K-grouped kernel loads from the group's K start rounded down to 16 bytes (8 bf16) and zeroes A's
    columns on both sides of the group's range in the slot, before the wgmma."""
    text = build(GemmSpec(256, 256, 1024, grouping=K, groups=4), H100_SXM).gluon.text
    assert "k_base = k_start // 8 * 8" in text
    assert "k_tiles = gl.maximum(gl.cdiv(k_end - k_base, BK), 1)" in text
    assert "if (k_skip > 0) | (k_left < BK):" in text
    assert "(mk_cols >= k_skip) & (mk_cols < k_left)" in text
