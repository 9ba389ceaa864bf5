"""The persistent tile order, in Python: the twin of ``tile_coords`` in the Gluon backend's raster helper.

The simulator must visit a CTA's tiles in exactly the order the generated kernel does, because the
producer's flattened (tile, k) loop and the consumer's nested loops only agree on which tile a ring slot
holds if both walk the same sequence. `tests/sim` checks that the raster covers every tile once.
"""

from __future__ import annotations

from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_coords(tile_id: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """(pid_m, pid_n) of persistent tile `tile_id`: GROUP_M rows of tiles at a time, column by column.

    Line for line the Gluon helper (``gluon_sm90._RASTER``); its integer division is on non-negative
    int32 values, where Gluon's ``//`` and Python's agree.
    """
    num_pid_in_group = group_m * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * group_m
    group_size_m = min(num_pid_m - first_pid_m, group_m)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@dataclass(frozen=True)
class TileRef:
    """One output tile as a CTA visits it.

    Attributes:
        index: position in this CTA's tile sequence (0 for its first tile).
        tile_id: the persistent tile id (pid, pid + grid, ...).
        pid_m, pid_n: tile coordinates from the grouped raster.
        off_m, off_n: element offsets of the tile's origin in C.
        split: split-K only: which k-range of the tile this work unit covers (`ir.Tiling.split_k`).
    """

    index: int
    tile_id: int
    pid_m: int
    pid_n: int
    off_m: int
    off_n: int
    split: int = 0

    def __str__(self) -> str:
        ks = f", k-range {self.split}" if self.split else ""
        return f"tile #{self.index} (m={self.pid_m}, n={self.pid_n}{ks})"


def whole_tiles(units: tuple[TileRef, ...], split_k: int) -> tuple[TileRef, ...]:
    """The tiles (one unit of each) whose every k-range is among `units`: with split-K, the only tiles of C the
    reduction completes; all of them without."""
    if split_k == 1:
        return units
    seen: dict[tuple[int, int], list[TileRef]] = {}
    for u in units:
        seen.setdefault((u.off_m, u.off_n), []).append(u)
    return tuple(us[0] for us in seen.values() if len(us) == split_k)


def launch_grid(m: int, n: int, bm: int, bn: int, grid: int, split_k: int = 1) -> int:
    """CTAs launched, as `warploom.runtime.launch` does: the planned grid, capped by the work units (tiles, times
    the k-ranges with split-K)."""
    return min(grid, cdiv(m, bm) * cdiv(n, bn) * split_k)


def cta_tiles(pid: int, m: int, n: int, bm: int, bn: int, group_m: int, grid: int,
              split_k: int = 1) -> tuple[TileRef, ...]:
    """The tiles CTA `pid` of a `grid`-CTA persistent launch visits, in order (tile_id = pid, pid + grid, ...).
    With split-K, the work units u = pid, pid + grid, ...: tile u % tiles, k-range u // tiles."""
    num_pid_m, num_pid_n = cdiv(m, bm), cdiv(n, bn)
    tiles = num_pid_m * num_pid_n
    out = []
    for i, unit in enumerate(range(pid, tiles * split_k, grid)):
        tile_id = unit % tiles
        pm, pn = tile_coords(tile_id, num_pid_m, num_pid_n, group_m)
        out.append(TileRef(i, tile_id, pm, pn, pm * bm, pn * bn, unit // tiles))
    return tuple(out)
