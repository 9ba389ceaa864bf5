"""The schedule verifier: real modules from the pass pipeline verify clean, and each corruption is reported.

Every corruption starts from a finished module (`compile_schedule`) and changes one thing with
`dataclasses.replace`, so a test fails if the verifier misses the defect or reports a clean module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DeviceInfo, DType, GemmSpec, ScaleRecipe, VerificationError
from warploom.errors import InternalError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.planner import Plan, plan_schedule
from warploom.targets import compile_schedule

E4 = DType.E4M3
NATIVE = GemmSpec(4096, 4096, 4096)
N_MAJOR = GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR)
ROWWISE = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16)
PROMOTED = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED)
SPECS = [NATIVE, N_MAJOR, ROWWISE, PROMOTED]
# (spec, forced plan parameters): the planner's choices (two consumer partitions on 128-row tiles, column
# blocks for promoted 128x256), and the single 8-warp consumer partition, native and promoted.
MODULES = [(s, {}) for s in SPECS] + [(NATIVE, dict(consumer_partitions=1)),
                                      (PROMOTED, dict(consumer_partitions=1, bn=128))]


def finished(spec: GemmSpec, **forced: int) -> ir.Module:
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM, **forced), H100_SXM)
    return m


def consumers(m: ir.Module) -> list[ir.Partition]:
    out = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert out, "no consumer partition"
    return out


def edit(body: tuple[ir.Stmt, ...], fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> tuple[ir.Stmt, ...]:
    """`body` with every op replaced by fn(op) (a tuple: empty drops it), loops kept."""
    out: list[ir.Stmt] = []
    for s in body:
        out.extend((ir.Loop(s.kind, edit(s.body, fn)),) if isinstance(s, ir.Loop) else fn(s))
    return tuple(out)


def edit_partition(m: ir.Module, name: str, fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> ir.Module:
    p = m.partition(name)
    new = replace(p, body=edit(p.body, fn))
    assert new != p, "the corruption changed nothing"
    return m.with_partition(new)


def edit_consumers(m: ir.Module, fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> ir.Module:
    """The same corruption in every consumer partition."""
    for p in consumers(m):
        m = edit_partition(m, p.name, fn)
    return m


def reported(m: ir.Module, needle: str, device: DeviceInfo = H100_SXM) -> list[str]:
    errs = verify.complete(m, device)
    assert any(needle in e for e in errs), f"{needle!r} not among {errs}"
    return errs


def _module_id(case: tuple[GemmSpec, dict[str, int]]) -> str:
    spec, forced = case
    return spec.short() + "".join(f" {k}={v}" for k, v in forced.items())


@pytest.fixture(params=MODULES, ids=_module_id)
def module(request: pytest.FixtureRequest) -> ir.Module:
    spec, forced = request.param
    return finished(spec, **forced)


def test_pipeline_output_verifies_clean(module: ir.Module) -> None:
    assert verify.structural(module) == []
    assert verify.complete(module, H100_SXM) == []
    assert verify.check(module, "test", H100_SXM) is module


def test_wrong_expect_tx_bytes(module: ir.Module) -> None:
    m = edit_partition(module, "producer", lambda o: (replace(o, nbytes=o.nbytes - 16),)
                       if isinstance(o, ir.ArriveExpectTx) else (o,))
    stage = sum(r.slot_bytes for r in module.rings)
    errs = reported(m, f"expect-tx on ready announces {stage - 16} bytes but the loads completing on it bring {stage}")
    assert len(errs) == 1


def test_missing_load_makes_expect_tx_disagree(module: ir.Module) -> None:
    m = edit_partition(module, "producer", lambda o: () if isinstance(o, ir.TmaLoad) and o.tensor is ir.Tensor.B
                       else (o,))
    reported(m, "expect-tx on ready announces")
    reported(m, "ring b_ring needs a producer and a consumer")


def test_ring_without_consumer(module: ir.Module) -> None:
    # A third ring that the producer fills (with its bytes announced) but no wgmma ever reads.
    a = module.ring("a_ring")
    extra = replace(a, name="x_ring")

    def add_load(o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.ArriveExpectTx):
            return (replace(o, nbytes=o.nbytes + extra.slot_bytes),)
        if isinstance(o, ir.TmaLoad) and o.tensor is ir.Tensor.A:
            return (o, replace(o, ring="x_ring"))
        return (o,)

    m = edit_partition(replace(module, rings=module.rings + (extra,)), "producer", add_load)
    roomy = replace(H100_SXM, smem_per_block=1 << 20)  # the extra ring does not fit 227 KiB; not the point here
    errs = reported(m, "ring x_ring needs a producer and a consumer partition, has writers ['producer'] and "
                       "readers []", roomy)
    assert len(errs) == 1


def test_wait_with_no_arrival(module: ir.Module) -> None:
    m = edit_consumers(module, lambda o: () if isinstance(o, ir.Arrive) and o.barrier == "empty" else (o,))
    errs = reported(m, "barrier empty is waited on but never arrived at")
    assert len(errs) == 1


def test_one_of_two_consumers_never_releases() -> None:
    # Two consumer partitions share each slot: the empty barrier counts 2, so a partition that never
    # arrives leaves every phase one arrival short.
    module = finished(NATIVE)
    first, second = consumers(module)
    assert module.barrier("empty").count == 2
    m = edit_partition(module, second.name, lambda o: () if isinstance(o, ir.Arrive) and o.barrier == "empty"
                       else (o,))
    errs = reported(m, f"barrier empty expects 2 arrivals per phase but 1 partitions arrive (['{first.name}'])")
    assert len(errs) == 1


def test_empty_count_left_at_one_with_two_consumers() -> None:
    # The bug SplitConsumers must not have: two partitions arrive, the barrier completes on the first.
    module = finished(NATIVE)
    bars = tuple(replace(b, count=1) if b.name == "empty" else b for b in module.barriers)
    names = sorted(p.name for p in consumers(module))
    errs = reported(replace(module, barriers=bars),
                    f"barrier empty expects 1 arrivals per phase but 2 partitions arrive ({names})")
    assert len(errs) == 1


def test_barrier_never_waited_on(module: ir.Module) -> None:
    m = edit_consumers(module, lambda o: () if isinstance(o, ir.Wait) else (o,))
    reported(m, "barrier ready is never waited on")


@pytest.mark.parametrize("extra", [1, 2])
def test_arrival_count_mismatch(module: ir.Module, extra: int) -> None:
    arriving = len(consumers(module))  # every consumer partition releases each slot once
    assert module.barrier("empty").count == arriving
    count = arriving + extra
    bars = tuple(replace(b, count=count) if b.name == "empty" else b for b in module.barriers)
    m = replace(module, barriers=bars)
    errs = reported(m, f"barrier empty expects {count} arrivals per phase but {arriving} partitions")
    assert len(errs) == 1


def test_same_partition_arrives_and_waits(module: ir.Module) -> None:
    # The producer releasing its own empty slot would let it run ahead of the consumer.
    m = edit_partition(module, "producer", lambda o: (o, ir.Arrive("empty", o.slot)) if isinstance(o, ir.Wait)
                       else (o,))
    reported(m, "barrier empty is arrived at and waited on by the same partition ['producer']")


@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_accumulator_read_with_wgmma_in_flight(split: int) -> None:
    module = finished(NATIVE, consumer_partitions=split)
    for cons in consumers(module):  # each partition's drain is checked on its own
        (tiles,) = [s for s in cons.body if isinstance(s, ir.Loop)]
        body = list(tiles.body)
        body.remove(ir.MmaWait(0))  # the drain after the k-loop
        m = module.with_partition(replace(cons, body=tuple(replace(s, body=tuple(body)) if s is tiles else s
                                                            for s in cons.body)))
        errs = reported(m, f"partition {cons.name}: StoreSmem reads an accumulator with 1 wgmma in flight")
        assert all(cons.name in e for e in errs)


@pytest.mark.parametrize("forced", [{}, dict(bn=128, consumer_partitions=1)], ids=["p2_h2", "p1_h1"])
def test_promoted_partial_read_with_wgmma_in_flight(forced: dict[str, int]) -> None:
    module = finished(PROMOTED, **forced)
    for cons in consumers(module):
        m = edit_partition(module, cons.name, lambda o: () if isinstance(o, ir.MmaWait) else (o,))
        reported(m, f"partition {cons.name}: Promote reads an accumulator with")


def test_promoted_second_column_block_read_with_wgmma_in_flight() -> None:
    # Column blocks: only the wait after the second block's wgmma dropped; acc1's promote races it.
    module = finished(PROMOTED)
    for cons in consumers(module):
        (kl,) = [s for t in cons.body if isinstance(t, ir.Loop) for s in t.body if isinstance(s, ir.Loop)]
        waits = [i for i, s in enumerate(kl.body) if isinstance(s, ir.MmaWait)]
        assert len(waits) == 2
        k_body = kl.body[:waits[1]] + kl.body[waits[1] + 1:]
        m = module.with_partition(replace(cons, body=edit_loop(cons.body, kl, replace(kl, body=k_body))))
        errs = reported(m, f"partition {cons.name}: Promote reads an accumulator with 1 wgmma in flight")
        assert all(e.startswith(f"partition {cons.name}") for e in errs)  # the other warpgroup is intact


def edit_loop(body: tuple[ir.Stmt, ...], old: ir.Loop, new: ir.Loop) -> tuple[ir.Stmt, ...]:
    """`body` with the loop `old` (found by identity) replaced by `new`."""
    return tuple(new if s is old else ir.Loop(s.kind, edit_loop(s.body, old, new)) if isinstance(s, ir.Loop)
                 else s for s in body)


@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_exit_with_wgmma_in_flight(split: int) -> None:
    module = finished(NATIVE, consumer_partitions=split)
    for cons in consumers(module):
        # Drop every wgmma_wait pending=0 and every read of the accumulator: the last wgmma is never retired.
        m = edit_partition(module, cons.name, lambda o: () if isinstance(o, (ir.StoreSmem, ir.FenceAsync,
                                                                              ir.TmaStore))
                           or o == ir.MmaWait(0) else (o,))
        errs = reported(m, f"partition {cons.name} exits with 1 wgmma in flight")
        assert all(cons.name in e for e in errs)


def test_exit_with_tma_store_in_flight(module: ir.Module) -> None:
    for cons in consumers(module):
        assert cons.body[-1] == ir.StoreWait(0)
        m = module.with_partition(replace(cons, body=cons.body[:-1]))
        errs = reported(m, f"partition {cons.name} exits with 1 TMA stores in flight")
        assert len(errs) == 1


def test_smem_overflow_from_a_deeper_ring(module: ir.Module) -> None:
    # Deepen rings, barriers and cursors together so only the size is wrong.
    d = 12
    m = replace(module, rings=tuple(replace(r, depth=d) for r in module.rings),
                barriers=tuple(replace(b, depth=d) for b in module.barriers),
                partitions=tuple(replace(p, cursors=tuple(replace(c, depth=d) for c in p.cursors))
                                 for p in module.partitions))
    assert verify.structural(m) == []
    errs = reported(m, f"shared memory {m.smem_bytes} bytes exceeds the {H100_SXM.smem_per_block}")
    assert len(errs) == 1


def test_smem_overflow_on_a_smaller_device(module: ir.Module) -> None:
    small = replace(H100_SXM, smem_per_block=module.smem_bytes - 1)
    errs = verify.complete(module, small)
    assert errs == [f"shared memory {module.smem_bytes} bytes exceeds the {module.smem_bytes - 1} of {small.name}"]


@pytest.mark.parametrize("regs", [248, 256])
def test_register_overflow(module: ir.Module, regs: int) -> None:
    m = module
    for cons in consumers(module):
        m = m.with_partition(replace(cons, regs=regs))
    assert sum(p.warps for p in consumers(module)) == 8  # two warpgroups of `regs` + the producer's 24 > 64K
    need = 2 * 128 * regs + 128 * module.partition("producer").regs
    errs = reported(m, f"register budgets need {need} registers, the SM has 65536")
    assert len(errs) == 1


def test_register_overflow_of_one_consumer_partition() -> None:
    # Two 4-warp consumers: the check sums each partition's warpgroups, so 248 for one and 240 for the
    # other fits exactly (128 * (248 + 240 + 24) = 65536); 256 and 248 do not.
    module = finished(NATIVE)
    first, second = consumers(module)
    assert verify.complete(module.with_partition(replace(first, regs=248)), H100_SXM) == []
    m = module.with_partition(replace(first, regs=256)).with_partition(replace(second, regs=248))
    errs = reported(m, f"register budgets need {128 * (256 + 248 + 24)} registers, the SM has 65536")
    assert len(errs) == 1


@pytest.mark.parametrize("regs", [0, 20, 100, 264])
def test_register_budget_out_of_setmaxnreg_range(module: ir.Module, regs: int) -> None:
    prod = module.partition("producer")
    reported(module.with_partition(replace(prod, regs=regs)), f"partition producer: regs={regs}, expected a multiple")


def test_unknown_cursor(module: ir.Module) -> None:
    for cons in consumers(module):
        m = edit_partition(module, cons.name, lambda o: (replace(o, slot=ir.Slot("q"), parity=ir.Parity("q")),)
                           if isinstance(o, ir.Wait) else (o,))
        errs = reported(m, f"partition {cons.name}: Wait ready uses cursor 'q' it does not own")
        assert verify.structural(m) == errs


def test_cursor_of_another_partition(module: ir.Module) -> None:
    for cons in consumers(module):
        m = edit_partition(module, cons.name, lambda o: (ir.Advance("p"),) if isinstance(o, ir.Advance) else (o,))
        reported(m, f"partition {cons.name}: advances cursor 'p' it does not own")


def test_unknown_barrier(module: ir.Module) -> None:
    m = edit_partition(module, "producer", lambda o: (replace(o, barrier="bogus"),) if isinstance(o, ir.Wait)
                       else (o,))
    errs = reported(m, "partition producer: Wait on unknown barrier bogus")
    assert verify.structural(m) == errs


def test_load_completing_unknown_barrier(module: ir.Module) -> None:
    m = edit_partition(module, "producer", lambda o: (replace(o, barrier="nope"),) if isinstance(o, ir.TmaLoad)
                       else (o,))
    reported(m, "load completes unknown barrier nope")


def test_barrier_depth_disagrees_with_ring(module: ir.Module) -> None:
    bars = tuple(replace(b, depth=b.depth + 1) if b.name == "ready" else b for b in module.barriers)
    reported(replace(module, barriers=bars), f"barrier ready has depth {module.rings[0].depth + 1} but ring a_ring")


def test_two_default_partitions(module: ir.Module) -> None:
    prod = module.partition("producer")
    reported(module.with_partition(replace(prod, default=True)), "exactly one default partition expected")


def test_check_raises_verification_error_listing_every_problem(module: ir.Module) -> None:
    cons = consumers(module)[-1]
    m = module.with_partition(replace(cons, regs=7, body=cons.body[:-1]))
    with pytest.raises(VerificationError) as ei:
        verify.check(m, "corrupted", H100_SXM)
    e = ei.value
    assert isinstance(e, InternalError) and e.stage == "corrupted" and len(e.problems) == 2
    assert str(e).startswith("schedule IR invalid after corrupted:\n  - ")


def test_unfinished_module_is_not_complete() -> None:
    _, trace = compile_schedule(NATIVE, plan_schedule(NATIVE, H100_SXM), H100_SXM)
    stages = dict(trace.stages)
    assert any("still sequential" in e for e in verify.complete(stages["build_sequential"], H100_SXM))
    assert any("synchronous load" in e for e in verify.complete(stages["SplitProducer"], H100_SXM))
    assert any("abstract store_tile" in e for e in verify.complete(stages["FlattenProducer"], H100_SXM))
    for name, m in trace.stages:
        assert verify.structural(m) == [], name


@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_one_stage_ring_releases_without_deferral(split: int) -> None:
    # FIELD_NOTES: hangs at 1 stage. Deferring the release of slot c-1 past the wgmma on slot c deadlocks
    # when c-1 == c, so with one slot PipelineMma must wait for 0 in flight and release slot c itself.
    p = plan_schedule(NATIVE, H100_SXM)
    one = Plan(**{**p.__dict__, "stages": 1, "consumer_partitions": split})
    m, _ = compile_schedule(NATIVE, one, H100_SXM)
    assert len(consumers(m)) == split
    for cons in consumers(m):
        ops = [o for o, loops in ir.walk(cons.body) if ir.LoopKind.K in loops]
        releases = [o for o in ops if isinstance(o, ir.Arrive) and o.barrier == "empty"]
        assert releases == [ir.Arrive("empty", ir.Slot("c"))]
        waits = [o for o in ops if isinstance(o, ir.MmaWait)]
        assert waits == [ir.MmaWait(0)] and ops.index(waits[0]) < ops.index(releases[0])
