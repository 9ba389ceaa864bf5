"""Experiment (session 17, issue 6): the rule-16 decode kernel loading only the A rows that exist.

At M <= 16 a 64x64 decode tile's A box is 64 rows of which M hold data; TMA writes the other rows as zeros into
shared memory. With few CTAs (N = 4096: 64), each SM's TMA write rate is what limits the kernel, so those zeros
cost as much as data (docs/benchmarks.md session 17). Here the A box is R rows (8 or 16 >= M) landing in the
first R rows of each 64-row A slot: the stage lands 2 KiB of A instead of 8 (bf16; the expect-tx count shrinks to
match). The slot's other rows keep whatever they held; they only feed accumulator rows >= R > M, which the TMA
store clips. A text transform of the generated Gluon plus the launcher's A descriptor box, not a compiler pass.

    PYTHONPATH=. python3 archive/exp/decode_a_rows.py --cross
    PYTHONPATH=. python3 archive/exp/decode_a_rows.py [--rounds 5]   # GPU: $OUT/decode-a-rows.json
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _rows import with_source  # noqa: E402
from decode_dual_acc import _spec, run_variants  # noqa: E402

import warploom.runtime.launch as launch_mod  # noqa: E402
from warploom.device import H100_SXM  # noqa: E402
from warploom.kernel import Kernel, build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402


def a_rows(text: str, rows: int, bk: int, esize: int) -> str:
    m = re.search(r"mbarrier\.expect\(ready_bars\.index\(p % STAGES\), (\d+)\)", text)
    assert m, "no expect"
    full = int(m.group(1))
    text = text.replace(m.group(0), f"mbarrier.expect(ready_bars.index(p % STAGES), {full - (64 - rows) * bk * esize})")
    old = "ready_bars.index(p % STAGES), a_ring.index(p % STAGES))"
    assert text.count(old) == 1
    return text.replace(old, f"ready_bars.index(p % STAGES), a_ring.index(p % STAGES).slice(0, {rows}))")


@contextlib.contextmanager
def a_box(rows: int | None) -> Iterator[None]:
    """While open, A's descriptor box is `rows` rows (None: the tile's) wherever warploom reads the boxes: the
    launcher (built once per kernel) and the cross-compiler's signature both call `descriptor_blocks`."""
    import warploom.runtime.cross as cr

    real = cr.descriptor_blocks

    def blocks(m: Any) -> Any:
        out = real(m)
        dt, blk = out["a_desc"]
        out["a_desc"] = (dt, [rows or blk[0], blk[1]])
        return out

    launch_mod.descriptor_blocks = cr.descriptor_blocks = blocks
    try:
        yield
    finally:
        launch_mod.descriptor_blocks = cr.descriptor_blocks = real


def variant(kern: Kernel, rows: int | None) -> Kernel:
    if rows is None:
        return kern
    new = with_source(kern, a_rows(kern.gluon.text, rows, kern.plan.bk, kern.spec.a_dtype.bytes))
    with a_box(rows):
        new.__dict__["launcher"] = new.launcher
    return new


def cross() -> None:
    """Cross-compile each variant for sm_90a with its A box."""
    from warploom.targets import cross_compile

    for dtype in ("bf16", "fp8"):
        spec, _ = _spec(dtype, 16, 4096, 4096, "meta")
        base = build(spec, H100_SXM, plan_schedule(spec, H100_SXM))
        for rows in (None, 16, 8):
            kern = variant(base, rows)
            with a_box(rows):
                summary = cross_compile(kern.module, kern.gluon).summary()
            print(dtype, base.plan.short(), f"A rows {rows or 64}", summary)


def _rows_variant(rows: int) -> Callable[[Kernel, int], Kernel | None]:
    """The variant loading `rows` rows of A, where M fits in them (otherwise it would drop rows of data)."""
    def make(kern: Kernel, m: int) -> Kernel | None:
        return variant(kern, rows) if m <= rows else None

    return make


def gpu(rounds: int) -> None:
    run_variants({f"a{r}": _rows_variant(r) for r in (16, 8)}, rounds, "decode-a-rows.json")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cross() if args.cross else gpu(args.rounds)
