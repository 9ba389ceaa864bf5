"""Text edits that turn warploom's rule-24 cluster kernel (2x1 CTAs, 128x256 tiles, the lead multicasting B's
256-row box) into CUTLASS's split: each CTA multicasts its own 128-row half of B's box into both CTAs' slots, and
each CTA's producer waits until the consumers of both CTAs released the slot (a per-CTA barrier that every
consumer warp of the cluster arrives on, remotely through `mapa`). Gluon (Triton 3.9) issues a multicast only from
the lead CTA of the broadcast group, so the half-box copy and the remote arrivals are inline PTX (`gl.inline_asm`
takes shared-memory descriptors as their 32-bit addresses); B's descriptor box becomes 128 rows
(`half_box_blocks`)."""

from __future__ import annotations

import re

HALF_BYTES = 128 * 64 * 2  # one CTA's half of B's box: 128 rows of 64 bf16

HELPERS = '''

@gluon.jit
def multicast_half(dst, bar, off_n, off_k):
    # this CTA's 128 rows of B's 256-row box, multicast into both CTAs' slots (same offset), completing bytes on
    # both CTAs' READY barriers at bar's offset; one elected thread of the producer warp issues it
    gl.inline_asm(
        "{ .reg .b32 r, d, n; .reg .b64 m; .reg .b16 mk; .reg .pred p;\\n"
        "elect.sync _|p, -1;\\n"
        "mov.u32 r, %cluster_ctarank;\\n"
        "mad.lo.u32 d, r, HALF, $0;\\n"
        "mad.lo.u32 n, r, 128, $2;\\n"
        "mov.b64 m, KERNEL_param_BPARAM;\\n"
        "cvta.param.u64 m, m;\\n"
        "mov.b16 mk, 3;\\n"
        "@p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [d], [m, {$3, n}], [$1], mk; }",
        "r,r,r,r", [dst, bar, off_n, off_k], [], is_pure=False)


@gluon.jit
def release_pair(bar, pred):
    # this warp's release of a slot on the barrier at bar's offset in both CTAs: lane r arrives on CTA r's (the two
    # remote arrivals issued side by side, CUTLASS's consumer_release), at the default (release, CTA) semantics
    gl.inline_asm(
        "{ .reg .b32 remote, lane, cta; .reg .pred p, q;\\n"
        "mov.u32 lane, %laneid;\\n"
        "and.b32 cta, lane, 1;\\n"
        "setp.lt.u32 p, lane, 2;\\n"
        "setp.ne.b32 q, $1, 0;\\n"
        "and.pred p, p, q;\\n"
        "mapa.shared::cluster.u32 remote, $0, cta;\\n"
        "@p mbarrier.arrive.shared::cluster.b64 _, [remote]; }",
        "r,r", [bar, pred], [], is_pure=False)
'''


def split_multicast(text: str, kernel: str, b_param: int, consumer_warps: int = 8, halves: bool = True) -> str:
    """The edited source. `b_param`: the PTX parameter index of B's descriptor (its 128-byte map). Without `halves`
    the lead still multicasts B's whole box (Triton's own copy) and only the release protocol is the split's."""
    helpers = HELPERS.replace("KERNEL", kernel).replace("BPARAM", str(b_param)).replace("HALF", str(HALF_BYTES))
    text = text.replace("\n\n@gluon.jit\ndef tile_coords", helpers + "\n\n@gluon.jit\ndef tile_coords", 1)
    if halves:
        text = _halves(text)
    return _released_by_all(text, consumer_warps)


def _sub(pattern: str, repl: str, text: str, count: int = 1) -> str:
    """`text` with `pattern` replaced, which must occur exactly `count` times (the generated kernel as expected)."""
    text, n = re.subn(pattern, repl, text)
    assert n == count, f"{pattern!r}: {n} matches, expected {count}"
    return text


def _halves(text: str) -> str:
    return _sub(
        r"tma\.async_load\(b_desc, \[off_n, kk \* BK\], (ready_bars\.index\(p % STAGES\)), "
        r"(b_ring\.index\(p % STAGES\)), multicast=True\)",
        r"multicast_half(\2, \1, off_n, kk * BK)\n"
        # (never issued: Triton fences the barriers' inits and syncs the cluster only where it sees a multicast)
        r"            tma.async_load(b_desc, [off_n, kk * BK], \1, \2.slice(0, 128), pred=False, multicast=True)", text)


def _released_by_all(text: str, consumer_warps: int) -> str:
    slot = r"(cluster_empty_bars\.index\((?:[^()]|\([^()]*\))*\))"  # (a slot index, itself in parentheses)
    text = _sub(r"mbarrier\.arrive\(" + slot + r", pred=([^)]*)\)", r"release_pair(\1, (\2).to(gl.int32))", text, 2)
    text = _sub(r"mbarrier\.arrive\(" + slot + r"\)", r"release_pair(\1, 1)", text, 2)
    text = _sub(r"cluster_empty_bars = mbarrier\.allocate_mbarrier\(batch=(\d+), two_ctas=True\)",
                r"cluster_empty_bars = mbarrier.allocate_mbarrier(batch=\1)", text)
    # every consumer warp of both CTAs releases each slot once
    text = _sub(r"mbarrier\.init\(cluster_empty_bars\.index\(i\), count=\d+\)",
                f"mbarrier.init(cluster_empty_bars.index(i), count={2 * consumer_warps})", text)
    # the inits visible cluster-wide before the other CTA multicasts or arrives on them: Triton fences them and
    # syncs the cluster (all warps, the parked workers too) where a two-CTA barrier exists, so one stays, unused
    text = _sub(r"(\n(\s*)cluster_empty_bars = mbarrier\.allocate_mbarrier\(batch=\d+\))",
                r"\1\n\2cluster_sync_bars = mbarrier.allocate_mbarrier(batch=1, two_ctas=True)", text)
    text = _sub(r"(\n(\s*)mbarrier\.init\(cluster_empty_bars\.index\(i\), count=\d+\))",
                r"\1\n\2mbarrier.init(cluster_sync_bars.index(0), count=1)", text)
    return _sub(r"(\n(\s*)fence_async_shared\(\)  # make the mbarrier inits visible to the async proxy)",
                r"\1\n\2mbarrier.wait(cluster_sync_bars.index(0), 1)  # (a use, which Triton wants; passes)", text)
