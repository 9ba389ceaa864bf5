"""sm_100a fp32 blockwise (DeepSeek 1x128 x 128x128; passes/blackwell_promote.py) in the simulator: each k-block's
MMA into a tensor-memory partial, promoted into a register accumulator by the epilogue partition.

Numerics against an fp64 reference of the dequantized product (scale-free metric, random data, shapes that are not
tile multiples, outputs poisoned with NaN), and planted bugs the simulator (and the explorer) must catch: the
promotion before its MMA completed, the wrong scale_b block, the partial refilled before it was read, the stage
released before its scales were read."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from warploom import Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.device import B200
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import Inputs, make_inputs, relative_error
from warploom.sim import FindingKind, explore, simulate

BW, BW1 = ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128
K = FindingKind


def _spec(m: int, n: int, k: int, recipe: ScaleRecipe = BW, bias: DType | None = None) -> GemmSpec:
    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=recipe, accumulation=Accumulation.PROMOTED,
                    bias_dtype=bias)


@functools.cache
def _module(m: int, n: int, k: int, recipe: ScaleRecipe = BW, bias: DType | None = None,
            stages: int | None = None) -> ir.Module:
    spec = _spec(m, n, k, recipe, bias)
    return build(spec, B200, plan_schedule(spec, B200, stages=stages)).module


def _fp64_reference(x: Inputs) -> torch.Tensor:
    """sum_k A[m, k] B[k, n] scale_a[m, k // 128] scale_b[k // 128, n // 128 (or n)] (+ bias), in fp64."""
    assert x.scale_a is not None and x.scale_b is not None
    a, b = x.a.double(), x.b.double()
    m, k = a.shape
    n = b.shape[1]
    sa = x.scale_a.double().repeat_interleave(128, dim=1)[:, :k]  # (M, K)
    sb = x.scale_b.double().repeat_interleave(128, dim=0)[:k]  # (K, N) or (K, N-blocks)
    if sb.shape[1] != n:
        sb = sb.repeat_interleave(128, dim=1)[:, :n]
    out = (a * sa) @ (b * sb)
    return out + x.bias.double() if x.bias is not None else out


def _run(mod: ir.Module, m: int, n: int, k: int, seed: int = 0) -> tuple[object, Inputs]:
    x = make_inputs(mod.spec, m, n, k, seed=seed)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)  # poisoned: every element must be written
    return simulate(mod, x.a, x.b, x.scale_a, x.scale_b, x.bias, seed=seed, out=out), x


@pytest.mark.parametrize("m,n,k,recipe,bias", [
    (300, 264, 640, BW, None),         # M, N not tile multiples; 5 k-blocks through 4 partials
    (129, 130, 1000, BW, DType.BF16),  # a 1-row and a 2-column edge tile, a partial last k-block, a bias
    (256, 384, 1152, BW1, None),       # scale_b per column (1x128 x 1x128)
    (40, 200, 72, BW, None),           # K shorter than one k-block
])
def test_numerics_match_fp64_dequantized_reference(m: int, n: int, k: int, recipe: ScaleRecipe,
                                                   bias: DType | None) -> None:
    mod = _module(m, n, k, recipe, bias)
    for seed in (0, 1):
        res, x = _run(mod, m, n, k, seed)
        assert not res.findings, res.findings  # type: ignore[attr-defined]
        got = res.output.double()  # type: ignore[attr-defined]
        assert not got.isnan().any(), "an output element was never stored"
        ref = _fp64_reference(x)
        # bf16 output: its rounding alone is ~1e-5 of this metric; a wrong scale or k-block is far above 1e-3
        assert relative_error(got, ref) < 1e-4


def test_metric_fails_without_the_scales() -> None:
    """The comparison can fail: the product without the scales is far from the reference."""
    m, n, k = 300, 264, 640
    res, x = _run(_module(m, n, k), m, n, k)
    assert relative_error((x.a.double() @ x.b.double()), _fp64_reference(x)) > 1e-2
    assert relative_error(res.output.double(), _fp64_reference(x)) < 1e-4  # type: ignore[attr-defined]


def _edit(mod: ir.Module, role: ir.Role, fn: Callable[[ir.Stmt], list[ir.Stmt]]) -> ir.Module:
    def walk(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            out += [replace(s, body=walk(s.body))] if isinstance(s, ir.Loop) else fn(s)
        return tuple(out)
    return replace(mod, partitions=tuple(replace(p, body=walk(p.body)) if p.role is role else p
                                         for p in mod.partitions))


def _no_partial_wait(mod: ir.Module) -> ir.Module:
    """The promotion before the MMA completes: the epilogue partition no longer waits on part_ready."""
    return _edit(mod, ir.Role.EPILOGUE, lambda s: [] if isinstance(s, ir.Wait) and s.barrier == "part_ready" else [s])


def _wrong_scale_b_block(mod: ir.Module) -> ir.Module:
    """The wrong block of scale_b: the second 64-column accumulator block is promoted with the first block's column
    scales (1x128 x 1x128: a scale_b per column), as an emitter slicing at the wrong column would."""
    accs = tuple(replace(a, col0=0) if a.name == "acc1" else a for a in mod.partition("epilogue").accumulators)
    return replace(mod, partitions=tuple(replace(p, accumulators=accs) if p.role is ir.Role.EPILOGUE else p
                                         for p in mod.partitions))


def _no_partial_release_wait(mod: ir.Module) -> ir.Module:
    """The MMA warp overwrites a partial the epilogue partition has not read: no part_empty wait."""
    return _edit(mod, ir.Role.MMA, lambda s: [] if isinstance(s, ir.Wait) and s.barrier == "part_empty" else [s])


def _release_before_promotion(mod: ir.Module) -> ir.Module:
    """The epilogue partition releases the stage (its scales) right after its ready wait, before promoting."""
    def move(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            if isinstance(s, ir.Loop):
                out.append(replace(s, body=move(s.body)))
            elif isinstance(s, ir.Arrive) and s.barrier == "empty":
                continue
            else:
                out.append(s)
                if isinstance(s, ir.Wait) and s.barrier == "ready":
                    out.append(ir.Arrive("empty", s.slot))
        return tuple(out)
    return replace(mod, partitions=tuple(replace(p, body=move(p.body)) if p.role is ir.Role.EPILOGUE else p
                                         for p in mod.partitions))


MUTANTS: dict[str, tuple[Callable[[ir.Module], ir.Module], set[FindingKind]]] = {
    "promote_before_mma_completes": (_no_partial_wait, {K.READ_BEFORE_LANDED, K.READ_UNACQUIRED}),
    "partial_overwritten_before_read": (_no_partial_release_wait, {K.OVERWRITE_UNRELEASED}),
    "stage_released_before_promotion": (_release_before_promotion,
                                        {K.OVERWRITE_UNRELEASED, K.OVERWRITE_WHILE_READ, K.READ_AFTER_RELEASE}),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_protocol_bugs_are_caught(name: str) -> None:
    m, n, k = 300, 264, 1280  # 10 k-blocks: the 4 partials and 6 stages each wrap
    mutate, kinds = MUTANTS[name]
    mod = mutate(_module(m, n, k))
    found = set()
    for seed in range(6):
        x = make_inputs(mod.spec, m, n, k, seed=seed)
        found |= {f.kind for f in simulate(mod, x.a, x.b, x.scale_a, x.scale_b, seed=seed).findings}
    assert found & kinds, (name, found)
    small = mutate(_module(128, 128, 640, stages=2))  # one tile, 5 k-blocks through 2 stages and 4 partials
    rep = explore(small, 128, 128, 640, stop_at_first=True)
    assert rep.findings and rep.findings[0].kind in kinds, (name, rep.findings[:1])


def test_wrong_scale_b_block_is_caught_by_the_numerics() -> None:
    """The protocol is clean, so only the comparison with the reference can see it; it does."""
    m, n, k = 256, 384, 640
    mod = _wrong_scale_b_block(_module(m, n, k, BW1))
    res, x = _run(mod, m, n, k)
    assert not res.findings  # type: ignore[attr-defined]
    assert relative_error(res.output.double(), _fp64_reference(x)) > 1e-3  # type: ignore[attr-defined]


def test_unmutated_explores_clean() -> None:
    rep = explore(_module(128, 128, 640, stages=2), 128, 128, 640)
    assert not rep.findings and not rep.bound_hit, rep
