"""Element offsets that can pass 2^31 are 64-bit (issue 28, item 4: operands of 2^31 elements or more).

Triton passes an int argument below 2^31 as i32, and a product of two i32 values wraps silently, so
``row * stride`` addresses the wrong element once the tensor it walks has 2^31 elements or more. TMA descriptors
are 64-bit already; this reads every pointer expression of the generated Gluon (without a GPU) and checks that
each multiplication in it has a 64-bit factor: a ``.to(gl.int64)`` value, or a name assigned from one. Indices
themselves stay 32-bit: what stands inside a ``.to(gl.int64)`` is not checked. The few products left 32-bit are
listed in `NARROW`, each with why it stays below 2^31.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from warploom import H100_SXM, Accumulation, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.backends.gluon_sm90 import scale_offsets_wide, wide
from warploom.device import B200, GFX1250
from warploom.kernel import build
from warploom.planner import plan_schedule

E4, BF16 = DType.E4M3, DType.BF16
RW, PROMOTED = ScaleRecipe.ROWWISE, Accumulation.PROMOTED
BW, BW1, BW128 = (ScaleRecipe.BLOCKWISE_1X128_128X128, ScaleRecipe.BLOCKWISE_1X128_1X128,
                  ScaleRecipe.BLOCKWISE_128X128_128X128)

# 32-bit products in pointer expressions, and why each stays below 2^31 for any problem a GPU holds.
NARROW = {
    # split-K: a ranged tail's compact workspace holds less than a wave of tiles, SPLIT_K boxes each
    "i * (BM * BN)": "ranged split-K: a tail tile's first box (tail tiles < grid)",
    "s * num_tiles": "ranged split-K: box s's first tile (tail tiles < grid)",
    "(s * num_tiles + i) * (BM * BN)": "ranged split-K: box s of a tail tile",
    "gl.program_id(0) % 32 * 1024": "ranged split-K: a program's chunk of a 128x256 box",
    "s * MP": "split-K: slab s's first row (a row index, multiplied by N in 64 bits after)",
    "gl.program_id(0) % col_blocks * 64": "split-K's reduce in blocks: a column index, below N",
    # grouped rowwise scale_b (G, N): G * N elements, far fewer than B's G * N * K
    "grp * N": "grouped scale_b (G, N)",
}

# Pointers whose tensors are sized by the grid, not the problem: all their offsets are 32-bit.
NARROW_POINTERS = {
    "sk_ws_ptr": "stream-K's fp32 workspace, grid x BM x BN",
    "sk_flags_ptr": "stream-K's flags, grid x consumer partitions",
}


def params(name: str, spec: GemmSpec, device: object = H100_SXM, **plan: object) -> object:
    return pytest.param(spec, device, plan, id=name)


SPECS = [
    params("bf16", GemmSpec(4096, 4096, 4096)),
    params("fp8_rowwise", GemmSpec(4096, 4096, 4096, E4, E4, BF16, scale=RW)),
    params("fp8_rowwise_swap_ab", GemmSpec(16, 4096, 14336, E4, E4, BF16, scale=RW)),
    params("blockwise_1x128_128x128", GemmSpec(4096, 7168, 16384, E4, E4, BF16, scale=BW, accumulation=PROMOTED)),
    params("blockwise_1x128_1x128", GemmSpec(4096, 4096, 4096, E4, E4, BF16, scale=BW1, accumulation=PROMOTED)),
    params("blockwise_128x128_128x128", GemmSpec(4096, 4096, 4096, E4, E4, BF16, scale=BW128, accumulation=PROMOTED)),
    params("mx_sm90", GemmSpec(4096, 4096, 4096, E4, E4, BF16, scale=ScaleRecipe.MX, accumulation=PROMOTED)),
    # Scales that may reach 2^31 elements (`scale_offsets_wide`): only then are their loads' offsets 64-bit.
    params("blockwise_big_scales", GemmSpec(2**22, 4096, 2**14, E4, E4, BF16, scale=BW, accumulation=PROMOTED)),
    params("blockwise_128x128_big_scales", GemmSpec(2**22, 2**22, 2**14, E4, E4, BF16, scale=BW128,
                                                    accumulation=PROMOTED)),
    params("mx_sm90_big_scales", GemmSpec(2**20, 4096, 2**14, E4, E4, BF16, scale=ScaleRecipe.MX,
                                          accumulation=PROMOTED)),
    params("split_k", GemmSpec(128, 4096, 7168, E4, E4, BF16, scale=BW, accumulation=PROMOTED), bm=128, bn=128,
           split_k=4),
    params("split_k_tail", GemmSpec(4096, 2112, 7168, E4, E4, BF16, scale=RW)),
    params("stream_k", GemmSpec(384, 752, 5312), bn=128, stream_k=4),
    params("stream_k_fp8_rowwise", GemmSpec(1200, 544, 1232, E4, E4, BF16, scale=RW, accumulation=PROMOTED), bn=128,
           stream_k=2),
    params("grouped_offsets", GemmSpec(8192, 4096, 7168, grouping=Grouping.OFFSETS, groups=8)),
    params("grouped_masked_fp8", GemmSpec(8 * 64, 4096, 7168, E4, E4, BF16, scale=RW, grouping=Grouping.MASKED,
                                          groups=8)),
    params("grouped_k", GemmSpec(2048, 4096, 8192, grouping=Grouping.K_OFFSETS, groups=8)),
    params("sm100_fp8_rowwise", GemmSpec(4096, 4096, 4096, E4, E4, BF16, scale=RW), B200),
    params("gfx1250_bf16", GemmSpec(4096, 4096, 4096), GFX1250),
]


def _is_wide_cast(node: ast.expr) -> bool:
    """``x.to(gl.int64)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and len(node.args) == 1 and ast.unparse(node.args[0]) == "gl.int64")


class _Function:
    """One ``@gluon.jit`` function's assignments: which names hold 64-bit values, and each name's definitions."""

    def __init__(self, fn: ast.FunctionDef) -> None:
        self.defs: dict[str, list[ast.expr]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.defs.setdefault(node.targets[0].id, []).append(node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                self.defs.setdefault(node.target.id, []).append(node.value)

    def wide(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> bool:
        """Whether `node` is a 64-bit integer by construction: a cast, a name every definition of which is wide, or
        arithmetic, indexing or expand_dims of one."""
        match node:
            case ast.Call() if _is_wide_cast(node):
                return True
            case ast.Name(id=name) if name in self.defs and name not in seen:
                return all(self.wide(d, seen | {name}) for d in self.defs[name])
            case ast.BinOp(left=left, right=right):
                return self.wide(left, seen) or self.wide(right, seen)
            case ast.Subscript(value=value):
                return self.wide(value, seen)
            case ast.Call(func=ast.Attribute(attr="expand_dims"), args=[arg, *_]):
                return self.wide(arg, seen)
        return False

    def narrow_products(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> Iterator[ast.BinOp]:
        """The multiplications in `node` (and in the definitions of the names it reads) with no 64-bit factor,
        not looking inside a cast to 64 bits (an index there is 32-bit on purpose)."""
        if _is_wide_cast(node):
            return
        if isinstance(node, ast.Name):
            if node.id in self.defs and node.id not in seen:
                for d in self.defs[node.id]:
                    yield from self.narrow_products(d, seen | {node.id})
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            constant = all(isinstance(n, ast.Constant) or (isinstance(n, ast.Name) and n.id.isupper())
                           for n in ast.walk(node) if isinstance(n, ast.Name | ast.Constant))
            if not constant and not (self.wide(node.left, seen) or self.wide(node.right, seen)):
                yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                yield from self.narrow_products(child, seen)


def _terms(node: ast.expr) -> Iterator[ast.expr]:
    """The terms of a sum ``a + b + (c + d)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        yield from _terms(node.left)
        yield from _terms(node.right)
    else:
        yield node


# The scale pointers of element-wise scale loads: 32-bit offsets where the scales stay below 2^31 elements
# (`gluon_sm90.scale_offsets_wide`: 64-bit address math costs the copying partitions registers).
SCALE_POINTERS = {"sa_ptr", "sb_ptr"}


def pointer_expressions(fn: ast.FunctionDef, narrow: frozenset[str] = frozenset()) -> Iterator[ast.expr]:
    """The outermost sums in `fn` with a ``..._ptr`` term: every address it computes from a pointer argument (not
    those from `NARROW_POINTERS` or `narrow` alone)."""
    inner: set[int] = set()
    for node in ast.walk(fn):  # (breadth first: a sum before the sums inside it)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and id(node) not in inner:
            ptrs = {t.id for t in _terms(node) if isinstance(t, ast.Name) and t.id.endswith("_ptr")}
            if ptrs and not ptrs <= NARROW_POINTERS.keys() | narrow:
                inner.update(id(n) for n in ast.walk(node) if n is not node)
                yield node


def narrow_offsets(text: str, narrow: frozenset[str] = frozenset()) -> list[str]:
    """Each 32-bit product in a pointer expression of `text` that `NARROW` does not explain, as ``function: expr``
    (pointers in `narrow` may take 32-bit offsets)."""
    out = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, ast.FunctionDef):
            continue
        f = _Function(fn)
        for expr in pointer_expressions(fn, narrow):
            for product in f.narrow_products(expr):
                src = ast.unparse(product)
                if src not in NARROW:
                    out.append(f"{fn.name}: {src} in {ast.unparse(expr)}")
    return out


@pytest.mark.parametrize("spec,device,plan", SPECS)
def test_every_element_offset_that_can_pass_2_31_is_64_bit(spec: GemmSpec, device: object, plan: dict) -> None:
    k = build(spec, device, plan_schedule(spec, device, **plan) if plan else None)  # type: ignore[arg-type]
    assert "_ptr" in k.source or "desc" in k.source
    small_scales = frozenset() if scale_offsets_wide(spec) else frozenset(SCALE_POINTERS)
    assert narrow_offsets(k.source, small_scales) == []


def test_scale_offsets_go_64_bit_only_where_the_scales_may_reach_2_31() -> None:
    big = GemmSpec(2**22, 4096, 2**14, E4, E4, BF16, scale=BW, accumulation=PROMOTED)
    small = GemmSpec(4096, 7168, 16384, E4, E4, BF16, scale=BW, accumulation=PROMOTED)
    assert scale_offsets_wide(big) and not scale_offsets_wide(small)
    assert not scale_offsets_wide(GemmSpec(2**22, 4096, 2**14, E4, E4, BF16, scale=RW))  # (no element-wise scales)
    for spec, wide_loads in ((big, True), (small, False)):
        text = build(spec, H100_SXM).source
        assert ("sa_stride_m" in text) and (".to(gl.int64) * sa_stride_m" in text) == wide_loads


@pytest.mark.parametrize("text,narrow", [
    # the reduction's flat index before this change: program_id * 1024 wraps past 2^31 elements of C
    ("def f(ws_ptr, N):\n    offs = gl.program_id(0) * 1024 + gl.arange(0, 1024)\n    row = offs // N\n"
     "    gl.load(ws_ptr + row * N)\n", ["f: gl.program_id(0) * 1024 in ws_ptr + row * N",
                                         "f: row * N in ws_ptr + row * N"]),
    ("def f(sa_ptr, s):\n    idx = gl.arange(0, 128)\n    gl.load(sa_ptr + idx * s)\n",
     ["f: idx * s in sa_ptr + idx * s"]),
    # widened: the cast, a name assigned from one, and indexing of one
    ("def f(sa_ptr, s):\n    idx = gl.arange(0, 128)\n    gl.load(sa_ptr + idx.to(gl.int64) * s)\n", []),
    ("def f(c_ptr, s):\n    row = (gl.arange(0, 8) * 3).to(gl.int64)\n    gl.store(c_ptr + row[:, None] * s, 0)\n", []),
])
def test_the_checker_finds_narrow_products(text: str, narrow: list[str]) -> None:
    assert sorted(narrow_offsets(text)) == sorted(narrow)


@pytest.mark.parametrize("index,expected", [
    ("kk", "kk.to(gl.int64)"), ("(k0 + kk)", "(k0 + kk).to(gl.int64)"),
    ("idx // 128", "(idx // 128).to(gl.int64)"), ("(a) * (b)", "((a) * (b)).to(gl.int64)"),
])
def test_wide_parenthesizes_what_it_casts(index: str, expected: str) -> None:
    assert wide(index) == expected


def test_a_wide_column_read_as_a_tile_is_64_bit() -> None:
    """A column operand whose elements lie 2^20 apart (its last 2^32 past its first), read as a full tile
    (scalar_columns=False, the naive way kept for measurement): its row offsets are 64-bit, as its vector read's."""
    import torch

    import warploom

    m = 4096
    spec = warploom.plan(torch.empty(m, 64, device="meta", dtype=torch.bfloat16),
                         torch.empty(64, 512, device="meta", dtype=torch.bfloat16), epilogue=lambda acc, col: acc * col,
                         col=torch.empty_strided((m, 1), (2**20, 1), device="meta", dtype=torch.float32)).spec
    source = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, scalar_columns=False)).source
    assert "col: column read as a tile" in source and "ep_rows.to(gl.int64) * 1048576" in source
    assert narrow_offsets(source) == []
