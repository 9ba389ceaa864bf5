"""Gate/up weights interleaved for the one-GEMM SiLU-mul (issue 27): the layout, its inverse and its meaning.

A DeepSeek/Llama-style MLP computes ``silu(x @ w1.T) * (x @ w3.T)``, w1 (gate) and w3 (up) both (I, K). The one-GEMM
form multiplies by one weight of N = 2 I' rows (I' = I rounded up to `block`) that holds them **interleaved in blocks
of `block` rows**, gate block then up block:

    w = interleave_gate_up(w1, w3, block=B)     # (2 I', K): w1[0:B], w3[0:B], w1[B:2B], w3[B:2B], ...
    h = x @ w.T                                 # (M, 2 I'): columns [2kB, 2kB + B) gate, [2kB + B, 2kB + 2B) up
    y = silu_mul_interleaved(h, block=B)        # (M, I'):  silu(h[:, gate k]) * h[:, up k] into columns [kB, kB + B)

so a GEMM tile 2B = BN columns wide holds one gate block and its up block, and a fused epilogue can pair the tile's
left half with its right half and store a (BM, BN / 2) tile of the result: the gate never goes to memory.

I not a multiple of B: w1 and w3 are zero-padded to I' rows first, so the last pair is whole; the result's padded
columns are exactly 0 (silu(0) * 0), and ``y[..., :I]`` (or ``rows=I``) drops them. B is one of `BLOCKS`: half a tile
width the sm_90a planner can pin (BN = 2B = 64, 128 or 256); a fused kernel must be planned with BN = 2B, which is why
B is an argument everywhere rather than a default each side picks on its own.

Weights prepared once (``interleave_gate_up`` at load time); the same call interleaves anything indexed by the output
feature, along `dim`: expert weights (G, I, K) with dim=-2 (the default), an fp8 rowwise scale_b (1, I) or (I,) with
dim=-1, a bias (I,) with dim=0 (zero-padded alike).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from warploom.errors import ArgumentTypeError, DTypeError, InputError, ShapeError

# Interleave blocks a fused gate/up epilogue can be planned for: BN / 2 for the sm_90a tile widths 64, 128, 256.
BLOCKS = (32, 64, 128)


def check_block(block: object) -> int:
    """`block`, if it is one of `BLOCKS`; else an InputError naming it, what is allowed and the fix."""
    if isinstance(block, bool) or not isinstance(block, int) or block not in BLOCKS:
        raise InputError("block", f"one of {BLOCKS} (half the GEMM tile width BN the fused epilogue is planned for)",
                         repr(block), "interleave with block=64 (BN = 128) or block=128 (BN = 256), and pass the "
                         "same block to every call that reads the interleaved weight")
    return block


def interleave_gate_up(w1: torch.Tensor, w3: torch.Tensor, *, block: int, dim: int = -2) -> torch.Tensor:
    """w1 (gate) and w3 (up), equal shapes with I along `dim`, as one tensor of 2 I' along `dim` (I' = I rounded
    up to `block`, zero-padded): gate block 0, up block 0, gate block 1, ... (module docstring)."""
    check_block(block)
    for name, t in (("w1", w1), ("w3", w3)):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(name, "a torch.Tensor", type(t).__name__, f"pass {name} as a tensor")
    if w1.shape != w3.shape or w1.dtype != w3.dtype or w1.device != w3.device:
        raise ShapeError("w3", f"w1's shape, dtype and device ({tuple(w1.shape)}, {w1.dtype}, {w1.device})",
                         f"({tuple(w3.shape)}, {w3.dtype}, {w3.device})",
                         "pass the gate and up projections of one layer (each (I, K), or (G, I, K) per expert)")
    d = _dim(w1, dim, "w1")
    i = w1.shape[d]
    if i == 0:
        raise ShapeError("w1", f"at least one row along dim={dim}", f"shape {tuple(w1.shape)}",
                         "pass a layer with I > 0 output features")
    pairs = -(-i // block)
    g, u = (_pad(t, d, pairs * block) for t in (w1, w3))
    # (..., pairs, block, ...) twice -> (..., pairs, 2, block, ...) -> (..., 2 I', ...)
    shape = (*g.shape[:d], pairs, block, *g.shape[d + 1:])
    both = torch.stack((g.reshape(shape), u.reshape(shape)), dim=d + 1)
    return both.reshape(*g.shape[:d], 2 * pairs * block, *g.shape[d + 1:]).contiguous()


def deinterleave_gate_up(w: torch.Tensor, *, block: int, dim: int = -2,
                         rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `interleave_gate_up`: (w1, w3), each `rows` (default I') long along `dim`."""
    d, pairs = _pairs(w, block, dim, "w")
    shape = (*w.shape[:d], pairs, 2, block, *w.shape[d + 1:])
    halves = w.reshape(shape).unbind(d + 1)
    out = tuple(h.reshape(*w.shape[:d], pairs * block, *w.shape[d + 1:]) for h in halves)
    return _rows(out[0], d, rows, block), _rows(out[1], d, rows, block)


def silu_mul_interleaved(h: torch.Tensor, *, block: int, rows: int | None = None) -> torch.Tensor:
    """``silu(gate) * up`` of an interleaved GEMM result h (..., 2 I'): (..., I'), or (..., rows) with rows = I.

    The fused kernel's meaning: each value in fp32 (a bf16 h is widened, as the accumulator is), the result in h's
    dtype. Inside a fused epilogue, ``warploom.matmul(x, w.T, epilogue=lambda acc: silu_mul_interleaved(acc,
    block=B))``, h is the accumulator and the kernel stores the (M, N / 2) result: the graph's two `GateUpHalf`
    nodes and the SiLU-mul on them (docs/fused-epilogues.md)."""
    if isinstance(h, torch.fx.Proxy):  # traced inside a fused epilogue (warploom.epilogue.capture)
        check_block(block)
        if rows is not None:
            raise InputError("rows", "None inside a fused epilogue (the kernel stores the (M, N / 2) result)",
                             repr(rows), "drop rows= and slice the call's result: out[:, :I]")
        # Two recorded calls, which the capture lowers to the graph's `GateUpHalf` nodes; the rest is traced.
        gate: Any = h.tracer.create_proxy("call_function", gate_half, (h, block), {})
        up: Any = h.tracer.create_proxy("call_function", up_half, (h, block), {})
        return F.silu(gate) * up
    d, _ = _pairs(h, block, -1, "h", "pass the GEMM's result h (..., 2 I'), interleaved along its last dimension")
    if h.dtype not in (torch.float32, torch.bfloat16, torch.float16):  # (an int h would be truncated, silently)
        raise DTypeError("h", "torch.float32, torch.bfloat16 or torch.float16 (a GEMM's result)", str(h.dtype),
                         "pass the GEMM's result, or h.float()")
    gate, up = deinterleave_gate_up(h.float(), block=block, dim=d, rows=rows)
    return (F.silu(gate) * up).to(h.dtype)


def gate_half(h: torch.Tensor, block: int) -> torch.Tensor:
    """The gate columns of an interleaved h (..., 2 I'): (..., I'). Traced, the epilogue graph's `GateUpHalf`."""
    d, _ = _pairs(h, block, -1, "h")
    return deinterleave_gate_up(h, block=block, dim=d)[0]


def up_half(h: torch.Tensor, block: int) -> torch.Tensor:
    """The up columns of an interleaved h (..., 2 I'): (..., I'). Traced, the epilogue graph's `GateUpHalf`."""
    d, _ = _pairs(h, block, -1, "h")
    return deinterleave_gate_up(h, block=block, dim=d)[1]


def _dim(t: torch.Tensor, dim: int, name: str, fix: str | None = None) -> int:
    """`dim` of t, made non-negative; `fix` is the advice where the caller takes no dim= (silu_mul_interleaved)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ArgumentTypeError("dim", "an int", f"{type(dim).__name__} {dim!r}",
                                "pass dim=-2 for weights (I, K) or (G, I, K), dim=-1 for a (1, I) or (I,) scale")
    if t.layout is not torch.strided:  # (reshape and stack have no sparse forms: refused by name, not by torch)
        raise InputError(name, "a dense (strided) tensor", f"a {t.layout} tensor", f"pass {name}.to_dense()")
    if not -t.dim() <= dim < t.dim():
        raise ShapeError(name, f"a tensor with a dimension dim={dim}", f"shape {tuple(t.shape)}", fix or
                         "pass dim=-2 for weights (I, K) or (G, I, K), dim=-1 for a (1, I) or (I,) scale")
    return dim % t.dim()


def _pairs(t: torch.Tensor, block: int, dim: int, name: str, fix: str | None = None) -> tuple[int, int]:
    """`dim` made non-negative, and how many (gate, up) block pairs t holds along it."""
    check_block(block)
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(name, "a torch.Tensor", type(t).__name__, f"pass {name} as a tensor")
    d = _dim(t, dim, name, fix)
    n = t.shape[d]
    if n == 0 or n % (2 * block):
        raise ShapeError(name, f"a multiple of 2 * block = {2 * block} along dim={dim} (gate and up blocks of "
                         f"{block}, as interleave_gate_up writes them)", f"{n} (shape {tuple(t.shape)})",
                         "interleave the weights with interleave_gate_up(w1, w3, block=...) and pass the same block")
    return d, n // (2 * block)


def _pad(t: torch.Tensor, d: int, n: int) -> torch.Tensor:
    """t zero-padded to n along d."""
    if t.shape[d] == n:
        return t
    zeros = t.new_zeros(*t.shape[:d], n - t.shape[d], *t.shape[d + 1:])
    return torch.cat((t, zeros), dim=d)


def _rows(t: torch.Tensor, d: int, rows: int | None, block: int) -> torch.Tensor:
    """t's first `rows` along d: the unpadded I, which the zero padding of its last block left in (I' - block, I']."""
    if rows is None:
        return t
    padded = t.shape[d]
    if isinstance(rows, bool) or not isinstance(rows, int) or not padded - block < rows <= padded:
        raise InputError("rows", f"an int I with {padded - block} < I <= {padded} (the unpadded I)", repr(rows),
                         "pass the gate projection's row count, w1.shape[-2]")
    return t.narrow(d, 0, rows)
