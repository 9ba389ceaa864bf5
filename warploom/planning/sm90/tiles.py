"""sm_90a's tile menu and what a tile costs in resources: the (BM, BN) candidates and their per-FLOP efficiency
(step 3 of `warploom.planner`'s heuristic, rule 17's 256x128 at long K), the epilogue's staging blocks and slots (rules
9 and 10), the stages that fit in shared memory beside them (rules 16 and 18's deeper decode rings), rule 18's swapped
tile rows, and the register limits of ping-pong, rule 12's MX budgets and rule 17's 256-row tile. `planning.sm90`
chooses among these tiles; the tuner's cost model (`warploom.tune.cost`) prices plans by the same efficiency."""

from __future__ import annotations

import math
from typing import TypedDict

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.planning.common import (
    DECODE_STAGES,
    MAX_STAGES,
    SWAP_MAX_M,
    SWAP_TOKENS,
    dense_operands,
    is_decode,
    k_blocks,
    scale_slot_bytes,
    stage_bytes,
)
from warploom.planning.plan import CONSUMER_REGS, Plan
from warploom.spec import Accumulation, ALayout, GemmSpec, ScaleRecipe

# (BM, BN) candidates with their relative per-FLOP efficiency (step 3 of the heuristic: `warploom.planner`).
TILES: tuple[tuple[int, int, float], ...] = (
    (128, 256, 1.00),
    (128, 128, 0.90),
    (64, 256, 0.85),
    (64, 128, 0.75),
    # Chosen by rules 13 (small-M blockwise) and 16 (decode, with a deeper ring); otherwise only when forced.
    (64, 64, 0.60),
    # Rule 17: forced or tuned only (measured equal to 128x256), but at long K for 16-bit operands (`long_k_16bit`,
    # scored at `_LONG_K_256`).
    (256, 128, 1.00),
    # Rule 32's fitted tiles: three consumer warpgroups (160 registers each), forced or by rule 32 only, their
    # columns fitted by n_blocks (a whole 64x256 accumulator a warpgroup would not fit 160 registers).
    (192, 128, 1.00),
    (192, 256, 1.00),
    # Rule 18's swapped decode tiles (the swapped problem's N is the tokens: 16 or 32), 64 or 128 rows of the
    # weight (`swap_rows`); rule 33 takes 64x16 and 64x32 unswapped. 64x8, wgmma's narrowest, is forced only: cuBLAS
    # runs 64x8 tiles where rule 33 takes 64x16 (141x136x1624), but here they ran no better than 64x16 at eight shapes
    # beyond the rounds' spread (H200, session 36, docs/decisions/rule-33-latency-width.md).
    (64, 8, 0.15),
    (64, 16, 0.25),
    (128, 16, 0.25),
    (64, 32, 0.35),
    (128, 32, 0.35),
)


# Step 3: 128x128's efficiency where A's or B's rows are not multiples of 128 bytes (`rows_aligned`): 3000^3 bf16 ran
# 128x256 in 3 rounds 17% faster than 128x128 in 5, while 3072^3 (aligned rows, the same tile counts) ran 128x128
# 1-3% faster (H100, session 22).
_MISALIGNED_128 = 0.72
# Step 3: 128x128's efficiency for 16-bit operands at long K (`LONG_K_BLOCKS` k-blocks or more). With every SM on a
# 128x128 tile, a k-block took about as long as 128x256's at half the SMs: 168x8424x12040 ran 66 tiles of 128x256 9%
# faster than 132 of 128x128, 1057x2048x7112 72 of 128x256 27% faster than 144 of 128x128 with a split-K tail, while
# at K = 768-5120 128x128 kept its lead (H100, session 30, docs/data/tall-tiles-*-session30.json).
_LONG_K_128 = 0.45
LONG_K_BLOCKS = 96
# Rule 17's 256x128 joins the planner's own candidates in that regime, a little behind 128x256 so that 128x256 keeps
# the ties: 10837x360x8728 ran 129 tiles of 256x128 28% faster than 255 of 128x128 (the best before) and 40% faster
# than 128x256's stream-K, while at 1057x2048x7112 (80 tiles of 256x128 against 72 of 128x256) it lost 20% (session 30).
_LONG_K_256 = 0.95


def rows_aligned(spec: GemmSpec) -> bool:
    """Whether A's and B's rows (as stored: `GemmSpec.row_align`) start on whole 128-byte lines."""
    return spec.row_align("a") == 128 and spec.row_align("b") == 128


def long_k_16bit(spec: GemmSpec) -> bool:
    """Step 3's long-K regime: 16-bit operands with at least `LONG_K_BLOCKS` k-blocks, where 128x128 tiles lose their
    per-FLOP efficiency and rule 17's 256x128 is a candidate."""
    return spec.a_dtype.bits == 16 and k_blocks(spec) >= LONG_K_BLOCKS


def tile_efficiency(spec: GemmSpec, bm: int, bn: int) -> float:
    """Step 3's per-FLOP efficiency of a BM x BN tile for `spec`: `TILES`' measured value, 128x128's at rows that are
    not whole 128-byte lines (`_MISALIGNED_128`) and at long K (`_LONG_K_128`), 256x128's there (`_LONG_K_256`). The
    planner scores its candidates and the tuner's cost model its plans by it, so the two never disagree."""
    eff = next((e for tbm, tbn, e in TILES if (tbm, tbn) == (bm, bn)), min(e for _, _, e in TILES))
    if (bm, bn) == (128, 128):
        if not rows_aligned(spec):
            eff = _MISALIGNED_128
        if long_k_16bit(spec):
            eff = min(eff, _LONG_K_128)
    if bm == 256 and long_k_16bit(spec):
        eff = _LONG_K_256
    return eff


def epilogue_subtiles(bn: int, pingpong: bool = False, fused: bool = False, bm: int = 128, block: bool = False,
                      wide: bool = False) -> int:
    # Ping-pong stores 128-wide tiles in halves too: its epilogue hides under the other warpgroup's mainloop,
    # so the extra store wait costs little, and the smem saved buys a stage. A fused epilogue beside a whole
    # 128x128 (64x256) accumulator works in quarters: in halves its temporaries spill (1544 bytes, ptxas).
    if wide:
        return FUSED_WIDE_BLOCKS  # rule 9
    if (pingpong and fused and bm * bn >= 128 * 128) or block:
        return 4  # (block: per-block rowwise scales and bias, 64 columns at a time; 128 still spill)
    # Rule 17's 256x128 stores 64x64 halves per warpgroup: their staging (32 KiB) leaves room for a 4th stage.
    return 2 if bn == 256 or (pingpong and bn == 128) or bm >= 192 else 1


FUSED_WIDE_BLOCKS = 8  # rule 9: 32-column blocks; in 4 blocks the erf GELU spilled 628-872 bytes (ptxas, session 15)
FUSED_WIDE_SLOTS = 2  # rule 9: staging slots of the stores, and buffers of each dense operand


def fused_wide(spec: GemmSpec, bn: int, pingpong: bool = False) -> bool:
    """Rule 9: a fused epilogue on a 256-wide cooperative tile runs in FUSED_WIDE_BLOCKS slotted column blocks."""
    return (spec.epilogue is not None and bn == 256 and not pingpong
            and spec.accumulation is Accumulation.NATIVE)



def epilogue_bytes(spec: GemmSpec, bm: int, bn: int, pingpong: bool = False, split_k: int = 1,
                   prefetch: bool = True) -> int:
    """The epilogue's staging buffers: for the TMA store (one column block of the tile per output, in each
    staging slot), and for each dense operand of a fused epilogue (one block per operand slot, two for rule 9's
    early copies unless `prefetch` is off; warploom.passes.epilogue). Ping-pong consumers each stage whole tiles
    of their own: twice the buffers of cooperative ones, which share each tile's rows."""
    wide = fused_wide(spec, bn, pingpong)
    sub = epilogue_subtiles(bn, pingpong, spec.epilogue is not None, bm, block_epilogue(spec, bn, pingpong), wide)
    slots, operand_slots = (FUSED_WIDE_SLOTS, FUSED_WIDE_SLOTS if prefetch else 1) if wide else (1, 1)
    return _staging_bytes(spec, bm * bn // sub, 2 if pingpong else 1, slots, operand_slots, split_k)


def plan_epilogue_bytes(spec: GemmSpec, plan: Plan) -> int:
    """`epilogue_bytes` of the buffers `plan` itself declares: its blocks and slots, which may be forced by hand."""
    return _staging_bytes(spec, plan.bm * plan.bn // plan.epilogue_subtiles, 2 if plan.pingpong else 1,
                          plan.staging_slots, plan.operand_slots, plan.split_k)


def _staging_bytes(spec: GemmSpec, block: int, copies: int, slots: int, operand_slots: int, split_k: int) -> int:
    """`copies` x (`slots` staging blocks of `block` elements per output + `operand_slots` per dense operand)."""
    # Split-K units stage their fp32 partials (the workspace's dtype), not the output.
    outs = (DType.FP32,) if split_k > 1 else spec.output_dtypes()
    per_elem = slots * sum(d.bytes for d in outs) + operand_slots * sum(d.bytes for d in dense_operands(spec))
    return copies * block * per_elem


# Rule 18's tile rows: a round of CTAs streaming the weight is bound by each SM's TMA rate (~44 B/ns, docs/benchmarks.md
# session 17) until about this many CTAs saturate HBM (~3 TB/s); a round takes as long as this many CTAs would, or
# as its CTAs, whichever is more.
_HBM_CTAS = 68


def swap_rows(n: int, sm_count: int) -> int:
    """Rule 18: 64 or 128 rows of the weight (N) per swapped tile, whichever streams N in less modeled time: the
    rounds of the persistent grid, each costing rows x max(its CTAs, _HBM_CTAS). 128 wins where 64-row tiles leave
    a thin last round (N = 9216: 144 tiles, 12 in the second round; measured 0.86x torch against 1.07x, bf16 M =
    16), 64 (ties too) where all fit in one."""
    def cost(bm: int) -> int:
        tiles, total = math.ceil(n / bm), 0
        while tiles > 0:
            ctas = min(tiles, sm_count)
            total += bm * max(ctas, _HBM_CTAS)
            tiles -= ctas
        return total

    return min((64, 128), key=cost)


def tall_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool, split_k: int | None,
                   tail_split: int | None, consumer_partitions: int | None, bm: int = 256) -> list[str]:
    """Rules 17 and 32: why a 256- or 192-row tile cannot run `spec` with these options (empty: it can). Its four
    warpgroups have 112 registers each (three: 160), room for a 64x128 accumulator (64x208), not for a promoted partial
    beside it, nor measured with a fused epilogue, split-K units or ping-pong."""
    problems = []
    if spec.accumulation is not Accumulation.NATIVE:
        problems.append("promoted fp8 (a partial beside the accumulator needs more registers than each warpgroup's)")
    if spec.epilogue is not None:
        problems.append("a fused epilogue (not built for four consumer warpgroups)")
    if spec.bias_dtype is not None:
        problems.append("a bias (rowwise scales with a bias spill 1040 bytes at 112 registers, ptxas)")
    if pingpong:
        problems.append("ping-pong")
    if scale_partition:
        problems.append("the scale partition")
    if split_k not in (None, 1) or tail_split not in (None, 1):
        problems.append("split-K")
    if bm == 192 and spec.a_layout is not ALayout.K_MAJOR:
        problems.append("an M-major A (a 192-row slot is copied as 64-row boxes of A's K-major rows)")
    if consumer_partitions not in (None, bm // 64):
        problems.append(f"consumer_partitions={consumer_partitions} (a {bm}-row tile runs one partition per "
                        f"warpgroup: {bm // 64})")
    return problems


def max_stages(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, bk: int, pingpong: bool = False,
               scale_partition: bool = False, scale_stages: int = 2, split_k: int = 1, prefetch: bool = True,
               cap: int | None = None, subtiles: int | None = None, b_rows: int | None = None) -> int:
    """The most stages that fit in shared memory beside the epilogue (and the scale partition's ring), at most
    `cap`: by default 6, or 12 for a decode GEMM's 64x64 tiles (rule 16) and a swapped one's 64x16 and 64x32 (rule
    18, whose swapped problem has at most SWAP_MAX_M columns). `subtiles`: the epilogue's blocks a tile, when not
    `epilogue_subtiles`' (a 1x2 cluster's warpgroups store whole rows: 1). `b_rows`: B's rows a stage keeps, when
    not bn (a fitted tile's tile_n, `ir.Ring.blocks`)."""
    if cap is None:
        # Rules 16 and 18 (a swapped decode problem's N is its tokens: at most SWAP_MAX_M).
        decode = ((bm, bn) == (64, 64) and is_decode(spec, pingpong)
                  or bm == 64 and bn in SWAP_TOKENS and spec.n <= SWAP_MAX_M and not pingpong)
        cap = DECODE_STAGES if decode else MAX_STAGES
    # 1 KiB reserve covers the mbarriers and alignment padding between allocations.
    staging = (epilogue_bytes(spec, bm, bn, pingpong, split_k, prefetch) if subtiles is None
               else _staging_bytes(spec, bm * bn // subtiles, 1, 1, 1, split_k))
    free = device.smem_per_block - staging - 1024
    if scale_partition:
        free -= scale_stages * scale_slot_bytes(spec, bm, bn, bk)
    return min(cap, free // stage_bytes(spec, bm, bn if b_rows is None else b_rows, bk, scale_partition))


class Registers(TypedDict, total=False):
    """Register budgets a rule sets on a Plan (`Plan.producer_regs`, `Plan.consumer_regs`), passed as its keywords."""

    producer_regs: int
    consumer_regs: int


def mx_registers(spec: GemmSpec, bm: int, pingpong: bool) -> Registers:
    """Rule 12's budgets: the scale partition decodes MX scales in registers; at 128x256 the kernel spilled 136 and
    280 bytes with 24 and 32 for its warpgroup, none with 40 or 48 (ptxas, 2026-11-23). It shares that warpgroup
    (and so its budget) with the producer. Beside two consumer warpgroups at 232, 40 is what keeps the default
    partition (consumer0) at 232 too: Gluon gives it what is left of maxnreg (168) x 384 threads after the
    workers' budgets, 224 with 48."""
    if spec.scale is not ScaleRecipe.MX:
        return Registers()
    return Registers(producer_regs=40, consumer_regs=232 if bm == 128 or pingpong else CONSUMER_REGS)


def pingpong_fits(spec: GemmSpec, bm: int, bn: int, partial_blocks: int | None) -> bool:
    """Whether one warpgroup (128 threads) can hold a whole tile's accumulator: at most 128 fp32 registers a
    thread (128x128 or 64x256), plus, for promoted fp8, a partial of one column block."""
    regs = bm * bn // 128
    if spec.accumulation is Accumulation.PROMOTED:
        regs += regs // (partial_blocks or (2 if bn >= 128 else 1))
    return bm * bn <= 128 * 128 and regs <= 192


def block_epilogue(spec: GemmSpec, bn: int, pingpong: bool = False) -> bool:
    """Rule 10: rowwise scales and a bias on a 256-wide cooperative tile (no fused epilogue) go per 64-column
    block. Whole, the 256-wide scale_b and bias vectors beside the accumulator spill 272 bytes (ptxas), which
    kept this common case on 128x128 tiles until 2026-11-23; per block, 0 bytes."""
    return (bn == 256 and not pingpong and spec.scale is ScaleRecipe.ROWWISE and spec.bias_dtype is not None
            and spec.epilogue is None and spec.accumulation is Accumulation.NATIVE)
