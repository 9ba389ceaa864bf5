"""Compile-only tier for the one-GEMM gate/up form (``silu_mul_interleaved(acc, block=B)`` in a fused epilogue, planner
rule 28: BN = 2B).

Each kernel pairs block i of the tile's left half (gate) with block i of its right half (up) in registers and stores
a half-width (BM, BN / 2) result through half-width staging buffers. Cross-compiled for sm_90a on the CPU, it must keep
its MMAs on the async tensor-core path, unserialized, within the H100's shared memory, and spill nothing (conftest.py's
budget: 0 unless a known Triton finding says otherwise): bf16 at blocks 128 (rule 9's 128x256 in 8 blocks of 32) and
64, with a per-row operand, and fp8 rowwise (scale_b read on both sides of each pair), fast and promoted; and the
M-grouped form (bf16 and fp8 rowwise), whose tiles crossing an expert's last row store masked, N / 2 columns a row.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_compile_quantize import compiles_clean  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, Accumulation, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.fused import fused_spec
from warploom.kernel import Kernel, build

BF16, FP32, E4 = torch.bfloat16, torch.float32, torch.float8_e4m3fn


def t(*shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def silu_mul(block: int) -> Callable[..., Any]:
    return lambda acc: warploom.silu_mul_interleaved(acc, block=block)


def bf16(m: int, n: int, k: int, fn: Callable[..., Any], **ops: torch.Tensor) -> Kernel:
    return warploom.plan(t(m, k, dtype=BF16), t(n, k, dtype=BF16).t(), epilogue=fn, **ops)


def fp8_rowwise(m: int, n: int, k: int, block: int, fast: bool) -> Kernel:
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), t(m, 1), t(1, n), out_dtype=BF16, use_fast_accum=fast,
                         epilogue=silu_mul(block))


def grouped(m: int, n: int, k: int, block: int, fp8: bool = False) -> Kernel:
    """An M-grouped (offs) gate/up GEMM of 8 experts, fused as grouped_mm / scaled_grouped_mm fuse it (rowwise
    scales in front: scale_b one (1, N) row per expert)."""
    spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    accumulation=Accumulation.NATIVE, grouping=Grouping.OFFSETS, groups=8) if fp8 else \
        GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=8)
    scales = {"scale_a": torch.empty(m, 1), "scale_b": torch.empty(8, 1, n)} if fp8 else {}
    fs, _ = fused_spec(spec, torch.empty(m, k, dtype=BF16), silu_mul(block), {}, **scales)
    return build(fs, H100_SXM)


CASES: dict[str, Callable[[], Kernel]] = {
    # DeepSeek-V3's expert FFN as a dense layer: I = 2048, K = 7168 (N = 2I = 4096)
    "bf16_block128": lambda: bf16(300, 4096, 7168, silu_mul(128)),
    "bf16_block64": lambda: bf16(300, 2816, 1024, silu_mul(64)),
    "bf16_block128_row_scale": lambda: bf16(
        77, 768, 512, lambda acc, s: warploom.silu_mul_interleaved(acc, block=128) * s, s=t(77, 1)),
    "fp8_rowwise_fast_block128": lambda: fp8_rowwise(515, 4096, 1024, 128, True),
    "fp8_rowwise_promoted_block64": lambda: fp8_rowwise(515, 2816, 1024, 64, False),
    # DeepSeek-V3's routed experts, M-grouped: stores clipped at each expert's last row (half-width masked stores)
    "grouped_bf16_block128": lambda: grouped(4096, 4096, 7168, 128),
    "grouped_fp8_rowwise_block128": lambda: grouped(4096, 4096, 7168, 128, fp8=True),
}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated sources go to a private directory, not the user's warploom cache."""
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("make", [pytest.param(m, id=i) for i, m in CASES.items()])
def test_gate_up_epilogue_cross_compiles_for_sm90a(make: Callable[[], Kernel], spill_budget: int) -> None:
    k = make()
    g = k.spec.epilogue
    assert g is not None and g.gate_up() is not None and k.plan.bn == 2 * g.gate_up()
    src = k.source
    assert "ep_up = gl.convert_layout(" in src and "off_n // 2" in src
    if k.spec.grouped:  # the masked store across an expert's end: C's rows are N / 2 long
        assert "st_rows.to(gl.int64)[:, None] * (N // 2) + st_cols[None, :]" in src
    compiles_clean(k, spill_budget)
