"""Candidate schedules for the autotuner: every knob combination the planner accepts, cut by the cost model.

The search space is the planner's forced parameters (`plan_schedule(bm=, bn=, stages=, ...)`): tile shape,
ring depth, raster group, consumer partitions, for promoted fp8 the promotion's column blocks, and for a decode
GEMM that can swap (planner rule 18) the swapped tiles, 64 or 128 rows of N by 16 or 32 tokens. Each
combination goes through the planner, so a candidate is exactly what `plan_schedule` would build when forced,
and combinations it rejects (a depth that does not fit, two partitions of one warpgroup, a whole-width promoted
partial at BN = 256) never reach the device.

The survivors are cut in four steps:
1. resources (cost.py): over shared memory, the register budget or the SM's registers: dropped;
2. waves: estimated time more than `slack` x the best candidate's: dropped (a tile shape that leaves a
   third of the SMs idle in its last wave does not win by a better pipeline). Not for decode GEMMs
   (`planner.is_decode`): they stream B, and the compute-based estimate would cut every tile but the default's
   (rule 18's and 16's tiles were chosen by measuring bandwidth, not by this model);
3. duplicates: a raster group of at least the tile rows (ceil(M / BM)) walks the same order as a group of
   exactly that many (the backend's grouped raster clamps the group to the rows left), so of plans that
   differ only there the first in order is kept;
4. a neighbourhood of the planner's default: ordered by how many knobs differ from it, then by estimated
   time, then by name (deterministic), and cut to `limit`. The default itself is always first, whatever the
   model says of it, so tuning can only improve on what an untuned call runs; then the first candidate of each
   other schedule form the space holds (ping-pong, a 2x1 cluster), which the model cannot price apart.

Everything here is a pure function of (spec, device, space): no GPU, no clock.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Any

from warploom.device import DeviceInfo
from warploom.errors import InputError, UnsupportedError
from warploom.planner import SWAP_MAX_M, SWAP_TOKENS, Plan, is_decode, max_stages, plan_schedule
from warploom.spec import Accumulation, GemmSpec
from warploom.tune.cost import Estimate, estimate

# The knobs a candidate varies, compared to count its distance from the planner's default.
KNOBS = ("bm", "bn", "stages", "group_m", "consumer_partitions", "partial_blocks", "pingpong", "swap_ab", "cluster")


@dataclass(frozen=True)
class SearchSpace:
    """The values each knob may take.

    Attributes:
        bm, bn: tile rows and columns tried.
        stage_depths: how many ring depths are tried per tile: the deepest that fit, down to 2 (shallower
            rings only lose latency hiding; promoted fp8 measured best one below its deepest). A decode GEMM
            (`planner.is_decode`) tries only the deepest: streaming B, it measured faster with every stage more
            (planner rule 16).
        group_m: raster group sizes (GROUP_M = 1 measured 7% slower: not tried).
        consumer_partitions: 1 or 2 consumer partitions (2 needs BM = 128); 4 for BM = 256 (planner rule 17: four
            consumer warpgroups, plain native GEMMs only, measured equal to 128x256 on average, so only the tuner
            or a forced plan runs it, but at long K for 16-bit operands, where the planner takes it). The cost model
            (tune/cost.py) estimates such a plan with rowwise scales at 136 registers against its 112 and cuts it,
            although ptxas compiled one without spills: conservative, so the tuner tries it for 16-bit and
            tensorwise fp8 GEMMs.
        partial_blocks: promoted fp8's promotion column blocks (ignored for other specs).
        pingpong: whether the two consumer warpgroups take whole tiles in turn. Only (False,) by default:
            ping-pong schedules are new and not yet measured on the H100; pass (False, True) to try them.
        decode_tiles: (BM, BN) tiles tried besides bm x bn for a decode GEMM: rule 16's 64x64.
        swap_rows: for a problem of at most SWAP_MAX_M rows that can swap (rule 18), the swapped tiles' rows of N
            tried, each with every token width of SWAP_TOKENS that holds M, at its deepest ring only (decode
            measured deeper rings faster); () tries none. The unswapped tiles come from bm and bn as for any
            problem.
        clusters: the `cluster` knob's values: None (rule 24 decides) and 2, a 2x1 cluster multicasting B, which
            the planner accepts for 128x256, 128x128 and 64x128 tiles where Triton has Hopper multicast (>= 3.7; it
            refuses them elsewhere, so they are no candidates there). Rule 24 takes only 128x256 clusters by itself;
            64x128 ones ran 5-19% faster at some mid-size shapes and slower at others (planning/sm90/clusters.py,
            CLUSTER_TILES), which only timing tells apart.
    """

    bm: tuple[int, ...] = (128, 64, 256)
    bn: tuple[int, ...] = (256, 128)
    stage_depths: int = 3
    group_m: tuple[int, ...] = (8, 4, 16)
    consumer_partitions: tuple[int, ...] = (2, 1, 4)
    partial_blocks: tuple[int, ...] = (2, 1)
    pingpong: tuple[bool, ...] = (False,)
    decode_tiles: tuple[tuple[int, int], ...] = ((64, 64),)
    swap_rows: tuple[int, ...] = (64, 128)
    clusters: tuple[int | None, ...] = (None, 2)

    def __post_init__(self) -> None:
        if self.stage_depths < 1:
            raise ValueError(f"SearchSpace: expected stage_depths >= 1, got {self.stage_depths=}")
        for name in ("bm", "bn", "group_m", "consumer_partitions", "partial_blocks"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < 1 for v in values):
                raise ValueError(f"SearchSpace: expected {name} a non-empty tuple of positive ints, got {values!r}")
        if any(v not in (64, 128) for v in self.swap_rows):
            raise ValueError(f"SearchSpace: expected swap_rows a tuple of 64 and/or 128, got {self.swap_rows!r}")
        if not self.clusters or any(v not in (None, 2) for v in self.clusters):
            raise ValueError(f"SearchSpace: expected clusters a non-empty tuple of None and/or 2, got "
                             f"{self.clusters!r}")
        if not self.pingpong or any(not isinstance(v, bool) for v in self.pingpong):
            raise ValueError(f"SearchSpace: expected pingpong a non-empty tuple of bools, got {self.pingpong!r}")


DEFAULT_SPACE = SearchSpace()


@dataclass(frozen=True)
class Candidate:
    """A schedule to try.

    Attributes:
        plan: the schedule, as the planner builds it when forced.
        estimate: the cost model's view of it.
        distance: how many of `KNOBS` differ from the planner's default (0: the default).
    """

    plan: Plan
    estimate: Estimate
    distance: int


def _forcible() -> tuple[str, ...]:
    """The planner's keyword parameters that are also Plan fields: every knob a plan can be forced to."""
    fields = {f.name for f in dataclasses.fields(Plan)}
    params = inspect.signature(plan_schedule).parameters.values()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in fields)


def replan(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> Plan:
    """The plan the planner builds today with every knob of `plan` forced (every keyword of `plan_schedule`
    that names a Plan field, so a knob added to the planner is forced too).

    Equal to `plan` exactly when this warploom still builds `plan` for `spec` on `device`; raises
    `UnsupportedError` when the planner rejects it (e.g. a cached plan whose depth no longer fits).
    """
    forced: dict[str, Any] = {name: getattr(plan, name) for name in _forcible()}
    if plan.cluster_n:  # (a 1x2 cluster's knob: cluster=2 alone plans the 2x1 form)
        forced["cluster"] = f"1x{plan.cluster}"
    return plan_schedule(spec, device, **forced)


def distance(a: Plan, b: Plan) -> int:
    """How many of `KNOBS` differ between two plans."""
    return sum(getattr(a, k) != getattr(b, k) for k in KNOBS)


def same_order(spec: GemmSpec, plan: Plan) -> Plan:
    """`plan` with its raster group clamped to the tile rows: plans equal under this run the same tile order. (A
    swapped plan's tile rows run along N.)"""
    rows = spec.n if plan.swap_ab else spec.m
    return dataclasses.replace(plan, group_m=min(plan.group_m, max(1, math.ceil(rows / plan.bm))))


def feasible(spec: GemmSpec, device: DeviceInfo, space: SearchSpace = DEFAULT_SPACE) -> list[Plan]:
    """Every distinct plan of `space` that the planner accepts, in enumeration order."""
    bk = 128 if spec.is_fp8 else 64  # as the planner picks it: 128 bytes of K per row
    blocks = space.partial_blocks if spec.accumulation is Accumulation.PROMOTED else (None,)
    seen: dict[Plan, None] = {}
    decode = is_decode(spec)
    tiles = list(itertools.product(space.bm, space.bn))
    tiles += [t for t in space.decode_tiles if decode and t not in tiles]
    for (bm, bn), pp in itertools.product(tiles, space.pingpong):
        deepest = max_stages(spec, device, bm, bn, bk, pp)
        depths = range(deepest, max(1, deepest - (1 if decode else space.stage_depths)), -1)
        # split_k and tail_split: the planner's choice (rules 14 and 15) and none, so the tuner times both where a
        # rule splits.
        for s, g, p, h, ks, ts, cl in itertools.product(depths, space.group_m, space.consumer_partitions, blocks,
                                                        (None, 1), (None, 1), space.clusters):
            if s < 2:
                continue  # single-buffered rings serialize TMA and MMA: never a candidate
            if cl == 2 and (spec.m <= bm or h != blocks[0]):
                # (one row of tiles: a 2x1 cluster's second CTA would have no rows; a cluster's promotion blocks are
                # the planner's, so one value of h plans them all)
                continue
            try:  # (a cluster's blocks: CLUSTER_PROMOTED_BLOCKS at 128 rows, one CTA's at 64x128)
                plan = plan_schedule(spec, device, bm=bm, bn=bn, stages=s, group_m=g, consumer_partitions=p,
                                     partial_blocks=None if cl == 2 else h, pingpong=pp, split_k=ks, tail_split=ts,
                                     cluster=cl)
            except UnsupportedError:
                continue  # the planner's own rules (it says why when forced by hand)
            seen.setdefault(plan)
    if 0 < spec.m <= SWAP_MAX_M and not spec.swap_problems():
        for rows, tokens in itertools.product(space.swap_rows, (t for t in SWAP_TOKENS if t >= spec.m)):
            try:  # (its depth left to the planner: the deepest that fits the swapped tile)
                seen.setdefault(plan_schedule(spec, device, bm=rows, bn=tokens, swap_ab=True))
            except UnsupportedError:
                continue
    return list(seen)


def candidates(spec: GemmSpec, device: DeviceInfo, *, limit: int = 8, slack: float = 1.3,
               space: SearchSpace = DEFAULT_SPACE) -> tuple[Candidate, ...]:
    """At most `limit` candidates for `spec`, the planner's default first (module docstring)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError("limit", "an int >= 1: how many candidates at most", repr(limit),
                         "pass limit=8 (the default) or another positive count")
    if slack < 1.0:
        raise ValueError(f"candidates: expected slack >= 1.0 (1.0 keeps only the best estimate), got {slack=}")
    default = plan_schedule(spec, device)
    first = Candidate(default, estimate(spec, device, default), 0)
    scored = [Candidate(p, estimate(spec, device, p), distance(p, default))
              for p in feasible(spec, device, space) if p != default]
    fitting = [c for c in scored if c.estimate.fits]
    if not fitting:
        return (first,)
    best = min(c.estimate.time for c in (first, *fitting))
    near = fitting if is_decode(spec) else [c for c in fitting if c.estimate.time <= slack * best]
    near.sort(key=lambda c: (c.distance, c.estimate.time, c.plan.short()))
    # The first of each schedule form (ping-pong or not, a cluster or not) comes before the rest: the cost model does
    # not price clusters, which would otherwise crowd out a ping-pong the space asks for, or the reverse.
    forms: dict[tuple[bool, int], Candidate] = {}
    for c in near:
        forms.setdefault((c.plan.pingpong, c.plan.cluster), c)
    firsts = [c for form, c in forms.items() if form != (default.pingpong, default.cluster)]
    taken = {same_order(spec, default)}
    chosen = [first]
    for c in [*firsts, *near]:
        if len(chosen) == limit:
            break
        if same_order(spec, c.plan) not in taken:
            taken.add(same_order(spec, c.plan))
            chosen.append(c)
    return tuple(chosen)
