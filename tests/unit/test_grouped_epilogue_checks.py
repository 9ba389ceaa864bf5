"""Bad input to fused epilogues on grouped GEMMs: each a warploom error naming the argument, what was expected and
the fix, raised before anything is planned or launched (`warploom.grouped.build` is made to fail, so a call that got
that far would say so). Plus the shapes `masked_operands` maps, and rule 22's tile for a promoted fused epilogue."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import H100_SXM, Accumulation, DType, GemmSpec, Grouping, ScaleRecipe
from warploom.errors import DTypeError, InputError, ShapeError, UnsupportedError
from warploom.fused import fused_spec
from warploom.grouped import masked_operands
from warploom.planner import plan_schedule

G, M_MAX, N, K = 4, 48, 64, 128
E4 = torch.float8_e4m3fn


@pytest.fixture(autouse=True)
def _no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a kernel was built: the checks should have refused the call first")

    monkeypatch.setattr(warploom.grouped, "build", refuse)


def _masked() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.randn(G, M_MAX, K).bfloat16(), torch.randn(G, K, N).bfloat16(),
            torch.tensor([3, 0, 48, 20], dtype=torch.int32))


def _raises(err: type[Exception], arg: str, *needles: str):  # noqa: ANN202
    """pytest.raises for a warploom error on `arg` whose message holds expected, got and fix, and each needle."""
    class _Check:
        def __enter__(self) -> None:
            self.ctx = pytest.raises(err)
            self.info = self.ctx.__enter__()

        def __exit__(self, *exc: object) -> bool:
            handled = self.ctx.__exit__(*exc)
            msg = str(self.info.value)
            assert getattr(self.info.value, "arg", None) == arg, msg
            assert msg.startswith(f"{arg}: expected ") and ". Fix: " in msg, msg
            for n in needles:
                assert n in msg, msg
            return bool(handled)

    return _Check()


def test_masked_operand_shapes_that_fit_no_layout() -> None:
    a, b, counts = _masked()
    fn = lambda acc, x: acc * x  # noqa: E731
    with _raises(ShapeError, "x", f"({G}, {M_MAX}, {N}) dense", f"x.expand({G}, {M_MAX}, {N})"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=fn, x=torch.randn(M_MAX, N))  # shared by the experts
    with _raises(ShapeError, "x", "reshape x"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=fn, x=torch.randn(G, M_MAX + 1))
    with _raises(ShapeError, "x"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=fn, x=torch.randn(1, G, M_MAX, N))
    with _raises(ShapeError, "x"):  # batched: the same rules
        warploom.grouped_mm(a, b, epilogue=fn, x=torch.randn(G + 1, 1, N))


def test_masked_per_row_or_per_expert_ambiguity_is_refused() -> None:
    """(G, M_max) with M_max == N could be one value per row or one row per expert: the 3-D forms say which."""
    a, b = torch.randn(G, N, K).bfloat16(), torch.randn(G, K, N).bfloat16()
    with _raises(ShapeError, "x", "M_max == N", "x.unsqueeze(1)", "x.unsqueeze(-1)"):
        warploom.grouped_mm(a, b, epilogue=lambda acc, x: acc * x, x=torch.randn(G, N))


def test_epilogue_with_several_outputs_is_refused() -> None:
    a, b, counts = _masked()
    with _raises(UnsupportedError, "epilogue", "one output"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=lambda acc: (acc, acc * 2))
    with _raises(UnsupportedError, "epilogue", "one output"):  # (K-grouped alike)
        warploom.grouped_mm(*_k_grouped(), epilogue=lambda acc: (acc, acc * 2))


def test_quantize_epilogue_refusals_name_the_unfused_fix() -> None:
    """A fused quantization runs 1x128 and rowwise on the M-grouped and masked layouts
    (tests/sim/test_grouped_quantize_sim.py; rowwise across more than one tile's N by rule 29,
    tests/sim/test_grouped_amax_pass_sim.py); K-grouped is refused before any build with the unfused form."""
    with _raises(UnsupportedError, "epilogue", "a K-grouped GEMM", "warploom.quantize(out, recipe='1x128')"):
        warploom.grouped_mm(*_k_grouped(), epilogue=lambda acc: warploom.quantize(acc, recipe="1x128"))
    with _raises(UnsupportedError, "epilogue", "a K-grouped GEMM", "warploom.quantize(out, recipe='rowwise')"):
        warploom.grouped_mm(*_k_grouped(), epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))


def test_quantize_scales_without_their_data_are_refused() -> None:
    """s alone (a kernel stores its first output as C: s had no pointer, the simulator found no C and stopped) or
    before q is refused by name, with the fix, before any build; q alone runs (tests/sim/test_grouped_quantize_sim)."""
    a, b, counts = _masked()
    with _raises(UnsupportedError, "epilogue output 0", "q first", "warploom.quantize(y)"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=lambda acc: warploom.quantize(acc)[1])
    with _raises(UnsupportedError, "epilogue output 0", "q first"):
        warploom.grouped_mm(a, b, masked_m=counts, epilogue=lambda acc: warploom.quantize(acc)[::-1])


def _k_grouped() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A K-grouped call's a (M_MAX, K), b (K, N) and offs over K (G groups, one empty): result (G, M_MAX, N)."""
    return (torch.randn(M_MAX, K).bfloat16(), torch.randn(K, N).bfloat16(),
            torch.tensor([40, 40, 100, K], dtype=torch.int32))


def test_k_grouped_operand_shapes_that_fit_no_layout() -> None:
    """A K-grouped call's operands are shaped against its (G, M, N) result, as masked_operands maps a masked one's:
    an (M, N) gradient without the group dimension, a wrong row count, a wrong group count, a 4-D one, an integer
    dtype are refused naming the operand, with the shapes taken and the fix."""
    a, b, offs = _k_grouped()
    fn = lambda acc, x: acc + x  # noqa: E731
    with _raises(ShapeError, "x", f"({G}, {M_MAX}, {N}) dense", f"x.expand({G}, {M_MAX}, {N})"):
        warploom.grouped_mm(a, b, offs, epilogue=fn, x=torch.randn(M_MAX, N))
    with _raises(ShapeError, "x", f"({G}, {M_MAX}, 1)", "reshape x"):
        warploom.grouped_mm(a, b, offs, epilogue=fn, x=torch.randn(G, M_MAX + 1, N))
    with _raises(ShapeError, "x", f"({G}, 1, 1) or ({G},)"):
        warploom.grouped_mm(a, b, offs, epilogue=fn, x=torch.randn(G + 1))
    with _raises(ShapeError, "x"):
        warploom.grouped_mm(a, b, offs, epilogue=fn, x=torch.randn(1, G, M_MAX, N))
    with _raises(DTypeError, "x", "x.float()"):
        warploom.grouped_mm(a, b, offs, epilogue=fn, x=torch.ones(G, M_MAX, N, dtype=torch.int32))
    fa, fb = a.to(E4), torch.randn(N, K).to(E4).t()
    sa, sb = torch.rand(M_MAX, 1), torch.rand(1, 1)
    offs8 = torch.tensor([0, 0, 0, K], dtype=torch.int32)
    with _raises(ShapeError, "x", f"({G}, {M_MAX}, {N}) dense"):  # (blockwise fp8 alike)
        warploom.scaled_grouped_mm(fa, fb, sa, sb, offs=offs8, epilogue=fn, x=torch.randn(G, N, M_MAX))
    with _raises(InputError, "scale_a", "rename"):  # (scaled_mm's names stay reserved)
        warploom.scaled_grouped_mm(fa, fb, sa, sb, offs=offs8, epilogue=lambda acc, scale_a: acc * scale_a,
                                   scale_a_=torch.rand(G))


def test_k_grouped_operands_map_as_masked_ones() -> None:
    """masked_operands over (G, M, N): dense and per-row ones flattened to C's (G * M) rows, per-group ones kept."""
    ops = {"d": torch.randn(G, M_MAX, N), "r": torch.randn(G, M_MAX), "c": torch.randn(G, N), "s": torch.randn(G)}
    got = masked_operands(ops, G, M_MAX, N)
    assert got["d"].shape == (G * M_MAX, N) and got["r"].shape == (G * M_MAX, 1)
    assert got["c"] is ops["c"] and got["s"] is ops["s"]


def _rowwise() -> dict[str, torch.Tensor]:
    m = G * M_MAX
    return {"a": torch.randn(m, K).to(E4), "b": torch.randn(G, N, K).to(E4).transpose(-2, -1),
            "scale_a": torch.rand(m), "scale_b": torch.rand(G, N),
            "offs": torch.tensor([10, 10, 100, m], dtype=torch.int32)}


def test_scaled_reserved_names_and_stray_operands() -> None:
    """scaled_mm's reserved names: scale_a, scale_b and bias are neither operands nor fn's parameters (fn's acc is
    the scaled product already); operands without an epilogue are refused as grouped_mm refuses them."""
    t = _rowwise()
    x = torch.randn(G, N)
    with _raises(InputError, "bias", "bias_"):
        warploom.scaled_grouped_mm(**t, epilogue=lambda acc, bias: acc + bias, bias=x)
    with _raises(InputError, "scale_b", "rename"):
        warploom.scaled_grouped_mm(**t, epilogue=lambda acc, scale_b: acc * scale_b, scale_b_=x)
    with _raises(InputError, "ebias", "epilogue="):
        warploom.scaled_grouped_mm(**t, ebias=x)


def test_scaled_per_expert_operand_of_another_expert_count() -> None:
    t = _rowwise()
    with _raises(ShapeError, "ebias", f"({G}, 1, {N})"):
        warploom.scaled_grouped_mm(**t, epilogue=lambda acc, ebias: acc + ebias, ebias=torch.randn(G + 1, 1, N))


def test_masked_operands_map_to_the_flattened_rows() -> None:
    """What the kernel reads: the (G * M_max, N) rows, per expert, or shared."""
    r = G * M_MAX
    ops = {"dense": torch.randn(G, M_MAX, N), "rows3": torch.randn(G, M_MAX, 1), "rows2": torch.randn(G, M_MAX),
           "erow": torch.randn(G, 1, N), "erow2": torch.randn(G, N), "escal": torch.randn(G), "col": torch.randn(N),
           "col3": torch.randn(1, 1, N), "one": torch.tensor(2.0)}
    got = {k: tuple(v.shape) for k, v in masked_operands(ops, G, M_MAX, N).items()}
    assert got == {"dense": (r, N), "rows3": (r, 1), "rows2": (r, 1), "erow": (G, 1, N), "erow2": (G, N),
                   "escal": (G,), "col": (N,), "col3": (N,), "one": ()}
    rows2 = masked_operands({"w": ops["rows2"]}, G, M_MAX, N)["w"]
    assert rows2.data_ptr() == ops["rows2"].data_ptr()  # (a view where the strides allow)


@pytest.mark.parametrize("scale,acc", [(ScaleRecipe.ROWWISE, Accumulation.PROMOTED),
                                       (ScaleRecipe.BLOCKWISE_1X128_128X128, Accumulation.PROMOTED)])
def test_rule22_promoted_fused_epilogue_keeps_128_wide(scale: ScaleRecipe, acc: Accumulation) -> None:
    """Rule 9 in rule 22: a promoted fp8 grouped GEMM with a fused epilogue plans 128 wide where rule 22 alone would
    give 128x256 (8192 rows over 8 experts); fast rowwise keeps rule 9's slotted 128x256."""
    spec = GemmSpec(8192, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, accumulation=acc,
                    grouping=Grouping.OFFSETS, groups=8)
    a = torch.empty(8192, 7168, dtype=E4)
    ops = {"w": torch.empty(8192, 1)}
    scales = ({"scale_a": torch.empty(8192, 1), "scale_b": torch.empty(8, 1, 4096)} if scale is ScaleRecipe.ROWWISE
              else {"scale_a": torch.empty(8192, 56), "scale_b": torch.empty(8, 56, 32)})
    fs, _ = fused_spec(spec, a, lambda acc, w: acc * w, ops, **scales)
    assert (plan_schedule(fs, H100_SXM).bm, plan_schedule(fs, H100_SXM).bn) == (128, 128)
    fast = GemmSpec(8192, 4096, 7168, DType.E4M3, DType.E4M3, DType.BF16, scale=ScaleRecipe.ROWWISE,
                    grouping=Grouping.OFFSETS, groups=8)
    fs, _ = fused_spec(fast, a, lambda acc, w: acc * w, ops, scale_a=torch.empty(8192, 1),
                       scale_b=torch.empty(8, 1, 4096))
    assert plan_schedule(fs, H100_SXM).bn == 256


def test_mx_epilogue_is_refused_naming_it() -> None:
    """An MX grouped GEMM with a fused epilogue passed the checks and was refused by the sm_100a planner in words
    naming no argument ("grouped GEMMs (rule 22) on sm_100a ... do not take a fused epilogue"), after planning began
    (found by tests/unit/test_props_bad_input_grouped.py): now refused before any build, naming epilogue."""
    e8 = torch.float8_e8m0fnu
    a, b = torch.randn(G * M_MAX, K).to(E4), torch.randn(G, N, K).to(E4).transpose(-2, -1)
    sa, sb = torch.ones(G * M_MAX, K // 32).to(e8), torch.ones(G, N, K // 32).to(e8)
    offs = torch.tensor([10, 10, 100, G * M_MAX], dtype=torch.int32)
    with _raises(UnsupportedError, "epilogue", "MX grouped GEMM", "drop epilogue="):
        warploom.scaled_grouped_mm(a, b, sa, sb, offs, epilogue=lambda acc: acc * 2)


@pytest.mark.parametrize("layout", ["m", "masked"])
def test_sparse_operand_is_refused_naming_it(layout: str) -> None:
    """A sparse epilogue operand raised torch's RuntimeError: its data pointer read for the memo key (fused._meta,
    matmul alike), or, masked, its reshape in masked_operands (found by tests/unit/test_props_bad_input_grouped.py)."""
    from warploom.errors import ArgumentTypeError

    if layout == "m":
        a, b = torch.randn(G * M_MAX, K).bfloat16(), torch.randn(G, K, N).bfloat16()
        kw: dict = {"offs": torch.tensor([10, 10, 100, G * M_MAX], dtype=torch.int32)}
        x = torch.randn(G * M_MAX, N).to_sparse()
    else:
        a, b, counts = _masked()
        kw, x = {"masked_m": counts}, torch.randn(G, M_MAX, N).to_sparse()
    with _raises(ArgumentTypeError, "x", "dense (strided)", "x.to_dense()"):
        warploom.grouped_mm(a, b, epilogue=lambda acc, x: acc + x, x=x, **kw)
    with _raises(ArgumentTypeError, "x", "dense (strided)"):  # (matmul's epilogue alike)
        warploom.matmul(torch.randn(16, K).bfloat16(), torch.randn(K, N).bfloat16(), epilogue=lambda acc, x: acc + x,
                        x=torch.randn(N).to_sparse())
