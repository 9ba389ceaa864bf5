"""The persistent tile order, in Python: the twin of ``tile_coords`` in the Gluon backend's raster helper.

The simulator must visit a CTA's tiles in exactly the order the generated kernel does, because the
producer's flattened (tile, k) loop and the consumer's nested loops only agree on which tile a ring slot
holds if both walk the same sequence. `tests/sim` checks that the raster covers every tile once.
The launcher (`runtime/launch.py`) sizes grids and divides a tail with the same functions, so it lives here, below
both the runtime and the simulator; it imports nothing of warploom.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.spec import Grouping

# A TMA copy's innermost coordinate must be a multiple of 16 bytes (not only its descriptor's base and strides): an
# H100 raises "an illegal instruction was encountered" otherwise. Tile origins are multiples by construction; a
# K-grouped module's group start, read from offs on the device, is not (`tma_k_align`).
TMA_INNER_BYTES = 16


def tma_k_align(dtype: DType) -> int:
    """Elements of `dtype` in TMA_INNER_BYTES: a K-grouped module's k-blocks start at a multiple of it."""
    return TMA_INNER_BYTES // dtype.bytes


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_coords(tile_id: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
    """(pid_m, pid_n) of persistent tile `tile_id`: GROUP_M rows of tiles at a time, column by column.

    Line for line the Gluon helper (``gluon_raster.RASTER``); its integer division is on non-negative
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
        ws_m, ws_n: split-K only: the origin of this unit's box in the fp32 workspace (`ir.Tiling.split_k`, and
            `ir.Tiling.ranged` for the compact layout of a ranged launch).
    """

    index: int
    tile_id: int
    pid_m: int
    pid_n: int
    off_m: int
    off_n: int
    split: int = 0
    ws_m: int = 0
    ws_n: int = 0
    k_lo: int = 0
    k_hi: int | None = None
    peers: tuple[int, ...] = ()
    group: int = 0
    row_end: int | None = None
    row0: int = 0
    k0: int = 0
    k_end: int | None = None
    k_start: int = 0

    # group, row_end: a grouped module's (ir.Tiling.grouping): the tile's group and that group's end row in C (its
    # stores are clipped there; None: C's own end). row0, k0, k_end: a K-grouped module's (Grouping.K_OFFSETS): the
    # group's first row in C (g * M; A's rows are C's less it), its K range k_start .. k_end in elements, and k0
    # where its k-blocks k_lo .. k_hi start: k_start rounded down to 16 bytes, as TMA's innermost coordinate must be
    # (A's columns before k_start and from k_end on read as zero).

    def __str__(self) -> str:
        ks = f", group {self.group}" if self.row_end is not None else ""
        ks += f", k-range {self.split}" if self.split else ""
        ks += f", k-blocks {self.k_lo}..{self.k_hi}" if self.k_hi is not None else ""
        return f"tile #{self.index} (m={self.pid_m}, n={self.pid_n}{ks})"

    @property
    def contributor(self) -> bool:
        """Stream-K: a unit that does not start at the tile's first k-block stores a partial (ir.Fixup)."""
        return self.k_lo > 0

    def stores(self) -> bool:
        """Whether this unit stores its tile of C: every unit but a stream-K contributor."""
        return not self.contributor


def whole_tiles(units: tuple[TileRef, ...], split_k: int) -> tuple[TileRef, ...]:
    """The tiles (one unit of each) whose every k-range is among `units`: with split-K, the only tiles of C the
    reduction completes; all of them without."""
    if split_k == 1:
        return units
    seen: dict[tuple[int, int], list[TileRef]] = {}
    for u in units:
        seen.setdefault((u.off_m, u.off_n), []).append(u)
    return tuple(us[0] for us in seen.values() if len(us) == split_k)


@dataclass(frozen=True)
class Span:
    """The tiles of C one launch of a ranged kernel covers (`ir.Tiling.ranged`): tile ids lo .. hi - 1 of the
    grouped order, given at launch (the kernel's tile_lo and tile_hi arguments)."""

    lo: int
    hi: int

    @property
    def tiles(self) -> int:
        return self.hi - self.lo

    @staticmethod
    def whole(m: int, n: int, bm: int, bn: int) -> Span:
        return Span(0, cdiv(m, bm) * cdiv(n, bn))


def split_range(k_blocks: int, split_k: int, split: int) -> tuple[int, int]:
    """Split-K's k-range `split` of a tile's `k_blocks` k-blocks in `split_k` ranges: its first k-block and its
    count. Ranges differ by at most one k-block, the longer first (`ir.Tiling.uneven_split`); equal where
    `split_k` divides `k_blocks`."""
    base, rest = divmod(k_blocks, split_k)
    return split * base + min(split, rest), base + (split < rest)


def tail_spans(tiles: int, grid: int, splits_evenly: bool = True) -> tuple[Span, Span]:
    """A data-parallel launch's tiles and its split-K tail's (`Plan.tail_split`): the whole waves of `grid` CTAs
    run tiles 0 .. (tiles // grid) * grid as whole tiles, the rest as split-K units (all of them when there are
    fewer tiles than CTAs). Either may be empty. Where K's k-blocks do not split evenly into the tail's ranges (K
    is a run-time argument: `ir.Tiling.splits_evenly`), every tile runs whole instead."""
    whole = tiles // grid * grid if splits_evenly else tiles
    return Span(0, whole), Span(whole, tiles)


def launch_grid(m: int, n: int, bm: int, bn: int, grid: int, split_k: int = 1, span: Span | None = None,
                stream_k: int = 0, cluster: int = 1, cluster_n: bool = False) -> int:
    """CTAs launched, as `warploom.runtime.launch` does: the planned grid, capped by the work units (tiles, or a
    ranged launch's `span` of them, times the k-ranges with split-K); a stream-K kernel's is the planned grid. A
    cluster's (`ir.Tiling.cluster`): whole clusters, grid // cluster of them capped by the cluster tiles (of
    cluster * BM rows, or with `cluster_n` of cluster * BN columns)."""
    if stream_k:
        return grid
    if cluster > 1:
        cm, cn = (1, cluster) if cluster_n else (cluster, 1)
        return cluster * launch_grid(m, n, cm * bm, cn * bn, grid // cluster, split_k, span)
    tiles = cdiv(m, bm) * cdiv(n, bn) if span is None else span.tiles
    return min(grid, tiles * split_k)


def in_grid(ctas: Iterable[int] | None, grid: int) -> tuple[int, ...]:
    """The program ids of `ctas` (all, when None) that a `grid`-CTA launch has."""
    return tuple(range(grid)) if ctas is None else tuple(p for p in ctas if p < grid)


def cta_tiles(pid: int, m: int, n: int, bm: int, bn: int, group_m: int, grid: int,
              split_k: int = 1, span: Span | None = None, cluster: int = 1,
              cluster_n: bool = False, rank_rows: int | None = None) -> tuple[TileRef, ...]:
    """The tiles CTA `pid` of a `grid`-CTA persistent launch visits, in order (tile_id = pid, pid + grid, ...).
    With split-K, the work units u = pid, pid + grid, ...: tile u % tiles, k-range u // tiles; unit (split s,
    tile) stores its partial at rows s * Mp + off_m, columns off_n of the workspace (Mp: M rounded up to BM).

    A ranged launch (`span`) visits tiles span.lo + (pid, pid + grid, ...) (split-K: units over the span's
    tiles), and its workspace is compact: unit (s, span.lo + i) at rows (s * span.tiles + i) * BM, columns 0.

    A cluster's CTA (`ir.Tiling.cluster`; pid = cluster id * cluster + rank) visits its cluster's cluster tiles of
    (cluster * BM) x BN, cluster id, cluster id + grid // cluster, ..., each at its rank's BM rows (pid_m counts
    BM-row tiles). With `cluster_n` (1x2: `ir.Tiling.cluster_n`) the cluster tiles are BM x (cluster * BN), each CTA
    at its rank's BN columns (pid_n counts BN-column tiles). Interleaved CTAs (`ir.Tiling.interleaved`) start at
    rank * `rank_rows` (`ir.Tiling.rank_rows`; BM when None), their local rows placed by `ir.Tiling.cta_row`."""
    if cluster > 1 and cluster_n:
        c, rank = divmod(pid, cluster)
        return tuple(replace(u, pid_n=u.pid_n * cluster + rank, off_n=u.off_n + rank * bn)
                     for u in cta_tiles(c, m, n, bm, cluster * bn, group_m, grid // cluster, split_k, span))
    if cluster > 1:
        c, rank = divmod(pid, cluster)
        step = bm if rank_rows is None else rank_rows
        return tuple(replace(u, pid_m=u.pid_m * cluster + rank, off_m=u.off_m + rank * step,
                             ws_m=u.ws_m + rank * step)
                     for u in cta_tiles(c, m, n, cluster * bm, bn, group_m, grid // cluster, split_k, span))
    num_pid_m, num_pid_n = cdiv(m, bm), cdiv(n, bn)
    lo, tiles = (0, num_pid_m * num_pid_n) if span is None else (span.lo, span.tiles)
    out = []
    for i, unit in enumerate(range(pid, tiles * split_k, grid)):
        tile_id = lo + unit % tiles
        split = unit // tiles
        pm, pn = tile_coords(tile_id, num_pid_m, num_pid_n, group_m)
        if span is None:
            ws = (split * num_pid_m * bm + pm * bm, pn * bn)
        else:
            ws = ((split * tiles + tile_id - lo) * bm, 0)
        out.append(TileRef(i, tile_id, pm, pn, pm * bm, pn * bn, split, *ws))
    return tuple(out)


def stream_k_pieces(pid: int, tiles: int, k_tiles: int, grid: int, pieces: int,
                    waves: int = 0) -> tuple[tuple[int, int, int, tuple[int, ...]], ...]:
    """CTA `pid`'s work units of a stream-K launch over `tiles` tile ids, as (tile_id, k_lo, k_hi, peers): line for
    line the Gluon helpers ``sk_range``, ``sk_unit`` and ``sk_owner`` (backends/gluon_raster.py). Whole tiles first
    (pid, pid + grid, ... below the whole waves), then its iterations of the last wave's tiles, cut at tile edges; a
    finisher unit (k-block 0, ending early) lists the CTAs holding the rest of its tile in `peers`, in k order. Only
    tile ids: a dense launch places them by the raster (`stream_k_units`), a grouped one by its group scan
    (`group_stream_k_units`), as the kernels' ``tile_coords`` and ``group_tile`` do. `waves` whole waves join the
    shared tiles where there is a partial wave (`ir.Tiling.sk_waves`)."""
    sk_tiles = tiles % grid
    if sk_tiles:
        sk_tiles = min(tiles, sk_tiles + waves * grid)
    dp_tiles = tiles - sk_tiles
    ctas = min(grid, sk_tiles * pieces)
    total = sk_tiles * k_tiles
    out: list[tuple[int, int, int, tuple[int, ...]]] = [(tile_id, 0, k_tiles, ()) for tile_id in range(pid, dp_tiles,
                                                                                                         grid)]
    it0, it1 = (pid * total // ctas, (pid + 1) * total // ctas) if pid < ctas else (total, total)
    for t in range(it0 // k_tiles, (it1 - 1) // k_tiles + 1) if it1 > it0 else ():
        k_lo, k_hi = max(it0 - t * k_tiles, 0), min(it1 - t * k_tiles, k_tiles)
        last = ((t + 1) * k_tiles * ctas - 1) // total
        peers = tuple(range(pid + 1, last + 1)) if k_lo == 0 and k_hi < k_tiles else ()
        out.append((dp_tiles + t, k_lo, k_hi, peers))
    return tuple(out)


def stream_k_units(pid: int, m: int, n: int, k_tiles: int, bm: int, bn: int, group_m: int, grid: int,
                   pieces: int, waves: int = 0) -> tuple[TileRef, ...]:
    """The work units CTA `pid` of a stream-K launch visits, in order (`ir.Tiling.stream_k`): `stream_k_pieces` over
    C's tiles, each placed by the grouped raster."""
    num_pid_m, num_pid_n = cdiv(m, bm), cdiv(n, bn)
    out = []
    for i, (tile_id, k_lo, k_hi, peers) in enumerate(stream_k_pieces(pid, num_pid_m * num_pid_n, k_tiles, grid,
                                                                     pieces, waves)):
        pm, pn = tile_coords(tile_id, num_pid_m, num_pid_n, group_m)
        out.append(TileRef(i, tile_id, pm, pn, pm * bm, pn * bn, k_lo=k_lo, k_hi=k_hi, peers=peers))
    return tuple(out)


def group_bounds(grouping: Grouping, values: Iterable[int], m: int) -> tuple[tuple[int, int], ...]:
    """Each group's rows [start, end) of A and C in a grouped launch (`ir.Tiling.grouping`) of M rows: line for line
    the kernel's scan (backends/gluon_grouped.py). OFFSETS `values` are the cumulative ends offs, each clamped to
    [previous end, M]; MASKED ones the counts masked_m, each clamped to [0, M // G] from g * (M // G). K_OFFSETS
    ones are cumulative K ends, clamped as OFFSETS' are, over `m` = K."""
    vals = [int(v) for v in values]
    out: list[tuple[int, int]] = []
    end = 0
    for g, v in enumerate(vals):
        if grouping in (Grouping.OFFSETS, Grouping.K_OFFSETS):
            start = end
            end = min(max(v, start), m)
        else:
            cap = m // len(vals)
            start = g * cap
            end = start + min(max(v, 0), cap)
        out.append((start, end))
    return tuple(out)


@dataclass(frozen=True)
class GroupScan:
    """A grouped launch's tile ids over its groups (`ir.Tiling.grouping`, M-grouped or masked): group g's tiles are
    ids firsts[g] .. firsts[g] + its tiles, `count` in all (the kernel's ``group_count``).

    Attributes:
        bounds: each group's rows [start, end) (`group_bounds`).
        firsts: each group's first tile id.
        count: the launch's tiles.
        n, bm, bn, group_m: C's columns, the tile and the raster's GROUP_M.
    """

    bounds: tuple[tuple[int, int], ...]
    firsts: tuple[int, ...]
    count: int
    n: int
    bm: int
    bn: int
    group_m: int

    @staticmethod
    def of(bounds: tuple[tuple[int, int], ...], n: int, bm: int, bn: int, group_m: int) -> GroupScan:
        firsts, seen = [], 0
        for start, end in bounds:
            firsts.append(seen)
            seen += cdiv(end - start, bm) * cdiv(n, bn)
        return GroupScan(bounds, tuple(firsts), seen, n, bm, bn, group_m)

    def place(self, tile_id: int, index: int, k_lo: int = 0, k_hi: int | None = None,
              peers: tuple[int, ...] = ()) -> TileRef:
        """Tile `tile_id` as the kernel's ``group_tile`` places it: its group (the one whose tile ids hold it), its
        origin in the grouped raster within the group, the group's row end; a CTA's `index`-th unit, k-blocks
        `k_lo` .. `k_hi` (stream-K: `peers` a finisher's)."""
        g = max(j for j, f in enumerate(self.firsts) if f <= tile_id and self.bounds[j][1] > self.bounds[j][0])
        start, end = self.bounds[g]
        pm, pn = tile_coords(tile_id - self.firsts[g], cdiv(end - start, self.bm), cdiv(self.n, self.bn),
                             self.group_m)
        return TileRef(index, tile_id, pm, pn, start + pm * self.bm, pn * self.bn, k_lo=k_lo, k_hi=k_hi, peers=peers,
                       group=g, row_end=end)


def group_tiles(pid: int, bounds: tuple[tuple[int, int], ...], n: int, bm: int, bn: int, group_m: int,
                grid: int) -> tuple[TileRef, ...]:
    """The tiles CTA `pid` of a grouped launch visits (tile ids pid, pid + grid, ... over every group's tiles, a
    group's consecutive, in the grouped raster within it): the kernel's ``group_tile``."""
    scan = GroupScan.of(bounds, n, bm, bn, group_m)
    return tuple(scan.place(tile_id, index=i) for i, tile_id in enumerate(range(pid, scan.count, grid)))


def group_stream_k_units(pid: int, bounds: tuple[tuple[int, int], ...], n: int, k_tiles: int, bm: int, bn: int,
                         group_m: int, grid: int, pieces: int, waves: int = 0) -> tuple[TileRef, ...]:
    """The work units CTA `pid` of a grouped stream-K launch visits (`ir.Tiling.stream_k` with `grouping`):
    `stream_k_pieces` over the launch's tile ids, the count the group scan's (known on the device only, so the
    split is the run time's, as the kernel's ``sk_range(pid, group_count(...), k_tiles)``), each unit placed by
    ``group_tile``: its group, origin and the group's row end."""
    scan = GroupScan.of(bounds, n, bm, bn, group_m)
    return tuple(scan.place(tile_id, index=i, k_lo=k_lo, k_hi=k_hi, peers=peers)
                 for i, (tile_id, k_lo, k_hi, peers) in enumerate(stream_k_pieces(pid, scan.count, k_tiles, grid,
                                                                                  pieces, waves)))


def k_group_tiles(pid: int, bounds: tuple[tuple[int, int], ...], m: int, n: int, bm: int, bn: int, bk: int,
                  k_align: int, group_m: int, grid: int) -> tuple[TileRef, ...]:
    """The tiles CTA `pid` of a K-grouped launch (`Grouping.K_OFFSETS`) visits: every group has the same
    cdiv(M, BM) * cdiv(N, BN) tiles of its (M, N) block of C, group g's tile ids g * per .. (g + 1) * per, in the
    grouped raster within it; `bounds` each group's K range (`group_bounds` over K). The kernel's
    ``k_group_tile``. Its k-blocks start at the group's K start rounded down to `k_align` elements (16 bytes: TMA's
    innermost coordinate). Every tile runs at least one k-block: an empty group's reads A's columns all as zero, so its
    tile stores zeros (torch's result) by the path every tile takes (no skipped wgmma, stage release or stale
    accumulator)."""
    num_pid_m, num_pid_n = cdiv(m, bm), cdiv(n, bn)
    per = num_pid_m * num_pid_n
    out = []
    for i, tile_id in enumerate(range(pid, per * len(bounds), grid)):
        g = tile_id // per
        pm, pn = tile_coords(tile_id % per, num_pid_m, num_pid_n, group_m)
        k_start, k_end = bounds[g]
        k0 = k_start // k_align * k_align
        out.append(TileRef(i, tile_id, pm, pn, g * m + pm * bm, pn * bn, k_hi=max(1, cdiv(k_end - k0, bk)), group=g,
                           row_end=(g + 1) * m, row0=g * m, k0=k0, k_end=k_end, k_start=k_start))
    return tuple(out)
