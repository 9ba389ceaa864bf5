"""The schedule IR: typed, frozen nodes describing a warp-specialized GEMM kernel.

A `Module` is one kernel: its shared-memory rings and buffers, its mbarrier arrays, and one `Partition`
per group of warps (the TMA producer, the MMA consumers). Each partition's body is a tree of loops and
ops. Every op has exactly one meaning, given in its docstring; the Gluon backend (`warploom.backends`)
and the CPU simulator (`warploom.sim`) both implement that meaning and nothing else.

Stage and phase arithmetic is explicit: a `Cursor` counts how often a partition has used a ring, across
tiles; `Slot(cursor, offset)` names stage ``(count + offset) % depth`` and `Parity(cursor, offset, flip)`
names the mbarrier phase parity ``((count + offset) // depth) & 1 ^ flip``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from warploom.dtypes import DType
from warploom.ir.base import Axis, Guard, Op, Slot, Tensor

# The targets' own ops, gathered here so that `ir.TcMma` names the one class wherever the IR is read.
from warploom.ir.ops_gfx1250 import SyncWarps as SyncWarps
from warploom.ir.ops_gfx1250 import TdmLoad as TdmLoad
from warploom.ir.ops_gfx1250 import TdmWait as TdmWait
from warploom.ir.ops_gfx1250 import Wmma as Wmma
from warploom.ir.ops_sm100 import Commit as Commit
from warploom.ir.ops_sm100 import LoadTmem as LoadTmem
from warploom.ir.ops_sm100 import ScaleCopy as ScaleCopy
from warploom.ir.ops_sm100 import StoreTmemScales as StoreTmemScales
from warploom.ir.ops_sm100 import TcMma as TcMma
from warploom.ir.ops_sm100 import TmemScales as TmemScales
from warploom.spec import GemmSpec, Grouping
from warploom.target import Target


class Role(enum.Enum):
    """What a partition's warps do."""

    SEQUENTIAL = "sequential"  # the whole GEMM in one partition, before the partitioning pass
    PRODUCER = "producer"  # issues TMA loads into the rings
    CONSUMER = "consumer"  # issues wgmma from the rings, then runs the epilogue
    SCALES = "scales"  # copies blockwise scales into a ring of their own (passes/scales.py, seed 000)
    MMA = "mma"  # sm_100a: issues tcgen05 MMAs from the rings into tensor-memory accumulators (passes/blackwell.py)
    EPILOGUE = "epilogue"  # sm_100a: drains finished accumulators from tensor memory and stores the tiles
    WORKGROUP = "workgroup"  # gfx1250: every warp copies (TDM) and computes (wmma), pipelined (passes/gfx1250.py)


class LoopKind(enum.Enum):
    """TILES: the persistent loop over this CTA's output tiles. K: the loop over k-blocks of one tile.
    FLAT: one flattened (tile, k) loop, used by the producer (seed 002: a single loop is enough for
    a partition that has no per-tile epilogue, and keeps its register budget low)."""

    TILES = "tiles"
    K = "k"
    FLAT = "tiles*k"


class OperandRead(enum.Enum):
    """How a fused epilogue's operand is read for one column block of a tile (seed 003).

    PER_ROW: one value per row, [rows, 1], broadcast over the block (a column operand: "scalar column read").
    PER_COL: one value per column, [1, cols] (a row operand).
    TILE: a [rows, cols] gather, one address per element (dense operands; a column operand with the
        scalar column read switched off reads this way, every column of a row repeating one address).
    SCALAR: one value for the whole tile.
    """

    PER_ROW = "per_row"
    PER_COL = "per_col"
    TILE = "tile"
    SCALAR = "scalar"


class EpilogueStep(enum.Enum):
    """Register-level epilogue math on the fp32 accumulator, applied in order before the output cast."""

    SCALE_TENSORWISE = "acc *= scale_a[0] * scale_b[0]"
    SCALE_GLOBAL = "acc *= global_a[0] * global_b[0]"  # NVFP4's tensorwise global scales (its block scales: TcMma)
    SCALE_ROWWISE = "acc *= scale_a[m, None] * scale_b[None, n]"
    ADD_BIAS = "acc += bias[None, n]"
    ADD_ROW_BIAS = "acc += bias[m, None]"  # a swapped module's (Tiling.swap_ab): the problem's (N,) bias, along its M


# ---------------------------------------------------------------------------------------------
# Declarations


@dataclass(frozen=True)
class Ring:
    """A shared-memory ring buffer of `depth` slots, each one (rows, cols) tile of `dtype`.

    A ring of tensor ACC lives in tensor memory instead (sm_100a): `depth` fp32 accumulator tiles of (rows,
    cols), written by `TcMma` and read by `LoadTmem`, using `cols` of the SM's 512 tensor-memory columns each.

    Attributes:
        name: unique within the module.
        tensor: the global tensor whose tiles it holds.
        dtype: element type.
        depth: number of slots (pipeline stages).
        rows, cols: one slot's tile shape, e.g. (BM, BK) for A.
        blocks: a fitted tile's B ring (`Tiling.n_blocks`): a slot stores only these blocks of its rows (B's N),
            each as a buffer of its own (powers of two), so tile_n < BN rows take tile_n rows of shared memory.
        padded: e2m1 only: the values lie one a byte in shared memory (MX fp8 x fp4's fp4 operand: tcgen05's
            kind::mxf8f6f4 reads fp4 so, and TMA unpacks each 8 bytes of pairs into 16, Triton's fp4_padded), so a
            slot is rows x cols bytes, and the stage's transaction bytes count them so.
        row_boxes: 0, or the 64-row boxes a slot is stored and copied as where its rows are a power of two: A's
            ring in a 2x1 cluster of fitted tiles (`Tiling.interleaved`, set by ShareB), whose slot is one box per
            consumer warpgroup, each box's rows split between the cluster's CTAs.
        tmem: sm_100a seed 000: a ring of block scales in tensor memory (TensorMemoryScalesLayout), (128, BK/32 or
            BK/16) e8m0 or e4m3 a slot (B's of a 256-wide tile: (256, ...), two 128-row chunks), which the scale
            partition fills by tcgen05.st (`StoreTmemScales`) and scaled `TcMma`s read; each slot takes
            `rows // 128 * cols` of the 512 tensor-memory columns.
    """

    name: str
    tensor: Tensor
    dtype: DType
    depth: int
    rows: int
    cols: int
    padded: bool = False
    tmem: bool = False
    blocks: tuple[ColBlock, ...] = ()
    row_boxes: int = 0

    def __post_init__(self) -> None:
        if self.row_boxes and (self.tensor is not Tensor.A or self.rows % 64 or self.rows // 64 != self.row_boxes):
            raise ValueError(f"Ring {self.name}: row_boxes={self.row_boxes} are A's 64-row boxes, rows // 64 of its "
                             f"{self.rows} rows")
        if self.blocks and (self.tensor is not Tensor.B or sum(cb.cols for cb in self.blocks) > self.rows):
            raise ValueError(f"Ring {self.name}: row blocks are a fitted tile's B ring's, within its {self.rows} rows")
        if self.padded and self.dtype is not DType.E2M1:
            raise ValueError(f"Ring {self.name}: only e2m1 slots are padded (MX fp8 x fp4), got {self.dtype}")
        rows = (128, 256) if self.tensor is Tensor.SCALE_B else (128,)  # (a 256-wide tile's B: two 128-row chunks)
        if self.tmem and (self.tensor not in (Tensor.SCALE_A, Tensor.SCALE_B)
                          or self.dtype not in (DType.E8M0, DType.E4M3) or self.rows not in rows
                          or self.cols not in (4, 8)):
            raise ValueError(f"Ring {self.name}: a tensor-memory scale ring holds (128, 4 or 8) e8m0 or e4m3 block "
                             f"scales of SCALE_A or SCALE_B (SCALE_B's also (256, 4 or 8)), got ({self.rows}, "
                             f"{self.cols}) {self.dtype.value} of {self.tensor.value}")

    @property
    def boxes(self) -> int:
        """The 64-row boxes one slot is stored and copied as: 1, or rows // 64 where rows is not a power of two
        (rule 32's 192-row A tile: Triton's shared buffers and TMA boxes must be powers of two, so the slot is three
        64-row buffers, each filled by a TMA box of its own; the verifier admits this for A's ring only), or
        `row_boxes` where set (a 2x1 cluster of fitted tiles: `Tiling.interleaved`)."""
        if self.row_boxes:
            return self.row_boxes
        return 1 if self.rows & (self.rows - 1) == 0 else self.rows // 64

    @property
    def row_bytes(self) -> int:
        """One row of a slot."""
        bits = 8 if self.padded else self.dtype.bits  # (e2m1: two values a byte, or one when padded)
        return self.cols * bits // 8

    @property
    def slot_bytes(self) -> int:
        """The shared memory of one slot: its rows, or its `blocks`' rows only."""
        return (sum(cb.cols for cb in self.blocks) if self.blocks else self.rows) * self.row_bytes

    @property
    def bytes(self) -> int:
        return self.depth * self.slot_bytes

    @property
    def byte_scales(self) -> bool:
        """sm_100a MX / NVFP4: a ring of one-byte block scales (e8m0 or e4m3) that TMA copies in torch's blocked
        layout and tcgen05.cp moves to tensor memory."""
        return self.tensor in (Tensor.SCALE_A, Tensor.SCALE_B) and self.dtype in (DType.E8M0, DType.E4M3) \
            and not self.tmem

    @property
    def in_tmem(self) -> bool:
        """A ring of tensor-memory accumulators (or partials); scale rings in tensor memory are `tmem`."""
        return self.tensor in (Tensor.ACC, Tensor.PARTIAL)

    @property
    def tmem_columns(self) -> int:
        """Tensor-memory columns of all its slots: an fp32 accumulator a column per element of a row; a scale
        slot 4 per 128x4 chunk (rows x 4 bytes over 128 lanes: 32-bit columns), as `ScaleBuffer.columns`."""
        if self.in_tmem:
            return self.depth * self.cols
        return self.depth * (self.rows // 128) * self.cols if self.tmem else 0


@dataclass(frozen=True)
class Buffer:
    """A single shared-memory tile, e.g. the epilogue's staging tile for the TMA store.

    `output` numbers the kernel output it stages (a fused epilogue may have several; 0 is C); a buffer of
    tensor OPERAND stages the dense epilogue operand `operand` on its way from global memory (TMA) to
    registers. A buffer with an `alias` stages a narrow or fitted tile's column block narrower than the tile's
    stores (`Tiling.n_blocks`) in the memory of that (wider) buffer of its partition, which it takes no memory
    beside: each of its writes waits for every store before it (so none still reads the memory), and its TMA
    stores go through a descriptor of its own width (c_desc_w32)."""

    name: str
    tensor: Tensor
    dtype: DType
    rows: int
    cols: int
    output: int = 0
    operand: str | None = None
    alias: str | None = None

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * self.dtype.bytes


@dataclass(frozen=True)
class ScaleBuffer:
    """sm_100a: a tensor-memory buffer of block scales (TensorMemoryScalesLayout), one k-block's (rows, cols) e8m0
    (MX) or e4m3 (NVFP4) values of A's rows or B's columns, written by `ScaleCopy` and read by scaled `TcMma`s.

    Attributes:
        name: unique within the module.
        tensor: SCALE_A or SCALE_B.
        rows, cols: (BM, BK/32) or (BN, BK/32) (NVFP4: BK/16, 4 or 8: one or two 128x4 chunks).
        col0: its first tensor-memory column (the accumulator ring takes columns 0 ... depth * cols).
        dtype: E8M0 (MX) or E4M3 (NVFP4)."""

    name: str
    tensor: Tensor
    rows: int
    cols: int
    col0: int
    dtype: DType = DType.E8M0

    def __post_init__(self) -> None:
        if self.tensor not in (Tensor.SCALE_A, Tensor.SCALE_B):
            raise ValueError(f"ScaleBuffer {self.name}: expected tensor SCALE_A or SCALE_B, got {self.tensor}")
        if self.dtype not in (DType.E8M0, DType.E4M3):
            raise ValueError(f"ScaleBuffer {self.name}: expected e8m0 (MX) or e4m3 (NVFP4) scales, got {self.dtype}")
        # (NVFP4 at BK 128: two chunks a row block, (rows, 8); tcgen05.cp copies each chunk into 4 columns)
        if self.rows % 128 or self.cols not in (4, 8) or self.cols == 8 and self.dtype is not DType.E4M3:
            raise ValueError(f"ScaleBuffer {self.name}: expected whole 128x4 chunks (tcgen05.cp 32x128b.warpx4), one "
                             f"a k-block, or two of NVFP4's e4m3, got ({self.rows}, {self.cols}) {self.dtype.value}")

    @property
    def columns(self) -> int:
        """Tensor-memory columns: a 128x4 chunk of scales takes 4 (tcgen05.cp .warpx4 broadcasts 32 rows x 16
        bytes to the four 32-lane quarters); NVFP4's two chunks a k-block 8."""
        return self.rows // 128 * self.cols


@dataclass(frozen=True)
class Barriers:
    """An array of `depth` mbarriers, each initialised with `count` expected arrivals per phase.

    Attributes:
        rings: the rings whose slots these barriers guard (barrier i guards slot i of each); none for ORDER.
        purpose: READY (slots filled, completed by TMA transaction bytes), EMPTY (slots released) or ORDER
            (one partition hands the next its turn: passes/split_consumers.py).
        cluster: one barrier per cluster (`Tiling.cluster`), held by the cluster's lead CTA (rank 0) instead of one
            per CTA: every CTA's arrivals count on it (`count` is per CTA: a phase completes after count x cluster
            arrivals), and only the lead's partitions wait on it (another CTA's wait on it does nothing). An EMPTY
            cluster barrier tells the lead that every CTA released a slot of a ring it multicasts
            (`TmaLoad.multicast`; passes/cluster.py).
    """

    name: str
    depth: int
    count: int
    rings: tuple[str, ...]
    purpose: Purpose
    cluster: bool = False


class Purpose(enum.Enum):
    """What completing a barrier's phase tells its waiters."""

    READY = "ready"
    EMPTY = "empty"
    ORDER = "order"  # a turn passed between ping-pong consumers: the next may start its mainloop


@dataclass(frozen=True)
class Cursor:
    """A running count of one partition's uses of the stages of rings of `depth` slots, carried across
    tiles. Starts at 0."""

    name: str
    depth: int


@dataclass(frozen=True)
class Parity:
    """Phase parity ``((cursor + offset) // depth) & 1``, xor 1 when `flip`.

    A wait on parity P returns once the barrier's phase with parity P has completed. A fresh barrier is
    in phase 0, so a wait with `flip` (parity 1) passes at once: that is how a producer's first pass
    over empty slots proceeds without a consumer arrival.
    """

    cursor: str
    offset: int = 0
    flip: bool = False


# ---------------------------------------------------------------------------------------------
# Ops


@dataclass(frozen=True)
class Wait(Op):
    """Block the partition until `barrier[slot]` has completed the phase of parity `parity`."""

    barrier: str
    slot: Slot
    parity: Parity


@dataclass(frozen=True)
class Arrive(Op):
    """One arrival (of `count`) on `barrier[slot]` by the partition, when `guard` holds."""

    barrier: str
    slot: Slot
    count: int = 1
    guard: Guard = Guard.ALWAYS


@dataclass(frozen=True)
class ArriveExpectTx(Op):
    """One arrival on `barrier[slot]` that also raises its pending transaction count by `nbytes`.

    The phase then completes only after the arrivals and the `nbytes` of TMA traffic that name this
    barrier have both landed.
    """

    barrier: str
    slot: Slot
    nbytes: int


@dataclass(frozen=True)
class TmaLoad(Op):
    """Asynchronously copy one tile of `tensor` into `ring[slot]`.

    The tile's origin is (coord[0] index * block, coord[1] index * block) in the tensor's own index
    order; elements out of bounds read as zero. With a `barrier`, the copy's bytes complete a
    transaction on `barrier[slot]`; with none (only before ring planning) the copy is synchronous.

    `multicast` (a cluster's module, `Tiling.cluster`): the tile is the same for every CTA of the cluster, so only
    the lead CTA (rank 0) issues the copy, and TMA writes it into `ring[slot]` of every CTA of the cluster and
    completes a transaction of its bytes on each CTA's `barrier[slot]` (each CTA's expect counts them). Another
    CTA's copy does nothing. The lead may refill the slot only when every CTA released it (an EMPTY cluster
    barrier, `Barriers.cluster`).

    `lead_only` (with `multicast`): only the lead issues the copy, as ShareB builds it and as Gluon's broadcast
    layout lowers it. False says every CTA issues the whole copy: each slot is then written `cluster` times and each
    barrier receives `cluster` times the box's bytes. No schedule warploom builds does that; it is expressible so
    that the verifier (ir/verify_cluster.py) and the simulator (DOUBLE_WRITE) can be shown to catch it.

    `blocks` (a narrow or fitted tile's B, `Tiling.n_blocks`): only these blocks of the slot's rows (B's N) are
    copied, each by a TMA box of its own width, and the transaction is their bytes; the slot's other rows keep
    whatever they held (no wgmma reads them). A box of the slot's whole rows would read tile_n..BN, the next tile's.
    """

    tensor: Tensor
    ring: str
    slot: Slot
    coord: tuple[Axis, Axis]
    barrier: str | None = None
    multicast: bool = False
    lead_only: bool = True
    blocks: tuple[ColBlock, ...] = ()


@dataclass(frozen=True)
class Mma(Op):
    """``acc (+)= ring_a[slot] @ ring_b[slot]`` on the tensor cores (wgmma).

    B's slot is read as (K, N) whatever its storage order; with `n_cols`, only those of its N columns
    (the accumulator is then that wide); with `k_cols`, only that slice of K of both slots (MX: one 32-deep
    slice per scale). The accumulator is overwritten instead of
    added to when `overwrite` holds: FIRST_K for a tile's accumulator, ALWAYS for a per-k-block partial
    (promoted fp8). An `is_async` MMA joins the partition's group of in-flight wgmma and completes,
    writing `acc`, only at a later `MmaWait`; until then `acc` must not be read.
    """

    a_ring: str
    b_ring: str
    slot: Slot
    acc: str
    overwrite: Guard = Guard.FIRST_K
    is_async: bool = False
    n_cols: ColBlock | None = None
    k_cols: ColBlock | None = None


@dataclass(frozen=True)
class ColBlock:
    """Columns [start, start + cols) of the tile's N extent (of B's slot, for an Mma)."""

    start: int
    cols: int


def load_bytes(ring: Ring, load: TmaLoad) -> int:
    """The bytes TMA load `load` into `ring` brings: a slot's rows, or its `blocks`' rows only."""
    return (sum(cb.cols for cb in load.blocks) if load.blocks else ring.rows) * ring.row_bytes


def column_blocks(widths: tuple[int, ...]) -> tuple[ColBlock, ...]:
    """A narrow tile's column blocks (`Tiling.n_blocks`): the widths side by side from column 0."""
    return tuple(ColBlock(sum(widths[:i]), w) for i, w in enumerate(widths))


def narrow_widths(widths: tuple[int, ...]) -> bool:
    """Whether `widths` can be a narrow tile's blocks: ints, powers of two from 16 to 256, widest first."""
    return all(type(w) is int and 16 <= w <= 256 and not w & (w - 1) for w in widths) \
        and list(widths) == sorted(widths, reverse=True)


@dataclass(frozen=True)
class MmaWait(Op):
    """Wait until at most `pending` async wgmma of this partition are in flight (oldest finish first)."""

    pending: int


@dataclass(frozen=True)
class StageScales:
    """The blockwise scales of one pipeline stage: slot `slot` of scale rings `a_ring` (the tile's rows) and
    `b_ring` (its 128-column blocks, or its columns), filled by `CopyScales` with the A and B tiles of that slot
    (or by a scale partition); MX slots hold 4 rows of scales, one per 32-deep slice of the k-block, `sub` names one."""

    a_ring: str
    b_ring: str
    slot: Slot
    sub: int | None = None  # MX: which 32-deep slice of the k-block (its slots hold a row of scales per slice)


@dataclass(frozen=True)
class Promote(Op):
    """``dst += src`` in fp32 registers (promotion of an fp8 partial accumulator), after its MmaWait.

    With `scales` (blockwise recipes): ``dst += src * sa[rows, None] * sb[None, cols]``, where sa is the stage's
    scale_a slot over the partition's rows and sb its scale_b slot over dst's columns (one value per 128-column
    block, or per column). It reads those slots, so they must have landed and stay unreleased until it has run."""

    src: str
    dst: str
    scales: StageScales | None = None


@dataclass(frozen=True)
class CopyScales(Op):
    """Asynchronously copy the current (tile, k-block)'s blockwise scales of `tensor` into `ring[slot]` with
    ordinary per-element copies (cp.async: any strides, no TMA alignment rule); elements outside the problem
    read as 0. With a `barrier`, the copies are tracked by `barrier[slot]`'s current phase: it cannot complete
    before they land, and they do not count as an arrival. So they must be issued before the arrival that can
    complete that phase (the stage's arrive_expect_tx). With none (only before ring planning) the copy is
    synchronous. With `sync` (MX's single-byte e8m0 scales, which cp.async cannot copy): ordinary loads, decoded
    to fp32 and stored by the partition's threads, complete when the op returns; the partition's next arrival on
    `barrier[slot]` publishes them (mbarrier.arrive releases the partition's earlier smem writes)."""

    tensor: Tensor
    ring: str
    slot: Slot
    barrier: str | None = None
    sync: bool = False


@dataclass(frozen=True)
class ZeroAcc(Op):
    """Set accumulator `acc` to zeros (a tile's start, for promoted accumulation)."""

    acc: str


@dataclass(frozen=True)
class Fixup(Op):
    """Stream-K (`Tiling.stream_k`): complete the current work unit's tile in accumulators `accs` across CTAs.

    It stands after the unit's mainloop (the final MMA wait) and before anything that reads the accumulators as
    the tile's sum. What it does depends on the unit (`Tiling.stream_k` says which units a CTA has):
    - a whole tile (all its k-blocks): nothing;
    - a unit that does not start at the tile's first k-block (a *contributor*): store `accs` (the partition's rows)
      into this CTA's slot of the fp32 workspace, then release the slot's flag (one per consumer partition); the
      rest of the tile's body (its epilogue and stores) is skipped for this unit;
    - a unit that starts at k-block 0 and ends early (the tile's *finisher*, the CTA that runs the tile's first
      k-blocks last in its own sequence): for each later CTA that holds k-blocks of the tile, in k order, acquire
      its flag, add its slot to `accs` and reset the flag; then the epilogue runs on the whole sum. The fixed
      order makes the result deterministic.
    A contributor's unit is its CTA's first, a finisher's its CTA's last, so a CTA stores at most one partial and
    waits only after storing its own: no CTA waits on one that is waiting (all CTAs are resident: grid <= SMs)."""

    accs: tuple[str, ...]


@dataclass(frozen=True)
class Epilogue(Op):
    """Apply `steps` to column block `part` of `parts` of `acc` in registers (fp32); parts = 1: all of it.

    Per block (LowerEpilogue with `block_steps`), the block's scale and bias vectors are the only ones live:
    a whole 256-wide tile's would spill beside the accumulator."""

    acc: str
    steps: tuple[EpilogueStep, ...]
    part: int = 0
    parts: int = 1


@dataclass(frozen=True)
class LoadOperand(Op):
    """Load fused-epilogue operand `operand` (of the spec's epilogue graph) for column block `part` of `parts`
    of accumulator `acc`'s columns (and the partition's rows) of the current tile into registers, read as
    `read`. Elements outside the problem read as 0. The registers stay valid until the next LoadOperand of
    the same (operand, acc, part); where this op stands (before the accumulator's MmaWait: hoisted, or just
    before its ApplyEpilogue) is the schedule's choice. With a `buffer` (dense operands), the block travels
    global -> `buffer` by TMA (started by the preceding PrefetchOperand of the same block) -> registers: the
    op waits on the buffer's private mbarrier for that copy, then reads the buffer."""

    operand: str
    acc: str
    part: int
    parts: int
    read: OperandRead
    buffer: str | None = None


@dataclass(frozen=True)
class ApplyEpilogue(Op):
    """Evaluate the spec's epilogue graph on column block `part` of `parts` of `acc` (fp32) with the operand
    registers the preceding LoadOperand ops loaded for that block. Its outputs, each cast to its stored
    dtype, are held in registers for the StoreSmem ops that follow (until the next ApplyEpilogue).

    A gate/up graph (`EpilogueGraph.gate_up`) pairs two blocks: `part` holds the gate columns and `up` the up
    columns of the same result columns (the tile's left and right halves, block i and i + parts / 2); its outputs
    are the result's block `part` (a half-width `TmaStore`)."""

    acc: str
    part: int
    parts: int
    up: int | None = None


@dataclass(frozen=True)
class FoldAmax(Op):
    """Fused 1x128 quantization (a graph with a `GroupAmax`): evaluate the graph's nodes up to the amax's input on
    column block `part` of `parts` of `acc` (with that block's operand registers), take each row's NaN-propagating
    max of its magnitude over the block's columns below N, and fold it into the running amax of the block's
    128-column group; a block that starts a group starts its amax. Every block of a group folds before any
    ApplyEpilogue of the group reads the amax (so the scale and the division see the whole group)."""

    acc: str
    part: int
    parts: int


@dataclass(frozen=True)
class StoreScales(Op):
    """Store epilogue output `output` (a groups output: one value per row and 128-column group) of the last
    ApplyEpilogue, which computed column block `part` of `parts` of `acc`: the block's rows of its group's column,
    by masked register stores (rows below M, a group below ceil(N/128)). Its (M, ceil(N/128)) rows are rarely
    16-byte multiples, so not by TMA."""

    acc: str
    part: int
    parts: int
    output: int


@dataclass(frozen=True)
class AtomicAmax(Op):
    """Rule 29's first pass (`Module.amax_pass`): publish the running row amax the tile's FoldAmax ops left for
    `acc`'s rows (the tile's columns of each row; the partition's row block) by an atomic max into the fp32 (M,)
    amax workspace, rows below M. The amax is >= 0 or NaN (|y|; a positive NaN), so the max is a signed 32-bit
    integer max of the float bits (NaN above +inf: a NaN wins, as in torch.amax). Once per tile, after every block
    of the tile folded; the cast kernel reads the workspace after the whole launch."""

    acc: str


@dataclass(frozen=True)
class AmaxPass:
    """Planner rule 29: the module is the first of two passes of a fused rowwise quantization whose rows span
    tiles along N (N > 256, or 128 < N <= 256 that rule 27's tile cannot hold, or a grouped GEMM's N > 128:
    `planning.sm90.fused.two_passes`). Its spec's graph is `EpilogueGraph.amax_pass`: each tile stores y (fp32) to its
    one output, the (M, N) fp32 workspace, by TMA (a grouped module's clipped at each group's end), folds its
    columns' row amax (FoldAmax) and adds it to the (M,) amax workspace (AtomicAmax), which the launch zeroes before
    it. The second pass, the cast kernel (`backends.gluon_sm90`'s ``<name>_cast``, `gluon_cast.cast_params`), runs
    one program per row (a grouped module's: the rows of some group): s = amax / fp8_max (1 where 0), q = the
    saturating `fp8` cast of y / s (warploom.quantization.cast_rows).

    Attributes:
        fp8: the quantized dtype (E4M3 or E5M2).
        chunk: the columns a cast program converts per step of its loop along the row.
    """

    fp8: DType
    chunk: int = 1024

    def __post_init__(self) -> None:
        if self.fp8 not in (DType.E4M3, DType.E5M2):
            raise ValueError(f"AmaxPass fp8={self.fp8}: expected e4m3 or e5m2")
        if self.chunk < 128 or self.chunk & (self.chunk - 1):
            raise ValueError(f"AmaxPass chunk={self.chunk}: expected a power of two >= 128 (4 warps' lanes)")


@dataclass(frozen=True)
class StoreTile(Op):
    """Write `acc`, cast to the output dtype, to C's tile at (tile m, tile n); out-of-bounds elements are dropped.
    On NVIDIA targets abstract: lowered by the epilogue pass to StoreSmem / FenceAsync / TmaStore. A gfx1250 module
    keeps it: masked global stores straight from the registers. With `output` = j (gfx1250's fused epilogue), the
    stored value is instead output j of the last ApplyEpilogue (which computed the whole tile), into output j."""

    acc: str
    output: int | None = None


@dataclass(frozen=True)
class StoreWait(Op):
    """Wait until at most `pending` of this partition's TMA stores are still reading shared memory."""

    pending: int = 0


@dataclass(frozen=True)
class StoreSmem(Op):
    """Generic-proxy store of column block `part` of `parts` of `acc` (columns [part * BN / parts,
    (part + 1) * BN / parts)), cast to `buffer`'s dtype, into `buffer` (all the partition's threads).
    With `output` set, the stored value is instead that epilogue output of the last ApplyEpilogue (which
    computed the same block)."""

    acc: str
    buffer: str
    part: int = 0
    parts: int = 1
    output: int | None = None


@dataclass(frozen=True)
class GridDependencyWait(Op):
    """griddepcontrol.wait: block the partition until the grid launched before this one (in stream order) has
    finished and its memory writes are visible. A module launched with programmatic dependent launch
    (`Module.dependent_launch`) may start while that grid still runs, so each of its partitions waits here before
    its first access to global memory (a TMA load or store, a scale copy, an operand load, a workspace flag): the
    previous grid may be writing this kernel's operands or reading its output. Without the launch attribute the
    previous grid has finished before this one starts, and the wait returns at once."""


@dataclass(frozen=True)
class FenceAsync(Op):
    """fence.proxy.async: order this partition's earlier generic smem writes before later async-proxy
    (TMA, wgmma) reads of them."""


@dataclass(frozen=True)
class TmaStore(Op):
    """Asynchronously copy `buffer` to column block `part` of `parts` of output `output`'s tile at (tile m,
    tile n), i.e. to origin (m * BM, n * BN + part * BN / parts); out-of-bounds elements are dropped.
    Output 0 is C; a fused epilogue with several outputs stores output j to the j-th output tensor. A split-K
    unit's store (`tensor` WORKSPACE) goes to its k-range's slab of the workspace instead (`Tiling.split_k`).
    `halved`: a gate/up epilogue's (M, N / 2) output, whose tile n starts at n * BN / 2 (origin
    (m * BM, n * BN / 2 + part * BN / parts), part < parts / 2)."""

    buffer: str
    tensor: Tensor = Tensor.C
    part: int = 0
    parts: int = 1
    output: int = 0
    halved: bool = False


@dataclass(frozen=True)
class Loop:
    """A loop of `kind` over `body`. TILES visits this CTA's tiles (persistent, strided by the grid);
    K visits the k-blocks of the current tile; FLAT visits every (tile, k) pair of this CTA in order.

    A TILES loop with `step` > 1 visits only this CTA's tiles number start, start + step, ... (counting the
    CTA's own tiles from 0): ping-pong consumers (passes/split_consumers.py) take alternate tiles."""

    kind: LoopKind
    body: tuple[Stmt, ...]
    start: int = 0
    step: int = 1

    def __post_init__(self) -> None:
        if self.step < 1 or not 0 <= self.start < self.step:
            raise ValueError(f"Loop start={self.start} step={self.step}: expected step >= 1 and 0 <= start < step")
        if self.kind is not LoopKind.TILES and self.step != 1:
            raise ValueError(f"a {self.kind.value} loop has step {self.step}: only a tiles loop may skip iterations")


@dataclass(frozen=True)
class Advance(Op):
    """``cursor += 1``: the partition is done with the current slot of its ring."""

    cursor: str


@dataclass(frozen=True)
class SkipTiles(Op):
    """``cursor += tiles * k_tiles``: step over the ring uses of `tiles` whole tiles that another partition
    consumes (a ping-pong consumer skips the other consumer's tiles; the producer fills every tile's stages
    in order, so each consumer's slot and phase arithmetic must count them too)."""

    cursor: str
    tiles: int


@dataclass(frozen=True)
class PrefetchOperand(Op):
    """Start the TMA copy of column block `part` of `parts` of dense fused-epilogue operand `operand` (the
    block `LoadOperand` with the same fields reads) for the current tile into `buffer`; it completes on the
    buffer's private mbarrier. The buffer must hold no block still to be loaded: each prefetch is followed
    by exactly one LoadOperand through the buffer, which waits for it, before the next prefetch.

    The partition's threads must all have read the buffer's previous block before the copy overwrites it. By
    default the op synchronizes them itself (a barrier and a proxy fence); `synced` says the schedule already
    did: the op stands right behind a TmaStore that follows that read, whose fence_async_shared and the barrier
    Triton puts before every TMA store (all threads' staging writes must land first) order the reads too."""

    operand: str
    acc: str
    part: int
    parts: int
    buffer: str
    synced: bool = False


Stmt = Op | Loop  # (Op: the open base of every op, ir/base.py; a target's own ops: ir/ops_<target>.py)


@dataclass(frozen=True)
class Accumulator:
    """A register accumulator tile of (rows, cols) fp32 owned by one partition.

    `col0` places it in the output tile: it holds tile columns [col0, col0 + cols) (an accumulator split
    into column blocks, so a promoted fp8 partial only needs one block's registers).
    """

    name: str
    rows: int
    cols: int
    col0: int = 0


@dataclass(frozen=True)
class RowBlock:
    """Rows [start, start + rows) of every output tile: one consumer warpgroup's share of a cooperative tile.

    A partition with a row block reads only those rows of each A slot, and its accumulators, epilogue
    and stores cover only those rows of the tile; B slots are read whole.
    """

    start: int
    rows: int


# setmaxnreg's range: a partition's per-thread register budget is a multiple of 8 in [MIN_REGS, MAX_REGS].
MIN_REGS, MAX_REGS = 24, 256


@dataclass(frozen=True)
class Partition:
    """A group of warps running one program.

    Attributes:
        name: unique; also the generated Gluon function's suffix.
        role: what the warps do.
        warps: number of warps (a consumer has 4 per warpgroup).
        regs: per-thread register budget set with setmaxnreg (0: not yet assigned).
        default: whether this is Gluon's default partition (the kernel's own warps).
        accumulators: register tiles it owns.
        cursors: ring cursors it owns.
        body: its program.
        rows: the rows of each tile it computes and stores (None: the whole tile).
    """

    name: str
    role: Role
    warps: int
    body: tuple[Stmt, ...]
    regs: int = 0
    default: bool = False
    accumulators: tuple[Accumulator, ...] = ()
    cursors: tuple[Cursor, ...] = ()
    rows: RowBlock | None = None


# The rows of a cluster's CTA in one block where the CTAs interleave (`Tiling.interleaved`): one consumer warpgroup's.
INTERLEAVE = 64


@dataclass(frozen=True)
class Tiling:
    """The output tiling and its persistent order.

    Attributes:
        bm, bn, bk: block sizes along M, N, K.
        group_m: grouped raster: tiles run GROUP_M rows of tiles at a time, column by column, so that
            concurrently running CTAs share A and B tiles in L2.
        grid: the most CTAs launched (the SM count); each CTA loops over tiles pid, pid + grid, ...
        split_k: 1, or split-K: each tile's k-blocks form `split_k` ranges and the persistent loops visit
            work units, unit u = split * tiles + tile (all tiles of range 0 first, each range in the grouped
            order). TILES and FLAT loops run over units; a K loop over its unit's range of k-blocks
            (`ir.raster.split_range`: k_tiles / split_k of them from split * k_tiles / split_k when equal). Each
            unit's TMA stores go to slab `split` of the fp32 WORKSPACE (rows split * Mp + m, Mp = M rounded up to
            BM, so a partial tile never reaches the next slab), and a second kernel adds the slabs in order into C.
        uneven_split: split-K's ranges need not be equal (`ir.raster.split_range`): the first K % split_k of them
            take one k-block more than the rest, and the kernel runs at any K of at least split_k k-blocks. Off, the
            ranges are equal (the kernel computes one count for every unit) and K's k-blocks must divide by
            split_k. Built on where the planned K does not divide (passes/build.py), except for a producer that
            copies per-column scales of B in one flattened loop (`ScaleRecipe.per_column_b`), which needs equal
            counts.
        ranged: the kernel covers a range of C's tiles given at launch, tile ids tile_lo .. tile_hi - 1 of the
            grouped order (run-time arguments after M, N, K), rather than all of them: the loops run over that
            range (split-K: its units). A ranged split-K kernel's workspace is compact, one BM x BN box per
            unit: unit (split s, tile tile_lo + i) at rows (s * (tile_hi - tile_lo) + i) * BM, columns 0, of a
            (split_k * tiles * BM, BN) workspace, and its reduction maps each box back to its tile of C. This is
            how a plan with a split-K tail (`Plan.tail_split`) runs: whole waves of tiles in one ranged kernel,
            the tiles left over as split-K units in another (issue 6: wave quantization).
        swap_ab: the module computes the transpose of the problem's C (planner rule 18, `GemmSpec.swapped`): its
            spec is the swapped one (its M is the problem's N), its A the problem's B and its B the problem's A.
            Its output tiles go to C transposed: each staging buffer is (BN, BM), written with the accumulator
            transposed, and a TMA store puts it at C[off_n, off_m] (C's own rows: the problem's M, here N).
        stream_k: 0, or stream-K (Osama et al., "Stream-K", PPoPP 2023, as its data-parallel hybrid): the
            persistent loops visit *work units* (tile, k-blocks k_lo .. k_hi) instead of whole tiles. With T tiles and
            G CTAs, the first T - S tiles run whole in whole waves (tile pid, pid + G, ...), and the S = T % G tiles of
            the last, partial wave are cut into S * k_tiles (tile, k-block) iterations shared evenly by
            min(G, S * stream_k) CTAs: each such tile in at most `stream_k` (+ 1 where the CTAs run out) pieces, CTA
            p < that taking iterations [p * S * k_tiles // ctas, (p + 1) * S * k_tiles // ctas) as units cut at tile
            edges. K loops run over the unit's k-blocks (guards count from k_lo); a `Fixup` joins the pieces of a
            split tile through an fp32 workspace of G BM x BN slots and a flag per slot and consumer partition. The
            launch grid is the planned grid even where it exceeds the tiles.
        sk_waves: with stream_k, 0 or 1 whole waves that join the shared region: S = T % G + sk_waves * G tiles
            (at most T; none where T % G is 0), so the data-parallel waves are one fewer and every CTA takes
            S * k_tiles / G iterations, whose pieces need not start at a neighbour's k-block.
        grouping: a grouped GEMM (`spec.Grouping`, the experts of a mixture-of-experts layer): the TILES and FLAT
            loops visit (group, tile) pairs, tile ids 0 .. T - 1 over all groups, T = sum over groups of
            cdiv(rows_g, BM) * cdiv(N, BN), a group's tiles consecutive and in the grouped raster within it. The
            tile-to-group map is computed in the kernel from the group bounds (OFFSETS: offs; MASKED: the counts) by
            a scan over the groups, so nothing is read back to the host and a CUDA graph replays with other
            bounds. In such a module a `TmaLoad` of B reads group g's matrix (B is (G, N, K) or (G, K, N), a 3-D
            descriptor, so a K or N tail reads zeros, never the next group's rows), a `TmaLoad` of A reads rows
            from the group's first row (rows past its last feed only output rows that are dropped), and a
            `TmaStore` to C is clipped at the group's last row (a tile crossing into the next group never writes
            it); rowwise scale_b is read from group g's row of a (G, N) tensor. The launch grid is the planned grid.
            K_OFFSETS (the K-grouped weight gradient): every group has C's (M, N) tiles, group g's tile ids
            g * T_g .. (g + 1) * T_g - 1 (no scan); its K range comes from offs in the kernel, its K loops run
            max(1, cdiv(k_end - k_base, BK)) k-blocks from k_base, k_start rounded down to 16 bytes (TMA's
            innermost coordinate must be: the GPU faults otherwise), A and B are 2-D (A's rows are C's less g * M),
            A's columns outside the group's K range are zeroed in the slot before the wgmma (else the neighbour
            groups' columns would add into the sum), and C is (G * M, N), its stores clipped at the group's last row.
        cluster: CTAs per thread-block cluster (Hopper; Triton >= 3.7), 1 or 2, stacked along M (planner rule 24).
            Each CTA runs this module's partitions on a BM x BN tile, and the cluster's CTAs, ranks 0 .. cluster - 1,
            the rows r * BM .. of one *cluster tile* of cluster * BM x BN: tile ids, the raster and the persistent
            loops count cluster tiles (M in units of cluster * BM), and the launch has grid // cluster clusters.
            B's box is the same for every CTA of a cluster, so it is multicast (`TmaLoad.multicast`).
        cluster_n: the cluster's CTAs stand side by side along N instead (1x2, planner rule 24's ShareA): a cluster
            tile is BM x (cluster * BN), rank r computes its columns r * BN .., tile ids and loops count cluster tiles
            (N in units of cluster * BN), and A's box, the same for every CTA, is the one multicast.
        exit_sync: a cluster's CTAs end with a cluster barrier (barrier.cluster arrive and wait, after all their
            partitions): none exits while another may still multicast into its shared memory or arrive on its
            barriers (the lead's cluster barriers collect the other CTA's releases of the last stages, which no
            wait of the lead observes). The Gluon lowering emits nothing for it: Triton (ClusterBarrierInsertion,
            >= 3.7) inserts a cluster barrier before the return of every kernel of more than one CTA. Set by
            ShareB; the verifier wants it exactly in a cluster's modules, and the simulator (sim/cluster.py) lets a
            CTA without it exit when its own partitions finish (WRITE_AFTER_EXIT).
        n_blocks: a *narrow or fitted tile* (planner rules 31 and 32), or () for a whole one: the tile covers
            tile_n = sum(n_blocks) columns of C (its stride along N), in column blocks of these widths (powers of
            two: Triton's tensors and boxes must be), each with its own accumulator (`Accumulator.col0`), wgmma per
            k-block, epilogue and stores (boxes of the block's width, so no store reaches the next tile's columns).
            cuBLAS fits its tiles to the shape with widths like 80, 176 or 208; power-of-two blocks (64 + 16,
            128 + 32 + 16) do that work without computing or storing the columns past tile_n. B's slot still holds
            BN rows (the box reads past tile_n, into the next tile's rows of B, which no wgmma reads).
            In a 2x1 cluster (`interleaved`) the CTAs interleave their rows of the cluster tile in 64-row blocks.
    """

    bm: int
    bn: int
    bk: int
    group_m: int
    grid: int
    split_k: int = 1
    ranged: bool = False
    swap_ab: bool = False
    stream_k: int = 0
    sk_waves: int = 0
    grouping: Grouping = Grouping.NONE
    cluster: int = 1
    cluster_n: bool = False
    exit_sync: bool = False
    uneven_split: bool = False
    n_blocks: tuple[int, ...] = ()

    @property
    def tile_n(self) -> int:
        """The columns of C one tile covers, and so its stride along N: sum(n_blocks) for a narrow or fitted tile,
        BN otherwise (the raster, the grid and every store's origin count tiles of BM x tile_n)."""
        return sum(self.n_blocks) if self.n_blocks else self.bn

    @property
    def interleaved(self) -> bool:
        """A 2x1 cluster of narrow or fitted tiles (`n_blocks`): its consumer warpgroups split the tile's rows (a
        column split would give one warpgroup 128 of 144 columns), so each CTA holds its rows of the cluster tile in
        INTERLEAVE-row blocks rather than in one block of BM: A's slot is one box per warpgroup (`Ring.row_boxes`),
        each box the cluster's 128 rows split between the CTAs, so CTA r's local row j is row `cta_row(j)` of the
        cluster tile past r * INTERLEAVE (warpgroup w of CTA r: rows 128 w + 64 r ..). Triton's cluster layouts
        split a box's rows in halves only, and a slice of a cluster buffer is the cluster's rows, not the CTA's: this
        keeps each warpgroup's A rows one buffer (archive/exp/fitted_cluster)."""
        return self.cluster > 1 and not self.cluster_n and bool(self.n_blocks)

    @property
    def rank_rows(self) -> int:
        """The rows a cluster's CTA holds of the cluster tile at a time, and its rank's first row's stride: BM, or
        INTERLEAVE where the CTAs interleave (`interleaved`)."""
        return INTERLEAVE if self.interleaved else self.bm

    @property
    def row_blocks(self) -> tuple[tuple[int, int], ...]:
        """A CTA's rows of its tile as (first row past its rank's first, rows) blocks: ((0, BM),), or where the CTAs
        interleave each 64-row block where `cta_row` puts it."""
        q = self.rank_rows
        return tuple((self.cta_row(j), q) for j in range(0, self.bm, q))

    def cta_row(self, j: int) -> int:
        """A CTA's local row j (of its BM) as rows past its rank's first row of the cluster tile (`rank_rows`): j,
        or with interleaved CTAs j's 64-row block times the cluster's rows of a block, plus j within it."""
        q = self.rank_rows
        return j // q * q * self.cluster + j % q

    @property
    def cluster_mn(self) -> tuple[int, int]:
        """The cluster's CTAs along M and along N: (cluster, 1), or (1, cluster) with `cluster_n`."""
        return (1, self.cluster) if self.cluster_n else (self.cluster, 1)

    @property
    def grouped(self) -> bool:
        return self.grouping is not Grouping.NONE

    @property
    def b_per_group(self) -> bool:
        """B read per group through a 3-D descriptor (M-grouped layouts); a K-grouped module's B is 2-D."""
        return self.grouped and self.grouping is not Grouping.K_OFFSETS

    def block(self, axis: Axis) -> int:
        return {Axis.M: self.bm, Axis.N: self.bn, Axis.K: self.bk}[axis]

    def slab_rows(self, m: int) -> int:
        """Split-K: the workspace rows of one k-range's slab, M rounded up to BM (a ragged tile stays in its slab)."""
        return -(-m // self.bm) * self.bm

    def workspace_shape(self, m: int, n: int, tiles: int) -> tuple[int, int]:
        """Split-K's fp32 workspace for an M x N output: split_k slabs of Mp x N, or for a ranged launch over
        `tiles` tiles, split_k x tiles boxes of BM x BN stacked by rows."""
        if self.ranged:
            return self.split_k * tiles * self.bm, self.bn
        return self.split_k * self.slab_rows(m), n

    def splits_evenly(self, k: int) -> bool:
        """Whether this kernel can split K's k-blocks as it was built to (always without split-K). K is a run-time
        argument: a kernel of equal ranges run at another K than planned for would otherwise drop the remainder's
        k-blocks, and one of unequal ranges (`uneven_split`) needs a k-block for every range."""
        if self.split_k == 1 or k <= 0:
            return True
        blocks = -(-k // self.bk)
        return blocks >= self.split_k if self.uneven_split else blocks % self.split_k == 0


@dataclass(frozen=True)
class Module:
    """One kernel in schedule IR.

    Attributes:
        name: kernel name (a valid Python identifier).
        spec: the problem it was planned for (its sizes are run-time arguments of the kernel).
        tiling: tile shape and persistent order.
        rings, buffers, barriers: shared-memory and mbarrier declarations.
        tmem_scales: sm_100a block-scale buffers in tensor memory (seed 001: `ScaleCopy` fills them).
        target: the compilation target, the plan's (`Plan.target`); the verifier checks the structure agrees.
        amax_pass: planner rule 29's first pass of a rowwise quantization across tiles (`AmaxPass`), or None.
        partitions: the warp groups; exactly one is `default`.
        num_warps: warps of the default partition (Gluon's ``num_warps``).
        dependent_launch: launched with programmatic dependent launch (PDL: CUDA's programmatic stream
            serialization, Hopper and later; passes/launch.py). The kernel may start while the grid before it in the
            stream still runs: it allocates shared memory and initializes its barriers meanwhile, and every
            partition begins with a `GridDependencyWait`. It also lets the next grid launch as soon as all its CTAs
            have started (griddepcontrol.launch_dependents), so a following dependent launch overlaps this kernel's
            tail with its own start; that grid still waits for this one to finish before it touches memory.
    """

    name: str
    spec: GemmSpec
    tiling: Tiling
    partitions: tuple[Partition, ...]
    rings: tuple[Ring, ...] = ()
    buffers: tuple[Buffer, ...] = ()
    barriers: tuple[Barriers, ...] = field(default=())
    tmem_scales: tuple[ScaleBuffer, ...] = ()
    target: Target = Target.SM90A
    amax_pass: AmaxPass | None = None
    dependent_launch: bool = False

    def ring(self, name: str) -> Ring:
        return _find(self.rings, name, "ring")

    def buffer(self, name: str) -> Buffer:
        return _find(self.buffers, name, "buffer")

    def barrier(self, name: str) -> Barriers:
        return _find(self.barriers, name, "barrier")

    def partition(self, name: str) -> Partition:
        return _find(self.partitions, name, "partition")

    @property
    def default_partition(self) -> Partition:
        return next(p for p in self.partitions if p.default)

    @property
    def workers(self) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions if not p.default)

    @property
    def smem_bytes(self) -> int:
        """Shared memory of rings and buffers, plus 8 bytes per mbarrier (tensor-memory rings take none)."""
        return (
            sum(r.bytes for r in self.rings if not (r.in_tmem or r.tmem))
            + sum(b.bytes for b in self.buffers if b.alias is None)
            + 8 * sum(b.depth for b in self.barriers)
        )

    @property
    def launched_warps(self) -> int:
        """Warps the kernel launches: every partition's, in order, rounded up to whole warpgroups. Triton packs
        the workers back to back (two 1-warp workers share one warpgroup, measured in the PTX's .reqntid), and
        setmaxnreg then applies per warpgroup, so warps sharing one must have one budget."""
        return -(-sum(p.warps for p in self.partitions) // 4) * 4

    @property
    def register_need(self) -> int:
        """Registers of the whole CTA under its budgets: each partition's warps at its budget, plus the padding
        warps of the last warpgroup at the last worker's."""
        used = sum(p.warps for p in self.partitions)
        pad = self.launched_warps - used
        return 32 * (sum(p.warps * p.regs for p in self.partitions) + pad * self.partitions[-1].regs)

    @property
    def tmem_columns(self) -> int:
        """Tensor-memory columns the accumulator rings and the scale buffers take (sm_100a: at most 512 per SM)."""
        return sum(r.tmem_columns for r in self.rings) + sum(s.columns for s in self.tmem_scales)

    def scale_buffer(self, name: str) -> ScaleBuffer:
        return _find(self.tmem_scales, name, "scale buffer")

    @property
    def blackwell(self) -> bool:
        """Whether this is an sm_100a schedule (tensor-memory accumulators, an MMA partition)."""
        return self.target is Target.SM100A

    @property
    def gfx1250(self) -> bool:
        """Whether this is a gfx1250 schedule (one software-pipelined WORKGROUP partition, TDM copies, wmma)."""
        return self.target is Target.GFX1250

    @property
    def lds_bytes(self) -> int:
        """gfx1250: the LDS the rings take with each slot row's LDS_ROW_PAD bytes of padding."""
        return sum(r.depth * r.rows * (r.cols * r.dtype.bytes + LDS_ROW_PAD) for r in self.rings)

    @property
    def shared_bytes(self) -> int:
        """The shared memory a CTA allocates, which `DeviceInfo.smem_per_block` bounds: gfx1250's LDS, padded rows
        and all, or sm_90a's and sm_100a's smem."""
        return self.lds_bytes if self.gfx1250 else self.smem_bytes

    def with_partition(self, part: Partition) -> Module:
        """This module with the partition of the same name replaced."""
        return replace(self, partitions=tuple(part if p.name == part.name else p for p in self.partitions))


# gfx1250: the padding after each row of a ring slot in LDS (backends/gluon_gfx1250.py's PaddedSharedLayout), bytes.
LDS_ROW_PAD = 16


def _find(items: tuple[Any, ...], name: str, what: str) -> Any:
    for it in items:
        if it.name == name:
            return it
    raise KeyError(f"no {what} named {name!r}")


def walk(body: tuple[Stmt, ...]) -> Iterator[tuple[Op, tuple[LoopKind, ...]]]:
    """Yield (op, enclosing loop kinds) for every op in `body`, in program order."""
    yield from _walk(body, ())


def _walk(body: tuple[Stmt, ...], loops: tuple[LoopKind, ...]) -> Iterator[tuple[Op, tuple[LoopKind, ...]]]:
    for s in body:
        if isinstance(s, Loop):
            yield from _walk(s.body, loops + (s.kind,))
        else:
            yield s, loops
