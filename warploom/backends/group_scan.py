"""The device-side group scan of a grouped GEMM (ir.Tiling.grouping): the ``@gluon.jit`` helpers that count a
launch's (group, tile) pairs and find each tile's group from the group bounds, on the device (no host sync, so a
CUDA graph replays with other offsets). The sm_90a emitter writes them into a grouped kernel's source;
backends/gluon_grouped.py has the rest of a grouped kernel, warploom.ir.raster.group_tiles the same scan in Python."""

from __future__ import annotations

from warploom.spec import Grouping

# Each grouping's rows of group g, from the previous group's end `start` (OFFSETS: cumulative ends, clamped to
# [start, M] so decreasing or too-large offsets never address past A and C; MASKED: g * M_max plus the count,
# clamped to [0, M_max]).
_BOUNDS = {
    Grouping.OFFSETS: ("    # offs: group g owns rows offs[g-1] .. offs[g]\n"
                       "    start = end\n"
                       "    end = gl.minimum(gl.maximum(gl.load(group_ptr + g), start), M)\n"),
    Grouping.MASKED: ("    # masked_m: group g owns rows g * M_max .. g * M_max + masked_m[g] (at most M_max)\n"
                      "    start = g * (M // E)\n"
                      "    end = start + gl.minimum(gl.maximum(gl.load(group_ptr + g), 0), M // E)\n"),
}


# A K-grouped module's (Grouping.K_OFFSETS): every group has the same tiles, so a tile's group is a division; its
# K range is the scan over offs up to it (clamped as OFFSETS' rows are: ir.raster.group_bounds over K).
_K_GROUP_TILE = """\
@gluon.jit
def k_group_tile(tile_id, group_ptr, M, K, num_pid_m, num_pid_n):
    # K-grouped: group g owns tile ids g * T .. (g + 1) * T - 1 (T = C[g]'s (M, N) tiles), rows g * M .. (g + 1) * M
    # of C (G * M, N), and K columns offs[g-1] .. offs[g] of A and B
    per = num_pid_m * num_pid_n
    grp = tile_id // per
    k_start = 0
    k_end = 0
    for g in range(grp + 1):
        k_start = k_end
        k_end = gl.minimum(gl.maximum(gl.load(group_ptr + g), k_start), K)
    off_m, off_n = tile_coords(tile_id - grp * per, num_pid_m, num_pid_n)
    return grp, grp * M + off_m, off_n, (grp + 1) * M, k_start, k_end
"""


def row_owner_helper(grouping: Grouping) -> str:
    """The ``@gluon.jit`` helper rule 29's grouped cast kernel asks whether a row of C is some group's (the scan's
    own bounds, so it casts exactly the rows the first pass's tiles stored)."""
    step = "\n".join("    " + line for line in _BOUNDS[grouping].splitlines())
    return f"""\
@gluon.jit
def row_owned(row, group_ptr, E, M):
    # whether C's row `row` is some group's, from the group bounds on the device (rows of none are never written)
    owned = row < 0
    end = 0
    for g in range(E):
{step}
        owned = owned | ((row >= start) & (row < end))
    return owned
"""


def group_helpers(grouping: Grouping) -> str:
    """The ``@gluon.jit`` scan helpers of a grouped module, for its grouping."""
    if grouping is Grouping.K_OFFSETS:
        return _K_GROUP_TILE
    step = "\n".join("    " + line for line in _BOUNDS[grouping].splitlines())
    return f"""\
@gluon.jit
def group_count(group_ptr, E, M, num_pid_n):
    # grouped (ir.Tiling.grouping): every group's tiles, summed on the device from its bounds (no host sync)
    total = 0
    end = 0
    for g in range(E):
{step}
        total += gl.cdiv(end - start, BM) * num_pid_n
    return total


@gluon.jit
def group_tile(tile_id, group_ptr, E, M, num_pid_n):
    # the group owning tile `tile_id` (a group's tiles are consecutive), its tile's origin and the group's row end
    grp = 0
    first = 0
    row0 = 0
    row_end = 0
    seen = 0
    end = 0
    for g in range(E):
{step}
        tiles = gl.cdiv(end - start, BM) * num_pid_n
        hit = (tile_id >= seen) & (tile_id < seen + tiles)
        grp = gl.where(hit, g, grp)
        first = gl.where(hit, seen, first)
        row0 = gl.where(hit, start, row0)
        row_end = gl.where(hit, end, row_end)
        seen += tiles
    off_m, off_n = tile_coords(tile_id - first, gl.cdiv(row_end - row0, BM), num_pid_n)
    return grp, row0 + off_m, off_n, row_end
"""
