"""The autotune cache: its key, a roundtrip, every kind of corrupt or stale entry, concurrent writers, env vars."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs
import pytest
import torch
from filelock import FileLock

from warploom import H100_SXM, BLayout, DType, GemmSpec, InputError
from warploom.epilogue import graph as eg
from warploom.planner import Plan, plan_schedule
from warploom.tune import cache as cache_mod
from warploom.tune import settings
from warploom.tune.autotune import Harness, autotune
from warploom.tune.cache import Cache, Entry, StaleCacheWarning, checksum, clear_cache, decode
from warploom.tune.key import CacheKey, canonical, versions
from warploom.tune.result import Source, Trial

SPEC = GemmSpec(256, 512, 128)
STRIDES = ((128, 1), (1, 128))
PLAN = plan_schedule(SPEC, H100_SXM)
OTHER = plan_schedule(SPEC, H100_SXM, bn=128, stages=3)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cache:
    monkeypatch.setenv(settings.CACHE_DIR_ENV, str(tmp_path))
    for env in (settings.AUTOTUNE_ENV, settings.CLEAR_ENV, settings.VERBOSE_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(cache_mod, "_cleared", set())
    return Cache()


def key(spec: GemmSpec = SPEC, strides: tuple[tuple[int, ...], ...] = STRIDES, **kw: Any) -> CacheKey:
    return CacheKey(spec, H100_SXM, strides, **kw)


def entry(k: CacheKey, plan: Plan = PLAN, ms: float = 0.25) -> Entry:
    return Entry(k.text(), plan, (Trial(plan, ms=ms), Trial(OTHER, error="wrong output: 3 elements")))


# --- the key ---------------------------------------------------------------------------------------------

def test_the_key_is_canonical_text() -> None:
    k = key()
    assert k.text() == key().text() and k.digest() == key().digest()
    assert len(k.digest()) == 64
    fields = json.loads(k.text())
    assert fields["strides"] == [[128, 1], [1, 128]]
    assert fields["spec"]["b_layout"] == "BLayout.K_MAJOR" and fields["spec"]["m"] == 256
    assert set(fields["versions"]) == {"warploom", "warploom_source", "triton", "torch", "cuda"}
    assert fields["versions"]["torch"] == str(torch.__version__)
    assert fields["device"]["sm_count"] == H100_SXM.sm_count


GELU = eg.EpilogueGraph((eg.Acc(), eg.Unary(eg.UnaryOp.GELU_TANH, 0)), (eg.Output(1),))
HALF = eg.EpilogueGraph((eg.Acc(), eg.Const(0.5), eg.Binary(eg.BinaryOp.MUL, 0, 1)), (eg.Output(2),))


@pytest.mark.parametrize("other", [
    key(strides=((256, 1), (1, 128))),  # a padded leading dimension
    key(strides=()),
    key(dataclasses.replace(SPEC, m=257)),
    key(dataclasses.replace(SPEC, k=129)),
    key(dataclasses.replace(SPEC, out_dtype=DType.FP32)),
    key(dataclasses.replace(SPEC, b_layout=BLayout.N_MAJOR)),
    key(dataclasses.replace(SPEC, epilogue=GELU)),
    key(dataclasses.replace(SPEC, epilogue=dataclasses.replace(HALF, nodes=(eg.Acc(), eg.Const(0.25), HALF.nodes[2])))),
    CacheKey(SPEC, dataclasses.replace(H100_SXM, sm_count=114), STRIDES),  # an H100 PCIe, or a MIG slice
    key(versions=(("warploom", "0.1.0"), ("triton", "3.5.0"))),
], ids=lambda k: k.digest()[:8])
def test_everything_that_matters_changes_the_key(other: CacheKey) -> None:
    assert other.digest() != key().digest()
    assert other.digest() != key(dataclasses.replace(SPEC, epilogue=HALF)).digest()


def test_canonical_floats_are_exact_and_unknown_types_refused() -> None:
    assert canonical(0.0) != canonical(-0.0)
    assert canonical(float("nan")) == canonical(float("nan"))
    assert json.dumps(canonical((1.5, None, True)))  # plain JSON
    with pytest.raises(TypeError, match="cache key"):
        canonical(object())


def test_versions_are_this_process() -> None:
    v = dict(versions())
    import warploom

    assert v["warploom"] == warploom.__version__ and len(v["warploom_source"]) == 64


# --- roundtrip ---------------------------------------------------------------------------------------------

def test_roundtrip(cache: Cache, tmp_path: Path) -> None:
    k = key()
    assert cache.load(k) is None  # a miss, silently
    path = cache.store(k, entry(k))
    assert path == tmp_path / "autotune" / f"{k.digest()}.json" == cache.path(k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(k) == entry(k)
    body = json.loads(path.read_text())
    assert body["key"] == k.text() and body["schema"] == 1 and body["checksum"] == checksum(body)
    assert body["plan"] == json.loads(json.dumps(dataclasses.asdict(PLAN)))  # (a tuple field comes back a list)
    assert [t["ms"] for t in body["trials"]] == [0.25, None]
    assert not list(path.parent.glob("*.tmp"))


def test_a_second_store_replaces_the_first(cache: Cache) -> None:
    k = key()
    cache.store(k, entry(k, ms=1.0))
    cache.store(k, entry(k, OTHER, ms=0.5))
    loaded = cache.load(k)
    assert loaded is not None and loaded.plan == OTHER
    assert len(list(cache.directory.glob("*.json"))) == 1


# --- corrupt and stale entries -------------------------------------------------------------------------------

def _rewrite(fn: Callable[[dict[str, Any]], object], *, keep_checksum: bool = False) -> Callable[[Path], object]:
    """Edit the stored JSON; by default re-sign it, so the check that must fire is the one under test."""
    def go(path: Path) -> None:
        body = json.loads(path.read_text())
        fn(body)
        if not keep_checksum:
            body["checksum"] = checksum(body)
        path.write_text(json.dumps(body))
    return go


def _set_plan(**kw: Any) -> Callable[[dict[str, Any]], None]:
    def go(body: dict[str, Any]) -> None:
        body["plan"].update(kw)
        body["trials"][0]["plan"].update(kw)
    return go


CORRUPTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not valid JSON"),
    "empty": (lambda p: p.write_bytes(b""), "not valid JSON"),
    "binary": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not valid JSON"),
    "not an object": (lambda p: p.write_text("[1, 2]"), "not a JSON object"),
    "tampered plan": (_rewrite(_set_plan(stages=PLAN.stages + 1), keep_checksum=True), "checksum mismatch"),
    "tampered checksum": (_rewrite(lambda b: b.update(checksum="0" * 64), keep_checksum=True), "checksum mismatch"),
    "old schema": (_rewrite(lambda b: b.update(schema=0)), "schema 0"),
    "missing field": (_rewrite(lambda b: b.pop("trials")), "'trials' is missing"),
    "another spec's key": (_rewrite(lambda b: b.update(key=key(dataclasses.replace(SPEC, m=999)).text())),
                           "another key (differs in spec"),
    "other strides": (_rewrite(lambda b: b.update(key=key(strides=((512, 1), (1, 128))).text())),
                      "differs in strides"),
    "old triton": (_rewrite(lambda b: b.update(key=key(versions=(*versions()[:2], ("triton", "3.5.0"),
                                                                 *versions()[3:])).text())),
                   "other versions (triton '3.5.0' != "),
    "plan no longer fits": (_rewrite(_set_plan(stages=40)), "no longer builds its plan"),
    "plan built differently now": (_rewrite(_set_plan(grid=7)), "now builds"),
    "unknown plan field": (_rewrite(_set_plan(warps_per_cta=4)), "does not match this warploom's Plan"),
    "a tail without a depth": (_rewrite(_set_plan(tail_split=4, tail_stages=0)), "does not match this warploom's Plan"),
    "int for a bool": (_rewrite(_set_plan(hoist_rows=1)), "expected a JSON bool"),
    "winner never ran": (_rewrite(lambda b: b.update(trials=[])), "not among its correct trials"),
    "bad time": (_rewrite(lambda b: b["trials"][0].update(ms=-1.0)), "expected a positive time"),
    # issue 28 #8-#10, #12
    "group_m 0": (_rewrite(_set_plan(group_m=0)), "Plan(group_m=0): expected an int >= 1"),
    "deep nesting": (lambda p: p.write_text("[" * 200_000 + "]" * 200_000), "not valid JSON (RecursionError"),
    "a 5000-digit int": (lambda p: p.write_text("9" * 5000), "not valid JSON (ValueError"),
    "infinite time": (_rewrite(lambda b: b["trials"][0].update(ms=float("inf"))), "Infinity is not JSON"),
    "a FIFO": (lambda p: (p.unlink(), os.mkfifo(p)), "is not a regular file"),
    "a link to /dev/zero": (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "is not a regular file"),
    "too large": (lambda p: p.write_bytes(b" " * (cache_mod.MAX_ENTRY_BYTES + 1)), "more than a cache file's"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_corrupt_or_stale_entry_is_a_miss_and_is_retuned(name: str, cache: Cache) -> None:
    corrupt, reason = CORRUPTIONS[name]
    k = key()
    path = cache.store(k, entry(k))
    assert path is not None
    corrupt(path)
    with pytest.warns(StaleCacheWarning, match="ignoring") as record:
        assert cache.load(k) is None
    message = str(record[0].message)
    assert str(path) in message and reason in message, message
    # The next autotune re-tunes (it times again) and overwrites the entry with a valid one.
    timed: list[Plan] = []
    with pytest.warns(StaleCacheWarning):
        result = autotune(SPEC, H100_SXM, _harness(timed), strides=STRIDES, plans=[PLAN, OTHER], progress=False)
    assert result.source is Source.TUNED and timed == [PLAN, OTHER]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cache.load(k)
    assert again is not None and again.plan == result.plan


def _harness(timed: list[Plan]) -> Harness:
    """A CPU stand-in for the GPU: every plan writes the right answer; the default is a little faster."""
    ref = torch.arange(12.0).reshape(3, 4)
    out = torch.empty(3, 4)
    current: list[Plan] = []

    def launch(plan: Plan) -> Callable[[], object]:
        current[:] = [plan]
        return lambda: out.copy_(ref)

    def time(call: Callable[[], object]) -> float:
        timed.append(current[0])
        return 1.0 if current[0] == PLAN else 2.0

    return Harness(launch, (out,), (ref,), time)


def test_decode_accepts_only_its_own_key() -> None:
    k = key()
    body = cache_mod.encode(entry(k))
    assert decode(body, k).plan == PLAN
    with pytest.raises(cache_mod._Invalid, match="another key"):
        decode(body, key(strides=()))


# --- concurrency ---------------------------------------------------------------------------------------------

def _write_many(root: str, n: int, seed: int) -> None:
    c = Cache(root)
    k = key()
    for i in range(n):
        c.store(k, entry(k, PLAN if (i + seed) % 2 else OTHER, ms=0.1 + seed + i / 1000))


def _read_errors(root: str, stop: threading.Event, errors: list[str]) -> None:
    """Read the entry in a loop; any state other than "absent" or "valid" is an error."""
    c, k = Cache(root), key()
    while not stop.is_set():
        try:
            raw = c.path(k).read_bytes()
        except FileNotFoundError:
            continue
        try:
            decode(json.loads(raw), k)
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")


def test_concurrent_writer_threads_never_leave_a_corrupt_file(tmp_path: Path) -> None:
    errors: list[str] = []
    stop = threading.Event()
    readers = [threading.Thread(target=_read_errors, args=(str(tmp_path), stop, errors)) for _ in range(2)]
    writers = [threading.Thread(target=_write_many, args=(str(tmp_path), 15, s)) for s in range(4)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    _assert_one_valid_entry(tmp_path)


def test_concurrent_writer_processes_never_leave_a_corrupt_file(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")  # spawn would re-import torch in each child: seconds each
    procs = [ctx.Process(target=_write_many, args=(str(tmp_path), 10, s)) for s in range(4)]
    errors: list[str] = []
    stop = threading.Event()
    reader = threading.Thread(target=_read_errors, args=(str(tmp_path), stop, errors))
    reader.start()
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    stop.set()
    reader.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert errors == []
    _assert_one_valid_entry(tmp_path)


def _assert_one_valid_entry(root: Path) -> None:
    c, k = Cache(root), key()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.load(k) is not None
    assert [p.name for p in c.directory.glob("*.json")] == [f"{k.digest()}.json"]
    assert not list(c.directory.glob("*.tmp"))


def test_a_held_lock_skips_the_write_with_a_warning(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_mod, "LOCK_TIMEOUT_S", 0.05)
    k = key()
    cache.directory.mkdir(parents=True)
    with FileLock(str(cache.directory / ".lock")), pytest.warns(StaleCacheWarning, match="could not write"):
        assert cache.store(k, entry(k)) is None
    assert cache.load(k) is None


# --- environment variables and clearing ---------------------------------------------------------------------

def test_the_cache_dir_comes_from_the_environment(cache: Cache, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache.directory == tmp_path / "autotune"
    monkeypatch.delenv(settings.CACHE_DIR_ENV)
    assert Cache().directory == Path(platformdirs.user_cache_dir("warploom")) / "autotune"
    assert Cache(tmp_path / "x").directory == tmp_path / "x" / "autotune"


def test_clear_cache_removes_entries_not_the_lock(cache: Cache) -> None:
    for s in (SPEC, dataclasses.replace(SPEC, m=512)):
        k = key(s)
        cache.store(k, entry(k))
    (cache.directory / "stray.tmp").write_text("{")
    assert clear_cache() == 3
    assert sorted(p.name for p in cache.directory.iterdir()) == [".lock"]
    assert cache.load(key()) is None
    assert clear_cache() == 0


def test_the_clear_env_var_clears_once_per_process(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    k = key()
    cache.store(k, entry(k))
    monkeypatch.setenv(settings.CLEAR_ENV, "1")
    cache_mod.clear_requested_once(cache)
    assert cache.load(k) is None
    cache.store(k, entry(k))  # tuned after the clear: kept for the rest of the process
    cache_mod.clear_requested_once(cache)
    assert cache.load(k) is not None


@pytest.mark.parametrize(("raw", "value"), [("", True), ("1", True), ("0", False), ("off", False), ("YES", True)])
def test_flags_parse(raw: str, value: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.AUTOTUNE_ENV, raw)
    assert settings.enabled() is value


def test_a_misspelt_flag_raises_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.AUTOTUNE_ENV, "nope")
    with pytest.raises(InputError, match="WARPLOOM_AUTOTUNE=0"):
        settings.enabled()


def test_infinite_or_zero_times_are_refused_by_decode() -> None:
    k = key()
    for ms in (float("inf"), 0.0, float("nan")):
        body = cache_mod.encode(entry(k))
        body["trials"][0]["ms"] = ms
        body["checksum"] = checksum(body)
        with pytest.raises(cache_mod._Invalid, match="expected a positive time"):
            decode(body, k)


def test_plan_fields_are_validated_at_construction() -> None:
    for field, bad in (("group_m", 0), ("bm", -64), ("grid", 0), ("split_k", 0), ("stages", 1.5),
                       ("consumer_warps", True), ("acc_buffers", -1)):
        with pytest.raises(ValueError, match=rf"Plan\({field}="):
            dataclasses.replace(PLAN, **{field: bad})
    with pytest.raises(ValueError, match="^group_m: expected a positive int, got 0"):
        plan_schedule(SPEC, H100_SXM, group_m=0)


def test_clearing_a_cache_that_cannot_be_written(cache: Cache, monkeypatch: pytest.MonkeyPatch) -> None:
    k = key()
    cache.store(k, entry(k))

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(InputError, match="WARPLOOM_CACHE_DIR: expected an autotune cache directory") as ei:
        clear_cache()
    assert "Permission denied" in str(ei.value) and "Fix: make it writable" in str(ei.value)
