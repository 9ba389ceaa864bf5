"""Planner rule 29 on the CPU simulator: a fused rowwise quantization whose rows span tiles along N (N > 256, or
N <= 256 with what rule 27's 256-wide tile cannot hold), in two passes (the GEMM stores y to an fp32 workspace and
adds each tile's row amax to an (M,) amax by an atomic max; the cast kernel then divides), against the plain
function.

The pair (q, s) must be exactly ``warploom.quantize(reference, recipe="rowwise")`` of the epilogue's value computed
by torch in fp64: with small integer inputs every sum is exact in any order, and y reaches the cast pass in fp32, so
q's bytes and s match bit for bit. Shapes are no tile multiples (ragged M; N ragged against 256-wide tiles, 128-wide
for promoted fp8), the outputs start NaN-poisoned, and zero and NaN rows follow the plain convention. Four planted
bugs are caught, each by a finding and, where the data shows it, by the numbers: tiles that never publish their
amax, a tile that publishes before its last block folds, a cast pass that runs before every tile along N finished,
and an amax workspace kept from the previous call without zeroing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fused_cases import in_tiles, ints, rowwise_within_fp8_rounding, same_bytes  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, sim
from warploom.ir import nodes as ir
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.sim.findings import FindingKind

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2
R = {"recipe": "rowwise"}


def wide(k: Kernel) -> Kernel:
    """The kernel on rule 9's 128x256 tiles (8 blocks of 32 columns a tile), as rule 29 plans large problems whose
    graph is acc alone; the planner gives these small problems 128x128 (one block a tile)."""
    return build(k.spec, H100_SXM, plan_schedule(k.spec, H100_SXM, bn=256))


def poisoned(m: int, n: int, fp8: torch.dtype = E4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((m, n), float("nan")).to(fp8), torch.full((m, 1), float("nan"))


def run(k: Kernel, a: torch.Tensor, b: torch.Tensor, ops: dict[str, torch.Tensor], fp8: torch.dtype = E4,
        **kw: Any) -> sim.SimResult:
    m, n = a.shape[0], b.shape[1]
    outs = poisoned(m, n, fp8)
    res = sim.simulate(k.module, a, b, operands=ops, outs=outs, record=False, **kw)
    assert res.outputs[0] is outs[0] and res.outputs[1] is outs[1]  # (q, s) written in place
    return res


def check(k: Kernel, a: torch.Tensor, b: torch.Tensor, ops: dict[str, torch.Tensor], want: torch.Tensor,
          fp8: torch.dtype = E4) -> None:
    """Two passes into NaN-poisoned outputs: no finding, and (q, s) the plain function's of `want`, bit for bit."""
    assert k.plan.amax_pass and k.module.amax_pass is not None
    res = run(k, a, b, ops, fp8)
    assert res.ok, res.findings
    q, s = res.outputs
    rq, rs = warploom.quantize(want, recipe="rowwise", dtype=fp8)
    assert s.shape == (a.shape[0], 1) and torch.equal(s, rs)
    assert same_bytes(q, rq)


# (M, N, K): ragged M and N (N = 600: 2 whole 256-wide tiles and 88 columns; 1544 = 6 x 256 + 8), whole tiles,
# decode (M = 9: a 64-row tile, one warpgroup).
SHAPES = [(200, 600, 64), (129, 1544, 32), (256, 512, 96), (9, 264, 64)]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("fp8", [E4, E5], ids=["e4m3", "e5m2"])
def test_bitwise_against_plain_quantize(shape: tuple[int, int, int], fp8: torch.dtype) -> None:
    """A column vector and a constant before the amax, bf16 GEMM on rule 29's 256-wide tiles."""
    torch.manual_seed(sum(shape))
    m, n, k = shape
    a, b, col = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(m, 1, lo=-3, hi=4)
    kern = warploom.plan(a, b, col_s=col,
                         epilogue=lambda acc, col_s: warploom.quantize(acc * col_s - 3.0, dtype=fp8, **R))
    assert kern.plan.bn == 128  # (a graph with operands: 128 wide, rows 64 at decode sizes)
    check(kern, a, b, {"col_s": col}, ((a.double() @ b.double()) * col.double() - 3.0).float(), fp8)


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_bitwise_on_256_wide_tiles(shape: tuple[int, int, int]) -> None:
    """acc alone on 128x256 tiles: each tile folds its 8 blocks' row amax, then adds it to the row's."""
    torch.manual_seed(sum(shape) + 1)
    m, n, k = shape
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    kern = wide(warploom.plan(a, b, epilogue=lambda acc: warploom.quantize(F.gelu(acc), **R)))
    assert (kern.plan.bn, kern.plan.epilogue_subtiles) == (256, 8)
    check(kern, a, b, {}, F.gelu(a.double() @ b.double()).float())


def test_row_and_dense_operands_bitwise() -> None:
    """What rule 27 refuses at 256 wide (a bias row, a dense residual: their values would stay live from the fold
    to the division) runs here: rule 29 divides in another kernel."""
    torch.manual_seed(7)
    m, n, k = 130, 520, 64
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    shift, res = ints(n, lo=-40, hi=41), ints(m, n, lo=-60, hi=61).to(BF16)
    kern = warploom.plan(a, b, shift=shift, res=res,
                         epilogue=lambda acc, shift, res: warploom.quantize(F.relu(acc + shift) + res, **R))
    want = torch.relu(a.double() @ b.double() + shift.double()) + res.double()
    check(kern, a, b, {"shift": shift, "res": res}, want.float())


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "promoted"])
def test_fp8_scaled_mm_quantized_bitwise(fast: bool) -> None:
    """scaled_mm's rowwise scales and bias before a SiLU, quantized rowwise for the next fp8 GEMM; promoted fp8 on
    128-wide tiles (one accumulator a warpgroup). Power-of-two scales and small integers keep every sum exact."""
    torch.manual_seed(5)
    pow2 = lambda *shape: torch.exp2(torch.randint(-3, 3, shape).float())  # noqa: E731
    m, n, k = 200, 400, 256
    a, b = ints(m, k).to(E4), ints(n, k).to(E4).t()
    sa, sb, bias = pow2(m, 1), pow2(1, n), ints(n).to(BF16)
    fn = lambda acc: warploom.quantize(F.silu(acc), **R)  # noqa: E731
    kern = warploom.plan(a, b, sa, sb, bias=bias, out_dtype=BF16, use_fast_accum=fast, epilogue=fn)
    assert kern.plan.amax_pass and kern.plan.bn == 128
    q, s = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=BF16, use_fast_accum=fast, epilogue=fn)
    y = a.double() @ b.double() * sa.double() * sb.double() + bias.double()
    rq, rs = warploom.quantize(F.silu(y.float()), **R)
    assert s.shape == (m, 1) and torch.equal(s, rs) and same_bytes(q, rq)


NARROW = [(128, 256, 2048), (300, 240, 1008)]


@pytest.mark.parametrize("shape", NARROW, ids=["x".join(map(str, s)) for s in NARROW])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "promoted"])
def test_fp8_scaled_mm_rows_rule_27_cannot_hold_bitwise(shape: tuple[int, int, int], fast: bool) -> None:
    """N <= 256 with scaled_mm's per-column scale_b (the H100 benchmark's call, refused until 2026-11-27): rule 27's
    256-wide tile cannot take it, so rule 29's two passes run on 128-wide tiles (N = 240: one whole tile and 112
    columns of another; M = 300 ragged)."""
    torch.manual_seed(sum(shape))
    pow2 = lambda *shape: torch.exp2(torch.randint(-3, 3, shape).float())  # noqa: E731
    m, n, k = shape
    a, b = ints(m, k, lo=-2, hi=3).to(E4), ints(n, k, lo=-2, hi=3).to(E4).t()
    sa, sb = pow2(m, 1), pow2(1, n)
    fn = lambda acc: warploom.quantize(acc, **R)  # noqa: E731
    kern = warploom.plan(a, b, sa, sb, out_dtype=BF16, use_fast_accum=fast, epilogue=fn)
    assert kern.plan.amax_pass and kern.plan.bn == 128
    q, s = warploom.scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=fast, epilogue=fn)
    rq, rs = warploom.quantize((a.double() @ b.double() * sa.double() * sb.double()).float(), **R)
    assert s.shape == (m, 1) and torch.equal(s, rs) and same_bytes(q, rq)


def test_dense_operand_at_256_bitwise() -> None:
    """bf16 with a dense residual at N = 256 (rule 27 refuses it at 256 wide): rule 29's 128-wide tiles."""
    torch.manual_seed(9)
    m, n, k = 130, 256, 64
    a, b, res = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(m, n, lo=-60, hi=61).to(BF16)
    kern = warploom.plan(a, b, res=res, epilogue=lambda acc, res: warploom.quantize(F.relu(acc) + res, **R))
    assert kern.plan.bn == 128
    check(kern, a, b, {"res": res}, (torch.relu(a.double() @ b.double()) + res.double()).float())


def test_zero_and_nan_rows_follow_the_plain_convention() -> None:
    """An all-zero row gets s = 1 and zero data; a NaN in one tile of a row makes the whole row's s and q NaN (the
    NaN reaches the amax through the atomic max of its bits), and no other row's."""
    torch.manual_seed(11)
    m, n, k = 70, 712, 64
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    a[3] = 0.0
    shift = ints(n, lo=-2, hi=3)
    shift[650] = float("nan")  # (the third tile along N)
    col = torch.ones(m, 1)
    col[9, 0] = float("nan")
    q, s = warploom.matmul(a, b, shift=shift, col_s=col,
                           epilogue=lambda acc, shift, col_s: warploom.quantize(acc * col_s + shift, **R))
    want = (a.double() @ b.double() * col.double() + shift.double()).float()
    rq, rs = warploom.quantize(want, **R)
    assert bool(s.isnan().all()) and bool(rs.isnan().all())  # (every row has the NaN column)
    assert bool(q.float().isnan().all())
    q, s = warploom.matmul(a, b, col_s=col, epilogue=lambda acc, col_s: warploom.quantize(acc * col_s, **R))
    rq, rs = warploom.quantize((a.double() @ b.double() * col.double()).float(), **R)
    assert s[3].item() == 1.0 and not q[3].float().any()
    assert bool(s[9].isnan().all()) and bool(q[9].float().isnan().all()) and int(s.isnan().sum()) == 1
    assert torch.equal(s.nan_to_num(), rs.nan_to_num()) and same_bytes(q, rq)


def test_random_inputs_by_a_scale_free_metric() -> None:
    """bf16 normal inputs across 7 tiles along N, judged within fp8 rounding (`rowwise_within_fp8_rounding`)."""
    torch.manual_seed(3)
    m, n, k = 100, 800, 256
    a, b = torch.randn(m, k).to(BF16), torch.randn(k, n).to(BF16)
    q, s = warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(F.gelu(acc), **R))
    rowwise_within_fp8_rounding(q, s, F.gelu(a.double() @ b.double()).float())


# The planted bugs' data: each row's amax lies in the last block of the second tile along N (columns 480-511, 16x
# larger), the block an early atomic_amax leaves out; a third tile holds the ragged 88 columns.
def _planted_case() -> tuple[Kernel, torch.Tensor, torch.Tensor]:
    torch.manual_seed(4)
    m, n, k = 128, 600, 64
    a, b = ints(m, k, lo=1, hi=3).to(BF16), ints(k, n, lo=1, hi=3).to(BF16)
    b[:, 480:512] = (b[:, 480:512].float() * 16).to(BF16)
    kern = wide(warploom.plan(a, b, epilogue=lambda acc: warploom.quantize(acc, **R)))
    assert kern.plan.amax_pass and kern.plan.bn == 256
    return kern, a, b


def _drop_atomics(m: ir.Module) -> ir.Module:
    """Planted: the tiles fold their amax but never add it to the workspace (no atomic_amax)."""
    return in_tiles(m, lambda body: tuple(s for s in body if not isinstance(s, ir.AtomicAmax)))


def _atomic_before_last_fold(m: ir.Module) -> ir.Module:
    """Planted: each tile's atomic_amax moves before its last block's fold_amax (it publishes 224 of 256 columns)."""
    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        atomic = next(s for s in body if isinstance(s, ir.AtomicAmax))
        out = [s for s in body if s is not atomic]
        at = next(i for i, s in enumerate(out) if isinstance(s, ir.FoldAmax) and s.part == s.parts - 1)
        return tuple(out[:at] + [atomic] + out[at:])

    return in_tiles(m, tile)


def _reference(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return warploom.quantize((a.double() @ b.double()).float(), **R)


@pytest.mark.parametrize("plant", [_drop_atomics, _atomic_before_last_fold], ids=["no_atomic", "atomic_early"])
def test_planted_unpublished_amax_is_caught(plant: Callable[[ir.Module], ir.Module]) -> None:
    kern, a, b = _planted_case()
    good = run(kern, a, b, {})
    assert good.ok, good.findings
    rq, rs = _reference(a, b)
    assert torch.equal(good.outputs[1], rs) and same_bytes(good.outputs[0], rq)
    bad = sim.simulate(plant(kern.module), a, b, operands={}, outs=poisoned(128, 600), record=False)
    kinds = {f.kind for f in bad.findings}
    assert kinds == {FindingKind.AMAX_INCOMPLETE}
    assert any("the cast pass reads the amax of 128 row(s) that miss columns" in f.message for f in bad.findings)
    if plant is _atomic_before_last_fold:
        assert any("holds 224 of the tile's 256 columns" in f.message for f in bad.findings)
    assert not torch.equal(bad.outputs[1], rs) and not same_bytes(bad.outputs[0], rq)  # and the numbers show it


def test_planted_cast_before_every_tile_is_caught() -> None:
    """The cast pass after only some CTAs ran (as if it read the amax before the first pass finished): the rows
    whose tiles along N did not all add their amax are named."""
    kern, a, b = _planted_case()
    grid = kern.module.tiling.grid
    assert grid >= 3  # (3 tiles along N, one row of tiles: a CTA each)
    res = run(kern, a, b, {}, ctas=[0, 2])
    msgs = [f.message for f in res.findings if f.kind is FindingKind.AMAX_INCOMPLETE]
    assert msgs and "row 0: 344 of N=600 added" in msgs[0]  # (tiles 0 and 2: 256 + 88 columns)
    rq, rs = _reference(a, b)
    assert not torch.equal(res.outputs[1], rs)  # (the missing tile held every row's amax)


def test_planted_amax_workspace_kept_between_calls_is_caught() -> None:
    """The amax workspace must be zeroed per call (the launcher allocates it with torch.zeros each call). Kept from a
    call with larger values, it scales the next call's rows by the old amax: AMAX_STALE, and wrong bytes."""
    kern, a, b = _planted_case()
    kept = torch.zeros(128)
    first = run(kern, a, b, {}, amax=kept)
    assert first.ok, first.findings
    assert bool((kept > 0).all())  # (written in place: the rows' amax)
    small = (b.float() / 4).to(BF16)  # every value a quarter: a new amax per row
    second = run(kern, a, small, {}, amax=kept)
    assert {f.kind for f in second.findings} == {FindingKind.AMAX_STALE}
    rq, rs = _reference(a, small)
    assert not torch.equal(second.outputs[1], rs) and not same_bytes(second.outputs[0], rq)
    kept.zero_()  # the fix: zero it per call
    third = run(kern, a, small, {}, amax=kept)
    assert third.ok, third.findings
    assert torch.equal(third.outputs[1], rs) and same_bytes(third.outputs[0], rq)


def test_a_q_with_strided_columns_is_refused_as_the_launcher_refuses_it() -> None:
    """The cast kernel writes q[row, c] at row * q.stride(0) + c (backends/gluon_cast.py): a q whose columns are not
    at unit stride (a transposed view) is refused by name, as the launcher refuses it, not written as torch would."""
    a, b = ints(70, 32).to(BF16), ints(32, 304).to(BF16)
    kern = warploom.plan(a, b, epilogue=lambda acc: warploom.quantize(acc, **R))
    q = torch.full((304, 70), float("nan")).to(E4).t()
    with pytest.raises(warploom.errors.AlignmentError, match=r"outs\[0\]: expected q's columns at unit stride"):
        sim.simulate(kern.module, a, b, outs=(q, torch.empty(70, 1)), record=False)
