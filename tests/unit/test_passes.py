"""Each pass of the pipeline, run alone on the output of the passes before it.

The module before a pass is taken from `compile_schedule`'s trace, so each test sees exactly what the pass
sees in the real pipeline; the assertions state the pass's contract from its docstring.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.ir import nodes as ir
from warploom.passes.build import build_sequential
from warploom.passes.epilogue import LowerEpilogue
from warploom.passes.partition import SplitProducer
from warploom.passes.persistent import FlattenProducer
from warploom.passes.pipeline_mma import PipelineMma
from warploom.passes.registers import AssignRegisters
from warploom.passes.rings import PlanRings
from warploom.planner import Plan, plan_schedule
from warploom.targets import compile_schedule

E4 = DType.E4M3
NATIVE_BF16 = GemmSpec(4096, 4096, 4096)
N_MAJOR = GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR)
ROWWISE_BIAS = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
PROMOTED = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED)
SPECS = [NATIVE_BF16, N_MAJOR, ROWWISE_BIAS, PROMOTED]


def ops(body: tuple[ir.Stmt, ...]) -> list[ir.Op]:
    return [o for o, _ in ir.walk(body)]


def loops(body: tuple[ir.Stmt, ...]) -> list[ir.Loop]:
    out: list[ir.Loop] = []
    for s in body:
        if isinstance(s, ir.Loop):
            out.append(s)
            out += loops(s.body)
    return out


def stage(spec: GemmSpec, name: str, plan: Plan | None = None) -> ir.Module:
    """The module as it enters pass `name` (i.e. after the stage before it)."""
    plan = plan or plan_schedule(spec, H100_SXM)
    _, trace = compile_schedule(spec, plan, H100_SXM)
    names = [n for n, _ in trace.stages]
    return trace.stages[names.index(name) - 1][1]


def k_loop(p: ir.Partition) -> ir.Loop:
    (lp,) = [lp for lp in loops(p.body) if lp.kind in (ir.LoopKind.K, ir.LoopKind.FLAT)]
    return lp


def consumers(m: ir.Module) -> list[ir.Partition]:
    """Every CONSUMER partition (one before SplitConsumers, one per warpgroup after it on 128-row tiles)."""
    out = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert out, "no consumer partition"
    return out


def the_consumer(m: ir.Module) -> ir.Partition:
    """The single consumer partition of a module before SplitConsumers (or of a 1-partition plan)."""
    (p,) = consumers(m)
    return p


# ---------------------------------------------------------------------------------------------------------
# build_sequential


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_sequential_program_is_one_partition_of_sync_loads(spec: GemmSpec) -> None:
    plan = plan_schedule(spec, H100_SXM)
    m = build_sequential(spec, plan)
    (p,) = m.partitions
    assert p.role is ir.Role.SEQUENTIAL and p.default
    assert [r.depth for r in m.rings] == [1, 1]
    loads = [o for o in ops(p.body) if isinstance(o, ir.TmaLoad)]
    assert [ld.tensor for ld in loads] == [ir.Tensor.A, ir.Tensor.B] and all(ld.barrier is None for ld in loads)
    b_ring = m.ring("b_ring")
    if spec.b_layout is BLayout.K_MAJOR:
        assert (b_ring.rows, b_ring.cols) == (plan.bn, plan.bk) and loads[1].coord == (ir.Axis.N, ir.Axis.K)
    else:
        assert (b_ring.rows, b_ring.cols) == (plan.bk, plan.bn) and loads[1].coord == (ir.Axis.K, ir.Axis.N)
    assert [lp.kind for lp in loops(p.body)] == [ir.LoopKind.TILES, ir.LoopKind.K]


# ---------------------------------------------------------------------------------------------------------
# SplitProducer


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_split_producer_moves_only_loads(spec: GemmSpec) -> None:
    before = stage(spec, "SplitProducer")
    after = SplitProducer(producer_warps=1)(before)
    (seq,) = before.partitions
    consumer, producer = after.partition("consumer"), after.partition("producer")
    assert consumer.role is ir.Role.CONSUMER and consumer.default and consumer.warps == seq.warps
    assert producer.role is ir.Role.PRODUCER and not producer.default and producer.warps == 1
    seq_ops = ops(seq.body)
    # The consumer keeps every op except the loads, in order; nothing else moved.
    assert ops(consumer.body) == [o for o in seq_ops if not isinstance(o, ir.TmaLoad)]
    # The producer holds exactly the loads (on its own cursor p) and its advances.
    prod = ops(producer.body)
    assert {type(o) for o in prod} == {ir.TmaLoad, ir.Advance}
    seq_loads = [o for o in seq_ops if isinstance(o, ir.TmaLoad)]
    assert [o for o in prod if isinstance(o, ir.TmaLoad)] == [
        replace(o, slot=replace(o.slot, cursor="p")) for o in seq_loads]
    assert [c.name for c in producer.cursors] == ["p"] and producer.cursors[0].depth == seq.cursors[0].depth
    assert producer.accumulators == ()
    # Same loop nest, without loops left empty (promoted's ZeroAcc lives outside the k-loop).
    assert [lp.kind for lp in loops(producer.body)] == [ir.LoopKind.TILES, ir.LoopKind.K]


# ---------------------------------------------------------------------------------------------------------
# PlanRings


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("stages", [2, 3, 5])
def test_plan_rings_adds_waits_and_expect_tx_of_the_stage_bytes(spec: GemmSpec, stages: int) -> None:
    before = stage(spec, "PlanRings")
    after = PlanRings(stages=stages)(before)
    assert [r.depth for r in after.rings] == [stages, stages]
    ready, empty = after.barrier("ready"), after.barrier("empty")
    assert (ready.purpose, empty.purpose) == (ir.Purpose.READY, ir.Purpose.EMPTY)
    assert ready.depth == empty.depth == stages and ready.count == empty.count == 1
    assert set(ready.rings) == set(empty.rings) == {"a_ring", "b_ring"}
    for p in after.partitions:
        assert all(c.depth == stages for c in p.cursors)

    prod = ops(after.partition("producer").body)
    waits = [o for o in prod if isinstance(o, ir.Wait)]
    txs = [o for o in prod if isinstance(o, ir.ArriveExpectTx)]
    loads = [o for o in prod if isinstance(o, ir.TmaLoad)]
    # One stage: wait empty (flipped: a fresh ring is free), announce the bytes, then the loads complete ready.
    assert waits == [ir.Wait("empty", ir.Slot("p"), ir.Parity("p", flip=True))]
    slot_bytes = sum(r.slot_bytes for r in after.rings)
    assert txs == [ir.ArriveExpectTx("ready", ir.Slot("p"), slot_bytes)]
    assert slot_bytes == sum(after.ring(ld.ring).slot_bytes for ld in loads)
    assert all(ld.barrier == "ready" for ld in loads)
    assert prod.index(waits[0]) < prod.index(txs[0]) < min(prod.index(ld) for ld in loads)

    # One wgmma per k-block, or one per column block of a promoted accumulator (partial_blocks): the slot is
    # acquired once before the first and released once after the last.
    plan = plan_schedule(spec, H100_SXM)
    cons = ops(the_consumer(after).body)
    mmas = [i for i, o in enumerate(cons) if isinstance(o, ir.Mma)]
    assert len(mmas) == (plan.partial_blocks if spec.accumulation is Accumulation.PROMOTED else 1)
    assert cons[mmas[0] - 1] == ir.Wait("ready", ir.Slot("c"), ir.Parity("c"))
    assert cons[mmas[-1] + 1] == ir.Arrive("empty", ir.Slot("c"))
    assert [o for o in cons if isinstance(o, (ir.Wait, ir.Arrive))] == [cons[mmas[0] - 1], cons[mmas[-1] + 1]]


def test_plan_rings_expect_tx_counts_both_tiles() -> None:
    # 128x256x64 bf16: A 128*64*2 + B 256*64*2 bytes.
    m = PlanRings(stages=4)(stage(NATIVE_BF16, "PlanRings"))
    (tx,) = [o for o in ops(m.partition("producer").body) if isinstance(o, ir.ArriveExpectTx)]
    assert tx.nbytes == 128 * 64 * 2 + 256 * 64 * 2 == 49152


# ---------------------------------------------------------------------------------------------------------
# PipelineMma


@pytest.mark.parametrize("spec", [NATIVE_BF16, N_MAJOR, ROWWISE_BIAS], ids=lambda s: s.short())
def test_pipeline_mma_defers_release_by_one_k_block(spec: GemmSpec) -> None:
    after = PipelineMma()(stage(spec, "PipelineMma"))
    cons = the_consumer(after)
    (tiles,) = cons.body
    assert isinstance(tiles, ir.Loop) and tiles.kind is ir.LoopKind.TILES
    kl = k_loop(cons)
    assert list(kl.body) == [
        ir.Wait("ready", ir.Slot("c"), ir.Parity("c")),
        ir.Mma("a_ring", "b_ring", ir.Slot("c"), "acc", ir.Guard.FIRST_K, is_async=True),
        ir.MmaWait(1),
        ir.Arrive("empty", ir.Slot("c", -1), guard=ir.Guard.NOT_FIRST_K),
        ir.Advance("c"),
    ]
    # After the k-loop: drain the last wgmma, then release its slot (c has advanced past it).
    after_loop = tiles.body[tiles.body.index(kl) + 1:]
    assert after_loop[:2] == (ir.MmaWait(0), ir.Arrive("empty", ir.Slot("c", -1)))
    # The producer is untouched.
    assert after.partition("producer") == stage(spec, "PipelineMma").partition("producer")


def test_pipeline_mma_promoted_waits_each_k_block_and_releases_it() -> None:
    # One partial as wide as the tile (partial_blocks=1, the 128-wide tile).
    plan = plan_schedule(PROMOTED, H100_SXM, bn=128)
    assert plan.partial_blocks == 1
    after = PipelineMma()(stage(PROMOTED, "PipelineMma", plan))
    cons = the_consumer(after)
    kl = k_loop(cons)
    assert list(kl.body) == [
        ir.Wait("ready", ir.Slot("c"), ir.Parity("c")),
        ir.Mma("a_ring", "b_ring", ir.Slot("c"), "partial", ir.Guard.ALWAYS, is_async=True),
        # The partial is read (promoted) only after the wait, and the slot just used (c, not c-1) is released.
        ir.MmaWait(0),
        ir.Arrive("empty", ir.Slot("c")),
        ir.Promote("partial", "acc"),
        ir.Advance("c"),
    ]
    assert not any(isinstance(o, ir.Arrive) and o.slot.offset for o in ops(cons.body))
    (tiles,) = cons.body
    assert not any(isinstance(s, (ir.MmaWait, ir.Arrive)) for s in tiles.body)


def test_pipeline_mma_promoted_column_blocks_wait_for_each_partial() -> None:
    # The planner's 128x256 promoted tile: two column blocks through one 128-wide partial.
    plan = plan_schedule(PROMOTED, H100_SXM)
    assert (plan.bn, plan.partial_blocks) == (256, 2)
    after = PipelineMma()(stage(PROMOTED, "PipelineMma", plan))
    cons = the_consumer(after)
    lo, hi = ir.ColBlock(0, 128), ir.ColBlock(128, 128)
    assert list(k_loop(cons).body) == [
        ir.Wait("ready", ir.Slot("c"), ir.Parity("c")),
        ir.Mma("a_ring", "b_ring", ir.Slot("c"), "partial", ir.Guard.ALWAYS, is_async=True, n_cols=lo),
        ir.MmaWait(0),  # the partial is reused by the next block: it must be retired and promoted first
        ir.Promote("partial", "acc0"),
        ir.Mma("a_ring", "b_ring", ir.Slot("c"), "partial", ir.Guard.ALWAYS, is_async=True, n_cols=hi),
        ir.MmaWait(0),
        ir.Arrive("empty", ir.Slot("c")),  # released after the k-block's last wgmma, once
        ir.Promote("partial", "acc1"),
        ir.Advance("c"),
    ]
    (tiles,) = cons.body
    assert not any(isinstance(s, (ir.MmaWait, ir.Arrive)) for s in tiles.body)


# ---------------------------------------------------------------------------------------------------------
# FlattenProducer


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_flatten_producer_makes_one_flat_loop(spec: GemmSpec) -> None:
    before = stage(spec, "FlattenProducer")
    after = FlattenProducer()(before)
    prod = after.partition("producer")
    (flat,) = prod.body
    assert isinstance(flat, ir.Loop) and flat.kind is ir.LoopKind.FLAT
    assert flat.body == k_loop(before.partition("producer")).body
    assert consumers(after) == consumers(before)


def test_flatten_producer_leaves_unexpected_shapes_alone() -> None:
    m = stage(NATIVE_BF16, "FlattenProducer")
    prod = m.partition("producer")
    odd = replace(prod, body=prod.body + (ir.Advance("p"),))  # not a bare tiles(k(...)) nest
    assert FlattenProducer()(m.with_partition(odd)).partition("producer") == odd


# ---------------------------------------------------------------------------------------------------------
# LowerEpilogue


def stores(acc: str, buf: str, parts: list[tuple[int, int]], of: int, total: int) -> list[ir.Stmt]:
    """The lowering of one store_tile: per column block (i of `of` of the accumulator, tile part p of `total`)
    wait for the buffer, write it, fence, TMA-store it."""
    out: list[ir.Stmt] = []
    for i, p in parts:
        out += [ir.StoreWait(0), ir.StoreSmem(acc, buf, i, of), ir.FenceAsync(), ir.TmaStore(buf, part=p, parts=total)]
    return out


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("subtiles", [1, 2])
@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_lower_epilogue_stores_through_smem_and_drains_at_exit(spec: GemmSpec, subtiles: int, split: int) -> None:
    plan = plan_schedule(spec, H100_SXM, consumer_partitions=split)
    assert plan.consumer_partitions == split and plan.bm == 128
    before = stage(spec, "LowerEpilogue", plan)
    after = LowerEpilogue(subtiles=subtiles)(before)
    t = after.tiling
    cons = consumers(after)
    assert len(cons) == split
    blocks = plan.partial_blocks  # 1, or 2 column-block accumulators for the promoted 128x256 tile
    width = min(t.bn // subtiles, t.bn // blocks)
    names = ["c_smem"] if split == 1 else [f"c_smem{i}" for i in range(split)]
    # One staging buffer per storing partition, as tall as its row block.
    assert after.buffers == tuple(ir.Buffer(n, ir.Tensor.C, spec.out_dtype, t.bm // split, width) for n in names)
    for p, buf in zip(cons, names, strict=True):
        assert not any(isinstance(o, ir.StoreTile) for o in ops(p.body))
        (tiles,) = p.body[:1]
        epilogues = {o.acc: o for o in ops(p.body) if isinstance(o, ir.Epilogue)}
        want: list[ir.Stmt] = []
        per_acc = t.bn // blocks // width  # column blocks of each accumulator
        for b in range(blocks):
            acc = "acc" if blocks == 1 else f"acc{b}"
            if b > 0 and acc in epilogues:  # each block's epilogue math runs right before its stores
                want.append(epilogues[acc])
            want += stores(acc, buf, [(i, b * per_acc + i) for i in range(per_acc)], per_acc, t.bn // width)
        assert isinstance(tiles, ir.Loop) and list(tiles.body[-len(want):]) == want
        # No partition leaves with a TMA store reading shared memory.
        assert p.body[-1] == ir.StoreWait(0) and len(p.body) == 2
    # The producer stores nothing and gets no trailing wait.
    assert after.partition("producer") == before.partition("producer")


def test_lower_epilogue_one_partition_whole_tile_halves() -> None:
    # bf16 128x256 with one 8-warp consumer: one 128x128 buffer, the accumulator stored in two halves.
    plan = plan_schedule(NATIVE_BF16, H100_SXM, consumer_partitions=1)
    after = LowerEpilogue(subtiles=2)(stage(NATIVE_BF16, "LowerEpilogue", plan))
    assert after.buffers == (ir.Buffer("c_smem", ir.Tensor.C, DType.BF16, 128, 128),)
    (tiles,) = the_consumer(after).body[:1]
    assert isinstance(tiles, ir.Loop)
    assert list(tiles.body[-8:]) == stores("acc", "c_smem", [(0, 0), (1, 1)], 2, 2)


def test_lower_epilogue_column_block_accumulators_store_whole() -> None:
    # Promoted 128x256 h2 p2: each 64x128 accumulator fills its partition's 64x128 buffer once, at its own
    # column block of the tile; the epilogue math of acc1 sits between the two stores.
    plan = plan_schedule(PROMOTED, H100_SXM)
    assert (plan.consumer_partitions, plan.partial_blocks, plan.epilogue_subtiles) == (2, 2, 2)
    after = LowerEpilogue(subtiles=2)(stage(PROMOTED, "LowerEpilogue", plan))
    assert after.buffers == (ir.Buffer("c_smem0", ir.Tensor.C, DType.BF16, 64, 128),
                             ir.Buffer("c_smem1", ir.Tensor.C, DType.BF16, 64, 128))
    tw = (ir.EpilogueStep.SCALE_TENSORWISE,)
    for p, buf in zip(consumers(after), ("c_smem0", "c_smem1"), strict=True):
        (tiles,) = p.body[:1]
        assert isinstance(tiles, ir.Loop)
        assert list(tiles.body[-10:]) == [
            ir.Epilogue("acc0", tw), *stores("acc0", buf, [(0, 0)], 1, 2),
            ir.Epilogue("acc1", tw), *stores("acc1", buf, [(0, 1)], 1, 2),
        ]


def test_lower_epilogue_narrow_column_blocks_split_the_buffer() -> None:
    # Forced 128x128 with two 64-wide blocks and one epilogue store: the buffer is as wide as a block
    # (64), and the tile goes out in 2 parts of 64 columns, one per accumulator.
    plan = plan_schedule(PROMOTED, H100_SXM, bn=128, partial_blocks=2, consumer_partitions=1)
    after = LowerEpilogue(subtiles=1)(stage(PROMOTED, "LowerEpilogue", plan))
    assert after.buffers == (ir.Buffer("c_smem", ir.Tensor.C, DType.BF16, 128, 64),)
    stored = [o for o in ops(the_consumer(after).body) if isinstance(o, ir.TmaStore)]
    assert stored == [ir.TmaStore("c_smem", part=0, parts=2), ir.TmaStore("c_smem", part=1, parts=2)]


# ---------------------------------------------------------------------------------------------------------
# AssignRegisters


@pytest.mark.parametrize("producer,consumer", [(24, 240), (40, 232), (56, 224)])
def test_assign_registers_by_role(producer: int, consumer: int) -> None:
    after = AssignRegisters(producer=producer, consumer=consumer)(stage(NATIVE_BF16, "AssignRegisters"))
    assert after.partition("producer").regs == producer
    assert len(consumers(after)) == 2
    for p in consumers(after):
        assert p.regs == consumer


# ---------------------------------------------------------------------------------------------------------
# The whole pipeline


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_pipeline_stage_order_and_op_census(spec: GemmSpec) -> None:
    plan = plan_schedule(spec, H100_SXM)
    m, trace = compile_schedule(spec, plan, H100_SXM)
    assert [n for n, _ in trace.stages] == [
        "build_sequential", "SplitProducer", "SplitScales", "PlanRings", "PipelineMma", "SplitConsumers",
        "ShareB", "FlattenProducer", "LowerEpilogue", "HoistOperands", "PrefetchOperands", "AssignRegisters",
        "DependentLaunch"]
    assert trace.stages[-1][1] == m
    n = plan.consumer_partitions
    assert n == 2 and len(consumers(m)) == n  # every spec here has 128-row tiles
    census = Counter(type(o).__name__ for p in m.partitions for o in ops(p.body))
    # Each consumer partition has one wgmma per column block of its accumulator.
    assert census["TmaLoad"] == 2 and census["Mma"] == n * plan.partial_blocks and census["ArriveExpectTx"] == 1
    assert census["Wait"] == n + 1  # ready (each consumer) and empty (producer)
