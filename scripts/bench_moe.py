"""A DeepSeek-V3-like MoE FFN forward on the GPU (issue 27 item 5): the same layer twice, once with warploom's
grouped GEMMs and once with torch's (`torch._grouped_mm`, `torch._scaled_grouped_mm`, or for fp8 blockwise, which
torch has no grouped op for, a per-expert loop of `torch._scaled_mm`), end to end as one timed function each
(CUDA-graph replays), checked first.

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
Only the grouped GEMMs (and the fused SiLU-mul) differ between the two versions (`Gemms`); routing, dispatch, the
activations' quantization and the combine are the same torch code. fp8 comes in two recipes (`Recipe`), e4m3 with
scale = amax / 448 over each group, the activations quantized before each GEMM: x once per token before the
dispatch (its fp8 rows then gathered; a row's scales are its own, so this is x_sorted's quantization on 1/k of the
rows), h after the gate/up. The quantization is three passes over the tensor's size (`quantize_blocks`: the amax
read from the bf16 values, the fp32 quotient, its e4m3 cast); warploom has no faster one for this layer (a grouped
GEMM's epilogue refuses warploom.quantize, and warploom.quantize outside one is its torch reference).
  "fp8"            rowwise: a scale per row of the activations, per output channel of each expert's weights;
  "fp8-blockwise"  DeepSeek-V3's: a scale per row and 128 columns of the activations (1x128), per 128x128 block of
                   each expert's (N, K) weights, each k-block's partial promoted with its scales.

fp8 blockwise. warploom's "fp8-blockwise" layer fuses the SiLU-mul as "bf16" does (two blockwise grouped GEMMs of
N = I, the up GEMM's epilogue silu(gate) * acc); "fp8-blockwise-gateup" runs the one-GEMM form at block 64 (a promoted
tile is 128 columns, one accumulator, rule 28) over the bf16 weights interleaved first and then quantized, so each
128-row scale block covers one gate block and its up block. Those two quantize h 1x128 by the same torch code as x,
a separate pass before the down GEMM; "fp8-blockwise-fusedq" is "fp8-blockwise" with h quantized in the up GEMM's
epilogue instead (``warploom.quantize(silu(gate) * acc, recipe="1x128")``: the grouped GEMM returns the (q, s) pair,
q (R, I) e4m3 and s (R, I/128) fp32, which the down GEMM takes as its A and blockwise scale_a), so no quantization
pass runs for h; torch's layer is unchanged (it quantizes h with the bench's torch code, as every kind's does), and
the row says so (`h_quantized`). torch has no grouped blockwise op (torch._scaled_grouped_mm takes
rowwise fp32 or MXFP8 scales, 2.11 to 2.13), so torch's layer is a per-expert loop of torch._scaled_mm with
1x128 x 128x128 scales (`torch_blockwise_gemms`; the call bench_blockwise.py times: scale_a outer-dim-major, copied
per expert to the stride torch checks, scale_b column-major) over row counts read on the host once before capture:
the loop needs them there, the graph replays the same routing (x is fixed), and a real layer would pay a host sync
for them. cuBLASLt's blockwise path refuses ragged row counts (CUBLAS_STATUS_NOT_SUPPORTED on the H100), so each
expert's call runs on a window of a multiple of 16 rows around its rows (128 where this torch refuses 16: the row's
"torch_layer" says which), the extra rows computed and dropped. Both layers are checked against the float layer of
the dequantized operands (`reference_gemms`: fp32 products per expert), and torch's bf16 grouped layer, checked
loosely against it too, is timed beside them as a second reference (torch_bf16_ms); a torch layer that fails its
check is not timed.

    PYTHONPATH=. python3 scripts/bench_moe.py --out moe.json [--experts 8,32] [--tokens 4096] \
        [--kinds bf16,bf16-unfused,bf16-gateup,fp8,fp8-gateup,fp8-blockwise,fp8-blockwise-gateup,fp8-blockwise-fusedq]
"""

from __future__ import annotations

import argparse
import enum
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
BLOCK = 128  # a blockwise scale's reach: 128 columns of an activation row, 128x128 of a weight
# torch's per-expert blockwise _scaled_mm runs on windows of a multiple of this many rows (`torch_blockwise_gemms`);
# `case` falls back to TORCH_BLOCKWISE_FALLBACK's windows where this torch refuses those too.
TORCH_BLOCKWISE_ROWS = 16
TORCH_BLOCKWISE_FALLBACK = 128


class Recipe(enum.Enum):
    """How the layer's GEMM operands are stored: bf16, or e4m3 with rowwise or blockwise scales (module docstring)."""

    BF16 = "bf16"
    ROWWISE = "fp8"
    BLOCKWISE = "fp8-blockwise"

    @property
    def fp8(self) -> bool:
        return self is not Recipe.BF16


class Form(enum.Enum):
    """How warploom's layer computes silu(x @ w1^T) * (x @ w3^T)."""

    UNFUSED = "unfused"  # one GEMM over w13 (R, 2I), then the SiLU-mul in torch
    TWO_GEMMS = "two GEMMs"  # the gate GEMM, then the up GEMM with silu(gate) * acc as its epilogue
    ONE_GEMM = "one GEMM"  # one GEMM over the interleaved weights, silu_mul_interleaved as its epilogue (rule 28)
    # TWO_GEMMS with h quantized 1x128 in the up GEMM's epilogue: it returns (q, s), which the down GEMM takes
    QUANTIZED = "two GEMMs, h quantized in the epilogue"


# Each kind (--kinds): its recipe and warploom's form of the gate/up.
KINDS = {"bf16": (Recipe.BF16, Form.TWO_GEMMS), "bf16-unfused": (Recipe.BF16, Form.UNFUSED),
         "bf16-gateup": (Recipe.BF16, Form.ONE_GEMM), "fp8": (Recipe.ROWWISE, Form.UNFUSED),
         "fp8-gateup": (Recipe.ROWWISE, Form.ONE_GEMM), "fp8-blockwise": (Recipe.BLOCKWISE, Form.TWO_GEMMS),
         "fp8-blockwise-gateup": (Recipe.BLOCKWISE, Form.ONE_GEMM),
         "fp8-blockwise-fusedq": (Recipe.BLOCKWISE, Form.QUANTIZED)}

# DeepSeek-V3's widths: hidden 7168, an expert's intermediate 2048; it routes each token to 8 of 256 experts, here
# to E / 4 of E (8 experts: 2, 32: 8), so 4096 tokens give each expert about 1024 rows, as DeepSeek's do at 32k.
HIDDEN, INTER = 7168, 2048
# Relative error of warploom's layer against torch's (blockwise: against the float layer of the dequantized
# operands): bf16 differs by GEMM rounding only; fp8 also where that rounding moves a value of h across an e4m3
# rounding boundary before the down GEMM (one e4m3 step, 6%, rarely).
TOLERANCE = {"bf16": 2e-2, "bf16-unfused": 2e-2, "bf16-gateup": 2e-2, "fp8": 4e-2, "fp8-gateup": 4e-2,
             "fp8-blockwise": 4e-2, "fp8-blockwise-gateup": 4e-2, "fp8-blockwise-fusedq": 4e-2}
# torch's bf16 layer against the fp8 layers' dequantized float layer (blockwise: its second reference): they differ
# by the operands' e4m3 quantization, a few percent.
BF16_VS_FP8 = 0.1
# The gate/up interleave's block (rule 28: BN = 2 * block); the intermediate width must be a multiple of it. fp8
# with exact (promoted) accumulation, as torch's layer runs it, takes 64: a 256-wide tile promotes into two
# 128-column accumulators, and a gate/up pair may not span them (rule 28).
GATE_UP_BLOCK = {Recipe.BF16: 128, Recipe.ROWWISE: 64, Recipe.BLOCKWISE: 64}


@dataclass(frozen=True)
class Gemms:
    """The layer's grouped GEMMs. Operands go as the recipe stores them: a bf16 tensor, or an fp8 pair (data,
    scales); ``mm(*a, *w, offs)`` with a (R, K), w (E, N, K) as stored, offs (E,) int32 (rowwise scales (R,) and
    (E, N), blockwise (R, K/128) and (E, N/128, K/128)). `gate_up`, if given, computes
    ``silu(a @ w13[:, :I]^T) * (a @ w13[:, I:]^T)`` (R, I) from a and w13 (``gate_up(*a, *w13, offs)``), or, where
    `block` is set, from a and the weights interleaved in blocks of `block` rows (`Layer.interleaved`); or h already
    quantized 1x128, its (q, s) pair (warploom's "fp8-blockwise-fusedq")."""

    name: str
    recipe: Recipe
    mm: Callable[..., torch.Tensor]
    gate_up: Callable[..., torch.Tensor | tuple[torch.Tensor, torch.Tensor]] | None = None
    block: int = 0  # (gate_up's interleave block, `Layer.interleaved`; 0: it takes w13 as stored)


def torch_gemms(recipe: Recipe) -> Gemms:
    """torch's grouped ops (bf16 and rowwise fp8; blockwise: `torch_blockwise_gemms`)."""
    if recipe is Recipe.ROWWISE:
        return Gemms("torch", recipe, lambda a, sa, w, sw, offs: torch._scaled_grouped_mm(
            a, w.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16))
    if recipe is Recipe.BF16:
        return Gemms("torch", recipe, lambda a, w, offs: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs))
    raise ValueError(f"torch has no grouped {recipe.value} op: use torch_blockwise_gemms(ends)")


def torch_blockwise_gemms(ends: list[int], rows: int = 0) -> Gemms:
    """torch's blockwise layer: one torch._scaled_mm (1x128 x 128x128) per non-empty expert over the rows
    ends[g] .. ends[g + 1] (cumulative row ends read on the host, a leading 0), as bench_blockwise.py calls it:
    scale_a (M_e, K/128) with strides (1, M_e) (torch's check: outer-dim-major, each expert's copied to it), scale_b
    (K/128, N/128) column-major (the (N/128, K/128) storage transposed). offs is ignored.
    cuBLASLt's blockwise path refuses a routing's ragged row counts (CUBLAS_STATUS_NOT_SUPPORTED from its heuristic on
    the H100), so each call takes a window of `rows` (default TORCH_BLOCKWISE_ROWS) multiples around the expert's
    rows: the rows after them (before them at A's end; zero rows appended where A has fewer than a window), computed
    with the expert's weights and dropped, as a trainer pads each expert's rows for torch's kernels. A window costs
    torch at most rows - 1 extra rows an expert and no copy of A."""
    pad = rows or TORCH_BLOCKWISE_ROWS

    def mm(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        outs = []
        for g, (s, e) in enumerate(zip(ends[:-1], ends[1:], strict=True)):
            if e == s:
                continue
            span = -(-(e - s) // pad) * pad
            lo = max(0, min(s, a.shape[0] - span))  # (the window [lo, lo + span) holds [s, e))
            aw, sw_a = a[lo:lo + span], sa[lo:lo + span]
            if aw.shape[0] < span:  # (A has fewer rows than one window: zero rows, unit scales)
                aw = torch.cat([aw.view(torch.uint8), aw.new_zeros(span - aw.shape[0], a.shape[1], dtype=torch.uint8)]
                               ).view(a.dtype)
                sw_a = torch.cat([sw_a, sw_a.new_ones(span - sw_a.shape[0], sa.shape[1])])
            out = torch._scaled_mm(aw, w[g].t(), sw_a.t().contiguous().t(), sw[g].t(), out_dtype=torch.bfloat16)
            outs.append(out[s - lo:e - lo])
        return torch.cat(outs)

    return Gemms("torch-loop", Recipe.BLOCKWISE, mm)


def reference_gemms(recipe: Recipe, block: int = 0) -> Gemms:
    """The float layer of the dequantized operands (fp8 recipes): each expert's rows of (a * scale_a) @ (w[g] *
    scale_b[g])^T in fp32, then the SiLU-mul in fp32 (of the interleaved product where `block` is set). offs is read
    on the host: a check, not a timed layer."""
    if not recipe.fp8:
        raise ValueError("the dequantized reference is for fp8 recipes")

    def deq(t: torch.Tensor, s: torch.Tensor, weight: bool) -> torch.Tensor:
        return t.float() * s[:, None] if recipe is Recipe.ROWWISE else dequantize(t, s, BLOCK if weight else 1)

    def mm(a: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        da, ends = deq(a, sa, False), [0, *offs.tolist()]
        out = torch.zeros(a.shape[0], w.shape[1], device=a.device)
        for g, (s, e) in enumerate(zip(ends[:-1], ends[1:], strict=True)):
            if e > s:  # (one expert's weights in fp32 at a time: 32 experts' w13 would be 4 GB)
                out[s:e] = da[s:e] @ deq(w[g], sw[g], True).t()
        return out

    def gate_up_il(*ops: torch.Tensor) -> torch.Tensor:
        import warploom

        return warploom.silu_mul_interleaved(mm(*ops), block=block)

    return Gemms("reference", recipe, mm, gate_up_il if block else None, block)


def warploom_gemms(recipe: Recipe = Recipe.BF16, form: Form = Form.TWO_GEMMS) -> Gemms:
    import warploom

    block = GATE_UP_BLOCK[recipe]
    fp8 = recipe.fp8

    def mm(*ops: torch.Tensor, **epilogue: Any) -> torch.Tensor:
        *ops_, offs = ops
        if fp8:
            a, sa, w, sw = ops_
            # (blockwise scale_b: the (E, N/128, K/128) storage as warploom's (E, K/128, N/128), DeepGEMM's way)
            sb = sw.transpose(-2, -1) if recipe is Recipe.BLOCKWISE else sw
            return warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs, **epilogue)
        a, w = ops_
        return warploom.grouped_mm(a, w.transpose(-2, -1), offs, **epilogue)

    def gate_up(*ops: torch.Tensor) -> Any:
        n = 2 if fp8 else 1  # (a's operands: the tensor, or its fp8 pair)
        a, w13, offs = ops[:n], ops[n:-1], ops[-1]
        gate, up = halves(w13, BLOCK if recipe is Recipe.BLOCKWISE else 1)
        fn = silu_mul_quantized if form is Form.QUANTIZED else silu_mul
        return mm(*a, *up, offs, epilogue=fn, gate=mm(*a, *gate, offs))

    def gate_up_il(*ops: torch.Tensor) -> torch.Tensor:
        return mm(*ops, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=block))

    if form is Form.ONE_GEMM:
        return Gemms("warploom", recipe, mm, gate_up_il, block)
    if form is Form.QUANTIZED and recipe is not Recipe.BLOCKWISE:
        raise ValueError(f"h quantized in the epilogue is the 1x128 recipe's: {recipe.value} takes another h")
    return Gemms("warploom", recipe, mm, gate_up if form in (Form.TWO_GEMMS, Form.QUANTIZED) else None)


def halves(w13: tuple[torch.Tensor, ...], rows: int = 1) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The gate and up halves of w13 (E, 2I, K) as stored, with their scales' halves: a scale covers `rows` rows of
    w13 (rowwise (E, 2I): 1; blockwise (E, 2I/128, K/128): 128, which needs I a multiple of 128, else a scale block
    would cover gate and up rows)."""
    inter = w13[0].shape[1] // 2
    if inter % rows:
        raise ValueError(f"I={inter}: the gate and up halves of a w13 whose scales cover {rows} rows each need I a "
                         f"multiple of {rows}")
    gate = (w13[0][:, :inter], *(s[:, :inter // rows] for s in w13[1:]))
    up = (w13[0][:, inter:], *(s[:, inter // rows:] for s in w13[1:]))
    return gate, up


def silu_mul(acc: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """The up GEMM's fused epilogue: silu(gate) times its fp32 accumulator."""
    return F.silu(gate.float()) * acc


def silu_mul_quantized(acc: torch.Tensor, gate: torch.Tensor) -> Any:
    """The up GEMM's fused epilogue returning h quantized 1x128: (q (R, I) e4m3, s (R, I/128) fp32), the down GEMM's
    A and blockwise scale_a."""
    import warploom

    return warploom.quantize(silu_mul(acc, gate), recipe="1x128")


def quantize_rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rowwise e4m3 over the last dimension: (data, scale) with t ~ data * scale, scale = amax / 448 (fp32).
    Three passes over t's size (`quantize_blocks`'s): the amax read from t itself, the fp32 quotient, its cast."""
    data, scale = quantize_blocks(t.unsqueeze(-2), 1, t.shape[-1])
    return data.squeeze(-2), scale.reshape(t.shape[:-1])


def quantize_blocks(t: torch.Tensor, rows: int, cols: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 in blocks of rows x cols over the last two dimensions (M, N): (data, scale) with t ~ data * scale over
    each block, scale (..., ceil(M/rows), ceil(N/cols)) = amax / 448 (fp32); ragged blocks take their valid values'
    amax (zero padding). It serves the timed layers (the activations, before each GEMM), so it makes no fp32 copy of
    t: the amax is one reduction over t as it is (max |t| is one of t's values, exact in its dtype), then one fp32
    quotient (t / scale, t's values widened exactly) and its cast, unclamped: |t| <= amax makes the quotient at most
    448 times (1 + 2^-22), which e4m3 rounds to 448."""
    m, n = t.shape[-2:]
    ragged = bool(m % rows or n % cols)
    p = F.pad(t, (0, -n % cols, 0, -m % rows)) if ragged else t
    blocks = p.unflatten(-1, (-1, cols)).unflatten(-3, (-1, rows))  # (..., MB, rows, NB, cols)
    amax = torch.linalg.vector_norm(blocks, float("inf"), dim=(-3, -1)).float()  # (..., MB, NB)
    scale = amax.clamp(min=1e-12) / E4M3_MAX
    data = (blocks / scale[..., :, None, :, None]).to(torch.float8_e4m3fn).flatten(-2).flatten(-3, -2)
    return (data[..., :m, :n].contiguous() if ragged else data), scale


def quantize_1x128(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations (R, K) in DeepSeek's 1x128 recipe: data (R, K), scales (R, K/128) column-major (strides
    (1, R): DeepGEMM's and torch's layout, read down a tile's rows)."""
    data, scale = quantize_blocks(t, 1)
    return data, scale.t().contiguous().t()


def dispatched(ops: tuple[torch.Tensor, ...], token: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rows `token` of an activation's operands as `ACTIVATION` made them (x's, quantized once per token:
    a rowwise or 1x128 scale is a row's own, so quantizing before the gather is quantizing after it, on 1/k of the
    rows): each tensor's rows gathered, fp8 data as bytes, outer-dim-major scales kept so."""
    out = []
    for t in ops:
        if t.dtype == torch.float8_e4m3fn:
            out.append(t.view(torch.uint8)[token].view(t.dtype))
        elif t.dim() == 2 and t.stride(0) == 1 and t.shape[1] > 1:  # (1x128 scales, (T, K/128) strides (1, T))
            out.append(torch.index_select(t.t(), 1, token).t())
        else:
            out.append(t[token])
    return tuple(out)


def dequantize(data: torch.Tensor, scale: torch.Tensor, rows: int, cols: int = BLOCK) -> torch.Tensor:
    """`quantize_blocks`'s inverse in fp32: data (M, N) times its block's scale."""
    m, n = data.shape[-2:]
    full = scale.repeat_interleave(rows, dim=-2)[..., :m, :].repeat_interleave(cols, dim=-1)[..., :n]
    return data.float() * full


# Each recipe's activation operands as moe_forward passes them: the tensor itself, or its quantized pair.
ACTIVATION: dict[Recipe, Callable[[torch.Tensor], tuple[torch.Tensor, ...]]] = {
    Recipe.BF16: lambda t: (t,), Recipe.ROWWISE: quantize_rows, Recipe.BLOCKWISE: quantize_1x128}


@dataclass(frozen=True)
class Layer:
    """The MoE layer's weights. Attributes: router (D, E); w13 (E, 2I, D) gate and up stacked, w2 (E, D, I), both
    (N, K) per expert as a linear layer stores them; w13_q, w2_q: their rowwise fp8 pairs (data, (E, N) scales).
    `blockwise`: their 128x128 pairs, made on first use."""

    router: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    w13_q: tuple[torch.Tensor, torch.Tensor]
    w2_q: tuple[torch.Tensor, torch.Tensor]

    @functools.cached_property
    def blockwise(self) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """w13 and w2 as blockwise fp8 pairs: data and (E, N/128, K/128) scales (DeepGEMM's storage)."""
        return quantize_blocks(self.w13, BLOCK), quantize_blocks(self.w2, BLOCK)

    def weights(self, recipe: Recipe) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """(w13, w2) as `recipe` stores them: each the bf16 tensor alone, or its fp8 pair."""
        if recipe is Recipe.BLOCKWISE:
            return self.blockwise
        return (self.w13_q, self.w2_q) if recipe is Recipe.ROWWISE else ((self.w13,), (self.w2,))

    def interleaved(self, block: int, recipe: Recipe = Recipe.BF16) -> tuple[torch.Tensor, ...]:
        """w13 with gate and up interleaved in blocks of `block` rows (`warploom.interleave_gate_up`), for the
        one-GEMM gate/up, as `recipe` stores it: rowwise, its data and scales interleaved alike; blockwise, the bf16
        weights interleaved and then quantized (each 128-row scale block then covers gate and up blocks of one tile
        at block 64; w1's and w3's own blocks would each cover two tiles' gate blocks)."""
        import warploom

        inter = self.w2.shape[2]

        def il(t: torch.Tensor, dim: int) -> torch.Tensor:
            gate, up = t.narrow(dim, 0, inter), t.narrow(dim, inter, inter)
            return warploom.interleave_gate_up(gate, up, block=block, dim=dim)

        if recipe is Recipe.ROWWISE:
            return il(self.w13_q[0], -2), il(self.w13_q[1], -1)
        if recipe is Recipe.BLOCKWISE:
            return quantize_blocks(il(self.w13, -2), BLOCK)
        return (il(self.w13, -2),)

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
                interleaved: tuple[torch.Tensor, ...] | None = None) -> torch.Tensor:
    """The layer's output (T, D) bf16 for tokens x (T, D) bf16 (module docstring); `interleaved`: the layer's
    `interleaved()` w13 in gemms' recipe, which gemms with a `block` take (made once, outside the timed call)."""
    token, weight, offs = route(x, layer.router, top_k)
    inter = layer.w2.shape[2]
    act = ACTIVATION[gemms.recipe]
    xs = dispatched(act(x), token)  # (R, D): x's rows (or their fp8 pair) sorted by expert
    w13, w2 = layer.weights(gemms.recipe)
    if gemms.gate_up is not None and gemms.block:
        if interleaved is None:
            interleaved = layer.interleaved(gemms.block, gemms.recipe)
        h = gemms.gate_up(*xs, *interleaved, offs)  # (R, I), SiLU-mul fused
    elif gemms.gate_up is not None:
        h = gemms.gate_up(*xs, *w13, offs)
    else:
        h = gemms.mm(*xs, *w13, offs)  # (R, 2I)
        h = F.silu(h[:, :inter]) * h[:, inter:]  # (R, I)
    # (h quantized in the gate/up GEMM's epilogue: its (q, s) pair as it is; else this recipe's quantization)
    y = gemms.mm(*(h if isinstance(h, tuple) else act(h)), *w2, offs)  # (R, D)
    out = torch.zeros_like(x, dtype=torch.float32)
    out.index_add_(0, token, y * weight[:, None])  # (bf16 y times fp32 weights: fp32, one kernel)
    return out.to(x.dtype)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in fp32 (inf where got has a NaN)."""
    d = (got.float() - want.float()).norm()
    return float(d / want.float().norm().clamp(min=1e-30))


def case(experts: int, tokens: int, kind: str, hidden: int = HIDDEN, inter: int = INTER, top_k: int = 0,
         device: str = "cuda", time_it: bool = True) -> dict[str, Any]:
    """One layer configuration (top_k 0: E / 4): warploom's layer checked against torch's (blockwise: against the
    float layer of the dequantized operands, torch's per-expert loop too), then (`time_it`) both timed, blockwise
    with torch's bf16 grouped layer beside them."""
    recipe, form = KINDS[kind]
    layer = Layer.random(experts, hidden, inter, device)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)).to(device, torch.bfloat16)
    k = top_k or max(1, experts // 4)
    ours = warploom_gemms(recipe, form)
    weights = layer.interleaved(ours.block, recipe) if ours.block else None  # (once: a model stores its weights so)
    run_ours = lambda: moe_forward(x, layer, ours, k, weights)  # noqa: E731
    # per token, 2 * (2I + I) * D multiply-adds in each of its k experts (the router's (T, D, E) left out)
    flops = 2 * tokens * k * 3 * inter * hidden
    row: dict[str, Any] = {"experts": experts, "tokens": tokens, "top_k": k, "hidden": hidden, "inter": inter,
                           "kind": kind}
    theirs: dict[str, Callable[[], torch.Tensor]] = {}  # (timed beside ours, as "<name>_ms")
    if recipe is Recipe.BLOCKWISE:
        want = moe_forward(x, layer, reference_gemms(recipe, ours.block), k, weights)
        err = row["err_vs_reference"] = relative_error(run_ours(), want)
        ends = [0, *route(x, layer.router, k)[2].tolist()]  # (the loop's row counts, on the host before capture)
        if form is Form.QUANTIZED:
            row["h_quantized"] = ("warploom: 1x128 in the up GEMM's epilogue (no pass for h); torch: unchanged, by "
                                  "the bench's torch code before the down GEMM")
        for pad in (TORCH_BLOCKWISE_ROWS, TORCH_BLOCKWISE_FALLBACK):  # (the first window this torch runs)
            row["torch_layer"] = (f"per-expert torch._scaled_mm loop, 1x128 x 128x128, row counts read on the host, "
                                  f"each expert's rows a window of a multiple of {pad} (cuBLASLt refuses ragged M; "
                                  f"the extra rows computed and dropped)")
            loop = torch_blockwise_gemms(ends, pad)
            try:
                torch_err = row["torch_err_vs_reference"] = relative_error(moe_forward(x, layer, loop, k), want)
            except (RuntimeError, NotImplementedError, ValueError) as e:  # (no blockwise _scaled_mm: CPU torch)
                row["torch_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
                continue
            row.pop("torch_error", None)
            if torch_err < TOLERANCE[kind]:
                theirs["torch"] = functools.partial(moe_forward, x, layer, loop, k)
            else:  # (torch's layer is timed only where it is checked)
                row["torch_error"] = f"torch's layer against the dequantized float layer: relative error " \
                                     f"{torch_err:.3g}; not timed"
            break
        # torch's bf16 grouped layer, a second reference: checked loosely against the same float layer (bf16 against
        # the fp8 operands' product: their quantization error, a few percent) before it is timed.
        bf16_layer = functools.partial(moe_forward, x, layer, torch_gemms(Recipe.BF16), k)
        row["torch_bf16_err_vs_reference"] = bf16_err = relative_error(bf16_layer(), want)
        if bf16_err < BF16_VS_FP8:
            theirs["torch_bf16"] = bf16_layer
        else:
            row["torch_bf16_error"] = f"relative error {bf16_err:.3g} against the dequantized layer; not timed"
    else:
        theirs["torch"] = lambda: moe_forward(x, layer, torch_gemms(recipe), k)
        err = row["err_vs_torch"] = relative_error(run_ours(), theirs["torch"]())
    if not err < TOLERANCE[kind]:
        against = "the dequantized float layer" if recipe is Recipe.BLOCKWISE else "torch's layer"
        row["error"] = f"mismatch against {against}: relative error {err:.3g}; not timed"
        return row
    if time_it:
        from warploom.runtime.timing import time_graph

        try:
            row["warploom_ms"] = time_graph(run_ours)
            for name, run in theirs.items():
                row[f"{name}_ms"] = time_graph(run)
        except RuntimeError as e:  # (a layer that cannot be captured: its check above still stands)
            row["error"] = f"timing: {e}"
            return row
        row["warploom_tflops"] = flops / row["warploom_ms"] / 1e9
        for name in theirs:
            row[f"{name}_tflops"] = flops / row[f"{name}_ms"] / 1e9
        if "torch_ms" in row:
            row["speedup"] = row["torch_ms"] / row["warploom_ms"]
        if "torch_bf16_ms" in row:
            row["speedup_vs_bf16"] = row["torch_bf16_ms"] / row["warploom_ms"]
    return row


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="moe.json")
    ap.add_argument("--experts", default="8,32", help="expert counts, comma-separated")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="bf16 (warploom's SiLU-mul fused into the up GEMM), bf16-unfused, bf16-gateup (one "
                         "interleaved gate/up GEMM, SiLU-mul fused), fp8 (rowwise), fp8-gateup, fp8-blockwise "
                         "(1x128 x 128x128, SiLU-mul fused; torch: a per-expert _scaled_mm loop), "
                         "fp8-blockwise-gateup, fp8-blockwise-fusedq (fp8-blockwise with h quantized in "
                         "warploom's up GEMM's epilogue; torch's layer unchanged)")
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--inter", type=int, default=INTER)
    ap.add_argument("--top-k", type=int, default=0, help="experts per token (default: experts / 4)")
    args = ap.parse_args(argv)
    args.experts = [int(e) for e in args.experts.split(",")]
    args.kinds = args.kinds.split(",")
    for kind in args.kinds:
        if kind not in KINDS:
            ap.error(f"--kinds: {', '.join(KINDS)}, not {kind!r}")
    return args


def summary(row: dict[str, Any]) -> str:
    """A measured row's line after its experts, tokens and kind: times, warploom's speedup and error, and for the
    blockwise kinds what torch's layer was and the bf16 grouped layer's time."""
    torch_ms = f"{row['torch_ms']:9.3f} {row['speedup']:8.3f}" if "torch_ms" in row else f"{'-':>9} {'-':>8}"
    err = row.get("err_vs_torch", row.get("err_vs_reference"))
    line = f"{row['warploom_ms']:12.3f} {torch_ms} {err:9.2e}"
    if "torch_bf16_ms" in row:
        line += (f"  (vs the dequantized layer; torch: {row.get('torch_error') or 'a per-expert _scaled_mm loop'}; "
                 f"torch bf16 grouped {row['torch_bf16_ms']:.3f} ms, x {row['speedup_vs_bf16']:.3f})")
    if "h_quantized" in row:
        line += f"  (h quantized: {row['h_quantized']})"
    return line


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    import warploom

    rows = []
    print(f"{'experts':>7} {'tokens':>6} {'kind':>20} {'warploom ms':>12} {'torch ms':>9} {'x torch':>8} "
          f"{'err':>9}")
    for e in args.experts:
        for kind in args.kinds:
            t0 = time.time()
            try:
                row = case(e, args.tokens, kind, args.hidden, args.inter, args.top_k)
            except Exception as err:  # (one configuration failing leaves the others measured)
                row = {"experts": e, "tokens": args.tokens, "kind": kind, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            if "error" in row:
                print(f"{e:>7} {args.tokens:>6} {kind:>20} {row['error']}")
            else:
                print(f"{e:>7} {args.tokens:>6} {kind:>20} {summary(row)}  ({time.time() - t0:.0f} s)")
            with open(args.out, "w") as f:  # (after every case: a timeout keeps what ran)
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                           "warploom": warploom.__version__, "rows": rows}, f, indent=1)
    if any("error" in row for row in rows):
        raise SystemExit(1)  # (a mismatch fails the gpu.sh job; torch refusing blockwise is "torch_error")


if __name__ == "__main__":
    main()
