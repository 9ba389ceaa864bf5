"""Experiment (session 18, issue 6): why rule 18's built swap-AB kernel trailed the hand-written probe for bf16.

At 16x4096x4096 bf16 the probe (archive/exp/decode_swap.py, mt16_s12) ran at 0.98x torch and the kernel warploom
built for the same schedule at 0.59x, though their Gluon differed only in the producer's tile coordinates
(`tile_coords`, three run-time divisions a k-step), the epilogue (a transposed TMA store against a pointer store),
and the kernel-wide register cap (maxnreg). Two runs (docs/benchmarks.md session 18) found the coordinates were the
gap: maxnreg changed nothing, computing them under `if kk == 0` half helped, and the producer's loop as a (tile, k)
nest matched the probe. warploom now emits that nest, so the earlier forms are not reproduced here: this compares
the kernel warploom emits with the same kernel's coordinates computed without any division (one column of tiles,
`direct`) and with the probe, all against torch in one process.

    PYTHONPATH=. python3 archive/exp/swap_gap.py [--rounds 5]     # GPU: $OUT/swap-gap.json
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _rows import checked, decode_problem, interleaved_ms, with_source, write_rows  # noqa: E402

SHAPES = [(16, 4096, 4096), (1, 4096, 4096), (16, 4096, 14336), (16, 8192, 8192)]
COORDS = "off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)"


def direct_coords(text: str) -> str:
    """The producer's and consumer's tile origin without the grouped raster: valid when C^T has one column of tiles
    (M <= BN), as at decode."""
    assert text.count(COORDS) >= 2
    return text.replace(COORDS, "off_m, off_n = tile_id * BM, 0")


def gpu(rounds: int) -> None:
    import torch
    from decode_swap import _launch, _layout, _load
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    import warploom

    rows = []
    for dtype in ("bf16", "fp8e4nv"):
        for m, n, k in SHAPES:
            a, w, runs, ref = decode_problem("bf16" if dtype == "bf16" else "fp8", m, n, k)
            scales = () if dtype == "bf16" else (torch.ones((), device="cuda"),) * 2
            base = warploom.plan(a, w.t(), *scales, use_fast_accum=True)
            assert base.plan.swap_ab, base.plan.short()
            variants = {"built": base, "direct": with_source(base, direct_coords(base.gluon.text))}
            for name, kern in variants.items():
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                runs[name] = functools.partial(kern.run, a, w.t(), out, *scales)
            bk = 64 if dtype == "bf16" else 128
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            wd = TensorDescriptor.from_tensor(w, [64, bk], _layout(dtype))
            xd = TensorDescriptor.from_tensor(a, [16, bk], _layout(dtype))
            runs["probe"] = functools.partial(_launch, _load(dtype, 16, 12), min(132, -(-n // 64)), wd, xd, out, m, n,
                                              k)
            checked(runs, ref, f"{dtype} {m}x{n}x{k}")
            ms = interleaved_ms(runs, rounds)
            for name, t in ms.items():
                rows.append({"dtype": dtype, "shape": [m, n, k], "variant": name, "ms": t, "ratio": ms["torch"] / t})
                print(f"{dtype} {m}x{n}x{k} {name:34s} {t * 1e3:8.1f} us  ratio vs torch {ms['torch'] / t:.3f}",
                      flush=True)
    print(write_rows(rows, "swap-gap.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    gpu(ap.parse_args().rounds)


if __name__ == "__main__":
    main()
