"""Shared pytest setup for warploom's CPU tiers.

The repository root goes on sys.path so `import warploom` works from a plain checkout, however pytest is
started. The hypothesis profiles: ``ci`` by default, ``nightly`` (many more examples) with
WARPLOOM_HYPOTHESIS_PROFILE=nightly (tests/unit/props.py scales each property's count the same way). Nothing here
touches a GPU.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile("ci", deadline=None)
settings.register_profile("nightly", deadline=None, max_examples=5000)
settings.load_profile(os.environ.get("WARPLOOM_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def table(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Callable[[str], None]:
    """Report a table a test measured (mutants caught, states explored, simulator speed): to the log, which pytest
    shows with a failure (or live with --log-cli-level=INFO), and to the terminal with -v; a quiet run's dots stay
    dots."""
    log = logging.getLogger(request.node.nodeid)

    def write(text: str) -> None:
        for line in text.splitlines():
            log.info(line)
        if request.config.get_verbosity() > 0:
            with capsys.disabled():
                print("\n" + text)

    return write
