"""`warploom.quantize(y, recipe="rowwise")` in a fused epilogue: the graph (a `GroupAmax` over the whole row), its
meaning, the lowering (one walk over the whole tile), the verifier's and the planner's rules (rule 27), and what is
refused. The numerics against the plain function are the simulator tier's (tests/sim/test_rowwise_epilogue_sim.py),
the code the compile tier's (tests/compile/test_compile_quantize.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.device import B200
from warploom.epilogue import graph as eg
from warploom.epilogue import printer
from warploom.epilogue.capture import capture
from warploom.epilogue.reference import evaluate, group_amax
from warploom.errors import DTypeError, InputError, UnsupportedError
from warploom.ir.verify import complete, structural
from warploom.planner import plan_schedule

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2


def t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def rowwise(acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return warploom.quantize(acc * 2.0, recipe="rowwise")


def test_capture_gives_the_row_amax() -> None:
    g = capture(lambda acc, col_s: warploom.quantize(acc * col_s, recipe="rowwise", dtype=E5), {"col_s": t(100, 1)},
                out_shape=(100, 300))
    assert printer.text(g) == """\
epilogue(acc, col_s: column fp32):
  %0 = mul acc, col_s
  %1 = group_amax %0, row
  %2 = div %1, 57344.0
  %3 = eq %2, 0.0
  %4 = where %3, 1.0, %2
  %5 = div %0, %4
  return %5 as e5m2, %4 as fp32 per group
"""
    assert g.rowwise() and g.amax().width is None
    assert g.output_shape(1, 100, 300) == (100, 1) and g.output_shape(0, 100, 300) == (100, 300)
    assert not capture(lambda acc: warploom.quantize(acc), {}, out_shape=(4, 4)).rowwise()  # (1x128)


@pytest.mark.parametrize("n", [5, 128, 200, 1000])
@pytest.mark.parametrize("fp8", [E4, E5], ids=["e4m3", "e5m2"])
def test_reference_is_the_plain_function(n: int, fp8: torch.dtype) -> None:
    """The graph's meaning (`reference.evaluate`, at any N) is rowwise quantize of the epilogue's value, bit for bit:
    (M, 1) scales, a zero row (s = 1), a NaN row."""
    torch.manual_seed(n)
    shift = torch.randn(n)
    g = capture(lambda acc, shift: warploom.quantize(acc * 3 + shift, recipe="rowwise", dtype=fp8),
                {"shift": shift}, out_shape=(9, n))
    acc = torch.randn(9, n) * 100
    acc[2] = -shift / 3
    acc[4, n - 1] = float("nan")
    q, s = evaluate(g, acc, {"shift": shift})
    rq, rs = warploom.quantize(acc * 3 + shift, recipe="rowwise", dtype=fp8)
    assert s.shape == rs.shape == (9, 1)
    assert torch.equal(s.nan_to_num(), rs.nan_to_num()) and torch.equal(s.isnan(), rs.isnan())
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))


def test_group_amax_of_the_row() -> None:
    x = torch.arange(300.0).reshape(1, 300) - 100
    assert torch.equal(group_amax(x, (0, 300), 300, None)[0, [0, 299]], torch.tensor([199.0, 199.0]))
    assert torch.equal(group_amax(x[:, :256], (0, 256), 200, None)[0, 255], torch.tensor(100.0))  # (< N: not 155)
    with pytest.raises(ValueError, match="expected the whole row"):
        group_amax(x[:, 128:], (128, 300), 300, None)
    a = eg.GroupAmax(0, None)
    assert (a.span(77, 300), a.index(299), a.groups(300), a.tile_cols(256)) == ((0, 300), 0, 1, 256)
    with pytest.raises(ValueError, match="expected a positive column count, or None"):
        eg.GroupAmax(0, 0)
    with pytest.raises(ValueError, match="groups output needs the graph's group amax"):
        eg.EpilogueGraph((eg.Acc(),), (eg.Output(0, eg.DType.FP32, eg.OutputLayout.GROUPS),))


def test_empty_n_gives_the_plain_functions_unit_scales() -> None:
    """N = 0: no kernel; q is (M, 0) and s (M, 1) of ones, as the plain function gives."""
    q, s = warploom.matmul(torch.ones(3, 8, dtype=BF16), torch.ones(8, 0, dtype=BF16),
                           epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    rq, rs = warploom.quantize(torch.ones(3, 0), recipe="rowwise")
    assert q.shape == rq.shape == (3, 0) and torch.equal(s, rs) and torch.equal(s, torch.ones(3, 1))


def test_lowering_walks_the_whole_tile_before_dividing() -> None:
    """At N = 256 (a 128x256 tile, rule 9's 8 blocks of 32 columns) every block folds into the row's amax before
    any is divided; one store_scales after the last block. No block's loads move ahead (rule 9's `load_ahead`)."""
    k = warploom.plan(t(300, 64, dtype=BF16), t(64, 256, dtype=BF16), epilogue=rowwise)
    assert (k.plan.bn, k.plan.epilogue_subtiles, k.plan.load_ahead) == (256, 8, False)
    text = k.schedule
    assert text.count("fold_amax") == 8 and text.count("store_scales") == 1
    assert text.index("fold_amax acc[cols 7/8]") < text.index("apply_epilogue acc[cols 0/8]")
    assert "store_scales out1 of acc[cols 7/8]" in text
    assert "ep_acc = gl.inline_asm_elementwise(" in k.source  # the fold's values stay apart from the division's
    assert "gl.store(c1_ptr + gl.expand_dims(ep_rows, 1) * c1_stride_m, ep_out1" in k.source


def test_verifier_refuses_a_row_wider_than_the_tile() -> None:
    """A module whose rowwise tile does not hold all of N (as if planned for N = 300 on a 256-wide tile) would scale
    each tile by its own columns' amax: the verifier names it. (Run-time N: test_a_wider_n_than_planned_is_refused.)"""
    m = warploom.plan(t(300, 64, dtype=BF16), t(64, 256, dtype=BF16), epilogue=rowwise).module
    assert not structural(m) + complete(m, H100_SXM)
    wide = dataclasses.replace(m, spec=dataclasses.replace(m.spec, n=300))
    assert any("rowwise quantization's tile must hold its whole row: N=300 > BN=256" in e for e in structural(wide))


def test_a_wider_n_than_planned_is_refused() -> None:
    """A kernel takes N at run time; a rowwise one no more columns than its one tile spans (a second tile along N
    would scale by its own half row's amax and race on s), before any simulation or launch. Fewer columns run."""
    from warploom.errors import ShapeError

    kern = warploom.plan(t(40, 64, dtype=BF16), t(64, 208, dtype=BF16), epilogue=rowwise)
    assert kern.plan.bn == 256
    a = torch.randn(40, 64).to(BF16)
    with pytest.raises(ShapeError, match=r"b: expected N <= 256.*planned for N = 208.*got N = 304.*Fix"):
        kern.simulate(a, torch.randn(64, 304).to(BF16))
    assert kern.simulate(a, torch.randn(64, 256).to(BF16)).ok


@pytest.mark.parametrize(("m", "n", "bn"), [(16, 64, 128), (4096, 128, 128), (48, 144, 256), (4096, 256, 256)])
def test_planner_rule_27_takes_one_tile_across_n(m: int, n: int, bn: int) -> None:
    """The narrowest of 128 and 256 that holds N, even where a small M would take 64x64 tiles (rule 16) or swap
    (rule 18), whole tiles."""
    k = warploom.plan(t(m, 512, dtype=BF16), t(512, n, dtype=BF16), epilogue=rowwise)
    assert (k.plan.bn, k.plan.swap_ab, k.plan.split_k, k.plan.stream_k, k.plan.tail_split) == (bn, False, 1, 0, 1)
    assert k.plan.cluster == 1 and not k.plan.pingpong


def test_two_quantizations_in_one_epilogue_are_refused_by_name() -> None:
    """A tile takes one amax: a second `warploom.quantize` among the outputs is a warploom error naming the
    epilogue and the fix (it was a bare ValueError from the graph's own check)."""
    with pytest.raises(UnsupportedError, match=r"epilogue: expected at most one warploom.quantize call.*got 2.*Fix"):
        capture(lambda acc: (warploom.quantize(acc)[0], warploom.quantize(acc * 2, recipe="rowwise")[0]), {},
                out_shape=(4, 4))


def test_bad_input_names_the_argument() -> None:
    """Rowwise's own mistakes, traced: each a warploom error that names the argument, what was expected and the fix."""
    with pytest.raises(UnsupportedError, match="warploom.quantize y: expected a float32, bfloat16 or float16 value.*"
                                               "Fix: quantize acc"):
        capture(lambda acc: warploom.quantize(acc > 0, recipe="rowwise"), {}, out_shape=(4, 4))
    with pytest.raises(DTypeError, match="dtype: expected torch.float8_e4m3fn or torch.float8_e5m2.*Fix"):
        capture(lambda acc: warploom.quantize(acc, recipe="rowwise", dtype=BF16), {}, out_shape=(4, 4))
    with pytest.raises(InputError, match="recipe: expected one of '1x128', 'rowwise'.*Fix"):
        capture(lambda acc: warploom.quantize(acc, recipe="row"), {}, out_shape=(4, 4))
    with pytest.raises(UnsupportedError, match=r"quantize's \(q, s\) returned as they are.*Fix: return q and s"):
        capture(lambda acc: warploom.quantize(acc, recipe="rowwise")[1] + 1.0, {}, out_shape=(4, 4))


def test_planner_rule_27_refuses_by_name() -> None:
    spec = warploom.plan(t(64, 512, dtype=BF16), t(512, 256, dtype=BF16), epilogue=rowwise).spec
    for forced, why in [({"bn": 128}, "bn=128: the tile must be 256 wide .the narrowest tile that holds N=256"),
                        ({"stream_k": 2}, "stream_k=2"), ({"split_k": 2}, "split_k=2"),
                        ({"swap_ab": True}, "swap_ab=True"), ({"pingpong": True}, "pingpong=True"),
                        ({"cluster": 2}, "cluster=2"), ({"tail_split": 2}, "tail_split=2")]:
        with pytest.raises(UnsupportedError, match=f"rowwise, rule 27.*{why}.*Fix: drop the conflicting option"):
            plan_schedule(spec, H100_SXM, **forced)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="built for sm_90a, not"):
        plan_schedule(spec, B200)
    unfused = r"Fix: .*quantize the call's result with warploom.quantize\(out, recipe='rowwise'\)"
    # N > 256 is rule 29's (tests/unit/test_rowwise_amax_pass.py), which stores the quantize pair only
    assert warploom.plan(t(64, 512, dtype=BF16), t(512, 272, dtype=BF16), epilogue=rowwise).plan.amax_pass
    with pytest.raises(UnsupportedError, match=r"rowwise, rule 29.*N=272 > 256 takes rule 29's two passes.*expected "
                                               rf"the outputs \(q fp8, s\).*got \(bf16, e4m3, groups\).*{unfused}"):
        warploom.plan(t(64, 512, dtype=BF16), t(512, 272, dtype=BF16),
                      epilogue=lambda acc: (acc.to(BF16), *warploom.quantize(acc, recipe="rowwise")))
    # what a 256-wide tile refuses (a bias row, promoted fp8) is rule 29's on 128-wide tiles where the graph stores
    # the pair alone (tests/unit/test_rowwise_amax_pass.py); with another output neither rule runs
    with pytest.raises(UnsupportedError, match=r"rowwise, rule 27.*N=256 with per-column or dense epilogue operands "
                                               r".shift. .*expected N <= 128 for rule 27's one tile, or .for rule "
                                               r"29's two passes.*expected the outputs \(q fp8, s\).*got "
                                               rf"\(e4m3, groups, bf16\).*{unfused}"):
        warploom.plan(t(64, 512, dtype=BF16), t(512, 256, dtype=BF16), shift=t(256),
                      epilogue=lambda acc, shift: (*warploom.quantize(acc + shift, recipe="rowwise"), acc.to(BF16)))
    fp8 = (t(64, 512).to(E4), t(256, 512).to(E4).t(), t(64, 1), t(1, 256))
    with pytest.raises(UnsupportedError, match="N=256 with promoted fp8 accumulation .*: expected N <= 128 or "
                                               "use_fast_accum=True for rule 27's one tile"):
        warploom.plan(*fp8, use_fast_accum=False, out_dtype=BF16,
                      epilogue=lambda acc: (*warploom.quantize(acc, recipe="rowwise"), acc.to(BF16)))
    # N <= 128 takes what a 256-wide tile refuses: a bias row, promoted fp8
    k = warploom.plan(t(64, 512, dtype=BF16), t(512, 128, dtype=BF16), shift=t(128),
                      epilogue=lambda acc, shift: warploom.quantize(acc + shift, recipe="rowwise"))
    assert k.plan.bn == 128
    fp8 = (t(64, 512).to(E4), t(128, 512).to(E4).t(), t(64, 1), t(1, 128))
    assert warploom.plan(*fp8, use_fast_accum=False, out_dtype=BF16, epilogue=rowwise).plan.bn == 128
