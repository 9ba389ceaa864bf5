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
from warploom.passes import compile_schedule
from warploom.passes.build import build_sequential
from warploom.passes.epilogue import LowerEpilogue
from warploom.passes.partition import SplitProducer
from warploom.passes.persistent import FlattenProducer
from warploom.passes.pipeline_mma import PipelineMma
from warploom.passes.registers import AssignRegisters
from warploom.passes.rings import PlanRings
from warploom.planner import Plan, plan_schedule

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

    cons = ops(after.partition("consumer").body)
    (mma,) = [o for o in cons if isinstance(o, ir.Mma)]
    i = cons.index(mma)
    assert cons[i - 1] == ir.Wait("ready", ir.Slot("c"), ir.Parity("c"))
    assert cons[i + 1] == ir.Arrive("empty", ir.Slot("c"))


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
    cons = after.partition("consumer")
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
    after = PipelineMma()(stage(PROMOTED, "PipelineMma"))
    cons = after.partition("consumer")
    kl = k_loop(cons)
    body = list(kl.body)
    mma = next(o for o in body if isinstance(o, ir.Mma))
    assert mma.is_async and mma.acc == "partial" and mma.overwrite is ir.Guard.ALWAYS
    i = body.index(mma)
    assert body[i + 1] == ir.MmaWait(0)
    # The partial is read (promoted) only after the wait, and the slot just used (c, not c-1) is released.
    assert body.index(ir.Promote("partial", "acc")) > i + 1
    assert ir.Arrive("empty", ir.Slot("c")) in body
    assert not any(isinstance(o, ir.Arrive) and o.slot.offset for o in ops(cons.body))
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
    assert after.partition("consumer") == before.partition("consumer")


def test_flatten_producer_leaves_unexpected_shapes_alone() -> None:
    m = stage(NATIVE_BF16, "FlattenProducer")
    prod = m.partition("producer")
    odd = replace(prod, body=prod.body + (ir.Advance("p"),))  # not a bare tiles(k(...)) nest
    assert FlattenProducer()(m.with_partition(odd)).partition("producer") == odd


# ---------------------------------------------------------------------------------------------------------
# LowerEpilogue


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("subtiles", [1, 2])
def test_lower_epilogue_stores_through_smem_and_drains_at_exit(spec: GemmSpec, subtiles: int) -> None:
    before = stage(spec, "LowerEpilogue")
    after = LowerEpilogue(subtiles=subtiles)(before)
    t = after.tiling
    assert after.buffers == (ir.Buffer("c_smem", ir.Tensor.C, spec.out_dtype, t.bm, t.bn // subtiles),)
    cons = after.partition("consumer")
    assert not any(isinstance(o, ir.StoreTile) for o in ops(cons.body))
    (tiles,) = cons.body[:1]
    stores: list[ir.Stmt] = []
    for i in range(subtiles):
        stores += [ir.StoreWait(0), ir.StoreSmem("acc", "c_smem", i, subtiles), ir.FenceAsync(),
                   ir.TmaStore("c_smem", part=i, parts=subtiles)]
    assert isinstance(tiles, ir.Loop) and list(tiles.body[-len(stores):]) == stores
    # No partition leaves with a TMA store reading shared memory.
    assert cons.body[-1] == ir.StoreWait(0) and len(cons.body) == 2
    # The producer stores nothing and gets no trailing wait.
    assert after.partition("producer") == before.partition("producer")


# ---------------------------------------------------------------------------------------------------------
# AssignRegisters


@pytest.mark.parametrize("producer,consumer", [(24, 240), (40, 232), (56, 224)])
def test_assign_registers_by_role(producer: int, consumer: int) -> None:
    after = AssignRegisters(producer=producer, consumer=consumer)(stage(NATIVE_BF16, "AssignRegisters"))
    assert after.partition("producer").regs == producer
    assert after.partition("consumer").regs == consumer


# ---------------------------------------------------------------------------------------------------------
# The whole pipeline


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_pipeline_stage_order_and_op_census(spec: GemmSpec) -> None:
    m, trace = compile_schedule(spec, plan_schedule(spec, H100_SXM), H100_SXM)
    assert [n for n, _ in trace.stages] == [
        "build_sequential", "SplitProducer", "PlanRings", "PipelineMma", "FlattenProducer", "LowerEpilogue",
        "AssignRegisters"]
    assert trace.stages[-1][1] == m
    census = Counter(type(o).__name__ for p in m.partitions for o in ops(p.body))
    assert census["TmaLoad"] == 2 and census["Mma"] == 1 and census["ArriveExpectTx"] == 1
    assert census["Wait"] == 2  # ready (consumer) and empty (producer)
