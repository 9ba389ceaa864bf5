"""One kernel per recipe and schedule family at a small odd shape, each checked against its fp32 reference, for
compute-sanitizer (issue 28: memcheck, racecheck, synccheck with zero reports). `scripts/gpu.sh sanitize` runs each
case in its own process under each tool:

    python3 scripts/sanitize.py --list                 # the cases, one a line
    python3 scripts/sanitize.py --case fp8_blockwise   # plan, build, run once, compare; exit 1 on a wrong result
    compute-sanitizer --tool racecheck --error-exitcode 99 python3 scripts/sanitize.py --case bf16_stream_k

`--plans` prints every case's plan without a GPU (tests/unit/test_sanitize_cases.py checks each case still plans
the family it names, so a planner change cannot quietly turn the sweep into fifteen copies of one schedule).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import DeviceInfo
from warploom.kernel import Kernel, build
from warploom.planner import Plan, plan_schedule
from warploom.reference import Inputs, make_inputs, reference, relative_error

E4 = DType.E4M3
# Where the public-API cases (SPECIAL) run: the GPU; tests/unit/test_sanitize_cases.py runs them on the CPU
# simulator to check their references.
DEVICE = "cuda"
# A scale-free error no correct kernel of these recipes comes near (bf16 and fp8 outputs round at ~1e-5).
TOLERANCE = 1e-3


@dataclass(frozen=True)
class Case:
    """A GEMM (`spec` at `shape`), the plan options that force its schedule family, and what the plan must show."""

    spec: GemmSpec
    shape: tuple[int, int, int]
    forced: dict[str, Any] = field(default_factory=dict)
    family: Callable[[Plan], bool] = lambda p: True
    needs_multicast: bool = False  # (2-CTA clusters: Triton >= 3.7)


def _bf16(m: int, n: int, k: int, n_major: bool = False) -> GemmSpec:
    return GemmSpec(m, n, k, b_layout=BLayout.N_MAJOR if n_major else BLayout.K_MAJOR)


def _fp8(m: int, n: int, k: int, scale: ScaleRecipe, promoted: bool = False) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=scale,
                    accumulation=Accumulation.PROMOTED if promoted else Accumulation.NATIVE)


CASES: dict[str, Case] = {
    "bf16_cooperative": Case(_bf16(300, 520, 1000), (300, 520, 1000), {"bm": 128, "bn": 256},
                             lambda p: p.consumer_partitions >= 1 and not p.pingpong and p.split_k == 1),
    "bf16_n_major": Case(_bf16(300, 520, 1000, n_major=True), (300, 520, 1000), {},
                         lambda p: p.split_k == 1),
    "bf16_pingpong": Case(_bf16(1000, 1032, 776), (1000, 1032, 776), {"pingpong": True}, lambda p: p.pingpong),
    "bf16_split_k": Case(_bf16(300, 520, 4096), (300, 520, 4096), {"bm": 128, "bn": 128, "split_k": 4},
                         lambda p: p.split_k == 4),
    "bf16_split_k_uneven": Case(_bf16(300, 520, 7 * 64 - 24), (300, 520, 7 * 64 - 24),
                                {"bm": 128, "bn": 128, "split_k": 3}, lambda p: p.split_k == 3),  # (3, 2, 2)
    "bf16_decode_split": Case(_bf16(8, 104, 5240), (8, 104, 5240), {},
                              lambda p: p.bm == 64 and p.split_k > 1 and not p.swap_ab),  # (rule 25 at decode sizes)
    "bf16_tail": Case(_bf16(2000, 2056, 4608), (2000, 2056, 4608), {"bm": 128, "bn": 128, "tail_split": 2},
                      lambda p: p.tail_split == 2),
    "bf16_stream_k": Case(_bf16(384, 752, 5312), (384, 752, 5312), {"bn": 128, "stream_k": 3},
                          lambda p: p.stream_k == 3),
    "bf16_swap_ab": Case(_bf16(8, 4096, 1032), (8, 4096, 1032), {"swap_ab": True}, lambda p: p.swap_ab),
    "bf16_latency": Case(_bf16(284, 312, 984), (284, 312, 984), {"bm": 64, "bn": 64}, lambda p: p.bm == 64),
    "fp8_tensorwise": Case(_fp8(300, 528, 1024, ScaleRecipe.TENSORWISE), (300, 528, 1024)),
    "fp8_rowwise": Case(_fp8(1000, 1040, 1024, ScaleRecipe.ROWWISE), (1000, 1040, 1024), {},
                        lambda p: p.bm == 128),
    "fp8_rowwise_promoted": Case(_fp8(300, 528, 1024, ScaleRecipe.ROWWISE, promoted=True), (300, 528, 1024)),
    "fp8_blockwise": Case(_fp8(300, 528, 1040, ScaleRecipe.BLOCKWISE_1X128_128X128, promoted=True),
                          (300, 528, 1040), {}, lambda p: p.bk == 128),
    "fp8_blockwise_split_k": Case(_fp8(64, 528, 4096, ScaleRecipe.BLOCKWISE_1X128_128X128, promoted=True),
                                  (64, 528, 4096), {"split_k": 2}, lambda p: p.split_k == 2),
    "fp8_mx": Case(_fp8(300, 528, 1024, ScaleRecipe.MX, promoted=True), (300, 528, 1024)),
    "bf16_cluster": Case(_bf16(4634, 4968, 1000), (4634, 4968, 1000), {"cluster": 2}, lambda p: p.cluster == 2,
                         needs_multicast=True),
    "bf16_cluster_1x2": Case(_bf16(300, 1300, 1000), (300, 1300, 1000), {"cluster": "1x2"},
                             lambda p: p.cluster == 2 and p.cluster_n, needs_multicast=True),
    "fp8_cluster_promoted": Case(_fp8(300, 528, 1024, ScaleRecipe.ROWWISE, promoted=True), (300, 528, 1024),
                                 {"cluster": 2}, lambda p: p.cluster == 2 and p.partial_blocks == 4,
                                 needs_multicast=True),
    "fp8_cluster_blockwise": Case(_fp8(300, 528, 1040, ScaleRecipe.BLOCKWISE_1X128_128X128, promoted=True),
                                  (300, 528, 1040), {"cluster": 2}, lambda p: p.cluster == 2, needs_multicast=True),
}


def plan_of(name: str, device: DeviceInfo) -> Plan:
    """The case's plan on `device`, its family checked (a `ValueError` naming the case if the planner no longer
    gives it)."""
    c = CASES[name]
    plan = plan_schedule(c.spec, device, **c.forced)
    if not c.family(plan):
        raise ValueError(f"case {name}: plan {plan.short()} is not the family the case names; change its forced "
                         "options")
    return plan


def _cuda(x: Any) -> Any:
    return x.cuda() if isinstance(x, torch.Tensor) else x


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def run_grouped() -> float:
    """A bf16 M-grouped GEMM (rule 22) over 5 experts with ragged offsets and an empty expert, against a loop of
    fp32 products."""
    import warploom

    torch.manual_seed(5)
    rows = [300, 0, 77, 512, 129]
    offs = torch.tensor(rows, device=DEVICE).cumsum(0).to(torch.int32)
    a = torch.randn(sum(rows), 1000, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(len(rows), 520, 1000, device=DEVICE, dtype=torch.bfloat16)
    out = warploom.grouped_mm(a, w.transpose(-2, -1), offs)
    _sync()
    starts = [0, *offs.tolist()[:-1]]
    ends = offs.tolist()
    want = torch.cat([a[s:e].float() @ w[g].float().t() for g, (s, e) in enumerate(zip(starts, ends, strict=True))])
    return relative_error(out.float(), want)


def run_grouped_stream_k() -> float:
    """Rule 22's own stream-K (`last_round_stream_k`): a bf16 M-grouped GEMM whose expected last round is under half
    full, so the planner shares it in pieces, over 3 experts with an empty one (272 tiles of 128x256: two rounds and
    8 tiles, each in 2 pieces), against a loop of fp32 products."""
    import warploom
    from warploom.api import device_for
    from warploom.checks_grouped import grouped_call
    from warploom.planner import plan_schedule

    torch.manual_seed(23)
    rows, n, k = [0, 1950, 2200], 1800, 128  # (2 k-blocks and N 1800 keep it within the CPU simulator's budget)
    offs = torch.tensor(rows, device=DEVICE).cumsum(0).to(torch.int32)
    a = torch.randn(sum(rows), k, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(len(rows), n, k, device=DEVICE, dtype=torch.bfloat16)
    b = w.transpose(-2, -1)
    plan = plan_schedule(grouped_call(a, b, offs, None, torch.bfloat16).spec, device_for(a))  # (grouped_mm's device)
    assert plan.stream_k == 2, f"the case wants rule 22's stream-K, the planner gave {plan.short()}"
    out = warploom.grouped_mm(a, b, offs)
    _sync()
    starts = [0, *offs.tolist()[:-1]]
    want = torch.cat([a[s:e].float() @ w[g].float().t() for g, (s, e) in enumerate(zip(starts, offs.tolist(),
                                                                                         strict=True))])
    return relative_error(out.float(), want)


def run_fused() -> float:
    """An fp8 rowwise GEMM whose epilogue adds a bias, applies gelu, adds a residual and quantizes the result to fp8
    with 1x128 scales (rules 26 and the fused epilogue), into NaN-poisoned outputs, against the fp32 value of the
    same epilogue, dequantized."""
    import torch.nn.functional as F

    import warploom

    torch.manual_seed(7)
    m, n, k = 300, 528, 1040
    a = torch.randn(m, k, device=DEVICE).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=DEVICE).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1, device=DEVICE) + 0.5, torch.rand(1, n, device=DEVICE) + 0.5
    bias, res = torch.randn(n, device=DEVICE), torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)

    def ep(acc: Any, res: Any) -> Any:  # (acc holds the scaled product plus bias)
        return warploom.quantize(F.gelu(acc) + res, dtype=torch.float8_e4m3fn)

    kern = warploom.plan(a, b, sa, sb, bias=bias, epilogue=ep, res=res)
    q = torch.full((m, n), math.nan, device=DEVICE).to(torch.float8_e4m3fn)
    s = torch.full((m, -(-n // 128)), math.nan, device=DEVICE)
    kern.run(a, b, q, operands={"scale_a": sa, "scale_b": sb, "bias": bias, "res": res}, extra_outs=(s,))
    _sync()
    want = F.gelu((a.float() * sa) @ (b.float() * sb) + bias) + res.float()
    return relative_error(q.float() * s.repeat_interleave(128, dim=1)[:, :n], want)


def run_rowwise_quantize() -> float:
    """A bf16 GEMM whose epilogue quantizes each row to fp8 (rule 27: one 256-wide tile across N = 208), against the
    fp32 product dequantized."""
    import warploom

    torch.manual_seed(11)
    m, n, k = 300, 208, 1000
    a = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=DEVICE, dtype=torch.bfloat16)
    q, s = warploom.matmul(a, b, epilogue=lambda acc: warploom.quantize(acc, dtype=torch.float8_e4m3fn,
                                                                        recipe="rowwise"))
    _sync()
    return relative_error(q.float() * s, a.float() @ b.float())


def run_gate_up() -> float:
    """The one-GEMM gate/up form (rule 28): bf16 weights interleaved in blocks of 64, the SiLU-mul epilogue writing
    the (M, I) result, against torch's two fp32 GEMMs."""
    import torch.nn.functional as F

    import warploom

    torch.manual_seed(13)
    m, i, k, block = 77, 320, 1000, 64
    x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    w1, w3 = (torch.randn(i, k, device=DEVICE).div(k ** 0.5).to(torch.bfloat16) for _ in range(2))
    w = warploom.interleave_gate_up(w1, w3, block=block)
    y = warploom.matmul(x, w.T, epilogue=lambda acc: warploom.silu_mul_interleaved(acc, block=block))
    _sync()
    return relative_error(y[:, :i].float(), F.silu(x.float() @ w1.float().T) * (x.float() @ w3.float().T))


def run_grouped_epilogue() -> float:
    """An fp8 rowwise M-grouped GEMM with a fused per-expert bias and SiLU over 4 experts with ragged offsets and
    an empty expert, against a loop of fp32 products."""
    import torch.nn.functional as F

    import warploom

    torch.manual_seed(17)
    rows, n, k = [200, 0, 77, 300], 528, 1024
    offs = torch.tensor(rows, device=DEVICE).cumsum(0).to(torch.int32)
    a = torch.randn(sum(rows), k, device=DEVICE).to(torch.float8_e4m3fn)
    w = torch.randn(len(rows), n, k, device=DEVICE).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(sum(rows), device=DEVICE) + 0.5, torch.rand(len(rows), n, device=DEVICE) + 0.5
    bias = torch.randn(len(rows), n, device=DEVICE)
    out = warploom.scaled_grouped_mm(a, w.transpose(-2, -1), sa, sb, offs,
                                     epilogue=lambda acc, eb: F.silu(acc + eb), eb=bias)
    _sync()
    starts = [0, *offs.tolist()[:-1]]
    want = torch.cat([F.silu((a[s:e].float() * sa[s:e, None]) @ (w[g].float() * sb[g][:, None]).t() + bias[g])
                      for g, (s, e) in enumerate(zip(starts, offs.tolist(), strict=True))])
    return relative_error(out.float(), want)


def run_k_grouped_blockwise() -> float:
    """The weight gradient's K-grouped blockwise fp8 GEMM over 4 groups on the 128 grid (one empty), against
    per-group fp32 products of the dequantized operands."""
    import warploom

    torch.manual_seed(19)
    m, n, ends = 192, 400, [256, 256, 640, 1008]
    total = ends[-1]
    offs = torch.tensor(ends, device=DEVICE, dtype=torch.int32)
    a = torch.randn(m, total, device=DEVICE).to(torch.float8_e4m3fn)
    b = torch.randn(n, total, device=DEVICE).to(torch.float8_e4m3fn).t()
    kb = -(-total // 128)
    sa, sb = torch.rand(m, kb, device=DEVICE) + 0.5, torch.rand(kb, -(-n // 128), device=DEVICE) + 0.5
    out = warploom.scaled_grouped_mm(a, b, sa, sb, offs)
    _sync()
    da = a.float() * sa.repeat_interleave(128, dim=1)[:, :total]
    db = b.float() * sb.repeat_interleave(128, dim=0)[:total].repeat_interleave(128, dim=1)[:, :n]
    want = torch.stack([da[:, s:e] @ db[s:e] for s, e in zip([0, *ends[:-1]], ends, strict=True)])
    return relative_error(out.float(), want)


# Cases run through the public API (their kernels' plans are the planner's for those calls).
SPECIAL: dict[str, Callable[[], float]] = {
    "bf16_grouped": run_grouped,
    "bf16_grouped_stream_k": run_grouped_stream_k,
    "fp8_fused_quantize": run_fused,
    "bf16_rowwise_quantize": run_rowwise_quantize,
    "bf16_gate_up": run_gate_up,
    "fp8_grouped_epilogue": run_grouped_epilogue,
    "fp8_k_grouped_blockwise": run_k_grouped_blockwise,
}


def launch(kern: Kernel, x: Inputs) -> torch.Tensor:
    """Run `kern` once on the current GPU on inputs `x` (CPU tensors, moved there) into a NaN-poisoned output."""
    m, n = x.a.shape[0], x.b.shape[1]
    out = torch.full((m, n), math.nan, device="cuda", dtype=kern.spec.out_dtype.torch)
    sa, sb = x.scales()
    kern.run(_cuda(x.a), _cuda(x.b), out, _cuda(sa), _cuda(sb), _cuda(x.bias))
    torch.cuda.synchronize()
    return out


def case_kernel(name: str, device: DeviceInfo) -> Kernel:
    """Case `name`'s kernel on `device`, its plan's family checked (`plan_of`)."""
    return build(CASES[name].spec, device, plan_of(name, device))


def run_case(name: str) -> float:
    """Build and run case `name` once on the current GPU into a NaN-poisoned output; its error against the fp32
    reference."""
    if name in SPECIAL:
        return SPECIAL[name]()
    c = CASES[name]
    x = make_inputs(c.spec, *c.shape, seed=sum(c.shape))
    return relative_error(launch(case_kernel(name, DeviceInfo.current()), x).float().cpu(), reference(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="the case names, one a line")
    ap.add_argument("--plans", action="store_true", help="each case's plan on an H100 (no GPU needed)")
    ap.add_argument("--case", choices=sorted([*CASES, *SPECIAL]), help="run one case on the GPU")
    args = ap.parse_args()
    if args.list:  # (the cases this Triton can build: 2-CTA clusters need its Hopper TMA multicast)
        from warploom.backends import gluon_api

        multicast = gluon_api.for_triton(gluon_api.installed()).tma_multicast
        print("\n".join([*(n for n, c in CASES.items() if multicast or not c.needs_multicast), *SPECIAL]))
        return
    if args.plans:
        from warploom.device import H100_SXM

        for name in CASES:
            try:
                print(f"{name}: {plan_of(name, H100_SXM).short()}")
            except Exception as e:  # (a case the installed Triton cannot plan: clusters under 3.6)
                print(f"{name}: not planned ({type(e).__name__}: {e})")
        return
    if args.case is None:
        ap.error("give --list, --plans or --case NAME")
    err = run_case(args.case)
    ok = err < TOLERANCE
    print(f"{args.case}: {'ok' if ok else 'WRONG'} error {err:.2e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
