"""Real planner output must simulate clean and match a torch fp32 reference.

Sweeps stages 1-6 against k-step counts at the edges of the ring (1, S-1, S, S+1, 2S+1), with several
tiles per persistent CTA (a grid of 2 over 3-6 tiles), shapes that are not tile multiples, outputs
poisoned with NaN, and every dtype and recipe; each on the consumer structures (one partition, p1; one
64-row partition per warpgroup of a 128-row tile, p2; ping-pong warpgroups taking whole tiles in turn, pp)
and, for promoted fp8, with the accumulator whole (h1) and in two column blocks (h2); plus real planner plans
on small problems.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import Plan, plan_schedule
from warploom.reference import Inputs, make_inputs, reference, relative_error
from warploom.sim import FindingKind, SimResult, check_protocol, simulate
from warploom.spec import Accumulation, BLayout, GemmSpec, ScaleRecipe

# 130 x 120 is 3 x 2 tiles of 64 x 64: a grid of 2 gives each CTA 3 tiles, the last row and column ragged.
M, N = 130, 120
# With 128-row tiles, 300 rows are 3 tile rows; in the last (rows 256-299) the second warpgroup's block
# (320-383) lies wholly outside the matrix and the first's partly.
M_128 = 300
# With 256-row tiles (rule 17's four warpgroups), 600 rows are 3 tile rows; in the last (rows 512-599) the second
# warpgroup's block (576-639) is ragged and the third's and fourth's (640-767) lie wholly outside.
M_256 = 600
STAGES = range(1, 7)


def k_steps(stages: int) -> list[int]:
    return sorted({1, stages - 1, stages, stages + 1, 2 * stages + 1} - {0})


def small_plan(stages: int, bk: int, bm: int = 64, bn: int = 64, split: int = 1, blocks: int = 1,
               pingpong: bool = False) -> Plan:
    return Plan(bm=bm, bn=bn, bk=bk, stages=stages, consumer_warps=8 if pingpong else 4 * (bm // 64), group_m=2,
                grid=2, consumer_partitions=split, partial_blocks=blocks, pingpong=pingpong,
                consumer_regs=112 if bm == 256 else 240)  # (four warpgroups: the planner's rule 17 budget)


# Consumer structures: (bm, bn, consumer partitions, partial blocks). h2 only means something for promoted
# fp8; its 128-wide tile splits into two 64-wide blocks, the second ragged at N = 120.
STRUCTURES = {
    "p1": (64, 64, 1, 1),
    "p2": (128, 64, 2, 1),
    "p1h2": (64, 128, 1, 2),
    "p2h2": (128, 128, 2, 2),
    # Ping-pong: two warpgroups taking whole 64x64 (64x128) tiles in turn; 3 tiles per CTA, so one consumer
    # runs 2 and the other 1.
    "pp": (64, 64, 2, 1),
    "pph2": (64, 128, 2, 2),
    # Rule 17's structure: four 64-row warpgroups of a 256-row tile, one partition each (native only).
    "p4": (256, 64, 4, 1),
}


def structured(name: str, stages: int, bk: int) -> tuple[Plan, int]:
    """The plan of structure `name`, and the M that gives it 3 tile rows."""
    bm, bn, split, blocks = STRUCTURES[name]
    return small_plan(stages, bk, bm, bn, split, blocks, name.startswith("pp")), {64: M, 128: M_128, 256: M_256}[bm]


def consumers(m: ir.Module) -> list[ir.Partition]:
    return [p for p in m.partitions if p.role is ir.Role.CONSUMER]


def spec_of(dtype: DType, k: int, *, out: DType = DType.BF16, scale: ScaleRecipe = ScaleRecipe.NONE,
            acc: Accumulation = Accumulation.NATIVE, bias: DType | None = None,
            layout: BLayout = BLayout.K_MAJOR, b_dtype: DType | None = None, m: int = M, n: int = N) -> GemmSpec:
    return GemmSpec(m, n, k, dtype, b_dtype or dtype, out, layout, scale, acc, bias)


def run(spec: GemmSpec, plan: Plan, seed: int = 0) -> tuple[SimResult, Inputs]:
    """Simulate under schedule `seed` (the inputs are the same for every seed)."""
    module = build(spec, H100_SXM, plan).module
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    out = torch.full((spec.m, spec.n), float("nan"), dtype=spec.out_dtype.torch)  # poison: unwritten shows
    return simulate(module, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed, out=out), x


def assert_matches(spec: GemmSpec, res: SimResult, x: Inputs) -> None:
    assert res.ok, res.report.summary()
    out = res.output
    assert not out.isnan().any(), "some output elements were never written"
    ref = reference(x)
    if spec.is_fp8:
        err = relative_error(out.float(), ref)
        assert err < 1e-3, f"fp8 relative error {err:.2e}"
    else:
        tol = {DType.BF16: (1e-2, 1e-2), DType.FP16: (2e-3, 2e-3), DType.FP32: (1e-5, 1e-4)}[spec.out_dtype]
        torch.testing.assert_close(out.float(), ref, rtol=tol[0], atol=tol[1])


CASES = [pytest.param(s, ks, id=f"s{s}-k{ks}") for s in STAGES for ks in k_steps(s)]


def check_structure(module: ir.Module, plan: Plan) -> None:
    """The module really has the plan's structure (so a sweep cannot silently test the other one)."""
    cons = consumers(module)
    # Cooperative consumers each release every slot; ping-pong ones every other tile's.
    assert len(cons) == plan.consumer_partitions
    assert module.barrier("empty").count == (1 if plan.pingpong else len(cons))
    assert all(isinstance(s, ir.Loop) and s.step == (2 if plan.pingpong else 1)
               for c in cons for s in c.body if isinstance(s, ir.Loop))
    mmas = [o for o, _ in ir.walk(cons[0].body) if isinstance(o, ir.Mma)]
    promoted = module.spec.accumulation is Accumulation.PROMOTED
    assert len(mmas) == (plan.partial_blocks if promoted else 1)


@pytest.mark.parametrize("stages,ks", CASES)
@pytest.mark.parametrize("structure", ["p1", "p2", "pp", "p4"])
def test_bf16_native_stages_by_k_steps(structure: str, stages: int, ks: int) -> None:
    plan, m = structured(structure, stages, bk=32)
    spec = spec_of(DType.BF16, ks * 32 - 5, m=m)  # K not a multiple of BK = 32
    res, x = run(spec, plan)
    check_structure(build(spec, H100_SXM, plan).module, plan)
    assert_matches(spec, res, x)


@pytest.mark.parametrize("stages,ks", CASES)
@pytest.mark.parametrize("structure", ["p1", "p2", "p1h2", "p2h2", "pph2"])
def test_fp8_rowwise_promoted_stages_by_k_steps(structure: str, stages: int, ks: int) -> None:
    plan, m = structured(structure, stages, bk=64)
    spec = spec_of(DType.E4M3, ks * 64 - 16, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, m=m)
    res, x = run(spec, plan)
    check_structure(build(spec, H100_SXM, plan).module, plan)
    assert_matches(spec, res, x)


SPEC_KWS = [
    dict(dtype=DType.BF16),
    dict(dtype=DType.BF16, layout=BLayout.N_MAJOR),
    dict(dtype=DType.FP16, out=DType.FP16),
    dict(dtype=DType.FP16, out=DType.FP32, layout=BLayout.N_MAJOR),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.TENSORWISE),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.TENSORWISE, acc=Accumulation.PROMOTED),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE, bias=DType.BF16),
    dict(dtype=DType.E4M3, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.FP32, out=DType.FP16),
    dict(dtype=DType.E4M3, b_dtype=DType.E5M2, scale=ScaleRecipe.TENSORWISE, bias=DType.BF16, out=DType.FP32),
]


def _kw_id(kw: dict) -> str:
    return "-".join(f"{v.value if hasattr(v, 'value') else v}" for v in kw.values())


# p4 (rule 17's four warpgroups) runs native accumulation only: the planner refuses promoted fp8 on it.
RECIPE_CASES = [pytest.param(kw, st, id=f"{_kw_id(kw)}-{st}") for kw in SPEC_KWS for st in ("p1", "p2", "pp", "p4")
                if not (st == "p4" and kw.get("acc") is Accumulation.PROMOTED)]


@pytest.mark.parametrize("stages,ks", [(2, 5), (3, 3), (4, 9)], ids=lambda v: str(v))
@pytest.mark.parametrize("spec_kw,structure", RECIPE_CASES)
def test_dtypes_and_recipes(spec_kw: dict, stages: int, ks: int, structure: str) -> None:
    fp8 = spec_kw["dtype"].is_fp8
    bk = 64 if fp8 else 32
    if structure == "p2" and spec_kw.get("acc") is Accumulation.PROMOTED:
        structure = "p2h2"  # the planner's promoted structure: split consumers and column blocks
    plan, m = structured(structure, stages, bk)
    spec = spec_of(k=ks * bk - (16 if fp8 else 3), m=m, **spec_kw)
    res, x = run(spec, plan)
    assert_matches(spec, res, x)


@pytest.mark.parametrize("grid,group_m", [(1, 1), (3, 1), (3, 3), (4, 8)])
@pytest.mark.parametrize("structure", ["p1", "p2", "pp", "p4"])
def test_persistent_grids_and_rasters(grid: int, group_m: int, structure: str) -> None:
    plan, _ = structured(structure, 3, bk=32)
    spec = spec_of(DType.BF16, 4 * 32 - 1, m=200 * plan.bm // 64, n=330)  # 4 x 6 tiles
    res, x = run(spec, replace(plan, grid=grid, group_m=group_m))
    assert_matches(spec, res, x)


@pytest.mark.parametrize("structure", ["p1", "p2"])
def test_numerics_catch_protocol_clean_bugs(structure: str) -> None:
    """A bug the protocol cannot see (a dropped bias) is clean to the checks but must fail the comparison with the
    reference, in any one consumer partition; an accumulator overwritten at every k-block fails both (the checks
    find that the epilogue reads a sum over one k-block: ACC_INCOMPLETE)."""
    plan, m = structured(structure, 3, bk=64)
    overwrite = (5, lambda o: (replace(o, overwrite=ir.Guard.ALWAYS),) if isinstance(o, ir.Mma) else (o,))
    # One k-block: a dropped bias must stand out of the products even in one warpgroup's rows.
    no_bias = (1, lambda o: (replace(o, steps=o.steps[:1]),) if isinstance(o, ir.Epilogue) else (o,))
    for k_blocks, fn in (overwrite, no_bias):
        spec = spec_of(DType.E4M3, k_blocks * 64, scale=ScaleRecipe.ROWWISE, bias=DType.BF16, m=m)
        module = build(spec, H100_SXM, plan).module
        x = make_inputs(spec, spec.m, spec.n, spec.k)
        assert len(consumers(module)) == plan.consumer_partitions
        for cons in consumers(module):
            bad = module.with_partition(replace(cons, body=rewrite(cons.body, fn)))  # type: ignore[arg-type]
            res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, x.bias)
            assert not res.output.isnan().any()
            if fn is overwrite[1]:
                assert res.report.kinds() == {FindingKind.ACC_INCOMPLETE}, res.report.summary()
                err = relative_error(res.output.float(), reference(x))  # (assert_matches stops at the finding)
                assert err >= 1e-3, f"fp8 relative error {err:.2e}: the numerics must fail too"
                continue
            assert res.ok
            with pytest.raises(AssertionError, match="relative error"):
                assert_matches(spec, res, x)


def test_numerics_catch_a_swapped_column_block() -> None:
    """Column blocks: acc1 computed from B's first block of columns instead of its own is clean to the
    protocol checks but wrong."""
    plan, m = structured("p2h2", 3, bk=64)
    spec = spec_of(DType.E4M3, 3 * 64, scale=ScaleRecipe.TENSORWISE, acc=Accumulation.PROMOTED, m=m, n=256)
    module = build(spec, H100_SXM, plan).module
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    bad = module
    for cons in consumers(module):
        body = rewrite(cons.body, lambda o: (replace(o, n_cols=ir.ColBlock(0, 64)),) if isinstance(o, ir.Mma)
                       else (o,))
        bad = bad.with_partition(replace(cons, body=body))
    res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, x.bias)
    assert res.ok and not res.output.isnan().any()
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(spec, res, x)


def test_every_seed_gives_the_same_output() -> None:
    """The data a schedule computes must not depend on the interleaving."""
    spec = spec_of(DType.BF16, 7 * 32 - 5)
    outs = [run(spec, small_plan(3, bk=32), seed=s)[0].output for s in range(3)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_real_planner_plan_128x256x64(split: int) -> None:
    spec = GemmSpec(300, 520, 200)  # 3 x 3 tiles of 128 x 256, one per CTA
    plan = plan_schedule(spec, H100_SXM, bm=128, bn=256, consumer_partitions=split)
    assert (plan.bm, plan.bn, plan.bk, plan.consumer_partitions) == (128, 256, 64, split)
    res, x = run(spec, plan)
    assert res.report.k_steps == 9 * 4 * split  # each consumer partition issues its own wgmma per k-block
    assert_matches(spec, res, x)


# An H100 cut down to 2 SMs: small problems then have more tiles than SMs, so the planner takes the wide
# tiles it picks for large problems, and each CTA runs several of them.
TWO_SMS = replace(H100_SXM, sm_count=2)


@pytest.mark.parametrize("spec,short", [
    (GemmSpec(300, 120, 200), "192x256x64_s4_w12_g8_e2_p3_n128_16"),  # (rule 32: 2 fitted tiles, one round)
    (GemmSpec(300, 500, 200), "128x256x64_s4_w8_g8_e2_p2"),
    (GemmSpec(60, 260, 200, b_layout=BLayout.N_MAJOR), "64x256x64_s4_w4_g8_e2"),  # (rule 34: 4 k-blocks)
    (spec_of(DType.E4M3, 384, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.BF16, m=200, n=112),
     "128x128x128_s6_w8_g8_p2"),
    (spec_of(DType.E4M3, 384, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.BF16, m=300, n=500),
     "128x256x128_s3_w8_g8_e2_p2_h2"),
    (spec_of(DType.E4M3, 384, scale=ScaleRecipe.TENSORWISE, acc=Accumulation.PROMOTED, out=DType.FP32, m=300,
             n=1000), "128x256x128_s3_w8_g8_e2_p2_h2"),
    (spec_of(DType.E4M3, 640, scale=ScaleRecipe.ROWWISE, m=300, n=500), "128x256x128_s4_w8_g8_e2_p2"),
    (spec_of(DType.E4M3, 256, scale=ScaleRecipe.TENSORWISE, acc=Accumulation.PROMOTED, m=50, n=300),
     "64x256x128_s3_w4_g8_e2_h2"),
], ids=lambda v: v if isinstance(v, str) else v.short().replace(" ", "_"))
def test_real_planner_default_plans(spec: GemmSpec, short: str) -> None:
    plan = plan_schedule(spec, TWO_SMS)
    assert plan.short() == short  # the structure this case is here for
    res, x = run(spec, plan)
    assert_matches(spec, res, x)


@pytest.mark.parametrize("spec", [
    GemmSpec(4096, 4096, 4096),
    GemmSpec(64, 8192, 8192),
    spec_of(DType.E4M3, 4096, scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED, bias=DType.BF16, m=4096, n=4096),
    spec_of(DType.E4M3, 7168, scale=ScaleRecipe.TENSORWISE, m=1000, n=4096),
], ids=lambda s: s.short().replace(" ", "_"))
def test_planner_plans_at_real_sizes_under_many_schedules(spec: GemmSpec) -> None:
    """Protocol only (no data), one CTA per distinct tile count, 12 random schedules each."""
    kernel = build(spec, H100_SXM)
    report = check_protocol(kernel.module, spec.m, spec.n, spec.k, seeds=range(12))
    assert report.ok and report.steps > 1000


@pytest.mark.parametrize("structure,dtype", [("p1", DType.BF16), ("p2", DType.BF16), ("p2h2", DType.E4M3)])
def test_every_pass_stage_keeps_the_meaning(structure: str, dtype: DType) -> None:
    """The sequential program and every stage from ring planning on compute the same GEMM cleanly; right
    after partitioning (and the scale partitioning, a no-op here), producer and consumer share rings with no
    synchronization, which must be flagged."""
    bk = 64 if dtype.is_fp8 else 32
    plan, m = structured(structure, 3, bk)
    fp8 = dict(scale=ScaleRecipe.ROWWISE, acc=Accumulation.PROMOTED) if dtype.is_fp8 else {}
    spec = spec_of(dtype, 5 * bk - 5, m=m, **fp8)  # type: ignore[arg-type]
    kernel = build(spec, H100_SXM, plan)
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    stages = dict(kernel.trace.stages)
    assert len(consumers(stages["SplitConsumers"])) == plan.consumer_partitions
    for stage, module in kernel.trace.stages:
        res = simulate(module, x.a, x.b, x.scale_a, x.scale_b, x.bias)
        if stage in ("SplitProducer", "SplitScales"):  # partitioned, not yet synchronized by PlanRings
            assert res.report.kinds() & {FindingKind.READ_UNACQUIRED, FindingKind.READ_BEFORE_LANDED}, stage
        else:
            assert_matches(spec, res, x)
            assert stage != "build_sequential" or module.partitions[0].role is ir.Role.SEQUENTIAL


@pytest.mark.parametrize("stages,ks", [(2, 1), (2, 5), (4, 4), (4, 9)], ids=lambda v: str(v))
@pytest.mark.parametrize("bias", [DType.BF16, DType.FP32])
def test_rowwise_bias_per_block_epilogue(stages: int, ks: int, bias: DType) -> None:
    """The planner's 256-wide rowwise + bias plan (rule 10): scales and bias applied per 64-column block, on a
    ragged last tile column (N = 300), clean and right; and dropping one block's epilogue is caught."""
    spec = spec_of(DType.E4M3, ks * 64 - 16, scale=ScaleRecipe.ROWWISE, bias=bias, m=M_128, n=300)
    plan = replace(plan_schedule(spec, H100_SXM, bn=256, stages=stages), bk=64, grid=2, group_m=2)
    assert plan.block_epilogue and plan.epilogue_subtiles == 4
    res, x = run(spec, plan)
    assert_matches(spec, res, x)
    module = build(spec, H100_SXM, plan).module
    blocks = [o for o, _ in ir.walk(consumers(module)[0].body) if isinstance(o, ir.Epilogue)]
    assert [(o.part, o.parts) for o in blocks] == [(i, 4) for i in range(4)]
    bad = module
    for cons in consumers(module):
        bad = bad.with_partition(replace(cons, body=rewrite(cons.body, lambda o: () if isinstance(o, ir.Epilogue)
                                                            and o.part == 2 else (o,))))
    res = simulate(bad, x.a, x.b, x.scale_a, x.scale_b, x.bias)
    assert res.ok and not res.output.isnan().any()
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(spec, res, x)
