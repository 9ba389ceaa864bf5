"""2-CTA clusters (planner rule 24, passes/cluster.py, ir/verify_cluster.py): the planner's choice per Triton, the
module the passes build, the verifier's rules (each corruption of a finished module reported), and the generated
Gluon. Rule 24 needs Triton >= 3.7's Hopper multicast, so choices and sources are checked for 3.9 with
`emitting_for` (no other Triton installed) and for 3.6, which plans and emits no cluster."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from warploom import (
    H100_SXM,
    Accumulation,
    ALayout,
    ArgumentTypeError,
    BLayout,
    DeviceInfo,
    DType,
    GemmSpec,
    ScaleRecipe,
    UnsupportedError,
)
from warploom.backends import gluon_sm90
from warploom.backends.gluon_api import emitting_for
from warploom.epilogue import capture
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.passes.cluster import CLUSTER_EMPTY
from warploom.planner import Plan, plan_schedule
from warploom.runtime.cross import descriptor_blocks
from warploom.spec import Grouping
from warploom.targets import compile_schedule

E4 = DType.E4M3

# (M, N, K) -> whether rule 24 takes clusters (bf16, B N-major): shapes measured on the H100 (Triton 3.9,
# docs/benchmarks.md session 24). Unaligned rows with whole waves of clusters: clusters (1168x6960x1104 is the
# model's miss: 2% slower in clusters for bf16, 14% faster for fp8). No whole wave of clusters, a stream-K plan
# ahead, or aligned rows: one CTA per tile.
CHOICES = {
    (4634, 4968, 3672): True,
    (3000, 3000, 3000): True,
    (14242, 3888, 3256): True,
    (4310, 1504, 1528): True,
    (2848, 736, 3088): False,  # 36 cluster tiles: no whole wave
    (1168, 6960, 1104): True,
    (9000, 2000, 1000): True,
    (5000, 5000, 5000): True,
    (656, 8048, 5280): False,  # stream-K's shared last wave beats a whole wave and a part of clusters
    (4608, 4992, 3712): False,  # aligned rows
    (8192, 8192, 8192): False,
    # Session 26's side by side: below CLUSTER_MIN_KBLOCKS a CTA (32 for bf16) clusters lost 5-23%.
    (1072, 5728, 80): False,
    (917, 5184, 608): False,
    (1232, 7504, 720): False,
    (5344, 2192, 144): False,
    (8666, 816, 160): False,
    (685, 6144, 1680): False,  # 29.5 k-blocks a CTA: 6% slower in clusters
    (4634, 4976, 3680): True,  # 334 k-blocks a CTA: 3% faster in clusters
    (9162, 2904, 632): True,  # 65 k-blocks a CTA (10 a tile): 0.81 -> 0.99 in the session-25 zoo
}

# The same for fp8 rowwise fast accumulation (K-major B, bf16 out), whose floor is 12 k-blocks a CTA.
FP8_CHOICES = {
    (1232, 7504, 720): True,  # +13%
    (685, 6144, 1680): True,  # +6%
    (1168, 6960, 1104): True,  # +13% (session 24)
    (917, 5184, 608): False,  # 6.4 k-blocks a CTA: 8% slower in clusters
    (14215, 528, 192): False,  # 10% slower
    (5344, 2192, 144): False,  # the refit's miss: 9% faster in clusters at 5.7 k-blocks a CTA
    (14312, 1920, 688): True,  # 41 k-blocks a CTA: 0.92 -> 1.09 in the session-25 zoo
}


def bf16(m: int, n: int, k: int) -> GemmSpec:
    return GemmSpec(m, n, k, b_layout=BLayout.N_MAJOR)


def fused(spec: GemmSpec) -> GemmSpec:
    """`spec` with a fused epilogue graph: GELU of the product plus a dense residual."""
    res = torch.empty(spec.m, spec.n, dtype=torch.bfloat16, device="meta")
    return replace(spec, epilogue=capture(lambda acc, res: F.gelu(acc) + res, {"res": res},
                                          out_shape=(spec.m, spec.n)))


# Recipes rule 24 runs when forced but does not choose (no sweep has measured them in clusters): at the shape where
# bf16 takes clusters (unaligned rows, 334 k-blocks a CTA) they plan one CTA per tile unforced.
FORCED_ONLY = {
    "fp8_rowwise_promoted": GemmSpec(4634, 4968, 3680, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                     accumulation=Accumulation.PROMOTED),
    "fp8_blockwise": GemmSpec(4634, 4968, 3680, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                              accumulation=Accumulation.PROMOTED),
    "bf16_fused": fused(bf16(4634, 4968, 3672)),
}


@pytest.mark.parametrize("name", list(FORCED_ONLY))
def test_new_recipes_are_clustered_when_forced_only(name: str) -> None:
    spec = FORCED_ONLY[name]
    with emitting_for("3.9"):
        assert plan_schedule(bf16(4634, 4968, 3672), H100_SXM).cluster == 2  # (the measured recipe)
        assert plan_schedule(spec, H100_SXM).cluster == 1
        forced = plan_schedule(spec, H100_SXM, cluster=2)
    assert (forced.cluster, forced.bm, forced.bn, forced.consumer_partitions) == (2, 128, 256, 2)
    m, _ = compile_schedule(spec, forced, H100_SXM)
    assert verify.complete(m, H100_SXM) == []
    assert m.smem_bytes <= H100_SXM.smem_per_block


@pytest.mark.parametrize("shape", list(CHOICES), ids=lambda s: "x".join(map(str, s)))
def test_rule24_choice_under_triton_39(shape: tuple[int, int, int]) -> None:
    with emitting_for("3.9"):
        plan = plan_schedule(bf16(*shape), H100_SXM)
    assert (plan.cluster == 2) == CHOICES[shape], plan.short()
    if plan.cluster == 2:
        assert (plan.bm, plan.bn, plan.consumer_partitions, plan.stream_k, plan.split_k) == (128, 256, 2, 0, 1)
        assert plan.grid % 2 == 0 and plan.grid <= H100_SXM.sm_count


# Under one whole wave of clusters, at a long K (16-bit, >= 96 k-blocks): clusters where 256-row cluster tiles pad M
# by at most CLUSTER_PARTIAL_MAX_PAD (session 31, bf16 K-major; ratios against torch, clusters vs one CTA a tile).
PARTIAL_WAVE_CHOICES = {
    (12108, 160, 14264): True,  # 48 cluster tiles, pad 1.5%: 0.818 vs 0.642
    (1256, 1720, 11240): True,  # pad 1.9%: 0.690 vs 0.697 (even)
    (1057, 2048, 7112): False,  # pad 21%: 0.807 vs 0.784 (given up)
    (527, 4680, 6416): False,  # pad 46%: 0.748 vs 0.825
    (168, 8424, 12040): False,  # pad 52%: 0.726 vs stream-K's 0.767
    (2848, 736, 3088): False,  # 48 k-blocks, not a long K: 5% slower in clusters (session 24)
}


@pytest.mark.parametrize("shape", list(PARTIAL_WAVE_CHOICES), ids=lambda s: "x".join(map(str, s)))
def test_rule24_partial_wave_at_long_k(shape: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    from warploom.planner import explain
    from warploom.planning.sm90 import rule as sm90

    # (rule 24 alone: rule 37 puts fitted tiles in clusters at three of these shapes, tests/unit/test_fitted_cluster.py)
    monkeypatch.setattr(sm90, "fitted_cluster", lambda spec, device, plan: None)
    with emitting_for("3.9"):
        e = explain(GemmSpec(*shape), H100_SXM)
    assert (e.plan.cluster == 2) == PARTIAL_WAVE_CHOICES[shape], e.plan.short()
    row = next(line for line in e.text().splitlines() if "2-CTA clusters" in line)
    if e.plan.cluster == 2:
        assert "the partial wave gains too" in row, row
    elif shape[2] >= 96 * 64:
        assert "256-row tiles pad M by" in row, row


def test_cluster_row_pad_and_an_empty_m() -> None:
    from warploom.planning.sm90.clusters import cluster_row_pad

    assert cluster_row_pad(GemmSpec(256, 64, 64)) == 0.0
    assert cluster_row_pad(GemmSpec(168, 64, 64)) == pytest.approx(256 / 168 - 1)
    assert cluster_row_pad(GemmSpec(0, 64, 64)) == 0.0
    # (an empty M with unaligned rows under 3.9 planned a cluster of grid 0, which Plan refuses)
    with emitting_for("3.9"):
        plan = plan_schedule(GemmSpec(0, 8200, 4096), H100_SXM)
    assert plan.grid >= 1


@pytest.mark.parametrize("shape", list(FP8_CHOICES), ids=lambda s: "x".join(map(str, s)))
def test_rule24_fp8_choice_under_triton_39(shape: tuple[int, int, int]) -> None:
    spec = GemmSpec(*shape, a_dtype=E4, b_dtype=E4, scale=ScaleRecipe.ROWWISE)
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM)
    assert (plan.cluster == 2) == FP8_CHOICES[shape], plan.short()


@pytest.mark.parametrize("shape", list(CHOICES), ids=lambda s: "x".join(map(str, s)))
def test_no_cluster_under_triton_36(shape: tuple[int, int, int]) -> None:
    with emitting_for("3.6"):
        assert plan_schedule(bf16(*shape), H100_SXM).cluster == 1
        with pytest.raises(UnsupportedError, match=r"Triton >= 3\.7"):
            plan_schedule(bf16(*shape), H100_SXM, cluster=2)


@pytest.mark.parametrize("spec,why", [
    (GemmSpec(4096, 4096, 4096, a_layout=ALayout.M_MAJOR), "M-major A"),
    (fused(GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    accumulation=Accumulation.PROMOTED)), "fused epilogue graph with promoted fp8.*use_fast_accum"),
    (GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, grouping=Grouping.OFFSETS,
              groups=4), "grouped"),
])
def test_forced_cluster_refused_with_the_reason(spec: GemmSpec, why: str) -> None:
    with emitting_for("3.9"), pytest.raises(UnsupportedError, match=why):
        plan_schedule(spec, H100_SXM, cluster=2)


def test_forced_cluster_conflicts() -> None:
    with emitting_for("3.9"):
        with pytest.raises(UnsupportedError, match="cluster=3"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=3)
        with pytest.raises(UnsupportedError, match="stream_k"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, stream_k=2)
        with pytest.raises(UnsupportedError, match=r"128x256 or 128x128 .* or 64x128 \(bm=64\) with one"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, bn=64)
        with pytest.raises(UnsupportedError, match=r"64x128 \(bm=64\) with one"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, bm=64, bn=128, consumer_partitions=2)
        with pytest.raises(UnsupportedError, match=r"64x128 \(bm=64\) with one"):  # (one warpgroup: 64 rows only)
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, consumer_partitions=1)
        with pytest.raises(UnsupportedError, match="1x2 cluster's tile other than 128x256"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster="1x2", bn=128)
        with pytest.raises(UnsupportedError, match="no 2x1 cluster plan fits .* stages=12"):
            plan_schedule(bf16(662, 1096, 3752), H100_SXM, cluster=2, bm=64, bn=128, stages=12)


@pytest.mark.parametrize("forced,tile,parts", [({"bm": 64, "bn": 128}, (64, 128), 1), ({"bm": 64}, (64, 128), 1),
                                               ({"bm": 128, "bn": 128}, (128, 128), 2), ({"bn": 128}, (128, 128), 2)])
def test_forced_128_and_64_row_clusters(forced: dict[str, int], tile: tuple[int, int], parts: int) -> None:
    """Rule 24's smaller tiles (CLUSTER_TILES), forced only: a 2x1 cluster of 128x128 tiles (each warpgroup 128
    cluster rows by 64 columns, as the 128x256 form's) or of 64x128 ones (one warpgroup a CTA keeps its 64x128
    block); the grid is two CTAs a cluster tile of 2 BM rows, up to the SMs' 66 clusters."""
    m, n, k = 662, 1096, 3752
    with emitting_for("3.9"):
        plan = plan_schedule(bf16(m, n, k), H100_SXM, cluster=2, **forced)
        assert (plan.bm, plan.bn, plan.consumer_partitions, plan.cluster) == (*tile, parts, 2)
        assert plan.grid == 2 * min(66, -(-m // (2 * tile[0])) * -(-n // tile[1]))
        assert plan.epilogue_subtiles == (2 if parts == 2 else 1) and not plan.split_k > 1 and not plan.stream_k
        module, _ = compile_schedule(bf16(m, n, k), plan, H100_SXM)
        assert verify.complete(module, H100_SXM) == []
        assert module.tiling.cluster == 2 and not module.tiling.interleaved


@pytest.mark.parametrize("shape", [(662, 1096, 3752), (6262, 120, 2120), (494, 1528, 2496), (73, 7472, 4784)])
def test_the_planner_takes_no_small_tile_cluster(shape: tuple[int, int, int]) -> None:
    """Unforced, the planner keeps one CTA a tile where 64x128 clusters were measured (K-major B, as timed):
    662x1096x3752 and 6262x120x2120 ran faster in clusters, 494x1528x2496 slower, and no rule tells them apart;
    73x7472x4784 is rule 25's split of 128x128 tiles since session 42 (faster than either there)."""
    with emitting_for("3.9"):
        plan = plan_schedule(GemmSpec(*shape), H100_SXM)
    assert plan.cluster == 1, plan.short()
    assert (plan.bm, plan.split_k) == ((128, 2) if shape == (73, 7472, 4784) else (64, 1)), plan.short()


def test_small_tile_cluster_refusals_and_promoted_blocks() -> None:
    """The one-warpgroup tile is named by bm=64 (bn=128 alone is the 128x128 tile, so one warpgroup is refused);
    fitted blocks cluster on 128x256 only; a 64x128 cluster of promoted fp8 keeps one CTA's promotion blocks, and a
    forced count of them is taken (the 128-row tiles' CLUSTER_PROMOTED_BLOCKS does not apply)."""
    spec = GemmSpec(1000, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED)
    with emitting_for("3.9"):
        with pytest.raises(UnsupportedError, match=r"64x128 \(bm=64\) with one"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, bn=128, consumer_partitions=1)
        with pytest.raises(UnsupportedError, match="n_blocks=.*Fix: pass bm=128, bn=256"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster=2, bn=128, n_blocks=(64, 16))
        planned = plan_schedule(spec, H100_SXM, cluster=2, bm=64)
        assert (planned.bm, planned.cluster) == (64, 2)
        for blocks in (1, 2):
            forced = plan_schedule(spec, H100_SXM, cluster=2, bm=64, partial_blocks=blocks)
            assert (forced.partial_blocks, forced.cluster) == (blocks, 2)
        with pytest.raises(UnsupportedError, match="partial_blocks=2: expected 4"):
            plan_schedule(spec, H100_SXM, cluster=2, bn=128, partial_blocks=2)


def test_one_sm_device_runs_no_cluster() -> None:
    """A 2-CTA cluster runs on two SMs: on a one-SM device (the property tests' smallest) rule 24 scores no clusters
    (it divided by its zero clusters: ZeroDivisionError under Triton 3.9), and a forced cluster is refused by name."""
    one = DeviceInfo("one SM", "sm_90a", 1, H100_SXM.smem_per_block)
    with emitting_for("3.9"):
        assert plan_schedule(bf16(3000, 3000, 3000), one).cluster == 1
        with pytest.raises(UnsupportedError, match="has 1 SM"):
            plan_schedule(bf16(3000, 3000, 3000), one, cluster=2)


@pytest.mark.parametrize("fields", [dict(cluster=3), dict(cluster=2, stream_k=2), dict(cluster=2, grid=131),
                                    dict(cluster=2, swap_ab=True), dict(cluster=2, split_k=2)])
def test_plan_validates_cluster(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="cluster"):
        Plan(**{"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumer_warps": 8, "group_m": 8, "grid": 132,
                **fields})  # type: ignore[arg-type]


def cluster_module(spec: GemmSpec | None = None) -> ir.Module:
    spec = spec or bf16(4634, 4968, 3672)
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM, cluster=2)
    m, _ = compile_schedule(spec, plan, H100_SXM)
    return m


def test_the_module_shares_b() -> None:
    m = cluster_module()
    assert m.tiling.cluster == 2 and m.tiling.exit_sync
    shared = m.barrier(CLUSTER_EMPTY)
    assert shared.cluster and shared.purpose is ir.Purpose.EMPTY and shared.rings == ("b_ring",)
    assert shared.count == m.barrier("empty").count == 2  # (per CTA: both consumer warpgroups release each slot)
    loads = [o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TmaLoad)]
    assert {(o.tensor, o.multicast) for o in loads} == {(ir.Tensor.A, False), (ir.Tensor.B, True)}
    cons = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert [(p.rows, p.accumulators[0].col0, p.accumulators[0].cols) for p in cons] == [(None, 0, 128),
                                                                                       (None, 128, 128)]
    text = printer.module(m)
    assert "cluster=2" in text and "per cluster, in the lead CTA" in text and "multicast (the lead CTA" in text
    assert "exit_sync (a cluster barrier before exit)" in text
    # Descriptors: A's box holds both CTAs' rows, split between them; B's is every CTA's; C's staging split.
    blocks = descriptor_blocks(m)
    assert blocks["a_desc"][1:] == ([256, 64], ((1, 0),), False)
    assert blocks["b_desc"][1:] == ([64, 256], ((0, 0),), False)
    assert blocks["c_desc"][1:] == ([256, 64], ((1, 0),), False)


def _producer(m: ir.Module) -> ir.Partition:
    return next(p for p in m.partitions if p.role is ir.Role.PRODUCER)


def _drop(m: ir.Module, part: Callable[[ir.Partition], bool], gone: Callable[[ir.Op], bool]) -> ir.Module:
    from warploom.passes.util import filter_ops

    return replace(m, partitions=tuple(replace(p, body=filter_ops(p.body, lambda o: not gone(o))) if part(p) else p
                                       for p in m.partitions))


def _multicast(m: ir.Module, tensor: ir.Tensor, on: bool, lead_only: bool = True) -> ir.Module:
    """`m` with its loads of `tensor` multicast (`on`; by the lead alone, `lead_only`, or by every CTA) or not."""
    from warploom.passes.util import rewrite

    def f(o: ir.Op) -> tuple[ir.Stmt, ...]:
        return (replace(o, multicast=on, lead_only=lead_only),) if isinstance(o, ir.TmaLoad) and o.tensor is tensor \
            else (o,)

    return replace(m, partitions=tuple(replace(p, body=rewrite(p.body, f)) for p in m.partitions))


CORRUPTIONS: dict[str, tuple[Callable[[ir.Module], ir.Module], str]] = {
    "producer skips the cluster wait": (
        lambda m: _drop(m, lambda p: p.role is ir.Role.PRODUCER,
                        lambda o: isinstance(o, ir.Wait) and o.barrier == CLUSTER_EMPTY),
        "not preceded by a wait on cluster_empty"),
    "a consumer does not release B to the cluster": (
        lambda m: _drop(m, lambda p: p.name == "consumer1",
                        lambda o: isinstance(o, ir.Arrive) and o.barrier == CLUSTER_EMPTY),
        "does not release it on cluster_empty"),
    "A multicast": (lambda m: _multicast(m, ir.Tensor.A, True), "B's loads, and only B's, are multicast"),
    "B not multicast in a cluster": (lambda m: _multicast(m, ir.Tensor.B, False), "B's loads, and only B's"),
    "every CTA multicasts B": (lambda m: _multicast(m, ir.Tensor.B, True, lead_only=False),
                               "issued by every CTA of the cluster: each slot would be written 2 times"),
    "no cluster barrier before exit": (lambda m: replace(m, tiling=replace(m.tiling, exit_sync=False)),
                                       "cluster=2 without exit_sync"),
    "no cluster barrier": (
        lambda m: replace(m, barriers=tuple(b for b in m.barriers if not b.cluster)),
        "unknown barrier|no EMPTY cluster barrier"),
    "cluster barrier without a cluster": (
        lambda m: replace(m, tiling=replace(m.tiling, cluster=1)),
        "in a module without a cluster"),
    "exit barrier without a cluster": (
        lambda m: replace(m, tiling=replace(m.tiling, cluster=1)),
        r"exit_sync \(a cluster barrier before exit\) in a module without a cluster"),
    "three CTAs": (lambda m: replace(m, tiling=replace(m.tiling, cluster=4)), "clusters of 2 CTAs"),
    "row-block consumers": (
        lambda m: replace(m, partitions=tuple(replace(p, rows=ir.RowBlock(0, 128)) if p.role is ir.Role.CONSUMER
                                              else p for p in m.partitions)),
        "row block"),
    "with stream-K": (lambda m: replace(m, tiling=replace(m.tiling, stream_k=2)), "a cluster runs whole tiles"),
}


def test_cluster_module_verifies_clean() -> None:
    assert verify.complete(cluster_module(), H100_SXM) == []


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_verifier_reports(name: str) -> None:
    corrupt, pattern = CORRUPTIONS[name]
    errs = verify.complete(corrupt(cluster_module()), H100_SXM)
    assert any(re.search(pattern, e) for e in errs), errs


def test_generated_gluon_under_triton_39() -> None:
    with emitting_for("3.9"):
        src = gluon_sm90.lower(cluster_module())
    assert src.num_ctas == 2
    t = src.text
    assert "BM = gl.constexpr(256)" in t  # the program's tile: the cluster's
    assert "tma.async_load(b_desc, [kk * BK, off_n], ready_bars.index(p % STAGES), b_ring.index(p % STAGES), " \
           "multicast=True)" in t
    assert "tma.async_load(a_desc, [off_m, kk * BK], ready_bars.index(p % STAGES), a_ring.index(p % STAGES))" in t
    assert "cluster_empty_bars = mbarrier.allocate_mbarrier(batch=4, two_ctas=True)" in t
    assert "empty_bars = mbarrier.allocate_mbarrier(batch=4)" in t
    assert "cga_layout=[[1, 0]]" in t and "gl.zeros([256, 128], gl.float32, acc_layout)" in t
    assert "a_ring = gl.allocate_shared_memory(a_desc.dtype, [4, 256, 64], a_desc.layout)" in t
    assert "b_ring.index(c % STAGES).slice(128, 128, dim=1)" in t  # warpgroup 1's column block of B
    assert "cluster.barrier" not in t  # (exit_sync: Triton inserts the cluster barrier before the kernel returns)


@pytest.mark.parametrize("corrupt,why", [
    (lambda m: _multicast(m, ir.Tensor.B, True, lead_only=False), "a multicast issued by every CTA"),
    (lambda m: replace(m, tiling=replace(m.tiling, exit_sync=False)), "a cluster without exit_sync"),
], ids=["every_cta_multicasts", "no_exit_sync"])
def test_lowering_refuses_what_gluon_does_not_emit(corrupt: Callable[[ir.Module], ir.Module], why: str) -> None:
    """A broadcast layout's multicast is the lead's alone, and Triton ends every cluster's kernel with a cluster
    barrier (`Tiling.exit_sync`, not emitted): a module that says otherwise is not what the kernel would do."""
    with emitting_for("3.9"), pytest.raises(NotImplementedError, match=why):
        gluon_sm90.lower(corrupt(cluster_module()))


def test_lowering_under_triton_36_refuses_multicast() -> None:
    m = cluster_module()
    with emitting_for("3.6"), pytest.raises(UnsupportedError, match=r"Triton >= 3\.7.*Fix: plan with cluster=1"):
        gluon_sm90.lower(m)


@pytest.mark.parametrize("spec", [
    GemmSpec(2000, 2112, 1008, E4, E4, DType.FP32, BLayout.K_MAJOR, ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
    GemmSpec(1000, 1000, 1000, DType.FP16, DType.FP16, DType.FP16),
], ids=["fp8_rowwise_bias_fp32", "fp16"])
def test_other_recipes_build(spec: GemmSpec) -> None:
    """fp8 rowwise with a bias into fp32 stores in blocks half as wide (the staging takes what it took)."""
    m = cluster_module(spec)
    assert verify.complete(m, H100_SXM) == []
    assert m.smem_bytes <= H100_SXM.smem_per_block


def test_promoted_columns_split_in_64_column_blocks() -> None:
    """Promoted fp8 in a cluster: warpgroup i holds columns 128i.. in two 128x64 accumulators and a 128x64 partial
    (192 registers a thread, as the row split's 64x128 blocks), and issues only its blocks' wgmma and promotions."""
    m = cluster_module(FORCED_ONLY["fp8_rowwise_promoted"])
    cons = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    for i, p in enumerate(cons):
        assert [(a.name, a.rows, a.cols, a.col0) for a in p.accumulators] == [
            (f"acc{2 * i}", 128, 64, 128 * i), (f"acc{2 * i + 1}", 128, 64, 128 * i + 64), ("partial", 128, 64, 0)]
        mmas = [o.n_cols for o, _ in ir.walk(p.body) if isinstance(o, ir.Mma)]
        assert mmas == [ir.ColBlock(128 * i, 64), ir.ColBlock(128 * i + 64, 64)]
        assert sum(isinstance(o, ir.MmaWait) for o, _ in ir.walk(p.body)) == 2
        assert {o.dst for o, _ in ir.walk(p.body) if isinstance(o, ir.Promote)} == {f"acc{2 * i}", f"acc{2 * i + 1}"}


def test_blockwise_scale_rings_in_a_cluster_under_triton_39() -> None:
    """Each CTA copies its own rows' scale_a (the ring's slot split between the CTAs) and the tile's scale_b
    whole (broadcast: cp.async has no multicast)."""
    with emitting_for("3.9"):
        t = gluon_sm90.lower(cluster_module(FORCED_ONLY["fp8_blockwise"])).text
    assert "sa_ring = gl.allocate_shared_memory(gl.float32, [3, 256], gl.SwizzledSharedLayout(1, 1, 1, [0], " \
           "cga_layout=[[1]]))" in t
    assert "sb_ring = gl.allocate_shared_memory(gl.float32, [3, 2], gl.SwizzledSharedLayout(1, 1, 1, [0], " \
           "cga_layout=[[0]]))" in t
    assert "sa_ring_idx = off_m + gl.arange(0, 256, layout=sa_ring_copy)" in t
    assert "gl.BlockedLayout([4], [32], [1], [0], cga_layout=[[1]])" in t  # (4 a thread: one CTA's 128 rows)


def test_fused_operands_in_a_cluster() -> None:
    """A dense operand's block is every CTA's rows (its descriptor split as C's), its private barrier one per CTA,
    and each CTA expects its own rows' bytes."""
    m = cluster_module(FORCED_ONLY["bf16_fused"])
    assert descriptor_blocks(m)["res_desc"][1:] == ([256, 16], ((1, 0),), False)
    with emitting_for("3.9"):
        t = gluon_sm90.lower(m).text
    assert "res_smem0_bar = mbarrier.allocate_mbarrier()" in t
    assert "mbarrier.expect(res_smem0_bar, 4096)" in t  # (128 rows x 16 columns x 2 bytes: one CTA's)



# 1x2 clusters (ShareA): forced only (`cluster="1x2"`); the planner's own choice stays 2x1 (CHOICES above).
def along_n_module(spec: GemmSpec | None = None) -> ir.Module:
    spec = spec or bf16(4634, 4968, 3672)
    with emitting_for("3.9"):
        plan = plan_schedule(spec, H100_SXM, cluster="1x2")
    assert plan.cluster == 2 and plan.cluster_n and plan.short().endswith("_c1x2")
    m, _ = compile_schedule(spec, plan, H100_SXM)
    return m


def test_the_1x2_module_shares_a() -> None:
    m = along_n_module()
    assert m.tiling.cluster_n and m.tiling.cluster_mn == (1, 2) and m.tiling.exit_sync
    assert m.barrier(CLUSTER_EMPTY).rings == ("a_ring",)
    loads = [o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TmaLoad)]
    assert {(o.tensor, o.multicast) for o in loads} == {(ir.Tensor.A, True), (ir.Tensor.B, False)}
    cons = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert [p.rows for p in cons] == [ir.RowBlock(0, 64), ir.RowBlock(64, 64)]  # (the row split kept)
    assert "cluster=1x2 (CTAs along N sharing A)" in printer.module(m)
    assert verify.complete(m, H100_SXM) == []
    blocks = descriptor_blocks(m)
    assert blocks["a_desc"][1:] == ([128, 64], ((0, 0),), False)  # every CTA A's whole box
    assert blocks["b_desc"][1:] == ([64, 512], ((0, 1),), False)  # each CTA its columns of B's
    assert blocks["c_desc"][1:] == ([64, 512], ((0, 1),), False)  # a warpgroup's whole 64-row block
    k_major = descriptor_blocks(along_n_module(GemmSpec(2000, 2112, 1008)))
    assert k_major["b_desc"][1:] == ([512, 64], ((1, 0),), False)


def test_the_1x2_choice_and_refusals() -> None:
    with emitting_for("3.9"):
        for shape, clustered in CHOICES.items():
            plan = plan_schedule(bf16(*shape), H100_SXM)
            assert not plan.cluster_n and (plan.cluster == 2) == clustered
        for spec, why in [(FORCED_ONLY["fp8_rowwise_promoted"], "promoted fp8 .* 1x2 cluster.*use cluster=2"),
                          (FORCED_ONLY["bf16_fused"], "fused epilogue graph.* 1x2"),
                          (GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                    bias_dtype=DType.BF16), "rowwise scales with a bias")]:
            with pytest.raises(UnsupportedError, match=f"cluster='1x2' .*{why}"):
                plan_schedule(spec, H100_SXM, cluster="1x2")
        with pytest.raises(UnsupportedError, match=r"cluster='1x2' .*stages=4: expected at most 3 .*stages <= 3"):
            plan_schedule(bf16(4634, 4968, 3672), H100_SXM, cluster="1x2", stages=4)
        with pytest.raises(UnsupportedError, match=r"cluster='2x2': expected .*\"1x2\" \(along N, multicasting A\)"):
            plan_schedule(bf16(4096, 4096, 4096), H100_SXM, cluster="2x2")
        assert plan_schedule(bf16(4634, 4968, 3672), H100_SXM, cluster="2x1") == \
            plan_schedule(bf16(4634, 4968, 3672), H100_SXM, cluster=2)
    with pytest.raises(ValueError, match="cluster_n"):
        Plan(bm=128, bn=256, bk=64, stages=4, consumer_warps=8, group_m=8, grid=132, cluster_n=True)



def test_replan_keeps_a_1x2_plan() -> None:
    """`replan` (the tune cache's check that a cached plan still builds) forces a 1x2 plan's cluster as "1x2": forced
    as cluster=2 it built the 2x1 plan instead, so a cached 1x2 winner was never valid."""
    from warploom.tune.candidates import replan

    with emitting_for("3.9"):
        for spec in (bf16(4634, 4968, 3672), GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)):
            plan = plan_schedule(spec, H100_SXM, cluster="1x2")
            assert replan(spec, H100_SXM, plan) == plan
            two = plan_schedule(spec, H100_SXM, cluster=2)
            assert replan(spec, H100_SXM, two) == two



def test_a_bool_cluster_knob_is_refused() -> None:
    """cluster=True is not a cluster shape: refused by its type with the other options' (it equals 1 as a dict key,
    so it planned one CTA per tile, even where rule 24 clusters unforced), as is cluster=False."""
    with emitting_for("3.9"):
        for knob in (True, False):
            with pytest.raises(ArgumentTypeError, match=rf"^cluster: expected None, 1, 2, .*\"1x2\", got bool {knob}"):
                plan_schedule(bf16(4634, 4968, 3672), H100_SXM, cluster=knob)

def test_forced_partial_blocks_in_a_2x1_cluster() -> None:
    """Promoted fp8 in a 2x1 cluster promotes in CLUSTER_PROMOTED_BLOCKS (4) column blocks: another forced
    partial_blocks is refused, naming the option, rather than silently replaced by 4."""
    spec = FORCED_ONLY["fp8_rowwise_promoted"]
    with emitting_for("3.9"):
        assert plan_schedule(spec, H100_SXM, cluster=2, partial_blocks=4).partial_blocks == 4
        for blocks in (1, 2):
            with pytest.raises(UnsupportedError, match=rf"cluster=2 .*partial_blocks={blocks}.*expected 4.*Fix"):
                plan_schedule(spec, H100_SXM, cluster=2, partial_blocks=blocks)


ALONG_N_CORRUPTIONS: dict[str, tuple[Callable[[ir.Module], ir.Module], str]] = {
    "A multicast by both CTAs": (lambda m: _multicast(m, ir.Tensor.A, True, lead_only=False),
                                 "issued by every CTA of the cluster"),
    "B multicast in a 1x2 cluster": (lambda m: _multicast(m, ir.Tensor.B, True), "A's loads, and only A's"),
    "A not multicast": (lambda m: _multicast(m, ir.Tensor.A, False), "A's loads, and only A's"),
    "a consumer does not release A to the cluster": (
        lambda m: _drop(m, lambda p: p.name == "consumer1",
                        lambda o: isinstance(o, ir.Arrive) and o.barrier == CLUSTER_EMPTY),
        "reads a_ring but does not release it on cluster_empty"),
    "column-block wgmma": (
        lambda m: replace(m, partitions=tuple(replace(p, body=_rewrite_mma(p.body)) for p in m.partitions)),
        "takes a column block of the tile .* in a 1x2 cluster"),
    "column-block stores": (
        lambda m: replace(m, partitions=tuple(replace(p, body=_halve_stores(p.body)) for p in m.partitions)),
        "takes a column block of the tile .* in a 1x2 cluster"),
    "blockwise scale ring in 1x2": (
        lambda m: replace(m, rings=m.rings + (ir.Ring("sa_ring", ir.Tensor.SCALE_A, DType.FP32, 3, 1, 128),)),
        "sa_ring in a 1x2 cluster's module: .* Fix: cluster=2"),
    "cluster_n without a cluster": (lambda m: replace(m, tiling=replace(m.tiling, cluster=1)),
                                    "cluster_n .* in a module without a cluster"),
}


def _halve_stores(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    from warploom.passes.util import rewrite

    return rewrite(body, lambda o: (replace(o, parts=2),) if isinstance(o, ir.StoreSmem | ir.TmaStore) else (o,))


def _rewrite_mma(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    from warploom.passes.util import rewrite

    return rewrite(body, lambda o: (replace(o, n_cols=ir.ColBlock(0, 128)),) if isinstance(o, ir.Mma) else (o,))


@pytest.mark.parametrize("name", list(ALONG_N_CORRUPTIONS))
def test_verifier_reports_1x2(name: str) -> None:
    corrupt, pattern = ALONG_N_CORRUPTIONS[name]
    errs = verify.complete(corrupt(along_n_module()), H100_SXM)
    assert any(re.search(pattern, e) for e in errs), errs


def test_generated_1x2_gluon_under_triton_39() -> None:
    with emitting_for("3.9"):
        src = gluon_sm90.lower(along_n_module())
    t = src.text
    assert src.num_ctas == 2
    assert "BM = gl.constexpr(128)" in t and "BN = gl.constexpr(512)" in t  # the program's tile: the cluster's
    assert "tma.async_load(a_desc, [off_m, kk * BK], ready_bars.index(p % STAGES), a_ring.index(p % STAGES), " \
           "multicast=True)" in t
    assert "tma.async_load(b_desc, [kk * BK, off_n], ready_bars.index(p % STAGES), b_ring.index(p % STAGES))" in t
    assert "cga_layout=[[0, 1]]" in t and "acc = gl.zeros([64, 512], gl.float32, acc_layout)" in t
    assert "b_ring = gl.allocate_shared_memory(b_desc.dtype, [3, 64, 512], b_desc.layout)" in t
    assert "c_smem1 = gl.allocate_shared_memory(c_desc.dtype, [64, 512], c_desc.layout)" in t
    assert "tma.async_store(c_desc, [off_m + 64, off_n], c_smem1)" in t


def _sweep_spec(case: str, m: int, n: int, k: int) -> GemmSpec:
    """The spec scripts/sweep_plans.py's `case` builds on the GPU, from its dtypes alone (no tensors)."""
    fp8 = {"fp8": (ScaleRecipe.ROWWISE, Accumulation.NATIVE), "fp8-exact": (ScaleRecipe.ROWWISE,
                                                                            Accumulation.PROMOTED),
           "blockwise": (ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED),
           "fp8-gelu": (ScaleRecipe.ROWWISE, Accumulation.NATIVE)}
    if case in fp8:
        scale, acc = fp8[case]
        spec = GemmSpec(m, n, k, E4, E4, DType.BF16, scale=scale, accumulation=acc,
                        bias_dtype=DType.BF16 if case == "fp8-gelu" else None)
    else:
        spec = GemmSpec(m, n, k)
    return fused(spec) if case.endswith("-gelu") else spec


@pytest.mark.parametrize("shape", [(4634, 4968, 3672), (14312, 1920, 688), (16384, 1024, 3672), (4096, 7168, 7168)],
                         ids=lambda s: "x".join(map(str, s)))
def test_sweep_cluster_variants_plan(shape: tuple[int, int, int]) -> None:
    """Every variant of `scripts/gpu.sh clusters` (sweep_plans --variants clusters) plans its cluster form under
    Triton 3.9 at the target's default shapes, so the lead's run measures what it names."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import sweep_plans

    for case, variants in sweep_plans.CLUSTER_VARIANTS.items():
        spec = _sweep_spec(case, *shape)
        for kw in variants:
            with emitting_for("3.9"):
                plan = plan_schedule(spec, H100_SXM, **kw)
            if "cluster" in kw:
                assert (plan.cluster, plan.cluster_n) == ({1: 1, 2: 2, "1x2": 2}[kw["cluster"]],
                                                          kw["cluster"] == "1x2"), (case, kw)
            if "pingpong" in kw:
                assert plan.pingpong and (plan.bm, plan.bn) == (128, 128), (case, kw)
    assert {"pingpong": True, "cluster": 2} in sweep_plans.CLUSTER_VARIANTS["bf16"]


def test_explain_says_why_rule_24_passes_over_a_cluster() -> None:
    """`explain` lists a scored cluster candidate the rule does not take with its reason (a promoted spec: forced
    only; too few k-blocks a CTA), and a taken one without."""
    from warploom import checks
    from warploom.planner import explain

    def bf16(m: int, n: int, k: int) -> GemmSpec:
        return checks.matmul_spec(torch.empty(m, k, dtype=torch.bfloat16),
                                  torch.empty(n, k, dtype=torch.bfloat16).t(), None)

    promoted = GemmSpec(4634, 4976, 3680, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                        accumulation=Accumulation.PROMOTED)
    with emitting_for("3.9"):
        taken, short_k, forced_only = (explain(s, H100_SXM) for s in (bf16(4634, 4968, 3672), bf16(917, 5184, 608),
                                                                       promoted))
    assert taken.plan.cluster == 2 and "not taken" not in taken.text()
    assert short_k.plan.cluster == 1 and "not taken: 13 k-blocks a CTA, under the floor of 32" in short_k.text()
    assert forced_only.plan.cluster == 1 and "not taken: forced only for promoted" in forced_only.text()
