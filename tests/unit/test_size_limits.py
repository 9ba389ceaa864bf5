"""Sizes the kernels cannot index are refused before planning (`spec.MAX_SIZE`, `checks.indexable`).

The kernels take M, N and K as i32 arguments and index rows, columns and K with 32-bit integers (TMA's coordinates
are signed 32-bit, ``gl.cdiv(M, BM)`` adds BM - 1 first), so a size of 2^31 - 256 or more passed planning and would
have launched a kernel with wrapped indices. Element counts are not bounded: offsets are 64-bit where a tensor may
pass 2^31 elements (test_wide_offsets.py). Meta tensors: nothing is allocated or run.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_bad_input import raises

import warploom
from warploom import H100_SXM, GemmSpec, Grouping, InputError
from warploom.kernel import build
from warploom.runtime.cross import signature
from warploom.spec import MAX_GROUPED_SCALES, MAX_SIZE

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def offs(*v: int) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.int32, device="meta")


def test_the_kernels_take_their_sizes_as_i32() -> None:
    """Why the limit: the cross-compiled signature Triton builds the kernel for."""
    k = build(GemmSpec(4096, 4096, 4096), H100_SXM)
    sig = signature(k.module, k.gluon)
    assert (sig["M"], sig["N"], sig["K"]) == ("i32", "i32", "i32")


@pytest.mark.parametrize("dim,arg", [("M", "a"), ("N", "b"), ("K", "a")])
@pytest.mark.parametrize("size", [2**31, MAX_SIZE + 1])
def test_a_dense_size_past_the_limit_is_refused_naming_its_tensor(dim: str, arg: str, size: int) -> None:
    m, n, k = (size if d == dim else 64 for d in "MNK")
    raises(InputError, arg, lambda: warploom.plan(meta(m, k), meta(k, n)), match=f"got {dim} = {size}")
    raises(InputError, arg, lambda: warploom.matmul(meta(m, k), meta(k, n)), match="32-bit integers")


def test_scaled_mm_refuses_2_31_rows() -> None:
    m = 2**31
    raises(InputError, "a", lambda: warploom.scaled_mm(meta(m, 64, dtype=E4), meta(128, 64, dtype=E4).t(),
                                                       meta(m, 1, dtype=torch.float32),
                                                       meta(1, 128, dtype=torch.float32)), match=f"M = {m}")


@pytest.mark.parametrize("m,n,k", [
    (MAX_SIZE, 128, 64),  # the largest size that passes
    (2**20, 128, 2**20),  # a (M, K) of 2^40 elements: each coordinate fits, offsets are 64-bit
    (2**31, 128, 0),  # K = 0: no kernel runs (zeros, as torch's)
])
def test_sizes_the_kernels_index_pass(m: int, n: int, k: int) -> None:
    assert warploom.plan(meta(m, k), meta(k, n)).spec.m == m


def test_a_grouped_call_past_the_limit_is_refused_naming_its_tensor() -> None:
    rows, e, n, k = 2**31, 4, 128, 64
    # M-grouped: a's rows, every group's
    raises(InputError, "a", lambda: warploom.grouped_mm(meta(rows, k), meta(e, k, n), offs(1, 2, 3, 4)),
           match=f"M = {rows}")
    # masked: a (G, M_max, K) is seen as (G * M_max, K)
    raises(InputError, "a", lambda: warploom.grouped_mm(meta(e, rows // e, k), meta(e, k, n)), match=f"M = {rows}")
    # K-grouped: C (G, M, N) is seen as (G * M, N)
    m = 2**29
    raises(InputError, "offs", lambda: warploom.grouped_mm(meta(m, 256), meta(256, n), offs(64, 128, 192, 256)),
           match=f"G * M = {e * m}")
    assert warploom.grouped_mm(meta(MAX_SIZE // e, 256), meta(256, n), offs(64, 128, 192, 256)).shape == \
        (e, MAX_SIZE // e, n)


def test_a_grouped_rowwise_scale_b_past_2_31_elements_is_refused() -> None:
    e, n, k = 2**16, 2**15 + 16, 16  # (G * N just past 2^31: its rows are offset by grp * N in 32 bits)
    b = meta(e, n, k, dtype=E4).transpose(-2, -1)
    args: Any = (meta(e, dtype=torch.float32), meta(e, n, dtype=torch.float32), offs(*range(1, e + 1)))
    raises(InputError, "scale_b", lambda: warploom.scaled_grouped_mm(meta(e, k, dtype=E4), b, *args),
           match=f"G * N = {e * n}")
    assert e * (n - 16) <= MAX_GROUPED_SCALES  # (2^31 elements: offsets up to 2^31 - 1 pass)
    fits = meta(e, n - 16, k, dtype=E4).transpose(-2, -1)
    args = (args[0], meta(e, n - 16, dtype=torch.float32), args[2])
    assert warploom.scaled_grouped_mm(meta(e, k, dtype=E4), fits, *args).shape == (e, n - 16)


@pytest.mark.parametrize("spec_args,field", [
    (dict(m=2**31, n=64, k=64), "m"), (dict(m=64, n=64, k=2**31), "k"),
    (dict(m=2**29, n=64, k=64, grouping=Grouping.K_OFFSETS, groups=8), "groups"),
])
def test_a_hand_built_spec_past_the_limit_is_refused_naming_its_field(spec_args: dict[str, Any],
                                                                       field: str) -> None:
    raises(InputError, field, lambda: GemmSpec(**spec_args), match="32-bit integers")


# Offsets a plan's counts make (not the sizes alone): stream-K's iteration products and split-K's slab rows, in 32
# bits (planning/plan_check._check_i32).
def _plan(**fields: Any) -> Any:
    from warploom.planner import Plan

    return Plan(**{"bm": 128, "bn": 256, "bk": 64, "stages": 4, "consumer_warps": 8, "group_m": 8, "grid": 132,
                   **fields})


def test_a_stream_k_plan_past_32_bit_iterations_is_refused() -> None:
    from warploom.errors import PlanError
    from warploom.planning.plan_check import check_plan

    spec = GemmSpec(4096, 4096, 8_000_000)  # 512 tiles: 116 shared by 132 CTAs, 125000 k-blocks each
    with pytest.raises(PlanError, match=r"stream_k=2.*32 bits.*Fix: stream_k=0"):
        check_plan(spec, _plan(stream_k=2), H100_SXM)
    check_plan(GemmSpec(4096, 4096, 100_000), _plan(stream_k=2), H100_SXM)  # (1563 k-blocks: fine)


def test_a_forced_stream_k_past_32_bits_is_refused_at_build() -> None:
    """Forced, the planner builds the stream-K plan it was asked for and the build refuses it by name, before any
    pass (rule 21 passes stream-K over there on its own: `sm90.search._stream_k_step`)."""
    from warploom.errors import PlanError
    from warploom.planner import plan_schedule

    spec = GemmSpec(4096, 4096, 8_000_000)
    with pytest.raises(PlanError, match="stream_k"):
        build(spec, H100_SXM, plan_schedule(spec, H100_SXM, stream_k=2, bm=128, bn=256))


def test_a_split_k_plan_past_32_bit_slab_rows_is_refused() -> None:
    from warploom.errors import PlanError
    from warploom.planning.plan_check import check_plan

    with pytest.raises(PlanError, match=r"split_k=8.*split \* MP"):
        check_plan(GemmSpec(2**29, 256, 8192), _plan(split_k=8), H100_SXM)
    check_plan(GemmSpec(2**20, 256, 8192), _plan(split_k=8), H100_SXM)
