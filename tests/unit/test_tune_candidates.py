"""The autotuner's candidates and cost model: what is tried, what is cut and why (no GPU)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Plan, ScaleRecipe, UnsupportedError
from warploom.backends.gluon_api import emitting_for
from warploom.epilogue import graph as eg
from warploom.planner import is_decode, max_stages, plan_schedule
from warploom.tune.candidates import SearchSpace, candidates, distance, feasible, replan, same_order
from warploom.tune.cost import consumer_registers, estimate

E4, BF16, FP32 = DType.E4M3, DType.BF16, DType.FP32


def fp8(m: int, n: int, k: int, *, scale: ScaleRecipe = ScaleRecipe.ROWWISE, promoted: bool = False,
        out: DType = BF16, bias: DType | None = None) -> GemmSpec:
    acc = Accumulation.PROMOTED if promoted else Accumulation.NATIVE
    return GemmSpec(m, n, k, E4, E4, out, BLayout.K_MAJOR, scale, acc, bias)


GELU = eg.EpilogueGraph((eg.Acc(), eg.Unary(eg.UnaryOp.GELU_TANH, 0)), (eg.Output(1),))

SPECS = [
    GemmSpec(4096, 4096, 4096),
    GemmSpec(1024, 1024, 1024),
    GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
    GemmSpec(1, 4096, 4096, DType.FP16, DType.FP16, FP32),
    fp8(4096, 4096, 4096),
    fp8(4096, 4096, 4096, promoted=True, bias=BF16),
    fp8(4096, 4096, 4096, scale=ScaleRecipe.TENSORWISE, promoted=True, out=FP32, bias=FP32),
    fp8(64, 7168, 16384),
    fp8(4097, 272, 8192, bias=BF16),
    GemmSpec(2048, 2048, 2048, epilogue=GELU),
]
ids = [s.short() for s in SPECS]


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_the_planners_default_comes_first(spec: GemmSpec) -> None:
    for limit in (1, 3, 8):
        cands = candidates(spec, H100_SXM, limit=limit)
        assert cands[0].plan == plan_schedule(spec, H100_SXM)
        assert cands[0].distance == 0
        assert 1 <= len(cands) <= limit
    assert len(candidates(spec, H100_SXM, limit=1)) == 1


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_every_candidate_is_distinct_buildable_and_fits(spec: GemmSpec) -> None:
    cands = candidates(spec, H100_SXM, limit=8)
    plans = [c.plan for c in cands]
    assert len(set(plans)) == len(plans)
    assert len({same_order(spec, p) for p in plans}) == len(plans)  # no two walk the same tiles in the same order
    best = min(c.estimate.time for c in cands)
    for c in cands:
        assert replan(spec, H100_SXM, c.plan) == c.plan  # exactly what the planner builds when forced
        assert c.estimate == estimate(spec, H100_SXM, c.plan)
        assert c.distance == distance(c.plan, cands[0].plan)
        assert c.estimate.smem_bytes <= H100_SXM.smem_per_block
        planned = spec.swapped() if c.plan.swap_ab else spec  # (a swapped plan's depth is its swapped problem's)
        assert 2 <= c.plan.stages <= max_stages(planned, H100_SXM, c.plan.bm, c.plan.bn, c.plan.bk)
        if c.distance:
            assert c.estimate.fits, c.estimate.why_not()
            assert c.estimate.time <= 1.3 * best or is_decode(spec)  # (decode: no wave cut, module docstring)
    # The first of each other schedule form (ping-pong, a cluster), then the rest by distance from the default and
    # estimated time.
    forms, firsts = {(cands[0].plan.pingpong, cands[0].plan.cluster)}, 0
    for c in cands[1:]:
        if (c.plan.pingpong, c.plan.cluster) not in forms:
            forms.add((c.plan.pingpong, c.plan.cluster))
            firsts += 1
    assert all((c.plan.pingpong, c.plan.cluster) != (cands[0].plan.pingpong, cands[0].plan.cluster)
               for c in cands[1:1 + firsts])
    keys = [(c.distance, c.estimate.time) for c in cands[1 + firsts:]]
    assert keys == sorted(keys)


@pytest.mark.parametrize("spec", SPECS, ids=ids)
def test_the_planners_defaults_fit_the_cost_model(spec: GemmSpec) -> None:
    # The register constants were set so that no plan the planner picks by itself counts as spilling.
    est = estimate(spec, H100_SXM, plan_schedule(spec, H100_SXM))
    assert est.fits, est.why_not()


def _forced(spec: GemmSpec, **kw: Any) -> Plan:
    """A plan built by hand, bypassing the planner's refusals, to ask the cost model about it."""
    base = plan_schedule(spec, H100_SXM, bn=128)
    return dataclasses.replace(base, **kw)


@pytest.mark.parametrize(("spec", "plan_kw", "why"), [
    # A 64x256 partial beside a 64x256 accumulator: 256 registers (planner step 8).
    (fp8(4096, 4096, 4096, promoted=True), {"bn": 256, "partial_blocks": 1, "epilogue_subtiles": 2,
                                                 "stages": 3}, "registers"),
    # 256-wide rowwise scale_b and bias vectors beside the accumulator: ptxas spilled 272 bytes.
    (fp8(4096, 4096, 4096, bias=BF16), {"bn": 256, "epilogue_subtiles": 2, "stages": 3}, "registers"),
    # A fused epilogue beside a 64x256 accumulator in halves: ptxas spilled 2.4 KB; in quarters 628-872 bytes
    # (planner rule 9 takes 8 blocks).
    (GemmSpec(2048, 2048, 2048, epilogue=GELU), {"bn": 256, "epilogue_subtiles": 2, "stages": 3}, "registers"),
    (GemmSpec(2048, 2048, 2048, epilogue=GELU), {"bn": 256, "epilogue_subtiles": 4, "stages": 3}, "registers"),
    # Rule 9's 8-block epilogue unrolled in two consumer partitions: 233 against 132 us (instruction cache).
    (GemmSpec(2048, 2048, 2048, epilogue=GELU), {"bn": 256, "epilogue_subtiles": 8, "stages": 3,
                                                  "consumer_partitions": 2, "hoist_rows": False},
     "instruction cache"),
    # Seven 48 KiB stages.
    (GemmSpec(4096, 4096, 4096), {"bn": 256, "stages": 7, "epilogue_subtiles": 2}, "shared memory"),
])
def test_the_cost_model_rejects_what_the_planner_measured_to_fail(spec: GemmSpec, plan_kw: dict[str, Any],
                                                                  why: str) -> None:
    est = estimate(spec, H100_SXM, _forced(spec, **plan_kw))
    assert not est.fits
    assert why in (est.why_not() or "")


def test_register_estimates_by_hand() -> None:
    bf16 = GemmSpec(4096, 4096, 4096)
    # 64x256 fp32 accumulator over 128 threads = 128, plus 40 fixed.
    assert consumer_registers(bf16, plan_schedule(bf16, H100_SXM, bn=256)) == 168
    assert consumer_registers(bf16, plan_schedule(bf16, H100_SXM, bn=128)) == 104
    # Promoted in two column blocks: + a 64x128 partial (64); rowwise scale_b + bias on 128 columns: 64, not both.
    spec = fp8(4096, 4096, 4096, promoted=True, bias=BF16)
    assert consumer_registers(spec, plan_schedule(spec, H100_SXM, bn=256, partial_blocks=2)) == 128 + 64 + 40


def test_rule9_plans_fit_and_their_smem_is_what_the_module_declares() -> None:
    from warploom.kernel import build

    spec = GemmSpec(2048, 2048, 2048, epilogue=GELU)
    plan = plan_schedule(spec, H100_SXM)
    assert (plan.bn, plan.epilogue_subtiles) == (256, 8)
    est = estimate(spec, H100_SXM, plan)
    assert est.fits, est.why_not()
    assert consumer_registers(spec, plan) == 128 + 2 * 64 * 32 // 128 + 40
    # The tuner never offers the two-partition copy of it.
    assert all(c.plan.consumer_partitions == 1 for c in candidates(spec, H100_SXM, limit=16) if c.plan.bn == 256)
    assert any(c.plan.bn == 256 for c in candidates(spec, H100_SXM, limit=16))
    # Forced slots count: 4 staging slots of 128 x 32 bf16 (the plan's own, not what the planner would pick).
    forced = dataclasses.replace(plan, staging_slots=4, stages=3)
    smem = estimate(spec, H100_SXM, forced).smem_bytes
    assert smem == 3 * 48 * 1024 + 4 * 128 * 32 * 2 + 1024  # stages, slots, the planner's 1 KiB reserve
    module = build(spec, H100_SXM, forced).module
    assert sum(b.bytes for b in module.buffers) == 4 * 128 * 32 * 2 and module.smem_bytes <= smem


def test_waves_and_wave_efficiency() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    est = estimate(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=256))
    assert (est.tiles, est.waves) == (32 * 16, 4)  # 512 tiles over 132 SMs
    assert est.wave_efficiency == pytest.approx(512 / 528)
    one = estimate(GemmSpec(128, 128, 64), H100_SXM, plan_schedule(GemmSpec(128, 128, 64), H100_SXM, bn=128))
    assert (one.tiles, one.waves, one.wave_efficiency) == (1, 1, pytest.approx(1 / 132))


def test_a_half_empty_wave_brings_in_smaller_tiles() -> None:
    # 1024^3: the planner's 128x128 tiles are 64, half the SMs idle; 64-row tiles fill 128 of them.
    spec = GemmSpec(1024, 1024, 1024)
    cands = candidates(spec, H100_SXM)
    assert (cands[0].plan.bm, cands[0].plan.bn) == (128, 128)
    assert any(c.plan.bm == 64 for c in cands[1:])
    assert all(c.estimate.time < cands[0].estimate.time for c in cands if c.plan.bm == 64)


def test_the_wave_slack_cuts_poor_shapes() -> None:
    spec = GemmSpec(1024, 1024, 1024)
    tight = candidates(spec, H100_SXM, limit=50, slack=1.0)
    best = min(c.estimate.time for c in tight)
    assert all(c.estimate.time == best for c in tight[1:])
    assert len(candidates(spec, H100_SXM, limit=50, slack=3.0)) > len(tight)


def test_the_planners_refusals_are_never_candidates() -> None:
    for spec in SPECS:
        for p in feasible(spec, H100_SXM):
            assert not (p.bm == 64 and p.consumer_partitions == 2)  # one warpgroup cannot be two partitions
            if spec.accumulation is Accumulation.PROMOTED and p.bn == 256:
                # a whole-width partial does not fit the registers (a 2x1 cluster's warpgroups each promote their
                # 128 columns in 64-column blocks: CLUSTER_PROMOTED_BLOCKS)
                assert p.partial_blocks == (4 if p.cluster == 2 else 2)
            if spec.accumulation is not Accumulation.PROMOTED:
                assert p.partial_blocks == 1
            assert p.stages >= 2


def test_raster_groups_past_the_tile_rows_are_one_candidate() -> None:
    # M = 1: one row of tiles, so GROUP_M 4, 8 and 16 walk the same order; only one of them is tried.
    spec = GemmSpec(1, 4096, 4096)
    cands = candidates(spec, H100_SXM, limit=50)
    keys = [(c.plan.bm, c.plan.bn, c.plan.stages, c.plan.consumer_partitions, c.plan.cluster) for c in cands]
    assert len(keys) == len(set(keys))


def test_candidates_are_deterministic_and_independent_of_space_order() -> None:
    spec = fp8(4096, 4096, 4096, promoted=True)
    space = SearchSpace()
    flipped = SearchSpace(bm=space.bm[::-1], bn=space.bn[::-1], group_m=space.group_m[::-1],
                          consumer_partitions=space.consumer_partitions[::-1],
                          partial_blocks=space.partial_blocks[::-1])
    assert candidates(spec, H100_SXM) == candidates(spec, H100_SXM)
    assert candidates(spec, H100_SXM, space=flipped) == candidates(spec, H100_SXM)


def test_replan_raises_on_a_plan_that_no_longer_fits() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    p = plan_schedule(spec, H100_SXM)
    with pytest.raises(UnsupportedError):
        replan(spec, H100_SXM, dataclasses.replace(p, stages=7))


@pytest.mark.parametrize("bad", [{"stage_depths": 0}, {"bm": ()}, {"group_m": (0,)}, {"clusters": ()},
                                 {"clusters": (1, 3)}])
def test_search_space_checks_itself(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="SearchSpace"):
        SearchSpace(**bad)


def test_limit_and_slack_are_checked() -> None:
    from warploom.errors import ArgumentTypeError, InputError
    from warploom.tune import estimate

    for limit in (0, -1, 2.5, True):
        with pytest.raises(InputError, match=r"^limit: expected an int >= 1.* Fix: pass limit=8"):
            candidates(GemmSpec(64, 64, 64), H100_SXM, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"^plan: expected a warploom Plan, got NoneType"):
        estimate(GemmSpec(64, 64, 64), H100_SXM, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slack"):
        candidates(GemmSpec(64, 64, 64), H100_SXM, slack=0.5)


def test_replan_forces_every_knob_of_the_plan() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    p = plan_schedule(spec, H100_SXM, bn=128, stages=3, group_m=4, consumer_partitions=1, hoist_rows=False,
                      scalar_columns=False)
    assert replan(spec, H100_SXM, p) == p


def test_256_row_tiles_are_tried_for_plain_native_gemms_only() -> None:
    """Rule 17's tile is never the planner's default, so the tuner is where it can win: with its four consumer
    partitions for plain native GEMMs, never for promoted fp8 (its registers) or with any other partition count."""
    tall = [p for p in feasible(GemmSpec(4096, 4096, 2048), H100_SXM) if p.bm == 256]
    assert tall and all((p.bn, p.consumer_partitions, p.consumer_regs) == (128, 4, 112) for p in tall)
    assert {p.stages for p in tall} == {2, 3, 4}
    assert not any(p.bm == 256 for p in feasible(fp8(4096, 4096, 4096, promoted=True), H100_SXM))
    assert not any(p.bm == 256 for p in feasible(GemmSpec(4096, 4096, 2048), H100_SXM, SearchSpace(bm=(128, 256),
                                                                                           consumer_partitions=(2,))))


def test_clusters_are_tried_where_triton_has_multicast() -> None:
    """Rule 24 plans 128x256 clusters only; the tuner also times the forced 128x128 and 64x128 ones (CLUSTER_TILES),
    which ran faster than one CTA a tile at some mid-size shapes and slower at others. Under Triton 3.6 (no Hopper
    multicast) the planner refuses every cluster, so none is a candidate."""
    spec = GemmSpec(6262, 120, 2120)  # (64x128 tiles in a 2x1 cluster: +17% on the H200 under Triton 3.9)
    with emitting_for("3.6"):
        assert not any(p.cluster > 1 for p in feasible(spec, H100_SXM))
    with emitting_for("3.9"):
        tiles = {(p.bm, p.bn, p.consumer_partitions) for p in feasible(spec, H100_SXM) if p.cluster == 2}
        assert tiles == {(64, 128, 1), (128, 128, 2), (128, 256, 2)}
        for p in feasible(spec, H100_SXM):
            assert p.cluster == 1 or replan(spec, H100_SXM, p) == p
        assert any(c.plan.cluster == 2 and c.plan.bm == 64 for c in candidates(spec, H100_SXM))
        assert not any(p.cluster > 1 for p in feasible(spec, H100_SXM, SearchSpace(clusters=(None,))))
        # (promoted fp8: a cluster's promotion blocks are the planner's, CLUSTER_PROMOTED_BLOCKS at 128 rows)
        promoted = fp8(662, 1104, 3760, promoted=True)
        clustered = [p for p in feasible(promoted, H100_SXM) if p.cluster == 2]
        assert {p.bm for p in clustered} == {64, 128}
        assert all(replan(promoted, H100_SXM, p) == p for p in clustered)
        # (one row of tiles: a 2x1 cluster's second CTA would have no rows, so no cluster is tried)
        assert not any(p.cluster > 1 for p in feasible(GemmSpec(64, 4096, 4096), H100_SXM))
        assert {p.bm for p in feasible(GemmSpec(128, 4096, 4096), H100_SXM) if p.cluster > 1} == {64}


def test_ping_pong_is_tried_only_when_asked() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    assert not any(p.pingpong for p in feasible(spec, H100_SXM))
    both = feasible(spec, H100_SXM, SearchSpace(pingpong=(False, True)))
    pp = [p for p in both if p.pingpong]
    assert pp and all(p.bm * p.bn <= 128 * 128 for p in pp)  # one warpgroup holds a whole tile's accumulator
    for p in pp:
        assert replan(spec, H100_SXM, p) == p
        est = estimate(spec, H100_SXM, p)
        assert est.regs == p.bm * p.bn // 128 + 40 and est.fits, est.why_not()
    cands = candidates(spec, H100_SXM, limit=20, space=SearchSpace(pingpong=(False, True)))
    assert any(c.plan.pingpong for c in cands)
    with emitting_for("3.9"):  # (clusters too: each form's first is tried, whatever the cost model says of it)
        forms = {(c.plan.pingpong, c.plan.cluster) for c in candidates(spec, H100_SXM,
                                                                       space=SearchSpace(pingpong=(False, True)))}
    assert forms == {(False, 1), (True, 1), (False, 2), (True, 2)}


def test_decode_gemms_try_swapped_and_unswapped_tiles_at_their_deepest_rings() -> None:
    """Rule 18's default (swapped 64x16, 12 stages) is one of several decode schedules measured close to each other
    (docs/benchmarks.md sessions 18-19): the tuner times the other swapped tiles and rule 16's unswapped 64x64,
    each at its deepest ring, without the compute-based wave cut that would drop them all."""
    spec = GemmSpec(16, 4096, 4096)
    cands = candidates(spec, H100_SXM, limit=8)
    shapes = {(c.plan.bm, c.plan.bn, c.plan.swap_ab) for c in cands}
    assert {(64, 16, True), (64, 32, True), (128, 16, True), (64, 64, False)} <= shapes
    for c in cands:
        planned = spec.swapped() if c.plan.swap_ab else spec
        assert c.plan.stages == max_stages(planned, H100_SXM, c.plan.bm, c.plan.bn, c.plan.bk)
        assert replan(spec, H100_SXM, c.plan) == c.plan
    # Above 16 rows only the 32-wide swapped tiles; none past SWAP_MAX_M, nor where the problem cannot swap.
    wide = {(p.bm, p.bn) for p in feasible(GemmSpec(24, 9216, 8192), H100_SXM) if p.swap_ab}
    assert wide == {(64, 32), (128, 32)}
    assert not any(p.swap_ab for p in feasible(GemmSpec(48, 8192, 8192), H100_SXM))
    assert not any(p.swap_ab for p in feasible(GemmSpec(16, 4096, 4096, b_layout=BLayout.N_MAJOR), H100_SXM))
    assert not any(p.swap_ab for p in feasible(spec, H100_SXM, SearchSpace(swap_rows=())))
    # Large GEMMs keep the wave cut and their depth variants.
    big = candidates(GemmSpec(4096, 4096, 4096), H100_SXM)
    assert not any(c.plan.swap_ab for c in big) and len({c.plan.stages for c in big}) > 1
    with pytest.raises(ValueError, match="swap_rows"):
        SearchSpace(swap_rows=(32,))
