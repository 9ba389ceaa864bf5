"""Fused epilogues on the K-grouped weight gradient (Grouping.K_OFFSETS: dW[g] = a[:, K range of g] @ b[K range of
g], C (G, M, N)), on the simulator against fp64 per-group references:

- bf16 at three tiles, random K offsets with an empty group and ends that are not tile (or 8-column) multiples:
  accumulating into an fp32 (G, M, N) gradient with a per-group scalar, a per-(group, row) and a per-(group, column)
  vector and a shared (N,) one, fp32 out; and the bf16 forms (G, M, 1), (G, 1, N), (G, 1, 1), bf16 out;
- fp8 blockwise (offsets on the 128 grid, an empty group, a partial last block): ``acc`` the promoted sum;
- fp8 rowwise (torch's (G * M,) and (G * N,) scales, fast and promoted, ends anywhere), unfused and fused: ``acc``
  the scaled product, the scales the graph's operands (scale_b the tile's group's);
- an empty group's block is the epilogue of 0 (torch's zero product, then the function), and total_K = 0 runs no
  kernel but gives the same;
- three planted bugs the numerics catch: the epilogue reading the next group's per-group operands (and so rowwise
  scale_b), and reading another group's rows of the dense and per-row operands.

Modules are made by the API's own path (`grouped._fused` on a checked call) and simulated into a NaN-poisoned
output; the API tests go through `warploom.grouped_mm` / `scaled_grouped_mm` on CPU tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.checks_grouped import grouped_call
from warploom.grouped import _fused
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import program
from warploom.sim.grouped import simulate_grouped

G, M, N, K = 4, 96, 160, 600  # (M, N: ragged 64- and 128-wide tiles; K: ends anywhere in it)
BLOCK, K8 = 128, 720  # (fp8: K rows of 16 bytes, a partial last 128-block)


def _k_offsets(seed: int, total_k: int, grid: int = 1) -> torch.Tensor:
    """Random cumulative K ends (multiples of `grid`), the last at total_K, group 1 empty (its end equals group 0's)."""
    g = torch.Generator().manual_seed(seed)
    cuts = sorted((torch.randint(1, total_k // grid, (G - 2,), generator=g) * grid).tolist())
    return torch.tensor([cuts[0], cuts[0], *cuts[1:], total_k], dtype=torch.int32)


def _ranges(offs: torch.Tensor) -> list[tuple[int, int]]:
    ends = [0, *offs.tolist()]
    return list(zip(ends, ends[1:], strict=False))


def _wgrad(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """a (M, total_K) bf16 (dy^T), b (total_K, N) column-major (torch's)."""
    torch.manual_seed(seed)
    return torch.randn(M, K).bfloat16(), torch.randn(N, K).bfloat16().t()


def _accumulate(acc, grad, lr, row, col, shared):  # noqa: ANN001, ANN202
    """A weight-gradient update: the old gradient plus the product scaled per group, per (group, row) and per
    (group, column), and a shared per-column term."""
    return grad + acc * lr * row * col + shared


def _operands(seed: int, bf16: bool) -> dict[str, torch.Tensor]:
    """`_accumulate`'s operands against the (G, M, N) result: fp32 (G, M, N), (G,), (G, M), (G, N) and bf16 (N,); or
    the 3-D and bf16 forms. Per-group values far apart, so a neighbour group's show."""
    torch.manual_seed(300 + seed)
    lr = torch.arange(1, G + 1, dtype=torch.float32) * 0.75
    ops = {"grad": torch.randn(G, M, N), "lr": lr, "row": torch.rand(G, M) + 0.5,
           "col": torch.randn(G, N) + torch.arange(G)[:, None] * 2.0, "shared": torch.randn(N).bfloat16()}
    if bf16:
        ops.update(grad=ops["grad"].bfloat16(), lr=lr.reshape(G, 1, 1), row=ops["row"][..., None].bfloat16(),
                   col=ops["col"][:, None].bfloat16())
    return ops


def _reference(products: list[torch.Tensor], ops: dict[str, torch.Tensor]) -> torch.Tensor:
    """fp64 `_accumulate` on each group's fp64 product (M, N), zeros for an empty group, (G, M, N)."""
    d = {k: v.double() for k, v in ops.items()}
    grad, lr = d["grad"], d["lr"].reshape(G, 1, 1)
    row, col = d["row"].reshape(G, M, 1), d["col"].reshape(G, 1, N)
    return grad + torch.stack(products) * lr * row * col + d["shared"]


def _sim(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, ops: dict[str, Any], fn: Callable[..., Any],
         bm: int, bn: int, *, out_dtype: torch.dtype | None = None, scale_a: Any = None, scale_b: Any = None,
         fast: bool = False, seed: int = 0) -> torch.Tensor:
    """The API's checks and fusion (`grouped._fused`, rowwise scales as scaled_grouped_mm passes them: a (G * M, 1)
    column and a (G, 1, N) row per group), the kernel planned at bm x bn, simulated into a NaN-poisoned (G * M, N)
    output, returned (G, M, N)."""
    call = grouped_call(a, b, offs, None, out_dtype, scale_a, scale_b, fast)
    if scale_a is not None and scale_a.dim() == 1:
        call, sa, sb, picked = _fused(call, fn, ops, scale_a=scale_a[:, None], scale_b=scale_b.reshape(G, 1, N))
    elif scale_a is not None:
        call, sa, sb, picked = _fused(call, fn, ops, scale_a=scale_a, scale_b=scale_b)
    else:
        call, sa, sb, picked = _fused(call, fn, ops)
    mod = build(call.spec, H100_SXM, plan_schedule(call.spec, H100_SXM, bm=bm, bn=bn)).module
    out = torch.full((G * M, N), float("nan"), dtype=call.spec.output_dtypes()[0].torch)
    simulate_grouped(mod, call.a, call.b, call.bounds, sa, sb, out=out, operands=picked, seed=seed
                     ).raise_for_findings()
    return out.reshape(G, M, N)


def _err(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert not got.isnan().any()  # (poisoned: every element of every group stored)
    return ((got.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 128), (128, 256)])
def test_bf16_accumulate_fp32(seed: int, bm: int, bn: int) -> None:
    """fp32 gradient, (G,) lr, (G, M) row, (G, N) column, shared (N,): fp32 out, within fp32 rounding of fp64 (the
    bf16 inputs are exact in both), every group's block, the empty group's ``grad + 0 + shared``."""
    offs = _k_offsets(seed, K)
    a, b = _wgrad(seed)
    ops = _operands(seed, bf16=False)
    got = _sim(a, b, offs, ops, _accumulate, bm, bn, out_dtype=torch.float32, seed=seed)
    assert got.dtype == torch.float32
    ref = _reference([a[:, s:e].double() @ b[s:e].double() for s, e in _ranges(offs)], ops)
    assert _err(got, ref) < 1e-5
    assert torch.allclose(got[1].double(), ref[1], atol=1e-5)  # (the empty group: the function of a zero product)
    for g in range(G):
        assert _err(got[g], ref[g]) < 1e-5


def test_bf16_operands_3d_forms_bf16_out() -> None:
    """(G, M, N) bf16 gradient, (G, 1, 1), (G, M, 1), (G, 1, N): bf16 out (the graph's output follows out_dtype)."""
    offs = torch.tensor([0, 250, 250, K], dtype=torch.int32)  # (group 0 and 2 empty, 250 not a multiple of 8)
    a, b = _wgrad(7)
    ops = _operands(7, bf16=True)
    got = _sim(a, b, offs, ops, _accumulate, 128, 128)
    assert got.dtype == torch.bfloat16
    ref = _reference([a[:, s:e].double() @ b[s:e].double() for s, e in _ranges(offs)], ops)
    assert _err(got, ref) < 5e-3  # (bf16 output: 2^-9 relative rounding)


def _fp8(seed: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (M, total_K), b (total_K, N) column-major, scale_a (M, KB), scale_b (KB, NB)."""
    torch.manual_seed(seed)
    kb, nb = -(-K8 // BLOCK), -(-N // BLOCK)
    a = (torch.randn(M, K8) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(N, K8).to(torch.float8_e4m3fn).t()
    return a, b, torch.rand(M, kb) + 0.5, torch.rand(kb, nb) + 0.5


def _fp8_products(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, offs: torch.Tensor
                  ) -> list[torch.Tensor]:
    """Each group's fp64 dequantized product (a[:, k] * sa[:, k // 128] times b[k, n] * sb[k // 128, n // 128])."""
    a64 = a.double() * sa.double().repeat_interleave(BLOCK, dim=1)[:, :K8]
    b64 = b.double() * sb.double().repeat_interleave(BLOCK, dim=0)[:K8].repeat_interleave(BLOCK, dim=1)[:, :N]
    return [a64[:, s:e] @ b64[s:e] for s, e in _ranges(offs)]


@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 128)])
def test_fp8_blockwise_accumulate(bm: int, bn: int) -> None:
    """Blockwise fp8 (the 128 grid, an empty group, a partial last block at 720): the promoted sum goes into the
    same function, fp32 out by its ``.float()``."""
    offs = _k_offsets(3, K8, BLOCK)
    a, b, sa, sb = _fp8(3)
    ops = _operands(3, bf16=False)
    fn = lambda acc, grad, lr, row, col, shared: _accumulate(acc, grad, lr, row, col, shared).float()  # noqa: E731
    got = _sim(a, b, offs, ops, fn, bm, bn, scale_a=sa, scale_b=sb)
    assert got.dtype == torch.float32
    ref = _reference(_fp8_products(a, b, sa, sb, offs), ops)
    assert _err(got, ref) < 1e-5
    for g in range(G):
        assert _err(got[g], ref[g]) < 1e-5


def _fp8_rowwise(seed: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (M, total_K), b (total_K, N) column-major, torch's rowwise K-grouped scale_a (G * M,) and scale_b
    (G * N,), each group's far from its neighbours' (a neighbour's scale shows)."""
    torch.manual_seed(seed)
    a = (torch.randn(M, K8) * 2).to(torch.float8_e4m3fn)
    b = torch.randn(N, K8).to(torch.float8_e4m3fn).t()
    steps = torch.arange(1, G + 1, dtype=torch.float32)
    return a, b, ((torch.rand(G, M) + 0.5) * steps[:, None]).reshape(-1), ((torch.rand(G, N) + 0.5) / steps[:, None]
                                                                          ).reshape(-1)


def _rowwise_products(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, offs: torch.Tensor
                      ) -> list[torch.Tensor]:
    """Each group's fp64 product scaled by its own rows' and columns' scales."""
    sa64, sb64 = sa.double().reshape(G, M, 1), sb.double().reshape(G, 1, N)
    return [(a[:, s:e].double() @ b[s:e].double()) * sa64[g] * sb64[g] for g, (s, e) in enumerate(_ranges(offs))]


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 128), (128, 256)])
def test_fp8_rowwise(fast: bool, bm: int, bn: int) -> None:
    """Rowwise fp8 K-grouped (torch's (G * M,) and (G * N,) scales, ends not 16-column multiples, an empty group):
    the scaled product unfused, through the API, then fused into the update (fp32 out by ``.float()``), NaN-poisoned,
    against fp64."""
    offs = torch.tensor([100, 100, 333, K8], dtype=torch.int32)
    a, b, sa, sb = _fp8_rowwise(bm + bn)
    prods = _rowwise_products(a, b, sa, sb, offs)
    y = warploom.scaled_grouped_mm(a, b, sa, sb, offs=offs, use_fast_accum=fast)
    assert y.shape == (G, M, N) and y.dtype == torch.bfloat16
    assert _err(y, torch.stack(prods)) < 5e-3 and bool((y[1] == 0).all())
    ops = _operands(bm, bf16=False)
    fn = lambda acc, grad, lr, row, col, shared: _accumulate(acc, grad, lr, row, col, shared).float()  # noqa: E731
    got = _sim(a, b, offs, ops, fn, bm, bn, scale_a=sa, scale_b=sb, fast=fast)
    ref = _reference(prods, ops)
    assert got.dtype == torch.float32 and _err(got, ref) < 1e-5
    for g in range(G):
        assert _err(got[g], ref[g]) < 1e-5


def test_planted_bug_rowwise_scales_of_the_next_group_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rowwise scale_b is the graph's per-group (G, 1, N) row: read at group g + 1, every group's columns get a
    neighbour's scales, which the numerics catch (the product itself right)."""
    offs = torch.tensor([100, 100, 333, K8], dtype=torch.int32)
    a, b, sa, sb = _fp8_rowwise(9)
    ops = {"grad": torch.zeros(G, M, N)}
    ref = torch.stack(_rowwise_products(a, b, sa, sb, offs))
    fn = lambda acc, grad: (grad + acc).float()  # noqa: E731
    assert _err(_sim(a, b, offs, ops, fn, 128, 128, scale_a=sa, scale_b=sb), ref) < 1e-5
    real = program.ApplyI

    def next_group(*args, group: int = 0, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return real(*args, group=(group + 1) % G, **kwargs)

    monkeypatch.setattr(program, "ApplyI", next_group)
    assert _err(_sim(a, b, offs, ops, fn, 128, 128, scale_a=sa, scale_b=sb), ref) > 0.05


def test_through_the_api_against_torch() -> None:
    """`grouped_mm(a, b, offs, epilogue=lambda acc, grad: grad + acc, grad=grad)`, the framework's accumulation,
    against torch's per-group products plus grad in fp32; and `scaled_grouped_mm` with a per-group
    scale."""
    offs = torch.tensor([130, 130, 333, K], dtype=torch.int32)
    a, b = _wgrad(11)
    grad = torch.randn(G, M, N)
    y = warploom.grouped_mm(a, b, offs, out_dtype=torch.float32, epilogue=lambda acc, grad: grad + acc, grad=grad)
    want = torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in _ranges(offs)]) + grad
    assert y.shape == (G, M, N) and y.dtype == torch.float32
    assert torch.allclose(y, want, atol=1e-3, rtol=1e-4)
    assert torch.equal(y[1], grad[1])
    fa, fb, sa, sb = _fp8(12)
    offs8 = torch.tensor([128, 128, 384, K8], dtype=torch.int32)
    s = torch.rand(G) + 0.5
    y8 = warploom.scaled_grouped_mm(fa, fb, sa, sb, offs=offs8, epilogue=lambda acc, s: acc * s, s=s)
    ref8 = torch.stack(_fp8_products(fa, fb, sa, sb, offs8)) * s.double()[:, None, None]
    assert y8.dtype == torch.bfloat16 and _err(y8, ref8) < 5e-3
    assert bool((y8[1] == 0).all())


def test_zero_total_k_is_the_epilogue_of_zero() -> None:
    """total_K = 0: no kernel, every group empty: each block the function of a zero product with its group's
    operands (per-group ones read at their group)."""
    a, b = torch.empty(M, 0, dtype=torch.bfloat16), torch.empty(0, N, dtype=torch.bfloat16)
    offs = torch.zeros(G, dtype=torch.int32)
    ops = _operands(1, bf16=False)
    y = warploom.grouped_mm(a, b, offs, out_dtype=torch.float32, epilogue=_accumulate, **ops)
    ref = _reference([torch.zeros(M, N, dtype=torch.float64)] * G, ops)
    assert y.shape == (G, M, N) and torch.allclose(y.double(), ref, atol=1e-5)


def test_planted_bug_next_groups_operands_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilogue reads its per-group operands (lr, col) at group g + 1 (a kernel's ``lr_ptr + (grp + 1)``) while
    the product is right: no ordering or coverage finding, but the numerics catch it."""
    offs = torch.tensor([100, 100, 350, K], dtype=torch.int32)
    a, b = _wgrad(5)
    ops = _operands(5, bf16=False)
    ref = _reference([a[:, s:e].double() @ b[s:e].double() for s, e in _ranges(offs)], ops)
    assert _err(_sim(a, b, offs, ops, _accumulate, 128, 128, out_dtype=torch.float32), ref) < 1e-5
    real = program.ApplyI

    def next_group(*args, group: int = 0, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return real(*args, group=(group + 1) % G, **kwargs)

    monkeypatch.setattr(program, "ApplyI", next_group)
    assert _err(_sim(a, b, offs, ops, _accumulate, 128, 128, out_dtype=torch.float32), ref) > 0.05


def test_planted_bug_other_groups_rows_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epilogue reads the dense gradient and the per-row vector M rows off (another group's block of C's
    (G * M) rows, as a kernel indexing them by A's rows rather than C's would) while the product is right."""
    offs = torch.tensor([100, 100, 350, K], dtype=torch.int32)
    a, b = _wgrad(6)
    ops = _operands(6, bf16=False)
    ref = _reference([a[:, s:e].double() @ b[s:e].double() for s, e in _ranges(offs)], ops)
    real = program.ApplyI

    def other_rows(site, acc, cols, off_m, *rest, group: int = 0, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        return real(site, acc, cols, off_m + (M if group == 0 else -M), *rest, group=group, **kw)

    monkeypatch.setattr(program, "ApplyI", other_rows)
    assert _err(_sim(a, b, offs, ops, _accumulate, 128, 128, out_dtype=torch.float32), ref) > 0.05


def test_zero_total_k_of_a_sliced_column_major_b() -> None:
    """bf16 total_K = 0 with torch's column-major b sliced to no rows (strides (1, K)): no kernel, fn(0, operands)
    (it was refused as a b that is neither column-major nor contiguous: the K-major test needed rows)."""
    a, b = torch.empty(M, 0, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16).t()[:0]
    s = torch.rand(G, 1, N) + 0.5
    y = warploom.grouped_mm(a, b, torch.zeros(G, dtype=torch.int32), epilogue=lambda acc, s: acc * s + s, s=s)
    assert y.shape == (G, M, N) and torch.allclose(y.float(), s.expand(G, M, N).bfloat16().float())


@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
@pytest.mark.parametrize("sliced", [False, True])
def test_fp8_zero_total_k_is_the_epilogue_of_zero(recipe: str, sliced: bool) -> None:
    """fp8 total_K = 0 with torch's column-major b (an (N, 0) seen as .t(), or a column-major b sliced to no rows):
    no kernel, zeros unfused and fn(0, operands) fused, as bf16's (it was refused as a b that is not column-major:
    its K-major test needed rows)."""
    a = torch.empty(M, 0, dtype=torch.float8_e4m3fn)
    b = torch.empty(N, K8 if sliced else 0, dtype=torch.float8_e4m3fn).t()[:0]
    offs = torch.zeros(G, dtype=torch.int32)
    sa, sb = (torch.rand(G * M) + 0.5, torch.rand(G * N) + 0.5) if recipe == "rowwise" else \
        (torch.empty(M, 0), torch.empty(0, -(-N // BLOCK)))
    y = warploom.scaled_grouped_mm(a, b, sa, sb, offs=offs)
    assert y.shape == (G, M, N) and bool((y == 0).all())
    s = torch.rand(G, 1, N) + 0.5
    y = warploom.scaled_grouped_mm(a, b, sa, sb, offs=offs, epilogue=lambda acc, s: acc * s + s, s=s)
    assert y.shape == (G, M, N) and torch.allclose(y.float(), s.expand(G, M, N).bfloat16().float())
