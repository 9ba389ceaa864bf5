"""What `warploom bench` measures: the ops, the shapes, and the suites that pair them into cases.

Shapes are (M, N, K) with the output (M, N) and the weight (N, K), as a linear layer `x @ W.T` of M tokens.
Nothing here imports torch: the lists are plain data, checked by the CPU tests.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from warploom.dtypes import DType
from warploom.spec import SCALE_BLOCK


class Op(enum.Enum):
    """An operation timed against torch. The value is its name on the command line and in the JSON."""

    MATMUL_BF16 = "matmul_bf16"
    SCALED_MM_FP8_ROWWISE_FAST = "scaled_mm_fp8_rowwise_fast"
    SCALED_MM_FP8_ROWWISE_EXACT = "scaled_mm_fp8_rowwise_exact"
    SCALED_MM_FP8_TENSORWISE = "scaled_mm_fp8_tensorwise"
    FUSED_EPILOGUE = "fused_epilogue"  # scaled_mm fp8 rowwise (fast accum) + bias, then gelu(.) + residual
    # DeepSeek-V3's recipe: scale_a per row and 128 of K (1x128), scale_b per 128x128 block; promoted accumulation
    SCALED_MM_FP8_BLOCKWISE = "scaled_mm_fp8_blockwise"

    @property
    def fp8(self) -> bool:
        return self is not Op.MATMUL_BF16

    @property
    def fast_accum(self) -> bool:
        """torch._scaled_mm's use_fast_accum; tensorwise uses it as fp8 inference usually does. Blockwise scales
        promote each k-block's product into the fp32 accumulator (torch's kernel and warploom's alike)."""
        return self not in (Op.SCALED_MM_FP8_ROWWISE_EXACT, Op.SCALED_MM_FP8_BLOCKWISE)

    @property
    def label(self) -> str:
        """A short human name, for tables and plot legends."""
        return {
            Op.MATMUL_BF16: "matmul bf16",
            Op.SCALED_MM_FP8_ROWWISE_FAST: "fp8 rowwise, fast accum",
            Op.SCALED_MM_FP8_ROWWISE_EXACT: "fp8 rowwise, exact accum",
            Op.SCALED_MM_FP8_TENSORWISE: "fp8 tensorwise, fast accum",
            Op.FUSED_EPILOGUE: "fp8 rowwise + bias + gelu + residual",
            Op.SCALED_MM_FP8_BLOCKWISE: "fp8 blockwise 1x128 x 128x128",
        }[self]


class Group(enum.Enum):
    """Where a shape comes from; decode shapes are timed under CUDA graphs by default (host overhead dominates)."""

    SQUARE = "square"
    LLM = "llm"
    DECODE = "decode"
    ZOO = "zoo"


@dataclass(frozen=True)
class Shape:
    """One GEMM size.

    Attributes:
        m, n, k: the output is (m, n), the reduction k long.
        group: the shape's family.
        name: where it comes from, e.g. ``llama3-70b gate_up``.
    """

    m: int
    n: int
    k: int
    group: Group
    name: str

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise ValueError(f"Expected M, N, K >= 1 but got {self.m}x{self.n}x{self.k} ({self.name})")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def short(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class Tensor:
    """A tensor a case reads or writes, for counting bytes (the roofline) without torch.

    Attributes:
        name: the argument's name (``a``, ``scale_b``, ``out``, ...); shape; dtype.
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.bytes


@dataclass(frozen=True)
class Case:
    """One op at one shape: a line of the benchmark.

    Attributes:
        op: what is timed; shape: at which size.
    """

    op: Op
    shape: Shape

    def __post_init__(self) -> None:
        # torch._scaled_mm (and warploom.scaled_mm) take fp8 only with N and K multiples of 16.
        s = self.shape
        if self.op.fp8 and (s.n % 16 or s.k % 16):
            raise ValueError(f"Expected N and K multiples of 16 for {self.op.value} but got {s.short()} ({s.name})")

    @property
    def m(self) -> int:
        return self.shape.m

    @property
    def n(self) -> int:
        return self.shape.n

    @property
    def k(self) -> int:
        return self.shape.k

    @property
    def flops(self) -> int:
        return self.shape.flops

    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor the op reads, then its output (bf16): what moves through memory at least once."""
        m, n, k = self.m, self.n, self.k
        if self.op is Op.MATMUL_BF16:
            return Tensor("a", (m, k), DType.BF16), Tensor("b", (k, n), DType.BF16), Tensor("out", (m, n), DType.BF16)
        ab = Tensor("a", (m, k), DType.E4M3), Tensor("b", (k, n), DType.E4M3)
        if self.op is Op.SCALED_MM_FP8_TENSORWISE:
            scales = Tensor("scale_a", (), DType.FP32), Tensor("scale_b", (), DType.FP32)
        elif self.op is Op.SCALED_MM_FP8_BLOCKWISE:
            kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
            scales = Tensor("scale_a", (m, kb), DType.FP32), Tensor("scale_b", (kb, nb), DType.FP32)
        else:
            scales = Tensor("scale_a", (m, 1), DType.FP32), Tensor("scale_b", (1, n), DType.FP32)
        extra: tuple[Tensor, ...] = ()
        if self.op is Op.FUSED_EPILOGUE:
            extra = Tensor("bias", (n,), DType.BF16), Tensor("residual", (m, n), DType.BF16)
        return *ab, *scales, *extra, Tensor("out", (m, n), DType.BF16)

    def short(self) -> str:
        return f"{self.op.value} {self.shape.short()}"


# Square sizes: the usual GEMM sweep.
SQUARES: tuple[Shape, ...] = tuple(Shape(s, s, s, Group.SQUARE, f"square {s}") for s in (1024, 2048, 4096, 8192))


@dataclass(frozen=True)
class Llm:
    """A transformer's linear-layer sizes (weights are (N, K) = (out features, in features)).

    Attributes:
        name: e.g. ``llama3-8b``; hidden: model width; intermediate: MLP width; qkv: fused q, k, v outputs
        (heads * head_dim + 2 * kv_heads * head_dim).
    """

    name: str
    hidden: int
    intermediate: int
    qkv: int

    def shapes(self, m: int) -> tuple[Shape, ...]:
        """qkv, o_proj, gate_up (gate and up fused: 2x intermediate) and down, at M = m tokens."""
        nk = (("qkv", self.qkv, self.hidden), ("o_proj", self.hidden, self.hidden),
              ("gate_up", 2 * self.intermediate, self.hidden), ("down", self.hidden, self.intermediate))
        return tuple(Shape(m, n, k, Group.LLM, f"{self.name} {layer}") for layer, n, k in nk)


# Llama-3 8B: 32 heads of 128, 8 kv heads -> qkv 4096 + 2 * 1024. 70B: 64 heads, 8 kv heads -> 8192 + 2 * 1024.
LLAMA3_8B = Llm("llama3-8b", hidden=4096, intermediate=14336, qkv=6144)
LLAMA3_70B = Llm("llama3-70b", hidden=8192, intermediate=28672, qkv=10240)
PREFILL_TOKENS = 4096

# DeepSeek-V3 (hidden 7168), the dense GEMMs of DeepGEMM's benchmark, (N, K): the attention output projection
# (128 heads x 128 -> 7168), the shared expert's gate_up (2 x 2048) and down, and the fused q_a / kv_a projection
# (1536 + 512 + 64 rope = 2112).
DEEPSEEK_V3: tuple[tuple[str, int, int], ...] = (
    ("o_proj", 7168, 16384), ("shared-expert gate_up", 4096, 7168), ("q_a+kv_a", 2112, 7168),
    ("shared-expert down", 7168, 2048),
)

LLM_SHAPES: tuple[Shape, ...] = (
    *LLAMA3_8B.shapes(PREFILL_TOKENS), *LLAMA3_70B.shapes(PREFILL_TOKENS),
    *(Shape(PREFILL_TOKENS, n, k, Group.LLM, f"deepseek-v3 {layer}") for layer, n, k in DEEPSEEK_V3),
)

# Decode: a few tokens against an 8192 x 8192 weight; memory-bound (reading the weight is the whole cost).
DECODE_M: tuple[int, ...] = (1, 16, 64)
DECODE: tuple[Shape, ...] = tuple(Shape(m, 8192, 8192, Group.DECODE, f"decode M={m}") for m in DECODE_M)

ALL_SHAPES: tuple[Shape, ...] = (*SQUARES, *LLM_SHAPES, *DECODE)


# The zoo: sizes as people have them, not powers of two. ZOO_COUNT shapes draw M, N and K each log-uniformly from
# ZOO_LO..ZOO_HI, then ZOO_SMALL_M more draw M from 1..ZOO_LO (decode and small batches). A local Random(seed)
# (Mersenne Twister, the same sequence on every machine) makes the list a constant; tests pin part of it.
ZOO_SEED = 23
ZOO_COUNT = 200
ZOO_SMALL_M = 24
ZOO_LO, ZOO_HI = 64, 16384
# TMA's 16-byte rule on what run.py passes (checks.py): bf16 a (M, K) and the (N, K) weight have rows of K
# elements and the output rows of N, so K and N are multiples of 8; M is free. fp8 (1-byte rows, and
# torch._scaled_mm's own rule, see Case) wants N and K multiples of 16: its ops round the same draw up.
ZOO_BF16_ALIGN, ZOO_FP8_ALIGN = 8, 16
# torch's blockwise _scaled_mm takes scale_a (M, K/128) outer-dim-major only (stride (1, M)), and cuBLASLt refuses it
# unless those columns are 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED at every M % 4 != 0 of the zoo's shard 0 on
# the H200): the blockwise op rounds M up to a multiple of 4, as a caller of torch's must (warploom takes any M).
ZOO_BLOCKWISE_M_ALIGN = 4
# A draw above 2 * 8192^3 FLOP (at its fp8 rounding) is redrawn: ~1.5 ms a bf16 call on an H100, so a case's
# timing stays near do_bench's fixed 0.6 s. Memory needs no rule of its own: every dim <= 16384 keeps each
# tensor <= 16384^2 elements (the largest, the float64 copy of the output in the error check, 2 GiB).
ZOO_MAX_FLOPS = 2 * 8192**3


def _round_to(x: float, align: int) -> int:
    return max(align, align * round(x / align))


def _round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def _log_uniform(rng: random.Random, lo: int, hi: int) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def zoo_shapes(seed: int = ZOO_SEED, count: int = ZOO_COUNT, small_m: int = ZOO_SMALL_M) -> tuple[Shape, ...]:
    """`count` shapes with every dim log-uniform in ZOO_LO..ZOO_HI, then `small_m` with M in 1..ZOO_LO; N and K
    multiples of 8 (bf16's alignment: about half are not multiples of 16), M any integer, named ``zoo 000``...

    Each shape draws M, N, K in that order and is redrawn whole when over ZOO_MAX_FLOPS. Only the seed decides
    the list (math.exp could differ by an ulp across C libraries, which moves a dim only on an exact tie).
    """
    rng = random.Random(seed)
    out: list[Shape] = []
    while len(out) < count + small_m:
        m_lo, m_hi = (1, ZOO_LO) if len(out) >= count else (ZOO_LO, ZOO_HI)
        m = round(_log_uniform(rng, m_lo, m_hi))
        n, k = (_round_to(_log_uniform(rng, ZOO_LO, ZOO_HI), ZOO_BF16_ALIGN) for _ in range(2))
        if 2 * m * _round_up(n, ZOO_FP8_ALIGN) * _round_up(k, ZOO_FP8_ALIGN) > ZOO_MAX_FLOPS:
            continue
        out.append(Shape(m, n, k, Group.ZOO, f"zoo {len(out):03d}"))
    return tuple(out)


ZOO: tuple[Shape, ...] = zoo_shapes()


def for_op(shape: Shape, op: Op) -> Shape:
    """The shape `op` runs: fp8 ops round N and K up to multiples of 16, and blockwise M up to one of
    ZOO_BLOCKWISE_M_ALIGN (same name, so rows pair up by it)."""
    if not op.fp8:
        return shape
    n, k = _round_up(shape.n, ZOO_FP8_ALIGN), _round_up(shape.k, ZOO_FP8_ALIGN)
    m = _round_up(shape.m, ZOO_BLOCKWISE_M_ALIGN) if op is Op.SCALED_MM_FP8_BLOCKWISE else shape.m
    return shape if (m, n, k) == (shape.m, shape.n, shape.k) else Shape(m, n, k, shape.group, shape.name)


class Suite(enum.Enum):
    """A named list of cases: ``quick`` (a handful, under a minute on an H100 without --compile), ``full``, and
    ``zoo`` (every op at ZOO's 224 random shapes; run it in shards)."""

    QUICK = "quick"
    FULL = "full"
    ZOO = "zoo"


@dataclass(frozen=True)
class Shard:
    """Every `count`-th case starting at `index`: one GPU call's part of a long suite (``--shard 0/4``).

    Round-robin rather than contiguous blocks, so each shard gets a like mix of sizes and ops and about the
    same run time. Attributes: index; count.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"Expected a shard I/N with 0 <= I < N but got {self.index}/{self.count}")

    @staticmethod
    def parse(text: str) -> Shard:
        index, sep, count = text.strip().partition("/")
        # (ASCII digits only: str.isdigit also takes "²" and other scripts' digits)
        if not sep or not (index.isascii() and index.isdigit() and count.isascii() and count.isdigit()):
            raise ValueError(f"Expected a shard I/N such as 0/4 but got {text!r}")
        return Shard(int(index), int(count))

    def select(self, todo: Sequence[Case]) -> tuple[Case, ...]:
        return tuple(todo[self.index::self.count])

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _shape(name: str) -> Shape:
    return next(s for s in ALL_SHAPES if s.name == name)


# quick: every op at 4096^3; the two headline ops at one large LLM shape and one decode shape.
_QUICK: tuple[tuple[Op, str], ...] = (
    *((op, "square 4096") for op in Op),
    (Op.MATMUL_BF16, "llama3-8b gate_up"), (Op.SCALED_MM_FP8_ROWWISE_FAST, "llama3-8b gate_up"),
    (Op.MATMUL_BF16, "decode M=16"), (Op.SCALED_MM_FP8_ROWWISE_FAST, "decode M=16"),
)


def cases(suite: Suite, ops: tuple[Op, ...] | None = None, groups: tuple[Group, ...] | None = None,
          sizes: Collection[tuple[int, int, int]] | None = None) -> tuple[Case, ...]:
    """The suite's cases in its order (full and zoo op-major), kept only for `ops`, `groups` and (M, N, K) `sizes`
    (as each op sizes its shape, `for_op`) when given."""
    # (`for_op` in every suite: its fp8 rounding leaves the named shapes as they are, its blockwise M rounding makes
    # decode M = 1 a case torch's blockwise kernel takes)
    if suite is Suite.QUICK:
        everything = tuple(Case(op, for_op(_shape(name), op)) for op, name in _QUICK)
    elif suite is Suite.ZOO:
        everything = tuple(Case(op, for_op(s, op)) for op in Op for s in ZOO)
    else:
        everything = tuple(Case(op, for_op(s, op)) for op in Op for s in ALL_SHAPES)
    return tuple(c for c in everything
                 if (ops is None or c.op in ops) and (groups is None or c.shape.group in groups)
                 and (sizes is None or (c.m, c.n, c.k) in sizes))
