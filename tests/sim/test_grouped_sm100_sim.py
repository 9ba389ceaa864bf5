"""M-grouped GEMMs on sm_100a (rule 22 on sm_100a, backends/gluon_sm100.py's grouped emitter) in the simulator:
MX fp8 with row-major per-expert scales through seed 000's scale partition (bf16 and fp16 run beside sm_90a's in
test_grouped_sim.py), against a float torch reference (dequantized, by a scale-free relative error) for random
routings with empty experts and offsets that are not tile multiples; planted bugs at expert edges (a ragged last
tile stored unclipped, B or scale_b of the next expert) caught by the coverage check or the numerics; the planner's
and verifier's refusals, and bad input named by `scaled_grouped_mm`. Nothing here runs on a Blackwell GPU (none is
at hand)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from grouped_cases import routing, valid_rows  # (pytest puts this folder on sys.path)

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.device import B200
from warploom.errors import DTypeError, InputError, ScaleError, ShapeError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir.raster import group_bounds
from warploom.ir.verify import structural
from warploom.kernel import build
from warploom.planner import explain, plan_schedule
from warploom.reference import dequantized
from warploom.sim import program
from warploom.sim.findings import FindingKind
from warploom.sim.grouped import simulate_grouped

E4, F4 = DType.E4M3, DType.E2M1


def _err(got: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor) -> float:
    """Scale-free: the relative Frobenius error over the groups' rows."""
    g, r = got.float()[rows], ref[rows]
    return ((g - r).norm() / r.norm().clamp(min=1e-6)).item()


def _mx_spec(m: int, n: int, k: int, groups: int, dt: DType = E4) -> GemmSpec:
    return GemmSpec(m, n, k, dt, dt, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    grouping=Grouping.OFFSETS, groups=groups)


def _mx_inputs(m: int, n: int, k: int, groups: int, seed: int, strided: bool = False,
               dt: DType = E4) -> tuple[torch.Tensor, ...]:
    """e4m3 a (M, K), b (G, K, N) (a (G, N, K) weight seen transposed), e8m0 scale_a (M, K/32) and scale_b
    (G, N, K/32), row-major and unpadded; `strided`: scale views with a row stride past K/32 and a column stride of
    2 (any strides). MX fp4 (`dt` E2M1): every e2m1 code, two a byte along K: a (M, K/2), b (G, K/2, N)."""
    g = torch.Generator().manual_seed(seed)

    def data(*shape: int) -> torch.Tensor:
        if dt is F4:
            return torch.randint(0, 256, (*shape[:-1], shape[-1] // 2), generator=g,
                                 dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
        return torch.randn(*shape, generator=g).to(dt.torch)

    x, w = data(m, k), data(groups, n, k)

    def scales(*rows: int) -> torch.Tensor:
        cols = k // 32 * (2 if strided else 1) + (3 if strided else 0)
        s = torch.randint(119, 136, (*rows, cols), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
        return s[..., :k // 16:2] if strided else s

    return x, w.transpose(-2, -1), scales(m), scales(groups, n)


def _mx_reference(x: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                  bounds: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """The fp32 product of the dequantized operands in each group's rows (NaN elsewhere)."""
    out = torch.full((x.shape[0], b.shape[2]), float("nan"))
    fp4 = x.dtype == torch.float4_e2m1fn_x2  # (dequantized unpacks packed pairs itself)
    for g, (s, e) in enumerate(bounds):
        da, db = dequantized(x[s:e] if fp4 else x[s:e].float(), b[g] if fp4 else b[g].float(), sa[s:e], sb[g])
        out[s:e] = da @ db
    return out


@pytest.mark.parametrize("seed,m,n,k,groups,strided,dt", [
    (0, 300, 200, 544, 5, False, E4),   # a last k-block of one 32-deep slice, N not a tile multiple
    (1, 419, 136, 1056, 7, True, E4),   # strided scale views (any strides), more experts
    (2, 96, 264, 288, 3, False, E4),    # decode-sized groups: 128-row tiles mostly past each group's end
    (3, 300, 200, 640, 5, False, F4),   # MX fp4 (kind::mxf4): K in values, two a byte; a partial last k-block
    (4, 211, 136, 1024, 6, True, F4),   # MX fp4, strided scale views
])
def test_mx_numerics_per_expert_row_major_scales(seed: int, m: int, n: int, k: int, groups: int, strided: bool,
                                                 dt: DType) -> None:
    offs = routing(seed, groups, m)
    spec = _mx_spec(m, n, k, groups, dt)
    plan = plan_schedule(spec, B200, stages=3)
    assert plan.block_scaled and plan.scale_partition and (plan.bm, plan.bn) == (128, 128)
    mod = build(spec, B200, plan).module
    assert {r.name for r in mod.rings if r.tmem} == {"sa_tm", "sb_tm"} and not mod.tmem_scales
    x, b, sa, sb = _mx_inputs(m, n, k, groups, seed, strided, dt)
    res = simulate_grouped(mod, x, b, offs, sa, sb, seed=seed).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    rows = valid_rows(bounds, m)
    assert _err(res.output, _mx_reference(x, b, sa, sb, bounds), rows) < 1e-2
    assert res.output[~rows].isnan().all()


@pytest.mark.parametrize("dt", [E4, F4], ids=lambda d: d.value)
def test_mx_through_scaled_grouped_mm_on_cpu(dt: DType) -> None:
    """CPU tensors run the kernel planned for a B200 (sm_90a's grouped kernel has no MX) on the simulator; MX fp4
    as torch.float4_e2m1fn_x2, a (M, K/2) and b (G, K/2, N), K counted in values by the scales."""
    groups, m, n, k = 4, 260, 136, 320
    offs = torch.tensor([33, 33, 200, 250], dtype=torch.int32)
    x, b, sa, sb = _mx_inputs(m, n, k, groups, 5, dt=dt)
    y = warploom.scaled_grouped_mm(x, b, sa, sb, offs)
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    assert y.shape == (m, n) and _err(y, _mx_reference(x, b, sa, sb, bounds), valid_rows(bounds, m)) < 1e-2


def test_plan_and_explain_say_rule_22_on_sm100a() -> None:
    bf16 = GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)
    assert (plan_schedule(bf16, B200).bn, plan_schedule(GemmSpec(1024, 4096, 7168, grouping=Grouping.OFFSETS,
                                                                  groups=8), B200).bn) == (256, 128)
    kernel = build(bf16, B200)
    assert kernel.module.target.value == "sm_100a"
    from warploom.errors import TargetError
    from warploom.runtime.launch_grouped import GroupedLauncher

    with pytest.raises(TargetError, match="sm_100a grouped kernel, which warploom cross-compiles and simulates but "
                       "has not run"):
        GroupedLauncher(kernel.module, kernel.gluon)
    text = explain(_mx_spec(8192, 4096, 7168, 8), B200).text()
    assert "grouped: rule 22 on sm_100a" in text and "sb_ptr + grp * sb_stride_g" in text and "seed 000" in text
    src = build(_mx_spec(8192, 4096, 7168, 8), B200).gluon.text
    assert "(sb_ptr + grp * sb_stride_g) + sb_tm_rows" in src and "group_tile(" in src and "tcgen05_mma_scaled" in src


# ---- planted bugs at expert edges -------------------------------------------------------------------------------

def _mutant(kind: str):  # noqa: ANN202
    real_tiles, real_tag = program.group_tiles, program.tma_scale_tag

    def tiles(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = real_tiles(*args, **kwargs)
        groups = len(args[1])
        if kind == "no_clip":  # a group's ragged last tile stored by TMA whole: rows of the next group
            return tuple(dataclasses.replace(t, row_end=None) for t in out)
        assert kind == "next_expert_b"  # B read from the next expert's weights
        return tuple(dataclasses.replace(t, group=(t.group + 1) % groups) for t in out)

    def tag(module, tensor, tile, k):  # noqa: ANN001, ANN202
        # the scale partition reading scale_b without the expert stride (``sb_ptr`` for every expert)
        return dataclasses.replace(real_tag(module, tensor, tile, k), group=0) \
            if tensor is ir.Tensor.SCALE_B else real_tag(module, tensor, tile, k)

    return ("tma_scale_tag", tag) if kind == "first_expert_scales" else ("group_tiles", tiles)


@pytest.mark.parametrize("kind", ["no_clip", "next_expert_b", "first_expert_scales"])
def test_planted_expert_edge_bugs_are_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    groups, m, n, k = 4, 300, 128, 256
    offs = torch.tensor([70, 70, 250, 300], dtype=torch.int32)  # an empty expert, ragged edges
    spec = _mx_spec(m, n, k, groups)
    mod = build(spec, B200, plan_schedule(spec, B200, stages=3)).module
    x, b, sa, sb = _mx_inputs(m, n, k, groups, 0)
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    ref, rows = _mx_reference(x, b, sa, sb, bounds), valid_rows(bounds, m)
    clean = simulate_grouped(mod, x, b, offs, sa, sb)
    assert clean.ok and _err(clean.output, ref, rows) < 1e-2
    monkeypatch.setattr(program, *_mutant(kind))
    res = simulate_grouped(mod, x, b, offs, sa, sb)
    if kind == "no_clip":  # rows written into another group: the coverage check names them
        assert FindingKind.OUTPUT_COVERAGE in res.report.kinds(), res.report.summary()
        assert any("group" in f.message for f in res.findings)
    else:  # tags agree (both sides read the mutated group or scales): the numerics catch it
        assert _err(res.output, ref, rows) > 0.1


# ---- NVFP4: e4m3 scales per 16 of K, per expert, and a global scale of B per expert ----------------------------

@pytest.mark.parametrize("m,n,k,bk", [
    (300, 200, 1152, 128),  # BK 128: (128, 8) scale buffers, two 64-deep MMAs a k-block
    (211, 136, 704, 64),    # K not a multiple of 128: BK 64, (128, 4) buffers
])
def test_nvfp4_numerics_per_expert_scales_and_global_scales(m: int, n: int, k: int, bk: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    groups = 5
    offs = routing(bk, groups, m)
    spec = dataclasses.replace(_mx_spec(m, n, k, groups, F4), scale=ScaleRecipe.NVFP4)
    plan = plan_schedule(spec, B200, stages=3)
    assert plan.scale_partition and (plan.bn, plan.bk) == (128, bk)
    mod = build(spec, B200, plan).module
    g = torch.Generator().manual_seed(bk)
    x, b, _, _ = _mx_inputs(m, n, k, groups, bk, dt=F4)
    sa = (torch.rand(m, k // 16, generator=g) * 2 + 0.25).to(torch.float8_e4m3fn)
    sb = (torch.rand(groups, n, k // 16, generator=g) * 2 + 0.25).to(torch.float8_e4m3fn)
    ga, gb = torch.tensor([0.7]), torch.rand(groups, generator=g) + 0.5  # (A's one; B's one per expert)
    res = simulate_grouped(mod, x, b, offs, sa, sb, seed=1, globals_=(ga, gb)).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    ref = _mx_reference(x, b, sa, sb, bounds) * ga
    for grp, (s, e) in enumerate(bounds):
        ref[s:e] *= gb[grp]
    rows = valid_rows(bounds, m)
    assert _err(res.output, ref, rows) < 1e-2 and res.output[~rows].isnan().all()
    with pytest.raises(ScaleError, match="globals_: expected NVFP4's global scales"):
        simulate_grouped(mod, x, b, offs, sa, sb, globals_=(ga, gb[:1]))
    # planted: the epilogue multiplying every expert's rows by expert 0's global scale (global_b_ptr, no + grp)
    from warploom.sim import numerics

    real = numerics.CtaData.epilogue

    def first_expert(self, agent, acc, steps, off_m, off_n, block=None, group=0):  # noqa: ANN001, ANN202
        return real(self, agent, acc, steps, off_m, off_n, block, 0)

    monkeypatch.setattr(numerics.CtaData, "epilogue", first_expert)
    bad = simulate_grouped(mod, x, b, offs, sa, sb, seed=1, globals_=(ga, gb))
    assert _err(bad.output, ref, rows) > 0.05


# ---- what is not built on sm_100a yet: refused by name ----------------------------------------------------------

def test_refusals_name_what_is_not_built() -> None:
    shape = dict(m=1024, n=256, k=256, groups=4)
    with pytest.raises(UnsupportedError, match="masked grouping .*H100_SXM"):
        plan_schedule(GemmSpec(**shape, grouping=Grouping.MASKED), B200)
    with pytest.raises(UnsupportedError, match="k_offsets grouping"):
        plan_schedule(GemmSpec(**shape, grouping=Grouping.K_OFFSETS), B200)
    with pytest.raises(UnsupportedError, match="stream-K is not built on sm_100a"):
        plan_schedule(GemmSpec(**shape, grouping=Grouping.OFFSETS), B200, stream_k=2)
    mixed = dataclasses.replace(_mx_spec(1024, 256, 256, 4), b_dtype=F4)
    with pytest.raises(UnsupportedError, match="MX fp8 x fp4"):
        plan_schedule(mixed, B200)
    blocked = dataclasses.replace(_mx_spec(1024, 256, 256, 4), scale_layout=warploom.ScaleLayout.BLOCKED)
    with pytest.raises(UnsupportedError, match="blocked layout"):
        plan_schedule(blocked, B200)
    from warploom import H100_SXM

    with pytest.raises(UnsupportedError, match="built for sm_100a only.*B200"):
        plan_schedule(_mx_spec(1024, 256, 256, 4), H100_SXM)
    # the verifier holds a grouped sm_100a module to what its kernel takes
    mod = build(GemmSpec(**shape, grouping=Grouping.OFFSETS), B200).module
    assert not [e for e in structural(mod) if "grouping" in e]
    masked = dataclasses.replace(mod, spec=dataclasses.replace(mod.spec, grouping=Grouping.MASKED),
                                 tiling=dataclasses.replace(mod.tiling, grouping=Grouping.MASKED))
    assert any("grouping on sm_100a with masked grouping" in e for e in structural(masked))
    sk = dataclasses.replace(mod, tiling=dataclasses.replace(mod.tiling, stream_k=2))
    assert any("stream-K in a grouped sm_100a module" in e for e in structural(sk))


def test_bad_mx_scales_are_named() -> None:
    groups, m, n, k = 4, 260, 136, 320
    offs = torch.tensor([33, 33, 200, 250], dtype=torch.int32)
    x, b, sa, sb = _mx_inputs(m, n, k, groups, 0)
    cases = [
        ((sa, sb.float()), ScaleError, "scale_b: expected torch.float8_e8m0fnu"),
        ((sa, sb[..., :5]), ScaleError, r"scale_b: expected shape \(4, 136, 10\) .*got shape \(4, 136, 5\)"),
        ((sa, sb[0]), ScaleError, r"scale_b: expected shape \(4, 136, 10\) .*got shape \(136, 10\)"),
        ((sa[:100], sb), ScaleError, r"scale_a: expected shape \(260, 10\) .*got shape \(100, 10\)"),
    ]
    for (s_a, s_b), err, msg in cases:
        with pytest.raises(err, match=msg):
            warploom.scaled_grouped_mm(x, b, s_a, s_b, offs)
    x4, b4, sa4, sb4 = _mx_inputs(m, n, k, groups, 0, dt=F4)
    with pytest.raises(ScaleError, match=r"scale_a: expected shape \(260, 10\) .*got shape \(260, 5\)"):
        warploom.scaled_grouped_mm(x4, b4, sa4[:, :5], sb4, offs)  # (per 64 of K: fp4's K is twice its bytes)
    with pytest.raises(DTypeError, match="a: expected dtype in .*float4_e2m1fn_x2.*MX e8m0"):
        warploom.scaled_grouped_mm(x4, b4, sa4.float(), sb4.float(), offs)
    x3 = x[:256].reshape(groups, 64, k)
    with pytest.raises(InputError, match="scale_a: expected MX scales with a 2-D"):
        warploom.scaled_grouped_mm(x3, b, sa[:256], sb, masked_m=torch.full((groups,), 64, dtype=torch.int32))


# ---- review (session 29): bad input named before anything runs --------------------------------------------------

def test_mx_use_fast_accum_is_refused_by_name() -> None:
    """MX has no fast-accumulation mode (the block-scaled MMA applies each 32-deep block's scales): refused as
    blockwise is, not a GemmSpec ValueError."""
    groups, m, n, k = 4, 260, 136, 320
    offs = torch.tensor([33, 33, 200, 250], dtype=torch.int32)
    for dt in (E4, F4):
        x, b, sa, sb = _mx_inputs(m, n, k, groups, 0, dt=dt)
        with pytest.raises(InputError, match="use_fast_accum: expected False with MX scales"):
            warploom.scaled_grouped_mm(x, b, sa, sb, offs, use_fast_accum=True)


def test_simulate_grouped_names_bad_block_scales() -> None:
    """simulate_grouped checks an MX / NVFP4 module's scales against a, b and the bounds before it runs: its masked
    loads would read a short scale_a as ones and index a 2-D scale_b by expert, silently or with an IndexError."""
    groups, m, n, k = 4, 260, 136, 320
    offs = torch.tensor([33, 33, 200, 250], dtype=torch.int32)
    spec = _mx_spec(m, n, k, groups)
    mod = build(spec, B200, plan_schedule(spec, B200, stages=3)).module
    x, b, sa, sb = _mx_inputs(m, n, k, groups, 0)
    cases = [
        ((None, sb), r"scale_a: expected e8m0 scales of shape \(260, 10\)"),
        ((sa, None), r"scale_b: expected e8m0 scales of shape \(4, 136, 10\)"),
        ((sa[:100], sb), r"scale_a: expected .*\(260, 10\).*got shape \(100, 10\)"),
        ((sa, sb[0]), r"scale_b: expected .*\(4, 136, 10\).*got shape \(136, 10\)"),
        ((sa, sb[:3]), r"scale_b: expected .*\(4, 136, 10\).*got shape \(3, 136, 10\)"),
        ((sa, sb[..., :5]), r"scale_b: expected .*\(4, 136, 10\).*got shape \(4, 136, 5\)"),
        ((sa, sb.float()), r"scale_b: expected e8m0 .*got dtype torch.float32"),
    ]
    for (s_a, s_b), msg in cases:
        with pytest.raises(ScaleError, match=msg):
            simulate_grouped(mod, x, b, offs, s_a, s_b)
    # NVFP4: A's global scale is one for all rows (a (G,) one would be read as B's, shifted by one expert)
    nv = dataclasses.replace(_mx_spec(m, n, k, groups, F4), scale=ScaleRecipe.NVFP4)
    nmod = build(nv, B200, plan_schedule(nv, B200, stages=3)).module
    x4, b4, _, _ = _mx_inputs(m, n, k, groups, 0, dt=F4)
    s4a, s4b = torch.ones(m, k // 16).to(torch.float8_e4m3fn), torch.ones(groups, n, k // 16).to(torch.float8_e4m3fn)
    with pytest.raises(ScaleError, match=r"globals_: expected .*A's one .*got 4 of A"):
        simulate_grouped(nmod, x4, b4, offs, s4a, s4b, globals_=(torch.ones(groups), torch.ones(groups)))
    with pytest.raises(ScaleError, match=r"scale_a: expected e4m3 scales of shape \(260, 20\)"):
        simulate_grouped(nmod, x4, b4, offs, s4a.view(torch.uint8).view(torch.float8_e8m0fnu), s4b,
                         globals_=(torch.ones(1), torch.ones(groups)))


def test_no_experts_is_a_named_shape_error() -> None:
    """b with G = 0 experts: a ShapeError naming b, not GemmSpec's ValueError (bf16 and MX alike)."""
    x = torch.randn(64, 64).bfloat16()
    with pytest.raises(ShapeError, match="b: expected at least one expert"):
        warploom.grouped_mm(x, torch.randn(0, 64, 64).bfloat16().transpose(-2, -1), torch.zeros(0, dtype=torch.int32))
    x8, b8, sa, sb = _mx_inputs(64, 64, 64, 1, 0)
    with pytest.raises(ShapeError, match="b: expected at least one expert"):
        warploom.scaled_grouped_mm(x8, b8[:0], sa, sb[:0], torch.zeros(0, dtype=torch.int32))


def test_forced_sm90_options_are_refused_not_ignored_on_sm100a() -> None:
    """consumer_partitions, partial_blocks and scale_partition=False forced on a grouped sm_100a plan are refused by
    name (its plan has one epilogue partition and reads per-expert scales through the scale partition only), as
    rule 19 refuses them on a dense one, never dropped."""
    bf16 = GemmSpec(1024, 256, 256, grouping=Grouping.OFFSETS, groups=4)
    for spec, kw in ((bf16, {"consumer_partitions": 2}), (bf16, {"partial_blocks": 2}),
                     (_mx_spec(1024, 256, 256, 4), {"consumer_partitions": 2}),
                     (_mx_spec(1024, 256, 256, 4), {"scale_partition": False})):
        name = next(iter(kw))
        with pytest.raises(UnsupportedError, match=f"{name}"):
            plan_schedule(spec, B200, **kw)


def test_grouped_scale_arguments_follow_each_recipes_layout() -> None:
    """What the grouped launcher binds to the kernel's scale parameters (`grouped_scale_args`), which neither the
    simulator (it indexes scale_b by expert, row and column) nor the verifier sees: blockwise scale_b is (G, k-blocks,
    N-blocks), MX / NVFP4's (G, N, K/v), so sb_stride_n and sb_stride_k swap; MX's e8m0 go as bytes, as the dense
    launcher passes them. Strided views tell the strides apart. (sm_100a launches are refused until one has run.)"""
    from warploom.runtime.launch_grouped import grouped_scale_args

    _, _, sa, sb = _mx_inputs(300, 136, 320, 4, 0, strided=True)
    args = grouped_scale_args(ScaleRecipe.MX, sa, sb)
    assert (args["sb_stride_g"], args["sb_stride_n"], args["sb_stride_k"]) == sb.stride() != tuple(sorted(sb.stride()))
    assert (args["sa_stride_m"], args["sa_stride_k"]) == sa.stride()
    assert args["sa_ptr"].dtype == args["sb_ptr"].dtype == torch.uint8
    assert args["sb_ptr"].data_ptr() == sb.data_ptr() and args["sb_ptr"].stride() == sb.stride()
    s4 = sb.view(torch.uint8).view(torch.float8_e4m3fn)
    nv = grouped_scale_args(ScaleRecipe.NVFP4, sa.view(torch.uint8).view(torch.float8_e4m3fn), s4)
    assert (nv["sb_stride_n"], nv["sb_stride_k"]) == s4.stride()[1:] and nv["sb_ptr"].dtype == torch.float8_e4m3fn
    bw_b = torch.ones(4, 8, 16)[:, :, ::2]  # (G, k-blocks, N-blocks), strided
    bw = grouped_scale_args(ScaleRecipe.BLOCKWISE_1X128_128X128, torch.ones(300, 8), bw_b)
    assert (bw["sb_stride_g"], bw["sb_stride_k"], bw["sb_stride_n"]) == bw_b.stride()


def test_mx_scales_spanning_2_31_elements_are_refused() -> None:
    """The scale partition addresses scale_b at ``grp * sb_stride_g + n * sb_stride_n + k * sb_stride_k`` in 32 bits
    unless the spec's sizes need 64 (`scale_offsets_wide`): a strided view whose expert stride reaches past 2**31
    elements would wrap there, so it is refused by name, as dense MX and grouped blockwise scales are
    (`checks.check_block_scales`). Meta tensors: nothing is allocated."""
    from warploom.checks_grouped import grouped_call

    g, m, n, k = 4, 256, 128, 256
    a = torch.empty(m, k, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(g, n, k, device="meta", dtype=torch.float8_e4m3fn).transpose(-2, -1)
    offs = torch.empty(g, device="meta", dtype=torch.int32)
    sa = torch.empty(m, k // 32, device="meta", dtype=torch.float8_e8m0fnu)
    big = torch.empty(g, 2**30, device="meta", dtype=torch.float8_e8m0fnu)
    sb = big.as_strided((g, n, k // 32), (2**30, k // 32, 1))
    assert grouped_call(a, b, offs, None, None, sa, sb.contiguous()).spec.scale is ScaleRecipe.MX
    with pytest.raises(ScaleError, match="scale_b: expected a scale tensor spanning fewer than 2"):
        grouped_call(a, b, offs, None, None, sa, sb)
