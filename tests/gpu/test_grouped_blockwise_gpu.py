"""GPU tier for blockwise fp8 grouped GEMMs (DeepSeek-V3's MoE recipe: `warploom.scaled_grouped_mm` with scale_a
(total_M, ceil(K/128)) and scale_b (G, ceil(K/128), ceil(N/128))): against the fp32 dequantized product per expert
and, where this torch has a blockwise torch._scaled_mm (1x128 x 128x128) on this GPU, a per-expert loop of it; on
random routings (empty experts, ragged edges), K and N not multiples of 128, scales in the layouts users hold
(column-major scale_a as torch wants it, DeepGEMM's (G, N/128, K/128) scale_b as its transposed view); rows of no
expert untouched; DeepGEMM's masked layout and 3-D x 3-D batched calls; and a CUDA graph captured once and replayed
after the offsets changed in place."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]

BLOCK = 128


def _routing(seed: int, experts: int, rows: int) -> torch.Tensor:
    """Cumulative row ends over `rows` (a quarter of the experts empty), int32 on the GPU."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(experts, generator=g)
    w[torch.randperm(experts, generator=g)[: max(1, experts // 4)]] = 0
    counts = (w / w.sum() * rows).floor().long()
    counts[int(w.argmax())] += rows - int(counts.sum())
    return counts.cumsum(0).to(torch.int32).cuda()


def _spread(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Random positive fp32 scales over 2**-4 .. 2**4 on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = torch.exp2(torch.randint(-4, 5, shape, device="cuda", generator=g).float())
    return s * (torch.rand(shape, device="cuda", generator=g) + 0.5)


def _operands(experts: int, rows: int, n: int, k: int, seed: int, extra: int = 64
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """a (rows + extra, K) fp8 (rows past the routing's end too), w (G, N, K) fp8, scale_a (rows + extra, KB)
    column-major (torch's layout for 1x128 scales) and scale_b (G, KB, NB)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    a = (torch.randn(rows + extra, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(experts, n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    sa = _spread((rows + extra, kb), seed + 1).t().contiguous().t()
    return a, w, sa, _spread((experts, kb, nb), seed + 2)


def _dequantized_ref(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                     offs: torch.Tensor) -> torch.Tensor:
    """fp32 (offs[-1], N): each expert's rows of (a * scale_a) @ (w[g] * scale_b[g])^T, the scales expanded over
    their 128-element blocks."""
    k, n = a.shape[1], w.shape[1]
    da = a.float() * sa.repeat_interleave(BLOCK, dim=1)[:, :k]
    ends = [0, *offs.tolist()]
    out = torch.zeros(ends[-1], n, device="cuda")
    for g, (s, e) in enumerate(zip(ends[:-1], ends[1:], strict=True)):
        if e > s:
            sbg = sb[g].repeat_interleave(BLOCK, dim=0)[:k].repeat_interleave(BLOCK, dim=1)[:, :n]  # (K, N)
            out[s:e] = da[s:e] @ (w[g].float().t() * sbg)
    return out


def _torch_ref(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
               offs: torch.Tensor) -> torch.Tensor | None:
    """torch's own 1x128 x 128x128 kernel per expert (torch._scaled_mm with outer-dim-major scales), or None where
    this torch or GPU has none (or refuses an expert's row count)."""
    ends = [0, *offs.tolist()]
    out = torch.zeros(ends[-1], w.shape[1], device="cuda", dtype=torch.bfloat16)
    try:
        for g, (s, e) in enumerate(zip(ends[:-1], ends[1:], strict=True)):
            if e > s:
                out[s:e] = torch._scaled_mm(a[s:e], w[g].t(), sa[s:e].t().contiguous().t(),
                                            sb[g].t().contiguous().t(), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return None
    return out


# (experts, rows, N, K): 128x256, 128x128 and 64x128 tiles (rule 22); K = 2000 and N = 1544 not multiples of 128
SHAPES = [(8, 8192, 4096, 7168), (8, 1000, 2048, 1024), (16, 3000, 1544, 2000), (4, 100, 4096, 512)]


@pytest.mark.parametrize("experts,rows,n,k", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_blockwise_against_dequantized_and_torch(experts: int, rows: int, n: int, k: int, seed: int) -> None:
    offs = _routing(seed, experts, rows)
    a, w, sa, sb = _operands(experts, rows, n, k, seed)
    out = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs)
    end = int(offs[-1])
    assert out.shape == (rows + 64, n) and out.dtype == torch.bfloat16
    assert not out[:end].isnan().any()
    ref = _dequantized_ref(a, w, sa, sb, offs)
    assert _err(out[:end].float(), ref) < 1e-3
    theirs = _torch_ref(a, w, sa, sb, offs)
    if theirs is not None:  # at no larger error than torch's own per-expert kernel (slack for bf16 rounding)
        assert _err(out[:end].float(), ref) <= 1.5 * _err(theirs.float(), ref) + 1e-6


def test_blockwise_matches_torch_scaled_mm_per_expert() -> None:
    offs = _routing(3, 8, 2048)
    a, w, sa, sb = _operands(8, 2048, 2048, 2048, 3, extra=0)
    theirs = _torch_ref(a, w, sa, sb, offs)
    if theirs is None:
        pytest.skip("this torch has no blockwise (1x128 x 128x128) _scaled_mm on this GPU")
    ours = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs)
    assert _err(ours.float(), theirs.float()) < 1e-4


def test_blockwise_deepgemm_scale_layout_and_rows_of_no_expert() -> None:
    """DeepGEMM's (G, N/128, K/128) scale_b storage passed as its transposed view gives the same result as a
    contiguous (G, K/128, N/128) one; rows past offs[-1] are never written (the launcher's own output, poisoned)."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _launcher
    from warploom.kernel import build

    experts, rows, n, k = 4, 600, 1024, 1024
    offs = torch.tensor([100, 100, 350, 500], dtype=torch.int32, device="cuda")
    a, w, sa, sb = _operands(experts, rows, n, k, 7, extra=0)
    deepgemm = sb.transpose(-2, -1).contiguous()  # (G, NB, KB)
    y1 = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs)
    y2 = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, deepgemm.transpose(-2, -1), offs)
    assert torch.equal(y1[:500], y2[:500])
    call = grouped_call(a, w.transpose(-2, -1), offs, None, torch.bfloat16, sa, sb)
    kern = build(call.spec, warploom.DeviceInfo.current())
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _launcher(kern)(call.a, call.b, offs, out, sa, sb)
    torch.cuda.synchronize()
    assert out[500:].isnan().all()
    assert _err(out[:500].float(), _dequantized_ref(a, w, sa, sb, offs)) < 1e-3


def test_blockwise_special_scales_stay_in_their_expert() -> None:
    """A zero scale_b block of one expert zeroes that expert's columns only, a NaN one poisons that expert's rows
    only: a tile never reads another expert's scale_b."""
    experts, rows, n, k = 4, 512, 512, 512
    offs = torch.tensor([128, 200, 400, 512], dtype=torch.int32, device="cuda")
    a, w, sa, sb = _operands(experts, rows, n, k, 11, extra=0)
    sb[1, :, 2] = 0.0  # expert 1's columns 256..383: every k-block scaled to zero
    sb[2, 1, 0] = float("nan")  # expert 2's columns 0..127: one k-block NaN
    out = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs)
    assert (out[128:200, 256:384] == 0).all()
    assert out[200:400, :128].isnan().all()
    assert not out[:200].isnan().any() and not out[400:].isnan().any() and not out[200:400, 128:].isnan().any()
    assert not (out[:128, 256:384] == 0).all() and not (out[200:, 256:384] == 0).all()


@pytest.mark.parametrize("cap", [16, 64, 192])
def test_blockwise_masked_and_batched(cap: int) -> None:
    """DeepGEMM's masked layout (decode): a (G, M_max, K), counts masked_m, scale_a (G, M_max, KB); and 3-D x 3-D
    batched (every row), against the fp32 dequantized product per expert."""
    experts, n, k = 8, 4096, 2048
    a2, w, sa2, sb = _operands(experts, experts * cap, n, k, cap, extra=0)
    a, sa = a2.reshape(experts, cap, k), sa2.reshape(experts, cap, -1)
    counts = torch.randint(0, cap + 1, (experts,), dtype=torch.int32, device="cuda")
    counts[0] = 0
    out = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, masked_m=counts)
    full = torch.full((experts,), cap, dtype=torch.int32, device="cuda").cumsum(0).to(torch.int32)
    ref = _dequantized_ref(a2, w, sa2, sb, full).reshape(experts, cap, n)  # every row of every expert
    for g in range(experts):
        c = int(counts[g])
        if c:
            assert _err(out[g, :c].float(), ref[g, :c]) < 1e-3, f"expert {g}"
    batched = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb)
    assert _err(batched.float(), ref) < 1e-3


def test_blockwise_cuda_graph_replays_with_changed_offsets() -> None:
    experts, rows, n, k = 8, 4096, 2048, 1536
    a, w, sa, sb = _operands(experts, rows, n, k, 5, extra=0)
    b = w.transpose(-2, -1)
    offs = _routing(0, experts, rows)
    warploom.scaled_grouped_mm(a, b, sa, sb, offs)  # compiled and warmed up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = warploom.scaled_grouped_mm(a, b, sa, sb, offs)
    for seed in range(1, 4):
        offs.copy_(_routing(seed, experts, rows))  # in place: the graph reads the new routing on the device
        graph.replay()
        torch.cuda.synchronize()
        assert _err(out.float(), _dequantized_ref(a, w, sa, sb, offs)) < 1e-3, f"replay {seed}"
