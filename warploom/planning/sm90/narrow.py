"""Planner rule 31 (docs/decisions/rule-31-narrow-tiles.md): a narrow tile where N is one tile's columns but far
fewer than the tile's BN. Its wgmma cover only round_up(N, 16) columns, in power-of-two column blocks (Triton's
tensors and TMA boxes must be powers of two; a wgmma's N need only be a multiple of 8), each block with its own
accumulator, B box and stores (`ir.Tiling.n_blocks`); `with_blocks` also fits rule 32's tiles (`fitted.py`).

Why: cuBLAS fits its tile's width to N (its kernels on the H100 are named for widths like 80, 88, 104 and 144:
docs/data/torch-kernels-2026-11-28-session32.json), so at N = 80 it spends 80 columns of tensor-core work where a
128-wide tile spends 128. Measured against the same tile whole (H100, session 32,
docs/data/narrow31-2026-11-28-session32.json), the narrow tile gained 0.4-2.6% at six of seven shapes and lost 0.6%
at one, within its rounds' spread: those shapes are bound by their operands' traffic more than by the tensor cores,
so the gain is small."""

from __future__ import annotations

from dataclasses import replace

from warploom.device import DeviceInfo
from warploom.errors import UnsupportedError
from warploom.ir.nodes import narrow_widths
from warploom.planning.plan import Plan
from warploom.planning.sm90.models import stream_k_grid
from warploom.planning.sm90.search import FORCED_MAX_STAGES
from warploom.planning.sm90.tiles import max_stages
from warploom.spec import GemmSpec
from warploom.target import Target

# At most this fraction of the tile's columns, in at most this many blocks: each block's wgmma reads the A slot
# again from shared memory, and nothing nearer BN (less work saved) was measured.
NARROW_MAX_FILL = 0.75
NARROW_MAX_BLOCKS = 3
# 128- and 256-wide tiles only: 64x64 tiles are rules 16, 23 and 25's, chosen where latency, not the tensor cores,
# bounds a tile.
NARROW_MIN_BN = 128


def blocks_of(width: int) -> tuple[int, ...]:
    """`width` (a multiple of 16) as power-of-two blocks, widest first: 176 -> (128, 32, 16). Rules 31, 32 and 38's
    column blocks."""
    return tuple(1 << i for i in range(width.bit_length() - 1, 3, -1) if width >> i & 1)


def narrow_blocks(n: int, bn: int) -> tuple[int, ...]:
    """Rule 31's column blocks for N columns of a BN-wide tile: round_up(N, 16) as powers of two from 16, widest
    first (80: 64 + 16), or () where that is more than NARROW_MAX_FILL of BN or takes more than NARROW_MAX_BLOCKS."""
    width = -(-n // 16) * 16
    blocks = blocks_of(width)
    if not 0 < width <= NARROW_MAX_FILL * bn or len(blocks) > NARROW_MAX_BLOCKS:
        return ()
    return blocks


def narrow_problems(spec: GemmSpec, plan: Plan) -> list[str]:
    """Why `plan` cannot run `spec` on column blocks at all (empty: it can), what the verifier refuses too
    (ir/verify_narrow.py)."""
    problems = [] if plan.target is Target.SM90A else [f"target {plan.target} (sm_90a's wgmma only)"]
    problems += spec.narrow_problems()
    # (a 2x1 cluster's CTAs interleave 64-row blocks, one consumer warpgroup's each: ir.Tiling.interleaved)
    interleaves = plan.bm == 128 and plan.consumer_partitions == 2
    for name, on in (("ping-pong", plan.pingpong), ("swap-AB", plan.swap_ab),
                     ("a 1x2 cluster", plan.cluster > 1 and plan.cluster_n),
                     (f"a cluster of {plan.bm}-row tiles in {plan.consumer_partitions} consumer partitions (its CTAs "
                      "interleave the 64-row blocks of one warpgroup each: 128 rows, two partitions)",
                      plan.cluster > 1 and not plan.cluster_n and not interleaves),
                     ("a split-K tail (its reduction writes whole tiles)", plan.tail_split > 1),
                     ("rule 29's first pass", plan.amax_pass), ("promoted column blocks", plan.partial_blocks > 1)):
        if on:
            problems.append(name)
    return problems


def with_blocks(spec: GemmSpec, device: DeviceInfo, plan: Plan, blocks: tuple[int, ...],
                stages: int | None = None) -> Plan:
    """`plan` on these column blocks, its grid counted again in tiles of sum(blocks) columns (`Plan.tile_n`): as many
    CTAs as work units up to the SMs, or stream-K's (`stream_k_grid`); the ring as deep as shared memory holds now
    that a stage keeps only the blocks' rows of B (`ir.Ring.blocks`), never shallower, and the stores in blocks half
    as wide where that buys a stage (their staging buffer halves too); or `stages` deep where those hold it."""
    fitted = replace(plan, n_blocks=tuple(blocks))
    units = fitted.units(spec.m, spec.n)
    grid = stream_k_grid(units, device.sm_count, plan.stream_k) if plan.stream_k else min(device.sm_count, units)
    if plan.cluster > 1:  # (whole clusters, as many as the cluster tiles of cluster * bm rows: rule 24's grid)
        c = plan.cluster
        tiles = -(-spec.m // (c * plan.bm)) * -(-spec.n // fitted.tile_n)
        grid = c * max(1, min(device.sm_count // c, tiles))
    subtiles = plan.epilogue_subtiles

    def depth(sub: int) -> int:
        return max_stages(spec, device, plan.bm, plan.bn, plan.bk, plan.pingpong, plan.scale_partition,
                          split_k=plan.split_k, prefetch=plan.prefetch_operands, subtiles=sub, b_rows=fitted.tile_n,
                          cap=None if stages is None else FORCED_MAX_STAGES)

    # (a store of at least 64 columns: a block narrower than that is stored whole anyway)
    halved = subtiles * 2 if plan.bn // (subtiles * 2) >= 64 else subtiles
    if stages is None:
        deepest, sub = max((depth(subtiles), -subtiles), (depth(halved), -halved), (plan.stages, -subtiles))
        return replace(fitted, grid=grid, stages=deepest, epilogue_subtiles=-sub)
    sub = subtiles if depth(subtiles) >= stages else halved
    if depth(sub) < stages:
        raise UnsupportedError(f"stages={stages} with n_blocks={blocks}: at most {depth(halved)} stages of "
                               f"{spec.short()} fit beside the {plan.bm}x{plan.bn} tile's staging. Fix: pass fewer "
                               "stages, or none")
    return replace(fitted, grid=grid, stages=stages, epilogue_subtiles=sub)


def narrow(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Plan:
    """Rule 31: `plan` on a narrow tile where N is one 128- or 256-wide tile's and leaves at least a quarter of its
    columns empty, but for a fused epilogue or a cluster (not measured narrow)."""
    # (rule 24's clusters of whole tiles stay whole: a narrow tile in a cluster was not measured; rule 37 fits them)
    if plan.n_blocks or spec.n >= plan.bn or plan.bn < NARROW_MIN_BN or spec.epilogue is not None or plan.cluster > 1:
        return plan
    blocks = narrow_blocks(spec.n, plan.bn)
    if not blocks or narrow_problems(spec, plan):
        return plan
    return with_blocks(spec, device, plan, blocks)


def forced_narrow(spec: GemmSpec, device: DeviceInfo, plan: Plan, blocks: tuple[int, ...],
                  stages: int | None = None) -> Plan:
    """`plan_schedule(n_blocks=...)`: `plan` on these blocks (() keeps it whole), refused by name where it cannot
    run them."""
    problems = narrow_problems(spec, plan) if blocks else []
    if blocks and (not narrow_widths(blocks) or sum(blocks) >= plan.bn):  # (`Plan`'s own check, with the fix)
        suggested = narrow_blocks(spec.n, plan.bn)
        raise UnsupportedError(f"n_blocks={blocks}: expected powers of two from 16, widest first, covering fewer "
                               f"than the {plan.short()} tile's bn={plan.bn} columns. Fix: "
                               + (f"pass n_blocks={suggested} (rule 31's for N = {spec.n}), or " if suggested else "")
                               + "drop n_blocks" + (" (or pass a wider bn)" if sum(blocks) >= plan.bn else ""))
    if problems:
        raise UnsupportedError(f"n_blocks={blocks} (rule 31's narrow tile) cannot run {spec.short()} on "
                               f"{plan.short()}: {'; '.join(problems)}. Fix: drop n_blocks")
    return with_blocks(spec, device, plan, tuple(blocks), stages) if blocks else replace(plan, n_blocks=())
