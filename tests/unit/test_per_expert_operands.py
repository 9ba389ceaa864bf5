"""Per-expert epilogue operands of M-grouped calls (epilogue/classify.py's rule): which shapes are read per expert,
how collisions with (total_M, N) broadcasting resolve, and the errors for wrong G, dtype, device and a non-grouped
call; masked calls read them too."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.dtypes import DType
from warploom.epilogue import printer
from warploom.epilogue.capture import capture
from warploom.epilogue.classify import classify
from warploom.epilogue.operands import OperandKind, OperandSpec
from warploom.epilogue.reference import evaluate, evaluate_tile
from warploom.errors import DeviceError, DTypeError, ShapeError, VerificationError
from warploom.fused import fused_spec
from warploom.kernel import build
from warploom.passes.build import kernel_name
from warploom.planner import plan_schedule
from warploom.spec import GemmSpec, Grouping

ROW, SCALAR, DENSE, COLUMN = OperandKind.ROW, OperandKind.SCALAR, OperandKind.DENSE, OperandKind.COLUMN
G, M, N = 4, 300, 64


@pytest.mark.parametrize("shape,kind", [
    ((G, N), ROW), ((G, 1, N), ROW), ((G,), SCALAR), ((G, 1, 1), SCALAR),
])
def test_per_expert_shapes(shape: tuple[int, ...], kind: OperandKind) -> None:
    for device in ("cpu", "meta"):
        s = classify("x", torch.empty(shape, device=device), (M, N), groups=G)
        assert (s.kind, s.per_group, s.shape) == (kind, True, shape)
        assert s.group_stride == torch.empty(shape).stride()[0]
        assert s.mn_strides() == ((0, 1) if kind is ROW else (0, 0))


def test_an_expanded_per_expert_bias_is_a_scalar_per_expert() -> None:
    s = classify("x", torch.empty(G, 1).expand(G, N), (M, N), groups=G)  # strides (1, 0): one value per expert
    assert (s.kind, s.per_group, s.group_stride) == (SCALAR, True, 1)


@pytest.mark.parametrize("shape,m,n,kind,per_group", [
    ((G, N), G, N, DENSE, False),  # G == total_M: (G, N) is the dense (M, N) operand it always was
    ((G, 1, N), G, N, ROW, True),  # ... and the 3-D form is one row per expert
    ((G,), 300, G, ROW, False),  # G == N: (G,) is the per-column row it always was
    ((G, 1, 1), 300, G, SCALAR, True),  # ... and the 3-D form one value per expert
    ((1, N), 300, N, ROW, False),  # G == 1 elsewhere: one row, the same meaning either way
    ((M, 1), M, N, COLUMN, False),  # shapes that do not collide keep their meaning
    ((M, N), M, N, DENSE, False),
    ((N,), M, N, ROW, False),
    ((), M, N, SCALAR, False),
])
def test_collisions_resolve_by_the_rule(shape: tuple[int, ...], m: int, n: int, kind: OperandKind,
                                        per_group: bool) -> None:
    s = classify("x", torch.empty(shape), (m, n), groups=G if shape[:1] != (1,) else 1)
    assert (s.kind, s.per_group) == (kind, per_group)


@pytest.mark.parametrize("shape,fix", [
    ((G + 1, N), r"slice or reshape x"),  # a 2-D of another expert count does not broadcast either
    ((G + 1, 1, N), r"one slice per expert of b \(4\), e\.g\. x\.reshape\(4, 1, 64\)"),
    ((G, 2, N), r"reshape x to \(4, 1, 64\) or \(4, 1, 1\)"),
    ((G, 1, N + 1), r"reshape x to \(4, 1, 64\) or \(4, 1, 1\)"),
    ((G + 1,), r"slice or reshape x"),
])
def test_wrong_expert_count_names_operand_expected_and_fix(shape: tuple[int, ...], fix: str) -> None:
    with pytest.raises(ShapeError, match=fix) as ei:
        classify("x", torch.empty(shape), (M, N), groups=G)
    assert ei.value.arg == "x"
    msg = str(ei.value)
    assert msg.startswith("x: expected ") and f"got shape {shape}" in msg
    assert "(4, 1, 64)" in msg  # (what a per-expert operand of this call is)


def test_a_non_grouped_call_refuses_a_per_expert_shape_and_says_where_it_goes() -> None:
    a, b = torch.randn(M, 32).bfloat16(), torch.randn(32, N).bfloat16()
    for shape in ((G, N), (G, 1, N)):
        with pytest.raises(ShapeError, match=r"only warploom\.grouped_mm's M-grouped call .* reads it so") as ei:
            warploom.matmul(a, b, epilogue=lambda acc, bias: acc + bias, bias=torch.randn(shape))
        assert ei.value.arg == "bias"


def _grouped(x: torch.Tensor, **kw: object) -> None:
    offs = torch.tensor([10, 10, 200, M], dtype=torch.int32)
    a, w = torch.randn(M, 32).bfloat16(), torch.randn(G, N, 32).bfloat16().transpose(-2, -1)
    warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: acc + bias, bias=x, **kw)


def test_per_expert_dtype_and_device_are_checked() -> None:
    with pytest.raises(DTypeError, match=r"^bias: expected an epilogue operand of dtype .* Fix: pass bias\.float\(\)"):
        _grouped(torch.ones(G, N, dtype=torch.int32))
    with pytest.raises(DTypeError, match="^bias: "):
        _grouped(torch.ones(G, N).to(torch.float8_e4m3fn))
    with pytest.raises(DeviceError, match=r"^bias: expected an epilogue operand on cpu.* Fix: move it"):
        _grouped(torch.ones(G, N, device="meta"))
    with pytest.raises(ShapeError, match=r"^bias: expected "):
        _grouped(torch.ones(G + 1, 1, N))


def test_masked_and_batched_calls_read_per_expert_operands() -> None:
    """Masked and batched calls take per-expert operands too (grouped.masked_operands); (G, N) with M_max == N is
    refused as ambiguous (one value per row or one row per expert), and the 3-D form says which."""
    a, w = torch.randn(G, 64, 32).bfloat16(), torch.randn(G, N, 32).bfloat16().transpose(-2, -1)
    counts = torch.full((G,), 64, dtype=torch.int32)
    with pytest.raises(ShapeError, match=r"^bias: expected .* Fix: say which: bias.unsqueeze\(1\)"):
        warploom.grouped_mm(a, w, masked_m=counts, epilogue=lambda acc, bias: acc + bias, bias=torch.randn(G, N))
    bias = torch.randn(G, 1, N)
    y = warploom.grouped_mm(a, w, masked_m=counts, epilogue=lambda acc, bias: acc + bias, bias=bias)
    assert torch.allclose(y.float(), torch.bmm(a.float(), w.float()) + bias, atol=0.1, rtol=1e-2)


def test_the_reference_reads_the_tiles_group_slice() -> None:
    spec, _ = fused_spec(GemmSpec(M, N, 32, grouping=Grouping.OFFSETS, groups=G), torch.empty(M, 32).bfloat16(),
                         lambda acc, bias: acc + bias, {"bias": torch.empty(G, N)})
    g = spec.epilogue
    bias = torch.randn(G, N)
    for grp in range(G):
        (y,) = evaluate_tile(g, torch.zeros(8, N), {"bias": bias}, range(16, 24), range(N), out_shape=(M, N),
                             group=grp)
        assert torch.equal(y, bias[grp].expand(8, N))
    with pytest.raises(ValueError, match=r"per-group operands \(bias\) need each group's rows apart"):
        evaluate(g, torch.zeros(M, N), {"bias": bias})
    with pytest.raises(ValueError, match="group 4 outside its 4 per-group slices"):
        evaluate_tile(g, torch.zeros(8, N), {"bias": bias}, range(8), range(N), out_shape=(M, N), group=G)


def test_operand_spec_validates_per_group() -> None:
    with pytest.raises(ValueError, match="row or a scalar per group"):
        OperandSpec("x", COLUMN, DType.FP32, (G, M), (M, 1), per_group=True)
    with pytest.raises(ValueError, match="never read transposed"):
        OperandSpec("x", ROW, DType.FP32, (G, N), (N, 1), per_group=True).transposed()


def test_the_verifier_refuses_a_per_group_operand_outside_a_grouped_module() -> None:
    s = OperandSpec("bias", ROW, DType.FP32, (G, N), (N, 1), per_group=True)
    g = capture(lambda acc, bias: acc + bias, (s,))
    with pytest.raises(VerificationError,
                       match=r"per-group epilogue operands \(bias\) outside a grouped module"):
        build(GemmSpec(M, N, 64, epilogue=g), H100_SXM)


def test_generated_gluon_reads_the_tiles_expert() -> None:
    """The per-expert loads, as emitted: the base moves to the tile's group's slice, the rest is a plain row or
    scalar load (a shared (N,) row stays at its base)."""
    ops = {"bias": torch.empty(8, 2048, dtype=torch.bfloat16), "scale": torch.empty(8, 1, 1),
           "shift": torch.empty(2048)}
    spec, _ = fused_spec(GemmSpec(8192, 2048, 1024, grouping=Grouping.OFFSETS, groups=8),
                         torch.empty(8192, 1024, dtype=torch.bfloat16),
                         lambda acc, bias, scale, shift: (acc + bias) * scale + shift, ops)
    text = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128)).gluon.text
    # (once per consumer partition: rule 22 runs a fused 128x128 tile's warpgroups as two)
    loads = list(dict.fromkeys(line.strip() for line in text.splitlines() if "_acc_0 = gl" in line))
    assert loads == [
        "bias_acc_0 = gl.expand_dims(gl.load(bias_ptr + grp * 2048 + ep_cols_acc_0 * 1, mask=ep_cols_acc_0 < N, "
        "other=0.0).to(gl.float32), 0)  # load_operand bias for acc as per_col: bias: the tile's group's row, [1, BN]",
        "scale_acc_0 = gl.load(scale_ptr + grp).to(gl.float32)  # load_operand scale for acc as scalar: scale: the "
        "tile's group's scalar",
        "shift_acc_0 = gl.expand_dims(gl.load(shift_ptr + ep_cols_acc_0 * 1, mask=ep_cols_acc_0 < N, other=0.0)"
        ".to(gl.float32), 0)  # load_operand shift for acc as per_col: shift: row, [1, BN]",
    ]


def test_a_per_expert_row_is_its_own_kernel() -> None:
    """The kernel name keys the on-disk source cache: a per-expert (G, N) bias, a shared (N,) one and per-expert ones
    of other group strides must not share a kernel (their loads differ), and the printed graph says which is which."""
    def spec_of(bias: torch.Tensor) -> GemmSpec:
        s, _ = fused_spec(GemmSpec(M, N, 32, grouping=Grouping.OFFSETS, groups=G), torch.empty(M, 32).bfloat16(),
                          lambda acc, bias: acc + bias, {"bias": bias})
        return s

    specs = [spec_of(t) for t in (torch.empty(N), torch.empty(G, N), torch.empty(G, 2 * N)[:, :N])]
    assert [printer.header(s.epilogue) for s in specs] == [
        "epilogue(acc, bias: row fp32)", "epilogue(acc, bias: row per group fp32)",
        "epilogue(acc, bias: row per group fp32)"]
    names = {kernel_name(s, plan_schedule(s, H100_SXM)) for s in specs}
    assert len(names) == 3


def test_grouped_calls_refuse_the_two_shapes_that_read_two_ways() -> None:
    """At the one token count that equals the expert count, a (G, N) bias meant per expert was read as the dense
    (total_M, N) operand, and at N == G a (G,) scale as one value per column: wrong results, no error. The grouped
    calls refuse both (grouped.offsets_operands, masked_operands) and name the forms that say which; those forms give
    each reading, checked against the per-expert product."""
    g, n, k = 4, 64, 32
    a, w = torch.randn(g, k).bfloat16(), torch.randn(g, n, k).bfloat16().transpose(-2, -1)
    offs = torch.tensor([0, 1, 3, 4], dtype=torch.int32)  # total_M == G: one empty expert, one of two rows
    bias = torch.randn(g, n)
    with pytest.raises(ShapeError, match=r"^bias: .*G == total_M == 4\. Fix: say which: bias\.unsqueeze\(1\) for one "
                       r"row per expert, or bias\.unsqueeze\(0\) for one row per row of the result"):
        warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: acc + bias, bias=bias)
    ranges = list(zip([0, *offs.tolist()[:-1]], offs.tolist(), strict=True))
    product = torch.cat([a[s:e].float() @ w[i].float() for i, (s, e) in enumerate(ranges)])
    experts = torch.repeat_interleave(torch.arange(g), torch.tensor([e - s for s, e in ranges]))
    per_expert = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: acc + bias, bias=bias.unsqueeze(1))
    torch.testing.assert_close(per_expert.float(), product + bias[experts], atol=0.1, rtol=1e-2)
    per_row = warploom.grouped_mm(a, w, offs, epilogue=lambda acc, bias: acc + bias, bias=bias.unsqueeze(0))
    torch.testing.assert_close(per_row.float(), product + bias, atol=0.1, rtol=1e-2)

    scale = torch.arange(1.0, 9.0)  # G == N == 8
    a8, w8 = torch.randn(16, k).bfloat16(), torch.randn(8, 8, k).bfloat16().transpose(-2, -1)
    offs8 = torch.arange(2, 17, 2, dtype=torch.int32)
    with pytest.raises(ShapeError, match=r"^s: .*G == N == 8\. Fix: say which: s\.reshape\(8, 1, 1\) for one value per "
                       r"expert, or s\.reshape\(1, 8\) for one value per column"):
        warploom.grouped_mm(a8, w8, offs8, epilogue=lambda acc, s: acc * s, s=scale)
    with pytest.raises(ShapeError, match=r"^s: .*G == N == 8\. Fix: say which: s\.reshape\(8, 1, 1\)"):
        warploom.grouped_mm(torch.randn(8, 16, k).bfloat16(), w8, epilogue=lambda acc, s: acc * s, s=scale)
    y = warploom.grouped_mm(a8, w8, offs8, epilogue=lambda acc, s: acc * s, s=scale.reshape(8, 1, 1))
    ref = torch.cat([a8[2 * i:2 * i + 2].float() @ w8[i].float() * scale[i] for i in range(8)])
    torch.testing.assert_close(y.float(), ref, atol=0.1, rtol=1e-2)
