"""The on-disk autotune cache: one JSON file per key, validated on every read, written atomically under a lock.

Layout: ``<root>/autotune/<sha256 of the key text>.json``, root being ``WARPLOOM_CACHE_DIR`` or platformdirs'
user cache dir for warploom (settings.py), and ``<root>/autotune/.lock`` the one lock every writer and `clear`
take (filelock: processes and threads alike).

An entry holds the schema version, the key text itself, the chosen plan's fields, every trial, and a sha256 of
all of that. A read trusts nothing: each of these makes the entry a miss, with a `StaleCacheWarning` that names
the file and the reason, and the next tune overwrites it:
- the path is not a regular file of at most `MAX_ENTRY_BYTES` (a FIFO, a link to a device: never opened blocking);
- the file is not UTF-8 JSON (e.g. truncated by a crash of an older writer, or edited), nests too deep, holds
  NaN or Infinity, or an integer too long for Python to parse;
- a field is missing or has the wrong type; the schema is not this warploom's;
- the checksum does not match the content (a bit flip, a hand edit);
- the stored key text is not the expected one (another warploom, triton, torch or CUDA; a hash collision);
- the plan no longer builds: `Plan(**fields)` rejects its fields, or the planner, forced to its knobs, raises
  or builds a different plan (`candidates.replan`).

Writes go to a temporary file in the same directory that is then `os.replace`d over the entry, so a reader
sees the old file or the new one, never half of one; the lock orders concurrent writers and `clear`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warploom.device import DeviceInfo
from warploom.errors import InputError, UnsupportedError, WarploomError
from warploom.planner import Plan
from warploom.runtime.files import read_regular
from warploom.spec import GemmSpec
from warploom.tune import settings
from warploom.tune.candidates import replan
from warploom.tune.key import SCHEMA, CacheKey, explain_mismatch
from warploom.tune.result import Trial

# The largest entry read (a few hundred trials are ~100 KB); a larger file is a miss, not a long read.
MAX_ENTRY_BYTES = 4 << 20
# How long a writer waits for the lock before it gives up caching this result (it never blocks tuning).
LOCK_TIMEOUT_S = 30.0


class StaleCacheWarning(UserWarning):
    """A cache entry was ignored as corrupt or stale; the spec is re-tuned and the entry overwritten."""


class _Invalid(WarploomError):
    """Why an entry cannot be trusted (internal: turned into a StaleCacheWarning)."""


@dataclass(frozen=True)
class Entry:
    """A cached tuning result.

    Attributes:
        key: the key text it was written for.
        plan: the winning schedule.
        trials: every candidate's outcome when it was tuned.
    """

    key: str
    plan: Plan
    trials: tuple[Trial, ...]


def _no_constant(name: str) -> Any:
    """json.loads accepts NaN and Infinity, which no entry holds (the writer passes allow_nan=False)."""
    raise ValueError(f"{name} is not JSON")


def checksum(body: dict[str, Any]) -> str:
    """sha256 of an entry's fields other than the checksum, as canonical JSON."""
    data = {k: v for k, v in body.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _plan_fields(plan: Plan) -> dict[str, Any]:
    return dataclasses.asdict(plan)


# Plan's field annotations (strings: planning/plan.py uses postponed annotations) and the JSON types they need; a
# bool is not an int here, though Python's isinstance says it is.
_FIELD_TYPES: dict[str, type] = {"int": int, "bool": bool}


def _plan(raw: Any, what: str) -> Plan:
    if not isinstance(raw, dict):
        raise _Invalid(f"{what} is not a JSON object")
    for f in dataclasses.fields(Plan):
        want = _FIELD_TYPES.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        if f.name in raw and want is not None and type(raw[f.name]) is not want:
            raise _Invalid(f"{what}'s {f.name} is {raw[f.name]!r}, expected a JSON {want.__name__}")
    try:
        return Plan(**raw)
    except (TypeError, ValueError) as e:  # a field this warploom's Plan does not have, lacks, or refuses
        raise _Invalid(f"{what} does not match this warploom's Plan ({e})") from None


def encode(entry: Entry) -> dict[str, Any]:
    """An entry as the JSON object the cache file holds."""
    body: dict[str, Any] = {
        "schema": SCHEMA,
        "key": entry.key,
        "plan": _plan_fields(entry.plan),
        "trials": [{"plan": _plan_fields(t.plan), "ms": t.ms, "error": t.error} for t in entry.trials],
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    body["checksum"] = checksum(body)
    return body


def decode(body: Any, key: CacheKey) -> Entry:
    """Check a parsed cache file against `key`; raises _Invalid naming the first problem."""
    if not isinstance(body, dict):
        raise _Invalid("the file is not a JSON object")
    if body.get("schema") != SCHEMA:
        raise _Invalid(f"schema {body.get('schema')!r}, this warploom writes {SCHEMA}")
    for name, typ in (("key", str), ("plan", dict), ("trials", list), ("checksum", str)):
        if not isinstance(body.get(name), typ):
            raise _Invalid(f"field {name!r} is missing or not a {typ.__name__}")
    if body["checksum"] != checksum(body):
        raise _Invalid("checksum mismatch (the file was edited or damaged)")
    expected = key.text()
    if body["key"] != expected:
        raise _Invalid(explain_mismatch(body["key"], expected))
    plan = _plan(body["plan"], "the plan")
    trials = []
    for i, t in enumerate(body["trials"]):
        if not isinstance(t, dict):
            raise _Invalid(f"trial {i} is not a JSON object")
        ms, error = t.get("ms"), t.get("error")
        timed = ms is None or (type(ms) in (int, float) and 0 < ms < math.inf)
        if not timed or not (error is None or isinstance(error, str)):
            raise _Invalid(f"trial {i} has ms={ms!r} error={error!r}: expected a positive time or a reason")
        try:
            trials.append(Trial(_plan(t.get("plan"), f"trial {i}'s plan"), ms, error))
        except ValueError as e:
            raise _Invalid(f"trial {i}: {e}") from None
    if not any(t.plan == plan and t.ok for t in trials):
        raise _Invalid("the plan is not among its correct trials")
    _still_builds(key.spec, key.device, plan)
    return Entry(body["key"], plan, tuple(trials))


def _still_builds(spec: GemmSpec, device: DeviceInfo, plan: Plan) -> None:
    try:
        again = replan(spec, device, plan)
    except (UnsupportedError, TypeError, ValueError, ArithmeticError) as e:  # (a huge field: OverflowError)
        raise _Invalid(f"the planner no longer builds its plan {plan.short()}: {e}") from None
    if again != plan:
        raise _Invalid(f"the planner now builds {again.short()} for its plan {plan.short()} "
                       f"({_differences(plan, again)})")


def _differences(old: Plan, new: Plan) -> str:
    return ", ".join(f"{f.name} {getattr(old, f.name)!r} -> {getattr(new, f.name)!r}"
                     for f in dataclasses.fields(Plan) if getattr(old, f.name) != getattr(new, f.name))


class Cache:
    """The cache directory ``<root>/autotune``; `root` defaults to `settings.cache_root()` when used."""

    def __init__(self, root: Path | str | None = None) -> None:
        if root is not None and not isinstance(root, (str, Path)):  # (os.PathLike's TypeError named no argument)
            from warploom.errors import ArgumentTypeError

            raise ArgumentTypeError("root", "a directory path (str or pathlib.Path) or None", type(root).__name__,
                                    "pass the cache's directory, or None for the configured one")
        self._root = Path(root) if root is not None else None

    @property
    def directory(self) -> Path:
        return (self._root if self._root is not None else settings.cache_root()) / "autotune"

    def path(self, key: CacheKey) -> Path:
        return self.directory / f"{key.digest()}.json"

    def _lock(self) -> Any:
        from filelock import FileLock

        self.directory.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.directory / ".lock"), timeout=LOCK_TIMEOUT_S)

    def load(self, key: CacheKey) -> Entry | None:
        """The valid entry for `key`, or None (a missing file silently; an invalid one with a warning)."""
        path = self.path(key)
        try:
            raw = read_regular(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except OSError as e:  # (NotRegular: a FIFO, a device, a directory, a huge file)
            _warn(path, f"it cannot be read ({e})")
            return None
        try:
            return decode(json.loads(raw.decode("utf-8"), parse_constant=_no_constant), key)
        except (ValueError, RecursionError) as e:  # (JSONDecodeError, UnicodeDecodeError: ValueErrors)
            # RecursionError: deep nesting; ValueError: also an integer past Python's digit limit, or NaN/Infinity
            _warn(path, f"it is not valid JSON ({type(e).__name__}: {str(e)[:200]}; truncated or damaged)")
        except _Invalid as e:
            _warn(path, str(e))
        return None

    def store(self, key: CacheKey, entry: Entry) -> Path | None:
        """Write `entry` for `key` atomically; None (with a warning) when the lock or the disk fails."""
        from filelock import Timeout

        path = self.path(key)
        data = json.dumps(encode(entry), indent=1, sort_keys=True, allow_nan=False).encode()
        try:
            with self._lock():
                fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=path.stem + ".", suffix=".tmp")
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())  # the bytes are on disk before the name points at them
                    os.replace(tmp, path)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except (Timeout, OSError) as e:
            warnings.warn(f"warploom autotune cache: could not write {path} ({e}); the result is not cached",
                          StaleCacheWarning, stacklevel=3)
            return None
        return path

    def clear(self) -> int:
        """Remove every entry (and leftover temporary file); returns how many files went. The lock file stays:
        removing a lock another process holds would let a third take it too."""
        if not self.directory.is_dir():
            return 0
        removed = 0
        try:
            with self._lock():
                for p in self.directory.iterdir():
                    if p.suffix in (".json", ".tmp") and p.is_file():
                        p.unlink(missing_ok=True)
                        removed += 1
        except OSError as e:  # (filelock's Timeout is one too)
            raise InputError("WARPLOOM_CACHE_DIR", "an autotune cache directory this process may write",
                             f"{self.directory}: {e}", "make it writable, or point WARPLOOM_CACHE_DIR at one "
                             "that is") from None
        for forget in CLEARED:
            forget()  # ordinary calls must not keep running a plan whose entry is gone
        return removed


# Called after `Cache.clear` removed entries. tune/lookup.py, which remembers what it read from the cache, adds its
# `forget` here when imported: it imports this module, and this module never imports it.
CLEARED: list[Callable[[], None]] = []


_cleared: set[Path] = set()


def clear_requested_once(cache: Cache) -> None:
    """Honour WARPLOOM_AUTOTUNE_CLEAR=1: clear `cache` on its first use in this process only, so the results
    tuned after the clear are kept for the rest of the process."""
    d = cache.directory.resolve()
    if settings.clear_requested() and d not in _cleared:
        _cleared.add(d)
        cache.clear()


def clear_cache(root: Path | str | None = None) -> int:
    """Remove every autotune cache entry under `root` (default: the configured cache); returns the count."""
    return Cache(root).clear()


def _warn(path: Path, why: str) -> None:
    warnings.warn(f"warploom autotune cache: ignoring {path}: {why}; it will be re-tuned and overwritten",
                  StaleCacheWarning, stacklevel=3)
