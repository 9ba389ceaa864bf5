"""Planner rule 29: a fused rowwise quantization across the tiles along N (N > 256, or a row rule 27's 256-wide tile
cannot hold), in two passes. The planner's choice (and `explain`'s words), the first pass's graph and IR
(`ir.AtomicAmax`, `ir.AmaxPass`), the verifier's rules for it, the generated Gluon of both kernels, and what is
refused by name. The numbers are the simulator
tier's (tests/sim/test_rowwise_amax_pass_sim.py), the machine code the compile tier's
(tests/compile/test_compile_quantize.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.device import B200
from warploom.dtypes import DType
from warploom.epilogue import printer
from warploom.errors import DTypeError, InputError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import printer as ir_printer
from warploom.ir.verify import structural
from warploom.kernel import Kernel, build
from warploom.planner import explain, plan_schedule

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2


def t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def rowwise(acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return warploom.quantize(acc * 2.0, recipe="rowwise")


def bf16(m: int, n: int, k: int = 512, fn: object = rowwise, bn: int | None = None, **ops: torch.Tensor) -> Kernel:
    """The planner's kernel, or with the tile's width forced to `bn` (rule 9's 128x256 in 8 blocks at 256)."""
    kern = warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), epilogue=fn, **ops)
    return kern if bn is None else build(kern.spec, H100_SXM, plan_schedule(kern.spec, H100_SXM, bn=bn))


@pytest.mark.parametrize("m, n, k, bn", [(1000, 264, 512, 128), (1000, 1544, 1024, 128), (8192, 7168, 7168, 256),
                                          (16, 4096, 2048, 64)])
def test_wider_than_a_tile_takes_rule_29(m: int, n: int, k: int, bn: int) -> None:
    """The first pass takes the tile the rules give its epilogue (acc alone): 128x128, rule 9's 128x256 for a large
    problem, rule 16's 64x64 at decode sizes."""
    kern = bf16(m, n, k)
    assert kern.plan.amax_pass and kern.plan.bn == bn and kern.module.amax_pass == ir.AmaxPass(DType.E4M3)
    assert "_amax" in kern.module.name  # (another kernel, another cache entry)
    text = explain(kern.spec, H100_SXM).text()
    assert f"rowwise quantization, rule 29: N={n} > 256 spans {bn}-wide tiles" in text
    assert "atomic max; a cast kernel then writes q and s" in text


def test_operands_and_promoted_fp8_take_128_wide_tiles() -> None:
    """At 256 wide a graph with operands spills (planning/amax_pass.py), and promoted fp8 would promote into two
    accumulators: 128 wide, whatever the rules would give acc alone."""
    assert bf16(8192, 7168, 7168).plan.bn == 256
    assert bf16(8192, 7168, 7168, fn=lambda acc, col_s: warploom.quantize(acc * col_s, recipe="rowwise"),
                col_s=t(8192, 1)).plan.bn == 128
    fp8 = (t(8192, 7168).to(E4), t(7168, 7168).to(E4).t(), torch.empty((), device="meta"),
           torch.empty((), device="meta"))
    assert warploom.plan(*fp8, out_dtype=BF16, use_fast_accum=True, epilogue=rowwise).plan.bn == 128


@pytest.mark.parametrize("n", [128, 208, 256])
def test_one_tile_keeps_rule_27(n: int) -> None:
    k = bf16(1000, n)
    assert not k.plan.amax_pass and k.module.amax_pass is None and k.plan.bn == (128 if n <= 128 else 256)
    assert f"rule 27: one {k.plan.bn}-wide tile holds N={n}" in explain(k.spec, H100_SXM).text()
    assert "atomic_amax" not in k.schedule


def test_rows_rule_27_cannot_hold_take_rule_29() -> None:
    """128 < N <= 256 where rule 27's 256-wide tile cannot run: per-column or dense operands (they spill) or promoted
    fp8 (two accumulators). A graph storing the pair alone takes rule 29's passes on 128-wide tiles instead of a
    refusal (scaled_mm's rowwise scale_b at N = 256 was refused on the H100, 2026-11-27); `explain` says why."""
    fp8 = (t(128, 2048).to(E4), t(256, 2048).to(E4).t(), t(128, 1), t(1, 256))
    kern = warploom.plan(*fp8, out_dtype=BF16, use_fast_accum=True, epilogue=rowwise)
    assert kern.plan.amax_pass and kern.plan.bn == 128 and kern.module.amax_pass == ir.AmaxPass(DType.E4M3)
    text = explain(kern.spec, H100_SXM).text()
    assert ("rowwise quantization, rule 29: rule 27's one 256-wide tile cannot hold N=256 with per-column or dense "
            "epilogue operands (scale_b)") in text
    assert "so the row spans 128-wide tiles: each tile stores y (fp32)" in text
    dense = bf16(300, 240, 1008, fn=lambda acc, res: warploom.quantize(acc + res, recipe="rowwise"),
                 res=t(300, 240, dtype=BF16))
    assert dense.plan.amax_pass and dense.plan.bn == 128
    promoted = warploom.plan(t(64, 512).to(E4), t(208, 512).to(E4).t(), torch.empty((), device="meta"),
                             torch.empty((), device="meta"), out_dtype=BF16, epilogue=rowwise)
    assert promoted.plan.amax_pass and promoted.plan.bn == 128
    assert "N=208 with promoted fp8 accumulation" in explain(promoted.spec, H100_SXM).text()
    # per-row operands fit rule 27's tile, as does acc alone; forcing rule 27's width names rule 29's
    assert not bf16(64, 256, fn=lambda acc, col_s: warploom.quantize(acc * col_s, recipe="rowwise"),
                    col_s=t(64, 1)).plan.amax_pass
    with pytest.raises(UnsupportedError, match=r"rowwise, rule 29.*bn=256: rule 29's tile must be 128 wide"):
        plan_schedule(kern.spec, H100_SXM, bn=256)


def test_first_pass_graph_and_ir() -> None:
    """The first pass stores y (the quantized value) in fp32 and folds its amax, which no output reads; each tile
    folds, computes and stores every block in turn, then publishes its rows' amax once."""
    k = bf16(300, 600, fn=lambda acc: warploom.quantize(torch.nn.functional.silu(acc), recipe="rowwise", dtype=E5),
             bn=256)
    g = k.module.spec.epilogue
    assert g is not None and k.spec.epilogue is not None
    assert printer.text(g) == """\
epilogue(acc):
  %0 = silu acc
  %1 = group_amax %0, row
  return %0 as fp32
"""
    assert g.rowwise() and not g.reads_amax() and k.spec.epilogue.reads_amax()
    assert k.module.amax_pass == ir.AmaxPass(DType.E5M2)
    text = ir_printer.module(k.module)
    assert "amax_pass: C is y's fp32 (M, N) workspace" in text and "cast q = e5m2(y / s)" in text
    body = [ir_printer.op(o) for o, _ in ir.walk(k.module.default_partition.body)]
    walk = [s for s in body if s.startswith(("fold_amax", "apply_epilogue", "tma_store c", "atomic_amax"))]
    assert walk[:4] == ["fold_amax acc[cols 0/8]", "apply_epilogue acc[cols 0/8]",
                        "tma_store c_smem -> C[m, n][cols 0/8]", "fold_amax acc[cols 1/8]"]
    assert walk[-1] == "atomic_amax acc -> amax[m]" and sum(s.startswith("atomic") for s in walk) == 1
    assert all(b.dtype is DType.FP32 for b in k.module.buffers if b.tensor is ir.Tensor.C)


def test_promoted_fp8_takes_128_wide_tiles() -> None:
    fp8 = (t(200, 512).to(E4), t(640, 512).to(E4).t(), t(200, 1), t(1, 640))
    k = warploom.plan(*fp8, use_fast_accum=False, out_dtype=BF16, epilogue=rowwise)
    assert k.plan.amax_pass and k.plan.bn == 128
    # (two consumer partitions, a 64-row accumulator each: each publishes its own rows)
    atomics = {p.name: [o for o, _ in ir.walk(p.body) if isinstance(o, ir.AtomicAmax)] for p in k.module.partitions}
    assert {name: len(a) for name, a in atomics.items()} == {"consumer0": 1, "consumer1": 1, "producer": 0}


def test_gluon_of_both_passes() -> None:
    k = bf16(300, 1000, bn=256)
    src = k.source
    assert "gl.atomic_max(amax_ptr + ep_rows, ep_amax.to(gl.int32, bitcast=True), mask=ep_rows < M" in src
    # (rule 27's opaque copy: here the fold and the store share y; the griddepcontrol helpers are the only asm)
    assert src.count("inline_asm_elementwise") == 2 and src.count('("griddepcontrol.') == 2
    assert k.gluon.cast_kernel == f"{k.module.name}_cast"
    cast = src[src.index(f"def {k.gluon.cast_kernel}("):]
    for line in ("amax = gl.load(amax_ptr + row + cols * 0).to(gl.float32, bitcast=True)",
                 "s = gl.div_rn(amax, gl.full([1024], 448.0, gl.float32, layout))",
                 "s = gl.where(s == 0.0, 1.0, s)",
                 "q = gl.minimum(gl.maximum(gl.div_rn(y, s), -448.0, propagate_nan=tl.PropagateNan.ALL), 448.0, "
                 "propagate_nan=tl.PropagateNan.ALL).to(gl.float8e4nv)"):
        assert line in cast, line


def _without(m: ir.Module, drop: type) -> ir.Module:
    def strip(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(dataclasses.replace(s, body=strip(s.body)) if isinstance(s, ir.Loop) else s
                     for s in body if not isinstance(s, drop))

    return dataclasses.replace(m, partitions=tuple(dataclasses.replace(p, body=strip(p.body))
                                                   for p in m.partitions))


def _moved_atomic(m: ir.Module) -> ir.Module:
    """The atomic_amax moved before the tile's last fold_amax."""
    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        atomic = next(s for s in body if isinstance(s, ir.AtomicAmax))
        out = [s for s in body if s is not atomic]
        at = max(i for i, s in enumerate(out) if isinstance(s, ir.FoldAmax))
        return tuple(out[:at] + [atomic] + out[at:])

    p = m.default_partition
    body = tuple(dataclasses.replace(s, body=tile(s.body)) if isinstance(s, ir.Loop) else s for s in p.body)
    return m.with_partition(dataclasses.replace(p, body=body))


def test_verifier_catches_planted_first_passes() -> None:
    m = bf16(300, 600, bn=256).module
    assert structural(m) == []
    assert any("fold_amax of acc blocks [0, 1, 2, 3, 4, 5, 6, 7] with no atomic_amax after them" in e
               for e in structural(_without(m, ir.AtomicAmax)))
    assert any("atomic_amax acc -> amax[m] after the fold_amax of blocks [0, 1, 2, 3, 4, 5, 6] of acc, expected "
               "all of [0, 1, 2, 3, 4, 5, 6, 7]" in e for e in structural(_moved_atomic(m)))
    # without Module.amax_pass the same tiles are rule 27's: too narrow for N, and an atomic outside a first pass
    errs = structural(dataclasses.replace(m, amax_pass=None))
    assert any("tile must hold its whole row: N=600 > BN=256" in e for e in errs)
    assert any("atomic_amax acc -> amax[m] outside a rule 29 first pass" in e for e in errs)


def test_refusals_name_the_argument_and_the_fix() -> None:
    unfused = r"Fix: .*quantize the call's result with warploom.quantize\(out, recipe='rowwise'\)"
    with pytest.raises(UnsupportedError, match=r"rowwise, rule 29.*N=608 > 256 takes rule 29's two passes.*expected "
                                               rf"the outputs \(q fp8, s\).*got \(e4m3, groups, bf16\).*{unfused}"):
        bf16(64, 608, fn=lambda acc: (*warploom.quantize(acc, recipe="rowwise"), acc.to(BF16)))
    spec = bf16(64, 600).spec
    for forced, why in [({"bn": 64}, r"bn=64: rule 29's tile must be 128 or 256 wide"),
                        ({"stream_k": 2}, "stream_k=2"), ({"split_k": 2}, "split_k=2"),
                        ({"swap_ab": True}, "swap_ab=True"), ({"pingpong": True}, "pingpong=True"),
                        ({"cluster": 2}, "cluster=2")]:
        with pytest.raises(UnsupportedError, match=f"rowwise, rule 29.*{why}.*Fix: drop the conflicting option"):
            plan_schedule(spec, H100_SXM, **forced)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="built for sm_90a, not"):
        plan_schedule(spec, B200)
    col = bf16(64, 600, fn=lambda acc, col_s: warploom.quantize(acc * col_s, recipe="rowwise"), col_s=t(64, 1)).spec
    with pytest.raises(UnsupportedError, match=r"bn=256: rule 29's tile must be 128 wide .promoted fp8, or a graph "
                                               "with operands"):
        plan_schedule(col, H100_SXM, bn=256)


class _Recorder:
    """A DirectLaunch stand-in: the launches a call would make, recorded (no GPU here)."""

    def __init__(self, calls: list[str], name: str) -> None:
        self.calls, self.name = calls, name

    def launch(self, grid: int, args: list[object]) -> None:
        self.calls.append(self.name)


@pytest.mark.parametrize("bad, arg, match", [
    ("q_transposed", "out", r"out: expected q's columns at unit stride .*got strides \(1, 300\)"),
    ("q_e5m2", "out", r"out: expected torch.float8_e4m3fn.*got torch.float8_e5m2"),
    ("q_short", "out", r"out: expected shape \(300, 1000\).*got \(300, 999\)"),
    ("s_bf16", "extra_outs[0]", r"extra_outs\[0\]: expected torch.float32.*got torch.bfloat16"),
    ("s_flat", "extra_outs[0]", r"extra_outs\[0\]: expected shape \(300, 1\).*got \(300,\)"),
    ("s_elsewhere", "extra_outs[0]", r"extra_outs\[0\]: expected a tensor on cpu, where a is, got a tensor on meta"),
])
def test_kernel_run_refuses_outputs_the_cast_kernel_cannot_write(bad: str, arg: str, match: str) -> None:
    """The cast kernel stores q by row stride alone (unit column stride) in the plan's fp8 type and s as (M, 1) fp32:
    any other q or s, or one on another device than A's, is refused by name before either launch. (A transposed q
    was written with its row stride 1 by every row, overlapping: silently wrong bytes, where rule 27's TMA
    descriptor refuses it.)"""
    k = bf16(300, 1000)
    calls: list[str] = []
    launcher = k.launcher
    launcher._main, launcher._cast = _Recorder(calls, "main"), _Recorder(calls, "cast")
    a, b = torch.zeros(300, 512, dtype=BF16), torch.zeros(1000, 512, dtype=BF16).t()
    q, s = torch.empty(300, 1000, dtype=E4), torch.empty(300, 1)
    q = {"q_transposed": torch.empty(1000, 300, dtype=E4).t(), "q_e5m2": q.to(E5),
         "q_short": q[:, :999]}.get(bad, q)
    s = {"s_bf16": s.to(BF16), "s_flat": s.reshape(300), "s_elsewhere": s.to("meta")}.get(bad, s)
    with pytest.raises(DTypeError if bad in ("q_e5m2", "s_bf16") else InputError, match=match) as e:
        k.run(a, b, q, extra_outs=(s,))
    assert e.value.arg == arg and calls == []
    k.run(a, b, torch.empty(300, 1000, dtype=E4), extra_outs=(torch.empty(300, 1),))  # (what it takes)
    assert calls == ["main", "cast"]
