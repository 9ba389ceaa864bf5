"""The simulator on fused epilogues: load_operand, apply_epilogue, store_smem of output j, tma_store to output j.

Every module here is the real pass pipeline's output for a spec carrying a captured epilogue graph, simulated on
random data with NaN-poisoned outputs; each output is compared against the user's function applied in fp64 to the
exact product (for fp8 the dequantized one: the scales are graph operands here, composed by `capture` as
scaled_mm composes them). Shapes are not tile multiples, so masked operand reads and dropped store elements are
exercised. Then planted bugs (a dropped or late load_operand, a missing wgmma wait before apply_epilogue, ...),
which the simulator must name, and exhaustive and random protocol checks of small fused modules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from warploom.device import H100_SXM
from warploom.dtypes import DType
from warploom.epilogue import capture
from warploom.errors import DTypeError, InputError, ShapeError
from warploom.ir import nodes as ir
from warploom.ir.raster import cta_tiles, launch_grid
from warploom.kernel import build
from warploom.planner import Plan, plan_schedule
from warploom.reference import relative_error
from warploom.sim import FindingKind, ProtocolError, SimResult, check_protocol, explore, simulate
from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

Fn = Callable[..., Any]

# Output dtype -> tolerances of the stored output against the unrounded fp64 reference: half an ulp of the
# output's rounding (bf16 2^-9, e4m3 2^-4 relative) with room to spare, plus fp32 accumulation (~1e-4 absolute
# on values of ~16).
TOL = {torch.bfloat16: (4e-3, 1e-3), torch.float32: (1e-5, 1e-3), torch.float8_e4m3fn: (7e-2, 4e-3)}
FP8_ERROR = 1e-3  # relative_error bound for fp8 inputs (measured ~1e-6: only the output cast rounds)


@dataclass(frozen=True)
class Case:
    """A fused GEMM: inputs, the epilogue function and its operands by name, and the spec it was captured for."""

    spec: GemmSpec
    a: torch.Tensor
    b: torch.Tensor
    fn: Fn
    operands: dict[str, torch.Tensor]

    def reference(self) -> tuple[torch.Tensor, ...]:
        """fn on the exact product in fp64. The operands keep their dtypes: every op that meets the fp64
        accumulator computes in fp64, and ops among operands alone promote as torch (and the graph) do."""
        r = self.fn(self.a.double() @ self.b.double(), **self.operands)
        return r if isinstance(r, tuple) else (r,)

    def run(self, plan: Plan | None = None, **sim: Any) -> tuple[ir.Module, SimResult]:
        module = build(self.spec, H100_SXM, plan or plan_schedule(self.spec, H100_SXM)).module
        outs = [torch.full((self.spec.m, self.spec.n), float("nan"), dtype=d.torch)
                for d in self.spec.output_dtypes()]
        res = simulate(module, self.a, self.b, operands=self.operands, outs=outs, record=False, **sim)
        assert all(r is o for r, o in zip(res.outputs, outs, strict=True))  # written in place
        return module, res


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def bf16_case(m: int, n: int, k: int, fn: Fn, operands: Callable[[torch.Generator], dict[str, torch.Tensor]],
              seed: int = 0) -> Case:
    g = _gen(seed)
    a, b = torch.randn(m, k, generator=g).bfloat16(), torch.randn(k, n, generator=g).bfloat16()
    ops = operands(g)
    return Case(GemmSpec(m, n, k, epilogue=capture(fn, ops, out_shape=(m, n))), a, b, fn, ops)


def gelu_operands(m: int, n: int, expanded: bool) -> Callable[[torch.Generator], dict[str, torch.Tensor]]:
    """Every operand kind: a row bias, a dense residual, a column scale, a scalar, and a row gate given as an
    expanded (M, N) view with strides (0, 1); with `expanded` the column scale is one too, strides (1, 0)."""

    def make(g: torch.Generator) -> dict[str, torch.Tensor]:
        sa = torch.rand(m, 1, generator=g) + 0.5
        return {"bias": (torch.randn(n, generator=g) * 4).bfloat16(),
                "residual": torch.randn(m, n, generator=g).bfloat16(),
                "sa": sa.expand(m, n) if expanded else sa,
                "s": torch.rand((), generator=g) + 0.5,
                "gate": (torch.rand(n, generator=g) + 0.5).half().expand(m, n)}

    return make


def gelu_fn(acc: Any, bias: Any, residual: Any, sa: Any, s: Any, gate: Any) -> Any:
    return (F.gelu(acc * sa + bias, approximate="tanh") * gate + residual) * s


def multi_fn(acc: Any, bias: Any, sa: Any) -> Any:
    return acc * sa + bias, F.relu(acc + bias).to(torch.float32), (acc * 0.125).to(torch.float8_e4m3fn)


def multi_operands(m: int, n: int) -> Callable[[torch.Generator], dict[str, torch.Tensor]]:
    return lambda g: {"bias": torch.randn(n, generator=g).bfloat16(), "sa": torch.rand(m, 1, generator=g) + 0.5}


def scaled_fn(acc: Any, scale_a: Any, scale_b: Any, bias: Any, residual: Any) -> Any:
    return F.gelu(acc * scale_a * scale_b + bias) + residual


def fp8_case(m: int, n: int, k: int, recipe: ScaleRecipe, accumulation: Accumulation = Accumulation.NATIVE,
             seed: int = 0) -> Case:
    """scaled_mm with an epilogue: the scales and bias are graph operands in front of the user's residual."""
    g = _gen(seed)
    a = (torch.randn(m, k, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * 2).to(torch.float8_e4m3fn).t()  # K-major (K, N)
    if recipe is ScaleRecipe.TENSORWISE:
        sa, sb = torch.rand((), generator=g) + 0.5, torch.rand((), generator=g) + 0.5
    else:
        sa, sb = torch.rand(m, 1, generator=g) + 0.5, torch.rand(1, n, generator=g) + 0.5
    ops = {"scale_a": sa, "scale_b": sb, "bias": (torch.randn(n, generator=g) * 4).bfloat16(),
           "residual": torch.randn(m, n, generator=g).bfloat16()}
    spec = GemmSpec(m, n, k, DType.E4M3, DType.E4M3, DType.BF16, scale=recipe, accumulation=accumulation,
                    bias_dtype=DType.BF16, epilogue=capture(scaled_fn, ops, out_shape=(m, n)))
    return Case(spec, a, b, scaled_fn, ops)


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """`got` (an output, rounded to its dtype) against the unrounded reference, within `TOL` of its dtype."""
    rtol, atol = TOL[got.dtype]
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol, msg=lambda s: f"{what}: {s}")


def assert_matches(case: Case, res: SimResult) -> None:
    assert res.ok, res.report.summary()
    for j, (got, want) in enumerate(zip(res.outputs, case.reference(), strict=True)):
        assert not got.isnan().any(), f"output {j} has unwritten elements"
        assert_close(got, want, f"output {j}")


def reads(module: ir.Module) -> dict[str, ir.OperandRead]:
    return {o.operand: o.read for p in module.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.LoadOperand)}


def hoisted(module: ir.Module) -> bool:
    """Whether some load_operand runs before the accumulator's final wgmma wait."""
    body = module.default_partition.body
    (tiles,) = [s for s in body if isinstance(s, ir.Loop)]
    ops = [s for s in tiles.body if not isinstance(s, ir.Loop)]
    first_wait = next(i for i, o in enumerate(ops) if isinstance(o, ir.MmaWait))
    return any(isinstance(o, ir.LoadOperand) for o in ops[:first_wait])


# ---------------------------------------------------------------------------------------------
# numerics


@pytest.mark.parametrize("parts", [1, 2], ids=["p1", "p2"])
@pytest.mark.parametrize("hoist_rows", [True, False], ids=["hoist", "no_hoist"])
@pytest.mark.parametrize("scalar_columns", [True, False], ids=["scalar_cols", "tile_cols"])
def test_bf16_every_operand_kind(parts: int, hoist_rows: bool, scalar_columns: bool) -> None:
    case = _gelu_case(300, 520, 256, expanded=False)
    plan = plan_schedule(case.spec, H100_SXM, consumer_partitions=parts, hoist_rows=hoist_rows,
                         scalar_columns=scalar_columns)
    module, res = case.run(plan)
    assert_matches(case, res)
    # The knobs took effect: the schedules differ where they should.
    assert len(module.partitions) == parts + 1
    assert reads(module)["sa"] is (ir.OperandRead.PER_ROW if scalar_columns else ir.OperandRead.TILE)
    assert reads(module)["s"] is ir.OperandRead.SCALAR and reads(module)["gate"] is ir.OperandRead.PER_COL
    assert hoisted(module) == hoist_rows


@functools.cache
def _gelu_case(m: int, n: int, k: int, expanded: bool) -> Case:
    return bf16_case(m, n, k, gelu_fn, gelu_operands(m, n, expanded))


@pytest.mark.parametrize("parts", [1, 2], ids=["p1", "p2"])
def test_bf16_expanded_views_small_shape(parts: int) -> None:
    case = _gelu_case(130, 200, 128, expanded=True)
    assert case.operands["sa"].stride() == (1, 0) and case.operands["gate"].stride() == (0, 1)
    _, res = case.run(plan_schedule(case.spec, H100_SXM, consumer_partitions=parts))
    assert_matches(case, res)


@pytest.mark.parametrize("parts", [1, 2], ids=["p1", "p2"])
def test_multi_output_each_in_its_dtype(parts: int) -> None:
    case = bf16_case(130, 208, 128, multi_fn, multi_operands(130, 208), seed=1)
    assert case.spec.output_dtypes() == (DType.BF16, DType.FP32, DType.E4M3)
    module, res = case.run(plan_schedule(case.spec, H100_SXM, consumer_partitions=parts))
    assert {b.output for b in module.buffers} == {0, 1, 2}
    assert [o.dtype for o in res.outputs] == [torch.bfloat16, torch.float32, torch.float8_e4m3fn]
    assert_matches(case, res)


def test_multi_output_with_two_column_blocks() -> None:
    # epilogue_subtiles=2: apply_epilogue per half of the accumulator, each half's three outputs stored.
    case = bf16_case(130, 208, 128, multi_fn, multi_operands(130, 208), seed=2)
    plan = replace(plan_schedule(case.spec, H100_SXM), epilogue_subtiles=2)
    module, res = case.run(plan)
    assert {o.parts for p in module.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ApplyEpilogue)} == {2}
    assert_matches(case, res)


FP8_CASES = [(m, n, k, recipe) for m, n, k in ((130, 208, 128), (300, 528, 256))
             for recipe in (ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE)]


@pytest.mark.parametrize("m,n,k,recipe", FP8_CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}-{c[3].value}" for c in FP8_CASES])
def test_fp8_scales_and_bias_as_operands(m: int, n: int, k: int, recipe: ScaleRecipe) -> None:
    case = fp8_case(m, n, k, recipe)
    module, res = case.run()
    # The scales and bias are graph operands: no fixed-function epilogue step is left.
    assert not any(isinstance(o, ir.Epilogue) for p in module.partitions for o, _ in ir.walk(p.body))
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert relative_error(res.output.double(), case.reference()[0]) < FP8_ERROR


@pytest.mark.parametrize("parts", [1, 2], ids=["p1", "p2"])
@pytest.mark.parametrize("recipe", [ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE], ids=lambda r: r.value)
def test_fp8_promoted_column_block_accumulators(parts: int, recipe: ScaleRecipe) -> None:
    case = fp8_case(130, 528, 256, recipe, Accumulation.PROMOTED, seed=3)
    module, res = case.run(plan_schedule(case.spec, H100_SXM, bn=256, consumer_partitions=parts))
    # acc0 / acc1 hold tile columns 0:128 and 128:256: apply_epilogue's column offset must add col0.
    assert {(a.name, a.col0) for p in module.partitions for a in p.accumulators} >= {("acc0", 0), ("acc1", 128)}
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert relative_error(res.output.double(), case.reference()[0]) < FP8_ERROR


def test_sampled_ctas_write_only_their_tiles() -> None:
    case = bf16_case(300, 208, 128, multi_fn, multi_operands(300, 208), seed=4)
    module, res = case.run(ctas=(1,))
    t = module.tiling
    grid = launch_grid(300, 208, t.bm, t.bn, t.grid)
    assert grid > 1 and res.ok, res.report.summary()
    written = torch.zeros(300, 208, dtype=torch.bool)
    for tile in cta_tiles(1, 300, 208, t.bm, t.bn, t.group_m, grid):
        written[tile.off_m:tile.off_m + t.bm, tile.off_n:tile.off_n + t.bn] = True
    for got, want in zip(res.outputs, case.reference(), strict=True):
        assert torch.equal(~got.float().isnan(), written)  # every other element stays poisoned
        assert_close(got[written], want[written], "written tiles")


# ---------------------------------------------------------------------------------------------
# planted bugs

Rewrite = Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]


def edit_tiles(m: ir.Module, fn: Rewrite, only: str | None = None) -> ir.Module:
    """`m` with every consumer's (or just partition `only`'s) tile-loop body rewritten by `fn`."""
    def body(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, body=fn(s.body)) if isinstance(s, ir.Loop) and s.kind is ir.LoopKind.TILES else s
                     for s in stmts)

    for p in m.partitions:
        if p.role is ir.Role.CONSUMER and only in (None, p.name):
            m = m.with_partition(replace(p, body=body(p.body)))
    return m


def drop(pred: Callable[[ir.Stmt], bool]) -> Rewrite:
    return lambda stmts: tuple(s for s in stmts if not pred(s))


def _is_load(name: str) -> Callable[[ir.Stmt], bool]:
    return lambda s: isinstance(s, ir.LoadOperand) and s.operand == name


def load_after_apply(name: str) -> Rewrite:
    """The operand's load moved behind the apply_epilogue that reads it: each tile reads the previous tile's."""
    def fn(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        (load,) = [s for s in stmts if _is_load(name)(s)]
        rest = [s for s in stmts if s is not load]
        at = next(i for i, s in enumerate(rest) if isinstance(s, ir.ApplyEpilogue)) + 1
        return tuple(rest[:at] + [load] + rest[at:])

    return fn


def _read_as(read: ir.OperandRead) -> Rewrite:
    return lambda stmts: tuple(replace(s, read=read) if isinstance(s, ir.LoadOperand) and s.operand == "bias" else s
                               for s in stmts)


@functools.cache
def _small() -> Case:
    return bf16_case(130, 200, 128, gelu_fn, gelu_operands(130, 200, expanded=False), seed=5)


# Two tiles per CTA (grid 2 over 2x2 tiles of 128x128), so a load in the wrong tile shows.
SMALL_PLAN = {"p1": Plan(bm=128, bn=128, bk=64, stages=2, consumer_warps=8, group_m=2, grid=2),
              "p2": Plan(bm=128, bn=128, bk=64, stages=2, consumer_warps=8, group_m=2, grid=2, consumer_partitions=2)}

MUTANTS: dict[str, tuple[Rewrite, FindingKind]] = {
    "load_dropped": (drop(_is_load("bias")), FindingKind.OPERAND_NOT_LOADED),
    "dense_load_dropped": (drop(_is_load("residual")), FindingKind.OPERAND_NOT_LOADED),
    "load_after_apply": (load_after_apply("sa"), FindingKind.OPERAND_NOT_LOADED),
    "final_mma_wait_dropped": (drop(lambda s: isinstance(s, ir.MmaWait)), FindingKind.ACC_RACE),
    "apply_dropped": (drop(lambda s: isinstance(s, ir.ApplyEpilogue)), FindingKind.EPILOGUE_NOT_APPLIED),
    "row_operand_read_per_row": (_read_as(ir.OperandRead.PER_ROW), FindingKind.MALFORMED),
    "output_store_dropped": (drop(lambda s: isinstance(s, ir.TmaStore)), FindingKind.OUTPUT_COVERAGE),
}
MUTANT_IDS = [(name, p) for name in MUTANTS for p in SMALL_PLAN]


@functools.cache
def _module(structure: str) -> ir.Module:
    return build(_small().spec, H100_SXM, SMALL_PLAN[structure]).module


def test_unmutated_small_modules_are_clean() -> None:
    case = _small()
    for structure, plan in SMALL_PLAN.items():
        _, res = case.run(plan)
        assert_matches(case, res)
        assert check_protocol(_module(structure), case.spec.m, case.spec.n, case.spec.k).ok, structure


@pytest.mark.parametrize("name,structure", MUTANT_IDS, ids=[f"{n}@{p}" for n, p in MUTANT_IDS])
def test_planted_bug_is_reported(name: str, structure: str) -> None:
    rewrite, kind = MUTANTS[name]
    case = _small()
    module = edit_tiles(_module(structure), rewrite)
    res = simulate(module, case.a, case.b, operands=case.operands, record=False)
    assert kind in res.report.kinds(), res.report.summary()
    with pytest.raises(ProtocolError):
        res.raise_for_findings()


def test_operand_not_loaded_names_partition_op_tile_and_operand() -> None:
    case = _small()
    module = edit_tiles(_module("p2"), drop(_is_load("bias")))
    report = check_protocol(module, case.spec.m, case.spec.n, case.spec.k, raise_on_finding=False)
    found = [f for f in report.findings if f.kind is FindingKind.OPERAND_NOT_LOADED]
    assert {f.partition for f in found} == {"consumer0", "consumer1"}
    f = found[0]
    assert f.op == "apply_epilogue acc" and f.tile is not None and f.tile.startswith("tile #0")
    assert "operand bias" in f.message and "load_operand bias" in f.message  # what is missing and the fix


def test_load_after_apply_is_reported_in_every_tile() -> None:
    case = _small()
    module = edit_tiles(_module("p1"), load_after_apply("sa"))
    res = simulate(module, case.a, case.b, operands=case.operands, record=False)
    (f,) = [f for f in res.findings if f.kind is FindingKind.OPERAND_NOT_LOADED]
    # Both tiles of both CTAs: a CTA's first tile finds no load, its second the first tile's (a stale block).
    assert f.occurrences == 4 and "no load_operand of it" in f.message


def test_acc_race_is_reported_at_apply_epilogue() -> None:
    case = _small()
    module = edit_tiles(_module("p1"), MUTANTS["final_mma_wait_dropped"][0])
    report = check_protocol(module, case.spec.m, case.spec.n, case.spec.k, raise_on_finding=False)
    assert any(f.kind is FindingKind.ACC_RACE and f.op.startswith("apply_epilogue") for f in report.findings)


def test_operand_buffer_shared_by_two_partitions_is_malformed() -> None:
    case = _small()
    module = _module("p2")
    (own,) = {o.buffer for o, _ in ir.walk(module.partition("consumer1").body)
              if isinstance(o, ir.LoadOperand) and o.buffer}
    assert own == "residual_smem1"
    shared = edit_tiles(module, lambda stmts: tuple(
        replace(s, buffer="residual_smem0") if isinstance(s, ir.LoadOperand) and s.buffer else s for s in stmts),
        only="consumer1")
    res = simulate(shared, case.a, case.b, operands=case.operands, record=False)
    assert res.report.kinds() == {FindingKind.MALFORMED}
    assert "residual_smem0" in res.findings[0].message and "consumer0, consumer1" in res.findings[0].message


def test_dropped_store_of_one_output_is_a_coverage_finding() -> None:
    case = bf16_case(130, 208, 128, multi_fn, multi_operands(130, 208), seed=6)
    module = build(case.spec, H100_SXM, SMALL_PLAN["p1"]).module
    module = edit_tiles(module, drop(lambda s: isinstance(s, ir.TmaStore) and s.output == 1))
    res = simulate(module, case.a, case.b, operands=case.operands, record=False)
    assert res.report.kinds() == {FindingKind.OUTPUT_COVERAGE}
    assert "output 1[" in res.findings[0].message
    assert res.outputs[1].isnan().all() and not res.outputs[0].isnan().any()


# ---------------------------------------------------------------------------------------------
# exhaustive and random protocol checks


@functools.cache
def _tiny(structure: str) -> tuple[ir.Module, tuple[int, int, int]]:
    """Two tiles of two k-blocks on one CTA, every operand kind."""
    m = 64 if structure == "p1" else 128
    case = bf16_case(m, 128, 64, gelu_fn, gelu_operands(m, 128, expanded=False))
    plan = (Plan(bm=64, bn=64, bk=32, stages=2, consumer_warps=4, group_m=2, grid=1) if structure == "p1" else
            Plan(bm=128, bn=64, bk=32, stages=2, consumer_warps=8, group_m=2, grid=1, consumer_partitions=2))
    return build(case.spec, H100_SXM, plan).module, (m, 128, 64)


@pytest.mark.parametrize("structure", ["p1", "p2"])
def test_tiny_fused_module_is_clean_on_every_schedule(structure: str) -> None:
    module, size = _tiny(structure)
    r = explore(module, *size, max_states=50_000)
    assert r.ok and not r.bound_hit, r.summary()
    assert check_protocol(module, *size, seeds=range(8)).ok


def test_explorer_finds_a_dropped_prefetch() -> None:
    # On the GPU the load's wait would never return: the buffer's mbarrier gets no copy.
    module, size = _tiny("p1")
    r = explore(edit_tiles(module, drop(lambda o: isinstance(o, ir.PrefetchOperand))), *size, stop_at_first=True)
    assert r.kinds() == {FindingKind.OPERAND_STAGING}, r.summary()
    assert any("no prefetch_operand" in f.message for f in r.findings)


def test_explorer_finds_a_dropped_load() -> None:
    module, size = _tiny("p1")
    r = explore(edit_tiles(module, drop(_is_load("residual"))), *size, stop_at_first=True)
    assert r.kinds() == {FindingKind.OPERAND_NOT_LOADED}, r.summary()
    assert any("apply_epilogue" in line for line in r.counterexample)


# ---------------------------------------------------------------------------------------------
# arguments


def _call(operands: dict[str, Any], **kw: Any) -> None:
    """simulate on the small module with the operands changed (None drops one) and extra keyword arguments."""
    case = _small()
    ops = {k: v for k, v in {**case.operands, **operands}.items() if v is not None}
    simulate(_module("p1"), case.a, case.b, operands=ops, ctas=(), **kw)


BF = torch.bfloat16
BAD_ARGS: list[tuple[str, dict[str, Any], dict[str, Any], type[Exception], str]] = [
    ("missing", {"bias": None}, {}, InputError, "bias: expected a tensor for the epilogue graph's operand bias"),
    ("extra", {"other": torch.zeros(1)}, {}, InputError, "other: expected only the epilogue graph's operands"),
    ("dtype", {"bias": torch.zeros(200)}, {}, DTypeError, "bias: expected torch.bfloat16"),
    ("shape", {"bias": torch.zeros(208, dtype=BF)}, {}, ShapeError, "bias: expected shape (200,)"),
    ("strides", {"residual": torch.zeros(200, 130, dtype=BF).t()}, {}, InputError,
     "residual: expected strides (200, 1)"),
    ("positional_scale", {}, {"scale_a": torch.ones(())}, InputError, "scale_a: expected None"),
    ("outs_count", {}, {"outs": [torch.zeros(130, 200, dtype=BF)] * 2}, InputError, "outs: expected 1 tensor"),
    ("outs_dtype", {}, {"outs": [torch.zeros(130, 200)]}, DTypeError, "outs[0]: expected torch.bfloat16"),
    ("out_and_outs", {}, {"out": torch.zeros(130, 200, dtype=BF), "outs": [torch.zeros(130, 200, dtype=BF)]},
     InputError, "out: expected either"),
]


@pytest.mark.parametrize("operands,kw,error,text", [b[1:] for b in BAD_ARGS], ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_raise_with_a_fix(operands: dict[str, Any], kw: dict[str, Any], error: type[Exception],
                                        text: str) -> None:
    with pytest.raises(error, match="Fix: ") as e:
        _call(operands, **kw)
    assert text in str(e.value), str(e.value)


def test_size_one_dimensions_may_have_any_stride() -> None:
    case = _small()
    sa = (torch.rand(1, 130) + 0.5).t()  # (130, 1) with strides (1, 130): the size-1 dimension's stride never steps
    g = case.spec.epilogue
    assert g is not None and g.operand("sa").strides == (1, 1)
    res = simulate(_module("p1"), case.a, case.b, operands={**case.operands, "sa": sa}, record=False)
    assert res.ok, res.report.summary()


def test_operands_on_a_module_without_epilogue_are_refused() -> None:
    module = build(GemmSpec(64, 64, 64), H100_SXM).module
    a, b = torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(InputError, match="no fused epilogue"):
        simulate(module, a, b, operands={"bias": torch.zeros(64)})
    res = simulate(module, a, b, outs=[torch.full((64, 64), float("nan"), dtype=torch.bfloat16)])
    assert res.ok and len(res.outputs) == 1 and res.output is res.outputs[0]


# ---------------------------------------------------------------------------------------------
# the wide epilogue's slots: staging buffers the stores alternate through, dense-operand buffers copied ahead, and
# each block's vectors loaded one block early (Plan.staging_slots / operand_slots / load_ahead)

def _slotted(spec: GemmSpec, *, blocks: int, staging: int, operand: int, grid: int, **kw: Any) -> Plan:
    return replace(plan_schedule(spec, H100_SXM, bn=256, stages=2, **kw), epilogue_subtiles=blocks,
                   hoist_rows=False, load_ahead=True, staging_slots=staging, operand_slots=operand,
                   prefetch_operands=True, grid=grid)


def _tile_body(module: ir.Module) -> tuple[ir.Stmt, ...]:
    (tiles,) = [s for s in module.default_partition.body if isinstance(s, ir.Loop)]
    return tiles.body


@pytest.mark.parametrize("staging,operand,parts", [(2, 2, 1), (2, 8, 1), (4, 3, 1), (2, 2, 2)])
def test_fp8_slotted_wide_epilogue(staging: int, operand: int, parts: int) -> None:
    # 300 x 528: partial tiles in both dimensions; grid 2 gives each CTA several tiles, so the slots carry over.
    case = fp8_case(300, 528, 256, ScaleRecipe.ROWWISE, seed=6)
    plan = _slotted(case.spec, blocks=8, staging=staging, operand=operand, grid=2, consumer_partitions=parts)
    module, res = case.run(plan)
    assert res.ok, res.report.summary()
    assert not res.output.isnan().any()
    assert relative_error(res.output.double(), case.reference()[0]) < FP8_ERROR
    body = _tile_body(module)
    tag = "0" if parts == 2 else ""  # two partitions stage their own rows: c_smem0, c_smem1, ...
    stored = [o.buffer for o in body if isinstance(o, ir.StoreSmem)]
    assert stored == [f"c_smem{tag}{'_s' + str(j % staging) if j % staging else ''}" for j in range(8)]
    # Each block's wait stands behind its staging writes, right before its fence and stores.
    assert {o.pending for o in body if isinstance(o, ir.StoreWait)} == {staging - 2}
    waits = [i for i, o in enumerate(body) if isinstance(o, ir.StoreWait)]
    assert all(isinstance(body[i - 1], ir.StoreSmem) and isinstance(body[i + 1], ir.FenceAsync) for i in waits)
    staged = [o.buffer for o in body if isinstance(o, ir.LoadOperand) and o.buffer]
    assert staged == [f"residual_smem{tag}{'_s' + str(j % operand) if j % operand else ''}" for j in range(8)]
    # Each later copy follows the TMA store of the block that last read its buffer, synced by it.
    later = [s for s in body if isinstance(s, ir.PrefetchOperand) and s.part >= operand]
    assert len(later) == max(0, 8 - operand)
    assert all(s.synced and isinstance(body[body.index(s) - 1], ir.TmaStore) for s in later)
    # The first min(operand, 8) blocks' copies start before the mainloop, the rest behind the load `operand` back.
    k_loop = next(i for i, s in enumerate(body) if isinstance(s, ir.Loop))
    assert sum(isinstance(s, ir.PrefetchOperand) for s in body[:k_loop]) == min(operand, 8)
    # Block j + 1's register loads stand before block j's apply_epilogue.
    applies = [i for i, s in enumerate(body) if isinstance(s, ir.ApplyEpilogue)]
    for j, at in enumerate(applies[:-1]):
        ahead = {s.operand for s in body[applies[j - 1] + 1 if j else 0:at]
                 if isinstance(s, ir.LoadOperand) and s.part == j + 1}
        assert ahead == {"scale_a", "scale_b", "bias"}, j
    assert check_protocol(module, case.spec.m, case.spec.n, case.spec.k).ok


def test_multi_output_slots_wait_for_every_output() -> None:
    # Three outputs per block, two slots: before block j's stores, block j-1's three must be done, so that block
    # j+1's writes find their slot free.
    case = bf16_case(130, 528, 128, multi_fn, multi_operands(130, 528), seed=7)
    module, res = case.run(_slotted(case.spec, blocks=4, staging=2, operand=1, grid=1))
    assert_matches(case, res)
    assert {o.pending for o in _tile_body(module) if isinstance(o, ir.StoreWait)} == {0}
    # Leave block j-1's three stores in flight and block j+1 overwrites a slot they may still read.
    racy = edit_tiles(module, lambda stmts: tuple(replace(s, pending=3) if isinstance(s, ir.StoreWait) else s
                                                  for s in stmts))
    r = simulate(racy, case.a, case.b, operands=case.operands, record=False)
    assert FindingKind.STORE_BUFFER_RACE in r.report.kinds(), r.report.summary()


def test_staging_slots_must_divide_the_blocks() -> None:
    case = _small()
    with pytest.raises(ValueError, match="staging_slots=2.*epilogue_subtiles=1"):
        replace(plan_schedule(case.spec, H100_SXM), staging_slots=2)
    with pytest.raises(ValueError, match="hoist_rows=False"):
        replace(plan_schedule(case.spec, H100_SXM), load_ahead=True)


def test_tiny_slotted_module_is_clean_on_every_schedule() -> None:
    case = bf16_case(128, 128, 64, gelu_fn, gelu_operands(128, 128, expanded=False), seed=8)
    plan = Plan(bm=128, bn=64, bk=32, stages=2, consumer_warps=8, group_m=2, grid=1, consumer_partitions=2,
                epilogue_subtiles=2, hoist_rows=False, load_ahead=True, staging_slots=2, operand_slots=2,
                prefetch_operands=True)
    module = build(case.spec, H100_SXM, plan).module
    r = explore(module, 128, 128, 64, max_states=50_000)
    assert r.ok and not r.bound_hit, r.summary()
