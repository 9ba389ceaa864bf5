"""MX fp8 x fp4 on sm_100a in the simulator: one operand e4m3 / e5m2, the other e2m1 packed two a byte, e8m0 scales
per 32 of K for both in torch's blocked layout, one kind::mxf8f6f4 MMA a 32-deep slice; against the dequantized fp32
reference (warploom.reference) at M, N and K that are not tile multiples, both ways round, and swapped at decode
sizes (rule 18: the fp4 weight becomes the module's A)."""

from __future__ import annotations

import pytest
import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleLayout, ScaleRecipe
from warploom.device import B200
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import simulate

E2M1, E4M3, E5M2 = DType.E2M1, DType.E4M3, DType.E5M2


def _spec(m: int, n: int, k: int, a: DType, b: DType) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    scale_layout=ScaleLayout.BLOCKED)


@pytest.mark.parametrize("m,n,k,a,b,swapped", [
    (300, 272, 1056, E4M3, E2M1, False),  # ragged M and N; 8.25 k-blocks of 128
    (129, 528, 544, E5M2, E2M1, False),  # a row past one tile; e5m2 activations
    (200, 144, 320, E2M1, E4M3, False),  # the fp4 operand as A
    (16, 208, 1056, E4M3, E2M1, True),  # decode: C^T = B^T A^T, the fp4 weight as the module's A
    (27, 336, 320, E4M3, E2M1, True),
])
def test_mx_fp8_x_fp4_matches_the_dequantized_reference(m: int, n: int, k: int, a: DType, b: DType,
                                                        swapped: bool) -> None:
    spec = _spec(m, n, k, a, b)
    plan = plan_schedule(spec, B200)
    assert plan.swap_ab is swapped
    mod = build(spec, B200, plan).module
    fp4_ring = "a_ring" if (b is E2M1) == swapped else "b_ring"
    assert mod.ring(fp4_ring).padded and mod.ring(fp4_ring).dtype is E2M1
    x = make_inputs(spec, m, n, k, seed=k + m)
    assert (x.a.dtype, x.b.dtype) == (a.torch, b.torch)
    sa, sb = x.scales()
    res = simulate(mod, x.a, x.b, sa, sb, seed=2)
    assert not res.findings, res.findings
    ref = reference(x)
    torch.testing.assert_close(res.output.float(), ref.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
