"""The targets as declared objects (warploom/target.py, warploom/targets/): every target declared once, plans and
modules carry their target, the verifier holds the structure to it, and the declarations drive the pass list, the
emitter, the compile step and the op set."""

from __future__ import annotations

from dataclasses import replace

import pytest

from warploom import Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.device import B200, GFX1250, H100_SXM
from warploom.errors import TargetError, UnsupportedError, VerificationError
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import Plan, PlanOptions, plan_schedule
from warploom.target import Target
from warploom.targets import DECLARED, check_target, compile_schedule, declared, op_types

E4 = DType.E4M3
SPECS = [GemmSpec(300, 520, 1024), GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE),
         GemmSpec(8, 4096, 4096)]
BLOCKWISE = GemmSpec(1000, 1024, 2048, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
                     accumulation=Accumulation.PROMOTED)


def test_every_target_is_declared_once() -> None:
    assert set(DECLARED) == set(Target)
    for t, d in DECLARED.items():
        assert d.target is t and d.device.target is t and declared(t.value) is d
        assert d.counts and d.ops
    assert [t for t, d in DECLARED.items() if d.runs] == [Target.SM90A]  # the one GPU at hand


@pytest.mark.parametrize("device", [H100_SXM, B200, GFX1250], ids=lambda d: d.arch)
def test_plans_and_modules_carry_their_devices_target(device: object) -> None:
    for spec in SPECS:
        k = build(spec, device)
        assert k.plan.target is device.target and k.module.target is device.target  # type: ignore[attr-defined]
        assert type(k.module.target) is Target


@pytest.mark.parametrize("device", [H100_SXM, B200, GFX1250], ids=lambda d: d.arch)
def test_complete_modules_hold_only_their_targets_ops(device: object) -> None:
    specs = SPECS + ([BLOCKWISE] if device is H100_SXM else [])
    modules = [build(s, device).module for s in specs]  # type: ignore[arg-type]
    assert op_types(modules) <= declared(device.target).ops  # type: ignore[attr-defined]


def test_an_op_outside_the_targets_set_is_refused() -> None:
    spec = SPECS[0]
    plan = plan_schedule(spec, H100_SXM)
    sm100 = declared(Target.SM100A)
    from warploom.passes import run_pipeline

    m, _ = run_pipeline(spec, plan, declared(Target.SM90A).pipeline(plan))
    with pytest.raises(VerificationError, match="Mma in partition .*not an op of an sm_90a schedule"):
        verify.check(m, "pipeline end", H100_SXM, ops=sm100.ops)


def test_the_structure_must_agree_with_the_declared_target() -> None:
    k = build(SPECS[0], B200)
    wrong = replace(k.module, target=Target.SM90A)  # tensor-memory rings in a module said to be sm_90a's
    with pytest.raises(VerificationError, match="in tensor memory in an sm_90a schedule"):
        verify.check(wrong, "declared target")
    g = build(SPECS[0], GFX1250)
    with pytest.raises(VerificationError, match="workgroup partition in an sm_100a schedule"):
        verify.check(replace(g.module, target=Target.SM100A), "declared target")


def test_plan_target_is_checked_and_read_from_its_name() -> None:
    p = plan_schedule(SPECS[0], H100_SXM)
    assert replace(p, target="sm_90a").target is Target.SM90A  # (a plan from a cache file names its target)
    with pytest.raises(ValueError, match="Plan\\(target=...\\)"):
        replace(p, target="sm_80")
    with pytest.raises(ValueError, match="acc_buffers"):
        replace(p, target=Target.SM100A)  # an sm_100a plan has tensor-memory accumulator buffers
    b = plan_schedule(SPECS[0], B200)
    with pytest.raises(ValueError, match="acc_buffers"):
        Plan(**{**b.__dict__, "target": Target.SM90A})


def test_compile_schedule_runs_the_declared_pipeline() -> None:
    for device in (H100_SXM, B200, GFX1250):
        plan = plan_schedule(SPECS[0], device)
        m, trace = compile_schedule(SPECS[0], plan, device)
        passes = [name for name, _ in trace.stages[1:]]
        assert passes == [type(p).__name__ for p in declared(device.target).pipeline(plan)]
        assert m.target is device.target


def test_check_target_names_the_choices_and_the_modules_target() -> None:
    k = build(SPECS[0], H100_SXM)
    assert check_target("sm_90a", k.module) is Target.SM90A
    with pytest.raises(TargetError, match="expected one of \\('sm_90a', 'sm_100a', 'gfx1250'\\)"):
        check_target("sm_80")
    with pytest.raises(TargetError, match="is an sm_90a schedule, got target='gfx1250'"):
        check_target("gfx1250", k.module)


def test_a_targets_own_checks_are_handed_down() -> None:
    """sm_100a's tensor-memory rules are its declaration's: `ir.verify.check` runs them when handed them (as
    compile_schedule and `targets.verify` do), not by itself."""
    from warploom.targets import problems
    from warploom.targets import verify as target_verify

    k = build(GemmSpec(256, 512, 512), B200)
    ring = next(r for r in k.module.rings if r.in_tmem)
    wide = replace(k.module, rings=tuple(replace(r, depth=8) if r is ring else r for r in k.module.rings))
    assert not any("tensor memory" in e for e in verify.complete(wide, B200))  # (not the generic verifier's rule)
    assert any("tensor memory: " in e and "the SM has 512" in e for e in problems(wide, B200))
    with pytest.raises(VerificationError, match="the SM has 512"):
        target_verify(wide, "handed down", B200)
    assert declared(Target.SM100A).checks and declared(Target.GFX1250).checks and not declared(Target.SM90A).checks


def test_ops_derive_from_the_open_base_and_live_beside_their_target() -> None:
    """Every op class of the IR derives from `ir.Op`; a target's own ops (ir/ops_<target>.py) are in its op set and
    in no other target's, and everything else an op set holds is a shared op of ir/nodes.py."""
    import inspect

    from warploom.ir import nodes as ir
    from warploom.ir import ops_gfx1250, ops_sm100

    shared = {c for _, c in inspect.getmembers(ir, inspect.isclass)
              if issubclass(c, ir.Op) and c is not ir.Op and c.__module__ == ir.__name__}
    own = {Target.SM100A: ops_sm100.OWN_OPS, Target.GFX1250: ops_gfx1250.OWN_OPS, Target.SM90A: frozenset()}
    assert {ir.TcMma, ir.TdmLoad, ir.Mma, ir.Wait} <= shared | own[Target.SM100A] | own[Target.GFX1250]
    for target, ops in own.items():
        ops_set = declared(target).ops
        assert ops <= ops_set
        assert ops_set - ops <= shared, sorted(c.__name__ for c in ops_set - ops - shared)
        for other, theirs in own.items():
            if other is not target:
                assert not theirs & ops_set, (target, sorted(c.__name__ for c in theirs & ops_set))
    assert not issubclass(ir.Loop, ir.Op) and not issubclass(ir.TmemScales, ir.Op)  # a loop and a value, not ops


@pytest.mark.parametrize("device,rule", [(B200, "rule 19"), (GFX1250, "rule 20")])
@pytest.mark.parametrize("forced", [dict(cluster=2), dict(stream_k=2), dict(pingpong=True), dict(split_k=2),
                                    dict(tail_split=2), dict(scale_partition=True), dict(hoist_rows=True),
                                    dict(scalar_columns=False)],
                         ids=lambda d: next(iter(d)))
def test_other_targets_refuse_sm90_options_by_name(device: object, rule: str, forced: dict) -> None:
    """An sm_90a schedule option forced on another target's planner is refused by name, never ignored (a 2-CTA
    cluster was planned as one CTA per tile there); sm_100a's planner takes scalar_columns itself, and
    scale_partition for MX / NVFP4 block scales only (refused here, on bf16)."""
    if forced == {"scalar_columns": False} and device is B200:
        assert plan_schedule(GemmSpec(4096, 4096, 4096), device, **forced).scalar_columns is False  # type: ignore
        return
    with pytest.raises(UnsupportedError, match=f"{next(iter(forced))}=.*the {device.target} schedule \\({rule}\\)"):
        plan_schedule(GemmSpec(4096, 4096, 4096), device, **forced)  # type: ignore[arg-type]
    assert plan_schedule(GemmSpec(4096, 4096, 4096), device, cluster=1, stream_k=0, split_k=1).target \
        is device.target  # the values that mean "none" are no forcing


def test_planning_dispatches_through_the_declared_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each declaration names its target's planner rule (warploom/planning/), and plan_schedule calls the device's
    target's, with the forced options as given."""
    assert {t: d.plan.__module__ for t, d in DECLARED.items()} == {
        Target.SM90A: "warploom.planning.sm90.rule", Target.SM100A: "warploom.planning.sm100",
        Target.GFX1250: "warploom.planning.gfx1250"}
    seen: list[tuple[GemmSpec, object, PlanOptions]] = []
    plan = plan_schedule(GemmSpec(256, 256, 256), GFX1250)

    def rule(spec: GemmSpec, device: object, options: PlanOptions) -> Plan:
        seen.append((spec, device, options))
        return plan

    monkeypatch.setitem(DECLARED, Target.GFX1250, replace(DECLARED[Target.GFX1250], plan=rule))
    assert plan_schedule(GemmSpec(256, 256, 256), GFX1250, bn=64, stages=2) is plan
    assert seen == [(GemmSpec(256, 256, 256), GFX1250, PlanOptions(bn=64, stages=2))]
