"""sm_100a MX fp8 (seed 001) in the simulator: block-scaled tcgen05 MMA numerics against a dequantized fp32
reference on odd shapes, and four planted bugs the simulator catches (the module is built as planned, then one
thing is changed, as tests/sim/test_blackwell_sim.py does for plain sm_100a modules)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleLayout, ScaleRecipe
from warploom.blocked import to_blocked
from warploom.device import B200
from warploom.errors import VerificationError
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.sim import explore, simulate
from warploom.sim.findings import FindingKind
from warploom.targets import verify as target_verify

E4, E5 = DType.E4M3, DType.E5M2


def _module(m: int, n: int, k: int, bn: int = 128, a: DType = E4, b: DType = E4, stages: int = 3) -> ir.Module:
    spec = GemmSpec(m, n, k, a, b, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED,
                    scale_layout=ScaleLayout.BLOCKED)
    return build(spec, B200, plan_schedule(spec, B200, bn=bn, stages=stages)).module


def _inputs(m: int, n: int, k: int, a: DType = E4, b: DType = E4, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(a.torch)
    w = torch.randn(n, k, generator=g).to(b.torch)
    sa = torch.randint(119, 136, (m, k // 32), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.randint(119, 136, (n, k // 32), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    return x, w.t(), sa, sb


def _kinds(mod: ir.Module, m: int, n: int, k: int, seeds: int = 4) -> set[FindingKind]:
    x, w, sa, sb = _inputs(m, n, k)
    return {f.kind for s in range(seeds) for f in simulate(mod, x, w, to_blocked(sa), to_blocked(sb),
                                                           seed=s).findings}


@pytest.mark.parametrize("m,n,k,bn,a,b", [
    (300, 264, 544, 128, E4, E4),   # ragged M, N, and a last k-block of one 32-deep slice
    (129, 520, 1056, 256, E5, E4),  # one accumulator (128x256), e5m2 x e4m3
])
def test_block_scaled_numerics_match_dequantized_reference(m: int, n: int, k: int, bn: int, a: DType,
                                                           b: DType) -> None:
    mod = _module(m, n, k, bn, a, b)
    x, w, sa, sb = _inputs(m, n, k, a, b)
    res = simulate(mod, x, w, to_blocked(sa), to_blocked(sb), seed=3)
    assert not res.findings, res.findings
    da, db = dequantized(x.float(), w.float(), sa, sb)
    ref = (da @ db).to(torch.bfloat16).float()
    torch.testing.assert_close(res.output.float(), ref, rtol=1e-2, atol=1e-2)


def test_wrong_scales_are_seen_by_the_numerics() -> None:
    """The comparison above can fail: swapping the two scale tensors' roles changes the result."""
    m, n, k = 256, 256, 256
    mod = _module(m, n, k)
    x, w, sa, sb = _inputs(m, n, k)
    res = simulate(mod, x, w, to_blocked(sb), to_blocked(sa), seed=0)
    da, db = dequantized(x.float(), w.float(), sa, sb)
    assert not torch.allclose(res.output.float(), (da @ db).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)


def _edit(mod: ir.Module, role: ir.Role, fn: object) -> ir.Module:
    def walk(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            out += [replace(s, body=walk(s.body))] if isinstance(s, ir.Loop) else fn(s)  # type: ignore[operator]
        return tuple(out)
    return replace(mod, partitions=tuple(replace(p, body=walk(p.body)) if p.role is role else p
                                         for p in mod.partitions))


M, N, K = 256, 256, 512  # two tiles of 128x128 (one per CTA row), four k-blocks, three stages


def test_planted_missing_copy() -> None:
    mod = _edit(_module(M, N, K), ir.Role.MMA,
                lambda s: [] if isinstance(s, ir.ScaleCopy) and s.dst == "sa_tm" else [s])
    assert FindingKind.SCALE_COPY_MISSING in _kinds(mod, M, N, K)
    with pytest.raises(VerificationError, match="no tcgen05_copy into it"):
        target_verify(mod, "test", B200)


def test_planted_copy_from_another_thread_overwrites_the_buffer() -> None:
    """The producer copies each stage's scales to tensor memory itself, once its own wait on the stage's ready
    barrier saw them land: its tcgen05_copy is not ordered with the MMA warp's MMAs, so the next stage's copy lands
    while the MMA of this one still reads the buffer."""
    mod = _module(M, N, K)
    mod = _edit(mod, ir.Role.MMA, lambda s: [] if isinstance(s, ir.ScaleCopy) else [s])
    p = ir.Slot("p")
    mod = _edit(mod, ir.Role.PRODUCER, lambda s: [s, ir.Wait("ready", p, ir.Parity("p")),
                                                  ir.ScaleCopy("sa_ring", p, "sa_tm"),
                                                  ir.ScaleCopy("sb_ring", p, "sb_tm")]
                if isinstance(s, ir.TmaLoad) and s.ring == "sb_ring" else [s])
    assert FindingKind.SCALE_OVERWRITTEN in _kinds(mod, M, N, K, seeds=8)
    with pytest.raises(VerificationError, match="must be one partition's"):
        target_verify(mod, "test", B200)


def test_planted_expect_tx_without_the_scales() -> None:
    mod = _module(M, N, K)
    ab = mod.ring("a_ring").slot_bytes + mod.ring("b_ring").slot_bytes
    mod = _edit(mod, ir.Role.PRODUCER, lambda s: [replace(s, nbytes=ab)] if isinstance(s, ir.ArriveExpectTx) else [s])
    assert FindingKind.TX_MISMATCH in _kinds(mod, M, N, K)
    with pytest.raises(VerificationError, match="announces 32768 bytes"):
        target_verify(mod, "test", B200)


def test_planted_tmem_overlap_of_scales_and_accumulators() -> None:
    mod = _module(M, N, K)
    mod = replace(mod, tmem_scales=tuple(replace(b, col0=b.col0 - 256) for b in mod.tmem_scales))
    assert FindingKind.TMEM_OVERLAP in _kinds(mod, M, N, K)
    with pytest.raises(VerificationError, match="overlaps"):
        target_verify(mod, "test", B200)


def test_planned_modules_are_clean() -> None:
    for bn in (128, 256):
        assert not _kinds(_module(M, N, K, bn), M, N, K)


def _fp4(rows: int, k: int, g: torch.Generator) -> torch.Tensor:
    """Random MX fp4 data (every e2m1 code), (rows, K/2) packed along K."""
    return torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)


@pytest.mark.parametrize("m,n,k,bn", [(300, 264, 544, 128), (129, 520, 1056, 256)])
def test_mx_fp4_numerics_match_dequantized_reference(m: int, n: int, k: int, bn: int) -> None:
    """MX fp4 (kind::mxf4): the same stages and copies, the operands two values a byte."""
    spec = GemmSpec(m, n, k, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                    Accumulation.PROMOTED, scale_layout=ScaleLayout.BLOCKED)
    mod = build(spec, B200, plan_schedule(spec, B200, bn=bn, stages=3)).module
    g = torch.Generator().manual_seed(1)
    x, w = _fp4(m, k, g), _fp4(n, k, g)
    _, _, sa, sb = _inputs(m, n, k)
    res = simulate(mod, x, w.t(), to_blocked(sa), to_blocked(sb), seed=2)
    assert not res.findings, res.findings
    da, db = dequantized(x, w.t(), sa, sb)
    torch.testing.assert_close(res.output.float(), (da @ db).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
    # (what the comparison sees: the packed bytes read as values of K, not as bytes)
    assert not torch.allclose(res.output.float(), (da[:, : k // 2] @ db[: k // 2]).float(), rtol=1e-2, atol=1e-2)


def _fp4_module(m: int, n: int, k: int, stages: int = 3, grid: int | None = None) -> ir.Module:
    spec = GemmSpec(m, n, k, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX,
                    Accumulation.PROMOTED, scale_layout=ScaleLayout.BLOCKED)
    plan = plan_schedule(spec, B200, bn=128, stages=stages)
    return build(spec, B200, plan if grid is None else replace(plan, grid=grid)).module


def test_planted_fp4_expect_tx_of_a_byte_a_value() -> None:
    """A stage of MX fp4 brings (128 + 128) rows of 64 bytes and 2 x 128 x 4 scale bytes; announcing a byte per fp4
    value (as if unpacked) leaves the phase waiting for bytes that never come."""
    mod = _fp4_module(M, N, K)
    assert mod.ring("a_ring").slot_bytes == 128 * 64
    unpacked = 2 * 128 * 128 + 2 * 128 * 4
    mod = _edit(mod, ir.Role.PRODUCER,
                lambda s: [replace(s, nbytes=unpacked)] if isinstance(s, ir.ArriveExpectTx) else [s])
    g = torch.Generator().manual_seed(0)
    _, _, sa, sb = _inputs(M, N, K)
    res = simulate(mod, _fp4(M, K, g), _fp4(N, K, g).t(), to_blocked(sa), to_blocked(sb))
    assert FindingKind.TX_MISMATCH in {f.kind for f in res.findings}
    with pytest.raises(VerificationError, match=f"announces {unpacked} bytes.*bring 17408"):
        target_verify(mod, "test", B200)


def test_fp4_explores_clean() -> None:
    """Every schedule of one CTA running two MX fp4 tiles of two k-blocks through two stages: no finding."""
    r = explore(_fp4_module(256, 128, 256, stages=2, grid=1), 256, 128, 256, max_states=40_000)
    assert not r.findings and not r.bound_hit
