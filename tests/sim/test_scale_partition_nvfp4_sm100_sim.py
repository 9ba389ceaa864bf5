"""sm_100a seed 000 with NVFP4: e2m1 data, row-major e4m3 scales per 16 of K (any strides) through the scale
partition's two tensor-memory buffers per operand, and the fp32 global scales in the epilogue (passes/
blackwell_scales.py). A 128-deep k-block's (128, 8) buffers feed two 64-deep kind::mxf4nvf4 MMAs, columns 0..3 and
4..7 (`TmemScales.k_cols`); a 64-deep one's (128, 4) one. Numerics against a dequantized fp32 reference on odd
shapes, a planted bug (the second MMA reading the first half's columns) seen by the numerics and named by the
verifier, and bad input refused by name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.blocked import to_blocked
from warploom.device import B200
from warploom.errors import ScaleError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import printer
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.sim import simulate
from warploom.spec import ScaleLayout
from warploom.targets import verify as target_verify

F4 = DType.E2M1
GA, GB = 0.75, 1.25  # the global scales


def _spec(m: int, n: int, k: int) -> GemmSpec:
    return GemmSpec(m, n, k, F4, F4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.NVFP4, Accumulation.PROMOTED)


def _module(m: int, n: int, k: int, bn: int | None = None) -> ir.Module:
    spec = _spec(m, n, k)
    return build(spec, B200, plan_schedule(spec, B200, bn=bn)).module


def _inputs(m: int, n: int, k: int, seed: int = 0, strided: bool = False) -> tuple[torch.Tensor, ...]:
    """Every e2m1 code, packed; e4m3 scales 2**-3 .. 2**3 times 0.5 .. 1.5, row-major (M, K/16) and (N, K/16);
    `strided`: views with a row stride past K/16 and a column stride of 2."""
    g = torch.Generator().manual_seed(seed)

    def data(rows: int) -> torch.Tensor:
        return torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)

    def scales(rows: int) -> torch.Tensor:
        cols = k // 16 * (2 if strided else 1) + (3 if strided else 0)
        s = ((torch.rand(rows, cols, generator=g) + 0.5) * 2.0 ** torch.randint(-3, 4, (rows, cols), generator=g))
        s = s.to(torch.float8_e4m3fn)
        return s[:, :k // 8:2] if strided else s

    x, w = data(m), data(n)
    return x, w.t(), scales(m), scales(n)


def _reference(x: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    da, db = dequantized(x, w, sa, sb)
    return ((da @ db) * (GA * GB)).to(torch.bfloat16).float()


def _run(mod: ir.Module, x: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
         seed: int = 3) -> warploom.sim.SimResult:
    return simulate(mod, x, w, [sa, torch.tensor([GA])], [sb, torch.tensor([GB])], seed=seed)


def test_row_major_nvfp4_takes_the_scale_partition() -> None:
    mod = _module(300, 200, 1152)  # K a multiple of 128: BK 128
    assert mod.tiling.bk == 128 and not mod.tmem_scales
    assert {(r.name, r.dtype, r.rows, r.cols) for r in mod.rings if r.tmem} == {
        ("sa_tm", DType.E4M3, 128, 8), ("sb_tm", DType.E4M3, 128, 8)}
    assert mod.tmem_columns == 2 * 128 + 2 * 2 * 8
    mmas = {o.scales for p in mod.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.TcMma)}
    assert {(s.vec, s.k_cols) for s in mmas if s is not None} == {(16, (0, 4))}
    steps = {st for p in mod.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.Epilogue) for st in o.steps}
    assert steps == {ir.EpilogueStep.SCALE_GLOBAL}
    # a thread holds 8 e4m3 scales a row: a budget of 104 (96 spilled under Triton 3.9, blackwell_scales.py)
    assert next(p.regs for p in mod.partitions if p.role is ir.Role.SCALES) == 104
    assert "columns from 0, 4" in printer.module(mod)
    narrow = _module(150, 136, 320)  # K = 320: BK 64, one MMA a k-block
    assert narrow.tiling.bk == 64 and {r.cols for r in narrow.rings if r.tmem} == {4}
    assert next(p.regs for p in narrow.partitions if p.role is ir.Role.SCALES) == 64


@pytest.mark.parametrize("m,n,k,bn,strided", [
    (300, 200, 1152, None, False),  # BK 128 (two MMAs a k-block), ragged M and N
    (129, 200, 1408, None, True),   # strided scale views
    (150, 136, 320, None, False),   # BK 64 (K not a multiple of 128): a last k-block of one 64-deep MMA
    (77, 200, 1024, 64, True),      # a 64-wide tile over N = 200: each tile's own rows of scale_b
    (45, 40, 576, 32, False),       # a 32-wide tile, N past one tile, BK 64
])
def test_numerics_match_dequantized_reference(m: int, n: int, k: int, bn: int | None, strided: bool) -> None:
    mod = _module(m, n, k, bn)
    x, w, sa, sb = _inputs(m, n, k, strided=strided)
    res = _run(mod, x, w, sa, sb)
    assert not res.findings, res.findings
    torch.testing.assert_close(res.output.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)


def _first_half_twice(mod: ir.Module) -> ir.Module:
    """The planted bug: the second 64-deep MMA reads the first half's scale columns (0..3, not 4..7)."""
    def bad(o: ir.Op) -> tuple[ir.Stmt, ...]:
        if isinstance(o, ir.TcMma) and o.scales is not None:
            return (replace(o, scales=replace(o.scales, k_cols=(0, 0))),)
        return (o,)
    return replace(mod, partitions=tuple(replace(p, body=rewrite(p.body, bad)) if p.role is ir.Role.MMA else p
                                         for p in mod.partitions))


def test_planted_second_mma_reading_the_first_halfs_scales() -> None:
    m, n, k = 256, 200, 512
    mod = _first_half_twice(_module(m, n, k))
    x, w, sa, sb = _inputs(m, n, k)
    res = _run(mod, x, w, sa, sb)
    assert not torch.allclose(res.output.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)
    with pytest.raises(VerificationError, match=r"64-deep MMA 1 \(K 64..127\) reads scale columns 0..3 of sa_tm and "
                                                r"sb_tm; its own are 4..7"):
        target_verify(mod, "test", B200)
    good = _module(m, n, k)
    target_verify(good, "test", B200)
    torch.testing.assert_close(_run(good, x, w, sa, sb).output.float(), _reference(x, w, sa, sb), rtol=1e-2,
                               atol=1e-2)


def test_planned_module_is_clean_under_several_schedules() -> None:
    m, n, k = 256, 256, 512
    mod = _module(m, n, k)
    x, w, sa, sb = _inputs(m, n, k)
    assert not {f.kind for s in range(4) for f in _run(mod, x, w, sa, sb, seed=s).findings}


def test_cpu_scaled_mm_of_nvfp4_with_row_major_scales_runs_the_scale_partition() -> None:
    """CPU tensors plan for a B200 (`api.sim_device`): the scale pairs [row-major e4m3 scales, global scale] run
    seed 000's kernel on the simulator, as scaled_mm's result."""
    m, n, k = 70, 96, 256
    x, w, sa, sb = _inputs(m, n, k, strided=True)
    kern = warploom.plan(x, w, [sa, torch.tensor([GA])], [sb, torch.tensor([GB])], device=B200)
    assert kern.spec.scale_layout is ScaleLayout.ROW_MAJOR and kern.plan.scale_partition
    out = warploom.scaled_mm(x, w, [sa, torch.tensor([GA])], [sb, torch.tensor([GB])], out_dtype=torch.bfloat16)
    torch.testing.assert_close(out.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)


def test_bad_row_major_nvfp4_scales_are_refused_by_name() -> None:
    m, n, k = 200, 272, 320
    x, w, sa, sb = _inputs(m, n, k)
    g = torch.tensor([1.0])
    with pytest.raises(ScaleError, match=r"scale_a\[1\]: expected NVFP4's pair.*global scale.*got the block scales "
                                         r"alone"):
        warploom.plan(x, w, sa, [sb, g], device=B200)  # no global scale of A's
    with pytest.raises(ScaleError, match=r"scale_b: expected torch.float8_e4m3fn block scales, one per 16 of K.*got "
                                         r"dtype torch.float8_e8m0fnu"):
        warploom.plan(x, w, [sa, g], [sb.view(torch.uint8).view(torch.float8_e8m0fnu), g], device=B200)
    per32 = sa[:, ::2]  # (200, 10): scales per 32 where NVFP4's are per 16
    with pytest.raises(ScaleError, match=r"scale_a: expected NVFP4 scales per 16 of K: \(200, 20\).*any strides.*"
                                         r"got shape \(200, 10\).*the shape of scales per 32.*Fix: quantize with one "
                                         r"e4m3 scale per 16 of K"):
        warploom.plan(x, w, [per32, g], [sb, g], device=B200)
    with pytest.raises(ScaleError, match=r"scale_b: expected the layout of scale_a \(row_major\), got blocked.*"
                                         r"both NVFP4 scales row-major or both in the blocked layout"):
        warploom.plan(x, w, [sa, g], [to_blocked(sb), g], device=B200)


def test_a_global_scale_of_more_than_one_element_is_named() -> None:
    """The global scales are tensorwise: a (2,) one is refused by name, not read as A's and then B's (the simulator
    concatenates them, a grouped module's B's per expert)."""
    mod = _module(300, 200, 1152)
    x, w, sa, sb = _inputs(300, 200, 1152)
    with pytest.raises(ScaleError, match=r"scale_a: expected a one-element fp32 global scale.*got 2 elements"):
        simulate(mod, x, w, [sa, torch.tensor([GA, 9.0])], [sb, torch.tensor([GB])])
    with pytest.raises(ScaleError, match=r"scale_b: expected a one-element fp32 global scale.*got 3 elements"):
        simulate(mod, x, w, [sa, torch.tensor([GA])], [sb, torch.tensor([GB, 1.0, 1.0])])
