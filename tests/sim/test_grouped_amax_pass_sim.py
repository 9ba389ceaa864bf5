"""Planner rule 29 on grouped GEMMs (issue 27 item 3): a fused rowwise quantization whose rows span the tiles along
N (N > 128: rule 27's 256-wide tile is dense-only) on the M-grouped and masked layouts, bf16 and fp8 rowwise (fast
and promoted) and blockwise, in two passes on the simulator against the plain ``warploom.quantize`` of a torch
reference.

Pass 1 is the grouped GEMM storing y (fp32) to a workspace and adding each tile's row amax, clipped at its group's
end row, to an (M,) amax; pass 2 casts the rows of some group. Small integer inputs and power-of-two scales keep
every fp32 sum exact in any order, so q's bytes and s match the plain function's of the fp64 product bit for bit.
Routings are random with an empty expert, groups shorter than a tile, ends that are no tile multiples and rows past
the last offs (masked: counts below M_max, one zero); N = 304 is no multiple of 128. q and s start NaN-poisoned, and
rows of no group must stay NaN in both. Planted bugs: tiles that never add their amax, and an atomic max not
clipped at its group's end row (it adds a ragged tile's other rows into the next group's amax), each caught by a
finding and by the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fused_cases import in_tiles, same_bytes  # (pytest puts this folder on sys.path)
from grouped_quantize_cases import (
    BF16,
    E4,
    M_MAX,
    RECIPES,
    G,
    N,
    bitwise_case,
    check_quantized,
    fused_call,
    inputs,
    reference,
    scales,
)

import warploom
from warploom import H100_SXM
from warploom.errors import UnsupportedError
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import numerics
from warploom.sim.findings import FindingKind, ProtocolError
from warploom.sim.grouped import simulate_grouped

R = {"recipe": "rowwise"}


def _quantize(acc: torch.Tensor) -> Any:
    return warploom.quantize(acc, **R)


def _silu_mul(acc: torch.Tensor, gate: torch.Tensor) -> Any:
    return warploom.quantize(F.silu(gate.float()) * acc, **R)


def _kernel(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, fn: Callable[..., Any], ops: dict[str, Any],
            recipe: str, masked: bool, bm: int | None = None, bn: int | None = None) -> tuple[Any, ...]:
    """The API's checks and fusion (`grouped._fused`) and its plan (or a forced tile): the call, its kernel and the
    scales and operands the kernel reads."""
    call, psa, psb, picked = fused_call(a, w, bounds, fn, ops, recipe, masked)
    plan = plan_schedule(call.spec, H100_SXM, bm=bm, bn=bn)
    return call, build(call.spec, H100_SXM, plan), psa, psb, picked


def _poisoned() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((G * M_MAX, N), float("nan")).to(E4), torch.full((G * M_MAX, 1), float("nan"))


def _sim(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, fn: Callable[..., Any], ops: dict[str, Any],
         recipe: str, masked: bool, bm: int | None = None, bn: int | None = None) -> tuple[torch.Tensor, ...]:
    """Simulated into NaN-poisoned q and s (written in place); with the plan's tile width."""
    call, kern, psa, psb, picked = _kernel(a, w, bounds, fn, ops, recipe, masked, bm, bn)
    assert kern.plan.amax_pass and kern.module.amax_pass is not None  # (rule 29: N > 128 on a grouped GEMM)
    outs = _poisoned()
    res = simulate_grouped(kern.module, call.a, call.b, call.bounds, psa, psb, out=outs,
                           operands=picked).raise_for_findings()
    assert res.outputs[0] is outs[0] and res.outputs[1] is outs[1]
    return outs[0], outs[1], kern.plan.bm, kern.plan.bn


def _check(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    check_quantized(q, s, y, "rowwise")


@pytest.mark.parametrize("gated", [False, True], ids=["quantize", "silu_mul"])
@pytest.mark.parametrize("masked", [False, True], ids=["offsets", "masked"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_bitwise_against_plain_quantize(recipe: str, masked: bool, gated: bool) -> None:
    a, w, bounds, fn, ops, y = bitwise_case(recipe, masked, gated, _quantize, _silu_mul)
    q, s, _, bn = _sim(a, w, bounds, fn, ops, recipe, masked)
    assert bn == 128  # (rule 22's tile at 100 rows a group)
    _check(q, s, y)


@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 256)])
def test_tile_shapes(bm: int, bn: int) -> None:
    """Rule 22's decode tile (64 rows) and a forced 128x256 first pass (bf16, acc alone: `amax_pass_bn` allows 256),
    offsets with groups shorter than a tile, an empty expert and rows past the last end."""
    a, w, gate = inputs(20 + bm, "bf16", False)
    bounds = torch.tensor([37, 37, 201, 330], dtype=torch.int32)  # (expert 1 empty, rows 330.. of no group)
    q, s, got_m, got_n = _sim(a, w, bounds, _quantize, {}, "bf16", False, bm=bm, bn=bn)
    assert (got_m, got_n) == (bm, bn)
    _check(q, s, reference(a, w, bounds, "bf16", False, None))


def _planted_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Offsets whose groups end inside tiles (37 and 201 are no multiples of 64), rows 330.. of no group; every
    row's amax in its last tile along N, and the rows of group 3 much smaller than group 2's (so a ragged group 2
    tile's extra rows, group 3's, would raise group 3's amax if they were added)."""
    a, w, _ = inputs(30, "bf16", False)
    a[201:] = (a[201:].float().clamp(-1, 1)).to(BF16)
    w = w.clone()
    w[2, :, 256:] = (w[2, :, 256:].float() * 16).to(BF16)
    return a, w, torch.tensor([37, 37, 201, 330], dtype=torch.int32)


def _drop_atomics(m: ir.Module) -> ir.Module:
    """Planted: the tiles fold their amax but never add it to the workspace (no atomic_amax)."""
    return in_tiles(m, lambda body: tuple(s for s in body if not isinstance(s, ir.AtomicAmax)))


def test_planted_unpublished_amax_is_caught() -> None:
    a, w, bounds = _planted_case()
    call, kern, psa, psb, picked = _kernel(a, w, bounds, _quantize, {}, "bf16", False, bm=64)
    y = reference(a, w, bounds, "bf16", False, None)
    good = _poisoned()
    simulate_grouped(kern.module, call.a, call.b, call.bounds, out=good).raise_for_findings()
    _check(*good, y)
    bad = _poisoned()
    res = simulate_grouped(_drop_atomics(kern.module), call.a, call.b, call.bounds, out=bad)
    assert {f.kind for f in res.report.findings} == {FindingKind.AMAX_INCOMPLETE}
    assert any("the cast pass reads the amax of 330 row(s)" in f.message for f in res.report.findings)
    assert not torch.equal(bad[1][:330], good[1][:330])  # (and the numbers show it: every scale is 1)


def test_planted_unclipped_atomic_amax_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The atomic max ignoring its group's end row (masked at M, as a dense first pass's is): a ragged tile adds its
    other rows, the next group's, into that group's amax (group 2's last tile into group 3's rows), and group 3's
    last tile adds rows past offs[-1]. The cast
    pass names both (the rows holding another group's columns, and the rows of no group added to), and the scales
    of group 3 come out wrong."""
    a, w, bounds = _planted_case()
    call, kern, *_ = _kernel(a, w, bounds, _quantize, {}, "bf16", False, bm=64)
    real = numerics.CtaData.atomic_amax

    def unclipped(self, agent, off_m, cols, row_end=None):  # noqa: ANN001, ANN202
        return real(self, agent, off_m, cols, None)

    monkeypatch.setattr(numerics.CtaData, "atomic_amax", unclipped)
    outs = _poisoned()
    with pytest.raises(ProtocolError) as err:
        simulate_grouped(kern.module, call.a, call.b, call.bounds, out=outs).raise_for_findings()
    kinds = {f.kind for f in err.value.findings}
    assert kinds == {FindingKind.AMAX_INCOMPLETE, FindingKind.OUTPUT_COVERAGE}, err.value.findings
    msgs = " ".join(f.message for f in err.value.findings)
    # (rows 37..63: group 0's tile over group 2's; rows 201..228: group 2's last tile over group 3's)
    assert "amax of 55 row(s)" in msgs and "row 37: 608 of N=304 added" in msgs
    assert "rows of no group were added to (63 row(s); row 330: 304 columns)" in msgs
    _, rs = warploom.quantize(reference(a, w, bounds, "bf16", False, None)[:330], **R)
    assert not torch.equal(outs[1][201:330], rs[201:330])  # (group 3's rows scaled by group 2's amax)
    assert bool(outs[1][330:].isnan().all())  # (the cast still casts the rows of some group only)


def test_through_the_api() -> None:
    """`grouped_mm` / `scaled_grouped_mm` on CPU tensors return (q, s) shaped as the dense rowwise recipe's: M-grouped
    (total_M, N) and (total_M, 1), masked (G, M_max, N) and (G, M_max, 1)."""
    a, w, gate = inputs(40, "bf16", False)
    offs = torch.tensor([60, 60, 250, 400], dtype=torch.int32)
    q, s = warploom.grouped_mm(a, w, offs, epilogue=_silu_mul, gate=gate)
    assert q.shape == (G * M_MAX, N) and q.dtype == E4 and s.shape == (G * M_MAX, 1) and s.dtype == torch.float32
    rq, rs = warploom.quantize(reference(a, w, offs, "bf16", False, gate), **R)
    assert torch.equal(s, rs) and same_bytes(q, rq)
    a3, w3, _ = inputs(41, "rowwise_promoted", True)
    counts = torch.tensor([100, 0, 13, 77], dtype=torch.int32)
    sa, sb = scales("rowwise_promoted", G * M_MAX)
    assert sa is not None and sb is not None
    q3, s3 = warploom.scaled_grouped_mm(a3, w3, sa.reshape(G, M_MAX), sb, masked_m=counts, epilogue=_quantize)
    assert q3.shape == (G, M_MAX, N) and s3.shape == (G, M_MAX, 1)
    y = reference(a3, w3, counts, "rowwise_promoted", True, None).reshape(G, M_MAX, N)
    for g, c in enumerate(counts.tolist()):
        rq, rs = warploom.quantize(y[g, :c], **R)
        assert torch.equal(s3[g, :c], rs) and same_bytes(q3[g, :c], rq)


def test_bad_combinations_are_refused_by_name() -> None:
    """What rule 29 cannot take on a grouped GEMM is refused by name with a fix: a tile width other than 128 or 256
    (128 alone for promoted fp8 or a graph with operands), stream-K, and the K-grouped layout."""
    a, w, gate = inputs(50, "bf16", False)
    offs = torch.tensor([90, 90, 250, 380], dtype=torch.int32)
    call, *_ = _kernel(a, w, offs, _quantize, {}, "bf16", False)
    with pytest.raises(UnsupportedError, match=r"rule 29\) cannot run .*bn=64: rule 29's tile must be 128 or 256 "
                                               r"wide.*Fix: drop the conflicting option"):
        plan_schedule(call.spec, H100_SXM, bn=64)
    gated, *_ = _kernel(a, w, offs, _silu_mul, {"gate": gate}, "bf16", False)
    with pytest.raises(UnsupportedError, match=r"bn=256: rule 29's tile must be 128 wide"):
        plan_schedule(gated.spec, H100_SXM, bn=256)
    with pytest.raises(UnsupportedError, match=r"rule 29\) cannot run .*stream_k=2"):
        plan_schedule(call.spec, H100_SXM, stream_k=2)
    at = torch.randint(-3, 4, (64, 512)).to(BF16)
    bt = torch.randint(-3, 4, (512, N)).to(BF16)
    k_offs = torch.tensor([128, 256, 384, 512], dtype=torch.int32)
    with pytest.raises(UnsupportedError, match=r"^epilogue: expected .*a K-grouped GEMM \(the fused quantization "
                                               r"runs on the M-grouped and masked layouts\).*Fix: return y itself"):
        warploom.grouped_mm(at, bt, k_offs, epilogue=_quantize)
