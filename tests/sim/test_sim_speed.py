"""Simulator speed on this machine: k-steps per second with numerics, steps per second without, and
explored states per second. Printed; the floors only catch an order-of-magnitude regression."""

from __future__ import annotations

import time
from collections.abc import Callable

from warploom.device import H100_SXM
from warploom.kernel import build
from warploom.planner import Plan
from warploom.reference import make_inputs
from warploom.sim import check_protocol, explore, simulate
from warploom.spec import GemmSpec


def test_speed(table: Callable[[str], None]) -> None:
    lines = []
    rates = {}
    for bm, bn, bk in ((64, 64, 32), (128, 128, 64), (128, 256, 64)):
        plan = Plan(bm=bm, bn=bn, bk=bk, stages=3, consumer_warps=4 * (bm // 64), group_m=2, grid=2,
                    epilogue_subtiles=2 if bn == 256 else 1)
        spec = GemmSpec(2 * bm - 3, 2 * bn - 5, 16 * bk - 7)  # 2 tiles per CTA, 16 k-blocks each
        m = build(spec, H100_SXM, plan).module
        x = make_inputs(spec, spec.m, spec.n, spec.k)
        simulate(m, x.a, x.b, record=False)  # warm-up
        t0 = time.perf_counter()
        res = simulate(m, x.a, x.b, record=False)
        dt = time.perf_counter() - t0
        rates[(bm, bn, bk)] = res.report.k_steps / dt
        lines.append(f"numerics {bm}x{bn}x{bk}: {res.report.k_steps / dt:7.0f} k-steps/s "
                     f"({res.report.steps / dt:7.0f} steps/s)")
        if bm == 64:
            t0 = time.perf_counter()
            rep = check_protocol(m, spec.m, spec.n, spec.k, seeds=range(4))
            dt = time.perf_counter() - t0
            rates["protocol"] = rep.steps / dt
            lines.append(f"protocol only:      {rep.steps / dt:7.0f} steps/s")
            small = GemmSpec(64, 128, 32 * 3)
            mod = build(small, H100_SXM, Plan(bm=64, bn=64, bk=32, stages=3, consumer_warps=4, group_m=2,
                                               grid=1)).module
            r = explore(mod, small.m, small.n, small.k)
            rates["explore"] = r.states / r.wall_s
            lines.append(f"exhaustive:         {r.states / r.wall_s:7.0f} states/s "
                         f"({r.transitions / r.wall_s:.0f} transitions/s)")
    table("simulator speed:\n  " + "\n  ".join(lines))
    assert rates[(64, 64, 32)] > 100 and rates["protocol"] > 2_000 and rates["explore"] > 500
