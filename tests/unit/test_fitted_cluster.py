"""Fitted tiles inside 2x1 clusters (planner rule 37, `ir.Tiling.interleaved`): the rows each CTA holds of the cluster
tile, the planner's choice per Triton, the module the passes build, the verifier's refusals and the generated Gluon.
Multicast needs Triton >= 3.7, so choices and sources are checked for 3.9 with `emitting_for` and for 3.6, which plans
no cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom import H100_SXM, Accumulation, ALayout, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.backends import gluon_sm90
from warploom.backends.gluon_api import emitting_for
from warploom.device import H200
from warploom.errors import PlanError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.planner import Plan, plan_schedule
from warploom.runtime.cross import descriptor_blocks
from warploom.targets import compile_schedule

E4 = DType.E4M3


def _plan(spec: GemmSpec, triton: str = "3.9", **forced: object) -> Plan:
    with emitting_for(triton):
        return plan_schedule(spec, H200, **forced)  # type: ignore[arg-type]


def _module(spec: GemmSpec, blocks: tuple[int, ...] = (128, 16)) -> ir.Module:
    plan = _plan(spec, cluster=2, bm=128, bn=256, n_blocks=blocks)
    with emitting_for("3.9"):
        m, _ = compile_schedule(spec, plan, H200)
    return m


@pytest.mark.parametrize("bm,cluster", [(128, 2), (128, 1), (64, 2)])
def test_each_cta_holds_its_rows_of_the_cluster_tile_once(bm: int, cluster: int) -> None:
    """CTA r's local row j is cluster-tile row r * rank_rows + cta_row(j): every row once; interleaved, warpgroup w
    of CTA r (local rows 64 w ..) holds rows 128 w + 64 r .. (what the hand-written kernel ran, session 38)."""
    t = ir.Tiling(bm, 256, 64, 8, 132, cluster=cluster, n_blocks=(128, 16))
    rows = [r * t.rank_rows + t.cta_row(j) for r in range(cluster) for j in range(bm)]
    assert sorted(rows) == list(range(bm * cluster))
    if t.interleaved:
        assert t.rank_rows == 64
        for r in range(cluster):
            for w in range(bm // 64):
                assert r * t.rank_rows + t.cta_row(64 * w) == 64 * cluster * w + 64 * r
    else:
        assert all(t.cta_row(j) == j for j in range(bm))


def test_whole_tiles_and_1x2_clusters_do_not_interleave() -> None:
    assert not ir.Tiling(128, 256, 64, 8, 132, cluster=2).interleaved
    assert not ir.Tiling(128, 256, 64, 8, 132, cluster=2, cluster_n=True, n_blocks=(128, 16)).interleaved
    assert not ir.Tiling(128, 256, 64, 8, 132, n_blocks=(128, 16)).interleaved


# Rule 37's shapes (H200, Triton 3.9.0, session 39: docs/data/rule37-*-session39.json): measured gains of 9-21%.
CHOSEN = {(1256, 1720, 11240): (128, 16), (3097, 920, 2920): (128, 64), (1057, 2048, 7112): (128, 64),
          (12108, 160, 14264): (128, 64), (2577, 512, 3720): (128, 16)}
# Left alone: 44 k-blocks (lost 1.3%); M's last cluster row mostly padding (lost); more than a round of clusters;
# whole 128-byte rows (not measured); a 192-row plan (3841x840x4816, lost on 128 rows).
KEPT = [(3838, 576, 2768), (527, 4680, 6416), (4619, 1408, 1352), (4096, 4096, 4096), (3841, 840, 4816)]


@pytest.mark.parametrize("mnk", list(CHOSEN))
def test_rule_37_takes_a_fitted_cluster(mnk: tuple[int, int, int]) -> None:
    spec = GemmSpec(*mnk)
    plan = _plan(spec)
    assert (plan.cluster, plan.bm, plan.bn, plan.n_blocks) == (2, 128, 256, CHOSEN[mnk])
    assert plan.grid % 2 == 0 and plan.grid <= H200.sm_count
    # (under 3.6, without Hopper multicast, the plan has no cluster)
    assert _plan(spec, "3.6").cluster == 1


@pytest.mark.parametrize("mnk", KEPT)
def test_rule_37_stays_out(mnk: tuple[int, int, int]) -> None:
    plan = _plan(GemmSpec(*mnk))
    assert not (plan.cluster > 1 and plan.n_blocks), plan.short()


# fp8 rowwise fast (native accumulation) at the zoo's shapes of the same kind: +14% to +38% (rule37-fp8-*-session39).
CHOSEN_FP8 = {(1256, 1728, 11248): (128, 16), (3097, 928, 2928): (128, 64), (1057, 2048, 7120): (128, 64)}


def _fp8(m: int, n: int, k: int, accumulation: Accumulation = Accumulation.NATIVE) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=accumulation)


@pytest.mark.parametrize("mnk", list(CHOSEN_FP8))
def test_rule_37_takes_fp8_with_fast_accumulation(mnk: tuple[int, int, int]) -> None:
    plan = _plan(_fp8(*mnk))
    assert (plan.cluster, plan.bm, plan.n_blocks) == (2, 128, CHOSEN_FP8[mnk]), plan.short()


@pytest.mark.parametrize("spec", [
    # (an M-major A: a cluster's CTAs each need their rows as one box of A; the forced re-plan raised here)
    GemmSpec(1256, 1720, 11240, a_layout=ALayout.M_MAJOR),
    GemmSpec(1256, 1720, 11240, out_dtype=DType.FP32),  # (an fp32 C: not timed)
    GemmSpec(1256, 1728, 11248, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),  # (not timed)
    GemmSpec(1256, 1728, 11248, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),  # (not timed)
    _fp8(1256, 1728, 11248, Accumulation.PROMOTED),  # (promoted: its column blocks are the promotion's)
    _fp8(1256, 1728, 2704),  # (22 k-blocks of fp8: fewer than 23)
    _fp8(14318, 64, 5696),  # (N = 64: a 144- or 192-wide tile would be mostly padding)
    _fp8(2577, 512, 3728),  # (0.67 of a round of clusters: lost 8%)
    _fp8(12108, 160, 14272),  # (0.73: lost 3%)
])
def test_rule_37_leaves_the_untimed_alone(spec: GemmSpec) -> None:
    plan = _plan(spec)
    assert not (plan.cluster > 1 and plan.n_blocks), plan.short()


def test_explain_names_rule_37() -> None:
    from warploom.planning.trace import collecting

    trace: list = []
    with collecting(trace):
        _plan(GemmSpec(1256, 1720, 11240))
    assert any("rule 37" in c.kind for c in trace), [c.kind for c in trace]


def test_the_module_interleaves() -> None:
    m = _module(GemmSpec(1256, 1720, 11240))
    t = m.tiling
    assert t.interleaved and t.cluster == 2 and t.exit_sync and t.n_blocks == (128, 16)
    a = next(r for r in m.rings if r.tensor is ir.Tensor.A)
    assert (a.rows, a.row_boxes, a.boxes) == (128, 2, 2)
    cons = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert [(p.rows.start, p.rows.rows) for p in cons if p.rows] == [(0, 64), (64, 64)]
    loads = [o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TmaLoad)]
    assert {(o.tensor, o.multicast) for o in loads} == {(ir.Tensor.A, False), (ir.Tensor.B, True)}
    text = printer.module(m)
    assert "interleaved (each CTA 64 rows of every 128" in text and "as 2 boxes of 64 rows" in text
    # A's box is every CTA's 64 rows of one warpgroup's block, split between them; B's blocks every CTA's; C's boxes
    # each warpgroup's rows, split.
    blocks = descriptor_blocks(m)
    assert blocks["a_desc"][1:3] == ([128, 64], ((1, 0),))
    assert blocks["b_desc_w128"][1:3] == ([128, 64], ((0, 0),))
    assert blocks["b_desc_w16"][1:3] == ([16, 64], ((0, 0),))
    assert blocks["c_desc"][1:3] == ([128, 64], ((1, 0),))


def test_the_gluon_reads_a_box_per_warpgroup() -> None:
    """The generated kernel is the hand-written one that ran (archive/exp/fitted_cluster/fc144_min.gluon): A's boxes
    128 rows apart, each warpgroup its own box, its stores 128 rows apart, B's blocks multicast."""
    m = _module(GemmSpec(1256, 1720, 11240))
    with emitting_for("3.9"):
        src = gluon_sm90.lower(m).text
    assert "tma.async_load(a_desc, [off_m, kk * BK], ready_bars.index(p % STAGES), " \
           "a_ring.index((p % STAGES) * 2 + 0))" in src
    assert "tma.async_load(a_desc, [off_m + 128, kk * BK], ready_bars.index(p % STAGES), " \
           "a_ring.index((p % STAGES) * 2 + 1))" in src
    assert "a_ring.index((c % STAGES) * 2 + 1), b_ring_n0.index(c % STAGES)" in src
    assert "tma.async_store(c_desc, [off_m + 128, off_n], c_smem1)" in src
    assert src.count("multicast=True") == 2
    assert "gl.allocate_shared_memory(a_desc.dtype, [12, 128, 64], a_desc.layout)" in src
    assert "acc_n1 = gl.zeros([128, 16], gl.float32, acc_layout_n16)" in src
    assert "instr_shape=[16, 16, 16], cga_layout=[[1, 0]])" in src


@pytest.mark.parametrize("forced,why", [
    (dict(bm=64), "bm=64"),
    (dict(consumer_partitions=1), "consumer_partitions=1"),
])
def test_plan_refuses_other_cluster_tiles(forced: dict[str, object], why: str) -> None:
    with pytest.raises(PlanError, match=why):
        Plan(**{"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumer_warps": 8, "group_m": 8, "grid": 132,
                "cluster": 2, "n_blocks": (128, 16), **forced})  # type: ignore[arg-type]


def test_1x2_and_fused_epilogues_are_refused_by_name() -> None:
    with pytest.raises(UnsupportedError, match="1x2 cluster"):
        _plan(GemmSpec(1256, 1720, 11240), cluster="1x2", bm=128, bn=256, n_blocks=(128, 16))


def _verify(m: ir.Module) -> list[str]:
    try:
        verify.check(m, "test", H200)
    except VerificationError as e:
        return [str(e)]
    return []


def test_verifier_accepts_the_module() -> None:
    assert _verify(_module(GemmSpec(1256, 1720, 11240))) == []


def test_verifier_wants_a_box_per_warpgroup() -> None:
    m = _module(GemmSpec(1256, 1720, 11240))
    flat = replace(m, rings=tuple(replace(r, row_boxes=0) for r in m.rings))
    assert any("boxes of 64 rows" in e for e in _verify(flat))


def test_verifier_wants_a_warpgroup_a_block() -> None:
    m = _module(GemmSpec(1256, 1720, 11240))
    whole = replace(m, partitions=tuple(replace(p, rows=None) if p.role is ir.Role.CONSUMER else p
                                        for p in m.partitions))
    assert any("one 64-row block" in e for e in _verify(whole))


def test_verifier_refuses_boxes_without_interleave() -> None:
    m = _module(GemmSpec(1256, 1720, 11240))
    one = replace(m, tiling=replace(m.tiling, n_blocks=()))
    assert any("do not interleave" in e for e in _verify(one))


def test_ring_row_boxes_are_a_rings_64_row_boxes() -> None:
    with pytest.raises(ValueError, match="row_boxes"):
        ir.Ring("b_ring", ir.Tensor.B, DType.BF16, 4, 128, 64, row_boxes=2)
    with pytest.raises(ValueError, match="row_boxes"):
        ir.Ring("a_ring", ir.Tensor.A, DType.BF16, 4, 128, 64, row_boxes=3)


def test_meta_tensors_plan_through_the_public_api() -> None:
    import warploom

    a = torch.empty(1256, 11240, dtype=torch.bfloat16, device="meta")
    b = torch.empty(1720, 11240, dtype=torch.bfloat16, device="meta").t()
    with emitting_for("3.9"):
        kern = warploom.plan(a, b, device=H200)
    assert kern.module.tiling.interleaved


def test_h100_takes_it_too() -> None:
    with emitting_for("3.9"):
        plan = plan_schedule(GemmSpec(1256, 1720, 11240), H100_SXM)
    assert plan.cluster == 2 and plan.n_blocks == (128, 16)
