"""Planner rule 29 on grouped GEMMs, the parts no other CPU tier runs: the generated ``row_owned`` helper the cast
kernel asks (executed as Python on the bounds a GPU may see, out-of-range ones too) against the rows the first
pass's tile scan stores, and `GroupedLauncher`'s host side (its two launches recorded, no GPU): a fresh zeroed amax
every call, whatever the previous call's first pass left in its own, and the cast kernel's bounds, G and M.

The simulator computes a grouped cast pass's rows from `ir.raster.group_bounds`
(tests/sim/test_grouped_amax_pass_sim.py) and the compile tier only compiles the helper, so a cast kernel casting a
row the first pass never stored (an uninitialized workspace row) or skipping one it did would show up first on a GPU;
here it shows up on the CPU.
"""

from __future__ import annotations

import random
import types
from typing import Any

import pytest
import torch

import warploom
from warploom import H100_SXM
from warploom.backends import gluon_raster
from warploom.backends.gluon_cast import cast_params
from warploom.backends.group_scan import group_helpers, row_owner_helper
from warploom.checks_grouped import grouped_call
from warploom.errors import InputError
from warploom.grouped import _fused
from warploom.ir.raster import group_bounds
from warploom.kernel import build
from warploom.runtime.launch_grouped import GroupedLauncher
from warploom.spec import Grouping

BF16, E4 = torch.bfloat16, torch.float8_e4m3fn


class _Ptr:
    """A device pointer into the bounds: ``group_ptr + g`` then ``gl.load``."""

    def __init__(self, vals: list[int], off: int = 0) -> None:
        self.vals, self.off = vals, off

    def __add__(self, k: int) -> _Ptr:
        return _Ptr(self.vals, self.off + k)


# (the scan's and row_owned's gl calls on Python scalars)
_GL = types.SimpleNamespace(minimum=min, maximum=max, load=lambda p: p.vals[p.off], cdiv=lambda a, b: -(-a // b),
                            where=lambda c, a, b: a if c else b)


def _helpers(grouping: Grouping, bm: int, bn: int) -> dict[str, Any]:
    """The grouped kernel's own tile scan and its cast kernel's ``row_owned``, as Python."""
    src = gluon_raster.RASTER + group_helpers(grouping) + row_owner_helper(grouping)
    env: dict[str, Any] = {"gl": _GL, "GROUP_M": 8, "BM": bm, "BN": bn}
    exec(src.replace("@gluon.jit\n", ""), env)  # noqa: S102 - the emitter's own helpers
    return env


@pytest.mark.parametrize("grouping", [Grouping.OFFSETS, Grouping.MASKED])
def test_row_owned_is_the_rows_the_tile_scan_stores(grouping: Grouping) -> None:
    """For random bounds, in range or not (decreasing or too-large offsets, negative counts or counts past M_max: the
    device clamps them, nothing checks them there), G = 1 and M = 0 among them: the rows ``row_owned`` casts are
    exactly the rows the scan's tiles store (clipped at each group's end), and `group_bounds`' (the simulator's)."""
    rng = random.Random(29)
    for _ in range(400):
        g, bm, n, bn = rng.randint(1, 5), rng.choice([64, 128]), 300, 128
        if grouping is Grouping.MASKED:
            cap = rng.randint(0, 200)
            m, vals = g * cap, [rng.randint(-5, cap + 5) for _ in range(g)]
        else:
            m = rng.randint(0, 600)
            vals = [rng.randint(-5, m + 50) for _ in range(g)]
            vals = sorted(vals) if rng.random() < 0.5 else vals
        env, ptr, pid_n = _helpers(grouping, bm, bn), _Ptr(vals), -(-n // bn)
        stored: set[int] = set()
        for t in range(env["group_count"](ptr, g, m, pid_n)):
            _, off_m, _, row_end = env["group_tile"](t, ptr, g, m, pid_n)
            stored |= set(range(off_m, min(off_m + bm, row_end)))
        owned = {r for r in range(m) if env["row_owned"](r, ptr, g, m)}
        ref = {r for s, e in group_bounds(grouping, vals, m) for r in range(s, e)}
        assert stored == owned == ref, (grouping, g, m, vals)


class _Recorder:
    """A DirectLaunch stand-in recording each launch's grid and arguments (by the kernel's parameter names), and the
    amax workspace as the launch found it; `first_pass` then writes it as the first pass's atomics would."""

    def __init__(self, params: tuple[str, ...], first_pass: bool) -> None:
        self.params, self.first_pass = params, first_pass
        self.calls: list[tuple[int, dict[str, Any], torch.Tensor]] = []

    def launch(self, grid: int, args: list[Any]) -> None:
        named = dict(zip(self.params, args, strict=True))
        amax = named["amax_ptr"]
        self.calls.append((grid, named, amax.clone()))
        if self.first_pass:
            amax.fill_(0x3F800000)  # (1.0's bits: what a previous routing's tiles added)


def _launcher(masked: bool) -> tuple[GroupedLauncher, _Recorder, _Recorder, Any]:
    fn = lambda acc: warploom.quantize(acc, recipe="rowwise")  # noqa: E731
    if masked:
        a, w = torch.zeros(3, 100, 64, dtype=BF16), torch.zeros(3, 264, 64, dtype=BF16).transpose(-2, -1)
        call = grouped_call(a, w, None, torch.tensor([7, 0, 100], dtype=torch.int32), None)
    else:
        a, w = torch.zeros(300, 64, dtype=BF16), torch.zeros(3, 264, 64, dtype=BF16).transpose(-2, -1)
        call = grouped_call(a, w, torch.tensor([70, 70, 250], dtype=torch.int32), None, None)
    call, *_ = _fused(call, fn, {})
    k = build(call.spec, H100_SXM)
    assert k.module.amax_pass is not None and k.gluon.cast_kernel
    launcher = GroupedLauncher(k.module, k.gluon)
    main, cast = _Recorder(k.gluon.params, True), _Recorder(cast_params(k.module.tiling.grouping), False)
    launcher._main, launcher._cast = main, cast  # type: ignore[assignment]
    return launcher, main, cast, call


@pytest.mark.parametrize("masked", [False, True], ids=["offsets", "masked"])
def test_two_passes_host_side(masked: bool) -> None:
    """Each call's first pass finds a zeroed amax of its own (M,), though the previous call's first pass left it
    nonzero (a stale amax would scale the next routing's rows by the last one's); the cast kernel gets one program a
    row of C, the same amax, the workspace (M, N) at row stride N, q's and s's row strides, the bounds and G."""
    launcher, main, cast, call = _launcher(masked)
    m, n = call.a.shape[0], 264
    q, s = torch.empty(m, n, dtype=E4), torch.empty(m, 1)
    bounds = [torch.tensor(v, dtype=torch.int32) for v in (([7, 0, 100], [100, 3, 0]) if masked else
                                                            ([70, 70, 250], [10, 200, 300]))]
    for b in bounds:
        assert launcher(call.a, call.b, b, q, extra_outs=(s,)) is q
    assert len(main.calls) == len(cast.calls) == 2
    for (_, first, seen), (grid, second, _) in zip(main.calls, cast.calls, strict=True):
        assert torch.equal(seen, torch.zeros(m, dtype=torch.int32))  # (zeroed per call)
        assert first["M"] == m and first["amax_ptr"] is second["amax_ptr"] and first["c_desc"] is second["ws_ptr"]
        ws = second["ws_ptr"]
        assert ws.shape == (m, n) and ws.dtype == torch.float32 and second["ws_stride_m"] == n
        assert grid == m and (second["M"], second["N"]) == (m, n)
        assert second["q_ptr"] is q and second["s_ptr"] is s
        assert (second["q_stride_m"], second["s_stride_m"]) == (n, 1)
        assert second["E"] == 3
    assert cast.calls[0][1]["group_ptr"] is bounds[0] and cast.calls[1][1]["group_ptr"] is bounds[1]
    assert main.calls[0][1]["amax_ptr"] is not main.calls[1][1]["amax_ptr"]  # (a workspace per call)


def test_two_passes_refuse_other_outputs_before_launching() -> None:
    launcher, main, cast, call = _launcher(False)
    q = torch.empty(300, 264, dtype=E4)
    with pytest.raises(InputError, match=r"extra_outs: expected \(s,\)"):
        launcher(call.a, call.b, torch.tensor([70, 70, 250], dtype=torch.int32), q)
    assert main.calls == cast.calls == []
