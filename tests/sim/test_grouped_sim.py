"""Grouped GEMMs on the simulator (ir.Tiling.grouping): numerics against an fp32 torch reference (and torch's own
grouped ops on CPU) for random routings with empty experts and offsets that are not tile multiples, every layout and
recipe; and planted bugs at expert edges (a store not clipped at its group's end, a tile placed without its group's
first row, B read from the next expert) that the simulator catches."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from grouped_cases import routing, valid_rows  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.device import B200, DeviceInfo
from warploom.errors import InputError, UnsupportedError
from warploom.fused import fused_spec
from warploom.ir.raster import group_bounds
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.findings import FindingKind
from warploom.sim.grouped import reference_grouped, reference_k_grouped, simulate_grouped


def _close(got: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor, tol: float) -> None:
    g, r = got.float()[rows], ref[rows]
    err = ((g - r).norm() / r.norm().clamp(min=1e-6)).item()
    assert err < tol, err


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("device,bm,bn", [(H100_SXM, 128, 128), (H100_SXM, 64, 128), (H100_SXM, 128, 256),
                                          # sm_100a (rule 22 there): tcgen05 into tensor memory, same edges
                                          (B200, 128, 128), (B200, 128, 256)], ids=lambda v: getattr(v, "arch", v))
def test_offsets_bf16_k_major(seed: int, device: DeviceInfo, bm: int, bn: int) -> None:
    groups, m, n, k = 6, 400, 272, 160
    offs = routing(seed, groups, m)
    spec = GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=groups)
    mod = build(spec, device, plan_schedule(spec, device, bm=bm, bn=bn)).module
    assert mod.target == device.target
    torch.manual_seed(seed)
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(groups, n, k).bfloat16().transpose(-2, -1)
    res = simulate_grouped(mod, a, b, offs, seed=seed).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    ref = reference_grouped(a, b, bounds)
    rows = valid_rows(bounds, m)
    _close(res.output, ref, rows, 1e-2)
    assert res.output[~rows].isnan().all()  # rows past offs[-1] (and of no expert) untouched
    torch_ref = torch._grouped_mm(a, b, offs=offs)
    assert torch.allclose(res.output.float()[rows], torch_ref.float()[rows], atol=0.25, rtol=2e-2)


@pytest.mark.parametrize("device", [H100_SXM, B200], ids=lambda d: d.arch)
def test_offsets_fp16_n_major_and_fp32_out(device: DeviceInfo) -> None:
    groups, m, n, k = 4, 300, 136, 200
    offs = torch.tensor([0, 129, 129, 300], dtype=torch.int32)
    for out in (DType.FP16, DType.FP32):
        spec = GemmSpec(m, n, k, DType.FP16, DType.FP16, out, BLayout.N_MAJOR, grouping=Grouping.OFFSETS,
                        groups=groups)
        mod = build(spec, device).module
        a = torch.randn(m, k).half()
        b = torch.randn(groups, k, n).half()  # contiguous (G, K, N): N-major
        res = simulate_grouped(mod, a, b, offs).raise_for_findings()
        bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
        _close(res.output, reference_grouped(a, b, bounds), valid_rows(bounds, m), 1e-2)


@pytest.mark.parametrize("acc", [Accumulation.NATIVE, Accumulation.PROMOTED])
def test_offsets_fp8_rowwise(acc: Accumulation) -> None:
    groups, m, n, k = 5, 330, 256, 256
    offs = routing(7, groups, m)
    spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=acc,
                    grouping=Grouping.OFFSETS, groups=groups)
    mod = build(spec, H100_SXM).module
    a = (torch.randn(m, k) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(groups, n, k).to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(m) + 0.5, torch.rand(groups, n) + 0.5  # scale_b per expert: a wrong row shows
    res = simulate_grouped(mod, a, b, offs, sa, sb).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    _close(res.output, reference_grouped(a, b, bounds, sa, sb), valid_rows(bounds, m), 1e-2)


def test_masked_and_batched_through_the_api() -> None:
    groups, cap, n, k = 4, 48, 128, 96
    a = torch.randn(groups, cap, k).bfloat16()
    w = torch.randn(groups, n, k).bfloat16()
    counts = torch.tensor([0, 48, 17, 1], dtype=torch.int32)
    y = warploom.grouped_mm(a, w.transpose(-2, -1), masked_m=counts)
    assert y.shape == (groups, cap, n)
    for g in range(groups):
        c = int(counts[g])
        if c:
            ref = a[g, :c].float() @ w[g].float().t()
            assert torch.allclose(y[g, :c].float(), ref, atol=0.25, rtol=2e-2)
    yb = warploom.grouped_mm(a, w.transpose(-2, -1))  # 3-D x 3-D: every row
    assert torch.allclose(yb.float(), torch.bmm(a.float(), w.float().transpose(1, 2)), atol=0.25, rtol=2e-2)


def test_api_matches_torch_grouped_mm_on_cpu() -> None:
    offs = torch.tensor([33, 33, 200, 250], dtype=torch.int32)
    a = torch.randn(256, 128).bfloat16()
    b = torch.randn(4, 256, 128).bfloat16().transpose(-2, -1)
    y, ref = warploom.grouped_mm(a, b, offs), torch._grouped_mm(a, b, offs=offs)
    assert torch.allclose(y[:250].float(), ref[:250].float(), atol=0.25, rtol=2e-2)


# ---- planted bugs at expert edges: the raster twin (ir.raster.group_tiles, the kernel's group_tile) mutated ----

def _mutant(kind: str):  # noqa: ANN202
    real = program.group_tiles

    def tiles(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = real(*args, **kwargs)
        groups = len(args[1])
        if kind == "no_clip":  # the kernel storing a group's ragged last tile by TMA: rows of the next group
            return tuple(dataclasses.replace(t, row_end=None) for t in out)
        if kind == "no_group_start":  # tiles placed from row 0 rather than their group's first row
            starts = [s for s, _ in args[1]]
            return tuple(dataclasses.replace(t, off_m=t.off_m - starts[t.group]) for t in out)
        assert kind == "next_expert_b"  # B read from the next expert's weights
        return tuple(dataclasses.replace(t, group=(t.group + 1) % groups) for t in out)

    return tiles


@pytest.mark.parametrize("kind", ["no_clip", "no_group_start", "next_expert_b"])
def test_planted_expert_edge_bugs_are_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    groups, m, n, k = 4, 300, 128, 128
    offs = torch.tensor([70, 70, 250, 300], dtype=torch.int32)  # an empty expert, ragged edges
    spec = GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=groups)
    mod = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128)).module
    a = torch.randn(m, k).bfloat16()
    b = torch.randn(groups, n, k).bfloat16().transpose(-2, -1)
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    clean = simulate_grouped(mod, a, b, offs)
    assert clean.ok
    monkeypatch.setattr(program, "group_tiles", _mutant(kind))
    res = simulate_grouped(mod, a, b, offs)
    ref = reference_grouped(a, b, bounds)
    rows = valid_rows(bounds, m)
    wrong = not torch.allclose(res.output.float()[rows], ref[rows], atol=0.5, rtol=5e-2)
    if kind == "next_expert_b":  # tags agree (both sides read the mutated group): the numerics catch it
        assert wrong
    else:  # rows written into another group or never: the coverage check names them
        assert FindingKind.OUTPUT_COVERAGE in res.report.kinds(), res.report.summary()
        assert any("group" in f.message for f in res.findings)


# ---- the K-grouped weight gradient (Grouping.K_OFFSETS): a (M, total_K) x b (total_K, N) -> (G, M, N) ----

def _k_offsets(seed: int, groups: int, total_k: int) -> torch.Tensor:
    """Random cumulative K ends: some groups empty, ranges not multiples of BK, the last below total_K or at it."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 2 * total_k // groups, (groups,), generator=g)
    counts[torch.randperm(groups, generator=g)[: max(1, groups // 3)]] = 0
    return counts.cumsum(0).clamp(max=total_k).to(torch.int32)


def _k_module(m: int, n: int, k: int, groups: int, bm: int = 128, bn: int = 128, dt: DType = DType.BF16,
              layout: BLayout = BLayout.K_MAJOR):  # noqa: ANN202
    spec = GemmSpec(m, n, k, dt, dt, dt, layout, grouping=Grouping.K_OFFSETS, groups=groups)
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).module


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 128), (128, 256)])
def test_k_grouped_bf16(seed: int, bm: int, bn: int) -> None:
    groups, m, n, k = 5, 200, 144, 328
    offs = _k_offsets(seed, groups, k)
    mod = _k_module(m, n, k, groups, bm, bn)
    torch.manual_seed(seed)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()  # b: torch's column-major (total_K, N)
    res = simulate_grouped(mod, a, b, offs, seed=seed).raise_for_findings()
    got = res.output.reshape(groups, m, n)
    ref = reference_k_grouped(a, b, group_bounds(Grouping.K_OFFSETS, offs.tolist(), k))
    ends = [0, *offs.tolist()]
    for g in range(groups):
        if ends[g + 1] == ends[g]:
            assert bool((got[g] == 0).all())  # an empty K range: zeros, as torch gives
        else:
            _close(got[g].reshape(m, n), ref[g], torch.ones(m, dtype=torch.bool), 1e-2)
    assert torch.allclose(got.float(), torch._grouped_mm(a, b, offs=offs).float(), atol=0.25, rtol=2e-2)


def test_k_grouped_fp16_n_major_through_the_api() -> None:
    groups, m, n, k = 4, 96, 80, 200
    offs = torch.tensor([0, 37, 37, 190], dtype=torch.int32)  # empty first and third groups, a tail past offs[-1]
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()  # b contiguous (total_K, N): N-major
    y = warploom.grouped_mm(a, b, offs)
    assert y.shape == (groups, m, n) and y.dtype == torch.float16
    ref = reference_k_grouped(a, b, group_bounds(Grouping.K_OFFSETS, offs.tolist(), k))
    assert torch.allclose(y.float(), ref, atol=0.1, rtol=1e-2)
    assert bool((y[0] == 0).all()) and bool((y[2] == 0).all())


@pytest.mark.parametrize("kind", ["no_k_clip", "no_k_head_clip", "no_k_block_when_empty", "k_from_zero",
                                  "unaligned_k_start"])
def test_planted_k_edge_bugs_are_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that does not zero A past its group's K end (the next group's columns add in) or before its start
    (the previous group's, brought in by the 16-byte rounding of the start), one that runs no k-block for an empty
    group (its tile stores the previous tile's sum), one that reads every group's K from 0, and one that loads from
    the group's own K start: a TMA coordinate of 70 bf16 (140 bytes), an illegal instruction on an H100."""
    groups, m, n, k = 4, 128, 128, 300
    offs = torch.tensor([70, 70, 250, 300], dtype=torch.int32)
    mod = _k_module(m, n, k, groups)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()
    ref = reference_k_grouped(a, b, group_bounds(Grouping.K_OFFSETS, offs.tolist(), k))
    assert simulate_grouped(mod, a, b, offs).ok
    real, bk = program.k_group_tiles, mod.tiling.bk

    def tiles(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = real(*args, **kwargs)
        if kind == "no_k_clip":
            return tuple(dataclasses.replace(t, k_end=None) for t in out)
        if kind == "no_k_head_clip":
            return tuple(dataclasses.replace(t, k_start=t.k0) for t in out)
        if kind == "no_k_block_when_empty":
            return tuple(dataclasses.replace(t, k_hi=0) if t.k_end == t.k_start else t for t in out)
        if kind == "unaligned_k_start":
            return tuple(dataclasses.replace(t, k0=t.k_start, k_hi=max(1, -(-(t.k_end - t.k_start) // bk)))
                         for t in out)
        return tuple(dataclasses.replace(t, k0=0, k_start=0, k_end=t.k_end - t.k_start) for t in out)

    monkeypatch.setattr(program, "k_group_tiles", tiles)
    res = simulate_grouped(mod, a, b, offs)
    wrong = not torch.allclose(res.output.float().reshape(groups, m, n), ref, atol=0.5, rtol=5e-2)
    assert wrong or not res.ok
    if kind == "no_k_block_when_empty":  # the stale accumulator is named, not just wrong
        assert FindingKind.ACC_INCOMPLETE in res.report.kinds(), res.report.summary()
    if kind == "unaligned_k_start":  # right numbers, but the load the GPU faults on is named
        assert FindingKind.TMA_MISALIGNED in res.report.kinds(), res.report.summary()
        assert any("140 bytes" in f.message for f in res.findings)


# ---- fused epilogues on M-grouped kernels: operands indexed in the grouped row space ----

def _gate_up(acc, gate, weight, bias):  # noqa: ANN001, ANN202
    """An MoE up projection's epilogue: silu(gate) * up per row's routing weight, plus a column bias."""
    return F.silu(gate.float()) * acc * weight + bias


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 128), (128, 256)])
def test_fused_epilogue_on_offsets(seed: int, bm: int, bn: int) -> None:
    groups, m, n, k = 5, 330, 256, 128
    offs = routing(seed, groups, m)
    torch.manual_seed(seed)
    a, w = torch.randn(m, k).bfloat16(), torch.randn(groups, n, k).bfloat16()
    ops = {"gate": torch.randn(m, n).bfloat16(), "weight": torch.rand(m, 1), "bias": torch.randn(n)}
    spec, picked = fused_spec(GemmSpec(m, n, k, grouping=Grouping.OFFSETS, groups=groups), a, _gate_up, ops)
    mod = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).module
    res = simulate_grouped(mod, a, w.transpose(-2, -1), offs, seed=seed, operands=picked).raise_for_findings()
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    rows = valid_rows(bounds, m)
    ref = _gate_up(reference_grouped(a, w.transpose(-2, -1), bounds), **ops)
    _close(res.output, ref, rows, 1e-2)
    assert res.output[~rows].isnan().all()  # rows of no expert: untouched by the clipped stores


def test_fused_epilogue_through_the_api_and_its_refusals() -> None:
    offs = torch.tensor([40, 40, 200, 256], dtype=torch.int32)
    a, w = torch.randn(256, 64).bfloat16(), torch.randn(4, 128, 64).bfloat16()
    gate = torch.randn(256, 128).bfloat16()
    y = warploom.grouped_mm(a, w.transpose(-2, -1), offs, epilogue=lambda acc, gate: F.silu(gate.float()) * acc,
                            gate=gate)
    ref = F.silu(gate.float()) * torch._grouped_mm(a, w.transpose(-2, -1), offs=offs).float()
    assert torch.allclose(y.float(), ref, atol=0.25, rtol=2e-2)
    at = a.t().contiguous()  # (K-grouped, offs over K: fused too, tests/sim/test_k_grouped_epilogue_sim.py)
    yk = warploom.grouped_mm(at, gate, offs, epilogue=lambda acc: acc * 2)
    assert torch.allclose(yk.float(), torch._grouped_mm(at, gate, offs=offs).float() * 2, atol=0.25, rtol=2e-2)
    with pytest.raises(UnsupportedError, match="^epilogue: expected a function with one output"):
        warploom.grouped_mm(a, w.transpose(-2, -1), offs, epilogue=lambda acc: (acc, acc * 2))
    with pytest.raises(InputError, match="^gate: expected no epilogue operands"):
        warploom.grouped_mm(a, w.transpose(-2, -1), offs, gate=gate)
