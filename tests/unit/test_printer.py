"""The IR printer is deterministic (golden tests and caches depend on it) and gives every op one distinct line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.targets import compile_schedule

ROOT = Path(__file__).resolve().parents[2]
E4 = DType.E4M3
SPECS = [
    GemmSpec(4096, 4096, 4096),
    GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
    GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
    GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.TENSORWISE, accumulation=Accumulation.PROMOTED),
]

# One of every op, with non-default fields, and the line each must print as.
OPS: list[tuple[ir.Op, str]] = [
    (ir.Wait("ready", ir.Slot("c"), ir.Parity("c")), "wait ready[c] phase(c)"),
    (ir.Wait("empty", ir.Slot("p", 1), ir.Parity("p", 1, flip=True)), "wait empty[p+1] phase(p+1)^1"),
    (ir.Arrive("empty", ir.Slot("c", -1), guard=ir.Guard.NOT_FIRST_K), "arrive empty[c-1]  if k > 0"),
    (ir.Arrive("empty", ir.Slot("c"), count=2), "arrive empty[c] count=2"),
    (ir.ArriveExpectTx("ready", ir.Slot("p"), 49152), "arrive_expect_tx ready[p] bytes=49152"),
    (ir.TmaLoad(ir.Tensor.B, "b_ring", ir.Slot("p"), (ir.Axis.K, ir.Axis.N), "ready"),
     "tma_load B[k, n] -> b_ring[p] on ready[p]"),
    (ir.TmaLoad(ir.Tensor.A, "a_ring", ir.Slot("c"), (ir.Axis.M, ir.Axis.K)), "tma_load A[m, k] -> a_ring[c] sync"),
    (ir.Mma("a_ring", "b_ring", ir.Slot("c"), "acc", is_async=True), "wgmma.async acc += a_ring[c] @ b_ring[c]"),
    (ir.Mma("a_ring", "b_ring", ir.Slot("c"), "partial", ir.Guard.ALWAYS),
     "wgmma partial += a_ring[c] @ b_ring[c] overwrite=always"),
    (ir.Mma("a_ring", "b_ring", ir.Slot("c"), "partial", ir.Guard.ALWAYS, is_async=True, n_cols=ir.ColBlock(128, 128)),
     "wgmma.async partial += a_ring[c] @ b_ring[c][:, 128:256] overwrite=always"),
    (ir.Mma("a_ring", "b_ring", ir.Slot("c", 1), "acc", n_cols=ir.ColBlock(0, 64)),
     "wgmma acc += a_ring[c+1] @ b_ring[c+1][:, 0:64]"),
    (ir.MmaWait(1), "wgmma_wait pending=1"),
    (ir.Promote("partial", "acc"), "promote acc += partial"),
    (ir.ZeroAcc("acc"), "zero acc"),
    (ir.Epilogue("acc", (ir.EpilogueStep.SCALE_TENSORWISE, ir.EpilogueStep.ADD_BIAS)),
     "epilogue acc: acc *= scale_a[0] * scale_b[0]; acc += bias[None, n]"),
    (ir.StoreTile("acc"), "store_tile C[m, n] <- acc"),
    (ir.StoreWait(0), "tma_store_wait pending=0"),
    (ir.StoreSmem("acc", "c_smem"), "store_smem c_smem <- acc"),
    (ir.FenceAsync(), "fence_async_shared"),
    (ir.TmaStore("c_smem"), "tma_store c_smem -> C[m, n]"),
    (ir.Advance("p"), "advance p"),
]


@pytest.mark.parametrize("o,text", OPS, ids=[t for _, t in OPS])
def test_each_op_prints_as_one_line(o: ir.Op, text: str) -> None:
    assert printer.op(o) == text


def test_ops_print_distinctly() -> None:
    lines = [printer.op(o) for o, _ in OPS]
    assert len(set(lines)) == len(lines)
    assert all("\n" not in ln for ln in lines)


def test_unknown_op_is_refused() -> None:
    with pytest.raises(TypeError, match="unknown op"):
        printer.op(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_module_text_is_deterministic_across_builds(spec: GemmSpec) -> None:
    plan = plan_schedule(spec, H100_SXM)
    m1, _ = compile_schedule(spec, plan, H100_SXM)
    m2, _ = compile_schedule(spec, plan, H100_SXM)
    assert m1 is not m2
    assert printer.module(m1) == printer.module(m2) == printer.module(m1)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
def test_module_text_states_declarations(spec: GemmSpec) -> None:
    k = build(spec, H100_SXM)
    text = k.schedule
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert f"  smem {k.module.smem_bytes} bytes\n" in text
    for r in k.module.rings:
        assert f"ring {r.name}: {r.tensor.value} {r.dtype.value}[{r.depth} x {r.rows}x{r.cols}]" in text
    for p in k.module.partitions:
        assert f"partition {p.name} ({p.role.value}, warps={p.warps} regs={p.regs}" in text
    # Every op of the module appears, in program order.
    lines = text.splitlines()
    pos = 0
    for p in k.module.partitions:
        for o, _ in ir.walk(p.body):
            want = printer.op(o)
            pos = next(i for i in range(pos, len(lines)) if lines[i].strip() == want) + 1


def _declarations(m: ir.Module) -> list[str]:
    """The partition header and accumulator lines of the module text."""
    return [ln.strip() for ln in printer.module(m).splitlines()
            if ln.startswith("  partition ") or ln.startswith("    acc ")]


def test_split_consumers_print_their_row_blocks() -> None:
    spec = SPECS[0]  # bf16 128x256: two consumer partitions of 64 rows
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM), H100_SXM)
    assert _declarations(m) == [
        "partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):",
        "acc acc: fp32[64x256]",
        "partition consumer1 (consumer, warps=4 regs=240 rows=64:128):",
        "acc acc: fp32[64x256]",
        "partition producer (producer, warps=1 regs=24):",
    ]


def test_one_consumer_partition_prints_no_row_block() -> None:
    spec = SPECS[0]
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM, consumer_partitions=1), H100_SXM)
    assert _declarations(m) == [
        "partition consumer (consumer, warps=8 regs=240 default):",
        "acc acc: fp32[128x256]",
        "partition producer (producer, warps=1 regs=24):",
    ]


def test_column_block_accumulators_print_their_offset() -> None:
    spec = SPECS[3]  # promoted fp8 128x256: accumulator in two 128-wide blocks, one 128-wide partial
    m, _ = compile_schedule(spec, plan_schedule(spec, H100_SXM), H100_SXM)
    text = printer.module(m)
    assert _declarations(m)[:4] == [
        "partition consumer0 (consumer, warps=4 regs=240 rows=0:64 default):",
        "acc acc0: fp32[64x128]",
        "acc acc1: fp32[64x128] at col 128",  # the offset printed only where it is not 0
        "acc partial: fp32[64x128]",
    ]
    assert text.count("wgmma.async partial += a_ring[c] @ b_ring[c][:, 0:128] overwrite=always") == 2
    assert text.count("wgmma.async partial += a_ring[c] @ b_ring[c][:, 128:256] overwrite=always") == 2


_SCRIPT = """
import sys
from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe, BLayout
from warploom.kernel import build
E4 = DType.E4M3
for spec in (GemmSpec(4096, 4096, 4096), GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR),
             GemmSpec(64, 256, 512, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.FP32,
                      accumulation=Accumulation.PROMOTED)):
    k = build(spec, H100_SXM)
    sys.stdout.write(k.schedule + k.source)
"""


def test_text_is_identical_across_processes_and_hash_seeds() -> None:
    outs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True)
        outs.append(r.stdout)
    assert outs[0] and outs[0] == outs[1]
