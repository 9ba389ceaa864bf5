"""Plans written or edited by hand (`Plan.__post_init__`, planning/plan_check.py): each field the lowering cannot run
is a `PlanError` naming the field, what it must be and the fix, raised by `build` before any pass or compile. They
used to fail in a pass (a bare ValueError), in the verifier (a VerificationError: warploom's bug), in the Gluon
emitter, or in Triton's compiler after building."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.device import B200, GFX1250, DeviceInfo
from warploom.errors import PlanError
from warploom.kernel import build
from warploom.planner import plan_schedule

SPEC = GemmSpec(4096, 4096, 4096)  # planned 128x256x64, 4 stages, 8 consumer warps in 2 partitions on the H100


def _refused(spec: GemmSpec, device: DeviceInfo, field: str, **edit: Any) -> str:
    """`build` of the planner's plan with `edit` applied: a PlanError whose message starts with the field and names
    the fix; its message."""
    with pytest.raises(PlanError) as e:
        build(spec, device, replace(plan_schedule(spec, device), **edit))
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and msg.startswith(f"Plan({field}=") and ". Fix: " in msg, msg
    return msg


@pytest.mark.parametrize(("edit", "field", "words"), [
    ({"bk": 100}, "bk", "a power of two"),  # was a VerificationError (shared memory) at the pipeline's end
    ({"bk": 48}, "bk", "a power of two"),  # was built, then Triton's "Shape element 1 must be a power of 2"
    ({"bk": 8}, "bk", "at least 16: one MMA step's K of bf16"),  # was built, then an MLIR pass failure
    ({"consumer_warps": 3}, "consumer_warps", "a multiple of 4"),  # was a bare ValueError from SplitConsumers
    ({"consumer_warps": 4}, "consumer_warps", "8: a warpgroup per 64 rows"),
    ({"consumer_partitions": 3}, "consumer_partitions", "2: one partition a warpgroup"),
    ({"bm": 512}, "bm", "64, 128, 192 or 256"),
    ({"bn": 512}, "bn", "a wgmma's N"),
    ({"producer_warps": 3}, "producer_warps", "a power of two of warps"),  # was built, then warp_specialize failed
    ({"consumer_regs": 300}, "consumer_regs", "a multiple of 8 in [24, 256]"),  # was a VerificationError
    ({"epilogue_subtiles": 3}, "epilogue_subtiles", "1, 2, 4, 8 or 16 column blocks"),  # NotImplementedError in emit
    ({"grid": 1000}, "grid", "at most 132, the SMs"),  # was built and compiled
    ({"scale_partition": True}, "scale_partition", "no blockwise scales"),  # was a bare ValueError from SplitScales
    ({"target": "gfx1250"}, "target", "sm_90a, the target of NVIDIA H100"),  # was a VerificationError
    ({"stages": 0}, "stages", "an int >= 1"),  # (refused before, without a fix)
])
def test_a_hand_edited_plan_is_refused_by_field(edit: dict[str, Any], field: str, words: str) -> None:
    assert words in _refused(SPEC, H100_SXM, field, **edit)


def test_the_bk_a_recipe_or_a_dtype_needs() -> None:
    fp8 = GemmSpec(4096, 4096, 4096, DType.E4M3, DType.E4M3, scale=ScaleRecipe.TENSORWISE)
    assert "at least 32: one MMA step's K of e4m3 x e4m3" in _refused(fp8, H100_SXM, "bk", bk=16)
    blockwise = replace(fp8, scale=ScaleRecipe.BLOCKWISE_1X128_128X128, accumulation=Accumulation.PROMOTED)
    assert "Fix: bk=128" in _refused(blockwise, H100_SXM, "bk", bk=64)  # (the verifier's rule, now named by field)
    assert build(SPEC, H100_SXM, replace(plan_schedule(SPEC, H100_SXM), bk=32)).plan.bk == 32  # two wgmma k-steps


def test_other_targets_tile_rules() -> None:
    assert "bm=128 (one CTA's tcgen05 MMA" in _refused(SPEC, B200, "bm", bm=64)
    assert "at least 2: gfx1250's software pipeline" in _refused(SPEC, GFX1250, "stages", stages=1)  # a bare ValueError


@pytest.mark.parametrize(("spec", "device", "edit", "field", "fix"), [
    (SPEC, H100_SXM, {"stages": 8}, "stages", "stages=4"),
    (GemmSpec(4096, 2112, 7168), H100_SXM, {"tail_split": 2, "tail_stages": 12}, "tail_stages", "tail_stages=3"),
    (SPEC, GFX1250, {"stages": 19, "bm": 64, "bn": 64}, "stages", "stages=17"),
])
def test_a_plan_whose_rings_overflow_shared_memory(spec: GemmSpec, device: DeviceInfo, edit: dict[str, Any],
                                                   field: str, fix: str) -> None:
    """Too deep a ring was the verifier's "shared memory ... exceeds" (an InternalError); now the field, the bytes
    and the deepest ring that fits, which builds."""
    base = plan_schedule(spec, device, **{k: v for k, v in edit.items() if k in ("tail_split", "bm", "bn")})
    plan = replace(base, **{k: v for k, v in edit.items() if k not in ("tail_split", "bm", "bn")})
    with pytest.raises(PlanError, match=rf"^Plan\({field}=\d+\): expected at most \d+ stages") as e:
        build(spec, device, plan)
    msg = str(e.value)
    assert f"{device.smem_per_block} bytes of shared memory" in msg and f"Fix: {fix}," in msg, msg
    build(spec, device, replace(plan, **{field: int(fix.split("=")[1])}))  # the fix fits


def test_registers_and_tensor_memory_that_do_not_fit() -> None:
    wide = replace(plan_schedule(SPEC, H100_SXM, bm=256), consumer_regs=240)  # 16 consumer warps at 240
    with pytest.raises(PlanError, match=r"^Plan\(consumer_regs=240\): .*65536.*got \d+ registers\. Fix: "
                                        r"consumer_regs=120"):
        build(SPEC, H100_SXM, wide)
    assert build(SPEC, H100_SXM, replace(wide, consumer_regs=120)).plan.consumer_regs == 120
    msg = _refused(SPEC, B200, "acc_buffers", acc_buffers=3)  # was the verifier's "768 columns ..., the SM has 512"
    assert "512 columns" in msg and "got 768 columns" in msg and "Fix: acc_buffers=2" in msg


def test_build_names_a_plan_or_device_of_the_wrong_kind() -> None:
    with pytest.raises(TypeError, match=r"^plan: expected a warploom Plan, got tuple \(128,\)\. Fix: pass "
                                        r"plan_schedule\(spec, device\)"):
        build(SPEC, H100_SXM, (128,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^device: expected a warploom.DeviceInfo, got str 'H100'.*Fix:"):
        build(SPEC, "H100", plan_schedule(SPEC, H100_SXM))  # type: ignore[arg-type]


def test_a_huge_forced_depth_is_refused_with_the_deepest_that_fits() -> None:
    """The deepest depth is found by bisection: a forced 10**30 stages (a command line's digits) once counted down."""
    spec = GemmSpec(4096, 4096, 4096)
    plan = plan_schedule(spec, H100_SXM)
    with pytest.raises(PlanError, match=r"Plan\(stages=10{30}\).*Fix: stages=(\d+)") as e:
        build(spec, H100_SXM, replace(plan, stages=10**30))
    deepest = int(str(e.value).split("Fix: stages=")[1].split(",")[0])
    build(spec, H100_SXM, replace(plan, stages=deepest))  # (the fix builds, one more stage does not)
    with pytest.raises(PlanError):
        build(spec, H100_SXM, replace(plan, stages=deepest + 1))
