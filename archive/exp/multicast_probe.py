"""Experiment (session 14, CPU only): does Triton 3.6's Gluon emit TMA multicast for a 2-CTA cluster?

cuBLAS's H100 GEMMs all run in clusters of 2 (or 8) CTAs that share operand tiles through TMA multicast
(docs/benchmarks.md, session 14). This compiles one TMA load for sm_90a three ways and prints the PTX copy
instructions:
- one CTA;
- `num_ctas=2` with a broadcast CGA layout (`cga_layout=[[0, 0]]`: both CTAs hold the same box);
- `num_ctas=2` with a split one (`[[1, 0]]`: each CTA holds half the rows).

Result (2026-11-23, Triton 3.6): both cluster variants compile (`.reqnctapercluster 2`). The split layout offsets
each CTA's box by `%cluster_ctarank`. The broadcast one issues the same `cp.async.bulk.tensor` in each CTA, with no
`.multicast::cluster`: Gluon 3.6 has clusters, but no multicast on Hopper.

Result (2026-11-27, Triton 3.9, `--multicast`): `tma.async_load(..., multicast=True)` into a broadcast layout
(`cga_layout=[[0, 0]]`) emits `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.
multicast::cluster` with a CTA mask, the expect-tx is per CTA (`mbarrier.arrive.expect_tx.shared::cluster`, 16384
bytes), and the barrier needs a cluster layout too (`MBarrierLayout.multicta(2)`; a plain one is refused: "Layout
has 1 CTAs per CGA, but the context requires 2"). A split layout (`[[1, 0]]`) with multicast=True emits no multicast
(each CTA loads its own half). Also in 3.9: `async_copy_shared_to_global` is gone (`async_store`).

    python3 archive/exp/multicast_probe.py                 # Triton 3.6
    /tmp/warploom-triton39/bin/python archive/exp/multicast_probe.py --multicast   # Triton >= 3.7.1
"""

from __future__ import annotations

SOURCE = '''
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, fence_async_shared


@gluon.jit
def probe(b_desc, out_desc):
    smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()
    mbarrier.expect(bar, b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(b_desc, [0, 0], bar, smem)
    mbarrier.wait(bar, 0)
    tma.async_copy_shared_to_global(out_desc, [0, 0], smem)
    tma.store_wait(0)
'''

# Triton >= 3.7.1: multicast on Hopper; the barrier takes the cluster's layout.
SOURCE_MULTICAST = (SOURCE.replace("mbarrier.MBarrierLayout()", "mbarrier.MBarrierLayout.multicta(2)")
                    .replace("tma.async_copy_global_to_shared(b_desc, [0, 0], bar, smem)",
                             "tma.async_load(b_desc, [0, 0], bar, smem, multicast=True)")
                    .replace("tma.async_copy_shared_to_global(", "tma.async_store("))


def ptx_copies(cga: list[list[int]], num_ctas: int, source: str = SOURCE) -> list[str]:
    """The PTX lines of the TMA copies and the cluster directives, compiled for sm_90a."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.runtime.loader import load

    layout = gl.NVMMASharedLayout(128, 16, 2, cga_layout=cga)
    desc = f"tensordesc<bf16[128, 64],{layout!r}>"
    ck = triton.compile(GluonASTSource(load(source, "probe"), {"b_desc": desc, "out_desc": desc}, {}, {}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": num_ctas})
    return [line.strip() for line in ck.asm["ptx"].splitlines()
            if "cp.async.bulk.tensor" in line or "cluster" in line or "expect_tx" in line]


def main() -> None:
    import sys

    multicast = "--multicast" in sys.argv[1:]
    cases = (([[0, 0]], 2), ([[1, 0]], 2)) if multicast else (([], 1), ([[0, 0]], 2), ([[1, 0]], 2))
    for cga, ctas in cases:
        lines = ptx_copies(cga, ctas, SOURCE_MULTICAST if multicast else SOURCE)
        print(f"num_ctas={ctas} cga_layout={cga}: multicast={any('multicast' in x for x in lines)}")
        for line in lines:
            print("   ", line)


if __name__ == "__main__":
    main()
