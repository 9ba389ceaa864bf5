"""Property: a random corruption of an autotune cache file (its bytes, its JSON's shape, a field's value, what kind
of file is at the path) makes `Cache.load` a miss with a StaleCacheWarning; never an exception, a hang or a stale hit.

Field edits are re-signed (a fresh checksum) so that the check under test is the field's, not the checksum's. A hit
is allowed only for this key: after an unsigned change that left the entry whole (whitespace, the `written` date),
the stored entry; after a re-signed edit into another valid entry (another plan the planner builds, another time),
what the file says.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st
from props import examples, figures
from test_tune_cache import cache, entry, key  # noqa: F401 - cache: the fixture (a temp dir)

from warploom.planner import Plan
from warploom.tune import cache as cache_mod
from warploom.tune.cache import Cache, StaleCacheWarning, checksum

COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures('cache corruptions', COUNTS)
RESIGNED = {"field", "plan", "trial", "drop", "extra", "key"}  # kinds of corruption that write a fresh checksum
HANG_S = 10  # a load that takes longer has hung (a FIFO opened blocking, /dev/zero read to the end)

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)
FIELD_VALUES = st.one_of(JSON, st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, 0.5, float("nan"), float("inf"), "",
                                                "x", True, False, None, [], {}]))


def _body(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _sign_and_write(path: Path, body: Any) -> None:
    if isinstance(body, dict):
        try:
            body["checksum"] = checksum(body)
        except (TypeError, ValueError):  # (a NaN or a non-string key: leave the old checksum)
            pass
    path.write_text(json.dumps(body))


@st.composite
def corruption(draw: st.DrawFn) -> tuple[str, Callable[[Path], None]]:
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "garbage", "whole JSON", "field", "plan field",
                                 "trial field", "drop field", "extra field", "key text", "FIFO", "/dev/zero",
                                 "directory", "too large", "link loop"]))
    if kind == "truncate":
        frac = draw(st.floats(0, 0.999))
        return kind, lambda p: p.write_bytes(p.read_bytes()[: int(len(p.read_bytes()) * frac)])
    if kind == "flip":
        pos, byte = draw(st.floats(0, 0.999)), draw(st.integers(0, 255))

        def flip(p: Path) -> None:
            raw = bytearray(p.read_bytes())
            raw[int(len(raw) * pos)] = byte
            p.write_bytes(bytes(raw))
        return kind, flip
    if kind == "insert":
        pos, junk = draw(st.floats(0, 1)), draw(st.binary(min_size=1, max_size=16))
        return kind, lambda p: p.write_bytes(p.read_bytes()[: int(len(p.read_bytes()) * pos)] + junk +
                                             p.read_bytes()[int(len(p.read_bytes()) * pos):])
    if kind == "garbage":
        data = draw(st.binary(max_size=64) | st.sampled_from([b"[" * 100_000, b"9" * 5000, b"NaN", b"\xef\xbb\xbf{}"]))
        return kind, lambda p: p.write_bytes(data)
    if kind == "whole JSON":
        value = draw(JSON)
        return kind, lambda p: p.write_text(json.dumps(value))
    if kind in ("field", "drop field", "extra field"):
        name = draw(st.sampled_from(["schema", "key", "plan", "trials", "written", "checksum"]))
        value = draw(FIELD_VALUES)

        def edit(p: Path) -> None:
            body = _body(p)
            if kind == "drop field":
                body.pop(name)
            elif kind == "extra field":
                body[f"{name}_x"] = value
            else:
                body[name] = value
            _sign_and_write(p, body)
        return f"{kind} {name}", edit
    if kind in ("plan field", "trial field"):
        name = draw(st.sampled_from(["bm", "bn", "bk", "stages", "group_m", "grid", "split_k", "consumer_warps",
                                     "acc_buffers", "swap_ab", "hoist_rows", "ms", "error"]))
        value = draw(FIELD_VALUES)

        def edit_plan(p: Path) -> None:
            body = _body(p)
            if kind == "plan field" and name not in ("ms", "error"):
                body["plan"][name] = value
                body["trials"][0]["plan"][name] = value  # (the winner stays among the trials)
            else:
                target = body["trials"][0] if name in ("ms", "error") else body["trials"][0]["plan"]
                target[name] = value
            _sign_and_write(p, body)
        return f"{kind} {name}", edit_plan
    if kind == "key text":
        pos, text = draw(st.floats(0, 1)), draw(st.text(min_size=1, max_size=4))

        def rekey(p: Path) -> None:
            body = _body(p)
            i = int(len(body["key"]) * pos)
            body["key"] = body["key"][:i] + text + body["key"][i:]
            _sign_and_write(p, body)
        return kind, rekey
    what = kind

    def replace(p: Path) -> None:
        p.unlink()
        if what == "FIFO":
            os.mkfifo(p)
        elif what == "/dev/zero":
            p.symlink_to("/dev/zero")
        elif what == "directory":
            p.mkdir()
        elif what == "link loop":
            p.symlink_to(p)
        else:
            p.write_bytes(b" " * (cache_mod.MAX_ENTRY_BYTES + 1))
    return f"file type {what}", replace


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def hung(signum: int, frame: Any) -> None:
        raise TimeoutError(f"Cache.load still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()


@examples(300)
@given(corruption())
def test_a_corrupt_cache_file_is_a_miss_with_a_warning(cache: Cache,  # noqa: F811 - test_tune_cache's fixture
                                                       how: tuple[str, Callable[[Path], None]]) -> None:
    name, corrupt = how
    event(name.split()[0] if not name.startswith("file type") else name)
    COUNTS["tried"] += 1
    k = key()
    stored = entry(k)
    path = cache.path(k)
    _clear(path)
    assert cache.store(k, stored) == path
    corrupt(path)
    try:
        with warnings.catch_warnings(record=True) as caught, deadline(HANG_S):
            warnings.simplefilter("always")
            loaded = cache.load(k)
    except TimeoutError:
        COUNTS["hang"] += 1
        raise
    except Exception:
        COUNTS["crash"] += 1
        raise
    stale = [w for w in caught if issubclass(w.category, StaleCacheWarning)]
    if loaded is None:
        assert stale and str(path) in str(stale[0].message), f"{name}: a miss without a warning"
        COUNTS["miss with a warning"] += 1
        return
    # A hit: an unsigned change (bytes, file type) must have left the stored entry whole (whitespace, a byte of the
    # `written` date); a re-signed edit is indistinguishable from a tuned entry, so its hit must be what the file says
    # (decode refuses a plan the planner no longer builds). Either way, for this key only.
    assert not stale, f"{name}: a hit with a warning"
    assert loaded.key == k.text(), f"{name}: a hit for another key"
    if name.split()[0] in RESIGNED:
        assert loaded.plan == Plan(**_body(path)["plan"]), f"{name}: a hit that is not the file's plan: {loaded}"
    else:
        assert (loaded.plan, loaded.trials) == (stored.plan, stored.trials), f"{name}: a stale hit: {loaded}"
    COUNTS["hit, still valid"] += 1
