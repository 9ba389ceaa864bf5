"""Which tile, and which of its k-blocks, a CTA's work unit is, as the Gluon helpers every sm_90a-family kernel carries
in its source: the grouped raster (`tile_coords`) and stream-K's units (`sk_range`, `sk_unit`, `sk_owner`), with the
kernel parameters and the fixup's gather batches stream-K needs. ir/raster.py is their twin in Python, which the
simulator and the launcher run."""

from __future__ import annotations

from warploom.ir import nodes as ir

# Grouped raster (ir.Tiling.group_m): consecutive tile ids walk GROUP_M rows of tiles column by column.
# warploom.ir.raster.tile_coords is the same function in Python, used by the simulator.
RASTER = """\
@gluon.jit
def tile_coords(tile_id, num_pid_m, num_pid_n):
    # grouped raster: GROUP_M rows of tiles at a time, column by column, so CTAs share tiles in L2
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // num_pid_in_group) * GROUP_M
    group_size_m = gl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m * BM, pid_n * BN
"""


# Stream-K (ir.Tiling.stream_k): a CTA's work units. warploom.ir.raster.stream_k_units is the same in Python.
STREAM_K = """\
@gluon.jit
def sk_range(pid, num_tiles, k_tiles):
    # stream-K: the first dp_tiles tiles run whole (pid, pid + grid, ...), in whole waves; the sk_tiles left over (a
    # last, partial wave) are shared as (tile, k-block) iterations by sk_ctas CTAs, at most SK_SPLIT per tile, this
    # CTA taking iterations it0 .. it1 of them
    grid = gl.num_programs(0)
    sk_tiles = num_tiles % grid
    dp_tiles = num_tiles - sk_tiles
    sk_ctas = gl.minimum(grid, sk_tiles * SK_SPLIT)
    total = sk_tiles * k_tiles
    it0 = total
    it1 = total
    if pid < sk_ctas:
        it0 = pid * total // sk_ctas
        it1 = (pid + 1) * total // sk_ctas
    num_units = dp_tiles // grid
    if it1 > it0:
        num_units += (it1 - 1) // k_tiles - it0 // k_tiles + 1
    return dp_tiles, it0, it1, num_units


@gluon.jit
def sk_unit(u, pid, dp_tiles, it0, it1, k_tiles):
    # unit u of this CTA: a whole tile, or the part of a shared tile within its iterations
    grid = gl.num_programs(0)
    n_dp = dp_tiles // grid
    tile_id = pid + u * grid
    k_lo = 0
    k_hi = k_tiles
    if u >= n_dp:
        t = it0 // k_tiles + (u - n_dp)
        tile_id = dp_tiles + t
        k_lo = gl.maximum(it0 - t * k_tiles, 0)
        k_hi = gl.minimum(it1 - t * k_tiles, k_tiles)
    return tile_id, k_lo, k_hi


@gluon.jit
def sk_owner(t, k_tiles, dp_tiles, num_tiles):
    # the CTA whose iterations hold shared tile t's last k-block (iteration i is CTA ((i + 1) * sk_ctas - 1) // total's)
    sk_tiles = num_tiles - dp_tiles
    sk_ctas = gl.minimum(gl.num_programs(0), sk_tiles * SK_SPLIT)
    return ((t + 1) * k_tiles * sk_ctas - 1) // (sk_tiles * k_tiles)
"""

# ir.Tiling.sk_waves: SK_WAVES whole waves join a partial last wave's tiles in the shared region.
SK_REGION = "    sk_tiles = num_tiles % grid\n"
SK_REGION_WAVES = SK_REGION + """\
    if sk_tiles > 0:
        sk_tiles = gl.minimum(sk_tiles + SK_WAVES * grid, num_tiles)
"""
assert SK_REGION in STREAM_K

# Stream-K's fp32 workspace (grid x BM x BN) and int32 flags (grid x consumer partitions): a few million elements
# whatever the problem, so their offsets stay 32-bit.
SK_PARAMS = ("sk_ws_ptr", "sk_flags_ptr")


# A stream-K finisher's partials in flight: the registers a thread may hold for partials it has loaded but not yet
# added (the consumer's budget is 232-240; its accumulator and addresses take the rest).
SK_LOAD_REGS = 128
SK_MAX_WAIT = 32  # flags acquired at once: one lane each of a warp


def sk_batches(stream_k: int, acc_regs: int) -> tuple[int, int]:
    """How a stream-K finisher gathers its later pieces (`ir.Fixup`): (flags acquired at once, a power of two
    covering the `stream_k` pieces a tile has at most; partials loaded at once, as many accumulators of `acc_regs`
    registers a thread as SK_LOAD_REGS holds, at least one)."""
    waits = 2
    while waits < min(stream_k, SK_MAX_WAIT):
        waits *= 2
    return waits, max(1, min(waits, SK_LOAD_REGS // max(acc_regs, 1)))


def raster(t: ir.Tiling) -> str:
    """The raster helper of a module of tiling `t`: a narrow or fitted tile's columns stride TN along N."""
    return RASTER.replace("pid_n * BN", "pid_n * TN") if t.n_blocks else RASTER


def stream_k_helpers(t: ir.Tiling) -> str:
    """Stream-K's helpers for tiling `t` (`ir.Tiling.stream_k`), its whole waves joining the shared region where it
    has `sk_waves`."""
    return STREAM_K if not t.sk_waves else STREAM_K.replace(SK_REGION, SK_REGION_WAVES)
