"""Launch one warploom kernel a few times for Nsight Compute (session 20): the planner's kernel of a sweep_plans case.

    ncu --kernel-name regex:warploom --launch-skip 2 --launch-count 1 --section SourceCounters \
        --section WarpStateStats -o prof python3 archive/exp/ncu_one.py fp8 4096x7168x2048
    ncu --import prof.ncu-rep --page source --csv --print-source sass > sass.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # scripts/: sweep_plans' cases


def main() -> None:
    import torch
    from sweep_plans import case

    from warploom.device import DeviceInfo
    from warploom.kernel import build

    name, size = sys.argv[1], tuple(int(x) for x in sys.argv[2].split("x"))
    m, n, k = size
    spec, (a, b, sa, sb, bias), _, _ = case(name, (m, n, k))
    kern = build(spec, DeviceInfo.current())
    out = torch.empty((m, n), device="cuda", dtype=spec.out_dtype.torch)
    for _ in range(4):
        kern.run(a, b, out, sa, sb, bias)
    torch.cuda.synchronize()
    print(kern.plan.short())


if __name__ == "__main__":
    main()
