"""Experiment (session 18): does the producer's (tile, k) nest change large GEMMs too?

Session 18 emits the producer's FLAT loop as a (tile, k) nest (backends/gluon_sm90.py): the flat loop's run-time
divisions every k-step held decode kernels back. Here the planner's kernels at large shapes run both ways, the nest
(what warploom emits) against the flat loop it emitted before (this script's text transform back), interleaved with
torch in one process, graph-timed; every output checked against the fp32 product first.

    PYTHONPATH=. python3 archive/exp/producer_nest.py --cross          # both forms compile, no spills
    PYTHONPATH=. python3 archive/exp/producer_nest.py [--rounds 5] [--cases blockwise]  # GPU: $OUT/producer-nest.json
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # scripts/: sweep_plans' cases
from _rows import variants_main  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 28672, 4096), (4096, 4096, 14336)]
CASES = ("bf16", "fp8", "fp8-exact")  # (the first GPU run's; --cases blockwise the second's)
NEST = re.compile(r"    for tile_id in range\(pid, num_tiles, gl.num_programs\(0\)\):  # for tiles\*k \(flattened: one "
                  r"sequence of \(tile, k\) steps\)\n"
                  r"        off_m, off_n = tile_coords\(tile_id, num_pid_m, num_pid_n\)\n"
                  r"        for kk in range\(k_tiles\):\n((?:            .*\n)+)")


def flat(text: str) -> str:
    """The producer's nest back to the flat loop warploom emitted before session 18 (coordinates every k-step)."""
    m = NEST.search(text)
    assert m, "no producer nest"
    body = "".join(line[4:] + "\n" for line in m.group(1).splitlines())
    loop = ("    my_tiles = gl.cdiv(num_tiles - pid, gl.num_programs(0))\n"
            "    for t in range(my_tiles * k_tiles):  # for tiles*k (flattened)\n"
            "        tile_id = pid + (t // k_tiles) * gl.num_programs(0)\n"
            "        kk = t % k_tiles\n"
            "        off_m, off_n = tile_coords(tile_id, num_pid_m, num_pid_n)\n" + body)
    return text[:m.start()] + loop + text[m.end():]


def _forms(case: str, text: str) -> dict[str, str]:
    return {"nest": text, "flat": flat(text)}


def main() -> None:
    variants_main(__doc__, CASES, SHAPES, _forms, "producer-nest.json")


if __name__ == "__main__":
    main()
