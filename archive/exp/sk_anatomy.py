"""Where stream-K's time goes (issue 23, session 32): the planner's whole-tile plan, classic and sk_waves=1 stream-K,
the same stream-K kernels with their fixups stripped from the generated source (the results are then wrong: timing
only), and the whole-tile kernel with each tile's k-blocks rotated by tile (CTAs then stream different k-blocks at
once, as stream-K's do). CUDA-graph timing, interleaved with torch's, bf16.

Usage, from the repository root on the GPU machine: ``PYTHONPATH=.:scripts python3 archive/exp/sk_anatomy.py MxNxK
...``; with ``--fixup`` the stream-K plans with each of `EDITS` (``SK_EDITS=a,b`` picks some); with ``--planned`` the
planner's stream-K plan against the same with its fixup loads put back to ``.cg`` (session 32's change).
Results: docs/data/sk-anatomy-2026-11-28-session32.log."""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
import sys

import torch

sys.path.insert(0, "scripts")
from sweep_plans import case, err  # noqa: E402

from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.runtime.timing import time_graph  # noqa: E402


def no_fixup(text: str) -> str:
    out = []
    for line in text.splitlines():
        ind = line[: len(line) - len(line.lstrip())]
        s = line.strip()
        if s.startswith("gl.store(sk_ws_ptr") or (s.startswith("gl.atomic_xchg(sk_flags_ptr + pid")):
            line = ind + "pass"
        line = re.sub(r"range\(pid \+ 1, sk_last \+ 1\)", "range(pid + 1, pid + 1)", line)
        out.append(line)
    return "\n".join(out) + "\n"


def line_edit(pattern: str, repl: str):
    def edit(text: str) -> str:
        return re.sub(pattern, repl, text)
    return edit


EDITS = {
    "nostore": line_edit(r"gl\.store\(sk_ws_ptr \+ sk_offs, acc\)", "pass"),
    "noload": line_edit(r"acc = acc \+ gl\.load\(sk_ws_ptr \+ sk_offs, cache_modifier=\".cg\"\)", "pass"),
    "relaxed": line_edit(r'sem="(release|acquire)"', 'sem="relaxed"'),
    "nospin": line_edit(r"scope=\"gpu\"\) == 0:", 'scope="gpu") == 2:'),
    "nofix": no_fixup,
    "cg": line_edit(r'eviction_policy="evict_first"', 'cache_modifier=".cg"'),
    "ldca": line_edit(r'cache_modifier=".cg"', 'cache_modifier=".ca"'),
    "ldplain": line_edit(r', cache_modifier=".cg"', ''),
    "ldfirst": line_edit(r'cache_modifier=".cg"', 'eviction_policy="evict_first"'),
}


def rotate_k(text: str) -> str:
    return re.sub(r"\[(off_[mn]), kk \* BK\]", r"[\1, ((kk + tile_id * 5) % k_tiles) * BK]", text)


def hacked(kern, edit):
    g = kern.gluon
    new = dataclasses.replace(g, text=edit(g.text))
    assert new.text != g.text, "the edit changed nothing"
    kern.__dict__["gluon"] = new
    kern.__dict__.pop("launcher", None)
    return kern


MODE = "anatomy"
ONLY = os.environ.get("SK_EDITS", "").split(",") if os.environ.get("SK_EDITS") else []


def main() -> None:
    global MODE
    if sys.argv[1] in ("--fixup", "--planned"):
        MODE = sys.argv.pop(1)[2:]
    dev = DeviceInfo.current()
    for size in sys.argv[1:]:
        m, n, k = map(int, size.split("x"))
        spec, ins, ref, theirs = case("bf16", (m, n, k))
        a, b, *_ = ins
        if MODE == "planned":  # the planner's plan, and (stream-K) its fixup loads as .cg (before session 32)
            plan = plan_schedule(spec, dev)
            variants = {"planned": (plan, None), "planned-cg": (plan, EDITS["cg"])} if plan.stream_k else {}
            if not variants:
                print(size, plan.short(), "is not stream-K")
                continue
        elif MODE == "fixup":
            sk = {"sk2": plan_schedule(spec, dev, bm=128, bn=256, stream_k=2),
                  "sk2w1": plan_schedule(spec, dev, bm=128, bn=256, stream_k=2, sk_waves=1)}
            variants = {"dp": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=0, tail_split=1, split_k=1), None)}
            for base, plan in sk.items():
                variants[base] = (plan, None)
                for e, fn in EDITS.items():
                    if ONLY and e not in ONLY:
                        continue
                    variants[f"{base}-{e}"] = (plan, fn)
        else:
            variants = {
            "planned": (plan_schedule(spec, dev), None),
            "dp128x256": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=0, tail_split=1, split_k=1), None),
            "dp128x256-rotk": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=0, tail_split=1, split_k=1), rotate_k),
            "sk2": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=2), None),
            "sk2-nofix": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=2), no_fixup),
            "sk2w1": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=2, sk_waves=1), None),
            "sk2w1-nofix": (plan_schedule(spec, dev, bm=128, bn=256, stream_k=2, sk_waves=1), no_fixup),
            "sk2w1-128": (plan_schedule(spec, dev, bm=128, bn=128, stream_k=2, sk_waves=1), None),
        }
        runs = {}
        for name, (plan, edit) in variants.items():
            try:
                kern = build(spec, dev, plan)
                if edit is not None:
                    kern = hacked(dataclasses.replace(kern), edit)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                kern.run(a, b, out)
                torch.cuda.synchronize()
                runs[name] = (kern, out, err(out, ref))
            except Exception as ex:  # noqa: BLE001
                print(size, name, "failed:", type(ex).__name__, str(ex)[:300], flush=True)
        ratios = {name: [] for name in runs}
        for _ in range(3):
            t0 = time_graph(theirs)
            for name, (kern, out, _) in runs.items():
                ratios[name].append(t0 / time_graph(lambda kern=kern, out=out, a=a, b=b: kern.run(a, b, out)))
        for name, (kern, _, e) in runs.items():
            print(f"{size:>16} {name:16} {kern.plan.short():40} ratio {statistics.median(ratios[name]):.3f} "
                  f"err {e:.1e}", flush=True)


if __name__ == "__main__":
    main()
