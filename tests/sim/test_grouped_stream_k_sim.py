"""Stream-K over a grouped GEMM's tiles (ir.Tiling.stream_k with grouping: M-grouped and masked) on the CPU: the
units (`ir.raster.group_stream_k_units`, the kernel's sk_range over group_count, each unit placed by group_tile)
against brute force; numerics against fp32 references on ragged routings (an empty expert, experts smaller than a
tile) whose last round is empty, partly shared, shared by every CTA, or past the grid x pieces limit, at grids the
test picks (the planner's is the SM count); bitwise repeatable; planted bugs (a piece read from the wrong expert,
a finisher adding a partial before acquiring its flag) caught; refusals named."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from grouped_cases import valid_rows
from test_grouped_blockwise_sim import _operands, reference  # (pytest puts this folder on sys.path)

from warploom import H100_SXM, Accumulation, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.backends.gluon_api import emitting_for
from warploom.errors import UnsupportedError, VerificationError
from warploom.ir import verify
from warploom.ir.raster import GroupScan, cdiv, group_bounds, group_stream_k_units, group_tiles
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.findings import FindingKind, FindingSink
from warploom.sim.grouped import reference_grouped, simulate_grouped
from warploom.sim.machine import Machine
from warploom.sim.program import CtaProgram, FlagWaitI, Geometry, PartialAddI
from warploom.sim.simulate import run_linked

N, K = 256, 424  # two 128-wide tile columns; 7 k-blocks of 64, the last partial


def _offs(counts: list[int]) -> torch.Tensor:
    return torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)


# counts -> m-tiles of 128 rows: 0, 2, 1, 2, 1 (45 rows: smaller than a tile), 3 = 9, times 2 columns: 18 tiles
COUNTS = [0, 130, 70, 250, 45, 300]


def _kernel(spec: GemmSpec, pieces: int, grid: int, bm: int = 128, bn: int = 128) -> Kernel:
    plan = plan_schedule(spec, H100_SXM, bm=bm, bn=bn, stream_k=pieces)
    assert plan.stream_k == pieces and plan.grid == H100_SXM.sm_count
    return build(spec, H100_SXM, dataclasses.replace(plan, grid=grid))  # (a small grid: every fullness at 18 tiles)


@pytest.mark.parametrize("seed", range(40))
def test_units_cover_each_group_tile_once_and_sit_where_whole_tiles_do(seed: int) -> None:
    """Every tile of every group is covered by contiguous pieces, k-block 0 to the end, each placed as the
    whole-tile launch places that tile id (group, origin, row end); a CTA contributes at most one partial (its first
    shared unit: one workspace slot a CTA whatever the tile count) and only its last unit waits on others, the
    finisher on exactly the CTAs holding the rest of its tile."""
    rng = random.Random(seed)
    groups, k_tiles = rng.randint(1, 9), rng.randint(4, 20)
    counts = [rng.choice([0, rng.randint(1, 60), rng.randint(1, 500)]) for _ in range(groups)]
    m = sum(counts) + rng.randint(0, 100)
    bounds = group_bounds(Grouping.OFFSETS, _offs(counts).tolist(), m)
    n, bm, bn = rng.choice([128, 300, 1000]), 128, rng.choice([128, 256])
    grid, pieces = rng.randint(1, 40), rng.randint(2, 4)
    scan = GroupScan.of(bounds, n, bm, bn, 8)
    assert scan.count == sum(cdiv(c, bm) for c in counts) * cdiv(n, bn)
    whole = {t.tile_id: t for pid in range(grid) for t in group_tiles(pid, bounds, n, bm, bn, 8, grid)}
    covered: dict[int, list[tuple[int, int, int]]] = {}
    for pid in range(grid):
        us = group_stream_k_units(pid, bounds, n, k_tiles, bm, bn, 8, grid, pieces)
        shared = [u for u in us if (u.k_lo, u.k_hi) != (0, k_tiles)]
        assert sum(u.contributor for u in us) <= 1 and all(not u.contributor for u in shared[1:])
        assert all(not u.peers for u in us[:-1])
        for u in us:
            w = whole[u.tile_id]
            assert (u.group, u.off_m, u.off_n, u.row_end) == (w.group, w.off_m, w.off_n, w.row_end)
            covered.setdefault(u.tile_id, []).append((u.k_lo, u.k_hi or k_tiles, pid))
    assert sorted(covered) == list(range(scan.count))
    for tile_id, ps in covered.items():
        ps.sort()
        assert [lo for lo, _, _ in ps] == [0] + [hi for _, hi, _ in ps[:-1]] and ps[-1][1] == k_tiles
        first = next(u for u in group_stream_k_units(ps[0][2], bounds, n, k_tiles, bm, bn, 8, grid, pieces)
                     if u.tile_id == tile_id)
        assert first.peers == tuple(pid for _, _, pid in ps[1:])


# (grid, pieces, shared tiles): 18 tiles -> the last round's shared tiles and the CTAs sharing them
FULLNESS = [
    (6, 2, 0),    # 3 whole rounds, nothing shared
    (8, 3, 2),    # 2 whole rounds, 2 tiles over 6 of 8 CTAs
    (7, 2, 4),    # 2 whole rounds, 4 tiles x 2 pieces > 7 CTAs: past the grid x pieces limit, every CTA shares
    (5, 4, 3),    # 3 whole rounds, 3 tiles x 4 pieces > 5 CTAs
    (24, 2, 18),  # fewer tiles than CTAs: no whole round, 18 shared by 24 CTAs (some tiles in 1 piece, some in 2)
    (9, 2, 0),    # 2 whole rounds, nothing shared
]


@pytest.mark.parametrize("grid,pieces,shared", FULLNESS)
def test_bf16_offsets_numerics(grid: int, pieces: int, shared: int) -> None:
    m = sum(COUNTS) + 40  # (rows past offs[-1]: no expert's, never written)
    offs = _offs(COUNTS)
    spec = GemmSpec(m, N, K, grouping=Grouping.OFFSETS, groups=len(COUNTS))
    mod = _kernel(spec, pieces, grid).module
    torch.manual_seed(grid)
    a = torch.randn(m, K).bfloat16()
    b = torch.randn(len(COUNTS), N, K).bfloat16().transpose(-2, -1)
    res = simulate_grouped(mod, a, b, offs, seed=grid).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    rows = valid_rows(bounds, m)
    ref = reference_grouped(a, b, bounds)
    torch.testing.assert_close(res.output.float()[rows], ref[rows], atol=0.15, rtol=0.02)
    assert res.output[~rows].isnan().all()
    again = simulate_grouped(mod, a, b, offs, seed=grid + 1).raise_for_findings()  # another schedule
    assert torch.equal(again.output[rows], res.output[rows]), "the fixup's order is fixed: the same bits"
    units = [u for pid in range(grid) for u in Geometry.of(mod, m, N, K, pid, grid, groups=bounds).tiles]
    assert len({u.tile_id for u in units if u.k_lo or u.k_hi != cdiv(K, 64)}) == len(
        {u.tile_id for u in units if u.contributor}) <= shared  # (a tile in pieces has one contributor at least)
    assert len({u.tile_id for u in units}) == 18 and len(units) - 18 == sum(
        len(u.peers) for u in units), "each piece beyond a tile's first is one finisher's peer"
    assert 18 % grid == shared


def test_no_tiles_at_all_and_a_single_small_expert() -> None:
    """Every expert empty: no unit anywhere, C untouched. One expert of 5 rows: its 2 tiles shared by 6 CTAs."""
    spec = GemmSpec(200, N, K, grouping=Grouping.OFFSETS, groups=4)
    mod = _kernel(spec, 3, 6).module
    a = torch.randn(200, K).bfloat16()
    b = torch.randn(4, N, K).bfloat16().transpose(-2, -1)
    res = simulate_grouped(mod, a, b, _offs([0, 0, 0, 0])).raise_for_findings()
    assert res.output.isnan().all()
    res = simulate_grouped(mod, a, b, _offs([0, 0, 5, 0])).raise_for_findings()
    torch.testing.assert_close(res.output[:5].float(), a[:5].float() @ b[2].float(), atol=0.15, rtol=0.02)
    assert res.output[5:].isnan().all()


@pytest.mark.parametrize("bm", [128, 64])
def test_masked_layout(bm: int) -> None:
    """128-row tiles: 2 + 1 + 2 m-tiles x 2 columns = 10 tiles (5 CTAs: 2 rounds; 7 CTAs: 3 shared). 64-row ones (the
    masked decode tile, session 42): 3 + 1 + 3 m-tiles x 2 = 14 (5 CTAs: 2 whole rounds and 4 shared; 7: 2 rounds)."""
    groups, cap = 4, 192
    counts = torch.tensor([0, 192, 33, 140], dtype=torch.int32)  # (an empty expert, a full one, ragged ones)
    spec = GemmSpec(groups * cap, N, K, grouping=Grouping.MASKED, groups=groups)
    mod = _kernel(spec, 2, 5, bm=bm).module
    mod7 = _kernel(spec, 3, 7, bm=bm).module
    torch.manual_seed(5)
    a = torch.randn(groups, cap, K).bfloat16()
    w = torch.randn(groups, N, K).bfloat16()
    for module in (mod, mod7):
        res = simulate_grouped(module, a.reshape(groups * cap, K), w.transpose(-2, -1), counts).raise_for_findings()
        out = res.output.reshape(groups, cap, N)
        for g in range(groups):
            c = int(counts[g])
            torch.testing.assert_close(out[g, :c].float(), a[g, :c].float() @ w[g].float().t(), atol=0.15,
                                       rtol=0.02)
            assert out[g, c:].isnan().all()


@pytest.mark.parametrize("acc", [Accumulation.NATIVE, Accumulation.PROMOTED])
def test_fp8_rowwise_per_expert_scales(acc: Accumulation) -> None:
    """scale_b is the tile's group's row: a finisher applies it once, to the whole sum of every piece."""
    m = sum(COUNTS)
    offs = _offs(COUNTS)
    spec = GemmSpec(m, N, 512, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=acc,
                    grouping=Grouping.OFFSETS, groups=len(COUNTS))
    mod = _kernel(spec, 2, 7).module
    torch.manual_seed(2)
    a = (torch.randn(m, 512) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(len(COUNTS), N, 512).to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(m) + 0.5, torch.rand(len(COUNTS), N) + 0.5
    res = simulate_grouped(mod, a, b, offs, sa, sb).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    rows = valid_rows(bounds, m)
    ref = reference_grouped(a, b, bounds, sa, sb)
    assert ((res.output.float()[rows] - ref[rows]).norm() / ref[rows].norm()).item() < 1e-2


def test_blockwise_fp8_scale_b_of_the_units_expert() -> None:
    """Blockwise 1x128 x 128x128 (DeepSeek-V3's MoE recipe): every piece promotes its k-blocks with its expert's
    scale_b block (each expert's at its own power of two) and scale_a's rows; the finisher adds the promoted sums."""
    counts = [0, 130, 70, 250, 45, 300]
    m, k = sum(counts), 3 * 128 + 48  # (3 whole scale blocks and a partial one: 4 k-blocks of 128)
    offs = _offs(counts)
    spec = GemmSpec(m, N, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                    accumulation=Accumulation.PROMOTED, grouping=Grouping.OFFSETS, groups=len(counts))
    mod = _kernel(spec, 3, 8).module  # (18 tiles: 2 whole rounds, 2 tiles in 3 pieces)
    a, b, sa, sb = _operands(4, len(counts), m, N, k)
    res = simulate_grouped(mod, a, b, offs, sa, sb).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    rows = valid_rows(bounds, m)
    ref = reference(a, b, sa, sb, bounds)
    assert ((res.output.double()[rows] - ref[rows]).norm() / ref[rows].norm()).item() < 1e-2


@pytest.mark.parametrize("seed", range(2))
def test_rule22_default_plan_over_changing_routings(seed: int) -> None:
    """The planner's own stream-K plan (rule 22's default at 132 CTAs, not forced): 4 experts over 150 row tiles and
    two 256-wide columns (N = 300, the last ragged; K = 200, 4 k-blocks, the last partial) expect 304 tiles, 2.3
    rounds, so the last is shared in 2 pieces. Two random routings, one with an empty expert, through the same
    module (a CUDA graph replayed after the offsets changed in place): each against fp32, the launch's flags all
    consumed (no lost or unsynced partial)."""
    m, n, k, groups = 128 * 150, 300, 200, 4
    spec = GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=groups)
    plan = plan_schedule(spec, H100_SXM)
    assert (plan.bm, plan.bn, plan.stream_k, plan.grid) == (128, 256, 2, H100_SXM.sm_count)
    mod = build(spec, H100_SXM).module
    rng = random.Random(seed)
    torch.manual_seed(seed)
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(groups, n, k).bfloat16().transpose(-2, -1)
    for empty in (rng.randrange(groups), None):
        cuts = sorted(rng.randrange(m - 500, m + 1) if g == groups - 1 else rng.randrange(m) for g in range(groups))
        counts = [hi - lo for lo, hi in zip([0, *cuts[:-1]], cuts, strict=True)]
        if empty is not None:
            counts[(empty + 1) % groups] += counts[empty]
            counts[empty] = 0
        offs = _offs(counts)
        bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
        scan = GroupScan.of(bounds, n, 128, 256, 8)
        assert scan.count % H100_SXM.sm_count, "a partial last round: some tiles in pieces"
        res = simulate_grouped(mod, a, b, offs, seed=seed).raise_for_findings()
        rows = valid_rows(bounds, m)
        ref = reference_grouped(a, b, bounds)
        torch.testing.assert_close(res.output.float()[rows], ref[rows], atol=0.15, rtol=0.02)
        assert res.output[~rows].isnan().all()


# ---- planted bugs -------------------------------------------------------------------------------------------------

def _bug_setup() -> tuple[Kernel, torch.Tensor, torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...], int]:
    m = sum(COUNTS)
    offs = _offs(COUNTS)
    spec = GemmSpec(m, N, K, grouping=Grouping.OFFSETS, groups=len(COUNTS))
    kern = _kernel(spec, 2, 7)  # (4 shared tiles over all 7 CTAs: contributors and finishers)
    torch.manual_seed(9)
    a = torch.randn(m, K).bfloat16()
    b = torch.randn(len(COUNTS), N, K).bfloat16().transpose(-2, -1)
    return kern, a, b, offs, group_bounds(Grouping.OFFSETS, offs.tolist(), m), m


def test_planted_piece_of_the_wrong_expert_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A contributor's piece placed in the next expert (as a unit loop that kept the dense tile_coords, or a scan
    that counted its group from the wrong tile id, would): its partial is the next expert's weights' product, and
    the finisher's sum is wrong where the clean launch's is right."""
    kern, a, b, offs, bounds, m = _bug_setup()
    rows = valid_rows(bounds, m)
    ref = reference_grouped(a, b, bounds)
    clean = simulate_grouped(kern.module, a, b, offs).raise_for_findings()
    torch.testing.assert_close(clean.output.float()[rows], ref[rows], atol=0.15, rtol=0.02)
    real = program.group_stream_k_units

    def units(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return tuple(dataclasses.replace(u, group=(u.group + 1) % len(COUNTS)) if u.contributor else u
                     for u in real(*args, **kwargs))

    monkeypatch.setattr(program, "group_stream_k_units", units)
    res = simulate_grouped(kern.module, a, b, offs)
    assert not torch.allclose(res.output.float()[rows], ref[rows], atol=0.5, rtol=0.05)


def _linked(kern: Kernel, bounds: tuple[tuple[int, int], ...], m: int, edit: object = None) -> set[FindingKind]:
    grid = kern.module.tiling.grid
    progs = [CtaProgram.build(kern.module, Geometry.of(kern.module, m, N, K, pid, grid, groups=bounds))
             for pid in range(grid)]
    if edit is not None:
        progs = [dataclasses.replace(p, traces=tuple(edit(tr) for tr in p.traces)) for p in progs]  # type: ignore
    sink = FindingSink()
    run_linked([Machine(p, sink) for p in progs], random.Random(0), sink)
    return {f.kind for f in sink.findings()}


def _add_before_acquire(tr: tuple) -> tuple:
    """The finisher reads each later piece's partial, then waits for its flag (the two lines swapped)."""
    out = list(tr)
    for i in range(len(out) - 1):
        if isinstance(out[i], FlagWaitI) and isinstance(out[i + 1], PartialAddI):
            out[i], out[i + 1] = out[i + 1], out[i]
    return tuple(out)


def test_planted_partial_read_before_its_flag_is_caught() -> None:
    kern, _, _, _, bounds, m = _bug_setup()
    assert _linked(kern, bounds, m) == set()
    found = _linked(kern, bounds, m, _add_before_acquire)
    assert FindingKind.SK_UNSYNCED in found, found


def test_planted_finisher_skipping_a_piece_is_caught() -> None:
    kern, _, _, _, bounds, m = _bug_setup()
    found = _linked(kern, bounds, m, lambda tr: tuple(i for i in tr if not isinstance(i, (FlagWaitI, PartialAddI))))
    assert {FindingKind.SK_LOST_PARTIAL, FindingKind.ACC_INCOMPLETE} <= found, found


# ---- what is refused ----------------------------------------------------------------------------------------------

def test_refusals_name_the_option_and_the_fix() -> None:
    spec = GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)
    with pytest.raises(UnsupportedError, match=r"stream_k=1: expected .* 2 to 16"):
        plan_schedule(spec, H100_SXM, stream_k=1)
    with pytest.raises(UnsupportedError, match=r"stream_k=8 .*2 k-block.*Fix: pass stream_k between 2 and 2"):
        plan_schedule(GemmSpec(8192, 4096, 128, grouping=Grouping.OFFSETS, groups=8), H100_SXM, stream_k=8)
    with pytest.raises(UnsupportedError, match=r"cannot take pingpong.*Fix: drop them"):
        plan_schedule(spec, H100_SXM, stream_k=2, pingpong=True)
    k_spec = GemmSpec(2048, 4096, 65536, grouping=Grouping.K_OFFSETS, groups=8)
    with pytest.raises(UnsupportedError, match=r"stream_k=2 .*K-grouped.*Fix: drop stream_k"):
        plan_schedule(k_spec, H100_SXM, stream_k=2)
    # fp8 stream-K keeps 128-wide tiles (its 128x256 fixup spilled under Triton 3.9); bf16 and a forced bn keep theirs
    fp8 = GemmSpec(8192, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                   grouping=Grouping.OFFSETS, groups=8)
    assert plan_schedule(spec, H100_SXM, stream_k=0).stream_k == 0, "stream_k=0 keeps whole tiles"
    with emitting_for("3.9"):  # (under 3.6 rule 22 shares its last round: tests/unit/test_grouped_checks.py)
        assert plan_schedule(fp8, H100_SXM).stream_k == 0, "fp8 shares no last round unless stream-K is forced"
    assert (plan_schedule(fp8, H100_SXM).bn, plan_schedule(fp8, H100_SXM, stream_k=2).bn) == (256, 128)
    assert plan_schedule(fp8, H100_SXM, stream_k=2, bn=256).bn == 256
    assert plan_schedule(spec, H100_SXM, stream_k=2).bn == 256


def test_verifier_refuses_stream_k_in_a_k_grouped_module_only() -> None:
    k_mod = build(GemmSpec(2048, 4096, 65536, grouping=Grouping.K_OFFSETS, groups=8), H100_SXM).module
    forged = dataclasses.replace(k_mod, tiling=dataclasses.replace(k_mod.tiling, stream_k=2))
    with pytest.raises(VerificationError, match="stream-K in a K-grouped module"):
        verify.check(forged, "test")
    spec = GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)
    mod = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, stream_k=2)).module
    verify.check(mod, "test")  # (M-grouped stream-K verifies)
    assert not [e for e in verify.structural(mod) if "stream" in e or "grouping" in e]


def test_sweep_variant_builds_the_forced_plan() -> None:
    """scripts/sweep_grouped.py replaces Plan fields after planning: {"stream_k": 2} there is the plan
    plan_schedule(stream_k=2) gives (so the measured kernel is the tested one)."""
    spec = GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)
    for pieces in (2, 4):
        swept = dataclasses.replace(plan_schedule(spec, H100_SXM), stream_k=pieces)
        assert swept == plan_schedule(spec, H100_SXM, stream_k=pieces)
        assert build(spec, H100_SXM, swept).module.tiling.stream_k == pieces
