"""Experiment (session 20, issues 2 and 6): store a tile's output under the next tile's first two wgmma, with those
two k-steps peeled so that no TMA store sits inside a wgmma's issue-to-wait window.

archive/exp/epilogue_cost.py measured what the 128x256 consumers' epilogue costs (the tensor cores idle through it):
3-8% of a bf16 GEMM's time and 3-13% of fp8 rowwise's. Session 17's deferred store (archive/exp/deferred_store.py)
staged the previous tile's halves while the next tile's wgmma ran, and ptxas serialized every wgmma (C7514): a
staging write and a TMA store both inside one wgmma's window. Here each consumer warpgroup instead:

- at a tile's end: waits for its last wgmma, releases the slot, scales (fp8 rowwise) and converts the accumulator
  to the output dtype (64 registers beside the next accumulator's 128) and goes on to the next tile;
- at the next tile's k-step 0: issues the wgmma, writes the previous tile's first half to the staging buffer and
  fences while it runs, waits for it (pending 0), then issues the TMA store, outside any window;
- at k-step 1 the same with the second half (after the store wait that frees the buffer);
- k-steps 2.. run as before (pending 1); the last tile is stored after the loop.

Two k-steps per tile wait for their wgmma to finish where they would keep one in flight; the other warpgroup's
wgmma fill that gap. A text transform of the generated Gluon (--cross: registers, spills, C7514 first).

Result (2026-11-24, session 20; docs/benchmarks.md): no C7514, no spills, correct; bf16 -0.2% to +1.3% and fp8
-2.2% to +1.7% against the planner's kernel over six shapes, 7 rounds: nothing to take.

    PYTHONPATH=. python3 archive/exp/peeled_store.py --cross
    PYTHONPATH=. python3 archive/exp/peeled_store.py [--rounds 7] [--cases bf16,fp8]   # GPU: $OUT/peeled-store.json
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # scripts/: sweep_plans' cases
from _rows import variants_main  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 2048), (4096, 4096, 14336), (8192, 8192, 4096),
          (4096, 28672, 4096)]
CASES = ("bf16", "fp8")
_STORE = re.compile(r"tma\.async_copy_shared_to_global\(c_desc, \[(.*?), (.*?)\], (c_smem\d)\)")


def _consumer(lines: list[str], j: int) -> tuple[list[str], int]:
    """Rewrite one consumer partition whose `for tile_id` line is lines[j]; returns its new lines from there and the
    index of the partition's final `tma.store_wait(0)`."""
    ind, i2, i3 = "    ", "        ", "            "
    tile_for, coords = lines[j], lines[j + 1]
    assert "tile_coords" in coords and lines[j + 2].strip().startswith("for kk in range(k_tiles):"), lines[j + 2]
    body = [lines[j + 3 + t].strip() for t in range(5)]  # wait ready, wgmma, wait(1), arrive empty, c += 1
    assert "mbarrier.wait(ready" in body[0] and "warpgroup_mma(" in body[1] and body[4] == "c += 1  # advance c"
    k = j + 8
    drain = [lines[k].strip(), lines[k + 1].strip()]  # wait(0), arrive empty
    assert "warpgroup_mma_wait(0" in drain[0] and "mbarrier.arrive" in drain[1], drain
    k += 2
    scale: list[str] = []
    while not lines[k].strip().startswith("tma.store_wait(0)"):
        scale.append(lines[k].strip())  # fp8 rowwise: offsets, scale loads, acc *= scales
        k += 1
    stores = []
    while lines[k].startswith(i2):
        m = _STORE.search(lines[k])
        if m:
            stores.append(m.groups())
        k += 1
    assert len(stores) == 2 and lines[k].strip().startswith("tma.store_wait(0)"), (stores, lines[k])
    (r0, c0, buf), (_, c1, _) = stores
    where = [(r0.replace("off_m", "prev_m"), c.replace("off_n", "prev_n")) for c in (c0, c1)]
    wgmma0 = body[1].replace("use_acc=kk > 0", "use_acc=False")
    wgmma1 = body[1].replace("use_acc=kk > 0", "use_acc=True")
    wait0 = "acc = warpgroup_mma_wait(0, deps=(acc,))  # nothing in flight: the TMA store below is outside a window"

    def stage(indent: str, v: str) -> list[str]:
        return [f"{indent}tma.store_wait(0)", f"{indent}{buf}.store({v})", f"{indent}fence_async_shared()"]

    def store(indent: str, half: int) -> str:
        r, c = where[half]
        return f"{indent}tma.async_copy_shared_to_global(c_desc, [{r}, {c}], {buf})"

    out = [f"{ind}prev = gl.zeros([64, 256], c_desc.dtype, acc_layout)  # the previous tile, in the output dtype",
           f"{ind}prev_m = 0", f"{ind}prev_n = 0",
           tile_for, coords,
           f"{i2}has_prev = tile_id != pid",
           f"{i2}p_lo, p_hi = prev.reshape([64, 2, 128]).permute(0, 2, 1).split()",
           f"{i2}# k-step 0, peeled: the previous tile's first half is written while this wgmma runs",
           i2 + body[0], i2 + wgmma0,
           f"{i2}if has_prev:", *stage(i3, "p_lo"),
           i2 + wait0,
           f"{i2}if has_prev:", store(i3, 0),
           i2 + body[4],
           f"{i2}if k_tiles > 1:  # k-step 1, peeled: the second half",
           i3 + body[0], i3 + wgmma1,
           f"{i3}if has_prev:", *stage(i3 + "    ", "p_hi"),
           i3 + wait0,
           i3 + body[3].replace(", pred=kk > 0", ""),
           f"{i3}if has_prev:", store(i3 + "    ", 1),
           i3 + body[4],
           f"{i2}else:",
           f"{i3}if has_prev:", *stage(i3 + "    ", "p_hi"), store(i3 + "    ", 1),
           f"{i2}for kk in range(2, k_tiles):",
           *[i3 + b.replace(", pred=kk > 0", "") for b in (body[0], wgmma1, body[2], body[3], body[4])],
           *[i2 + d for d in drain],
           *[i2 + s for s in scale],
           f"{i2}prev = acc.to(c_desc.dtype)",
           f"{i2}prev_m = off_m", f"{i2}prev_n = off_n",
           f"{ind}if pid < num_tiles:  # the last tile's output",
           f"{i2}p_lo, p_hi = prev.reshape([64, 2, 128]).permute(0, 2, 1).split()",
           *stage(i2, "p_lo"), store(i2, 0), *stage(i2, "p_hi"), store(i2, 1)]
    return out, k


def peeled(text: str) -> str:
    """Rewrite both consumer partitions of a plain 128x256 two-partition kernel (bf16, or fp8 rowwise fast)."""
    lines, out, i, done = text.split("\n"), [], 0, 0
    while i < len(lines):
        if re.match(r"def consumer\d\(", lines[i]):
            while not lines[i].strip().startswith("for tile_id in range("):
                out.append(lines[i])
                i += 1
            new, i = _consumer(lines, i)
            out += new
            done += 1
        else:
            out.append(lines[i])
            i += 1
    if done != 2:
        raise ValueError(f"expected two consumer partitions, rewrote {done}")
    return "\n".join(out)


def variants(case: str, text: str) -> dict[str, str]:
    return {"planner": text, "peeled": peeled(text)}


def main() -> None:
    variants_main(__doc__, CASES, SHAPES, variants, "peeled-store.json", rounds=7)


if __name__ == "__main__":
    main()
