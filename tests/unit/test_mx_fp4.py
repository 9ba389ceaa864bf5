"""MX fp4 (e2m1 packed two a byte as torch.float4_e2m1fn_x2, e8m0 scales per 32 of K) on sm_100a: the packing both
ways, the API and the planner, and bad input refused by name."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import fp4
from warploom.blocked import to_blocked
from warploom.device import B200, H100_SXM
from warploom.errors import DTypeError, ScaleError, ShapeError, UnsupportedError

M, N, K = 200, 272, 288


def _args() -> tuple[torch.Tensor, ...]:
    a = torch.zeros(M, K // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.zeros(N, K // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).t()
    sa = to_blocked(torch.full((M, K // 32), 127, dtype=torch.uint8)).view(torch.float8_e8m0fnu)
    sb = to_blocked(torch.full((N, K // 32), 127, dtype=torch.uint8)).view(torch.float8_e8m0fnu)
    return a, b, sa, sb


def test_pack_and_unpack_are_inverse() -> None:
    v = torch.tensor([[0.5, -6.0, 3.0, 0.0], [1.5, 2.0, -0.5, 4.0]])
    p = fp4.pack(v)
    assert p.dtype == torch.float4_e2m1fn_x2 and p.shape == (2, 2)
    assert p.view(torch.uint8)[0, 0] == 0x1 | 0xF << 4  # element 0 in the low nibble: 0.5 = 0b0001, -6 = 0b1111
    assert torch.equal(fp4.unpack(p), v)
    codes = torch.arange(256, dtype=torch.uint8).reshape(16, 16).view(torch.float4_e2m1fn_x2)
    assert torch.equal(fp4.unpack(fp4.pack(fp4.unpack(codes))), fp4.unpack(codes))  # (-0.0 packs as +0.0)
    with pytest.raises(ValueError, match="one of e2m1's"):
        fp4.pack(torch.tensor([[0.25, 1.0]]))


def test_mx_fp4_plans_for_sm100a_with_a_block_scaled_mma() -> None:
    k = warploom.plan(*_args(), device=B200)
    assert k.spec.is_fp4 and k.spec.k == K and k.plan.block_scaled and k.plan.bk == 128
    (mma,) = {o.scales for p in k.module.partitions for o, _ in warploom.ir.nodes.walk(p.body)
              if isinstance(o, warploom.ir.nodes.TcMma)}
    assert mma is not None and (mma.a_type, mma.b_type) == ("e2m1", "e2m1")
    # an A slot is 128 rows of 64 bytes (128 values of K)
    assert k.module.ring("a_ring").slot_bytes == 128 * 64


def test_bad_fp4_input_names_the_argument() -> None:
    a, b, sa, sb = _args()
    with pytest.raises(UnsupportedError, match="no fp4 MMA.*device=B200"):
        warploom.plan(a, b, sa, sb, device=H100_SXM)
    with pytest.raises(ShapeError, match=r"a: expected fp4 data with K a multiple of 32.*a.shape\[1\] = 143"):
        warploom.plan(a[:, :-1], b[:-1], sa, sb, device=B200)  # an odd number of bytes of K
    with pytest.raises(ScaleError, match="scale_a: expected torch.float8_e8m0fnu.*float32.*NVFP4"):
        warploom.plan(a, b, sa.float(), sb, device=B200)
    with pytest.raises(ScaleError, match="scale_b.*got dtype torch.float8_e4m3fn"):
        warploom.plan(a, b, sa, sb.view(torch.uint8).view(torch.float8_e4m3fn), device=B200)
    per16 = to_blocked(torch.full((M, K // 16), 127, dtype=torch.uint8)).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match=r"scale_a: expected MX scales of shape \(200, 9\)"):
        warploom.plan(a, b, per16, sb, device=B200)  # per 16 where per 32 is required
    # fp4 x fp8 is MX fp8 x fp4 (tests/unit/test_mx_mixed.py), whose fp8 b has K rows, not K/2
    e4 = torch.zeros(N, K, dtype=torch.float8_e4m3fn).t()
    with pytest.raises(ShapeError, match=r"b: expected shape \(288, N\) to match a's K = 288, got shape \(144, 272\)"):
        warploom.plan(a, e4[: K // 2], sa, sb, device=B200)
    assert warploom.plan(a, e4, sa, sb, device=B200).spec.mixed_fp4
    with pytest.raises(DTypeError, match=r"b: expected dtype in \(e4m3, e5m2, e2m1\), got torch.bfloat16"):
        warploom.plan(a, e4.to(torch.bfloat16), sa, sb, device=B200)

