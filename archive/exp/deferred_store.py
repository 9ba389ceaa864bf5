"""Experiment (session 17, issues 2 and 6): store each tile's output while the next tile's first wgmma run.

In the planner's 128x256 kernels (bf16 and fp8 fast accumulation) each consumer warpgroup finishes a tile's
k-loop, then stores its 64x256 accumulator in two 64x128 halves through one staging buffer (store, fence, TMA
store, wait for the copy to read it, the second half). The tensor cores idle meanwhile: the next tile's
mainloop starts only after both halves are in flight. Here a consumer instead converts the accumulator to the
output dtype (a 64x256 bf16 tile: 64 registers beside the next accumulator's 128), starts the next tile, and
stages the previous tile's halves right after issuing its first and second wgmma, which run while the warps
write shared memory. The last tile's halves are stored after the loop.

A text transform of the generated Gluon, not a compiler pass: it answers whether the schedule is worth building
into the IR (`--cross` first: registers, spills, C7514).

Result (2026-11-24, CPU only): it compiles without spills (the bf16 tile fits beside the next accumulator), but
ptxas serializes the wgmma (C7514) in bf16 and fp8 alike. Bisecting the rewrite: a `c_smem.store` and a TMA store
of the staging buffer together between a wgmma's issue and its wait draw the advisory; either alone, a fence, a
store wait, or the loop-carried conversion do not. So a warpgroup cannot stage its previous tile while its own
wgmma run (in Gluon 3.6, through stmatrix and the TMA store's barrier); it was not timed on the GPU.

    PYTHONPATH=. python3 archive/exp/deferred_store.py --cross
    PYTHONPATH=. python3 archive/exp/deferred_store.py          # GPU: $OUT/deferred-store.json
"""

from __future__ import annotations

import functools
import json
import os
import re
import statistics
from collections.abc import Callable
from typing import Any

import torch
from _rows import cross_or_gpu, with_source

from warploom import checks
from warploom.device import H100_SXM, DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule


def _ind(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def deferred(text: str) -> str:
    """Rewrite every consumer partition of a plain (no scales in the epilogue) 128x256 two-partition kernel."""
    lines, out, i = text.split("\n"), [], 0
    done = 0
    while i < len(lines):
        ln = lines[i]
        if not re.match(r"def consumer\d\(", ln.strip()):
            out.append(ln)
            i += 1
            continue
        j = i
        while not lines[j].strip().startswith("for tile_id in range("):
            out.append(lines[j])
            j += 1
        tile_for, ind = lines[j], _ind(lines[j])
        coords = lines[j + 1]
        assert "tile_coords" in coords and lines[j + 2].strip().startswith("for kk in range(k_tiles):")
        body = [lines[j + 3 + t] for t in range(5)]  # wait, wgmma, wait(1), arrive, c += 1
        assert "mbarrier.wait(ready" in body[0] and "warpgroup_mma(" in body[1]
        assert body[4].strip() == "c += 1  # advance c"
        k = j + 8
        drain = [lines[k], lines[k + 1]]  # wgmma_wait(0), arrive
        assert "warpgroup_mma_wait(0" in drain[0]
        stores: list[tuple[str, ...]] = []
        k += 2
        while not lines[k].strip().startswith("tma.store_wait(0)  # tma_store_wait pending=0") or not stores or \
                len(stores) < 2:
            m = re.search(r"tma\.async_copy_shared_to_global\(c_desc, \[(.*?), (.*?)\], (c_smem\d)\)", lines[k])
            if m:
                stores.append(m.groups())
            k += 1
            if _ind(lines[k]) == ind and lines[k].strip().startswith("tma.store_wait(0)") and len(stores) == 2:
                break
        (row0, col0, buf), (_, col1, _) = stores
        i2, i3, i4 = ind + "    ", ind + "        ", ind + "            "
        half = ("{i}tma.store_wait(0)\n{i}{buf}.store({v})\n{i}fence_async_shared()\n"
                "{i}tma.async_copy_shared_to_global(c_desc, [{r}, {c}], {buf})")

        def store(indent: str, v: str, col: str, row0: str = row0, buf: str = buf, half: str = half) -> list[str]:
            r = row0.replace("off_m", "prev_m")
            return half.format(i=indent, buf=buf, v=v, r=r, c=col.replace("off_n", "prev_n")).split("\n")

        out += [f"{ind}prev = gl.zeros([64, 256], c_desc.dtype, acc_layout)  # the previous tile, in the output dtype",
                f"{ind}prev_m = 0", f"{ind}prev_n = 0",
                tile_for, coords,
                f"{i2}has_prev = tile_id != pid",
                f"{i2}p_lo, p_hi = prev.reshape([64, 2, 128]).permute(0, 2, 1).split()",
                f"{i2}for kk in range(k_tiles):",
                *[i3 + b.strip() for b in body[:4]],
                f"{i3}if has_prev & (kk == 0):  # the previous tile's first half, under this tile's first wgmma",
                *store(i4, "p_lo", col0),
                f"{i3}if has_prev & (kk == 1):",
                *store(i4, "p_hi", col1),
                i3 + body[4].strip(),
                f"{i2}if has_prev & (k_tiles < 2):",
                *store(i3, "p_hi", col1),
                *[i2 + d.strip() for d in drain],
                f"{i2}prev = acc.to(c_desc.dtype)",
                f"{i2}prev_m = off_m", f"{i2}prev_n = off_n",
                f"{ind}p_lo, p_hi = prev.reshape([64, 2, 128]).permute(0, 2, 1).split()  # the last tile's",
                *store(ind, "p_lo", col0), *store(ind, "p_hi", col1)]
        i = k  # the final tma.store_wait(0) of the partition follows
        done += 1
    if done != 2:
        raise ValueError(f"expected two consumer partitions, rewrote {done}")
    return "\n".join(out)


def _spec(op: str, m: int, n: int, k: int, device: str = "meta") -> tuple[Any, tuple[Any, ...]]:
    if op == "bf16":
        a = torch.randn(m, k, device=device).to(torch.bfloat16)
        b = torch.randn(k, n, device=device).to(torch.bfloat16)
        return checks.matmul_spec(a, b, None), (a, b, None, None)
    a = (torch.randn(m, k, device=device) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=device) * 2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device=device) + 0.5, torch.rand(1, n, device=device) + 0.5
    return checks.scaled_mm_spec(a, b, sa, sb, None, torch.bfloat16, True), (a, b, sa, sb)


def variant(kern: Kernel, name: str) -> Kernel:
    if name == "base":
        return kern
    return with_source(kern, deferred(kern.gluon.text))


def cross() -> None:
    from warploom.targets import cross_compile

    for op in ("bf16", "fp8"):
        spec, _ = _spec(op, 4096, 4096, 4096)
        base = build(spec, H100_SXM, plan_schedule(spec, H100_SXM))
        for name in ("base", "deferred"):
            kern = variant(base, name)
            c = cross_compile(kern.module, kern.gluon)
            print(op, name, kern.plan.short(), c.summary())


def _torch(op: str, x: tuple[Any, ...]) -> Callable[[], Any]:
    a, b, sa, sb = x
    if op == "bf16":
        return lambda: torch.matmul(a, b)
    return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def gpu(rounds: int) -> None:
    from warploom.reference import relative_error as _err
    from warploom.runtime.timing import time_graph as _time_graph

    rs = []
    for op in ("bf16", "fp8"):
        for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 2048), (4096, 28672, 4096),
                        (8192, 8192, 4096)]:
            spec, x = _spec(op, m, n, k, "cuda")
            a, b, sa, sb = x
            ref = a.float() @ b.float() if op == "bf16" else (a.float() @ b.float()) * sa * sb
            dev = DeviceInfo.current()
            base = build(spec, dev, plan_schedule(spec, dev))
            runs = {}
            for name in ("base", "deferred"):
                kern = variant(base, name)
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                kern.run(a, b, out, sa, sb)
                torch.cuda.synchronize()
                e = _err(out, ref)
                assert e < 1e-3 and not out.isnan().any(), f"{op} {m}x{n}x{k} {name}: error {e:.2e}"
                runs[name] = (kern, out, e)
            theirs = _torch(op, x)
            ratios: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(rounds):  # interleaved: torch, then each variant, every round
                t_torch = _time_graph(theirs)
                for name, (kern, out, _) in runs.items():
                    t = _time_graph(functools.partial(kern.run, a, b, out, sa, sb))
                    ratios[name].append(t_torch / t)
            for name, (kern, _, e) in runs.items():
                r = dict(op=op, shape=[m, n, k], variant=name, plan=kern.plan.short(), err=e,
                         ratio=statistics.median(ratios[name]), ratios=ratios[name])
                print(json.dumps(r), flush=True)
                rs.append(r)
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "deferred-store.json"), "w") as f:
        json.dump(rs, f, indent=1)


if __name__ == "__main__":
    cross_or_gpu(cross, gpu)
