"""sm_100a seed 000's other paths (issue 25), each planned by rule 19, verified and simulated numerically:

1. **Blocked scales through the scale partition** (`planning.sm100.scale_partition_rule`): torch's blocked layout
   takes tcgen05.cp (seed 001) wherever a tile's rows start a 128-row chunk, and the partition, loading each tile's
   rows at their blocked addresses (`warploom.blocked.offset`), where they do not (a narrow tile over a wider N) or
   where forced.
2. **Swap-AB decode with row-major scales:** C^T = B^T A^T on 128x16 / 128x32 tiles; the kernel's A is the problem's
   B, so its scale_a is the problem's scale_b.
3. **256-wide tiles on the partition:** one accumulator (two would take all 512 columns) beside A's 2 x 4 and B's
   2 x 8 scale columns (MX): 280 of 512; B's buffers hold 256 rows.

Numerics on random data at shapes that are no tile multiples, against an fp64 product of the dequantized operands
(bf16-rounded), by a scale-free error (the largest error over the largest magnitude of the reference); the outputs
start NaN, so an unwritten tile fails too. Planted bugs are caught by the simulator, the explorer or the verifier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.blocked import to_blocked
from warploom.device import B200, H100_SXM
from warploom.errors import ScaleError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import explain, plan_schedule, scale_path
from warploom.planning.sm100 import tmem_budget
from warploom.reference import dequantized
from warploom.sim import explore, simulate
from warploom.sim.findings import FindingKind
from warploom.spec import ScaleLayout
from warploom.targets import verify as target_verify

E4, E5, F4 = DType.E4M3, DType.E5M2, DType.E2M1
MX, NV = ScaleRecipe.MX, ScaleRecipe.NVFP4
ROWS, BLOCKED = ScaleLayout.ROW_MAJOR, ScaleLayout.BLOCKED
GA, GB = 0.75, 1.25  # NVFP4's global scales


def _spec(m: int, n: int, k: int, a: DType = E4, b: DType = E4, recipe: ScaleRecipe = MX,
          layout: ScaleLayout = ROWS) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, DType.BF16, BLayout.K_MAJOR, recipe, Accumulation.PROMOTED, scale_layout=layout)


def _module(spec: GemmSpec, **forced: Any) -> ir.Module:
    return build(spec, B200, plan_schedule(spec, B200, **forced)).module


def _inputs(spec: GemmSpec, seed: int = 0, strided: bool = False) -> tuple[torch.Tensor, ...]:
    """x (M, K) and w^T (K, N) with random values (every e2m1 code for fp4), and row-major scales (M, K/v) and
    (N, K/v): e8m0 2**-8 .. 2**8 for MX, e4m3 (0.5 .. 1.5) x 2**-3 .. 2**3 for NVFP4; `strided`: views with a row
    stride past K/v and a column stride of 2."""
    g = torch.Generator().manual_seed(seed)
    m, n, k, vec = spec.m, spec.n, spec.k, spec.scale.scale_k

    def data(rows: int, dt: DType) -> torch.Tensor:
        if dt is F4:
            return torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
        return torch.randn(rows, k, generator=g).to(dt.torch)

    def scales(rows: int) -> torch.Tensor:
        cols = k // vec * (2 if strided else 1) + (3 if strided else 0)
        if spec.scale is NV:
            s = ((torch.rand(rows, cols, generator=g) + 0.5)
                 * 2.0 ** torch.randint(-3, 4, (rows, cols), generator=g)).to(torch.float8_e4m3fn)
        else:
            s = torch.randint(119, 136, (rows, cols), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        return s[:, :2 * (k // vec):2] if strided else s

    return data(m, spec.a_dtype), data(n, spec.b_dtype).t(), scales(m), scales(n)


def _scale_args(spec: GemmSpec, sa: torch.Tensor, sb: torch.Tensor) -> tuple[Any, Any]:
    """The scales as scaled_mm takes them: to_blocked of each in the blocked layout; NVFP4 with its global scale."""
    if spec.scale_layout is BLOCKED:
        sa, sb = to_blocked(sa), to_blocked(sb)
    if spec.scale is NV:
        return [sa, torch.tensor([GA])], [sb, torch.tensor([GB])]
    return sa, sb


def _reference(spec: GemmSpec, x: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """The fp64 product of the dequantized operands (times NVFP4's global scales), rounded to bf16 as C is."""
    da, db = dequantized(x, w, sa, sb)
    glob = GA * GB if spec.scale is NV else 1.0
    return ((da.double() @ db.double()) * glob).to(torch.bfloat16).double()


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Scale-free: the largest error over the reference's largest magnitude (NaN, an unwritten output, fails)."""
    return float((out.double() - ref).abs().max() / ref.abs().max())


def _check_numerics(spec: GemmSpec, mod: ir.Module, seed: int = 0, strided: bool = False) -> None:
    x, w, sa, sb = _inputs(spec, seed, strided)
    res = simulate(mod, x, w, *_scale_args(spec, sa, sb), seed=seed + 1)
    assert not res.findings, res.findings
    err = _error(res.output, _reference(spec, x, w, sa, sb))
    assert err < 1e-2, f"{spec.short()}: scale-free error {err}"


def _edit(mod: ir.Module, role: ir.Role, fn: Callable[[ir.Op], list[ir.Stmt]]) -> ir.Module:
    return replace(mod, partitions=tuple(replace(p, body=rewrite(p.body, lambda o: tuple(fn(o))))
                                         if p.role is role else p for p in mod.partitions))


def _no_release_wait(mod: ir.Module) -> ir.Module:
    """Planted: the scale partition stores without waiting for the MMA that reads the buffer to complete."""
    return _edit(mod, ir.Role.SCALES, lambda s: [] if isinstance(s, ir.Wait) and s.barrier == "scale_empty" else [s])


def _overwrite_kinds(spec: GemmSpec, mod: ir.Module, seeds: int = 4) -> set[FindingKind]:
    x, w, sa, sb = _inputs(spec)
    args = _scale_args(spec, sa, sb)
    return {f.kind for s in range(seeds) for f in simulate(mod, x, w, *args, seed=s).findings}


OVERWRITE = {FindingKind.OVERWRITE_WHILE_READ, FindingKind.OVERWRITE_UNRELEASED}


# 1. Blocked scales: tcgen05.cp where it serves the tile, the scale partition where it cannot (or forced).

def test_blocked_scales_take_the_partition_only_where_tcgen05_cp_cannot_serve_the_tile() -> None:
    spec = _spec(300, 264, 544, layout=BLOCKED)
    planned = plan_schedule(spec, B200)
    assert planned.block_scaled and not planned.scale_partition and planned.bn == 128
    assert "seed 001" in explain(spec, B200).text() and "two buffers ahead" in scale_path(planned, spec)
    narrow = plan_schedule(spec, B200, bn=64)  # 64 wide over N = 264: tiles 2.. read rows inside a chunk
    assert narrow.scale_partition and "a 64-wide tile over N=264" in scale_path(narrow, spec)
    assert not plan_schedule(replace(spec, n=64), B200, bn=64).scale_partition  # (one tile: the chunk's first rows)
    forced = plan_schedule(spec, B200, scale_partition=True)
    assert forced.scale_partition and "as forced" in scale_path(forced, spec)
    mod = _module(spec, bn=64)
    stores = [o for p in mod.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.StoreTmemScales)]
    assert len(stores) == 2 and all(o.blocked for o in stores) and not mod.tmem_scales
    assert not any(r.byte_scales for r in mod.rings)  # (no scales in the A/B stage)
    assert "(blocked)" in warploom.ir.printer.module(mod)
    # blocked scales go flat: the kernel reads no strides (backends/gluon_sm90.scale_params)
    src = build(spec, B200, plan_schedule(spec, B200, bn=64)).gluon
    assert {"sa_ptr", "sb_ptr"} <= set(src.params)
    assert not any(p.startswith(("sa_stride", "sb_stride")) for p in src.params)
    assert src.text.count("// 128 * gl.cdiv(k_scales, 4) + ") == 2 and src.text.count("% 128 // 32 * 4") == 2


@pytest.mark.parametrize("spec,forced,strided", [
    pytest.param(_spec(77, 200, 416, layout=BLOCKED), dict(bn=64), False, id="mxfp8_128x64_over_n200"),
    pytest.param(_spec(45, 72, 320, E5, E4, layout=BLOCKED), dict(bn=32), False, id="mxfp8_e5m2_128x32_over_n72"),
    pytest.param(_spec(150, 200, 320, F4, F4, layout=BLOCKED), dict(bn=64), False, id="mxfp4_128x64_over_n200"),
    pytest.param(_spec(300, 200, 1152, F4, F4, NV, BLOCKED), dict(bn=64), False, id="nvfp4_bk128_128x64"),
    pytest.param(_spec(129, 264, 1056, F4, F4, NV, BLOCKED), dict(scale_partition=True), False,
                 id="nvfp4_bk64_forced_128x128"),
    pytest.param(_spec(300, 264, 544, E4, F4, layout=BLOCKED), dict(scale_partition=True), False,
                 id="mxfp8xmxfp4_forced_128x128"),
])
def test_blocked_scales_through_the_partition_match_the_dequantized_reference(spec: GemmSpec, forced: dict,
                                                                             strided: bool) -> None:
    mod = _module(spec, **forced)
    assert mod.tiling.bn == forced.get("bn", 128) and any(r.tmem for r in mod.rings)
    _check_numerics(spec, mod, strided=strided)


@pytest.mark.parametrize("spec,bn", [
    pytest.param(_spec(77, 200, 416, layout=BLOCKED), 64, id="mxfp8_128x64"),
    pytest.param(_spec(300, 200, 1152, F4, F4, NV, BLOCKED), 64, id="nvfp4_bk128_128x64"),
    pytest.param(_spec(300, 520, 544, layout=BLOCKED), 256, id="mxfp8_256"),
])
def test_the_kernels_blocked_loads_read_the_tiles_own_scales(spec: GemmSpec, bn: int) -> None:
    """The emitted loads of blocked scales, their address and mask evaluated with torch (``gl.cdiv`` as ceil
    division), gather exactly the tile's rows and the k-block's scales from to_blocked's flat bytes at every tile and
    k-block: the kernel's own arithmetic, not the simulator's (which gathers through `warploom.blocked.offset`)."""
    import re

    plan = plan_schedule(spec, B200, bn=bn, scale_partition=True)
    text = build(spec, B200, plan).gluon.text
    loads = {p: (addr, mask) for p, addr, mask in
             re.findall(r"(s[ab])_tm_v = gl\.load\(s[ab]_ptr \+ (.*?), mask=(.*?), other=", text)}
    assert set(loads) == {"sa", "sb"}, text
    _, _, sa, sb = _inputs(spec)
    k_scales, width = -(-spec.k // spec.scale.scale_k), plan.bk // spec.scale.scale_k
    gl = type("gl", (), {"cdiv": staticmethod(lambda a, b: -(-a // b))})
    for pre, scales, tile, size in (("sa", sa, plan.bm, spec.m), ("sb", sb, plan.bn, spec.n)):
        flat, want_all = to_blocked(scales).view(torch.uint8), scales.view(torch.uint8)
        addr, mask = loads[pre]
        for off in range(0, size, tile):
            for kk in range(-(-spec.k // plan.bk)):
                r = off + torch.arange(-(-tile // 128) * 128)
                c = kk * width + torch.arange(width)
                env = {f"{pre}_tm_rows": r, f"{pre}_tm_cols": c, "scale_rows": r - off, "scale_rows_256": r - off,
                       "k_scales": k_scales, "M": spec.m, "N": spec.n, "BN": plan.bn, "gl": gl}
                inside = (r[:, None] < min(size, off + tile)) & (c[None, :] < k_scales)
                assert torch.equal(eval(mask, env), inside), (pre, off, kk)  # noqa: S307 (the kernel's own text)
                got = flat[torch.where(inside, eval(addr, env), 0)]  # noqa: S307
                want = want_all[r.clamp(max=size - 1)][:, c.clamp(max=k_scales - 1)]
                assert torch.equal(got[inside], want[inside]), (pre, off, kk)


def test_blocked_scales_read_as_row_major_are_named_by_the_verifier() -> None:
    """Planted: the partition's loads of blocked scales addressed as row-major (the kernel would read the swizzled
    bytes as rows): the verifier names the layout."""
    mod = _module(_spec(77, 200, 416, layout=BLOCKED), bn=64)
    bad = _edit(mod, ir.Role.SCALES, lambda s: [replace(s, blocked=False)]
                if isinstance(s, ir.StoreTmemScales) and s.tensor is ir.Tensor.SCALE_B else [s])
    with pytest.raises(VerificationError, match="reads scale_b as row-major, but the spec's scales are blocked"):
        target_verify(bad, "test", B200)


def test_blocked_partition_overwrite_before_the_mma_completes_is_caught() -> None:
    spec = _spec(256, 256, 512, layout=BLOCKED)
    mod = _no_release_wait(_module(spec, bn=64))
    assert _overwrite_kinds(spec, mod) & OVERWRITE
    small = _spec(128, 128, 512, layout=BLOCKED)
    assert not explore(_module(small, bn=64, stages=2), 128, 128, 512, max_states=40_000).findings
    found = explore(_no_release_wait(_module(small, bn=64, stages=2)), 128, 128, 512, max_states=40_000).findings
    assert {f.kind for f in found} & OVERWRITE
    with pytest.raises(VerificationError, match="with no wait on .'scale_empty'. at that slot"):
        target_verify(mod, "test", B200)


# 2. Swap-AB decode with row-major scales.

@pytest.mark.parametrize("m,tokens", [(8, 16), (16, 16), (24, 32), (32, 32)])
def test_row_major_decode_runs_swapped_through_the_partition(m: int, tokens: int) -> None:
    spec = _spec(m, 4096, 4096)
    plan = plan_schedule(spec, B200)
    assert (plan.swap_ab, plan.scale_partition, plan.bm, plan.bn) == (True, True, 128, tokens)
    text = explain(spec, B200).text()
    assert "swap-AB decode" in text and "its scale_a the problem's scale_b" in text
    mod = build(spec, B200, plan).module
    assert mod.spec == spec.swapped(tmem_scales=True) and mod.tiling.swap_ab
    # the tokens' (B's) buffers hold 128 rows, of which the MMA reads `tokens`: 2 x 16 or 2 x 32 accumulator columns
    assert mod.tmem_columns == 2 * tokens + 2 * (4 + 4)
    # sm_90a keeps row-major MX unswapped (its scale partition reads scale_b per column of B)
    assert not plan_schedule(spec, H100_SXM).swap_ab


@pytest.mark.parametrize("spec,strided", [
    pytest.param(_spec(8, 300, 544), False, id="mxfp8_m8"),
    pytest.param(_spec(24, 200, 1056, E5, E4), True, id="mxfp8_e5m2_m24_strided"),
    pytest.param(_spec(5, 136, 320, F4, F4), False, id="mxfp4_m5"),
    pytest.param(_spec(17, 264, 1152, F4, F4, NV), False, id="nvfp4_bk128_m17"),
    pytest.param(_spec(30, 200, 1056, F4, F4, NV), True, id="nvfp4_bk64_m30_strided"),
    pytest.param(_spec(12, 264, 544, E4, F4), False, id="mxfp8xmxfp4_m12"),
])
def test_swapped_row_major_decode_matches_the_dequantized_reference(spec: GemmSpec, strided: bool) -> None:
    mod = _module(spec)
    assert mod.tiling.swap_ab and any(r.tmem for r in mod.rings)
    _check_numerics(spec, mod, seed=2, strided=strided)


def test_swapped_row_major_decode_with_a_bias() -> None:
    """A bias (one per column of C) swaps as a row vector of C^T beside the partition's swapped scales."""
    spec = replace(_spec(20, 272, 544), bias_dtype=DType.BF16)
    mod = _module(spec)
    assert mod.tiling.swap_ab and (mod.tiling.bn, mod.spec.m) == (32, 272)
    x, w, sa, sb = _inputs(spec, seed=6)
    bias = torch.randn(272, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    res = simulate(mod, x, w, sa, sb, bias, seed=2)
    assert not res.findings, res.findings
    da, db = dequantized(x, w, sa, sb)
    ref = (da.double() @ db.double() + bias.double()).to(torch.bfloat16).double()
    assert _error(res.output, ref) < 1e-2


def test_swapped_partition_explores_clean_and_a_flipped_parity_is_found() -> None:
    """Every schedule of a small swapped module (the kernel's own sizes: 128 rows of the weight, 16 tokens) is clean;
    a flipped parity on the MMA warp's scale_ready wait is found."""
    mod = _module(_spec(16, 128, 512), stages=2, swap_ab=True, bn=16)
    assert mod.tiling.swap_ab and mod.tiling.bn == 16
    assert not explore(mod, 128, 16, 512, max_states=40_000).findings
    flipped = _edit(mod, ir.Role.MMA, lambda s: [replace(s, parity=ir.Parity("q", flip=True))]
                    if isinstance(s, ir.Wait) and s.barrier == "scale_ready" else [s])
    assert explore(flipped, 128, 16, 512, max_states=40_000).findings


def test_swapped_scales_keep_their_operands() -> None:
    """The swap trades the scales' roles with the operands': the kernel scales its A (the problem's B) by its
    scale_a ring (the problem's scale_b). Planted: the MMA scales A by the SCALE_B ring and B by the SCALE_A one.
    The verifier names it and the numerics see it."""
    spec = _spec(24, 200, 544)
    mod = _module(spec)
    x, w, sa, sb = _inputs(spec)
    ref = _reference(spec, x, w, sa, sb)

    def crossed(s: ir.Op) -> list[ir.Stmt]:
        if isinstance(s, ir.TcMma) and s.scales is not None:
            return [replace(s, scales=replace(s.scales, a=s.scales.b, b=s.scales.a))]
        return [s]
    bad = _edit(mod, ir.Role.MMA, crossed)
    with pytest.raises(VerificationError, match="the scaled MMA scales A by sb_tm, which holds scale_b"):
        target_verify(bad, "test", B200)
    assert _error(simulate(bad, x, w, sa, sb, seed=1).output, ref) > 0.05
    assert _error(simulate(mod, x, w, sa, sb, seed=1).output, ref) < 1e-2


def test_swapped_decode_bad_input_is_named() -> None:
    """At decode sizes (a swapped plan), bad scales are still named in the caller's terms."""
    spec = _spec(8, 272, 544)
    x, w, sa, sb = _inputs(spec)
    per16 = torch.full((272, 544 // 16), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match=r"scale_b.*\(272, 17\).*got shape \(272, 34\)"):
        warploom.plan(x, w, sa, per16, device=B200)
    with pytest.raises(ScaleError, match="scale_a.*float8_e8m0fnu"):
        warploom.plan(x, w, sa.view(torch.uint8).float(), sb, device=B200)
    with pytest.raises(UnsupportedError, match="swap_ab=True .*blocked layout"):
        plan_schedule(spec, H100_SXM, swap_ab=True)
    # a CPU call runs the swapped kernel on the simulator, as scaled_mm's result
    out = warploom.scaled_mm(x, w, sa, sb, out_dtype=torch.bfloat16)
    assert _error(out, _reference(spec, x, w, sa, sb)) < 1e-2


# 3. 256-wide tiles on the scale partition.

@pytest.mark.parametrize("spec,columns,regs", [
    pytest.param(_spec(300, 520, 544), 256 + 2 * (4 + 8), 80, id="mxfp8"),
    pytest.param(_spec(300, 520, 1152, F4, F4, NV), 256 + 2 * (8 + 16), 136, id="nvfp4_bk128"),
    pytest.param(_spec(300, 520, 544, layout=BLOCKED), 256 + 2 * (4 + 8), 88, id="mxfp8_blocked_forced"),
])
def test_256_wide_partition_plans_one_accumulator_and_says_its_columns(spec: GemmSpec, columns: int,
                                                                       regs: int) -> None:
    forced: dict[str, Any] = dict(bn=256, scale_partition=True)
    plan = plan_schedule(spec, B200, **forced)
    assert (plan.bn, plan.acc_buffers, plan.scale_partition) == (256, 1, True)
    assert f"= {columns} of 512" in scale_path(plan, spec) and "one accumulator" in scale_path(plan, spec)
    mod = build(spec, B200, plan).module
    assert mod.tmem_columns == columns
    assert {(r.tensor, r.rows) for r in mod.rings if r.tmem} == {(ir.Tensor.SCALE_A, 128), (ir.Tensor.SCALE_B, 256)}
    assert next(p.regs for p in mod.partitions if p.role is ir.Role.SCALES) == regs
    # two accumulators of 256 would take all 512 columns before the scales
    assert tmem_budget(spec, 128, 256, plan.bk, True) == (1, columns)
    with pytest.raises(UnsupportedError, match=r"\(512 columns\) and its scale buffers .* exceed tensor memory"):
        tmem_budget(spec, 128, 512, plan.bk, True)


@pytest.mark.parametrize("spec", [
    pytest.param(_spec(300, 520, 544), id="mxfp8"),
    pytest.param(_spec(150, 300, 320, F4, F4), id="mxfp4"),
    pytest.param(_spec(300, 520, 1152, F4, F4, NV), id="nvfp4_bk128"),
    pytest.param(_spec(200, 300, 1056, F4, F4, NV), id="nvfp4_bk64"),
    pytest.param(_spec(200, 300, 544, E5, E4, layout=BLOCKED), id="mxfp8_blocked_forced"),
])
def test_256_wide_partition_matches_the_dequantized_reference(spec: GemmSpec) -> None:
    _check_numerics(spec, _module(spec, bn=256, scale_partition=True), seed=4)


def test_256_wide_planted_bugs_are_caught() -> None:
    """Two accumulators at 256 wide (536 of 512 columns), B's buffers of 128 rows for a 256-wide MMA, and the
    partition's overwrite of a buffer its MMA still reads."""
    spec = _spec(256, 512, 512)
    mod = _module(spec, bn=256)
    two = replace(mod, rings=tuple(replace(r, depth=2) if r.in_tmem else r for r in mod.rings))
    with pytest.raises(VerificationError, match="tensor memory: 536 columns"):
        target_verify(two, "test", B200)
    short = replace(mod, rings=tuple(replace(r, rows=128) if r.tmem and r.tensor is ir.Tensor.SCALE_B else r
                                     for r in mod.rings))
    with pytest.raises(VerificationError, match="sb_tm holds 128 rows of scales; the MMA reads 256 rows"):
        target_verify(short, "test", B200)
    assert _overwrite_kinds(spec, _no_release_wait(mod)) & OVERWRITE
