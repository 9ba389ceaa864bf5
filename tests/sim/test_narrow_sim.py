"""Rules 31 and 32's narrow and fitted tiles (`ir.Tiling.n_blocks`) on the CPU simulator: every schedule that takes
one (whole tiles of one to four consumer warpgroups, 128- and 256-wide slots, 192-row tiles, split-K, stream-K, fp8
rowwise with a bias), with one tile along N or many (where a store past a tile's tile_n columns would overwrite its
neighbour's: the simulator's coverage check counts every element's stores), runs clean of protocol findings and
computes the product. Random data against an fp32 reference (bf16 by `assert_close` at bf16's tolerance, fp8 by a
scale-free error), outputs poisoned with NaN beforehand, shapes that are not tile multiples."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from warploom import H100_SXM, DType, GemmSpec, ScaleRecipe
from warploom.kernel import build
from warploom.planner import plan_schedule

E4 = DType.E4M3

CASES = {
    # (M, N, K), forced plan options, column blocks
    "128x128_80": ((300, 80, 200), {"bm": 128, "bn": 128}, (64, 16)),
    "128x128_72_one_kblock": ((130, 72, 64), {"bm": 128, "bn": 128}, (64, 16)),
    "64x128_96": ((200, 90, 130), {"bm": 64, "bn": 128}, (64, 32)),
    "64x256_152": ((130, 152, 100), {"bm": 64, "bn": 256}, (128, 32)),
    "128x256_176_three_blocks": ((260, 176, 300), {"bm": 128, "bn": 256}, (128, 32, 16)),
    "128x256_1_column": ((140, 1, 70), {"bm": 128, "bn": 256}, (16,)),
    "split_k3": ((300, 80, 700), {"bm": 128, "bn": 128, "split_k": 3}, (64, 16)),
    "stream_k2": ((700, 96, 640), {"bm": 128, "bn": 128, "stream_k": 2}, (64, 32)),
    # fitted tiles, several along N (rule 32)
    "fitted_128x176": ((300, 400, 200), {"bm": 128, "bn": 256, "stream_k": 0}, (128, 32, 16)),
    "fitted_192x192": ((500, 400, 330), {"bm": 192, "bn": 256, "stream_k": 0}, (128, 64)),
    "fitted_192x96_ragged": ((197, 301, 72), {"bm": 192, "bn": 128, "stream_k": 0}, (64, 32)),
    "fitted_256x112": ((300, 250, 130), {"bm": 256, "bn": 128, "stream_k": 0}, (64, 32, 16)),
    "fitted_split_k3": ((200, 300, 1000), {"bm": 64, "bn": 128, "split_k": 3}, (64, 32, 16)),
    "fitted_stream_k2": ((700, 300, 640), {"bm": 128, "bn": 128, "stream_k": 2}, (64, 16)),
}


def narrow(spec: GemmSpec, options: dict[str, object], blocks: tuple[int, ...]):  # type: ignore[no-untyped-def]
    plan = plan_schedule(spec, H100_SXM, **options, n_blocks=blocks)  # type: ignore[arg-type]
    kern = build(spec, H100_SXM, plan)
    assert kern.module.tiling.n_blocks == blocks and kern.module.tiling.tile_n == sum(blocks) < plan.bn
    return kern


@pytest.mark.parametrize("case", CASES)
def test_bf16(case: str) -> None:
    (m, n, k), options, blocks = CASES[case]
    torch.manual_seed(0)
    kern = narrow(GemmSpec(m, n, k), options, blocks)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    r = kern.simulate(a, b, out=out)
    assert r.ok, r.findings[:3]
    torch.testing.assert_close(r.output.float(), a.float() @ b.float(), atol=0.1, rtol=1.6e-2)


def scale_free(x: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest error over the largest magnitude of the reference: independent of the data's scale."""
    return float((x.double() - ref.double()).abs().max() / ref.double().abs().max())


@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
def test_fp8_rowwise(bias: bool) -> None:
    """fp8 rowwise (with a bias) on 80-column tiles, three of them along N = 208."""
    torch.manual_seed(1)
    m, n, k = 260, 208, 300
    spec = GemmSpec(m, n, k, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, bias_dtype=DType.BF16 if bias else None)
    kern = narrow(spec, {"bm": 128, "bn": 128}, (64, 16))
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    bv = torch.randn(n).bfloat16() if bias else None
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    r = kern.simulate(a, b, sa, sb, bv, out=out)
    assert r.ok, r.findings[:3]
    ref = (a.float() @ b.float()) * sa * sb + (bv.float() if bv is not None else 0)
    assert scale_free(r.output, ref) < 1e-2


@settings(max_examples=16, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 400), width=st.integers(1, 11).map(lambda v: 16 * v),
       k=st.integers(1, 40).map(lambda v: 8 * v), bm=st.sampled_from([64, 128, 192]),
       schedule=st.sampled_from(["whole", "split_k", "stream_k"]), grid=st.integers(1, 5), seed=st.integers(0, 99))
def test_any_fitted_tile_matches(m: int, n: int, width: int, k: int, bm: int, schedule: str, grid: int,
                                 seed: int) -> None:
    """Tiles of any width up to 176 in power-of-two blocks (on a 128- or 256-wide slot, whichever holds it with
    blocks) over any N up to 400 (one tile along N or several), any M and K, 64, 128 or 192 rows, whole tiles, split-K
    or stream-K on a small persistent grid: the simulator runs clean and matches fp32."""
    bn = 128 if width <= 96 else 256
    blocks = tuple(1 << i for i in range(width.bit_length() - 1, 3, -1) if width >> i & 1)
    k_blocks = -(-k // 64)
    extra = {"whole": {}, "split_k": {"split_k": min(2, k_blocks)}, "stream_k": {"stream_k": 2}}[schedule]
    if schedule == "stream_k":  # (stream-K is built for 128-row tiles, and cuts a tile in at least 2 k-blocks)
        bm = 128
        if k_blocks < 2:
            extra = {}
    if bm == 192:  # (rule 32's 192-row tile: whole tiles only)
        extra = {"stream_k": 0}
    elif not extra:
        extra = {"stream_k": 0}
    spec = GemmSpec(m, n, k)
    plan = replace(plan_schedule(spec, H100_SXM, bm=bm, bn=bn, n_blocks=blocks, **extra),  # type: ignore[arg-type]
                   grid=grid if schedule != "stream_k" else max(grid, 2))
    kern = build(spec, H100_SXM, plan)
    assert kern.module.tiling.n_blocks == blocks
    torch.manual_seed(seed)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
    r = kern.simulate(a, b, out=torch.full((m, n), float("nan"), dtype=torch.bfloat16))
    assert r.ok, r.findings[:3]
    torch.testing.assert_close(r.output.float(), a.float() @ b.float(), atol=0.1, rtol=1.6e-2)
