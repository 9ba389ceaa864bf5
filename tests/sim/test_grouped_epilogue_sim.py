"""Fused epilogues on every grouped layout and recipe (issue 27 item 2: grouped GEMMs take fused epilogues like any
other), on the simulator against fp64 per-expert references:

- masked (a (G, M_max, K) a with counts): a dense (G, M_max, N) gate, a per-row (G, M_max) weight, per-expert (G, N)
  bias and (G,) scale; rows at or past a count untouched (the output poisoned with NaN stays NaN there);
- batched (a 3-D a without counts), through the API;
- fp8 rowwise (fast and promoted) M-grouped and masked: ``acc`` is the scaled product, scale_b the tile's expert's;
- fp8 blockwise M-grouped and masked: ``acc`` the promoted blockwise sum;
- random routings with empty experts and counts/offsets that are not tile multiples, and two planted bugs the
  numerics catch (a per-row operand read at another expert's rows, rowwise scale_b read from the next expert).

Modules are made by the API's own path (`grouped._fused` on a checked call) and simulated with a NaN-poisoned
output; the API tests go through `warploom.grouped_mm` / `scaled_grouped_mm` on CPU tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom import H100_SXM
from warploom.checks_grouped import grouped_call
from warploom.grouped import _fused
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.grouped import simulate_grouped

G, M_MAX, N, K = 4, 100, 192, 256  # (N: a ragged 128-wide tile; K: two 128-deep scale blocks)
E4 = torch.float8_e4m3fn


def _counts(seed: int) -> torch.Tensor:
    """Rows per expert for the masked layout: one empty expert, one full, the others not multiples of 64."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(1, M_MAX, (G,), generator=g)
    perm = torch.randperm(G, generator=g)
    c[perm[0]], c[perm[1]] = 0, M_MAX
    return c.to(torch.int32)


def _offsets(seed: int, m: int) -> torch.Tensor:
    """Cumulative row ends over m rows for the M-grouped layout: an empty expert, ragged ends."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.randint(0, m, (G - 1,), generator=g).sort().values
    offs = torch.cat([cuts, torch.tensor([m])])
    offs[1] = offs[0]  # (expert 1 empty)
    return offs.to(torch.int32)


def _moe(acc, gate, ebias, weight, escale):  # noqa: ANN001, ANN202
    """SiLU-mul of a gate/up pair, a per-expert bias and scale, each token's routing weight."""
    return F.silu(gate.float()) * (acc + ebias) * weight * escale


def _operands(seed: int, rows: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The `_moe` operands over result rows `rows` ((G, M_max) masked, (M,) M-grouped). Large per-expert values, so
    a wrong expert's row shows."""
    torch.manual_seed(200 + seed)
    return {"gate": torch.randn(*rows, N).bfloat16(), "ebias": torch.randn(G, N).bfloat16() * 4,
            "weight": torch.rand(*rows) + 0.25 if len(rows) == 2 else torch.rand(*rows, 1) + 0.25,
            "escale": torch.rand(G) * 3 + 0.25}


def _sim(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, ops: dict[str, Any], fn: Callable[..., Any],
         bm: int, bn: int, *, masked: bool, scale_a: Any = None, scale_b: Any = None, fast: bool = False,
         seed: int = 0) -> torch.Tensor:
    """The API's checks and fusion (`grouped._fused`, as grouped_mm / scaled_grouped_mm call it), the kernel planned
    at bm x bn, simulated into a NaN-poisoned (rows, N) output."""
    offs, masked_m = (None, bounds) if masked else (bounds, None)
    scaled = scale_a is not None
    call = grouped_call(a, w, offs, masked_m, None if not scaled else torch.bfloat16, scale_a, scale_b, fast)
    if scaled and call.spec.scale.is_blockwise:
        call, sa, sb, picked = _fused(call, fn, ops, scale_a=scale_a.flatten(0, -2), scale_b=scale_b)
    elif scaled:
        call, sa, sb, picked = _fused(call, fn, ops, scale_a=scale_a.reshape(-1, 1), scale_b=scale_b.unsqueeze(1))
    else:
        call, sa, sb, picked = _fused(call, fn, ops)
    mod = build(call.spec, H100_SXM, plan_schedule(call.spec, H100_SXM, bm=bm, bn=bn)).module
    out = torch.full((call.spec.m, N), float("nan"), dtype=torch.bfloat16)
    simulate_grouped(mod, call.a, call.b, call.bounds, sa, sb, out=out, operands=picked, seed=seed
                     ).raise_for_findings()
    return out


def _rows_of(bounds: torch.Tensor, masked: bool) -> list[tuple[int, int]]:
    if masked:
        return [(g * M_MAX, g * M_MAX + int(c)) for g, c in enumerate(bounds)]
    ends = bounds.tolist()
    return [(ends[g - 1] if g else 0, ends[g]) for g in range(G)]


def _reference(products: list[torch.Tensor], bounds: torch.Tensor, ops: dict[str, torch.Tensor], rows: int,
               masked: bool) -> torch.Tensor:
    """fp64 `_moe` on each expert's fp64 product (R_g, N); NaN in rows of no expert."""
    out = torch.full((rows, N), float("nan"), dtype=torch.float64)
    gate, weight = ops["gate"].reshape(rows, N).double(), ops["weight"].reshape(rows, 1).double()
    for g, (s, e) in enumerate(_rows_of(bounds, masked)):
        y = products[g] + ops["ebias"][g].double()
        out[s:e] = F.silu(gate[s:e]) * y * weight[s:e] * ops["escale"][g].double()
    return out


def _check(out: torch.Tensor, ref: torch.Tensor) -> None:
    rows = ~ref[:, 0].isnan()
    assert out[~rows].isnan().all()  # poisoned rows of no expert (past a count, past offs[-1]): never written
    got, want = out[rows].double(), ref[rows]
    assert not got.isnan().any()
    err = ((got - want).norm() / want.norm()).item()
    assert err < 5e-3, err  # (bf16 output: 2^-9 relative rounding)


def _masked_inputs(seed: int, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    a, w = torch.randn(G, M_MAX, K), torch.randn(G, N, K)
    return a.to(dtype), w.to(dtype).transpose(-2, -1)  # (b K-major, as torch's grouped ops take it)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 128)])
def test_masked_bf16(seed: int, bm: int, bn: int) -> None:
    counts = _counts(seed)
    a, w = _masked_inputs(seed)
    ops = _operands(seed, (G, M_MAX))
    out = _sim(a, w, counts, ops, _moe, bm, bn, masked=True, seed=seed)
    products = [a[g, :int(c)].double() @ w[g].double() for g, c in enumerate(counts)]
    _check(out, _reference(products, counts, ops, G * M_MAX, True))


@pytest.mark.parametrize("fast", [False, True])
def test_rowwise_offsets(fast: bool) -> None:
    m = G * M_MAX
    offs = _offsets(1, m)
    torch.manual_seed(1)
    a, w = torch.randn(m, K).to(E4), torch.randn(G, N, K).to(E4).transpose(-2, -1)
    sa, sb = torch.rand(m) + 0.5, torch.rand(G, N) + 0.5
    ops = _operands(1, (m,))
    out = _sim(a, w, offs, ops, _moe, 128, 128, masked=False, scale_a=sa, scale_b=sb, fast=fast)
    products = [(a[s:e].double() @ w[g].double()) * sa[s:e, None].double() * sb[g].double()
                for g, (s, e) in enumerate(_rows_of(offs, False))]
    _check(out, _reference(products, offs, ops, m, False))


def test_rowwise_masked_fast() -> None:
    counts = _counts(2)
    a, w = _masked_inputs(2, E4)
    sa, sb = torch.rand(G, M_MAX) + 0.5, torch.rand(G, N) + 0.5
    ops = _operands(2, (G, M_MAX))
    out = _sim(a, w, counts, ops, _moe, 64, 128, masked=True, scale_a=sa, scale_b=sb, fast=True)
    products = [(a[g, :int(c)].double() @ w[g].double()) * sa[g, :int(c), None].double() * sb[g].double()
                for g, c in enumerate(counts)]
    _check(out, _reference(products, counts, ops, G * M_MAX, True))


def _blockwise(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """fp64 1x128 x 128x128 product of one expert: a (R, K), w (K, N), sa (R, K/128), sb (K/128, ceil(N/128))."""
    aa = a.double() * sa.double().repeat_interleave(128, 1)[:, :K]
    bb = w.double() * sb.double().repeat_interleave(128, 0)[:K].repeat_interleave(128, 1)[:, :N]
    return aa @ bb


@pytest.mark.parametrize("masked", [False, True])
def test_blockwise(masked: bool) -> None:
    torch.manual_seed(3)
    kb, nb = K // 128, -(-N // 128)
    sb = torch.rand(G, kb, nb) + 0.5
    if masked:
        bounds = _counts(3)
        a, w = _masked_inputs(3, E4)
        sa = torch.rand(G, M_MAX, kb) + 0.5
        products = [_blockwise(a[g, :int(c)], w[g], sa[g, :int(c)], sb[g]) for g, c in enumerate(bounds)]
        ops = _operands(3, (G, M_MAX))
    else:
        m = G * M_MAX
        bounds = _offsets(3, m)
        a, w = torch.randn(m, K).to(E4), torch.randn(G, N, K).to(E4).transpose(-2, -1)
        sa = torch.rand(m, kb) + 0.5
        products = [_blockwise(a[s:e], w[g], sa[s:e], sb[g]) for g, (s, e) in enumerate(_rows_of(bounds, False))]
        ops = _operands(3, (m,))
    out = _sim(a, w, bounds, ops, _moe, 64, 128, masked=masked, scale_a=sa, scale_b=sb)
    _check(out, _reference(products, bounds, ops, G * M_MAX, masked))


def test_planted_bug_per_row_operand_of_another_expert_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilogue reads its dense gate and per-row weight M_max rows off (another expert's rows of the masked
    layout, as a kernel indexing them by the wrong group's base would) while the product is right: no ordering or
    coverage finding, but the numerics catch it."""
    counts = torch.tensor([37, 0, 100, 64], dtype=torch.int32)
    a, w = _masked_inputs(4)
    ops = _operands(4, (G, M_MAX))
    products = [a[g, :int(c)].double() @ w[g].double() for g, c in enumerate(counts)]
    ref = _reference(products, counts, ops, G * M_MAX, True)
    _check(_sim(a, w, counts, ops, _moe, 64, 128, masked=True), ref)
    real = program.ApplyI

    def other_expert(site, acc, cols, off_m, *rest, group: int = 0, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        return real(site, acc, cols, off_m + (M_MAX if group == 0 else -M_MAX), *rest, group=group, **kw)

    monkeypatch.setattr(program, "ApplyI", other_expert)
    bad = _sim(a, w, counts, ops, _moe, 64, 128, masked=True)
    rows = ~ref[:, 0].isnan()
    assert not torch.allclose(bad[rows].double(), ref[rows], atol=0.5, rtol=5e-2)


def test_planted_bug_rowwise_scale_b_of_the_next_expert_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowwise scale_b is a per-expert graph operand: read at group g + 1 (the kernel's ``scale_b_ptr + (grp + 1) *
    N``), every expert's rows get a neighbour's column scales, which the numerics catch."""
    m = G * M_MAX
    offs = torch.tensor([90, 90, 250, m], dtype=torch.int32)
    torch.manual_seed(5)
    a, w = torch.randn(m, K).to(E4), torch.randn(G, N, K).to(E4).transpose(-2, -1)
    sa, sb = torch.rand(m) + 0.5, torch.rand(G, N) * 4 + 0.25
    ops = _operands(5, (m,))
    ops["ebias"] = torch.zeros(G, N).bfloat16()  # (scale_b alone differs between experts)
    ops["escale"] = torch.ones(G)
    products = [(a[s:e].double() @ w[g].double()) * sa[s:e, None].double() * sb[g].double()
                for g, (s, e) in enumerate(_rows_of(offs, False))]
    ref = _reference(products, offs, ops, m, False)
    real = program.ApplyI

    def next_expert(*args, group: int = 0, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return real(*args, group=(group + 1) % G, **kwargs)

    monkeypatch.setattr(program, "ApplyI", next_expert)
    bad = _sim(a, w, offs, ops, _moe, 128, 128, masked=False, scale_a=sa, scale_b=sb)
    rows = ~ref[:, 0].isnan()
    assert not torch.allclose(bad[rows].double(), ref[rows], atol=0.5, rtol=5e-2)


def test_batched_through_the_api() -> None:
    """A 3-D x 3-D batched call (every row) with (G, 1, N), (G, M_max, 1) and (1, 1, N) operands, against the same
    function on torch.bmm in fp64."""
    a, w = _masked_inputs(6)
    bias, rows, cols = torch.randn(G, 1, N), torch.rand(G, M_MAX, 1) + 0.5, torch.randn(1, 1, N).bfloat16()
    y = warploom.grouped_mm(a, w, epilogue=lambda acc, bias, rows, cols: F.gelu(acc + bias) * rows + cols,
                            bias=bias, rows=rows, cols=cols)
    assert y.shape == (G, M_MAX, N) and y.dtype == torch.bfloat16
    ref = F.gelu(torch.bmm(a.double(), w.double()) + bias.double()) * rows.double() + cols.double()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 5e-3


def test_scaled_through_the_api() -> None:
    """`scaled_grouped_mm(..., epilogue=fn)` on CPU tensors, rowwise M-grouped (rows past offs[-1] left) and
    blockwise masked, against fp64."""
    m = G * M_MAX
    offs = torch.tensor([50, 50, 130, 333], dtype=torch.int32)
    torch.manual_seed(7)
    a, w = torch.randn(m, K).to(E4), torch.randn(G, N, K).to(E4).transpose(-2, -1)
    sa, sb, up = torch.rand(m) + 0.5, torch.rand(G, N) + 0.5, torch.randn(m, N).bfloat16()
    y = warploom.scaled_grouped_mm(a, w, sa, sb, offs, epilogue=lambda acc, up: F.silu(acc) * up, up=up)
    for g, (s, e) in enumerate(_rows_of(offs, False)):
        ref = F.silu((a[s:e].double() @ w[g].double()) * sa[s:e, None].double() * sb[g].double()) * up[s:e].double()
        assert torch.allclose(y[s:e].double(), ref, atol=0.05, rtol=1e-2), g
    counts = _counts(7)
    a3, w3 = _masked_inputs(7, E4)
    sa3, sb3 = torch.rand(G, M_MAX, K // 128) + 0.5, torch.rand(G, K // 128, 2) + 0.5
    scale = torch.rand(G) + 0.5
    y3 = warploom.scaled_grouped_mm(a3, w3, sa3, sb3, masked_m=counts, epilogue=lambda acc, s: acc * s, s=scale)
    for g, c in enumerate(counts.tolist()):
        ref = _blockwise(a3[g, :c], w3[g], sa3[g, :c], sb3[g]) * scale[g].double()
        assert torch.allclose(y3[g, :c].double(), ref, atol=0.05, rtol=1e-2), g


def test_masked_zero_k_reads_each_experts_slice() -> None:
    """K == 0 launches nothing: the epilogue of a zero accumulator on the (G, M_max, N) result, each expert's rows
    with its own bias row and their own weights."""
    a, w = torch.empty(G, 8, 0).bfloat16(), torch.empty(G, 0, 16).bfloat16()
    bias, weight = torch.randn(G, 16), torch.rand(G, 8)
    y = warploom.grouped_mm(a, w, masked_m=torch.tensor([8, 0, 3, 5], dtype=torch.int32),
                            epilogue=lambda acc, bias, weight: (acc + bias) * weight, bias=bias, weight=weight)
    assert y.shape == (G, 8, 16)
    assert torch.equal(y[2, :3].float(), (bias[2] * weight[2, :3, None]).bfloat16().float())
