"""Property test: for any valid spec, the planner's schedule runs through the whole pipeline and verifies clean.

Hypothesis draws (M, N, K, dtypes, B layout, recipe, accumulation, bias, output dtype, SM count); the
pipeline must produce a complete module that fits the device, and Gluon source that parses as Python.
"""

from __future__ import annotations

import ast
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from warploom import H100_SXM, Accumulation, BLayout, DeviceInfo, DType, GemmSpec, ScaleRecipe
from warploom.backends.gluon_api import emitting_for
from warploom.backends.gluon_sm90 import lower
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.planner import LATENCY_STAGES, is_decode, latency_tiles, plan_schedule
from warploom.targets import compile_schedule

sizes = st.one_of(st.integers(1, 300), st.integers(1, 20000), st.sampled_from([1, 64, 65, 127, 128, 4096, 8191]))
out_dtypes = st.sampled_from([DType.BF16, DType.FP16, DType.FP32])


@st.composite
def specs(draw: st.DrawFn) -> GemmSpec:
    m, n, k = draw(sizes), draw(sizes), draw(sizes)
    out = draw(out_dtypes)
    if draw(st.booleans()):
        dt = draw(st.sampled_from([DType.BF16, DType.FP16]))
        return GemmSpec(m, n, k, dt, dt, out, draw(st.sampled_from(list(BLayout))))
    a, b = draw(st.sampled_from([(DType.E4M3, DType.E4M3), (DType.E4M3, DType.E5M2), (DType.E5M2, DType.E4M3)]))
    return GemmSpec(
        m, n, k, a, b, out, BLayout.K_MAJOR,
        draw(st.sampled_from([ScaleRecipe.TENSORWISE, ScaleRecipe.ROWWISE])),
        draw(st.sampled_from(list(Accumulation))),
        draw(st.sampled_from([None, DType.BF16, DType.FP16, DType.FP32])),
    )


@settings(max_examples=300, deadline=None)
@given(spec=specs(), sms=st.sampled_from([132, 114, 78, 16, 1]))
def test_planned_pipeline_verifies_clean_and_fits(spec: GemmSpec, sms: int) -> None:
    """The cooperative pipeline's invariants, planned as under Triton 3.6: from 3.7 the planner also takes clusters
    (rule 24) and ping-pong (rule 30), whose partitions differ (tests/unit/test_cluster.py, test_pingpong.py)."""
    device = DeviceInfo("H100 variant", "sm_90a", sms, H100_SXM.smem_per_block)
    with emitting_for("3.6"):
        plan = plan_schedule(spec, device)
        m, trace = compile_schedule(spec, plan, device)

    assert verify.complete(m, device) == []
    assert m.smem_bytes <= device.smem_per_block
    deep = (plan.bm, plan.bn) == (64, 64) and is_decode(spec) or plan.swap_ab  # rules 16 and 18
    cap = 12 if deep else max(LATENCY_STAGES) if latency_tiles(spec, device) else 6  # rule 23's ring
    assert 2 <= plan.stages <= cap and all(r.depth == plan.stages for r in m.rings)
    tiles = math.ceil(spec.m / plan.bm) * math.ceil(spec.n / plan.tile_n)
    # (a stream-K plan, rule 21, runs up to `stream_k` pieces of each tile of its last wave on CTAs of their own;
    # a split-K plan, rules 14 and 25, its tiles' `split_k` ranges)
    assert 1 <= plan.grid <= min(sms, max(1, tiles) * max(1, plan.stream_k, plan.split_k))
    assert plan.bk == (128 if spec.is_fp8 else 64)
    # 128- and 256-row tiles (rule 17's, at long K) run one consumer partition per warpgroup, each owning a 64-row
    # block; 64-row tiles one.
    cons = [p for p in m.partitions if p.role is ir.Role.CONSUMER]
    assert plan.consumer_partitions == len(cons) == plan.bm // 64
    assert [p.rows for p in cons] == ([None] if plan.bm == 64 else
                                      [ir.RowBlock(64 * i, 64) for i in range(plan.bm // 64)])
    assert m.barrier("empty").count == len(cons) and m.barrier("ready").count == 1
    # Only promoted fp8 splits its accumulator into column blocks, and a 256-wide tile must (registers).
    promoted = spec.accumulation is Accumulation.PROMOTED
    assert plan.partial_blocks == (2 if promoted and plan.bn == 256 else 1)
    accs = [a for a in cons[0].accumulators if a.name != "partial"]
    # ...and rules 31 and 32's narrow and fitted tiles have one accumulator per column block instead, in order.
    narrow = [(sum(plan.n_blocks[:i]), w) for i, w in enumerate(plan.n_blocks)]
    whole = [(i * plan.bn // plan.partial_blocks, plan.bn // plan.partial_blocks) for i in range(plan.partial_blocks)]
    assert [(a.col0, a.cols) for a in accs] == (narrow if plan.n_blocks else whole)
    # (rule 31: N within the blocks, at most 3/4 of the tile; rule 32: 16-bit operands, two or three blocks)
    assert not plan.n_blocks or plan.bn >= 128 and (spec.n <= sum(plan.n_blocks) <= 0.75 * plan.bn or (
        spec.a_dtype.bits == 16 and 2 <= len(plan.n_blocks) <= 3 and sum(plan.n_blocks) < plan.bn))
    # The expect-tx of a stage is exactly the bytes of one slot of every ring.
    txs = [o for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ArriveExpectTx)]
    assert [t.nbytes for t in txs] == [sum(r.slot_bytes for r in m.rings)]
    # Every stage of the trace is structurally valid, and the generated kernel is valid Python.
    assert all(verify.structural(s) == [] for _, s in trace.stages)
    with emitting_for("3.6"):
        src = lower(m)
    ast.parse(src.text)
    assert f"def {src.kernel}(" in src.text
