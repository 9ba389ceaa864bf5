"""Programmatic dependent launch in the IR (passes/launch.py, ir.Module.dependent_launch): the pass, the verifier's
rule and the launcher's choice of mode. The simulator's finding: tests/sim/test_dependent_launch_sim.py; the GPU:
tests/gpu/test_dependent_launch_gpu.py."""

from __future__ import annotations

import dataclasses

import pytest

from warploom import GemmSpec
from warploom.device import B200, GFX1250, H100_SXM
from warploom.errors import UnsupportedError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.passes.launch import DependentLaunch
from warploom.runtime.launch import _pdl

SPEC = GemmSpec(300, 520, 384)


def _module(device: object = H100_SXM) -> ir.Module:
    return build(SPEC, device).module  # type: ignore[arg-type]


@pytest.mark.parametrize("device", [H100_SXM, B200], ids=["sm_90a", "sm_100a"])
def test_nvidia_schedules_wait_first_in_every_partition(device: object) -> None:
    m = _module(device)
    assert m.dependent_launch
    assert all(isinstance(p.body[0], ir.GridDependencyWait) for p in m.partitions)
    assert all(sum(isinstance(o, ir.GridDependencyWait) for o, _ in ir.walk(p.body)) == 1 for p in m.partitions)


def test_gfx1250_has_no_dependent_launch() -> None:
    m = _module(GFX1250)
    assert not m.dependent_launch
    assert not any(isinstance(o, ir.GridDependencyWait) for p in m.partitions for o, _ in ir.walk(p.body))


def test_the_pass_off_changes_nothing_and_on_adds_only_the_waits() -> None:
    m = _module()
    plain = dataclasses.replace(m, dependent_launch=False,
                                partitions=tuple(dataclasses.replace(p, body=p.body[1:]) for p in m.partitions))
    assert DependentLaunch(enabled=False)(plain) is plain
    assert DependentLaunch()(plain) == m


def _problems(m: ir.Module) -> list[str]:
    return [e for e in verify.structural(m) if "grid_dependency_wait" in e or "dependent_launch" in e]


def test_the_verifier_wants_the_wait_first() -> None:
    m = _module()
    p = m.partitions[0]
    late = m.with_partition(dataclasses.replace(p, body=(*p.body[1:], p.body[0])))
    (err,) = _problems(late)
    assert f"partition {p.name}: a dependent launch (PDL)" in err and "begins with a tiles loop" in err
    assert "wait before touching memory" in err


def test_the_verifier_wants_one_wait_a_partition() -> None:
    m = _module()
    p = m.partitions[-1]
    twice = m.with_partition(dataclasses.replace(p, body=(p.body[0], *p.body)))
    assert _problems(twice) == [f"partition {p.name}: 2 grid_dependency_waits; one, its first op, is the wait"]


def test_the_verifier_refuses_a_wait_without_the_launch() -> None:
    m = dataclasses.replace(_module(), dependent_launch=False)
    errs = _problems(m)
    assert len(errs) == len(m.partitions) and all("not launched dependently" in e for e in errs)


def test_the_verifier_refuses_a_dependent_launch_on_gfx1250() -> None:
    m = dataclasses.replace(_module(GFX1250), dependent_launch=True)
    errs = _problems(m)
    assert errs[0].startswith("dependent_launch in a gfx1250 schedule")
    assert any("begins with" in e for e in errs[1:])  # (and its partition does not wait either)


@pytest.mark.parametrize(("mode", "first", "second"), [("auto", False, True), ("1", True, True), ("0", False, False)])
def test_the_launch_modes(monkeypatch: pytest.MonkeyPatch, mode: str, first: bool, second: bool) -> None:
    monkeypatch.setenv("WARPLOOM_PDL", mode)
    m = _module()
    assert (_pdl(m, first=True).get("launch_pdl", False), _pdl(m, first=False).get("launch_pdl", False)) == \
        (first, second)
    assert _pdl(dataclasses.replace(m, dependent_launch=False), first=False) == {}  # (no waits: never)


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_PDL", "true")
    with pytest.raises(UnsupportedError, match=r"WARPLOOM_PDL='true': expected auto .* 1 .* or 0 .*Fix: set it"):
        _pdl(_module(), first=True)
