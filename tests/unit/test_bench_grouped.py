"""scripts/bench_grouped.py's CPU-checkable parts: the bytes its masked decode kinds count as moved (the bandwidth
compared with a device copy's, issue 27's 90% target), and the operands and torch calls it shares with
scripts/sweep_grouped.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_grouped as bench  # noqa: E402


def test_masked_bytes_leave_out_the_weights_of_empty_experts() -> None:
    """An expert with no valid rows has no tiles (`ir.raster.GroupScan`): the kernel never reads its weight, so its
    bytes do not count (bench_grouped's masked kinds leave expert 0 empty: counting its weight overstated the
    bandwidth by 1/E, 12.5% at 8 experts)."""
    n, k = 4096, 7168
    counts = torch.tensor([0, 3, 64, 0, 17], dtype=torch.int32)
    valid = 3 + 64 + 17
    for a_bytes, b_bytes in ((2, 2), (1, 1)):
        want = 3 * n * k * b_bytes + valid * k * a_bytes + valid * n * 2
        assert bench.masked_bytes(counts, n, k, a_bytes, b_bytes) == want


def test_operands_are_the_kinds_operands() -> None:
    """`operands` draws what the bf16, fp8 and masked kinds drew inline before it (same generator, same order), so
    bench_grouped's and sweep_grouped's numbers are on the same operands; fp8's scales are rowwise: one per row of
    A (a 3-D A's (E, M_max)), (E, N) one per column of each expert's weight."""
    e, rows, n, k = 3, 16, 32, 48
    torch.manual_seed(0)
    want = (torch.randn(rows, k).to(torch.float8_e4m3fn), torch.randn(e, n, k).to(torch.float8_e4m3fn),
            torch.rand(rows) + 0.5, torch.rand(e, n) + 0.5)
    torch.manual_seed(0)
    got = bench.operands(True, (rows,), e, n, k, device="cpu")
    for g, w in zip(got, want, strict=True):
        assert g is not None and g.dtype == w.dtype and torch.equal(g.float(), w.float())
    torch.manual_seed(0)
    a3, w3, sa, sb = bench.operands(True, (e, rows // e), e, n, k, device="cpu")
    assert (a3.shape, w3.shape, sa is not None and sa.shape, sb is not None and sb.shape) == \
        ((e, rows // e, k), (e, n, k), (e, rows // e), (e, n))
    torch.manual_seed(0)
    want16 = (torch.randn(rows, k, dtype=torch.bfloat16), torch.randn(e, n, k, dtype=torch.bfloat16))
    torch.manual_seed(0)
    a, w, sa, sb = bench.operands(False, (rows,), e, n, k, device="cpu")
    assert torch.equal(a, want16[0]) and torch.equal(w, want16[1]) and sa is None and sb is None


def test_torch_grouped_calls_torch_op_of_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without scales torch._grouped_mm (checked against a loop over the experts); with rowwise ones
    torch._scaled_grouped_mm, bf16 out, with the case's use_fast_accum (it has no CPU kernel: recorded here)."""
    e, rows, n, k = 3, 16, 32, 48
    torch.manual_seed(0)
    a, w, _, _ = bench.operands(False, (rows,), e, n, k, device="cpu")
    offs = torch.tensor([0, 5, 16], dtype=torch.int32)
    got = bench.torch_grouped(a, w.transpose(-2, -1), offs=offs)()
    want = torch.cat([a[:5] @ w[1].t(), a[5:] @ w[2].t()])
    assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-1)
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "_scaled_grouped_mm", lambda *args, **kw: seen.append({"args": args, **kw}))
    a8, w8, sa, sb = bench.operands(True, (rows,), e, n, k, device="cpu")
    for fast in (False, True):
        bench.torch_grouped(a8, w8.transpose(-2, -1), sa, sb, offs, fast)()
    assert [(c["offs"], c["out_dtype"], c["use_fast_accum"]) for c in seen] == \
        [(offs, torch.bfloat16, False), (offs, torch.bfloat16, True)]
    assert all(c["args"][2] is sa and c["args"][3] is sb for c in seen)


def test_blockwise_loop_calls_torch_on_its_accepted_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fp8-blockwise kind's torch loop (bench_moe's per-expert call): each _scaled_mm on a window of a multiple of
    16 rows (cuBLASLt refuses ragged M) with scale_a (M, K/128) strides (1, M) (torch's 1x128 check; a slice of the
    whole scale_a has strides (1, rows)) and scale_b (K/128, N/128) column-major; the rows of every expert out."""
    calls: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def spy(a, b, scale_a, scale_b, out_dtype):  # noqa: ANN001, ANN202
        calls.append((a.shape[0], scale_a.stride(), scale_b.stride()))
        return torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    e, rows, n, k = 3, 40, 256, 256
    a = torch.randn(rows, k).to(torch.float8_e4m3fn)
    w = torch.randn(e, n, k).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(rows, k // 128) + 0.5, torch.rand(e, k // 128, n // 128) + 0.5
    offs = torch.tensor([0, 7, 40], dtype=torch.int32)
    out = bench.blockwise_loop(a, w, sa, sb, offs)()
    assert out.shape == (rows, n)
    assert [(m, st_a) for m, st_a, _ in calls] == [(16, (1, 16)), (48, (1, 48))]
    assert all(st_b == (1, k // 128) for _, _, st_b in calls)
