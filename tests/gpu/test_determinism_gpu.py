"""Run-to-run determinism for every schedule family (issue 28): each of scripts/sanitize.py's cases (one kernel per
recipe and schedule family at a small odd shape) runs twice into NaN-poisoned outputs; the two results are
bitwise equal and right. Split-K, its tail and stream-K join partial sums in a fixed order, so they must be too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from warploom.backends import gluon_api
from warploom.device import DeviceInfo
from warploom.reference import make_inputs, reference, relative_error

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sanitize  # noqa: E402

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]
MULTICAST = gluon_api.for_triton(gluon_api.installed()).tma_multicast


@pytest.mark.parametrize("name", list(sanitize.CASES))
def test_two_runs_are_bitwise_equal(name: str) -> None:
    case = sanitize.CASES[name]
    if case.needs_multicast and not MULTICAST:
        pytest.skip("2-CTA clusters need Triton >= 3.7")
    kern = sanitize.case_kernel(name, DeviceInfo.current())
    x = make_inputs(case.spec, *case.shape, seed=7)
    first, second = sanitize.launch(kern, x), sanitize.launch(kern, x)
    assert relative_error(first.float().cpu(), reference(x)) < sanitize.TOLERANCE
    bits = (lambda t: t.view(torch.uint8)) if first.element_size() == 1 else (lambda t: t)
    assert torch.equal(bits(first), bits(second))
