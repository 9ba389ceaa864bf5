"""sm_100a seed 000: a scale partition feeds the block-scaled MMA through two tensor-memory scale buffers.

Seed 001's path (PlaceScaleCopies) needs the scales in torch's blocked layout, which TMA brings into the A/B stage
and tcgen05.cp copies whole 128-row chunks of. Row-major scales (plain, unpadded, any stride: an MoE expert's
activation scales, a narrow tile's rows inside a 128-row chunk) cannot ride that path. Here a partition of its own
loads each (tile, k-block)'s scales with ordinary loads, stores them from registers into one of two tensor-memory
scale buffers (tcgen05.st) and signals the MMA warp; the scaled MMA that reads the buffer releases it when it
completes, so the MMA stays asynchronous and the partition fills the other buffer meanwhile.

    scales (4 warps, few registers), per (tile, k):     mma (1 warp), per (tile, k):
      wait scale_empty[q] phase(q)^1                      wait ready[c] phase(c)
      store_tmem_scales scale_a -> sa_tm[q]               wait scale_ready[q] phase(q)
      store_tmem_scales scale_b -> sb_tm[q]               tcgen05_mma acc += a[c] @ b[c] scaled by sa_tm[q] x sb_tm[q],
      arrive scale_ready[q]                                   then arrive empty[c] and scale_empty[q]
      advance q                                           advance c; advance q

Four warps, because a tensor-memory load or store reaches only the 32 lanes of its warp's quarter, so 128 rows
need a warpgroup (Triton's tcgen05 register layouts require 4 warps). It runs after SplitMma, which made the MMA
warp; the module must have no seed-001 scale copies (the planner builds none when it plans this path).

Which scales come this way is the planner's (`planning.sm100.scale_partition_rule`): row-major ones always, blocked
ones (`StoreTmemScales.blocked`: loaded at `warploom.blocked.offset`) where tcgen05.cp cannot serve the tile (a tile
narrower than 128 over a wider N) or where forced. A 256-wide tile's B buffers hold 256 rows (two 128-row chunks,
twice the columns; `scale_rows`), which its MMA reads whole; swap-AB decode needs nothing here (the swapped spec's
scale_a is the problem's scale_b, which the simulator passes in its place; warploom launches no sm_100a kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.ir.verify_scales import MX_FORMATS, NVFP4_MMA_COLS
from warploom.planning.common import scale_rows
from warploom.planning.sm100 import SCALE_BUFFERS
from warploom.spec import ScaleLayout, ScaleRecipe

# The two tensor-memory scale rings and their barriers.
SCALE_RINGS = {ir.Tensor.SCALE_A: "sa_tm", ir.Tensor.SCALE_B: "sb_tm"}
SCALE_READY, SCALE_EMPTY = "scale_ready", "scale_empty"
# (SCALE_BUFFERS, the double buffering: the partition fills one while the MMA reads the other; the planner's)
SCALE_WARPS = 4  # a warpgroup: tcgen05.st reaches each warp's own 32 lanes
# Its budget: a thread holds a k-block's scales of a row, their addresses and masks; ptxas for sm_100a spilled nothing
# at these under Triton 3.6 and 3.9 (tests/compile/test_compile_sm100.py), keyed by (scale dtype, scales a row a
# k-block, rows of B's buffer, blocked source). Row-major at 128 rows: MX's 4 e8m0 bytes at 48; NVFP4's e4m3 cost
# more: 4 (BK 64) spilled 116 bytes at 48 under 3.9, none at 64; 8 (BK 128) 104 bytes at 48 under 3.6 and 148 at 96
# under 3.9, none at 104 (loading e4m3 as bytes and bitcasting spilled more). Blocked addresses (`blocked.offset`)
# cost MX 16 spilled bytes at 48 (3.6), none at 56. A 256-wide tile's B scales are two rows a thread: row-major MX
# spilled 288 bytes at 48, 88 at 64, 24 at 72 (3.6), none at 80; blocked MX and NVFP4 at BK 64 8 at 80 (3.6), none
# at 88; NVFP4 at BK 128 48 at 104, none at 136.
_E8, _E4 = DType.E8M0, DType.E4M3
SCALE_PARTITION_REGS = {
    (_E8, 4, 128, False): 48, (_E8, 4, 128, True): 56,
    (_E4, 4, 128, False): 64, (_E4, 4, 128, True): 64,
    (_E4, 8, 128, False): 104, (_E4, 8, 128, True): 104,
    (_E8, 4, 256, False): 80, (_E8, 4, 256, True): 88,
    (_E4, 4, 256, False): 80, (_E4, 4, 256, True): 88,
    (_E4, 8, 256, False): 136, (_E4, 8, 256, True): 136,
}


def scale_partition_regs(dtype: DType, cols: int, b_rows: int = 128, blocked: bool = False) -> int:
    """The scale partition's register budget for `cols` scales of `dtype` a row a k-block, B's buffers `b_rows`
    rows (256: a 256-wide tile's), loaded row-major or at `blocked` addresses."""
    return SCALE_PARTITION_REGS[(dtype, cols, b_rows, blocked)]


@dataclass(frozen=True)
class PlaceScalePartition:
    """Attributes:
    enabled: the plan's seed 000 path (`Plan.scale_partition` on an sm_100a block-scaled plan)."""

    enabled: bool = False

    def __call__(self, m: ir.Module) -> ir.Module:
        if not self.enabled:
            return m
        if m.tmem_scales or any(r.byte_scales for r in m.rings):
            raise ValueError("PlaceScalePartition: the module already moves its scales through the A/B stages "
                             "(seed 001's tcgen05.cp path); a plan takes one path")
        spec, t = m.spec, m.tiling
        cols = t.bk // spec.scale.scale_k  # (MX: BK/32; NVFP4: BK/16)
        dt = DType.E4M3 if spec.scale.scale_dtype is DType.E4M3 else DType.E8M0
        # (128, cols) a buffer; B's of a 256-wide tile (256, cols): two 128-row chunks, 2 x cols columns
        rows = {ir.Tensor.SCALE_A: scale_rows(t.bm), ir.Tensor.SCALE_B: scale_rows(t.bn)}
        rings = tuple(ir.Ring(name, tensor, dt, SCALE_BUFFERS, rows[tensor], cols, tmem=True)
                      for tensor, name in SCALE_RINGS.items())
        ready = ir.Barriers(SCALE_READY, SCALE_BUFFERS, 1, tuple(SCALE_RINGS.values()), ir.Purpose.READY)
        empty = ir.Barriers(SCALE_EMPTY, SCALE_BUFFERS, 1, tuple(SCALE_RINGS.values()), ir.Purpose.EMPTY)
        q = ir.Slot("q")
        # NVFP4: one 64-deep MMA per 4 scale columns, each reading its own (`TmemScales.k_cols`)
        k_cols = tuple(range(0, cols, NVFP4_MMA_COLS)) if spec.scale is ScaleRecipe.NVFP4 else ()
        blocked = spec.scale_layout is ScaleLayout.BLOCKED  # (loaded at their blocked addresses: scale_partition_rule)
        scales = ir.TmemScales(SCALE_RINGS[ir.Tensor.SCALE_A], SCALE_RINGS[ir.Tensor.SCALE_B],
                               MX_FORMATS[spec.a_dtype], MX_FORMATS[spec.b_dtype], spec.scale.scale_k, slot=q,
                               k_cols=k_cols)

        def mma_k(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
            out: list[ir.Stmt] = []
            for s in body:
                if isinstance(s, ir.Loop):
                    out.append(replace(s, body=mma_k(s.body)))
                elif isinstance(s, ir.TcMma):
                    # the buffer is released by the MMA's completion, never by the issuing thread
                    out += [ir.Wait(SCALE_READY, q, ir.Parity("q")),
                            replace(s, scales=scales, release_scales=SCALE_EMPTY), ir.Advance("q")]
                else:
                    out.append(s)
            return tuple(out)

        mma = next(p for p in m.partitions if p.role is ir.Role.MMA)
        k_body: tuple[ir.Stmt, ...] = (
            ir.Wait(SCALE_EMPTY, q, ir.Parity("q", flip=True)),
            *(ir.StoreTmemScales(tensor, name, q, SCALE_READY, blocked=blocked)
              for tensor, name in SCALE_RINGS.items()),
            ir.Arrive(SCALE_READY, q),
            ir.Advance("q"),
        )
        part = ir.Partition(
            name="scales", role=ir.Role.SCALES, warps=SCALE_WARPS,
            regs=scale_partition_regs(dt, cols, rows[ir.Tensor.SCALE_B], blocked),
            body=(ir.Loop(ir.LoopKind.TILES, (ir.Loop(ir.LoopKind.K, k_body),)),),
            cursors=(ir.Cursor("q", SCALE_BUFFERS),),
        )
        parts: list[ir.Partition] = []
        for p in m.partitions:
            if p is mma:
                p = replace(p, body=mma_k(p.body), cursors=(*p.cursors, ir.Cursor("q", SCALE_BUFFERS)))
            parts.append(p)
            if p.default:  # its own warpgroup, right after the default partition: the small workers share the next
                parts.append(part)
        return replace(m, partitions=tuple(parts), rings=(*m.rings, *rings), barriers=(*m.barriers, ready, empty))
