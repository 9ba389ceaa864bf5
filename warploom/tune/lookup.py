"""Tuned plans for ordinary calls: `warploom.matmul`, `scaled_mm` and `plan` run the plan `tune_*` cached.

Tuning runs only when asked (`warploom.tune.tune_matmul` / `tune_scaled_mm`): timing candidates inside a call
that looks like a matmul would be a surprise. But once a problem has been tuned on this machine, every later
call of it, in any process, runs the winner. The disk cache is read once per (spec, device, strides) in a
process and the answer (a plan, or none) remembered; `forget()`, called whenever a tune stores a winner, drops
that memory. `WARPLOOM_AUTOTUNE=0` turns the lookup off as it turns tuning off (read at a key's first lookup).

An entry passes the cache's own validation (checksum, key text, warploom/triton/torch versions and warploom's
source digest, and that its plan still builds for the spec) before it is used; it is not re-run here, since the
tune that stored it checked its output and a changed warploom has another source digest, so never reads it.
"""

from __future__ import annotations

from warploom.device import DeviceInfo
from warploom.planner import Plan
from warploom.spec import GemmSpec
from warploom.tune import cache, settings
from warploom.tune.key import CacheKey

_MEMO: dict[tuple[GemmSpec, DeviceInfo, tuple[tuple[int, ...], ...]], Plan | None] = {}
_MAX = 4096


def tuned_plan(spec: GemmSpec, device: DeviceInfo, strides: tuple[tuple[int, ...], ...]) -> Plan | None:
    """The cached tuned plan for `spec` on `device` with operand `strides` (a's and b's), or None."""
    key = (spec, device, strides)
    try:
        return _MEMO[key]
    except KeyError:
        pass
    plan = None
    if spec.epilogue is None and spec.flops and settings.enabled():  # tune_* tunes plain problems only
        entry = cache.Cache().load(CacheKey(spec, device, strides))
        plan = entry.plan if entry is not None else None
    if len(_MEMO) >= _MAX:
        _MEMO.clear()
    _MEMO[key] = plan
    return plan


def forget() -> None:
    """Drop every remembered lookup (a tune just stored a new winner, or the cache was cleared), and every eager
    call remembered with the plan it found (warploom/eager.py)."""
    from warploom import eager

    _MEMO.clear()
    eager.forget()


cache.CLEARED.append(forget)
