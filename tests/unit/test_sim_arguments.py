"""The simulator's `ctas` and its size, as `Kernel.simulate`, `Kernel.check_protocol` and `warploom.sim.simulate`
take them: a program id given twice ran its CTA twice and reported its tiles stored twice (a false finding), an id
past a split-K tail plan's launches ran nothing and reported nothing, and a whole large problem ran for hours."""

from __future__ import annotations

import pytest
import torch

from warploom import H100_SXM, GemmSpec, InputError
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.sim import simulate

SPEC = GemmSpec(256, 256, 128)  # planned as 64 tiles of 64x16, one for each CTA of a 64-CTA grid


def _inputs(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()


def test_a_program_id_given_twice_is_refused() -> None:
    kern = build(SPEC, H100_SXM)
    a, b = _inputs(256, 256, 128)
    with pytest.raises(InputError, match=r"^ctas: expected distinct program ids.*got \[0\] more than once\. "
                                         r"Fix: pass each once: ctas=\[0, 1\]"):
        kern.simulate(a, b, ctas=[0, 1, 0])
    with pytest.raises(InputError, match=r"^ctas: expected distinct program ids.*Fix:"):
        kern.check_protocol(ctas=[3, 3])
    with pytest.raises(InputError, match=r"^ctas: expected distinct program ids.*Fix:"):
        simulate(kern.module, a, b, ctas=(1, 1))
    assert kern.simulate(a, b, ctas=[0, 1]).report.ok  # (each once: no finding)


def test_a_split_k_tail_plans_ids() -> None:
    spec = GemmSpec(2000, 2056, 4608)
    tailed = build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bm=128, bn=128, tail_split=2))
    a, b = _inputs(2000, 2056, 4608)
    with pytest.raises(InputError, match=r"^ctas: expected program ids in \[0, 132\).*got \[999\].*Fix:"):
        tailed.simulate(a, b, ctas=[999])  # (no launch has it: nothing ran, and the report was clean)
    with pytest.raises(InputError, match=r"^tail_ctas: expected distinct program ids.*Fix:"):
        tailed.simulate(a, b, ctas=[0], tail_ctas=[2, 2])


def test_a_whole_problem_past_the_simulators_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CTA of a problem over SIM_KERNEL_FACTOR x `kernel.sim_max_flops` (WARPLOOM_SIM_MAX_FLOPS, the limit
    warploom.matmul's CPU path keeps to) is refused by name; a sample of CTAs still runs."""
    from warploom.kernel import SIM_KERNEL_FACTOR

    kern = build(SPEC, H100_SXM)
    a, b = _inputs(256, 256, 128)
    flops = 2 * 256 * 256 * 128
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", str(flops // SIM_KERNEL_FACTOR - 1))
    with pytest.raises(InputError, match=r"^ctas: expected a sample of program ids for a problem over 16,777,152 FLOPs"
                                         r".*got None \(every CTA\) at 256x256x128 \(16,777,216 FLOPs\)") as e:
        kern.simulate(a, b)
    assert "Fix: pass ctas (and tail_ctas) from warploom.sim.sample_kernel_ctas(kernel, 256, 256, 128)" in str(e.value)
    assert "raise WARPLOOM_SIM_MAX_FLOPS" in str(e.value)
    assert kern.simulate(a, b, ctas=[0]).report.ctas == (0,)
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", str(flops // SIM_KERNEL_FACTOR))
    assert kern.simulate(a, b).report.ok
