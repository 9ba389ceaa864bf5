"""sm_100a (planner rule 19, passes/blackwell.py): the plan, the schedule's shape, the verifier's tensor-memory
rules, and the refusals (what is not planned yet, running, simulating, compiling for the other target)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import B200, H100_SXM
from warploom.errors import PlanError, TargetError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.targets import verify as target_verify

E4 = DType.E4M3


def test_plan_is_rule_19() -> None:
    p = plan_schedule(GemmSpec(4096, 4096, 4096), B200)
    assert (p.bm, p.bn, p.bk, p.acc_buffers, p.epilogue_subtiles, p.grid) == (128, 256, 64, 2, 4, 148)
    assert p.short().endswith("_tm2")
    fp8 = plan_schedule(GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), B200)
    assert fp8.bk == 128 and fp8.stages == 4  # 4 stages of 48 KiB beside a 16 KiB staging block


def test_schedule_partitions_and_tensor_memory() -> None:
    m = build(GemmSpec(4096, 4096, 4096), B200).module
    assert [(p.name, p.role, p.warps, p.default) for p in m.partitions] == [
        ("epilogue", ir.Role.EPILOGUE, 4, True), ("mma", ir.Role.MMA, 1, False),
        ("producer", ir.Role.PRODUCER, 1, False)]
    assert m.blackwell and m.tmem_columns == 512
    assert m.smem_bytes < B200.smem_per_block  # the tensor-memory ring takes no shared memory
    mma = [o for o, _ in ir.walk(m.partition("mma").body)]
    assert any(isinstance(o, ir.TcMma) and o.release == "empty" for o in mma)
    assert any(isinstance(o, ir.Commit) and o.barrier == "acc_ready" for o in mma)
    assert not any(isinstance(o, ir.Arrive) and o.barrier == "empty" for o in mma)  # the MMA's completion releases


def test_fp8_rowwise_bias_epilogue_per_block() -> None:
    spec = GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                    Accumulation.NATIVE, DType.BF16)
    m = build(spec, B200).module
    eps = [o for o, _ in ir.walk(m.default_partition.body) if isinstance(o, ir.Epilogue)]
    assert [o.acc for o in eps] == ["acc0", "acc1", "acc2", "acc3"]
    assert all(o.steps == (ir.EpilogueStep.SCALE_ROWWISE, ir.EpilogueStep.ADD_BIAS) for o in eps)
    src = build(spec, B200).source
    assert "tcgen05_mma(" in src and "get_tmem_reg_layout" in src and "warpgroup_mma" not in src


@pytest.mark.parametrize("spec,what", [
    (GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
     "use_fast_accum=True"),
])
def test_refuses_what_is_not_planned(spec: GemmSpec, what: str) -> None:
    with pytest.raises(UnsupportedError, match=what):
        plan_schedule(spec, B200)


def test_refuses_sm90_options_and_tiles() -> None:
    spec = GemmSpec(4096, 4096, 4096)
    with pytest.raises(UnsupportedError, match="pingpong=True"):
        plan_schedule(spec, B200, pingpong=True)
    with pytest.raises(UnsupportedError, match="bm=128"):
        plan_schedule(spec, B200, bm=64)
    with pytest.raises(UnsupportedError, match="stages"):
        plan_schedule(spec, B200, stages=9)


def test_fused_epilogue_per_block() -> None:
    """A fused epilogue runs on each 64-column block as it leaves tensor memory: the dense operand through a TMA
    staging buffer of its own, each output through its own staging buffer."""
    a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    bias = torch.empty(4096, dtype=torch.bfloat16, device="meta")

    def fn(acc: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.nn.functional.gelu(acc + bias) + residual, (acc + bias).float()

    kern = warploom.plan(a, a, epilogue=fn, bias=bias, residual=a, device=B200)
    m = kern.module
    ep = [o for o, _ in ir.walk(m.default_partition.body)]
    assert [o.acc for o in ep if isinstance(o, ir.ApplyEpilogue)] == ["acc0", "acc1", "acc2", "acc3"]
    assert [o.buffer for o in ep if isinstance(o, ir.PrefetchOperand)] == ["residual_smem"] * 4
    assert {(b.name, b.output) for b in m.buffers if b.tensor is ir.Tensor.C} == {("c_smem", 0), ("c_smem_1", 1)}
    assert m.smem_bytes <= B200.smem_per_block and kern.plan.stages >= 2


def test_verifier_tensor_memory_rules() -> None:
    m = build(GemmSpec(4096, 4096, 4096), B200).module
    acc = m.ring("acc_tm")
    three = replace(plan_schedule(GemmSpec(4096, 4096, 4096), B200), acc_buffers=3)
    with pytest.raises(VerificationError, match="768 columns of accumulators, the SM has 512"):
        target_verify(replace(m, rings=tuple(replace(r, depth=3) if r.in_tmem else r for r in m.rings)), "deep", B200)
    with pytest.raises(PlanError, match=r"^Plan\(acc_buffers=3\): expected .*512 columns.*Fix: acc_buffers=2"):
        build(GemmSpec(4096, 4096, 4096), B200, three)  # (refused before the verifier, naming the field)
    with pytest.raises(VerificationError, match="for NVIDIA H100"):
        verify.check(m, "test", H100_SXM)  # a tensor-memory schedule for a GPU without tensor memory
    with pytest.raises(VerificationError, match="no wgmma"):
        target_verify(build(GemmSpec(4096, 4096, 4096), H100_SXM).module, "test", B200)
    # Without the commit the epilogue waits for an accumulator no one publishes.
    mma = m.partition("mma")
    wait, tiles = mma.body  # (the grid-dependency wait first: passes/launch.py)
    assert isinstance(wait, ir.GridDependencyWait) and isinstance(tiles, ir.Loop)
    uncommitted = m.with_partition(replace(mma, body=(wait, replace(tiles, body=tuple(
        s for s in tiles.body if not isinstance(s, ir.Commit))))))
    with pytest.raises(VerificationError, match="acc_ready is waited on but never arrived at"):
        target_verify(uncommitted, "test", B200)
    # A tcgen05 MMA belongs to the MMA warp.
    ep = m.default_partition
    stray = ir.TcMma("a_ring", "b_ring", ir.Slot("t"), "acc_tm", ir.Slot("t"))
    with pytest.raises(VerificationError, match="tcgen05 MMA in a epilogue partition"):
        verify.check(m.with_partition(replace(ep, body=(*ep.body, stray))), "test")
    assert acc.depth == 2


def test_targets_and_refusals() -> None:
    kern = build(GemmSpec(512, 512, 512), B200)
    with pytest.raises(TargetError, match="sm_100a schedule"):
        kern.compile("sm_90a")
    with pytest.raises(TargetError, match="sm_90a schedule"):
        build(GemmSpec(512, 512, 512), H100_SXM).compile("sm_100a")
    with pytest.raises(TargetError, match="not run on an sm_100a GPU"):
        kern.run(None, None, None)
    a = torch.randn(512, 512, dtype=torch.bfloat16)
    res = kern.simulate(a, a)  # the simulator models tcgen05 and tensor memory (tests/sim/test_blackwell_sim.py)
    assert res.ok, res.report.summary()


def test_public_api_refuses_to_launch_on_an_sm_100a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a Blackwell GPU the eager path plans rule 19 and builds its launcher, which refuses: warploom has never run
    an sm_100a kernel (the refusal sits in Launcher, which every launching path builds)."""
    from warploom import api
    from warploom.runtime.launch import Launcher

    kern = build(GemmSpec(512, 512, 512), B200)
    with pytest.raises(TargetError, match="not run on an sm_100a GPU"):
        Launcher(kern.module, kern.gluon)
    monkeypatch.setattr(api, "device_for", lambda a: B200)
    monkeypatch.setattr(api, "require_cuda", lambda *a, **k: None, raising=False)
    a = torch.empty(512, 512, dtype=torch.bfloat16, device="meta")
    with pytest.raises(TargetError, match="not run on an sm_100a GPU"):
        api._matmul_impl(a, a)


def test_many_outputs_and_operands_plan_a_narrower_tile() -> None:
    """Four fp32 outputs and two fp32 dense operands leave no room for a stage at 256 wide: the plan narrows to the
    widest tile that holds one (two would fit nowhere)."""
    a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    d = torch.empty(4096, 4096, device="meta")

    def fn(acc: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return acc + x, acc * y, acc - x, acc * 2.0

    kern = warploom.plan(a, a, epilogue=fn, out_dtype=torch.float32, x=d, y=d, device=B200)
    assert (kern.plan.bn, kern.plan.stages) == (128, 1)
    assert kern.module.smem_bytes <= B200.smem_per_block
    with pytest.raises(UnsupportedError, match="narrower bn"):
        plan_schedule(kern.spec, B200, bn=256)


def test_load_tmem_block_must_match_its_accumulator() -> None:
    m = build(GemmSpec(4096, 4096, 4096), B200).module
    ep = m.default_partition
    (wait, tiles, *rest) = ep.body
    assert isinstance(wait, ir.GridDependencyWait) and isinstance(tiles, ir.Loop)
    wrong = replace(tiles, body=tuple(replace(o, part=0) if isinstance(o, ir.LoadTmem) else o for o in tiles.body))
    with pytest.raises(VerificationError, match="load_tmem of block 0 of 4 of acc_tm into acc1"):
        verify.check(m.with_partition(replace(ep, body=(wait, wrong, *rest))), "test")


def test_other_blackwell_archs_plan_rule_19_and_are_refused_at_compile() -> None:
    sm103 = replace(B200, name="an sm_103a GPU", arch="sm_103a")
    kern = build(GemmSpec(512, 512, 512), sm103)
    assert kern.module.blackwell
    with pytest.raises(TargetError, match="sm_103a"):
        kern.compile()


def test_decode_runs_swapped() -> None:
    """Rule 18's decode swap on sm_100a: C^T = B^T A^T on 128x16 (128x32 above M = 16) tiles with a deep ring;
    a dense operand, or a forced swap_ab=False, keeps the unswapped tile."""
    w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    for m, bn, stages in ((1, 16, 12), (16, 16, 12), (24, 32, 10)):  # (what fits beside the staging block)
        a = torch.empty(m, 4096, dtype=torch.bfloat16, device="meta")
        kern = warploom.plan(a, w.t(), device=B200)
        assert (kern.plan.swap_ab, kern.plan.bm, kern.plan.bn, kern.plan.stages) == (True, 128, bn, stages)
        assert kern.module.tiling.swap_ab and kern.module.blackwell
        assert [(b.rows, b.cols) for b in kern.module.buffers] == [(bn, 128)]  # C's block, transposed
    a = torch.empty(16, 4096, dtype=torch.bfloat16, device="meta")
    assert not plan_schedule(warploom.plan(a, w.t(), device=B200).spec, B200, swap_ab=False).swap_ab
    res = torch.empty(16, 4096, dtype=torch.bfloat16, device="meta")
    assert not warploom.plan(a, w.t(), epilogue=lambda acc, r: acc + r, r=res, device=B200).plan.swap_ab


def test_tuning_refuses_an_sm_100a_gpu_before_making_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tuner would time sm_100a kernels, which warploom has not run: it refuses before allocating anything."""
    import contextlib
    import types

    from warploom.device import DeviceInfo
    from warploom.tune import gpu

    monkeypatch.setattr(DeviceInfo, "current", staticmethod(lambda: B200))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    with pytest.raises(TargetError, match="sm_100a kernels"):
        gpu._device(types.SimpleNamespace(device=torch.device("cuda")))  # type: ignore[arg-type]


def test_forced_swap_errors_name_the_swapped_tile() -> None:
    spec = GemmSpec(16, 4096, 4096)
    with pytest.raises(UnsupportedError, match="tiles of C\\^T are 64 rows of N by 16 of M"):
        plan_schedule(spec, B200, swap_ab=True, bm=64)
    assert not plan_schedule(spec, B200, split_k=1).swap_ab  # a forced option turns rule 18 off, as on sm_90a
