"""Experiment (session 17, issue 6): the planner's decode kernel with two accumulators taken in turn.

Rule 16's 64x64 decode kernel is latency-bound where few CTAs run (N = 4096: 64 tiles, so 64 CTAs). Each k-block's
wgmma adds into the accumulator the previous one is still writing, so the tensor core runs them one after another
(about 300 ns a k-block at K = 14336, against ~70 ns of work; docs/benchmarks.md session 17). Here even k-blocks
accumulate into `acc` and odd ones into `acc1`, summed after the k-loop: with wait(1), the two wgmma in flight no
longer depend on each other. A text transform of the generated Gluon (K must be an even number of k-blocks).

    PYTHONPATH=. python3 archive/exp/decode_dual_acc.py --cross
    PYTHONPATH=. python3 archive/exp/decode_dual_acc.py [--rounds 5]   # GPU: $OUT/decode-dual-acc.json
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _rows import checked, interleaved_ms, with_source, write_rows  # noqa: E402

from warploom import checks  # noqa: E402
from warploom.device import H100_SXM, DeviceInfo  # noqa: E402
from warploom.kernel import Kernel, build  # noqa: E402
from warploom.planner import plan_schedule  # noqa: E402


def dual(text: str) -> str:
    lines, out, i = text.split("\n"), [], 0
    done = 0
    while i < len(lines):
        ln = lines[i]
        if ln.strip() != "for kk in range(k_tiles):  # for k":
            out.append(ln)
            i += 1
            continue
        ind = ln[: len(ln) - len(ln.lstrip())]
        i2 = ind + "    "
        wait, mma, _, arrive, adv = (lines[i + 1 + t].strip().split("  #")[0] for t in range(5))
        assert wait.startswith("mbarrier.wait(ready") and mma.startswith("acc = warpgroup_mma(") and adv == "c += 1"
        mma1 = mma.replace("acc = ", "acc1 = ").replace(", acc, use_acc", ", acc1, use_acc")
        arrive_all = arrive.split(", pred=")[0] + ")"
        drain = [lines[i + 6].strip(), lines[i + 7].strip()]
        assert drain[0].startswith("acc = warpgroup_mma_wait(0")
        out += [f"{ind}acc1 = gl.zeros([64, BN], gl.float32, acc_layout)",
                f"{ind}for kk in range(0, k_tiles, 2):  # even k-blocks into acc, odd into acc1",
                i2 + wait, i2 + mma, i2 + "acc, acc1 = warpgroup_mma_wait(1, deps=(acc, acc1))", i2 + arrive, i2 + adv,
                i2 + wait, i2 + mma1, i2 + "acc, acc1 = warpgroup_mma_wait(1, deps=(acc, acc1))", i2 + arrive_all,
                i2 + adv,
                ind + "acc, acc1 = warpgroup_mma_wait(0, deps=(acc, acc1))", ind + drain[1], ind + "acc = acc + acc1"]
        i += 8
        done += 1
    assert done == 1, done
    return "\n".join(out)


def _spec(dtype: str, m: int, n: int, k: int, device: str) -> tuple[Any, tuple[Any, ...]]:
    if dtype == "bf16":
        a = torch.randn(m, k, device=device).to(torch.bfloat16)
        w = torch.randn(n, k, device=device).to(torch.bfloat16)
        return checks.matmul_spec(a, w.t(), None), (a, w.t(), None, None)
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    return checks.scaled_mm_spec(a, w.t(), one, one, None, torch.bfloat16, True), (a, w.t(), one, one)


def variant(kern: Kernel, name: str) -> Kernel:
    if name == "base":
        return kern
    return with_source(kern, dual(kern.gluon.text))


def cross() -> None:
    from warploom.targets import cross_compile

    for dtype in ("bf16", "fp8"):
        spec, _ = _spec(dtype, 16, 4096, 4096, "meta")
        base = build(spec, H100_SXM, plan_schedule(spec, H100_SXM))
        for name in ("base", "dual"):
            kern = variant(base, name)
            print(dtype, name, kern.plan.short(), cross_compile(kern.module, kern.gluon).summary())


SHAPES = [(16, 4096, 4096), (16, 4096, 14336), (1, 4096, 14336), (16, 8192, 8192)]


def run_variants(variants: dict[str, Callable[[Kernel, int], Kernel | None]], rounds: int, out_name: str) -> None:
    """Each variant of the planner's kernel (given the kernel and M, a rewrite of it, or None where it does not
    apply) against the planner's own and torch, at SHAPES for bf16 and fp8: every output checked against the fp32
    product first."""

    rows = []
    for dtype in ("bf16", "fp8"):
        for m, n, k in SHAPES:
            spec, x = _spec(dtype, m, n, k, "cuda")
            a, b, sa, sb = x
            ref = a.float() @ b.float()
            dev = DeviceInfo.current()
            theirs: Any = (functools.partial(torch.matmul, a, b) if dtype == "bf16" else
                           functools.partial(torch._scaled_mm, a, b, sa, sb, out_dtype=torch.bfloat16,
                                             use_fast_accum=True))
            runs: dict[str, Any] = {"torch": theirs}
            base = build(spec, dev, plan_schedule(spec, dev))
            for name, make in {"base": lambda kern, m: kern, **variants}.items():
                kern = make(base, m)
                if kern is None:
                    continue
                out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
                runs[name] = functools.partial(kern.run, a, b, out, sa, sb)
            checked({k_: f for k_, f in runs.items() if k_ != "torch"}, ref.double(), f"{dtype} {m}x{n}x{k}")
            ms = interleaved_ms(runs, rounds)
            for name, t in ms.items():
                rows.append({"dtype": dtype, "shape": [m, n, k], "variant": name, "plan": base.plan.short(),
                             "ms": t, "ratio": ms["torch"] / t})
                print(f"{dtype} {m}x{n}x{k} {name:6s} {t * 1e3:8.1f} us  ratio vs torch {ms['torch'] / t:.3f}",
                      flush=True)
    print(write_rows(rows, out_name))


def gpu(rounds: int) -> None:
    run_variants({"dual": lambda kern, m: variant(kern, "dual")}, rounds, "decode-dual-acc.json")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--cross", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cross() if args.cross else gpu(args.rounds)
