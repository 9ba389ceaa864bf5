"""Compile-only tier for `warploom.quantize(y, recipe="1x128")` inside a fused epilogue (planner rule 26), and
`recipe="rowwise"` (rule 27) below.

Each kernel stores q (fp8) through TMA and its (M, ceil(N/128)) scales by masked register stores (`c1_ptr`,
`c1_stride_m`), after folding each 128-column group's amax over its blocks. Cross-compiled for sm_90a on the CPU, it
must keep its MMAs on the async tensor-core path, fit the H100's shared memory, keep wgmma unserialized and spill
nothing (the spill budget of conftest.py: 0 unless a known Triton finding says otherwise). The planned tile (one
128-column block: the group is the block) and forced blocks of 64 and 32 columns (the walk over a group's blocks)
both compile, for bf16, fp8 with fast accumulation and promoted fp8 (rowwise, and blockwise 1x128 x 128x128: the
chained-fp8 layer); the generated code names the group's amax, its NaN-propagating combine and the scale store.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.kernel import Kernel, build

BF16, FP32, E4, E5 = torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2
SMEM_LIMIT = 232448  # H100 opt-in shared memory per block


def t(*shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def bf16(m: int, n: int, k: int, fn: Callable[..., Any], **ops: torch.Tensor) -> Kernel:
    return warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), epilogue=fn, **ops)


def fp8_rowwise(m: int, n: int, k: int, fn: Callable[..., Any], **ops: torch.Tensor) -> Kernel:
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(m, 1), t(1, n), bias=t(n, dtype=BF16),
                         use_fast_accum=True, epilogue=fn, **ops)


def fp8_blockwise(m: int, n: int, k: int, fn: Callable[..., Any]) -> Kernel:
    kb, nb = -(-k // 128), -(-n // 128)
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(kb, m).t(), t(kb, nb), out_dtype=BF16, epilogue=fn)


def fp8_rowwise_promoted(m: int, n: int, k: int, fn: Callable[..., Any]) -> Kernel:
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(m, 1), t(1, n), bias=t(n, dtype=BF16),
                         use_fast_accum=False, epilogue=fn)


def blocks(kernel: Kernel, subtiles: int) -> Kernel:
    """The planner's kernel with its epilogue forced into `subtiles` column blocks (the walk over a group)."""
    return build(kernel.spec, H100_SXM, dataclasses.replace(kernel.plan, epilogue_subtiles=subtiles))


def compiles_clean(k: Kernel, spill_budget: int) -> None:
    """Cross-compiled for sm_90a: its MMAs on the async tensor-core path, unserialized, within the H100's shared
    memory and the spill budget."""
    c = k.compile()
    mma, other = ("QGMMA", "HGMMA") if k.spec.a_dtype.bits == 8 else ("HGMMA", "QGMMA")
    s = c.summary()
    assert c.target == "sm_90a"
    assert c.count(mma) > 0, f"no {mma} in the SASS: {s}"
    assert c.count(other) == 0, s
    assert c.spills <= spill_budget, f"{k.module.name} spills {c.spills} bytes: {s}\n{c.ptxas_log}"
    assert 0 < c.smem_bytes <= SMEM_LIMIT, s
    assert not c.wgmma_serialized, c.ptxas_log


CASES: dict[str, Callable[[], Kernel]] = {
    "bf16_bias_planned": lambda: bf16(300, 528, 256, lambda acc, shift: warploom.quantize(acc + shift),
                                      shift=t(528)),
    "bf16_silu_col_e5m2_planned": lambda: bf16(
        77, 1040, 512, lambda acc, col_s: warploom.quantize(torch.nn.functional.silu(acc) * col_s, dtype=E5),
        col_s=t(77, 1)),
    "bf16_bias_64col_blocks": lambda: blocks(bf16(300, 528, 256, lambda acc, shift: warploom.quantize(acc + shift),
                                                  shift=t(528)), 2),
    "bf16_plain_32col_blocks": lambda: blocks(bf16(129, 400, 640, lambda acc: warploom.quantize(acc)), 4),
    "bf16_residual_planned": lambda: bf16(300, 528, 256, lambda acc, res: warploom.quantize(acc + res),
                                          res=t(300, 528, dtype=BF16)),
    "bf16_residual_64col_blocks": lambda: blocks(bf16(300, 528, 256, lambda acc, res: warploom.quantize(acc + res),
                                                      res=t(300, 528, dtype=BF16)), 2),
    # DeepSeek-V3's chain: a blockwise GEMM whose output is the next one's 1x128-quantized A (promoted: one 128-wide
    # accumulator per consumer warpgroup holds the group)
    "fp8_blockwise_planned": lambda: fp8_blockwise(296, 7168, 2048, lambda acc: warploom.quantize(acc)),
    "fp8_blockwise_silu_64col_blocks": lambda: blocks(fp8_blockwise(
        129, 528, 640, lambda acc: warploom.quantize(torch.nn.functional.silu(acc))), 2),
    "fp8_rowwise_promoted_planned": lambda: fp8_rowwise_promoted(300, 528, 1024, lambda acc: warploom.quantize(acc)),
    "fp8_rowwise_bias_gelu_planned": lambda: fp8_rowwise(
        515, 400, 1152, lambda acc: warploom.quantize(torch.nn.functional.gelu(acc))),
}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated sources go to a private directory, not the user's warploom cache."""
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in CASES.items()])
def test_quantize_epilogue_cross_compiles_for_sm90a(make: Callable[[], Kernel], spill_budget: int) -> None:
    k = make()
    assert k.spec.epilogue is not None and k.spec.epilogue.group_amax() is not None
    assert k.plan.bn == 128
    src = k.source
    assert "ep_block_amax = gl.reduce(" in src and "_nan_max" in src  # the group amax, NaN winning
    assert "gl.store(c1_ptr + gl.expand_dims(ep_rows, 1) * c1_stride_m + ep_group" in src  # the scale column
    assert "c1_desc" not in src  # the scales are no TMA output
    if k.plan.epilogue_subtiles > 1:  # the walk: later blocks combine with the group's earlier ones
        assert "ep_amax = gl.maximum(ep_amax, ep_block_amax" in src
    compiles_clean(k, spill_budget)


def fp8_tensorwise(m: int, n: int, k: int, fn: Callable[..., Any]) -> Kernel:
    one = torch.empty((), device="meta")
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), one, one, out_dtype=BF16, use_fast_accum=True,
                         epilogue=fn)


R: dict[str, Any] = {"recipe": "rowwise"}
# Rule 27: one tile across N, 128 wide (N <= 128: every operand kind, promoted fp8) or 256 wide (N <= 256: rule 9's 8
# blocks of 32 columns, column and scalar operands only; the fold's values pass an opaque copy so that they are not
# kept live beside the accumulator until the division).
ROWWISE: dict[str, Callable[[], Kernel]] = {
    "rowwise_bf16_bias_n96": lambda: bf16(300, 96, 256, lambda acc, shift: warploom.quantize(acc + shift, **R),
                                          shift=t(96)),
    "rowwise_bf16_residual_n128": lambda: bf16(300, 128, 256, lambda acc, res: warploom.quantize(acc + res, **R),
                                               res=t(300, 128, dtype=BF16)),
    "rowwise_bf16_bias_32col_blocks_n128": lambda: blocks(bf16(
        129, 128, 640, lambda acc, shift: warploom.quantize(acc + shift, **R), shift=t(128)), 4),
    "rowwise_bf16_gelu_n256": lambda: bf16(300, 256, 512, lambda acc: warploom.quantize(
        torch.nn.functional.gelu(acc), **R)),
    "rowwise_bf16_silu_col_e5m2_n208": lambda: bf16(77, 208, 512, lambda acc, col_s: warploom.quantize(
        torch.nn.functional.silu(acc) * col_s, dtype=E5, **R), col_s=t(77, 1)),
    "rowwise_fp8_tensorwise_silu_n256": lambda: fp8_tensorwise(515, 256, 1152, lambda acc: warploom.quantize(
        torch.nn.functional.silu(acc), **R)),
    "rowwise_fp8_rowwise_bias_n128": lambda: fp8_rowwise(515, 128, 1152, lambda acc: warploom.quantize(acc, **R)),
    "rowwise_fp8_promoted_n128": lambda: fp8_rowwise_promoted(300, 128, 1024, lambda acc: warploom.quantize(
        acc, **R)),
    # decode (small M: 64-row tiles, one consumer warpgroup holding 64x256 or 64x128)
    "rowwise_decode_bf16_silu_m16_n256": lambda: bf16(16, 256, 4096, lambda acc: warploom.quantize(
        torch.nn.functional.silu(acc), **R)),
    "rowwise_decode_fp8_rowwise_m16_n128": lambda: fp8_rowwise(16, 128, 7168, lambda acc: warploom.quantize(
        acc, **R)),
}


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in ROWWISE.items()])
def test_rowwise_epilogue_cross_compiles_for_sm90a(make: Callable[[], Kernel], spill_budget: int) -> None:
    k = make()
    assert k.spec.epilogue is not None and k.spec.epilogue.rowwise()
    assert k.plan.bn == (128 if k.spec.n <= 128 else 256)
    src = k.source
    assert "ep_block_amax = gl.reduce(" in src and "_nan_max" in src  # the row's amax, NaN winning
    assert "gl.store(c1_ptr + gl.expand_dims(ep_rows, 1) * c1_stride_m, ep_out1" in src  # the (M, 1) scales
    assert "c1_desc" not in src and "ep_group" not in src
    if k.plan.epilogue_subtiles > 1:  # the walk: later blocks combine with the row's earlier ones
        assert "ep_amax = gl.maximum(ep_amax, ep_block_amax" in src
    compiles_clean(k, spill_budget)


# Rule 29: rowwise across the tiles along N (N > 256), two kernels: the GEMM on its 256-wide tiles (128 for promoted
# fp8), each block folded and stored as fp32 y, the tile's row amax added by an atomic max; then the cast kernel.
# Row and dense operands run here (rule 27 refuses them at 256 wide: the division is another kernel's), and so do
# rows of 128 < N <= 256 that rule 27's tile cannot hold (`sm90.fused.two_passes`).
AMAX_PASS: dict[str, Callable[[], Kernel]] = {
    "amax_pass_bf16_n7168": lambda: bf16(2048, 7168, 2048, lambda acc: warploom.quantize(acc, **R)),
    "amax_pass_bf16_silu_128x256": lambda: bf16(8192, 7168, 7168, lambda acc: warploom.quantize(
        torch.nn.functional.silu(acc), **R)),
    "amax_pass_fp8_tensorwise_gelu": lambda: fp8_tensorwise(8192, 4096, 7168, lambda acc: warploom.quantize(
        torch.nn.functional.gelu(acc), **R)),
    "amax_pass_bf16_silu_col_e5m2_n1544": lambda: bf16(1000, 1544, 1024, lambda acc, col_s: warploom.quantize(
        torch.nn.functional.silu(acc) * col_s, dtype=E5, **R), col_s=t(1000, 1)),
    "amax_pass_bf16_bias_residual_n4096": lambda: bf16(
        1000, 4096, 1024, lambda acc, shift, res: warploom.quantize(acc + shift + res, **R), shift=t(4096),
        res=t(1000, 4096, dtype=BF16)),
    "amax_pass_fp8_rowwise_bias_silu_n4096": lambda: fp8_rowwise(4096, 4096, 7168, lambda acc: warploom.quantize(
        torch.nn.functional.silu(acc), **R)),
    "amax_pass_fp8_promoted_n1536": lambda: fp8_rowwise_promoted(2048, 1536, 2048, lambda acc: warploom.quantize(
        acc, **R)),
    "amax_pass_decode_bf16_m16_n7168": lambda: bf16(16, 7168, 2048, lambda acc: warploom.quantize(acc, **R)),
    # N <= 256 where rule 27's 256-wide tile cannot run (per-column scale_b or a dense operand; promoted fp8): 128 wide
    "amax_pass_fp8_rowwise_n256": lambda: fp8_rowwise(128, 256, 2048, lambda acc: warploom.quantize(acc, **R)),
    "amax_pass_fp8_rowwise_m300_n240": lambda: fp8_rowwise(300, 240, 1008, lambda acc: warploom.quantize(acc, **R)),
    "amax_pass_fp8_promoted_n256": lambda: fp8_rowwise_promoted(512, 256, 2048, lambda acc: warploom.quantize(
        acc, **R)),
    "amax_pass_bf16_residual_n256": lambda: bf16(300, 256, 512, lambda acc, res: warploom.quantize(acc + res, **R),
                                                 res=t(300, 256, dtype=BF16)),
}


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in AMAX_PASS.items()])
def test_amax_pass_cross_compiles_for_sm90a(make: Callable[[], Kernel], spill_budget: int) -> None:
    k = make()
    assert k.plan.amax_pass and k.module.amax_pass is not None
    assert k.spec.epilogue is not None
    narrow = k.spec.accumulation.value == "promoted" or bool(k.spec.epilogue.operands)
    # (128 where rule 29 narrows it: amax_pass_bn; else the rules' own tile: 64x64 at decode sizes, 128x256 large)
    assert k.plan.bn == 128 if narrow else k.plan.bn in (64, 128, 256)
    compiles_clean(k, spill_budget)
    ptx = k.compile().ptx
    # the row amax, an integer max of its bits (3.9 emits the reduction form, its result unused: red.global)
    assert re.search(r"\b(atom|red)\.global\.[a-z.]*max\.s32", ptx), "no atomic max in the PTX"
    cast = k.compile_cast()
    assert cast.spills == 0 and cast.registers > 0, cast.ptxas_log
    assert "div.rn.f32" in cast.ptx  # s and y / s, IEEE-rounded
    fp8 = "e5m2" if k.module.amax_pass.fp8.value == "e5m2" else "e4m3"
    assert f"cvt.rn.satfinite.{fp8}x2.f32" in cast.ptx  # the saturating cast
