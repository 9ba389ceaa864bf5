"""sm_90a's planner rule: a TMA producer warp and wgmma consumer warpgroups, cooperative or ping-pong; every rule of
`warploom.planner`'s list but 19 and 20 (the cost models they choose by in `sm90_models.py`). `plan` is the
target's (its declaration's `plan`, `warploom.targets.sm90`); rule 22's grouped GEMMs (`plan_grouped`) come before
it, in `plan_schedule`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warploom.device import DeviceInfo
from warploom.dtypes import DType
from warploom.errors import UnsupportedError
from warploom.planning.amax_pass import (
    AMAX_PASS_BNS,
    AMAX_PASS_NARROW_BN,
    amax_pass_bn,
    amax_pass_outputs,
    amax_pass_problem,
)
from warploom.planning.common import (
    DECODE_STAGES,
    MAX_STAGES,
    SWAP_MAX_M,
    SWAP_TOKENS,
    dense_operands,
    is_decode,
    k_block,
    k_blocks,
    scale_slot_bytes,
    stage_bytes,
    swap_decode,
    swap_tokens,
)
from warploom.planning.options import PlanOptions
from warploom.planning.plan import CONSUMER_REGS, Plan
from warploom.planning.sm90_models import (
    CLUSTER_MARGIN,
    CLUSTER_PARTIAL_MAX_PAD,
    CLUSTER_PROMOTED_BLOCKS,
    SK_PIECES,
    cluster_measured,
    cluster_min_kblocks,
    cluster_plan,
    cluster_problems,
    cluster_row_pad,
    cta_kblocks,
    decode_split,
    latency_split,
    latency_stages,
    latency_tiles,
    rule15_tail,
    stream_k_grid,
    stream_k_problems,
    stream_k_score,
    tail_score,
)
from warploom.planning.sm100 import plan_blackwell_grouped
from warploom.planning.trace import collecting, note
from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, Grouping, ScaleLayout, ScaleRecipe
from warploom.target import Target

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
    # Rule 18's swapped decode tiles (the swapped problem's N is the tokens: 16 or 32), 64 or 128 rows of the
    # weight (`swap_rows`).
    (64, 16, 0.25),
    (128, 16, 0.25),
    (64, 32, 0.35),
    (128, 32, 0.35),
)
# Rule 13's recipes: measured on the H100 (MX's 32-deep promotions were not, and keep 128-row tiles).
_SMALL_M_RECIPES = (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128)
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
# A forced depth may go deeper, as far as shared memory holds (to measure deeper rings).
_FORCED_MAX_STAGES = 16
# Rule 17: four consumer warpgroups and the producer's: 4 x 128 x 112 + 128 x 24 = 60416 of the 65536 registers.
_TALL_CONSUMER_REGS = 112


def rows_aligned(spec: GemmSpec) -> bool:
    """Whether A's and B's rows (as stored, contiguous: K elements, or N for an N-major B) are whole 128-byte lines."""
    a_row = spec.k if spec.a_layout is ALayout.K_MAJOR else spec.m
    b_row = spec.k if spec.b_layout is BLayout.K_MAJOR else spec.n
    return a_row * spec.a_dtype.bits % 1024 == 0 and b_row * spec.b_dtype.bits % 1024 == 0


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
    return 2 if bn == 256 or (pingpong and bn == 128) or bm == 256 else 1


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



def _tall_problems(spec: GemmSpec, pingpong: bool, scale_partition: bool, split_k: int | None,
                   tail_split: int | None, consumer_partitions: int | None) -> list[str]:
    """Rule 17: why a 256-row tile cannot run `spec` with these options (empty: it can). Its four warpgroups have 112
    registers each: room for a 64x128 accumulator, not for a promoted partial beside it, nor measured with a fused
    epilogue, split-K units or ping-pong."""
    problems = []
    if spec.accumulation is not Accumulation.NATIVE:
        problems.append("promoted fp8 (a 64x128 partial beside the accumulator needs more than 112 registers)")
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
    if consumer_partitions not in (None, 4):
        problems.append(f"consumer_partitions={consumer_partitions} (a 256-row tile runs one partition per "
                        "warpgroup: 4)")
    return problems


def max_stages(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, bk: int, pingpong: bool = False,
               scale_partition: bool = False, scale_stages: int = 2, split_k: int = 1, prefetch: bool = True,
               cap: int | None = None, subtiles: int | None = None) -> int:
    """The most stages that fit in shared memory beside the epilogue (and the scale partition's ring), at most
    `cap`: by default 6, or 12 for a decode GEMM's 64x64 tiles (rule 16) and a swapped one's 64x16 and 64x32 (rule
    18, whose swapped problem has at most SWAP_MAX_M columns). `subtiles`: the epilogue's blocks a tile, when not
    `epilogue_subtiles`' (a 1x2 cluster's warpgroups store whole rows: 1)."""
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
    return min(cap, free // stage_bytes(spec, bm, bn, bk, scale_partition))


# Rule 24's forced cluster knob (`plan_schedule(cluster=...)`): its value -> CTAs per cluster; "1x2" puts them along
# N (ShareA), every other 2 along M (ShareB).
CLUSTER_KNOBS: dict[int | str | None, int | None] = {None: None, 1: 1, 2: 2, "2x1": 2, "1x2": 2}


QUANT_BN = 128  # rule 26: a fused 1x128 quantization's tile width, one scale group (256 would take rule 9's blocks)
ROWWISE_MAX_N = 256  # rule 27: the widest N a fused rowwise quantization holds in one tile (128x256's accumulator)


def rowwise_bn(n: int) -> int:
    """Rule 27: a fused rowwise quantization's tile width, the narrowest of 128 and 256 that holds all of N."""
    return QUANT_BN if n <= QUANT_BN else ROWWISE_MAX_N


def _row_operands(spec: GemmSpec) -> list[str]:
    """The epilogue operands that vary along N (per-column vectors, dense tiles): rule 27 keeps them at 128 wide."""
    assert spec.epilogue is not None
    return [s.name for s in spec.epilogue.operands if s.kind.varies_n]


def wide_row_problem(spec: GemmSpec) -> str | None:
    """Why rule 27's one 256-wide tile cannot hold a rowwise row of 128 < N <= 256, if it cannot: promoted fp8 (two
    accumulators) or operands that vary along N (they spill). `two_passes` sends such a row to rule 29."""
    assert spec.epilogue is not None
    if not QUANT_BN < spec.n <= ROWWISE_MAX_N:
        return None
    if spec.accumulation is Accumulation.PROMOTED:
        return ("promoted fp8 accumulation (a 256-wide tile promotes into two 128-column accumulators, which would "
                "cut the row's amax in two)")
    if _row_operands(spec):
        return (f"per-column or dense epilogue operands ({', '.join(_row_operands(spec))}) (at 256 wide every "
                "block's values of them stay live from its amax fold to its division, beside the whole accumulator, "
                "and spill 136-1296 bytes, ptxas)")
    return None


def two_passes(spec: GemmSpec) -> bool:
    """Rule 29 rather than rule 27: whether a fused rowwise quantization runs in two passes (planning/amax_pass.py).
    Every N > 256 does (no tile holds the row); so does 128 < N <= 256 where rule 27's 256-wide tile cannot run
    (`wide_row_problem`) and the graph stores the quantize pair alone, as rule 29's passes do (its fold and its
    division run in different kernels, on 128-wide tiles: `amax_pass_bn`). Any other graph stays rule 27's, which
    refuses it by name."""
    g = spec.epilogue
    if g is None or not g.rowwise():
        return False
    if spec.grouped:  # (rule 27's 256-wide tile is built for dense GEMMs: a grouped row past one tile takes rule 29)
        return spec.n > QUANT_BN and spec.grouping is not Grouping.K_OFFSETS
    return spec.n > ROWWISE_MAX_N or (wide_row_problem(spec) is not None and g.quantized_pair() is not None)


def quantized_problems(spec: GemmSpec, device: DeviceInfo, *, bn: int | None = None, pingpong: bool = False,
                       partial_blocks: int | None = None, split_k: int | None = None, tail_split: int | None = None,
                       swap_ab: bool | None = None, stream_k: int | None = None, cluster: int | str | None = None,
                       prefetch_operands: bool | None = None) -> list[str]:
    """Rules 26 and 27: why a spec whose fused epilogue quantizes (a `GroupAmax` in its graph) cannot be planned, if
    it cannot. Such a plan is sm_90a's cooperative tile, 128 wide for 1x128 (rule 26) and as wide as N for rowwise
    (rule 27: 128, or 256 where N > 128): each tile holds whole groups, so a group's amax is tile-local
    (LowerEpilogue folds the group's blocks before its scale and division), and none of the schedules that cut a
    tile's sum or columns otherwise (split-K, a tail, stream-K, swap-AB, clusters). Promoted fp8 (and so the
    blockwise recipes) promotes a 128-wide tile into one accumulator, which holds the group whole; a 256-wide one
    into two 128-column halves, which would cut a rowwise group in two. Rowwise with N > 256, or with 128 < N <= 256
    where rule 27's 256-wide tile cannot run (`wide_row_problem`), is rule 29's two passes (`two_passes`,
    `planning/amax_pass.py`): a graph storing the quantize pair alone, on the tile `amax_pass_bn` allows."""
    assert spec.epilogue is not None
    rowwise = spec.epilogue.rowwise()
    out = []
    if device.blackwell or device.gfx1250:
        out.append(f"the fused quantization is built for sm_90a, not {device.name}")
    if partial_blocks not in (None, 1):
        out.append(f"partial_blocks={partial_blocks}: promoted fp8 in 128-column blocks keeps a group in one "
                   "accumulator (the walk over a group's blocks stays in one)")
    if spec.grouped:
        out += grouped_quantize_problems(spec)
    if dense_operands(spec) and prefetch_operands:
        out.append("prefetch_operands=True: a dense operand's early copies follow the stores, which the walk over a "
                   "group puts after every block's load")
    two_pass = two_passes(spec)  # rule 29 (planning/amax_pass.py)
    want = rowwise_bn(spec.n) if rowwise else QUANT_BN
    widths = (AMAX_PASS_BNS if amax_pass_bn(spec) is None else (amax_pass_bn(spec),)) if two_pass else (want,)
    problem = amax_pass_problem(spec) if two_pass else None
    # (rule 29's fold and division run in different kernels: rule 27's limits on what stays live between them do
    # not apply to it; a wide row rule 27 cannot hold reaches here only where rule 29 cannot take it either)
    wide = wide_row_problem(spec) if rowwise and not two_pass else None
    if problem is not None:
        out.append(problem)
    elif wide is not None:
        fast = " or use_fast_accum=True" if spec.accumulation is Accumulation.PROMOTED else ""
        out.append(f"N={spec.n} with {wide}: expected N <= {QUANT_BN}{fast} for rule 27's one tile, or (for rule "
                   f"29's two passes, which take such rows on {AMAX_PASS_NARROW_BN}-wide tiles) a graph that stores "
                   f"the quantize pair alone: {amax_pass_outputs(spec)}")
    elif two_pass and bn is not None and bn not in widths:
        out.append(f"bn={bn}: rule 29's tile must be " + (" or ".join(map(str, widths)) + " wide" if len(widths) > 1
                                                          else f"{widths[0]} wide (promoted fp8, or a graph with "
                                                          "operands: amax_pass_bn)"))
    elif not two_pass and bn is not None and bn != want:
        why = f"the narrowest tile that holds N={spec.n})" if rowwise else "one scale group)"
        out.append(f"bn={bn}: the tile must be {want} wide ({why}")
    given = {"pingpong": pingpong or None, "split_k": None if split_k in (None, 1) else split_k,
             "tail_split": None if tail_split in (None, 1) else tail_split, "swap_ab": swap_ab or None,
             "stream_k": stream_k or None, "cluster": None if cluster in (None, 1) else cluster}
    out += [f"{k}={v}" for k, v in given.items() if v is not None]
    return out


def grouped_quantize_problems(spec: GemmSpec) -> list[str]:
    """Rule 26 on rule 22's grouped GEMMs: an M-grouped or masked (batched) GEMM quantizes 1x128 on its 128-wide
    tiles as a dense one does, each group's scales stored at the rows C's are (clipped at the group's last row), and
    rowwise where N <= 128 (rule 27's one 128-wide tile holds the row). A wider row takes rule 29's two passes
    (`two_passes`: the grouped kernel's tiles add their rows' amax, clipped at the group's end, then a cast kernel
    over the rows of some group), a graph storing the quantize pair alone (`amax_pass_problem`, in
    `quantized_problems`). The K-grouped layout's quantization is not built."""
    assert spec.epilogue is not None
    if spec.grouping is Grouping.K_OFFSETS:
        return ["a K-grouped GEMM (the fused quantization runs on the M-grouped and masked layouts)"]
    return []


def gate_up_problems(spec: GemmSpec, device: DeviceInfo, *, bn: int | None = None, pingpong: bool = False,
                     partial_blocks: int | None = None, split_k: int | None = None, tail_split: int | None = None,
                     swap_ab: bool | None = None, stream_k: int | None = None,
                     cluster: int | str | None = None) -> list[str]:
    """Rule 28: why a spec whose fused epilogue pairs interleaved gate/up halves (`EpilogueGraph.gate_up`) cannot
    be planned, if it cannot. Such a plan is sm_90a's cooperative tile BN = 2 * block wide (the interleave block,
    `warploom.interleave_gate_up`'s): each tile then holds one gate block and its up block, in one accumulator
    (a promoted 256-wide tile has two, which would put them apart), whole (no split-K, tail, stream-K, swap-AB,
    cluster or ping-pong: their tiles or sums are not a pair's)."""
    assert spec.epilogue is not None
    block = spec.epilogue.gate_up()
    assert block is not None
    out = []
    if device.blackwell or device.gfx1250:
        out.append(f"the gate/up epilogue is built for sm_90a, not {device.name}")
    if spec.grouped and spec.grouping is not Grouping.OFFSETS:
        out.append(f"a {spec.grouping.value} grouped GEMM (the one-GEMM gate/up form is built for the M-grouped "
                   "layout, offs over M, only)")
    if spec.n % (2 * block):
        out.append(f"N={spec.n}: expected a multiple of 2 * block = {2 * block} (whole gate/up pairs, as "
                   "interleave_gate_up writes them)")
    if 2 * block > QUANT_BN and spec.accumulation is Accumulation.PROMOTED:
        out.append(f"block={block} with promoted fp8 accumulation: a {2 * block}-wide tile promotes into two "
                   f"{QUANT_BN}-column accumulators, one gate and one up; use block=64 or use_fast_accum=True")
    if bn is not None and bn != 2 * block:
        out.append(f"bn={bn}: the tile must be 2 * block = {2 * block} wide (one gate block and its up block)")
    if partial_blocks not in (None, 1):
        out.append(f"partial_blocks={partial_blocks}: the pair's blocks must share one accumulator")
    given = {"pingpong": pingpong or None, "split_k": None if split_k in (None, 1) else split_k,
             "tail_split": None if tail_split in (None, 1) else tail_split, "swap_ab": swap_ab or None,
             "stream_k": stream_k or None, "cluster": None if cluster in (None, 1) else cluster}
    out += [f"{k}={v}" for k, v in given.items() if v is not None]
    return out


def plan(spec: GemmSpec, device: DeviceInfo, options: PlanOptions) -> Plan:
    """The sm_90a target's rule (its declaration's `plan`): rules 1-18 and 21-25 (and the refusal of an AMD GPU
    other than gfx1250), after `warploom.planner.plan_schedule` ran rules 26 and 22 and the options' own checks
    (a TDM warp choice is gfx1250's, refused there). Rule 18's swapped problem, rules 23 and 25's forced tiles and
    rule 22's dense plan come back here with options of their own.

    `options` stay as the caller forced them (the shortcuts and rule 30 ask whether anything was); `o` is what the
    phases before the candidate loop resolved them to."""
    _refuse_device(spec, device)
    # A forced 2-CTA cluster takes no swap, stream-K or split-K; a forced stream-K no swap and no early operand
    # copies: the shortcuts below see the options as these two phases left them.
    o = _cluster_options(spec, device, options)
    o = _stream_k_options(spec, o)
    # The shortcuts re-enter `plan` with options of their own; in this order rule 25's decode ranges win over rule
    # 18's swap, and the swap over rule 25's other split tiles and rule 23's.
    shortcut = _decode_split(spec, device, options, o)
    if shortcut is not None:
        return shortcut
    if o.swap_ab is None:
        o = replace(o, swap_ab=not o.pingpong and not _forces_tile(options) and swap_decode(spec))
    if o.swap_ab:
        return _plan_swapped(spec, device, o)
    shortcut = _latency_split(spec, device, options, o)
    if shortcut is None:
        shortcut = _latency_tiles(spec, device, options, o)
    if shortcut is not None:
        return shortcut
    bk = k_block(spec)
    scale_partition = _check_forced(spec, o, bk)
    best = _search(_Search.of(spec, device, o, bk, scale_partition))
    return _choose(spec, device, options, o, best)


def _forces_tile(options: PlanOptions) -> bool:
    """Whether the caller forced the tile, its depth, its partitions or blocks, the scale partition or split-K:
    the rules that pick a schedule of their own (18, 23, 25, 30) then stand aside."""
    return any(f is not None for f in (options.bm, options.bn, options.stages, options.consumer_partitions,
                                       options.partial_blocks, options.scale_partition, options.split_k,
                                       options.tail_split))


def _refuse_device(spec: GemmSpec, device: DeviceInfo) -> None:
    """What sm_90a cannot run at all: an AMD GPU other than gfx1250 (rule 20's), fp4 (no fp4 MMA) and MX scales in
    torch's blocked layout (sm_100a's)."""
    if device.arch.startswith("gfx") and not device.gfx1250:
        raise UnsupportedError(f"{device.name} ({device.arch}): among AMD GPUs warploom plans gfx1250 only (rule 20). "
                               "Fix: plan for device=GFX1250 to inspect its schedule, or run on an sm_90a GPU")
    if spec.is_fp4:
        raise UnsupportedError(f"{device.name} (sm_90a) has no fp4 MMA: MX fp4 and NVFP4 (e2m1) plan for sm_100a's "
                               f"block-scaled tcgen05 MMA only, got {spec.scale.value} scales. Fix: plan for an "
                               "sm_100a device (device=B200), or quantize to torch.float8_e4m3fn with MX scales for "
                               "sm_90a")
    if spec.scale_layout is ScaleLayout.BLOCKED:
        raise UnsupportedError(f"{device.name} (sm_90a) reads MX scales row-major, (M, K/32) and (N, K/32), element by "
                               "element; torch's blocked layout is sm_100a's (tcgen05.cp). Fix: pass the scales before "
                               "to_blocked, or plan for an sm_100a device (device=B200)")


def _cluster_options(spec: GemmSpec, device: DeviceInfo, o: PlanOptions) -> PlanOptions:
    """Rule 24's forced knob (`cluster=`): refuse a value outside `CLUSTER_KNOBS`, and a 2-CTA cluster that cannot
    run `spec` with the other options (`cluster_problems`, one SM, promoted fp8 in other than
    CLUSTER_PROMOTED_BLOCKS blocks). A cluster's tiles are whole: no swap, stream-K or split-K."""
    knob = o.cluster
    if isinstance(knob, bool) or knob not in CLUSTER_KNOBS:  # (True == 1 as a key: it planned one CTA per tile)
        raise UnsupportedError(f"cluster={knob!r}: expected None (rule 24 decides), 1 (one CTA per tile), 2 or "
                               "\"2x1\" (2-CTA clusters along M that multicast B) or \"1x2\" (along N, multicasting A)")
    if CLUSTER_KNOBS[knob] != 2:
        return o
    problems = cluster_problems(spec, o.pingpong, o.scale_partition, o.split_k, o.tail_split, o.stream_k, o.swap_ab,
                                o.bm, o.bn, o.consumer_partitions, knob == "1x2")
    if device.sm_count < 2:
        problems.append(f"{device.name} has {device.sm_count} SM (a 2-CTA cluster runs on two)")
    if problems:
        raise UnsupportedError(f"cluster={knob!r} (rule 24) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop cluster (or the option that conflicts with it)")
    if spec.accumulation is Accumulation.PROMOTED and o.partial_blocks not in (None, CLUSTER_PROMOTED_BLOCKS):
        # (cluster_plan promotes each warpgroup's 128 columns in 64-column blocks: 128-column ones would not fit)
        raise UnsupportedError(f"cluster={knob!r} (rule 24) with partial_blocks={o.partial_blocks}: expected "
                               f"{CLUSTER_PROMOTED_BLOCKS} (promoted fp8 in a cluster promotes each warpgroup's "
                               "128 columns in two 64-column blocks). Fix: drop partial_blocks (or pass "
                               f"{CLUSTER_PROMOTED_BLOCKS}), or drop cluster")
    return replace(o, swap_ab=False, stream_k=0, split_k=1, tail_split=1)


def _stream_k_options(spec: GemmSpec, o: PlanOptions) -> PlanOptions:
    """Rule 21's refusals of a forced `stream_k` (`refuse_stream_k`). A stream-K plan is never swapped."""
    if not o.stream_k:
        return o
    problems = stream_k_problems(spec, o.pingpong, o.scale_partition, o.split_k, o.tail_split, o.swap_ab, o.bm,
                                 o.prefetch_operands)
    refuse_stream_k(spec, o.stream_k, problems)
    # (a forced stream-K plan copies dense operands when its epilogue runs)
    return replace(o, prefetch_operands=False, swap_ab=False)


def _chooses_freely(options: PlanOptions, o: PlanOptions) -> bool:
    """Whether nothing that rule 25's forced tiles would override was forced: no tile, depth, split,
    stream-K, ping-pong, early operand copies or hoisted rows."""
    return (o.stream_k is None and o.split_k is None and o.tail_split is None and not o.pingpong
            and not _forces_tile(options) and o.prefetch_operands is None and o.hoist_rows is None)


def _decode_split(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 25 at decode sizes (`decode_split`): 64x64 tiles with K split in ranges, where nothing is forced (nor
    rule 18's swap: it stands aside only where the caller left swap_ab to the rules)."""
    if o.swap_ab is not None or not _chooses_freely(options, o):
        return None
    ranges = decode_split(spec, device)
    if ranges <= 1:
        return None
    with collecting(None):  # (the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=64, bn=64, group_m=o.group_m, scalar_columns=o.scalar_columns,
                                              split_k=ranges, tail_split=1, swap_ab=False, stream_k=0))


def _plan_swapped(spec: GemmSpec, device: DeviceInfo, o: PlanOptions) -> Plan:
    """Rule 18: C^T = B^T A^T, planned as its own problem (`GemmSpec.swapped`) on tiles of `swap_rows` rows of N by
    `swap_tokens` of M (or the forced bm and bn), refused with ping-pong, split-K or the scale partition."""
    problems = spec.swap_problems()
    problems += ["ping-pong"] if o.pingpong else []
    problems += ["split-K"] if o.split_k not in (None, 1) or o.tail_split not in (None, 1) else []
    problems += ["the scale partition"] if o.scale_partition else []
    if problems:
        raise UnsupportedError(f"swap_ab=True (rule 18) cannot run {spec.short()}: {'; '.join(problems)}; "
                               "drop swap_ab")
    tokens = o.bn or swap_tokens(spec.m)
    rows = o.bm or swap_rows(spec.n, device.sm_count)
    try:
        swapped = plan(spec.swapped(), device, PlanOptions(
            bm=rows, bn=tokens, stages=o.stages, group_m=o.group_m, consumer_partitions=o.consumer_partitions,
            partial_blocks=o.partial_blocks, hoist_rows=o.hoist_rows, scalar_columns=o.scalar_columns,
            prefetch_operands=o.prefetch_operands, split_k=1, tail_split=1, swap_ab=False, stream_k=0))
    except UnsupportedError as e:
        raise UnsupportedError(f"swap_ab=True (rule 18) for {spec.short()}: its tiles of C^T are {rows} rows of N "
                               f"by {tokens} of M, and the swapped problem has no such plan: {e}") from None
    return replace(swapped, swap_ab=True)


def _latency_split(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 25 (`latency_split`): square tiles with K split in ranges, where nothing is forced."""
    if not _chooses_freely(options, o):
        return None
    split = latency_split(spec, device)
    if split.ranges <= 1:
        return None
    with collecting(None):  # (as below: the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=split.size, bn=split.size, group_m=o.group_m,
                                              scalar_columns=o.scalar_columns, split_k=split.ranges,
                                              tail_split=1, swap_ab=False, stream_k=0))


def _latency_tiles(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions) -> Plan | None:
    """Rule 23 (`latency_tiles`): whole 64x64 tiles in `latency_stages`' ring, where no tile, depth, stream-K,
    ping-pong or operand choice is forced."""
    if (o.stream_k is not None or o.pingpong or _forces_tile(options) or o.prefetch_operands is not None
            or o.hoist_rows is not None or not latency_tiles(spec, device)):
        return None
    with collecting(None):  # (the forced call's own candidates are not this rule's)
        return plan(spec, device, PlanOptions(bm=64, bn=64, stages=latency_stages(spec), group_m=o.group_m,
                                              scalar_columns=o.scalar_columns, split_k=1, tail_split=1,
                                              swap_ab=False, stream_k=0))


def _check_forced(spec: GemmSpec, o: PlanOptions, bk: int) -> bool:
    """The forced options' own limits, each refused with what to pass instead: split-K and its tail
    (`_check_split_k`), consumer partitions, rule 17's 256-row tile (`_tall_problems`), partial blocks, ping-pong,
    and rule 12's scale partition, which this returns resolved (None: on for MX scales only)."""
    split_k, tail_split, consumer_partitions, bm = o.split_k, o.tail_split, o.consumer_partitions, o.bm
    if split_k is not None:
        _check_split_k(spec, split_k, bk, o.pingpong, o.scale_partition)
    if tail_split is not None and tail_split != 1:
        if split_k not in (None, 1):
            raise UnsupportedError(f"tail_split={tail_split} with split_k={split_k}: a split-K tail follows whole "
                                   "tiles, and split-K splits them all; pass one of the two")
        _check_split_k(spec, tail_split, bk, o.pingpong, o.scale_partition, what="tail_split")
    if consumer_partitions not in (None, 1, 2, 4):
        raise UnsupportedError(f"consumer_partitions={consumer_partitions!r}: expected 1 (one partition for all "
                               "consumer warpgroups), 2 (one per warpgroup) or 4 (bm=256's four warpgroups); pass "
                               "1, 2 or 4, or None to let the planner choose")
    if consumer_partitions == 4 and bm != 256:
        raise UnsupportedError("consumer_partitions=4 is for bm=256 (four consumer warpgroups); pass bm=256, or "
                               "1 or 2 partitions")
    if bm == 256:
        tall = _tall_problems(spec, o.pingpong, bool(o.scale_partition), split_k, tail_split, consumer_partitions)
        if tall:
            raise UnsupportedError(f"bm=256 (rule 17's tile, four consumer warpgroups) does not support "
                                   f"{'; '.join(tall)} for {spec.short()}; use bm=128")
    if consumer_partitions == 2 and bm == 64:
        raise UnsupportedError("consumer_partitions=2 needs two consumer warpgroups, but bm=64 has one; "
                               "use bm=128 or consumer_partitions=1")
    if o.partial_blocks not in (None, 1, 2, 4):
        raise UnsupportedError(f"partial_blocks={o.partial_blocks!r}: expected 1 (promote the whole tile width), "
                               "2 (two column halves) or 4 (quarters, forced only: measured 9-16% slower than 2 at "
                               "128x256, session 19); pass 1, 2 or 4, or None to let the planner choose")
    if o.pingpong and consumer_partitions == 1:
        raise UnsupportedError("pingpong=True needs two consumer partitions (one warpgroup each), but "
                               "consumer_partitions=1; pass consumer_partitions=2 or None")
    scale_partition = o.scale_partition
    if scale_partition is None:
        # Rule 12: MX scales are single bytes, which cp.async (4, 8 or 16 bytes a copy) cannot move one by one:
        # the scale partition loads them with ordinary loads and decodes them on the way.
        scale_partition = spec.scale is ScaleRecipe.MX
    if spec.scale is ScaleRecipe.MX and not scale_partition:
        raise UnsupportedError("MX scales need the scale partition (cp.async cannot copy single bytes); drop "
                               "scale_partition=False")
    if scale_partition and not spec.scale.is_blockwise:
        raise UnsupportedError(f"scale_partition=True needs blockwise scales, but {spec.short()} has "
                               f"{spec.scale.value} ones; drop scale_partition")
    if scale_partition and o.pingpong:
        raise UnsupportedError("the scale partition (scale_partition=True, and always for MX scales) with "
                               "pingpong=True is not built yet: a ping-pong consumer would have to skip the other's "
                               "scale stages too; use one of the two")
    return scale_partition


@dataclass(frozen=True)
class _Search:
    """What every candidate tile of one `plan` call shares.

    Attributes:
        spec, device: the problem and the GPU.
        o: the options as the phases before the loop resolved them (its `cluster` is the knob as passed, its
            `scale_partition` as forced).
        scale_partition: rule 12's scale partition, resolved (`_check_forced`).
        cluster, along_n: rule 24's knob as CTAs per cluster (`CLUSTER_KNOBS`; None: rule 24 decides) and whether
            they lie along N ("1x2").
        bk: the k-block.
        small_blockwise, decode, aligned: rule 13's small-M blockwise case, rule 16's decode case, `rows_aligned`.
        cap: the ring's depth limit for `max_stages` (None: its own, rule 16's for decode).
    """

    spec: GemmSpec
    device: DeviceInfo
    o: PlanOptions
    cluster: int | None
    along_n: bool
    bk: int
    scale_partition: bool
    small_blockwise: bool
    decode: bool
    aligned: bool
    cap: int | None

    @staticmethod
    def of(spec: GemmSpec, device: DeviceInfo, o: PlanOptions, bk: int, scale_partition: bool) -> _Search:
        """The shared context of `plan`'s candidates, once `_check_forced` has resolved the scale partition."""
        return _Search(
            spec, device, o, CLUSTER_KNOBS[o.cluster], o.cluster == "1x2", bk, scale_partition,
            # Rule 13, as measured: the plain cooperative kernel with its scales in the A/B stages.
            small_blockwise=(spec.scale in _SMALL_M_RECIPES and spec.m <= 128 and not o.pingpong
                             and not scale_partition),
            decode=is_decode(spec, o.pingpong), aligned=rows_aligned(spec),
            cap=_FORCED_MAX_STAGES if o.stages is not None else None)  # (None: max_stages's own, rule 16's for decode)


@dataclass(frozen=True)
class _Tile:
    """A candidate tile that `_tile` let through.

    Attributes:
        bm, bn: its shape. eff: `tile_efficiency`. partial_blocks: promoted fp8's column blocks (1 if native).
        wide: rule 9's wide fused epilogue (`fused_wide`). early: dense operands copied early (rule 9).
    """

    bm: int
    bn: int
    eff: float
    partial_blocks: int
    wide: bool
    early: bool


_Best = tuple[float, int, Plan]


def _search(s: _Search) -> _Best | None:
    """Steps 3 and 4 over `TILES`: each tile the filter lets through, at its depth and split (rules 14-16), with
    rule 15's tail or rule 21's stream-K where they score better, then rule 24's cluster of it; the best (score,
    -area, plan) found, ties going to the larger tile."""
    best: _Best | None = None
    for cbm, cbn, _ in TILES:
        tile = _tile(s, cbm, cbn)
        if tile is None:
            continue
        scored = _scored_plan(s, tile)
        if scored is None:
            continue
        score, candidate = scored
        key = (score, -cbm * cbn, candidate)
        if s.cluster == 2:
            key = (math.inf, 0, candidate)  # (forced: only rule 24's candidate below may win)
        if best is None or key[:2] < best[:2]:
            best = key
        best = _cluster_step(s, tile, candidate, best)
    return best


def _tile(s: _Search, cbm: int, cbn: int) -> _Tile | None:
    """The tile filter: None where `cbm` x `cbn` is not forced and no rule lets the planner choose it (rules 9, 12,
    13, 16, 17 and 18's tiles), or where its registers cannot hold it (ping-pong, promoted fp8)."""
    spec, o = s.spec, s.o
    bm, bn, pingpong = o.bm, o.bn, o.pingpong
    if (bm is not None and cbm != bm) or (bn is not None and cbn != bn):
        return None
    eff = tile_efficiency(spec, cbm, cbn)
    if cbm == 256 and bm is None and (not long_k_16bit(spec) or _tall_problems(
            spec, pingpong, bool(s.scale_partition), o.split_k, o.tail_split, o.consumer_partitions)):
        return None  # rule 17: otherwise forced (or tuned) only
    if pingpong and not _pingpong_fits(spec, cbm, cbn, o.partial_blocks):
        return None
    if cbn == 64 and bn is None and not (s.small_blockwise or s.decode):
        return None  # forced only: see TILES
    if cbn in SWAP_TOKENS and bn is None:
        return None  # rule 18: the swapped decode tile, forced (or by rule 18) only
    if bm is None and cbm == 64 and spec.m > 64 and not s.small_blockwise:
        return None  # a 64-row tile only pays when M itself is small
    if cbm == 64 and o.consumer_partitions == 2 and not pingpong:
        return None  # one warpgroup cannot be split in two row blocks
    promoted = spec.accumulation is Accumulation.PROMOTED
    # Promoted fp8 at 256 wide promotes in two column blocks: a 64x256 accumulator and a 64x256 partial
    # per warpgroup would need 256 registers per thread, a 64x128 partial leaves room (192).
    # Likewise a ping-pong warpgroup's whole 128x128 (64x256) accumulator.
    wide = cbn == 256 or (pingpong and cbm * cbn >= 128 * 128)
    blocks = (o.partial_blocks or (2 if wide else 1)) if promoted else 1
    if promoted and cbn == 256 and blocks == 1:
        return None  # acc + whole-width partial: 256 registers per thread
    if bn is None and cbn == 256 and spec.scale is ScaleRecipe.MX:
        return None  # rule 12: MX at 256 wide spills 248-440 bytes whatever the budgets (ptxas, 2026-11-23)
    wide = fused_wide(spec, cbn, pingpong)
    # Rule 9 copies a dense operand's blocks early, through two buffers each (forced off: one, as at 128 wide).
    early = (wide and bool(dense_operands(spec))) if o.prefetch_operands is None else o.prefetch_operands
    if bn is None and cbn == 256 and spec.epilogue is not None and not wide:
        return None  # rule 9: promoted fp8 and ping-pong keep fused epilogues 128 wide
    if (bn is None and promoted and cbn == 256 and spec.bias_dtype
            and spec.out_dtype.bytes == 4 and not (spec.scale is ScaleRecipe.TENSORWISE
                                                   and spec.bias_dtype.bytes == 4)):
        return None  # fp32 output + bias on the promoted 256-wide tile spills 8-40 bytes (ptxas, 2026-11-22)
    return _Tile(cbm, cbn, eff, blocks, wide, early)


def _depth(s: _Search, t: _Tile) -> tuple[int, int] | None:
    """(split-K ranges, stages) of tile `t`: rule 14's split unless forced (a forced tail splits no tile), and the
    deepest ring that fits beside its staging (rule 16's for decode); None where a forced depth does not fit or a
    chosen one is not double buffered, or rule 9's wide epilogue gets under 3 stages."""
    spec, o = s.spec, s.o
    stages, split_k = o.stages, o.split_k
    ks = split_k if split_k is not None else _rule14_split(spec, s.device, t.bm, t.bn, o.pingpong, s.scale_partition)
    if o.tail_split is not None and o.tail_split > 1:
        ks = 1  # a forced tail follows whole tiles: rule 14 does not split them
    fit = max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, split_k=ks, prefetch=t.early,
                     cap=s.cap)
    if split_k is None and ks > 1 and stages is not None and stages > fit:
        ks = 1  # a forced depth that only fits beside the output's staging tile, not the fp32 partials'
        fit = max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, prefetch=t.early,
                         cap=s.cap)
    promoted = spec.accumulation is Accumulation.PROMOTED
    # Promoted fp8 measured 1-3% faster at 3 stages than at 4 (docs/benchmarks.md, sweeps of 2026-11-22).
    depth = (min(fit, 3) if promoted and t.bn == 256 else fit) if stages is None else stages
    if depth < 1 or depth > fit or (stages is None and depth < 2):
        return None  # a forced depth must still fit; chosen depths are at least double buffered
    if t.wide and o.bn is None and stages is None and depth < 3:
        return None  # rule 9: the slotted wide epilogue was measured at 3-4 stages; with many outputs, 128 wide
    return ks, depth


def _tail(s: _Search, t: _Tile, ks: int, depth: int) -> tuple[int, int] | None:
    """Rule 15's split-K tail of tile `t`'s last wave (forced, or `rule15_tail`'s where the tiles are whole):
    (its k-ranges, its stages); (1, 0) for none. None where a forced tail's fp32 staging leaves no stage."""
    spec, o = s.spec, s.o
    ts, tail_s = 1, 0
    if ks == 1 and o.tail_split is None and (s.decode and (t.bm, t.bn) == (64, 64) or t.bm == 256):
        ts = 1  # rules 16 and 17's tiles take no split-K tail: unmeasured there (rule 15's cost is 128x256's)
    elif ks == 1:
        ts = o.tail_split if o.tail_split is not None else rule15_tail(spec, s.device, t.bm, t.bn, s.bk, o.pingpong,
                                                                       s.scale_partition, t.eff)
    if ts > 1:
        tail_s = min(depth, max_stages(spec, s.device, t.bm, t.bn, s.bk, o.pingpong, s.scale_partition, split_k=ts))
        if tail_s < 2 and o.tail_split is None:
            ts = 1  # the tail's fp32 staging leaves no double-buffered ring
        elif tail_s < 1:
            return None
    return ts, tail_s


def _scored_plan(s: _Search, t: _Tile) -> tuple[float, Plan] | None:
    """Tile `t`'s plan and score (step 4: rounds of work units times the tile's cost per FLOP), at `_depth`'s split
    and ring, with `_tail`'s split-K tail, or rule 21's stream-K (`_stream_k_step`) where it scores better; each
    noted for `explain`. None where `_depth` or `_tail` refuse it."""
    spec, device = s.spec, s.device
    depth = _depth(s, t)
    if depth is None:
        return None
    ks, stages = depth
    tail = _tail(s, t, ks, stages)
    if tail is None:
        return None
    ts, tail_s = tail
    tiles = max(1, math.ceil(spec.m / t.bm) * math.ceil(spec.n / t.bn)) * ks  # work units
    # A unit of a split tile does 1/ks of its work (the reduction's cost is rule 14's thresholds).
    score = math.ceil(tiles / device.sm_count) * t.bm * t.bn / t.eff / ks
    grid = min(device.sm_count, tiles)
    if ts > 1:
        score = tail_score(tiles, grid, ts, t.bm * t.bn / t.eff, math.ceil(spec.k / s.bk))
    note(f"{t.bm}x{t.bn}", "split-K tail" if ts > 1 else "split-K" if ks > 1 else "whole tiles", score,
         f"{tiles} units, {math.ceil(tiles / device.sm_count)} round(s) of {device.sm_count} CTAs"
         + (f", the last wave's {tiles % device.sm_count} tiles in {ts} k-ranges" if ts > 1 else ""))
    sk = 0
    if ks == 1:
        stream = _stream_k_step(s, t, tiles, score)
        if stream is not None:
            sk, score, grid = stream
            ts, tail_s = 1, 0
    return score, _tile_plan(s, t, stages, ks, ts, tail_s, sk, grid)


def _stream_k_step(s: _Search, t: _Tile, tiles: int, score: float) -> tuple[int, float, int] | None:
    """Rule 21: the last, partial wave of whole tiles shared as k-block pieces, forced (`stream_k`) or where it
    scores better than `score`: (pieces, score, grid), or None for whole tiles."""
    spec, device, o = s.spec, s.device, s.o
    stream_k = o.stream_k
    # (the planner's own choice: native accumulation only; promoted fp8's two column-block accumulators ran its
    # fixup 40% slower at 6320x6848x5648, session 22, so it is forced only)
    if not ((stream_k or stream_k is None and spec.accumulation is Accumulation.NATIVE)
            and tiles % device.sm_count and not stream_k_problems(
            spec, o.pingpong, s.scale_partition, o.split_k, o.tail_split, False, t.bm, t.early)):
        return None
    k_tiles = math.ceil(spec.k / s.bk)
    best: tuple[int, float, int] | None = None
    # (chosen by the planner only where every shared tile gets exactly `pieces` pieces: pieces that start
    # at other k-blocks than whole pieces of their neighbours lost up to 30% in L2, session 22; and never
    # more pieces than k-blocks, which would leave a CTA nothing to add to its tile)
    for pieces in (stream_k,) if stream_k else (p for p in SK_PIECES if tiles % device.sm_count * p
                                                <= device.sm_count and p <= k_tiles):
        sk_score = stream_k_score(tiles, k_tiles, device.sm_count, pieces, t.bm * t.bn / t.eff)
        note(f"{t.bm}x{t.bn}", f"stream-K, {pieces} pieces", sk_score,
             f"{tiles // device.sm_count} whole wave(s), then {tiles % device.sm_count} tiles over "
             f"{min(device.sm_count, tiles % device.sm_count * pieces)} CTAs")
        if stream_k or sk_score < score:
            score = sk_score
            best = pieces, sk_score, stream_k_grid(tiles, device.sm_count, pieces)
    return best


def _tile_plan(s: _Search, t: _Tile, stages: int, ks: int, ts: int, tail_s: int, sk: int, grid: int) -> Plan:
    """The one-CTA plan of tile `t` at this depth and split: rule 9's partitions, hoisting and slots for a fused
    epilogue, rule 10's block epilogue, rule 12's MX register budgets, rule 17's four warpgroups."""
    spec, o = s.spec, s.o
    pingpong = o.pingpong
    block = block_epilogue(spec, t.bn, pingpong)
    # Rule 9: fused epilogues run their consumer warpgroups as one partition (its code once, not twice);
    # the wide one loads vectors a block ahead instead of hoisting all 8 blocks' (which would spill).
    # (Promoted fp8 keeps two: its promotions in the k-loop need each warpgroup to release slots on its own,
    # measured 10% for plain promoted kernels; fused ones at one partition are unmeasured.)
    fused_parts = 1 if spec.epilogue is not None and spec.accumulation is Accumulation.NATIVE else 2
    # hoist_rows None: hoisted row vectors of every column block stay live beside a ping-pong warpgroup's whole
    # accumulator and spill (200 bytes at 128x128 in quarters; its epilogue overlaps the other's mainloop anyway),
    # and beside the wide fused epilogue's 8 blocks (rule 9, which loads each block's one block ahead instead).
    hoist = o.hoist_rows if o.hoist_rows is not None else not (pingpong or t.wide)
    # Rule 27's 256-wide rowwise walk loads each block right before its fold, every fold before any division:
    # loads a block ahead (which go before the previous block's division) would follow their block's fold.
    # (rule 29's first pass walks nothing: each block folds and stores in turn, so its loads may go ahead)
    walks = spec.epilogue is not None and spec.epilogue.reads_amax()
    return Plan(
        bm=t.bm, bn=t.bn, bk=s.bk, stages=stages, consumer_warps=8 if pingpong else 4 * (t.bm // 64),
        group_m=o.group_m, grid=grid,
        epilogue_subtiles=epilogue_subtiles(t.bn, pingpong, spec.epilogue is not None, t.bm, block, t.wide),
        block_epilogue=block,
        consumer_partitions=(2 if pingpong else 1 if t.bm == 64 else 4 if t.bm == 256
                             else (o.consumer_partitions or fused_parts)),
        partial_blocks=t.partial_blocks, hoist_rows=hoist, scalar_columns=o.scalar_columns,
        prefetch_operands=t.early, pingpong=pingpong, scale_partition=s.scale_partition, split_k=ks,
        tail_split=ts, tail_stages=tail_s,
        staging_slots=FUSED_WIDE_SLOTS if t.wide else 1,
        operand_slots=FUSED_WIDE_SLOTS if t.wide and t.early and dense_operands(spec) else 1,
        load_ahead=t.wide and not hoist and not walks, swap_ab=False, target=Target.SM90A, tdm_fused=False,
        stream_k=sk,
        block_scaled=False, promote_tmem=False, cluster_n=False, amax_pass=False,
        **_mx_registers(spec, t.bm, pingpong),
        **({"consumer_regs": _TALL_CONSUMER_REGS} if t.bm == 256 else {}),
    )


def _cluster_step(s: _Search, t: _Tile, candidate: Plan, best: _Best) -> _Best:
    """Rule 24: the 2-CTA cluster of a whole-tile 128x256 candidate (128x128 ping-pong, forced only), which
    replaces `best` where it is forced or where nothing passes it over (`explain` notes why it is). Refuses a
    forced 1x2 cluster whose whole-row staging leaves too few stages."""
    spec, device, o = s.spec, s.device, s.o
    pingpong, cluster, along_n = o.pingpong, s.cluster, s.along_n
    cbm, cbn = t.bm, t.bn
    if not ((cbm, cbn) == ((128, 128) if pingpong else (128, 256)) and cluster != 1 and candidate.split_k == 1
            and candidate.tail_split == 1 and (
                cluster == 2 or not pingpong and device.sm_count >= 2 and not (  # (a cluster needs two SMs)
                    s.aligned or cluster_problems(spec, pingpong, s.scale_partition, o.split_k, o.tail_split,
                                                  o.stream_k, o.swap_ab, o.bm, o.bn, o.consumer_partitions)))):
        return best
    # (ping-pong clusters are forced only: unmeasured, issue 24; `pingpong` is itself forced)
    # (1x2: its warpgroups store whole 64x256 blocks, twice the staging of the row split's halves)
    whole_rows = max_stages(spec, device, cbm, cbn, s.bk, cap=s.cap, subtiles=1)
    # (a partial wave's gain: at a long K, on cluster tiles that pad M little)
    long_k, pad = long_k_16bit(spec), cluster_row_pad(spec)
    partial = long_k and pad <= CLUSTER_PARTIAL_MAX_PAD
    cl_plan, cl_score, cl_tiles = cluster_plan(candidate, spec, device, t.eff, s.aligned, along_n, whole_rows,
                                               partial)
    # (why rule 24 passes it over unforced: `explain` says so beside its score)
    kblocks, floor = cta_kblocks(spec, cl_tiles, device), cluster_min_kblocks(spec)
    passed_over = [why for why, holds in (
        (f"under a whole wave of {device.sm_count // 2} clusters"
         + (f" (a long K, but 256-row tiles pad M by {pad:.0%}, over {CLUSTER_PARTIAL_MAX_PAD:.0%})" if long_k
            else ""), cl_tiles < device.sm_count // 2 and not partial),
        (f"not {100 - round(100 * CLUSTER_MARGIN)}% ahead of the best", cl_score >= CLUSTER_MARGIN * best[0]),
        (f"{kblocks:.0f} k-blocks a CTA, under the floor of {floor}", kblocks < floor),
        ("forced only for promoted or blockwise fp8 and fused epilogues (not measured)",
         not cluster_measured(spec))) if holds]
    note(f"{cbm}x{cbn}", "2-CTA clusters" + (" along N" if along_n else " of ping-pong consumers" if pingpong
                                             else ""), cl_score,
         f"{cl_tiles} cluster tiles of {'128x512' if along_n else f'{2 * cbm}x{cbn}'}, "
         f"{math.ceil(cl_tiles / (device.sm_count // 2))} round(s) of {device.sm_count // 2} clusters, "
         f"{'A' if along_n else 'B'} multicast" + ("" if s.aligned else ", rows unaligned")
         + (f", a long K: the partial wave gains too (M padded {pad:.1%})"
            if partial and cl_tiles < device.sm_count // 2 else "")
         + (f"; not taken: {'; '.join(passed_over)}" if passed_over and cluster != 2 else ""))
    if along_n and (whole_rows < 1 or o.stages is not None and o.stages > whole_rows):
        raise UnsupportedError(f"cluster={o.cluster!r} (rule 24) with stages={o.stages}: expected at most "
                               f"{whole_rows} stages of {spec.short()} beside a 1x2 cluster's whole-row "
                               f"staging on {device.name}. Fix: pass stages <= {whole_rows}, or use "
                               "cluster=2 (2x1)")
    if cluster == 2 or not passed_over:
        return cl_score, -cbm * cbn, cl_plan
    return best


def _choose(spec: GemmSpec, device: DeviceInfo, options: PlanOptions, o: PlanOptions, best: _Best | None) -> Plan:
    """The search's winner, refused where a forced cluster found no cluster plan or no tile fit at all (with a hint
    for ping-pong and promoted fp8's whole-width partial); rule 30's ping-pong 128x128 where nothing is forced and
    `short_k_pingpong` prefers it."""
    pingpong, stages, bn, partial_blocks = o.pingpong, o.stages, o.bn, o.partial_blocks
    if CLUSTER_KNOBS[o.cluster] == 2 and (best is None or best[2].cluster != 2):
        raise UnsupportedError(f"cluster={o.cluster!r} (rule 24): no "
                               f"{'128x128 ping-pong' if pingpong else '128x256'} plan fits {spec.short()} with "
                               f"stages={stages!r} on {device.name}. Fix: drop cluster or stages")
    if best is None:
        hint = ""
        if pingpong:
            hint = (": a ping-pong warpgroup holds a whole BM x BN fp32 accumulator, at most 128x128 (64x256), "
                    "plus a promoted fp8 partial of at most half that")
        if spec.accumulation is Accumulation.PROMOTED and bn == 256 and partial_blocks == 1:
            hint = ": promoted fp8 at bn=256 needs partial_blocks=2 (a whole-width partial exceeds the registers)"
        raise UnsupportedError(f"no tile shape fits {spec.short()} with bm={o.bm!r} bn={bn!r} stages={stages!r} "
                               f"partial_blocks={partial_blocks!r} on {device.name}{hint}")
    if (not pingpong and not _forces_tile(options) and o.stream_k is None and o.cluster is None
            and o.prefetch_operands is None and o.hoist_rows is None and short_k_pingpong(spec, best[2], device)):
        with collecting(None):  # (the forced call's own candidates are not this rule's)
            pp = plan(spec, device, PlanOptions(pingpong=True, group_m=o.group_m, scalar_columns=o.scalar_columns))
        note("128x128", "ping-pong (rule 30)", best[0],
             f"{k_blocks(spec)} k-blocks a tile: one warpgroup's epilogue runs beside the other's mainloop")
        return pp
    return best[2]


# Rule 30 (docs/decisions/rule-30-short-k-pingpong.md): fp8 rowwise with fast accumulation over a short K runs
# ping-pong consumers on 128x128 tiles. At PINGPONG_MAX_KBLOCKS k-blocks or fewer a cooperative 128x256 tile's
# epilogue is a large part of its time and stalls both warpgroups; ping-pong runs one warpgroup's epilogue beside the
# other's mainloop (H100, Triton 3.9, session 28: +0.5-10% at five such shapes, -2.5% at 17 k-blocks). Under Triton 3.6
# the same kernel ran 9% slower than the cooperative one at 4096x7168x2048 (session 10), so the rule needs
# PINGPONG_MIN_TRITON, the version it was measured under (3.7 and 3.8 were not).
PINGPONG_MAX_KBLOCKS = 16
PINGPONG_MIN_TRITON = (3, 9)


def short_k_pingpong(spec: GemmSpec, chosen: Plan, device: DeviceInfo) -> bool:
    """Rule 30: whether the planner's cooperative plan `chosen` gives way to ping-pong 128x128. e4m3 rowwise into
    bf16, fast accumulation, no bias or fused epilogue, not grouped (what was measured); rows that are whole 128-byte
    lines (`rows_aligned`: on unaligned rows 128x128 pays for partial lines, and ping-pong ran 20-35% slower than rule
    24's clusters at four such shapes); `chosen` 128x256 whole tiles in one CTA; at most PINGPONG_MAX_KBLOCKS
    k-blocks; at least a wave of 128x128 tiles; the installed Triton at least PINGPONG_MIN_TRITON."""
    from warploom.backends import gluon_api

    return (gluon_api.current().triton >= PINGPONG_MIN_TRITON
            and spec.a_dtype is DType.E4M3 and spec.b_dtype is DType.E4M3 and spec.out_dtype is DType.BF16
            and spec.scale is ScaleRecipe.ROWWISE
            and spec.accumulation is Accumulation.NATIVE
            and spec.bias_dtype is None and spec.epilogue is None and not spec.grouped and rows_aligned(spec)
            and (chosen.bm, chosen.bn) == (128, 256) and chosen.cluster == 1 and not chosen.stream_k
            and chosen.split_k == 1 and chosen.tail_split == 1 and not chosen.swap_ab
            and k_blocks(spec) <= PINGPONG_MAX_KBLOCKS
            and math.ceil(spec.m / 128) * math.ceil(spec.n / 128) >= device.sm_count)


def grouped_tile(rows_per_group: float) -> tuple[int, int]:
    """Rule 22's tile for a grouped GEMM with this many rows per group on average (the planner cannot see the
    routing: it changes every call, and reading it would sync the host). A group's last tile is partly empty, so
    the tile grows with the rows: 128x256 from 256 rows (at most half a 128-row tile is lost per group, and the
    wide tile reads A once per 256 columns), 64x128 for decode-sized groups of at most 64 rows (a 128-row tile
    would compute at least half zeros), 128x128 in between. Not yet measured against each other on the H100."""
    if rows_per_group >= 256:
        return 128, 256
    if rows_per_group <= 64:
        return 64, 128
    return 128, 128


# Rule 22's last round (H100, Triton 3.9, session 29, bf16 over ragged routings): stream-K's k-block pieces beat whole
# tiles where the expected last round is under half full (8 experts x 8192 rows, N=4096 K=7168, a quarter full:
# 0.761 ms against 0.817 in 4 pieces; N=7168 K=2048, 0.42 full: 0.398 against 0.412 in 2) and lost where it is
# three quarters full (32 experts x 16384 rows, N=2048 K=7168: 0.925 against 0.863). Four pieces paid off at 112
# k-blocks and lost at 32, where two did.
GROUPED_SK_MAX_FILL = 0.5
GROUPED_SK4_MIN_KBLOCKS = 64


def expected_grouped_tiles(spec: GemmSpec, bm: int, bn: int) -> float:
    """An M-grouped GEMM's expected tile count on `bm` x `bn` tiles: the rows' own tiles plus half a tile a group
    for each group's ragged last one (the planner cannot see the routing; a uniform remainder wastes half a tile)."""
    return (math.ceil(spec.m / bm) + spec.groups / 2) * math.ceil(spec.n / bn)


def last_round_stream_k(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int) -> int:
    """Rule 22's default stream-K pieces for an M-grouped bf16/fp16 GEMM (0: whole tiles): where the expected last
    round of tiles (`expected_grouped_tiles`) fills under GROUPED_SK_MAX_FILL of the SMs after at least one full
    round, its tiles are shared in 4 pieces (at least GROUPED_SK4_MIN_KBLOCKS k-blocks, and the expected last round's
    tiles in 4 within the SMs) or 2. Masked layouts keep whole tiles (its 64-row tiles beat every 128-row variant,
    stream-K included, by 3-12%, session 29), as do fp8 and fused epilogues (unmeasured with it). `last_round` says
    why."""
    return last_round(spec, device, bm, bn)[0]


def last_round(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int) -> tuple[int, str]:
    """`last_round_stream_k`'s pieces and why, in `explain`'s words."""
    if (spec.grouping is not Grouping.OFFSETS or spec.a_dtype.bytes != 2 or spec.epilogue is not None
            or spec.bias_dtype is not None or spec.groups < 1 or bm != 128):
        return 0, ("whole tiles: the last round is shared by default only for bf16/fp16 M-grouped GEMMs on 128-row "
                   "tiles without a fused epilogue (stream_k=s forces it)")
    tiles = expected_grouped_tiles(spec, bm, bn)
    rounds = tiles / device.sm_count
    fill = rounds - math.floor(rounds)
    why = (f"{tiles:g} tiles expected (the rows' {math.ceil(spec.m / bm)} plus half a tile for each of {spec.groups} "
           f"groups, times {math.ceil(spec.n / bn)} columns of tiles) on {device.sm_count} SMs")
    if rounds < 1:
        return 0, f"{why}: under one round: whole tiles"
    last = f"{why}: the last of {math.ceil(rounds)} rounds {fill:.2f} full"
    if not 0 < fill < GROUPED_SK_MAX_FILL:
        return 0, f"{last}, not under {GROUPED_SK_MAX_FILL}: whole tiles"
    # (4 pieces only where the expected last round's tiles in 4 still fit the SMs, so each shared tile gets exactly
    # 4: pieces starting at other k-blocks than their neighbours' lost up to 30% in L2, rule 21's session 22)
    rest = math.ceil(fill * device.sm_count)
    pieces = 4 if k_blocks(spec) >= GROUPED_SK4_MIN_KBLOCKS and rest * 4 <= device.sm_count else 2
    if pieces > k_blocks(spec):
        return 0, f"{last}, but {k_blocks(spec)} k-block(s) cannot be cut in {pieces}: whole tiles"
    return pieces, (f"{last}, under {GROUPED_SK_MAX_FILL}: shared as stream-K in {pieces} pieces "
                    f"({k_blocks(spec)} k-blocks)")


def refuse_stream_k(spec: GemmSpec, stream_k: int, problems: list[str]) -> None:
    """Rule 21's refusals of a forced `stream_k`: more pieces than a tile's k-blocks (a piece with none would leave
    its finisher waiting), or `problems` (`stream_k_problems`), each an UnsupportedError with the fix."""
    k_tiles = k_blocks(spec)
    if stream_k > k_tiles:
        fix = f"stream_k between 2 and {k_tiles}, or 0" if k_tiles >= 2 else "stream_k=0 (whole tiles)"
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cuts a tile into more pieces than its {k_tiles} "
                               f"k-block(s) of K={spec.k}: a piece would have no k-block to add. Fix: pass {fix}")
    if problems:
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: {'; '.join(problems)}. "
                               "Fix: drop stream_k (or the option that conflicts with it)")


def plan_grouped(spec: GemmSpec, device: DeviceInfo, *, bm: int | None = None, bn: int | None = None,
                 stages: int | None = None, group_m: int = 8, consumer_partitions: int | None = None,
                 partial_blocks: int | None = None, stream_k: int | None = None,
                 scale_partition: bool | None = None) -> Plan:
    """Rule 22: a grouped GEMM's plan (`GemmSpec.grouping`). The tile is `grouped_tile`'s (or forced); the rest is
    what the other rules give the same GEMM ungrouped at that tile (stages, registers, partitions, epilogue), with
    whole tiles (no split-K, tail or swap: a grouped kernel's tiles are its groups') and the grid at the SM count:
    the tile count is known on the device only, and CTAs without a tile exit at once.

    `stream_k` (0: whole tiles; None: `last_round_stream_k`'s choice): an M-grouped or masked plan whose last,
    partial round of tiles is shared as (tile, k-block) pieces, at most `stream_k` a tile, split on the device from
    the scan's tile count (rule 21's kernel over the group scan's tile ids). The default shares it for bf16/fp16
    M-grouped GEMMs whose expected last round is under half full, as measured (docs/decisions/rule-22-grouped.md).

    A Blackwell device's grouped plan is `plan_blackwell_grouped`'s (rule 22 on sm_100a), which refuses the sm_90a
    options forced here (`consumer_partitions`, `partial_blocks`) and a `scale_partition` forced off by name; MX
    scales, which only sm_100a's grouped kernel takes, are refused on sm_90a by name."""
    if device.gfx1250:
        raise UnsupportedError(f"grouped GEMMs (rule 22) are built for sm_90a and sm_100a; {device.name} is "
                               f"{device.arch}. Fix: plan for an sm_90a device (H100_SXM) or an sm_100a one (B200)")
    if device.blackwell:
        return plan_blackwell_grouped(spec, device, bm=bm, bn=bn, stages=stages, group_m=group_m,
                                      stream_k=stream_k, consumer_partitions=consumer_partitions,
                                      partial_blocks=partial_blocks, scale_partition=scale_partition)
    if spec.sm90_grouped_problems():
        raise UnsupportedError(f"grouped GEMMs (rule 22) on {device.name} do not take "
                               f"{'; '.join(spec.sm90_grouped_problems())}: {spec.short()}. Fix: plan it for an "
                               "sm_100a device (device=B200)")
    if stream_k and spec.grouping is Grouping.K_OFFSETS:
        raise UnsupportedError(f"stream_k={stream_k} (rule 21) cannot run {spec.short()}: a K-grouped GEMM's tiles "
                               "run their groups' K ranges, not one count of k-blocks to share. Fix: drop stream_k "
                               "(stream-K runs M-grouped and masked grouped GEMMs)")
    # (a K-grouped spec's M is each group's rows already: its groups split K)
    tile = grouped_tile(spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m / max(spec.groups, 1))
    if tile[1] == 256 and spec.epilogue is not None and not fused_wide(spec, 256):
        # Rule 9: promoted fp8 keeps a fused epilogue 128 wide (fp8 rowwise promoted with a SiLU-mul epilogue at
        # 128x256 spilled 1432 bytes: ptxas, Triton 3.6, 8192x4096x7168 over 8 experts)
        tile = (tile[0], 128)
    if stream_k and spec.a_dtype.bytes == 1 and tile[1] == 256:
        # fp8 stream-K keeps 128 wide: the grouped fp8 rowwise 128x256 kernel's fixup beside its per-block scales and
        # the tile's group, origin and row end spilled 876 bytes (ptxas, Triton 3.9, 8192x4096x7168 over 8 experts;
        # the dense one 64), 128x128 none (3.6 spilled nothing at either)
        tile = (tile[0], 128)
    forced_bm = bm
    bm, bn = bm or tile[0], bn or (tile[1] if bm in (None, tile[0]) else 128)
    if stream_k is None:
        stream_k = last_round_stream_k(spec, device, bm, bn)
        if stream_k and stream_k_problems(spec, False, None, None, None, False, bm):
            stream_k = 0
    if consumer_partitions is None and spec.epilogue is not None and (bm, bn) == (128, 128):
        # Rule 9 runs a fused epilogue's two warpgroups as one partition; beside a grouped tile's scan state (group,
        # origin, row end) a dense gate and a per-expert bias spilled 88-92 bytes at 128x128 (ptxas, Triton 3.9,
        # M-grouped and masked alike; 56 without --regAllocOptLevel=2); two partitions, none under 3.6 or 3.9. A
        # fused quantization is the other way round: one partition, as every 128-wide one (a SiLU-mul gate quantized
        # 1x128 at 8192x4096x7168 over 8 experts spilled 8 bytes in two with fp8 rowwise fast under Triton 3.6, 36
        # with promoted blockwise under 3.9, whatever the walk's blocks; none in one).
        consumer_partitions = 1 if spec.epilogue.group_amax() is not None else 2
    dense = replace(spec, grouping=Grouping.NONE, groups=0)
    # (stream-K: no dense operand copied at the tile's start, which a contributor would skip, as rule 21's)
    dense_plan = plan(dense, device, PlanOptions(bm=bm, bn=bn, stages=stages, group_m=group_m,
                                                 consumer_partitions=consumer_partitions,
                                                 partial_blocks=partial_blocks, split_k=1, tail_split=1,
                                                 swap_ab=False, stream_k=0,
                                                 prefetch_operands=False if stream_k else None))
    if stream_k:
        problems = stream_k_problems(spec, False, None, None, None, False, dense_plan.bm)
        if forced_bm is None and dense_plan.bm != 128:  # (rule 22's tile, not the caller's)
            problems = [p.replace(f"bm={dense_plan.bm} (", f"bm={dense_plan.bm}, rule 22's tile at "
                                  f"{spec.m // max(spec.groups, 1)} rows a group (pass bm=128; ") for p in problems]
        refuse_stream_k(spec, stream_k, problems)
    # Rule 10's per-block scales for fp8 rowwise on a 256-wide tile even without a bias: beside a grouped tile's
    # group, origin and row end the whole-width scale vectors spilled 16 bytes (ptxas, 8192x4096x7168), per block none.
    block = dense_plan.block_epilogue or (spec.scale is ScaleRecipe.ROWWISE and dense_plan.bn == 256)
    # Blockwise fp8 on 128x256 stores 64x64 blocks, not 64x128: a group's ragged last tile reads its staged block
    # back for the masked stores, and a 64x128 one beside the promoted mainloop's accumulator spilled 52 bytes
    # (ptxas, Triton 3.6, 8192x4096x7168 over 8 experts); 64x64 ones, none.
    subtiles = dense_plan.epilogue_subtiles
    if spec.scale.is_blockwise and dense_plan.bn == 256:
        subtiles = max(subtiles, 4)
    return replace(dense_plan, grid=device.sm_count, block_epilogue=block, epilogue_subtiles=subtiles,
                   stream_k=stream_k or 0)



def _rule14_split(spec: GemmSpec, device: DeviceInfo, bm: int, bn: int, pingpong: bool,
                  scale_partition: bool | None) -> int:
    """Rule 14: blockwise fp8 with M <= 128 on 128-wide tiles, when the tiles fill at most a third of the SMs and
    K has at least 32 k-blocks, splits K into the most ranges (a divisor of the k-blocks, at most 8) that keep the
    work units within one wave; otherwise 1."""
    if (spec.scale not in _SMALL_M_RECIPES or spec.m > 128 or bn != 128 or spec.bias_dtype is not None
            or spec.epilogue is not None or pingpong or scale_partition):
        return 1
    k_tiles = math.ceil(spec.k / 128)
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    if tiles > device.sm_count // 3 or k_tiles < 32:
        return 1
    return max(d for d in range(1, 9) if k_tiles % d == 0 and tiles * d <= device.sm_count)



def _check_split_k(spec: GemmSpec, split_k: int, bk: int, pingpong: bool, scale_partition: bool | None,
                   what: str = "split_k") -> None:
    """Split-K's limits (also a split-K tail's, `what` = "tail_split"): a k-block for every range; ranges of equal
    counts where the producer copies per-column scales of B in one flattened loop (`ScaleRecipe.per_column_b`),
    which runs one count a unit, and for promoted accumulation, whose consumers spilled with unequal ones
    (elsewhere they may differ by one: `ir.Tiling.uneven_split`); and the partials summed before anything that is
    not linear in the accumulator (the bias, a fused epilogue, the output cast) could run."""
    if split_k == 1:
        return
    k_tiles = max(1, math.ceil(spec.k / bk))
    problems = []
    if split_k < 1 or split_k > k_tiles:
        problems.append(f"{what}={split_k} must be at least 1 and at most the {k_tiles} k-blocks of {bk}")
    elif k_tiles % split_k and spec.scale.per_column_b:
        problems.append(f"{what}={split_k} must divide the {k_tiles} k-blocks of {bk} for {spec.scale.value} "
                        "scales (their copier runs one count of k-blocks a range)")
    elif k_tiles % split_k and spec.accumulation is Accumulation.PROMOTED:
        # (the unit's range arithmetic beside the promotion's scale indexing spilled 16 bytes under Triton 3.9 at
        # 128x128 blockwise, tests/compile)
        problems.append(f"{what}={split_k} must divide the {k_tiles} k-blocks of {bk} for promoted accumulation "
                        "(unequal ranges spill in its consumers)")
    if spec.bias_dtype is not None or spec.epilogue is not None:
        problems.append(f"a bias or a fused epilogue needs the whole sum (pass {what}=1)")
    if pingpong:
        problems.append("ping-pong consumers skip each other's tiles by whole k-loops (use pingpong=False)")
    if scale_partition or spec.scale is ScaleRecipe.MX:
        problems.append("the scale partition is not built for split-K units (use scale_partition=False; not MX)")
    if problems:
        raise UnsupportedError(f"{what}={split_k} for {spec.short()}: " + "; ".join(problems))


def _mx_registers(spec: GemmSpec, bm: int, pingpong: bool) -> dict[str, int]:
    """Rule 12's budgets: the scale partition decodes MX scales in registers; at 128x256 the kernel spilled 136 and
    280 bytes with 24 and 32 for its warpgroup, none with 40 or 48 (ptxas, 2026-11-23). It shares that warpgroup
    (and so its budget) with the producer. Beside two consumer warpgroups at 232, 40 is what keeps the default
    partition (consumer0) at 232 too: Gluon gives it what is left of maxnreg (168) x 384 threads after the
    workers' budgets, 224 with 48."""
    if spec.scale is not ScaleRecipe.MX:
        return {}
    return {"producer_regs": 40, "consumer_regs": 232 if bm == 128 or pingpong else CONSUMER_REGS}


def _pingpong_fits(spec: GemmSpec, bm: int, bn: int, partial_blocks: int | None) -> bool:
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

