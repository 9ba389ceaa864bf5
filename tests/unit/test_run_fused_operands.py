"""`Kernel.run` with a fused epilogue checks its operands against the captured graph before any launch (as
`Kernel.simulate` does), on a's device: the launcher reads each by name and passes its storage, so a missing one was
a bare KeyError and a wrong dtype, shape or stride launched. CPU only: the launch is recorded, never run."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from test_launch_host import RecordingJit

from warploom.api import plan
from warploom.errors import DTypeError, InputError, ShapeError

BF16 = torch.bfloat16


@pytest.fixture
def jit(monkeypatch: pytest.MonkeyPatch) -> RecordingJit:
    """The compiled kernel replaced by test_launch_host's recorder: launches are recorded, never run."""
    rec = RecordingJit()
    monkeypatch.setattr("warploom.runtime.launch.load", lambda text, name: rec)
    return rec


def _kernel() -> tuple[Any, torch.Tensor, torch.Tensor]:
    """A kernel planned with `acc + r` for a (256, 384) bf16 r, and its A and B."""
    a, b = torch.randn(256, 512).to(BF16), torch.randn(384, 512).to(BF16).t()
    kern = dataclasses.replace(plan(a, b, epilogue=lambda acc, r: acc + r, r=torch.randn(256, 384).to(BF16)))
    return kern, a, b


def test_the_operands_it_was_planned_with_launch(jit: RecordingJit) -> None:
    kern, a, b = _kernel()
    out = torch.empty(256, 384, dtype=BF16)
    kern.run(a, b, out, operands={"r": torch.randn(256, 384).to(BF16)})
    assert len(jit.calls) == 1


R = torch.randn(256, 384).to(BF16)


@pytest.mark.parametrize(("operands", "error", "names"), [
    ({}, InputError, "r"),  # missing: a bare KeyError before
    (None, InputError, "r"),
    ({"r": "x"}, InputError, "r"),
    ({"r": None}, InputError, "r"),
    ([("r", R)], InputError, "operands"),  # not a mapping
    ({"r": R, "extra": R}, InputError, "extra"),  # a name the graph has not
    ({"r": R.float()}, DTypeError, "r"),  # fp32 where bf16 was captured: launched before
    ({"r": R[:, :192]}, ShapeError, "r"),  # half of N: an out-of-bounds read before
    ({"r": R.t().contiguous().t()}, InputError, "r"),  # column-major strides, compiled in as row-major
    ({"r": torch.randn(256, 384, device="meta").to(BF16)}, InputError, "r"),  # not on a's device
], ids=["missing", "none", "string", "none_value", "list", "extra", "fp32", "half_n", "column_major", "device"])
def test_bad_operands_are_refused_before_the_launch(jit: RecordingJit, operands: Any, error: type[Exception],
                                                    names: str) -> None:
    kern, a, b = _kernel()
    out = torch.empty(256, 384, dtype=BF16)
    with pytest.raises(error, match=names) as e:
        kern.run(a, b, out, operands=operands)
    assert "Fix" in str(e.value)
    assert not jit.calls


def test_a_swapped_kernels_operands_are_checked_as_its_graph_reads_them(jit: RecordingJit) -> None:
    """Rule 18's swapped kernel reads an (M, 1) operand as a row of C^T: the caller passes it in the problem's terms."""
    a, b = torch.randn(16, 512).to(BF16), torch.randn(384, 512).to(BF16).t()
    r = torch.randn(16, 1).to(BF16)
    kern = dataclasses.replace(plan(a, b, epilogue=lambda acc, r: acc + r, r=r))
    assert kern.module.tiling.swap_ab
    out = torch.empty(16, 384, dtype=BF16)
    kern.run(a, b, out, operands={"r": r})
    assert len(jit.calls) == 1
    with pytest.raises(ShapeError, match="r") as e:
        kern.run(a, b, out, operands={"r": torch.randn(8, 1).to(BF16)})
    assert "rule 18" in "".join(getattr(e.value, "__notes__", []))
    assert len(jit.calls) == 1


@pytest.mark.parametrize("which", ["a", "b", "r"])
def test_a_fused_call_that_asks_for_gradients_is_refused(which: str) -> None:
    """A fused epilogue's kernel has no backward: on the GPU the result carried no gradient without a word (the CPU
    simulator's did, through its torch ops)."""
    import warploom

    t = {"a": torch.randn(64, 128).to(BF16), "b": torch.randn(128, 64).to(BF16), "r": torch.randn(64, 64).to(BF16)}
    t[which].requires_grad_()
    with pytest.raises(InputError, match=f"^{which}") as e:
        warploom.matmul(t["a"], t["b"], epilogue=lambda acc, r: acc + r, r=t["r"])
    assert "Fix" in str(e.value)
    with torch.no_grad():  # (nothing asks for a gradient: it runs, here on the simulator)
        got = warploom.matmul(t["a"], t["b"], epilogue=lambda acc, r: acc + r, r=t["r"])
    ref = t["a"].float() @ t["b"].float() + t["r"].float()
    torch.testing.assert_close(got.float(), ref, atol=0.1, rtol=0.02)
