"""Where an eager call's host time goes, part by part (run on the GPU machine; issue 6: <= 10 us over the kernel).

    PYTHONPATH=. python3 archive/exp/host_parts.py [--size 128] [--n 200]

Times each layer of a remembered `warploom.matmul` call on its own, from the whole call down to the compiled
launcher's C entry point with prepared arguments (the floor), beside torch's own calls. Each number is host
microseconds per call, the median of 15 rounds of n calls with the GPU drained between rounds (`host_us`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from _rows import write_rows  # noqa: E402
from profile_host import gelu_residual, gemm_operands  # noqa: E402

import warploom  # noqa: E402
from warploom import api, eager  # noqa: E402


def host_us(calls: dict[str, Callable[[], Any]], n: int, rounds: int = 15) -> dict[str, float]:
    """Per call, the median over rounds of n calls, the GPU drained between rounds: n stays well below CUDA's launch
    queue (~1000 launches), so a round never waits on the GPU and measures the host alone. The calls take turns
    round by round, so a change in the host's speed during the run (runs differ by 1.5x) touches all alike."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for name, fn in calls.items():
            t = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - t) / n * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    s = args.size
    a, b, a8, b8, sa, sb = gemm_operands(s)
    res = torch.randn(s, s, device="cuda", dtype=torch.bfloat16)
    kb = -(-s // 128)
    sa_bw, sb_bw = torch.rand(s, kb, device="cuda") + 0.5, torch.rand(kb, kb, device="cuda") + 0.5
    out = torch.empty(s, s, device="cuda", dtype=torch.bfloat16)
    warploom.matmul(a, b)
    warploom.matmul(a, b)
    k = eager.key("matmul", (a, b), None)
    prepared = eager.get(k)
    assert isinstance(prepared, eager.Prepared)
    launcher = prepared.kernel.launcher
    bound = launcher.bind(a, b, out)
    assert bound is not None, "no bound launch for a compiled single-launch kernel"
    print(f"bound: {prepared.bound!r}")
    main_ = launcher._main
    from triton import knobs
    from triton.runtime.driver import driver

    from warploom.ir.raster import launch_grid
    from warploom.runtime.bound import Call

    call = Call(a, b, out)
    largs = [g(call) for g in launcher._args]
    grid = launch_grid(s, s, launcher._bm, launcher._bn, launcher._grid_max, 1, None)
    dev = driver.active.get_current_device()
    key = main_._key(dev, largs)
    compiled = main_._compiled[key]
    stream = driver.active.get_current_stream(dev)
    flat: list[Any] = []
    for i, x in enumerate(largs):
        flat.extend(compiled._encode(i, x) if i in compiled.descs else [x])
    kk = compiled.kernel
    c = compiled.c_launch
    assert c is not None, "no C entry point: the direct launch falls back to Triton's launcher"
    # (the C function in the installed Triton's argument order: runtime/direct.py's CEntry)
    def floor() -> None:
        c(grid, stream, kk.function, kk.packed_metadata, None, None, None, flat)

    def floor_hooks() -> None:  # what a launch passed before the empty-hook skip
        hooks = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        meta = kk.launch_metadata((grid,), stream, *largs)
        c(grid, stream, kk.function, kk.packed_metadata, meta, *hooks, flat)

    calls: dict[str, Callable[[], Any]] = {
        "torch.matmul": lambda: torch.matmul(a, b),
        "torch.mm(out=)": lambda: torch.mm(a, b, out=out),
        "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True),
        "torch.empty": lambda: torch.empty((s, s), dtype=torch.bfloat16, device=a.device),
        "warploom.matmul": lambda: warploom.matmul(a, b),
        "warploom.scaled_mm": lambda: warploom.scaled_mm(a8, b8, sa, sb, use_fast_accum=True),
        "warploom fused (+ gelu + residual)": lambda: warploom.scaled_mm(a8, b8, sa, sb, use_fast_accum=True,
                                                                        epilogue=gelu_residual, residual=res),
        "warploom blockwise": lambda: warploom.scaled_mm(a8, b8, sa_bw, sb_bw),
        "api._eager": lambda: api._eager(a, b),
        "torch.ops.warploom.matmul": lambda: torch.ops.warploom.matmul(a, b, None),
        "api._matmul_impl": lambda: api._matmul_impl(a, b, None),
        "eager.key": lambda: eager.key("matmul", (a, b), None),
        "Prepared.__call__": lambda: prepared(a, b),
        "Launcher(a, b, out)": lambda: launcher(a, b, out),
        "Bound(a, b, out)": lambda: bound(a, b, out),
        "_Direct.launch": lambda: main_.launch(grid, largs),
        "_Direct._key": lambda: main_._key(dev, largs),
        "CompiledLaunch.launch": lambda: compiled.launch(grid, stream, knobs.runtime.launch_enter_hook,
                                                    knobs.runtime.launch_exit_hook, largs),
        "C launch, prepared args": floor,
        "  same, with empty hooks": floor_hooks,
        "get_current_device": lambda: driver.active.get_current_device(),
        "get_current_stream": lambda: driver.active.get_current_stream(dev),
        "knobs launch hooks": lambda: (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook),
        "a.get_device": lambda: a.get_device(),
        "a.data_ptr": lambda: a.data_ptr(),
        "a.stride()": lambda: a.stride(),
    }
    hook = knobs.runtime.launch_enter_hook
    print(f"enter hook: {hook!r}, calls {getattr(hook, 'calls', '?')}")
    print(f"api._eager(a, b) = {api._eager(a, b)}; dispatch stack {torch._C._len_torch_dispatch_stack()}, "
          f"compiling {torch.compiler.is_compiling()}, grad {torch.is_grad_enabled()}, requires_grad "
          f"{a.requires_grad} {b.requires_grad}, fake {isinstance(a, torch._subclasses.fake_tensor.FakeTensor)}")
    rows = []
    for name, us in host_us(calls, args.n).items():
        rows.append({"call": name, "host_us": round(us, 2), "size": s})
        print(f"{name:26s} {us:8.2f} us", flush=True)
    print(write_rows(rows, "host-parts.json"))


if __name__ == "__main__":
    main()
