"""Shared settings of the property suites (test_props_*.py): the example counts, scaled by the hypothesis profile.

tests/conftest.py registers two profiles and loads the one WARPLOOM_HYPOTHESIS_PROFILE names: ``ci`` (the default:
a few hundred examples per property, as CI runs them) and ``nightly`` (NIGHTLY_FACTOR times as many).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

PROFILE_ENV = "WARPLOOM_HYPOTHESIS_PROFILE"
NIGHTLY_FACTOR = 20


def examples(ci: int) -> settings:
    """Settings for a property that tries `ci` examples under the ci profile (more under nightly)."""
    nightly = os.environ.get(PROFILE_ENV, "ci") == "nightly"
    return settings(max_examples=ci * NIGHTLY_FACTOR if nightly else ci, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def figures(name: str, counts: collections.Counter[str]) -> Callable[[], Iterator[None]]:
    """A module fixture that prints the suite's tallies (cases tried, clear errors, ...) when its tests are done:
    the figures issue 28 asks for (shown with pytest -s)."""

    @pytest.fixture(scope="module", autouse=True)
    def report() -> Iterator[None]:
        yield
        print(f"\n{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))

    return report
