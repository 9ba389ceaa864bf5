"""Each partition's program, resolved for one CTA: the interpreter that walks a partition's body.

A partition's control flow does not depend on other partitions: its loop trip counts come from the
problem size and its CTA's tiles, and its cursor values from its own `advance` ops. So the interpreter
(`unroll`) walks the body once with the partition's own cursors and loop indices and yields a flat
sequence of resolved instructions: every slot index, parity, guard, tile origin and use_acc flag is a
number. The scheduler then only has to move one program counter per partition, which also makes a
partition's whole local state one integer for the exhaustive explorer.

Resolution is the same arithmetic the Gluon backend emits: stage ``(count + offset) % depth``, parity
``((count + offset) // depth) & 1 ^ flip``, guards on the innermost k index.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from warploom.dtypes import DType
from warploom.epilogue.graph import EpilogueGraph, OutputLayout
from warploom.epilogue.operands import OperandSpec
from warploom.errors import WarploomError
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.ir.raster import (
    Span,
    TileRef,
    cdiv,
    cta_tiles,
    group_stream_k_units,
    group_tiles,
    k_group_tiles,
    split_range,
    stream_k_units,
    tma_k_align,
)
from warploom.ir.warps import WarpMask
from warploom.spec import SCALE_BLOCK, ALayout, BLayout, Grouping


@dataclass(frozen=True)
class Geometry:
    """One CTA's share of a problem.

    Attributes:
        m, n, k: the problem sizes (run-time arguments of the kernel).
        pid: the CTA's program id.
        grid: CTAs launched.
        tiles: this CTA's tiles in persistent order.
        k_tiles: k-blocks per tile, ``cdiv(K, BK)``; with split-K, per work unit (that over split_k, rounded
            down: `unit_range` gives each unit's own).
        rank: the CTA's rank in its cluster (`ir.Tiling.cluster`; pid % cluster): 0 is the lead, which alone
            issues multicast loads and waits on the cluster's barriers.
        split_k: split-K's ranges a tile (`ir.Tiling.split_k`; 1 without).
    """

    m: int
    n: int
    k: int
    pid: int
    grid: int
    tiles: tuple[TileRef, ...]
    k_tiles: int
    rank: int = 0
    split_k: int = 1
    k_blocks: int = 0

    def unit_range(self, t: TileRef) -> tuple[int, int]:
        """A split-K unit's first k-block in the tile and its count (`ir.raster.split_range` of `k_blocks`, the
        tile's); (0, k_tiles) without split-K."""
        if self.split_k == 1:
            return 0, self.k_tiles
        return split_range(self.k_blocks, self.split_k, t.split)

    @staticmethod
    def of(module: ir.Module, m: int, n: int, k: int, pid: int, grid: int, span: Span | None = None,
           groups: tuple[tuple[int, int], ...] | None = None) -> Geometry:
        """CTA `pid`'s share; `span`: a ranged module's launch range (`ir.Tiling.ranged`; None: all of C); `groups`:
        a grouped module's group bounds (`ir.raster.group_bounds`: rows, or a K-grouped module's K ranges; its `m`
        is one group's rows)."""
        t = module.tiling
        if t.grouped:
            if groups is None:
                raise ValueError(f"module {module.name} is grouped (ir.Tiling.grouping): pass its group bounds")
            if t.grouping is Grouping.K_OFFSETS:  # (each tile's k-blocks: its own k_hi)
                return Geometry(m, n, k, pid, grid, k_group_tiles(pid, groups, m, n, t.bm, t.tile_n, t.bk,
                                                                  tma_k_align(module.spec.a_dtype), t.group_m,
                                                                  grid), cdiv(k, t.bk))
            if t.stream_k:  # (the split over the group scan's tile count, as the kernel's sk_range)
                return Geometry(m, n, k, pid, grid, group_stream_k_units(pid, groups, n, cdiv(k, t.bk), t.bm, t.tile_n,
                                                                         t.group_m, grid, t.stream_k, t.sk_waves),
                                cdiv(k, t.bk))
            return Geometry(m, n, k, pid, grid, group_tiles(pid, groups, n, t.bm, t.tile_n, t.group_m, grid),
                            cdiv(k, t.bk))
        if t.stream_k:
            units = stream_k_units(pid, m, n, cdiv(k, t.bk), t.bm, t.tile_n, t.group_m, grid, t.stream_k, t.sk_waves)
            return Geometry(m, n, k, pid, grid, units, cdiv(k, t.bk))
        return Geometry(m, n, k, pid, grid,
                        cta_tiles(pid, m, n, t.bm, t.tile_n, t.group_m, grid, t.split_k,
                                  launch_span(module, m, n, span), t.cluster, t.cluster_n, t.rank_rows),
                        cdiv(k, t.bk) // t.split_k, pid % t.cluster, t.split_k, cdiv(k, t.bk))


def launch_span(module: ir.Module, m: int, n: int, span: Span | None) -> Span | None:
    """The tile range a launch of `module` covers: `span` (all of C by default) for a ranged module, None (the
    unranged raster) otherwise."""
    t = module.tiling
    if not t.ranged:
        if span is not None:
            raise ValueError(f"module {module.name} is not ranged (ir.Tiling.ranged): it takes no tile span")
        return None
    return Span.whole(m, n, t.bm, t.tile_n) if span is None else span


@dataclass(frozen=True, slots=True)
class Tag:
    """Which block of a global tensor a ring slot holds: `tensor` at `origin` along `axes`."""

    tensor: str
    axes: tuple[str, str]
    origin: tuple[int, int]
    group: int | None = None  # a grouped module's B: the group's matrix (ir.Tiling.grouping)
    # A K-grouped module's A (Grouping.K_OFFSETS): its columns from k_end on, and before k_start, read as zero. The
    # kernel's consumer zeroes them in the slot before its wgmma (backends/gluon_grouped.py); here the landed block
    # carries them.
    k_end: int | None = None
    k_start: int = 0
    # A narrow or fitted tile's B (ir.TmaLoad.blocks): only these (first row, rows) blocks of the box are copied; the
    # slot's other rows hold nothing a wgmma may read (NaN in the simulator's data).
    rows: tuple[tuple[int, int], ...] = ()
    # A's slot in a cluster whose CTAs interleave their rows (`ir.Tiling.interleaved`): (rows, stride), the slot's rows
    # come in blocks of `rows` from origin, origin + stride, ... of the tensor.
    interleave: tuple[int, int] | tuple[()] = ()

    def __str__(self) -> str:
        g = "" if self.group is None else f"g={self.group}, "
        e = "" if self.k_end is None else f", {self.k_start}<=k<{self.k_end}"
        r = "" if not self.rows else f", rows {'+'.join(f'{a}..{a + n - 1}' for a, n in self.rows)}"
        i = "" if not self.interleave else f", {self.interleave[0]} rows every {self.interleave[1]}"
        return f"{self.tensor}[{g}{self.axes[0]}={self.origin[0]}, {self.axes[1]}={self.origin[1]}{e}{r}{i}]"


@dataclass(frozen=True, slots=True)
class Site:
    """Where an instruction comes from: its partition, the op's text, and the loop iteration."""

    partition: str
    text: str
    tile: TileRef | None
    k: int | None

    def where(self) -> str:
        parts = [str(self.tile)] if self.tile is not None else []
        if self.k is not None:
            parts.append(f"k={self.k}")
        it = f" ({', '.join(parts)})" if parts else ""
        return f"{self.partition}: `{self.text}`{it}"


@dataclass(frozen=True, slots=True)
class WaitI:
    site: Site
    barrier: str
    index: int
    parity: int
    phase: int  # the phase the IR means: ((count + offset) // depth) - flip; it completes at phase + 1


@dataclass(frozen=True, slots=True)
class ArriveI:
    site: Site
    barrier: str
    index: int
    count: int


@dataclass(frozen=True, slots=True)
class ExpectI:
    site: Site
    barrier: str
    index: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class LoadI:
    site: Site
    ring: str
    slot: int
    tag: Tag
    barrier: str | None
    index: int
    nbytes: int  # the full box: TMA counts out-of-bounds (zero-filled) elements as transferred bytes
    # cp.async (CopyScales) tracked by the barrier: on issue its pending count rises by one, and the copy's
    # landing arrives once (no transaction bytes)
    tracked: bool = False
    # ordinary loads and stores (MX CopyScales): landed when issued, published by the issuer's next arrive on
    # `barrier`
    sync: bool = False
    # gfx1250's TDM copy: no barrier; the partition's copies complete in issue order and a tdm_wait retires them
    tdm: bool = False
    # ... issued by these warps (a bitmask, seed 004's warp_used_hint; every warp without one) of the partition's
    # `team` warps, the block's `rows` re-tiled over them
    warps: int = 0
    team: int = 0
    rows: int = 0
    # a TMA multicast (ir.TmaLoad.multicast), the cluster lead's (or, not `lead_only`, every CTA's): also fills
    # ring[slot] of every other CTA of the cluster and completes its bytes on their barrier[index]
    multicast: bool = False


@dataclass(frozen=True, slots=True)
class MmaI:
    site: Site
    a_ring: str
    b_ring: str
    a_slot: int
    b_slot: int
    acc: str
    use_acc: bool
    is_async: bool
    a_tag: Tag  # the blocks this (tile, k) iteration must read
    b_tag: Tag
    a_rows: tuple[int, int] | None = None  # the partition's row block of the A slot (None: all rows)
    b_cols: tuple[int, int] | None = None  # the column block of N read from the B slot (None: all)
    k_cols: tuple[int, int] | None = None  # the slice of K read from both slots (None: all; MX: 32 deep)


@dataclass(frozen=True, slots=True)
class MmaWaitI:
    site: Site
    pending: int


@dataclass(frozen=True, slots=True)
class TdmWaitI:
    """gfx1250: wait until at most `pending` of the partition's TDM copies are in flight (the IR op's tail already
    resolved: 0 where no later block's copies were issued behind the one needed)."""

    site: Site
    pending: int
    warps: int = 0  # the warps whose copies it retires (a bitmask; every warp of the partition without a mask)


@dataclass(frozen=True, slots=True)
class SyncI:
    """gfx1250: a barrier of the partition's warps."""

    site: Site


@dataclass(frozen=True, slots=True)
class ScaleRead:
    """The blockwise scale slots a promotion reads: (ring, slot, the scales this (tile, k) needs) for A and B."""

    a: tuple[str, int, Tag]
    b: tuple[str, int, Tag]
    sub: int = 0  # MX: the row of the slots (32-deep slice of the k-block) whose scales apply


@dataclass(frozen=True, slots=True)
class PromoteI:
    site: Site
    src: str
    dst: str
    scales: ScaleRead | None = None
    rows: tuple[int, int] | None = None  # the partition's row block of the scale_a slot (None: all rows)
    cols: tuple[int, int] | None = None  # dst's columns in the tile


@dataclass(frozen=True, slots=True)
class ZeroI:
    site: Site
    acc: str


@dataclass(frozen=True, slots=True)
class EpilogueI:
    site: Site
    acc: str
    steps: tuple[ir.EpilogueStep, ...]
    off_m: int
    off_n: int  # the accumulator's first column in the output
    cols: tuple[int, int]  # the accumulator's column block [start, stop) the steps apply to
    group: int = 0  # a grouped module's: the tile's group (rowwise scale_b's row)


@dataclass(frozen=True, slots=True)
class LoadOperandI:
    """A fused epilogue's operand loaded into registers for one block of an accumulator (synchronous); through
    `buffer`, it first waits for that buffer's prefetch."""

    site: Site
    operand: str
    acc: str
    cols: tuple[int, int]  # the accumulator's column block [start, stop) it is loaded for
    buffer: str | None = None


@dataclass(frozen=True, slots=True)
class PrefetchI:
    """A dense operand's block copied by TMA into its partition-private staging buffer."""

    site: Site
    operand: str
    acc: str
    cols: tuple[int, int]
    buffer: str


@dataclass(frozen=True, slots=True)
class ApplyI:
    """The epilogue graph on one block of an accumulator: tile rows and columns from (off_m, off_n)."""

    site: Site
    acc: str
    cols: tuple[int, int]  # the accumulator's column block [start, stop)
    off_m: int
    off_n: int
    # A fused quantization's: the output columns [start, stop) of the block's group within the accumulator, every
    # one of which a fold_amax of this tile must have folded in before the amax is read.
    amax_cols: tuple[int, int] | None = None
    group: int = 0  # a grouped module's: the tile's group (the slice its per-group operands read)
    # A gate/up graph's: the accumulator's up block paired with `cols` (the gate block); off_n is then the result's
    # column (of its N / 2).
    up_cols: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class FoldI:
    """A fused quantization's block folded into its group's running amax (ir.FoldAmax)."""

    site: Site
    acc: str
    cols: tuple[int, int]  # the accumulator's column block [start, stop)
    off_m: int
    off_n: int
    group: int = 0  # a grouped module's tile's group (the slice its per-group operands read), as ApplyI's


@dataclass(frozen=True, slots=True)
class AtomicI:
    """Rule 29's first pass: the tile's running row amax of `acc` added to the amax workspace (ir.AtomicAmax)."""

    site: Site
    acc: str
    off_m: int
    cols: tuple[int, int]  # the output columns [start, stop) the accumulator holds in this tile
    row_end: int | None = None  # a grouped module's: rows from here on are another group's (none added), as C's


@dataclass(frozen=True, slots=True)
class StoreScalesI:
    """A groups output's column of the block's group, stored from registers (ir.StoreScales)."""

    site: Site
    acc: str
    cols: tuple[int, int]
    off_m: int
    off_n: int
    output: int
    row_end: int | None = None  # a grouped module's: rows from here on are not written (the group's end), as C's


@dataclass(frozen=True, slots=True)
class StoreSmemI:
    site: Site
    acc: str
    buffer: str
    cols: tuple[int, int]  # the accumulator's column block [start, stop) this store writes
    output: int | None = None  # epilogue output j of the last apply_epilogue instead of the accumulator
    transposed: bool = False  # a swapped module's (ir.Tiling.swap_ab): the buffer holds the block transposed


@dataclass(frozen=True, slots=True)
class FenceI:
    site: Site


@dataclass(frozen=True, slots=True)
class EarlyAccessI:
    """A partition of a dependently launched module (`ir.Module.dependent_launch`) about to touch global memory
    before its grid_dependency_wait: the machine reports it (the op itself follows as its own instruction)."""

    site: Site


@dataclass(frozen=True, slots=True)
class TmaStoreI:
    site: Site
    buffer: str
    off_m: int
    off_n: int  # the column block's origin: tile origin + part * BN / parts (swap_ab: C's, the module's swapped)
    output: int = 0  # the output tensor written (0 is C)
    workspace: bool = False  # split-K: to the fp32 workspace (off_m counts its slab's rows) instead
    row_end: int | None = None  # a grouped module's: rows from here on are not written (the group's end)


@dataclass(frozen=True, slots=True)
class StoreWaitI:
    site: Site
    pending: int


@dataclass(frozen=True, slots=True)
class StoreTileI:
    """The abstract epilogue store (before LowerEpilogue): synchronous, straight from registers."""

    site: Site
    acc: str
    off_m: int
    off_n: int
    cols: tuple[int, int] = (0, 0)  # the accumulator's columns (the block an epilogue output must come from)
    output: int | None = None  # gfx1250's fused epilogue: output j of the last apply_epilogue instead of acc


@dataclass(frozen=True, slots=True)
class TcMmaI:
    """sm_100a: an async tcgen05 MMA into tensor-memory slot `acc_slot` of `acc_ring`, which holds tile `acc_tag`'s
    accumulator (`accumulate`: add to it; else overwrite: the tile's first k-block); on completion it arrives on
    `release[release_index]` if given."""

    site: Site
    a_ring: str
    b_ring: str
    a_slot: int
    b_slot: int
    acc_ring: str
    acc_slot: int
    accumulate: bool
    a_tag: Tag
    b_tag: Tag
    acc_tag: Tag
    release: str | None
    release_index: int
    # block-scaled (seed 001): (tensor-memory scale buffer, the scales this (tile, k-block) needs) for A and B
    scales: tuple[tuple[str, Tag], ...] = ()
    # block-scaled (seed 000): (tensor-memory scale ring, slot, the scales it must hold) for A and B, read like A
    # and B until the MMA completes, which then arrives on release_scales[release_scales_index]
    scale_slots: tuple[tuple[str, int, Tag], ...] = ()
    release_scales: str | None = None
    release_scales_index: int = -1
    # seed 000's NVFP4: the first scale column each 64-deep MMA reads (ir.TmemScales.k_cols)
    k_cols: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleCopyI:
    """sm_100a: tcgen05_copy of ring[slot] (which must hold `tag`) into tensor-memory scale buffer `dst`; it joins
    the partition's in-order queue of tcgen05 ops and reads the slot until it completes."""

    site: Site
    ring: str
    slot: int
    tag: Tag
    dst: str


@dataclass(frozen=True, slots=True)
class CommitI:
    """sm_100a: arrive on barrier[index] once the partition's earlier tcgen05 MMAs completed."""

    site: Site
    barrier: str
    index: int


@dataclass(frozen=True, slots=True)
class LoadTmemI:
    """sm_100a: read columns `cols` of tensor-memory slot `slot` of `acc_ring` (tile `tag`'s accumulator) into
    register accumulator `acc`."""

    site: Site
    acc_ring: str
    slot: int
    acc: str
    cols: tuple[int, int]
    tag: Tag
    k: int | None = None  # a partial's (passes/blackwell_promote.py): the K origin of the one k-block it holds


@dataclass(frozen=True, slots=True)
class PartialStoreI:
    """Stream-K contributor (ir.Fixup): store `accs` into workspace slot `flag` = (CTA, partition), release its flag."""

    site: Site
    accs: tuple[str, ...]
    flag: tuple[int, int]


@dataclass(frozen=True, slots=True)
class FlagWaitI:
    """Stream-K finisher (ir.Fixup): wait until the flag of workspace slot `flag` is released, acquiring it."""

    site: Site
    flag: tuple[int, int]


@dataclass(frozen=True, slots=True)
class PartialAddI:
    """Stream-K finisher (ir.Fixup): add workspace slot `flag`'s partial to `accs`, then reset the flag."""

    site: Site
    accs: tuple[str, ...]
    flag: tuple[int, int]


Instr = (WaitI | ArriveI | ExpectI | LoadI | MmaI | MmaWaitI | PromoteI | ZeroI | EpilogueI | StoreSmemI
         | FenceI | TmaStoreI | StoreWaitI | StoreTileI | LoadOperandI | PrefetchI | ApplyI | FoldI | StoreScalesI
         | AtomicI | EarlyAccessI
         | TcMmaI
         | ScaleCopyI | CommitI
         | LoadTmemI | TdmWaitI | SyncI | PartialStoreI | FlagWaitI | PartialAddI)


def acc_tag(tile: TileRef) -> Tag:
    """What an sm_100a tensor-memory accumulator slot holds: the accumulator of the tile at this origin."""
    return Tag("acc", ("m", "n"), (tile.off_m, tile.off_n))


def partial_tag(tile: TileRef, k: int) -> Tag:
    """What an sm_100a tensor-memory partial slot holds (fp32 blockwise, passes/blackwell_promote.py): one k-block's
    unscaled product for the tile at this origin."""
    return Tag("partial", ("tile", "k"), (tile.tile_id, k))


class MalformedError(WarploomError, ValueError):
    """The module cannot be executed: a cursor, barrier index or loop context is missing or out of range."""


def scale_tag(tensor: ir.Tensor, tile: TileRef, k: int, grouped: bool = False) -> Tag:
    """The scales a (tile, k-block) needs: scale_a over the tile's rows, scale_b over its columns, at k-block k. A
    grouped module's (`grouped`) scale_b is its tile's group's (E, k-blocks, N-blocks) block; its scale_a is in the
    grouped row space, so the tile's rows as they are (A's and C's). A K-grouped tile's (`tile.k_end` set) scales are
    2-D over the grouped K space: scale_a (M, k-blocks) at A's rows (C's less the group's first, `row0`), scale_b
    (k-blocks, N-blocks) shared by the groups, and its k-block k is scale block k0 // 128 + k (k0: the group's K
    start, a multiple of 128 with blockwise scales)."""
    if tile.k_end is not None:
        kb = tile.k0 // SCALE_BLOCK + k
        if tensor is ir.Tensor.SCALE_A:
            return Tag("scale_a", ("m", "kb"), (tile.off_m - tile.row0, kb))
        return Tag("scale_b", ("n", "kb"), (tile.off_n, kb))
    if tensor is ir.Tensor.SCALE_A:
        return Tag("scale_a", ("m", "kb"), (tile.off_m, k))
    return Tag("scale_b", ("n", "kb"), (tile.off_n, k), tile.group if grouped else None)


def tma_scale_tag(module: ir.Module, tensor: ir.Tensor, tile: TileRef, k: int) -> Tag:
    """The block of TMA-loaded (sm_100a MX) scales a (tile, k-block) needs, as its `TmaLoad` tags it."""
    if tensor is ir.Tensor.SCALE_A:
        return Tag(tensor.value, ("m", "k"), (tile.off_m, k * module.tiling.bk))
    # (a grouped module's scale_b (G, N, K/v): its tile's expert's rows; scale_a is in the grouped row space)
    group = tile.group if module.tiling.grouped else None
    return Tag(tensor.value, ("n", "k"), (tile.off_n, k * module.tiling.bk), group)


def a_interleave(t: ir.Tiling) -> tuple[int, int] | tuple[()]:
    """`Tag.interleave` of A's slots: (64, 64 * cluster) where a cluster's CTAs interleave their rows, else ()."""
    return (ir.INTERLEAVE, ir.INTERLEAVE * t.cluster) if t.interleaved else ()


def expected_tags(module: ir.Module, tile: TileRef, k: int) -> tuple[Tag, Tag]:
    """The A and B blocks wgmma must read at (tile, k), in the storage order of their rings."""
    bk = module.tiling.bk
    if module.tiling.grouping is Grouping.K_OFFSETS:  # A's rows of the group, both from the group's K start
        kk = tile.k0 + k * bk
        a = Tag("A", ("m", "k"), (tile.off_m - tile.row0, kk), None, tile.k_end, tile.k_start)
        return a, Tag("B", ("n", "k"), (tile.off_n, kk)) if module.spec.b_layout is BLayout.K_MAJOR else \
            Tag("B", ("k", "n"), (kk, tile.off_n))
    a = Tag("A", ("k", "m"), (k * bk, tile.off_m)) if module.spec.a_layout is ALayout.M_MAJOR else \
        Tag("A", ("m", "k"), (tile.off_m, k * bk), interleave=a_interleave(module.tiling))
    g = tile.group if module.tiling.grouped else None  # (a grouped module reads the tile's group's B)
    if module.spec.b_layout is BLayout.K_MAJOR:  # (a fitted tile's: its blocks of B's rows, ir.TmaLoad.blocks)
        rows = tuple((cb.start, cb.cols) for cb in ir.column_blocks(module.tiling.n_blocks))
        return a, Tag("B", ("n", "k"), (tile.off_n, k * bk), g, rows=rows)
    return a, Tag("B", ("k", "n"), (k * bk, tile.off_n), g)


# Ops that read or write global memory (operands, C, scales, workspaces, flags): a dependently launched module's
# partition issues none before its grid_dependency_wait. (sm_100a's StoreTmemScales loads its scales from global
# memory; gfx1250's TdmLoad is listed for completeness: that target has no dependent launch.)
GLOBAL_OPS = (ir.TmaLoad, ir.TmaStore, ir.CopyScales, ir.LoadOperand, ir.PrefetchOperand, ir.Fixup, ir.AtomicAmax,
              ir.StoreScales, ir.StoreTile, ir.Epilogue, ir.StoreTmemScales, ir.TdmLoad)


class _Interp:
    """Walks one partition's body for one CTA with the partition's own cursors and loop indices."""

    def __init__(self, module: ir.Module, part: ir.Partition, geo: Geometry) -> None:
        self.m, self.p, self.geo = module, part, geo
        self._every = WarpMask.every(part.warps)
        self.row0 = part.rows.start if part.rows else 0  # a warpgroup's row block starts this far into a tile
        # (and its rows of C this far past its CTA's first row: further where a cluster's CTAs interleave their rows,
        # ir.Tiling.cta_row)
        self.out_row0 = module.tiling.cta_row(self.row0)
        self.depth = {c.name: c.depth for c in part.cursors}
        self.count = {c.name: 0 for c in part.cursors}
        self.tile: TileRef | None = None
        self.k: int | None = None
        self.text: dict[ir.Op, str] = {}  # printer.op per op, printed once rather than per iteration
        self.out_dtypes = module.spec.output_dtypes()
        self.skip = False  # stream-K: a contributor's Fixup skips the rest of its tile's body
        # A dependent launch's partition may touch global memory only after its grid_dependency_wait (reported once).
        self.grid_waited = not module.dependent_launch

    def _kb(self, t: TileRef) -> int:
        """The current k-block's index in K: the loop's, from the work unit's first k-block with split-K."""
        assert self.k is not None
        return self.geo.unit_range(t)[0] + self.k

    def _col0(self, acc: str) -> int:
        """Where a column-block accumulator sits in the tile (0 for a whole-tile one)."""
        return next((a.col0 for a in self.p.accumulators if a.name == acc), 0)

    def _acc(self, name: str, what: str) -> ir.Accumulator:
        acc = next((a for a in self.p.accumulators if a.name == name), None)
        if acc is None:
            raise MalformedError(f"partition {self.p.name}: `{what}` names accumulator {name!r}, which it does not own")
        return acc

    def _block(self, acc: ir.Accumulator, part: int, parts: int, what: str) -> tuple[int, int]:
        """Columns [start, stop) of `acc` that block `part` of `parts` covers."""
        if parts < 1 or not 0 <= part < parts or acc.cols % parts:
            raise MalformedError(f"partition {self.p.name}: `{what}` names column block {part} of {parts} of "
                                 f"accumulator {acc.name}, which has {acc.cols} columns")
        w = acc.cols // parts
        return part * w, (part + 1) * w

    def _graph(self, what: str) -> EpilogueGraph:
        g = self.m.spec.epilogue
        if g is None:
            raise MalformedError(f"partition {self.p.name}: `{what}` needs a fused epilogue, but module "
                                 f"{self.m.name}'s spec has none")
        return g

    def _operand(self, o: ir.LoadOperand, what: str) -> OperandSpec:
        g = self._graph(what)
        spec = next((s for s in g.operands if s.name == o.operand), None)
        if spec is None:
            names = ", ".join(s.name for s in g.operands) or "none"
            raise MalformedError(f"partition {self.p.name}: `{what}` loads {o.operand!r}, which is not an operand of "
                                 f"the epilogue graph (its operands: {names})")
        # A read that does not vary where the operand does reads one row's (column's) values for all of them.
        m_ok = not spec.kind.varies_m or o.read in (ir.OperandRead.PER_ROW, ir.OperandRead.TILE)
        n_ok = not spec.kind.varies_n or o.read in (ir.OperandRead.PER_COL, ir.OperandRead.TILE)
        if not (m_ok and n_ok):
            raise MalformedError(f"partition {self.p.name}: `{what}` reads {o.operand}, a {spec.kind.value} operand, "
                                 f"as {o.read.value}, which drops its variation along "
                                 f"{'m' if not m_ok else 'n'}: read it as tile (or as the pass reads its kind)")
        return spec

    def _staging(self, name: str, operand: str, acc: ir.Accumulator, cols: tuple[int, int], what: str) -> None:
        buf = self.m.buffer(name)
        if (buf.tensor, buf.operand, buf.rows, buf.cols) != (ir.Tensor.OPERAND, operand, acc.rows, cols[1] - cols[0]):
            raise MalformedError(f"partition {self.p.name}: `{what}` stages a ({acc.rows}, {cols[1] - cols[0]}) "
                                 f"block of {operand} through {name}, a ({buf.rows}, {buf.cols}) buffer of "
                                 f"{buf.operand or buf.tensor.value}")

    def run(self, body: tuple[ir.Stmt, ...]) -> Iterator[Instr]:
        for s in body:
            if self.skip:
                return
            if isinstance(s, ir.Loop):
                yield from self.loop(s)
            else:
                yield from self.op(s)

    def loop(self, lp: ir.Loop) -> Iterator[Instr]:
        outer = (self.tile, self.k)
        if lp.kind is ir.LoopKind.TILES:
            for t in self.geo.tiles[lp.start::lp.step]:  # step > 1: a ping-pong consumer's alternate tiles
                self.tile, self.k = t, None
                yield from self.run(lp.body)
                self.skip = False
        elif lp.kind is ir.LoopKind.K:
            if self.tile is None:
                raise MalformedError(f"partition {self.p.name}: a k-loop outside a tile loop")
            for kk in range(*self._k_range(self.tile)):
                self.k = kk
                yield from self.run(lp.body)
        else:
            # FLAT: every (tile, k) pair of this CTA in order (tile_id = pid + (t // k_tiles) * grid).
            for t in self.geo.tiles:
                for kk in range(*self._k_range(t)):
                    self.tile, self.k = t, kk
                    yield from self.run(lp.body)
        self.tile, self.k = outer

    def _k_range(self, t: TileRef) -> tuple[int, int]:
        """The k-blocks a unit's K loop visits: all of them, or a stream-K unit's k_lo .. k_hi."""
        return t.k_lo, self.geo.unit_range(t)[1] if t.k_hi is None else t.k_hi

    def _use(self, cursor: str, offset: int) -> tuple[int, int]:
        if cursor not in self.depth:
            raise MalformedError(f"partition {self.p.name} uses cursor {cursor!r} it does not own")
        return self.count[cursor] + offset, self.depth[cursor]

    def _index(self, s: ir.Slot, depth_of: int, what: str) -> int:
        u, d = self._use(s.cursor, s.offset)
        i = u % d
        if i >= depth_of:
            raise MalformedError(f"partition {self.p.name}: {what} index {i} is out of range [0, {depth_of})")
        return i

    def _tile(self, what: str) -> TileRef:
        if self.tile is None:
            raise MalformedError(f"partition {self.p.name}: `{what}` needs a tile but is outside the tile loop")
        return self.tile

    def _tile_in_k(self, what: str) -> TileRef:
        """The current tile, for an op that also needs the k-loop's k-block."""
        t = self._tile(what)
        if self.k is None:
            raise MalformedError(f"partition {self.p.name}: `{what}` outside a k-loop")
        return t

    def _guard(self, g: ir.Guard, what: str) -> bool:
        if g is ir.Guard.ALWAYS:
            return True
        if self.k is None:
            raise MalformedError(f"partition {self.p.name}: guard `{g.value}` of `{what}` outside a k-loop")
        first = self.tile.k_lo if self.tile is not None else 0  # (a stream-K unit's K loop starts at k_lo)
        return (self.k > first) if g is ir.Guard.NOT_FIRST_K else (self.k == first)

    def op(self, o: ir.Op) -> Iterator[Instr]:
        text = self.text.get(o)
        if text is None:
            text = self.text[o] = printer.op(o)
        site = Site(self.p.name, text, self.tile, self.k)
        m = self.m
        if not self.grid_waited and isinstance(o, GLOBAL_OPS):
            self.grid_waited = True  # (one report a partition: every later access is early for the same reason)
            yield EarlyAccessI(site)
        try:
            match o:
                case ir.GridDependencyWait():
                    self.grid_waited = True
                case ir.Advance():
                    self._use(o.cursor, 0)
                    self.count[o.cursor] += 1
                case ir.SkipTiles():
                    self._use(o.cursor, 0)
                    self.count[o.cursor] += o.tiles * self.geo.k_tiles
                case ir.Wait() if self.geo.rank and m.barrier(o.barrier).cluster:
                    self._use(o.parity.cursor, o.parity.offset)  # (a non-lead CTA's wait on the lead's: no-op)
                case ir.TmaLoad() if self.geo.rank and o.multicast and o.lead_only:
                    pass  # (the lead's copy fills this CTA's slot too)
                case ir.Wait():
                    u, d = self._use(o.parity.cursor, o.parity.offset)
                    n = u // d
                    flip = int(o.parity.flip)
                    yield WaitI(site, o.barrier, self._index(o.slot, m.barrier(o.barrier).depth, text),
                                (n & 1) ^ flip, n - flip)
                case ir.Arrive():
                    if self._guard(o.guard, text):
                        yield ArriveI(site, o.barrier, self._index(o.slot, m.barrier(o.barrier).depth, text),
                                      o.count)
                case ir.ArriveExpectTx():
                    yield ExpectI(site, o.barrier, self._index(o.slot, m.barrier(o.barrier).depth, text), o.nbytes)
                case ir.TmaLoad():
                    ring = m.ring(o.ring)
                    t = self._tile_in_k(text)
                    origin = {ir.Axis.M: t.off_m - t.row0, ir.Axis.N: t.off_n,
                              ir.Axis.K: t.k0 + self._kb(t) * m.tiling.bk}
                    k_grouped = m.tiling.grouping is Grouping.K_OFFSETS
                    group = t.group if m.tiling.grouped and not k_grouped and o.tensor is ir.Tensor.B else None
                    k_end = t.k_end if k_grouped and o.tensor is ir.Tensor.A else None
                    tag = Tag(o.tensor.value, (o.coord[0].value, o.coord[1].value),
                              (origin[o.coord[0]], origin[o.coord[1]]), group, k_end,
                              t.k_start if k_end is not None else 0, tuple((cb.start, cb.cols) for cb in o.blocks),
                              a_interleave(m.tiling) if o.tensor is ir.Tensor.A else ())
                    slot = self._index(o.slot, ring.depth, text)
                    bi = -1 if o.barrier is None else self._index(o.slot, m.barrier(o.barrier).depth, text)
                    yield LoadI(site, o.ring, slot, tag, o.barrier, bi, ir.load_bytes(ring, o), multicast=o.multicast)
                case ir.TdmLoad():
                    ring = m.ring(o.ring)
                    t = self._tile(text)
                    kk = (self.k or 0) + o.ahead  # (outside a k-loop: the tile's prologue, from k-block 0)
                    first, count = self.geo.unit_range(t)
                    if kk < count:  # a block past the tile's end is predicated off: nothing issued
                        origin = {ir.Axis.M: t.off_m, ir.Axis.N: t.off_n, ir.Axis.K: (first + kk) * m.tiling.bk}
                        tag = Tag(o.tensor.value, (o.coord[0].value, o.coord[1].value),
                                  (origin[o.coord[0]], origin[o.coord[1]]))
                        yield LoadI(site, o.ring, self._index(o.slot, ring.depth, text), tag, None, -1, ring.slot_bytes,
                                    tdm=True, warps=(o.warps or self._every).bits, team=self.p.warps, rows=ring.rows)
                case ir.TdmWait():
                    tail = self.k is not None and self.k + o.ahead >= self.geo.k_tiles
                    yield TdmWaitI(site, 0 if tail else o.pending, (o.warps or self._every).bits)
                case ir.SyncWarps():
                    yield SyncI(site)
                case ir.Wmma():
                    t = self._tile_in_k(text)
                    overwrite = o.overwrite is ir.Guard.ALWAYS or self._guard(o.overwrite, text)
                    a_tag, b_tag = expected_tags(m, t, self._kb(t))
                    yield MmaI(site, o.a_ring, o.b_ring, self._index(o.slot, m.ring(o.a_ring).depth, text),
                               self._index(o.slot, m.ring(o.b_ring).depth, text), o.acc, not overwrite, False,
                               a_tag, b_tag)
                case ir.CopyScales():
                    ring = m.ring(o.ring)
                    t = self._tile_in_k(text)
                    slot = self._index(o.slot, ring.depth, text)
                    bi = -1 if o.barrier is None else self._index(o.slot, m.barrier(o.barrier).depth, text)
                    tag = scale_tag(o.tensor, t, self._kb(t), m.tiling.grouped)
                    yield LoadI(site, o.ring, slot, tag, o.barrier, bi, 0, tracked=not o.sync, sync=o.sync)
                case ir.Mma():
                    t = self._tile_in_k(text)
                    overwrite = o.overwrite is ir.Guard.ALWAYS or self._guard(o.overwrite, text)
                    a_tag, b_tag = expected_tags(m, t, self._kb(t))
                    rb = self.p.rows
                    yield MmaI(site, o.a_ring, o.b_ring, self._index(o.slot, m.ring(o.a_ring).depth, text),
                               self._index(o.slot, m.ring(o.b_ring).depth, text), o.acc, not overwrite,
                               o.is_async, a_tag, b_tag, None if rb is None else (rb.start, rb.start + rb.rows),
                               None if o.n_cols is None else (o.n_cols.start, o.n_cols.start + o.n_cols.cols),
                               None if o.k_cols is None else (o.k_cols.start, o.k_cols.start + o.k_cols.cols))
                case ir.MmaWait():
                    yield MmaWaitI(site, o.pending)
                case ir.Promote() if o.scales is not None:
                    t = self._tile_in_k(text)
                    sc = o.scales
                    reads = ScaleRead(
                        (sc.a_ring, self._index(sc.slot, m.ring(sc.a_ring).depth, text),
                         scale_tag(ir.Tensor.SCALE_A, t, self._kb(t))),
                        (sc.b_ring, self._index(sc.slot, m.ring(sc.b_ring).depth, text),
                         scale_tag(ir.Tensor.SCALE_B, t, self._kb(t), m.tiling.grouped)), sc.sub or 0)
                    dst = self._acc(o.dst, text)
                    rb = self.p.rows
                    yield PromoteI(site, o.src, o.dst, reads, None if rb is None else (rb.start, rb.start + rb.rows),
                                   (dst.col0, dst.col0 + dst.cols))
                case ir.Promote():
                    yield PromoteI(site, o.src, o.dst)
                case ir.ZeroAcc():
                    yield ZeroI(site, o.acc)
                case ir.Epilogue():
                    t = self._tile(text)
                    cols = self._block(self._acc(o.acc, text), o.part, o.parts, text)
                    yield EpilogueI(site, o.acc, o.steps, t.off_m + self.out_row0, t.off_n + self._col0(o.acc), cols,
                                    t.group)
                case ir.StoreSmem():
                    buf = m.buffer(o.buffer)
                    acc = next((a for a in self.p.accumulators if a.name == o.acc), None)
                    shape = (buf.cols, buf.rows) if m.tiling.swap_ab else (buf.rows, buf.cols)  # (transposed)
                    if acc is None or (shape[0], shape[1] * o.parts) != (acc.rows, acc.cols):
                        raise MalformedError(f"partition {self.p.name}: `{text}` stores 1/{o.parts} of accumulator "
                                             f"{o.acc} into {o.buffer} of shape ({buf.rows}, {buf.cols})")
                    if o.output is not None and not 0 <= o.output < len(self._graph(text).outputs):
                        raise MalformedError(f"partition {self.p.name}: `{text}` stores epilogue output {o.output}, "
                                             f"but the graph has {len(self._graph(text).outputs)} output(s)")
                    yield StoreSmemI(site, o.acc, o.buffer, (o.part * shape[1], (o.part + 1) * shape[1]), o.output,
                                     m.tiling.swap_ab)
                case ir.FenceAsync():
                    yield FenceI(site)
                case ir.TmaStore():
                    t = self._tile(text)
                    buf = m.buffer(o.buffer)
                    if not 0 <= o.output < len(self.out_dtypes):
                        raise MalformedError(f"partition {self.p.name}: `{text}` writes output {o.output}, but the "
                                             f"kernel has {len(self.out_dtypes)} output(s)")
                    ws = o.tensor is ir.Tensor.WORKSPACE
                    want = DType.FP32 if ws else self.out_dtypes[o.output]
                    if buf.dtype is not want:  # TMA copies bytes: no conversion on the way
                        raise MalformedError(f"partition {self.p.name}: `{text}` copies {o.buffer} "
                                             f"({buf.dtype.value}) to {'the workspace' if ws else 'output'} "
                                             f"{'' if ws else o.output}, which is {want.value}")
                    # A split-K unit's box in the workspace: ir.raster.cta_tiles says where.
                    r0, c0 = (t.ws_m, t.ws_n) if ws else (t.off_m, t.off_n // 2 if o.halved else t.off_n)
                    r0, c0 = r0 + self.out_row0, c0 + o.part * (m.tiling.bn // o.parts)
                    if m.tiling.swap_ab:  # C's rows are this module's columns
                        r0, c0 = c0, r0
                    yield TmaStoreI(site, o.buffer, r0, c0, o.output, ws, None if ws else t.row_end)
                case ir.LoadOperand():
                    self._tile(text)
                    self._operand(o, text)
                    acc = self._acc(o.acc, text)
                    cols = self._block(acc, o.part, o.parts, text)
                    if o.buffer is not None:
                        self._staging(o.buffer, o.operand, acc, cols, text)
                    yield LoadOperandI(site, o.operand, o.acc, cols, o.buffer)
                case ir.PrefetchOperand():
                    self._tile(text)
                    acc = self._acc(o.acc, text)
                    cols = self._block(acc, o.part, o.parts, text)
                    self._staging(o.buffer, o.operand, acc, cols, text)
                    yield PrefetchI(site, o.operand, o.acc, cols, o.buffer)
                case ir.ApplyEpilogue():
                    t = self._tile(text)
                    g = self._graph(text)
                    acc = self._acc(o.acc, text)
                    cols = self._block(acc, o.part, o.parts, text)
                    off_n = t.off_n + acc.col0 + cols[0]
                    need = None
                    if g.reads_amax():  # (the group's columns within the accumulator, past N too)
                        lo, hi = g.amax().span(off_n, t.off_n + acc.col0 + acc.cols)
                        need = (max(lo, t.off_n + acc.col0), hi)
                    up = None
                    if o.up is not None:  # a gate/up pair: the result's columns start at the tile's n * BN / 2
                        up = self._block(acc, o.up, o.parts, text)
                        off_n = t.off_n // 2 + acc.col0 + cols[0]
                    yield ApplyI(site, o.acc, cols, t.off_m + self.out_row0, off_n, need, group=t.group, up_cols=up)
                case ir.FoldAmax() | ir.StoreScales():
                    t = self._tile(text)
                    g = self._graph(text)
                    if g.group_amax() is None:
                        raise MalformedError(f"partition {self.p.name}: `{text}` needs a graph with a group amax")
                    acc = self._acc(o.acc, text)
                    cols = self._block(acc, o.part, o.parts, text)
                    at = (t.off_m + self.out_row0, t.off_n + acc.col0 + cols[0])
                    if isinstance(o, ir.FoldAmax):
                        yield FoldI(site, o.acc, cols, *at, group=t.group)
                    elif not 0 <= o.output < len(g.outputs) or g.outputs[o.output].layout is not OutputLayout.GROUPS:
                        raise MalformedError(f"partition {self.p.name}: `{text}` stores output {o.output}, which is "
                                             "not a groups output of the graph")
                    else:
                        yield StoreScalesI(site, o.acc, cols, *at, o.output, t.row_end)
                case ir.AtomicAmax():
                    t = self._tile(text)
                    acc = self._acc(o.acc, text)
                    if m.amax_pass is None:
                        raise MalformedError(f"partition {self.p.name}: `{text}` outside a rule 29 first pass")
                    col0 = t.off_n + acc.col0
                    yield AtomicI(site, o.acc, t.off_m + self.out_row0, (col0, col0 + acc.cols), t.row_end)
                case ir.StoreWait():
                    yield StoreWaitI(site, o.pending)
                case ir.StoreTile():
                    t = self._tile(text)
                    acc = self._acc(o.acc, text)
                    if o.output is not None and not 0 <= o.output < len(self._graph(text).outputs):
                        raise MalformedError(f"partition {self.p.name}: `{text}` stores epilogue output {o.output}, "
                                             f"but the graph has {len(self._graph(text).outputs)} output(s)")
                    yield StoreTileI(site, o.acc, t.off_m + self.out_row0, t.off_n + acc.col0, (0, acc.cols), o.output)
                case ir.TcMma():
                    t = self._tile_in_k(text)
                    overwrite = o.overwrite is ir.Guard.ALWAYS or self._guard(o.overwrite, text)
                    a_tag, b_tag = expected_tags(m, t, self._kb(t))
                    ri = -1 if o.release is None else self._index(o.slot, m.barrier(o.release).depth, text)
                    scales: tuple[tuple[str, Tag], ...] = ()
                    scale_slots: tuple[tuple[str, int, Tag], ...] = ()
                    si = -1
                    if o.scales is not None and o.scales.slot is not None:  # seed 000: tensor-memory scale rings
                        si = self._index(o.scales.slot, m.ring(o.scales.a).depth, text)
                        scale_slots = tuple((r, si, tma_scale_tag(m, m.ring(r).tensor, t, self._kb(t)))
                                            for r in (o.scales.a, o.scales.b))
                    elif o.scales is not None:
                        scales = tuple((buf, tma_scale_tag(m, m.scale_buffer(buf).tensor, t, self._kb(t)))
                                       for buf in (o.scales.a, o.scales.b))
                    # (a tensor-memory partial holds one k-block's product, an accumulator the tile's)
                    tag = partial_tag(t, self._kb(t)) if m.ring(o.acc_ring).tensor is ir.Tensor.PARTIAL else acc_tag(t)
                    yield TcMmaI(site, o.a_ring, o.b_ring, self._index(o.slot, m.ring(o.a_ring).depth, text),
                                 self._index(o.slot, m.ring(o.b_ring).depth, text), o.acc_ring,
                                 self._index(o.acc_slot, m.ring(o.acc_ring).depth, text), not overwrite, a_tag, b_tag,
                                 tag, o.release, ri, scales, scale_slots, o.release_scales, si,
                                 o.scales.k_cols if o.scales is not None else ())
                case ir.StoreTmemScales():
                    # seed 000: ordinary loads and tcgen05.st, done when issued; the next arrival on the ready
                    # barrier publishes them (as MX's synchronous copy_scales on sm_90a)
                    t = self._tile_in_k(text)
                    ring = m.ring(o.ring)
                    slot = self._index(o.slot, ring.depth, text)
                    yield LoadI(site, o.ring, slot, tma_scale_tag(m, o.tensor, t, self._kb(t)), o.barrier,
                                self._index(o.slot, m.barrier(o.barrier).depth, text), 0, sync=True)
                case ir.ScaleCopy():
                    t = self._tile_in_k(text)
                    ring = m.ring(o.ring)
                    yield ScaleCopyI(site, o.ring, self._index(o.slot, ring.depth, text),
                                     tma_scale_tag(m, ring.tensor, t, self._kb(t)), o.dst)
                case ir.Fixup():
                    t = self._tile(text)
                    if not self.m.tiling.stream_k:
                        raise MalformedError(f"partition {self.p.name}: `{text}` in a module without stream-K")
                    accs = tuple(self._acc(a, text).name for a in o.accs)
                    part = self.row0 // (self.p.rows.rows if self.p.rows else self.m.tiling.bm)
                    if t.contributor:
                        yield PartialStoreI(site, accs, (self.geo.pid, part))
                        self.skip = True
                    # (every later piece's flag first, then their partials in k order: the backend's batched gather)
                    for q in t.peers:
                        yield FlagWaitI(site, (q, part))
                    for q in t.peers:
                        yield PartialAddI(site, accs, (q, part))
                case ir.Commit():
                    yield CommitI(site, o.barrier, self._index(o.slot, m.barrier(o.barrier).depth, text))
                case ir.LoadTmem():
                    t = self._tile(text)
                    ring, acc = m.ring(o.acc_ring), self._acc(o.acc, text)
                    w = ring.cols // o.parts if o.parts >= 1 else 0
                    if not 0 <= o.part < o.parts or ring.cols % o.parts or (acc.rows, acc.cols) != (ring.rows, w):
                        raise MalformedError(f"partition {self.p.name}: `{text}` loads column block {o.part} of "
                                             f"{o.parts} of a ({ring.rows}, {ring.cols}) accumulator into {o.acc}, "
                                             f"which is ({acc.rows}, {acc.cols})")
                    tag, k0 = acc_tag(t), None
                    if ring.tensor is ir.Tensor.PARTIAL:  # (read in the k-loop: this k-block's partial)
                        kb = self._kb(self._tile_in_k(text))
                        tag, k0 = partial_tag(t, kb), kb * m.tiling.bk
                    yield LoadTmemI(site, o.acc_ring, self._index(o.slot, ring.depth, text), o.acc,
                                    (o.part * w, (o.part + 1) * w), tag, k0)
                case _:
                    raise MalformedError(f"partition {self.p.name}: the simulator has no meaning for `{text}`")
        except KeyError as e:  # an unknown ring, buffer or barrier name
            raise MalformedError(f"partition {self.p.name}: `{text}` names {e.args[0]}") from None


def unroll(module: ir.Module, part: ir.Partition, geo: Geometry) -> tuple[Instr, ...]:
    """The instructions `part` executes in CTA `geo.pid`, in program order."""
    return tuple(_Interp(module, part, geo).run(part.body))


@dataclass(frozen=True)
class CtaProgram:
    """Every partition's resolved instructions for one CTA.

    Attributes:
        module: the schedule.
        geo: the CTA's problem share.
        names: partition names, in module order (the agent index is the position here).
        traces: each partition's instructions in program order.
        private: per partition, the buffers no other partition touches (their ops commute with
            every other agent's, which the explorer exploits).
    """

    module: ir.Module
    geo: Geometry
    names: tuple[str, ...]
    traces: tuple[tuple[Instr, ...], ...]
    private: tuple[frozenset[str], ...]

    @staticmethod
    def build(module: ir.Module, geo: Geometry) -> CtaProgram:
        traces = tuple(unroll(module, p, geo) for p in module.partitions)
        users: dict[str, set[int]] = {}
        staging: dict[str, set[str]] = {}
        for i, p in enumerate(module.partitions):
            for o, _ in ir.walk(p.body):
                if isinstance(o, (ir.StoreSmem, ir.TmaStore)):
                    users.setdefault(o.buffer, set()).add(i)
                elif isinstance(o, (ir.LoadOperand, ir.PrefetchOperand)) and o.buffer is not None:
                    staging.setdefault(o.buffer, set()).add(p.name)
        for buf, parts in staging.items():
            # A staging buffer and its mbarrier belong to one partition, whose program order alone orders its
            # prefetches and loads: shared by two partitions, one's TMA write would race the other's read.
            if len(parts) > 1:
                raise MalformedError(f"operand buffer {buf} is staged through by partitions {', '.join(sorted(parts))}"
                                     ": each partition needs its own (one load_operand's TMA would overwrite it while "
                                     "another partition reads it)")
        private = tuple(frozenset(b for b, u in users.items() if u == {i}) for i in range(len(traces)))
        return CtaProgram(module, geo, tuple(p.name for p in module.partitions), traces, private)
