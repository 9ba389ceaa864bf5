"""MX fp8 x fp4 on sm_100a (issue 25's leftovers): a e4m3 (or e5m2) with e8m0 scales per 32 of K, b e2m1 packed two a
byte with e8m0 scales per 32 (or the other way round), both scales in torch's blocked layout (or both row-major: seed
000's scale partition, tests/sim/test_scale_partition_sm100_sim.py); one tcgen05
kind::mxf8f6f4 MMA reads both, the fp4 operand a value a byte in shared memory (`ir.Ring.padded`). torch's scaled_mm
has no mixed MX recipe, so this is warploom's own API: `warploom.plan(a, b, scale_a, scale_b)` with the dtypes mixed.
The API and the planner, the IR, the verifier's rule, and bad input refused by name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom.blocked import to_blocked
from warploom.device import B200, H100_SXM
from warploom.dtypes import DType
from warploom.errors import DTypeError, ScaleError, ShapeError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir.verify_scales import check_tmem_scales
from warploom.spec import ScaleLayout, ScaleRecipe
from warploom.targets import verify as target_verify

M, N, K = 200, 272, 320


def _fp4(rows: int, k: int = K) -> torch.Tensor:
    return torch.zeros(rows, k // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


def _e8m0(rows: int, k: int = K) -> torch.Tensor:
    return to_blocked(torch.full((rows, k // 32), 127, dtype=torch.uint8)).view(torch.float8_e8m0fnu)


def _args(m: int = M) -> tuple[torch.Tensor, ...]:
    """a e4m3 (M, K), b e2m1 (K/2, N) (a K-major (N, K/2) weight, transposed), blocked e8m0 scales."""
    return torch.zeros(m, K, dtype=torch.float8_e4m3fn), _fp4(N).t(), _e8m0(m), _e8m0(N)


def test_mx_fp8_x_fp4_plans_one_kind_mxf8f6f4_mma_with_the_fp4_operand_padded() -> None:
    k = warploom.plan(*_args(), device=B200)
    s = k.spec
    assert (s.a_dtype, s.b_dtype, s.scale, s.scale_layout, s.k) == (DType.E4M3, DType.E2M1, ScaleRecipe.MX,
                                                                   ScaleLayout.BLOCKED, K)
    assert s.mixed_fp4 and s.fp4_b and not s.fp4_a
    assert (k.plan.bk, k.plan.bn, k.plan.swap_ab) == (128, 128, False)
    m = k.module
    # an fp8 A slot: 128 x 128 bytes; the fp4 B slot likewise, a value a byte (kind::mxf8f6f4's layout)
    assert not m.ring("a_ring").padded and m.ring("b_ring").padded
    assert m.ring("a_ring").slot_bytes == m.ring("b_ring").slot_bytes == 128 * 128
    (mma,) = {o.scales for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TcMma)}
    assert mma == ir.TmemScales("sa_tm", "sb_tm", "e4m3", "e2m1", 32)
    assert check_tmem_scales(m) == []
    assert "b_ring: B e2m1[6 x 128x128] padded (one value a byte)" in warploom.ir.printer.module(m)
    # the stage's expect-tx counts the padded bytes: A, B (padded) and both 128x4 scale chunks
    expects = {o.nbytes for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ArriveExpectTx)}
    assert expects == {2 * 128 * 128 + 2 * 128 * 4}


def test_mx_fp8_x_fp4_lowers_a_padded_fp4_descriptor() -> None:
    from warploom.runtime.cross import descriptor_blocks, signature

    k = warploom.plan(*_args(), device=B200)
    blocks = descriptor_blocks(k.module)
    assert blocks["a_desc"] == (DType.E4M3, [128, 128], (), False)
    assert blocks["b_desc"] == (DType.E2M1, [128, 64], (), True)  # (the packed bytes' box; Triton pads in smem)
    assert "fp4_padded=True" in signature(k.module, k.gluon)["b_desc"]
    src = k.source
    assert '"e4m3", "e2m1"' in src
    # K in bytes for the packed fp4 B (Triton doubles a padded descriptor's coordinate), in values for the fp8 A
    assert "(b_desc, [off_n, kk * (BK // 2)]," in src and "(a_desc, [off_m, kk * BK]," in src
    assert "gl.allocate_shared_memory(b_desc.dtype, [6, 128, 64], b_desc.layout)" in src
    assert "6 x (128, 128) e2m1 padded, a value a byte (fp4_padded)" in src


def test_decode_mx_fp8_x_fp4_runs_swapped_with_the_fp4_weight_as_a() -> None:
    k = warploom.plan(*_args(m=16), device=B200)
    assert (k.plan.swap_ab, k.plan.bn) == (True, 16)
    m = k.module
    assert (m.spec.a_dtype, m.spec.b_dtype) == (DType.E2M1, DType.E4M3)
    assert m.ring("a_ring").padded and not m.ring("b_ring").padded
    assert check_tmem_scales(m) == []


def test_the_verifier_names_a_missing_or_stray_padding() -> None:
    m = warploom.plan(*_args(), device=B200).module
    unpadded = replace(m, rings=tuple(replace(r, padded=False) for r in m.rings))
    assert any("ring b_ring is not padded; the fp4 operand of MX fp8 x fp4" in e for e in check_tmem_scales(unpadded))
    with pytest.raises(warploom.errors.VerificationError, match="b_ring is not padded"):
        target_verify(unpadded, "test", B200)  # (sm_100a's own rules, handed down by its declaration)
    fp4x4 = warploom.plan(_fp4(M), _fp4(N).t(), _e8m0(M), _e8m0(N), device=B200).module
    stray = replace(fp4x4, rings=tuple(replace(r, padded=r.name == "a_ring") for r in fp4x4.rings))
    assert any("a_ring is padded; only MX fp8 x fp4's" in e for e in check_tmem_scales(stray))
    with pytest.raises(ValueError, match="only e2m1 slots are padded"):
        replace(m.ring("a_ring"), padded=True)


def test_bad_mixed_input_names_the_argument() -> None:
    a, b, sa, sb = _args()
    with pytest.raises(UnsupportedError, match="no fp4 MMA.*device=B200"):
        warploom.plan(a, b, sa, sb, device=H100_SXM)
    rows = torch.full((M, K // 32), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    cols = torch.full((N, K // 32), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    # row-major scales take seed 000's scale partition (tests/sim/test_scale_partition_sm100_sim.py)
    assert warploom.plan(a, b, rows, cols, device=B200).plan.scale_partition
    with pytest.raises(ScaleError, match="scale_b: expected the layout of scale_a .row_major., got blocked"):
        warploom.plan(a, b, rows, sb, device=B200)
    with pytest.raises(ScaleError, match=r"scale_b: expected torch.float8_e8m0fnu.*\(MX fp8 x fp4\)"):
        warploom.plan(a, b, sa, sb.view(torch.uint8).view(torch.float8_e4m3fn), device=B200)
    with pytest.raises(ShapeError, match=r"b: expected shape \(160, N\) to match a's K = 320"):
        warploom.plan(a, _fp4(N, K + 32).t(), sa, sb, device=B200)
    with pytest.raises(DTypeError, match="b: expected torch.float4_e2m1fn_x2 like a \\(NVFP4 x NVFP4\\)"):
        g = torch.ones(1)
        s16 = to_blocked(torch.ones(M, K // 16).to(torch.float8_e4m3fn))
        warploom.plan(_fp4(M), torch.zeros(N, K, dtype=torch.float8_e4m3fn).t(), [s16, g], [s16, g], device=B200)
    with pytest.raises(ValueError, match="MX fp8 x fp4 .* takes MX scales"):
        replace(warploom.plan(*_args(), device=B200).spec, scale=ScaleRecipe.NVFP4)
