"""The supported Triton range and the Gluon spellings per version (warploom/backends/gluon_api.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warploom.backends import gluon_api
from warploom.errors import TritonVersionError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0", "3.9.0", "3.9.0+git1a2b3c4", "3.8.0rc1"])
def test_supported_versions(version: str) -> None:
    assert gluon_api.SUPPORTED[0] <= gluon_api.check(version) < gluon_api.SUPPORTED[1]


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0", "4.0.0", "2.3.1"])
def test_a_version_outside_the_range_is_refused(version: str) -> None:
    with pytest.raises(TritonVersionError) as e:
        gluon_api.check(version)
    assert f"{version} installed" in str(e.value) and "triton>=3.6,<3.10" in str(e.value)
    assert e.value.installed == version


def test_installed_version_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """warploom's import calls `installed()`: a Triton outside the range names itself and the range."""
    monkeypatch.setattr(gluon_api, "installed_version", lambda: "3.10.0")
    gluon_api.installed.cache_clear()
    try:
        with pytest.raises(TritonVersionError, match=r"triton: expected triton>=3\.6,<3\.10, got 3\.10\.0 installed"):
            gluon_api.installed()
    finally:
        monkeypatch.undo()
        gluon_api.installed.cache_clear()
    assert gluon_api.installed() >= (3, 6)


def test_import_refuses_an_unsupported_triton() -> None:
    """`import warploom` itself fails, before any kernel is planned (Triton's metadata patched to say 3.10.0)."""
    code = ("import importlib.metadata as md\n"
            "md.version = lambda dist: '3.10.0'\n"
            "import warploom\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode != 0
    assert "TritonVersionError: triton: expected triton>=3.6,<3.10, got 3.10.0 installed" in r.stderr, r.stderr


def test_spellings_per_version() -> None:
    old, new = gluon_api.for_triton((3, 6)), gluon_api.for_triton((3, 9))
    assert (old.barrier, old.tma_load, old.tma_store, old.cp_async) == (
        "gl.thread_barrier()", "tma.async_copy_global_to_shared", "tma.async_copy_shared_to_global",
        "async_copy.async_copy_global_to_shared")
    assert (new.barrier, new.tma_load, new.tma_store, new.cp_async) == (
        "gl.barrier()", "tma.async_load", "tma.async_store", "async_copy.async_load")
    # 3.7: the barrier and the wmma layout changed, the TMA copies not yet (3.8).
    mid = gluon_api.for_triton((3, 7))
    assert mid.barrier == "gl.barrier()" and mid.wmma_warp_bases and mid.tma_load == old.tma_load
    assert not mid.tmem_layout_from_type and gluon_api.for_triton((3, 8)).tmem_layout_from_type
    with pytest.raises(TritonVersionError):
        gluon_api.for_triton((3, 10))


def test_layout_spellings() -> None:
    old, new = gluon_api.for_triton((3, 6)), gluon_api.for_triton((3, 9))
    assert old.wmma_layout(2, 4, (16, 16, 32)) == "AMDWMMALayout(3, True, [2, 4], [16, 16, 32])"
    # warps along N first, then M: what warps_per_cta=[2, 4] meant
    assert new.wmma_layout(2, 4, (16, 16, 32)) == \
        "AMDWMMALayout(3, True, [[0, 1], [0, 2], [1, 0]], instr_shape=[16, 16, 32])"
    assert new.wmma_layout(1, 1, (16, 16, 64)) == "AMDWMMALayout(3, True, [], instr_shape=[16, 16, 64])"
    assert old.tmem_reg_layout("acc_tm", "BM", 64, 4) == \
        "get_tmem_reg_layout(gl.float32, [BM, 64], TensorMemoryLayout([BM, 64], col_stride=1), 4)"
    assert new.tmem_reg_layout("acc_tm", "BM", 64, 4) == "acc_tm.index(0).slice(0, 64).get_reg_layout(4)"
    assert old.tdm_pred("kk < k_tiles") == "kk < k_tiles"
    assert new.tdm_pred("kk < k_tiles") == "(kk < k_tiles).to(gl.int32)"


def test_emitting_for_forces_and_restores() -> None:
    installed = gluon_api.current()
    with gluon_api.emitting_for("3.9.0") as api:
        assert gluon_api.current() is api and api.triton == (3, 9)
        with gluon_api.emitting_for("3.6"):
            assert gluon_api.current().triton == (3, 6)
        assert gluon_api.current() is api
    assert gluon_api.current() is installed
    with pytest.raises(TritonVersionError), gluon_api.emitting_for("3.10"):
        pass


def test_fp_fusion_is_explicit() -> None:
    """Every compile and launch asks for Triton's fp fusion (on: today's numerics) rather than inheriting the
    default, which 3.10 changes (3.9 warns when it is left implicit)."""
    assert gluon_api.compile_options(num_warps=4) == {"num_warps": 4, "enable_fp_fusion": True}
