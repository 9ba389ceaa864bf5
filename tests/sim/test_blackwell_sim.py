"""The simulator on sm_100a schedules (planner rule 19, passes/blackwell.py): tcgen05 MMAs that complete on their
own and release their stage, commits that publish a tensor-memory accumulator, and an epilogue partition that
drains it. Clean runs with numerics, the explorer, and planted bugs that the simulator must catch by itself (the
static verifier bypassed)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from warploom.device import B200
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import Plan, plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import FindingKind, explore, simulate
from warploom.spec import BLayout, GemmSpec, ScaleRecipe

K = FindingKind
E4 = DType.E4M3
# 3 x 2 tiles of 128x64 over a grid of 2, 5 k-blocks each through 2 stages: every ring slot and both
# tensor-memory accumulators are refilled several times.
SPEC = GemmSpec(300, 120, 150)


@functools.cache
def _module(spec: GemmSpec, bn: int = 64, stages: int = 2, grid: int = 2) -> ir.Module:
    plan = plan_schedule(spec, B200, bn=bn, stages=stages)
    return build(spec, B200, replace(plan, grid=grid, bk=32 if spec.a_dtype.bytes == 2 else 64)).module


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


@pytest.mark.parametrize("spec", [
    SPEC,
    GemmSpec(300, 120, 150, DType.FP16, DType.FP16, DType.FP32, BLayout.N_MAJOR),
    GemmSpec(200, 136, 320, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE, bias_dtype=DType.BF16),
], ids=["bf16", "fp16_nmajor_fp32", "fp8_rowwise_bias"])
@pytest.mark.parametrize("seed", [0, 1])
def test_clean_and_correct(spec: GemmSpec, seed: int) -> None:
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=seed)
    res = simulate(_module(spec), x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed)
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert _err(res.output, reference(x)) < 1e-5


def test_planner_plan_is_clean() -> None:
    """The planner's own 128x256 plan (two 256-column accumulators), several tiles per CTA."""
    spec = GemmSpec(300, 600, 200)
    kern = build(spec, B200, replace(plan_schedule(spec, B200), grid=2))
    x = make_inputs(spec, spec.m, spec.n, spec.k, seed=3)
    res = simulate(kern.module, x.a, x.b, seed=3)
    assert res.ok and _err(res.output, reference(x)) < 1e-5, res.report.summary()


def test_explorer_finds_nothing() -> None:
    r = explore(_module(SPEC), 384, 128, 64, max_states=60_000)  # 3 tiles a CTA: both accumulators reused
    assert not r.findings and not r.bound_hit, r.summary()


Mutate = Callable[[ir.Module], ir.Module]


def _edit(m: ir.Module, name: str, fn: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]) -> ir.Module:
    part = m.partition(name)
    (wait, tiles, *rest) = part.body  # (the grid-dependency wait first: passes/launch.py)
    assert isinstance(wait, ir.GridDependencyWait) and isinstance(tiles, ir.Loop)
    return m.with_partition(replace(part, body=(wait, replace(tiles, body=fn(tiles.body)), *rest)))


def _early_release(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The epilogue releases the accumulator right after its wait, before reading any block."""
    arrive = next(s for s in body if isinstance(s, ir.Arrive))
    rest = [s for s in body if s is not arrive]
    return (rest[0], arrive, *rest[1:])


def _drop_release(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    return tuple(replace(s, body=tuple(replace(o, release=None) if isinstance(o, ir.TcMma) else o for o in s.body))
                 if isinstance(s, ir.Loop) else s for s in body)


def _accumulate_first(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """The overwrite guard inverted (NOT_FIRST_K): a tile's first MMA adds to the previous tile's accumulator, and
    each later one overwrites it."""
    return tuple(replace(s, body=tuple(replace(o, overwrite=ir.Guard.NOT_FIRST_K) if isinstance(o, ir.TcMma) else o
                                       for o in s.body)) if isinstance(s, ir.Loop) else s for s in body)


MUTANTS: dict[str, tuple[Mutate, frozenset[FindingKind]]] = {
    # The epilogue frees the accumulator before reading it: the MMA warp may start the next tile in it.
    "release_before_read": (lambda m: _edit(m, "epilogue", _early_release),
                            frozenset({K.READ_AFTER_RELEASE, K.OVERWRITE_UNRELEASED})),
    # The MMA warp does not wait for the epilogue to free an accumulator before refilling it.
    "no_acc_empty_wait": (lambda m: _edit(m, "mma", lambda b: tuple(s for s in b if not isinstance(s, ir.Wait))),
                          frozenset({K.OVERWRITE_UNRELEASED, K.WRONG_TILE, K.READ_UNACQUIRED})),
    # The epilogue reads tensor memory without waiting for the commit.
    "no_acc_ready_wait": (lambda m: _edit(m, "epilogue", lambda b: tuple(s for s in b if not isinstance(s, ir.Wait))),
                          frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED, K.WRONG_TILE})),
    # No commit: the epilogue waits for an accumulator no one publishes.
    "no_commit": (lambda m: _edit(m, "mma", lambda b: tuple(s for s in b if not isinstance(s, ir.Commit))),
                  frozenset({K.DEADLOCK})),
    # The MMAs no longer release their stages: the producer waits forever.
    "no_release": (lambda m: _edit(m, "mma", _drop_release), frozenset({K.DEADLOCK})),
    # The epilogue's wait passes on a fresh barrier (parity flipped).
    "acc_ready_parity_flipped": (
        lambda m: _edit(m, "epilogue", lambda b: tuple(
            replace(s, parity=replace(s.parity, flip=True)) if isinstance(s, ir.Wait) else s for s in b)),
        frozenset({K.READ_BEFORE_LANDED, K.READ_UNACQUIRED, K.PHASE_ALIAS})),
    # A tile's first MMA adds to the previous tile's accumulator instead of starting afresh.
    "first_mma_accumulates": (lambda m: _edit(m, "mma", _accumulate_first), frozenset({K.WRONG_TILE})),
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
    r = explore(mutate(_module(SPEC)), 384, 128, 64, max_states=60_000, stop_at_first=True)
    assert r.kinds() & caught_by, r.summary()


def test_plan_used_here_is_rule_19_shaped() -> None:
    m = _module(SPEC)
    assert [p.role for p in m.partitions] == [ir.Role.EPILOGUE, ir.Role.MMA, ir.Role.PRODUCER]
    assert m.ring("acc_tm").depth == 2 and isinstance(plan_schedule(SPEC, B200), Plan)


def _fused_kernel(fn: Callable[..., object], a: torch.Tensor, b: torch.Tensor, *scales: torch.Tensor,
                  **kw: object) -> tuple[object, ir.Module]:
    import warploom

    kern = warploom.plan(a, b, *scales, epilogue=fn, device=B200, **kw)  # type: ignore[arg-type]
    return kern, build(kern.spec, B200, replace(kern.plan, grid=2)).module


def test_fused_epilogue_with_a_dense_operand_and_two_outputs() -> None:
    """Issue 4's epilogue (fp8 rowwise + bias, erf GELU, a dense residual) and a two-output bf16 one with a column
    operand, on the sm_100a schedule: clean, correct, every output written once."""
    from fused_cases import check_fused_cases  # (pytest puts this folder on sys.path)

    check_fused_cases(lambda fn, a, b, *scales, **kw: _fused_kernel(fn, a, b, *scales, **kw)[1])


def test_fused_epilogue_without_its_prefetch_is_caught() -> None:
    """A dense operand read through its staging buffer with no prefetch before it: the simulator finds it."""
    g = torch.Generator().manual_seed(6)
    m, n, k = 300, 144, 192
    a16, w16 = torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(n, k, generator=g).to(torch.bfloat16)
    res = torch.randn(m, n, generator=g).to(torch.bfloat16)
    _, mod = _fused_kernel(lambda acc, residual: acc + residual, a16, w16.t(), residual=res)
    mutant = _edit(mod, "epilogue", lambda b: tuple(s for s in b if not isinstance(s, ir.PrefetchOperand)))
    r = simulate(mutant, a16, w16.t(), operands={"residual": res})
    assert r.report.kinds() & {K.OPERAND_STAGING}, r.report.summary()


def test_fused_epilogue_explores_clean() -> None:
    """Every schedule of a fused sm_100a kernel with a dense operand (its copies prefetched at the tile's start and
    behind each block's store) is free of findings: 5 tiles over 2 CTAs, both accumulators reused."""
    g = torch.Generator().manual_seed(7)
    a16, w16 = torch.randn(300, 192, generator=g).to(torch.bfloat16), torch.randn(144, 192, generator=g).to(
        torch.bfloat16)
    res = torch.randn(300, 144, generator=g).to(torch.bfloat16)
    kern, _ = _fused_kernel(lambda acc, residual: acc + residual, a16, w16.t(), residual=res)
    plan = replace(kern.plan, grid=2, stages=2, bk=32)  # type: ignore[attr-defined]
    assert plan.prefetch_operands
    r = explore(build(kern.spec, B200, plan).module, 640, 128, 64, max_states=80_000)  # type: ignore[attr-defined]
    assert not r.findings and not r.bound_hit, r.summary()


@pytest.mark.parametrize("m", [1, 13, 27])
def test_swapped_decode_clean_and_correct(m: int) -> None:
    """Decode on sm_100a runs swapped (C^T on 128x16 or 128x32 tiles, stored into C transposed): plain bf16, fp8
    rowwise with a bias (a row vector of C^T), and a fused epilogue whose row and column operands trade kinds."""
    import torch.nn.functional as F

    import warploom

    g = torch.Generator().manual_seed(m)
    n, k = 520, 256
    a, w = torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(n, k, generator=g).to(torch.bfloat16)
    bias, col = torch.randn(n, generator=g).to(torch.bfloat16), torch.randn(m, 1, generator=g)

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        return F.silu(acc + bias) * col

    for kw, ops, want in (({}, None, a.float() @ w.float().t()),
                          ({"epilogue": fn, "bias": bias, "col": col}, {"bias": bias, "col": col},
                           fn(a.float() @ w.float().t(), bias.float(), col))):
        kern = warploom.plan(a, w.t(), device=B200, **kw)  # type: ignore[arg-type]
        assert kern.plan.swap_ab
        r = build(kern.spec, B200, replace(kern.plan, grid=2)).simulate(a, w.t(), operands=ops)
        assert r.ok and _err(r.output, want) < 1e-4, r.report.summary()
    a8, w8 = (torch.randn(m, k, generator=g) * 2).to(torch.float8_e4m3fn), (torch.randn(528, k, generator=g) * 2).to(
        torch.float8_e4m3fn)
    sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, 528, generator=g) + 0.5
    b8 = torch.randn(528, generator=g).to(torch.bfloat16)
    kern = warploom.plan(a8, w8.t(), sa, sb, bias=b8, use_fast_accum=True, device=B200)
    assert kern.plan.swap_ab
    r = build(kern.spec, B200, replace(kern.plan, grid=2)).simulate(a8, w8.t(), sa, sb, b8)
    assert r.ok and _err(r.output, (a8.float() @ w8.float().t()) * sa * sb + b8.float()) < 1e-4, r.report.summary()


def test_swapped_decode_explores_clean() -> None:
    """Every schedule of a swapped sm_100a decode kernel (its own M = 640 rows of the weight: 5 tiles over 2 CTAs,
    both accumulators reused) is free of findings."""
    import warploom

    a = torch.empty(13, 256, dtype=torch.bfloat16, device="meta")
    w = torch.empty(520, 256, dtype=torch.bfloat16, device="meta")
    kern = warploom.plan(a, w.t(), device=B200)
    mod = build(kern.spec, B200, replace(kern.plan, grid=2, stages=2)).module
    r = explore(mod, 640, 16, 128, max_states=80_000)  # (the module's own sizes: C^T)
    assert mod.tiling.swap_ab and not r.findings and not r.bound_hit, r.summary()
