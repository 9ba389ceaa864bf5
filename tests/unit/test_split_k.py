"""Split-K (`Plan.split_k`, `ir.Tiling.split_k`): the planner's and the verifier's limits, the IR text, and what the
backend emits for work units, the workspace store and the reduction kernel."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe, VerificationError
from warploom.errors import UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import plan_schedule
from warploom.targets import compile_schedule

E4 = DType.E4M3
BW = GemmSpec(128, 4096, 7168, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
              accumulation=Accumulation.PROMOTED)
DECODE = GemmSpec(16, 8192, 8192)


def module(spec: GemmSpec, **kw: object) -> ir.Module:
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM, **kw), H100_SXM)  # type: ignore[arg-type]
    return m


@pytest.mark.parametrize("spec,kw,match", [
    (replace(BW, scale=ScaleRecipe.BLOCKWISE_1X128_1X128), dict(split_k=3), "must divide the 56 k-blocks"),
    (GemmSpec(128, 4096, 256), dict(split_k=5), "at most the 4 k-blocks"),
    (BW, dict(split_k=3), "for promoted accumulation"),
    (GemmSpec(128, 4096, 7168, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
     dict(split_k=2), "bias or a fused epilogue"),
    (BW, dict(split_k=2, scale_partition=True), "scale partition"),
    (GemmSpec(128, 4096, 7168, E4, E4, DType.BF16, scale=ScaleRecipe.MX, accumulation=Accumulation.PROMOTED),
     dict(split_k=2), "scale partition"),
    (DECODE, dict(split_k=2, pingpong=True), "ping-pong"),
])
def test_planner_refuses_what_split_k_cannot_do(spec: GemmSpec, kw: dict, match: str) -> None:
    with pytest.raises(UnsupportedError, match=match):
        plan_schedule(spec, H100_SXM, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [ScaleRecipe.ROWWISE, ScaleRecipe.BLOCKWISE_1X128_128X128])
def test_promoted_unequal_ranges_run_on_64x64_tiles_only(scale: ScaleRecipe) -> None:
    """Promoted accumulation splits K in unequal ranges on a forced 64x64 tile (one warpgroup: no spill under Triton
    3.6 or 3.9, tests/compile), and is refused them elsewhere (wider 64-row tiles, a split-K tail, 128-row tiles) with
    the way out named."""
    spec = GemmSpec(300, 144, 7856, E4, E4, DType.BF16, scale=scale, accumulation=Accumulation.PROMOTED)  # 62 k-blocks
    m = module(spec, bm=64, bn=64, split_k=3)
    assert m.tiling.uneven_split and m.tiling.split_k == 3
    verify.check(m, "test", H100_SXM)
    for kw in (dict(bm=128, bn=128, split_k=3), dict(split_k=3), dict(bm=64, split_k=3),
               dict(bm=64, bn=128, split_k=3)):
        with pytest.raises(UnsupportedError, match=r"other than 64x64 tiles .* or bm=64 with bn=64 \(any count\)"):
            plan_schedule(spec, H100_SXM, **kw)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="other than 64x64 tiles"):
        plan_schedule(spec, H100_SXM, bm=64, bn=64, tail_split=3)


def test_plan_counts_units_and_stages_fp32_partials() -> None:
    p = plan_schedule(BW, H100_SXM, bm=128, bn=128, split_k=4)
    assert p.short().endswith("_p2_k4") and p.grid == 128  # 32 tiles x 4 k-ranges
    assert plan_schedule(BW, H100_SXM, bm=128, bn=128) == p  # rule 14's own choice here
    # The fp32 staging tiles (2 x 64x128x4 = 64 KiB, against 32 KiB of bf16) take a stage.
    assert p.stages == plan_schedule(BW, H100_SXM, bm=128, bn=128, split_k=1).stages - 1


def test_ir_stores_partials_to_the_workspace() -> None:
    m = module(DECODE, bm=64, bn=128, split_k=2)
    assert m.tiling.split_k == 2
    text = printer.module(m)
    assert "split_k=2" in text and "tma_store c_smem -> workspace[m, n]" in text
    assert [(b.tensor, b.dtype) for b in m.buffers] == [(ir.Tensor.WORKSPACE, DType.FP32)]
    verify.check(m, "test", H100_SXM)


def _edit_ops(m: ir.Module, fn: Callable[[ir.Op], ir.Op]) -> ir.Module:
    """`m` with every op of every partition replaced by fn(op)."""
    return replace(m, partitions=tuple(replace(p, body=rewrite(p.body, lambda o: (fn(o),))) for p in m.partitions))


def _stores_to(m: ir.Module, tensor: ir.Tensor) -> ir.Module:
    return _edit_ops(m, lambda o: replace(o, tensor=tensor) if isinstance(o, ir.TmaStore) else o)


def test_verifier_rejects_split_k_defects() -> None:
    m = module(DECODE, bm=64, bn=128, split_k=2)
    with pytest.raises(VerificationError, match="store to the workspace"):
        verify.check(_stores_to(m, ir.Tensor.C), "test", H100_SXM)  # partials into C: each unit overwrites the others
    whole = module(DECODE, bm=64, bn=128)
    with pytest.raises(VerificationError, match="store to the workspace"):
        verify.check(_stores_to(whole, ir.Tensor.WORKSPACE), "test", H100_SXM)
    with pytest.raises(VerificationError, match="does not divide the 128 k-blocks"):
        verify.check(replace(m, tiling=replace(m.tiling, split_k=3)), "test", H100_SXM)
    rowwise = GemmSpec(64, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)
    split = module(rowwise, bm=64, bn=128, split_k=2)  # scaling a partial is linear: allowed

    biased = replace(_edit_ops(split, lambda o: replace(o, steps=(*o.steps, ir.EpilogueStep.ADD_BIAS))
                               if isinstance(o, ir.Epilogue) else o),
                     spec=replace(rowwise, bias_dtype=DType.BF16))
    with pytest.raises(VerificationError, match="bias to a split-K partial"):
        verify.check(biased, "test", H100_SXM)


@pytest.mark.parametrize("spec,kw", [(DECODE, dict(bm=64, bn=128, split_k=2)),
                                     (BW, dict(bm=128, bn=128, split_k=4)),
                                     (GemmSpec(300, 520, 1024, b_layout=BLayout.N_MAJOR), dict(bm=128, split_k=2)),
                                     (replace(BW, scale=ScaleRecipe.BLOCKWISE_1X128_1X128),
                                      dict(bm=128, bn=128, split_k=4))])
def test_gluon_walks_units_and_offsets_k(spec: GemmSpec, kw: dict) -> None:
    kern = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, **kw))  # type: ignore[arg-type]
    src = kern.gluon
    text = src.text
    consumers = sum(p.role is ir.Role.CONSUMER for p in kern.module.partitions)
    assert f"SPLIT_K = gl.constexpr({kw['split_k']})" in text
    assert "k_tiles = gl.cdiv(K, BK) // SPLIT_K" in text and "for unit in range(pid, num_units" in text
    # The producer's flat loop over units: as a (unit, k) nest, or flat where it copies a scale per column of B.
    flat = "for t in range(my_units * k_tiles)" in text
    assert flat == spec.scale.per_column_b
    assert text.count("for unit in range(pid, num_units") == consumers + (0 if flat else 1)
    assert "(k0 + kk) * BK" in text and "kk * BK]" not in text.replace("(k0 + kk) * BK]", "")
    assert "split * (num_pid_m * BM) + off_m" in text and "c_desc" not in text
    assert src.reduce_kernel == f"{src.kernel}_reduce" and f"def {src.reduce_kernel}(" in text
    assert "for s in gl.static_range(1, SPLIT_K)" in text
    assert "workspace_desc" in src.params


def test_no_split_emits_what_it_did() -> None:
    """split_k=1 changes nothing in the generated kernel (the goldens pin it too)."""
    text = build(DECODE, H100_SXM, plan_schedule(DECODE, H100_SXM, bm=64, bn=128)).source
    assert "SPLIT_K" not in text and "unit" not in text and "kk * BK" in text


def test_forced_depth_falls_back_to_no_split() -> None:
    """Rule 14's split costs a stage (fp32 partials): a forced depth that fits only unsplit gets the unsplit plan,
    as before rule 14, rather than "no tile shape fits"."""
    p = plan_schedule(BW, H100_SXM, bm=128, bn=128, stages=5)
    assert (p.stages, p.split_k) == (5, 1)
    assert plan_schedule(BW, H100_SXM, bm=128, bn=128, stages=4).split_k == 4


def test_rules_13_and_14_keep_to_the_measured_kernel() -> None:
    """Ping-pong and the scale partition were not measured at small M: they keep their tiles and never split."""
    for kw in (dict(pingpong=True), dict(scale_partition=True)):
        p = plan_schedule(BW, H100_SXM, **kw)  # type: ignore[arg-type]
        assert p.bn != 64 and p.split_k == 1 and not (p.bm == 64 and BW.m > 64)


def test_workspace_past_2_31_elements_is_planned() -> None:
    """The reduction kernel's offsets are 64-bit (tests/unit/test_wide_offsets.py): a workspace of 2^31 fp32
    elements or more (8 x 128 x 2^21 here) no longer limits split_k."""
    wide = GemmSpec(128, 2**21, 1024)
    k = build(wide, H100_SXM, plan_schedule(wide, H100_SXM, bm=128, bn=128, split_k=8))
    assert k.plan.split_k == 8
    assert "offs = gl.program_id(0).to(gl.int64) * 1024" in k.source


def test_tuner_sees_split_and_unsplit_plans() -> None:
    from warploom.tune.candidates import feasible
    from warploom.tune.cost import estimate

    plans = feasible(BW, H100_SXM)
    assert {p.split_k for p in plans} >= {1, 4}
    split = next(p for p in plans if p.split_k == 4)
    est = estimate(BW, H100_SXM, split)
    assert est.tiles == 32 * 4 and est.fits  # units, and the fp32 staging counted in shared memory


# Rule 25 (planner.latency_split): (M, N, K) -> (tile size, split-K ranges) the planner takes for bf16 (ranges 1: none),
# at shapes forced splits were measured at (H100; the comments give the graph ratio against torch).
RULE25 = {
    (191, 440, 14336): (64, 6),  # 0.89 (128x128 in 8: 0.69; stream-K in 4 pieces: 0.46)
    (1881, 224, 14336): (128, 4),  # 0.95 (stream-K: 0.80)
    (268, 112, 4096): (64, 8),  # 1.03 (128x128 in 8: 0.77; 64x64 whole: 0.69)
    (513, 368, 4096): (128, 1),  # 64x64 0.92 (128x128 in 8: 0.85, H100; H200, session 42: 0.87, in 4 0.79)
    (2986, 112, 3728): (128, 4),  # H200: 0.78 (64x64 whole, the plan before session 42's margins: 0.74)
    (100, 5264, 3072): (128, 2),  # 42 tiles: stream-K 0.54 (in 4: 0.48; 112x5264x3472 in 2: 0.62, stream-K 0.58)
    (191, 440, 14496): (64, 6),  # 227 k-blocks, a prime: unequal ranges of 38 and 37 (1.00; in 4: 0.89)
    (513, 368, 5160): (64, 2),  # 81 k-blocks: 64x64 in 2 (H200 0.92, whole 0.77; 128x128 in 4 0.95: a known miss)
    (122, 712, 7784): (64, 5),  # M <= 128, 64x64 tiles in one wave: only 64x64 splits (0.87; in 4: 0.84; whole: 0.52)
    (459, 112, 2632): (64, 6),  # 1.01 (in 5: 0.94; whole: 0.66)
    (128, 4096, 7168): (128, 1),  # shared rows whose 64x64 tiles fill the machine: no room to split them
    (4096, 4096, 4096): (128, 1),  # many tiles
    (64, 8192, 8192): (128, 1),  # decode is rules 16 and 18's
    (1000, 0, 8192): (128, 1),  # an empty output: nothing to split (as `decode_split`)
}


@pytest.mark.parametrize("shape", list(RULE25), ids=lambda s: "x".join(map(str, s)))
def test_rule25_splits_few_tiles_over_long_k(shape: tuple[int, int, int]) -> None:
    plan = plan_schedule(GemmSpec(*shape), H100_SXM)
    size, ranges = RULE25[shape]
    assert plan.split_k == ranges, plan.short()
    if plan.split_k > 1:
        assert (plan.bm, plan.bn, plan.stream_k, plan.tail_split) == (size, size, 0, 1)
        tiles = -(-shape[0] // size) * -(-shape[1] // size)
        blocks = -(-shape[2] // 64)
        assert tiles * plan.split_k <= H100_SXM.sm_count
        if size == 128:  # equal ranges wherever some count of 2..8 that fits one wave divides the k-blocks
            divides = any(blocks % r == 0 and tiles * r <= H100_SXM.sm_count for r in range(2, 9))
            assert (blocks % plan.split_k == 0) == divides


@pytest.mark.parametrize("spec", [
    GemmSpec(191, 440, 14336, bias_dtype=DType.BF16),
    GemmSpec(191, 440, 14336, b_layout=BLayout.N_MAJOR),
    GemmSpec(191, 440, 14336, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE, accumulation=Accumulation.PROMOTED),
], ids=["bias", "n-major-b", "promoted-tensorwise"])
def test_rule25_keeps_off_what_it_was_not_measured_on(spec: GemmSpec) -> None:
    assert plan_schedule(spec, H100_SXM).split_k == 1


# Rule 25 for promoted fp8 (session 46, H200; `SPLIT_MARGIN_128_PROMOTED`): (M, N, K, recipe) -> (tile size, ranges);
# the comments give the graph ratio against torch, the plan before -> this one.
RULE25_PROMOTED = {
    (469, 96, 4928, ScaleRecipe.ROWWISE): (64, 6),  # 64x64 whole 1.42 -> 2.16, unequal ranges
    (191, 448, 14496, ScaleRecipe.ROWWISE): (64, 5),  # 1.50 -> 3.64
    (289, 1536, 15712, ScaleRecipe.ROWWISE): (128, 3),  # 128x128 whole 0.91 -> 1.54 (64x64 whole 1.48)
    (1881, 224, 15088, ScaleRecipe.ROWWISE): (128, 2),  # 0.99 -> 1.67 (64x64 whole 1.40)
    (73, 7472, 4784, ScaleRecipe.ROWWISE): (128, 1),  # modeled 0.92 of whole: split in 2 ran 0.88 against 0.96
    (146, 3680, 4016, ScaleRecipe.ROWWISE): (128, 1),  # modeled 0.93: split 0.91 against 0.96
    (328, 96, 10240, ScaleRecipe.BLOCKWISE_1X128_128X128): (64, 8),  # 0.75 -> 2.07
    (292, 1536, 15712, ScaleRecipe.BLOCKWISE_1X128_128X128): (128, 3),  # 0.78 -> 1.70
    (148, 3680, 4016, ScaleRecipe.BLOCKWISE_1X128_128X128): (128, 1),  # split 0.80 against 0.84
}


@pytest.mark.parametrize("shape", list(RULE25_PROMOTED), ids=lambda s: "x".join(map(str, s[:3])) + f"-{s[3].value}")
def test_rule25_splits_promoted_fp8_as_measured(shape: tuple[int, int, int, ScaleRecipe]) -> None:
    m, n, k, scale = shape
    plan = plan_schedule(GemmSpec(m, n, k, E4, E4, DType.BF16, scale=scale, accumulation=Accumulation.PROMOTED),
                         H100_SXM)
    size, ranges = RULE25_PROMOTED[shape]
    assert plan.split_k == ranges, plan.short()
    if ranges > 1:
        assert (plan.bm, plan.bn) == (size, size), plan.short()
        if size == 128:  # promoted 128x128 takes equal ranges only (`rule._check_split_k`)
            assert -(-k // 128) % ranges == 0


def test_rule23_prices_no_stream_k_for_promoted_fp8() -> None:
    """The planner gives promoted accumulation no stream-K, so rule 23 prices its 128x128 tiles whole: priced with
    pieces, 292x1536x15712 blockwise kept 36 whole 128x128 tiles (0.78x torch) over rule 25's split (1.70x)."""
    from warploom.planning.sm90.latency import latency_times

    native = GemmSpec(292, 1536, 15712, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)
    promoted = GemmSpec(292, 1536, 15712, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                        accumulation=Accumulation.PROMOTED)
    assert latency_times(native, H100_SXM)[2] > 1
    t64, t128, pieces = latency_times(promoted, H100_SXM)
    assert pieces == 1 and t128 > t64


def test_rule25_forced_options_win() -> None:
    spec = GemmSpec(191, 440, 14336)
    assert plan_schedule(spec, H100_SXM, split_k=1).split_k == 1
    assert plan_schedule(spec, H100_SXM, stream_k=4).stream_k == 4
    assert plan_schedule(spec, H100_SXM, bm=64, bn=64).split_k == 1


def test_rule25_is_explained() -> None:
    from warploom.planner import explain

    text = explain(GemmSpec(191, 440, 14336), H100_SXM).text()
    assert "64x64    split-K, 6 ranges" in text and "rule 25" in text
    assert "split-K, 4 ranges" in explain(GemmSpec(1881, 224, 14336), H100_SXM).text()


def test_rule23s_shared_rows_say_why_64x64_beat_the_model() -> None:
    """At M <= LATENCY_SHARED_ROWS rule 23 takes 64x64 where its model prices 128x128 lower (128x4096x7168: 128x128
    stream-K modeled 1.00, 64x64 1.33): `explain` ranks by the model, so the 64x64 row must say why it won."""
    from warploom.planner import explain

    e = explain(GemmSpec(128, 4096, 7168), H100_SXM)
    assert (e.plan.bm, e.plan.bn, e.plan.split_k) == (64, 64, 1)
    row = next(line for line in e.text().splitlines() if line.strip().startswith("64x64"))
    assert "LATENCY_SHARED_ROWS" in row, e.text()
    # (where the model itself prices 64x64 lower, the row says nothing of it)
    assert "LATENCY_SHARED_ROWS" not in explain(GemmSpec(128, 2112, 7168), H100_SXM).text()


# Rule 25 at decode sizes (`decode_split`): (M, N, K) -> ranges, bf16. The split's cost is fitted to forced splits of
# 3-16 ranges at nine decode shapes (session 28): 6-8 ranges ran best, 12-16 lost to the whole tiles.
DECODE_RANGES = {
    (8, 104, 5240): 7,  # 2 tiles of 82 k-blocks (6 and 8 ranges ran 0.83 of the whole tiles, 14 ran 0.91)
    (43, 88, 7960): 8,  # 2 tiles of 125 (8 ranges ran 0.65 of the whole tiles, 16 ran 0.71)
    (21, 96, 3984): 7,  # 2 tiles of 63 (8 ranges ran 0.66 of the whole tiles, 16 ran 1.12 times them)
    (2, 104, 1488): 1,  # 24 k-blocks: 4-12 ranges ran 1.4-1.7 times the whole tiles
    (4, 816, 10392): 4,  # 13 tiles: more units stream B no faster once HBM binds (4 ran 0.54-0.57 of the whole)
    (11, 1408, 3456): 1,  # 22 tiles of 54: short of the 10% margin (the swapped tiles ran within 6% of 6 ranges)
    (30, 776, 1288): 1,  # 21 k-blocks
    (16, 8192, 8192): 1,  # 128 tiles: more than a quarter of the SMs
    (64, 2112, 7168): 1,  # 33 tiles: short of the margin
    (65, 104, 5240): 1,  # past decode: rule 25's 128x128 (or 64x64) decides
    (8, 0, 4096): 1,  # an empty output: nothing to split
}


@pytest.mark.parametrize("shape", list(DECODE_RANGES), ids=lambda s: "x".join(map(str, s)))
def test_rule25_splits_decode_over_long_k(shape: tuple[int, int, int]) -> None:
    from warploom.planner import decode_split

    spec = GemmSpec(*shape)
    plan = plan_schedule(spec, H100_SXM)
    assert decode_split(spec, H100_SXM) == DECODE_RANGES[shape]
    if DECODE_RANGES[shape] > 1:
        assert (plan.bm, plan.bn, plan.split_k, plan.swap_ab, plan.stream_k) == (64, 64, DECODE_RANGES[shape], False, 0)
        assert -(-shape[1] // 64) * plan.split_k <= H100_SXM.sm_count
    else:
        assert plan.split_k == 1 or shape[0] > 64


@pytest.mark.parametrize("spec", [
    GemmSpec(8, 104, 5240, bias_dtype=DType.BF16),
    GemmSpec(8, 104, 5240, b_layout=BLayout.N_MAJOR),
    GemmSpec(8, 112, 5248, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
    GemmSpec(8, 128, 5248, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
             accumulation=Accumulation.PROMOTED),
], ids=["bias", "n-major-b", "promoted", "blockwise"])
def test_decode_split_keeps_off_what_rule_25_does_not_take(spec: GemmSpec) -> None:
    from warploom.planner import decode_split

    assert decode_split(spec, H100_SXM) == 1


def test_decode_split_forced_options_win_and_it_is_explained() -> None:
    from warploom.planner import explain

    spec = GemmSpec(8, 104, 5240)
    assert plan_schedule(spec, H100_SXM, split_k=1).split_k == 1
    assert plan_schedule(spec, H100_SXM, swap_ab=True).swap_ab
    assert plan_schedule(spec, H100_SXM, bm=64, bn=64).split_k == 1
    text = explain(spec, H100_SXM).text()
    assert "split-K, 7 ranges" in text and "rule 25 at decode sizes" in text


def _uneven_module() -> ir.Module:
    spec = GemmSpec(300, 200, 7 * 64 - 24)  # 7 k-blocks of 64, the last ragged
    return module(spec, bm=128, bn=128, split_k=3)


def test_uneven_split_is_built_where_k_blocks_do_not_divide() -> None:
    m = _uneven_module()
    assert m.tiling.uneven_split and m.tiling.split_k == 3
    assert not module(GemmSpec(300, 200, 6 * 64), bm=128, bn=128, split_k=3).tiling.uneven_split
    assert m.tiling.splits_evenly(3 * 64) and not m.tiling.splits_evenly(2 * 64)  # a k-block for every range


def test_uneven_split_gluon_computes_the_rasters_ranges() -> None:
    """The emitted Gluon's k0 and k_tiles, evaluated as Python for every unit at several K, are exactly
    `ir.raster.split_range`'s (the simulator runs that), and every partition that loops over units computes them."""
    from warploom.ir.raster import split_range
    from warploom.targets import emit

    m = _uneven_module()
    text = emit(m).text
    lines = {ln.split("=", 1)[0].strip(): ln.split("=", 1)[1].split("#")[0].strip()
             for ln in text.splitlines() if ln.strip().startswith(("k0 =", "k_tiles =", "k_all ="))}
    assert set(lines) == {"k0", "k_tiles", "k_all"}
    assert text.count("k0 = split * (k_all // SPLIT_K)") >= 2  # the producer and the consumers
    for k in (3 * 64, 7 * 64 - 24, 11 * 64, 64 * 64 + 1):
        blocks = -(-k // 64)
        for split in range(3):
            env = {"gl": type("gl", (), {"minimum": staticmethod(min), "cdiv": staticmethod(lambda a, b: -(-a // b))}),
                   "K": k, "BK": 64, "SPLIT_K": 3, "split": split}
            env["k_all"] = eval(lines["k_all"], env)  # noqa: S307 (our own generated expression)
            env["k0"] = eval(lines["k0"], env)  # noqa: S307
            assert (env["k0"], eval(lines["k_tiles"], env)) == split_range(blocks, 3, split)  # noqa: S307


def test_equal_split_gluon_is_unchanged() -> None:
    from warploom.targets import emit

    text = emit(module(GemmSpec(300, 200, 6 * 64), bm=128, bn=128, split_k=3)).text
    assert "k_tiles = gl.cdiv(K, BK) // SPLIT_K" in text and "k_all" not in text


@pytest.mark.parametrize("m,n", [(73, 104), (268, 112), (1, 8), (130, 264), (4097, 4104), (64, 4096)])
def test_reduce_grid_covers_c_once(m: int, n: int) -> None:
    """The reduction's programs (`reduce_grid`) cover every element of C once, as its kernel places them: runs of
    REDUCE_BLOCK elements where N is a multiple of 16, else REDUCE_ROWS x REDUCE_COLS blocks, row-major over C's
    column blocks (the kernel's two branches, both in its text)."""
    import torch

    from warploom.backends.gluon_reduce import REDUCE_BLOCK, REDUCE_COLS, REDUCE_ROWS, reduce_grid

    covered = torch.zeros(m, n, dtype=torch.int32)
    col_blocks = -(-n // REDUCE_COLS)
    for pid in range(reduce_grid(m, n)):
        if n % 16 == 0:
            flat = covered.view(-1)
            flat[pid * REDUCE_BLOCK:min((pid + 1) * REDUCE_BLOCK, m * n)] += 1
        else:
            r0, c0 = pid // col_blocks * REDUCE_ROWS, pid % col_blocks * REDUCE_COLS
            covered[r0:r0 + REDUCE_ROWS, c0:c0 + REDUCE_COLS] += 1
    assert bool((covered == 1).all())
    src = build(GemmSpec(m, n, 4096), H100_SXM, plan_schedule(GemmSpec(m, n, 4096), H100_SXM, bm=64, bn=64,
                                                              split_k=4)).gluon
    assert src.reduce_kernel is not None
    flat, blocks = src.text[src.text.index(f"def {src.reduce_kernel}("):].split("    else:")
    assert "if N % 16 == 0:" in flat and "offs // N" in flat
    assert f"gl.cdiv(N, {REDUCE_COLS})" in blocks and f"* {REDUCE_ROWS} +" in blocks and "// N" not in blocks
