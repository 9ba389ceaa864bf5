"""The one-GEMM gate/up form on the CPU simulator: ``matmul(x, interleave_gate_up(w1, w3).T, epilogue=lambda acc:
silu_mul_interleaved(acc, block=B))`` against ``F.silu(x @ w1.T) * (x @ w3.T)`` in fp32.

Every kernel is planned (rule 28 pins BN = 2B), simulated into NaN-poisoned (M, I') outputs (the coverage check and
no NaN left say every element was written once), on ragged M and I not a multiple of B (the helper zero-pads the
last pair, whose padded result columns must be exactly 0). fp8 rowwise scaled_mm takes scale_b interleaved like the
weight; the M-grouped form stores each expert's rows only. Two planted bugs are caught: the pair's halves swapped
(silu of the up columns times the gate columns), by the verifier and by the numbers, and the up block's scale_b never
loaded, by the verifier and the simulator (OPERAND_NOT_LOADED).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from fused_cases import in_tiles  # (pytest puts this folder on sys.path)

import warploom
from warploom import H100_SXM, sim
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import Kernel
from warploom.sim.findings import FindingKind

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


def simulated(k: Kernel, a: torch.Tensor, b: torch.Tensor, **ops: torch.Tensor) -> torch.Tensor:
    """The kernel's (M, N / 2) result, simulated into a NaN-poisoned output."""
    m, n = k.spec.m, k.spec.n
    out = torch.full((m, n // 2), float("nan")).to(k.spec.output_dtypes()[0].torch)
    res = sim.simulate(k.module, a, b, operands=ops, outs=(out,), record=False)
    assert res.ok, res.findings
    assert res.outputs[0] is out and not out.float().isnan().any()
    return out


def close(got: torch.Tensor, want: torch.Tensor, i: int) -> None:
    """got's first I columns are want to bf16's rounding; its padded ones exactly 0."""
    torch.testing.assert_close(got[:, :i].float(), want, rtol=2 ** -7, atol=1e-3 * want.abs().max().item())
    assert torch.equal(got[:, i:].float(), torch.zeros_like(got[:, i:].float()))


# (M, I, K, block): ragged M (77 of 128 rows; 9, a decode batch); I a multiple of the block (256 of 128), not (100 of
# 64: pairs 0 and 1, the second padded from 36 rows; 200 of 128), and one pair only (40 of 32)
SHAPES = [(77, 100, 64, 64), (300, 200, 128, 128), (9, 40, 96, 32), (130, 256, 64, 128)]


@pytest.mark.parametrize(("m", "i", "k", "block"), SHAPES)
def test_bf16_against_fp32_reference(m: int, i: int, k: int, block: int) -> None:
    torch.manual_seed(m + i)
    x, w1, w3 = torch.randn(m, k).to(BF16), torch.randn(i, k).to(BF16), torch.randn(i, k).to(BF16)
    w = warploom.interleave_gate_up(w1, w3, block=block)
    kern = warploom.plan(x, w.T, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=block))
    assert kern.plan.bn == 2 * block and kern.spec.output_shapes() == ((m, w.shape[0] // 2),)
    want = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    close(simulated(kern, x, w.T), want, i)


def test_matmul_api_and_the_helper_agree() -> None:
    """warploom.matmul on CPU tensors (the simulator) equals the unfused GEMM followed by silu_mul_interleaved."""
    torch.manual_seed(1)
    x, w1, w3 = torch.randn(50, 64).to(BF16), torch.randn(70, 64).to(BF16), torch.randn(70, 64).to(BF16)
    w = warploom.interleave_gate_up(w1, w3, block=64)
    y = warploom.matmul(x, w.T, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))
    h = x.float() @ w.float().T
    assert y.shape == (50, 128) and y.dtype == BF16  # (I = 70 padded to 128)
    want = warploom.silu_mul_interleaved(h, block=64)
    torch.testing.assert_close(y.float(), want, rtol=2 ** -7, atol=1e-3 * want.abs().max().item())


def test_per_row_operand_on_the_half_width_result() -> None:
    """A column operand (per row: the same on both halves) multiplies the result."""
    torch.manual_seed(2)
    x, w1, w3, s = torch.randn(90, 64).to(BF16), torch.randn(128, 64).to(BF16), torch.randn(128, 64).to(BF16), \
        torch.rand(90, 1) + 0.5
    w = warploom.interleave_gate_up(w1, w3, block=64)
    kern = warploom.plan(x, w.T, epilogue=lambda acc, s: warploom.silu_mul_interleaved(acc, block=64) * s, s=s)
    want = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T) * s
    close(simulated(kern, x, w.T, s=s), want, 128)


@pytest.mark.parametrize(("block", "fast"), [(64, True), (64, False), (128, True)])
def test_fp8_rowwise_scale_b_interleaved(block: int, fast: bool) -> None:
    """scaled_mm fp8 rowwise: scale_b is per column of the interleaved weight (interleave_gate_up(s1, s3, dim=-1)),
    applied on each side before the halves pair; promoted accumulation at block 64 (one 128-wide accumulator)."""
    torch.manual_seed(block)
    m, i, k = 77, 200, 256
    x, w1, w3 = torch.randn(m, k).to(E4), torch.randn(i, k).to(E4), torch.randn(i, k).to(E4)
    sa, s1, s3 = torch.rand(m, 1) + 0.5, torch.rand(i) + 0.5, torch.rand(i) + 0.5
    w = warploom.interleave_gate_up(w1, w3, block=block)
    sb = warploom.interleave_gate_up(s1, s3, block=block, dim=-1)[None]  # (1, N)
    fn = lambda acc: warploom.silu_mul_interleaved(acc, block=block)  # noqa: E731
    kern = warploom.plan(x, w.T, sa, sb, out_dtype=BF16, use_fast_accum=fast, epilogue=fn)
    assert kern.plan.bn == 2 * block
    xs = x.float() * sa
    want = F.silu(xs @ (w1.float() * s1[:, None]).T) * (xs @ (w3.float() * s3[:, None]).T)
    close(simulated(kern, x, w.T, scale_a=sa, scale_b=sb), want, i)


def swapped_halves(m: ir.Module) -> ir.Module:
    """The planted bug: each pair's gate and up blocks trade places (silu(up) * gate)."""
    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(dataclasses.replace(s, part=s.up, up=s.part) if isinstance(s, ir.ApplyEpilogue) else s
                     for s in body)
    return in_tiles(m, tile)


def test_planted_swapped_halves_are_caught() -> None:
    torch.manual_seed(3)
    x, w1, w3 = torch.randn(77, 64).to(BF16), torch.randn(128, 64).to(BF16), torch.randn(128, 64).to(BF16)
    w = warploom.interleave_gate_up(w1, w3, block=64)
    kern = warploom.plan(x, w.T, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))
    bad = swapped_halves(kern.module)
    assert any("up block" in p for p in verify.problems(bad, H100_SXM))
    out = torch.full((77, 128), float("nan")).to(BF16)
    sim.simulate(bad, x, w.T, outs=(out,), record=False)
    want = F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T)
    assert not torch.allclose(out.float(), want, rtol=2 ** -7, atol=1e-3 * want.abs().max().item())


def grouped_reference(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, ends: list[int],
                      sa: torch.Tensor | None = None, s1: torch.Tensor | None = None,
                      s3: torch.Tensor | None = None) -> torch.Tensor:
    """Each expert's rows through its own gate and up weights (scaled per row and per column where given)."""
    out, start = [], 0
    for g, end in enumerate(ends):
        xs = x[start:end].float() * (1 if sa is None else sa[start:end, None])
        gw = w1[g].float() * (1 if s1 is None else s1[g][:, None])
        uw = w3[g].float() * (1 if s3 is None else s3[g][:, None])
        out.append(F.silu(xs @ gw.T) * (xs @ uw.T))
        start = end
    return torch.cat(out)


def test_grouped_bf16_clipped_per_expert() -> None:
    """M-grouped: 3 experts, one empty, a tile crossing an expert's end (masked half-width stores)."""
    torch.manual_seed(4)
    ends, i, k = [50, 50, 170], 100, 64
    x, w1, w3 = torch.randn(170, k).to(BF16), torch.randn(3, i, k).to(BF16), torch.randn(3, i, k).to(BF16)
    w = warploom.interleave_gate_up(w1, w3, block=64)
    y = warploom.grouped_mm(x, w.transpose(-2, -1), torch.tensor(ends, dtype=torch.int32),
                            epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))
    assert y.shape == (170, 128)
    close(y, grouped_reference(x, w1, w3, ends), i)


def test_grouped_fp8_rowwise_scale_b_per_expert_interleaved() -> None:
    torch.manual_seed(5)
    ends, i, k = [70, 200, 260], 128, 128
    x, w1, w3 = torch.randn(260, k).to(E4), torch.randn(3, i, k).to(E4), torch.randn(3, i, k).to(E4)
    sa, s1, s3 = torch.rand(260) + 0.5, torch.rand(3, i) + 0.5, torch.rand(3, i) + 0.5
    w = warploom.interleave_gate_up(w1, w3, block=64)
    sb = warploom.interleave_gate_up(s1, s3, block=64, dim=-1)  # (experts, N)
    y = warploom.scaled_grouped_mm(x, w.transpose(-2, -1), sa, sb, torch.tensor(ends, dtype=torch.int32),
                                   use_fast_accum=True,
                                   epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))
    close(y, grouped_reference(x, w1, w3, ends, sa, s1, s3), i)


def test_grouped_k_zero_is_the_epilogue_of_zero_per_expert() -> None:
    """K = 0 launches nothing: the (M, N / 2) result is the graph at a zero accumulator, each expert's rows with its
    own per-expert operand."""
    fn = lambda acc, ew: warploom.silu_mul_interleaved(acc, block=64) + ew  # noqa: E731
    y = warploom.grouped_mm(torch.zeros(20, 0).to(BF16), torch.zeros(2, 0, 128).to(BF16),
                            torch.tensor([5, 20], dtype=torch.int32), epilogue=fn, ew=torch.tensor([1.0, 2.0]))
    assert y.shape == (20, 64)
    assert torch.equal(y.float(), torch.cat([torch.ones(5, 64), torch.full((15, 64), 2.0)]))


def test_planted_missing_up_block_scale_load_is_caught() -> None:
    """fp8 rowwise: scale_b loaded for the gate block only (the up block's per-column scales missing)."""
    torch.manual_seed(6)
    x, w = torch.randn(64, 128).to(E4), torch.randn(256, 128).to(E4)
    sa, sb = torch.rand(64, 1) + 0.5, torch.rand(1, 256) + 0.5
    kern = warploom.plan(x, w.T, sa, sb, out_dtype=BF16, use_fast_accum=True,
                         epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))

    def tile(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        ups = {s.up for s in body if isinstance(s, ir.ApplyEpilogue)}
        return tuple(s for s in body if not (isinstance(s, ir.LoadOperand) and s.part in ups))
    bad = in_tiles(kern.module, tile)
    assert any("for its up block" in p for p in verify.problems(bad, H100_SXM))
    res = sim.simulate(bad, x, w.T, operands={"scale_a": sa, "scale_b": sb}, record=False)
    assert any(f.kind is FindingKind.OPERAND_NOT_LOADED and "pairs its up block" in f.message for f in res.findings)


def test_fp8_blockwise_with_the_interleaved_weights_own_scales() -> None:
    """Blockwise 1x128 x 128x128 at block 64 (one promoted 128-wide accumulator): scale_b is the interleaved weight's
    own (K/128, N/128) blocks, each covering one gate block and its up block (quantize after interleaving)."""
    torch.manual_seed(8)
    m, k, n = 100, 256, 384
    x, w = torch.randn(m, k).to(E4), torch.randn(n, k).to(E4)
    sa, sb = torch.rand(k // 128, m).t() + 0.5, torch.rand(k // 128, n // 128) + 0.5  # (sa: M-major, as torch's)
    y = warploom.scaled_mm(x, w.T, sa, sb, out_dtype=BF16,
                           epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=64))
    xs = (x.float().reshape(m, k // 128, 128) * sa[:, :, None]).reshape(m, k)
    ws = (w.float().reshape(n // 128, 128, k // 128, 128) * sb.t()[:, None, :, None]).reshape(n, k)
    want = warploom.silu_mul_interleaved(xs @ ws.T, block=64)
    close(y, want, n // 2)
