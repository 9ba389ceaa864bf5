"""sm_100a seed 000 in the simulator: row-major MX scales (fp8, fp4, fp8 x fp4; NVFP4's in
test_scale_partition_nvfp4_sm100_sim.py) through a scale partition and two tensor-memory scale buffers
(passes/blackwell_scales.py). Numerics against a dequantized fp32 reference on odd shapes (and a narrow
tile over a wider N, which seed 001's tcgen05.cp path refuses), and planted bugs the simulator, the explorer and
the verifier catch: a buffer overwritten before its MMA completes, the partition signalling before its stores,
a flipped parity on the scale-buffer barrier, a buffer released by hand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import B200
from warploom.errors import VerificationError
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.passes.util import rewrite
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.sim import explore, simulate
from warploom.sim.findings import FindingKind
from warploom.targets import verify as target_verify

E4, E5, F4 = DType.E4M3, DType.E5M2, DType.E2M1


def _spec(m: int, n: int, k: int, a: DType = E4, b: DType = E4) -> GemmSpec:
    return GemmSpec(m, n, k, a, b, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED)


def _module(m: int, n: int, k: int, bn: int | None = None, a: DType = E4, b: DType = E4,
            stages: int = 3) -> ir.Module:
    spec = _spec(m, n, k, a, b)
    return build(spec, B200, plan_schedule(spec, B200, bn=bn, stages=stages)).module


def _data(rows: int, k: int, dt: DType, g: torch.Generator) -> torch.Tensor:
    if dt is F4:  # every e2m1 code, (rows, K/2) packed along K
        return torch.randint(0, 256, (rows, k // 2), generator=g, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    return torch.randn(rows, k, generator=g).to(dt.torch)


def _inputs(m: int, n: int, k: int, a: DType = E4, b: DType = E4, seed: int = 0,
            strided: bool = False) -> tuple[torch.Tensor, ...]:
    """Row-major e8m0 scales; `strided`: views with a row stride past K/32 and a column stride of 2 (any stride)."""
    g = torch.Generator().manual_seed(seed)
    x, w = _data(m, k, a, g), _data(n, k, b, g)

    def scales(rows: int) -> torch.Tensor:
        s = torch.randint(119, 136, (rows, k // 32 * (2 if strided else 1) + (3 if strided else 0)), generator=g,
                          dtype=torch.uint8).view(torch.float8_e8m0fnu)
        return s[:, :k // 16:2] if strided else s

    return x, w.t(), scales(m), scales(n)


def _reference(x: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    da, db = dequantized(x if x.dtype == torch.float4_e2m1fn_x2 else x.float(),
                         w if w.dtype == torch.float4_e2m1fn_x2 else w.float(), sa, sb)
    return (da @ db).to(torch.bfloat16).float()


def test_row_major_scales_take_the_scale_partition() -> None:
    mod = _module(300, 264, 544)
    assert {r.name for r in mod.rings if r.tmem} == {"sa_tm", "sb_tm"} and not mod.tmem_scales
    assert [p.role for p in mod.partitions][:2] == [ir.Role.EPILOGUE, ir.Role.SCALES]
    assert mod.tmem_columns == 2 * 128 + 2 * 2 * 4
    assert not any(isinstance(o, ir.ScaleCopy) for p in mod.partitions for o, _ in ir.walk(p.body))


@pytest.mark.parametrize("m,n,k,bn,a,b,strided", [
    (300, 264, 544, None, E4, E4, False),  # ragged M, N, and a last k-block of one 32-deep slice
    (129, 200, 1056, None, E5, E4, True),  # e5m2 x e4m3, strided scale views
    (77, 200, 416, 64, E4, E4, False),     # a 64-wide tile over N = 200: every tile's own rows of scale_b
    (45, 40, 288, 32, E4, E5, True),       # a 32-wide tile, N past one tile
    (150, 136, 320, None, F4, F4, False),  # MX fp4 (kind::mxf4)
    (300, 264, 544, None, E4, F4, False),  # MX fp8 x fp4 (kind::mxf8f6f4, the fp4 operand a value a byte)
    (129, 200, 1056, 64, F4, E5, True),    # MX fp4 x fp8, strided scale views, a 64-wide tile over N = 200
])
def test_numerics_match_dequantized_reference(m: int, n: int, k: int, bn: int | None, a: DType, b: DType,
                                              strided: bool) -> None:
    mod = _module(m, n, k, bn, a, b)
    x, w, sa, sb = _inputs(m, n, k, a, b, strided=strided)
    res = simulate(mod, x, w, sa, sb, seed=3)
    assert not res.findings, res.findings
    torch.testing.assert_close(res.output.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)


def test_wrong_scales_are_seen_by_the_numerics() -> None:
    m, n, k = 256, 256, 256
    mod = _module(m, n, k)
    x, w, sa, sb = _inputs(m, n, k)
    res = simulate(mod, x, w, sb, sa, seed=0)
    assert not torch.allclose(res.output.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)


def _edit(mod: ir.Module, role: ir.Role, fn: Callable[[ir.Op], list[ir.Stmt]]) -> ir.Module:
    """`mod` with each op of the `role` partition replaced by what `fn` returns for it."""
    return replace(mod, partitions=tuple(replace(p, body=rewrite(p.body, lambda o: tuple(fn(o))))
                                         if p.role is role else p for p in mod.partitions))


M, N, K = 256, 256, 512  # two tiles of 128x128 (one per CTA row), four k-blocks, three stages


def _kinds(mod: ir.Module, seeds: int = 6) -> set[FindingKind]:
    x, w, sa, sb = _inputs(M, N, K)
    return {f.kind for s in range(seeds) for f in simulate(mod, x, w, sa, sb, seed=s).findings}


def _explored(mod: ir.Module) -> set[FindingKind]:
    return {f.kind for f in explore(mod, 128, 128, 512, max_states=40_000).findings}


def test_planned_module_is_clean() -> None:
    mod = _module(M, N, K)
    assert not _kinds(mod)
    assert not _explored(_module(128, 128, 512, stages=2))


def test_planted_overwrite_before_the_mma_completes() -> None:
    """The scale partition does not wait for the buffer's release: it stores the next scales while the MMA that
    reads the buffer is still in flight."""
    mod = _edit(_module(M, N, K), ir.Role.SCALES,
                lambda s: [] if isinstance(s, ir.Wait) and s.barrier == "scale_empty" else [s])
    assert _kinds(mod) & {FindingKind.OVERWRITE_WHILE_READ, FindingKind.OVERWRITE_UNRELEASED}
    assert _explored(_edit(_module(128, 128, 512, stages=2), ir.Role.SCALES,
                           lambda s: [] if isinstance(s, ir.Wait) and s.barrier == "scale_empty" else [s])) & {
        FindingKind.OVERWRITE_WHILE_READ, FindingKind.OVERWRITE_UNRELEASED}
    with pytest.raises(VerificationError, match="with no wait on .'scale_empty'. at that slot"):
        target_verify(mod, "test", B200)


def test_planted_release_by_hand_before_the_mma_completes() -> None:
    """The MMA warp releases the buffers as it issues the MMA, not as the MMA completes."""
    def early(s: ir.Op) -> list[ir.Stmt]:
        if isinstance(s, ir.TcMma):
            assert s.scales is not None and s.scales.slot is not None
            return [replace(s, release_scales=None), ir.Arrive("scale_empty", s.scales.slot)]
        return [s]
    mod = _edit(_module(M, N, K), ir.Role.MMA, early)
    assert FindingKind.RELEASE_WHILE_READING in _kinds(mod)
    with pytest.raises(VerificationError, match="releases a tensor-memory scale buffer by hand"):
        target_verify(mod, "test", B200)


def test_planted_scale_partition_signalling_early() -> None:
    """The partition arrives on scale_ready before it stores the scales: the MMA may read the buffer first."""
    def early(s: ir.Op) -> list[ir.Stmt]:
        if isinstance(s, ir.StoreTmemScales) and s.tensor is ir.Tensor.SCALE_A:
            return [ir.Arrive("scale_ready", s.slot), s]
        return [] if isinstance(s, ir.Arrive) else [s]
    mod = _edit(_module(M, N, K), ir.Role.SCALES, early)
    assert _kinds(mod) & {FindingKind.READ_UNACQUIRED, FindingKind.READ_BEFORE_LANDED, FindingKind.WRONG_TILE}
    with pytest.raises(VerificationError, match="signals the MMA warp before store_tmem_scales"):
        target_verify(mod, "test", B200)


def test_planted_wrong_parity_on_the_scale_buffer_barrier() -> None:
    mod = _edit(_module(M, N, K), ir.Role.MMA,
                lambda s: [replace(s, parity=ir.Parity("q", flip=True))]
                if isinstance(s, ir.Wait) and s.barrier == "scale_ready" else [s])
    assert _kinds(mod) & {FindingKind.READ_UNACQUIRED, FindingKind.READ_BEFORE_LANDED, FindingKind.WRONG_TILE}
    assert _explored(_edit(_module(128, 128, 512, stages=2), ir.Role.MMA,
                           lambda s: [replace(s, parity=ir.Parity("q", flip=True))]
                           if isinstance(s, ir.Wait) and s.barrier == "scale_ready" else [s]))


def test_verifier_counts_the_scale_buffers_columns() -> None:
    mod = _module(M, N, K)
    wide = replace(mod, rings=tuple(replace(r, depth=64) if r.tmem else r for r in mod.rings),
                   barriers=tuple(replace(b, depth=64) if b.name.startswith("scale_") else b for b in mod.barriers))
    with pytest.raises(VerificationError, match="tensor memory: 768 columns"):
        target_verify(wide, "test", B200)


def test_cpu_scaled_mm_of_mx_fp4_with_row_major_scales_runs_the_scale_partition() -> None:
    """CPU tensors of fp4 data plan for a B200 (`api.sim_device`): row-major scales now run seed 000's kernel on the
    simulator, as scaled_mm's result."""
    import warploom

    m, n, k = 70, 96, 192
    x, w, sa, sb = _inputs(m, n, k, F4, F4)
    out = warploom.scaled_mm(x, w, sa, sb, out_dtype=torch.bfloat16)
    torch.testing.assert_close(out.float(), _reference(x, w, sa, sb), rtol=1e-2, atol=1e-2)
