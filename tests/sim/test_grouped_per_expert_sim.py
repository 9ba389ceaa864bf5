"""Per-expert operands in M-grouped fused epilogues on the simulator: a (G, N) bias adds row g along N to expert g's
rows, a (G,) scale multiplies them by value g (and the 3-D (G, 1, N), (G, 1, 1) forms the same); numerics against an
fp64 per-expert reference for random routings with empty experts and offsets that are not tile multiples, outputs
poisoned with NaN outside every expert, and a planted bug (the epilogue reading expert g+1's slice) that the numerics
catch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom import H100_SXM, GemmSpec, Grouping
from warploom.fused import fused_spec
from warploom.ir.raster import group_bounds
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.grouped import simulate_grouped

G, M, N, K = 5, 330, 256, 128


def _routing(seed: int) -> torch.Tensor:
    """Cumulative row ends over M: two experts empty, ends not multiples of any tile (64 or 128 rows)."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 2 * M // G, (G,), generator=g)
    counts[torch.randperm(G, generator=g)[:2]] = 0
    offs = counts.cumsum(0).clamp(max=M).to(torch.int32)
    assert any(int(e) % 64 for e in offs if 0 < int(e) < M)  # (a ragged edge inside a tile)
    return offs


def _moe(acc, bias, scale, weight):  # noqa: ANN001, ANN202
    """An MoE down projection: per-expert bias and output scale, then the token's routing weight."""
    return (acc + bias) * scale * weight


def _reference(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor,
               weight: torch.Tensor) -> torch.Tensor:
    """fp64, one expert at a time: rows of expert g get bias[g] and scale[g]; NaN in rows of no expert."""
    out = torch.full((M, N), float("nan"), dtype=torch.float64)
    for g, (s, e) in enumerate(group_bounds(Grouping.OFFSETS, offs.tolist(), M)):
        y = a[s:e].double() @ w[g].double().t()
        out[s:e] = (y + bias.reshape(G, N)[g].double()) * scale.reshape(G)[g].double() * weight[s:e].double()
    return out


def _operands(seed: int, three_d: bool) -> dict[str, torch.Tensor]:
    torch.manual_seed(100 + seed)
    bias = torch.randn(G, N).bfloat16() * 4  # (large beside acc: a wrong expert's row shows)
    scale = torch.rand(G) * 3 + 0.25
    if three_d:
        bias, scale = bias.reshape(G, 1, N), scale.reshape(G, 1, 1)
    return {"bias": bias, "scale": scale, "weight": torch.rand(M, 1)}


def _module(ops: dict[str, torch.Tensor], a: torch.Tensor, bm: int, bn: int):  # noqa: ANN202
    spec, picked = fused_spec(GemmSpec(M, N, K, grouping=Grouping.OFFSETS, groups=G), a, _moe, ops)
    assert [s.per_group for s in spec.epilogue.operands] == [True, True, False]
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=bm, bn=bn)).module, picked


def _check(out: torch.Tensor, ref: torch.Tensor) -> None:
    rows = ~ref[:, 0].isnan()
    assert out[~rows].isnan().all()  # poisoned rows of no expert: untouched by the clipped stores
    got, want = out[rows].double(), ref[rows]
    assert not got.isnan().any()
    err = ((got - want).norm() / want.norm()).item()
    assert err < 4e-3, err  # (bf16 output: 2^-9 relative rounding)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bm,bn", [(128, 128), (64, 128), (128, 256)])
@pytest.mark.parametrize("three_d", [False, True])
def test_per_expert_bias_and_scale(seed: int, bm: int, bn: int, three_d: bool) -> None:
    offs = _routing(seed)
    torch.manual_seed(seed)
    a, w = torch.randn(M, K).bfloat16(), torch.randn(G, N, K).bfloat16()
    ops = _operands(seed, three_d)
    mod, picked = _module(ops, a, bm, bn)
    res = simulate_grouped(mod, a, w.transpose(-2, -1), offs, seed=seed, operands=picked).raise_for_findings()
    _check(res.output, _reference(a, w, offs, ops["bias"], ops["scale"], ops["weight"]))


def test_planted_bug_reading_the_next_experts_slice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilogue's per-expert loads at group g+1 (the kernel's ``bias_ptr + (grp + 1) * N``) while B is read
    right: every expert's rows get a neighbour's bias and scale, which the numerics catch."""
    offs = torch.tensor([70, 70, 200, 250, 330], dtype=torch.int32)  # an empty expert, ragged edges
    torch.manual_seed(0)
    a, w = torch.randn(M, K).bfloat16(), torch.randn(G, N, K).bfloat16()
    ops = _operands(0, False)
    mod, picked = _module(ops, a, 128, 128)
    ref = _reference(a, w, offs, ops["bias"], ops["scale"], ops["weight"])
    clean = simulate_grouped(mod, a, w.transpose(-2, -1), offs, operands=picked).raise_for_findings()
    _check(clean.output, ref)
    real = program.ApplyI

    def next_expert(*args, group: int = 0, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return real(*args, group=(group + 1) % G, **kwargs)

    monkeypatch.setattr(program, "ApplyI", next_expert)
    bad = simulate_grouped(mod, a, w.transpose(-2, -1), offs, operands=picked)
    rows = ~ref[:, 0].isnan()
    assert bad.ok  # (no ordering or coverage finding: the wrong values are in the right places)
    assert not torch.allclose(bad.output[rows].double(), ref[rows], atol=0.5, rtol=5e-2)


def test_through_the_api_against_torch_grouped_mm() -> None:
    """warploom.grouped_mm on CPU tensors (the simulator) against torch._grouped_mm plus the per-expert epilogue."""
    offs = _routing(3)
    a, w = torch.randn(M, K).bfloat16(), torch.randn(G, N, K).bfloat16().transpose(-2, -1)
    bias, scale = torch.randn(G, N).bfloat16(), torch.rand(G) + 0.5
    y = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias, scale: F.gelu(acc + bias) * scale,
                            bias=bias, scale=scale)
    expert = torch.searchsorted(offs, torch.arange(M, dtype=torch.int32), right=True)
    end = int(offs[-1])
    e = expert[:end]
    ref = F.gelu(torch._grouped_mm(a, w, offs=offs).float()[:end] + bias.float()[e]) * scale[e, None]
    assert torch.allclose(y[:end].float(), ref, atol=0.25, rtol=2e-2)


def test_zero_k_reads_each_experts_slice() -> None:
    """K == 0 launches nothing: the epilogue of a zero accumulator, each expert's rows with its own bias."""
    offs = torch.tensor([3, 3, 8], dtype=torch.int32)
    a, w = torch.empty(8, 0).bfloat16(), torch.empty(3, 0, 16).bfloat16()
    bias = torch.randn(3, 16)
    y = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: acc + bias, bias=bias)
    assert torch.equal(y[:3].float(), bias[0].bfloat16().float().expand(3, 16))
    assert torch.equal(y[3:].float(), bias[2].bfloat16().float().expand(5, 16))
