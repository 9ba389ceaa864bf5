"""Shared settings of the property suites (test_props_*.py): the example counts, scaled by the hypothesis profile.

tests/conftest.py registers two profiles and loads the one WARPLOOM_HYPOTHESIS_PROFILE names: ``ci`` (the default:
a few hundred examples per property, as CI runs them) and ``nightly`` (NIGHTLY_FACTOR times as many).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, settings

from warploom.errors import WarploomError

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


def names_first(msg: str, names: tuple[str, ...]) -> bool:
    """Whether an error message names one of `names` first (``name: expected ...``)."""
    # (a scale given as a list of two is read as NVFP4's [block scales, global scale] pair, whose parts the checks name
    # scale_a[0] and scale_a[1]: api._named_scales)
    return any(msg.startswith(f"{name}: ") or msg.startswith(f"{name} ") or msg.startswith(f"{name}[")
               for name in names)


def refused(call: Callable[[], Any], mistake: str, names: tuple[str, ...],
            counts: collections.Counter[str]) -> WarploomError:
    """The error `call`, which holds one `mistake`, raised: a warploom error that is a ValueError or TypeError and
    names one of `names` first. Another exception, or a result, fails the property (the bad-input suites)."""
    counts["tried"] += 1
    event(mistake)
    try:
        out = call()
    except WarploomError as e:
        assert isinstance(e, (ValueError, TypeError)), f"{mistake}: {type(e).__name__} is no ValueError/TypeError"
        assert names_first(str(e), names), f"{mistake}: the message does not name {names}: {e}"
        counts["clear"] += 1
        return e
    except Exception as e:
        raise AssertionError(f"{mistake}: {type(e).__name__}: {e}") from e
    raise AssertionError(f"{mistake}: accepted, returned {type(out).__name__}")


def show_arg(x: Any) -> str:
    """An argument as a failing example prints it: a tensor by shape, strides, dtype and device (not its values)."""
    if isinstance(x, torch.Tensor):
        return f"Tensor({tuple(x.shape)}, stride={x.stride() if x.layout is torch.strided else '-'}, " \
               f"{x.dtype}, {x.device.type})"
    return repr(x)[:60]
