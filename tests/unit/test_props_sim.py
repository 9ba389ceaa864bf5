"""Property: random valid small problems of every recipe the CPU simulator runs match an fp64 reference.

bf16 and fp16 (b row- or column-major) against torch.testing.assert_close with the simulator tests' tolerances; fp8
e4m3 tensorwise and rowwise (fast and exact accumulation) and blockwise 1x128 x 128x128, with and without a bias,
by the scale-free metric relative_error < 1e-3. M is any size, N and K the nearest sizes TMA's 16-byte rule allows,
none of them tile multiples in general. COUNTS tallies what ran.
"""

from __future__ import annotations

import collections

import torch
from hypothesis import event, given
from hypothesis import strategies as st
from props import examples, figures

import warploom
from warploom.reference import dequantized, relative_error

BF16, FP16, E4 = torch.bfloat16, torch.float16, torch.float8_e4m3fn
TOL = {BF16: dict(rtol=1.6e-2, atol=1e-2), FP16: dict(rtol=2e-3, atol=2e-3)}  # as tests/sim/test_cpu_tensors.py
COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures('valid problems on the simulator', COUNTS)


@st.composite
def problem(draw: st.DrawFn) -> tuple[str, int, int, int, bool, int]:
    recipe = draw(st.sampled_from(["bf16", "fp16", "tensorwise", "rowwise-fast", "rowwise-exact", "blockwise"]))
    align = 8 if recipe in ("bf16", "fp16") else 16  # elements in 16 bytes
    m = draw(st.integers(1, 72))
    n = align * draw(st.integers(1, 160 // align))
    k = align * draw(st.integers(1, (288 if recipe == "blockwise" else 160) // align))
    return recipe, m, n, k, draw(st.booleans()), draw(st.integers(0, 2**31 - 1))


@examples(30)
@given(problem())
def test_a_valid_problem_matches_the_fp64_reference(p: tuple[str, int, int, int, bool, int]) -> None:
    recipe, m, n, k, with_bias, seed = p
    event(recipe + (" + bias" if with_bias and recipe not in ("bf16", "fp16") else ""))
    COUNTS["tried"] += 1
    g = torch.Generator().manual_seed(seed)
    if recipe in ("bf16", "fp16"):
        dt = BF16 if recipe == "bf16" else FP16
        a = torch.randn(m, k, generator=g).to(dt)
        b = torch.randn(k, n, generator=g).to(dt) if seed % 2 else torch.randn(n, k, generator=g).to(dt).t()
        out = warploom.matmul(a, b)
        assert out.shape == (m, n) and out.dtype == dt
        torch.testing.assert_close(out.double(), a.double() @ b.double(), **TOL[dt])
        COUNTS["matched"] += 1
        return
    a = (torch.randn(m, k, generator=g) * 2).to(E4)
    b = (torch.randn(n, k, generator=g) * 2).to(E4).t()  # column-major, as torch._scaled_mm wants
    kb = -(-k // 128)
    shapes = {"tensorwise": ((), ()), "blockwise": ((m, kb), (kb, -(-n // 128)))}.get(recipe, ((m, 1), (1, n)))
    sa, sb = (torch.rand(s, generator=g) + 0.5 for s in shapes)
    bias = (torch.randn(n, generator=g) * 4).to(BF16) if with_bias else None
    out = warploom.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=recipe == "rowwise-fast")
    assert out.shape == (m, n) and out.dtype == BF16
    if recipe == "blockwise":
        da, db = dequantized(a, b, sa, sb)
        ref = da.double() @ db.double()
    else:
        ref = (a.double() @ b.double()) * sa.double() * sb.double()  # (M, 1) and (1, N), or scalars
    if bias is not None:
        ref = ref + bias.double()
    assert relative_error(out, ref) < 1e-3, f"{recipe} {m}x{n}x{k}: error {relative_error(out, ref):.2e}"
    COUNTS["matched"] += 1
