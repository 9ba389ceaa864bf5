"""The epilogue IR: an elementwise function of the fp32 accumulator tile and the operands, in SSA form.

An `EpilogueGraph` is a tuple of nodes in definition order; a node names its inputs by their index in that
tuple (a `Ref`), always an earlier one. Every value is an fp32 number (held in fp32 registers on the GPU) or a
bool (the result of a comparison). A `Cast` rounds an fp32 value to a narrower type's grid and keeps it in
fp32, which is what a ``.to(torch.bfloat16)`` in the middle of an epilogue means for the values that follow.
The meaning of every op is `warploom.epilogue.reference`'s: that interpreter is the single definition that the
simulator and the tests use, and the Gluon emitter implements.

The graph checks itself on construction (`EpilogueGraph.__post_init__`): SSA order, operand names and kinds,
value types (bool only where a condition is expected), cast targets. A graph that exists is well formed.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from warploom.dtypes import DType
from warploom.epilogue.operands import OperandKind, OperandSpec

# A node's input: the index of an earlier node of the same graph.
Ref = int


class UnaryOp(enum.Enum):
    """fp32 -> fp32 functions. The value is the name in the graph's text form."""

    NEG = "neg"
    ABS = "abs"
    RELU = "relu"  # max(x, 0); NaN stays NaN, as in torch.relu
    GELU_ERF = "gelu"  # x/2 (1 + erf(x / sqrt 2)): F.gelu(x) (approximate="none")
    GELU_TANH = "gelu_tanh"  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): F.gelu(x, approximate="tanh")
    SILU = "silu"  # x * sigmoid(x)
    SIGMOID = "sigmoid"  # 1 / (1 + exp(-x))
    TANH = "tanh"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"


class BinaryOp(enum.Enum):
    """(fp32, fp32) -> fp32 with broadcasting."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # true division, rounded to nearest (IEEE), as torch's
    MAXIMUM = "maximum"  # NaN if either is NaN, as torch.maximum
    MINIMUM = "minimum"


class CompareOp(enum.Enum):
    """(fp32, fp32) -> bool. Every comparison with NaN is false except NE."""

    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"


# Types a Cast may round to, and an output may be stored as. fp32 is no cast at all; the fp8 types round with
# saturation to their largest finite value (FP8_MAX) as the H100's cvt.rn.satfinite does, and as torch._scaled_mm's
# fp8 outputs are (cuBLAS converts with satfinite): infinities too, while NaN stays NaN.
CAST_DTYPES = (DType.BF16, DType.FP16, DType.E4M3, DType.E5M2)
OUTPUT_DTYPES = (DType.FP32, DType.BF16, DType.FP16, DType.E4M3, DType.E5M2)
E4M3_MAX = 448.0
E5M2_MAX = 57344.0
FP8_MAX = {DType.E4M3: E4M3_MAX, DType.E5M2: E5M2_MAX}


@dataclass(frozen=True)
class Acc:
    """The fp32 accumulator tile: (M, N), already scaled by scale_a * scale_b for scaled_mm."""


@dataclass(frozen=True)
class Operand:
    """The operand passed as ``name=``, converted to fp32; `kind` says how it varies over (M, N)."""

    name: str
    kind: OperandKind


@dataclass(frozen=True)
class Const:
    """A constant: a float, or a bool (a folded comparison)."""

    value: float | bool

    def __post_init__(self) -> None:
        if not isinstance(self.value, (float, bool)):
            raise TypeError(f"Const value must be a float or a bool, got {type(self.value).__name__}")

    def __eq__(self, other: object) -> bool:
        # Bit-exact identity, so that CSE keeps 0.0 and -0.0 apart and merges equal NaNs.
        return isinstance(other, Const) and _const_key(self.value) == _const_key(other.value)

    def __hash__(self) -> int:
        return hash(_const_key(self.value))


def _const_key(v: float | bool) -> tuple[str, str]:
    if isinstance(v, bool):
        return ("bool", str(v))
    return ("float", "nan" if math.isnan(v) else v.hex())


@dataclass(frozen=True)
class Unary:
    op: UnaryOp
    x: Ref


@dataclass(frozen=True)
class Binary:
    op: BinaryOp
    x: Ref
    y: Ref


@dataclass(frozen=True)
class Compare:
    op: CompareOp
    x: Ref
    y: Ref


@dataclass(frozen=True)
class Where:
    """``x`` where `cond` (a bool value) holds, else ``y``."""

    cond: Ref
    x: Ref
    y: Ref


@dataclass(frozen=True)
class Cast:
    """`x` rounded (to nearest even) to `dtype`'s values, kept in fp32. fp8 saturates (E4M3 to +-448, E5M2 to
    +-57344)."""

    x: Ref
    dtype: DType

    def __post_init__(self) -> None:
        if self.dtype not in CAST_DTYPES:
            raise ValueError(f"Cast to {self.dtype}: expected one of {[d.value for d in CAST_DTYPES]}")


@dataclass(frozen=True)
class Clamp:
    """``min(max(x, lo), hi)``, a missing bound being no bound; NaN stays NaN, as in torch.clamp."""

    x: Ref
    lo: float | None
    hi: float | None

    def __post_init__(self) -> None:
        if self.lo is None and self.hi is None:
            raise ValueError("Clamp needs at least one bound")


@dataclass(frozen=True)
class Pow:
    """``x ** exponent`` for a constant exponent, with torch.pow's meaning (powf: NaN for a negative base and
    a non-integer exponent)."""

    x: Ref
    exponent: float


GROUP = 128  # the output columns one 1x128 GroupAmax group (and one 1x128 scale) covers


@dataclass(frozen=True)
class GroupAmax:
    """The NaN-propagating maximum of ``|x|`` over the output columns of each value's group, per row: the amax of
    ``warploom.quantize(y, recipe="1x128")`` (``width`` 128: columns ``128j .. 128j + 127``; a ragged last group only
    over the columns < N) or of ``recipe="rowwise"`` (``width`` None: one group, the whole row's columns < N).
    Constant along a group's columns, so within a column block (which never straddles a group) it varies along M
    only. At most one per graph.

    Attributes:
        x: the value whose magnitude it takes.
        width: the columns of a group, or None for the whole row (rowwise; a tile must then hold all of N).
    """

    x: Ref
    width: int | None = GROUP

    def __post_init__(self) -> None:
        if self.width is not None and self.width < 1:
            raise ValueError(f"GroupAmax width={self.width}: expected a positive column count, or None (the row)")

    def start(self, col: int) -> int:
        """The first output column of column `col`'s group."""
        return 0 if self.width is None else col // self.width * self.width

    def span(self, col: int, n: int) -> tuple[int, int]:
        """The output columns [lo, hi) of column `col`'s group, below N."""
        lo = self.start(col)
        return lo, n if self.width is None else min(lo + self.width, n)

    def index(self, col: int) -> int:
        """The group (the scale column) of output column `col`."""
        return 0 if self.width is None else col // self.width

    def groups(self, n: int) -> int:
        """How many groups (scales) a row of N columns has: ceil(N / width), or 1 for the row."""
        return 1 if self.width is None else -(-n // self.width)

    def tile_cols(self, bn: int) -> int:
        """The accumulator columns one group takes in a tile `bn` wide: its width, or (rowwise) the whole tile,
        which the planner makes hold all of N (rule 27)."""
        return bn if self.width is None else self.width


class Half(enum.Enum):
    """Which half of an interleaved gate/up pair (`GateUpHalf`). The value is its text form."""

    GATE = "gate"
    UP = "up"


@dataclass(frozen=True)
class GateUpHalf:
    """One half of a value over interleaved gate/up columns (``warploom.silu_mul_interleaved``, issue 27): the
    GEMM's N = 2 I' columns hold gate block 0, up block 0, gate block 1, ... of `block` columns each
    (``warploom.interleave_gate_up``), and this node is `x` at the gate (or up) columns, a value over the I' result
    columns: result column c is x's column ``2 * block * (c // block) + c % block`` (+ block for UP).

    Nodes that read a half are over the I' columns too (the graph's *half space*); they may also read values
    constant along N (column operands, scalars), never one over N (acc, a row or dense operand): that would pair
    columns of two spaces. A graph with halves stores only half-space outputs, (M, N / 2) each, and a tile BN =
    2 * block wide holds one gate block and its up block (the planner pins BN so).

    Attributes:
        x: a value over the N columns (acc, or acc scaled per column: scaled_mm's prologue).
        half: GATE or UP.
        block: the interleave block, one of ``warploom.gate_up.BLOCKS``.
    """

    x: Ref
    half: Half
    block: int

    def __post_init__(self) -> None:
        if self.block < 1:
            raise ValueError(f"GateUpHalf block={self.block}: expected a positive column count")

    def source(self, col: int) -> int:
        """The column of x that result column `col` reads."""
        b = self.block
        return 2 * b * (col // b) + col % b + (b if self.half is Half.UP else 0)


Node = Acc | Operand | Const | Unary | Binary | Compare | Where | Cast | Clamp | Pow | GroupAmax | GateUpHalf


def inputs(node: Node) -> tuple[Ref, ...]:
    """The refs a node reads, in order."""
    match node:
        case Unary() | Cast() | Clamp() | Pow() | GroupAmax() | GateUpHalf():
            return (node.x,)
        case Binary() | Compare():
            return (node.x, node.y)
        case Where():
            return (node.cond, node.x, node.y)
        case _:
            return ()


class ValueType(enum.Enum):
    FLOAT = "f32"
    BOOL = "bool"


class OutputLayout(enum.Enum):
    """How an output covers the (M, N) result. The value is its text form."""

    FULL = "full"  # (M, N): one value per element
    # (M, groups): one value per row and group of the graph's GroupAmax (1x128 scales: (M, ceil(N/128)); rowwise
    # scales: (M, 1))
    GROUPS = "groups"


@dataclass(frozen=True)
class Output:
    """One result of the epilogue.

    Attributes:
        value: the node it is.
        dtype: the stored type, from a final ``.to(dtype)`` in the function; None for the call's out_dtype.
        layout: FULL, or GROUPS for a value constant along each group of the graph's `GroupAmax`, stored once
            per group (the scales of ``warploom.quantize``), fp32.
    """

    value: Ref
    dtype: DType | None = None
    layout: OutputLayout = OutputLayout.FULL

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in OUTPUT_DTYPES:
            raise ValueError(f"Output dtype {self.dtype}: expected one of {[d.value for d in OUTPUT_DTYPES]}")
        if self.layout is OutputLayout.GROUPS and self.dtype is not DType.FP32:
            raise ValueError(f"Output layout groups: expected dtype fp32 (scales), got {self.dtype}")

    def resolve(self, out_dtype: DType) -> DType:
        """The stored dtype, given the call's out_dtype."""
        return out_dtype if self.dtype is None else self.dtype


@dataclass(frozen=True)
class EpilogueGraph:
    """An epilogue: `nodes` in SSA order, the `outputs`, and the `operands` its outputs read.

    Attributes:
        nodes: every value, each reading only earlier ones.
        outputs: one or more results; each is a float value.
        operands: the specs of the operands that `Operand` nodes name, in the order the user passed them.
    """

    nodes: tuple[Node, ...]
    outputs: tuple[Output, ...]
    operands: tuple[OperandSpec, ...] = ()

    def __post_init__(self) -> None:
        problems = _verify(self)
        if problems:
            raise ValueError("invalid epilogue graph:\n" + "\n".join(f"  - {p}" for p in problems))

    def operand(self, name: str) -> OperandSpec:
        for s in self.operands:
            if s.name == name:
                return s
        raise KeyError(f"no operand named {name!r}")

    def types(self) -> tuple[ValueType, ...]:
        """Each node's value type."""
        return tuple(_types(self.nodes))

    def kinds(self) -> tuple[OperandKind, ...]:
        """How each node's value varies over (M, N): its register shape in a tile ([BM, BN], [BM, 1], ...)."""
        out: list[OperandKind] = []
        for nd in self.nodes:
            match nd:
                case Acc():
                    out.append(OperandKind.DENSE)
                case Operand():
                    out.append(nd.kind)
                case Const():
                    out.append(OperandKind.SCALAR)
                case GroupAmax():
                    out.append(OperandKind.COLUMN)  # (per row; constant along the block's columns)
                case _:
                    k = OperandKind.SCALAR
                    for r in inputs(nd):
                        k = k.join(out[r])
                    out.append(k)
        return tuple(out)

    def transposed(self) -> EpilogueGraph:
        """The same function over the transposed output (planner rule 18): every row operand becomes a column
        one and back (`OperandSpec.transposed`); elementwise nodes do not care which axis is which."""
        if self.group_amax() is not None:
            raise ValueError("a graph with a group amax has no transpose: its groups run along N")
        if self.gate_up() is not None:
            raise ValueError("a graph with gate/up halves has no transpose: its pairs run along N")
        nodes = tuple(replace(nd, kind=self.operand(nd.name).transposed().kind) if isinstance(nd, Operand) else nd
                      for nd in self.nodes)
        return EpilogueGraph(nodes, self.outputs, tuple(s.transposed() for s in self.operands))

    def uses_acc(self) -> bool:
        return any(isinstance(nd, Acc) for nd in self.nodes)

    def group_amax(self) -> Ref | None:
        """The `GroupAmax` node (at most one), if the graph has one."""
        return next((i for i, nd in enumerate(self.nodes) if isinstance(nd, GroupAmax)), None)

    def amax(self) -> GroupAmax:
        """The `GroupAmax` node itself (the graph must have one: `group_amax`)."""
        ref = self.group_amax()
        if ref is None:
            raise ValueError("the epilogue graph has no group amax")
        nd = self.nodes[ref]
        assert isinstance(nd, GroupAmax)
        return nd

    def rowwise(self) -> bool:
        """Whether the graph quantizes rowwise: its `GroupAmax` spans the whole row (planner rule 27)."""
        return self.group_amax() is not None and self.amax().width is None

    def reads_amax(self) -> bool:
        """Whether an output reads the group amax (a quantization's q and s do; rule 29's first pass, `amax_pass`,
        stores the value the amax is of and publishes the amax itself, so none of its outputs does)."""
        ref = self.group_amax()
        return ref is not None and ref in self.live_nodes([o.value for o in self.outputs])

    def live_nodes(self, roots: list[Ref]) -> set[Ref]:
        """`roots` and every node they read, transitively."""
        live: set[Ref] = set()
        stack = list(roots)
        while stack:
            r = stack.pop()
            if r not in live:
                live.add(r)
                stack.extend(inputs(self.nodes[r]))
        return live

    def stores_pair(self) -> bool:
        """Whether the graph stores exactly a ``warploom.quantize`` pair (q, s), either recipe: an fp8 output then
        its groups output, as ``return warploom.quantize(y, ...)`` traces (a grouped GEMM takes no other several
        outputs: `GemmSpec.grouped_problems`)."""
        if self.group_amax() is None or len(self.outputs) != 2:
            return False
        q, s = self.outputs
        return q.dtype in FP8_MAX and q.layout is OutputLayout.FULL and s.layout is OutputLayout.GROUPS

    def quantized_pair(self) -> tuple[DType, int] | None:
        """(fp8 dtype, amax's input) where the graph stores exactly a rowwise ``warploom.quantize`` pair (q, s)
        (`stores_pair`), as ``return warploom.quantize(y, recipe="rowwise")`` traces; else None. Planner rule 29 runs
        such a graph in two passes (`amax_pass`, then the cast kernel)."""
        q = self.outputs[0].dtype
        if not self.rowwise() or not self.stores_pair() or q is None:
            return None
        return q, inputs(self.amax())[0]

    def amax_pass(self) -> EpilogueGraph:
        """Rule 29's first pass of a rowwise quantization (`quantized_pair`): the nodes up to the group amax, one
        output, y (the value the amax is of) in fp32. A tile stores y to the fp32 workspace and folds its columns'
        row amax, which it publishes by an atomic max (ir.AtomicAmax); the cast kernel then divides y by the row's
        scale. y in fp32 is every value the graph computes exactly (a bf16 y is an fp32 value rounded to bf16), so the
        two passes give the one-pass graph's bits."""
        pair = self.quantized_pair()
        ref = self.group_amax()
        if pair is None or ref is None:
            raise ValueError("amax_pass: expected a graph that stores exactly a rowwise quantize pair (q, s)")
        return EpilogueGraph(self.nodes[:ref + 1], (Output(pair[1], DType.FP32),), self.operands)

    def gate_up(self) -> int | None:
        """The interleave block of the graph's `GateUpHalf` nodes (all share one), or None without them."""
        return next((nd.block for nd in self.nodes if isinstance(nd, GateUpHalf)), None)

    def halved(self) -> tuple[bool, ...]:
        """Per node, whether it is over the I' result columns of a gate/up graph (a `GateUpHalf`, or reads one)."""
        out: list[bool] = []
        for nd in self.nodes:
            out.append(isinstance(nd, GateUpHalf) or any(out[r] for r in inputs(nd)))
        return tuple(out)

    def output_shape(self, j: int, m: int, n: int) -> tuple[int, int]:
        """Output j's stored shape for an (M, N) result: (M, N), a groups output's (M, groups), or a gate/up
        graph's (M, N / 2)."""
        if self.outputs[j].layout is OutputLayout.GROUPS:
            return m, self.amax().groups(n)
        if self.gate_up() is not None:
            return m, n // 2
        return m, n

    def before_amax(self) -> tuple[Ref, ...]:
        """The nodes the group amax's input reads (itself included), in order: what a block evaluates to fold its
        share of the amax in, before any node that reads the amax."""
        g = self.group_amax()
        if g is None:
            return ()
        return tuple(sorted(self.live_nodes([inputs(self.nodes[g])[0]])))


def _types(nodes: tuple[Node, ...]) -> list[ValueType]:
    out: list[ValueType] = []
    for nd in nodes:
        bool_result = isinstance(nd, Compare) or (isinstance(nd, Const) and isinstance(nd.value, bool))
        out.append(ValueType.BOOL if bool_result else ValueType.FLOAT)
    return out


def _verify(g: EpilogueGraph) -> list[str]:
    problems: list[str] = []
    specs = {s.name: s for s in g.operands}
    if len(specs) != len(g.operands):
        problems.append(f"duplicate operand names in {[s.name for s in g.operands]}")
    types = _types(g.nodes)
    for i, nd in enumerate(g.nodes):
        refs = inputs(nd)
        if any(not isinstance(r, int) or r < 0 or r >= i for r in refs):
            problems.append(f"%{i} {nd}: inputs must be earlier nodes")
            continue
        if isinstance(nd, Operand):
            spec = specs.get(nd.name)
            if spec is None:
                problems.append(f"%{i}: operand {nd.name!r} has no spec in operands")
            elif spec.kind is not nd.kind:
                problems.append(f"%{i}: operand {nd.name!r} is {nd.kind.value} but its spec says {spec.kind.value}")
        want_bool = (True, False, False) if isinstance(nd, Where) else (False,) * len(refs)
        for r, wb in zip(refs, want_bool, strict=True):
            if (types[r] is ValueType.BOOL) != wb:
                problems.append(f"%{i} {type(nd).__name__}: input %{r} must be {'bool' if wb else 'a float'}")
    amaxes = [i for i, nd in enumerate(g.nodes) if isinstance(nd, GroupAmax)]
    if len(amaxes) > 1:
        problems.append(f"group amax nodes {['%' + str(i) for i in amaxes]}: at most one per graph")
    kinds = g.kinds() if not problems else ()
    if not g.outputs:
        problems.append("no outputs")
    for j, o in enumerate(g.outputs):
        if not 0 <= o.value < len(g.nodes):
            problems.append(f"output {j}: %{o.value} is not a node")
        elif types[o.value] is not ValueType.FLOAT:
            problems.append(f"output {j}: %{o.value} is a bool, not a float")
        elif o.layout is OutputLayout.GROUPS and not amaxes:
            problems.append(f"output {j}: a groups output needs the graph's group amax (its groups are the amax's)")
        elif o.layout is OutputLayout.GROUPS and kinds and kinds[o.value].varies_n:
            problems.append(f"output {j}: a groups output must be constant along each group's columns (made of "
                            f"the group amax, column operands and constants), but %{o.value} varies along N")
    if not problems:
        problems += _verify_gate_up(g, kinds)
    return problems


def _verify_gate_up(g: EpilogueGraph, kinds: tuple[OperandKind, ...]) -> list[str]:
    """A gate/up graph's spaces: halves of values over N, of one block; no node pairing a half with a value over
    N; half-space outputs only; no group amax."""
    halves = [i for i, nd in enumerate(g.nodes) if isinstance(nd, GateUpHalf)]
    if not halves:
        return []
    problems: list[str] = []
    blocks = sorted({nd.block for nd in g.nodes if isinstance(nd, GateUpHalf)})
    if len(blocks) > 1:
        problems.append(f"gate/up halves of blocks {blocks}: one interleave block per graph")
    if g.group_amax() is not None:
        problems.append("a group amax beside gate/up halves: quantizing the half-width result is not built")
    halved = g.halved()
    for i, nd in enumerate(g.nodes):
        if isinstance(nd, GateUpHalf):
            if halved[nd.x] or not kinds[nd.x].varies_n:
                problems.append(f"%{i}: a gate/up half of %{nd.x}, which is not a value over the N columns")
        elif halved[i] and any(not halved[r] and kinds[r].varies_n for r in inputs(nd)):
            problems.append(f"%{i} {type(nd).__name__}: pairs a gate/up half (over N / 2 columns) with a value over "
                            "the N columns")
    for j, o in enumerate(g.outputs):
        if not halved[o.value]:
            problems.append(f"output {j}: %{o.value} is not over the gate/up halves' columns (every output of a "
                            "gate/up graph is (M, N / 2))")
    return problems
