"""128x128 blocks of A's scales at 384x128x1280 (K/128 = 10, not a multiple of 4), where the GPU tier found
warploom and torch._scaled_mm apart: warploom's reading of the scales, and torch's.

warploom classifies scale_a (3, 10) with scale_b (10, 128) as 128x128 x 1x128 whatever scale_a's strides, and
launches with the tensor's own strides. cuBLAS, under torch._scaled_mm, reads row i of scale_a at element 12 * i
(L4 = 10 rounded up to 4) whatever its strides, so a row-major scale_a gives torch other scales past the first
128 rows; `cublas_a_blocks` lays scale_a out so torch reads its values.
"""

from __future__ import annotations

import pytest
import torch

from warploom import checks
from warploom.reference import cublas_a_blocks
from warploom.runtime.bound import Call
from warploom.runtime.launch import _scale_args
from warploom.spec import ScaleRecipe

E4 = torch.float8_e4m3fn
A128_B1 = ScaleRecipe.BLOCKWISE_128X128_1X128


def blocks(m: int, k: int) -> tuple[int, int, int]:
    """(M-blocks, k-blocks, L4): L4 the k-blocks rounded up to a multiple of 4, cuBLAS's row length."""
    kb = -(-k // 128)
    return -(-m // 128), kb, -(-kb // 4) * 4


def cublas_reads(scale_a: torch.Tensor, l4: int) -> torch.Tensor:
    """The (M-blocks, k-blocks) scales cuBLAS's BlockWise128x128 kernel reads from scale_a's storage: rows l4
    elements apart from its first element, whatever its strides."""
    mb, kb = scale_a.shape
    return scale_a.as_strided((mb, kb), (l4, 1))


@pytest.mark.parametrize("m,n,k", [(384, 128, 1280), (640, 128, 1152), (130, 256, 384), (384, 128, 512)])
def test_a_blocks_are_read_through_their_strides(m: int, n: int, k: int) -> None:
    mb, kb, l4 = blocks(m, k)
    a = torch.empty(m, k, dtype=E4, device="meta")
    b = torch.empty(n, k, dtype=E4, device="meta").t()
    sb = torch.ones(kb, n)  # 1x128 B: (k-blocks, N), not the (k-blocks, N-blocks) of 128x128 B
    layouts = {"row": torch.ones(mb, kb), "col": torch.ones(kb, mb).t(), "l4": torch.ones(mb, l4)[:, :kb]}
    for name, sa in layouts.items():
        assert checks.scaled_mm_spec(a, b, sa.to("meta"), sb.to("meta")).scale is A128_B1, name
        args = _scale_args(A128_B1)
        call = Call(None, None, None, sa, sb)
        assert (args["sa_stride_m"](call), args["sa_stride_k"](call)) == sa.stride(), name
        assert (args["sb_stride_k"](call), args["sb_stride_n"](call)) == (n, 1), name


def test_cublas_a_blocks_holds_the_values_where_cublas_reads_them() -> None:
    mb, kb, l4 = blocks(384, 1280)
    sa = torch.arange(1.0, mb * kb + 1).view(mb, kb)
    given = cublas_a_blocks(sa)
    assert given.shape == (mb, kb) and given.stride() == (kb, 1)  # what torch._scaled_mm's check asks for
    assert torch.equal(cublas_reads(given, l4), sa)
    assert not torch.equal(given, sa)  # (through its own strides: for torch only, never for warploom)


@pytest.mark.parametrize("m,k,misread", [(384, 1280, True), (640, 1152, True), (128, 1280, False),
                                         (384, 1024, False), (384, 512, False)])
def test_a_row_major_scale_a_is_misread_where_k_blocks_are_not_a_multiple_of_4(m: int, k: int,
                                                                               misread: bool) -> None:
    """The cause: a plain row-major scale_a is read right by cuBLAS only with one M-block or K/128 a multiple of
    4 (all the shapes where the GPU tier found torch and warploom equal)."""
    mb, kb, l4 = blocks(m, k)
    storage = torch.arange(1.0, mb * l4 + 1)  # (past scale_a's own elements: what memory holds there)
    sa = storage[: mb * kb].view(mb, kb)
    assert torch.equal(cublas_reads(sa, l4), sa) is not misread
