"""`warploom.quantize(y, recipe="1x128")` in a fused epilogue: the graph, its meaning, the lowering, the verifier's and
the planner's rules (rule 26), and what is refused. The numerics against the plain function are the simulator
tier's (tests/sim/test_quantize_epilogue_sim.py), the code the compile tier's (tests/compile/test_compile_quantize.py).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.device import B200
from warploom.dtypes import DType
from warploom.epilogue import graph as eg
from warploom.epilogue import printer
from warploom.epilogue.capture import capture
from warploom.epilogue.reference import evaluate, evaluate_tile, group_amax
from warploom.errors import DTypeError, UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir.verify import complete, structural
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule

BF16, E4, E5 = torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2


def t(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def quantize_shift(acc: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return warploom.quantize(acc + shift)


def test_capture_gives_the_group_amax_scale_and_division() -> None:
    g = capture(quantize_shift, {"shift": torch.randn(300)}, out_shape=(100, 300))
    assert printer.text(g) == """\
epilogue(acc, shift: row fp32):
  %0 = add acc, shift
  %1 = group_amax %0
  %2 = div %1, 448.0
  %3 = eq %2, 0.0
  %4 = where %3, 1.0, %2
  %5 = div %0, %4
  return %5 as e4m3, %4 as fp32 per group
"""
    assert [o.layout for o in g.outputs] == [eg.OutputLayout.FULL, eg.OutputLayout.GROUPS]
    assert g.output_shape(1, 100, 300) == (100, 3) and g.output_shape(0, 100, 300) == (100, 300)
    e5 = capture(lambda acc: warploom.quantize(acc, dtype=E5), {}, out_shape=(4, 4))
    assert "div %0, 57344.0" in printer.inline(e5) and e5.outputs[0].dtype is DType.E5M2


@pytest.mark.parametrize("n", [128, 300, 5])
@pytest.mark.parametrize("fp8", [E4, E5], ids=["e4m3", "e5m2"])
def test_reference_is_the_plain_function(n: int, fp8: torch.dtype) -> None:
    """The graph's meaning (`reference.evaluate`) is quantize of the epilogue's value, bit for bit: the pair's
    shapes, the ragged last group's amax over its valid columns, zero and NaN groups."""
    torch.manual_seed(n)
    shift = torch.randn(n)
    g = capture(lambda acc, shift: warploom.quantize(acc * 3 + shift, dtype=fp8), {"shift": shift}, out_shape=(9, n))
    acc = torch.randn(9, n) * 100
    acc[2] = -shift / 3  # (a zero row: s = 1, but acc * 3 + shift rounds, so set the value instead)
    acc[4, n - 1] = float("nan")
    q, s = evaluate(g, acc, {"shift": shift})
    rq, rs = warploom.quantize(acc * 3 + shift, dtype=fp8)
    assert s.shape == rs.shape == (9, -(-n // 128))
    assert torch.equal(s.nan_to_num(), rs.nan_to_num()) and torch.equal(s.isnan(), rs.isnan())
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))


def test_group_amax_needs_whole_groups_or_the_folded_amax() -> None:
    x = torch.arange(256.0).reshape(1, 256) - 100
    assert torch.equal(group_amax(x, (0, 256), 256)[0, [0, 127, 128, 255]], torch.tensor([100.0, 100, 155, 155]))
    assert torch.equal(group_amax(x[:, :200], (0, 200), 200)[0, 199], torch.tensor(99.0))  # ragged: < N only
    with pytest.raises(ValueError, match="whole 128-column groups"):
        group_amax(x[:, :64], (0, 64), 256)
    g = capture(lambda acc: warploom.quantize(acc), {}, out_shape=(1, 256))
    with pytest.raises(ValueError, match="whole 128-column groups"):
        evaluate_tile(g, x[:, 64:128], {}, range(1), range(64, 128), out_shape=(1, 256))
    q, s = evaluate_tile(g, x[:, 64:128], {}, range(1), range(64, 128), out_shape=(1, 256),
                         amax=torch.tensor([[448.0]]))  # (the group's amax, folded over its blocks)
    assert torch.equal(s, torch.ones(1, 64)) and q.float()[0, 0].item() == -36.0


def test_graph_checks_itself() -> None:
    acc, amax = eg.Acc(), eg.GroupAmax(0)
    with pytest.raises(ValueError, match="at most one per graph"):
        eg.EpilogueGraph((acc, amax, eg.GroupAmax(1)), (eg.Output(2),))
    with pytest.raises(ValueError, match="varies along N"):
        eg.EpilogueGraph((acc, amax), (eg.Output(0, DType.FP32, eg.OutputLayout.GROUPS),))
    with pytest.raises(ValueError, match="expected dtype fp32"):
        eg.Output(1, DType.BF16, eg.OutputLayout.GROUPS)
    g = eg.EpilogueGraph((acc, amax), (eg.Output(1, DType.FP32, eg.OutputLayout.GROUPS),))
    assert g.kinds()[1].value == "column" and g.before_amax() == (0,)
    with pytest.raises(ValueError, match="no transpose"):
        g.transposed()


def test_results_are_returned_as_they_are() -> None:
    with pytest.raises(UnsupportedError, match=r"quantize's \(q, s\) returned as they are.*compute before quantize"):
        capture(lambda acc: warploom.quantize(acc)[1] * 2, {}, out_shape=(4, 4))
    # s alone, or before q: a kernel stores its first output as C (the launchers give a scale output after it a
    # pointer; s first went to q's memory on the dense launcher, and alone had none)
    for fn in (lambda acc: warploom.quantize(acc)[1], lambda acc: warploom.quantize(acc, recipe="rowwise")[::-1]):
        with pytest.raises(UnsupportedError, match=r"^epilogue output 0: expected .*q first.*Fix: return "):
            capture(fn, {}, out_shape=(4, 4))
    with pytest.raises(UnsupportedError, match="warploom.quantize y: expected a float32, bfloat16 or float16 value"):
        capture(lambda acc: warploom.quantize(acc > 0), {}, out_shape=(4, 4))
    with pytest.raises(DTypeError, match="dtype: expected torch.float8_e4m3fn or torch.float8_e5m2"):
        capture(lambda acc: warploom.quantize(acc, dtype=torch.float16), {}, out_shape=(4, 4))


def _kernel(subtiles: int) -> Kernel:
    k = warploom.plan(t(256, 64, dtype=BF16), t(64, 256, dtype=BF16), epilogue=quantize_shift, shift=t(256))
    return build(k.spec, H100_SXM, dataclasses.replace(k.plan, epilogue_subtiles=subtiles))


def test_lowering_walks_each_group_before_dividing() -> None:
    """Each group's blocks fold their amax before any of them is divided and stored; the scale column goes out after
    the group's last block, by store_scales, and has no staging buffer of its own."""
    k = _kernel(2)
    text = k.schedule
    walk = """\
      fold_amax acc[cols 0/2]
      fold_amax acc[cols 1/2]
      apply_epilogue acc[cols 0/2]
      tma_store_wait pending=0
      store_smem c_smem <- out0 of acc[cols 0/2]
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 0/2]
      apply_epilogue acc[cols 1/2]
      tma_store_wait pending=0
      store_smem c_smem <- out0 of acc[cols 1/2]
      fence_async_shared
      tma_store c_smem -> C[m, n][cols 1/2]
      store_scales out1 of acc[cols 1/2]
"""
    assert walk in text
    assert [b.name for b in k.module.buffers] == ["c_smem"]
    four = _kernel(4).schedule
    assert four.count("fold_amax") == 4 and four.index("fold_amax acc[cols 3/4]") < four.index("apply_epilogue")


def test_verifier_refuses_a_division_before_the_groups_fold() -> None:
    m = _kernel(2).module

    def swap(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out = list(body)
        i = next(j for j, s in enumerate(out) if isinstance(s, ir.FoldAmax) and s.part == 1)
        fold = out.pop(i)
        out.insert(next(j for j, s in enumerate(out) if isinstance(s, ir.ApplyEpilogue) and s.part == 1), fold)
        return tuple(out)

    p = m.partitions[0]
    bad = dataclasses.replace(m, partitions=(dataclasses.replace(p, body=tuple(
        dataclasses.replace(s, body=swap(s.body)) if isinstance(s, ir.Loop) else s for s in p.body)),
        *m.partitions[1:]))
    assert not structural(m) + complete(m, H100_SXM)
    errs = structural(bad) + complete(bad, H100_SXM)
    assert any("reads its group's amax before the fold_amax of block(s) [1]" in e for e in errs), errs


def test_planner_rule_26() -> None:
    """128-wide cooperative tiles, even where a small M would take 64x64 tiles (rule 16) or swap (rule 18); what
    would cut a tile's sum or columns otherwise is refused by name."""
    for m in (16, 48, 4096):
        k = warploom.plan(t(m, 512, dtype=BF16), t(512, 1024, dtype=BF16), epilogue=lambda acc: warploom.quantize(acc))
        assert (k.plan.bn, k.plan.swap_ab, k.plan.split_k, k.plan.stream_k, k.plan.tail_split) == (128, False, 1, 0, 1)
    spec = k.spec
    for forced, why in [({"bn": 64}, "bn=64: the tile must be 128 wide"), ({"stream_k": 2}, "stream_k=2"),
                        ({"split_k": 2}, "split_k=2"), ({"swap_ab": True}, "swap_ab=True"),
                        ({"partial_blocks": 2}, "partial_blocks=2: promoted fp8 in 128-column blocks")]:
        with pytest.raises(UnsupportedError, match=f"rule 26.*{why}.*Fix: drop the conflicting option"):
            plan_schedule(spec, H100_SXM, **forced)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="built for sm_90a, not"):
        plan_schedule(spec, B200)
    dense = warploom.plan(t(256, 64, dtype=BF16), t(64, 256, dtype=BF16),
                          epilogue=lambda acc, r: warploom.quantize(acc + r), r=t(256, 256))
    assert not dense.plan.prefetch_operands  # (a dense operand's copy stays right before its load: the walk's order)
    with pytest.raises(UnsupportedError, match=r"prefetch_operands=True: a dense operand's early copies"):
        plan_schedule(dense.spec, H100_SXM, prefetch_operands=True)
