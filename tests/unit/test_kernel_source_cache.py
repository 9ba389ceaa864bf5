"""The generated-kernel source cache (warploom/runtime/loader.py): what is at a kernel's path is never trusted
(issue 28 #10-#12): bytecode is never read, garbage or odd files are replaced, an unwritable cache warns."""

from __future__ import annotations

import hashlib
import os
import py_compile
import sys
from collections.abc import Iterator
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from warploom.runtime import loader

GOOD = "def kernel():\n    return 1\n"
EVIL = "def kernel():\n    return 2\n"  # the same size: a .pyc stamped for it matches GOOD's file too


@pytest.fixture
def kdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))
    loader.load.cache_clear()
    yield tmp_path / "kernels"
    loader.load.cache_clear()


def path_of(kdir: Path, source: str) -> Path:
    return kdir / f"wl_{hashlib.sha256(source.encode()).hexdigest()[:20]}.py"


def test_a_replaced_pyc_is_never_run(kdir: Path) -> None:
    assert loader.load(GOOD, "kernel")() == 1
    path = path_of(kdir, GOOD)
    assert not Path(cache_from_source(str(path))).exists()  # no bytecode written either
    # Plant bytecode for EVIL whose stamp (mtime, size) matches the GOOD file, as importlib would accept.
    st = path.stat()
    path.write_text(EVIL)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    py_compile.compile(str(path), cfile=cache_from_source(str(path)), doraise=True)
    path.write_text(GOOD)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    loader.load.cache_clear()
    sys.modules.pop(f"warploom_generated_{path.stem[3:]}", None)
    assert loader.load(GOOD, "kernel")() == 1


@pytest.mark.parametrize("what", ["garbage", "edited", "fifo", "dev_zero", "directory"])
def test_whatever_is_at_the_path_is_replaced_or_avoided(kdir: Path, what: str) -> None:
    kdir.mkdir(parents=True)
    path = path_of(kdir, GOOD)
    if what == "garbage":
        path.write_bytes(b"\xff\xfe\x00\x81 not python")
    elif what == "edited":
        path.write_text(EVIL)
    elif what == "fifo":
        os.mkfifo(path)  # an open for reading would block forever
    elif what == "dev_zero":
        path.symlink_to("/dev/zero")  # a read would never end
    else:
        path.mkdir()
    if what == "directory":  # cannot be replaced: the process uses a private directory, and says so
        with pytest.warns(UserWarning, match="cannot write generated kernels"):
            assert loader.load(GOOD, "kernel")() == 1
    else:
        assert loader.load(GOOD, "kernel")() == 1
        assert path.read_text() == GOOD


def test_an_unwritable_cache_dir_warns_and_uses_a_private_one(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(blocker / "cache"))  # under a file: mkdir fails
    loader.load.cache_clear()
    with pytest.warns(UserWarning, match="WARPLOOM_CACHE_DIR"):
        assert loader.load(GOOD, "kernel")() == 1
    loader.load.cache_clear()
