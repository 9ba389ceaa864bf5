"""Experiment (session 14, CPU only): does Triton 3.6's Gluon emit TMA multicast for a 2-CTA cluster?

cuBLAS's H100 GEMMs all run in clusters of 2 (or 8) CTAs that share operand tiles through TMA multicast
(docs/benchmarks.md, session 14). This compiles one TMA load for sm_90a three ways and prints the PTX copy
instructions:
- one CTA;
- `num_ctas=2` with a broadcast CGA layout (`cga_layout=[[0, 0]]`: both CTAs hold the same box);
- `num_ctas=2` with a split one (`[[1, 0]]`: each CTA holds half the rows).

Result (2026-11-23): both cluster variants compile (`.reqnctapercluster 2`). The split layout offsets each CTA's
box by `%cluster_ctarank`. The broadcast one issues the same `cp.async.bulk.tensor` in each CTA, with no
`.multicast::cluster`: Gluon 3.6 has clusters, but no multicast on Hopper.

    python3 archive/exp/multicast_probe.py
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


def ptx_copies(cga: list[list[int]], num_ctas: int) -> list[str]:
    """The PTX lines of the TMA copies and the cluster directives, compiled for sm_90a."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from warploom.runtime.loader import load

    layout = gl.NVMMASharedLayout(128, 16, 2, cga_layout=cga)
    desc = f"tensordesc<bf16[128, 64],{layout!r}>"
    ck = triton.compile(GluonASTSource(load(SOURCE, "probe"), {"b_desc": desc, "out_desc": desc}, {}, {}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_ctas": num_ctas})
    return [line.strip() for line in ck.asm["ptx"].splitlines()
            if "cp.async.bulk.tensor" in line or "cluster" in line]


def main() -> None:
    for cga, ctas in (([], 1), ([[0, 0]], 2), ([[1, 0]], 2)):
        lines = ptx_copies(cga, ctas)
        print(f"num_ctas={ctas} cga_layout={cga}: multicast={any('multicast' in x for x in lines)}")
        for line in lines:
            print("   ", line)


if __name__ == "__main__":
    main()
