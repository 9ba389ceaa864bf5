"""Turn generated Gluon source into a live ``@gluon.jit`` function.

Triton reads a JIT function's source with `inspect`, so the text must live in a real file: each source is
written once to warploom's cache directory under its content hash (atomically, so concurrent processes
never see a half-written file) and imported from there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import platformdirs

from warploom.runtime.files import read_regular


def cache_dir() -> Path:
    """`WARPLOOM_CACHE_DIR`, or the platform's user cache directory for warploom."""
    d = Path(os.environ.get("WARPLOOM_CACHE_DIR") or platformdirs.user_cache_dir("warploom"))
    d.mkdir(parents=True, exist_ok=True)
    return d


# Generated kernels are a few hundred KB at most; a larger file at a kernel's path is not one of ours.
MAX_SOURCE_BYTES = 16 << 20


@functools.lru_cache(maxsize=256)
def load(source: str, kernel: str) -> Any:
    """The JIT function `kernel` defined by `source` (cached per source text).

    The module is compiled from `source` itself, never from bytecode in ``__pycache__`` (which anyone who can
    write the cache could replace), and the file is (re)written unless it already holds exactly `source`. A cache
    directory that cannot be written gives a warning and a private temporary one."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    try:
        path = _written(_kernel_dir(), f"wl_{digest}.py", source)
    except OSError as e:
        fallback = _private_dir()
        warnings.warn(f"warploom: cannot write generated kernels to the cache ({e}); using {fallback} for this "
                      "process. Set WARPLOOM_CACHE_DIR to a writable directory to keep them", stacklevel=2)
        path = _written(fallback, f"wl_{digest}.py", source)
    name = f"warploom_generated_{digest}"
    loader = _SourceOnly(name, str(path), source)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Triton resolves globals through the module
    loader.exec_module(mod)
    return getattr(mod, kernel)


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Compiles the module from the source it was given (the file's verified content): no bytecode read or written."""

    def __init__(self, name: str, path: str, source: str) -> None:
        super().__init__(name, path)
        self.source = source

    def get_code(self, fullname: str) -> Any:
        return compile(self.source, self.path, "exec", dont_inherit=True)


def _kernel_dir() -> Path:
    kdir = cache_dir() / "kernels"
    kdir.mkdir(exist_ok=True)
    return kdir


@functools.cache
def _private_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="warploom-kernels-"))


def _written(kdir: Path, filename: str, source: str) -> Path:
    """`kdir/filename` holding exactly `source`: read (a regular file only, capped) and rewritten atomically when it
    is missing, another kind of file, or holds anything else (garbage, an edit)."""
    path = kdir / filename
    try:
        same = read_regular(path, MAX_SOURCE_BYTES) == source.encode()
    except OSError:  # missing, a FIFO, a link to a device, too large: replaced below
        same = False
    if not same:
        fd, tmp = tempfile.mkstemp(dir=kdir, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path
