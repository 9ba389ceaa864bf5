"""GemmSpec: everything about a GEMM problem that the planner and the code generator may depend on.

A spec is built from tensors (`warploom.checks.spec_from_tensors`) or by hand for planning and tests.
It is frozen and hashable, so it keys caches.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from warploom.dtypes import DType
from warploom.errors import ArgumentTypeError, InputError

if TYPE_CHECKING:
    from warploom.epilogue.graph import EpilogueGraph


class ALayout(enum.Enum):
    """How A, logically (M, K), lies in memory.

    K_MAJOR: K is contiguous (a row-major (M, K) matrix, an activation). Its tiles are (BM, BK).
    M_MAJOR: M is contiguous (the transpose of a row-major (K, M) matrix, e.g. ``grad_out.t()`` in a backward pass's
             weight gradient). Its tiles are (BK, BM); wgmma reads them MN-major, which Hopper allows for 16-bit types
             only.
    """

    K_MAJOR = "k_major"
    M_MAJOR = "m_major"


class BLayout(enum.Enum):
    """How B, logically (K, N), lies in memory.

    K_MAJOR: K is contiguous (B is the transpose of a row-major (N, K) matrix, e.g. an nn.Linear weight,
             or what torch._scaled_mm requires). Its tiles are (BN, BK) and feed wgmma through a permuted view.
    N_MAJOR: N is contiguous (an ordinary row-major (K, N) matrix). Its tiles are (BK, BN); wgmma reads
             them MN-major, which Hopper allows for 16-bit types only.
    """

    K_MAJOR = "k_major"
    N_MAJOR = "n_major"


class ScaleRecipe(enum.Enum):
    """How fp8 inputs are dequantized.

    NONE: plain matmul. TENSORWISE: one fp32 scale per operand. ROWWISE: scale_a (M, 1), scale_b (1, N).
    Blockwise (DeepSeek-V3's recipe): one fp32 scale of A per row and 128-deep block of K, scale_a
    (M, ceil(K/128)); of B, BLOCKWISE_1X128_128X128: one per 128x128 block, scale_b (ceil(K/128), ceil(N/128));
    BLOCKWISE_1X128_1X128: one per column and 128-deep block of K, scale_b (ceil(K/128), N). The 128X128_* recipes
    scale A per 128x128 block instead, scale_a (ceil(M/128), ceil(K/128)) (torch's ScalingType.BlockWise128x128 for
    A): BLOCKWISE_128X128_1X128 with scale_b (ceil(K/128), N), the pair torch._scaled_mm takes;
    BLOCKWISE_128X128_128X128 with scale_b (ceil(K/128), ceil(N/128)), which torch refuses on CUDA. MX (OCP microscaling
    fp8): one e8m0 scale (a power of two) per 32 elements of K, scale_a (M, K/32) and scale_b (N, K/32) (a row of
    the (N, K) weight's); on Hopper each 32-deep slice is its own wgmma, promoted with its scales. NVFP4 (sm_100a
    only): e2m1 data with one e4m3 scale per 16 elements of K, (M, K/16) and (N, K/16) in torch's blocked layout,
    and a tensorwise fp32 global scale of each operand that multiplies the accumulator in the epilogue (torch's
    ScalingType.BlockWise1x16 with TensorWise). A blockwise
    product is ``sum over k-blocks kb of (A[:, kb] @ B[kb, :]) * scale_a[:, kb] * scale_b[kb, :]``: the scales
    change with kb, so they are applied in the mainloop, each k-block's partial promoted with its scales.
    """

    NONE = "none"
    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    BLOCKWISE_1X128_128X128 = "blockwise_1x128_128x128"
    BLOCKWISE_1X128_1X128 = "blockwise_1x128_1x128"
    MX = "mx"
    BLOCKWISE_128X128_1X128 = "blockwise_128x128_1x128"
    BLOCKWISE_128X128_128X128 = "blockwise_128x128_128x128"
    NVFP4 = "nvfp4"

    @property
    def is_blockwise(self) -> bool:
        """Whether the scales vary along K (applied per k-block in the mainloop, not in the epilogue)."""
        return self not in (ScaleRecipe.NONE, ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE)

    @property
    def block_a(self) -> bool:
        """Whether scale_a holds one value per 128 rows of A (a 128x128 block) rather than per row."""
        return self in (ScaleRecipe.BLOCKWISE_128X128_1X128, ScaleRecipe.BLOCKWISE_128X128_128X128)

    @property
    def block_b(self) -> bool:
        """Whether scale_b holds one value per 128x128 block of B (per 128 columns)."""
        return self.is_blockwise and not self.per_column_b

    @property
    def scale_k(self) -> int:
        """Elements of K one scale covers (blockwise recipes): 32 for MX, 16 for NVFP4, else 128."""
        return {ScaleRecipe.MX: MX_BLOCK, ScaleRecipe.NVFP4: NVFP4_BLOCK}.get(self, SCALE_BLOCK)

    @property
    def k_blocks(self) -> tuple[int, ...]:
        """The k-blocks (BK) a kernel of a blockwise recipe takes: one SCALE_BLOCK of K, whose scales each k-block's
        partial is promoted with (MX: four 32-deep slices of it); NVFP4's 64 or 128, one or two 128x4 chunks of e4m3
        scales of 16 of K each (ir/verify_scales.py checks the chunks). () for the others: any."""
        if not self.is_blockwise:
            return ()
        return (64, 128) if self is ScaleRecipe.NVFP4 else (SCALE_BLOCK,)

    @property
    def microscaled(self) -> bool:
        """Whether the scales are single-byte block scales the tensor core applies (MX's e8m0, NVFP4's e4m3)."""
        return self in (ScaleRecipe.MX, ScaleRecipe.NVFP4)

    @property
    def scale_dtype(self) -> DType:
        """The dtype of a microscaled recipe's block scales: e8m0 for MX, e4m3 for NVFP4 (fp32 for the others)."""
        return {ScaleRecipe.MX: DType.E8M0, ScaleRecipe.NVFP4: DType.E4M3}.get(self, DType.FP32)

    @property
    def per_column_b(self) -> bool:
        """Whether scale_b holds one value per column of B (1x128 x 1x128, MX) rather than per 128 columns."""
        return self in (ScaleRecipe.BLOCKWISE_1X128_1X128, ScaleRecipe.MX, ScaleRecipe.BLOCKWISE_128X128_1X128,
                        ScaleRecipe.NVFP4)

    def b_scales(self, cols: int) -> int:
        """scale_b values per k-block (or MX slice) that cover `cols` columns of B."""
        return cols if self.per_column_b else -(-cols // SCALE_BLOCK)

    def a_scales(self, rows: int) -> int:
        """scale_a values per k-block (or MX slice) that cover `rows` rows of A."""
        return -(-rows // SCALE_BLOCK) if self.block_a else rows


# A blockwise scale covers this many elements of K (and, for 128x128 blocks of B, of N); an MX scale 32 of K.
SCALE_BLOCK = 128
MX_BLOCK = 32
NVFP4_BLOCK = 16  # an NVFP4 (e4m3) scale covers 16 of K


class Grouping(enum.Enum):
    """How a grouped GEMM's rows split among its groups (the experts of a mixture-of-experts layer): one kernel runs
    every group's GEMM, C[rows of g] = A[rows of g] @ B[g], its persistent tile loop over (group, tile) pairs
    (`ir.Tiling.grouping`).

    NONE: an ordinary GEMM.
    OFFSETS: torch._grouped_mm's M-grouped layout: a 2-D A (total_M, K), a 3-D B (G, K, N) and int32 cumulative row
             ends `offs` (G,): group g owns rows offs[g-1] .. offs[g] (offs[-1] = 0) of A and C; rows past offs[G-1]
             are not touched.
    MASKED: DeepGEMM's masked layout (decode): A (G, M_max, K), seen as (G * M_max, K), and int32 counts
            `masked_m` (G,): group g owns rows g * M_max .. g * M_max + min(masked_m[g], M_max); C (G, M_max, N) is
            left as it was in the rest. 3-D x 3-D batched GEMMs run as MASKED with every count M_max.
    K_OFFSETS: torch._grouped_mm's K-grouped layout (the weight gradient): a 2-D A (M, total_K), a 2-D B
               (total_K, N) and int32 cumulative K ends `offs` (G,): C (G, M, N), seen as (G * M, N), has
               C[g] = A[:, offs[g-1] .. offs[g]] @ B[offs[g-1] .. offs[g]], zeros for an empty K range. M is then
               one group's rows, K all groups' (total_K).
    """

    NONE = "none"
    OFFSETS = "offsets"
    MASKED = "masked"
    K_OFFSETS = "k_offsets"


class ScaleLayout(enum.Enum):
    """How MX and NVFP4 scales are laid out in memory (`GemmSpec.scale_layout`).

    ROW_MAJOR: (M, K/32) and (N, K/32) (NVFP4: K/16), any strides (sm_90a and sm_100a's seed 000 scale partition read
        them element by element).
    BLOCKED: torch's swizzled "blocked" layout (``to_blocked``, cuBLAS's SWIZZLE_32_4_4): rows padded to 128 and
        scales to 4 per row, each 128x4 block 512 contiguous bytes, the byte of row r and scale c at
        ``(r % 32) * 16 + (r // 32) * 4 + c``; blocks ordered by 128 rows, then by 4 scales. What sm_100a's
        tcgen05.cp reads (seed 001): TMA copies a k-block's block whole."""

    ROW_MAJOR = "row_major"
    BLOCKED = "blocked"


class Accumulation(enum.Enum):
    """How fp32 accumulation is kept exact enough.

    NATIVE: the tensor core's accumulator throughout (exact for 16-bit inputs; for fp8 this is
            torch's use_fast_accum=True, whose accumulator keeps fewer mantissa bits).
    PROMOTED: for fp8, each k-block's product goes to a fresh partial accumulator that is added into
            a full-precision fp32 accumulator in registers (torch's use_fast_accum=False accuracy).
    """

    NATIVE = "native"
    PROMOTED = "promoted"


# The kernels index rows, columns and K with 32-bit integers: Triton passes the sizes as i32 (runtime/cross.py's
# `signature`; at 2^31 or more its JIT would specialize them i64, a kernel no cross-compile checked), a TMA or TDM
# copy's coordinates are signed 32-bit, and a tile count is ``gl.cdiv(M, BM)``, which adds BM - 1 to M in i32 first.
# A tile spans at most 256 along any dimension (BM and BN: `planning.plan_check`; BK 128 or less), so every size up
# to 2^31 - 256 keeps each coordinate, tile end and cdiv sum below 2^31. Element offsets (row * stride) are 64-bit
# wherever a tensor may reach 2^31 elements (tests/unit/test_wide_offsets.py), so element counts are not bounded:
# M * K = 2^40 passes. (Tile counts, cdiv(M, BM) * cdiv(N, BN), stay below 2^31 for any C a GPU holds: 2^31 tiles
# of at least 64 x 8 are 2^40 elements.)
MAX_SIZE = 2**31 - 256
# A grouped rowwise scale_b (G, N) is offset by ``grp * N`` in i32 (test_wide_offsets.py's NARROW): below 2^31.
MAX_GROUPED_SCALES = 2**31


def oversized(m: int, n: int, k: int, grouping: Grouping = Grouping.NONE, groups: int = 0,
              scale: ScaleRecipe = ScaleRecipe.NONE) -> tuple[str, int, int] | None:
    """The first size of a problem that its kernels cannot index, as (name, value, the most it may be): M, N or K
    (`MAX_SIZE`); a K-grouped problem's G * M rows of C (its tiles' row origin is ``grp * M + off_m``); a grouped
    rowwise scale_b's G * N elements (`MAX_GROUPED_SCALES`). None when all fit, or when the problem is empty (no
    kernel runs)."""
    if m == 0 or n == 0 or k == 0:
        return None
    sizes = [("M", m, MAX_SIZE), ("N", n, MAX_SIZE), ("K", k, MAX_SIZE)]
    if grouping is Grouping.K_OFFSETS:
        sizes.append(("G * M", groups * m, MAX_SIZE))
    if grouping is not Grouping.NONE and scale is ScaleRecipe.ROWWISE:
        sizes.append(("G * N", groups * n, MAX_GROUPED_SCALES))
    return next(((name, value, most) for name, value, most in sizes if value > most), None)


# Where rows may start (GemmSpec.a_row_align, b_row_align): 0 for "as a contiguous tensor's", else bytes; 16 is the
# least TMA takes, LINE_BYTES an L2 line.
LINE_BYTES = 128
ROW_ALIGNS = (0, 16, 32, 64, LINE_BYTES)


def align_of(nbytes: int) -> int:
    """The largest power of two up to an L2 line (`LINE_BYTES`) that divides `nbytes` (a line for 0)."""
    nbytes %= LINE_BYTES
    return LINE_BYTES if nbytes == 0 else nbytes & -nbytes


# GemmSpec's enum fields and their types (`GemmSpec.__post_init__` checks each).
_FIELD_KINDS: tuple[tuple[str, type[enum.Enum]], ...] = (
    ("a_dtype", DType), ("b_dtype", DType), ("out_dtype", DType), ("scale", ScaleRecipe),
    ("accumulation", Accumulation), ("b_layout", BLayout), ("a_layout", ALayout), ("grouping", Grouping),
    ("scale_layout", ScaleLayout))


@dataclass(frozen=True)
class GemmSpec:
    """One GEMM problem: C (M, N) = epilogue(A (M, K) @ B (K, N)).

    Attributes:
        m, n, k: problem sizes.
        a_dtype, b_dtype: input element types (both 16-bit and equal, or both fp8).
        out_dtype: the output element type.
        b_layout: which dimension of B is contiguous (C is row-major).
        a_layout: which dimension of A is contiguous (M-major for 16-bit inputs only).
        scale_layout: MX and NVFP4 only: row-major (M, K/32) (NVFP4: K/16) scales or torch's swizzled "blocked"
            ones (`ScaleLayout`).
        scale: the fp8 scale recipe (NONE for 16-bit inputs).
        accumulation: NATIVE or PROMOTED (fp8 only).
        bias_dtype: dtype of a (N,) bias added in the epilogue, or None.
        epilogue: a fused epilogue (warploom.epilogue): the function of the fp32 accumulator and the operands
            that the kernel stores instead of the cast accumulator; for scaled_mm its accumulator already
            holds ``acc * scale_a * scale_b + bias``, folded into the graph as operands scale_a, scale_b
            and bias. None: store the accumulator (after the scale and bias steps) as out_dtype.
        grouping: a grouped GEMM (`Grouping`): M is then all groups' rows together (A's rows), and B holds one
            (K, N) matrix per group (K_OFFSETS: M is one group's rows and K all groups' K ranges together).
        groups: the number of groups G a grouped spec was planned for (0 for an ordinary GEMM). The kernel takes
            G at run time; the planner reads the rows per group, M / G.
        a_row_align, b_row_align: where A's (B's) rows as stored start, the largest of 16, 32, 64 and 128 bytes
            dividing every row's address, where the tensors' strides and address give other than a contiguous
            tensor's rows would (`contiguous_row_align`); 0: as those give it (the rows padded to whole 128-byte
            lines, `warploom.aligned_rows`, or a view of wider rows give more; an offset view can give less).
            The planner prices rows that are not whole L2 lines (`row_align`); the kernel is the same either way.
    """

    m: int
    n: int
    k: int
    a_dtype: DType = DType.BF16
    b_dtype: DType = DType.BF16
    out_dtype: DType = DType.BF16
    b_layout: BLayout = BLayout.K_MAJOR
    scale: ScaleRecipe = ScaleRecipe.NONE
    accumulation: Accumulation = Accumulation.NATIVE
    bias_dtype: DType | None = None
    epilogue: EpilogueGraph | None = None
    a_layout: ALayout = ALayout.K_MAJOR
    grouping: Grouping = Grouping.NONE
    groups: int = 0
    scale_layout: ScaleLayout = ScaleLayout.ROW_MAJOR
    a_row_align: int = 0
    b_row_align: int = 0

    def __post_init__(self) -> None:
        # A spec built by hand (warploom.GemmSpec is public) is checked like the calls' tensors: by field, with a fix.
        # (warploom.checks derives specs from tensors and refuses those mistakes first, by the tensors' names. The
        # eager grouped calls build a spec per call: the common case takes one type test a field.)
        for name in ("m", "n", "k", "groups", "a_row_align", "b_row_align"):
            value = getattr(self, name)
            if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ArgumentTypeError(name, "an int", f"{type(value).__name__} {value!r}", f"pass {name} as an int")
        for name, kind in _FIELD_KINDS:
            value = getattr(self, name)
            if type(value) is not kind:
                raise ArgumentTypeError(name, f"a warploom {kind.__name__}", f"{type(value).__name__} {value!r}",
                                        f"pass e.g. {name}={kind.__name__}.{next(iter(kind)).name}")
        if self.bias_dtype is not None and type(self.bias_dtype) is not DType:  # (a torch dtype is the usual slip)
            raise ArgumentTypeError("bias_dtype", "None or a warploom DType",
                                    f"{type(self.bias_dtype).__name__} {self.bias_dtype!r}",
                                    "pass bias_dtype=DType.BF16 (DType.FP16, DType.FP32), or None for no bias")
        if self.epilogue is not None:
            from warploom.epilogue.graph import EpilogueGraph  # (at run time only here: the package imports more)

            if not isinstance(self.epilogue, EpilogueGraph):  # (a function is what matmul's epilogue= takes)
                raise ArgumentTypeError("epilogue", "None or a captured EpilogueGraph",
                                        f"{type(self.epilogue).__name__} {self.epilogue!r}",
                                        "pass the function as epilogue=fn to warploom.matmul, scaled_mm or plan, "
                                        "which capture it, or warploom.epilogue.capture(fn, ...)'s graph here")

        if min(self.m, self.n, self.k) < 0:
            raise InputError("m, n, k", "sizes >= 0 (GemmSpec sizes must be >= 0)", f"{self.m}, {self.n}, {self.k}",
                             "pass non-negative sizes")
        if self.a_dtype.block_scaled != self.b_dtype.block_scaled:
            raise InputError("b_dtype", f"a dtype of a's kind: a GemmSpec never mixes fp8 and 16-bit inputs (a_dtype "
                             f"{self.a_dtype.value})", self.b_dtype.value,
                             "pass both 16-bit (and equal) or both fp8/fp4")
        if not self.a_dtype.block_scaled and self.a_dtype != self.b_dtype:
            raise InputError("b_dtype", f"{self.a_dtype.value}: 16-bit inputs must match", self.b_dtype.value,
                             f"pass b_dtype=DType.{self.a_dtype.name}")
        if self.a_dtype == DType.FP32:
            raise InputError("a_dtype", "bf16, fp16, fp8 or fp4: inputs cannot be fp32", "fp32",
                             "pass bf16 inputs (torch.matmul computes fp32 itself)")
        if self.out_dtype in (DType.E2M1, DType.E8M0):  # (no kernel stores them: the planner failed deep in a rule)
            raise InputError("out_dtype", "bf16, fp16, fp32, e4m3 or e5m2", self.out_dtype.value,
                             "pass out_dtype=DType.BF16, or DType.E4M3 or DType.E5M2 for an fp8 result")
        if self.bias_dtype not in (None, DType.BF16, DType.FP16, DType.FP32):
            raise InputError("bias_dtype", "None, bf16, fp16 or fp32", self.bias_dtype.value,
                             "pass bias_dtype=DType.BF16, or None for no bias")
        fp8 = self.a_dtype.block_scaled
        if fp8 and self.b_layout is not BLayout.K_MAJOR:
            raise InputError("b_layout", "K_MAJOR: fp8 wgmma reads both operands K-major", self.b_layout.value,
                             "pass b_layout=BLayout.K_MAJOR (b as b_nk.t())")
        if fp8 and self.a_layout is not ALayout.K_MAJOR:
            raise InputError("a_layout", "K_MAJOR: fp8 wgmma reads both operands K-major", self.a_layout.value,
                             "pass a_layout=ALayout.K_MAJOR (a row-major)")
        if fp8 == (self.scale is ScaleRecipe.NONE):
            raise InputError("scale", "a scale recipe for fp8 inputs, and none for 16-bit ones (fp8 inputs need a "
                             "scale recipe and 16-bit inputs none)", self.scale.value,
                             "pass scale=ScaleRecipe.ROWWISE (or another recipe) with fp8, ScaleRecipe.NONE with "
                             "bf16/fp16")
        if self.accumulation is Accumulation.PROMOTED and not fp8:
            raise InputError("accumulation", "NATIVE: PROMOTED accumulation only applies to fp8 inputs", "promoted",
                             "pass accumulation=Accumulation.NATIVE")
        if self.scale_layout is ScaleLayout.BLOCKED and not self.scale.microscaled:
            raise InputError("scale_layout", "ROW_MAJOR: only MX and NVFP4 scales come in the blocked layout",
                             f"blocked with {self.scale.value} scales", "pass scale_layout=ScaleLayout.ROW_MAJOR")
        if self.mixed_fp4 and self.scale is not ScaleRecipe.MX:
            raise InputError("scale", "MX: MX fp8 x fp4 (kind::mxf8f6f4) takes MX scales",
                             f"{self.scale.value} ({self.a_dtype.value} x {self.b_dtype.value})",
                             "pass scale=ScaleRecipe.MX")
        if self.scale is ScaleRecipe.NVFP4 and not (self.fp4_a and self.fp4_b):
            raise InputError("a_dtype, b_dtype", "e2m1 both: NVFP4 scales go with e2m1 inputs",
                             f"{self.a_dtype.value} x {self.b_dtype.value}",
                             "pass e2m1 inputs, or scale=ScaleRecipe.MX")
        if self.scale.is_blockwise and self.accumulation is not Accumulation.PROMOTED:
            raise InputError("accumulation", "PROMOTED: blockwise scales are applied at each k-block's promotion "
                             "(accumulation must be PROMOTED)", self.accumulation.value,
                             "pass accumulation=Accumulation.PROMOTED")
        if (self.grouping is Grouping.NONE) != (self.groups == 0) or self.groups < 0:
            raise InputError("groups", "a grouped spec has groups >= 1, an ordinary one 0",
                             f"{self.groups} with grouping {self.grouping.value}",
                             "pass groups=E (the experts) with a grouping, or 0 without")
        big = oversized(self.m, self.n, self.k, self.grouping, self.groups, self.scale)
        if big is not None:  # (the calls' checks refuse it first, naming the tensor: `checks.indexable`)
            name, value, most = big
            raise InputError({"M": "m", "N": "n", "K": "k"}.get(name, "groups"), f"{name} at most {most} (the "
                             "kernels index with 32-bit integers: spec.MAX_SIZE)", f"{name} = {value}",
                             f"split the problem along {name} into problems of at most {most} each")
        for name in ("a_row_align", "b_row_align"):
            value = getattr(self, name)
            if value not in ROW_ALIGNS:
                raise InputError(name, "0 (rows as a contiguous tensor's) or 16, 32, 64 or 128 (bytes)", repr(value),
                                 f"pass {name}=0, or the largest of 16, 32, 64, 128 dividing every row's address")
            if value == self.contiguous_row_align(name[0]):  # (one spelling a problem: specs compare and hash alike)
                object.__setattr__(self, name, 0)
        problems = self.grouped_problems() if self.grouped else []
        if problems:
            raise InputError("grouping", "a spec a grouped kernel takes", f"{self.grouping.value}, but grouped GEMMs "
                             f"do not take {'; '.join(problems)}", "drop those fields, or plan the GEMMs one by one")

    def contiguous_row_align(self, operand: str) -> int:
        """Where `operand`'s ("a" or "b") rows start when it is contiguous: its row length's largest power-of-two
        byte divisor up to 128 (a row of K elements, or M or N for an M- or N-major operand)."""
        if operand == "a":
            row, bits = (self.k if self.a_layout is ALayout.K_MAJOR else self.m), self.a_dtype.bits
        else:
            row, bits = (self.k if self.b_layout is BLayout.K_MAJOR else self.n), self.b_dtype.bits
        return align_of(row * bits // 8)

    def row_align(self, operand: str) -> int:
        """Where `operand`'s ("a" or "b") rows start as stored: 16, 32, 64 or 128 bytes (`a_row_align`)."""
        given = self.a_row_align if operand == "a" else self.b_row_align
        return given or self.contiguous_row_align(operand)

    @property
    def grouped(self) -> bool:
        """Whether this is a grouped GEMM (`Grouping`)."""
        return self.grouping is not Grouping.NONE

    def grouped_problems(self) -> list[str]:
        """What a grouped kernel does not (yet) take; empty when this spec's other fields are all it takes."""
        problems = []
        if self.scale not in (ScaleRecipe.NONE, ScaleRecipe.ROWWISE, ScaleRecipe.BLOCKWISE_1X128_128X128,
                              ScaleRecipe.MX, ScaleRecipe.NVFP4):
            problems.append(f"{self.scale.value} scales (bf16/fp16, fp8 rowwise and blockwise 1x128 x 128x128, and "
                            "MX and NVFP4 on sm_100a, only)")
        if self.bias_dtype is not None:
            problems.append("a bias (torch._scaled_grouped_mm takes none either)")
        if self.epilogue is not None and len(self.epilogue.outputs) != 1 and not self.epilogue.stores_pair():
            problems.append("a fused epilogue with several outputs but a warploom.quantize pair (q, s)")
        if self.a_layout is not ALayout.K_MAJOR:
            problems.append("an M-major A")
        return problems

    def sm90_grouped_problems(self) -> list[str]:
        """What the sm_90a grouped kernel does not take, beside `grouped_problems`: MX and NVFP4 scales (sm_100a's
        block-scaled MMA applies them; sm_90a would promote them, which no grouped kernel does)."""
        return [f"{self.scale.value} scales (grouped MX and NVFP4 GEMMs are built for sm_100a only)"] \
            if self.scale.microscaled else []

    def sm100_grouped_problems(self) -> list[str]:
        """What the sm_100a grouped kernel (rule 22 on sm_100a) does not take yet, beside `grouped_problems`: M-grouped
        (offs) only; bf16 / fp16, or MX fp8, MX fp4 (both operands e2m1) or NVFP4 with row-major scales (seed 000's
        scale partition reads each tile's expert's rows unpadded); no fused epilogue."""
        problems = []
        if self.grouping is not Grouping.OFFSETS:
            problems.append(f"{self.grouping.value} grouping (M-grouped offs only on sm_100a so far)")
        if self.scale.microscaled and self.scale_layout is ScaleLayout.BLOCKED:
            problems.append(f"{self.scale.value} scales in the blocked layout (row-major, unpadded per-expert scales "
                            "only)")
        elif self.scale not in (ScaleRecipe.NONE, ScaleRecipe.MX, ScaleRecipe.NVFP4):
            problems.append(f"{self.scale.value} scales (bf16 / fp16, or MX fp8 / fp4 and NVFP4 with row-major "
                            "scales, on sm_100a)")
        if self.mixed_fp4:
            problems.append("MX fp8 x fp4 (its fp4 operand's padded 3-D box is not built; MX fp8 or MX fp4 on both "
                            "operands)")
        if self.epilogue is not None:
            problems.append("a fused epilogue (the sm_100a grouped epilogue stores the product only so far)")
        return problems

    @property
    def is_fp8(self) -> bool:
        """Scaled low-precision inputs: fp8, or MX fp4 (e2m1, sm_100a only), which take the same checks."""
        return self.a_dtype.block_scaled

    @property
    def is_fp4(self) -> bool:
        """fp4 inputs (e2m1, two a byte along K), one operand or both: sm_100a's block-scaled tcgen05 MMA only."""
        return self.fp4_a or self.fp4_b

    @property
    def fp4_a(self) -> bool:
        """Whether A is e2m1: (M, K/2) bytes, two values of K a byte."""
        return self.a_dtype is DType.E2M1

    @property
    def fp4_b(self) -> bool:
        """Whether B is e2m1: (K/2, N) bytes, two values of K a byte."""
        return self.b_dtype is DType.E2M1

    @property
    def mixed_fp4(self) -> bool:
        """MX fp8 x fp4 (either way round): one operand e4m3 / e5m2, the other e2m1, both with e8m0 scales per 32
        (tcgen05's kind::mxf8f6f4, which reads the fp4 operand one value a byte in shared memory)."""
        return self.fp4_a != self.fp4_b

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def narrow_problems(self) -> list[str]:
        """Why this problem cannot run on a narrow or fitted tile (planner rules 31 and 32, `ir.Tiling.n_blocks`);
        empty when it can. The planner refuses a forced one by these and the verifier checks a module by them."""
        problems = []
        if self.epilogue is not None:
            problems.append("a fused epilogue (its blocks are staged and stored at one width)")
        if self.accumulation is not Accumulation.NATIVE:
            problems.append("promoted accumulation (its column blocks are the promotion's)")
        if self.b_layout is not BLayout.K_MAJOR:
            problems.append("an N-major B (a block of its slot would cut its swizzled rows)")
        if self.grouped:
            problems.append("a grouped GEMM")
        return problems

    def swap_problems(self, tmem_scales: bool = False) -> list[str]:
        """Why this problem cannot run swapped (`swapped`); empty when it can. `tmem_scales`: for sm_100a, whose
        seed 000 scale partition reads row-major MX / NVFP4 scales of A and of B alike."""
        problems = []
        if self.b_layout is not BLayout.K_MAJOR:
            problems.append("an N-major B (its (N, K) rows would be the swapped A, which must be K-contiguous)")
        if self.a_layout is not ALayout.K_MAJOR:
            problems.append("an M-major A (its rows would be the swapped B's, not built)")
        from warploom.epilogue.operands import OperandKind  # (the epilogue package imports this module)

        dense = [o.name for o in self.epilogue.operands if o.kind is OperandKind.DENSE] if self.epilogue else []
        if dense:
            problems.append(f"a dense epilogue operand ({', '.join(dense)}: its rows are contiguous in C, so C^T's "
                            "would be strided)")
        # MX and NVFP4 scales in torch's blocked layout are laid out alike for A's rows and B's (each (rows, K/32)
        # or (rows, K/16) in 128x4 blocks), so they trade sides whole; so do row-major ones ((M, K/32) and
        # (N, K/32)) on sm_100a, whose scale partition reads both operands' rows the same way. fp32 blockwise blocks
        # and sm_90a's row-major MX scales (its swapped kernel would need scale_b's rows per row of A, not built)
        # do not.
        row_scales = tmem_scales and self.scale.microscaled
        if self.scale.is_blockwise and self.scale_layout is not ScaleLayout.BLOCKED and not row_scales:
            problems.append("blockwise scales other than MX's or NVFP4's in torch's blocked layout (their blocks are "
                            "laid out for A and B, not swapped)")
        if self.grouped:
            problems.append("a grouped GEMM (its groups split A's rows)")
        return problems

    def swapped(self, tmem_scales: bool = False) -> GemmSpec:
        """The transposed problem a swap-AB plan runs (planner rule 18): C^T (N, M) = B^T (N, K) @ A^T (K, M).

        B's (N, K) rows, K-contiguous, are the new A; A's (M, K) rows are a K-major new B. Rowwise scales trade
        sides (scale_b, one per column of C, is one per row of C^T); tensorwise ones commute, as NVFP4's global
        scales do; MX and NVFP4 block scales in the blocked layout trade sides whole; a fused epilogue's
        row and column operands trade kinds (`EpilogueGraph.transposed`). See `swap_problems` for what cannot
        swap (`tmem_scales`: sm_100a's, where row-major MX / NVFP4 scales trade sides too)."""
        problems = self.swap_problems(tmem_scales)
        if problems:
            raise ValueError(f"{self.short()} cannot run swapped: {'; '.join(problems)}")
        return replace(self, m=self.n, n=self.m, a_dtype=self.b_dtype, b_dtype=self.a_dtype,
                       epilogue=None if self.epilogue is None else self.epilogue.transposed(),
                       a_row_align=self.b_row_align, b_row_align=self.a_row_align)

    def short(self) -> str:
        """A compact name, e.g. ``e4m3xe4m3->bf16 rowwise 4096x4096x4096``."""
        recipe = "" if self.scale is ScaleRecipe.NONE else f" {self.scale.value}"
        acc = " promoted" if self.accumulation is Accumulation.PROMOTED else ""
        return (
            f"{self.a_dtype.value}x{self.b_dtype.value}->{self.out_dtype.value}{recipe}{acc} "
            f"{self.m}x{self.n}x{self.k}{' a=m_major' if self.a_layout is ALayout.M_MAJOR else ''} "
            f"b={self.b_layout.value}{' +epilogue' if self.epilogue else ''}"
            f"{f' grouped={self.grouping.value}x{self.groups}' if self.grouped else ''}"
            f"{' scales=blocked' if self.scale_layout is ScaleLayout.BLOCKED else ''}"
            f"{f' a_rows={self.a_row_align}B' if self.a_row_align else ''}"
            f"{f' b_rows={self.b_row_align}B' if self.b_row_align else ''}"
        )

    def output_shapes(self, m: int | None = None, n: int | None = None) -> tuple[tuple[int, int], ...]:
        """Each output's shape for an (M, N) result (default the spec's): (M, N), or a fused quantization's scales
        (`OutputLayout.GROUPS`): (M, ceil(N/128)) for 1x128, (M, 1) for rowwise."""
        m, n = self.m if m is None else m, self.n if n is None else n
        if self.epilogue is None:
            return ((m, n),)
        return tuple(self.epilogue.output_shape(j, m, n) for j in range(len(self.epilogue.outputs)))

    def output_dtypes(self) -> tuple[DType, ...]:
        """The stored type of each output: out_dtype, or each fused-epilogue output's."""
        if self.epilogue is None:
            return (self.out_dtype,)
        return tuple(o.resolve(self.out_dtype) for o in self.epilogue.outputs)


def check_spec(spec: object) -> GemmSpec:
    """`spec` if it is a `GemmSpec`; a warploom error naming it otherwise (a tuple of sizes would fail deep in a rule).
    `plan_schedule` and `autotune` both check theirs here."""
    if not isinstance(spec, GemmSpec):
        raise ArgumentTypeError("spec", "a warploom.GemmSpec", f"{type(spec).__name__} {spec!r}",
                                "pass warploom.GemmSpec(m, n, k, ...), or start from tensors (warploom.plan(a, b), "
                                "tune_matmul(a, b))")
    return spec
