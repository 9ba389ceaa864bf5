"""Turn generated Gluon source into a live ``@gluon.jit`` function.

Triton reads a JIT function's source with `inspect`, so the text must live in a real file: each source is
written once to warploom's cache directory under its content hash (atomically, so concurrent processes
never see a half-written file) and imported from there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import platformdirs


def cache_dir() -> Path:
    """`WARPLOOM_CACHE_DIR`, or the platform's user cache directory for warploom."""
    d = Path(os.environ.get("WARPLOOM_CACHE_DIR") or platformdirs.user_cache_dir("warploom"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@functools.lru_cache(maxsize=256)
def load(source: str, kernel: str) -> Any:
    """The JIT function `kernel` defined by `source` (cached per source text)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    kdir = cache_dir() / "kernels"
    kdir.mkdir(exist_ok=True)
    path = kdir / f"wl_{digest}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=kdir, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"warploom_generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Triton resolves globals through the module
    spec.loader.exec_module(mod)
    return getattr(mod, kernel)
