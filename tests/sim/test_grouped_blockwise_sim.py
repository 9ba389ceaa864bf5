"""Blockwise fp8 grouped GEMMs on the simulator (DeepSeek-V3's MoE recipe, 1x128 x 128x128): numerics against an
fp64 per-expert, per-k-block reference for random routings with an empty expert, offsets that are not tile
multiples, a ragged last k-block and a ragged last 128-column block of N, on the M-grouped, masked and batched
layouts; and planted expert-edge bugs in the scales (scale_b read from the next expert, scale_a rows counted from
the expert's start) that the simulator catches."""

from __future__ import annotations

import pytest
import torch
from grouped_cases import valid_rows  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, Accumulation, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.ir import nodes as ir
from warploom.ir.raster import group_bounds
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.grouped import simulate_grouped
from warploom.spec import SCALE_BLOCK

BW = ScaleRecipe.BLOCKWISE_1X128_128X128


def _module(m: int, n: int, k: int, groups: int, bm: int = 128, bn: int = 128) -> ir.Module:
    spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=BW, accumulation=Accumulation.PROMOTED,
                    grouping=Grouping.OFFSETS, groups=groups)
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).module


def _routing(seed: int, groups: int, rows: int) -> torch.Tensor:
    """Random cumulative row ends over `rows`: at least one expert empty, ends not multiples of any tile."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 2 * rows // groups, (groups,), generator=g)
    counts[torch.randperm(groups, generator=g)[: max(1, groups // 4)]] = 0
    return counts.cumsum(0).clamp(max=rows).to(torch.int32)


def _operands(seed: int, groups: int, m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (m, k) and b (G, K, N) (a (G, N, K) weight seen transposed), scale_a (m, KB) and scale_b (G, KB, NB).
    Each expert's scale_b sits at its own power of two, so another expert's scales are off by a factor of 2 or more."""
    torch.manual_seed(seed)
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    a = (torch.randn(m, k) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(groups, n, k).to(torch.float8_e4m3fn).transpose(-2, -1)
    sa = torch.rand(m, kb) + 0.5
    sb = (torch.rand(groups, kb, nb) + 0.5) * (2.0 ** torch.arange(groups, dtype=torch.float32)).reshape(-1, 1, 1)
    return a, b, sa, sb


def reference(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
              bounds: tuple[tuple[int, int], ...]) -> torch.Tensor:
    """fp64, NaN outside every expert's rows: for expert g's rows, the sum over 128-deep k-blocks kb of
    ``(a[rows, kb] @ b[g][kb, :]) * scale_a[rows, kb] * scale_b[g, kb, n // 128]``."""
    m, k = a.shape
    n = b.shape[2]
    out = torch.full((m, n), float("nan"), dtype=torch.float64)
    for g, (s, e) in enumerate(bounds):
        acc = torch.zeros(e - s, n, dtype=torch.float64)
        for kb in range(-(-k // SCALE_BLOCK)):
            ks = slice(kb * SCALE_BLOCK, min(k, (kb + 1) * SCALE_BLOCK))
            part = a[s:e, ks].double() @ b[g][ks].double()
            col = sb[g, kb].double().repeat_interleave(SCALE_BLOCK)[:n]  # (N,): each column's 128-block scale
            acc += part * sa[s:e, kb].double()[:, None] * col[None, :]
        out[s:e] = acc
    return out


def _err(got: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor) -> float:
    """Relative Frobenius error over the experts' rows: scale-free, whatever the scales' magnitudes."""
    g, r = got.double()[rows], ref[rows]
    return ((g - r).norm() / r.norm().clamp(min=1e-30)).item()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 128), (128, 256)])
def test_blockwise_offsets(seed: int, bm: int, bn: int) -> None:
    # K = 304: two whole k-blocks and a partial one (48 deep); N = 264: two 128-column scale blocks and 8 columns
    groups, m, n, k = 6, 400, 264, 304
    offs = _routing(seed, groups, m)
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    assert any(s == e for s, e in bounds)  # an empty expert
    a, b, sa, sb = _operands(seed, groups, m, n, k)
    res = simulate_grouped(_module(m, n, k, groups, bm, bn), a, b, offs, sa, sb, seed=seed).raise_for_findings()
    rows = valid_rows(bounds, m)
    assert _err(res.output, reference(a, b, sa, sb, bounds), rows) < 1e-2  # bf16 output: ~4e-3
    assert res.output[~rows].isnan().all()  # rows of no expert (past offs[-1]): never stored


def test_blockwise_k_multiple_of_128_and_one_expert() -> None:
    for groups, offs in ((1, [200]), (3, [0, 0, 200])):  # every row one expert's; the first two experts empty
        m, n, k = 200, 128, 256
        a, b, sa, sb = _operands(1, groups, m, n, k)
        t = torch.tensor(offs, dtype=torch.int32)
        res = simulate_grouped(_module(m, n, k, groups), a, b, t, sa, sb).raise_for_findings()
        bounds = group_bounds(Grouping.OFFSETS, offs, m)
        assert _err(res.output, reference(a, b, sa, sb, bounds), valid_rows(bounds, m)) < 1e-2


def test_blockwise_through_the_api_with_deepgemm_scale_layout() -> None:
    """`warploom.scaled_grouped_mm` on CPU tensors runs the simulator; DeepGEMM's (G, N/128, K/128) scale_b storage
    goes as its transposed view, the same values as a contiguous (G, K/128, N/128) one."""
    groups, m, n, k = 4, 300, 264, 304
    offs = torch.tensor([70, 70, 250, 300], dtype=torch.int32)
    a, b, sa, sb = _operands(3, groups, m, n, k)
    deepgemm = sb.transpose(-2, -1).contiguous()  # (G, NB, KB) storage
    y = warploom.scaled_grouped_mm(a, b, sa, deepgemm.transpose(-2, -1), offs=offs)
    assert y.shape == (m, n) and y.dtype == torch.bfloat16
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    assert _err(y, reference(a, b, sa, sb, bounds), valid_rows(bounds, m)) < 1e-2
    assert torch.equal(y, warploom.scaled_grouped_mm(a, b, sa, sb.contiguous(), offs=offs))


@pytest.mark.parametrize("bm", [64, 128])
def test_blockwise_masked_and_batched(bm: int) -> None:
    """DeepGEMM's masked layout (a (G, M_max, K), counts masked_m): scale_a (G, M_max, KB) over a's rows, here
    stored K-blocks-major per expert (a strided view, copied flat by the API); and 3-D x 3-D batched, every row."""
    groups, cap, n, k = 4, 80, 264, 304
    a2, b, sa2, sb = _operands(9, groups, groups * cap, n, k)
    a, sa = a2.reshape(groups, cap, k), sa2.reshape(groups, cap, -1).transpose(1, 2).contiguous().transpose(1, 2)
    counts = torch.tensor([0, 80, 17, 65], dtype=torch.int32)
    spec = GemmSpec(groups * cap, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=BW,
                    accumulation=Accumulation.PROMOTED, grouping=Grouping.MASKED, groups=groups)
    mod = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=128)).module
    res = simulate_grouped(mod, a2, b, counts, sa2, sb).raise_for_findings()
    bounds = group_bounds(Grouping.MASKED, counts.tolist(), groups * cap)  # (rows g * cap .. g * cap + count)
    rows = valid_rows(bounds, groups * cap)
    ref = reference(a2, b, sa2, sb, bounds)
    assert _err(res.output, ref, rows) < 1e-2 and res.output[~rows].isnan().all()
    y = warploom.scaled_grouped_mm(a, b, sa, sb, masked_m=counts)
    assert y.shape == (groups, cap, n) and _err(y.reshape(groups * cap, n), ref, rows) < 1e-2
    full = group_bounds(Grouping.MASKED, [cap] * groups, groups * cap)
    yb = warploom.scaled_grouped_mm(a, b, sa, sb)
    assert _err(yb.reshape(groups * cap, n), reference(a2, b, sa2, sb, full), valid_rows(full, groups * cap)) < 1e-2


# ---- planted bugs at expert edges in the scales: the scale twin (sim.program.scale_tag) mutated ----

def _mutant(kind: str, starts: list[int], groups: int):  # noqa: ANN202
    real = program.scale_tag

    def tag(tensor: ir.Tensor, tile, k: int, grouped: bool = False):  # noqa: ANN001, ANN202
        t = real(tensor, tile, k, grouped)
        if kind == "next_expert_scale_b" and tensor is ir.Tensor.SCALE_B:  # scale_b of expert g + 1
            return program.Tag(t.tensor, t.axes, t.origin, (tile.group + 1) % groups)
        if kind == "scale_a_from_expert_start" and tensor is ir.Tensor.SCALE_A:  # rows counted in the expert
            return program.Tag(t.tensor, t.axes, (tile.off_m - starts[tile.group], k))
        return t

    return tag


@pytest.mark.parametrize("kind", ["next_expert_scale_b", "scale_a_from_expert_start"])
def test_planted_scale_bugs_are_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that reads the next expert's scale_b, or scale_a's rows from the expert's own start (rows local to
    the expert rather than the grouped row space): the copies and the promotions agree on the wrong block (both come
    from the same address arithmetic), so the tags match and the numerics catch it."""
    groups, m, n, k = 4, 300, 256, 256
    offs = torch.tensor([70, 70, 250, 300], dtype=torch.int32)  # an empty expert, ragged edges
    mod = _module(m, n, k, groups)
    a, b, sa, sb = _operands(5, groups, m, n, k)
    bounds = group_bounds(Grouping.OFFSETS, offs.tolist(), m)
    ref, rows = reference(a, b, sa, sb, bounds), valid_rows(bounds, m)
    assert _err(simulate_grouped(mod, a, b, offs, sa, sb).raise_for_findings().output, ref, rows) < 1e-2
    monkeypatch.setattr(program, "scale_tag", _mutant(kind, [s for s, _ in bounds], groups))
    res = simulate_grouped(mod, a, b, offs, sa, sb)
    assert _err(res.output, ref, rows) > 0.1, res.report.summary()


# ---- K-grouped blockwise fp8 (the weight gradient): a (M, total_K) x b (total_K, N) -> (G, M, N), offs over K ----

def _k_module(m: int, n: int, k: int, groups: int, bm: int = 128, bn: int = 128) -> ir.Module:
    spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=BW, accumulation=Accumulation.PROMOTED,
                    grouping=Grouping.K_OFFSETS, groups=groups)
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).module


def _k_offsets(seed: int, groups: int, total_k: int) -> torch.Tensor:
    """Random cumulative K ends on the 128 grid, one group or more empty, the last at total_K (not a multiple of 128
    in these tests, so the last group's last k-block is partial)."""
    g = torch.Generator().manual_seed(seed)
    blocks = total_k // SCALE_BLOCK
    cuts = sorted(torch.randint(0, blocks + 1, (groups - 1,), generator=g).tolist())
    cuts[int(torch.randint(1, groups - 1, (1,), generator=g))] = cuts[0]  # (two equal cuts at least: an empty group)
    return torch.tensor(sorted(c * SCALE_BLOCK for c in cuts) + [total_k], dtype=torch.int32)


def _k_operands(seed: int, m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (M, total_K), b (total_K, N) column-major (torch's, a contiguous (N, total_K) seen as .t()), scale_a
    (M, KB) and scale_b (KB, NB). Each k-block's scales sit at their own power of two, so a neighbour block's are off
    by a factor of 2 or more."""
    torch.manual_seed(seed)
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    step = (2.0 ** (torch.arange(kb, dtype=torch.float32) % 5))
    a = (torch.randn(m, k) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    return a, b, (torch.rand(m, kb) + 0.5) * step, (torch.rand(kb, nb) + 0.5) * step.reshape(-1, 1)


def reference_k(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, offs: list[int]
                ) -> torch.Tensor:
    """fp64 (G, M, N): a and b dequantized (a[:, k] * scale_a[:, k // 128], b[k, n] * scale_b[k // 128, n // 128]),
    then each group's product over its own K range, zeros for an empty one."""
    m, k = a.shape
    n = b.shape[1]
    a64 = a.double() * sa.double().repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    sb64 = sb.double().repeat_interleave(SCALE_BLOCK, dim=0)[:k].repeat_interleave(SCALE_BLOCK, dim=1)[:, :n]
    b64 = b.double() * sb64
    ends = [0, *offs]
    return torch.stack([a64[:, s:e] @ b64[s:e] for s, e in zip(ends, ends[1:], strict=False)])


def _k_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.double() - ref).norm() / ref.norm().clamp(min=1e-30)).item()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 128), (128, 256)])
def test_k_grouped_blockwise(seed: int, bm: int, bn: int) -> None:
    """Random offsets (an empty group, the last group's K 720 - its start: a partial k-block), ragged N (264: two
    128-column scale blocks and 8 columns), M not a tile multiple; the output starts NaN (simulate_grouped's) and
    must come back finite everywhere, an empty group's block exactly 0 (torch's)."""
    groups, m, n, k = 5, 96, 264, 720
    offs = _k_offsets(seed, groups, k)
    ends = [0, *offs.tolist()]
    assert any(s == e for s, e in zip(ends, ends[1:], strict=False))
    a, b, sa, sb = _k_operands(seed, m, n, k)
    res = simulate_grouped(_k_module(m, n, k, groups, bm, bn), a, b, offs, sa, sb, seed=seed).raise_for_findings()
    got = res.output.reshape(groups, m, n)
    assert bool(got.isfinite().all())
    ref = reference_k(a, b, sa, sb, offs.tolist())
    assert _k_err(got, ref) < 1e-2  # bf16 output: ~2e-3
    for g in range(groups):
        if ends[g] == ends[g + 1]:
            assert bool((got[g] == 0).all())
        else:
            assert _k_err(got[g], ref[g]) < 1e-2


def test_k_grouped_blockwise_through_the_api() -> None:
    """`warploom.scaled_grouped_mm` with a 2-D a and b on CPU runs the simulator: (G, M, N) bf16; a scale_b stored
    (NB, KB) (DeepGEMM's order) goes as its .t() view, the same values; K a multiple of 128 with an empty last group
    (its one k-block starts at total_K: its scale copies are masked, nothing read past the scales)."""
    groups, m, n, k = 4, 72, 136, 512
    offs = torch.tensor([128, 128, 512, 512], dtype=torch.int32)
    a, b, sa, sb = _k_operands(4, m, n, k)
    y = warploom.scaled_grouped_mm(a, b, sa, sb.t().contiguous().t(), offs=offs)
    assert y.shape == (groups, m, n) and y.dtype == torch.bfloat16
    assert _k_err(y, reference_k(a, b, sa, sb, offs.tolist())) < 1e-2
    assert bool((y[1] == 0).all()) and bool((y[3] == 0).all())
    assert torch.equal(y, warploom.scaled_grouped_mm(a, b, sa, sb, offs=offs))


def _k_mutant(kind: str):  # noqa: ANN202
    real = program.scale_tag

    def tag(tensor: ir.Tensor, tile, k: int, grouped: bool = False):  # noqa: ANN001, ANN202
        t = real(tensor, tile, k, grouped)
        if kind == "scale_k_from_zero":  # every group's scale blocks counted from 0, not its K start
            return program.Tag(t.tensor, t.axes, (t.origin[0], k))
        if kind == "previous_group_block" and tile.k0:  # one scale block early: the previous group's last
            return program.Tag(t.tensor, t.axes, (t.origin[0], t.origin[1] - 1))
        if kind == "scale_a_at_c_rows" and tensor is ir.Tensor.SCALE_A:  # C's rows (g * M + r), not A's (r)
            return program.Tag(t.tensor, t.axes, (tile.off_m, t.origin[1]))
        return t

    return tag


@pytest.mark.parametrize("kind", ["scale_k_from_zero", "previous_group_block", "scale_a_at_c_rows"])
def test_planted_k_grouped_scale_bugs_are_caught(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose scale copies count a group's k-blocks from 0 (rather than from its K start), read one block
    early (the previous group's), or index scale_a at C's (G * M) rows rather than A's: the copies and promotions
    agree on the wrong block (the same address arithmetic), so the tags match and the numerics catch it."""
    groups, m, n, k = 4, 96, 264, 720
    offs = torch.tensor([256, 256, 512, 720], dtype=torch.int32)
    a, b, sa, sb = _k_operands(6, m, n, k)
    mod, ref = _k_module(m, n, k, groups), reference_k(a, b, sa, sb, offs.tolist())
    assert _k_err(simulate_grouped(mod, a, b, offs, sa, sb).raise_for_findings().output.reshape(groups, m, n),
                  ref) < 1e-2
    monkeypatch.setattr(program, "scale_tag", _k_mutant(kind))
    res = simulate_grouped(mod, a, b, offs, sa, sb)
    assert _k_err(res.output.reshape(groups, m, n), ref) > 0.1, res.report.summary()
