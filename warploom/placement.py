"""Where a call runs: the GPU (its `DeviceInfo`), or the CPU simulator up to a size; and whether a call may skip
the custom ops' dispatcher. Shared by the plain API (api.py) and the grouped one (grouped.py)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from warploom import checks
from warploom.device import H100_SXM, DeviceInfo
from warploom.dtypes import DType
from warploom.errors import DeviceError
from warploom.kernel import SIM_MAX_FLOPS_ENV, sim_max_flops
from warploom.spec import GemmSpec


def device_for(t: torch.Tensor) -> DeviceInfo:
    if t.device.type == "cuda":
        return _cuda_device(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return H100_SXM


def sim_device(spec: GemmSpec) -> DeviceInfo:
    """The device CPU tensors' kernel is planned for: an H100, or a B200 for fp4 data (sm_90a has no fp4 MMA) and
    grouped MX GEMMs (sm_90a's grouped kernel has no MX)."""
    from warploom.device import B200

    mx_grouped = spec.grouped and spec.scale.microscaled
    return B200 if DType.E2M1 in (spec.a_dtype, spec.b_dtype) or mx_grouped else H100_SXM


@functools.cache
def _cuda_device(index: int) -> DeviceInfo:
    with torch.cuda.device(index):
        return DeviceInfo.current()


def require_cuda(a: torch.Tensor) -> None:
    if a.device.type != "cuda":
        raise DeviceError("a", "CUDA tensors (an sm_90a GPU runs warploom's kernels)", f"a tensor on {a.device}",
                          "move the tensors to the GPU with .cuda(), or use warploom.plan(...) to plan, "
                          "inspect and cross-compile without one")


def check_sim_size(spec: GemmSpec) -> None:
    limit = sim_max_flops()
    if spec.flops > limit:
        raise DeviceError("a", f"CUDA tensors, or CPU tensors of at most {limit:,} FLOPs (2*M*N*K) for the CPU "
                               "simulator", f"CPU tensors of {spec.m}x{spec.n}x{spec.k} ({spec.flops:,} FLOPs)",
                          "move the tensors to an sm_90a GPU with .cuda() (large sizes need a GPU), or raise the "
                          f"simulator's limit with {SIM_MAX_FLOPS_ENV}={spec.flops} (it runs a few GFLOP/s)")


def skip_dispatcher(*tensors: Any) -> bool:
    """Whether to skip the custom-op dispatcher: not while torch.compile traces, and not when autograd
    must see the op. The dispatcher costs ~80 us a call on the H100 host, as much as a 4096^3 fp8 GEMM."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return False
    a = tensors[0]
    if not a.is_cuda or checks.is_fake(a):  # (is_cuda: a.device.type builds a device object, ~0.4 us)
        return False
    if torch.is_grad_enabled():
        for t in tensors:
            if t is not None and t.requires_grad:
                return False
    return True
