"""Grouped GEMMs on the GPU (issue 27): warploom.grouped_mm against torch._grouped_mm (bf16) and
warploom.scaled_grouped_mm against torch._scaled_grouped_mm (fp8 rowwise, fast accumulation and not), plus a Python
loop over experts as the floor, (kind "fp8-blockwise", not in the default kinds) blockwise 1x128 x 128x128 scales
against a loop of torch's blockwise torch._scaled_mm per expert (torch has no grouped one), and (kind "wgrad") the
K-grouped weight gradient against torch._grouped_mm's 2-D x 2-D layout (dW[g] = dy[rows of g]^T @ x[rows of g]:
a = dy^T (N, rows), b = x (rows, K) column-major, offs over rows), (kind "wgrad-blockwise", not in the default kinds)
its fp8 blockwise form (scale_a (N, rows/128), scale_b (rows/128, K/128), offs on the 128 grid) against
torch._grouped_mm on the bf16 dequantized operands (torch has no fp8 blockwise K-grouped op), on MoE shapes:
8 experts / 8192 rows / N=4096 / K=7168 (issue 27's), 8 experts / 8192 rows / N=7168 / K=2048 (its down
projection), and 32 experts / 16384 rows / N=2048 / K=7168 (a finer MoE).
A random routing with an empty expert and ragged edges, the same for every kernel; each output is checked against
torch's before it is timed (rows of every expert). Times are CUDA-graph replays (kernel time, medians of
triton.testing.do_bench over 10 calls a graph). Prints a table and writes JSON with --out.

    PYTHONPATH=. python3 scripts/bench_grouped.py --out grouped.json [--shapes 8x8192x4096x7168,...]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import torch

import warploom
from warploom.reference import relative_error as _err
from warploom.runtime.timing import time_graph as _time_graph

SHAPES = [(8, 8192, 4096, 7168), (8, 8192, 7168, 2048), (32, 16384, 2048, 7168)]


def routing(experts: int, rows: int, seed: int = 0, align: int = 1) -> torch.Tensor:
    """A random routing's cumulative int32 offsets on the GPU: random expert sizes, expert 0 empty, ragged ends; with
    `align`, every expert's count a multiple of it (the last takes what is left), as DeepGEMM's contiguous layout
    pads them (scripts/sweep_grouped.py: the dense GEMM's tiles where `align` is the tile's rows)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(experts, generator=g) + 0.25
    w[0] = 0  # an empty expert
    counts = (w / w.sum() * rows).floor().long() // align * align
    counts[-1] += rows - int(counts.sum())
    return counts.cumsum(0).to(torch.int32).cuda()


def masked_counts(experts: int, cap: int, seed: int = 0) -> torch.Tensor:
    """The masked layout's valid rows per expert (int32, on the CPU): random in 1..cap, expert 0 empty."""
    counts = torch.randint(1, cap + 1, (experts,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)
    counts[0] = 0
    return counts


def operands(fp8: bool, a_rows: tuple[int, ...], experts: int, n: int, k: int,
             device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Random operands of a grouped GEMM (from torch's global generator, in this order): A (*a_rows, K), the experts'
    weights W (E, N, K) (B is ``W.transpose(-2, -1)``, K-major) and, with `fp8`, rowwise fp32 scales in [0.5, 1.5):
    scale_a `a_rows` (one per row of A), scale_b (E, N) (one per column of each expert's). bf16 without `fp8`
    (no scales: None, None); e4m3 with it (normals cast, as torch's tests quantize). scripts/sweep_grouped.py's
    cases draw theirs here too."""
    if not fp8:
        return (torch.randn(*a_rows, k, device=device, dtype=torch.bfloat16),
                torch.randn(experts, n, k, device=device, dtype=torch.bfloat16), None, None)
    a = torch.randn(*a_rows, k, device=device).to(torch.float8_e4m3fn)
    w = torch.randn(experts, n, k, device=device).to(torch.float8_e4m3fn)
    return a, w, torch.rand(*a_rows, device=device) + 0.5, torch.rand(experts, n, device=device) + 0.5


def torch_grouped(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None = None,
                  scale_b: torch.Tensor | None = None, offs: torch.Tensor | None = None,
                  fast: bool = False) -> Callable[[], torch.Tensor]:
    """torch's grouped op on these operands, as a call to time: torch._grouped_mm without scales,
    torch._scaled_grouped_mm (bf16 out, `fast` its use_fast_accum) with rowwise ones; `offs` None for a 3-D a."""
    if scale_a is None or scale_b is None:
        return lambda: torch._grouped_mm(a, b, offs=offs)
    return lambda: torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)


def torch_loop(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, device: str = "cuda") -> Callable[[], Any]:
    """A Python loop of torch.mm over experts (the offsets read once on the host, outside the timed call), into one
    output it returns (NaN-poisoned: rows it leaves are seen), as a call to check and time."""
    ends = [0, *offs.tolist()]
    out = torch.full((a.shape[0], w.shape[1]), float("nan"), device=device, dtype=torch.bfloat16)

    def run() -> torch.Tensor:
        for g in range(w.shape[0]):
            if ends[g + 1] > ends[g]:
                torch.mm(a[ends[g]:ends[g + 1]], w[g].t(), out=out[ends[g]:ends[g + 1]])
        return out

    return run


def blockwise_loop(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                   offs: torch.Tensor) -> Callable[[], Any]:
    """torch's blockwise (1x128 x 128x128) torch._scaled_mm per expert, the offsets read once on the host: torch has
    no grouped blockwise kernel, so this loop is what it offers (it raises where this torch has no blockwise one).
    The call form is bench_moe's (`torch_blockwise_gemms`): each expert's rows a window of a multiple of 16 rows
    (cuBLASLt refuses ragged M), its scale_a copied to strides (1, M), scale_b (K/128, N/128) column-major."""
    from bench_moe import torch_blockwise_gemms  # (scripts/ is on the path)

    mm = torch_blockwise_gemms([0, *offs.tolist()]).mm
    sw = sb.transpose(1, 2).contiguous()  # ((G, N/128, K/128): each expert's transposed is column-major)
    return lambda: mm(a, sa, w, sw, offs)


def _case(experts: int, rows: int, n: int, k: int, kind: str) -> dict[str, Any]:
    torch.manual_seed(0)
    offs = routing(experts, rows)
    if kind == "wgrad":  # (ends at 16-row multiples, as MoE trainers pad them for torch's kernel)
        offs = offs // 16 * 16
    if kind == "wgrad-blockwise":  # (ends on the 128 grid, as blockwise K-grouped GEMMs take them)
        offs = offs // 128 * 128
    end = int(offs[-1])
    flops = 2 * end * n * k
    if kind == "wgrad":  # the weight gradient: (G, N, K) from the routed rows' dy (rows, N) and x (rows, K)
        a = torch.randn(n, rows, device="cuda", dtype=torch.bfloat16)  # dy^T, row-major as torch requires
        b = torch.randn(k, rows, device="cuda", dtype=torch.bfloat16).t()  # x (rows, K), column-major
        ours = lambda: warploom.grouped_mm(a, b, offs)  # noqa: E731
        theirs = lambda: torch._grouped_mm(a, b, offs=offs)  # noqa: E731
        loop = None
    elif kind == "wgrad-blockwise":  # dy^T (N, rows) and x (rows, K) in fp8 with 1x128 / 128x128 scales over rows
        a = torch.randn(n, rows, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(k, rows, device="cuda").to(torch.float8_e4m3fn).t()
        rb, kb = -(-rows // 128), -(-k // 128)
        sa, sb = torch.rand(n, rb, device="cuda") + 0.5, torch.rand(rb, kb, device="cuda") + 0.5
        da = (a.float() * sa.repeat_interleave(128, dim=1)[:, :rows]).bfloat16()
        db = (b.float() * sb.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :k]).bfloat16()
        db = db.t().contiguous().t()  # (column-major, as torch's K-grouped op takes b)
        ours = lambda: warploom.scaled_grouped_mm(a, b, sa, sb, offs)  # noqa: E731
        theirs = lambda: torch._grouped_mm(da, db, offs=offs)  # noqa: E731
        loop = None
    elif kind.startswith("masked"):  # decode: (E, rows / E, K) at capacity rows / E, each expert's count <= it
        return _masked_case(experts, rows, n, k, fp8=kind == "masked-fp8")
    elif kind == "bf16":
        a, w, _, _ = operands(False, (rows,), experts, n, k)
        b = w.transpose(-2, -1)
        ours = lambda: warploom.grouped_mm(a, b, offs)  # noqa: E731
        theirs = torch_grouped(a, b, offs=offs)
        loop = torch_loop(a, w, offs)
    elif kind == "fp8-blockwise":  # DeepSeek-V3's recipe: scale_a (rows, K/128), scale_b (G, K/128, N/128)
        a = torch.randn(rows, k, device="cuda").to(torch.float8_e4m3fn)
        w = torch.randn(experts, n, k, device="cuda").to(torch.float8_e4m3fn)
        b = w.transpose(-2, -1)
        kb, nb = -(-k // 128), -(-n // 128)
        sa, sb = torch.rand(rows, kb, device="cuda") + 0.5, torch.rand(experts, kb, nb, device="cuda") + 0.5
        ours = lambda: warploom.scaled_grouped_mm(a, b, sa, sb, offs)  # noqa: E731
        theirs = blockwise_loop(a, w, sa, sb, offs)
        loop = None
    else:
        fast = kind == "fp8-fast"
        a, w, sa, sb = operands(True, (rows,), experts, n, k)
        b = w.transpose(-2, -1)
        ours = lambda: warploom.scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast)  # noqa: E731
        theirs = torch_grouped(a, b, sa, sb, offs, fast)
        loop = None
    try:
        got, want = ours(), theirs()
    except Exception as e:  # (one kind failing leaves the others measured)
        return {"experts": experts, "rows": rows, "n": n, "k": k, "kind": kind, "error": f"{type(e).__name__}: {e}"}
    err = _err(got, want) if kind.startswith("wgrad") else _err(got[:end], want[:end])
    row: dict[str, Any] = {"experts": experts, "rows": rows, "n": n, "k": k, "kind": kind, "err_vs_torch": err}
    if not err < 2e-2:
        row["error"] = f"mismatch against torch: relative error {err:.3g}; not timed"
        return row
    row["warploom_ms"] = _time_graph(ours)
    row["torch_ms"] = _time_graph(theirs)
    if loop is not None:  # (checked too: torch's rows)
        row["loop_err"] = loop_err = _err(loop()[:end], want[:end])
        if loop_err < 2e-2:
            row["loop_ms"] = _time_graph(loop)
    for key in ("warploom", "torch", "loop"):
        if f"{key}_ms" in row:
            row[f"{key}_tflops"] = flops / row[f"{key}_ms"] / 1e9
    row["speedup"] = row["torch_ms"] / row["warploom_ms"]
    return row


def masked_bytes(counts: torch.Tensor, n: int, k: int, a_bytes: int, b_bytes: int) -> int:
    """The bytes a masked decode GEMM must move: the weights (N x K) of the experts with valid rows (an empty one has
    no tiles, so its weight is never read), their valid rows of A (K each) and of C (N each, bf16)."""
    used, valid_rows = int((counts > 0).sum()), int(counts.sum())
    return used * n * k * b_bytes + valid_rows * k * a_bytes + valid_rows * n * 2


def _masked_case(experts: int, rows: int, n: int, k: int, fp8: bool) -> dict[str, Any]:
    """The masked decode layout (DeepGEMM's): a (E, M_max, K) A of capacity M_max = rows / E with a count of valid
    rows per expert (random in 1..M_max, one expert empty), bf16 or fp8 rowwise. Decode reads every expert's weight
    once, so what counts is bandwidth: the bytes the kernel must move (`masked_bytes`) over its time,
    against a device-to-device copy's (read + write of as many bytes as B) in the same run (issue 27: within 90%).
    torch's comparator is its batched torch._grouped_mm / _scaled_grouped_mm over all M_max rows."""
    cap = rows // experts
    counts = masked_counts(experts, cap).cuda()
    kind = "masked-fp8" if fp8 else "masked"
    a, w, sa, sb = operands(fp8, (experts, cap), experts, n, k)
    b = w.transpose(-2, -1)
    if sa is not None and sb is not None:
        ours = lambda: warploom.scaled_grouped_mm(a, b, sa, sb, masked_m=counts, use_fast_accum=True)  # noqa: E731
    else:
        ours = lambda: warploom.grouped_mm(a, b, masked_m=counts)  # noqa: E731
    theirs = torch_grouped(a, b, sa, sb, fast=True)
    row: dict[str, Any] = {"experts": experts, "rows": rows, "n": n, "k": k, "kind": kind}
    try:
        got, want = ours(), theirs()
    except Exception as e:  # (one kind failing leaves the others measured)
        return {**row, "error": f"{type(e).__name__}: {e}"}
    valid = torch.arange(cap, device="cuda")[None, :] < counts[:, None]
    row["err_vs_torch"] = err = _err(got[valid], want[valid])
    if not err < 2e-2:
        return {**row, "error": f"mismatch against torch: relative error {err:.3g}; not timed"}
    row["warploom_ms"] = _time_graph(ours)
    row["torch_ms"] = _time_graph(theirs)
    src = torch.empty(w.numel() * w.element_size(), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    row["copy_ms"] = _time_graph(lambda: dst.copy_(src))
    valid_rows = int(counts.sum())
    moved = masked_bytes(counts, n, k, a.element_size(), w.element_size())
    row["warploom_gbs"] = moved / row["warploom_ms"] / 1e6
    row["copy_gbs"] = 2 * src.numel() / row["copy_ms"] / 1e6
    row["of_copy"] = row["warploom_gbs"] / row["copy_gbs"]
    flops = 2 * valid_rows * n * k
    row["warploom_tflops"], row["torch_tflops"] = flops / row["warploom_ms"] / 1e9, flops / row["torch_ms"] / 1e9
    row["speedup"] = row["torch_ms"] / row["warploom_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="grouped.json")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="experts x rows x N x K, comma-separated")
    ap.add_argument("--kinds", default="bf16,fp8,fp8-fast,wgrad")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = []
    print(f"{'shape':>24} {'kind':>9} {'warploom TF':>12} {'torch TF':>9} {'loop TF':>8} {'x torch':>8} {'err':>9}")
    for e, r, n, k in shapes:
        for kind in args.kinds.split(","):
            t0 = time.time()
            row = _case(e, r, n, k, kind)
            rows.append(row)
            shape = f"{e}x{r}x{n}x{k}"
            if "error" in row:
                print(f"{shape:>24} {kind:>9} {row['error']}")
                continue
            loop = f"{row['loop_tflops']:8.0f}" if "loop_tflops" in row else f"{'-':>8}"
            if "of_copy" in row:  # (masked decode: bandwidth against a copy's)
                loop += f"  {row['warploom_gbs']:.0f} GB/s, {row['of_copy']:.2f} of a copy's {row['copy_gbs']:.0f}"
            print(f"{shape:>24} {kind:>9} {row['warploom_tflops']:12.0f} {row['torch_tflops']:9.0f} {loop} "
                  f"{row['speedup']:8.3f} {row['err_vs_torch']:9.2e}  ({time.time() - t0:.0f} s)")
            with open(args.out, "w") as f:  # (after every case: a timeout keeps what ran)
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "warploom": warploom.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
