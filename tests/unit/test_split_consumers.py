"""SplitConsumers: one 4-warp consumer partition per warpgroup of a 128-row tile, each owning a 64-row block.

The input is the module as it enters the pass in the real pipeline (after PipelineMma); the assertions are
the pass's contract: everything but names, warps, row blocks, accumulator rows and the empty barrier's
arrival count is left as it was.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.passes.split_consumers import SplitConsumers
from warploom.planner import Plan, plan_schedule
from warploom.targets import compile_schedule

E4 = DType.E4M3
NATIVE_BF16 = GemmSpec(4096, 4096, 4096)
N_MAJOR = GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR)
ROWWISE_BIAS = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
PROMOTED = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED)
SPECS = [NATIVE_BF16, N_MAJOR, ROWWISE_BIAS, PROMOTED]


def before_split(spec: GemmSpec, plan: Plan | None = None) -> ir.Module:
    """The module as it enters SplitConsumers."""
    plan = plan or plan_schedule(spec, H100_SXM)
    _, trace = compile_schedule(spec, plan, H100_SXM)
    names = [n for n, _ in trace.stages]
    return trace.stages[names.index("SplitConsumers") - 1][1]


def consumers(m: ir.Module) -> list[ir.Partition]:
    return [p for p in m.partitions if p.role is ir.Role.CONSUMER]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_split_gives_one_partition_per_warpgroup(spec: GemmSpec) -> None:
    m = before_split(spec)
    (cons,) = consumers(m)
    assert (cons.name, cons.warps, cons.rows, cons.default) == ("consumer", 8, None, True)
    after = SplitConsumers(partitions=2)(m)

    assert [p.name for p in after.partitions] == ["consumer0", "consumer1", "producer"]
    c0, c1 = consumers(after)
    assert (c0.default, c1.default) == (True, False) and not after.partition("producer").default
    assert (c0.warps, c1.warps) == (4, 4)
    assert (c0.rows, c1.rows) == (ir.RowBlock(0, 64), ir.RowBlock(64, 64))
    for p in (c0, c1):
        # Each warpgroup's accumulators are its 64 rows of the tile, at the same columns.
        assert p.accumulators == tuple(replace(a, rows=64) for a in cons.accumulators)
        assert all(a.rows == 128 for a in cons.accumulators)
        # The program, the cursors and the register budget are the consumer's, unchanged.
        assert (p.body, p.cursors, p.regs, p.role) == (cons.body, cons.cursors, cons.regs, cons.role)
    assert after.partition("producer") == m.partition("producer")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_split_counts_both_releases_on_empty(spec: GemmSpec) -> None:
    m = before_split(spec)
    after = SplitConsumers(partitions=2)(m)
    # Each consumer partition arrives once per slot use, so a slot is free after 2 arrivals; the ready barrier
    # still completes on the producer's single arrive.expect_tx.
    assert after.barrier("empty") == replace(m.barrier("empty"), count=2)
    assert after.barrier("ready") == m.barrier("ready") and m.barrier("ready").count == 1
    # Nothing else of the module changes.
    assert (after.rings, after.buffers, after.tiling, after.spec, after.name) == (
        m.rings, m.buffers, m.tiling, m.spec, m.name)
    assert verify.structural(after) == []


def test_split_keeps_column_block_accumulators() -> None:
    m = before_split(PROMOTED)  # the planner's 128x256 promoted tile: two column blocks
    after = SplitConsumers(partitions=2)(m)
    for p in consumers(after):
        assert p.accumulators == (ir.Accumulator("acc0", 64, 128, 0), ir.Accumulator("acc1", 64, 128, 128),
                                  ir.Accumulator("partial", 64, 128, 0))


def test_one_partition_is_the_identity() -> None:
    m = before_split(NATIVE_BF16)
    assert SplitConsumers(partitions=1)(m) is m
    assert SplitConsumers()(m) is m


def test_pipeline_honours_one_partition_on_128_row_tiles() -> None:
    plan = plan_schedule(NATIVE_BF16, H100_SXM, consumer_partitions=1)
    m, _ = compile_schedule(NATIVE_BF16, plan, H100_SXM)
    (cons,) = consumers(m)
    assert (cons.name, cons.warps, cons.rows) == ("consumer", 8, None)
    assert [a.rows for a in cons.accumulators] == [128]
    assert m.barrier("empty").count == 1


@pytest.mark.parametrize("spec", [GemmSpec(64, 8192, 8192), GemmSpec(32, 4096, 4096, E4, E4, DType.BF16,
                                                                      scale=ScaleRecipe.ROWWISE,
                                                                      accumulation=Accumulation.PROMOTED)],
                         ids=lambda s: s.short())
def test_64_row_tiles_keep_one_consumer(spec: GemmSpec) -> None:
    plan = plan_schedule(spec, H100_SXM)
    assert (plan.bm, plan.consumer_partitions) == (64, 1)
    m, trace = compile_schedule(spec, plan, H100_SXM)
    stages = dict(trace.stages)
    assert stages["SplitConsumers"] is stages["PipelineMma"]  # the pass left it alone
    (cons,) = consumers(m)
    assert (cons.name, cons.warps, cons.rows, cons.default) == ("consumer", 4, None, True)
    assert m.barrier("empty").count == 1


@pytest.mark.parametrize("partitions,forced", [
    (2, dict(bm=64)),  # one warpgroup: 32-row blocks are not a wgmma shape
    (3, {}),  # 128 rows do not split in three
    (4, {}),  # 32-row blocks
], ids=["64-rows-in-2", "128-rows-in-3", "128-rows-in-4"])
def test_impossible_split_raises(partitions: int, forced: dict[str, int]) -> None:
    plan = plan_schedule(NATIVE_BF16, H100_SXM, consumer_partitions=1, **forced)
    m = before_split(NATIVE_BF16, plan)
    (cons,) = consumers(m)
    with pytest.raises(ValueError, match=f"cannot split a {cons.warps}-warp consumer of {plan.bm}-row tiles "
                                         f"into {partitions} warpgroups"):
        SplitConsumers(partitions=partitions)(m)
