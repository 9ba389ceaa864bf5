"""Control kernels for the sanitizer sweep (`scripts/gpu.sh sanitize`): Gluon kernels with no warploom schedule in
them, so that a report they share with warploom's kernels is known to come from Triton's lowering rather than from a
warploom schedule.

    compute-sanitizer --tool racecheck python3 scripts/sanitize_control.py warp_specialize

`warp_specialize`: a default partition of 4 warps and one worker warp, each storing its own half of a global row, the
worker after the default partition's arrival on one mbarrier (warploom's handshake, in its smallest form), over a
persistent grid of 132 CTAs. No other shared memory of the kernel's own. Whatever racecheck reports in it is Triton's
dispatch of the partitions (the warp-specialize state words past the kernel's allocations, and named barrier 1).

`cp_async_mbarrier`: the blockwise producers' scale copy in its smallest form. A worker warp copies 128 fp32 values a
round into a one-stage shared ring with cp.async and `async_copy.mbarrier_arrive` (which holds the barrier's phase
open until the copies land) and then arrives once on `ready` (count 1); the default partition (4 warps) waits on
`ready`, stores the values to the round's row and arrives on `empty` (Triton puts a warpgroup barrier before that
one-thread arrival). Eight rounds, so both barriers go through several phases. What racecheck and synccheck report
in it is how the tools see a ring handed over by mbarriers and cp.async's arrival.

`store_mbarrier`: the same ring filled by plain shared stores, a `gl.thread_barrier()` and then the arrival: the MX
scale partition's form.
"""

from __future__ import annotations

import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

ROUNDS = 8
CONTROLS = ("warp_specialize", "cp_async_mbarrier", "store_mbarrier")
# (renamed async_load in Triton 3.9)
_cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
_thread_barrier = getattr(gl, "barrier", None) or gl.thread_barrier  # (gl.barrier from Triton 3.7)


@gluon.jit
def _default_half(out_ptr, bar):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(out_ptr + offs, offs.to(gl.float32))
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _worker_half(out_ptr, bar):
    mbarrier.wait(bar, 0)
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([4], [32], [1], [0]))
    gl.store(out_ptr + 128 + offs, (offs + 128).to(gl.float32))


@gluon.jit
def warp_specialize_control(out_ptr):
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    gl.warp_specialize([(_default_half, (out_ptr, bar)), (_worker_half, (out_ptr, bar))], [1], [24])


@gluon.jit
def _consume_rounds(ring, ready, empty, out_ptr, ROUNDS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.arange(0, 128, layout=layout)
    for r in range(ROUNDS):
        mbarrier.wait(ready, r & 1)
        gl.store(out_ptr + r * 128 + offs, ring.load(layout))
        mbarrier.arrive(empty, count=1)


@gluon.jit
def _copy_rounds(ring, ready, empty, src_ptr, ROUNDS: gl.constexpr, CP_ASYNC: gl.constexpr):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([4], [32], [1], [0]))
    for r in range(ROUNDS):
        mbarrier.wait(empty, (r & 1) ^ 1)
        if CP_ASYNC:
            _cp_async(ring, src_ptr + r * 128 + offs)
            async_copy.mbarrier_arrive(ready)
        else:
            ring.store(gl.load(src_ptr + r * 128 + offs))
            _thread_barrier()
        mbarrier.arrive(ready, count=1)


@gluon.jit
def ring_control(src_ptr, out_ptr, ROUNDS: gl.constexpr, CP_ASYNC: gl.constexpr):
    ring = gl.allocate_shared_memory(gl.float32, [128], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(ready, count=1)
    mbarrier.init(empty, count=1)
    fence_async_shared()
    gl.warp_specialize([(_consume_rounds, (ring, ready, empty, out_ptr, ROUNDS)),
                        (_copy_rounds, (ring, ready, empty, src_ptr, ROUNDS, CP_ASYNC))], [1], [24])


def main() -> None:
    which = sys.argv[1:]
    if which == ["warp_specialize"]:
        out = torch.full((256,), float("nan"), device="cuda")
        warp_specialize_control[(132,)](out, num_warps=4)
        want = torch.arange(256, device="cuda", dtype=torch.float32)
    elif which in (["cp_async_mbarrier"], ["store_mbarrier"]):
        want = torch.randn(ROUNDS * 128, device="cuda")
        out = torch.full_like(want, float("nan"))
        ring_control[(1,)](want, out, ROUNDS, which == ["cp_async_mbarrier"], num_warps=4)
    else:
        sys.exit(f"usage: sanitize_control.py {'|'.join(CONTROLS)}")
    torch.cuda.synchronize()
    ok = torch.equal(out, want)
    print(f"{which[0]} control: {'ok' if ok else 'WRONG'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
