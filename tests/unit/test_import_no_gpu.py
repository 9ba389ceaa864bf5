"""Importing warploom (and planning, printing, generating Gluon, cross-compiling) never touches a GPU.

Each check runs in a fresh interpreter where CUDA initialization is booby-trapped, so an import-time
`torch.cuda` call fails loudly even on a CPU-only torch, where `torch.cuda.is_initialized()` is always False.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_TRAP = """
import sys
import torch

def _boom(*args, **kwargs):
    raise RuntimeError("CUDA was initialized")

torch.cuda._lazy_init = _boom
torch.cuda.init = _boom
torch.cuda.current_device = _boom
torch.cuda.get_device_properties = _boom
torch.cuda.device_count = _boom
torch._C._cuda_init = _boom
"""

_CHECK = """
assert not torch.cuda.is_initialized()
if "triton" in sys.modules:
    from triton.runtime.driver import driver
    # Triton's GPU driver is created lazily on first use of driver.active; it must not have been.
    assert driver._default is None and driver._active is None, "triton's GPU driver was instantiated"
gpu_driver_modules = [m for m in sys.modules if m.endswith("cuda_utils") or m == "triton._C.libtriton.nvidia.driver"]
assert not gpu_driver_modules, gpu_driver_modules
print("ok", "triton" in sys.modules)
"""


def run(body: str, ok: bool = True) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _TRAP + body + _CHECK], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    if ok:
        assert r.returncode == 0, r.stderr[-3000:]
    else:
        assert r.returncode != 0
    return r.stdout + r.stderr


def test_the_traps_catch_gpu_use() -> None:
    assert "CUDA was initialized" in run("torch.cuda.current_device()\n", ok=False)
    assert "GPU driver was instantiated" in run("from triton.runtime.driver import driver\n"
                                                "driver._active = object()\n", ok=False)


def test_import_does_not_touch_cuda_or_triton_driver() -> None:
    out = run("import warploom\n")
    # Importing warploom does not even import Triton (the backend imports it lazily).
    assert out.strip().splitlines()[-1] == "ok False"


def test_planning_and_codegen_on_meta_do_not_touch_a_gpu() -> None:
    run("""
import warploom
a = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
k = warploom.plan(a, a)
assert "def " in k.source and "partition" in k.schedule
out = warploom.matmul(torch.empty(0, 64, dtype=torch.bfloat16), torch.empty(64, 64, dtype=torch.bfloat16))
assert out.shape == (0, 64)
""")


def test_cross_compiling_does_not_touch_a_gpu() -> None:
    run("""
import warploom
a = torch.empty(256, 128, dtype=torch.bfloat16, device="meta")
b = torch.empty(128, 256, dtype=torch.bfloat16, device="meta")
c = warploom.plan(a, b).compile()
assert c.count("HGMMA") > 0
""")


def test_cpu_tensors_on_the_simulator_do_not_touch_a_gpu() -> None:
    run("""
import warploom
a = torch.randn(130, 96).to(torch.bfloat16)
b = torch.randn(96, 200).to(torch.bfloat16)
assert torch.allclose(warploom.matmul(a, b).float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
""")
