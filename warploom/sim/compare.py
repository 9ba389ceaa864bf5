"""Simulate a planned kernel on random inputs and judge the output tiles it wrote against torch's fp32 reference.

A whole problem when it is small; at real sizes (all of 4096^3 bf16 takes ~15 s on one core) a sample
of CTAs (`sample_ctas`) whose tiles alone are compared: every other element of the output stays NaN.
Used by `warploom demo` without a GPU and `warploom sim`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import torch

from warploom.ir import nodes as ir
from warploom.ir.raster import Span, TileRef, cdiv, launch_grid
from warploom.reference import Inputs, dequantized, global_scale, is_blockwise, reference, relative_error
from warploom.sim.cluster import whole_clusters
from warploom.sim.program import launch_span
from warploom.sim.simulate import SimResult, completed_tiles, representative_ctas, simulate


class Launch(Protocol):
    """One launch of a kernel, as `warploom.kernel.Launch` holds it."""

    @property
    def name(self) -> str: ...
    @property
    def module(self) -> ir.Module: ...
    @property
    def span(self) -> Span: ...
    @property
    def grid(self) -> int: ...
    @property
    def ctas(self) -> tuple[int, ...]: ...


class Kernel(Protocol):
    """What `compare_kernel` and `sample_kernel_ctas` read of a `warploom.kernel.Kernel`. Named by its shape, not
    imported: the kernel module imports the simulator (`Kernel.simulate`), and the simulator stays below it."""

    @property
    def module(self) -> ir.Module: ...
    @property
    def tail(self) -> ir.Module | None: ...

    def spans(self, m: int, n: int, k: int) -> tuple[Span, Span]: ...

    def launches(self, m: int, n: int, k: int, ctas: Iterable[int] | None = None,
                 tail_ctas: Iterable[int] | None = None) -> Sequence[Launch]: ...

    def simulate(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                 scale_b: torch.Tensor | None = None, *, seed: int = 0, ctas: Iterable[int] | None = None,
                 record: bool = True, tail_ctas: Iterable[int] | None = None) -> SimResult: ...

# The scale-free error (`relative_error`) a correct schedule stays below: bf16 output rounding alone gives
# ~1e-6, fp8 inputs ~1e-5; a dropped or repeated k-block gives ~1e-2 and more.
TOLERANCE = 1e-3


@dataclass(frozen=True)
class Comparison:
    """A simulation judged against the reference.

    Attributes:
        result: the simulation; its output is NaN outside `tiles`.
        grid: CTAs of the persistent launch.
        tiles: the output tiles of the simulated CTAs, the only ones compared.
        error: ``relative_error`` of those tiles against the fp32 reference (NaN if an element was not written).
        wall_s: wall time of the simulation and the comparison.
        launches: a split-K tail plan's launches (`compare_kernel`): (name, grid, the program ids simulated) of
            each that ran; `grid` is the first's. Empty for one module.
    """

    result: SimResult
    grid: int
    tiles: tuple[TileRef, ...]
    error: float
    wall_s: float
    launches: tuple[tuple[str, int, tuple[int, ...]], ...] = ()

    @property
    def ok(self) -> bool:
        return self.result.ok and self.error < TOLERANCE  # False for a NaN error


def sample_ctas(module: ir.Module, m: int, n: int, span: Span | None = None) -> tuple[int, ...]:
    """Program ids that run every protocol of a launch: one CTA per distinct tile count
    (`representative_ctas`, CTA 0 among them) and the CTA of the last tile, ragged when M or N is; with split-K,
    every CTA with a unit of the first or the last tile, so that those tiles of C are complete. A ranged module's
    launch covers `span` (default: all of C)."""
    t = module.tiling
    span = launch_span(module, m, n, span)
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, span, t.stream_k, t.cluster, t.cluster_n)
    c = t.cluster  # (a cluster's tiles are cluster tiles, its CTAs visit them together: whole clusters run)
    cm, cn = t.cluster_mn  # (a 1x2 cluster's tiles: BM x 2 BN)
    tiles = cdiv(m, cm * t.bm) * cdiv(n, cn * t.tile_n) if span is None else span.tiles
    if not tiles:
        return ()
    last = (tiles * t.split_k - 1) % (grid // c) * c
    # Split-K: a tile of C is judged only when every k-range's unit of it ran, so also the CTAs of the first and
    # the last tile's units (unit = split * tiles + tile, the tile counted within the launch).
    units = {(s * tiles + tile) % grid for tile in (0, tiles - 1) for s in range(t.split_k)} if t.split_k > 1 else set()
    return whole_clusters(module, sorted({*representative_ctas(module, m, n, span), last, *units}))


def sample_kernel_ctas(kern: Kernel, m: int, n: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`sample_ctas` of each launch of `kern`: (the first launch's, the tail's), for `compare_kernel`'s (or
    `Kernel.simulate`'s) `ctas` and `tail_ctas`; the tail's is empty without one (`Kernel.spans`)."""
    if kern.module.tiling.swap_ab:  # (its tiles cover C^T)
        return sample_ctas(kern.module, n, m), ()
    if kern.tail is None:
        return sample_ctas(kern.module, m, n), ()
    whole, rest = kern.spans(m, n, k)
    return sample_ctas(kern.module, m, n, whole), sample_ctas(kern.tail, m, n, rest)


def _tile_inputs(x: Inputs, rows: slice, cols: slice) -> Inputs:
    """The inputs of one output tile: A's rows, B's columns, their row/column scales and bias."""

    def part(v: torch.Tensor | None, sl: slice) -> torch.Tensor | None:
        return v if v is None or v.numel() == 1 else v.reshape(-1)[sl]  # a tensorwise scale serves every tile

    return Inputs(x.a[rows], x.b[:, cols], part(x.scale_a, rows), part(x.scale_b, cols), part(x.bias, cols))


def _judged(output: torch.Tensor, x: Inputs, tiles: tuple[TileRef, ...], bm: int,
            bn: int, row_blocks: tuple[tuple[int, int], ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`tiles` of the output and of the fp32 reference, flattened (or whole, when they are every tile); each tile's
    rows as `row_blocks` (`ir.Tiling.row_blocks`: a cluster's interleaved CTAs hold their rows in blocks), else BM
    from its first."""
    m, n = output.shape
    if len(tiles) == cdiv(m, bm) * cdiv(n, bn):  # one large matmul: ~10x faster than one per tile
        return output.float(), reference(x)
    # (a cluster tile's rank may lie wholly past M: nothing of it is C's)
    parts = [(slice(tile.off_m + r0, tile.off_m + r0 + rows), slice(tile.off_n, tile.off_n + bn)) for tile in tiles
             for r0, rows in (row_blocks or ((0, bm),)) if tile.off_m + r0 < m and tile.off_n < n]
    out = torch.cat([output[r, c].float().reshape(-1) for r, c in parts])
    if is_blockwise(x):
        # Blockwise scales index by k-block and by 128 columns (or column), not by the tile's own rows and
        # columns: dequantize A and B once, then each tile is their rows' and columns' product (+ bias).
        assert x.scale_a is not None and x.scale_b is not None
        da, db = dequantized(x.a, x.b, x.scale_a, x.scale_b)
        bias = x.bias.float() if x.bias is not None else None
        g = global_scale(x)  # (NVFP4's, else 1)
        return out, torch.cat([(da[r] @ db[:, c] * g + (bias[c] if bias is not None else 0.0)).reshape(-1)
                               for r, c in parts])
    x = Inputs(x.a.float(), x.b.float(), x.scale_a, x.scale_b, x.bias)  # converted once, not once per tile
    return out, torch.cat([reference(_tile_inputs(x, r, c)).reshape(-1) for r, c in parts])


def compare_kernel(kern: Kernel, x: Inputs, *, ctas: Iterable[int] | None = None,
                   tail_ctas: Iterable[int] | None = None, seed: int = 0, record: bool = False) -> Comparison:
    """`compare` for a whole kernel: with a split-K tail (`Kernel.tail`), both launches run as on the GPU
    (`Kernel.simulate`: `ctas` in the first, `tail_ctas` in the tail's, by default `ctas` in both), and the tiles
    they completed are judged. `Comparison.launches` says which CTAs of which grid each launch ran."""
    if kern.tail is None:
        return compare(kern.module, x, ctas=ctas, seed=seed, record=record)
    t0 = time.perf_counter()
    m, k = x.a.shape
    n = x.b.shape[1]
    picked = None if ctas is None else tuple(ctas)
    tail_picked = None if tail_ctas is None else tuple(tail_ctas)
    res = kern.simulate(x.a, x.b, *x.scales(), seed=seed, ctas=picked, tail_ctas=tail_picked, record=record)
    launches = kern.launches(m, n, k, picked, tail_picked)  # (the launches simulate ran, and their CTAs)
    tiles = [u for launch in launches
             for u in completed_tiles(launch.module, m, n, launch.grid, launch.ctas, launch.span)]
    t = kern.module.tiling
    error = math.nan
    if tiles:
        out, ref = _judged(res.output, x, tuple(tiles), t.bm, t.tile_n, t.row_blocks)
        if not out.isnan().any():
            error = relative_error(out, ref)
    return Comparison(res, launches[0].grid if launches else 0, tuple(tiles), error, time.perf_counter() - t0,
                      tuple((launch.name, launch.grid, launch.ctas) for launch in launches))


def compare(module: ir.Module, x: Inputs, *, ctas: Iterable[int] | None = None, seed: int = 0,
            record: bool = False) -> Comparison:
    """Simulate `module` on `x` (all CTAs, or `ctas`) under schedule `seed` and compare the tiles written. `x` are
    the problem's inputs, also for a swapped module (`simulate`); its tiles, of C^T, are judged where they lie in C."""
    t0 = time.perf_counter()
    m, n = x.a.shape[0], x.b.shape[1]
    res = simulate(module, x.a, x.b, *x.scales(), x.bias, seed=seed, ctas=ctas, record=record)
    t = module.tiling
    if t.swap_ab:
        m, n = n, m
    grid = launch_grid(m, n, t.bm, t.tile_n, t.grid, t.split_k, stream_k=t.stream_k, cluster=t.cluster,
                       cluster_n=t.cluster_n)
    # (split-K: a tile of C is final only once every k-range's unit of it was simulated)
    tiles = completed_tiles(module, m, n, grid, res.report.ctas)
    error = math.nan  # also when no tile was simulated: nothing was shown correct
    if tiles:
        judged, bm, bn = tiles, t.bm, t.tile_n
        if t.swap_ab:  # (each tile of C^T at (off_m, off_n) is C's at (off_n, off_m))
            judged, bm, bn = tuple(replace(u, off_m=u.off_n, off_n=u.off_m) for u in tiles), t.tile_n, t.bm
        out, ref = _judged(res.output, x, judged, bm, bn, None if t.swap_ab else t.row_blocks)
        if not out.isnan().any():
            error = relative_error(out, ref)
    return Comparison(res, grid, tiles, error, time.perf_counter() - t0)
