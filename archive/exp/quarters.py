"""Experiment (session 17, issue 5): blockwise promotion in column quarters with two partials, so one quarter's
wgmma runs while the warpgroup promotes the previous one.

The planner's blockwise kernel at 4096^3 (128x256x128, two consumer partitions, `h2`) promotes each k-block in two
column halves: wgmma into a 64x128 partial, wait(0), promote, wgmma the other half, wait(0), promote. Within a
warpgroup the tensor core idles during every promotion; only the other warpgroup can fill it. Two 64x128 partials
in flight would need 256 accumulator registers (128 for the tile, 2 x 64), over the 240 a consumer has. Quarters
fit: four 64x64 accumulators (128 registers) and two 64x64 partials (64), 192 in all, as today. The k-block then
runs: wgmma q0 -> p0, wgmma q1 -> p1, wait(1), promote q0, wgmma q2 -> p0, wait(1), promote q1, wgmma q3 -> p1,
wait(1), promote q2, wait(0), promote q3: one wgmma in flight during each of the first three promotions.

Session 12 found that a pipeline with wgmma k+1 in flight while k was promoted made ptxas serialize the wgmma
(C7514) and spill. This one keeps every in-flight partial distinct from what is promoted; `--cross` checks that
first, on the CPU. A text transform of the generated Gluon, not a compiler pass: it answers whether the schedule
is worth building into the IR.

Result (2026-11-24, docs/benchmarks.md session 17): no consistent gain (-2% to +5% over four shapes, two rounds);
the cross-k-block form (`quarters-x`) draws C7514, so it is only cross-compiled.

    PYTHONPATH=. python3 archive/exp/quarters.py --cross     # CPU: registers, spills, C7514
    PYTHONPATH=. python3 archive/exp/quarters.py             # GPU: writes $OUT/quarters.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

import torch
from _rows import with_source

from warploom import checks
from warploom.device import H100_SXM, DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule

VARIANTS = ("base", "quarters")  # quarters-x: C7514 (ptxas serializes), see --cross
Q_LAYOUT = "gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 32])"


def _loop(rows: int, ind: str, cross_block: bool) -> list[str]:
    """The k-loop of one consumer whose warpgroup owns rows `rows`:`rows`+64 of the tile (K-major B: each stage
    of b_ring is 256 rows of N by BK). With `cross_block`, the next k-block's first two quarters are issued while
    this one's last is promoted (the loop runs k_tiles - 1 times; the last k-block is peeled)."""
    i2 = ind + "    "
    mma = ("p{p} = warpgroup_mma(a_s, b_s.slice({n}, 64).permute((1, 0)), p{p}, use_acc=False, is_async=True)"
           "  # quarter {q}")

    def stage(at: str) -> list[str]:
        return [f"mbarrier.wait(ready_bars.index(({at}) % STAGES), (({at}) // STAGES) & 1)",
                f"a_s = a_ring.index(({at}) % STAGES).slice({rows}, 64)",
                f"b_s = b_ring.index(({at}) % STAGES)"]

    scales = [f"sa = sa_ring.index(c % STAGES).slice({rows}, 64).load(gl.SliceLayout(1, q_layout))",
              "sb0 = sb_ring.index(c % STAGES).slice(0, 1).load(gl.SliceLayout(0, q_layout))",
              "sb1 = sb_ring.index(c % STAGES).slice(1, 1).load(gl.SliceLayout(0, q_layout))",
              "s0 = gl.expand_dims(sa, 1) * gl.expand_dims(sb0, 0)",
              "s1 = gl.expand_dims(sa, 1) * gl.expand_dims(sb1, 0)"]
    first3 = ["p0 = warpgroup_mma_wait(1, deps=(p0,))",
              "q0 = q0 + p0 * s0",
              "q0 = warpgroup_mma_wait(1, deps=(q0,))  # the promotion before p0's next wgmma",
              mma.format(p=0, n=128, q=2),
              "p1 = warpgroup_mma_wait(1, deps=(p1,))",
              "q1 = q1 + p1 * s0",
              "q1 = warpgroup_mma_wait(1, deps=(q1,))",
              mma.format(p=1, n=192, q=3),
              "p0 = warpgroup_mma_wait(1, deps=(p0,))",
              "q2 = q2 + p0 * s1"]
    last = ["p1 = warpgroup_mma_wait(0, deps=(p1,))",
            "mbarrier.arrive(empty_bars.index(c % STAGES))  # both wgmma of the stage are done",
            "q3 = q3 + p1 * s1",
            "q3 = warpgroup_mma_wait(0, deps=(q3,))",
            "c += 1"]
    issue01 = [mma.format(p=0, n=0, q=0), mma.format(p=1, n=64, q=1)]
    if not cross_block:
        body = [*stage("c"), *issue01, *scales, *first3, *last]
        return [f"{ind}for kk in range(k_tiles):"] + [i2 + x for x in body]
    pre = [*stage("c"), *issue01]
    loop = [*scales, *first3,
            "q2 = warpgroup_mma_wait(1, deps=(q2,))",
            *stage("c + 1"), mma.format(p=0, n=0, q="0 of the next k-block"),
            "p1 = warpgroup_mma_wait(1, deps=(p1,))  # this k-block's quarter 3 (the next one's quarter 0 runs)",
            "mbarrier.arrive(empty_bars.index(c % STAGES))",
            "q3 = q3 + p1 * s1",
            "q3 = warpgroup_mma_wait(1, deps=(q3,))",
            mma.format(p=1, n=64, q="1 of the next k-block"),
            "c += 1"]
    tail = [*scales, *first3, *last]
    return ([ind + x for x in pre] + [f"{ind}for kk in range(k_tiles - 1):"] + [i2 + x for x in loop]
            + [ind + x for x in tail])


def quarters(text: str, cross_block: bool = False) -> str:
    """Rewrite both consumers of a 128x256 K-major blockwise kernel (two partitions, halves) into quarters."""
    lines, out, i = text.split("\n"), [], 0
    rows = None
    while i < len(lines):
        ln = lines[i]
        s = ln.strip()
        m = re.match(r"def consumer(\d)\(", s)
        if m:
            rows = 64 * int(m.group(1))
        if s.startswith("acc_layout: gl.constexpr") and rows is not None:
            out += [ln, ln[: len(ln) - len(ln.lstrip())] + f"q_layout: gl.constexpr = {Q_LAYOUT}"]
        elif s.startswith(("acc0 = gl.zeros(", "acc1 = gl.zeros(", "partial = gl.zeros(")):
            ind = ln[: len(ln) - len(ln.lstrip())]
            name = s.split(" ")[0]
            new = {"acc0": ["q0", "q1"], "acc1": ["q2", "q3"], "partial": ["p0", "p1"]}[name]
            out += [f"{ind}{v} = gl.zeros([64, 64], gl.float32, q_layout)" for v in new]
        elif s.startswith("for kk in range(k_tiles):") and rows is not None:
            ind = ln[: len(ln) - len(ln.lstrip())]
            out += _loop(rows, ind, cross_block)
            j = i + 1
            while lines[j].strip() != "c += 1  # advance c":
                j += 1
            i = j + 1
            continue
        elif s.startswith("c_smem") and ".store(acc" in s:
            ind = ln[: len(ln) - len(ln.lstrip())]
            buf = s.split(".")[0]
            lo, hi = ("q0", "q1") if "acc0" in s else ("q2", "q3")
            out += [f"{ind}{buf}.slice(0, 64, dim=1).store({lo}.to(gl.bfloat16))",
                    f"{ind}{buf}.slice(64, 64, dim=1).store({hi}.to(gl.bfloat16))"]
        else:
            out.append(ln)
        i += 1
    if rows is None:
        raise ValueError("no consumer partitions found")
    return "\n".join(out)


def _spec(m: int, n: int, k: int) -> Any:
    dev = "meta"
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=dev)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=dev).t()
    sa = torch.empty(-(-k // 128), m, dtype=torch.float32, device=dev).t()
    sb = torch.empty(-(-k // 128), -(-n // 128), dtype=torch.float32, device=dev)
    return checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)


def variant(kern: Kernel, name: str) -> Kernel:
    if name == "base":
        return kern
    return with_source(kern, quarters(kern.gluon.text, cross_block=name == "quarters-x"))


def cross() -> None:
    from warploom.targets import cross_compile

    spec = _spec(4096, 4096, 4096)
    for stages in (3,):
        base = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=256, stages=stages))
        for name in VARIANTS:
            kern = variant(base, name)
            try:
                c = cross_compile(kern.module, kern.gluon)
            except Exception as e:  # which form Triton refuses is the finding
                print(f"s{stages} {name}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                continue
            gmma = sum(1 for ln in c.sass.splitlines() if "GMMA" in ln)
            print(f"s{stages} {name}: plan {kern.plan.short()} registers {c.registers} spills {c.spills} "
                  f"smem {c.smem_bytes} serialized {c.wgmma_serialized} GMMA {gmma}")
            if c.wgmma_serialized:
                print("\n".join(ln for ln in c.ptxas_log.splitlines() if "C75" in ln)[:600])


def _one(rnd: int, m: int, n: int, k: int) -> list[dict[str, Any]]:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    from bench_blockwise import _inputs, _torch_fn

    from warploom.reference import dequantized
    from warploom.reference import relative_error as _err
    from warploom.runtime.timing import time_graph as _time_graph

    a, b, sa, sb = _inputs(m, n, k, False)
    da, db = dequantized(a, b, sa, sb)
    ref = da @ db
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)
    dev = DeviceInfo.current()
    theirs, _ = _torch_fn(a, b, sa, sb)
    gt = _time_graph(theirs)
    rs = []
    base = build(spec, dev, plan_schedule(spec, dev, bm=128, bn=256, stages=3))
    for name in VARIANTS:
        kern = variant(base, name)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

        def ours(kern: Kernel = kern, out: torch.Tensor = out) -> None:
            kern.run(a, b, out, sa, sb)

        try:
            ours()
            torch.cuda.synchronize()
        except Exception as e:  # a variant Triton refuses is reported, the others still run
            print(json.dumps(dict(shape=[m, n, k], variant=name, error=str(e)[:300])), flush=True)
            continue
        g = _time_graph(ours)
        r = dict(round=rnd, shape=[m, n, k], variant=name, plan=kern.plan.short(), err=_err(out, ref),
                 tflops=2 * m * n * k / g / 1e9, torch_tflops=2 * m * n * k / gt / 1e9, ratio=gt / g)
        print(json.dumps(r), flush=True)
        rs.append(r)
    return rs


def gpu() -> None:
    rs = []
    for rnd in range(2):
        for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384), (4096, 4096, 7168)]:
            rs += _one(rnd, *shape)
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "quarters.json"), "w") as f:
        json.dump(rs, f, indent=1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--cross", action="store_true")
    args = p.parse_args()
    cross() if args.cross else gpu()
