"""Golden Gluon for the newest supported Triton (3.9), rendered by forcing the version module (no 3.9 needed).

The other golden files hold the spelling of the oldest, 3.6 (the Triton CI's first environment installs). Here a
few kernels of every target are lowered under ``gluon_api.emitting_for("3.9")``: each differs from its 3.6 file
only where backends/gluon_api.py says the spelling changed. The compile tier run under Triton 3.9 (scripts/test.sh)
proves these spellings compile. Refresh with ``EXPECTTEST_ACCEPT=1 pytest tests/golden`` and read the diff.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import expecttest
import pytest
import test_golden
import test_golden_fused
import test_golden_gfx1250
import test_golden_sm100
from test_golden import assert_golden_file, issue4_kernel  # (pytest puts this folder on sys.path)

from warploom import GemmSpec
from warploom.backends import gluon_api
from warploom.device import B200, H100_SXM
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.targets import emit

VERSION = "3.9"


def source(k: Kernel, version: str = VERSION) -> str:
    """`k`'s Gluon for Triton `version` (lowered afresh: `Kernel.source` keeps the installed Triton's)."""
    with gluon_api.emitting_for(version):
        return emit(k.module).text


def changed_lines(k: Kernel) -> list[str]:
    """The lines of `k`'s 3.6 source that 3.9 spells differently."""
    old, new = source(k, "3.6").splitlines(), source(k).splitlines()
    return [ln for ln in difflib.unified_diff(old, new, lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in "---+++"]


def stream_k_kernel() -> Kernel:
    """A stream-K plan (rule 21): its fixup's barrier and flag atomics."""
    spec = GemmSpec(384, 752, 5312)
    return build(spec, H100_SXM, plan_schedule(spec, H100_SXM, bn=128, stream_k=4))


# golden file (in expected/triton3.9/) -> its kernel; what the 3.9 spelling changes in it
CASES: dict[str, Callable[[], Kernel]] = {
    # the TMA copies
    "bf16_4096_kmajor": lambda: test_golden.kernel("bf16_4096_kmajor"),
    # a pinning wait after each promotion (gluon_api.GluonApi.pin_promotion)
    "fp8_tensorwise_promoted": lambda: test_golden.kernel("fp8_tensorwise_promoted"),
    # cp.async scale copies and the partition barrier that publishes them
    "fp8_blockwise_1x128_128x128": lambda: test_golden.kernel("fp8_blockwise_1x128_128x128"),
    # a fused epilogue's dense operand prefetched by TMA behind a barrier
    "fused_fp8_rowwise_gelu_residual": test_golden_fused.fp8_rowwise_gelu_residual,
    # stream-K's fixup: its barrier before the flag's release
    "bf16_stream_k4_384x752x5312": stream_k_kernel,
    # the tensor-memory register layout and its import
    "sm100_bf16_4096_kmajor": lambda: test_golden_sm100.kernel("sm100_bf16_4096_kmajor"),
    "sm100_fp8_fused_gelu_residual": lambda: issue4_kernel(B200),
    # seed 000's scale partition: the scales' tcgen05.st layout from the buffer's own descriptor
    "sm100_mxfp8_rows": lambda: test_golden_sm100.kernel("sm100_mxfp8_rows"),
    # ... and B's (256, 4) buffers' layout from theirs
    "sm100_mxfp8_blocked_partition_256": test_golden_sm100.blocked_partition_256,
    # the wmma layout's warp bases, the TDM copies' int32 predicate, the barrier
    "gfx1250_bf16_4096_kmajor": lambda: test_golden_gfx1250.kernel("gfx1250_bf16_4096_kmajor"),
    "gfx1250_fp8_rowwise_bias": lambda: test_golden_gfx1250.kernel("gfx1250_fp8_rowwise_bias"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_triton39_gluon(name: str) -> None:
    assert_golden_file(f"triton3.9/{name}.gluon.txt", source(CASES[name]()))


class TestTriton39Spelling(expecttest.TestCase):
    def test_forced_36_is_the_installed_spelling(self) -> None:
        """Forcing 3.6 gives the 3.6 golden files' text (those files are what CI's Triton 3.6 generates)."""
        k = test_golden.kernel("bf16_4096_kmajor")
        assert source(k, "3.6") == (test_golden.EXPECTED / "bf16_4096_kmajor.gluon.txt").read_text()

    def test_only_the_renamed_lines_differ(self) -> None:
        """What 3.9 changes in the headline kernel, line for line: the TMA copies' names and nothing else."""
        diff = changed_lines(test_golden.kernel("bf16_4096_kmajor"))
        words = {w for ln in diff for w in ("async_copy_global_to_shared", "async_copy_shared_to_global",
                                            "async_load", "async_store") if w in ln}
        assert diff and words == {"async_copy_global_to_shared", "async_copy_shared_to_global", "async_load",
                                  "async_store"}, diff
        assert len([ln for ln in diff if ln[0] == "-"]) == len([ln for ln in diff if ln[0] == "+"])
