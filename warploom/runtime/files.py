"""Read a cache file without trusting what is at its path: only a regular file, only up to a size cap.

A cache path may have become anything: a FIFO (an open blocks until a writer comes), a symlink to /dev/zero (a
read never ends), a directory, a huge file. `read_regular` opens without blocking, checks what it opened (not
the path, which may change in between), and reads at most `limit` bytes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from warploom.errors import WarploomError


class NotRegular(WarploomError, OSError):
    """The path is not a regular file of at most the cap's size (the message says what it is)."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at `path`; FileNotFoundError if there is none, NotRegular (an OSError) if the
    path is something else or larger than `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{path} is not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size > limit:
            raise NotRegular(f"{path} is {st.st_size} bytes, more than a cache file's {limit}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grown since the fstat
        raise NotRegular(f"{path} is more than a cache file's {limit} bytes")
    return data
