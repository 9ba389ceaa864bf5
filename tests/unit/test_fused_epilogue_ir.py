"""Fused epilogues in the schedule IR: the printer's lines, LowerEpilogue and HoistOperands, the verifier, the
planner's choices, kernel names, and the front end's checks (warploom/fused.py).

Every spec comes from the public front end (`warploom.plan` on meta tensors), so the graph is the one a user's
function captures to; passes are run alone on the module as it enters them in the real pipeline.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom import H100_SXM, AlignmentError, DeviceError, DType, GemmSpec, InputError, VerificationError
from warploom.epilogue import graph as eg
from warploom.epilogue import printer as ep
from warploom.epilogue.builder import Builder
from warploom.epilogue.classify import classify
from warploom.epilogue.compose import with_prologue
from warploom.fused import fused_spec
from warploom.ir import nodes as ir
from warploom.ir import printer, verify
from warploom.kernel import Kernel, build
from warploom.passes.epilogue import HoistOperands, LowerEpilogue
from warploom.planner import Plan, epilogue_bytes, max_stages, plan_schedule, stage_bytes
from warploom.targets import compile_schedule

BF16, FP16, FP32, E4 = torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn
READ = ir.OperandRead


def t(*shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def bf16(m: int, n: int, k: int, fn: Callable[..., Any] | None, **ops: Any) -> Kernel:
    """A bf16 GEMM with an nn.Linear-style (K-major) weight, planned by the planner."""
    return warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), epilogue=fn, **ops)


def fp8(m: int, n: int, k: int, fn: Callable[..., Any] | None, *, rowwise: bool = True, fast: bool = True,
        bias: torch.Tensor | None = None, **ops: Any) -> Kernel:
    scales = (t(m, 1), t(1, n)) if rowwise else (t(), t())
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), *scales, bias=bias, use_fast_accum=fast,
                         epilogue=fn, **ops)


M, N, K = 300, 528, 256


@functools.cache
def rowwise_gelu_residual() -> Kernel:
    """fp8 rowwise + bias, then gelu + a dense residual: every operand kind but a scalar."""
    return fp8(M, N, K, lambda acc, residual: F.gelu(acc) + residual, bias=t(N, dtype=BF16),
               residual=t(M, N, dtype=BF16))


@functools.cache
def bf16_two_outputs() -> Kernel:
    """bf16 with a row bias, a column, a scalar and a dense fp16 operand; outputs bf16 and fp32."""
    return bf16(M, N, K, lambda acc, bias, col, s, res: (torch.sigmoid(acc + bias) * col * s + res, acc.float()),
                bias=t(N, dtype=BF16), col=t(M, 1), s=t(), res=t(M, N, dtype=FP16))


def planned(spec: GemmSpec, **forced: Any) -> Kernel:
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, **forced))


# Fused epilogues run one consumer partition by default (planner rule 9); the lowering tests below read the two-
# partition structure, where each warpgroup stages its own rows (c_smem0, c_smem1, ...), forced.
P2 = {"consumer_partitions": 2}


def p2(k: Kernel) -> Kernel:
    return planned(k.spec, **P2)


def entering(spec: GemmSpec, name: str, **forced: Any) -> ir.Module:
    """The module as it enters pass `name` in the real pipeline."""
    _, trace = compile_schedule(spec, plan_schedule(spec, H100_SXM, **forced), H100_SXM)
    names = [n for n, _ in trace.stages]
    return trace.stages[names.index(name) - 1][1]


def consumers(m: ir.Module) -> list[ir.Partition]:
    out = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert out
    return out


def tile_body(p: ir.Partition) -> tuple[ir.Stmt, ...]:
    (tiles,) = [s for s in p.body if isinstance(s, ir.Loop)]
    assert tiles.kind is ir.LoopKind.TILES
    return tiles.body


def k_index(body: tuple[ir.Stmt, ...]) -> int:
    (i,) = [i for i, s in enumerate(body) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.K]
    return i


# ---------------------------------------------------------------------------------------------------------
# Printer

OPS: list[tuple[ir.Op, str]] = [
    (ir.LoadOperand("bias", "acc", 0, 1, READ.PER_COL), "load_operand bias for acc as per_col"),
    (ir.LoadOperand("scale_a", "acc", 1, 2, READ.PER_ROW), "load_operand scale_a for acc[cols 1/2] as per_row"),
    (ir.LoadOperand("s", "acc1", 0, 1, READ.SCALAR), "load_operand s for acc1 as scalar"),
    (ir.LoadOperand("col", "acc", 0, 2, READ.TILE), "load_operand col for acc[cols 0/2] as tile"),
    (ir.LoadOperand("res", "acc", 0, 2, READ.TILE, "res_smem0"),
     "load_operand res for acc[cols 0/2] as tile via res_smem0"),
    (ir.ApplyEpilogue("acc", 0, 1), "apply_epilogue acc"),
    (ir.ApplyEpilogue("acc", 1, 2), "apply_epilogue acc[cols 1/2]"),
    (ir.StoreSmem("acc", "c_smem", output=0), "store_smem c_smem <- out0 of acc"),
    (ir.StoreSmem("acc", "c_smem0_1", 1, 2, output=1), "store_smem c_smem0_1 <- out1 of acc[cols 1/2]"),
    (ir.TmaStore("c_smem", output=0), "tma_store c_smem -> C[m, n]"),
    (ir.TmaStore("c_smem0_2", part=1, parts=2, output=2), "tma_store c_smem0_2 -> C2[m, n][cols 1/2]"),
]


@pytest.mark.parametrize("o,text", OPS, ids=[x for _, x in OPS])
def test_fused_op_prints_as_one_line(o: ir.Op, text: str) -> None:
    assert printer.op(o) == text


def test_fused_ops_print_distinctly_from_the_plain_store() -> None:
    lines = [printer.op(o) for o, _ in OPS] + [printer.op(ir.StoreSmem("acc", "c_smem"))]
    assert len(set(lines)) == len(lines)


def test_module_header_names_outputs_operand_buffers_and_the_graph() -> None:
    k = bf16_two_outputs()
    text = k.schedule
    # One consumer partition (rule 9) stages all 128 rows of each block.
    for line in ("  buffer c_smem: C bf16[128x128]", "  buffer c_smem_1: C1 fp32[128x128]",
                 "  buffer res_smem: res fp16[128x128]"):
        assert line + "\n" in text
    for line in ("  buffer c_smem0: C bf16[64x128]", "  buffer c_smem0_1: C1 fp32[64x128]",
                 "  buffer res_smem0: res fp16[64x128]", "  buffer res_smem1: res fp16[64x128]"):
        assert line + "\n" in p2(k).schedule
    graph = "".join("    " + line + "\n" for line in ep.text(k.spec.epilogue).splitlines())
    assert "  epilogue:\n" + graph in text
    assert graph.startswith("    epilogue(acc, bias: row bf16, col: column fp32, s: scalar fp32, res: dense fp16):")
    assert " +epilogue" in text.splitlines()[0]  # the spec's short form says so


# ---------------------------------------------------------------------------------------------------------
# LowerEpilogue


def block(acc: str, i: int, n: int, bufs: list[str], col: READ = READ.PER_ROW, res: str | None = "res_smem0",
          tile_part: int | None = None, tile_parts: int | None = None) -> list[ir.Stmt]:
    """The lowering of one column block of bf16_two_outputs: loads in graph order, the math, one store per output."""
    part, parts = (i, n) if tile_part is None else (tile_part, tile_parts)
    assert parts is not None
    return [
        ir.LoadOperand("bias", acc, i, n, READ.PER_COL), ir.LoadOperand("col", acc, i, n, col),
        ir.LoadOperand("s", acc, i, n, READ.SCALAR),
        *([ir.PrefetchOperand("res", acc, i, n, res)] if res else []), ir.LoadOperand("res", acc, i, n, READ.TILE, res),
        ir.ApplyEpilogue(acc, i, n), ir.StoreWait(0),
        *[ir.StoreSmem(acc, b, i, n, output=j) for j, b in enumerate(bufs)], ir.FenceAsync(),
        *[ir.TmaStore(b, part=part, parts=parts, output=j) for j, b in enumerate(bufs)],
    ]


def test_lower_epilogue_one_column_block_per_output_and_dense_operand_buffers() -> None:
    spec = bf16_two_outputs().spec
    before = entering(spec, "LowerEpilogue", **P2)
    assert before.tiling.bn == 128
    after = LowerEpilogue(subtiles=1)(before)
    assert after.buffers == tuple(
        b for i in (0, 1) for b in (
            ir.Buffer(f"c_smem{i}", ir.Tensor.C, DType.BF16, 64, 128, output=0),
            ir.Buffer(f"c_smem{i}_1", ir.Tensor.C, DType.FP32, 64, 128, output=1),
            ir.Buffer(f"res_smem{i}", ir.Tensor.OPERAND, DType.FP16, 64, 128, operand="res")))
    for i, p in enumerate(consumers(after)):
        want = block("acc", 0, 1, [f"c_smem{i}", f"c_smem{i}_1"], res=f"res_smem{i}")
        assert list(tile_body(p)[-len(want):]) == want
        assert p.body[-1] == ir.StoreWait(0)
    assert after.partition("producer") == before.partition("producer")


def test_lower_epilogue_two_column_blocks_at_bn_256() -> None:
    spec = bf16_two_outputs().spec
    before = entering(spec, "LowerEpilogue", bn=256, **P2)
    after = LowerEpilogue(subtiles=2)(before)
    # Buffers are one column block (128) wide; each output still has its own.
    assert [(b.name, b.cols, b.output, b.operand) for b in after.buffers[:3]] == [
        ("c_smem0", 128, 0, None), ("c_smem0_1", 128, 1, None), ("res_smem0", 128, 0, "res")]
    for i, p in enumerate(consumers(after)):
        bufs = [f"c_smem{i}", f"c_smem{i}_1"]
        want = block("acc", 0, 2, bufs, res=f"res_smem{i}") + block("acc", 1, 2, bufs, res=f"res_smem{i}")
        assert list(tile_body(p)[-len(want):]) == want


def test_lower_epilogue_column_block_accumulators_load_per_accumulator() -> None:
    # Promoted fp8 at 128x256 keeps two 128-wide accumulators: each is one whole block (parts=1) stored to
    # its own part of the tile (part 0/2 and 1/2).
    k = fp8(M, N, K, lambda acc, res: F.silu(acc) + res, fast=False, res=t(M, N, dtype=BF16))
    before = entering(k.spec, "LowerEpilogue", bn=256, **P2)
    after = LowerEpilogue(subtiles=2)(before)
    body = tile_body(consumers(after)[0])
    stores = [o for o in body if isinstance(o, ir.TmaStore)]
    assert stores == [ir.TmaStore("c_smem0", part=0, parts=2), ir.TmaStore("c_smem0", part=1, parts=2)]
    loads = [(o.operand, o.acc, o.part, o.parts) for o in body if isinstance(o, ir.LoadOperand)]
    names = ("scale_a", "scale_b", "res")
    assert loads == [(n, a, 0, 1) for a in ("acc0", "acc1") for n in names]


@pytest.mark.parametrize("scalar_columns,read", [(True, READ.PER_ROW), (False, READ.TILE)])
def test_column_operand_read_follows_scalar_columns(scalar_columns: bool, read: READ) -> None:
    spec = bf16_two_outputs().spec
    after = LowerEpilogue(scalar_columns=scalar_columns)(entering(spec, "LowerEpilogue"))
    cols = [o for o, _ in ir.walk(consumers(after)[0].body) if isinstance(o, ir.LoadOperand) and o.operand == "col"]
    assert cols == [ir.LoadOperand("col", "acc", 0, 1, read)]  # a tile gather without a staging buffer
    # The other kinds do not depend on it.
    others = {o.operand: o.read for o, _ in ir.walk(consumers(after)[0].body) if isinstance(o, ir.LoadOperand)}
    assert others == {"bias": READ.PER_COL, "col": read, "s": READ.SCALAR, "res": READ.TILE}


# ---------------------------------------------------------------------------------------------------------
# HoistOperands


def _positions(body: tuple[ir.Stmt, ...]) -> dict[str, int]:
    return {printer.op(s): i for i, s in enumerate(body) if not isinstance(s, ir.Loop)}


def test_hoist_moves_row_and_scalar_loads_between_the_k_loop_and_the_final_wait() -> None:
    k = p2(bf16_two_outputs())
    for p in consumers(k.module):
        body = tile_body(p)
        at = k_index(body)
        assert body[at + 1:at + 4] == (ir.LoadOperand("bias", "acc", 0, 1, READ.PER_COL),
                                       ir.LoadOperand("s", "acc", 0, 1, READ.SCALAR), ir.MmaWait(0))
        # Column and dense reads stay beside the block's math, after the accumulator is complete.
        pos = _positions(body)
        wait, apply = pos["wgmma_wait pending=0"], pos["apply_epilogue acc"]
        assert wait < pos["load_operand col for acc as per_row"] < apply
        assert wait < pos[f"load_operand res for acc as tile via res_smem{p.name[-1]}"] < apply


def test_wide_tile_loads_each_blocks_vectors_one_block_ahead() -> None:
    # Rule 9 at 256 wide: hoisting all 8 blocks' vectors would spill; block 0's go before the final wait, block
    # j + 1's right before block j's apply_epilogue.
    k = planned(bf16_two_outputs().spec, bn=256)
    assert (k.plan.epilogue_subtiles, k.plan.hoist_rows, k.plan.load_ahead) == (8, False, True)
    body = tile_body(consumers(k.module)[0])
    at = k_index(body)
    assert [printer.op(s) for s in body[at + 1:at + 5]] == [
        "load_operand bias for acc[cols 0/8] as per_col", "load_operand col for acc[cols 0/8] as per_row",
        "load_operand s for acc[cols 0/8] as scalar", "wgmma_wait pending=0"]
    pos = _positions(body)
    for j in range(7):
        ahead = [pos[f"load_operand {n} for acc[cols {j + 1}/8] as {r}"] for n, r in
                 (("bias", "per_col"), ("col", "per_row"), ("s", "scalar"))]
        assert pos.get(f"apply_epilogue acc[cols {j - 1}/8]", -1) < min(ahead)
        assert max(ahead) < pos[f"apply_epilogue acc[cols {j}/8]"]
    # The dense operand stays beside its block, through its two buffers.
    assert pos["apply_epilogue acc[cols 0/8]"] < pos["load_operand res for acc[cols 1/8] as tile via res_smem_s1"]



def test_hoist_disabled_leaves_every_load_before_its_apply() -> None:
    k = planned(bf16_two_outputs().spec, hoist_rows=False, prefetch_operands=False, **P2)
    body = tile_body(consumers(k.module)[0])
    at = k_index(body)
    assert body[at + 1:at + 3] == (ir.MmaWait(0), ir.Arrive("empty", ir.Slot("c", -1)))
    assert body[at + 3:at + 9] == tuple(block("acc", 0, 1, [])[:6])


def test_hoist_leaves_a_column_read_as_a_tile_beside_its_block() -> None:
    k = planned(bf16_two_outputs().spec, scalar_columns=False)
    pos = _positions(tile_body(consumers(k.module)[0]))
    assert pos["wgmma_wait pending=0"] < pos["load_operand col for acc as tile"] < pos["apply_epilogue acc"]
    assert pos["load_operand s for acc as scalar"] < pos["wgmma_wait pending=0"]


def test_hoist_after_a_promoted_k_loop_lands_right_after_it() -> None:
    # Promoted fp8 waits for each partial inside the k-loop: no final wait, the loads follow the loop.
    k = fp8(M, N, K, lambda acc: F.relu(acc), fast=False, bias=t(N))
    body = tile_body(consumers(k.module)[0])
    at = k_index(body)
    assert not any(isinstance(s, ir.MmaWait) for s in body)
    assert [printer.op(s) for s in body[at + 1:at + 5]] == [
        "load_operand scale_b for acc as per_col", "load_operand bias for acc as per_col",
        "load_operand scale_a for acc as per_row", "apply_epilogue acc"]


def test_hoist_leaves_a_module_without_fused_epilogue_alone() -> None:
    m = build(GemmSpec(4096, 4096, 4096), H100_SXM).module
    assert HoistOperands()(m) is m


# ---------------------------------------------------------------------------------------------------------
# Verifier


def _edit(body: tuple[ir.Stmt, ...], fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for s in body:
        out.extend((ir.Loop(s.kind, _edit(s.body, fn)),) if isinstance(s, ir.Loop) else fn(s))
    return tuple(out)


def corrupt(m: ir.Module, fn: Callable[[ir.Op], tuple[ir.Stmt, ...]]) -> ir.Module:
    p = consumers(m)[0]
    new = replace(p, body=_edit(p.body, fn))
    assert new != p, "the corruption changed nothing"
    return m.with_partition(new)


def problems(m: ir.Module) -> list[str]:
    with pytest.raises(VerificationError) as e:
        verify.check(m, "test", H100_SXM)
    return e.value.problems


@pytest.mark.parametrize("make", [rowwise_gelu_residual, bf16_two_outputs], ids=["fp8", "bf16"])
def test_fused_modules_verify_clean(make: Callable[[], Kernel]) -> None:
    assert verify.complete(make().module, H100_SXM) == []


def test_verifier_rejects_apply_without_its_load() -> None:
    m = corrupt(p2(bf16_two_outputs()).module,
                lambda o: () if isinstance(o, ir.LoadOperand) and o.operand == "col" else (o,))
    assert problems(m) == ["partition consumer0: apply_epilogue acc before operand col is loaded for that block"]


def test_verifier_rejects_a_load_after_its_apply() -> None:
    def late(o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.LoadOperand) and o.operand == "res":
            return ()
        if isinstance(o, ir.ApplyEpilogue):
            return (o, ir.LoadOperand("res", "acc", 0, 1, READ.TILE, "res_smem0"))
        return (o,)

    assert "before operand res is loaded" in problems(corrupt(p2(bf16_two_outputs()).module, late))[0]


def test_verifier_rejects_a_load_of_an_unknown_operand() -> None:
    m = corrupt(p2(bf16_two_outputs()).module,
                lambda o: (replace(o, operand="nope"),) if isinstance(o, ir.LoadOperand) and o.operand == "s" else (o,))
    errs = problems(m)
    assert "partition consumer0: LoadOperand: the epilogue has no operand 'nope'" in errs


def test_verifier_rejects_fused_ops_without_a_graph() -> None:
    m = p2(bf16_two_outputs()).module
    m = replace(m, spec=replace(m.spec, epilogue=None))
    errs = verify.structural(m)
    assert "partition consumer0: LoadOperand but the spec has no fused epilogue" in errs
    assert "partition consumer1: ApplyEpilogue but the spec has no fused epilogue" in errs


def test_verifier_rejects_apply_with_wgmma_in_flight() -> None:
    m = corrupt(p2(bf16_two_outputs()).module, lambda o: () if o == ir.MmaWait(0) else (o,))
    assert any("ApplyEpilogue reads an accumulator with 1 wgmma in flight" in e for e in problems(m))


# ---------------------------------------------------------------------------------------------------------
# Planner


def _square(fn: Callable[..., Any], **ops: Any) -> GemmSpec:
    return bf16(4096, 4096, 4096, fn, **ops).spec


@pytest.mark.parametrize("make", [
    lambda: _square(lambda acc: F.gelu(acc)),
    lambda: fp8(4096, 4096, 4096, lambda acc: acc).spec,
    lambda: bf16(8192, 8192, 1024, lambda acc, r: acc + r, r=t(8192, 8192, dtype=BF16)).spec,
], ids=["bf16_gelu", "fp8_rowwise", "bf16_residual"])
def test_fused_spec_takes_the_wide_tile_in_slotted_blocks(make: Callable[[], GemmSpec]) -> None:
    spec = make()
    p = plan_schedule(spec, H100_SXM)
    assert p.bn == plan_schedule(replace(spec, epilogue=None), H100_SXM).bn == 256  # as without the epilogue
    assert (p.epilogue_subtiles, p.consumer_partitions, p.staging_slots, p.load_ahead, p.hoist_rows) == \
        (8, 1, 2, True, False)
    dense = any(o.kind.value == "dense" for o in spec.epilogue.operands)  # type: ignore[union-attr]
    assert (p.operand_slots, p.prefetch_operands) == ((2, True) if dense else (1, False))
    assert p.stages >= 3
    # Forcing 128 wide gives the one-partition 128-wide epilogue; forcing two partitions is still possible.
    narrow = plan_schedule(spec, H100_SXM, bn=128)
    assert (narrow.epilogue_subtiles, narrow.consumer_partitions, narrow.staging_slots) == (1, 1, 1)
    assert plan_schedule(spec, H100_SXM, consumer_partitions=2).consumer_partitions == 2


def test_wide_plan_without_early_copies_keeps_one_buffer_per_dense_operand() -> None:
    spec = _square(lambda acc, r: F.gelu(acc) + r, r=t(4096, 4096, dtype=BF16))
    on, off = plan_schedule(spec, H100_SXM), plan_schedule(spec, H100_SXM, prefetch_operands=False)
    assert (on.operand_slots, off.operand_slots) == (2, 1) and on.bn == off.bn == 256
    for plan, prefetch in ((on, True), (off, False)):
        m = build(spec, H100_SXM, plan).module
        assert sum(b.bytes for b in m.buffers) == epilogue_bytes(spec, 128, 256, prefetch=prefetch)
    assert epilogue_bytes(spec, 128, 256, prefetch=False) == epilogue_bytes(spec, 128, 256) - 128 * 32 * 2


def test_promoted_fused_spec_keeps_bn_128_unless_forced() -> None:
    spec = fp8(4096, 4096, 4096, lambda acc: F.relu(acc), rowwise=False, fast=False).spec
    assert plan_schedule(replace(spec, epilogue=None), H100_SXM).bn == 256  # what it would take without
    plan = plan_schedule(spec, H100_SXM)
    assert (plan.bn, plan.consumer_partitions) == (128, 2)  # promotions in the k-loop keep two partitions
    forced = plan_schedule(spec, H100_SXM, bn=256)
    assert (forced.bn, forced.epilogue_subtiles, forced.staging_slots) == (256, 2, 1)



def test_dense_operand_and_second_output_cost_stages() -> None:
    plain = _square(lambda acc: F.gelu(acc))
    heavy = _square(lambda acc, r: (F.gelu(acc) + r, acc.float()), r=t(4096, 4096, dtype=BF16))
    bm, bk = 128, 64
    # 128 wide: one bf16 staging tile; then bf16 + fp32 outputs and a bf16 residual buffer.
    assert epilogue_bytes(plain, bm, 128) == bm * 128 * 2
    assert epilogue_bytes(heavy, bm, 128) == bm * 128 * (2 + 4 + 2)
    # 256 wide (rule 9): 32-column blocks, two staging slots per output and two buffers per dense operand.
    assert epilogue_bytes(plain, bm, 256) == bm * 32 * 2 * 2
    assert epilogue_bytes(heavy, bm, 256) == bm * 32 * 2 * (2 + 4 + 2)
    p, q = plan_schedule(plain, H100_SXM), plan_schedule(heavy, H100_SXM)
    assert (p.bn, q.bn) == (256, 256)
    fit = (max_stages(plain, H100_SXM, bm, 256, bk), max_stages(heavy, H100_SXM, bm, 256, bk))
    assert (p.stages, q.stages) == fit == (4, 3)
    assert q.stages * stage_bytes(heavy, bm, 256, bk) + epilogue_bytes(heavy, bm, 256) <= H100_SXM.smem_per_block
    m = build(heavy, H100_SXM).module
    # The IR's buffers are what the planner counted.
    assert sum(b.bytes for b in m.buffers) == epilogue_bytes(heavy, bm, 256)
    assert m.smem_bytes <= H100_SXM.smem_per_block



@pytest.mark.parametrize("hoist,cols,suffix", [(True, True, ""), (False, True, "_nohoist"),
                                               (True, False, "_nocolscalar"), (False, False, "_nohoist_nocolscalar")])
def test_ablations_name_themselves(hoist: bool, cols: bool, suffix: str) -> None:
    spec = rowwise_gelu_residual().spec
    k = planned(spec, hoist_rows=hoist, scalar_columns=cols)
    assert k.plan.short() == "128x128x128_s5_w8_g8" + suffix
    assert re.fullmatch(rf"warploom_\w+_128x128x128_s5_w8_g8{suffix}_ep[0-9a-f]{{10}}", k.module.name)


def test_plan_short_of_defaults_has_no_ablation_suffix() -> None:
    p = Plan(128, 128, 64, 4, 8, 8, 132)
    assert "_no" not in p.short()
    assert replace(p, hoist_rows=False, scalar_columns=False).short() == "128x128x64_s4_w8_g8_nohoist_nocolscalar"


# ---------------------------------------------------------------------------------------------------------
# Kernel names


def test_kernel_names_fingerprint_the_epilogue() -> None:
    gelu = bf16(M, N, K, lambda acc, r: F.gelu(acc) + r, r=t(M, N, dtype=BF16)).module.name
    silu = bf16(M, N, K, lambda acc, r: F.silu(acc) + r, r=t(M, N, dtype=BF16)).module.name
    again = bf16(M, N, K, lambda acc, r: F.gelu(acc) + r, r=t(M, N, dtype=BF16)).module.name
    plain = bf16(M, N, K, None).module.name
    assert gelu != silu and gelu == again
    assert gelu.rsplit("_ep", 1)[0] == silu.rsplit("_ep", 1)[0]  # only the fingerprint differs
    assert "_ep" not in plain
    assert re.fullmatch(r"ep[0-9a-f]{10}", gelu.rsplit("_", 1)[1])


def test_kernel_names_fingerprint_operand_strides() -> None:
    # Strides are compiled into the kernel: a column read every 4th element is another kernel.
    dense = bf16(M, N, K, lambda acc, x: acc * x, x=t(M, 1)).module.name
    strided = bf16(M, N, K, lambda acc, x: acc * x, x=t(M, 4)[:, :1]).module.name
    assert dense != strided


# ---------------------------------------------------------------------------------------------------------
# Composition of scaled_mm's own epilogue


def _spec(name: str, x: torch.Tensor) -> Any:
    return classify(name, x, (M, N))


def test_with_prologue_puts_rowwise_scales_and_bias_in_front() -> None:
    b = Builder()
    g = b.finish([eg.Output(b.add(eg.Unary(eg.UnaryOp.RELU, b.acc())))])
    composed = with_prologue(g, _spec("scale_a", t(M, 1)), _spec("scale_b", t(1, N)), _spec("bias", t(N, dtype=BF16)))
    assert ep.text(composed) == (
        "epilogue(acc, scale_a: column fp32, scale_b: row fp32, bias: row bf16):\n"
        "  %0 = mul acc, scale_a\n"
        "  %1 = mul %0, scale_b\n"
        "  %2 = add %1, bias\n"
        "  %3 = relu %2\n"
        "  return %3\n")


def test_with_prologue_tensorwise_without_bias_keeps_user_operands_after() -> None:
    res = _spec("res", t(M, N, dtype=BF16))
    b = Builder([res])
    g = b.finish([eg.Output(b.add(eg.Binary(eg.BinaryOp.ADD, b.acc(), b.operand("res")))),
                  eg.Output(b.acc(), DType.FP32)])
    composed = with_prologue(g, _spec("scale_a", t()), _spec("scale_b", t()), None)
    assert ep.text(composed) == (
        "epilogue(acc, scale_a: scalar fp32, scale_b: scalar fp32, res: dense bf16):\n"
        "  %0 = mul acc, scale_a\n"
        "  %1 = mul %0, scale_b\n"
        "  %2 = add %1, res\n"
        "  return %2, %1 as fp32\n")


def test_with_prologue_refuses_a_user_operand_named_like_a_scale() -> None:
    b = Builder([_spec("scale_b", t(N)), _spec("bias", t(N))])
    g = b.finish([eg.Output(b.add(eg.Binary(eg.BinaryOp.ADD, b.acc(), b.add(eg.Binary(
        eg.BinaryOp.MUL, b.operand("scale_b"), b.operand("bias"))))))])
    with pytest.raises(ValueError, match=r"operand names \['bias', 'scale_b'\] are reserved"):
        with_prologue(g, _spec("scale_a", t(M, 1)), _spec("scale_b", t(1, N)), _spec("bias", t(N)))


def test_plan_composes_the_same_graph_as_with_prologue() -> None:
    k = rowwise_gelu_residual()
    assert k.spec.epilogue is not None
    assert ep.text(k.spec.epilogue) == (
        "epilogue(acc, scale_a: column fp32, scale_b: row fp32, bias: row bf16, residual: dense bf16):\n"
        "  %0 = mul acc, scale_a\n"
        "  %1 = mul %0, scale_b\n"
        "  %2 = add %1, bias\n"
        "  %3 = gelu %2\n"
        "  %4 = add %3, residual\n"
        "  return %4\n")


def test_plan_for_matmul_makes_bias_the_first_epilogue_operand() -> None:
    k = bf16(M, N, K, lambda acc, bias: acc + bias, bias=t(N, dtype=BF16))
    assert k.spec.epilogue is not None and [s.name for s in k.spec.epilogue.operands] == ["bias"]
    assert k.spec.bias_dtype is None  # matmul has no bias of its own: the graph reads it


# ---------------------------------------------------------------------------------------------------------
# Front-end checks (fused.py, api.py)


def test_operand_on_another_device_is_refused_naming_it() -> None:
    with pytest.raises(DeviceError, match=r"^r: expected an epilogue operand on meta, where a is, got .* on cpu") as e:
        bf16(M, N, K, lambda acc, r: acc + r, r=torch.empty(M, N, dtype=BF16))
    assert e.value.arg == "r"


def test_dense_operand_with_unaligned_row_stride_is_refused_naming_it() -> None:
    wide = t(M, N + 1, dtype=BF16)[:, :N]  # row stride 529 elements = 1058 bytes
    with pytest.raises(AlignmentError, match=r"res: expected a dim-0 stride that is a multiple of 16 bytes") as e:
        bf16(M, N, K, lambda acc, res: acc + res, res=wide)
    assert e.value.arg == "res"
    bf16(M, N, K, lambda acc, res: acc + res, res=t(M, N + 8, dtype=BF16)[:, :N])  # 16-byte rows are fine


@pytest.mark.parametrize("call", ["plan", "matmul"])
def test_operands_without_epilogue_are_refused(call: str) -> None:
    a, b = t(M, K, dtype=BF16), t(N, K, dtype=BF16).t()
    fn = {"plan": warploom.plan, "matmul": warploom.matmul}[call]
    with pytest.raises(InputError, match="epilogue operands together with epilogue=fn") as e:
        fn(a, b, r=t(M, N, dtype=BF16))
    assert e.value.arg == "r"


RESERVED_NAMED: dict[str, Callable[..., Any]] = {
    "scale_a": lambda acc, scale_a: acc * scale_a,
    "scale_b": lambda acc, scale_b: acc * scale_b,
    "bias": lambda acc, bias: acc * bias,
}


@pytest.mark.parametrize("name", list(RESERVED_NAMED))
def test_scaled_mm_operand_named_like_its_own_is_refused(name: str) -> None:
    a, b, sa, sb = t(M, K).to(E4), t(N, K).to(E4).t(), t(M, 1), t(1, N)
    spec = warploom.plan(a, b, sa, sb, use_fast_accum=True).spec
    with pytest.raises(InputError, match=rf"^{name}: expected an epilogue operand name other than scaled_mm") as e:
        fused_spec(spec, a, RESERVED_NAMED[name], {name: t(M, 1)}, scale_a=sa, scale_b=sb)
    assert e.value.arg == name


def test_scaled_mm_operand_named_scale_a_collides_with_its_parameter() -> None:
    # Through the public function the name is taken by scaled_mm's own parameter before warploom sees it.
    a, b, sa, sb = t(M, K).to(E4), t(N, K).to(E4).t(), t(M, 1), t(1, N)
    with pytest.raises(TypeError, match="multiple values for argument 'scale_a'"):
        warploom.scaled_mm(a, b, sa, sb, epilogue=RESERVED_NAMED["scale_a"], **{"scale_a": t(M, 1)})


def test_matmul_operand_may_be_named_scale_a() -> None:
    # matmul has no scales of its own, so fused_spec lets the name through.
    a, b = t(M, K, dtype=BF16), t(N, K, dtype=BF16).t()
    spec, tensors = fused_spec(warploom.plan(a, b).spec, a, RESERVED_NAMED["scale_a"], {"scale_a": t(M, 1)})
    assert spec.epilogue is not None and [s.name for s in spec.epilogue.operands] == list(tensors) == ["scale_a"]


@pytest.mark.parametrize("out_dtype,fn,n,j,want", [
    (FP32, lambda acc: (acc, acc.to(BF16)), 516, 1, "N a multiple of 8 for the epilogue's output 1 (bf16"),
    (BF16, lambda acc: acc.to(E4), 520, 0, "N a multiple of 16 for the epilogue's output 0 (e4m3"),
    (BF16, lambda acc: (acc, (acc * 2).to(E4)), 1000, 1, "N a multiple of 16 for the epilogue's output 1 (e4m3"),
])
def test_output_rows_must_be_16_byte_multiples(out_dtype: torch.dtype, fn: Callable[..., Any], n: int, j: int,
                                               want: str) -> None:
    a, b = t(M, K, dtype=BF16), t(n, K, dtype=BF16).t()
    with pytest.raises(AlignmentError, match=re.escape(want)) as e:
        warploom.plan(a, b, out_dtype=out_dtype, epilogue=fn)
    assert e.value.arg == "b"
    assert f"got N = {n}" in str(e.value)
    warploom.plan(a, b, out_dtype=out_dtype, epilogue=lambda acc: acc)  # the call's own output is fine


# --- PrefetchOperands -------------------------------------------------------------------------------------

def test_prefetch_moves_the_first_block_to_the_tile_start() -> None:
    k = planned(bf16_two_outputs().spec, prefetch_operands=True, **P2)
    for i, p in enumerate(consumers(k.module)):
        body = tile_body(p)
        assert body[0] == ir.PrefetchOperand("res", "acc", 0, 1, f"res_smem{i}")  # before the k-loop
        assert k_index(body) == 1
        assert sum(isinstance(s, ir.PrefetchOperand) for s in body) == 1
        pos = _positions(body)
        assert pos[f"load_operand res for acc as tile via res_smem{i}"] < pos["apply_epilogue acc"]


def test_prefetch_of_a_later_block_follows_the_previous_blocks_store() -> None:
    # Two column blocks share one staging buffer: block 1's copy starts right behind block 0's first TMA store,
    # whose fence and barrier already ordered every thread's read of block 0 (so the prefetch is `synced`).
    k = planned(bf16_two_outputs().spec, bn=256, prefetch_operands=True, **P2)
    # Two blocks through one buffer (rule 9's 8 slotted blocks: tests/sim/test_fused_epilogue_sim.py).
    k = build(k.spec, H100_SXM, replace(k.plan, stages=2, epilogue_subtiles=2, staging_slots=1,
                                        operand_slots=1, load_ahead=False))
    stmts = [s for s in tile_body(consumers(k.module)[0]) if not isinstance(s, ir.Loop)]
    body = [printer.op(s) for s in stmts]
    assert body[0] == "prefetch_operand res for acc[cols 0/2] into res_smem0"
    assert not stmts[0].synced  # type: ignore[union-attr]
    load0 = body.index("load_operand res for acc[cols 0/2] as tile via res_smem0")
    store0 = next(i for i, s in enumerate(stmts) if isinstance(s, ir.TmaStore))
    assert load0 < body.index("apply_epilogue acc[cols 0/2]") < store0
    assert body[store0 + 1] == "prefetch_operand res for acc[cols 1/2] into res_smem0 (synced by the store)"
    assert store0 + 1 < body.index("load_operand res for acc[cols 1/2] as tile via res_smem0")
    # The generated Gluon syncs the first copy itself and leaves the synced one to the store.
    lines = k.source.split("\n")
    first, second = [i for i, line in enumerate(lines) if "async_copy_global_to_shared(res_desc" in line][:2]
    assert "gl.thread_barrier()" in "".join(lines[first - 3:first])
    store = max(i for i in range(second) if "async_copy_shared_to_global" in lines[i])
    assert store == second - 2 and "mbarrier.expect(res_smem0_bar" in lines[second - 1]


def test_verifier_rejects_a_synced_prefetch_before_its_store() -> None:
    # A synced prefetch has no barrier of its own: moved in front of the TMA store that covers the previous read of
    # its buffer, the copy could overwrite what another thread still reads. The simulator cannot see that (one
    # agent per partition); the verifier must.
    m = planned(fp8(4096, 4096, 4096, lambda acc, residual: F.gelu(acc) + residual, bias=t(4096, dtype=BF16),
                    residual=t(4096, 4096, dtype=BF16)).spec).module
    p = consumers(m)[0]
    (tiles,) = [s for s in p.body if isinstance(s, ir.Loop)]
    body = list(tiles.body)
    at = next(i for i, s in enumerate(body) if isinstance(s, ir.PrefetchOperand) and s.synced)
    assert isinstance(body[at - 1], ir.TmaStore)
    body[at - 1], body[at] = body[at], body[at - 1]
    broken = m.with_partition(replace(p, body=tuple(replace(tiles, body=tuple(body)) if s is tiles else s
                                                    for s in p.body)))
    errs = problems(broken)
    assert len(errs) == 1 and "no fence_async_shared and tma_store follow the last read of residual_smem" in errs[0]
    assert verify.complete(m, H100_SXM) == []


def test_hoist_and_ahead_together_are_refused() -> None:
    with pytest.raises(ValueError, match="pass one of the two"):
        HoistOperands(enabled=True, ahead=True)


def test_prefetch_disabled_leaves_each_copy_before_its_load() -> None:
    k = planned(bf16_two_outputs().spec, bn=256, prefetch_operands=False, **P2)
    k = build(k.spec, H100_SXM, replace(k.plan, stages=2, epilogue_subtiles=2, staging_slots=1,
                                        operand_slots=1, load_ahead=False))
    body = [printer.op(s) for s in tile_body(consumers(k.module)[0]) if not isinstance(s, ir.Loop)]
    for part in (0, 1):
        at = body.index(f"prefetch_operand res for acc[cols {part}/2] into res_smem0")
        assert body[at + 1] == f"load_operand res for acc[cols {part}/2] as tile via res_smem0"
    assert not k.plan.prefetch_operands and "prefetch" not in k.plan.short()
    assert planned(bf16_two_outputs().spec, prefetch_operands=True).plan.short().endswith("_prefetch")


def test_verifier_rejects_a_load_through_a_buffer_without_its_prefetch() -> None:
    m = planned(bf16_two_outputs().spec, prefetch_operands=True).module
    p = consumers(m)[0]
    wait, tiles, *rest = p.body  # (the grid-dependency wait first: passes/launch.py)
    assert isinstance(wait, ir.GridDependencyWait) and isinstance(tiles, ir.Loop)
    dropped = replace(tiles, body=tuple(s for s in tiles.body if not isinstance(s, ir.PrefetchOperand)))
    broken = m.with_partition(replace(p, body=(wait, dropped, *rest)))
    with pytest.raises(VerificationError, match="without a prefetch_operand of that block"):
        verify.check(broken, "test", H100_SXM)
    doubled = replace(tiles, body=(tiles.body[0], *tiles.body))
    with pytest.raises(VerificationError, match="is not loaded yet"):
        verify.check(m.with_partition(replace(p, body=(wait, doubled, *rest))), "test", H100_SXM)
