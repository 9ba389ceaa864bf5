"""GPU tier for operands of 2^31 elements or more (issue 28, item 4): A past 2^31 elements, and C (with split-K, its
workspace too; grouped, its masked stores) past 2^31, where an i32 offset would wrap.

Outputs are poisoned with NaN first, so an element no program stores stays NaN; the reference is fp32 on the
rows and columns where a wrapped offset lands (past element 2^31: the last rows, the rows around the crossing and
the last columns) plus a sample of the rest, never the whole product. tests/unit/test_wide_offsets.py checks the
generated source for the same property without a GPU. Each test needs 6 to 24 GiB of GPU memory and skips, saying
so, where less is free.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import warploom
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(600, method="thread")]

GIB = 2**30
# A past 2^31 elements: (2^20 + 16) x 2112 = 2_214_626_304; a K-major weight of 256 rows.
BIG_A = (2**20 + 16, 256, 2**11 + 64)
# C past 2^31 elements: (2^16 + 64) x (2^15 + 128) = 2_157_977_600, a short K.
BIG_C = (2**16 + 64, 2**15 + 128, 256)


@pytest.fixture(autouse=True)
def free_memory() -> Iterator[None]:
    yield
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def need(nbytes: float) -> None:
    """Skip unless `nbytes` (plus slack for the reference and the allocator) fit in the GPU's free memory."""
    free, _ = torch.cuda.mem_get_info()
    want = nbytes * 1.15 + 2 * GIB
    if free < want:
        pytest.skip(f"needs {want / GIB:.1f} GiB of free GPU memory for operands past 2^31 elements, "
                    f"{free / GIB:.1f} GiB free")


def err(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


def randn(rows: int, cols: int, dtype: torch.dtype, chunk: int = 2**16) -> torch.Tensor:
    """Standard normals of `dtype`, drawn `chunk` rows at a time (an fp32 draw of the whole would double it)."""
    out = torch.empty(rows, cols, device="cuda", dtype=dtype)
    for r in range(0, rows, chunk):
        out[r:r + chunk] = torch.randn(min(chunk, rows - r), cols, device="cuda").to(dtype)
    return out


def any_nan(t: torch.Tensor, chunk: int = 2**14) -> bool:
    """Whether any element of `t` is NaN, a row block at a time (a whole-tensor mask is half C again)."""
    return any(bool(t[r:r + chunk].isnan().any()) for r in range(0, t.shape[0], chunk))


def crossing_rows(m: int, row_elems: int) -> torch.Tensor:
    """Rows to check against the reference: the first and last 256, the 128 around the row where the element
    offset passes 2^31 (`row_elems` elements a row), and 1024 drawn from the rest."""
    cross = 2**31 // row_elems
    rows = [torch.arange(256), torch.arange(m - 256, m), torch.arange(max(cross - 64, 0), min(cross + 64, m)),
            torch.randint(0, m, (1024,), generator=torch.Generator().manual_seed(m))]
    return torch.cat(rows).unique().cuda()


def problem(recipe: str, m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...], Kernel]:
    """A (M, K), a K-major B (K, N), the scales (bf16: none; fp8 rowwise: (M, 1) and (1, N) in [0.5, 1.5)) and
    the kernel `warploom.plan` chooses for them (fp8: torch's use_fast_accum=True, bf16 out)."""
    if recipe == "bf16":
        a, b = randn(m, k, torch.bfloat16), randn(n, k, torch.bfloat16).t()
        return a, b, (), warploom.plan(a, b)
    a, b = randn(m, k, torch.float8_e4m3fn), randn(n, k, torch.float8_e4m3fn).t()
    scales = (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5)
    return a, b, scales, warploom.plan(a, b, *scales, out_dtype=torch.bfloat16, use_fast_accum=True)


def take(t: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """`t`'s rows (dim 0) or columns (dim 1) at `index`, through their bytes for fp8 (whose indexing torch may lack)."""
    if t.element_size() != 1:
        return t.index_select(dim, index)
    return t.view(torch.uint8).index_select(dim, index).view(t.dtype)


def reference(a: torch.Tensor, b: torch.Tensor, scales: tuple[torch.Tensor, ...], rows: torch.Tensor | None,
              cols: torch.Tensor | None) -> torch.Tensor:
    """fp32 (A @ B) at the given rows (all columns) or columns (all rows), with rowwise scales if given."""
    ra = a if rows is None else take(a, 0, rows)
    rb = b if cols is None else take(b, 1, cols)
    ref = ra.float() @ rb.float()
    if scales:
        sa, sb = scales
        ref = ref * (sa if rows is None else sa[rows]) * (sb if cols is None else sb[:, cols])
    return ref


def run_poisoned(kern: Kernel, a: torch.Tensor, b: torch.Tensor, scales: tuple[torch.Tensor, ...]) -> torch.Tensor:
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, *scales)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("recipe", ["bf16", "fp8_rowwise"])
def test_a_past_2_31_elements(recipe: str) -> None:
    """A of (2^20 + 16) x 2112 elements: its rows past 1_016_800 start past element 2^31."""
    m, n, k = BIG_A
    assert m * k > 2**31
    elem = 2 if recipe == "bf16" else 1
    need(m * k * elem + n * k * elem + m * n * 2)
    torch.manual_seed(0)
    a, b, scales, kern = problem(recipe, m, n, k)
    out = run_poisoned(kern, a, b, scales)
    assert not any_nan(out), "output elements left unstored (NaN)"
    rows = crossing_rows(m, k)
    e = err(out[rows].float(), reference(a, b, scales, rows, None))
    assert e < (1e-4 if recipe == "bf16" else 1e-3), f"{recipe}: error {e} on the rows past element 2^31 of A"


@pytest.mark.parametrize("recipe,split_k", [("bf16", 1), ("fp8_rowwise", 1), ("bf16", 2)])
def test_c_past_2_31_elements(recipe: str, split_k: int) -> None:
    """C of (2^16 + 64) x (2^15 + 128) elements: its rows past 65_280 start past element 2^31. split_k=2 adds the
    reduction kernel over a workspace of 2 x 65664 x 32896 fp32 (4.3e9 elements, 17 GB) and its C stores."""
    m, n, k = BIG_C
    k = k * split_k  # (each unit runs the same number of k-blocks)
    assert m * n > 2**31
    elem = 2 if recipe == "bf16" else 1
    workspace = split_k * -(-m // 128) * 128 * n * 4 if split_k > 1 else 0
    need((m + n) * k * elem + m * n * 2 + workspace)
    torch.manual_seed(1)
    a, b, scales, kern = problem(recipe, m, n, k)
    if split_k > 1:
        dev = DeviceInfo.current()
        kern = build(kern.spec, dev, plan_schedule(kern.spec, dev, bm=128, bn=128, split_k=split_k))
        assert kern.plan.split_k == split_k and "program_id(0).to(gl.int64)" in kern.source
    out = run_poisoned(kern, a, b, scales)
    assert not any_nan(out), "output elements left unstored (NaN)"
    tol = 1e-4 if recipe == "bf16" else 1e-3
    rows = crossing_rows(m, n)
    e = err(out[rows].float(), reference(a, b, scales, rows, None))
    assert e < tol, f"{recipe} split_k={split_k}: error {e} on the rows past element 2^31 of C"
    cols = torch.arange(n - 128, n, device="cuda")
    e = err(out[:, cols].float(), reference(a, b, scales, None, cols))
    assert e < tol, f"{recipe} split_k={split_k}: error {e} on C's last 128 columns"


def test_grouped_c_past_2_31_elements() -> None:
    """An M-grouped bf16 GEMM whose C has (2^16 + 64) x (2^15 + 128) elements: groups ending at rows 65300 and
    65600 (not tile multiples) store their last tiles by the masked path, across and past element 2^31."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _launcher

    m, n, k = BIG_C
    ends = [16000, 40000, 65300, m]
    need(m * k * 2 + len(ends) * n * k * 2 + m * n * 2)
    torch.manual_seed(2)
    a = randn(m, k, torch.bfloat16)
    w = torch.randn(len(ends), n, k, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(ends, dtype=torch.int32, device="cuda")
    call = grouped_call(a, w.transpose(-2, -1), offs)
    kern = build(call.spec, DeviceInfo.current())
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _launcher(kern)(a, call.b, call.bounds, out, None, None, None)  # (grouped_mm's own launch, into a poisoned C)
    torch.cuda.synchronize()
    assert not any_nan(out), "output elements left unstored (NaN)"
    rows = torch.cat([crossing_rows(m, n), torch.arange(65216, 65344, device="cuda")]).unique()
    group = torch.searchsorted(offs, rows.to(torch.int32), right=True)  # the group of each row
    ref = torch.empty(len(rows), n, device="cuda")
    for g in group.unique().tolist():
        at = group == g
        ref[at] = take(a, 0, rows[at]).float() @ w[g].float().t()
    e = err(out[rows].float(), ref)
    assert e < 1e-4, f"grouped: error {e} on the rows past element 2^31 of C"
