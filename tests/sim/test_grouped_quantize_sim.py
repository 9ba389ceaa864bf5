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
from fused_cases import same_bytes  # (pytest puts this folder on sys.path)
from grouped_quantize_cases import (
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
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import numerics
from warploom.sim.findings import FindingKind, ProtocolError
from warploom.sim.grouped import simulate_grouped

NB = -(-N // 128)


def _quantize(acc: torch.Tensor) -> Any:
    return warploom.quantize(acc, recipe="1x128")


def _silu_mul(acc: torch.Tensor, gate: torch.Tensor) -> Any:
    return warploom.quantize(F.silu(gate.float()) * acc, recipe="1x128")


def _sim(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, fn: Callable[..., Any], ops: dict[str, Any],
         recipe: str, masked: bool, bm: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The API's checks and fusion (`grouped._fused`), its plan (or bm forced), simulated into NaN-poisoned q and
    s; the plan's tile."""
    call, psa, psb, picked = fused_call(a, w, bounds, fn, ops, recipe, masked)
    plan = plan_schedule(call.spec, H100_SXM, bm=bm)
    mod = build(call.spec, H100_SXM, plan).module
    rows = call.spec.m
    outs = (torch.full((rows, N), float("nan")).to(E4), torch.full((rows, NB), float("nan")))
    res = simulate_grouped(mod, call.a, call.b, call.bounds, psa, psb, out=outs, operands=picked).raise_for_findings()
    assert res.outputs[0] is outs[0] and res.outputs[1] is outs[1]  # (written in place)
    return outs[0], outs[1], plan.bm, plan.bn


def _check(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    check_quantized(q, s, y, "1x128")


@pytest.mark.parametrize("gated", [False, True], ids=["quantize", "silu_mul"])
@pytest.mark.parametrize("masked", [False, True], ids=["offsets", "masked"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_bitwise_against_plain_quantize(recipe: str, masked: bool, gated: bool) -> None:
    a, w, bounds, fn, ops, y = bitwise_case(recipe, masked, gated, _quantize, _silu_mul)
    q, s, bm, bn = _sim(a, w, bounds, fn, ops, recipe, masked)
    assert bn == 128  # (rule 26: one scale group a tile)
    _check(q, s, y)


@pytest.mark.parametrize("bm", [64, 128])
def test_tile_rows(bm: int) -> None:
    """Both of rule 22's tile heights at 128 wide (64 rows for decode-sized groups), a gate epilogue, offsets."""
    a, w, gate = inputs(20 + bm, "bf16", False)
    bounds = torch.tensor([37, 37, 201, 330], dtype=torch.int32)  # (expert 1 empty, rows 330.. of no group)
    q, s, got, _ = _sim(a, w, bounds, _silu_mul, {"gate": gate}, "bf16", False, bm=bm)
    assert got == bm
    _check(q, s, reference(a, w, bounds, "bf16", False, gate))


def test_planted_unclipped_scale_stores_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale stores ignoring the group's end row (a mask at M instead of row_end): a ragged last tile writes the
    next group's scale rows, and rows past the last offs; the coverage check names output 1."""
    a, w, _ = inputs(30, "bf16", False)
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
    a, w, gate = inputs(40, "bf16", False)
    offs = torch.tensor([60, 60, 250, 400], dtype=torch.int32)
    q, s = warploom.grouped_mm(a, w, offs, epilogue=_silu_mul, gate=gate)
    assert q.shape == (G * M_MAX, N) and q.dtype == E4 and s.shape == (G * M_MAX, NB) and s.dtype == torch.float32
    rq, rs = warploom.quantize(reference(a, w, offs, "bf16", False, gate), recipe="1x128")
    assert torch.equal(s, rs) and same_bytes(q, rq)
    a3, w3, _ = inputs(41, "blockwise", True)
    counts = torch.tensor([100, 0, 13, 77], dtype=torch.int32)
    sa, sb = scales("blockwise", G * M_MAX)
    assert sa is not None and sb is not None
    q3, s3 = warploom.scaled_grouped_mm(a3, w3, sa.reshape(G, M_MAX, -1), sb, masked_m=counts, epilogue=_quantize)
    assert q3.shape == (G, M_MAX, N) and s3.shape == (G, M_MAX, NB)
    y = reference(a3, w3, counts, "blockwise", True, None).reshape(G, M_MAX, N)
    for g, c in enumerate(counts.tolist()):
        rq, rs = warploom.quantize(y[g, :c], recipe="1x128")
        assert torch.equal(s3[g, :c], rs) and same_bytes(q3[g, :c], rq)


def test_zero_k_and_rowwise() -> None:
    """K == 0 launches nothing: the pair of the epilogue of a zero accumulator, a per-expert bias read per group.
    Rowwise where one 128-wide tile holds the row (N <= 128) runs on one pass (wider rows take rule 29's two passes:
    test_grouped_amax_pass_sim.py)."""
    a, w = torch.empty(G * 8, 0).bfloat16(), torch.empty(G, 0, 160).bfloat16()
    offs = torch.tensor([8, 8, 20, 32], dtype=torch.int32)
    bias = torch.randn(G, 160)
    q, s = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: warploom.quantize(acc + bias), bias=bias)
    rq, rs = warploom.quantize(bias[2].expand(12, 160).contiguous())
    assert s.shape == (G * 8, 2) and torch.equal(s[8:20], rs) and same_bytes(q[8:20], rq)
    a, w, _ = inputs(50, "bf16", False)
    offs = torch.tensor([90, 90, 250, 380], dtype=torch.int32)
    w96 = w[..., :96]
    q, s = warploom.grouped_mm(a, w96, offs, epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    rq, rs = warploom.quantize(reference(a, w, offs, "bf16", False, None)[:380, :96], recipe="rowwise")
    assert s.shape == (G * M_MAX, 1) and torch.equal(s[:380], rs) and same_bytes(q[:380], rq)
