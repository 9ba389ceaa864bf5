"""sm_100a's own schedule ops (planner rule 19, `warploom.targets.sm100`): tcgen05 MMAs into tensor memory, scale
copies into tensor memory, commits, and tensor-memory loads. The ops every target shares are in `ir/nodes.py`."""

from __future__ import annotations

from dataclasses import dataclass

from warploom.ir.base import Guard, Op, Slot, Tensor


@dataclass(frozen=True)
class TcMma(Op):
    """``acc_ring[acc_slot] (+)= a_ring[slot] @ b_ring[slot]`` on the tensor cores (sm_100a tcgen05), asynchronous.

    One thread of the partition issues it; the tensor cores read the two smem slots and accumulate into the
    tensor-memory accumulator in the background. It completes in issue order with the partition's other
    tcgen05 MMAs; on completion it arrives once on `release[slot]` (the ring's empty barrier: the slots may be
    refilled), if given. The accumulator is overwritten instead of added to when `overwrite` holds (FIRST_K: a
    tile's first k-block). Its result is visible only through a `Commit` arrival issued after it.
    """

    a_ring: str
    b_ring: str
    slot: Slot
    acc_ring: str
    acc_slot: Slot
    overwrite: Guard = Guard.FIRST_K
    release: str | None = None
    scales: TmemScales | None = None
    # seed 000: on completion also arrive on release_scales[scales.slot] (the TMEM scale buffers' empty barrier)
    release_scales: str | None = None


@dataclass(frozen=True)
class TmemScales:
    """The block scales a scaled `TcMma` (MX: tcgen05.mma ... kind::mxf8f6f4.block_scale) reads from tensor memory.

    Attributes:
        a, b: the `ScaleBuffer`s of A's rows and B's columns, each filled by a `ScaleCopy` issued before the MMA;
            with `slot` (seed 000), the tensor-memory scale rings (`Ring.tmem`) that the scale partition's
            `StoreTmemScales` fill, read at that slot.
        a_type, b_type: the operands' element formats as the instruction names them ("e4m3", "e5m2", "e2m1").
        vec: elements of K one scale covers: 32 for MX (scale_vec::1X for fp8 and fp8 x fp4, 2X for fp4), 16 for
            NVFP4's e4m3 scales (kind::mxf4nvf4 scale_vec::4X); Gluon infers it from the scale buffers' dtype and
            shape.
        k_cols: seed 000's NVFP4: the first scale column each 64-deep kind::mxf4nvf4 MMA of the k-block reads (4
            columns, 64 of K, each), as Triton issues one tcgen05_mma_scaled: (0,) at BK 64, (0, 4) at BK 128 (the
            second MMA, K 64..127, reads columns 4..7); check_scale_partition requires each MMA's own columns.
            Empty: the scales of each slice of K are its own (seed 001, MX)."""

    a: str
    b: str
    a_type: str
    b_type: str
    vec: int = 32
    slot: Slot | None = None
    k_cols: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for t in (self.a_type, self.b_type):
            if t not in ("e4m3", "e5m2", "e2m1"):
                raise ValueError(f"TmemScales: expected an MX format ('e4m3', 'e5m2' or 'e2m1'), got {t!r}")
        if self.vec not in (16, 32) or (self.vec == 16 and (self.a_type, self.b_type) != ("e2m1", "e2m1")):
            raise ValueError(f"TmemScales: scales per 32 of K (MX) or per 16 with e2m1 operands (NVFP4), got "
                             f"{self.vec=} with {self.a_type} x {self.b_type}")
        if self.k_cols and (self.vec != 16 or self.slot is None):
            raise ValueError(f"TmemScales: k_cols name seed 000's NVFP4 64-deep MMAs (vec 16, a slot), got "
                             f"{self.k_cols=} with {self.vec=} {self.slot=}")


@dataclass(frozen=True)
class ScaleCopy(Op):
    """sm_100a (seed 001): copy the stage's e8m0 scales `ring[slot]` (shared memory, the tcgen05.cp "blocked" layout
    of 128x4 chunks) into tensor-memory scale buffer `dst` (tcgen05.cp), asynchronously.

    It joins the issuing partition's in-order queue of tcgen05 ops, so it completes before any MMA issued after it
    and after every MMA issued before it (which may still read `dst`). It reads `ring[slot]` until it completes: the
    slot may be released only by the completion of an op issued after it (the scaled MMA's)."""

    ring: str
    slot: Slot
    dst: str


@dataclass(frozen=True)
class StoreTmemScales(Op):
    """sm_100a (seed 000): the scale partition loads the (tile, k-block)'s block scales of `tensor` (scale_a over the
    tile's rows, scale_b over its columns; row-major, any strides, or `blocked`) with ordinary loads and stores them
    from registers into slot `slot` of the tensor-memory scale ring `ring` (tcgen05.st, then tcgen05.wait::st).
    Synchronous: when it returns its own thread's stores are done; the partition's next arrival on `barrier[slot]`
    (after a barrier of its warps) publishes them to the MMA warp, whose scaled MMA reads the slot and releases it
    when it completes.

    Attributes:
        blocked: the scales are in torch's blocked layout (``to_blocked``): the element of row r and scale c lies at
            `warploom.blocked.offset` (a tile narrower than 128 over a wider N, which tcgen05.cp cannot serve:
            `planning.sm100.scale_partition_rule`); False: row-major with the tensor's strides."""

    tensor: Tensor
    ring: str
    slot: Slot
    barrier: str
    blocked: bool = False


@dataclass(frozen=True)
class Commit(Op):
    """Arrive once on `barrier[slot]` when every tcgen05 MMA this partition issued before has completed
    (tcgen05.commit): a waiter on that phase may then read the accumulators they wrote."""

    barrier: str
    slot: Slot


@dataclass(frozen=True)
class LoadTmem(Op):
    """Copy column block `part` of `parts` of tensor-memory accumulator `acc_ring[slot]` into register accumulator
    `acc` (fp32, the block's rows and columns; `acc`'s col0 places it). The slot must have been committed and the
    commit's phase acquired by a wait; the registers stay valid after the slot is released."""

    acc_ring: str
    slot: Slot
    acc: str
    part: int = 0
    parts: int = 1


# This target's own ops (its declaration adds the shared ones its schedules hold).
OWN_OPS: frozenset[type[Op]] = frozenset({TcMma, ScaleCopy, StoreTmemScales, Commit, LoadTmem})
