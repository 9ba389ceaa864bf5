"""Compile-only tier for gfx1250 warp-usage masks (seed 004, Triton >= 3.8's ``warp_used_hint``).

A gfx1250 wave runs the same code as its neighbours, so a TDM copy that only some waves issue shows in the code as
a predicate, not as fewer instructions: every wave executes each ``tensor_load_to_lds``, and the descriptor's first
dword (group 0, element 0: the copy's predicate) is 0 in the waves that do not issue it. These tests count, per
wave, the copies whose predicate is not known to be 0 there, by evaluating that dword in the LLVM IR Triton hands
the AMDGPU backend (``llvm.amdgcn.wave.id()`` set to each wave, every other value unknown), and check the AMDGCN
itself: the same static count of ``tensor_load_to_lds``, the wave id read from ``ttmp8``, the per-wave tile rows in
the descriptor and the wait's count (each issuing wave counts its own copies). Nothing runs: no gfx1250 is here.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from warploom import GemmSpec
from warploom.backends import gluon_api
from warploom.device import GFX1250
from warploom.kernel import build
from warploom.planner import TdmWarps, plan_schedule

pytestmark = pytest.mark.skipif(not gluon_api.current().tdm_warp_hint,
                                reason="TDM warp_used_hint needs Triton >= 3.8 (version-gated feature; "
                                       "scripts/test.sh runs tests/compile under 3.9)")

_WAVES = 4
_DEF = re.compile(r"^\s*(%[\w.]+) = (.*)$", re.M)


def _defs(llir: str) -> dict[str, str]:
    return {name: rhs.split(", !")[0] for name, rhs in _DEF.findall(llir)}


def _value(defs: dict[str, str], v: str, wave: int) -> int | None:
    """`v` (an i32/i1 value) in wave `wave`, or None where it depends on anything but the wave id."""
    v = v.strip()
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    if v in ("true", "false"):
        return int(v == "true")
    rhs = defs.get(v)
    if rhs is None:
        return None
    if "@llvm.amdgcn.wave.id()" in rhs:
        return wave
    found = re.fullmatch(r"zext i1 (\S+) to i32", rhs)
    if found:
        return _value(defs, found.group(1), wave)
    found = re.fullmatch(r"(and|or) i(?:1|32) (\S+), (\S+)", rhs)
    if found:
        a, b = (_value(defs, x.rstrip(","), wave) for x in found.group(2, 3))
        if found.group(1) == "and":
            return 0 if 0 in (a, b) else None if None in (a, b) else a & b  # type: ignore[operator]
        return None if None in (a, b) else a | b  # type: ignore[operator]
    found = re.fullmatch(r"icmp (eq|ne) i32 (\S+), (\S+)", rhs)
    if found:
        a, b = (_value(defs, x.rstrip(","), wave) for x in found.group(2, 3))
        if a is None or b is None:
            return None
        return int((a == b) == (found.group(1) == "eq"))
    return None


def _predicate(defs: dict[str, str], group0: str, wave: int) -> str | None:
    """The value inserted as element 0 of a copy's descriptor group 0 in wave `wave` (a fused copy selects each
    wave's member's descriptor by the wave id)."""
    while group0 in defs:
        picked = re.fullmatch(r"select i1 (\S+), <4 x i32> (\S+), <4 x i32> (\S+)", defs[group0])
        if picked:
            cond = _value(defs, picked.group(1).rstrip(","), wave)
            if cond is None:
                return None
            group0 = picked.group(2 if cond else 3).rstrip(",")
            continue
        found = re.fullmatch(r"insertelement <4 x i32> (\S+|<[^>]*>), i32 (\S+), i64 (\d+)", defs[group0])
        if found is None:
            return None
        if found.group(3) == "0":
            return found.group(2)
        group0 = found.group(1)
    return None


def copies_per_wave(llir: str) -> list[int]:
    """For each wave, the tensor_load_to_lds calls whose predicate is not known to be 0 in it."""
    defs = _defs(llir)
    calls = re.findall(r"call void @llvm\.amdgcn\.tensor\.load\.to\.lds\(<4 x i32> (%[\w.]+)", llir)
    counts = []
    for wave in range(_WAVES):
        preds = [_predicate(defs, g, wave) for g in calls]
        counts.append(sum(p is None or _value(defs, p, wave) != 0 for p in preds))
    return counts


def tile_rows(llir: str) -> set[int]:
    """The per-wave tile rows (descriptor group 1, element 4) of the kernel's copies."""
    return {int(r) for r in re.findall(r"insertelement <8 x i32> <i32 \d+, i32 poison, i32 poison, i32 poison, "
                                       r"i32 (\d+),", llir)}


# (choice, copy instructions in the code, copies each wave issues, per-wave rows, the k-loop's wait), for S stages:
# 2S copies (S - 1 blocks of A and B in the prologue, one of each in the loop), or S fused ones (one a block).
CASES = [
    (TdmWarps.EVERY, lambda s: 2 * s, lambda s: [2 * s] * 4, 128 // 4, 2),
    (TdmWarps.SPLIT, lambda s: 2 * s, lambda s: [s, s, 0, 0], 128, 1),
    (TdmWarps.ONE, lambda s: 2 * s, lambda s: [2 * s, 0, 0, 0], 128, 2),
    (TdmWarps.FUSED, lambda s: s, lambda s: [s, s, 0, 0], 128, 1),
]


@pytest.mark.parametrize("choice,static,per_wave,rows,pending", CASES, ids=[c[0].name for c in CASES])
def test_tensor_load_to_lds_per_wave(choice: TdmWarps, static: Callable[[int], int],
                                     per_wave: Callable[[int], list[int]], rows: int, pending: int) -> None:
    spec = GemmSpec(4096, 4096, 4096)
    kern = build(spec, GFX1250, plan_schedule(spec, GFX1250, tdm_warps=choice))
    assert ("warp_used_hint=" in kern.source) is (choice in (TdmWarps.SPLIT, TdmWarps.ONE))
    c = kern.compile()
    s, stages = c.summary(), kern.plan.stages
    # Every wave runs every copy instruction: the static count is the schedule's, whatever the mask.
    assert c.count("tensor_load_to_lds") == static(stages), s
    assert ("tdm.async_load_fused" in kern.source) is (choice is TdmWarps.FUSED)
    assert copies_per_wave(c.ptx) == per_wave(stages), s
    assert tile_rows(c.ptx) == {rows}, s
    # The wave id (ttmp8 bits 25..29) feeds the predicates only where a mask is planned.
    assert bool(re.search(r"s_bfe_u32 s\d+, ttmp8, 0x50019", c.sass)) or choice is TdmWarps.EVERY
    waits = {int(n, 16) for n in re.findall(r"^\s*s_wait_tensorcnt 0x([0-9a-f]+)", c.sass, re.M)}
    assert {w for w in waits if w < 2 * stages} == {0, pending * (stages - 2)}, (waits, s)
    assert c.spills == 0


def test_fused_epilogue_with_split_compiles() -> None:
    from warploom import Accumulation, BLayout, DType
    from warploom.spec import ScaleRecipe

    spec = GemmSpec(1000, 1000, 1000, DType.E4M3, DType.E4M3, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                    Accumulation.NATIVE, DType.BF16)
    kern = build(spec, GFX1250, plan_schedule(spec, GFX1250, tdm_warps=TdmWarps.SPLIT))
    c = kern.compile()
    assert copies_per_wave(c.ptx) == [kern.plan.stages, kern.plan.stages, 0, 0], c.summary()
