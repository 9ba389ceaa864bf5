"""A fused 1x128 quantization on grouped GEMMs (rule 26 on rule 22's tiles; issue 27 item 3): the M-grouped and
masked layouts, bf16 and fp8 rowwise (fast and promoted) and blockwise, on the simulator against the plain
``warploom.quantize`` of a torch reference.

The kernel returns (q, s): q fp8 over the result's rows, s (rows, ceil(N/128)) fp32. Small integer inputs and
power-of-two scales keep every fp32 sum exact in any order, so q's bytes and s match the plain function's of the
fp64 product bit for bit (as tests/sim/test_quantize_epilogue_sim.py's dense ones do); the SiLU-mul gate epilogue
is the same torch fp32 arithmetic in the simulator and the reference. Routings are random with an empty expert, ends
that are no tile multiples and rows past the last offs; both outputs start NaN-poisoned, and rows of no group must
stay NaN in q and in s (the scale stores are clipped at the group's last row as C's are). A planted bug (the scale
stores not clipped) is caught by the coverage check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fused_cases import ints, same_bytes  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM
from warploom.checks_grouped import grouped_call
from warploom.errors import UnsupportedError
from warploom.grouped import _fused
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import numerics
from warploom.sim.findings import FindingKind, ProtocolError
from warploom.sim.grouped import simulate_grouped

G, M_MAX, N, K = 4, 100, 304, 256  # (N: two whole groups and a ragged one of 48; K: two 128-deep scale blocks)
NB = -(-N // 128)
BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


def _quantize(acc: torch.Tensor) -> Any:
    return warploom.quantize(acc, recipe="1x128")


def _silu_mul(acc: torch.Tensor, gate: torch.Tensor) -> Any:
    return warploom.quantize(F.silu(gate.float()) * acc, recipe="1x128")


def _rows(bounds: torch.Tensor, masked: bool, m: int) -> list[tuple[int, int]]:
    """Each expert's rows of C: the masked layout's g * M_max + count, else the cumulative offs."""
    if masked:
        return [(g * M_MAX, g * M_MAX + int(c)) for g, c in enumerate(bounds)]
    ends = bounds.tolist()
    return [(ends[g - 1] if g else 0, ends[g]) for g in range(G)]


def _bounds(seed: int, masked: bool, m: int) -> torch.Tensor:
    """Random counts (masked) or offsets: one empty expert, ends no multiples of 64, and (offsets) rows past the
    last end that no group owns."""
    gen = torch.Generator().manual_seed(seed)
    if masked:
        c = torch.randint(1, M_MAX, (G,), generator=gen)
        c[seed % G] = 0
        return c.to(torch.int32)
    cuts = torch.randint(0, m - 20, (G,), generator=gen).sort().values
    cuts[1] = cuts[0]  # (expert 1 empty)
    return cuts.to(torch.int32)


def _scales(recipe: str, m: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Power-of-two scales (exact products): rowwise (M,) and (G, N), blockwise (M, K/128) and (G, K/128, NB); the
    same ones every call (the simulation's and the reference's)."""
    gen = torch.Generator().manual_seed(m)
    pow2 = lambda *shape: torch.exp2(torch.randint(-2, 3, shape, generator=gen).float())  # noqa: E731
    if recipe == "bf16":
        return None, None
    if recipe == "blockwise":
        return pow2(m, K // 128), pow2(G, K // 128, NB)
    return pow2(m), pow2(G, N)


def _inputs(seed: int, recipe: str, masked: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a ((G, M_max, K) masked, else (G * M_max, K)), the experts' weights (G, K, N) K-major, and a gate over the
    result's rows."""
    torch.manual_seed(seed)
    dt = BF16 if recipe == "bf16" else E4
    a = ints(G, M_MAX, K) if masked else ints(G * M_MAX, K)
    w = ints(G, N, K).to(dt).transpose(-2, -1)
    gate = ints(*a.shape[:-1], N, lo=-3, hi=4).to(BF16)
    return a.to(dt), w, gate


def _sim(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, fn: Callable[..., Any], ops: dict[str, Any],
         recipe: str, masked: bool, bm: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The API's checks and fusion (`grouped._fused`), its plan (or bm forced), simulated into NaN-poisoned q and
    s; the plan's tile."""
    sa, sb = _scales(recipe, a.shape[0] * (a.shape[1] if masked else 1))
    if masked and sa is not None:
        sa = sa.reshape(G, M_MAX, *sa.shape[1:])
    offs, masked_m = (None, bounds) if masked else (bounds, None)
    fast = recipe == "rowwise_fast"
    call = grouped_call(a, w, offs, masked_m, None if sa is None else BF16, sa, sb, fast)
    if recipe == "blockwise":
        assert sa is not None
        call, psa, psb, picked = _fused(call, fn, ops, scale_a=sa.flatten(0, -2), scale_b=sb)
    elif sa is not None and sb is not None:
        call, psa, psb, picked = _fused(call, fn, ops, scale_a=sa.reshape(-1, 1), scale_b=sb.unsqueeze(1))
    else:
        call, psa, psb, picked = _fused(call, fn, ops)
    plan = plan_schedule(call.spec, H100_SXM, bm=bm)
    mod = build(call.spec, H100_SXM, plan).module
    rows = call.spec.m
    outs = (torch.full((rows, N), float("nan")).to(E4), torch.full((rows, NB), float("nan")))
    res = simulate_grouped(mod, call.a, call.b, call.bounds, psa, psb, out=outs, operands=picked).raise_for_findings()
    assert res.outputs[0] is outs[0] and res.outputs[1] is outs[1]  # (written in place)
    return outs[0], outs[1], plan.bm, plan.bn


def _reference(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, recipe: str, masked: bool,
               gate: torch.Tensor | None) -> torch.Tensor:
    """The fp32 value each expert's rows quantize (exact: integers times powers of two), NaN in rows of no group."""
    a2 = a.reshape(-1, K).double()
    m = a2.shape[0]
    sa, sb = _scales(recipe, m)
    y = torch.full((m, N), float("nan"), dtype=torch.float64)
    for g, (s, e) in enumerate(_rows(bounds, masked, m)):
        aa, ww = a2[s:e], w[g].double()
        if recipe == "blockwise":
            assert sa is not None and sb is not None
            aa = aa * sa[s:e].double().repeat_interleave(128, 1)[:, :K]
            ww = ww * sb[g].double().repeat_interleave(128, 0)[:K].repeat_interleave(128, 1)[:, :N]
            y[s:e] = aa @ ww
        elif sa is not None and sb is not None:
            y[s:e] = (aa @ ww) * sa[s:e, None].double() * sb[g].double()
        else:
            y[s:e] = aa @ ww
    y32 = y.float()
    return y32 if gate is None else F.silu(gate.reshape(m, N).float()) * y32


def _check(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    """Rows of a group: q's bytes and s the plain quantize's; rows of none: both still NaN (never written)."""
    owned = ~y[:, 0].isnan()
    rq, rs = warploom.quantize(y[owned], recipe="1x128")
    assert torch.equal(s[owned], rs)
    assert same_bytes(q[owned], rq)
    assert bool(s[~owned].isnan().all()) and bool(q[~owned].float().isnan().all())


RECIPES = ["bf16", "rowwise_fast", "rowwise_promoted", "blockwise"]


@pytest.mark.parametrize("gated", [False, True], ids=["quantize", "silu_mul"])
@pytest.mark.parametrize("masked", [False, True], ids=["offsets", "masked"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_bitwise_against_plain_quantize(recipe: str, masked: bool, gated: bool) -> None:
    seed = RECIPES.index(recipe) * 4 + 2 * masked + gated
    a, w, gate = _inputs(seed, recipe, masked)
    bounds = _bounds(seed, masked, G * M_MAX)
    fn, ops = (_silu_mul, {"gate": gate}) if gated else (_quantize, {})
    q, s, bm, bn = _sim(a, w, bounds, fn, ops, recipe, masked)
    assert bn == 128  # (rule 26: one scale group a tile)
    _check(q, s, _reference(a, w, bounds, recipe, masked, gate if gated else None))


@pytest.mark.parametrize("bm", [64, 128])
def test_tile_rows(bm: int) -> None:
    """Both of rule 22's tile heights at 128 wide (64 rows for decode-sized groups), a gate epilogue, offsets."""
    a, w, gate = _inputs(20 + bm, "bf16", False)
    bounds = torch.tensor([37, 37, 201, 330], dtype=torch.int32)  # (expert 1 empty, rows 330.. of no group)
    q, s, got, _ = _sim(a, w, bounds, _silu_mul, {"gate": gate}, "bf16", False, bm=bm)
    assert got == bm
    _check(q, s, _reference(a, w, bounds, "bf16", False, gate))


def test_planted_unclipped_scale_stores_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale stores ignoring the group's end row (a mask at M instead of row_end): a ragged last tile writes the
    next group's scale rows, and rows past the last offs; the coverage check names output 1."""
    a, w, _ = _inputs(30, "bf16", False)
    bounds = torch.tensor([37, 37, 201, 330], dtype=torch.int32)
    real = numerics.CtaData.store_scales

    def unclipped(self, agent, output, off_m, off_n, row_end=None):  # noqa: ANN001, ANN202
        return real(self, agent, output, off_m, off_n, None)

    monkeypatch.setattr(numerics.CtaData, "store_scales", unclipped)
    with pytest.raises(ProtocolError, match="output 1 rows") as err:
        _sim(a, w, bounds, _quantize, {}, "bf16", False)
    assert {f.kind for f in err.value.findings} == {FindingKind.OUTPUT_COVERAGE}


def test_through_the_api() -> None:
    """`grouped_mm` / `scaled_grouped_mm` on CPU tensors return (q, s) shaped as the result: M-grouped (total_M, N)
    and (total_M, NB), masked (G, M_max, N) and (G, M_max, NB)."""
    a, w, gate = _inputs(40, "bf16", False)
    offs = torch.tensor([60, 60, 250, 400], dtype=torch.int32)
    q, s = warploom.grouped_mm(a, w, offs, epilogue=_silu_mul, gate=gate)
    assert q.shape == (G * M_MAX, N) and q.dtype == E4 and s.shape == (G * M_MAX, NB) and s.dtype == torch.float32
    rq, rs = warploom.quantize(_reference(a, w, offs, "bf16", False, gate), recipe="1x128")
    assert torch.equal(s, rs) and same_bytes(q, rq)
    a3, w3, _ = _inputs(41, "blockwise", True)
    counts = torch.tensor([100, 0, 13, 77], dtype=torch.int32)
    sa, sb = _scales("blockwise", G * M_MAX)
    assert sa is not None and sb is not None
    q3, s3 = warploom.scaled_grouped_mm(a3, w3, sa.reshape(G, M_MAX, -1), sb, masked_m=counts, epilogue=_quantize)
    assert q3.shape == (G, M_MAX, N) and s3.shape == (G, M_MAX, NB)
    y = _reference(a3, w3, counts, "blockwise", True, None).reshape(G, M_MAX, N)
    for g, c in enumerate(counts.tolist()):
        rq, rs = warploom.quantize(y[g, :c], recipe="1x128")
        assert torch.equal(s3[g, :c], rs) and same_bytes(q3[g, :c], rq)


def test_zero_k_and_rowwise() -> None:
    """K == 0 launches nothing: the pair of the epilogue of a zero accumulator, a per-expert bias read per group.
    Rowwise where one 128-wide tile holds the row (N <= 128) runs; wider is refused with the unfused fix."""
    a, w = torch.empty(G * 8, 0).bfloat16(), torch.empty(G, 0, 160).bfloat16()
    offs = torch.tensor([8, 8, 20, 32], dtype=torch.int32)
    bias = torch.randn(G, 160)
    q, s = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: warploom.quantize(acc + bias), bias=bias)
    rq, rs = warploom.quantize(bias[2].expand(12, 160).contiguous())
    assert s.shape == (G * 8, 2) and torch.equal(s[8:20], rs) and same_bytes(q[8:20], rq)
    a, w, _ = _inputs(50, "bf16", False)
    offs = torch.tensor([90, 90, 250, 380], dtype=torch.int32)
    w96 = w[..., :96]
    q, s = warploom.grouped_mm(a, w96, offs, epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    rq, rs = warploom.quantize(_reference(a, w, offs, "bf16", False, None)[:380, :96], recipe="rowwise")
    assert s.shape == (G * M_MAX, 1) and torch.equal(s[:380], rs) and same_bytes(q[:380], rq)
    with pytest.raises(UnsupportedError, match="^epilogue: expected .*recipe='rowwise' on a grouped GEMM with "
                                               "N=304 > 128.*warploom.quantize\\(out, recipe='rowwise'\\)"):
        warploom.grouped_mm(a, w, offs, epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
