"""`warploom.quantize(y, recipe="rowwise")` inside a fused epilogue, on the CPU simulator, against the plain function.

The kernel returns (q, s): fp8 data and (M, 1) fp32 scales, which must be exactly
``warploom.quantize(reference, recipe="rowwise")`` of the epilogue's value computed by torch. Rule 27 plans one tile
across N (128 wide up to N = 128, 256 wide up to N = 256), so each row's amax is folded within one tile. With small
integer inputs every fp32 sum is exact in any order, so q's bytes and s must match bit for bit; random normal inputs
are judged by a scale-free metric instead. Shapes are no tile multiples (ragged M; N ragged against the tile), every
output starts NaN-poisoned, zero and NaN rows follow the plain convention, and a planted bug (the division reads the
amax of half the row) is caught.
"""

from __future__ import annotations

import dataclasses
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
from warploom.sim.findings import FindingKind

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2
R = {"recipe": "rowwise"}


def kernel(a: torch.Tensor, b: torch.Tensor, fn: Callable[..., Any], subtiles: int | None = None,
           **ops: torch.Tensor) -> Kernel:
    k = warploom.plan(a, b, epilogue=fn, **ops)
    if subtiles is not None:  # the walk over the row's blocks: forced 64- or 32-column blocks of a 128-wide tile
        k = build(k.spec, H100_SXM, dataclasses.replace(k.plan, epilogue_subtiles=subtiles))
    return k


def poisoned(k: Kernel, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.full((m, n), float("nan")).to(k.spec.output_dtypes()[0].torch), torch.full((m, 1), float("nan"))


def check(k: Kernel, a: torch.Tensor, b: torch.Tensor, ops: dict[str, torch.Tensor], want: torch.Tensor,
          fp8: torch.dtype = E4) -> None:
    """Simulate into NaN-poisoned outputs; (q, s) must be the plain function's of `want`, bit for bit."""
    m, n = want.shape
    outs = poisoned(k, m, n)
    res = sim.simulate(k.module, a, b, operands=ops, outs=outs, record=False)
    assert res.ok, res.findings
    q, s = res.outputs
    assert q is outs[0] and s is outs[1]  # written in place, every element (the coverage check and no NaN left)
    rq, rs = warploom.quantize(want, recipe="rowwise", dtype=fp8)
    assert s.shape == (m, 1) and s.dtype == torch.float32
    assert torch.equal(s, rs)
    assert same_bytes(q, rq)


# (M, N, K): ragged M; N below its tile (80 of 128, 208 of 256) or the whole tile (128, 256); decode (M = 9: a 64-row
# tile, one warpgroup).
SHAPES = [(200, 80, 256), (65, 128, 128), (129, 208, 192), (300, 256, 64), (9, 240, 320)]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("fp8", [E4, E5], ids=["e4m3", "e5m2"])
def test_bitwise_against_plain_quantize(shape: tuple[int, int, int], fp8: torch.dtype) -> None:
    """A row vector (up to N = 128, rule 27's 128-wide tile takes it) or a column vector and a constant (the
    256-wide tile) before the amax."""
    torch.manual_seed(sum(shape))
    m, n, k = shape
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    y = a.double() @ b.double()
    if n <= 128:
        shift = ints(n, lo=-40, hi=41)
        kern = kernel(a, b, lambda acc, shift: warploom.quantize(acc + shift, dtype=fp8, **R), shift=shift)
        ops, want = {"shift": shift}, y + shift.double()
    else:
        col = ints(m, 1, lo=-3, hi=4)
        kern = kernel(a, b, lambda acc, col_s: warploom.quantize(acc * col_s - 3.0, dtype=fp8, **R), col_s=col)
        ops, want = {"col_s": col}, y * col.double() - 3.0
    assert kern.plan.bn == (128 if n <= 128 else 256)
    check(kern, a, b, ops, want.float(), fp8)


@pytest.mark.parametrize("subtiles", [2, 4], ids=["64col", "32col"])
def test_forced_walks_of_a_128_wide_row(subtiles: int) -> None:
    torch.manual_seed(subtiles)
    m, n, k = 130, 112, 96
    a, b, shift = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(n, lo=-40, hi=41)
    kern = kernel(a, b, lambda acc, shift: warploom.quantize(F.relu(acc + shift), **R), subtiles, shift=shift)
    assert kern.plan.epilogue_subtiles == subtiles
    check(kern, a, b, {"shift": shift}, torch.relu(a.double() @ b.double() + shift.double()).float())


def test_dense_operand_bitwise() -> None:
    """A dense residual (N <= 128) comes through its TMA staging buffer, each block's copy before its load."""
    torch.manual_seed(6)
    m, n, k = 200, 96, 256
    a, b, res = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(m, n, lo=-60, hi=61).to(BF16)
    kern = kernel(a, b, lambda acc, res: warploom.quantize(acc + res, **R), res=res)
    check(kern, a, b, {"res": res}, (a.double() @ b.double() + res.double()).float())


@pytest.mark.parametrize("recipe", ["tensorwise_256", "rowwise_promoted_128", "rowwise_fast_bias_128"])
def test_fp8_scaled_mm_quantized_bitwise(recipe: str) -> None:
    """scaled_mm's epilogue quantized rowwise: tensorwise scales on the 256-wide tile, rowwise scales and a bias
    (per-column operands) on the 128-wide one, promoted or fast. Power-of-two scales and small integers keep every
    sum exact, so the bytes match the plain function's of torch's fp64 product."""
    torch.manual_seed(5)
    pow2 = lambda *shape: torch.exp2(torch.randint(-3, 3, shape).float())  # noqa: E731
    fn = lambda acc: warploom.quantize(F.silu(acc), **R)  # noqa: E731
    m, k = 200, 384
    if recipe == "tensorwise_256":
        n = 240
        a, b = ints(m, k).to(E4), ints(n, k).to(E4).t()
        sa, sb = torch.tensor(0.5), torch.tensor(2.0)
        q, s = warploom.scaled_mm(a, b, sa, sb, out_dtype=BF16, use_fast_accum=True, epilogue=fn)
        y = a.double() @ b.double() * sa.double() * sb.double()
    else:
        n = 112
        a, b = ints(m, k).to(E4), ints(n, k).to(E4).t()
        sa, sb, bias = pow2(m, 1), pow2(1, n), ints(n).to(BF16)
        q, s = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=BF16, epilogue=fn,
                                  use_fast_accum=recipe == "rowwise_fast_bias_128")
        y = a.double() @ b.double() * sa.double() * sb.double() + bias.double()
    rq, rs = warploom.quantize(F.silu(y.float()), **R)
    assert s.shape == (m, 1) and torch.equal(s, rs) and same_bytes(q, rq)


@pytest.mark.parametrize("n", [96, 256])
def test_zero_and_nan_rows_follow_the_plain_convention(n: int) -> None:
    """An all-zero row gets s = 1 and zero data; a NaN in a row makes its s and q NaN, only in that row (the amax
    is NaN-propagating in the kernel too)."""
    torch.manual_seed(n)
    m, k = 70, 64
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    a[3] = 0.0
    col = ints(m, 1, lo=1, hi=3)
    col[9, 0] = float("nan")
    q, s = warploom.matmul(a, b, epilogue=lambda acc, col_s: warploom.quantize(acc * col_s, **R), col_s=col)
    want = (a.double() @ b.double() * col.double()).float()
    rq, rs = warploom.quantize(want, **R)
    assert s[3].item() == 1.0 and not q[3].float().any()
    assert bool(s[9].isnan().all()) and bool(q[9].float().isnan().all()) and not bool(s[10:].isnan().any())
    assert torch.equal(s.nan_to_num(), rs.nan_to_num()) and same_bytes(q, rq)


def test_random_inputs_by_a_scale_free_metric() -> None:
    """bf16 normal inputs, judged within fp8 rounding (`rowwise_within_fp8_rounding`)."""
    torch.manual_seed(3)
    m, n, k = 150, 208, 512
    a, b = torch.randn(m, k).to(BF16), torch.randn(k, n).to(BF16)
    q, s = warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(F.gelu(acc), **R))
    rowwise_within_fp8_rounding(q, s, F.gelu(a.double() @ b.double()).float())


def _amax_over_half_the_row(m: ir.Module) -> ir.Module:
    """The planted bug: the row's second half folds only after the first half is divided (its folds move behind
    the first half's last apply_epilogue), so blocks 0-3 divide by the amax of 128 of the row's 256 columns."""
    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        late = [s for s in body if isinstance(s, ir.FoldAmax) and s.part >= s.parts // 2]
        out = [s for s in body if s not in late]
        at = next(i for i, s in enumerate(out) if isinstance(s, ir.ApplyEpilogue) and s.part == s.parts // 2)
        return tuple(out[:at] + late + out[at:])

    return in_tiles(m, tile)


def test_planted_amax_over_half_the_row_is_caught() -> None:
    torch.manual_seed(4)
    m, n, k = 128, 256, 64
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    b[:, 128:] = (b[:, 128:].float() * 16).to(BF16)  # the row's second half holds its amax
    kern = kernel(a, b, lambda acc: warploom.quantize(acc, **R))
    assert (kern.plan.bn, kern.plan.epilogue_subtiles) == (256, 8)
    good = sim.simulate(kern.module, a, b, operands={}, record=False)
    assert good.ok, good.findings
    bad = sim.simulate(_amax_over_half_the_row(kern.module), a, b, operands={}, record=False)
    assert {f.kind for f in bad.findings} == {FindingKind.AMAX_INCOMPLETE}
    assert "holds 128 of the group's 256 columns" in str(bad.findings[0])
    rq, rs = warploom.quantize(a.float() @ b.float(), **R)
    assert torch.equal(good.outputs[1], rs) and same_bytes(good.outputs[0], rq)
    assert not same_bytes(bad.outputs[0], rq)  # and the numerics show it: the first half saturates
