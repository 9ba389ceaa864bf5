"""The gate/up interleave (warploom.gate_up), the epilogue graph's `GateUpHalf`, its capture, planner rule 28 and the
lowered schedule, without a GPU; and every bad input refused by name, with what was expected and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import warploom
from warploom.epilogue import capture, printer
from warploom.epilogue import graph as eg
from warploom.epilogue.reference import evaluate
from warploom.ir import printer as ir_printer

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))  # generated sources: not the user's warploom cache


def meta(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def silu_mul(block: int):  # type: ignore[no-untyped-def]
    return lambda acc: warploom.silu_mul_interleaved(acc, block=block)


# --- the layout


@pytest.mark.parametrize(("i", "block"), [(128, 64), (100, 64), (40, 32), (1, 128)])
def test_interleave_round_trips_and_zero_pads(i: int, block: int) -> None:
    w1, w3 = torch.randn(i, 24), torch.randn(i, 24)
    w = warploom.interleave_gate_up(w1, w3, block=block)
    padded = -(-i // block) * block
    assert w.shape == (2 * padded, 24)
    assert torch.equal(w[:min(i, block)], w1[:block]) and torch.equal(w[block:block + min(i, block)], w3[:block])
    g, u = warploom.deinterleave_gate_up(w, block=block)
    assert torch.equal(g[:i], w1) and torch.equal(u[:i], w3) and not g[i:].any() and not u[i:].any()
    g, u = warploom.deinterleave_gate_up(w, block=block, rows=i)
    assert torch.equal(g, w1) and torch.equal(u, w3)


def test_interleave_experts_and_scales_along_dim() -> None:
    """(G, I, K) expert weights along dim -2; a (1, I) scale_b along dim -1."""
    w1, w3 = torch.randn(3, 64, 8), torch.randn(3, 64, 8)
    w = warploom.interleave_gate_up(w1, w3, block=32)
    assert w.shape == (3, 128, 8) and torch.equal(w[1, 32:64], w3[1, :32]) and torch.equal(w[2, 64:96], w1[2, 32:])
    s1, s3 = torch.rand(1, 64), torch.rand(1, 64)
    s = warploom.interleave_gate_up(s1, s3, block=32, dim=-1)
    assert s.shape == (1, 128) and torch.equal(s[:, 32:64], s3[:, :32])


def test_silu_mul_interleaved_is_the_two_gemm_meaning() -> None:
    x, w1, w3 = torch.randn(5, 16), torch.randn(70, 16), torch.randn(70, 16)
    y = warploom.silu_mul_interleaved(x @ warploom.interleave_gate_up(w1, w3, block=64).T, block=64, rows=70)
    torch.testing.assert_close(y, F.silu(x @ w1.T) * (x @ w3.T))


# --- bad input: the argument, what was expected, the fix


@pytest.mark.parametrize("block", [48, 256, 0, True, 64.0])
def test_a_block_the_planner_cannot_pin_is_refused(block: object) -> None:
    with pytest.raises(warploom.InputError, match=r"block: expected one of \(32, 64, 128\).*Fix: interleave") as e:
        warploom.interleave_gate_up(torch.randn(64, 8), torch.randn(64, 8), block=block)  # type: ignore[arg-type]
    assert e.value.arg == "block"


def test_mismatched_weights_are_refused() -> None:
    with pytest.raises(warploom.ShapeError, match=r"w3: expected w1's shape.*Fix: pass the gate and up") as e:
        warploom.interleave_gate_up(torch.randn(64, 8), torch.randn(64, 16), block=32)
    assert e.value.arg == "w3"
    with pytest.raises(warploom.ArgumentTypeError, match="w1: expected a torch.Tensor"):
        warploom.interleave_gate_up([1.0], torch.randn(64, 16), block=32)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [129, 192, 0])
def test_an_interleaved_width_not_of_whole_pairs_is_refused(n: int) -> None:
    with pytest.raises(warploom.ShapeError, match=r"h: expected a multiple of 2 \* block = 128.*Fix: interleave"):
        warploom.silu_mul_interleaved(torch.randn(3, n), block=64)


def test_rows_outside_the_last_block_are_refused() -> None:
    w = warploom.interleave_gate_up(torch.randn(100, 8), torch.randn(100, 8), block=64)
    with pytest.raises(warploom.InputError, match=r"rows: expected an int I with 64 < I <= 128"):
        warploom.deinterleave_gate_up(w, block=64, rows=60)


def test_the_gemm_refuses_n_of_broken_pairs_naming_b() -> None:
    """N = 192 with block 64: the weight was interleaved with another block (or not at all)."""
    with pytest.raises(warploom.ShapeError, match=r"b: expected N a multiple of 2 \* block = 128 .*got N = 192.*"
                                                  r"Fix: interleave the weights with warploom.interleave_gate_up") as e:
        warploom.plan(meta(64, 64), meta(192, 64).t(), epilogue=silu_mul(64))
    assert e.value.arg == "b"


@pytest.mark.parametrize(("force", "why"), [({"bn": 256}, "bn=256: the tile must be 2 \\* block = 128"),
                                            ({"split_k": 2}, "split_k=2"), ({"swap_ab": True}, "swap_ab=True"),
                                            ({"pingpong": True}, "pingpong=True")])
def test_rule_28_refuses_forced_options(force: dict[str, object], why: str) -> None:
    from warploom import H100_SXM
    from warploom.planner import plan_schedule

    k = warploom.plan(meta(300, 64), meta(256, 64).t(), epilogue=silu_mul(64))
    with pytest.raises(warploom.UnsupportedError, match=f"rule 28.*{why}.*Fix: drop the conflicting option"):
        plan_schedule(k.spec, H100_SXM, **force)  # type: ignore[arg-type]


def test_promoted_fp8_at_block_128_is_refused() -> None:
    """A promoted 256-wide tile has two 128-column accumulators: the gate block in one, its up block in the other."""
    with pytest.raises(warploom.UnsupportedError, match="block=128 with promoted fp8.*use block=64 or use_fast_accum"):
        warploom.plan(meta(64, 128, dtype=E4), meta(256, 128, dtype=E4).t(), meta(64, 1, dtype=torch.float32),
                      meta(1, 256, dtype=torch.float32), out_dtype=BF16, use_fast_accum=False, epilogue=silu_mul(128))


@pytest.mark.parametrize(("fn", "match"), [
    (lambda acc: warploom.silu_mul_interleaved(acc * 2, block=64), "h: expected the accumulator acc itself"),
    (lambda acc: warploom.silu_mul_interleaved(acc, block=64) + acc, "pairs a gate/up half .* with a value over the N"),
    (lambda acc: warploom.silu_mul_interleaved(acc, block=64, rows=100), "rows: expected None inside a fused"),
])
def test_capture_refuses_what_the_halves_cannot_mean(fn, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((warploom.UnsupportedError, warploom.InputError), match=match):
        capture(fn)


# --- the graph, the plan and the schedule


def test_graph_text_and_meaning() -> None:
    g = capture(silu_mul(32))
    assert printer.text(g) == ("epilogue(acc):\n  %0 = gate_half acc, block=32\n  %1 = up_half acc, block=32\n"
                               "  %2 = silu %0\n  %3 = mul %2, %1\n  return %3\n")
    assert g.gate_up() == 32 and g.output_shape(0, 7, 256) == (7, 128)
    acc = torch.randn(7, 128)
    (y,) = evaluate(g, acc, {})
    torch.testing.assert_close(y, warploom.silu_mul_interleaved(acc, block=32))


def test_graph_refuses_two_blocks_and_full_outputs() -> None:
    nodes = (eg.Acc(), eg.GateUpHalf(0, eg.Half.GATE, 32), eg.GateUpHalf(0, eg.Half.UP, 64),
             eg.Binary(eg.BinaryOp.MUL, 1, 2))
    with pytest.raises(ValueError, match=r"blocks \[32, 64\]: one interleave block per graph"):
        eg.EpilogueGraph(nodes, (eg.Output(3),))
    nodes = (eg.Acc(), eg.GateUpHalf(0, eg.Half.GATE, 32))
    with pytest.raises(ValueError, match=r"output 1: acc is not over the gate/up halves|output 1: %0 is not over"):
        eg.EpilogueGraph(nodes, (eg.Output(1), eg.Output(0)))


def test_quantizing_the_gate_up_result_is_refused_with_the_fusing_form() -> None:
    """quantize(silu_mul_interleaved(acc)) is not built; the error must not send the user back to what they wrote
    (the graph's own check said "compute on the result of silu_mul_interleaved"), but to the two forms that run."""
    want = (r"^epilogue: expected silu_mul_interleaved\(acc, block=\.\.\.\) or warploom.quantize, not both"
            r".*Fix: return silu_mul_interleaved.*gate as an operand")
    with pytest.raises(warploom.UnsupportedError, match=want):
        warploom.plan(meta(300, 512), meta(768, 512).t(),
                      epilogue=lambda acc: warploom.quantize(warploom.silu_mul_interleaved(acc, block=128)))


def test_rule_28_pins_the_tile_and_the_schedule_pairs_halves() -> None:
    k = warploom.plan(meta(300, 512), meta(768, 512).t(), epilogue=silu_mul(128))
    assert (k.plan.bn, k.plan.split_k, k.plan.swap_ab, k.plan.stream_k) == (256, 1, False, 0)
    assert k.spec.output_shapes() == ((300, 384),)
    text = ir_printer.module(k.module)
    assert "apply_epilogue acc[cols 0/8] with up acc[cols 4/8]" in text
    assert "apply_epilogue acc[cols 3/8] with up acc[cols 7/8]" in text and "cols 4/8] with up" not in text
    assert "tma_store c_smem_s1 -> C[m, n/2][cols 1/8]" in text
    assert "buffer c_smem: C bf16[128x32]" in text  # (one block of the half-width result)
    src = k.source
    assert "ep_up = gl.convert_layout(acc_hi_lo_lo, ep_layout)" in src
    assert "[off_m, off_n // 2 + 3 * (BN // 8)]" in src


def test_fp8_rowwise_loads_scale_b_on_both_sides() -> None:
    k = warploom.plan(meta(64, 128, dtype=E4), meta(256, 128, dtype=E4).t(), meta(64, 1, dtype=torch.float32),
                      meta(1, 256, dtype=torch.float32), out_dtype=BF16, use_fast_accum=True, epilogue=silu_mul(64))
    text = ir_printer.module(k.module)
    assert "load_operand scale_b for acc[cols 1/2] as per_col" in text
    src = k.source
    assert "ep_1_u = ep_0_u * scale_b_acc_1" in src  # (the up side's scaled accumulator)


def test_masked_grouped_layout_is_refused_by_name() -> None:
    """The one-GEMM form is built for the M-grouped layout (offs) only."""
    w = warploom.interleave_gate_up(torch.randn(2, 64, 32), torch.randn(2, 64, 32), block=64).to(BF16)
    with pytest.raises(warploom.UnsupportedError, match=r"rule 28.*masked grouped GEMM.*M-grouped layout"):
        warploom.grouped_mm(torch.randn(2, 16, 32).to(BF16), w.transpose(-2, -1),
                            masked_m=torch.tensor([3, 16], dtype=torch.int32), epilogue=silu_mul(64))


def test_emitted_pair_runs_as_the_reference() -> None:
    """The emitted statements of a scaled gate/up graph, run with torch standing in for ``gl`` (test_epilogue_gluon's
    TorchGl) on one pair of blocks, equal `evaluate_tile`: scale_b read at each side's columns."""
    from test_epilogue_gluon import TorchGl, TorchTl  # (pytest puts this folder on sys.path)

    from warploom.dtypes import DType
    from warploom.epilogue.classify import classify
    from warploom.epilogue.compose import with_prologue
    from warploom.epilogue.gluon import emit
    from warploom.epilogue.reference import evaluate_tile

    m, n, b = 6, 256, 64
    sa, sb, s = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5, torch.rand(m, 1)
    user = capture(lambda acc, s: warploom.silu_mul_interleaved(acc, block=b) * s, {"s": s}, out_shape=(m, n))
    g = with_prologue(user, classify("scale_a", sa, (m, n)), classify("scale_b", sb, (m, n)), None)
    acc = torch.randn(m, n) * 4
    # result columns 64..127: pair 1, gate columns 128..191, up columns 192..255
    env = {"gate": acc[:, 128:192].clone(), "up": acc[:, 192:256].clone(), "sa": sa, "s_v": s,
           "sb_g": sb[:, 128:192], "sb_u": sb[:, 192:256]}
    lines = emit(g, "gate", {"scale_a": "sa", "scale_b": "sb_g", "s": "s_v"}, ["out"], out_dtype=DType.FP32,
                 up="up", up_operands={"scale_b": "sb_u"})
    exec("\n".join(lines), {"gl": TorchGl, "tl": TorchTl}, env)
    (want,) = evaluate_tile(g, acc[:, 128:192], {"scale_a": sa, "scale_b": sb, "s": s}, range(m), range(64, 128),
                            out_shape=(m, n // 2), up_tile=acc[:, 192:256])
    torch.testing.assert_close(env["out"], want, rtol=4e-6, atol=1e-6)
    assert torch.equal(want, (F.silu(acc * sa * sb)[:, 128:192] * (acc * sa * sb)[:, 192:256] * s))
