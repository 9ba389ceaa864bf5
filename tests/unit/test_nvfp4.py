"""NVFP4 on sm_100a (issue 25 item 1's recipe): e2m1 data two a byte, e4m3 block scales per 16 of K in torch's
blocked layout and a tensorwise fp32 global scale per operand, passed as torch.nn.functional.scaled_mm takes them
(scale_a=[to_blocked(block scales), global scale], recipe [BlockWise1x16, TensorWise]). The API and the planner, the
IR the passes build (e4m3 scale rings and buffers, a scale per 16 of K, the global scales in the epilogue), the
verifier's rules, and bad input refused by name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom.blocked import to_blocked
from warploom.device import B200, H100_SXM
from warploom.dtypes import DType
from warploom.errors import ScaleError, ShapeError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir.verify_scales import check_tmem_scales
from warploom.spec import NVFP4_BLOCK, ScaleLayout, ScaleRecipe

M, N, K = 200, 272, 320


def _args(k: int = K) -> tuple[torch.Tensor, ...]:
    a = torch.zeros(M, k // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.zeros(N, k // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).t()
    sa = to_blocked(torch.ones(M, k // NVFP4_BLOCK).to(torch.float8_e4m3fn))
    sb = to_blocked(torch.ones(N, k // NVFP4_BLOCK).to(torch.float8_e4m3fn))
    return a, b, sa, sb


def _global(s: float = 1.0) -> torch.Tensor:
    return torch.tensor([s], dtype=torch.float32)


def _kernel() -> warploom.Kernel:
    a, b, sa, sb = _args()
    return warploom.plan(a, b, [sa, _global()], [sb, _global(2.0)], device=B200)


def test_nvfp4_plans_e4m3_scales_per_16_and_a_global_epilogue_scale() -> None:
    k = _kernel()
    s = k.spec
    assert (s.scale, s.scale_layout, s.is_fp4, s.k) == (ScaleRecipe.NVFP4, ScaleLayout.BLOCKED, True, K)
    # a k-block of 64: one 128x4 chunk of e4m3 scales (4 x 16 of K), one kind::mxf4nvf4 MMA
    assert k.plan.block_scaled and k.plan.bk == 64
    m = k.module
    assert {m.ring(r).dtype for r in ("sa_ring", "sb_ring")} == {DType.E4M3}
    assert {(sb.dtype, sb.cols) for sb in m.tmem_scales} == {(DType.E4M3, 4)}
    mmas = {o.scales for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TcMma)}
    assert mmas == {ir.TmemScales("sa_tm", "sb_tm", "e2m1", "e2m1", 16)}
    steps = {st for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) for st in o.steps}
    assert steps == {ir.EpilogueStep.SCALE_GLOBAL}
    assert check_tmem_scales(m) == []
    assert "a scale per 16" in warploom.ir.printer.module(m) and "e4m3[128x4] in tensor memory" in \
        warploom.ir.printer.module(m)


def test_nvfp4_lowers_e4m3_tensor_memory_scales_and_the_global_scales() -> None:
    src = _kernel().source
    assert "allocate_tensor_memory(gl.float8e4nv, [128, 4], TensorMemoryScalesLayout())" in src
    assert 'tcgen05_mma_scaled(' in src and '"e2m1", "e2m1"' in src
    assert "gl.load(global_a_ptr) * gl.load(global_b_ptr)" in src


def test_verifier_names_wrong_nvfp4_scale_dtype_and_vector() -> None:
    m = _kernel().module
    rings = tuple(replace(r, dtype=DType.E8M0) if r.byte_scales else r for r in m.rings)
    errs = check_tmem_scales(replace(m, rings=rings))
    assert any("ring sa_ring copied into tensor memory holds e8m0; nvfp4 scales are e4m3" in e for e in errs), errs

    def per32(p: ir.Partition) -> ir.Partition:
        def fix(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
            return tuple(replace(s, body=fix(s.body)) if isinstance(s, ir.Loop) else
                         replace(s, scales=replace(s.scales, vec=32))
                         if isinstance(s, ir.TcMma) and s.scales else s for s in body)
        return replace(p, body=fix(p.body))

    errs = check_tmem_scales(replace(m, partitions=tuple(map(per32, m.partitions))))
    assert any("applies a scale per 32 of K; nvfp4 scales cover 16" in e for e in errs), errs
    with pytest.raises(ValueError, match="per 16 with e2m1 operands"):
        ir.TmemScales("a", "b", "e4m3", "e4m3", 16)
    with pytest.raises(ValueError, match="e8m0 \\(MX\\) or e4m3 \\(NVFP4\\)"):
        ir.ScaleBuffer("s", ir.Tensor.SCALE_A, 128, 4, 256, DType.FP32)


def test_bad_nvfp4_input_names_the_argument() -> None:
    a, b, sa, sb = _args()
    g = _global()
    with pytest.raises(UnsupportedError, match="no fp4 MMA: MX fp4 and NVFP4.*nvfp4 scales.*device=B200"):
        warploom.plan(a, b, [sa, g], [sb, g], device=H100_SXM)
    with pytest.raises(ScaleError, match=r"scale_a\[1\]: expected NVFP4's pair.*global scale.*got the block "
                                         r"scales alone.*scale_a=\[to_blocked"):
        warploom.plan(a, b, sa, sb, device=B200)  # no global scales
    with pytest.raises(ScaleError, match=r"scale_b\[1\]: expected NVFP4's pair"):
        warploom.plan(a, b, [sa, g], sb, device=B200)
    e8m0 = sb.view(torch.uint8).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match="scale_b: expected torch.float8_e4m3fn block scales, one per 16 of K.*"
                                         "got dtype torch.float8_e8m0fnu"):
        warploom.plan(a, b, [sa, g], [e8m0, g], device=B200)  # e8m0 where e4m3 is required
    mx_a = to_blocked(torch.full((M, K // 32), 127, dtype=torch.uint8)).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match="scale_a: expected torch.float8_e4m3fn block scales"):
        warploom.plan(a, b, [mx_a, g], [sb, g], device=B200)  # MX fp4's scales with a global scale
    with pytest.raises(ScaleError, match="scale_b: expected torch.float8_e8m0fnu.*MX fp4.*got dtype "
                                         "torch.float8_e4m3fn"):
        warploom.plan(a, b, mx_a, sb, device=B200)  # e4m3 where MX's e8m0 is required
    per32 = to_blocked(torch.ones(M, K // 32).to(torch.float8_e4m3fn))
    with pytest.raises(ScaleError, match=r"scale_a: expected NVFP4 scales per 16 of K.*\(200, 20\).*got shape "
                                         r"\(3072,\).*blocked size of scales per 32"):
        warploom.plan(a, b, [per32, g], [sb, g], device=B200)  # per 32 where per 16 is required
    with pytest.raises(ScaleError, match=r"scale_a\[1\]: expected a global scale of one torch.float32 element"):
        warploom.plan(a, b, [sa, g.double()], [sb, g], device=B200)
    with pytest.raises(ScaleError, match=r"scale_a: expected a tensor, or NVFP4's \[block scales, global scale\]"):
        warploom.plan(a, b, [sa, g, g], [sb, g], device=B200)
    a2, b2, sa2, sb2 = _args(K - 16)  # K = 304: 152 bytes a row, not whole 16-byte TMA rows
    with pytest.raises(ShapeError, match=r"a: expected fp4 data with K a multiple of 32.*a.shape\[1\] = 152"):
        warploom.plan(a2, b2, [sa2, g], [sb2, g], device=B200)
    e4a, e4b = torch.zeros(M, K, dtype=torch.float8_e4m3fn), torch.zeros(N, K, dtype=torch.float8_e4m3fn).t()
    with pytest.raises(ScaleError, match=r"scale_a: expected one scale tensor \(a global scale goes with NVFP4's "
                                         r"fp4 data only\)"):
        warploom.plan(e4a, e4b, [g, g], g, device=B200)


def test_spec_refuses_nvfp4_without_fp4() -> None:
    """Row-major NVFP4 scales are seed 000's (tests/sim/test_scale_partition_nvfp4_sm100_sim.py)."""
    spec = _kernel().spec
    assert replace(spec, scale_layout=ScaleLayout.ROW_MAJOR).scale is ScaleRecipe.NVFP4
    with pytest.raises(ValueError, match="NVFP4 scales go with e2m1 inputs"):
        replace(spec, a_dtype=DType.E4M3, b_dtype=DType.E4M3)


def test_verification_error_is_raised_for_a_planted_bad_bk() -> None:
    from warploom.ir.verify import check

    m = _kernel().module
    with pytest.raises(VerificationError, match="nvfp4 scales take a k-block of 64 or 128 elements of K: bk=256"):
        check(replace(m, tiling=replace(m.tiling, bk=256)), "planted")
    # a k-block of 128 whose stage brings one 128x4 chunk of scales (64 of K): the second chunk is never copied
    errs = check_tmem_scales(replace(m, tiling=replace(m.tiling, bk=128)))
    assert any("ring sa_ring holds 4 scales a row per k-block of 128; nvfp4 takes one per 16 of K (8)" in e
               for e in errs), errs
    assert any("scale buffer sa_tm holds 4 scales a row per k-block of 128" in e for e in errs), errs


def test_nvfp4_with_a_fused_epilogue_is_refused() -> None:
    """The global scales are the plain kernel's epilogue step; a fused graph would drop them, so it is refused."""
    a, b, sa, sb = _args()
    with pytest.raises(UnsupportedError, match="NVFP4 with a fused epilogue.*Fix: drop the epilogue"):
        warploom.plan(a, b, [sa, _global()], [sb, _global()], epilogue=lambda acc: torch.relu(acc), device=B200)


@pytest.mark.parametrize("m,tokens", [(1, 16), (16, 16), (17, 32), (32, 32)])
def test_decode_nvfp4_plans_swapped(m: int, tokens: int) -> None:
    """Rule 18 on sm_100a with block scales: M <= 32 runs C^T = B^T A^T on 128 x 16 or 32 tiles; the swapped
    module's A is the weight with scale_b's blocks, its B the tokens with scale_a's, one 128-row block each."""
    n, k = 4096, 1024
    a = torch.zeros(m, k // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.zeros(n, k // 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).t()
    sa = to_blocked(torch.ones(m, k // NVFP4_BLOCK).to(torch.float8_e4m3fn))
    sb = to_blocked(torch.ones(n, k // NVFP4_BLOCK).to(torch.float8_e4m3fn))
    kern = warploom.plan(a, b, [sa, _global()], [sb, _global(2.0)], device=B200)
    assert (kern.plan.swap_ab, kern.plan.bm, kern.plan.bn, kern.plan.bk) == (True, 128, tokens, 128)
    mod = kern.module
    assert (mod.spec.m, mod.spec.n) == (n, m) and mod.tiling.swap_ab
    assert [(r.tensor, r.rows) for r in mod.rings if r.byte_scales] == [(ir.Tensor.SCALE_A, 128),
                                                                        (ir.Tensor.SCALE_B, 128)]
    assert check_tmem_scales(mod) == []
    # the global scales commute: still one epilogue step, their product
    steps = {st for p in mod.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) for st in o.steps}
    assert steps == {ir.EpilogueStep.SCALE_GLOBAL}


def test_a_narrow_blocked_tile_over_a_wider_n_takes_the_scale_partition() -> None:
    """A 16-, 32- or 64-wide tile reads its scales from the first rows of a 128-row block: seed 001's tcgen05.cp
    serves only the tile at N = 0, so a forced narrow tile over a wider N takes seed 000's scale partition, which
    loads each tile's own rows from the blocked layout (`scale_partition_rule`); forcing seed 001 there is refused
    by name, and so are other widths."""
    spec = _kernel().spec  # (200 x 272 x 320)
    for bn in (32, 64):
        plan = warploom.planner.plan_schedule(spec, B200, bn=bn)
        assert plan.scale_partition and plan.bn == bn
    with pytest.raises(UnsupportedError, match="scale_partition=False .* at bn=64: a 64-wide tile over N=272"):
        warploom.planner.plan_schedule(spec, B200, bn=64, scale_partition=False)
    with pytest.raises(UnsupportedError, match=r"bn in \(16, 32, 64, 128, 256\).*bn=96"):
        warploom.planner.plan_schedule(spec, B200, bn=96)
    assert not warploom.planner.plan_schedule(replace(spec, n=64), B200, bn=64).scale_partition  # (N fits one tile)
    swapped = warploom.planner.plan_schedule(replace(spec, m=40), B200, bn=16, swap_ab=True)
    assert swapped.swap_ab and swapped.scale_partition  # (40 tokens over 16-wide tiles)


def test_only_blocked_block_scales_swap() -> None:
    """MX scales row-major (on sm_90a) and fp32 blockwise ones keep their sides; blocked MX and NVFP4 swap, and so do
    row-major ones on sm_100a (`tmem_scales`: its scale partition reads both operands' rows alike)."""
    spec = _kernel().spec
    assert spec.swap_problems() == []
    assert replace(spec, m=16).swapped().scale_layout is ScaleLayout.BLOCKED
    mx_rows = replace(spec, a_dtype=DType.E4M3, b_dtype=DType.E4M3, scale=ScaleRecipe.MX,
                      scale_layout=ScaleLayout.ROW_MAJOR)
    assert any("blocked layout" in p for p in mx_rows.swap_problems())
    # sm_100a's scale partition reads row-major scales of A and of B alike: they trade sides there
    assert mx_rows.swap_problems(tmem_scales=True) == []
    assert mx_rows.swapped(tmem_scales=True).scale_layout is ScaleLayout.ROW_MAJOR
    # sm_90a refuses blocked scales before rule 18 looks at them
    mx_blocked = replace(mx_rows, m=16, scale_layout=ScaleLayout.BLOCKED)
    with pytest.raises(UnsupportedError, match="blocked layout is sm_100a's"):
        warploom.planner.plan_schedule(mx_blocked, H100_SXM)


@pytest.mark.parametrize("k,bk", [(320, 64), (384, 128), (1056, 64), (4096, 128)])
def test_nvfp4_k_block_is_128_where_k_is_a_multiple_of_128(k: int, bk: int) -> None:
    """Planner rule 19: NVFP4 plans 128-deep k-blocks (two 128x4 chunks of e4m3 scales a row block, tensor-memory
    buffers of 8 columns, one scaled MMA over them) where K is a multiple of 128, else 64 (one chunk)."""
    a, b, sa, sb = _args(k)
    kern = warploom.plan(a, b, [sa, _global()], [sb, _global()], device=B200)
    assert kern.plan.bk == bk
    m = kern.module
    chunks = bk // 64
    assert {(r.rows, r.cols, r.slot_bytes) for r in m.rings if r.byte_scales} == {(128, 4 * chunks, 512 * chunks)}
    assert {(sb.cols, sb.columns) for sb in m.tmem_scales} == {(4 * chunks, 4 * chunks)}
    assert check_tmem_scales(m) == []
    # one copy per scale ring and one scaled MMA a k-block, whatever the depth (Triton splits them per chunk)
    ops = [o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, (ir.ScaleCopy, ir.TcMma))]
    assert [type(o).__name__ for o in ops] == ["ScaleCopy", "ScaleCopy", "TcMma"]
    src = kern.source
    coord = "kk * 2" if chunks == 2 else "kk"
    assert f"tma.async_copy_global_to_shared(scale_a_desc, [off_m // 128, {coord}, 0, 0]" in src
    assert f"reshape((1, {chunks}, 32, 4, 4)).permute((0, 3, 2, 1, 4)).reshape((128, {4 * chunks}))" in src
    assert f"allocate_tensor_memory(gl.float8e4nv, [128, {4 * chunks}], TensorMemoryScalesLayout())" in src


def test_two_chunk_scale_buffers_are_nvfp4s_only() -> None:
    with pytest.raises(ValueError, match=r"or two of NVFP4's e4m3, got \(128, 8\) e8m0"):
        ir.ScaleBuffer("sa_tm", ir.Tensor.SCALE_A, 128, 8, 256, DType.E8M0)
    with pytest.raises(ValueError, match=r"got \(128, 12\) e4m3"):
        ir.ScaleBuffer("sa_tm", ir.Tensor.SCALE_A, 128, 12, 256, DType.E4M3)
    assert ir.ScaleBuffer("sa_tm", ir.Tensor.SCALE_A, 256, 8, 256, DType.E4M3).columns == 16
