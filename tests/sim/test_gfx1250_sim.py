"""The simulator on gfx1250 schedules (planner rule 20, passes/gfx1250.py): one software-pipelined partition whose TDM
copies complete in issue order, are retired by a counting wait, and reach every warp only through a barrier. Clean
runs with numerics, the explorer, and planted bugs that the simulator must catch by itself (the static verifier
bypassed; tests/unit/test_gfx1250.py has the verifier's side)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from warploom.device import GFX1250
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import BLayout, GemmSpec, ScaleRecipe
from warploom.targets import problems as target_problems

K = FindingKind
E4 = DType.E4M3
# 5 x 2 tiles of 64x64 over a grid of 2, 5 k-blocks of 32 each through 3 stages: every slot is refilled within a
# tile and across tiles, and the tail (the last block, with nothing behind it) comes in every tile.
SPEC = GemmSpec(300, 120, 150)


@functools.cache
def _module(spec: GemmSpec, stages: int = 3, grid: int = 2, bm: int = 64, bn: int = 64) -> ir.Module:
    plan = plan_schedule(spec, GFX1250, bm=bm, bn=bn, stages=stages)
    return build(spec, GFX1250, replace(plan, grid=grid, bk=32 if spec.a_dtype.bytes == 2 else 64)).module


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


@pytest.mark.parametrize("spec", [
    SPEC,
    GemmSpec(300, 120, 150, DType.FP16, DType.FP16, DType.FP32, BLayout.N_MAJOR),
    GemmSpec(200, 136, 320, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
    GemmSpec(130, 72, 200, E4, E4, DType.FP32, BLayout.K_MAJOR, ScaleRecipe.TENSORWISE),
], ids=["bf16", "fp16_nmajor_fp32", "fp8_rowwise_bias", "fp8_tensorwise_fp32"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_clean_and_correct(spec: GemmSpec, stages: int) -> None:
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=stages)
    res = simulate(_module(spec, stages), x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=stages)
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert _err(res.output, reference(x)) < 1e-5


def test_planner_plan_is_clean() -> None:
    """The planner's own plan (128x128 tiles, 3 stages, BK 64), several tiles per CTA, one k-block shy of a whole
    number (K = 200: the last block is ragged)."""
    spec = GemmSpec(300, 400, 200)
    kern = build(spec, GFX1250, replace(plan_schedule(spec, GFX1250), grid=2))
    assert (kern.plan.bm, kern.plan.bn, kern.plan.bk, kern.plan.stages) == (128, 128, 64, 3)
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=3)
    res = simulate(kern.module, x.a, x.b, seed=3)
    assert res.ok and _err(res.output, reference(x)) < 1e-5, res.report.summary()


@pytest.mark.parametrize("k", [32, 64, 96, 160])
def test_short_k_is_clean(k: int) -> None:
    """One to five k-blocks through 3 stages: prologue copies past the tile's end are predicated off, and the wait's
    tail takes every copy where fewer blocks stand behind the one needed."""
    spec = GemmSpec(130, 70, k)
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=k)
    res = simulate(_module(spec), x.a, x.b, seed=k)
    assert res.ok and _err(res.output, reference(x)) < 1e-5, res.report.summary()


def test_explorer_finds_nothing() -> None:
    r = explore(_module(SPEC), 192, 64, 160, max_states=60_000)  # 3 tiles over 2 CTAs, 5 k-blocks each
    assert not r.findings and not r.bound_hit, r.summary()


Mutate = Callable[[ir.Module], ir.Module]


def _edit_tile(fn: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]) -> Mutate:
    """Rewrite the tile loop's body (the prologue and the k-loop)."""
    def mutate(m: ir.Module) -> ir.Module:
        (part,) = m.partitions
        (tiles, *rest) = part.body
        assert isinstance(tiles, ir.Loop)
        return m.with_partition(replace(part, body=(replace(tiles, body=fn(tiles.body)), *rest)))
    return mutate


def _edit_k(fn: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]) -> Mutate:
    """Rewrite the k-loop's body."""
    return _edit_tile(lambda body: tuple(replace(s, body=fn(s.body)) if isinstance(s, ir.Loop) else s for s in body))


def _map_k(f: Callable[[ir.Stmt], ir.Stmt]) -> Mutate:
    return _edit_k(lambda body: tuple(f(s) for s in body))


def test_a_slot_read_again_after_a_barrier_is_clean() -> None:
    """A barrier does not end a fill: reading the slot again after it is no finding. (The second wmma adds each
    block twice, which only the numerics see: the accumulator check counts which k-blocks a sum holds, not how
    often.)"""
    def twice(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        wmma = next(s for s in body if isinstance(s, ir.Wmma))
        i = body.index(wmma)
        return (*body[:i + 1], ir.SyncWarps(), wmma, *body[i + 1:])

    x = make_inputs(SPEC, SPEC.m, SPEC.n, SPEC.k, seed=2)
    assert not simulate(_edit_k(twice)(_module(SPEC)), x.a, x.b, seed=2).report.kinds()


def _sync_after_copies(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The barrier moves behind the k-loop's copies, which then overwrite the slot the last wmma read unsynced."""
    sync = next(s for s in body if isinstance(s, ir.SyncWarps))
    rest = [s for s in body if s is not sync]
    last_copy = max(i for i, s in enumerate(rest) if isinstance(s, ir.TdmLoad))
    return (*rest[:last_copy + 1], sync, *rest[last_copy + 1:])


MUTANTS: dict[str, tuple[Mutate, frozenset[FindingKind]]] = {
    # No barrier: each warp reads slots whose other shares it never waited for, and copies overwrite slots read.
    "no_sync": (_edit_k(lambda b: tuple(s for s in b if not isinstance(s, ir.SyncWarps))),
                frozenset({K.UNSYNCED_WARPS})),
    # The barrier after the copies: the copy into the previous block's slot races a warp still reading it.
    "sync_after_copies": (_edit_k(_sync_after_copies), frozenset({K.UNSYNCED_WARPS})),
    # No wait: the wmma reads copies no one waited for.
    "no_wait": (_edit_k(lambda b: tuple(s for s in b if not isinstance(s, ir.TdmWait))),
                frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
    # The wait leaves one block's copies too many in flight: the block needed may still be landing.
    "wait_too_lax": (_map_k(lambda s: replace(s, pending=s.pending + 2) if isinstance(s, ir.TdmWait) else s),
                     frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
    # No tail: at the tile's end fewer copies stand behind the block needed, and the same count lets it pass early.
    "wait_without_tail": (_map_k(lambda s: replace(s, ahead=0) if isinstance(s, ir.TdmWait) else s),
                          frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED})),
    # The k-loop's copies run a whole ring ahead: into the slot the wmma is about to read.
    "copy_a_ring_ahead": (_map_k(lambda s: replace(s, ahead=s.ahead + 1, slot=ir.Slot("c", s.ahead + 1))
                                 if isinstance(s, ir.TdmLoad) else s),
                          frozenset({K.OVERWRITE_UNRELEASED, K.WRONG_TILE, K.UNSYNCED_WARPS, K.READ_BEFORE_LANDED})),
    # The k-loop's copies land in the wrong slot (c+1 instead of c+2).
    "copy_into_wrong_slot": (_map_k(lambda s: replace(s, slot=ir.Slot("c", 1)) if isinstance(s, ir.TdmLoad)
                                    else s),
                             frozenset({K.WRONG_TILE, K.OVERWRITE_UNRELEASED, K.READ_BEFORE_LANDED})),
    # The tile is stored before its mainloop: the store reads a sum of nothing (the previous tile's, after the first).
    "store_before_mainloop": (_edit_tile(lambda b: (*(s for s in b if isinstance(s, ir.StoreTile)),
                                                    *(s for s in b if not isinstance(s, ir.StoreTile)))),
                              frozenset({K.ACC_INCOMPLETE})),
    # The wmma overwrites at every k-block: the store reads the last block's product alone.
    "overwrite_every_k": (_map_k(lambda s: replace(s, overwrite=ir.Guard.ALWAYS) if isinstance(s, ir.Wmma) else s),
                          frozenset({K.ACC_INCOMPLETE})),
    # No prologue: the first blocks of every tile are never copied.
    "no_prologue": (_edit_tile(lambda b: tuple(s for s in b if not isinstance(s, ir.TdmLoad))),
                    frozenset({K.READ_BEFORE_LANDED, K.WRONG_TILE})),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    mutate, caught_by = MUTANTS[name]
    x = make_inputs(SPEC, SPEC.m, SPEC.n, SPEC.k, seed=0)
    kinds: set[FindingKind] = set()
    for seed in range(3):
        kinds |= simulate(mutate(_module(SPEC)), x.a, x.b, seed=seed).report.kinds()
    assert kinds & caught_by, f"{name}: found {sorted(k.name for k in kinds)}"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught_exhaustively(name: str) -> None:
    mutate, caught_by = MUTANTS[name]
    r = explore(mutate(_module(SPEC)), 192, 64, 160, max_states=60_000, stop_at_first=True)
    assert r.kinds() & caught_by, r.summary()


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_verifier_catches_the_mutants_statically(name: str) -> None:
    """The verifier's pipeline rules (ir/verify.py _check_tdm) see every planted bug but the moved store, which only
    the simulator's accumulator check finds."""

    mutate, _ = MUTANTS[name]
    assert bool(target_problems(mutate(_module(SPEC)), GFX1250)) == (name != "store_before_mainloop")


def test_copies_in_flight_at_exit_are_caught() -> None:
    """The tail's wait dropped and the pending count kept: the last tile's last copies are never waited for."""
    mutant = _map_k(lambda s: replace(s, ahead=0, pending=0) if isinstance(s, ir.TdmWait) else s)(_module(SPEC))
    # (pending 0 everywhere is correct, only slower: the program is clean)
    x = make_inputs(SPEC, SPEC.m, SPEC.n, SPEC.k, seed=1)
    assert simulate(mutant, x.a, x.b, seed=1).ok
    (part,) = mutant.partitions
    (tiles, _) = part.body
    assert isinstance(tiles, ir.Loop)
    extra = ir.TdmLoad(ir.Tensor.A, "a_ring", ir.Slot("c"), (ir.Axis.M, ir.Axis.K))  # a copy after the last wait
    leaky = mutant.with_partition(replace(part, body=(replace(tiles, body=(*tiles.body, extra)),)))
    assert K.ASYNC_AT_EXIT in simulate(leaky, x.a, x.b, seed=1).report.kinds()


def _fused_module(fn: Callable[..., object], a: torch.Tensor, b: torch.Tensor, *scales: torch.Tensor,
                  **kw: object) -> ir.Module:
    import warploom

    kern = warploom.plan(a, b, *scales, epilogue=fn, device=GFX1250, **kw)  # type: ignore[arg-type]
    plan = replace(kern.plan, grid=2, bm=64, bn=64, bk=32 if a.dtype.itemsize == 2 else 64)
    return build(kern.spec, GFX1250, plan).module


def test_fused_epilogues_are_clean_and_correct() -> None:
    """Issue 4's epilogue (fp8 rowwise + bias, erf GELU, a dense residual) and a two-output bf16 one with a column
    operand, on the gfx1250 schedule: operands by ordinary loads, the graph on the whole tile, each output stored from
    registers: clean, correct, every output written once."""
    from fused_cases import check_fused_cases  # (pytest puts this folder on sys.path)

    _, two = check_fused_cases(_fused_module)
    assert not explore(two, 128, 64, 96, max_states=60_000).findings


def test_fused_store_without_its_apply_is_caught() -> None:
    g = torch.Generator().manual_seed(6)
    a16 = torch.randn(130, 96, generator=g).to(torch.bfloat16)
    w16 = torch.randn(72, 96, generator=g).to(torch.bfloat16)
    col = torch.randn(130, 1, generator=g)
    mod = _fused_module(lambda acc, col: acc * col, a16, w16.t(), col=col)
    mutant = _edit_tile(lambda b: tuple(s for s in b if not isinstance(s, ir.ApplyEpilogue)))(mod)
    r = simulate(mutant, a16, w16.t(), operands={"col": col})
    assert K.EPILOGUE_NOT_APPLIED in r.report.kinds(), r.report.summary()
    unloaded = _edit_tile(lambda b: tuple(s for s in b if not isinstance(s, ir.LoadOperand)))(mod)
    assert K.OPERAND_NOT_LOADED in simulate(unloaded, a16, w16.t(), operands={"col": col}).report.kinds()
