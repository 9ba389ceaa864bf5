"""`DeviceInfo.current()` reads the GPU in use from torch's device properties: its L2 size tells the H100 SXM from
the H200 for rule 32's L2 floor (`planning.sm90.fitted.l2_rates`). No GPU needed: torch's calls are replaced."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from warploom import H100_SXM, H200, DeviceInfo
from warploom.planning.sm90.fitted import H100_L2, H200_L2, l2_rates


@pytest.mark.parametrize("name,l2,rates", [("NVIDIA H100 80GB HBM3", 50 * 2**20, H100_L2),
                                           ("NVIDIA H200", 60 * 2**20, H200_L2)])
def test_current_reads_the_l2(monkeypatch: pytest.MonkeyPatch, name: str, l2: int, rates: object) -> None:
    props = SimpleNamespace(name=name, major=9, minor=0, multi_processor_count=132,
                            shared_memory_per_block_optin=232448, L2_cache_size=l2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    dev = DeviceInfo.current()
    assert dev == (H100_SXM if l2 == H100_SXM.l2_bytes else H200)
    assert l2_rates(dev) is rates
