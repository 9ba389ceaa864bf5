"""Compile-only tier for fp8 outputs (issue 27 item 3): scaled_mm with out_dtype e4m3 / e5m2 and scale_result
cross-compiles for sm_90a with its MMAs as QGMMA, no spills, and a saturating conversion to the fp8 type
(cvt.rn.satfinite in the PTX, after the NaN-keeping clamp epilogue/gluon.py emits).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import warploom
from warploom.kernel import Kernel

E4, E5, BF16, FP16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.float16
SMEM_LIMIT = 232448  # H100 opt-in shared memory per block


def t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def plan(recipe: str, out: torch.dtype, m: int, n: int, k: int, bias: torch.dtype | None = None,
         fast: bool = True) -> Kernel:
    kb, nb = -(-k // 128), -(-n // 128)
    scales = {"tensorwise": (t(), t()), "rowwise": (t(m, 1), t(1, n)),
              "blockwise": (t(kb, m).t(), t(kb, nb))}[recipe]
    return warploom.plan(t(m, k).to(E4), t(n, k).to(E4).t(), *scales, out_dtype=out, scale_result=t(),
                         bias=None if bias is None else t(n, dtype=bias), use_fast_accum=fast)


CASES = [
    pytest.param(lambda: plan("tensorwise", E4, 4096, 4096, 4096), id="tensorwise-e4m3-4096"),
    pytest.param(lambda: plan("tensorwise", E5, 300, 528, 256, BF16), id="tensorwise-e5m2-bias-300x528x256"),
    pytest.param(lambda: plan("rowwise", E4, 1000, 272, 384, FP16, fast=False), id="rowwise-e4m3-promoted-bias"),
    pytest.param(lambda: plan("blockwise", E4, 515, 400, 1152), id="blockwise-e4m3-515x400x1152"),
]


@pytest.fixture(scope="module", autouse=True)
def private_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Generated sources go to a private directory, not the user's warploom cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARPLOOM_CACHE_DIR", str(tmp_path_factory.mktemp("warploom-cache")))
        yield


@pytest.mark.parametrize("make", CASES)
def test_fp8_output_kernel_cross_compiles_for_sm90a(make: object, spill_budget: int) -> None:
    k = make()  # type: ignore[operator]
    assert k.spec.out_dtype.is_fp8 and k.spec.epilogue is not None
    c = k.compile()
    s = c.summary()
    assert c.target == "sm_90a"
    assert c.count("QGMMA") > 0 and c.count("HGMMA") == 0, s
    assert c.spills <= spill_budget, f"{k.module.name} spills {c.spills} bytes: {s}\n{c.ptxas_log}"
    assert 0 < c.smem_bytes <= SMEM_LIMIT, s
    assert not c.wgmma_serialized, c.ptxas_log
    fmt = "e4m3" if k.spec.out_dtype.value == "e4m3" else "e5m2"
    # The store's conversion saturates (NaN stays NaN), as cuBLAS's fp8 output of torch._scaled_mm does.
    assert f"cvt.rn.satfinite.{fmt}x2.f32" in c.ptx
    assert "scale_result" in k.source
