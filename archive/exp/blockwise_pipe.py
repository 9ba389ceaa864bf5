"""Experiment (session 19, issue 5): keep a wgmma in flight while a blockwise warpgroup promotes.

The planner's blockwise kernel (128x256, two column blocks of 128: `_h2`) runs, per k-block and warpgroup,
wgmma into the partial, wait for 0, promote, and again for the second block: the warpgroup's tensor-core work
drains twice per k-block and only the other warpgroup's wgmma fill the gaps (pipeline_mma.py). With four column
blocks of 64 (`partial_blocks=4`, `_h4`) two 64x64 partials fit the registers of one 64x128 partial, so a
warpgroup can issue block i + 1 before it waits for block i and promote block i while block i + 1 runs:

    p0 = mma(b0); p1 = mma(b1); wait(1); acc0 += p0 * s; p0 = mma(b2); wait(1); acc1 += p1 * s; p1 = mma(b3);
    wait(1); acc2 += p0 * s; wait(0); acc3 += p1 * s

This rewrites the compiler's `_h4` kernel text into that order (a text transform, not a pass: it answers whether
the schedule is worth building). Variants: the planner's `_h2`, `_h4` as compiled (one partial, wait 0 per
block), and `_h4` pipelined; `--cross` compiles them for sm_90a (registers, spills, C7514) without a GPU.

    PYTHONPATH=. python3 archive/exp/blockwise_pipe.py --cross
    PYTHONPATH=. python3 archive/exp/blockwise_pipe.py [--rounds 5]     # GPU: $OUT/blockwise-pipe.json
"""

from __future__ import annotations

from typing import Any

from _rows import checked, cross_or_gpu, interleaved_ms, with_source, write_rows

SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 7168, 16384), (4096, 4096, 7168), (4096, 7168, 2048)]


def pipelined(text: str) -> str:
    """Rewrite each consumer's k-loop of column blocks (mma, wait 0, scale loads, promote, wait 0: six lines a
    block) into two partials with one wgmma in flight (module docstring)."""
    lines = text.split("\n")
    out: list[str] = []
    i, done = 0, 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip().startswith("partial = gl.zeros(") and "# zero" not in ln:
            out += [ln, ln.replace("partial =", "partial2 =")]
            i += 1
            continue
        if not (ln.strip().startswith("partial = warpgroup_mma(") and "overwrite=always" in ln):
            out.append(ln)
            i += 1
            continue
        blocks: list[list[str]] = []
        while i < len(lines) and lines[i].strip().startswith("partial = warpgroup_mma("):
            blk = lines[i:i + 6]
            assert "warpgroup_mma_wait(0, deps=(partial,))" in blk[1], blk[1]
            assert blk[5].strip().endswith("# keep the promotion before the next wgmma"), blk[5]
            blocks.append(blk)
            i += 6
        n = len(blocks)
        assert n >= 2, n

        def part(j: int) -> str:
            return "partial" if j % 2 == 0 else "partial2"

        def issue(j: int, blocks: list[list[str]] = blocks) -> str:
            return blocks[j][0].replace("partial = warpgroup_mma(", f"{part(j)} = warpgroup_mma(", 1).replace(
                ", partial, use_acc=False", f", {part(j)}, use_acc=False")

        ind = blocks[0][0][: len(blocks[0][0]) - len(blocks[0][0].lstrip())]
        out += [issue(0), issue(1)]
        for j in range(n):
            pending = 1 if j + 1 < n else 0
            out.append(f"{ind}{part(j)} = warpgroup_mma_wait({pending}, deps=({part(j)},))")
            out += [blocks[j][2], blocks[j][3]]
            out.append(blocks[j][4].replace("+ partial *", f"+ {part(j)} *"))
            if j + 2 < n:
                out.append(issue(j + 2))
        done += 1
    assert done >= 1, "no column-block k-loop found"
    return "\n".join(out)


def _spec(m: int, n: int, k: int) -> Any:
    from warploom.dtypes import DType
    from warploom.spec import Accumulation, GemmSpec, ScaleRecipe

    return GemmSpec(m, n, k, DType.E4M3, DType.E4M3, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                    accumulation=Accumulation.PROMOTED)


def variants(spec: Any, device: Any) -> dict[str, Any]:
    from warploom.kernel import build
    from warploom.planner import plan_schedule

    out: dict[str, Any] = {"planner": build(spec, device)}
    h4 = build(spec, device, plan_schedule(spec, device, partial_blocks=4))
    out["h4"] = h4
    out["h4_pipelined"] = with_source(h4, pipelined(h4.gluon.text))
    return out


def cross() -> None:
    from warploom.device import H100_SXM
    from warploom.targets import cross_compile

    for name, kern in variants(_spec(4096, 4096, 4096), H100_SXM).items():
        c = cross_compile(kern.module, kern.gluon)
        print(f"{name:14s} {kern.plan.short():34s} regs {c.registers} spills {c.spills} C7514 {c.wgmma_serialized} "
              f"smem {c.smem_bytes} HGMMA/QGMMA {c.count('QGMMA')}", flush=True)


def gpu(rounds: int) -> None:
    rows = [r for m, n, k in SIZES for r in size_rows(m, n, k, rounds)]
    print(write_rows(rows, "blockwise-pipe.json"))


def size_rows(m: int, n: int, k: int, rounds: int) -> list[dict[str, Any]]:
    import torch

    from warploom.device import DeviceInfo
    from warploom.reference import dequantized

    dev = DeviceInfo.current()
    torch.manual_seed(0)
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    sa = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
    sb = (torch.rand(k // 128, n // 128, device="cuda") + 0.5).t().contiguous().t()  # as torch takes it
    ad, bd = dequantized(a, b, sa, sb)
    ref = ad.double() @ bd.double()
    runs: dict[str, Any] = {"torch": lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)}
    for name, kern in variants(_spec(m, n, k), dev).items():
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        runs[f"{name} {kern.plan.short()}"] = lambda kern=kern, out=out: kern.run(a, b, out, sa, sb)
    checked({name: f for name, f in runs.items() if name != "torch"}, ref, f"{m}x{n}x{k}")
    ms = interleaved_ms(runs, rounds)
    t = ms.pop("torch")
    rows = []
    for name, v in ms.items():
        tf = 2 * m * n * k / v / 1e9
        print(f"{m}x{n}x{k} {name:52s} {v * 1e3:8.1f} us {tf:7.1f} TFLOP/s ratio {t / v:.3f}", flush=True)
        rows.append({"size": [m, n, k], "variant": name, "ms": v, "torch_ms": t, "ratio": t / v})
    return rows


if __name__ == "__main__":
    cross_or_gpu(cross, gpu)
