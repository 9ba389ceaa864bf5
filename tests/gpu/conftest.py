"""GPU tier setup: every test has a watchdog, so a hung kernel kills the process (faulthandler dumps every
thread's stack) instead of freezing the run; a hang fails loudly."""

from __future__ import annotations

import faulthandler
from collections.abc import Iterator

import pytest

WATCHDOG_S = 120


@pytest.fixture(autouse=True)
def watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
