"""Grouped calls' checks (warploom/checks_grouped.py) and rule 22's plans: each bad input raises a warploom error
naming the argument, before anything is planned or launched."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.backends.gluon_api import emitting_for
from warploom.checks_grouped import grouped_call
from warploom.errors import (
    AlignmentError,
    ArgumentTypeError,
    DTypeError,
    InputError,
    ScaleError,
    ShapeError,
    UnsupportedError,
    WarploomError,
)
from warploom.kernel import build
from warploom.planner import explain, grouped_tile, plan_schedule

G, K, N = 4, 64, 128


def _ab(rows: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(rows, K).bfloat16(), torch.randn(G, N, K).bfloat16().transpose(-2, -1)


def _offs(*v: int) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32)


def test_good_call_gives_a_grouped_spec() -> None:
    a, b = _ab()
    call = grouped_call(a, b, _offs(10, 10, 60, 100))
    assert call.spec.grouping is Grouping.OFFSETS and call.spec.groups == G
    assert (call.spec.m, call.spec.n, call.spec.k) == (100, N, K)
    assert call.out_shape == (100, N)


@pytest.mark.parametrize("offs,arg,err,words", [
    (torch.tensor([10, 20, 30, 40], dtype=torch.int64), "offs", DTypeError, "torch.int32"),
    (_offs(10, 30, 20, 40), "offs", InputError, "non-decreasing"),
    (_offs(10, 20, 30, 101), "offs", InputError, "at most a's 100 rows"),
    (_offs(10, 20, 30), "offs", ShapeError, "one entry per group"),
])
def test_bad_offs(offs: torch.Tensor, arg: str, err: type, words: str) -> None:
    a, b = _ab()
    with pytest.raises(err) as e:
        grouped_call(a, b, offs)
    assert e.value.arg == arg and words in str(e.value) and "Fix:" in str(e.value)
    assert isinstance(e.value, (ValueError, TypeError))


def test_b_group_count_must_match_offs() -> None:
    a, _ = _ab()
    b = torch.randn(3, N, K).bfloat16().transpose(-2, -1)
    with pytest.raises(ShapeError, match=r"offs: expected shape \(3,\)"):
        grouped_call(a, b, _offs(1, 2, 3, 4))


def test_masked_m_larger_than_capacity() -> None:
    a = torch.randn(G, 32, K).bfloat16()
    _, b = _ab()
    with pytest.raises(InputError, match=r"masked_m: expected counts in \[0, 32\].*got counts from 0 to 33"):
        grouped_call(a, b, masked_m=_offs(0, 33, 5, 1))
    call = grouped_call(a, b, masked_m=_offs(0, 32, 5, 1))
    assert call.spec.grouping is Grouping.MASKED and call.out_shape == (G, 32, N) and call.a.shape == (G * 32, K)


def test_batched_3d_runs_masked_with_full_counts() -> None:
    a = torch.randn(G, 16, K).bfloat16()
    call = grouped_call(a, _ab()[1])
    assert call.bounds.tolist() == [16] * G


@pytest.mark.parametrize("kwargs,arg", [
    (dict(offs=None), "offs"),  # a 2-D a needs offs
    (dict(offs=[10, 20, 30, 40]), "offs"),  # a list, not a tensor
])
def test_missing_or_untyped_offs(kwargs: dict, arg: str) -> None:
    a, b = _ab()
    with pytest.raises(WarploomError) as e:
        grouped_call(a, b, **kwargs)
    assert e.value.arg == arg  # type: ignore[attr-defined]


def test_fp8_needs_k_major_b_and_fp32_scales() -> None:
    a8 = torch.randn(100, K).to(torch.float8_e4m3fn)
    w8 = torch.randn(G, K, N).to(torch.float8_e4m3fn)  # contiguous (G, K, N): N-major, which fp8 wgmma cannot read
    with pytest.raises(InputError, match="^b: expected"):
        grouped_call(a8, w8, _offs(1, 2, 3, 4), scale_a=torch.ones(100), scale_b=torch.ones(G, N))
    b8 = torch.randn(G, N, K).to(torch.float8_e4m3fn).transpose(-2, -1)
    with pytest.raises(InputError, match="^scale_b: expected shape"):
        grouped_call(a8, b8, _offs(1, 2, 3, 4), scale_a=torch.ones(100), scale_b=torch.ones(N))
    call = grouped_call(a8, b8, _offs(1, 2, 3, 4), scale_a=torch.ones(100), scale_b=torch.ones(G, N))
    assert call.spec.scale is ScaleRecipe.ROWWISE


def _kab(total_k: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(32, total_k).bfloat16(), torch.randn(N, total_k).bfloat16().t()  # (M, total_K), (total_K, N)


def test_k_grouped_call_gives_a_k_offsets_spec() -> None:
    a, b = _kab()
    call = grouped_call(a, b, _offs(0, 40, 40, 96))
    assert call.spec.grouping is Grouping.K_OFFSETS and call.spec.groups == 4
    assert (call.spec.m, call.spec.n, call.spec.k) == (32, N, 96) and call.out_shape == (4, 32, N)
    assert call.spec.b_layout is BLayout.K_MAJOR
    assert grouped_call(a, b.contiguous(), _offs(0, 40, 40, 96)).spec.b_layout is BLayout.N_MAJOR


@pytest.mark.parametrize("case,arg,err,words", [
    ("past_total_k", "offs", InputError, "at most a's 96 columns"),
    ("decreasing", "offs", InputError, "non-decreasing"),
    ("k_mismatch", "b", ShapeError, "a's 96 columns"),
    ("fp8_rowwise_shape", "scale_b", ScaleError, f"shape ({4 * N},) (rowwise: one per row and per column of each"),
    ("fp8_mixed_recipes", "scale_b", ScaleError, "both 1-D"),
    ("masked_m", "masked_m", InputError, "takes offs"),
    ("offs_2d", "offs", ShapeError, "shape (G,)"),
    # (a base off the 16-byte grid: the TMA descriptor's encode would fail at the launch, a non-warploom error)
    ("a_base", "a", AlignmentError, "a base address aligned to 16 bytes"),
    ("b_base", "b", AlignmentError, "a base address aligned to 16 bytes"),
])
def test_k_grouped_bad_input(case: str, arg: str, err: type, words: str) -> None:
    a, b = _kab()
    offs, kw = _offs(0, 40, 40, 96), {}
    if case == "past_total_k":
        offs = _offs(0, 40, 40, 97)
    elif case == "decreasing":
        offs = _offs(0, 40, 30, 96)
    elif case == "k_mismatch":
        b = torch.randn(N, 112).bfloat16().t()
    elif case.startswith("fp8"):
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        kw = {"scale_a": torch.ones(4 * 32),
              "scale_b": torch.ones(4 * N + 1) if case == "fp8_rowwise_shape" else torch.ones(1, 1)}
    elif case == "masked_m":
        kw = {"masked_m": _offs(1, 2, 3, 4)}
    elif case == "offs_2d":
        offs = offs.reshape(2, 2)
    elif case == "a_base":  # (rows of 104 elements, 16-byte strides, but 3 elements in)
        a = torch.randn(32, 104).bfloat16()[:, 3:99]
    elif case == "b_base":
        b = torch.randn(N, 104).bfloat16().t()[3:99]
    with pytest.raises(err) as e:
        grouped_call(a, b, offs, **kw)
    assert e.value.arg == arg and words in str(e.value) and "Fix:" in str(e.value)  # type: ignore[attr-defined]


@pytest.mark.parametrize("fast", [False, True])
def test_k_grouped_rowwise_call(fast: bool) -> None:
    """torch's rowwise K-grouped scales, scale_a (G * M,) and scale_b (G * N,): a rowwise spec, promoted unless
    use_fast_accum; offs anywhere (no 128 grid)."""
    a, b = (t.to(torch.float8_e4m3fn) for t in _kab())
    call = grouped_call(a, b, _offs(0, 40, 40, 96), None, None, torch.ones(4 * 32), torch.ones(4 * N), fast)
    assert call.spec.scale is ScaleRecipe.ROWWISE and call.spec.grouping is Grouping.K_OFFSETS
    assert call.spec.accumulation is (Accumulation.NATIVE if fast else Accumulation.PROMOTED)


def test_a_2d_b_beside_a_3d_a_is_a_shape_mistake() -> None:
    with pytest.raises(ShapeError, match="b: expected a 3-D"):
        grouped_call(torch.randn(G, 8, K).bfloat16(), torch.randn(K, N).bfloat16())


def test_nothing_launches_on_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import warploom.grouped as grouped

    monkeypatch.setattr(grouped, "build", lambda *a, **k: pytest.fail("planned before the checks"))
    a, b = _ab()
    with pytest.raises(InputError):
        warploom.grouped_mm(a, b, _offs(10, 30, 20, 40))


def test_rule22_tiles() -> None:
    assert grouped_tile(1024) == (128, 256) and grouped_tile(128) == (128, 128) and grouped_tile(40) == (64, 128)
    spec = GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)
    plan = plan_schedule(spec, H100_SXM)
    # (its expected last round, (64 + 8 / 2) x 16 = 1088 tiles on 132 SMs, is a quarter full: stream-K in 4 pieces)
    assert (plan.bm, plan.bn, plan.split_k, plan.tail_split, plan.stream_k, plan.swap_ab) == (128, 256, 1, 1, 4, False)
    assert plan.grid == H100_SXM.sm_count
    k = build(spec, H100_SXM)
    assert k.module.tiling.grouping is Grouping.OFFSETS and "grouped_offsets" in k.module.name
    assert "group_tile(" in k.source and "reshape([BN, BK])" in k.source


@pytest.mark.parametrize("groups,m,n,k,pieces", [
    (8, 8192, 4096, 7168, 4),    # 1088 expected tiles: 0.24 of a last round, 112 k-blocks (measured 0.761 / 0.817 ms)
    (8, 8192, 7168, 2048, 2),    # 1904: 0.42, 32 k-blocks (0.398 / 0.412; 4 pieces 0.418)
    (8, 8192, 5120, 7168, 2),    # 1360: 0.30, 112 k-blocks, but 40 tiles in 4 pieces exceed the SMs (rule 21)
    (32, 16384, 2048, 7168, 0),  # 1152: 0.73 (whole tiles 0.863 ms, 2 pieces 0.940)
    (8, 512, 4096, 7168, 0),     # 64 rows a group: rule 22's 64-row tile, no stream-K at it
    (2, 256, 512, 4096, 0),      # 6 tiles: under one round, nothing after a full one to even out
])
def test_rule22_last_round_stream_k(groups: int, m: int, n: int, k: int, pieces: int) -> None:
    """Rule 22 shares a bf16 M-grouped GEMM's last round as stream-K pieces where the expected round (rows' tiles plus
    half a tile a group) is under half full, as measured on the H100 (session 29)."""
    plan = plan_schedule(GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=groups), H100_SXM)
    assert plan.stream_k == pieces


def test_rule22_last_round_stream_k_only_where_measured() -> None:
    """Masked layouts, fused epilogues and fp8 blockwise keep whole tiles by default (unmeasured or measured slower)
    and still take a forced stream_k; stream_k=0 keeps whole tiles where the default would share."""
    shape = dict(m=8192, n=4096, k=7168, groups=8)
    masked = GemmSpec(**shape, grouping=Grouping.MASKED)
    blockwise = GemmSpec(**shape, a_dtype=DType.E4M3, b_dtype=DType.E4M3, out_dtype=DType.BF16,
                         scale=ScaleRecipe.BLOCKWISE_1X128_128X128, accumulation=Accumulation.PROMOTED,
                         grouping=Grouping.OFFSETS)
    assert plan_schedule(masked, H100_SXM).stream_k == 0 and plan_schedule(blockwise, H100_SXM).stream_k == 0
    assert plan_schedule(masked, H100_SXM, bm=128, stream_k=2).stream_k == 2
    assert plan_schedule(GemmSpec(**shape, grouping=Grouping.OFFSETS), H100_SXM, stream_k=0).stream_k == 0


@pytest.mark.parametrize("accumulation", [Accumulation.NATIVE, Accumulation.PROMOTED])
def test_rule22_last_round_fp8_rowwise(accumulation: Accumulation) -> None:
    """fp8 rowwise shares the last round in 2 pieces on its 128x256 tile at 56 k-blocks, as measured (H200, session
    42), under a Triton below GROUPED_SK_FP8_MAX_TRITON (3.9's finisher spills); whole tiles at 16 k-blocks (measured
    slower) and under 3.9; a forced stream_k still runs under 3.9, on rule 22's 128-wide fp8 stream-K tile."""
    def fp8(m: int, n: int, k: int, groups: int = 8) -> GemmSpec:
        return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                        accumulation=accumulation, grouping=Grouping.OFFSETS, groups=groups)

    with emitting_for("3.6"):
        plan = plan_schedule(fp8(8192, 4096, 7168), H100_SXM)
        assert (plan.bm, plan.bn, plan.stream_k) == (128, 256, 2)
        assert plan_schedule(fp8(8192, 7168, 2048), H100_SXM).stream_k == 0  # 16 k-blocks (0.42 of a last round)
        assert plan_schedule(fp8(16384, 2048, 7168, 32), H100_SXM).stream_k == 0  # a last round 0.73 full
    with emitting_for("3.9"):
        assert plan_schedule(fp8(8192, 4096, 7168), H100_SXM).stream_k == 0
        forced = plan_schedule(fp8(8192, 4096, 7168), H100_SXM, stream_k=2)
        assert (forced.bn, forced.stream_k) == (128, 2)


def test_rule22_explain_says_why_the_last_round_is_shared_or_not() -> None:
    """`explain` names rule 22's last-round choice and its arithmetic: its scored candidates are the ungrouped
    problem's (whole tiles only), so without this line a default stream-K plan read as whole tiles."""
    def text(spec: GemmSpec, **forced: object) -> str:
        return explain(spec, H100_SXM, **forced).text()

    shared = text(GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8))
    assert "sk4" in shared.splitlines()[0]
    assert ("rule 22: 1088 tiles expected (the rows' 64 plus half a tile for each of 8 groups, times 16 columns of "
            "tiles) on 132 SMs: the last of 9 rounds 0.24 full, under 0.5: shared as stream-K in 4 pieces "
            "(112 k-blocks)") in shared
    whole = text(GemmSpec(16384, 2048, 7168, grouping=Grouping.OFFSETS, groups=32))
    assert "the last of 9 rounds 0.73 full, not under 0.5: whole tiles" in whole
    assert "under one round: whole tiles" in text(GemmSpec(256, 512, 4096, grouping=Grouping.OFFSETS, groups=2))
    fp8 = GemmSpec(8192, 7168, 2048, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                   grouping=Grouping.OFFSETS, groups=8)
    assert "rule 22: whole tiles: fp8 shares it from 32 k-blocks (16 here)" in text(fp8)
    assert "rule 22: stream-K in 2 pieces, forced (by default whole tiles:" in text(fp8, stream_k=2)
    with emitting_for("3.9"):
        assert "rule 22: whole tiles: fp8's finisher spills under Triton 3.9 and later" in text(
            replace(fp8, n=4096, k=7168))
    assert "rule 22: whole tiles: the last round is shared by default only for M-grouped GEMMs on 128-row tiles" in (
        text(GemmSpec(8192, 4096, 7168, grouping=Grouping.MASKED, groups=8), bm=128))
    assert "rule 22: whole tiles, forced (by default 1088 tiles expected" in text(
        GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8), stream_k=0)
    assert "rule 22: whole tiles (a K-grouped GEMM" in text(GemmSpec(2048, 4096, 65536, grouping=Grouping.K_OFFSETS,
                                                                      groups=8))
    assert "rule 22" not in text(GemmSpec(8192, 4096, 7168))


def test_rule22_fp8_rowwise_block_epilogue_and_refusals() -> None:
    spec = GemmSpec(8192, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    grouping=Grouping.OFFSETS, groups=8)
    assert plan_schedule(spec, H100_SXM).block_epilogue
    with pytest.raises(ValueError, match="grouped GEMMs do not take a bias"):
        GemmSpec(64, 64, 64, bias_dtype=DType.BF16, grouping=Grouping.OFFSETS, groups=2)
    from warploom.device import B200, GFX1250

    # sm_100a builds bf16 / fp16 and MX fp8 M-grouped GEMMs (tests/sim/test_grouped_sm100_sim.py); fp8 rowwise is
    # refused there by name, with the device that runs it
    with pytest.raises(UnsupportedError, match="on sm_100a .* rowwise scales.*H100_SXM"):
        plan_schedule(spec, B200)
    with pytest.raises(UnsupportedError, match="sm_90a and sm_100a"):
        plan_schedule(GemmSpec(64, 64, 64, grouping=Grouping.OFFSETS, groups=2), GFX1250)


def test_verifier_refuses_split_k_in_a_grouped_module() -> None:
    from dataclasses import replace

    from warploom.ir.verify import structural

    m = build(GemmSpec(512, 256, 256, grouping=Grouping.OFFSETS, groups=2), H100_SXM).module
    assert not [e for e in structural(m) if "grouping" in e]
    bad = replace(m, tiling=replace(m.tiling, split_k=2))
    assert any("grouping with split-K" in e for e in structural(bad))


def test_rule22_k_grouped_tile_from_each_groups_rows() -> None:
    """A K-grouped spec's M is one group's rows (its groups split K): the tile follows M itself, not M / G."""
    for m, tile in ((2048, (128, 256)), (200, (128, 128)), (64, (64, 128))):
        p = plan_schedule(GemmSpec(m, 4096, 65536, grouping=Grouping.K_OFFSETS, groups=8), H100_SXM)
        assert (p.bm, p.bn) == tile and p.grid == H100_SXM.sm_count


# ---- blockwise fp8 (1x128 x 128x128, DeepSeek-V3's MoE recipe): M-grouped only, scale_b (G, K/128, N/128) ----

BK_, BN_ = 3, 2  # k-blocks and N-blocks of the blockwise cases below: K = 304 (ragged), N = 136


def _bw(rows: int = 100, **over: object) -> dict:
    k, n = 304, 136
    args: dict = {"a": torch.randn(rows, k).to(torch.float8_e4m3fn),
                  "b": torch.randn(G, n, k).to(torch.float8_e4m3fn).transpose(-2, -1),
                  "offs": _offs(10, 10, 60, rows), "scale_a": torch.ones(rows, BK_),
                  "scale_b": torch.ones(G, BK_, BN_)}
    args.update(over)
    return args


def test_blockwise_call_gives_a_promoted_blockwise_spec() -> None:
    call = grouped_call(**_bw())
    assert call.spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128
    assert call.spec.accumulation is Accumulation.PROMOTED and call.spec.grouping is Grouping.OFFSETS
    assert (call.spec.m, call.spec.n, call.spec.k) == (100, 136, 304)
    # DeepGEMM's (G, N/128, K/128) storage as its transposed view: any strides
    deepgemm = torch.ones(G, BN_, BK_).transpose(-2, -1)
    assert grouped_call(**_bw(scale_b=deepgemm)).spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128
    masked = grouped_call(**_bw(a=torch.randn(G, 25, 304).to(torch.float8_e4m3fn), offs=None,
                                masked_m=_offs(1, 2, 3, 4), scale_a=torch.ones(G, 25, BK_)))
    assert masked.spec.grouping is Grouping.MASKED and masked.spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128


@pytest.mark.parametrize("case,arg,err,words", [
    ("scale_a_rowwise", "scale_a", ScaleError, "shape (100, 3)"),
    ("scale_a_k_blocks", "scale_a", ScaleError, "shape (100, 3)"),
    ("scale_b_shape", "scale_b", ScaleError, "shape (4, 3, 2)"),
    ("scale_b_deepgemm", "scale_b", ScaleError, "scale_b.transpose(-2, -1)"),
    ("scale_b_experts", "scale_b", ScaleError, "shape (4, 3, 2)"),
    ("scale_a_bf16", "scale_a", ScaleError, "float32 blockwise scales"),
    ("scale_b_fp16", "scale_b", ScaleError, "float32 blockwise scales"),
    ("fast_accum", "use_fast_accum", InputError, "no fast-accumulation mode"),
    ("fast_accum_str", "use_fast_accum", ArgumentTypeError, "a bool"),
    ("masked_scale_a_2d", "scale_a", ScaleError, "shape (4, 25, 3)"),
    ("bf16_a", "a", DTypeError, "blockwise scales"),
    ("out_fp16", "out_dtype", DTypeError, "torch.bfloat16"),
])
def test_blockwise_bad_input(case: str, arg: str, err: type, words: str) -> None:
    args: dict = _bw()
    if case == "scale_a_rowwise":
        args["scale_a"] = torch.ones(100)
    elif case == "scale_a_k_blocks":
        args["scale_a"] = torch.ones(100, 2)  # K // 128 rather than ceil(K / 128)
    elif case == "scale_b_shape":
        args["scale_b"] = torch.ones(G, BK_, 136)  # 1x128 per column: not the grouped recipe
    elif case == "scale_b_deepgemm":
        args["scale_b"] = torch.ones(G, BN_, BK_)  # DeepGEMM's (G, N/128, K/128) as it is
    elif case == "scale_b_experts":
        args["scale_b"] = torch.ones(G - 1, BK_, BN_)
    elif case == "scale_a_bf16":
        args["scale_a"] = torch.ones(100, BK_).bfloat16()
    elif case == "scale_b_fp16":
        args["scale_b"] = torch.ones(G, BK_, BN_).half()
    elif case == "fast_accum":
        args["use_fast_accum"] = True
    elif case == "fast_accum_str":
        args["use_fast_accum"] = "no"
    elif case == "masked_scale_a_2d":  # a 3-D a takes scale_a (G, M_max, KB), as its rowwise one is (G, M_max)
        args |= {"a": torch.randn(G, 25, 304).to(torch.float8_e4m3fn), "offs": None, "masked_m": _offs(1, 2, 3, 4),
                 "scale_a": torch.ones(G * 25, BK_)}
    elif case == "bf16_a":
        args["a"] = args["a"].bfloat16()
    elif case == "out_fp16":
        args["out_dtype"] = torch.float16
    with pytest.raises(err) as e:
        grouped_call(**args)
    assert e.value.arg == arg and words in str(e.value) and "Fix:" in str(e.value)  # type: ignore[attr-defined]
    assert isinstance(e.value, (ValueError, TypeError))


def test_blockwise_nothing_launches_on_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import warploom.grouped as grouped

    monkeypatch.setattr(grouped, "build", lambda *a, **k: pytest.fail("planned before the checks"))
    args = _bw(scale_b=torch.ones(G, BN_ + 1, BK_))
    with pytest.raises(ScaleError, match=r"^scale_b: expected shape \(4, 3, 2\)"):
        warploom.scaled_grouped_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"), **args)


def test_rule22_blockwise_plans() -> None:
    """Blockwise fp8 takes rule 22's tiles; on 128x256 it stores 64x64 blocks (its masked read-back of 64x128 ones
    spilled, planner.plan_grouped)."""
    for m, tile in ((8192, (128, 256)), (1024, (128, 128)), (8 * 48, (64, 128))):
        spec = GemmSpec(m, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                        accumulation=Accumulation.PROMOTED, grouping=Grouping.OFFSETS, groups=8)
        p = plan_schedule(spec, H100_SXM)
        assert (p.bm, p.bn, p.bk, p.split_k, p.grid) == (*tile, 128, 1, H100_SXM.sm_count)
        assert p.epilogue_subtiles == 4 or tile[1] != 256
    with pytest.raises(ValueError, match="grouped GEMMs do not take blockwise_1x128_1x128 scales"):
        GemmSpec(64, 128, 128, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_1X128,
                 accumulation=Accumulation.PROMOTED, grouping=Grouping.OFFSETS, groups=2)


# ---- K-grouped blockwise fp8 (the weight gradient): scale_a (M, KB) and scale_b (KB, NB) over total_K ----

KB_K, NB_K = 3, 2  # k-blocks and N-blocks below: total_K = 320 (a partial last block), N = 136


def _kbw(**over: object) -> dict:
    m, total_k, n = 32, 320, 136
    args: dict = {"a": torch.randn(m, total_k).to(torch.float8_e4m3fn),
                  "b": torch.randn(n, total_k).to(torch.float8_e4m3fn).t(),  # torch's column-major (total_K, N)
                  "offs": _offs(0, 128, 128, 320), "scale_a": torch.ones(m, KB_K), "scale_b": torch.ones(KB_K, NB_K)}
    args.update(over)
    return args


def test_k_grouped_blockwise_call_gives_a_promoted_k_offsets_spec() -> None:
    call = grouped_call(**_kbw())
    s = call.spec
    assert (s.grouping, s.scale, s.accumulation) == (Grouping.K_OFFSETS, ScaleRecipe.BLOCKWISE_1X128_128X128,
                                                     Accumulation.PROMOTED)
    assert (s.m, s.n, s.k, s.groups, s.out_dtype) == (32, 136, 320, 4, DType.BF16) and call.out_shape == (4, 32, 136)
    # scale_b stored (NB, KB), DeepGEMM's order, as its .t() view: any strides
    assert grouped_call(**_kbw(scale_b=torch.ones(NB_K, KB_K).t())).spec.scale is ScaleRecipe.BLOCKWISE_1X128_128X128


@pytest.mark.parametrize("case,arg,err,words", [
    ("offs_off_grid", "offs", InputError, "multiples of 128 (or total_K = 320)"),
    ("scale_a_shape", "scale_a", ScaleError, "shape (32, 3)"),
    ("scale_a_per_group", "scale_a", ScaleError, "shape (32, 3)"),
    ("scale_b_shape", "scale_b", ScaleError, "shape (3, 2)"),
    ("scale_b_deepgemm", "scale_b", ScaleError, "scale_b.transpose(-2, -1)"),
    ("scale_b_per_group", "scale_b", ScaleError, "both 2-D"),
    ("scale_a_bf16", "scale_a", ScaleError, "float32 blockwise scales"),
    ("b_n_major", "b", AlignmentError, "fp8 reads B K-major"),
    ("fast_accum", "use_fast_accum", InputError, "no fast-accumulation mode"),
    ("out_fp16", "out_dtype", DTypeError, "torch.bfloat16"),
])
def test_k_grouped_blockwise_bad_input(case: str, arg: str, err: type, words: str) -> None:
    args = _kbw()
    if case == "offs_off_grid":
        args["offs"] = _offs(0, 128, 200, 320)  # group 2 would start at 200, inside a scale block
    elif case == "scale_a_shape":
        args["scale_a"] = torch.ones(32, 2)  # total_K // 128 rather than ceil(total_K / 128)
    elif case == "scale_a_per_group":
        args["scale_a"] = torch.ones(4 * 32, KB_K)
    elif case == "scale_b_shape":
        args["scale_b"] = torch.ones(KB_K, 136)  # per column: not the recipe
    elif case == "scale_b_deepgemm":
        args["scale_b"] = torch.ones(NB_K, KB_K)
    elif case == "scale_b_per_group":
        args["scale_b"] = torch.ones(4, KB_K, NB_K)
    elif case == "scale_a_bf16":
        args["scale_a"] = torch.ones(32, KB_K).bfloat16()
    elif case == "b_n_major":
        args["b"] = args["b"].contiguous()
    elif case == "fast_accum":
        args["use_fast_accum"] = True
    elif case == "out_fp16":
        args["out_dtype"] = torch.float16
    with pytest.raises(err) as e:
        grouped_call(**args)
    assert e.value.arg == arg and words in str(e.value) and "Fix:" in str(e.value)  # type: ignore[attr-defined]


def test_k_grouped_blockwise_nothing_launches_on_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    import warploom.grouped as grouped

    monkeypatch.setattr(grouped, "build", lambda *a, **k: pytest.fail("planned before the checks"))
    for bad, err in (({"offs": _offs(0, 100, 128, 320)}, InputError), ({"scale_a": torch.ones(32, 4)}, ScaleError)):
        args = _kbw(**bad)
        with pytest.raises(err, match=r"^(offs|scale_a): expected"):
            warploom.scaled_grouped_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"),
                                       **args)


def _kbw_spec(m: int) -> GemmSpec:
    return GemmSpec(m, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                    accumulation=Accumulation.PROMOTED, grouping=Grouping.K_OFFSETS, groups=8)


def test_rule22_k_grouped_blockwise_plans_and_forced_refusals() -> None:
    """Rule 22's tile from M (one group's rows), BK 128 (a k-block is a scale block), the SM-count grid, 64x64 stored
    blocks on 128x256 (rule 22's blockwise note); options a grouped kernel cannot take are refused by name."""
    for m, tile in ((2048, (128, 256)), (200, (128, 128)), (64, (64, 128))):
        p = plan_schedule(_kbw_spec(m), H100_SXM)
        assert (p.bm, p.bn, p.bk, p.split_k, p.stream_k, p.grid) == (*tile, 128, 1, 0, H100_SXM.sm_count)
        assert p.epilogue_subtiles == 4 or tile[1] != 256
    for kw, name in (({"split_k": 2}, "split_k"), ({"swap_ab": True}, "swap_ab"),
                     ({"pingpong": True}, "pingpong"), ({"scale_partition": True}, "scale_partition"),
                     ({"cluster": 2}, "cluster"), ({"tail_split": 2}, "tail_split"),
                     # (options rule 22 never read, dropped without a word until session 36)
                     ({"hoist_rows": False}, "hoist_rows"), ({"scalar_columns": False}, "scalar_columns"),
                     ({"prefetch_operands": True}, "prefetch_operands")):
        with pytest.raises(UnsupportedError, match=f"cannot take {name} .*Fix: drop them"):
            plan_schedule(_kbw_spec(2048), H100_SXM, **kw)  # type: ignore[arg-type]
    # (stream-K runs M-grouped and masked GEMMs only: a K-grouped tile's k-blocks are its group's K range)
    with pytest.raises(UnsupportedError, match=r"stream_k=2 .*K-grouped.*Fix: drop stream_k"):
        plan_schedule(_kbw_spec(2048), H100_SXM, stream_k=2)


def test_verifier_k_grouped_blockwise() -> None:
    """The verifier passes a built K-grouped blockwise module (and a rowwise one) and refuses it with split-K."""
    from dataclasses import replace

    from warploom.ir.verify import structural

    m = build(_kbw_spec(2048), H100_SXM).module
    assert not [e for e in structural(m) if "grouping" in e]
    assert any("grouping with split-K" in e for e in structural(replace(m, tiling=replace(m.tiling, split_k=2))))
    rw = build(replace(_kbw_spec(256), scale=ScaleRecipe.ROWWISE), H100_SXM).module
    assert not [e for e in structural(rw) if "grouping" in e]


@pytest.mark.parametrize("arg", ["a", "b"])
def test_m_grouped_base_address_off_the_16_byte_grid(arg: str) -> None:
    """An M-grouped a or (G, K, N) b 3 elements into its storage (strides on the 16-byte grid): an AlignmentError
    naming it before any launch, as matmul's (the TMA descriptor's encode fails at the launch otherwise)."""
    a = torch.randn(100, 104).bfloat16()[:, 3:67] if arg == "a" else torch.randn(100, 64).bfloat16()
    b = torch.randn(2, N, 104).bfloat16()[..., 3:67] if arg == "b" else torch.randn(2, N, 64).bfloat16()
    with pytest.raises(AlignmentError) as e:
        grouped_call(a, b.transpose(-2, -1), _offs(50, 100))
    assert e.value.arg == arg and "a base address aligned to 16 bytes" in str(e.value)  # type: ignore[attr-defined]


def test_m_grouped_fp8_zero_k_takes_torchs_k_major_b() -> None:
    """fp8 M-grouped K = 0 with torch's b, a (G, N, 0) seen as .transpose(-2, -1): zeros, no kernel (it was refused
    as a b that is not K-major, the fix naming the b passed: the K-major test needed K rows)."""
    a = torch.empty(100, 0, dtype=torch.float8_e4m3fn)
    b = torch.empty(2, N, 0, dtype=torch.float8_e4m3fn).transpose(-2, -1)
    y = warploom.scaled_grouped_mm(a, b, torch.ones(100), torch.ones(2, N), _offs(50, 100))
    assert y.shape == (100, N) and bool((y == 0).all())


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.bfloat16])
def test_scaled_grouped_mm_without_scales_is_refused(dtype: torch.dtype) -> None:
    """scaled_grouped_mm(a, b, None, None, offs) was read as a 16-bit call: fp8 tensors were refused naming a with
    "pass bf16 or fp16 tensors", and bf16 ones silently computed an unscaled grouped_mm (found by
    tests/unit/test_props_bad_input_grouped.py). The scales missing are named, before anything is built."""
    a, b = _ab()
    with pytest.raises(ArgumentTypeError, match=r"^scale_a: expected float32 scales .* got None for scale_a and "
                       r"scale_b\. Fix: .*warploom.grouped_mm"):
        warploom.scaled_grouped_mm(a.to(dtype), b.to(dtype), None, None, _offs(10, 10, 60, 100))  # type: ignore


@pytest.mark.parametrize("layout", ["m", "batched"])
def test_one_e8m0_scale_beside_a_float32_one_is_a_scale_mistake(layout: str) -> None:
    """One scale e8m0 and the other float32 took the MX path, whose first checks refused the call for K not a
    multiple of 32 (naming a) or use_fast_accum=True (naming use_fast_accum), as if MX were meant (found by
    tests/unit/test_props_bad_input_grouped.py). The scales' dtypes are checked first, naming a scale."""
    k = 16
    a8 = torch.randn(*((100,) if layout == "m" else (G, 25)), k).to(torch.float8_e4m3fn)
    b8 = torch.randn(G, N, k).to(torch.float8_e4m3fn).transpose(-2, -1)
    sa = torch.ones(a8.shape[:-1]).to(torch.float8_e8m0fnu)
    offs = _offs(10, 10, 60, 100) if layout == "m" else None
    with pytest.raises(ScaleError, match=r"^scale_b: expected torch.float8_e8m0fnu like the other scale"):
        grouped_call(a8, b8, offs, None, None, sa, torch.ones(G, N), layout == "batched")


@pytest.mark.parametrize("scaled", [False, True])
def test_out_dtype_that_is_no_dtype_is_named(scaled: bool) -> None:
    """out_dtype=[torch.bfloat16] (unhashable) raised a bare TypeError from DType.from_torch's table (found by
    tests/unit/test_props_bad_input_grouped.py)."""
    a, b = _ab()
    sc = (torch.ones(100), torch.ones(G, N)) if scaled else (None, None)
    if scaled:
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    for bad in ([torch.bfloat16], "bf16"):
        with pytest.raises(DTypeError, match=r"^out_dtype: expected .*, got .*bf.*\. Fix: pass out_dtype="):
            grouped_call(a, b, _offs(10, 10, 60, 100), None, bad, *sc)


def test_rowwise_fast_accum_with_a_3d_scale_b_is_a_scale_mistake() -> None:
    """A rowwise call with use_fast_accum=True whose scale_b came 3-D ((G, N, 1)) was refused for use_fast_accum
    ("False with blockwise scales"), not for the scale (found by tests/unit/test_props_bad_input_grouped.py); its
    rowwise scale_a says the recipe, so scale_b is the one named (session 35: it was scale_a, for blockwise)."""
    args = _bw(scale_a=torch.ones(100), scale_b=torch.ones(G, 136, 1), use_fast_accum=True)
    with pytest.raises(ScaleError, match=r"^scale_b: expected shape \(4, 136\) \(rowwise"):
        grouped_call(**args)
