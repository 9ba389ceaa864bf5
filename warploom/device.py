"""What the planner needs to know about a GPU. Importing this never touches a GPU; `DeviceInfo.current()` does."""

from __future__ import annotations

from dataclasses import dataclass

from warploom.errors import ArgumentTypeError, InputError, UnsupportedError
from warploom.target import Target


@dataclass(frozen=True)
class DeviceInfo:
    """A GPU as the planner sees it.

    Attributes:
        name: marketing name, for reports.
        arch: the compilation target, e.g. ``sm_90a``.
        sm_count: streaming multiprocessors; the persistent grid has at most this many CTAs.
        smem_per_block: the most dynamic shared memory one CTA may use (bytes).
        regs_per_sm: 32-bit registers per SM; warp-specialized register budgets must fit in it.
        l2_bytes: the L2 cache, as the driver reports it; it tells apart parts of one architecture whose L2 delivers
            at different rates (the H100 SXM's 50 MiB and the H200's 60 MiB: rule 32's `l2_floor`).
    """

    name: str
    arch: str
    sm_count: int
    smem_per_block: int
    regs_per_sm: int = 65536
    l2_bytes: int = 50 * 2**20

    @staticmethod
    def current() -> DeviceInfo:
        """The CUDA device in use. Raises if there is none (callers without a GPU plan for `H100_SXM`)."""
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        major, minor = props.major, props.minor
        arch = f"sm_{major}{minor}a" if major in (9, 10) else f"sm_{major}{minor}"
        if torch.version.hip:  # ROCm: the gfx name (e.g. "gfx1250:sramecc+:xnack-" -> "gfx1250")
            arch = str(getattr(props, "gcnArchName", "gfx")).split(":")[0]
        smem = int(getattr(props, "shared_memory_per_block_optin", H100_SXM.smem_per_block))
        l2 = int(getattr(props, "L2_cache_size", H100_SXM.l2_bytes))
        return DeviceInfo(props.name, arch, props.multi_processor_count, smem, l2_bytes=l2)


    @property
    def blackwell(self) -> bool:
        """Whether kernels for this GPU are sm_100a schedules (tcgen05 MMAs into tensor memory)."""
        return self.arch.startswith("sm_10")  # (sm_103a too: planned as Blackwell, refused by the target check)

    @property
    def gfx1250(self) -> bool:
        """Whether kernels for this GPU are gfx1250 schedules (one software-pipelined partition, TDM copies, wmma)."""
        return self.arch == "gfx1250"

    @property
    def target(self) -> Target:
        """The target of the kernels the planner plans for this GPU (any NVIDIA GPU that is not a Blackwell is
        planned as an sm_90a: the planner and the compile step refuse what it cannot run)."""
        return Target.GFX1250 if self.gfx1250 else Target.SM100A if self.blackwell else Target.SM90A


# The H100 SXM that warploom is measured on: 132 SMs, 227 KiB of opt-in shared memory per block.
H100_SXM = DeviceInfo("NVIDIA H100 80GB HBM3", "sm_90a", 132, 232448)
# The H200 (SXM): the H100's chip with 60 MiB of L2 enabled (and faster HBM). warploom's GPU sessions since 2026-11-28
# run on one.
H200 = DeviceInfo("NVIDIA H200", "sm_90a", 132, 232448, l2_bytes=60 * 2**20)
# Tensor memory per SM on sm_100a: 512 columns of 32-bit cells (the planner's and the verifier's budget for
# accumulators and MX scale buffers).
TMEM_COLUMNS = 512
# A B200 (sm_100a): 148 SMs, 227 KiB of opt-in shared memory per block, TMEM_COLUMNS of tensor memory per SM.
# warploom plans and cross-compiles for it; none is at hand to run on.
B200 = DeviceInfo("NVIDIA B200", "sm_100a", 148, 232448)
# An AMD gfx1250 (planner rule 20): 320 KiB of LDS per workgroup (Triton's gfx1250 target), and an assumed 256
# compute units for the persistent grid (warploom has no gfx1250 to read the count from: pass your own DeviceInfo).
# warploom plans and cross-compiles for it; none is at hand to run on.
GFX1250 = DeviceInfo("AMD gfx1250", "gfx1250", 256, 327680)


def check_device(device: object) -> DeviceInfo:
    """`device` if it is a `DeviceInfo`; a warploom error naming it otherwise (a name or a torch.device would fail deep
    in a planner rule). `plan_schedule` and `warploom.plan` both check theirs here."""
    if not isinstance(device, DeviceInfo):
        raise ArgumentTypeError("device", "a warploom.DeviceInfo", f"{type(device).__name__} {device!r}",
                                "pass warploom.H100_SXM, H200, B200 or GFX1250 (or DeviceInfo(...) for another GPU)")
    # (a zero SM count divided a model, and an arch no target has was planned as sm_90a's without a word)
    for field, low in (("sm_count", 1), ("smem_per_block", 1), ("regs_per_sm", 1), ("l2_bytes", 0)):
        value = getattr(device, field)
        fix = f"pass DeviceInfo(..., {field}=...) as the GPU reports it (DeviceInfo.current())"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"device.{field}", f"an int >= {low}", f"{type(value).__name__} {value!r}", fix)
        if value < low:
            raise InputError(f"device.{field}", f"an int >= {low}", str(value), fix)
    arch = device.arch
    if not isinstance(arch, str) or not arch.startswith(("sm_90", "sm_10", "gfx")):
        raise UnsupportedError(f"device.arch: warploom plans sm_90a (Hopper), sm_100a (Blackwell) and gfx1250 (AMD), "
                               f"got {arch!r} ({device.name}). Fix: run on an H100, H200 or B200, or plan for one of "
                               "them (device=warploom.H100_SXM) to inspect its schedule")
    return device
