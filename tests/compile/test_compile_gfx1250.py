"""Compile-only tier for gfx1250 (planner rule 20): cross-compile a matrix of AMD kernels on the CPU.

Each must compile through Triton's AMD backend to AMDGCN that multiplies with wmma (the instruction for its input
types), copies A and B with the Tensor Data Mover (tensor_load_to_lds) and waits for them by count
(s_wait_tensorcnt), uses no scratch memory (no VGPR spills), and fits the LDS of a gfx1250 workgroup. Nothing here
runs: no gfx1250 is at hand.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import GFX1250
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule

BF16, FP16, FP32, E4, E5 = DType.BF16, DType.FP16, DType.FP32, DType.E4M3, DType.E5M2
TW, RW = ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE


def f8(m: int, n: int, k: int, recipe: ScaleRecipe, bias: DType | None = None, a: DType = E4, b: DType = E4,
       out: DType = BF16) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, out, BLayout.K_MAJOR, recipe, Accumulation.NATIVE, bias)


# (id, spec, forced plan options, the wmma instruction expected)
MATRIX: list[tuple[str, GemmSpec, dict[str, int], str]] = [
    ("bf16_4096_kmajor", GemmSpec(4096, 4096, 4096), {}, "v_wmma_f32_16x16x32_bf16"),
    ("bf16_296x520x1000_nmajor", GemmSpec(296, 520, 1000, b_layout=BLayout.N_MAJOR), {}, "v_wmma_f32_16x16x32_bf16"),
    ("fp16_out_fp32_odd", GemmSpec(4097, 264, 8192, FP16, FP16, FP32), {}, "v_wmma_f32_16x16x32_f16"),
    ("bf16_64x64_s2", GemmSpec(1000, 1000, 72), dict(bm=64, bn=64, stages=2), "v_wmma_f32_16x16x32_bf16"),
    ("bf16_128x256_s4", GemmSpec(2048, 2048, 2048), dict(bn=256, stages=4), "v_wmma_f32_16x16x32_bf16"),
    ("bf16_decode_16x14336x4096", GemmSpec(16, 14336, 4096), {}, "v_wmma_f32_16x16x32_bf16"),
    ("e4m3_tensorwise", f8(4096, 4096, 4096, TW), {}, "v_wmma_f32_16x16x64_fp8_fp8"),
    ("e4m3_rowwise_bias", f8(4096, 4096, 4096, RW, bias=BF16), {}, "v_wmma_f32_16x16x64_fp8_fp8"),
    # (wmma in the transposed layout takes B as the instruction's first operand: e4m3 B, e5m2 A -> fp8_bf8)
    ("e5m2xe4m3_rowwise_bias_fp32_out", f8(296, 528, 1024, RW, bias=FP32, a=E5, out=FP32), {},
     "v_wmma_f32_16x16x64_fp8_bf8"),
]


@pytest.mark.parametrize("spec,forced,wmma", [pytest.param(s, f, w, id=i) for i, s, f, w in MATRIX])
def test_compiles_to_wmma_and_tdm(spec: GemmSpec, forced: dict[str, int], wmma: str) -> None:
    kern = build(spec, GFX1250, plan_schedule(spec, GFX1250, **forced))
    c = kern.compile()
    s = c.summary()
    assert c.target == "gfx1250"
    assert set(re.findall(r"v_wmma_\w+", c.sass)) == {wmma}, s
    # Per k-block a wmma per 16x16 block of a warp's share of the tile and per instruction K of the k-block.
    t = kern.module.tiling
    per_warp = t.bm * t.bn // (16 * 16 * kern.plan.consumer_warps) * (t.bk // (64 if spec.a_dtype.bytes == 1 else 32))
    assert c.count("v_wmma") == per_warp, s
    # The prologue's copies (stages - 1 blocks of A and B) and the k-loop's (one block of each).
    assert c.count("tensor_load_to_lds") == 2 * kern.plan.stages, s
    # The k-loop's counting wait (the copies of the blocks behind the one needed stay in flight: 2 (stages - 2)), and
    # where that is not 0 its tail's wait for all (LLVM may duplicate either when it rotates the loop). Triton 3.9's
    # LLVM also waits before every copy until at most 10 are in flight: no stall, the schedule has 2 * stages at most.
    waits = {int(n, 16) for n in re.findall(r"^\s*s_wait_tensorcnt 0x([0-9a-f]+)", c.sass, re.M)}
    assert {w for w in waits if w < 2 * kern.plan.stages} == {0, 2 * (kern.plan.stages - 2)}, (waits, s)
    assert c.count("s_barrier_wait") >= 1, s
    assert c.spills == 0, c.ptxas_log
    assert 0 < c.smem_bytes <= GFX1250.smem_per_block, s
    assert not re.search(r"^\s*global_load\w*\s", c.sass, re.M) or spec.scale is not ScaleRecipe.NONE or \
        spec.bias_dtype is not None, "A and B travel by TDM only: no ordinary global loads in a plain GEMM"


def test_compile_rejects_other_targets_for_a_gfx1250_kernel() -> None:
    from warploom.errors import TargetError

    kern = build(GemmSpec(512, 512, 512), GFX1250)
    with pytest.raises(TargetError, match="gfx1250 schedule"):
        kern.compile("sm_100a")


def _fused_cases() -> list[tuple[str, Any]]:
    """Every epilogue of the sm_90a fused matrix (test_compile_fused.EPILOGUES: bias + GELU + a dense residual,
    silu times a column, a clamp by a row, two outputs one fp32, an e4m3 output, where/sigmoid with a scalar) on bf16,
    and issue 4's on fp8 rowwise with scaled_mm's bias, at a shape that is no tile multiple."""
    import torch
    import torch.nn.functional as F
    from test_compile_fused import EPILOGUES, t  # (pytest puts this folder on sys.path)

    import warploom

    m, n, k = 300, 528, 256
    cases = []
    for name, make in EPILOGUES.items():
        fn, ops = make(m, n)
        cases.append((f"bf16_{name}", warploom.plan(t(m, k, dtype=torch.bfloat16), t(n, k, dtype=torch.bfloat16).t(),
                                                   epilogue=fn, device=GFX1250, **ops)))
    e4 = torch.float8_e4m3fn
    cases.append(("fp8_rowwise_bias_gelu_tanh_residual", warploom.plan(
        t(m, k).to(e4), t(n, k).to(e4).t(), t(m, 1), t(1, n), bias=t(n, dtype=torch.bfloat16), use_fast_accum=True,
        device=GFX1250, epilogue=lambda acc, res: F.gelu(acc, approximate="tanh") + res,
        res=t(m, n, dtype=torch.bfloat16))))
    cases.append(("bf16_pow_rsqrt", warploom.plan(
        t(m, k, dtype=torch.bfloat16), t(n, k, dtype=torch.bfloat16).t(), device=GFX1250,
        epilogue=lambda acc, s: torch.rsqrt(torch.pow(acc, 2.0) + s) * torch.tanh(acc), s=t())))
    return cases


@pytest.mark.parametrize("name", [name for name, _ in _fused_cases()])
def test_fused_epilogues_compile(name: str) -> None:
    """A fused epilogue on gfx1250: the graph on the whole tile in the wmma layout, each output stored from the
    registers; it must compile with wmma and the TDM pipeline and use no scratch."""
    kern = dict(_fused_cases())[name]
    assert any(isinstance(o, ir.ApplyEpilogue) for o, _ in ir.walk(kern.module.partitions[0].body))
    c = kern.compile()
    s = c.summary()
    assert c.count("v_wmma") > 0 and c.count("tensor_load_to_lds") == 2 * kern.plan.stages, s
    assert c.spills == 0, c.ptxas_log
    stores = len(re.findall(r"^\s*global_store", c.sass, re.M))
    assert stores > 0, s
    # Each output is stored in its own dtype (output 0's too: not the spec's out_dtype when the graph casts).
    # (Triton 3.9 stores e4m3 outputs packed four bytes to an i32.)
    llvm = {"bf16": {"bfloat"}, "fp16": {"half"}, "fp32": {"float"}, "e4m3": {"i8", "i32"}}
    stored = {t for t in re.findall(r"store <\d+ x (\w+)>", c.ptx)}
    assert all(llvm[d.value] & stored for d in kern.spec.output_dtypes()), (stored, kern.spec.output_dtypes())
