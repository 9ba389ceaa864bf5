"""`warploom.quantize(y, recipe="1x128")` inside a fused epilogue, on the CPU simulator, against the plain function.

The kernel returns (q, s): fp8 data and (M, ceil(N/128)) fp32 scales, which must be exactly
``warploom.quantize(reference)`` of the epilogue's value computed by torch. With small integer inputs every fp32 sum is
exact in any order, so the simulator's tile-by-tile accumulation and the fp64 reference agree and q's bytes and s must
match bit for bit; random normal inputs are judged by a scale-free metric instead (each group's dequantized error
against its amax, s to a few fp32 ulps). Shapes are no tile multiples (ragged M, a ragged last group of N), the
epilogue walks its group in one 128-column block (the plan) or in 2 or 4 blocks (forced), every output starts
NaN-poisoned, and a planted bug (each block divides by its own 64-column amax) is caught.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from fused_cases import in_tiles, ints, same_bytes  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, sim
from warploom.ir import nodes as ir
from warploom.kernel import Kernel, build
from warploom.reference import dequantized
from warploom.sim.findings import FindingKind

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2


def kernel(a: torch.Tensor, b: torch.Tensor, fn: Callable[..., Any], subtiles: int | None = None,
           **ops: torch.Tensor) -> Kernel:
    k = warploom.plan(a, b, epilogue=fn, **ops)
    if subtiles is not None:  # the walk over a group's blocks: forced 64- or 32-column blocks
        k = build(k.spec, H100_SXM, dataclasses.replace(k.plan, epilogue_subtiles=subtiles))
    return k


def poisoned(k: Kernel, m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.full((m, n), float("nan")).to(k.spec.output_dtypes()[0].torch)
    return q, torch.full((m, -(-n // 128)), float("nan"))


# (M, N, K): ragged M; N with a ragged last group (304 = 2 x 128 + 48, 144 = 128 + 16) or whole groups (256).
SHAPES = [(200, 304, 256), (65, 144, 128), (129, 256, 192)]


@pytest.mark.parametrize("subtiles", [None, 2, 4], ids=["planned", "64col", "32col"])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
@pytest.mark.parametrize("fp8", [E4, E5], ids=["e4m3", "e5m2"])
def test_bitwise_against_plain_quantize(shape: tuple[int, int, int], subtiles: int | None, fp8: torch.dtype) -> None:
    torch.manual_seed(sum(shape))
    m, n, k = shape
    a, b, shift = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(n, lo=-40, hi=41)
    kern = kernel(a, b, lambda acc, shift: warploom.quantize(acc + shift, dtype=fp8), subtiles, shift=shift)
    assert kern.plan.bn == 128 and kern.plan.epilogue_subtiles == (subtiles or 1)
    outs = poisoned(kern, m, n)
    res = sim.simulate(kern.module, a, b, operands={"shift": shift}, outs=outs, record=False)
    assert res.ok, res.findings
    q, s = res.outputs
    assert q is outs[0] and s is outs[1]  # written in place, every element (the coverage check and no NaN left)
    rq, rs = warploom.quantize((a.double() @ b.double() + shift.double()).float(), dtype=fp8)
    assert s.shape == (m, -(-n // 128)) and s.dtype == torch.float32
    assert torch.equal(s, rs)
    assert same_bytes(q, rq)


@pytest.mark.parametrize("subtiles", [None, 2], ids=["planned", "64col"])
def test_dense_operand_bitwise(subtiles: int | None) -> None:
    """A dense residual comes through its TMA staging buffer per block, each block's copy before its load, so the
    walk loads every block of a group before the first division (the registers keep each block's values)."""
    torch.manual_seed(6)
    m, n, k = 200, 304, 256
    a, b, res = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(m, n, lo=-60, hi=61).to(BF16)
    kern = kernel(a, b, lambda acc, res: warploom.quantize(acc + res), subtiles, res=res)
    out = sim.simulate(kern.module, a, b, operands={"res": res}, outs=poisoned(kern, m, n), record=False)
    assert out.ok, out.findings
    rq, rs = warploom.quantize((a.double() @ b.double() + res.double()).float())
    assert torch.equal(out.outputs[1], rs) and same_bytes(out.outputs[0], rq)


def test_matmul_on_cpu_returns_the_pair() -> None:
    """`warploom.matmul` with CPU tensors simulates and returns (q, s) as the plain function would."""
    torch.manual_seed(1)
    m, n, k = 70, 208, 128
    a, b, col = ints(m, k).to(BF16), ints(k, n).to(BF16), ints(m, 1, lo=1, hi=4)
    q, s = warploom.matmul(a, b, epilogue=lambda acc, col_s: warploom.quantize(F.relu(acc) * col_s), col_s=col)
    rq, rs = warploom.quantize((torch.relu(a.double() @ b.double()) * col.double()).float())
    assert torch.equal(s, rs) and same_bytes(q, rq)


@pytest.mark.parametrize("recipe", ["blockwise", "rowwise_promoted", "rowwise_fast"])
def test_fp8_scaled_mm_quantized_bitwise(recipe: str) -> None:
    """scaled_mm's epilogue quantized: blockwise 1x128 x 128x128 and rowwise scales promote a 128-wide tile into one
    accumulator (rule 26's tile holds the group whole); fast accumulation keeps wgmma's. Power-of-two scales and
    small integers keep every sum exact, so the bytes match the plain function's of torch's fp64 product."""
    torch.manual_seed(5)
    m, n, k = 200, 304, 384
    a, b = ints(m, k).to(E4), ints(n, k).to(E4).t()
    pow2 = lambda *shape: torch.exp2(torch.randint(-3, 3, shape).float())  # noqa: E731
    fn = lambda acc: warploom.quantize(F.silu(acc))  # noqa: E731
    if recipe == "blockwise":
        sa, sb = pow2(k // 128, m).t(), pow2(k // 128, -(-n // 128))
        q, s = warploom.scaled_mm(a, b, sa, sb, out_dtype=BF16, epilogue=fn)
        a32, b32 = dequantized(a, b, sa, sb)
        y = a32.double() @ b32.double()
    else:
        sa, sb, bias = pow2(m, 1), pow2(1, n), ints(n).to(BF16)
        q, s = warploom.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=BF16, use_fast_accum=recipe == "rowwise_fast",
                                  epilogue=fn)
        y = a.double() @ b.double() * sa.double() * sb.double() + bias.double()
    rq, rs = warploom.quantize(F.silu(y.float()))
    assert torch.equal(s, rs) and same_bytes(q, rq)


def test_zero_and_nan_groups_follow_the_plain_convention() -> None:
    """An all-zero group gets s = 1 and zero data; a NaN in a group makes its s and q NaN, only in that row's
    group (the amax is NaN-propagating in the kernel too, and a group does not leak into its neighbour)."""
    m, n, k = 64, 256, 64
    a, b = torch.zeros(m, k), torch.zeros(k, n)
    a[:, 0] = 1.0
    b[0, 128:] = torch.arange(1, 129, dtype=torch.float32)  # group 1 of every row nonzero, group 0 zero
    shift = torch.zeros(n)
    shift[200] = float("nan")  # row-independent: every row's group 1 gets a NaN
    a, b = a.to(BF16), b.to(BF16)
    q, s = warploom.matmul(a, b, epilogue=lambda acc, shift: warploom.quantize(acc + shift), shift=shift)
    rq, rs = warploom.quantize(a.float() @ b.float() + shift)
    assert torch.equal(s[:, 0], torch.ones(m)) and bool(s[:, 1].isnan().all())
    assert torch.equal(s.nan_to_num(), rs.nan_to_num())
    assert same_bytes(q, rq)
    assert not q[:, :128].float().any()


def test_random_inputs_by_a_scale_free_metric() -> None:
    """bf16 normal inputs: sums differ from the fp64 reference in the last fp32 bits, so q may round the other way
    at a tie. Each group's dequantized q * s must lie within half an e4m3 step (2^-4 of its amax) of the reference,
    and s within a few ulps of the plain function's."""
    torch.manual_seed(3)
    m, n, k = 150, 336, 512  # (N a multiple of 16: the fp8 output's rows are TMA's 16-byte multiples)
    a, b, shift = torch.randn(m, k).to(BF16), torch.randn(k, n).to(BF16), torch.randn(n)
    q, s = warploom.matmul(a, b, epilogue=lambda acc, shift: warploom.quantize(F.gelu(acc + shift)), shift=shift)
    y = F.gelu(a.double() @ b.double() + shift.double()).float()
    _, rs = warploom.quantize(y)
    torch.testing.assert_close(s, rs, rtol=1e-5, atol=0)
    deq = q.float() * s.repeat_interleave(128, dim=1)[:, :n]
    amax = rs.repeat_interleave(128, dim=1)[:, :n] * 448.0
    assert bool(((deq - y).abs() <= amax * 2.0**-4 + 1e-6).all())


def _amax_over_64(m: ir.Module) -> ir.Module:
    """The planted bug: each block folds and at once divides by its own amax, so block 0 of a group sees 64 of the
    group's 128 columns (fold 0, apply 0, ..., fold 1, apply 1, ... instead of both folds first)."""
    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        folds = [s for s in body if isinstance(s, ir.FoldAmax)]
        rest = [s for s in body if not isinstance(s, ir.FoldAmax)]
        out: list[ir.Stmt] = []
        for s in rest:
            if isinstance(s, ir.ApplyEpilogue):
                out += [f for f in folds if (f.acc, f.part) == (s.acc, s.part)]
            out.append(s)
        return tuple(out)

    return in_tiles(m, tile)


def test_planted_amax_over_64_columns_is_caught() -> None:
    torch.manual_seed(4)
    m, n, k = 128, 256, 64
    a, b = ints(m, k).to(BF16), ints(k, n).to(BF16)
    b[:, 64:128] = (b[:, 64:128].float() * 16).to(BF16)  # the group's second half holds its amax
    kern = kernel(a, b, lambda acc: warploom.quantize(acc), 2)
    good = sim.simulate(kern.module, a, b, operands={}, record=False)
    assert good.ok, good.findings
    bad = sim.simulate(_amax_over_64(kern.module), a, b, operands={}, record=False)
    assert {f.kind for f in bad.findings} == {FindingKind.AMAX_INCOMPLETE}
    assert "holds 64 of the group's 128 columns" in str(bad.findings[0])
    rq, rs = warploom.quantize(a.float() @ b.float())
    assert torch.equal(good.outputs[1], rs) and same_bytes(good.outputs[0], rq)
    assert not same_bytes(bad.outputs[0], rq)  # and the numerics show it: block 0 divided by a smaller scale
