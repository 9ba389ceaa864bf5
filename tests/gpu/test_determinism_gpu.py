"""Run-to-run determinism for every schedule family (issue 28): each of scripts/sanitize.py's cases (one kernel per
recipe and schedule family at a small odd shape) runs twice into NaN-poisoned outputs; the two results are
bitwise equal and right. Split-K, its tail and stream-K join partial sums in a fixed order, so they must be too."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from warploom.backends import gluon_api
from warploom.device import DeviceInfo
from warploom.kernel import build
from warploom.reference import make_inputs, reference, relative_error

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sanitize  # noqa: E402

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU tier: needs a CUDA GPU"),
              pytest.mark.timeout(300, method="thread")]
MULTICAST = gluon_api.for_triton(gluon_api.installed()).tma_multicast


def _cuda(x: object) -> object:
    return x.cuda() if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("name", list(sanitize.CASES))
def test_two_runs_are_bitwise_equal(name: str) -> None:
    case = sanitize.CASES[name]
    if case.needs_multicast and not MULTICAST:
        pytest.skip("2-CTA clusters need Triton >= 3.7")
    device = DeviceInfo.current()
    kern = build(case.spec, device, sanitize.plan_of(name, device))
    m, n, k = case.shape
    x = make_inputs(case.spec, m, n, k, seed=7)
    sa, sb = x.scales()
    outs = []
    for _ in range(2):
        out = torch.full((m, n), math.nan, device="cuda", dtype=case.spec.out_dtype.torch)
        kern.run(_cuda(x.a), _cuda(x.b), out, _cuda(sa), _cuda(sb), _cuda(x.bias))
        outs.append(out)
    torch.cuda.synchronize()
    assert relative_error(outs[0].float().cpu(), reference(x)) < sanitize.TOLERANCE
    assert torch.equal(outs[0].view(torch.uint8) if outs[0].element_size() == 1 else outs[0],
                       outs[1].view(torch.uint8) if outs[1].element_size() == 1 else outs[1])
