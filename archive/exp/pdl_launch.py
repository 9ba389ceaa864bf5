"""Programmatic dependent launch (PDL) for warploom's kernels, against the same kernels launched plainly (GPU only).

Half of the zoo's bf16 log-loss is at shapes torch runs in under 10 us, where warploom's kernels take 0.4-1 us more
than cuBLAS's (docs/history, sessions 36 and 40; the epilogue's TMA store and the mbarrier inits were measured and
are not it). A CUDA graph of back-to-back GEMMs still pays each kernel's launch and prologue after the previous
kernel's last CTA exits. With PDL (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, Triton's `launch_pdl`), a
kernel may start while the one before it finishes: it allocates shared memory and initializes its barriers, then
waits (`griddepcontrol.wait`) for the previous grid's completion and memory before it touches global memory, so it
is as safe as a plain launch whatever ran before. `griddepcontrol.launch_dependents` lets the next kernel be
scheduled early (it still waits for this one to finish).

    PYTHONPATH=. python3 archive/exp/pdl_launch.py --shapes 87x640x72,547x64x608 [--rounds 5] [--cross]

Run at a93161f, before the pass `DependentLaunch` (passes/launch.py) put the wait and the trigger into every kernel:
on today's kernels the edit would add them twice (archive/exp/pdl_chain.py measures those as launched).

Forms: `plain` (the planner's kernel as launched then), `pdl` (wait and launch_dependents before the partitions
start, launched with PDL), `pdl_wait` (the wait only, so the next kernel launches when this one's CTAs exit). Every
form is checked against the fp32 product on a NaN-poisoned output first. Only kernels without a second launch
(split-K's reduce, rule 29's cast) are edited.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from _rows import checked, interleaved_ms, with_source, write_rows  # noqa: E402

SHAPES = ("87x640x72,111x256x496,547x64x608,1210x128x184,64x592x360,58x2024x360,322x376x448,2606x288x160,"
          "753x216x800,5113x120x200,1700x392x136,773x664x104,198x2792x168,144x6648x104,1435x872x776,"
          "3230x6336x240,2188x4312x760")
_WAIT = 'gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)'
_LAUNCH = ('gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, '
           'is_pure=False, pack=1)')
_SPECIALIZE = re.compile(r"^(?P<ind> +)gl\.warp_specialize\(", re.M)


def edited(text: str, launch: bool) -> str | None:
    """`text` with the grid-dependency wait (and, `launch`, the early trigger) before its partitions start: after
    the shared memory and the barriers, before any global access; None if it has no one warp_specialize."""
    found = _SPECIALIZE.findall(text)
    if len(found) != 1:
        return None
    ind = found[0]
    lines = [f"{ind}{_WAIT}  # wait for the previous grid's completion and memory (PDL)\n"]
    if launch:
        lines.append(f"{ind}{_LAUNCH}  # let the next grid be scheduled (it waits for this one)\n")
    return _SPECIALIZE.sub(lambda mt: "".join(lines) + mt.group(0), text, count=1)


@functools.cache
def _patch_pdl() -> None:
    """Launch every main kernel built from here on with PDL: warploom's compile options gain `launch_pdl` where a
    kernel has `maxnreg` (the main kernel; split-K's reduce and rule 29's cast have none and are not edited)."""
    import warploom.runtime.launch as launch

    plain = launch.compile_options

    def options(**kw: Any) -> dict[str, Any]:
        out = plain(**kw)
        return {**out, "launch_pdl": True} if _PDL[0] and "maxnreg" in kw else out

    launch.compile_options = options  # type: ignore[assignment]


_PDL = [False]


def cross(shapes: list[tuple[int, int, int]]) -> None:
    """Cross-compile each edited form for sm_90a (no GPU): registers, spills."""
    from _rows import case_spec

    from warploom.device import H200
    from warploom.kernel import build
    from warploom.targets import cross_compile

    for m, n, k in shapes:
        kern = build(case_spec("bf16", m, n, k), H200)
        for form in ("pdl", "pdl_wait"):
            text = edited(kern.gluon.text, form == "pdl")
            if text is None or kern.gluon.reduce_kernel or kern.gluon.cast_kernel:
                print(f"{m}x{n}x{k} {kern.plan.short()}: skipped", flush=True)
                continue
            c = cross_compile(with_source(kern, text).module, with_source(kern, text).gluon, "sm_90a")
            ptx_wait = "griddepcontrol.wait" in (c.ptx or "")
            print(f"{m}x{n}x{k} {kern.plan.short()} {form}: registers {c.registers}, spills {c.spills}, "
                  f"wait in PTX {ptx_wait}", flush=True)


def gpu(shapes: list[tuple[int, int, int]], rounds: int, out_name: str) -> None:
    import torch
    from sweep_plans import case

    from warploom.device import DeviceInfo
    from warploom.kernel import build

    _patch_pdl()
    dev = DeviceInfo.current()
    rows: list[dict[str, Any]] = []
    for m, n, k in shapes:
        torch.manual_seed(m + n + k)
        spec, (a, b, sa, sb, bias, _ops), ref, theirs = case("bf16", (m, n, k))
        kern = build(spec, dev)
        if kern.gluon.reduce_kernel or kern.gluon.cast_kernel or edited(kern.gluon.text, True) is None:
            print(f"{m}x{n}x{k} {kern.plan.short()}: skipped (a second kernel or another form)", flush=True)
            continue
        runs: dict[str, Any] = {"torch": theirs}
        for form in ("plain", "pdl", "pdl_wait"):
            text = kern.gluon.text if form == "plain" else edited(kern.gluon.text, form == "pdl")
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            variant = with_source(kern, text)
            _PDL[0] = form != "plain"
            call = functools.partial(variant.run, a, b, out, sa, sb, bias)
            call()  # builds the launcher now, with this form's launch options
            _PDL[0] = False
            runs[form] = call
        checked({f: r for f, r in runs.items() if f != "torch"}, ref.double(), f"{m}x{n}x{k}")
        ms = interleaved_ms(runs, rounds)
        for form, t in ms.items():
            rows.append({"shape": [m, n, k], "form": form, "plan": kern.plan.short(), "us": t * 1000,
                         "ratio": ms["torch"] / t})
        print(f"{m}x{n}x{k} {kern.plan.short():34s} torch {ms['torch'] * 1000:.2f} us  " + "  ".join(
            f"{f} {ms[f] * 1000:.2f} us ({ms['torch'] / ms[f]:.3f})" for f in ms if f != "torch"), flush=True)
    print(write_rows(rows, out_name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--out", default="pdl-launch.json")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    cross(shapes) if args.cross else gpu(shapes, args.rounds, args.out)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
