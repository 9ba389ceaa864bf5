"""A DeepSeek-V3-like MoE FFN forward on the GPU (issue 27 item 5): the same layer twice, once with warploom's
grouped GEMMs and once with torch's (`torch._grouped_mm`, `torch._scaled_grouped_mm`), end to end as one timed
function each (CUDA-graph replays), checked against each other first.

The layer (`moe_forward`), for T tokens of width D, E experts of intermediate width I, top-k routing:
  router     logits = x @ w_router (T, E); the top-k experts per token and their softmax weights;
  dispatch   the T * k (token, expert) pairs sorted by expert: x's rows gathered (R = T * k rows), and
             offs = the experts' cumulative row counts (int32, on the device: no host sync, so it captures);
  gate/up    h = x_sorted @ w13[e] (R, 2I) per expert (one grouped GEMM), then silu(h[:, :I]) * h[:, I:]; warploom's
             "bf16" layer fuses the SiLU-mul instead: gate = x_sorted @ w1[e] (R, I), then the up GEMM's epilogue
             silu(gate) * acc (a dense operand in the grouped row space), two GEMMs of N = I and no (R, 2I)
             intermediate; "bf16-unfused" runs torch's form with warploom's GEMMs;
  down       y = h @ w2[e] (R, D), one grouped GEMM;
  combine    out[token] += weight * y[row] (index_add_).
The "-gateup" kinds run warploom's gate/up as one grouped GEMM of N = 2I over the experts' weights interleaved in
blocks of 128 rows, 64 for fp8 (`warploom.interleave_gate_up`, once, outside the timed layer) with the SiLU-mul
fused into its epilogue (`warploom.silu_mul_interleaved`, planner rule 28): A is read once, no (R, 2I) intermediate
is written; "fp8-gateup" interleaves the rowwise weight scales likewise.
Only the grouped GEMMs (and the fused SiLU-mul) differ between the two versions (`Gemms`); routing, dispatch and
the combine are the same torch code. fp8 ("fp8"): rowwise e4m3 (amax per row of the activations, per output channel of
each expert's weights, scale = amax / 448), the activations quantized before each GEMM by the same torch code.

    PYTHONPATH=. python3 scripts/bench_moe.py --out moe.json [--experts 8,32] [--tokens 4096] \
        [--kinds bf16,bf16-unfused,bf16-gateup,fp8,fp8-gateup]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0

# DeepSeek-V3's widths: hidden 7168, an expert's intermediate 2048; it routes each token to 8 of 256 experts, here
# to E / 4 of E (8 experts: 2, 32: 8), so 4096 tokens give each expert about 1024 rows, as DeepSeek's do at 32k.
HIDDEN, INTER = 7168, 2048
# Relative error of warploom's layer against torch's: bf16 differs by GEMM rounding only; fp8 also where that
# rounding moves a value of h across an e4m3 rounding boundary before the down GEMM (one e4m3 step, 6%, rarely).
TOLERANCE = {"bf16": 2e-2, "bf16-unfused": 2e-2, "bf16-gateup": 2e-2, "fp8": 4e-2, "fp8-gateup": 4e-2}
# The gate/up interleave's block (rule 28: BN = 2 * block); the intermediate width must be a multiple of it. fp8
# with exact (promoted) accumulation, as torch's layer runs it, takes 64: a 256-wide tile promotes into two
# 128-column accumulators, and a gate/up pair may not span them (rule 28).
GATE_UP_BLOCK = {"bf16": 128, "fp8": 64}


@dataclass(frozen=True)
class Gemms:
    """The layer's grouped GEMMs, ``mm(a, w, offs)`` with a (R, K), w (E, N, K) as stored, offs (E,) int32; fp8
    ones take the quantized pair (data, per-row scales) for a and for w. `gate_up`, if given, computes
    ``silu(a @ w13[:, :I]^T) * (a @ w13[:, I:]^T)`` (R, I) from a and w13 itself (bf16), or, where `block` is set,
    from a (or its fp8 pair) and the weights interleaved in blocks of `block` rows (or their fp8 pair)."""

    name: str
    fp8: bool
    mm: Callable[..., torch.Tensor]
    gate_up: Callable[..., torch.Tensor] | None = None
    block: int = 0  # (gate_up's interleave block, `Layer.interleaved`; 0: it takes w13 as stored)


def torch_gemms(fp8: bool) -> Gemms:
    if fp8:
        return Gemms("torch", True, lambda a, sa, w, sw, offs: torch._scaled_grouped_mm(
            a, w.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16))
    return Gemms("torch", False, lambda a, w, offs: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs))


def warploom_gemms(fp8: bool, fused: bool = True, interleaved: bool = False) -> Gemms:
    import warploom

    block = GATE_UP_BLOCK["fp8" if fp8 else "bf16"]

    def silu_mul_il(acc: torch.Tensor) -> torch.Tensor:
        return warploom.silu_mul_interleaved(acc, block=block)

    if fp8:
        def mm8(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, offs: torch.Tensor,
                **epilogue: Any) -> torch.Tensor:
            return warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sw, offs, **epilogue)

        def gate_up8(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor,
                     offs: torch.Tensor) -> torch.Tensor:
            return mm8(a, sa, w, sw, offs, epilogue=silu_mul_il)

        return Gemms("warploom", True, mm8, gate_up8, block) if interleaved else Gemms("warploom", True, mm8)

    def mm(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, **epilogue: Any) -> torch.Tensor:
        return warploom.grouped_mm(a, w.transpose(-2, -1), offs, **epilogue)

    def gate_up(a: torch.Tensor, w13: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        inter = w13.shape[1] // 2
        return mm(a, w13[:, inter:], offs, epilogue=silu_mul, gate=mm(a, w13[:, :inter], offs))

    def gate_up_il(a: torch.Tensor, w13_il: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return mm(a, w13_il, offs, epilogue=silu_mul_il)

    if interleaved:
        return Gemms("warploom", False, mm, gate_up_il, block)
    return Gemms("warploom", False, mm, gate_up if fused else None)


def silu_mul(acc: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """The up GEMM's fused epilogue: silu(gate) times its fp32 accumulator."""
    return F.silu(gate.float()) * acc


def quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise e4m3 over the last dimension: (data, scale) with t ~ data * scale, scale = amax / 448 (fp32)."""
    amax = t.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
    scale = amax / E4M3_MAX
    data = (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return data, scale.squeeze(-1).contiguous()


@dataclass(frozen=True)
class Layer:
    """The MoE layer's weights. Attributes: router (D, E); w13 (E, 2I, D) gate and up stacked, w2 (E, D, I), both
    (N, K) per expert as a linear layer stores them; w13_q, w2_q: their rowwise fp8 pairs (data, (E, N) scales)."""

    router: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    w13_q: tuple[torch.Tensor, torch.Tensor]
    w2_q: tuple[torch.Tensor, torch.Tensor]

    def interleaved(self, block: int) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """w13 and its fp8 pair with gate and up interleaved in blocks of `block` rows (the scales likewise), for
        the one-GEMM gate/up (`warploom.interleave_gate_up`)."""
        import warploom

        inter = self.w2.shape[2]

        def il(t: torch.Tensor, dim: int) -> torch.Tensor:
            gate, up = t.narrow(dim, 0, inter), t.narrow(dim, inter, inter)
            return warploom.interleave_gate_up(gate, up, block=block, dim=dim)

        return il(self.w13, -2), (il(self.w13_q[0], -2), il(self.w13_q[1], -1))

    @staticmethod
    def random(experts: int, hidden: int, inter: int, device: str, seed: int = 0) -> Layer:
        g = torch.Generator(device=device).manual_seed(seed)  # (on the device: 32 experts' weights are 2 G values)

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g, device=device) / shape[-1] ** 0.5).to(torch.bfloat16)

        w13, w2 = w(experts, 2 * inter, hidden), w(experts, hidden, inter)
        return Layer(w(hidden, experts), w13, w2, quantize_rows(w13), quantize_rows(w2))


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token of each sorted row (R,), its weight (R,), offs (E,) int32): rows sorted by expert, all on the device."""
    experts = router.shape[1]
    logits = (x @ router).float()  # (T, E)
    weight, expert = torch.topk(logits.softmax(dim=-1), top_k, dim=-1)  # (T, k)
    weight = weight / weight.sum(dim=-1, keepdim=True)
    flat = expert.flatten()  # (R,)
    order = torch.sort(flat, stable=True).indices
    counts = torch.zeros(experts, dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))  # (no bincount: it syncs the host on CUDA)
    return order // top_k, weight.flatten()[order], counts.cumsum(0).to(torch.int32)


def moe_forward(x: torch.Tensor, layer: Layer, gemms: Gemms, top_k: int,
                interleaved: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
    """The layer's output (T, D) bf16 for tokens x (T, D) bf16 (module docstring); `interleaved`: the layer's
    `interleaved()` weights, which gemms with a `block` take (made once, outside the timed call)."""
    token, weight, offs = route(x, layer.router, top_k)
    xs = x[token]  # (R, D)
    inter = layer.w2.shape[2]
    if gemms.block and interleaved is None:
        interleaved = layer.interleaved(gemms.block)
    if gemms.fp8:
        if gemms.gate_up is not None and interleaved is not None and gemms.block:
            h = gemms.gate_up(*quantize_rows(xs), *interleaved[1], offs)  # (R, I), SiLU-mul fused
        else:
            h = gemms.mm(*quantize_rows(xs), *layer.w13_q, offs)  # (R, 2I)
            h = F.silu(h[:, :inter]) * h[:, inter:]  # (R, I)
        y = gemms.mm(*quantize_rows(h), *layer.w2_q, offs)  # (R, D)
    else:
        if gemms.gate_up is not None and interleaved is not None and gemms.block:
            h = gemms.gate_up(xs, interleaved[0], offs)
        elif gemms.gate_up is not None:
            h = gemms.gate_up(xs, layer.w13, offs)
        else:
            h = gemms.mm(xs, layer.w13, offs)
            h = F.silu(h[:, :inter]) * h[:, inter:]
        y = gemms.mm(h, layer.w2, offs)
    out = torch.zeros_like(x, dtype=torch.float32)
    out.index_add_(0, token, y.float() * weight[:, None])
    return out.to(x.dtype)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in fp32 (inf where got has a NaN)."""
    d = (got.float() - want.float()).norm()
    return float(d / want.float().norm().clamp(min=1e-30))


def case(experts: int, tokens: int, kind: str, hidden: int = HIDDEN, inter: int = INTER, top_k: int = 0,
         device: str = "cuda", time_it: bool = True) -> dict[str, Any]:
    """One layer configuration (top_k 0: E / 4): warploom's layer against torch's, checked, then (`time_it`)
    timed."""
    fp8, fused, interleaved = kind.startswith("fp8"), kind == "bf16", kind.endswith("-gateup")
    layer = Layer.random(experts, hidden, inter, device)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    k = top_k or max(1, experts // 4)
    ours, theirs = warploom_gemms(fp8, fused, interleaved), torch_gemms(fp8)
    weights = layer.interleaved(ours.block) if interleaved else None  # (once: a model stores its weights so)
    run_ours = lambda: moe_forward(x, layer, ours, k, weights)  # noqa: E731
    run_theirs = lambda: moe_forward(x, layer, theirs, k)  # noqa: E731
    # per token, 2 * (2I + I) * D multiply-adds in each of its k experts (the router's (T, D, E) left out)
    flops = 2 * tokens * k * 3 * inter * hidden
    row: dict[str, Any] = {"experts": experts, "tokens": tokens, "top_k": k, "hidden": hidden, "inter": inter,
                           "kind": kind}
    err = relative_error(run_ours(), run_theirs())
    row["err_vs_torch"] = err
    if not err < TOLERANCE[kind]:
        row["error"] = f"mismatch against torch's layer: relative error {err:.3g}; not timed"
        return row
    if time_it:
        from warploom.runtime.timing import time_graph

        try:
            row["warploom_ms"] = time_graph(run_ours)
            row["torch_ms"] = time_graph(run_theirs)
        except RuntimeError as e:  # (a layer that cannot be captured: its check above still stands)
            row["error"] = f"timing: {e}"
            return row
        row["speedup"] = row["torch_ms"] / row["warploom_ms"]
        row["warploom_tflops"] = flops / row["warploom_ms"] / 1e9
        row["torch_tflops"] = flops / row["torch_ms"] / 1e9
    return row


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="moe.json")
    ap.add_argument("--experts", default="8,32", help="expert counts, comma-separated")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--kinds", default="bf16,bf16-unfused,bf16-gateup,fp8,fp8-gateup",
                    help="bf16 (warploom's SiLU-mul fused into the up GEMM), bf16-unfused, bf16-gateup (one "
                         "interleaved gate/up GEMM, SiLU-mul fused), fp8 (rowwise), fp8-gateup")
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--inter", type=int, default=INTER)
    ap.add_argument("--top-k", type=int, default=0, help="experts per token (default: experts / 4)")
    args = ap.parse_args(argv)
    args.experts = [int(e) for e in args.experts.split(",")]
    args.kinds = args.kinds.split(",")
    for kind in args.kinds:
        if kind not in TOLERANCE:
            ap.error(f"--kinds: {', '.join(TOLERANCE)}, not {kind!r}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    import warploom

    rows = []
    print(f"{'experts':>7} {'tokens':>6} {'kind':>12} {'warploom ms':>12} {'torch ms':>9} {'x torch':>8} {'err':>9}")
    for e in args.experts:
        for kind in args.kinds:
            t0 = time.time()
            try:
                row = case(e, args.tokens, kind, args.hidden, args.inter, args.top_k)
            except Exception as err:  # (one configuration failing leaves the others measured)
                row = {"experts": e, "tokens": args.tokens, "kind": kind, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            if "error" in row:
                print(f"{e:>7} {args.tokens:>6} {kind:>12} {row['error']}")
            else:
                print(f"{e:>7} {args.tokens:>6} {kind:>12} {row['warploom_ms']:12.3f} {row['torch_ms']:9.3f} "
                      f"{row['speedup']:8.3f} {row['err_vs_torch']:9.2e}  ({time.time() - t0:.0f} s)")
            with open(args.out, "w") as f:  # (after every case: a timeout keeps what ran)
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "warploom": warploom.__version__, "rows": rows}, f, indent=1)
    if any("error" in row for row in rows):
        raise SystemExit(1)  # (a mismatch fails the gpu.sh job)


if __name__ == "__main__":
    main()
