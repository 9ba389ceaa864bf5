"""A split-K tail (`Plan.tail_split`, planner rule 15, `ir.Tiling.ranged`): the planner's choice and limits, the IR
text, what the backend emits for ranged kernels and the tail's compact workspace, how the launcher splits a call
into the two launches, and the cost model's and tuner's view."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.errors import UnsupportedError
from warploom.ir import verify
from warploom.ir.raster import Span, cta_tiles, tail_spans
from warploom.kernel import build
from warploom.planner import plan_schedule, wave_fill

E4 = DType.E4M3
Q_A = (4096, 2112, 7168)  # DeepSeek-V3's q_a + kv_a at 4096 tokens: 2.18 waves of 128x256 tiles
OPS = {
    "bf16": GemmSpec(*Q_A),
    "fp8_fast": GemmSpec(*Q_A, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
    "fp8_exact": GemmSpec(*Q_A, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
    "blockwise": GemmSpec(*Q_A, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                          accumulation=Accumulation.PROMOTED),
}
# bf16 q_a on whole tiles, rule 15's 4-way tail (the planner's own plan is rule 32's fitted tile)
TAILED = plan_schedule(OPS["bf16"], H100_SXM, n_blocks=())


@pytest.mark.parametrize("op", list(OPS))
def test_rule15_takes_256_wide_tiles_with_a_four_way_tail(op: str) -> None:
    """Measured on the H100 (docs/benchmarks.md, session 14): 128x256 with 4 k-ranges beat every other variant then.
    For bf16 rule 32 now fits 264 tiles of 192x176 in two whole rounds instead (its L2 floor, session 34; not measured
    at this shape), so rule 15's own choice is asked for with whole tiles (n_blocks=())."""
    p = plan_schedule(OPS[op], H100_SXM, n_blocks=())
    assert (p.bm, p.bn, p.tail_split, p.split_k) == (128, 256, 4, 1)
    assert p.short().endswith("_t4") and 2 <= p.tail_stages <= p.stages
    tail = p.tail()
    assert (tail.split_k, tail.stages, tail.tail_split) == (4, p.tail_stages, 4)
    fill = wave_fill(OPS[op], p)
    assert (fill.units, fill.rounds, fill.tail, fill.tail_rounds) == (264, 2, 24, 1)
    assert "then 24 tiles as 96 split-K units of 1/4 tile" in fill.describe()
    if op == "bf16":
        fitted = plan_schedule(OPS[op], H100_SXM)
        assert (fitted.bm, fitted.tile_n, fitted.tail_split, fitted.units(4096, 2112)) == (192, 176, 1, 264)


@pytest.mark.parametrize("spec", [GemmSpec(4096, 4096, 4096), GemmSpec(8192, 8192, 8192),
                                  GemmSpec(4096, 28672, 4096),  # Llama-3 8B gate_up: 27.15 waves, at most 2% to win
                                  GemmSpec(128, 4096, 7168)])  # fewer tiles than SMs: rule 14's ground
def test_rule15_leaves_well_filled_and_small_problems_alone(spec: GemmSpec) -> None:
    assert plan_schedule(spec, H100_SXM).tail_split == 1


def test_rule15_only_where_split_k_may_run() -> None:
    biased = GemmSpec(*Q_A, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
    assert plan_schedule(biased, H100_SXM).tail_split == 1  # the bias needs the whole sum
    assert plan_schedule(OPS["bf16"], H100_SXM, bm=128, bn=128, pingpong=True).tail_split == 1
    mx = GemmSpec(*Q_A, E4, E4, DType.BF16, scale=ScaleRecipe.MX, accumulation=Accumulation.PROMOTED)
    assert plan_schedule(mx, H100_SXM).tail_split == 1


@pytest.mark.parametrize("kw,match", [
    (dict(tail_split=57), "tail_split=57 must be at least 1 and at most the 56 k-blocks"),
    (dict(tail_split=2, split_k=2), "pass one of the two"),
    (dict(tail_split=2, pingpong=True, bn=128), "ping-pong"),
])
def test_forced_tail_split_is_checked(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(UnsupportedError, match=match):
        plan_schedule(OPS["fp8_fast"], H100_SXM, **kw)  # type: ignore[arg-type]


def test_tail_spans_and_units_cover_every_tile_once() -> None:
    """Whole waves as tiles, the rest as (k-range, tile) units: every tile of C exactly once, every unit's box in the
    compact workspace distinct and inside it."""
    m, n, bm, bn, grid, split, group = 1000, 1500, 128, 128, 7, 3, 2
    tiles = -(-m // bm) * -(-n // bn)  # 8 x 12 = 96 = 13 waves of 7 + 5
    whole, rest = tail_spans(tiles, grid)
    assert (whole, rest) == (Span(0, 91), Span(91, 96))
    dp = [(t.off_m, t.off_n) for pid in range(grid) for t in cta_tiles(pid, m, n, bm, bn, group, grid, 1, whole)]
    units = [u for pid in range(min(grid, rest.tiles * split))
             for u in cta_tiles(pid, m, n, bm, bn, group, grid, split, rest)]
    assert len(dp) == len(set(dp)) == 91 and len(units) == 15
    tail_tiles = {(u.off_m, u.off_n) for u in units}
    assert len(tail_tiles) == 5 and not tail_tiles & set(dp)
    assert len(tail_tiles | set(dp)) == tiles
    boxes = sorted((u.ws_m, u.ws_n) for u in units)
    assert boxes == [(i * bm, 0) for i in range(15)]  # unit u's box at rows u * BM of a (3 * 5 * BM, BN) workspace
    assert all(u.ws_m == (u.split * rest.tiles + u.tile_id - rest.lo) * bm for u in units)
    assert tail_spans(5, 7) == (Span(0, 0), Span(0, 5))  # fewer tiles than CTAs: all of them split
    assert tail_spans(14, 7) == (Span(0, 14), Span(14, 14))  # whole waves: no tail


def test_ir_text_and_verifier() -> None:
    k = build(OPS["fp8_fast"], H100_SXM)
    assert k.tail is not None and k.modules == (k.module, k.tail)
    assert k.module.tiling.ranged and k.tail.tiling.ranged and k.tail.tiling.split_k == 4
    text = k.schedule
    assert "grid=132 ranged" in text and "grid=132 split_k=4 ranged" in text
    assert "-> workspace[m, n]" in text  # the tail's partial stores
    for m in k.modules:
        verify.check(m, "test", H100_SXM)


def test_gluon_of_a_ranged_kernel_and_its_tail() -> None:
    k = build(OPS["bf16"], H100_SXM, TAILED)
    main = k.gluon.text
    assert k.gluon.params[-5:] == ("M", "N", "K", "tile_lo", "tile_hi")
    assert "num_tiles = tile_hi - tile_lo" in main and "tile_coords(tile_lo + tile_id, num_pid_m, num_pid_n)" in main
    assert k.gluon.reduce_kernel is None and "c_desc" in k.gluon.params
    assert k.tail_gluon is not None
    tail = k.tail_gluon.text
    assert "tile_coords(tile_lo + unit % num_tiles, num_pid_m, num_pid_n)" in tail
    # Compact workspace: unit u's BM x BN box at rows u * BM (two row blocks, two column halves).
    assert "[unit * BM, 0]" in tail and "[unit * BM + 64, 1 * (BN // 2)]" in tail
    reduce = k.tail_gluon.reduce_kernel
    assert reduce is not None and f"def {reduce}(ws_ptr, c_ptr, c_stride_m, c_stride_n, M, N, tile_lo, tile_hi)" in tail
    assert "tile_coords(tile_lo + i, gl.cdiv(M, BM), gl.cdiv(N, BN))" in tail
    assert k.source.startswith(main) and k.source.endswith(tail)
    # An unranged kernel emits what it did.
    plain = build(OPS["bf16"], H100_SXM, plan_schedule(OPS["bf16"], H100_SXM, tail_split=1))
    assert plain.tail is None and "tile_lo" not in plain.source


class _Recorder:
    def __init__(self, log: list[tuple[str, int, list[Any]]], name: str) -> None:
        self.log, self.name = log, name

    def launch(self, grid: int, args: list[Any]) -> None:
        self.log.append((self.name, grid, args))


def test_launcher_splits_a_call_into_whole_waves_and_the_tail() -> None:
    """On meta tensors with the launches recorded: the ranged kernel over tiles 0 .. 264 on 132 CTAs, the tail's
    96 units over 264 .. 288 with a (4 x 24 x 128, 256) workspace, and its reduction, 32 programs per tile."""
    pytest.importorskip("triton")
    from warploom.runtime.launch import Launcher

    k = build(OPS["bf16"], H100_SXM, TAILED)
    assert k.tail is not None and k.tail_gluon is not None
    la = Launcher(k.module, k.gluon, fast=False, tail=(k.tail, k.tail_gluon))
    assert la._tail is not None and la._tail._reduce is not None
    log: list[tuple[str, int, list[Any]]] = []
    la._main = _Recorder(log, "main")  # type: ignore[assignment]
    la._tail._main = _Recorder(log, "tail")  # type: ignore[assignment]
    la._tail._reduce = _Recorder(log, "reduce")  # type: ignore[assignment]
    m, n, kk = Q_A
    a = torch.empty(m, kk, dtype=torch.bfloat16, device="meta")
    b = torch.empty(n, kk, dtype=torch.bfloat16, device="meta").t()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    la._launch(a, b, out, None, None, None, None, ())
    assert [(name, grid) for name, grid, _ in log] == [("main", 132), ("tail", 96), ("reduce", 24 * 32)]
    assert log[0][2][-2:] == [0, 264] and log[1][2][-2:] == [264, 288]
    ws = log[1][2][2]
    assert tuple(ws.shape) == (4 * 24 * 128, 256) and ws.dtype == torch.float32
    assert log[2][2][0] is ws and log[2][2][1] is out and log[2][2][-2:] == [264, 288]
    # A smaller problem on the same kernel: fewer tiles than CTAs, all of them split; a whole number of waves: no tail.
    log.clear()
    la._launch(a[:300], b, out[:300], None, None, None, None, ())
    assert [(name, grid) for name, grid, _ in log] == [("tail", 27 * 4), ("reduce", 27 * 32)]
    assert log[0][2][-2:] == [0, 27]
    log.clear()
    wide = torch.empty(11 * 256, kk, dtype=torch.bfloat16, device="meta").t()  # 12 x 11 tiles: one whole wave
    la._launch(a[:12 * 128], wide, torch.empty(12 * 128, 11 * 256, dtype=torch.bfloat16, device="meta"), None, None,
               None, None, ())
    assert [(name, grid) for name, grid, _ in log] == [("main", 132)] and log[0][2][-2:] == [0, 132]


def test_cost_model_and_tuner_see_the_tail() -> None:
    from warploom.tune.candidates import feasible
    from warploom.tune.cost import estimate

    spec = OPS["fp8_fast"]
    with_tail = plan_schedule(spec, H100_SXM)
    without = plan_schedule(spec, H100_SXM, tail_split=1, bn=256)
    assert estimate(spec, H100_SXM, with_tail).time < estimate(spec, H100_SXM, without).time
    assert estimate(spec, H100_SXM, with_tail).wave_efficiency > 0.95
    plans = feasible(spec, H100_SXM)
    assert {p.tail_split for p in plans if p.bn == 256} >= {1, 4}


def test_launcher_runs_every_tile_whole_where_k_does_not_split() -> None:
    """K is a run-time argument: at a K whose k-blocks do not form the tail's ranges, the ranged main kernel takes
    every tile (it runs any K), rather than failing as a split-K kernel must."""
    pytest.importorskip("triton")
    from warploom.runtime.launch import Launcher

    k = build(OPS["bf16"], H100_SXM, TAILED)
    assert k.tail is not None and k.tail_gluon is not None
    la = Launcher(k.module, k.gluon, fast=False, tail=(k.tail, k.tail_gluon))
    assert la._tail is not None
    log: list[tuple[str, int, list[Any]]] = []
    la._main = _Recorder(log, "main")  # type: ignore[assignment]
    la._tail._main = _Recorder(log, "tail")  # type: ignore[assignment]
    m, n, _ = Q_A
    kk = 7168 + 64  # 113 k-blocks of 64: not 4 equal ranges
    a = torch.empty(m, kk, dtype=torch.bfloat16, device="meta")
    b = torch.empty(n, kk, dtype=torch.bfloat16, device="meta").t()
    la._launch(a, b, torch.empty(m, n, dtype=torch.bfloat16, device="meta"), None, None, None, None, ())
    assert [(name, grid) for name, grid, _ in log] == [("main", 132)] and log[0][2][-2:] == [0, 288]


def test_plan_needs_a_tail_depth() -> None:
    p = TAILED
    with pytest.raises(ValueError, match="tail_stages"):
        replace(p, tail_stages=0)


def test_forced_tail_wins_over_rule14_and_short_k_keeps_no_tail() -> None:
    small = GemmSpec(128, 4096, 7168, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                     accumulation=Accumulation.PROMOTED)
    assert plan_schedule(small, H100_SXM).split_k == 4  # rule 14 by itself
    forced = plan_schedule(small, H100_SXM, tail_split=2)
    assert (forced.split_k, forced.tail_split) == (1, 2)
    # At 128x256 the tail's fixed cost (TAIL_COST_US) against rounds of 12 k-blocks outweighs the idle last round
    # (3.23 rounds against 3): no tail; at 48 k-blocks, one.
    assert plan_schedule(GemmSpec(4096, 2112, 768), H100_SXM, bn=256).tail_split == 1
    assert plan_schedule(GemmSpec(4096, 2112, 3072), H100_SXM, bn=256).tail_split == 4


def test_cost_of_a_tail_that_never_launches_is_none() -> None:
    """Fewer tiles than SMs: the plan's grid is the tile count, so the launcher runs every tile whole, and the cost
    model prices it as the plan without a tail."""
    from warploom.tune.cost import estimate

    spec = GemmSpec(1024, 2048, 4096)  # 8 x 8 tiles of 128x256
    forced = plan_schedule(spec, H100_SXM, bn=256, tail_split=4)
    plain = plan_schedule(spec, H100_SXM, bn=256, tail_split=1)
    assert forced.grid == 64
    assert estimate(spec, H100_SXM, forced).time == estimate(spec, H100_SXM, plain).time


def test_an_empty_output_simulates_to_nothing() -> None:
    k = build(OPS["bf16"], H100_SXM, TAILED)
    res = k.simulate(torch.empty(0, 7168, dtype=torch.bfloat16), torch.randn(7168, 2112, dtype=torch.bfloat16))
    assert res.ok and tuple(res.output.shape) == (0, 2112)


def test_no_tail_below_36_k_blocks() -> None:
    """Rule 15 takes no tail where a round is shorter than 36 k-blocks (measured: fp8 at 24 and 32 k-blocks ran 6-7%
    faster on 128x128 tiles without one); longer K, and bf16's twice as many k-blocks at the same K, keep it."""
    def fp8(m: int, n: int, k: int) -> GemmSpec:
        return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)

    short = plan_schedule(fp8(3072, 3072, 3072), H100_SXM)  # 24 k-blocks of 128
    assert (short.bn, short.tail_split, short.stream_k) == (128, 1, 0)
    assert plan_schedule(fp8(2048, 7168, 4096), H100_SXM).tail_split == 1  # 32
    assert plan_schedule(fp8(3072, 3072, 8192), H100_SXM).tail_split == 4  # 64
    assert plan_schedule(fp8(5120, 5120, 5120), H100_SXM).tail_split == 8  # 40
    assert plan_schedule(GemmSpec(3072, 3072, 3072), H100_SXM).tail_split == 4  # bf16: 48 k-blocks of 64
