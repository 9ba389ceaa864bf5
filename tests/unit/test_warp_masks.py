"""gfx1250 warp-usage masks (seed 004, ir/warps.py): the affine-set check against an independent oracle on
hypothesis-generated masks, row coverage, the verifier's errors, the planner's choice and its Triton gate."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warploom.backends import gluon_api
from warploom.backends.gluon_gfx1250 import lower_gfx1250
from warploom.device import GFX1250, H100_SXM
from warploom.errors import UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir.warps import WarpMask, affine_basis, axis_aligned, fewest_copies, row_shares, uncovered_rows
from warploom.kernel import build
from warploom.planner import TdmWarps, plan_schedule, tdm_warps_reason
from warploom.spec import GemmSpec
from warploom.targets import problems as target_problems

SPEC = GemmSpec(1000, 1000, 512)


def _oracle(members: set[int]) -> bool:
    """Affine over GF(2) iff closed under a ^ b ^ c (the affine hull's defining property), independent of the
    basis construction in `affine_basis`."""
    return all(a ^ b ^ c in members for a, b, c in itertools.product(members, repeat=3))


@pytest.mark.parametrize("bits", [0b0001, 0b0011, 0b1111, 0b0101, 0b1010, 0b1001, 0b1100, 0b10000010, 0xFF])
def test_allowed_masks_are_affine(bits: int) -> None:
    base, basis = affine_basis(WarpMask(bits))  # type: ignore[misc]
    span = {0}
    for b in basis:
        span |= {s ^ b for s in span}
    assert {base ^ s for s in span} == set(WarpMask(bits).members)


@pytest.mark.parametrize("bits", [0b0111, 0b1011, 0b1101, 0b00010111, 0b01101001 ^ 0b1])
def test_forbidden_masks_are_not_affine(bits: int) -> None:
    assert affine_basis(WarpMask(bits)) is None


@given(st.integers(min_value=1, max_value=(1 << 16) - 1))
def test_affine_check_matches_the_xor_closure_oracle(bits: int) -> None:
    mask = WarpMask(bits)
    assert (affine_basis(mask) is not None) == _oracle(set(mask.members))


@given(st.integers(0, 15), st.lists(st.integers(1, 15), max_size=4))
def test_every_coset_of_a_span_is_affine(base: int, vectors: list[int]) -> None:
    span = {0}
    for v in vectors:
        span |= {s ^ v for s in span}
    mask = WarpMask(sum(1 << (base ^ s) for s in span))
    found = affine_basis(mask)
    assert found is not None and len(mask.members) == 1 << len(found[1]) == len(span)


@given(st.integers(min_value=1, max_value=255))
def test_axis_aligned_is_one_mask_check(bits: int) -> None:
    """Axis-aligned: the set is {w : w & ~support == base} for the bits that vary (Triton's legality check)."""
    mask = WarpMask(bits)
    members = set(mask.members)
    support = 0
    for w in members:
        support |= w ^ min(members)
    one_check = {w for w in range(256) if w & ~support == min(members) & ~support}
    assert axis_aligned(mask) == (members == one_check)


def test_mask_validates_itself() -> None:
    with pytest.raises(ValueError, match="at least one warp"):
        WarpMask(0)
    with pytest.raises(TypeError, match="int bitmask"):
        WarpMask("0b1")  # type: ignore[arg-type]
    assert str(WarpMask(1)) == "0b0001" and WarpMask.every(4) == WarpMask(0b1111)


def test_rows_are_retiled_over_the_active_warps() -> None:
    assert row_shares(WarpMask(0b0001), 4, 128) == {0: range(0, 128)}
    assert row_shares(WarpMask(0b1010), 4, 128) == {1: range(0, 64), 3: range(64, 128)}
    assert row_shares(WarpMask(0b1111), 4, 128)[2] == range(64, 96)
    assert uncovered_rows(WarpMask(0b1111), 4, 128) == []
    assert uncovered_rows(WarpMask(0b100010), 4, 64) == [range(32, 64)]  # warp 5 does not exist
    assert fewest_copies([WarpMask(1), WarpMask(2)], 4) == 1
    assert fewest_copies([None, None], 4) == 2
    assert fewest_copies([None, WarpMask(1)], 4) == 1


def _module(choice: TdmWarps) -> ir.Module:
    a, b = choice.masks()
    plan = replace(plan_schedule(SPEC, GFX1250), tdm_warps_a=a, tdm_warps_b=b, tdm_fused=choice is TdmWarps.FUSED)
    return build(SPEC, GFX1250, plan).module


def _retarget(m: ir.Module, loads: WarpMask | None = None, waits: WarpMask | None = None) -> ir.Module:
    def walk(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            if isinstance(s, ir.Loop):
                out.append(replace(s, body=walk(s.body)))
            elif isinstance(s, ir.TdmLoad) and loads is not None and s.tensor is ir.Tensor.A:
                out.append(replace(s, warps=loads))
            elif isinstance(s, ir.TdmWait) and waits is not None:
                out.append(replace(s, warps=waits))
            else:
                out.append(s)
        return tuple(out)
    (p,) = m.partitions
    return m.with_partition(replace(p, body=walk(p.body)))


def test_verifier_accepts_the_planned_masks() -> None:
    for choice in TdmWarps:
        assert not target_problems(_module(choice), GFX1250), choice


def test_verifier_names_the_copy_and_the_non_affine_mask() -> None:
    errs = target_problems(_retarget(_module(TdmWarps.SPLIT), loads=WarpMask(0b0111)), GFX1250)
    assert any("tdm_load A[m, k] -> a_ring[c] warps=0b0111: warps 0b0111 = [0, 1, 2] is not an affine" in e
               for e in errs), errs


def test_verifier_names_the_missing_rows() -> None:
    errs = target_problems(_retarget(_module(TdmWarps.SPLIT), loads=WarpMask(0b100001)), GFX1250)
    assert any("warps=0b100001" in e and "leave rows 64..127 of the 128-row block uncopied" in e for e in errs), errs


def test_verifier_refuses_a_mask_triton_cannot_select() -> None:
    errs = target_problems(_retarget(_module(TdmWarps.SPLIT), loads=WarpMask(0b1001), waits=WarpMask(0b1011)),
                           GFX1250)
    assert any("affine but its warps differ in several bits" in e for e in errs), errs


def test_verifier_attributes_waits_to_the_issuing_warps() -> None:
    idle = target_problems(_retarget(_module(TdmWarps.SPLIT), waits=WarpMask(0b0111)), GFX1250)
    assert any("waits on warps [2], which issue no tdm_load" in e for e in idle), idle
    left = target_problems(_retarget(_module(TdmWarps.SPLIT), waits=WarpMask(0b0001)), GFX1250)
    assert any("leaves out warps [1], which issue tdm_loads" in e for e in left), left


def test_verifier_counts_one_warps_copies_per_wait() -> None:
    """With A from warp 0 and B from warp 1, a wait leaving 2 per block in flight returns before the block landed."""
    m = _module(TdmWarps.SPLIT)

    def loose(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, body=loose(s.body)) if isinstance(s, ir.Loop) else
                     replace(s, pending=2) if isinstance(s, ir.TdmWait) and s.pending else s for s in body)
    (p,) = m.partitions
    errs = target_problems(m.with_partition(replace(p, body=loose(p.body))), GFX1250)
    assert any("may return before that block" in e for e in errs), errs


def test_planner_default_is_every_warp_under_any_triton() -> None:
    for version in ("3.6", "3.9"):
        with gluon_api.emitting_for(version):
            plan = plan_schedule(SPEC, GFX1250)
        assert (plan.tdm_warps_a, plan.tdm_warps_b) == (0, 0)
        assert "default" in tdm_warps_reason(plan)
    m = build(SPEC, GFX1250, plan_schedule(SPEC, GFX1250)).module
    assert all(o.warps is None for o, _ in ir.walk(m.partitions[0].body) if isinstance(o, (ir.TdmLoad, ir.TdmWait)))


def test_planner_records_the_reason_of_a_split() -> None:
    with gluon_api.emitting_for("3.9"):
        plan = plan_schedule(SPEC, GFX1250, tdm_warps=TdmWarps.SPLIT)
    assert (plan.tdm_warps_a, plan.tdm_warps_b) == (0b0001, 0b0010)
    assert tdm_warps_reason(plan) == TdmWarps.SPLIT.value and plan.short().endswith("_tdm_wa1b2")


@pytest.mark.parametrize("version", ["3.6", "3.7"])
def test_a_mask_under_old_triton_is_refused_naming_option_and_version(version: str) -> None:
    refused = r"tdm_warps=TdmWarps.SPLIT: TDM warp-usage masks need Triton >= 3\.8"
    with gluon_api.emitting_for(version), pytest.raises(UnsupportedError, match=refused):
        plan_schedule(SPEC, GFX1250, tdm_warps=TdmWarps.SPLIT)
    m = _module(TdmWarps.ONE)  # forced by hand: the emitter refuses it through gluon_api as well
    with gluon_api.emitting_for(version), pytest.raises(UnsupportedError, match=f"this is Triton {version}"):
        lower_gfx1250(m)


def test_masks_are_gfx1250_only() -> None:
    with pytest.raises(UnsupportedError, match="gfx1250's"):
        plan_schedule(SPEC, H100_SXM, tdm_warps=TdmWarps.SPLIT)


def test_the_hint_is_emitted_only_with_a_mask() -> None:
    with gluon_api.emitting_for("3.9"):
        every = lower_gfx1250(_module(TdmWarps.EVERY)).text
        split = lower_gfx1250(_module(TdmWarps.SPLIT)).text
    assert "warp_used_hint" not in every and "tdm.async_wait(2)" in every
    assert "warp_used_hint=0b0001)" in split and "warp_used_hint=0b0010)" in split and "tdm.async_wait(1)" in split


def test_a_fused_copy_needs_disjoint_warps_and_two_to_four_members() -> None:
    m = _module(TdmWarps.FUSED)
    assert sum(o.fused for o, _ in ir.walk(m.partitions[0].body) if isinstance(o, ir.TdmLoad)) == 2 * 3
    errs = target_problems(_retarget(m, loads=WarpMask(0b0010)), GFX1250)
    assert any("each member needs its own warps, disjoint" in e for e in errs), errs

    def lone(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, body=lone(s.body)) if isinstance(s, ir.Loop) else
                     replace(s, fused=False) if isinstance(s, ir.TdmLoad) and s.tensor is ir.Tensor.B else s
                     for s in body)
    (p,) = m.partitions
    errs = target_problems(m.with_partition(replace(p, body=lone(p.body))), GFX1250)
    assert any("has 1 member(s); tdm.async_load_fused takes 2 to 4" in e for e in errs), errs


def test_a_fused_copy_is_emitted_from_triton_3_9_only() -> None:
    with gluon_api.emitting_for("3.9"):
        src = lower_gfx1250(_module(TdmWarps.FUSED)).text
        plan = plan_schedule(SPEC, GFX1250, tdm_warps=TdmWarps.FUSED)
    assert src.count("tdm.async_load_fused([") == 3 and "tdm.async_wait(1)" in src
    assert "add_offsets=[0, (kk + 2) * BK], pred=(kk + 2 < k_tiles).to(gl.int32), clamp_bounds=True), " \
           "a_ring.index" in src and "0b0010)])" in src
    assert plan.tdm_fused and tdm_warps_reason(plan) == TdmWarps.FUSED.value
    with gluon_api.emitting_for("3.8"), pytest.raises(UnsupportedError, match=r"needs Triton >= 3\.9.*this is "
                                                                                r"Triton 3\.8"):
        plan_schedule(SPEC, GFX1250, tdm_warps=TdmWarps.FUSED)
    with gluon_api.emitting_for("3.8"), pytest.raises(UnsupportedError, match="tdm.async_load_fused"):
        lower_gfx1250(_module(TdmWarps.FUSED))
