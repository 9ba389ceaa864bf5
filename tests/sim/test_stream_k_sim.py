"""Stream-K (rule 21, ir.Tiling.stream_k, ir.Fixup) on the CPU: the raster's units against a brute-force owner map,
simulated numerics on shapes that are not tile multiples, and planted fixup bugs the simulator must catch."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import warploom
from warploom import checks
from warploom.device import H100_SXM
from warploom.ir import printer
from warploom.ir.raster import cdiv, stream_k_units
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import relative_error
from warploom.sim import FindingKind
from warploom.sim.findings import FindingSink
from warploom.sim.machine import Machine
from warploom.sim.program import CtaProgram, FlagWaitI, Geometry, PartialAddI, PartialStoreI
from warploom.sim.simulate import run_linked
from warploom.spec import GemmSpec


def _covered(units: dict[int, tuple], tiles: int, k_tiles: int) -> dict[int, list[tuple[int, int, int]]]:
    """Each tile's pieces (k_lo, k_hi, pid) in k order, after checking what every stream-K launch must hold: every
    k-block of every tile once, contiguous; a CTA contributes at most one partial, in its first shared unit (one
    workspace slot per CTA); only a CTA's last unit waits; a tile's finisher waits on every other piece."""
    covered: dict[int, list[tuple[int, int, int]]] = {}
    for pid, us in units.items():
        shared = [u for u in us if (u.k_lo, u.k_hi) != (0, k_tiles)]  # after its whole tiles
        assert sum(u.contributor for u in us) <= 1 and all(not u.contributor for u in shared[1:]), \
            "a CTA contributes at most one partial, in its first shared unit (one workspace slot per CTA)"
        assert all(not u.peers for u in us[:-1]), "only a CTA's last unit waits on others"
        for u in us:
            covered.setdefault(u.tile_id, []).append((u.k_lo, u.k_hi or k_tiles, pid))
    assert sorted(covered) == list(range(tiles))
    for tile_id, pieces_of in covered.items():
        pieces_of.sort()
        assert [lo for lo, _, _ in pieces_of] == [0] + [hi for _, hi, _ in pieces_of[:-1]], "contiguous, no overlap"
        assert pieces_of[-1][1] == k_tiles
        first = next(u for u in units[pieces_of[0][2]] if u.tile_id == tile_id)
        assert first.peers == tuple(pid for _, _, pid in pieces_of[1:]), "the finisher waits on every other piece"
    return covered


@pytest.mark.parametrize("m,n,k_tiles,grid,pieces", [
    (1000, 700, 13, 132, 2), (3000, 3000, 47, 132, 4), (384, 752, 83, 72, 4), (130, 272, 13, 24, 4),
    (4100, 4104, 32, 132, 3), (256, 384, 16, 12, 2), (640, 640, 5, 40, 16), (2000, 2112, 8, 132, 3)])
def test_units_cover_every_k_block_once_and_name_their_finisher(m: int, n: int, k_tiles: int, grid: int,
                                                                pieces: int) -> None:
    units = {pid: stream_k_units(pid, m, n, k_tiles, 128, 256, 8, grid, pieces) for pid in range(grid)}
    for pieces_of in _covered(units, cdiv(m, 128) * cdiv(n, 256), k_tiles).values():
        if len(pieces_of) > 1:  # a shared tile of the last wave: at most `pieces` pieces while CTAs are left
            assert len(pieces_of) <= pieces + 1


@pytest.mark.parametrize("m,n,k_tiles,grid", [
    (1000, 700, 13, 20), (3000, 3000, 47, 132), (2000, 2112, 8, 132), (4100, 4104, 32, 60), (1000, 700, 13, 48),
    (384, 752, 83, 72)])
def test_a_whole_wave_joins_the_shared_tiles(m: int, n: int, k_tiles: int, grid: int) -> None:
    """sk_waves=1 (`ir.Tiling.sk_waves`): one whole wave fewer runs data-parallel, its tiles shared with the last
    wave's by every CTA in equal runs of k-blocks; still every k-block of every tile once, one partial per CTA, the
    finisher waiting on the rest; where the tiles fill whole waves (or less than one), nothing changes."""
    bm, bn, pieces = 128, 256, 2
    tiles = cdiv(m, bm) * cdiv(n, bn)
    units = {pid: stream_k_units(pid, m, n, k_tiles, bm, bn, 8, grid, pieces, waves=1) for pid in range(grid)}
    _covered(units, tiles, k_tiles)
    if tiles % grid and tiles > grid:
        shared = tiles % grid + grid  # the partial wave's tiles and the last whole wave's
        for pid, us in units.items():
            dp = list(range(pid, tiles - shared, grid))
            assert [(u.tile_id, u.k_lo, u.k_hi or k_tiles) for u in us[:len(dp)]] == [(t, 0, k_tiles) for t in dp], \
                "the whole waves before the shared tiles, one fewer than without sk_waves"
            assert sum((u.k_hi or k_tiles) - u.k_lo for u in us[len(dp):]) <= -(-shared * k_tiles // grid), \
                "the shared k-blocks in equal runs"
    else:
        assert units == {pid: stream_k_units(pid, m, n, k_tiles, bm, bn, 8, grid, pieces) for pid in range(grid)}


@pytest.mark.parametrize("k_tiles", [2, 3, 5])
def test_a_whole_wave_joins_the_shared_tiles_over_every_small_launch(k_tiles: int) -> None:
    """sk_waves=1 over every grid up to 12 and tile count up to 4 grids + 2 (just over whole waves, under one wave,
    whole waves), few k-blocks so that a CTA's range spans 3+ tiles (a middle one whole, k_lo 0 and k_hi k_tiles):
    every k-block once, one partial per CTA, only a last unit waits, and on exactly the later CTAs' pieces (peers
    above it: no CTA's wait can close a cycle)."""
    for grid in range(1, 13):
        for tiles in range(1, 4 * grid + 3):
            for pieces in range(2, k_tiles + 1):
                units = {pid: stream_k_units(pid, 128 * tiles, 128, k_tiles, 128, 128, 8, grid, pieces, waves=1)
                         for pid in range(grid)}
                _covered(units, tiles, k_tiles)
                assert all(q > pid for pid, us in units.items() for u in us for q in u.peers)
                if tiles % grid == 0 or tiles < grid:
                    assert units == {pid: stream_k_units(pid, 128 * tiles, 128, k_tiles, 128, 128, 8, grid, pieces)
                                     for pid in range(grid)}


def _bf16(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(m * 7 + n + k)
    return torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()


def _kernel(spec: object, pieces: int, **kw: object) -> Kernel:
    plan = plan_schedule(spec, H100_SXM, stream_k=pieces, **kw)  # type: ignore[arg-type]
    return build(spec, H100_SXM, plan)  # type: ignore[arg-type]


@pytest.mark.parametrize("m,n,k,pieces,bn", [(256, 384, 1024, 2, 128), (200, 296, 1000, 3, 128),
                                             (130, 520, 1104, 4, 256)])
def test_bf16_numerics(m: int, n: int, k: int, pieces: int, bn: int) -> None:
    a, b = _bf16(m, n, k)
    kern = _kernel(checks.matmul_spec(a.to("meta"), b.to("meta"), None), pieces, bn=bn)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    res = kern.simulate(a, b, out=out, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


@pytest.mark.parametrize("m,n,k,pieces,bn", [(73, 104, 1024, 4, 64), (130, 200, 1000, 3, 128), (43, 88, 2048, 8, 64),
                                             (100, 136, 960, 3, 128)])
def test_64_row_tiles(m: int, n: int, k: int, pieces: int, bn: int) -> None:
    """Stream-K on one-warpgroup 64-row tiles (forced; rule 25 splits these shapes with a second kernel): clean, right
    against the fp32 product into a NaN-poisoned output, and where every tile is cut in `pieces` equal runs of
    k-blocks, the same bits as split-K in as many ranges (the finisher adds the later pieces in k order, as split-K's
    reduce adds its slabs)."""
    a, b = _bf16(m, n, k)
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    kern = _kernel(spec, pieces, bm=64, bn=bn)
    assert (kern.plan.bm, kern.plan.consumer_partitions, kern.plan.stream_k) == (64, 1, pieces)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    res = kern.simulate(a, b, out=out, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    if cdiv(k, 64) % pieces == 0:
        split = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=64, bn=bn, split_k=pieces))
        assert torch.equal(split.simulate(a, b, record=False).outputs[0], out)


def _fp8_rowwise(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                              GemmSpec]:
    """e4m3 A (M, K) and K-major B, rowwise scales, and the fast-accumulation spec of that call."""
    torch.manual_seed(seed)
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    spec = checks.scaled_mm_spec(a.to("meta"), b.to("meta"), sa.to("meta"), sb.to("meta"), None, torch.bfloat16, True)
    return a, b, sa, sb, spec


def test_fp8_rowwise_on_64_row_tiles() -> None:
    a, b, sa, sb, spec = _fp8_rowwise(100, 208, 2048, 6)
    res = _kernel(spec, 4, bm=64, bn=64).simulate(a, b, sa, sb, record=False)
    assert not res.report.findings, res.report.findings
    assert relative_error(res.outputs[0], (a.float() @ b.float()) * sa * sb) < 1e-3


@pytest.mark.parametrize("m,n,k,grid", [(1000, 696, 1000, 20), (520, 904, 1552, 12)])
def test_bf16_numerics_with_a_whole_wave_shared(m: int, n: int, k: int, grid: int) -> None:
    """sk_waves=1 on a grid smaller than the tiles (the simulator runs every CTA): 2 and 3 whole waves and a partial
    one, the last whole wave shared with it, against the fp32 product into a NaN-poisoned output."""
    a, b = _bf16(m, n, k)
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    plan = dataclasses.replace(plan_schedule(spec, H100_SXM, stream_k=2, bn=128, sk_waves=1), grid=grid)
    assert plan.sk_waves == 1 and "_sk2w1g" in plan.short()
    kern = build(spec, H100_SXM, plan)
    assert "sk_waves=1" in printer.module(kern.module)
    assert "SK_WAVES = gl.constexpr(1)" in kern.source and "sk_tiles + SK_WAVES * grid" in kern.source
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    res = kern.simulate(a, b, out=out, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)


def test_fp8_rowwise_numerics_with_a_whole_wave_shared() -> None:
    a, b, sa, sb, spec = _fp8_rowwise(700, 528, 1552, 4)
    plan = dataclasses.replace(plan_schedule(spec, H100_SXM, stream_k=2, bn=128, sk_waves=1), grid=10)
    res = build(spec, H100_SXM, plan).simulate(a, b, sa, sb, record=False)
    assert not res.report.findings, res.report.findings
    assert relative_error(res.outputs[0], (a.float() @ b.float()) * sa * sb) < 1e-3


def test_sk_waves_refusals() -> None:
    spec = checks.matmul_spec(torch.empty(1000, 1000, device="meta", dtype=torch.bfloat16),
                              torch.empty(1000, 696, device="meta", dtype=torch.bfloat16), None)
    with pytest.raises(warploom.errors.UnsupportedError, match=r"sk_waves=1 \(with stream_k=None\).*Fix: pass"):
        plan_schedule(spec, H100_SXM, sk_waves=1)
    with pytest.raises(warploom.errors.UnsupportedError, match="sk_waves=2"):
        plan_schedule(spec, H100_SXM, stream_k=2, sk_waves=2)
    from warploom.errors import PlanError

    with pytest.raises(PlanError, match="sk_waves"):
        dataclasses.replace(plan_schedule(spec, H100_SXM), stream_k=0, sk_waves=1)


@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_exact", "tensorwise", "rowwise_bias"])
def test_fp8_numerics(recipe: str) -> None:
    m, n, k = 130, 272, 1552
    torch.manual_seed(3)
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = ((torch.rand(()) + 0.5, torch.rand(()) + 0.5) if recipe == "tensorwise"
              else (torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5))
    bias = torch.randn(n).bfloat16() if recipe == "rowwise_bias" else None
    spec = checks.scaled_mm_spec(a.to("meta"), b.to("meta"), sa.to("meta"), sb.to("meta"),
                                 None if bias is None else bias.to("meta"), torch.bfloat16, recipe != "rowwise_exact")
    kern = _kernel(spec, 3)
    res = kern.simulate(a, b, sa, sb, bias, record=False)
    assert not res.report.findings, res.report.findings
    ref = (a.float() @ b.float()) * sa * sb + (bias.float() if bias is not None else 0)
    assert relative_error(res.outputs[0], ref) < 1e-3


@pytest.mark.parametrize("bn", [128, 256])
def test_fused_epilogue_runs_once_on_the_whole_sum(bn: int) -> None:
    """A fused epilogue (a dense operand and a column vector) runs on the finisher's whole sum, never on a partial; its
    dense operand is copied when the epilogue runs (no prefetch at the tile's start, which a contributor would skip)."""
    torch.manual_seed(1)
    m, n, k = 200, 264, 1000
    a, b = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()
    res, bias = torch.randn(m, n).bfloat16(), torch.randn(n).bfloat16()

    def f(acc: torch.Tensor, res: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(acc + bias) + res

    spec = warploom.plan(a.to("meta"), b.to("meta"), epilogue=f, res=res.to("meta"), bias=bias.to("meta")).spec
    kern = _kernel(spec, 3, bn=bn)
    assert not kern.plan.prefetch_operands
    out = kern.simulate(a, b, operands={"res": res, "bias": bias}, record=False)
    assert not out.report.findings, out.report.findings
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float()) + res.float()
    torch.testing.assert_close(out.outputs[0].float(), ref, atol=0.5, rtol=0.02)


def test_blockwise_1x128_128x128() -> None:
    from warploom.reference import dequantized

    torch.manual_seed(0)
    m, n, k = 200, 272, 1536
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = (torch.rand(k // 128, m) + 0.5).t(), torch.rand(k // 128, -(-n // 128)) + 0.5
    spec = checks.scaled_mm_spec(a.to("meta"), b.to("meta"), sa.to("meta"), sb.to("meta"), None, torch.bfloat16,
                                 False)
    res = _kernel(spec, 3).simulate(a, b, sa, sb, record=False)
    assert not res.report.findings, res.report.findings
    da, db = dequantized(a, b, sa, sb)
    assert relative_error(res.outputs[0], da @ db) < 1e-3


def test_refusals_name_the_option() -> None:
    from warploom.device import B200
    from warploom.errors import UnsupportedError

    a, b = _bf16(256, 384, 1024)
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    for kw, needle in (({"pingpong": True}, "ping-pong"), ({"split_k": 2}, "split_k"), ({"bm": 256}, "bm=256"),
                       ({"swap_ab": True}, "swap_ab")):
        with pytest.raises(UnsupportedError, match=needle):
            plan_schedule(spec, H100_SXM, stream_k=2, **kw)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="sm_90a"):
        plan_schedule(spec, B200, stream_k=2)
    with pytest.raises(UnsupportedError, match="2 to 16"):
        plan_schedule(spec, H100_SXM, stream_k=1)


def test_cpu_api_runs_a_stream_k_plan() -> None:
    """The planner takes stream-K for one long-K tile on the H100 (1 tile, 64 k-blocks, cut in pieces); matmul on
    CPU tensors simulates that kernel and returns the product. (B is N-major: with K-major operands rule 23's 64x64
    tiles take this problem.)"""
    a, _ = _bf16(128, 128, 4096)
    b = torch.randn(4096, 128).bfloat16()
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    assert plan_schedule(spec, H100_SXM).stream_k >= 2
    torch.testing.assert_close(warploom.matmul(a, b).float(), a.float() @ b.float(), atol=0.3, rtol=0.02)


# ---------------------------------------------------------------------------------------------------------------
# Planted fixup bugs: each resolved program is edited as a bug in the fixup would write it, then run linked.

_SHAPE = (256, 384, 1024)  # (6 tiles of 128x128 over 12 CTAs: each in 2 pieces of 8 k-blocks)
_SMALL = (128, 128, 256)  # the explorer's: one tile in 2 pieces of 2 k-blocks on 2 CTAs


_SHAPE64 = (128, 192, 1024)  # (6 tiles of 64x64 over 12 CTAs: each in 2 pieces of 8 k-blocks)


def _programs(shape: tuple[int, int, int] = _SHAPE, bm: int = 128) -> tuple[Kernel, list[CtaProgram]]:
    m, n, k = shape
    a, b = _bf16(m, n, k)
    kern = _kernel(checks.matmul_spec(a.to("meta"), b.to("meta"), None), 2, bm=bm, bn=128 if bm == 128 else 64,
                   stages=2)
    grid = kern.module.tiling.grid
    return kern, [CtaProgram.build(kern.module, Geometry.of(kern.module, m, n, k, pid, grid)) for pid in range(grid)]


def _run(progs: list[CtaProgram]) -> set[FindingKind]:
    import random

    sink = FindingSink()
    run_linked([Machine(p, sink) for p in progs], random.Random(0), sink)
    return {f.kind for f in sink.findings()}


def _edit(progs: list[CtaProgram], fn: object) -> list[CtaProgram]:
    """`fn(pid, trace) -> trace` applied to every partition's trace of every CTA."""
    return [dataclasses.replace(p, traces=tuple(fn(p.geo.pid, tr) for tr in p.traces)) for p in progs]  # type: ignore


def _drop_waits(pid: int, tr: tuple) -> tuple:
    return tuple(i for i in tr if not isinstance(i, FlagWaitI))


def _add_twice(pid: int, tr: tuple) -> tuple:
    return tuple(itertools.chain.from_iterable((i, i) if isinstance(i, PartialAddI) else (i,) for i in tr))


def _wrong_owner(pid: int, tr: tuple) -> tuple:
    """A contributor writes the slot of the CTA before it (a wrong owner index): it overwrites a partial no finisher
    has added, and leaves its own slot empty for its finisher."""
    return tuple(dataclasses.replace(i, flag=(max(0, i.flag[0] - 1), i.flag[1])) if isinstance(i, PartialStoreI)
                 else i for i in tr)


def _skip_piece(pid: int, tr: tuple) -> tuple:
    return tuple(i for i in tr if not isinstance(i, (FlagWaitI, PartialAddI)))


def _adds_before_waits(pid: int, tr: tuple) -> tuple:
    """The finisher's batched gather with its two halves swapped: every partial added before any flag is acquired."""
    adds = [i for i in tr if isinstance(i, PartialAddI)]
    if not adds:
        return tr
    at = next(n for n, i in enumerate(tr) if isinstance(i, FlagWaitI))
    rest = [i for i in tr[at:] if not isinstance(i, PartialAddI)]
    return (*tr[:at], *adds, *rest)


# (mutant, findings that must all appear, findings of which one must appear)
MUTANTS = [
    (_drop_waits, {FindingKind.SK_UNSYNCED}, set()),
    (_add_twice, {FindingKind.SK_WRONG_PARTIAL}, set()),
    (_wrong_owner, set(), {FindingKind.SK_SLOT_REUSED, FindingKind.SK_UNSYNCED, FindingKind.DEADLOCK}),
    (_skip_piece, {FindingKind.SK_LOST_PARTIAL, FindingKind.ACC_INCOMPLETE}, set()),
    (_adds_before_waits, {FindingKind.SK_UNSYNCED}, set()),
]


@pytest.mark.parametrize("bm", [128, 64])
def test_clean(bm: int) -> None:
    assert _run(_programs(_SHAPE if bm == 128 else _SHAPE64, bm)[1]) == set()


@pytest.mark.parametrize("bm", [128, 64])
@pytest.mark.parametrize("mutant,every,some", MUTANTS, ids=[m[0].__name__ for m in MUTANTS])
def test_simulate_catches(mutant: object, every: set, some: set, bm: int) -> None:
    found = _run(_edit(_programs(_SHAPE if bm == 128 else _SHAPE64, bm)[1], mutant))
    assert every <= found and (not some or found & some), found


def test_the_finisher_acquires_every_flag_before_it_adds() -> None:
    """The simulated finisher as the backend emits it (`_sk_gather`): all of its FlagWaits, then its PartialAdds in k
    order, so one round trip covers every piece's flag; a finisher of several pieces exists in the launch."""
    m, n, k = 128, 128, 1024
    kern = _kernel(checks.matmul_spec(*(t.to("meta") for t in _bf16(m, n, k)), None), 4, bm=64, bn=64)
    grid = kern.module.tiling.grid
    progs = [CtaProgram.build(kern.module, Geometry.of(kern.module, m, n, k, pid, grid)) for pid in range(grid)]
    finishers = 0
    for p in progs:
        for tr in p.traces:
            kinds = [type(i) for i in tr if isinstance(i, (FlagWaitI, PartialAddI))]
            waits = kinds.count(FlagWaitI)
            assert kinds == [FlagWaitI] * waits + [PartialAddI] * waits, kinds
            finishers += waits > 0
            adds = [i.flag[0] for i in tr if isinstance(i, PartialAddI)]
            assert adds == sorted(adds), "partials added in k order (the CTAs after the finisher, in turn)"
    assert finishers == 4  # (4 tiles, each with 3 later pieces)
    assert _run(progs) == set()


def _explored(mutant: object | None, bm: int = 128) -> set[FindingKind]:
    from warploom.sim.explore import explore

    shape = _SMALL if bm == 128 else (64, 64, 256)
    kern = _programs(shape, bm)[0]

    def edit(prog: CtaProgram) -> CtaProgram:
        return _edit([prog], mutant)[0]

    report = explore(kern.module, *shape, mutate=None if mutant is None else edit, max_states=100_000)
    assert not report.bound_hit
    return report.kinds()


@pytest.mark.parametrize("bm", [128, 64])
def test_explore_clean(bm: int) -> None:
    assert _explored(None, bm) == set()


@pytest.mark.parametrize("bm", [128, 64])
@pytest.mark.parametrize("mutant,every,some", MUTANTS, ids=[m[0].__name__ for m in MUTANTS])
def test_explore_catches(mutant: object, every: set, some: set, bm: int) -> None:
    found = _explored(mutant, bm)
    assert every <= found and (not some or found & some), found


def test_missing_fixup_op_is_refused_by_the_verifier() -> None:
    from warploom.errors import VerificationError
    from warploom.ir import nodes as ir
    from warploom.ir import verify

    kern = _programs()[0]
    m = kern.module
    part = m.partitions[0]
    wait, tiles, *rest = part.body  # (the grid-dependency wait first: passes/launch.py)
    assert isinstance(wait, ir.GridDependencyWait) and isinstance(tiles, ir.Loop)
    stripped = dataclasses.replace(tiles, body=tuple(s for s in tiles.body if not isinstance(s, ir.Fixup)))
    with pytest.raises(VerificationError, match="without a fixup"):
        verify.check(m.with_partition(dataclasses.replace(part, body=(wait, stripped, *rest))), "test")


def test_more_pieces_than_k_blocks_is_refused() -> None:
    """A tile of 2 k-blocks cut into 8 pieces would leave CTAs with no k-block: their finisher waits for a partial that
    is never stored (a GPU hang, and the simulator's DEADLOCK). The planner refuses it by name; the verifier refuses
    a module that carries it; pieces == k-blocks still runs clean."""
    from warploom.errors import UnsupportedError, VerificationError
    from warploom.ir import verify

    a, b = _bf16(122, 88, 120)
    spec = checks.matmul_spec(a.to("meta"), b.to("meta"), None)
    with pytest.raises(UnsupportedError, match=r"stream_k=8 .*2 k-block.*stream_k between 2 and 2"):
        plan_schedule(spec, H100_SXM, stream_k=8)
    kern = _kernel(spec, 2)
    out = torch.full((122, 88), float("nan"), dtype=torch.bfloat16)
    res = kern.simulate(a, b, out=out, record=False)
    assert not res.report.findings, res.report.findings
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    m = kern.module
    forged = dataclasses.replace(m, tiling=dataclasses.replace(m.tiling, stream_k=8))
    with pytest.raises(VerificationError, match="more pieces than a tile's 2 k-blocks"):
        verify.check(forged, "test")
    one = checks.matmul_spec(torch.empty(122, 64, device="meta", dtype=torch.bfloat16),
                             torch.empty(64, 88, device="meta", dtype=torch.bfloat16), None)
    with pytest.raises(UnsupportedError, match=r"stream_k=0 \(whole tiles\)"):
        plan_schedule(one, H100_SXM, stream_k=2)


@pytest.mark.parametrize("m,n,k", [(2848, 736, 64), (384, 752, 192), (656, 8048, 128), (268, 112, 208),
                                   (1000, 4000, 144)])
def test_planner_never_cuts_a_tile_finer_than_its_k_blocks(m: int, n: int, k: int) -> None:
    for dtype, bk in ((torch.bfloat16, 64), (torch.float8_e4m3fn, 128)):
        a = torch.empty(m, k, device="meta", dtype=dtype)
        b = torch.empty(n, k, device="meta", dtype=dtype).t()
        spec = (checks.matmul_spec(a, b, None) if bk == 64 else checks.scaled_mm_spec(
            a, b, torch.empty(m, 1, device="meta"), torch.empty(1, n, device="meta"), None, torch.bfloat16, True))
        assert plan_schedule(spec, H100_SXM).stream_k <= -(-k // bk)
