"""Planner rule 32's fitted tiles (docs/decisions/rule-32-fitted-tiles.md): the candidates and their scores, the
planner's choice on a fixed table of shapes (a golden table: a change to the rule shows here in review), where the
rule stands aside, its 192-row tiles (three consumer warpgroups, A in 64-row boxes: `ir.Ring.boxes`) and what the
verifier refuses of them. Numerics are tests/sim/test_narrow_sim.py's; the compiled kernels
tests/compile/test_compile_narrow.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import H100_SXM, H200, DeviceInfo, DType, GemmSpec, ScaleRecipe
from warploom.errors import PlanError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import explain, plan_schedule
from warploom.planning.sm90.fitted import (
    H100_L2,
    H200_L2,
    blocks_of,
    candidates,
    current_score,
    l2_floor,
    l2_rates,
    sector_aligned,
)
from warploom.planning.sm90.models import stream_k_score
from warploom.spec import ALayout
from warploom.tune.cost import estimate

# (M, N, K) -> the planner's plan, short form. The fitted ones measured on the H100 in session 33 (ratio to torch,
# CUDA graphs, before -> after): 1679x2456x2000 0.59 -> 0.85, 3838x576x2768 0.60 -> 0.97, 3097x920x2920
# 0.69 -> 0.74, 1253x2024x688 0.75 -> 0.89, 3000^3 0.69 -> 0.84, 1536^3 0.78 -> 1.03; and where the L2 floor
# (`l2_floor`, session 34) takes one at a long K: 4619x2064x13392 0.77 -> 0.90, 3841x840x4816 0.67 -> 0.94.
GOLDEN = {
    (1679, 2456, 2000): "192x256x64_s4_w12_g8_e4_p3_n128_64",
    (3838, 576, 2768): "128x256x64_s6_w8_g8_e4_p2_n128_16",
    (3097, 920, 2920): "128x256x64_s5_w8_g8_e4_p2_n128_64",
    (1253, 2024, 688): "128x256x64_s5_w8_g8_e2_p2_n128_32",
    (3000, 3000, 3000): "192x256x64_s4_w12_g8_e4_p3_n128_64",
    (1536, 1536, 1536): "128x256x64_s6_w8_g8_e4_p2_n128_16",
    (4619, 2064, 13392): "192x256x64_s4_w12_g8_e4_p3_n128_64_16",
    (3841, 840, 4816): "192x256x64_s4_w12_g8_e2_p3_n128_16",
    # (5000^3's rows are only 16-byte aligned, where the floor binds 128x256's full waves: not measured)
    (5000, 5000, 5000): "192x256x64_s3_w12_g8_e2_p3_n128_64_32",
    # (no fitted tile: more rounds, or no gain, or L2 bound: 527x4680x6416's 128x192 ran 0.78 against 0.83 and
    # 1256x1720x11240's 128x144 0.55 against 0.68; at 16-byte aligned rows rule 21's stream-K stays)
    (2188, 4312, 760): "128x256x64_s4_w8_g8_e2_p2",
    (527, 4680, 6416): "128x256x64_s4_w8_g8_e2_p2",
    (1256, 1720, 11240): "128x256x64_s4_w8_g8_e2_p2",
    (1477, 744, 7464): "128x256x64_s4_w8_g8_e2_p2_sk3g108",
    (4096, 4096, 4096): "128x256x64_s4_w8_g8_e2_p2",
    (8192, 8192, 8192): "128x256x64_s4_w8_g8_e2_p2",
    (777, 4096, 4096): "128x256x64_s4_w8_g8_e2_p2",
    # (rule 31's narrow tile, and rules 23, 25 and 33's latency tiles, come first)
    (10050, 80, 1280): "128x128x64_s6_w8_g8_p2_n64_16",
    (300, 80, 200): "64x16x64_s4_w4_g8",
}


@pytest.mark.parametrize("mnk", GOLDEN)
def test_golden_choices(mnk: tuple[int, int, int]) -> None:
    assert plan_schedule(GemmSpec(*mnk), H100_SXM).short() == GOLDEN[mnk]


@pytest.mark.parametrize(("width", "blocks"), [(176, (128, 32, 16)), (192, (128, 64)), (80, (64, 16)),
                                               (208, (128, 64, 16)), (240, (128, 64, 32, 16))])
def test_blocks_of(width: int, blocks: tuple[int, ...]) -> None:
    assert blocks_of(width) == blocks


def test_candidates_count_rounds_and_blocks() -> None:
    """At 1679x2456 a 192x192 tile makes 117 tiles, one round; 128x256's 140 make two. No candidate is a single
    power-of-two block (the other rules' menu) or of more than three blocks, none wider than its rows' registers
    hold."""
    fits = {(f.bm, f.blocks): f for f in candidates(GemmSpec(1679, 2456, 2000), H100_SXM)}
    f = fits[(192, (128, 64))]
    assert (f.tiles, f.rounds, f.bn) == (117, 1, 256)
    assert all(1 < len(b) <= 3 for _, b in fits)
    assert max(sum(b) for bm, b in fits if bm == 256) <= 128 and max(sum(b) for bm, b in fits if bm == 192) <= 224


def test_explain_names_the_rule() -> None:
    text = explain(GemmSpec(1679, 2456, 2000), H100_SXM).text()
    assert "fitted tile (rule 32)" in text and "117 tiles of 192x192 (128+64), 1 round(s)" in text


@pytest.mark.parametrize(("spec", "forced"), [
    (GemmSpec(1679, 2456, 2000, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE), {}),  # fp8
    (GemmSpec(1679, 2456, 2000), {"stream_k": 2}),
    (GemmSpec(1679, 2456, 2000), {"bm": 128, "bn": 256}),
    (GemmSpec(1679, 2456, 2000), {"cluster": 1}),
])
def test_rule_stands_aside(spec: GemmSpec, forced: dict[str, object]) -> None:
    assert plan_schedule(spec, H100_SXM, **forced).n_blocks == ()  # type: ignore[arg-type]


def test_an_m_major_a_keeps_128_rows() -> None:
    """A 192-row slot is copied as 64-row boxes of K-major rows: an M-major A (a backward pass's x.t()) gets a fitted
    tile of 128 rows instead, and a forced 192-row one is refused by name."""
    spec = GemmSpec(1679, 2456, 2000, a_layout=ALayout.M_MAJOR)
    plan = plan_schedule(spec, H100_SXM)
    assert (plan.bm, plan.n_blocks) == (128, (128, 16))
    with pytest.raises(UnsupportedError, match="an M-major A"):
        plan_schedule(spec, H100_SXM, bm=192, bn=128)


def test_192_row_tile() -> None:
    """bm=192: three consumer partitions of one warpgroup each at 160 registers, A's ring stored as 64-row boxes;
    the other partition counts and options rule 17's 256-row tile refuses are refused by name."""
    spec = GemmSpec(1679, 2456, 2000)
    plan = plan_schedule(spec, H100_SXM, bm=192, bn=128, stream_k=0)
    assert (plan.consumer_partitions, plan.consumer_warps, plan.consumer_regs) == (3, 12, 160)
    m = build(spec, H100_SXM, plan).module
    assert m.ring("a_ring").boxes == 3 and m.ring("b_ring").boxes == 1
    assert [p.rows.rows for p in m.partitions if p.rows] == [64, 64, 64]
    with pytest.raises(UnsupportedError, match="consumer_partitions=3 is for bm=192"):
        plan_schedule(spec, H100_SXM, bm=128, bn=128, consumer_partitions=3)
    with pytest.raises(UnsupportedError, match="bm=192 .* does not support split-K"):
        plan_schedule(spec, H100_SXM, bm=192, bn=128, split_k=2)


def test_verifier_refuses_boxes_of_other_rings_and_rows() -> None:
    """A 192-row ring other than A's, and a warpgroup whose rows span two boxes: findings, not a kernel."""
    spec = GemmSpec(600, 500, 256)
    m = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=192, bn=128, stream_k=0)).module
    assert verify.complete(m, H100_SXM) == []
    rings = tuple(replace(r, rows=192) if r.tensor is ir.Tensor.B else r for r in m.rings)
    assert any("only a K-major A's ring" in e for e in verify.complete(replace(m, rings=rings), H100_SXM))
    parts = tuple(replace(p, rows=ir.RowBlock(32, 64)) if p.rows and p.rows.start == 64 else p for p in m.partitions)
    assert any("its rows are not one box" in e for e in verify.complete(replace(m, partitions=parts), H100_SXM))


def test_ring_blocks_are_b_rows_only() -> None:
    with pytest.raises(ValueError, match="row blocks are a fitted tile's B ring's"):
        ir.Ring("a_ring", ir.Tensor.A, DType.BF16, 4, 128, 64, blocks=(ir.ColBlock(0, 64),))
    r = ir.Ring("b_ring", ir.Tensor.B, DType.BF16, 4, 256, 64, blocks=ir.column_blocks((128, 32, 16)))
    assert r.slot_bytes == 176 * 64 * 2 and r.bytes == 4 * 176 * 64 * 2


def test_hand_made_plans_that_would_break_are_refused() -> None:
    """A reviewer's finds: staging slots beside aliased narrow staging (a write would race the store still reading
    the memory), a 192-row tile on one partition (its warpgroups read one 64-row box each), and a whole 192x256 tile
    (64x256 fp32 a warpgroup does not fit 160 registers: ptxas refuses it)."""
    spec = GemmSpec(300, 400, 200)
    plan = plan_schedule(spec, H100_SXM, bm=128, bn=256, stream_k=0, cluster=1, n_blocks=(128, 32, 16))
    with pytest.raises(PlanError, match="staging_slots=2"):
        replace(plan, epilogue_subtiles=4, staging_slots=2)
    fitted = plan_schedule(GemmSpec(1679, 2456, 2000), H100_SXM)
    with pytest.raises(PlanError, match="consumer_partitions=1"):
        replace(fitted, consumer_partitions=1)
    with pytest.raises(UnsupportedError, match="hold at most 224 of a 256-wide slot's columns; pass n_blocks"):
        plan_schedule(GemmSpec(2000, 2000, 2000), H100_SXM, bm=192, bn=256)


def test_explain_and_the_tuner_see_the_fitted_tile() -> None:
    """`explain` names rule 32's tile; the tuner's cost model counts a fitted ring's tile_n rows of B (its shared
    memory fits) and tiles of tile_n columns."""
    spec = GemmSpec(1679, 2456, 2000)
    assert "fitted tile, rule 32: 117 tiles of 192x192 (blocks 128+64 of a 256-wide slot)" in \
        explain(spec, H100_SXM).text()
    est = estimate(spec, H100_SXM, plan_schedule(spec, H100_SXM))
    assert est.smem_bytes <= est.smem_limit and est.why_not() is None, est


@pytest.mark.parametrize("k,aligned", [(4800, True), (4816, True), (11240, False), (5000, False)])
def test_sector_aligned(k: int, aligned: bool) -> None:
    """Rows of 2k bytes start on 32-byte L2 sectors where k is a multiple of 16 bf16 elements."""
    assert sector_aligned(GemmSpec(1024, 1024, k)) is aligned


def test_sector_aligned_m_major_a() -> None:
    """An M-major A's rows are M long: K no longer decides for A."""
    assert sector_aligned(GemmSpec(1024, 1024, 4096, a_layout=ALayout.M_MAJOR))
    assert not sector_aligned(GemmSpec(1000, 1024, 4096, a_layout=ALayout.M_MAJOR))


def test_l2_floor() -> None:
    """Each CTA's rows of A and B a k-block, over L2's bytes a microsecond: none under L2_MIN_KBLOCKS k-blocks,
    `L2Rates.sectors / halves` times more where rows are 16-byte aligned."""
    assert l2_floor(GemmSpec(4096, 4096, 2048), H100_SXM, 132, 128, 256) == 0.0
    aligned, unaligned = l2_floor(GemmSpec(4096, 4096, 11200), H100_SXM, 132, 128, 256), \
        l2_floor(GemmSpec(4096, 4096, 11240), H100_SXM, 132, 128, 256)
    assert aligned == pytest.approx(132 * (128 + 256) * 7.49e6 / 9e6)  # (a full wave of 128x256 is L2 bound)
    assert unaligned == pytest.approx(aligned * H100_L2.sectors / H100_L2.halves)
    assert l2_floor(GemmSpec(4096, 4096, 11200), H100_SXM, 66, 128, 256) == pytest.approx(aligned / 2)


@pytest.mark.parametrize("k,rate", [(11200, "lines"), (11216, "sectors"), (11240, "halves")])
def test_l2_floor_per_part(k: int, rate: str) -> None:
    """The H200's L2 feeds rows of whole 128-byte lines faster than the H100's (12 TB/s against 9) and rows that are
    not at the H100's rates; a part is told by its L2's size, and one of another size is priced as an H100."""
    spec = GemmSpec(4096, 4096, k)
    h100, h200 = (l2_floor(spec, d, 132, 128, 256) for d in (H100_SXM, H200))
    assert h100 == pytest.approx(132 * (128 + 256) * 7.49e6 / getattr(H100_L2, rate))
    assert h200 == pytest.approx(132 * (128 + 256) * 7.49e6 / getattr(H200_L2, rate))
    assert (h200 < h100) is (rate == "lines")
    assert l2_rates(DeviceInfo("H100 PCIe", "sm_90a", 114, 232448)) is H100_L2
    assert l2_rates(replace(H100_SXM, l2_bytes=64 * 2**20)) is H200_L2


@pytest.mark.parametrize("mnk,h100,h200", [
    # (the H200's measured pairs, session 35: 128x128 0.98 against 128x160's 0.80; 128x256's split-K tail 0.91
    # against 192x176's 0.88; at 16-byte rows both parts keep the fitted tile)
    ((1024, 2048, 4096), "128x256x64_s5_w8_g8_e2_p2_n128_32", "128x128x64_s6_w8_g8_p2"),
    ((4096, 2112, 7168), "192x256x64_s4_w12_g8_e4_p3_n128_32_16", "128x256x64_s4_w8_g8_e2_p2_t4"),
    ((5699, 2888, 14160), "192x256x64_s3_w12_g8_e2_p3_n128_64_32", "192x256x64_s3_w12_g8_e2_p3_n128_64_32"),
])
def test_plans_per_part(mnk: tuple[int, int, int], h100: str, h200: str) -> None:
    """Where rows are whole lines and the H100's floor made 128x256 or 128x128 on every SM L2-bound, the H200 keeps
    them."""
    spec = GemmSpec(*mnk)
    assert (plan_schedule(spec, H100_SXM).short(), plan_schedule(spec, H200).short()) == (h100, h200)


def test_a_split_k_tail_is_replaced() -> None:
    """428x9016x5832: rule 15 planned 144 tiles of 128x256 with their last round in 4 k-ranges (0.65x torch); rule 32
    prices that tail and fits 123 tiles of 192x224 in one round (192x208 measured 0.75x), planned without a tail."""
    spec = GemmSpec(428, 9016, 5832)
    assert plan_schedule(spec, H100_SXM, n_blocks=()).tail_split == 4
    p = plan_schedule(spec, H100_SXM)
    assert (p.bm, p.tile_n, p.tail_split, p.units(428, 9016)) == (192, 224, 1, 123)


def test_current_score_floors_whole_waves_and_halves_a_clusters_b() -> None:
    """The plan's price: stream-K's whole waves at least the L2 floor, its shared wave by rule 21's model alone; a
    2-CTA cluster's CTAs each bring half of B's rows."""
    spec = GemmSpec(656, 8048, 5280)  # 192 tiles of 128x256: one whole wave, then 60 shared by 120 CTAs
    p = plan_schedule(spec, H100_SXM)
    assert p.stream_k == 2
    area = 128 * 256.0
    floor = l2_floor(spec, H100_SXM, 132, 128, 256)
    assert floor > area
    assert current_score(spec, H100_SXM, p) == pytest.approx(
        stream_k_score(192, 83, 132, 2, area) + (floor - area))
    spec = GemmSpec(4619, 2064, 13392)
    whole = plan_schedule(spec, H100_SXM, n_blocks=())
    assert (whole.bm, whole.bn, whole.cluster, whole.units(4619, 2064)) == (128, 256, 1, 333)
    clustered = replace(whole, cluster=2, consumer_partitions=2, epilogue_subtiles=4)
    assert current_score(spec, H100_SXM, whole) == pytest.approx(3 * l2_floor(spec, H100_SXM, 132, 128, 256))
    assert current_score(spec, H100_SXM, clustered) == pytest.approx(
        3 * max(area, l2_floor(spec, H100_SXM, 132, 128, 128)))


def test_explain_compares_with_the_floor() -> None:
    """The rule's explain line gives the fitted tile's time as a fraction of the plan's, both with L2's floor (the
    table's other rows are the search's scores, without it)."""
    text = explain(GemmSpec(428, 9016, 5832), H100_SXM).text()
    line = next(ln for ln in text.splitlines() if "fitted tile (rule 32)" in ln)
    assert "of its time with" in text and "192x224" in line, text
