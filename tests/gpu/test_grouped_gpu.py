"""GPU tier for grouped GEMMs (warploom.grouped_mm / scaled_grouped_mm, ir.Tiling.grouping): against
torch._grouped_mm and torch._scaled_grouped_mm on random routings (empty experts, ragged edges), the masked and
batched layouts against fp32 references, rows outside every expert untouched, and a CUDA graph captured once and
replayed after the offsets changed in place (the tile-to-expert map is computed on the device); forced stream-K
plans (`test_stream_k_*`: NaN-poisoned, bitwise repeatable, flags reset, graph replays that change the last round's
shared tiles; written without a GPU, session gsk). The K-grouped
blockwise fp8 tests (`test_k_grouped_blockwise_*`) were written without a GPU (session kgroup-blockwise): the
simulator and compile tiers pass them, the device has not run them yet; nor the fused-epilogue tests on every layout
and recipe (`test_fused_epilogue_*`, session grouped-epilogue) and on the K-grouped weight gradient
(`test_k_grouped_*fused*`, session kgep), whose references were checked on CPU tensors with the simulator standing in
for the launch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import warploom
from warploom.reference import relative_error as _err

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]


def _routing(seed: int, experts: int, rows: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(experts, generator=g)
    w[torch.randperm(experts, generator=g)[: experts // 4]] = 0  # empty experts
    counts = (w / w.sum() * rows).floor().long()
    counts[int(w.argmax())] += rows - int(counts.sum())
    return counts.cumsum(0).to(torch.int32).cuda()


def _graph(call):  # noqa: ANN001, ANN202
    """`call` compiled and warmed up outside the capture, then captured once: (the graph, its output)."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    return graph, out


def _rows(offs: torch.Tensor) -> int:
    return int(offs[-1])


SHAPES = [(8, 8192, 4096, 7168), (8, 1000, 2048, 1024), (16, 3000, 1536, 2048), (4, 100, 4096, 512)]


@pytest.mark.parametrize("experts,rows,n,k", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_bf16_against_torch_grouped_mm(experts: int, rows: int, n: int, k: int, seed: int) -> None:
    torch.manual_seed(seed)
    offs = _routing(seed, experts, rows)
    a = torch.randn(rows + 64, k, device="cuda", dtype=torch.bfloat16)  # 64 rows past offs[-1]
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
    out = warploom.grouped_mm(a, w.transpose(-2, -1), offs)
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    end = _rows(offs)
    assert _err(out[:end], ref[:end]) < 1e-2


def test_bf16_n_major_b() -> None:
    offs = _routing(3, 8, 2048)
    a = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8, 1024, 2048, device="cuda", dtype=torch.bfloat16)  # (G, K, N) contiguous
    out = warploom.grouped_mm(a, w, offs)
    ref = torch._grouped_mm(a, w, offs=offs)
    assert _err(out, ref) < 1e-2


@pytest.mark.parametrize("experts,rows,n,k", SHAPES)
@pytest.mark.parametrize("fast", [False, True])
def test_fp8_rowwise_against_torch_scaled_grouped_mm(experts: int, rows: int, n: int, k: int, fast: bool) -> None:
    torch.manual_seed(rows)
    offs = _routing(rows, experts, rows)
    a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.rand(rows, device="cuda") + 0.5
    sb = torch.rand(experts, n, device="cuda") + 0.5
    out = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs, use_fast_accum=fast)
    ref = torch._scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                   use_fast_accum=fast)
    assert _err(out, ref) < 2e-2


def test_rows_of_no_expert_are_not_written() -> None:
    offs = torch.tensor([100, 100, 300], dtype=torch.int32, device="cuda")
    a = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3, 256, 256, device="cuda", dtype=torch.bfloat16)
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _launcher

    call = grouped_call(a, w.transpose(-2, -1), offs)
    from warploom.kernel import build

    kern = build(call.spec, warploom.DeviceInfo.current())
    out = torch.full((512, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    _launcher(kern)(call.a, call.b, offs, out)
    torch.cuda.synchronize()
    assert out[300:].isnan().all()
    ref = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
    assert _err(out[:300], ref[:300]) < 1e-2


@pytest.mark.parametrize("cap", [16, 64, 192])
def test_masked_and_batched(cap: int) -> None:
    experts, n, k = 8, 4096, 2048
    a = torch.randn(experts, cap, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
    counts = torch.randint(0, cap + 1, (experts,), dtype=torch.int32, device="cuda")
    counts[0] = 0
    out = warploom.grouped_mm(a, w.transpose(-2, -1), masked_m=counts)
    ref = torch.bmm(a.float(), w.float().transpose(1, 2))
    for g in range(experts):
        c = int(counts[g])
        if c:
            assert _err(out[g, :c], ref[g, :c]) < 1e-2
    full = warploom.grouped_mm(a, w.transpose(-2, -1))
    assert _err(full, ref) < 1e-2


def test_cuda_graph_replays_with_changed_offsets() -> None:
    experts, rows, n, k = 8, 4096, 2048, 1024
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    offs = _routing(0, experts, rows)
    graph, out = _graph(lambda: warploom.grouped_mm(a, w, offs))
    for seed in range(1, 5):
        offs.copy_(_routing(seed, experts, rows))  # in place: the graph reads the new routing on the device
        graph.replay()
        torch.cuda.synchronize()
        ref = torch._grouped_mm(a, w, offs=offs)
        assert _err(out, ref) < 1e-2, f"replay {seed}"


def test_cuda_graph_fp8_rowwise() -> None:
    experts, rows, n, k = 8, 2048, 2048, 1024
    a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(rows, device="cuda") + 0.5, torch.rand(experts, n, device="cuda") + 0.5
    offs = _routing(0, experts, rows)
    graph, out = _graph(lambda: warploom.scaled_grouped_mm(a, w, sa, sb, offs))
    for seed in (5, 6):
        offs.copy_(_routing(seed, experts, rows))
        graph.replay()
        torch.cuda.synchronize()
        ref = torch._scaled_grouped_mm(a, w, sa, sb, offs=offs, out_dtype=torch.bfloat16)
        assert _err(out, ref) < 2e-2


# ---- the K-grouped weight gradient: a (M, total_K) x b (total_K, N) -> (G, M, N), offs over K ----

def _k_offsets(seed: int, groups: int, total_k: int, multiple: int = 1) -> torch.Tensor:
    """Random cumulative K ends (a quarter of the groups empty), each a multiple of `multiple`, the last total_K."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(groups, generator=g)
    w[torch.randperm(groups, generator=g)[: max(1, groups // 4)]] = 0
    ends = ((w.cumsum(0) / w.sum() * total_k) // multiple * multiple).long()
    ends[-1] = total_k
    return ends.to(torch.int32).cuda()


def _check_k_groups(out: torch.Tensor, ref: torch.Tensor, offs: torch.Tensor) -> None:
    """Each group's (M, N) block of `out` against `ref`'s, an empty group's exactly 0 (torch's)."""
    ends = [0, *offs.tolist()]
    for g in range(offs.shape[0]):
        if ends[g + 1] == ends[g]:
            assert bool((out[g] == 0).all()), f"empty group {g}: zeros"
        else:
            assert _err(out[g], ref[g]) < 1e-2, f"group {g}"


def _k_ref(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    ends = [0, *offs.tolist()]
    return torch.stack([a[:, s:e].float() @ b[s:e].float() for s, e in zip(ends[:-1], ends[1:], strict=True)])


K_SHAPES = [(8, 2048, 4096, 8192), (32, 512, 1024, 6000), (4, 200, 7168, 1000)]


@pytest.mark.parametrize("groups,m,n,total_k", K_SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_k_grouped_bf16_against_fp32(groups: int, m: int, n: int, total_k: int, seed: int) -> None:
    torch.manual_seed(seed)
    offs = _k_offsets(seed, groups, total_k)  # ends at any column: partial k-blocks, empty groups
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()  # torch's column-major (total_K, N)
    out = warploom.grouped_mm(a, b, offs)
    assert out.shape == (groups, m, n)
    _check_k_groups(out, _k_ref(a, b, offs), offs)


def test_k_grouped_against_torch_grouped_mm() -> None:
    groups, m, n, total_k = 8, 1024, 2048, 4096
    offs = _k_offsets(2, groups, total_k, multiple=16)  # (ends torch's kernel surely takes)
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()
    assert _err(warploom.grouped_mm(a, b, offs), torch._grouped_mm(a, b, offs=offs)) < 1e-2


def test_k_grouped_fp16_n_major() -> None:
    offs = _k_offsets(4, 6, 3000)
    a = torch.randn(384, 3000, device="cuda", dtype=torch.float16)
    b = torch.randn(3000, 1024, device="cuda", dtype=torch.float16)  # contiguous (total_K, N)
    out = warploom.grouped_mm(a, b, offs)
    assert _err(out, _k_ref(a, b, offs)) < 1e-2


def test_k_grouped_cuda_graph_replays_with_changed_offsets() -> None:
    # (M != N: a (G, M) operand at M == N would be ambiguous, per row or per group's columns, and is refused)
    groups, m, n, total_k = 8, 1024, 1040, 4000
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()
    offs = _k_offsets(0, groups, total_k)
    graph, out = _graph(lambda: warploom.grouped_mm(a, b, offs))
    for seed in range(1, 4):
        offs.copy_(_k_offsets(seed, groups, total_k))
        graph.replay()
        torch.cuda.synchronize()
        assert _err(out, _k_ref(a, b, offs)) < 1e-2, f"replay {seed}"


# ---- K-grouped blockwise fp8 (1x128 x 128x128 over the grouped K space): written without a GPU, not yet run ----

def _kbw_operands(m: int, n: int, total_k: int, seed: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (M, total_K) and b (total_K, N) column-major (torch's: a contiguous (N, total_K) seen as .t()), fp32
    scale_a (M, KB) and scale_b (KB, NB) spread over 2**-4 .. 2**4, so a neighbour block's scale is visibly wrong."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = -(-total_k // 128), -(-n // 128)
    a = (torch.randn(m, total_k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, total_k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()

    def spread(shape: tuple[int, int]) -> torch.Tensor:
        e = torch.randint(-4, 5, shape, device="cuda", generator=g).float()
        return torch.exp2(e) * (torch.rand(shape, device="cuda", generator=g) + 0.5)

    return a, b, spread((m, kb)), spread((kb, nb))


def _kbw_ref(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, offs: torch.Tensor
             ) -> torch.Tensor:
    """fp32 (G, M, N): a per-group loop of torch products of the dequantized operands (a[:, k] * scale_a[:, k // 128],
    b[k, n] * scale_b[k // 128, n // 128]) over each group's K range; zeros for an empty one."""
    k, n = b.shape
    da = a.float() * sa.repeat_interleave(128, dim=1)[:, :k]
    db = b.float() * sb.repeat_interleave(128, dim=0)[:k].repeat_interleave(128, dim=1)[:, :n]
    ends = [0, *offs.tolist()]
    return torch.stack([da[:, s:e] @ db[s:e] for s, e in zip(ends[:-1], ends[1:], strict=True)])


# (groups, M, N, total_K): 128x256, 128x128 and 64x128 tiles (rule 22 from M); total_K 6000 and N 1544 are not
# multiples of 128 (the last group's last k-block is partial, the last scale block of N ragged); every total_K is a
# multiple of 16, as TMA's 16-byte row strides require of fp8 rows (1000 is refused by name, an AlignmentError on a)
KBW_SHAPES = [(8, 2048, 4096, 8192), (32, 512, 1544, 6000), (4, 64, 7168, 1008)]


@pytest.mark.parametrize("groups,m,n,total_k", KBW_SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_k_grouped_blockwise_against_dequantized(groups: int, m: int, n: int, total_k: int, seed: int) -> None:
    """K-grouped blockwise fp8 (the weight gradient's recipe) against a per-group loop of fp32 torch products of the
    dequantized operands: each group's K range on the 128 grid (the last at total_K), a quarter of them empty
    (exact zeros, as torch's K-grouped op gives); every element finite (the result comes from torch.empty)."""
    offs = _k_offsets(seed, groups, total_k, multiple=128)
    a, b, sa, sb = _kbw_operands(m, n, total_k, seed)
    out = warploom.scaled_grouped_mm(a, b, sa, sb, offs)
    assert out.shape == (groups, m, n) and out.dtype == torch.bfloat16
    assert bool(out.isfinite().all())
    _check_k_groups(out, _kbw_ref(a, b, sa, sb, offs), offs)


def test_k_grouped_blockwise_scale_layouts_and_cuda_graph() -> None:
    """scale_b stored (NB, KB) (DeepGEMM's order) as its .t() view and a column-major scale_a give the same result
    as contiguous ones; a CUDA graph captured once replays with new offsets (the K ranges are read on the device)."""
    groups, m, n, total_k = 8, 1024, 2048, 4096
    a, b, sa, sb = _kbw_operands(m, n, total_k, 7)
    offs = _k_offsets(0, groups, total_k, multiple=128)
    plain = warploom.scaled_grouped_mm(a, b, sa, sb, offs)
    strided = warploom.scaled_grouped_mm(a, b, sa.t().contiguous().t(), sb.t().contiguous().t(), offs)
    assert torch.equal(plain, strided)
    graph, out = _graph(lambda: warploom.scaled_grouped_mm(a, b, sa, sb, offs))
    for seed in range(1, 4):
        offs.copy_(_k_offsets(seed, groups, total_k, multiple=128))
        graph.replay()
        torch.cuda.synchronize()
        assert _err(out, _kbw_ref(a, b, sa, sb, offs)) < 1e-2, f"replay {seed}"


# ---- fused epilogues on the K-grouped weight gradient (session kgep: written without a GPU, not yet run) ----

def _kf_launch(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, ops: dict[str, torch.Tensor], fn,  # noqa: ANN001
               out_dtype: torch.dtype | None = None, scale_a: torch.Tensor | None = None,
               scale_b: torch.Tensor | None = None, fast: bool = False) -> torch.Tensor:
    """The API's path (the checks, `grouped._fused`, the kernel; rowwise scales as scaled_grouped_mm passes them, a
    (G * M, 1) column and a (G, 1, N) row) launched into a NaN-poisoned (G * M, N) output, returned (G, M, N): an
    element the kernel did not store stays NaN."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _fused, _launcher
    from warploom.kernel import build

    call = grouped_call(a, b, offs, None, out_dtype, scale_a, scale_b, fast)
    if scale_a is not None and scale_a.dim() == 1:  # rowwise: the graph's operands
        scale_a, scale_b = scale_a[:, None], scale_b.reshape(call.spec.groups, 1, call.spec.n)
    call, sa, sb, picked = _fused(call, fn, ops, scale_a=scale_a, scale_b=scale_b)
    kern = build(call.spec, warploom.DeviceInfo.current())
    groups, m, n = call.out_shape
    out = torch.full((groups * m, n), float("nan"), device="cuda", dtype=call.spec.output_dtypes()[0].torch)
    _launcher(kern)(call.a, call.b, call.bounds, out, sa, sb, picked)
    torch.cuda.synchronize()
    return out.reshape(groups, m, n)


def _kf_operands(groups: int, m: int, n: int, seed: int) -> dict[str, torch.Tensor]:
    """An update's operands against the (G, M, N) result: an fp32 gradient, a per-group rate, per-(group, row) and
    per-(group, column) bf16 factors, per-group values far apart (a neighbour group's would show)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return {"grad": torch.randn(groups, m, n, device="cuda", generator=g),
            "lr": torch.arange(1, groups + 1, device="cuda", dtype=torch.float32) * 0.5,
            "row": (torch.rand(groups, m, device="cuda", generator=g) + 0.5).bfloat16(),
            "col": (torch.randn(groups, n, device="cuda", generator=g)
                    + torch.arange(groups, device="cuda")[:, None]).bfloat16()}


def _kf_fn(acc, grad, lr, row, col):  # noqa: ANN001, ANN201
    return grad + acc * lr * row * col


def _kf_ref(y: torch.Tensor, ops: dict[str, torch.Tensor]) -> torch.Tensor:
    """`_kf_fn` in fp32 on the (G, M, N) per-group products `y`, each operand broadcast at its group."""
    groups = y.shape[0]
    return (ops["grad"] + y * ops["lr"].reshape(groups, 1, 1) * ops["row"].float()[..., None]
            * ops["col"].float()[:, None, :])


@pytest.mark.parametrize("groups,m,n,total_k", K_SHAPES)
def test_k_grouped_fused_update_fp32(groups: int, m: int, n: int, total_k: int) -> None:
    """bf16 weight gradient with its update fused, fp32 out, NaN-poisoned: every element stored; against a torch loop
    of fp32 per-group products (ends at any column, empty groups: exactly grad, the function of 0)."""
    offs = _k_offsets(groups, groups, total_k)
    torch.manual_seed(groups)
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()
    ops = _kf_operands(groups, m, n, groups)
    out = _kf_launch(a, b, offs, ops, _kf_fn, torch.float32)
    assert out.dtype == torch.float32 and bool(out.isfinite().all())
    ref = _kf_ref(_k_ref(a, b, offs), ops)
    ends = [0, *offs.tolist()]
    for g in range(groups):
        if ends[g + 1] == ends[g]:
            assert torch.equal(out[g], ops["grad"][g]), f"empty group {g}: grad + 0"
        else:
            assert _err(out[g], ref[g]) < 1e-3, f"group {g}"


def test_k_grouped_fused_accumulate_bf16_through_the_api() -> None:
    """The framework's accumulation, ``grouped_mm(a, b, offs, epilogue=lambda acc, grad: grad + acc, grad=grad)``
    with a bf16 (G, M, N) gradient: bf16 out, against fp32 torch."""
    groups, m, n, total_k = 8, 1024, 2048, 5000
    offs = _k_offsets(5, groups, total_k)
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()
    grad = torch.randn(groups, m, n, device="cuda", dtype=torch.bfloat16) * 30
    out = warploom.grouped_mm(a, b, offs, epilogue=lambda acc, grad: grad + acc, grad=grad)
    assert out.shape == (groups, m, n) and out.dtype == torch.bfloat16
    assert _err(out, grad.float() + _k_ref(a, b, offs)) < 1e-2


@pytest.mark.parametrize("groups,m,n,total_k", KBW_SHAPES)
def test_k_grouped_blockwise_fused_update(groups: int, m: int, n: int, total_k: int) -> None:
    """Blockwise fp8 K-grouped with the update fused (acc the promoted sum), fp32 out by the function's .float(),
    NaN-poisoned, against the dequantized fp32 loop."""
    offs = _k_offsets(groups + 1, groups, total_k, multiple=128)
    a, b, sa, sb = _kbw_operands(m, n, total_k, groups)
    ops = _kf_operands(groups, m, n, groups + 1)
    out = _kf_launch(a, b, offs, ops, lambda acc, grad, lr, row, col: _kf_fn(acc, grad, lr, row, col).float(),
                     scale_a=sa, scale_b=sb)
    assert out.dtype == torch.float32 and bool(out.isfinite().all())
    ref = _kf_ref(_kbw_ref(a, b, sa, sb, offs), ops)
    for g in range(groups):
        assert _err(out[g], ref[g]) < 1e-2, f"group {g}"


def test_k_grouped_fused_cuda_graph_replays_with_changed_offsets() -> None:
    """A fused K-grouped call captured once, replayed after the offsets changed in place: each replay's K ranges
    (and so which groups are empty) are the new ones; the per-group operands stay at their groups."""
    # (M != N: a (G, M) operand at M == N would be ambiguous, per row or per group's columns, and is refused)
    groups, m, n, total_k = 8, 1024, 1040, 4000
    a = torch.randn(m, total_k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, total_k, device="cuda", dtype=torch.bfloat16).t()
    ops = _kf_operands(groups, m, n, 3)
    offs = _k_offsets(0, groups, total_k)
    graph, out = _graph(lambda: warploom.grouped_mm(a, b, offs, out_dtype=torch.float32, epilogue=_kf_fn, **ops))
    for seed in range(1, 4):
        offs.copy_(_k_offsets(seed, groups, total_k))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bool(out.isfinite().all()), f"replay {seed}: an element not stored"
        assert _err(out, _kf_ref(_k_ref(a, b, offs), ops)) < 1e-3, f"replay {seed}"


def _krw_operands(groups: int, m: int, n: int, total_k: int, seed: int) -> tuple[torch.Tensor, ...]:
    """fp8 a (M, total_K), b (total_K, N) column-major, torch's rowwise K-grouped scales scale_a (G * M,) and
    scale_b (G * N,) fp32."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, total_k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, total_k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    return (a, b, torch.rand(groups * m, device="cuda", generator=g) + 0.5,
            torch.rand(groups * n, device="cuda", generator=g) + 0.5)


def _krw_ref(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, offs: torch.Tensor
             ) -> torch.Tensor:
    """fp32 (G, M, N): each group's product scaled by its own rows' (sa[g * M + r]) and columns' (sb[g * N + c])."""
    groups, m, n = offs.shape[0], a.shape[0], b.shape[1]
    return _k_ref(a, b, offs) * sa.reshape(groups, m, 1) * sb.reshape(groups, 1, n)


@pytest.mark.parametrize("groups,m,n,total_k", KBW_SHAPES)
@pytest.mark.parametrize("fast", [False, True])
def test_k_grouped_rowwise(groups: int, m: int, n: int, total_k: int, fast: bool) -> None:
    """Rowwise fp8 K-grouped (session kgep): unfused against the fp32 loop (empty groups exactly 0), then with the
    update fused, fp32 out by ``.float()``, NaN-poisoned."""
    offs = _k_offsets(groups + 2, groups, total_k, multiple=16)
    a, b, sa, sb = _krw_operands(groups, m, n, total_k, groups)
    out = warploom.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)
    y = _krw_ref(a, b, sa, sb, offs)
    _check_k_groups(out, y, offs)
    ops = _kf_operands(groups, m, n, groups + 3)
    fused = _kf_launch(a, b, offs, ops, lambda acc, grad, lr, row, col: _kf_fn(acc, grad, lr, row, col).float(),
                       scale_a=sa, scale_b=sb, fast=fast)
    assert fused.dtype == torch.float32 and bool(fused.isfinite().all())
    ref = _kf_ref(y, ops)
    # (fast accumulation keeps fewer bits in the tensor cores over K up to 8192: the unfused check's 1e-2; promoted
    # accumulation is fp32's)
    tol = 1e-2 if fast else 1e-3
    for g in range(groups):
        assert _err(fused[g], ref[g]) < tol, f"group {g}"


def test_k_grouped_rowwise_cuda_graph() -> None:
    """A rowwise fused K-grouped call captured once, replayed with new offsets."""
    groups, m, n, total_k = 8, 1024, 2048, 4096
    a, b, sa, sb = _krw_operands(groups, m, n, total_k, 5)
    grad = torch.randn(groups, m, n, device="cuda")
    offs = _k_offsets(0, groups, total_k, multiple=16)
    graph, out = _graph(lambda: warploom.scaled_grouped_mm(a, b, sa, sb, offs, epilogue=lambda acc, grad:
                                                           (grad + acc).float(), grad=grad))
    for seed in range(1, 4):
        offs.copy_(_k_offsets(seed, groups, total_k, multiple=16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert bool(out.isfinite().all()), f"replay {seed}"
        assert _err(out, grad + _krw_ref(a, b, sa, sb, offs)) < 1e-3, f"replay {seed}"


# ---- fused epilogues on M-grouped kernels (an MoE up projection's SiLU-mul, operands in the grouped row space) ----

@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 2048, 7168), (32, 4000, 1024, 2048)])
def test_fused_silu_mul_epilogue(experts: int, rows: int, n: int, k: int) -> None:
    import torch.nn.functional as F

    def fn(acc: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.silu(gate.float()) * acc * weight

    torch.manual_seed(0)
    offs = _routing(5, experts, rows)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    gate = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(rows, 1, device="cuda")
    graph, out = _graph(lambda: warploom.grouped_mm(a, w, offs, epilogue=fn, gate=gate, weight=weight))
    for seed in (5, 6):  # (the first replay: the routing captured; the second: another, changed in place)
        offs.copy_(_routing(seed, experts, rows))
        graph.replay()
        torch.cuda.synchronize()
        end = _rows(offs)
        ref = fn(torch._grouped_mm(a, w, offs=offs).float(), gate, weight)
        assert _err(out[:end], ref[:end]) < 1e-2, f"routing {seed}"


# ---- per-expert epilogue operands: a (G, N) bias and a (G,) output scale read at each tile's expert ----

def _per_expert_ref(y: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor,
                    weight: torch.Tensor) -> torch.Tensor:
    """torch's own: the expert of each row from offs, its bias row and scale gathered, in fp32."""
    rows = torch.arange(y.shape[0], device=y.device, dtype=offs.dtype)
    e = torch.searchsorted(offs, rows, right=True).clamp(max=bias.shape[0] - 1)
    return (y.float() + bias.reshape(bias.shape[0], -1).float()[e]) * scale.reshape(-1)[e, None] * weight


@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 4096, 2048), (32, 3000, 1536, 1024), (4, 100, 2048, 512)])
@pytest.mark.parametrize("three_d", [False, True])
def test_per_expert_bias_and_scale(experts: int, rows: int, n: int, k: int, three_d: bool) -> None:
    def fn(acc: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (acc + bias) * scale * weight

    torch.manual_seed(experts)
    offs = _routing(experts, experts, rows)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    bias = torch.randn(experts, n, device="cuda", dtype=torch.bfloat16) * 8  # (large: a wrong expert's row shows)
    scale = torch.rand(experts, device="cuda") * 3 + 0.25
    if three_d:
        bias, scale = bias.reshape(experts, 1, n), scale.reshape(experts, 1, 1)
    weight = torch.rand(rows, 1, device="cuda")
    graph, out = _graph(lambda: warploom.grouped_mm(a, w, offs, epilogue=fn, bias=bias, scale=scale, weight=weight))
    for seed in (experts, experts + 1):  # (the captured routing, then another changed in place)
        offs.copy_(_routing(seed, experts, rows))
        graph.replay()
        torch.cuda.synchronize()
        end = _rows(offs)
        ref = _per_expert_ref(torch._grouped_mm(a, w, offs=offs), offs, bias, scale, weight)
        assert _err(out[:end], ref[:end]) < 1e-2, f"routing {seed}"


# ---- fused epilogues on every grouped layout and recipe (session grouped-epilogue; written without a GPU: the
# simulator and compile tiers pass the same kernels, the device has not run these yet) ----

def _moe_fn(acc: torch.Tensor, gate: torch.Tensor, ebias: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """An MoE gate/up epilogue: SiLU of the gate times the product plus a per-expert bias, by each row's weight
    (the bias is not named bias: scaled_mm's reserved names)."""
    import torch.nn.functional as F

    return F.silu(gate.float()) * (acc + ebias) * weight


def _expert_of_rows(offs: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.searchsorted(offs, torch.arange(rows, device=offs.device, dtype=offs.dtype), right=True
                              ).clamp(max=offs.shape[0] - 1)


def _dequant_blockwise(x: torch.Tensor, s: torch.Tensor, rows_per_scale: int,
                       dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """fp8 x (..., R, C) times its 1x128 (rows_per_scale 1) or 128x128 (128) scales s (..., ceil(R/r), ceil(C/128)),
    rounded to bf16 by default (torch._grouped_mm takes bf16 on CUDA; 2^-9 relative per element, inside an output
    tolerance but not inside a per-element one: pass float32 for those)."""
    r, c = x.shape[-2:]
    full = s.repeat_interleave(rows_per_scale, -2)[..., :r, :].repeat_interleave(128, -1)[..., :c]
    return (x.float() * full).to(dtype)


def _grouped_fp32(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The M-grouped product in fp32, one matmul an expert (rows past offs[-1] stay zero)."""
    out = torch.zeros(a.shape[0], w.shape[-1], device=a.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        out[start:end] = a[start:end] @ w[g]
        start = end
    return out


@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 4096, 7168), (32, 3000, 1536, 2048), (4, 100, 2048, 512)])
@pytest.mark.parametrize("fast", [False, True])
def test_fused_epilogue_fp8_rowwise(experts: int, rows: int, n: int, k: int, fast: bool) -> None:
    """scaled_grouped_mm(..., epilogue=fn): fn's acc is the scaled product, against torch._scaled_grouped_mm
    followed by fn in fp32, in a CUDA graph replayed with the offsets changed in place."""
    torch.manual_seed(rows)
    offs = _routing(rows, experts, rows)
    a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(rows, device="cuda") + 0.5, torch.rand(experts, n, device="cuda") + 0.5
    gate = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    ebias = torch.randn(experts, n, device="cuda", dtype=torch.bfloat16) * 8  # (large: a wrong expert's row shows)
    weight = torch.rand(rows, 1, device="cuda")
    graph, out = _graph(lambda: warploom.scaled_grouped_mm(a, w, sa, sb, offs, use_fast_accum=fast, epilogue=_moe_fn,
                                                           gate=gate, ebias=ebias, weight=weight))
    for seed in (rows, rows + 1):
        offs.copy_(_routing(seed, experts, rows))
        graph.replay()
        torch.cuda.synchronize()
        end = _rows(offs)
        y = torch._scaled_grouped_mm(a, w, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=fast)
        ref = _moe_fn(y.float(), gate, ebias.float()[_expert_of_rows(offs, rows)], weight)
        assert _err(out[:end], ref[:end]) < 2e-2, f"routing {seed}"


@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 4096, 7168), (32, 3000, 1536, 2048)])
def test_fused_epilogue_fp8_blockwise(experts: int, rows: int, n: int, k: int) -> None:
    """Blockwise 1x128 x 128x128 M-grouped with a fused epilogue, against torch._grouped_mm on the dequantized
    operands (torch has no blockwise grouped op) followed by fn in fp32."""
    torch.manual_seed(rows)
    offs = _routing(rows + 2, experts, rows)
    kb, nb = -(-k // 128), -(-n // 128)
    a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(rows, kb, device="cuda") + 0.5, torch.rand(experts, kb, nb, device="cuda") + 0.5
    gate = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    ebias = torch.randn(experts, n, device="cuda", dtype=torch.bfloat16) * 8
    weight = torch.rand(rows, 1, device="cuda")
    out = warploom.scaled_grouped_mm(a, w, sa, sb, offs, epilogue=_moe_fn, gate=gate, ebias=ebias, weight=weight)
    y = torch._grouped_mm(_dequant_blockwise(a, sa, 1), _dequant_blockwise(w, sb, 128), offs=offs)
    ref = _moe_fn(y.float(), gate, ebias.float()[_expert_of_rows(offs, rows)], weight)
    end = _rows(offs)
    assert _err(out[:end], ref[:end]) < 2e-2


@pytest.mark.parametrize("recipe", ["bf16", "rowwise", "blockwise"])
@pytest.mark.parametrize("cap", [64, 192])
def test_fused_epilogue_masked(recipe: str, cap: int) -> None:
    """The masked layout with a dense (G, M_max, N) gate, a per-row (G, M_max) weight and a per-expert (G, N) bias,
    launched into a NaN-poisoned output: rows at or past a count stay NaN; the others against torch._grouped_mm
    (3-D x 3-D, on bf16-dequantized operands for fp8) followed by fn in fp32."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _fused, _launcher
    from warploom.kernel import build

    experts, n, k = 8, 2048, 1024
    torch.manual_seed(cap)
    counts = torch.randint(1, cap, (experts,), dtype=torch.int32, device="cuda")
    counts[0], counts[1] = 0, cap
    gate = torch.randn(experts, cap, n, device="cuda", dtype=torch.bfloat16)
    ebias = torch.randn(experts, n, device="cuda", dtype=torch.bfloat16) * 8
    weight = torch.rand(experts, cap, device="cuda")
    ops = {"gate": gate, "ebias": ebias, "weight": weight}
    a = torch.randn(experts, cap, k, device="cuda")
    w = torch.randn(experts, n, k, device="cuda").transpose(-2, -1)
    if recipe == "bf16":
        a, w = a.bfloat16(), w.bfloat16()
        call, sa, sb, picked = _fused(grouped_call(a, w, None, counts), _moe_fn, ops)
        y = torch._grouped_mm(a, w).float()
    elif recipe == "rowwise":
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa, sb = torch.rand(experts, cap, device="cuda") + 0.5, torch.rand(experts, n, device="cuda") + 0.5
        y = torch._grouped_mm((a.float() * sa.reshape(experts, cap, 1)).bfloat16(),
                              (w.float() * sb[:, None, :]).bfloat16())
        call, sa, sb, picked = _fused(grouped_call(a, w, None, counts, torch.bfloat16, sa, sb, True), _moe_fn, ops,
                                      scale_a=sa.reshape(-1, 1), scale_b=sb.unsqueeze(1))
    else:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.rand(experts, cap, k // 128, device="cuda") + 0.5
        sb = torch.rand(experts, k // 128, n // 128, device="cuda") + 0.5
        y = torch._grouped_mm(_dequant_blockwise(a, sa, 1), _dequant_blockwise(w, sb, 128))
        call, sa, sb, picked = _fused(grouped_call(a, w, None, counts, torch.bfloat16, sa, sb), _moe_fn, ops,
                                      scale_a=sa.flatten(0, -2), scale_b=sb)
    kern = build(call.spec, warploom.DeviceInfo.current())
    out = torch.full((experts * cap, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    _launcher(kern)(call.a, call.b, counts, out, sa, sb, picked)
    torch.cuda.synchronize()
    out = out.reshape(experts, cap, n)
    ref = _moe_fn(y.float(), gate, ebias.float()[:, None, :], weight[..., None])
    for g in range(experts):
        c = int(counts[g])
        assert out[g, c:].isnan().all(), f"expert {g}: rows past its count written"
        if c:
            assert _err(out[g, :c], ref[g, :c]) < 2e-2, f"expert {g}"


def test_fused_epilogue_batched_through_the_api() -> None:
    """3-D x 3-D batched with (G, 1, N), (G, M, 1) and (N,) operands, against torch._grouped_mm then fn in fp32."""
    import torch.nn.functional as F

    experts, m, n, k = 8, 256, 2048, 1024
    a = torch.randn(experts, m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    bias, rows = torch.randn(experts, 1, n, device="cuda"), torch.rand(experts, m, 1, device="cuda")
    cols = torch.randn(n, device="cuda", dtype=torch.bfloat16)

    def fn(acc: torch.Tensor, bias: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return F.gelu(acc + bias) * rows + cols

    out = warploom.grouped_mm(a, w, epilogue=fn, bias=bias, rows=rows, cols=cols)
    assert _err(out, fn(torch._grouped_mm(a, w).float(), bias, rows, cols.float())) < 1e-2


# ---- stream-K over the group scan (forced: Plan.stream_k on an M-grouped or masked plan; written without a GPU,
# session gsk: the simulator and compile tiers pass the same kernels) ----

# the measured MoE routing (8 experts, 8192 rows, expert 0 empty): 1088 tiles of 128x256, 8 rounds of 132 and 32
MOE_COUNTS = [0, 1646, 547, 617, 901, 1429, 1196, 1856]


def _sk_launch(spec: object, pieces: int):  # noqa: ANN202
    from warploom.kernel import build
    from warploom.planner import plan_schedule
    from warploom.runtime.launch_grouped import GroupedLauncher

    dev = warploom.DeviceInfo.current()
    # (bm=128: rule 22 picks 64-row tiles at <= 64 rows a group; the shapes below are written for 128-row ones)
    kern = build(spec, dev, plan_schedule(spec, dev, bm=128, stream_k=pieces))  # type: ignore[arg-type]
    assert kern.module.tiling.stream_k == pieces and kern.module.tiling.grid == dev.sm_count
    return GroupedLauncher(kern.module, kern.gluon)


def _sk_twice(launch, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, rows: int, n: int,  # noqa: ANN001
              *scales: torch.Tensor) -> torch.Tensor:
    """Two launches into NaN-poisoned outputs: the same bits (the fixup's order is fixed), every flag reset (where the
    plan has stream-K's)."""
    outs = []
    for _ in range(2):
        out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch(a, b, offs, out, *scales)
        outs.append(out)
    torch.cuda.synchronize()
    if launch.stream_k_buffers is not None:  # (a whole-tile plan has no flags)
        _, flags = launch.stream_k_buffers(outs[0].device)
        assert int(flags.abs().sum()) == 0, "every flag a contributor released was reset by its finisher"
    end = int(offs[-1])
    assert torch.equal(outs[0][:end], outs[1][:end]), "bitwise repeatable"
    assert outs[0][end:].isnan().all(), "rows past offs[-1] untouched"
    return outs[0]


@pytest.mark.parametrize("pieces", [2, 3, 4])
@pytest.mark.parametrize("experts,rows,n,k,counts", [
    (8, 8192, 4096, 7168, MOE_COUNTS),  # the measured shape: 32 tiles of a 9th round shared
    (8, 8192, 4096, 1024, [0, 1024, 1024, 1024, 1024, 1024, 1024, 2048]),  # aligned: 1024 tiles, 100 shared
    (4, 100, 4096, 512, [0, 37, 0, 63]),  # 64 tiles, fewer than SMs: all shared, past grid x pieces at 3 and 4
    (16, 3000, 1536, 2048, None),  # random routings, empty experts
])
def test_stream_k_against_torch_grouped_mm(pieces: int, experts: int, rows: int, n: int, k: int,
                                           counts: list[int] | None) -> None:
    from warploom.checks_grouped import grouped_call

    torch.manual_seed(pieces + k)
    offs = (torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32).cuda() if counts is not None
            else _routing(pieces, experts, rows))
    a = torch.randn(rows + 64, k, device="cuda", dtype=torch.bfloat16)  # 64 rows past offs[-1]
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    call = grouped_call(a, w, offs)
    out = _sk_twice(_sk_launch(call.spec, pieces), call.a, call.b, offs, rows + 64, n)
    end = _rows(offs)
    assert _err(out[:end], torch._grouped_mm(a, w, offs=offs)[:end]) < 1e-2


def _moe_fp8_rowwise(fast: bool, plan_for: Callable[[object], object]) -> None:
    """fp8 rowwise at the measured MoE shape and routing on the launcher of `plan_for(spec)`'s kernel: torch's result,
    bitwise repeatable into NaN-poisoned outputs (`_sk_twice`)."""
    from warploom.checks_grouped import grouped_call
    from warploom.runtime.launch_grouped import GroupedLauncher

    experts, rows, n, k = 8, 8192, 4096, 7168
    offs = torch.tensor(MOE_COUNTS, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    sa, sb = torch.rand(rows, device="cuda") + 0.5, torch.rand(experts, n, device="cuda") + 0.5
    call = grouped_call(a, w, offs, None, torch.bfloat16, sa, sb, fast)
    launch = plan_for(call.spec)
    assert isinstance(launch, GroupedLauncher)
    out = _sk_twice(launch, call.a, call.b, offs, rows, n, sa, sb)
    ref = torch._scaled_grouped_mm(a, w, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=fast)
    assert _err(out, ref) < 2e-2


@pytest.mark.parametrize("fast", [True, False])
def test_stream_k_fp8_rowwise(fast: bool) -> None:
    _moe_fp8_rowwise(fast, lambda spec: _sk_launch(spec, 2))


@pytest.mark.parametrize("fast", [True, False])
def test_planned_last_round_fp8_rowwise(fast: bool) -> None:
    """Rule 22's own fp8 plan at the measured MoE shape: its 9th round shared in 2 pieces on 128x256 tiles where the
    installed Triton builds the finisher without its 3.9 spills (GROUPED_SK_FP8_MAX_TRITON), whole tiles elsewhere."""
    from warploom.backends import gluon_api
    from warploom.kernel import build
    from warploom.planner import plan_schedule
    from warploom.planning.sm90.grouped import GROUPED_SK_FP8_MAX_TRITON
    from warploom.runtime.launch_grouped import GroupedLauncher

    def planned(spec: object) -> GroupedLauncher:
        dev = warploom.DeviceInfo.current()
        plan = plan_schedule(spec, dev)  # type: ignore[arg-type]
        shared = gluon_api.current().triton < GROUPED_SK_FP8_MAX_TRITON
        assert (plan.bm, plan.bn, plan.stream_k) == (128, 256, 2 if shared else 0), plan.short()
        kern = build(spec, dev, plan)  # type: ignore[arg-type]
        return GroupedLauncher(kern.module, kern.gluon)

    _moe_fp8_rowwise(fast, planned)


def test_stream_k_masked() -> None:
    from warploom.checks_grouped import grouped_call

    experts, cap, n, k = 8, 192, 4096, 2048
    a = torch.randn(experts, cap, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16)
    counts = torch.tensor([0, 192, 33, 140, 1, 192, 100, 64], dtype=torch.int32, device="cuda")
    call = grouped_call(a, w.transpose(-2, -1), None, counts)
    launch = _sk_launch(call.spec, 3)
    out = torch.full((experts * cap, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch(call.a, call.b, counts, out)
    torch.cuda.synchronize()
    out = out.reshape(experts, cap, n)
    for g in range(experts):
        c = int(counts[g])
        assert out[g, c:].isnan().all(), f"expert {g}: rows past its count written"
        if c:
            assert _err(out[g, :c], a[g, :c].float() @ w[g].float().t()) < 1e-2, f"expert {g}"


def test_stream_k_cuda_graph_replays_with_changed_offsets() -> None:
    """Captured once; the routings replayed change the tile count on the device, so the last round's shared tiles
    (none, some, past the grid x pieces limit) change between replays, the workspace and flags the same."""
    from warploom.checks_grouped import grouped_call

    experts, rows, n, k = 8, 8192, 4096, 2048
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
    offs = torch.tensor(MOE_COUNTS, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    call = grouped_call(a, w, offs)
    launch = _sk_launch(call.spec, 2)
    out = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph, _ = _graph(lambda: launch(call.a, call.b, offs, out))
    routings = [MOE_COUNTS, [0, 1024, 1024, 1024, 1024, 1024, 1024, 2048], [0, 0, 5, 0, 0, 0, 0, 0],
                [8192, 0, 0, 0, 0, 0, 0, 0]]
    routings += [torch.diff(_routing(s, experts, rows).cpu(), prepend=torch.zeros(1, dtype=torch.int32)).tolist()
                 for s in (1, 2)]
    for i, counts in enumerate(routings):
        offs.copy_(torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        end = _rows(offs)
        assert out[end:].isnan().all(), f"replay {i}"
        assert _err(out[:end], torch._grouped_mm(a, w, offs=offs)[:end]) < 1e-2, f"replay {i}"
        first = out[:end].clone()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out[:end], first), f"replay {i}: bitwise repeatable"


def _quantize_silu_mul(acc: torch.Tensor, gate: torch.Tensor):  # noqa: ANN202
    """The fp8 MoE gate/up GEMM's epilogue: h = silu(gate) * acc quantized 1x128 (DeepSeek's activation layout)."""
    import torch.nn.functional as F

    return warploom.quantize(F.silu(gate.float()) * acc, recipe="1x128")


def _within_fp8_rounding(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    """A fused 1x128 (q, s) of random inputs against the plain quantize of the fp32 reference `y`: sums differ in the
    last bits, so s within a few ulps (relative 1e-2 for the product's own error) and each group's dequantized q * s
    within an e4m3 step (2^-3 of its amax) of `y`."""
    n = y.shape[-1]
    _, rs = warploom.quantize(y, recipe="1x128")
    assert torch.allclose(s, rs, rtol=1e-2, atol=0), (s - rs).abs().max()
    full = s.repeat_interleave(128, dim=-1)[..., :n]
    assert bool(((q.float() * full - y).abs() <= rs.repeat_interleave(128, dim=-1)[..., :n] * 448 * 2.0**-3).all())


def _fused_gate_up(recipe: str, experts: int, rows: int, n: int, k: int, seed: int, fn, s_cols: int,  # noqa: ANN001
                   bf16_product):  # noqa: ANN001, ANN202
    """An M-grouped gate/up GEMM of `recipe` (bf16, or blockwise fp8 with its fp32 dequantized reference) whose
    epilogue `fn` returns a quantized pair, routed by `seed` over `rows` of `rows + 64`: its kernel, a launch into
    NaN-poisoned q (rows + 64, N) and s (rows + 64, s_cols), those two, the offsets (changed in place between graph
    replays), the gate and the fp32 product as a function (`bf16_product(a, w, offs)` for bf16)."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _fused, _launcher
    from warploom.kernel import build

    torch.manual_seed(rows)
    offs = _routing(seed, experts, rows)
    total, kb, nb = rows + 64, -(-k // 128), -(-n // 128)
    gate = torch.randn(total, n, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(total, k, device="cuda")
    w = torch.randn(experts, n, k, device="cuda").transpose(-2, -1)
    if recipe == "bf16":
        a, w = a.bfloat16(), w.bfloat16()
        call, sa, sb, picked = _fused(grouped_call(a, w, offs, None), fn, {"gate": gate})
        product = lambda: bf16_product(a, w, offs)  # noqa: E731
    else:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.rand(total, kb, device="cuda") + 0.5
        sb = torch.rand(experts, kb, nb, device="cuda") + 0.5
        # the reference in fp32: the bf16 rounding of _grouped_mm's inputs and output moves a group's amax by up to
        # 1% at the worst of 10^5 groups, more than the fused kernel's own error
        a_deq, w_deq = _dequant_blockwise(a, sa, 1, torch.float32), _dequant_blockwise(w, sb, 128, torch.float32)
        call, sa, sb, picked = _fused(grouped_call(a, w, offs, None, torch.bfloat16, sa, sb), fn, {"gate": gate},
                                      scale_a=sa, scale_b=sb)
        product = lambda: _grouped_fp32(a_deq, w_deq, offs)  # noqa: E731
    kern = build(call.spec, warploom.DeviceInfo.current())
    q = torch.full((total, n), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    s = torch.full((total, s_cols), float("nan"), device="cuda")
    launch = lambda: _launcher(kern)(call.a, call.b, offs, q, sa, sb, picked, (s,))  # noqa: E731
    return kern, launch, q, s, offs, gate, product


def _replay_routings(launch, q: torch.Tensor, s: torch.Tensor, offs: torch.Tensor, seeds: tuple[int, ...],  # noqa: ANN001
                     experts: int, rows: int, check) -> int:  # noqa: ANN001
    """`launch` captured in a CUDA graph, replayed once per routing of `seeds` written into `offs` in place: rows
    past offs[-1] stay NaN in q and s, and `check(end)` checks the rest; the last routing's end row."""
    graph, _ = _graph(launch)
    for seed in seeds:
        offs.copy_(_routing(seed, experts, rows))
        graph.replay()
        torch.cuda.synchronize()
        end = _rows(offs)
        assert q[rows:].float().isnan().all() and s[rows:].isnan().all(), "rows past offs[-1] written"
        check(end)
    return end


@pytest.mark.parametrize("recipe", ["bf16", "blockwise"])
@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 2048, 7168), (32, 3000, 1536, 2048), (4, 100, 2048, 512)])
def test_fused_quantize_offsets(recipe: str, experts: int, rows: int, n: int, k: int) -> None:
    """An M-grouped GEMM whose epilogue returns warploom.quantize(silu(gate) * acc, recipe="1x128"), launched into
    NaN-poisoned q and s with 64 rows past offs[-1]: those stay NaN in both (the scale stores are clipped at each
    group's end as C's are); the others against the plain quantize of torch's grouped product then the same
    function in fp32, in a CUDA graph replayed with the offsets changed in place; s feeds the down GEMM's blockwise
    scale_a. Written without a GPU (session gq): the simulator and compile tiers pass the same kernels."""
    import torch.nn.functional as F

    nb = -(-n // 128)
    _, launch, q, s, offs, gate, product = _fused_gate_up(
        recipe, experts, rows, n, k, rows + 5, _quantize_silu_mul, nb,
        lambda a, w, offs: torch._grouped_mm(a, w, offs=offs).float())
    end = _replay_routings(launch, q, s, offs, (rows + 5, rows + 6), experts, rows, lambda end: _within_fp8_rounding(
        q[:end], s[:end], F.silu(gate[:end].float()) * product()[:end]))
    # the layer chain: (q, s) is the down GEMM's blockwise A and scale_a (K = n)
    w_down = torch.randn(experts, 512, n, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    sb_down = torch.rand(experts, nb, 4, device="cuda") + 0.5
    out = warploom.scaled_grouped_mm(q, w_down, s, sb_down, offs)
    ref = torch._grouped_mm(_dequant_blockwise(q, s, 1), _dequant_blockwise(w_down, sb_down, 128), offs=offs)
    assert _err(out[:end], ref[:end]) < 2e-2


def _quantize_rowwise_silu_mul(acc: torch.Tensor, gate: torch.Tensor):  # noqa: ANN202
    """The same gate/up epilogue quantized rowwise: N > 128 takes planner rule 29's two passes on a grouped GEMM."""
    import torch.nn.functional as F

    return warploom.quantize(F.silu(gate.float()) * acc, recipe="rowwise")


def _rowwise_within_fp8_rounding(q: torch.Tensor, s: torch.Tensor, y: torch.Tensor) -> None:
    """A fused rowwise (q, s) of random inputs against the plain quantize of the fp32 reference `y`: s (rows, 1)
    within 1e-2 relative (the sums' order), each row's dequantized q * s within an e4m3 step (2^-3 of its amax)."""
    _, rs = warploom.quantize(y, recipe="rowwise")
    assert torch.allclose(s, rs, rtol=1e-2, atol=0), (s - rs).abs().max()
    assert bool(((q.float() * s - y).abs() <= rs * 448 * 2.0**-3).all())


@pytest.mark.parametrize("recipe", ["bf16", "blockwise"])
@pytest.mark.parametrize("experts,rows,n,k", [(8, 8192, 2048, 7168), (32, 3000, 1536, 2048), (4, 100, 304, 512)])
def test_fused_rowwise_amax_pass_offsets(recipe: str, experts: int, rows: int, n: int, k: int) -> None:
    """Planner rule 29 on an M-grouped GEMM (rowwise, N > 128): the epilogue returns warploom.quantize(silu(gate) *
    acc, recipe="rowwise"), launched into NaN-poisoned q (total, N) and s (total, 1) with 64 rows past offs[-1]:
    those stay NaN in both (the cast kernel casts the rows of some group only); the others against the plain
    quantize of the fp32 product then the function, in a CUDA graph replayed with the offsets changed in place (the
    amax workspace zeroed per replay: a row amax left from the first routing would scale the second's rows).
    Written without a GPU (session 30, g29): the simulator and compile tiers pass the same kernels."""
    import torch.nn.functional as F

    kern, launch, q, s, offs, gate, product = _fused_gate_up(
        recipe, experts, rows, n, k, rows + 7, _quantize_rowwise_silu_mul, 1,
        lambda a, w, offs: _grouped_fp32(a.float(), w.float(), offs))
    assert kern.plan.amax_pass
    _replay_routings(launch, q, s, offs, (rows + 7, rows + 8), experts, rows, lambda end: _rowwise_within_fp8_rounding(
        q[:end], s[:end], F.silu(gate[:end].float()) * product()[:end]))


@pytest.mark.parametrize("recipe", ["bf16", "rowwise"])
def test_fused_rowwise_amax_pass_masked_through_the_api(recipe: str) -> None:
    """Rule 29 on the masked layout through the API: q (G, M_max, N) and s (G, M_max, 1), each expert's rows below
    its count against the plain quantize of the fp32 product; then the same kernel launched into NaN-poisoned q and s
    (the API's are torch.empty): rows at or past a count never written (the cast kernel's masked `row_owned`), the
    others the API's bytes."""
    from warploom.checks_grouped import grouped_call
    from warploom.grouped import _fused, _launcher
    from warploom.kernel import build

    experts, cap, n, k = 8, 192, 1536, 1024
    torch.manual_seed(cap)
    counts = torch.randint(1, cap, (experts,), dtype=torch.int32, device="cuda")
    counts[0], counts[1] = 0, cap
    a = torch.randn(experts, cap, k, device="cuda")
    w = torch.randn(experts, n, k, device="cuda").transpose(-2, -1)
    fn = lambda acc: warploom.quantize(acc, recipe="rowwise")  # noqa: E731
    if recipe == "bf16":
        a, w = a.bfloat16(), w.bfloat16()
        q, s = warploom.grouped_mm(a, w, masked_m=counts, epilogue=fn)
        y = a.float() @ w.float()
        call, sa2, sb2, picked = _fused(grouped_call(a, w, None, counts), fn, {})
    else:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.rand(experts, cap, device="cuda") + 0.5
        sb = torch.rand(experts, n, device="cuda") + 0.5
        q, s = warploom.scaled_grouped_mm(a, w, sa, sb, masked_m=counts, epilogue=fn)
        y = (a.float() @ w.float()) * sa[..., None] * sb[:, None, :]
        # (as scaled_grouped_mm fuses it: the rowwise scales in front of fn)
        call, sa2, sb2, picked = _fused(grouped_call(a, w, None, counts, torch.bfloat16, sa, sb, False), fn, {},
                                        scale_a=sa.reshape(-1)[:, None], scale_b=sb.unsqueeze(1))
    torch.cuda.synchronize()
    assert q.shape == (experts, cap, n) and s.shape == (experts, cap, 1)
    for g in range(experts):
        c = int(counts[g])
        if c:
            _rowwise_within_fp8_rounding(q[g, :c], s[g, :c], y[g, :c])
    kern = build(call.spec, warploom.DeviceInfo.current())
    assert kern.plan.amax_pass
    pq = torch.full((experts * cap, n), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    ps = torch.full((experts * cap, 1), float("nan"), device="cuda")
    _launcher(kern)(call.a, call.b, counts, pq, sa2, sb2, picked, (ps,))
    torch.cuda.synchronize()
    pq, ps = pq.reshape(experts, cap, n), ps.reshape(experts, cap, 1)
    for g in range(experts):
        c = int(counts[g])
        assert pq[g, c:].float().isnan().all() and ps[g, c:].isnan().all(), f"expert {g}: rows past {c} written"
        assert torch.equal(pq[g, :c].view(torch.uint8), q[g, :c].view(torch.uint8)) and torch.equal(ps[g, :c], s[g, :c])


@pytest.mark.parametrize("recipe", ["bf16", "blockwise"])
@pytest.mark.parametrize("cap", [64, 192])
def test_fused_quantize_masked_through_the_api(recipe: str, cap: int) -> None:
    """The masked layout's quantized pair through the API: q (G, M_max, N) and s (G, M_max, ceil(N/128)), each
    expert's rows below its count against the plain quantize of torch's product then the function in fp32."""
    import torch.nn.functional as F

    experts, n, k = 8, 2048, 1024
    torch.manual_seed(cap)
    counts = torch.randint(1, cap, (experts,), dtype=torch.int32, device="cuda")
    counts[0], counts[1] = 0, cap
    gate = torch.randn(experts, cap, n, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(experts, cap, k, device="cuda")
    w = torch.randn(experts, n, k, device="cuda").transpose(-2, -1)
    if recipe == "bf16":
        a, w = a.bfloat16(), w.bfloat16()
        q, s = warploom.grouped_mm(a, w, masked_m=counts, epilogue=_quantize_silu_mul, gate=gate)
        y = torch._grouped_mm(a, w).float()
    else:
        a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.rand(experts, cap, k // 128, device="cuda") + 0.5
        sb = torch.rand(experts, k // 128, n // 128, device="cuda") + 0.5
        q, s = warploom.scaled_grouped_mm(a, w, sa, sb, masked_m=counts, epilogue=_quantize_silu_mul, gate=gate)
        y = _dequant_blockwise(a, sa, 1, torch.float32) @ _dequant_blockwise(w, sb, 128, torch.float32)
    torch.cuda.synchronize()
    assert q.shape == (experts, cap, n) and s.shape == (experts, cap, n // 128)
    for g in range(experts):
        c = int(counts[g])
        if c:
            _within_fp8_rounding(q[g, :c], s[g, :c], F.silu(gate[g, :c].float()) * y[g, :c])


def test_backward_against_torch_grouped_mm() -> None:
    """grouped_mm's autograd (M-grouped, offs from a random routing, 64 rows past offs[-1]) against torch._grouped_mm's
    own backward: grad_a through the M-grouped kernel (rows of no group zero), grad_b through the K-grouped one.
    Written without a GPU (session 30): the CPU tier checks the same backward on the simulator."""
    torch.manual_seed(3)
    experts, rows, n, k = 8, 4096, 1024, 2048
    offs = _routing(7, experts, rows)
    x = torch.randn(rows + 64, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(rows + 64, n, device="cuda", dtype=torch.bfloat16)
    g[rows:] = 0
    warploom.grouped_mm(x, w.transpose(-2, -1), offs).backward(g)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch._grouped_mm(xr, wr.transpose(-2, -1), offs=offs).backward(g)
    end = _rows(offs)
    assert _err(x.grad[:end], xr.grad[:end]) < 1e-2 and bool((x.grad[end:] == 0).all())
    assert _err(w.grad, wr.grad) < 1e-2
