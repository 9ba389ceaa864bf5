"""The fused epilogues every target's simulator tier runs: issue 4's (fp8 rowwise + bias, erf GELU, a dense residual)
and a two-output bf16 one with a column operand. Each target's test gives the module builder (its plan, shrunk)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from warploom.ir import nodes as ir
from warploom.sim import simulate

# (fn, a, b, *scales, **plan kwargs) -> the module to simulate
ModuleOf = Callable[..., ir.Module]


def ints(*shape: int, lo: int = -4, hi: int = 5) -> torch.Tensor:
    """Small integers as fp32: every sum of their products is exact in any order."""
    return torch.randint(lo, hi, shape).to(torch.float32)


def same_bytes(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.dtype == y.dtype and torch.equal(x.view(torch.uint8), y.view(torch.uint8))


def rowwise_within_fp8_rounding(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    """A fused rowwise (q, s) of bf16 normal inputs against the plain quantize of the fp64 value `y`: sums differ in
    the last fp32 bits, so q may round the other way at a tie. Each row's dequantized q * s must lie within half an
    e4m3 step (2^-4 of its amax) of `y`, and s within a few ulps of the plain function's."""
    from warploom.quantization import quantize

    _, rs = quantize(y, recipe="rowwise")
    torch.testing.assert_close(s, rs, rtol=1e-5, atol=0)
    assert bool(((q.float() * s - y).abs() <= rs * 448.0 * 2.0**-4 + 1e-6).all())


def in_tiles(m: ir.Module, tile: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]) -> ir.Module:
    """`m` with `tile` applied to the body of every partition's tiles loop (the planted bugs of the quantization
    tests: statements moved within a tile)."""
    def part(p: ir.Partition) -> ir.Partition:
        body = tuple(dataclasses.replace(s, body=tile(s.body))
                     if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES else s for s in p.body)
        return dataclasses.replace(p, body=body)

    return dataclasses.replace(m, partitions=tuple(part(p) for p in m.partitions))


def _err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float(1 - 2 * (x * ref).sum() / (x * x + ref * ref).sum())


def check_fused_cases(module_of: ModuleOf) -> tuple[ir.Module, ir.Module]:
    """Simulate both epilogues clean and within 1e-5 of torch (every output written once); returns their modules."""
    g = torch.Generator().manual_seed(5)
    m, n, k = 300, 144, 320
    a = (torch.randn(m, k, generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=g) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    res = torch.randn(m, n, generator=g).to(torch.bfloat16)

    def gelu_res(acc: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc) + residual

    mod = module_of(gelu_res, a, w.t(), sa, sb, bias=bias, use_fast_accum=True, residual=res)
    r = simulate(mod, a, w.t(), operands={"scale_a": sa, "scale_b": sb, "bias": bias, "residual": res})
    assert r.ok, r.report.summary()
    assert _err(r.output, gelu_res((a.float() @ w.float().t()) * sa * sb + bias.float(), res.float())) < 1e-5

    a16, w16 = torch.randn(m, k, generator=g).to(torch.bfloat16), torch.randn(n, k, generator=g).to(torch.bfloat16)
    col = torch.randn(m, 1, generator=g)

    def two(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.silu(acc + bias) * col, (acc + bias).float()

    mod2 = module_of(two, a16, w16.t(), bias=bias, col=col)
    r2 = simulate(mod2, a16, w16.t(), operands={"bias": bias, "col": col})
    assert r2.ok, r2.report.summary()
    outs: Any = two(a16.float() @ w16.float().t(), bias.float(), col)
    for got, want in zip(r2.outputs, outs, strict=True):
        assert not got.isnan().any() and _err(got, want) < 1e-5
    return mod, mod2
