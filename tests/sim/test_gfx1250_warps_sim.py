"""The simulator on gfx1250 schedules whose TDM copies only some warps issue (seed 004, ir/warps.py): which warps
issue each copy, whose waits retire it, and three planted bugs it catches by itself (the verifier bypassed;
tests/unit/test_warp_masks.py has the verifier's side)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from warploom.device import GFX1250
from warploom.ir import nodes as ir
from warploom.ir.warps import WarpMask
from warploom.kernel import build
from warploom.planner import TdmWarps, plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import GemmSpec
from warploom.targets import problems as target_problems

K = FindingKind
SPEC = GemmSpec(300, 120, 150)  # 5 x 2 tiles of 64x64 over 2 CTAs, 5 k-blocks of 32 through 3 stages


@functools.cache
def _module(choice: TdmWarps, stages: int = 3) -> ir.Module:
    # (The plan is Triton-independent; only emitting the hint needs Triton >= 3.8, so a plan forced by hand
    # simulates under any Triton.)
    a, b = choice.masks()
    plan = replace(plan_schedule(SPEC, GFX1250, bm=64, bn=64, stages=stages), grid=2, bk=32, tdm_warps_a=a,
                   tdm_warps_b=b, tdm_fused=choice is TdmWarps.FUSED)
    return build(SPEC, GFX1250, plan).module


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


def _map(m: ir.Module, f: Callable[[ir.Stmt], ir.Stmt]) -> ir.Module:
    """Apply `f` to every op of the one partition (loops rebuilt around them)."""
    def walk(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, body=walk(s.body)) if isinstance(s, ir.Loop) else f(s) for s in body)
    (part,) = m.partitions
    return m.with_partition(replace(part, body=walk(part.body)))


@pytest.mark.parametrize("choice", list(TdmWarps), ids=lambda c: c.name)
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_masked_schedules_are_clean_and_correct(choice: TdmWarps, stages: int) -> None:
    m = _module(choice, stages)
    assert not target_problems(m, GFX1250)
    x = make_inputs(SPEC, SPEC.m, SPEC.n, SPEC.k, seed=stages)
    res = simulate(m, x.a, x.b, seed=stages)
    assert res.ok, res.report.summary()
    assert _err(res.output, reference(x)) < 1e-5


def test_split_waits_count_one_copy_per_issuing_warp() -> None:
    waits = [o for o, _ in ir.walk(_module(TdmWarps.SPLIT).partitions[0].body) if isinstance(o, ir.TdmWait)]
    assert {(w.pending, w.warps) for w in waits} == {(1, WarpMask(0b0011)), (0, WarpMask(0b0011))}


def test_explorer_finds_nothing_with_a_split() -> None:
    r = explore(_module(TdmWarps.SPLIT), 192, 64, 160, max_states=60_000)
    assert not r.findings and not r.bound_hit, r.summary()


def _kinds(m: ir.Module) -> set[FindingKind]:
    kinds: set[FindingKind] = set()
    for seed in range(3):
        x = make_inputs(SPEC, SPEC.m, SPEC.n, SPEC.k, seed=seed)
        kinds |= simulate(m, x.a, x.b, seed=seed).report.kinds()
    return kinds


def _copies(mask: int, tensor: ir.Tensor) -> Callable[[ir.Stmt], ir.Stmt]:
    """Give `tensor`'s copies the issuing warps `mask`."""
    return lambda s: replace(s, warps=WarpMask(mask)) if isinstance(s, ir.TdmLoad) and s.tensor is tensor else s


MUTANTS = {
    # A's copies from warps 1 and 5 of a 4-warp partition: warp 5, which does not exist, has the block's last rows.
    "mask_leaves_rows_uncovered": (lambda m: _map(m, _copies(0b100010, ir.Tensor.A)), {K.TDM_WARPS}),
    # The waits name warp 2, which issues nothing, instead of warps 0 and 1: no issuing warp learns its copy landed.
    "wait_on_a_warp_that_issued_nothing": (
        lambda m: _map(m, lambda s: replace(s, warps=WarpMask(0b0100)) if isinstance(s, ir.TdmWait) else s),
        {K.IDLE_TDM_WAIT, K.READ_UNACQUIRED}),
    # Warps {0, 1, 2}: three warps cannot split a block evenly; not a set {base XOR span(basis)}.
    "non_affine_mask": (lambda m: _map(m, _copies(0b0111, ir.Tensor.B)), {K.TDM_WARPS}),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_planted_warp_mask_bugs_are_caught(name: str) -> None:
    mutate, expected = MUTANTS[name]
    kinds = _kinds(mutate(_module(TdmWarps.SPLIT)))
    assert expected <= kinds, (name, kinds)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_planted_warp_mask_bugs_are_caught_by_the_verifier(name: str) -> None:
    mutate, _ = MUTANTS[name]
    errs = target_problems(mutate(_module(TdmWarps.SPLIT)), GFX1250)
    needle = {"mask_leaves_rows_uncovered": "rows 32..63 of the 64-row block uncopied",
              "wait_on_a_warp_that_issued_nothing": "waits on warps [2], which issue no tdm_load",
              "non_affine_mask": "is not an affine subspace"}[name]
    assert any(needle in e for e in errs), errs


def test_a_wait_leaving_out_an_issuer_keeps_its_copy_in_flight() -> None:
    """Waits naming warp 0 only: B's copies (warp 1) are never retired, so reading them is unacquired."""
    m = _map(_module(TdmWarps.SPLIT), lambda s: replace(s, warps=WarpMask(0b0001)) if isinstance(s, ir.TdmWait) else s)
    assert K.READ_UNACQUIRED in _kinds(m)
