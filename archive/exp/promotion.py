"""Experiment (session 12, docs/benchmarks.md): two rewrites of a generated blockwise kernel's promotion, timed
against the unmodified kernel and torch in the same run. Text transforms of the Gluon source, not compiler passes:
they answer whether a change is worth building into the IR.

- ``hoist``: read the k-block's scales right after the stage's ready wait, before the wgmma (per-column scale_b
  stays at the promotion: hoisted, it spills 824 bytes); ``hoist+release`` also releases the stage right after
  the last wgmma wait.
- ``pair``: two k-blocks per wgmma wait (two partials in flight, then both promotions); single-column-block
  consumers (bn <= 128) and an even k-block count only.

    PYTHONPATH=. python3 archive/exp/promotion.py      # writes $OUT/promotion.json
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

import torch

from warploom import checks
from warploom.device import H100_SXM, DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import dequantized
from warploom.reference import relative_error as _err
from warploom.runtime.timing import time_graph as _time_graph

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from _rows import with_source  # noqa: E402
from bench_blockwise import _inputs, _torch_fn  # noqa: E402


def _k_block(lines: list[str], i: int) -> tuple[list[str], int]:
    """The statements of the k-loop body starting after line i, up to (not including) the stage release."""
    body, j = [], i + 1
    while "mbarrier.arrive(empty_bars" not in lines[j]:
        body.append(lines[j])
        j += 1
    return body, j


def hoist(text: str, release_early: bool) -> str:
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        ln = lines[i]
        out.append(ln)
        if "mbarrier.wait(ready_bars" in ln and i + 1 < len(lines) and "warpgroup_mma(" in lines[i + 1]:
            ind = ln[: len(ln) - len(ln.lstrip())]
            body, j = _k_block(lines, i)
            hoisted: list[str] = []
            names: dict[str, str] = {}
            new_body = []
            for b in body:
                m = re.match(r"(\s*)(sa|sb) = (.*?)  #", b)
                if m and (m.group(2) == "sa" or ", 1).load" in m.group(3)):
                    expr = m.group(3)
                    if expr not in names:
                        names[expr] = f"{m.group(2)}_h{len(names)}"
                        hoisted.append(f"{ind}{names[expr]} = {expr}")
                    new_body.append(f"{m.group(1)}{m.group(2)} = {names[expr]}")
                else:
                    new_body.append(b)
            out.extend(hoisted)
            if release_early:
                last = max(k for k, b in enumerate(new_body) if "= warpgroup_mma_wait(0, deps=(partial,))" in b)
                new_body.insert(last + 1, lines[j])
                out.extend(new_body)
            else:
                out.extend([*new_body, lines[j]])
            i = j + 1
            continue
        i += 1
    return "\n".join(out)


def _at(s: str, cur: str) -> str:
    return s.replace("c % STAGES", f"({cur}) % STAGES").replace("c // STAGES", f"({cur}) // STAGES")


def pair(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip().startswith("for kk in range(k_tiles):"):
            ind = ln[: len(ln) - len(ln.lstrip())] + "    "
            j = i + 1
            body = []
            while lines[j].strip() != "c += 1  # advance c":
                body.append(lines[j].strip().split("  #")[0])
                j += 1
            mma = next(b for b in body if b.startswith("partial = warpgroup_mma("))
            loads = [b for b in body if b.startswith(("sa = ", "sb = "))]
            prom = next(b for b in body if b.startswith("acc") and "+ partial" in b)
            new = [ln.replace("range(k_tiles)", "range(k_tiles // 2)")]
            for cur, p in (("c", "pa"), ("c + 1", "pb")):
                new += [f"mbarrier.wait(ready_bars.index(({cur}) % STAGES), (({cur}) // STAGES) & 1)",
                        _at(mma, cur).replace("partial = ", f"{p} = ").replace(", partial,", f", {p},")]
            new.append("pa, pb = warpgroup_mma_wait(0, deps=(pa, pb))")
            for cur, p in (("c", "pa"), ("c + 1", "pb")):
                new += [_at(x, cur) for x in loads]
                new += [prom.replace("partial", p), f"mbarrier.arrive(empty_bars.index(({cur}) % STAGES))"]
            out += [new[0]] + [ind + x for x in new[1:]] + [ind + "c += 2"]
            i = j + 1
            continue
        if ln.strip().startswith("partial = gl.zeros("):
            out += [ln.replace("partial =", "pa ="), ln.replace("partial =", "pb =")]
        else:
            out.append(ln)
        i += 1
    return "\n".join(out)


def variant(kern: Kernel, name: str) -> Kernel:
    """`kern` with its source rewritten; a fresh object, since build(), .gluon and .launcher are all cached."""
    if name == "base":
        return kern
    text = {"hoist": lambda t: hoist(t, False), "hoist+release": lambda t: hoist(t, True), "pair": pair}[name](
        kern.gluon.text)
    return with_source(kern, text)


def run(m: int, n: int, k: int, kw: dict[str, Any], name: str, per_col: bool = False) -> dict[str, Any]:
    a, b, sa, sb = _inputs(m, n, k, per_col)
    da, db = dequantized(a, b, sa, sb)
    spec = checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, False)
    dev = DeviceInfo.current() if torch.cuda.is_available() else H100_SXM
    kern = variant(build(spec, dev, plan_schedule(spec, dev, **kw)), name)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")

    def ours() -> None:
        kern.run(a, b, out, sa, sb)

    ours()
    torch.cuda.synchronize()
    err = _err(out, da @ db)
    theirs, _ = _torch_fn(a, b, sa, sb)
    g, gt = _time_graph(ours), _time_graph(theirs)
    r = dict(shape=[m, n, k], kw=str(kw), variant=name, per_col=per_col, plan=kern.plan.short(), err=err,
             tflops=2 * m * n * k / g / 1e9, torch_tflops=2 * m * n * k / gt / 1e9, ratio=gt / g)
    print(json.dumps(r), flush=True)
    return r


def main() -> None:
    rs = []
    for shape in [(4096, 4096, 4096), (4096, 7168, 16384)]:
        for name in ("base", "hoist", "hoist+release"):
            rs.append(run(*shape, {}, name))
    for name in ("base", "hoist"):
        rs.append(run(4096, 4096, 4096, {}, name, per_col=True))
    for shape, kws in [((4096, 4096, 4096), [dict(bm=128, bn=128)]), ((4096, 7168, 16384), [dict(bm=128, bn=128)]),
                       ((128, 4096, 7168), [dict(bm=64, bn=128), dict(bm=64, bn=64)]),
                       ((64, 7168, 2048), [dict(bm=64, bn=128), dict(bm=64, bn=64)])]:
        for kw in kws:
            for name in ("base", "pair"):
                rs.append(run(*shape, kw, name))
    with open(os.path.join(os.environ.get("OUT", "."), "promotion.json"), "w") as f:
        json.dump(rs, f, indent=1)


if __name__ == "__main__":
    main()
