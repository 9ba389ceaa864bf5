"""Experiment (session 14): the host cost of a split-K tail plan's call (three launches), against the same problem's
plan without a tail. The suite's eager ratio at 4096x2112x7168 (fp8 rowwise fast) was 0.79 against a graph ratio of
1.00: host-bound? Prints host us per call (a loop without synchronizing) and a cProfile of the tail call.

    PYTHONPATH=. python3 archive/exp/tail_host.py
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from profile_host import host_us  # noqa: E402

import warploom  # noqa: E402
from warploom import checks  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime.timing import time_eager as _time  # noqa: E402
from warploom.runtime.timing import time_graph as _time_graph  # noqa: E402


def main() -> None:
    dev = DeviceInfo.current()
    m, n, k = 2000, 1104, 256  # 16 x 9 = 144 tiles of 128x128: 132 whole, 12 in the tail; tiny K keeps it host-bound
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    spec = checks.matmul_spec(a, b, None)
    tail = build(spec, dev, plan_schedule(spec, dev, bn=128, tail_split=2))
    plain = build(spec, dev, plan_schedule(spec, dev, bn=128, tail_split=1))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for name, kern in (("plain", plain), ("tail", tail)):
        print(f"{name:6s} Kernel.run host {host_us(lambda kern=kern: kern.run(a, b, out)):7.1f} us", flush=True)
    big = 4096, 2112, 7168
    a8 = torch.randn(big[0], big[2], device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(big[1], big[2], device="cuda").to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(big[0], 1, device="cuda") + 0.5, torch.rand(1, big[1], device="cuda") + 0.5

    def ours() -> torch.Tensor:
        return warploom.scaled_mm(a8, b8, sa, sb, use_fast_accum=True)

    def theirs() -> torch.Tensor:
        return torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)

    # per launch of each of the tail plan's kernels
    import time

    la = tail.launcher
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(100):
            la(a, b, out)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"tail launcher: host {(t1 - t0) * 1e4:.1f} us/call, with the GPU {(t2 - t0) * 1e4:.1f} us/call")
    from warploom.ir.raster import tail_spans

    t = tail.module.tiling
    whole, rest = tail_spans(-(-m // t.bm) * -(-n // t.bn), t.grid)
    tl = la._tail
    ws = torch.empty(tl._tiling.workspace_shape(m, n, rest.tiles), device="cuda", dtype=torch.float32)
    saved = tl._reduce

    class _NoReduce:
        def launch(self, grid: int, args: list[object]) -> None:
            pass

    def tail_main() -> None:
        tl._reduce = _NoReduce()
        try:
            tl._run(a, b, out, None, None, None, None, (), rest)
        finally:
            tl._reduce = saved

    parts = {"whole waves": lambda: la._run(a, b, out, None, None, None, None, (), whole),
             "tail kernel": tail_main,
             "reduce": lambda: saved.launch(rest.tiles * 16, [ws, out, out.stride(0), out.stride(1), m, n, rest.lo,
                                                             rest.hi]),
             "workspace alloc": lambda: torch.empty(tl._tiling.workspace_shape(m, n, rest.tiles), device="cuda",
                                                    dtype=torch.float32)}
    for name, fn in parts.items():
        print(f"  {name:16s} host {host_us(fn, 200):7.1f} us", flush=True)
    print(f"4096x2112x7168 scaled_mm host {host_us(ours, 50):7.1f} us; do_bench ours {_time(ours) * 1e3:7.1f} us, "
          f"torch {_time(theirs) * 1e3:7.1f} us; graph ours {_time_graph(ours) * 1e3:7.1f} us, torch "
          f"{_time_graph(theirs) * 1e3:7.1f} us", flush=True)
    for name, kern in (("plain", plain), ("tail", tail)):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            kern.run(a, b, out)
        prof.disable()
        torch.cuda.synchronize()
        print(f"--- {name}")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
