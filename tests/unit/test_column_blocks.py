"""Column-block accumulators for promoted fp8 (Plan.partial_blocks): the accumulator is several register
tiles, one per column block of the output tile, promoted in turn through one block-wide partial.

Each pass's share, asserted on its own: build_sequential (accumulators, one wgmma + promote per block),
PlanRings (acquire before the first wgmma, release after the last), PipelineMma (each partial retired
before it is read), LowerEpilogue (each block stored at its own columns) and the Gluon lowering.
"""

from __future__ import annotations

import pytest

from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.backends.gluon_sm90 import lower
from warploom.ir import nodes as ir
from warploom.passes.build import build_sequential
from warploom.passes.pipeline_mma import PipelineMma
from warploom.passes.rings import PlanRings
from warploom.planner import Plan, plan_schedule
from warploom.targets import compile_schedule

E4 = DType.E4M3
PROMOTED = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE,
                    accumulation=Accumulation.PROMOTED)
ROWWISE_BIAS_PROMOTED = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                 accumulation=Accumulation.PROMOTED, bias_dtype=DType.BF16)
C = ir.Slot("c")


def ops(body: tuple[ir.Stmt, ...]) -> list[ir.Op]:
    return [o for o, _ in ir.walk(body)]


def k_body(p: ir.Partition) -> list[ir.Stmt]:
    (kl,) = [s for t in p.body if isinstance(t, ir.Loop) for s in t.body if isinstance(s, ir.Loop)]
    return list(kl.body)


def stage(spec: GemmSpec, plan: Plan, name: str) -> ir.Module:
    """The module as it enters pass `name`."""
    _, trace = compile_schedule(spec, plan, H100_SXM)
    names = [n for n, _ in trace.stages]
    return trace.stages[names.index(name) - 1][1]


def consumers(m: ir.Module) -> list[ir.Partition]:
    return [p for p in m.partitions if p.role is ir.Role.CONSUMER]


def mma(block: ir.ColBlock | None, is_async: bool = False) -> ir.Mma:
    """The promoted wgmma of one column block into the partial."""
    return ir.Mma("a_ring", "b_ring", C, "partial", ir.Guard.ALWAYS, is_async=is_async, n_cols=block)


LO, HI = ir.ColBlock(0, 128), ir.ColBlock(128, 128)


# ---------------------------------------------------------------------------------------------------------
# build_sequential


def test_sequential_program_promotes_each_column_block() -> None:
    plan = plan_schedule(PROMOTED, H100_SXM)
    assert (plan.bn, plan.partial_blocks) == (256, 2)
    (p,) = build_sequential(PROMOTED, plan).partitions
    assert p.accumulators == (ir.Accumulator("acc0", 128, 128, 0), ir.Accumulator("acc1", 128, 128, 128),
                              ir.Accumulator("partial", 128, 128))
    (tiles,) = p.body
    assert isinstance(tiles, ir.Loop)
    kl = tiles.body[2]
    assert list(tiles.body) == [
        ir.ZeroAcc("acc0"), ir.ZeroAcc("acc1"), kl,
        ir.Epilogue("acc0", (ir.EpilogueStep.SCALE_TENSORWISE,)), ir.StoreTile("acc0"),
        ir.Epilogue("acc1", (ir.EpilogueStep.SCALE_TENSORWISE,)), ir.StoreTile("acc1"),
    ]
    assert isinstance(kl, ir.Loop) and list(kl.body)[2:] == [
        mma(LO), ir.Promote("partial", "acc0"),  # columns 0:128 of B's slot into the partial, then acc0
        mma(HI), ir.Promote("partial", "acc1"),
        ir.Advance("c"),
    ]


def test_sequential_program_one_block_is_the_whole_tile() -> None:
    plan = plan_schedule(PROMOTED, H100_SXM, bn=128)
    assert plan.partial_blocks == 1
    (p,) = build_sequential(PROMOTED, plan).partitions
    assert p.accumulators == (ir.Accumulator("acc", 128, 128), ir.Accumulator("partial", 128, 128))
    assert [o for o in ops(p.body) if isinstance(o, ir.Mma)] == [mma(None)]


def test_sequential_program_narrow_blocks() -> None:
    # A forced 128-wide tile in two 64-wide blocks.
    plan = plan_schedule(PROMOTED, H100_SXM, bn=128, partial_blocks=2)
    (p,) = build_sequential(PROMOTED, plan).partitions
    assert p.accumulators == (ir.Accumulator("acc0", 128, 64, 0), ir.Accumulator("acc1", 128, 64, 64),
                              ir.Accumulator("partial", 128, 64))
    assert [o.n_cols for o in ops(p.body) if isinstance(o, ir.Mma)] == [ir.ColBlock(0, 64), ir.ColBlock(64, 64)]


def test_native_accumulation_ignores_partial_blocks() -> None:
    spec = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE)
    plan = Plan(bm=128, bn=256, bk=128, stages=3, consumer_warps=8, group_m=8, grid=132, partial_blocks=2)
    (p,) = build_sequential(spec, plan).partitions
    assert p.accumulators == (ir.Accumulator("acc", 128, 256),)
    assert [o.n_cols for o in ops(p.body) if isinstance(o, ir.Mma)] == [None]


# ---------------------------------------------------------------------------------------------------------
# PlanRings and PipelineMma


def test_plan_rings_acquires_before_the_first_block_and_releases_after_the_last() -> None:
    plan = plan_schedule(PROMOTED, H100_SXM)
    after = PlanRings(stages=plan.stages)(stage(PROMOTED, plan, "PlanRings"))
    (cons,) = consumers(after)
    assert k_body(cons) == [
        ir.Wait("ready", C, ir.Parity("c")),
        mma(LO), ir.Promote("partial", "acc0"),
        mma(HI),
        ir.Arrive("empty", C),
        ir.Promote("partial", "acc1"),
        ir.Advance("c"),
    ]


@pytest.mark.parametrize("stages", [1, 3])
def test_pipeline_mma_retires_each_partial_before_its_promote(stages: int) -> None:
    plan = plan_schedule(PROMOTED, H100_SXM, stages=stages)
    after = PipelineMma()(stage(PROMOTED, plan, "PipelineMma"))
    (cons,) = consumers(after)
    assert k_body(cons) == [
        ir.Wait("ready", C, ir.Parity("c")),
        mma(LO, is_async=True), ir.MmaWait(0), ir.Promote("partial", "acc0"),
        mma(HI, is_async=True), ir.MmaWait(0), ir.Arrive("empty", C), ir.Promote("partial", "acc1"),
        ir.Advance("c"),
    ]


# ---------------------------------------------------------------------------------------------------------
# The finished module


@pytest.mark.parametrize("split", [1, 2], ids=["p1", "p2"])
def test_finished_module_stores_each_block_at_its_columns(split: int) -> None:
    plan = plan_schedule(PROMOTED, H100_SXM, consumer_partitions=split)
    m, _ = compile_schedule(PROMOTED, plan, H100_SXM)
    rows = 128 // split
    names = ["c_smem"] if split == 1 else ["c_smem0", "c_smem1"]
    assert m.buffers == tuple(ir.Buffer(n, ir.Tensor.C, DType.BF16, rows, 128) for n in names)
    for p, buf in zip(consumers(m), names, strict=True):
        stored = [o for o in ops(p.body) if isinstance(o, (ir.StoreSmem, ir.TmaStore))]
        assert stored == [ir.StoreSmem("acc0", buf), ir.TmaStore(buf, part=0, parts=2),
                          ir.StoreSmem("acc1", buf), ir.TmaStore(buf, part=1, parts=2)]


def test_gluon_reads_block_columns_and_warpgroup_rows() -> None:
    m, _ = compile_schedule(ROWWISE_BIAS_PROMOTED, plan_schedule(ROWWISE_BIAS_PROMOTED, H100_SXM), H100_SXM)
    src = lower(m).text
    for row0 in (0, 64):
        a = f"a_ring.index(c % STAGES).slice({row0}, 64)"
        # B's K-major (BN, BK) slot: the block's rows of it, read transposed.
        assert src.count(f"warpgroup_mma({a}, b_ring.index(c % STAGES).slice(0, 128).permute((1, 0)), partial, "
                         "use_acc=False, is_async=True)") == 1
        assert src.count(f"warpgroup_mma({a}, b_ring.index(c % STAGES).slice(128, 128).permute((1, 0)), partial, "
                         "use_acc=False, is_async=True)") == 1
    # The rowwise scales and the bias are read at each block's rows and columns.
    off_m = {0: "off_m", 64: "off_m + 64"}
    for row0 in (0, 64):
        assert src.count(f"offs_m = {off_m[row0]} + gl.arange(0, 64, layout=gl.SliceLayout(1, acc_layout))") == 2
    assert src.count("offs_n = off_n + gl.arange(0, 128, layout=gl.SliceLayout(0, acc_layout))") == 2
    assert src.count("offs_n = off_n + 128 + gl.arange(0, 128, layout=gl.SliceLayout(0, acc_layout))") == 2
    assert src.count("tma.async_copy_shared_to_global(c_desc, [off_m + 64, off_n + 1 * (BN // 2)], c_smem1)") == 1
    assert src.count("tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem0)") == 1
    assert "mbarrier.init(empty_bars.index(i), count=2)" in src


@pytest.mark.parametrize("parts", [2, 4, 8, 16])
def test_register_local_split_names_each_block_by_its_columns(parts: int) -> None:
    """The generated split lines (reshape to [rows, 2, w], permute, split), run with torch standing in for Gluon
    (split() of a trailing dimension of 2 is unbind), give block i exactly columns [i * w, (i + 1) * w)."""
    import re

    import torch

    from warploom.backends.codebuf import CodeBuffer
    from warploom.backends.gluon_sm90 import PartitionEmitter

    spec = GemmSpec(4096, 4096, 4096, DType.BF16, DType.BF16, DType.BF16)
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM, bn=256, stages=3), H100_SXM)
    part = next(p for p in m.partitions if p.accumulators)
    buf = CodeBuffer()
    emitter = PartitionEmitter(m, part, buf)
    acc = part.accumulators[0]
    names = [emitter._column_block(acc.name, i, parts) for i in range(parts)]
    code = re.sub(r"\.split\(\)", ".unbind(-1)", re.sub(r"\s+#.*", "", buf.text()))
    x = torch.arange(acc.rows * acc.cols).reshape(acc.rows, acc.cols)
    env = {acc.name: x}
    exec(code, {}, env)  # noqa: S102 - the emitter's own lines, on torch tensors
    w = acc.cols // parts
    for i, name in enumerate(names):
        assert torch.equal(env[name], x[:, i * w:(i + 1) * w]), (parts, i, name)


def test_column_blocks_narrower_than_8_are_refused() -> None:
    from warploom.backends.codebuf import CodeBuffer
    from warploom.backends.gluon_sm90 import PartitionEmitter

    spec = GemmSpec(4096, 4096, 4096, DType.BF16, DType.BF16, DType.BF16)
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM, bn=128, bm=128), H100_SXM)
    part = next(p for p in m.partitions if p.accumulators)
    with pytest.raises(NotImplementedError, match="at least 8 columns"):
        PartitionEmitter(m, part, CodeBuffer())._column_block(part.accumulators[0].name, 0, 32)
