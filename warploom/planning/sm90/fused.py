"""Which fused quantize and gate/up epilogues an sm_90a plan can take: rule 26's 1x128 quantization (128-wide
tiles, also on rule 22's M-grouped and masked GEMMs), rule 27's rowwise one (one tile spans N <= 256), rule 29's two
passes for the rows no tile holds (`two_passes`; the passes themselves are `planning/amax_pass.py`'s) and rule 28's
interleaved gate/up pairs (BN = 2 * block), each refused by name where it cannot run. `warploom.planner.plan_schedule`
asks these before it calls the target's rule."""

from __future__ import annotations

from warploom.device import DeviceInfo
from warploom.planning.amax_pass import (
    AMAX_PASS_BNS,
    AMAX_PASS_NARROW_BN,
    amax_pass_bn,
    amax_pass_outputs,
    amax_pass_problem,
)
from warploom.planning.common import dense_operands
from warploom.spec import Accumulation, GemmSpec, Grouping

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
    return out + _cut_tiles(pingpong, split_k, tail_split, swap_ab, stream_k, cluster)


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
    return out + _cut_tiles(pingpong, split_k, tail_split, swap_ab, stream_k, cluster)


def _cut_tiles(pingpong: bool, split_k: int | None, tail_split: int | None, swap_ab: bool | None,
               stream_k: int | None, cluster: int | str | None) -> list[str]:
    """The forced schedules that cut a tile's sum or columns, or pair its warpgroups, as `name=value`: rules 26-28
    take whole cooperative tiles only."""
    given = {"pingpong": pingpong or None, "split_k": None if split_k in (None, 1) else split_k,
             "tail_split": None if tail_split in (None, 1) else tail_split, "swap_ab": swap_ab or None,
             "stream_k": stream_k or None, "cluster": None if cluster in (None, 1) else cluster}
    return [f"{k}={v}" for k, v in given.items() if v is not None]
