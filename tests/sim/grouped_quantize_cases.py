"""What the grouped fused-quantization simulator tests share (pytest puts this folder on sys.path): G experts of up
to M_MAX rows, N = 304 (two whole 128-column groups and a ragged one of 48), K = 256 (two 128-deep scale blocks); exact
inputs (small integers, power-of-two scales), random routings and the fp32 reference each expert's rows quantize.
tests/sim/test_grouped_quantize_sim.py (1x128, and rowwise on one tile) and test_grouped_amax_pass_sim.py (rowwise
across tiles, rule 29) run on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from fused_cases import ints, same_bytes

import warploom
from warploom.checks_grouped import GroupedCall, grouped_call
from warploom.grouped import _fused

G, M_MAX, N, K = 4, 100, 304, 256
BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


def expert_rows(bounds: torch.Tensor, masked: bool) -> list[tuple[int, int]]:
    """Each expert's rows of C: the masked layout's g * M_max + count, else the cumulative offs."""
    if masked:
        return [(g * M_MAX, g * M_MAX + int(c)) for g, c in enumerate(bounds)]
    ends = bounds.tolist()
    return [(ends[g - 1] if g else 0, ends[g]) for g in range(G)]


def random_bounds(seed: int, masked: bool) -> torch.Tensor:
    """Random counts (masked, one zero) or offsets (one empty expert, ends no multiples of 64, and rows past the
    last end that no group owns)."""
    gen = torch.Generator().manual_seed(seed)
    if masked:
        c = torch.randint(1, M_MAX, (G,), generator=gen)
        c[seed % G] = 0
        return c.to(torch.int32)
    cuts = torch.randint(0, G * M_MAX - 20, (G,), generator=gen).sort().values
    cuts[1] = cuts[0]  # (expert 1 empty)
    return cuts.to(torch.int32)


def scales(recipe: str, m: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Power-of-two scales (exact products): rowwise (M,) and (G, N), blockwise (M, K/128) and (G, K/128, NB); the
    same ones every call (the simulation's and the reference's)."""
    gen = torch.Generator().manual_seed(m)
    pow2 = lambda *shape: torch.exp2(torch.randint(-2, 3, shape, generator=gen).float())  # noqa: E731
    if recipe == "bf16":
        return None, None
    if recipe == "blockwise":
        return pow2(m, K // 128), pow2(G, K // 128, -(-N // 128))
    return pow2(m), pow2(G, N)


def inputs(seed: int, recipe: str, masked: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a ((G, M_max, K) masked, else (G * M_max, K)), the experts' weights (G, K, N) K-major, and a gate over the
    result's rows."""
    torch.manual_seed(seed)
    dt = BF16 if recipe == "bf16" else E4
    a = ints(G, M_MAX, K) if masked else ints(G * M_MAX, K)
    w = ints(G, N, K).to(dt).transpose(-2, -1)
    gate = ints(*a.shape[:-1], N, lo=-3, hi=4).to(BF16)
    return a.to(dt), w, gate


def reference(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, recipe: str, masked: bool,
              gate: torch.Tensor | None) -> torch.Tensor:
    """The fp32 value each expert's rows quantize (exact: integers times powers of two), NaN in rows of no group."""
    a2 = a.reshape(-1, K).double()
    m = a2.shape[0]
    sa, sb = scales(recipe, m)
    y = torch.full((m, N), float("nan"), dtype=torch.float64)
    for g, (s, e) in enumerate(expert_rows(bounds, masked)):
        aa, ww = a2[s:e], w[g].double()
        if recipe == "blockwise":
            assert sa is not None and sb is not None
            aa = aa * sa[s:e].double().repeat_interleave(128, 1)[:, :K]
            ww = ww * sb[g].double().repeat_interleave(128, 0)[:K].repeat_interleave(128, 1)[:, :N]
            y[s:e] = aa @ ww
        elif sa is not None and sb is not None:
            y[s:e] = (aa @ ww) * sa[s:e, None].double() * sb[g].double()
        else:
            y[s:e] = aa @ ww
    y32 = y.float()
    return y32 if gate is None else F.silu(gate.reshape(m, N).float()) * y32


def fused_call(a: torch.Tensor, w: torch.Tensor, bounds: torch.Tensor, fn: Callable[..., Any], ops: dict[str, Any],
               recipe: str, masked: bool) -> tuple[GroupedCall, Any, Any, dict[str, Any]]:
    """The API's checks and fusion (`grouped._fused`, rowwise scales in front of fn) of the case: the call, the
    scales the kernel reads and the graph's operands."""
    sa, sb = scales(recipe, G * M_MAX)
    if masked and sa is not None:
        sa = sa.reshape(G, M_MAX, *sa.shape[1:])
    offs, masked_m = (None, bounds) if masked else (bounds, None)
    call = grouped_call(a, w, offs, masked_m, None if sa is None else BF16, sa, sb, recipe == "rowwise_fast")
    if recipe == "blockwise":
        assert sa is not None
        return _fused(call, fn, ops, scale_a=sa.flatten(0, -2), scale_b=sb)
    if sa is not None and sb is not None:
        return _fused(call, fn, ops, scale_a=sa.reshape(-1, 1), scale_b=sb.unsqueeze(1))
    return _fused(call, fn, ops)


def check_quantized(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor, recipe: str) -> None:
    """Rows of a group (y's rows that are not NaN): q's bytes and s the plain `warploom.quantize(y, recipe)`'s; rows of
    none: both still NaN (never written)."""
    owned = ~y[:, 0].isnan()
    rq, rs = warploom.quantize(y[owned], recipe=recipe)
    assert torch.equal(s[owned], rs)
    assert same_bytes(q[owned], rq)
    assert bool(s[~owned].isnan().all()) and bool(q[~owned].float().isnan().all())


# The recipes of the bitwise tests (`bitwise_case`): bf16, fp8 rowwise with fast or promoted accumulation, blockwise.
RECIPES = ["bf16", "rowwise_fast", "rowwise_promoted", "blockwise"]


def bitwise_case(recipe: str, masked: bool, gated: bool, plain: Callable[..., Any],
                 gate_fn: Callable[..., Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Callable[..., Any],
                                                      dict[str, Any], torch.Tensor]:
    """One case of the quantize sims' bitwise tests, seeded by its place among them: a, w, the bounds, the epilogue
    (`plain` quantizing acc, or `gate_fn` silu(gate) * acc with the gate operand), its operands, and the fp32 y the
    kernel should have quantized (NaN on rows of no group)."""
    seed = RECIPES.index(recipe) * 4 + 2 * masked + gated
    a, w, gate = inputs(seed, recipe, masked)
    bounds = random_bounds(seed, masked)
    fn, ops = (gate_fn, {"gate": gate}) if gated else (plain, {})
    return a, w, bounds, fn, ops, reference(a, w, bounds, recipe, masked, gate if gated else None)
