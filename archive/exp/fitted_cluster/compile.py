"""Cross-compile session 38's hand-written fitted-tile cluster kernels for sm_90a (CPU only, Triton >= 3.7).

A fitted tile (rule 32: 128 rows, blocks 128+16 or 128+64) in a 2x1 cluster whose lead multicasts B's block boxes
(rule 24), consumers splitting rows with one A box per warpgroup (each box 64 rows in each CTA). Written by hand from
the generated fitted kernel (`fitted_to_fc144_min.diff`: the edits a backend would emit); compiled, never run.

    PYTHONPATH=. /tmp/warploom-triton39/bin/python archive/exp/fitted_cluster/compile.py [NAME]

(NAME: fc144_min, the default; fc144_rowsplit; fc192_rowsplit.)

Prints registers, spills, shared memory and the SASS's multicast TMA loads (session 38: 2 UTMALDG.2D.MULTICAST, 0
spills, 225,624 B at 6 stages for fc144_min)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from warploom.backends import gluon_api
from warploom.dtypes import DType
from warploom.runtime.cross import _assemble, shared_layout

HERE = Path(__file__).resolve().parent
SPLIT, BROADCAST = ((1, 0),), ((0, 0),)  # cga layouts: each CTA its rows; every CTA the whole box (B, multicast)
FITTED_KERNEL = "warploom_bf16bf16_bf16_bk_major_128x256x64_s6_w8_g8_e4_p2_n128_16"
# name -> (kernel function, descriptor boxes and layouts by parameter)
CASES = {
    "fc144_min": (FITTED_KERNEL, {"a_desc": ([128, 64], SPLIT), "b_desc_w128": ([128, 64], BROADCAST),
                                  "b_desc_w16": ([16, 64], BROADCAST), "c_desc": ([128, 64], SPLIT),
                                  "c_desc_w16": ([128, 16], SPLIT)}),
    "fc144_rowsplit": ("fitcluster", {"a_desc": ([128, 64], SPLIT), "b_desc_w128": ([128, 64], BROADCAST),
                                      "b_desc_w16": ([16, 64], BROADCAST), "c_desc": ([128, 64], SPLIT),
                                      "c_desc_w16": ([128, 16], SPLIT)}),
    "fc192_rowsplit": ("fitcluster", {"a_desc": ([128, 64], SPLIT), "b_desc_w128": ([128, 64], BROADCAST),
                                      "b_desc_w64": ([64, 64], BROADCAST), "c_desc": ([128, 64], SPLIT),
                                      "c_desc_w16": ([128, 16], SPLIT)}),
}


def load_module(name: str) -> Any:
    """The hand-written kernel file `name`.gluon as a module (Gluon's JIT reads a function's source and module)."""
    path = HERE / f"{name}.gluon"
    loader = importlib.machinery.SourceFileLoader(f"fitted_cluster_{name}", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


def main(name: str) -> None:
    from triton.experimental.gluon._runtime import GluonASTSource

    kernel, descs = CASES[name]
    module = load_module(name)
    sig = {p: f"tensordesc<bf16[{', '.join(map(str, box))}],{shared_layout(DType.BF16, box, cga)!r}>"
           for p, (box, cga) in descs.items()}
    sig.update({"M": "i32", "N": "i32", "K": "i32"})
    opts = gluon_api.compile_options(num_warps=4, num_stages=1, num_ctas=2, maxnreg=168)
    c = _assemble(GluonASTSource(getattr(module, kernel), sig, {}, {}), opts, "sm_90a", 90)
    loads = re.findall(r"UTMALDG[^\n]*", c.sass)
    multicast = sum("MULTICAST" in line for line in loads)
    print(f"{name}: registers {c.registers}, spills {c.spills}, shared memory {c.smem_bytes} B, "
          f"HGMMA {c.count('HGMMA')}, UTMALDG {len(loads)}, multicast {multicast}, "
          f"serialized wgmma {c.wgmma_serialized}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fc144_min")
