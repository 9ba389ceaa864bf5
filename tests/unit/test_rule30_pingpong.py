"""Planner rule 30 (docs/decisions/rule-30-short-k-pingpong.md): fp8 rowwise with fast accumulation over a short K,
on aligned rows and at least a wave of 128x128 tiles, runs ping-pong 128x128 under Triton >= 3.9 (the planner asks
the installed Triton; `emitting_for` stands in for another); everything the rule does not cover keeps its plan."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.planner import PINGPONG_MAX_KBLOCKS, explain, plan_schedule, short_k_pingpong
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

E4 = DType.E4M3


@pytest.fixture(autouse=True)
def triton39() -> Iterator[None]:
    """Plan as under Triton 3.9, the version rule 30 was measured under."""
    with emitting_for("3.9"):
        yield


def rowwise(m: int, n: int, k: int, **kw: object) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(2048, 2048, 2048), (4096, 7168, 2048), (8192, 8192, 1024), (8192, 4096, 1536)])
def test_short_k_fp8_rowwise_runs_pingpong(shape: tuple[int, int, int]) -> None:
    plan = plan_schedule(rowwise(*shape), H100_SXM)
    assert plan.pingpong and (plan.bm, plan.bn) == (128, 128)
    assert "ping-pong (rule 30)" in explain(rowwise(*shape), H100_SXM).text()


@pytest.mark.parametrize("spec", [
    rowwise(1161, 12624, 2176),  # 17 k-blocks
    rowwise(4096, 2112, 7168),  # long K (a split-K tail)
    rowwise(917, 5184, 608),  # rows not whole 128-byte lines
    rowwise(1024, 1024, 2048),  # 64 tiles of 128x128: under a wave
    rowwise(4096, 4096, 2048, accumulation=Accumulation.PROMOTED),  # exact accumulation: not measured
    rowwise(4096, 4096, 2048, bias_dtype=DType.BF16),  # a bias: not measured
    GemmSpec(4096, 4096, 2048, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE),  # tensorwise: not measured
    GemmSpec(4096, 4096, 1024),  # bf16: ping-pong ran slower
    GemmSpec(4096, 4096, 2048, DType.E5M2, DType.E5M2, DType.BF16, scale=ScaleRecipe.ROWWISE),  # e5m2: not measured
    GemmSpec(4096, 4096, 2048, E4, E4, DType.FP32, scale=ScaleRecipe.ROWWISE),  # fp32 out: not measured
], ids=["17-kblocks", "long-k", "unaligned", "under-a-wave", "promoted", "bias", "tensorwise", "bf16", "e5m2",
        "fp32-out"])
def test_what_rule_30_does_not_cover_keeps_its_plan(spec: GemmSpec) -> None:
    assert not plan_schedule(spec, H100_SXM).pingpong


def test_forced_options_win_over_rule_30() -> None:
    spec = rowwise(4096, 7168, 2048)
    assert (plan_schedule(spec, H100_SXM, bn=256).bn, plan_schedule(spec, H100_SXM, bn=256).pingpong) == (256, False)
    assert not plan_schedule(spec, H100_SXM, stages=4).pingpong
    assert plan_schedule(spec, H100_SXM, stream_k=2).stream_k == 2


def test_the_k_block_limit_is_the_rules() -> None:
    """At PINGPONG_MAX_KBLOCKS k-blocks (128 fp8 bytes each) ping-pong, one more not."""
    at, past = rowwise(4096, 4096, 128 * PINGPONG_MAX_KBLOCKS), rowwise(4096, 4096, 128 * (PINGPONG_MAX_KBLOCKS + 1))
    assert plan_schedule(at, H100_SXM).pingpong and not plan_schedule(past, H100_SXM).pingpong
    assert not short_k_pingpong(past, plan_schedule(past, H100_SXM), H100_SXM)


@pytest.mark.parametrize("version", ["3.6", "3.7", "3.8"])
def test_under_older_triton_the_cooperative_plan_stays(version: str) -> None:
    """Under Triton 3.6 ping-pong ran 9% slower than the cooperative plan at 4096x7168x2048 (session 10); 3.7 and 3.8
    were not measured."""
    with emitting_for(version):
        plan = plan_schedule(rowwise(4096, 7168, 2048), H100_SXM)
    assert not plan.pingpong and (plan.bm, plan.bn) == (128, 256)
