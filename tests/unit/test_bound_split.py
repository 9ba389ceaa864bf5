"""A remembered eager call of a plan with more than one launch (split-K and its reduce, a split-K tail after the
whole waves) binds them (runtime/bound.Bound), as single-kernel plans' calls always did: without it each such call
went through the launcher's general path, 10-66 us of host time (H200, session 48), where the same calls bound took
about 11 us each, kernels included.

On CPU, with every kernel's launch recorded: the bound path must launch the same kernels in the same order, on the
same grids, with the same arguments as the general path (a descriptor as its tensor's address, shape and strides;
each call's split-K workspace fresh, the same one for a kernel and its reduce), call after call, for new tensors
too.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import triton

import warploom.runtime.launch as launch_mod
from warploom import H200, checks
from warploom.kernel import build
from warploom.planner import plan_schedule

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


class Recorder:
    """Every launch of every kernel of one launcher, general or bound, as (kernel, grid, arguments); a tensor
    argument as ('t', address, shape, strides, dtype), a workspace's address as 'ws' (it is new for each call)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, list[Any]]] = []
        self.paths: list[str] = []  # per launch: "general" (the launcher's own path) or "bound"
        self.workspaces: list[Any] = []  # this call's, kept alive: no other tensor can take their addresses
        self.ws_used: list[list[int]] = []  # per launch, the workspace addresses among its arguments

    def addresses(self) -> set[int]:
        return {w.data_ptr() for w in self.workspaces}

    def record(self, name: str, grid: int, args: list[Any], path: str) -> None:
        self.log.append((name, grid, [self.show(x) for x in args]))
        self.paths.append(path)
        self.ws_used.append([x.data_ptr() for x in args
                             if isinstance(x, torch.Tensor) and x.data_ptr() in self.addresses()])

    def show(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            ptr = "ws" if x.data_ptr() in self.addresses() else x.data_ptr()
            return ("t", ptr, tuple(x.shape), tuple(x.stride()), x.dtype)
        return x


class FakeCompiled:
    """What a BoundStep reads of a compiled kernel: its descriptor positions, an encoding per tensor (here the
    tensor's address, shape and strides) and the C launch, recorded."""

    def __init__(self, name: str, descs: dict[int, Any], rec: Recorder) -> None:
        self.name, self.descs, self.rec, self.key = name, descs, rec, (0, False, None)
        self.kernel = SimpleNamespace(function=name, packed_metadata=())
        self.c_launch = self._c_launch

    def _encode(self, i: int, t: Any) -> list[Any]:
        return [t]  # (the tensor itself, shown as the recorder shows tensors)

    def _c_launch(self, grid: int, stream: int, function: str, packed: Any, meta: Any, enter: Any, leave: Any,
                  flat: list[Any]) -> None:
        self.rec.record(function, grid, flat, "bound")

    def launch(self, grid: int, stream: int, enter: Any, leave: Any, args: list[Any]) -> None:
        """The path for live launch hooks (or no C entry point): the arguments as the getters read them."""
        self.rec.record(self.name, grid, args, "bound")


def recorded(kern: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Recorder]:
    """`kern`'s launcher with each kernel's general launch and its compiled form recorded."""
    monkeypatch.setattr(launch_mod, "load", lambda text, name: SimpleNamespace(name=name))
    monkeypatch.setattr(triton.runtime.driver, "_active",
                        SimpleNamespace(get_current_device=lambda: -1, get_current_stream=lambda d: 99))
    rec = Recorder()
    launcher = dataclasses.replace(kern).launcher
    real = launch_mod.Launcher._workspace

    def workspace(self: Any, *args: Any) -> Any:
        ws = real(self, *args)
        if ws is not None:
            rec.workspaces.append(ws)
        return ws

    monkeypatch.setattr(launch_mod.Launcher, "_workspace", workspace)
    for la in (launcher, launcher._tail):
        for direct in () if la is None else (la._main, la._reduce):
            if direct is not None:
                _record(direct, rec)
    return launcher, rec


def _record(direct: Any, rec: Recorder) -> None:
    """`direct`'s general launches recorded, and its compiled form a FakeCompiled that records the bound ones."""
    name = direct._fn.name
    direct.launch = lambda grid, args: rec.record(name, grid, args, "general")
    direct.compiled_for = lambda device, args: FakeCompiled(name, direct._descs, rec)
    direct.same_knobs = lambda key: True


def bf16_call(m: int, n: int, k: int) -> tuple[Any, ...]:
    return torch.randn(m, k).to(BF16), torch.randn(n, k).to(BF16).t(), None, None


def rowwise_call(m: int, n: int, k: int) -> tuple[Any, ...]:
    return (torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t(), torch.rand(m, 1) + 0.5,
            torch.rand(1, n) + 0.5)


def blockwise_call(m: int, n: int, k: int) -> tuple[Any, ...]:
    kb = -(-k // 128)
    return (torch.randn(m, k).to(E4), torch.randn(n, k).to(E4).t(), (torch.rand(kb, m) + 0.5).t(),
            torch.rand(kb, -(-n // 128)) + 0.5)


CASES = [
    ("bf16 split-K (rule 25)", bf16_call, (43, 88, 7960), {}),
    ("bf16 split-K, fitted columns", bf16_call, (2090, 96, 7792), {}),
    ("bf16 split-K, forced", bf16_call, (300, 520, 4096), {"split_k": 4}),
    ("bf16 split-K tail", bf16_call, (1500, 4096, 4096), {"tail_split": 2}),
    # (its 96 tiles are the grid's one wave: whole tiles only, no tail launched; the grid is never above the tiles,
    # so a tail alone does not occur)
    ("bf16 tail plan, one whole wave", bf16_call, (300, 4096, 4096), {"tail_split": 2}),
    ("fp8 rowwise split-K", rowwise_call, (731, 240, 8704), {"split_k": 4}),
    ("blockwise split-K (rule 14)", blockwise_call, (4, 816, 10400), {}),
]


@pytest.mark.parametrize("make,size,forced", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bound_call_launches_what_the_general_path_launches(monkeypatch: pytest.MonkeyPatch, make: Any,
                                                              size: tuple[int, int, int],
                                                              forced: dict[str, Any]) -> None:
    m, n, k = size
    a, b, sa, sb = make(m, n, k)
    if sa is None:
        spec = checks.matmul_spec(a, b)
    else:
        spec = checks.scaled_mm_spec(a, b, sa, sb, None, BF16, make is rowwise_call)
    kern = build(spec, H200, plan_schedule(spec, H200, **forced))
    assert kern.plan.split_k > 1 or kern.plan.tail_split > 1
    launcher, rec = recorded(kern, monkeypatch)
    assert launcher.can_bind

    def out() -> Any:
        return torch.empty(m, n, dtype=BF16)

    first = out()
    launcher(a, b, first, sa, sb)
    general = list(rec.log)
    # (split-K: the kernel and its reduce; a tail plan: the whole waves' kernel where there are whole waves, then the
    # tail's kernel and its reduce where tiles are left)
    parts = launcher._parts(a, b)
    assert len(general) == sum(1 if la is launcher and la._tiling.split_k == 1 else 2 for la, _ in parts)
    bound = launcher.bind(a, b, first, sa, sb)
    assert bound is not None
    empty = bound._empty

    def workspace(shape: tuple[int, int], device: Any) -> Any:  # (the bound call's own, one per part)
        ws = empty(shape, device=device)
        rec.workspaces.append(ws)
        return ws

    bound._empty = workspace
    for call in [(a, b, sa, sb), (a, b, sa, sb), make(m, n, k)]:  # the binding call's tensors again, then new ones
        c = out()
        rec.log.clear()
        rec.workspaces.clear()
        launcher(*call[:2], c, *call[2:])
        want = list(rec.log)
        rec.log.clear()
        rec.ws_used.clear()
        assert bound(*call[:2], c, *call[2:]) is c
        assert [(g, args) for _, g, args in rec.log] == [(g, args) for _, g, args in want]
        assert [name for name, _, _ in rec.log] == [name for name, _, _ in want]
    # Each split part's workspace is the one its main kernel wrote and its reduce read (a tail's part has its own).
    used = rec.ws_used
    if len(used) == 1:  # (a tail plan whose tiles are whole waves: no split kernel runs)
        assert used == [[]]
        return
    assert [len(set(w)) for w in used] == ([0] if len(used) == 3 else []) + [1, 1]  # (a fitted tile's widths: one)
    assert set(used[-1]) == set(used[-2])


def test_rule_29s_two_passes_never_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its (M,) amax workspace must be zeroed for every call: it keeps the general path."""
    import warploom

    a, b = torch.randn(256, 512).to(BF16), torch.randn(1024, 512).to(BF16).t()
    kern = warploom.plan(a, b, epilogue=lambda acc: warploom.quantize(acc, recipe="rowwise"))
    if kern.module.amax_pass is None:
        kern = build(kern.spec, H200, dataclasses.replace(kern.plan, amax_pass=True))
    launcher, _ = recorded(kern, monkeypatch)
    assert not launcher.can_bind and launcher.bind(a, b, torch.empty(256, 1024, dtype=E4)) is None


def _bound_tail(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Recorder, tuple[Any, ...]]:
    """A split-K tail plan's launcher (whole waves, then the tail's kernel and reduce), bound, and its call."""
    m, n, k = 1500, 4096, 4096
    a, b, _, _ = bf16_call(m, n, k)
    spec = checks.matmul_spec(a, b)
    kern = build(spec, H200, plan_schedule(spec, H200, tail_split=2))
    launcher, rec = recorded(kern, monkeypatch)
    out = torch.empty(m, n, dtype=BF16)
    launcher(a, b, out)
    bound = launcher.bind(a, b, out)
    assert bound is not None and [len(steps) for _, steps in bound.parts] == [1, 2]
    return launcher, bound, rec, (a, b, out)


def test_live_launch_hooks_get_the_bound_calls_arguments_of_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a live launch hook each kernel goes through the compiled kernel's hook path, with the arguments the
    getters read: a ranged kernel's tiles among them (its span), the same as the general path's."""
    launcher, bound, rec, (a, b, out) = _bound_tail(monkeypatch)
    rec.log.clear()
    launcher(a, b, out)
    want = [(g, args) for _, g, args in rec.log]
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda meta: None)
    rec.log.clear()
    rec.paths.clear()
    bound(a, b, out)
    assert rec.paths == ["bound"] * 3
    got = [(g, args) for _, g, args in rec.log]
    assert [g for g, _ in got] == [g for g, _ in want]
    # (tensors shown alike; the workspaces are new for each call: the same shapes, fp32)
    assert [[x if not isinstance(x, tuple) else x[2:] for x in args] for _, args in got] == \
        [[x if not isinstance(x, tuple) else x[2:] for x in args] for _, args in want]


def test_changed_knobs_of_any_kernel_send_the_call_to_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound call takes its template only while every kernel it launches is what the JIT would launch: knobs
    changed for the last kernel alone (the tail's reduce) send the whole call through the launcher."""
    launcher, bound, rec, (a, b, out) = _bound_tail(monkeypatch)
    rec.paths.clear()
    bound(a, b, out)
    assert rec.paths == ["bound"] * 3
    launcher._tail._reduce.same_knobs = lambda key: False
    rec.paths.clear()
    bound(a, b, out)
    assert rec.paths == ["general"] * 3
