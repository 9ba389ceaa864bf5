"""Every refusal of options forced on the sm_90a planner ends with "Fix:", naming the option to drop or change and to
what (a bad-input probe, session 37, found about twenty that said why but not what to pass, or only inline)."""

from __future__ import annotations

from typing import Any

import pytest

from warploom import H100_SXM, Accumulation, BLayout, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.backends.gluon_api import emitting_for
from warploom.planner import plan_schedule

E4, BF16 = DType.E4M3, DType.BF16
BIG = GemmSpec(4096, 4096, 4096)
N_MAJOR = GemmSpec(1024, 1024, 1024, b_layout=BLayout.N_MAJOR)
MX = GemmSpec(4096, 4096, 4096, E4, E4, BF16, BLayout.K_MAJOR, ScaleRecipe.MX, Accumulation.PROMOTED)
BLOCKWISE = GemmSpec(4096, 4096, 4096, E4, E4, BF16, BLayout.K_MAJOR, ScaleRecipe.BLOCKWISE_1X128_128X128,
                     Accumulation.PROMOTED)
BIAS = GemmSpec(4096, 4096, 4096, E4, E4, BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE, bias_dtype=BF16)


# (spec, forced options, the Triton emitted for, the fix's words; "$": the message ends there). Where an option forced
# beside the refused one is all that stands in the way, the fix names it too; where the problem's own dtype, layout or
# epilogue (or the Triton) does too, it names only the refused option.
@pytest.mark.parametrize("spec,kw,triton,fix", [
    (BIG, dict(stream_k=2, split_k=2), "3.9", "Fix: drop stream_k, or drop split_k=2"),
    (BIG, dict(stream_k=2, pingpong=True), "3.9", "Fix: drop stream_k, or drop pingpong=True"),
    (BIG, dict(stream_k=20), "3.9", "Fix: pass one of those (e.g. stream_k=2)"),
    (BIG, dict(cluster=2), "3.6", "Fix: drop cluster (or pass cluster=1)"),  # (no multicast before Triton 3.7)
    (BIG, dict(cluster=2, split_k=2), "3.9", "Fix: drop cluster (or pass cluster=1), or drop split_k=2"),
    (BIG, dict(cluster=2, split_k=2), "3.6", "Fix: drop cluster (or pass cluster=1)$"),
    (BIG, dict(cluster=3), "3.9", "Fix: pass one of those, or leave cluster out"),
    (BIG, dict(split_k=2, pingpong=True), "3.9", "Fix: drop split_k, or pass pingpong=False"),
    (BIG, dict(split_k=100), "3.9", "Fix: drop split_k, or pass split_k between 2 and 64"),
    (BLOCKWISE, dict(split_k=5), "3.9", "Fix: drop split_k, or pass a split_k that divides 32 (e.g. 2, 4, 8, 16)"),
    (BIAS, dict(split_k=2, pingpong=True), "3.9", "Fix: drop split_k$"),
    (MX, dict(split_k=2), "3.9", "Fix: drop split_k$"),
    (MX, dict(tail_split=2, pingpong=True), "3.9", "Fix: drop tail_split$"),
    (BIG, dict(tail_split=2, split_k=2), "3.9", "Fix: pass one of the two (drop tail_split, or drop split_k)"),
    (BIG, dict(swap_ab=True, pingpong=True), "3.9", "Fix: drop swap_ab, or drop pingpong=True"),
    (N_MAJOR, dict(swap_ab=True, pingpong=True), "3.9", "Fix: drop swap_ab$"),
    (BIG, dict(swap_ab=True, consumer_partitions=2), "3.9",
     "Fix: use bm=128 or consumer_partitions=1; or drop swap_ab"),
    (BIG, dict(bm=256, pingpong=True), "3.9", "Fix: use bm=128 (or drop bm), or drop pingpong=True"),
    (BIG, dict(bm=64, consumer_partitions=2), "3.9", "Fix: use bm=128 or consumer_partitions=1"),
    (BIG, dict(pingpong=True, consumer_partitions=1), "3.9", "Fix: pass consumer_partitions=2 or None"),
    (BIG, dict(consumer_partitions=4), "3.9", "Fix: pass bm=256"),
    (BIG, dict(scale_partition=True), "3.9", "has no scales. Fix: drop scale_partition"),
    (BLOCKWISE, dict(scale_partition=True, pingpong=True), "3.9", "Fix: use one of the two: drop pingpong, or drop "
     "scale_partition"),
    (MX, dict(scale_partition=False), "3.9", "Fix: drop scale_partition=False"),
    (BIG, dict(bn=16, n_blocks=(64, 16)), "3.9", "Fix: drop n_blocks (or pass a wider bn)"),
    (GemmSpec(1536, 2816, 4096), dict(stream_k=2, sk_waves=1), "3.9", "Fix: drop sk_waves"),
], ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else
   v if v in ("3.6", "3.9") else "")
def test_refusals_of_forced_options_say_what_to_pass(spec: GemmSpec, kw: dict[str, Any], triton: str,
                                                      fix: str) -> None:
    with emitting_for(triton), pytest.raises(UnsupportedError) as e:
        plan_schedule(spec, H100_SXM, **kw)
    message = str(e.value)
    assert message.endswith(fix[:-1]) if fix.endswith("$") else fix in message, message


def test_forced_stream_k_on_decode_tiles_is_planned_not_dropped() -> None:
    """Rule 16's 64-row decode tiles: a forced stream_k was once silently planned away, then refused; since stream-K
    runs on 64-row tiles it is planned there (and on 128-row ones where bm=128 is forced)."""
    spec = GemmSpec(8, 4096, 4096)
    plan = plan_schedule(spec, H100_SXM, stream_k=2)
    assert (plan.bm, plan.stream_k) == (64, 2) and "_sk2" in plan.short()
    assert plan_schedule(spec, H100_SXM, stream_k=2, bm=128).stream_k == 2


def test_a_part_too_small_for_any_tile_is_named_not_the_options() -> None:
    """With nothing forced, a DeviceInfo whose shared memory holds none of the planner's tiles is named with its
    bytes (the message once listed bm=None bn=None and told the caller to leave them out); what was forced is named
    when something was; a part that holds the plan's tile but not rule 32's fitted one keeps the plan."""
    from warploom.device import DeviceInfo
    from warploom.errors import NoTileFitsError

    tiny = DeviceInfo("tiny", "sm_90a", 132, 50_000)
    with pytest.raises(UnsupportedError, match=r"on tiny: none of the planner's tiles fits its 50000 bytes of shared "
                                               r"memory a block .*Fix: plan for a device") as err:
        plan_schedule(GemmSpec(4096, 4096, 4096), tiny)
    assert "None" not in str(err.value) and isinstance(err.value, NoTileFitsError)
    with pytest.raises(UnsupportedError, match=r"with bm=128 stages=4 on tiny\. Fix: leave them out"):
        plan_schedule(GemmSpec(4096, 4096, 4096), tiny, bm=128, stages=4)
    small = DeviceInfo("small", "sm_90a", 132, 100_000)  # (rule 32's 192x256 does not fit it: 128x128 does)
    plan = plan_schedule(GemmSpec(4096, 4096, 4096), small)
    assert (plan.bm, plan.bn) == (128, 128) and plan.stages >= 2
