"""A stream-K finisher's gather (`ir.Fixup`, `gluon_sm90.SM90Emitter._sk_gather`): it acquires every later piece's flag
before it loads any partial, a batch of flags at once, then adds the partials in k order with several loads in
flight (`sk_batches`); and stream-K runs on 64-row tiles too, dense and grouped."""

from __future__ import annotations

import pytest

from warploom import H100_SXM, GemmSpec
from warploom.backends.gluon_raster import SK_LOAD_REGS, SK_MAX_WAIT, sk_batches
from warploom.errors import UnsupportedError
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.spec import Grouping


@pytest.mark.parametrize("pieces,acc_regs,expected", [
    (2, 32, (2, 2)), (3, 32, (4, 4)), (8, 32, (8, 4)), (16, 64, (16, 2)), (4, 128, (4, 1)), (40, 32, (32, 4)),
    (2, 256, (2, 1))])
def test_batches(pieces: int, acc_regs: int, expected: tuple[int, int]) -> None:
    """Flags: a power of two covering a tile's pieces, at most a warp's lanes; loads: what SK_LOAD_REGS holds, at
    least one, no more than the flags."""
    assert sk_batches(pieces, acc_regs) == expected
    waits, loads = expected
    assert waits <= SK_MAX_WAIT and 1 <= loads <= waits and (loads == 1 or loads * acc_regs <= SK_LOAD_REGS)


@pytest.mark.parametrize("kw,loads", [(dict(bm=64, bn=64, stream_k=8), 4), (dict(bm=64, bn=128, stream_k=3), 2),
                                      (dict(bm=128, bn=128, stream_k=4), 2), (dict(bm=128, bn=256, stream_k=2), 1)])
def test_the_finisher_acquires_every_flag_before_any_load(kw: dict, loads: int) -> None:
    spec = GemmSpec(200, 520, 4096)
    text = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, **kw)).gluon.text  # type: ignore[arg-type]
    finisher = text[text.index("if k_hi < k_tiles"):]
    waits, _ = sk_batches(kw["stream_k"], 0)
    acquire, barrier = finisher.index('sem="acquire"'), finisher.index("every flag acquired before")
    first_load = finisher.index("gl.load(sk_ws_ptr")
    assert acquire < barrier < first_load < finisher.index("reset the flags for the next launch")
    assert f"gl.arange(0, {waits}, layout=sk_wait_layout)" in finisher
    if loads > 1:
        assert f"for j in gl.static_range({loads})" in finisher and f"{loads} loads in flight" in finisher
    else:  # (a wide accumulator: one partial at a time, added without a select)
        assert "for q in range(pid + 1, sk_last + 1)" in finisher and "gl.where(sk_here" not in finisher


def test_64_row_tiles_take_stream_k_grouped_too() -> None:
    """Stream-K runs 64- and 128-row tiles, dense (session 41) and grouped (session 42: rule 22's 64-row tile at <= 64
    rows a group, forced), and refuses other rows by name."""
    plan = plan_schedule(GemmSpec(73, 104, 3280), H100_SXM, bm=64, bn=64, stream_k=4)
    assert (plan.bm, plan.stream_k, plan.grid) == (64, 4, 16)
    with pytest.raises(UnsupportedError, match=r"bm=256 \(stream-K is built for 128- and 64-row tiles\)"):
        plan_schedule(GemmSpec(4096, 4096, 4096), H100_SXM, bm=256, stream_k=2)
    for grouping in (Grouping.OFFSETS, Grouping.MASKED):
        grouped = plan_schedule(GemmSpec(8 * 48, 4096, 7168, grouping=grouping, groups=8), H100_SXM, stream_k=2)
        assert (grouped.bm, grouped.stream_k, grouped.grid) == (64, 2, H100_SXM.sm_count)
