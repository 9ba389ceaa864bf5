"""A small tile's epilogue stored straight from the registers, against warploom's TMA store (GPU only).

Half of the zoo's bf16 log-loss is in GEMMs torch runs in under 10 us, where warploom's kernels are 0.4-3 us longer
than cuBLAS's (docs/history, session 36). One fixed cost at that size is the epilogue: shared-memory staging, a fence,
a bar.sync, the TMA store and the wait for its reads before exit. This experiment takes the planner's generated
kernel for each shape, edits its one-partition epilogue into masked `gl.store`s from the accumulator's registers
(the gfx1250 backend's form), and times both, launched the same way, against torch:

    PYTHONPATH=. python3 archive/exp/direct_store.py --shapes 43x216x104,141x136x1624 [--rounds 3] [--out ds.json]

Only one-partition plans with a single C store are edited (the 64-row tiles of rules 23, 33 and 35); others are
reported as skipped. Every variant is first checked against an fp32 reference on a NaN-poisoned output.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rows import bf16_problem  # noqa: E402

from warploom import checks  # noqa: E402
from warploom.device import DeviceInfo  # noqa: E402
from warploom.kernel import build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402
from warploom.reference import relative_error  # noqa: E402
from warploom.runtime.cross import descriptor_blocks, shared_layout  # noqa: E402
from warploom.runtime.loader import load  # noqa: E402
from warploom.runtime.timing import finish_within, time_graph  # noqa: E402

SHAPES = "43x216x104,58x2024x360,141x136x1624,1806x88x1672,7268x104x392,5113x120x200,6262x120x2120,1072x464x200"
_STORE = re.compile(r"^(?P<ind> +)tma\.store_wait\(0\).*\n\s+c_smem\.store\(acc\.to\((?P<dt>gl\.\w+)\)\).*\n"
                    r"\s+fence_async_shared\(\).*\n\s+tma\.async_copy_shared_to_global\(c_desc, \[off_m, off_n\], "
                    r"c_smem\).*\n", re.M)


def direct(text: str, bn: int, blocked: bool = False) -> str | None:
    """`text` with its one C store made masked global stores from the registers (`blocked`: first converted to a
    layout of 16-byte row pieces, coalesced, through shared memory); None if it has another form."""
    if len(_STORE.findall(text)) != 1 or text.count("def consumer(") != 1:
        return None
    ind = "\n" + _STORE.search(text).group("ind")  # type: ignore[union-attr]
    dt = _STORE.search(text).group("dt")  # type: ignore[union-attr]
    lay, val = "acc_layout", f"acc.to({dt})"
    lines = [""]
    if blocked:
        tpw_n = min(bn // 8, 32)
        lines.append(f"st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [{32 // tpw_n}, {tpw_n}], [4, 1], [1, 0])")
        lay, val = "st_layout", f"gl.convert_layout(acc.to({dt}), st_layout)"
    body = ind.join(lines + [
        f"rows = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, {lay}))",
        f"cols = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, {lay}))",
        "mask = gl.expand_dims(rows < M, 1) & gl.expand_dims(cols < N, 0)",
        "ptrs = c_ptr + gl.expand_dims(rows.to(gl.int64) * stride_cm, 1) + gl.expand_dims(cols, 0)",
        f"gl.store(ptrs, {val}, mask=mask)",
    ])[1:] + "\n"
    text = _STORE.sub(lambda _: body, text)
    text = re.sub(r"^ +tma\.store_wait\(0\).*\n", "", text, flags=re.M)
    text = text.replace("c_desc, M, N, K):", "c_desc, M, N, K, c_ptr, stride_cm):")
    text = text.replace("c_smem, c_desc, M, N, K)),", "c_smem, c_desc, M, N, K, c_ptr, stride_cm)),")
    return text


def launch(kern: Any, text: str, a: torch.Tensor, b_nk: torch.Tensor, out: torch.Tensor, extra: bool) -> Any:
    """A call of `text`'s kernel (warploom's generated one, or edited) with `kern`'s grid and compile options."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    src = kern.gluon
    fn = load(text, src.kernel)
    blocks = descriptor_blocks(kern.module)
    tensors = {"a_desc": a, "b_desc": b_nk, "c_desc": out}
    descs = [TensorDescriptor.from_tensor(tensors[p], blocks[p][1], shared_layout(*blocks[p]))
             for p in ("a_desc", "b_desc", "c_desc")]
    m, k = a.shape
    n = b_nk.shape[0]
    t = kern.module.tiling
    grid = (min(-(-m // t.bm) * -(-n // t.bn), t.grid),)
    args = [*descs, m, n, k] + ([out, out.stride(0)] if extra else [])
    return functools.partial(fn[grid], *args, num_warps=src.num_warps, maxnreg=src.maxnreg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--variants", default="[{}]", help="plan_schedule overrides (JSON list), each edited alike")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="direct-store.json")
    args = ap.parse_args()
    dev = DeviceInfo.current()
    rows: list[dict[str, Any]] = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        a, b_nk, ref, theirs = bf16_problem(m, n, k)
        spec = checks.matmul_spec(a, b_nk.t(), None)
        calls: list[tuple[dict[str, Any], Any]] = []
        for kw in json.loads(args.variants):
            kern = build(spec, dev, plan_schedule(spec, dev, **kw))
            bn = kern.module.tiling.bn
            edited, blocked = direct(kern.gluon.text, bn), direct(kern.gluon.text, bn, blocked=True)
            forms = {"tma": (kern.gluon.text, False), "direct": (edited, True),
                     "blocked": (blocked, True)} if edited and blocked else {}
            if not forms:
                rows.append({"shape": shape, "variant": kw, "plan": kern.plan.short(), "skipped": "another epilogue"})
                print(f"{shape} {kern.plan.short()}: skipped (another epilogue form)", flush=True)
            for form, (text, extra) in forms.items():
                row: dict[str, Any] = {"shape": shape, "variant": kw, "plan": kern.plan.short(), "form": form}
                try:
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                    call = launch(kern, text, a, b_nk, out, extra)
                    call()
                    finish_within(f"{form} {shape}")
                    row["err"] = e = relative_error(out, ref)
                    if not e < 1e-3:
                        raise AssertionError(f"error {e:.3e} against fp32, {int(out.isnan().sum())} NaN left")
                    calls.append((row, call))
                except Exception as ex:  # one failing form is reported; the others still run
                    row["error"] = f"{type(ex).__name__}: {ex}"[:600]
                    print(f"{shape} {form}: {row['error']}", flush=True)
                rows.append(row)
        for _ in range(args.rounds):  # interleaved: clock drift hits every call alike
            t_torch = time_graph(theirs)
            for row, call in calls:
                t = time_graph(call)
                row.setdefault("us", []).append(t * 1000)
                row.setdefault("ratios", []).append(t_torch / t)
            rows.append({"shape": shape, "form": "torch", "us": t_torch * 1000})
        for row, _ in calls:
            row["ratio"] = statistics.median(row["ratios"])
            print(f"{shape:>16} {row['plan']:36} {row['form']:7} ratio {row['ratio']:.3f} "
                  f"[{min(row['ratios']):.3f}-{max(row['ratios']):.3f}] {statistics.median(row['us']):.2f} us",
                  flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
