"""The autotuner's environment variables, read when used (never at import), each parsed strictly.

WARPLOOM_AUTOTUNE=0          skip tuning: autotune returns the planner's default plan and touches no cache.
WARPLOOM_AUTOTUNE_CLEAR=1    clear the cache once in this process, before its first lookup.
WARPLOOM_AUTOTUNE_VERBOSE=1  print the chosen schedule and the timing table after each autotune call.
WARPLOOM_CACHE_DIR=path      the cache's root instead of platformdirs' user cache dir for "warploom".

A flag takes 1/0, true/false, yes/no or on/off (any case); anything else raises, so a typo is not silently
ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

from warploom.errors import InputError

AUTOTUNE_ENV = "WARPLOOM_AUTOTUNE"
CLEAR_ENV = "WARPLOOM_AUTOTUNE_CLEAR"
VERBOSE_ENV = "WARPLOOM_AUTOTUNE_VERBOSE"
CACHE_DIR_ENV = "WARPLOOM_CACHE_DIR"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(name: str, default: bool) -> bool:
    """The boolean environment variable `name`; `default` when unset or empty."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise InputError(name, f"one of {'/'.join(_TRUE)} or {'/'.join(_FALSE)}", repr(os.environ[name]),
                     f"set {name}=1 or {name}=0, or unset it")


def enabled() -> bool:
    return flag(AUTOTUNE_ENV, True)


def clear_requested() -> bool:
    return flag(CLEAR_ENV, False)


def verbose() -> bool:
    return flag(VERBOSE_ENV, False)


def cache_root() -> Path:
    """WARPLOOM_CACHE_DIR, or platformdirs' per-user cache directory for warploom."""
    raw = os.environ.get(CACHE_DIR_ENV, "").strip()
    if raw:
        return Path(raw).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("warploom"))
