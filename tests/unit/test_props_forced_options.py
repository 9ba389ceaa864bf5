"""Property: `warploom.plan` with any combination of forced planner options (tile, depth, partitions, split-K, its
tail, stream-K, swap-AB, ping-pong, clusters, the scale partition, column blocks) either plans or refuses with an
UnsupportedError that says why and ends with what to pass instead ("Fix:"); never another exception (a PlanError here
is a planner bug: it built a plan its own checks reject).

Under both ends of the Triton range: 3.6 (no clusters) and 3.9 (clusters and rule 30), through `emitting_for`, which
changes what the planner may choose without the other Triton installed. CPU tensors only; nothing is simulated.
"""

from __future__ import annotations

import collections

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from props import examples, figures

import warploom
from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.errors import UnsupportedError
from warploom.planner import plan_schedule
from warploom.spec import GemmSpec

COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures("forced options", COUNTS)

OPTIONS = {
    "bm": st.sampled_from([64, 128, 256]),
    "bn": st.sampled_from([16, 32, 64, 128, 256]),
    "stages": st.integers(1, 16),
    "consumer_partitions": st.sampled_from([1, 2, 4]),
    "partial_blocks": st.sampled_from([1, 2, 4]),
    "split_k": st.integers(1, 8),
    "tail_split": st.integers(1, 8),
    "stream_k": st.sampled_from([0, 2, 3, 4]),
    "swap_ab": st.booleans(),
    "pingpong": st.booleans(),
    "cluster": st.sampled_from([1, 2, "2x1", "1x2"]),
    "hoist_rows": st.booleans(),
    "prefetch_operands": st.booleans(),
    "scale_partition": st.booleans(),
    "n_blocks": st.sampled_from([(), (64, 16), (128, 32)]),
}


@st.composite
def problem(draw: st.DrawFn) -> tuple[str, tuple[int, int, int], dict[str, object]]:
    """A recipe, a shape (rows not always whole 128-byte lines; decode-sized M too) and 1-4 forced options."""
    recipe = draw(st.sampled_from(["bf16", "bf16_m_major_a", "bf16_n_major_b", "bf16_fp32_out", "fp8_fast",
                                   "fp8_fast_bias", "fp8_exact", "fp8_blockwise"]))
    m = draw(st.one_of(st.integers(1, 64), st.integers(65, 12000)))
    n = draw(st.integers(1, 800)) * 16
    k = draw(st.integers(1, 900)) * 16
    names = draw(st.lists(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=4, unique=True))
    return recipe, (m, n, k), {name: draw(OPTIONS[name]) for name in names}


def _spec(recipe: str, shape: tuple[int, int, int]) -> GemmSpec:
    """The spec `warploom.plan` builds for the recipe on empty CPU tensors (B column-major, as torch wants fp8's)."""
    m, n, k = shape
    if recipe.startswith("bf16"):
        if recipe == "bf16_m_major_a":
            m = -(-m // 8) * 8  # (an M-major A's rows are M long: whole 16 bytes, TMA's rule)
        a = torch.empty(k, m, dtype=torch.bfloat16).t() if recipe == "bf16_m_major_a" else torch.empty(
            m, k, dtype=torch.bfloat16)
        b = torch.empty(k, n, dtype=torch.bfloat16) if recipe == "bf16_n_major_b" else torch.empty(
            n, k, dtype=torch.bfloat16).t()
        out = torch.float32 if recipe == "bf16_fp32_out" else None
        return warploom.plan(a, b, out_dtype=out, device=H100_SXM).spec
    a = torch.empty(m, k).to(torch.float8_e4m3fn)
    b = torch.empty(n, k).to(torch.float8_e4m3fn).t()
    if recipe == "fp8_blockwise":  # 1x128 x 128x128, scale_a outer-dim-major as torch wants
        sa = torch.empty(-(-k // 128), m).t()
        sb = torch.empty(-(-n // 128), -(-k // 128)).t()
        return warploom.plan(a, b, sa, sb, device=H100_SXM).spec
    bias = torch.empty(n, dtype=torch.bfloat16) if recipe == "fp8_fast_bias" else None
    return warploom.plan(a, b, torch.ones(m, 1), torch.ones(1, n), use_fast_accum=recipe != "fp8_exact", bias=bias,
                         device=H100_SXM).spec


@pytest.mark.parametrize("triton", ["3.6", "3.9"])
@examples(150)
@given(case=problem())
# (a forced swap whose swapped problem rule 24 clustered, under 3.9: a cluster with swap_ab, which Plan refuses)
@example(case=("bf16", (11336, 12448, 208), {"bn": 256, "swap_ab": True}))
def test_forced_options_plan_or_refuse_clearly(triton: str,
                                               case: tuple[str, tuple[int, int, int], dict[str, object]]) -> None:
    recipe, shape, kw = case
    spec = _spec(recipe, shape)  # (a valid problem: its own checks pass)
    with emitting_for(triton):
        try:
            plan_schedule(spec, H100_SXM, **kw)  # type: ignore[arg-type]
        except UnsupportedError as e:
            assert len(str(e)) > 20, repr(e)  # (a reason, not an empty refusal)
            assert "Fix: " in str(e), repr(e)  # (and what to pass instead)
            COUNTS["refused"] += 1
            return
    COUNTS["planned"] += 1
