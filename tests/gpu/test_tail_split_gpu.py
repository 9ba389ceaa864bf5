"""GPU tier for a split-K tail (Plan.tail_split, rule 15): the whole waves of tiles run in one ranged kernel, the
tiles left over as split-K units in a second, whose reduction maps each compact workspace box back to its tile.
Checked against fp32 references on shapes that are not tile multiples, with and without whole waves, bit-for-bit
repeatable, and inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from warploom import checks
from warploom.device import DeviceInfo
from warploom.ir.raster import tail_spans
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _kernel(spec: object, **kw: object) -> Kernel:
    dev = DeviceInfo.current()
    kern = build(spec, dev, plan_schedule(spec, dev, **kw))  # type: ignore[arg-type]
    assert kern.tail is not None and kern.module.tiling.ranged
    return kern


def _spans(kern: Kernel, m: int, n: int) -> tuple[int, int]:
    t = kern.module.tiling
    whole, rest = tail_spans(-(-m // t.bm) * -(-n // t.bn), t.grid)
    return whole.tiles, rest.tiles


# (M, N, K, bn, tail_split): whole waves and a tail at both tile widths, ragged M and N; the suite's shape.
SHAPES = [(2000, 1104, 1024, 128, 4), (2200, 2096, 2048, 256, 2), (4100, 2112, 7168, 256, 4),
          (4096, 2112, 7168, 128, 8)]


@pytest.mark.parametrize("m,n,k,bn,split", SHAPES)
def test_bf16(m: int, n: int, k: int, bn: int, split: int) -> None:
    torch.manual_seed(m + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a, b, None), bn=bn, tail_split=split)
    assert min(_spans(kern, m, n)) > 0
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        kern.run(a, b, out)
        outs.append(out)
    assert not outs[0].isnan().any()
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
    assert torch.equal(outs[0], outs[1])  # in-order reductions: the same bits every run


@pytest.mark.parametrize("recipe", ["rowwise_fast", "rowwise_exact", "blockwise"])
@pytest.mark.parametrize("m,n,k,bn,split", SHAPES)
def test_fp8(recipe: str, m: int, n: int, k: int, bn: int, split: int) -> None:
    torch.manual_seed(k)
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    if recipe.startswith("rowwise"):
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref = (a.float() @ b.float()) * sa * sb
    else:
        kb = -(-k // 128)
        sa, sb = torch.rand(m, kb, device="cuda") + 0.5, torch.rand(kb, -(-n // 128), device="cuda") + 0.5
        da, db = dequantized(a, b, sa, sb)
        ref = da @ db
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, recipe == "rowwise_fast")
    kern = _kernel(spec, bn=bn, tail_split=split)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out, sa, sb)
    assert not out.isnan().any()
    assert _err(out.float(), ref) < 1e-3


def test_a_kernel_planned_large_runs_a_small_problem_all_as_tail() -> None:
    """Sizes are run-time arguments: at fewer tiles than the planned grid there are no whole waves, and every
    tile runs as split-K units."""
    a = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2112, 2048, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a, b, None), bn=128, tail_split=4)
    small = a[:300]
    assert _spans(kern, 300, 2112) == (0, 3 * 17)
    out = torch.full((300, 2112), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(small, b, out)
    torch.testing.assert_close(out.float(), small.float() @ b.float(), atol=0.15, rtol=0.02)


def test_rule15_is_what_scaled_mm_runs_and_graphs_capture_it() -> None:
    """The planner's own choice at the suite's shape, run directly and in a CUDA graph; the public API's call is
    checked too (it runs whatever plan it finds, tuned or planned)."""
    import warploom

    m, n, k = 4096, 2112, 7168
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True)
    kern = build(spec, DeviceInfo.current())  # the planner's own choice (warploom.plan may find a tuned one)
    ref = (a.float() @ b.float()) * sa * sb
    if kern.tail is None:
        pytest.fail(f"rule 15 chose no tail at {m}x{n}x{k}: {kern.plan.short()}")
    assert _err(warploom.scaled_mm(a, b, sa, sb, use_fast_accum=True).float(), ref) < 1e-3
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kern.run(a, b, out, sa, sb)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        kern.run(a, b, out, sa, sb)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert not out.isnan().any()
    assert _err(out.float(), ref) < 1e-3


def test_a_k_that_does_not_split_runs_every_tile_whole() -> None:
    """K is a run-time argument: where its k-blocks do not form the tail's equal ranges, the launcher gives every
    tile to the main kernel, which takes any K."""
    m, n, k = 2000, 1104, 1024
    a = torch.randn(m, k + 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k + 64, device="cuda", dtype=torch.bfloat16).t()
    kern = _kernel(checks.matmul_spec(a[:, :k], b[:k], None), bn=128, tail_split=4)  # planned at 16 k-blocks
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern.run(a, b, out)  # 17 k-blocks: not 4 equal ranges
    torch.testing.assert_close(out.float(), a.float() @ b.float(), atol=0.15, rtol=0.02)
