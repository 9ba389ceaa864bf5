"""Every mistake a user can make has a class here; each message says what was expected, what arrived, and the fix.

User mistakes subclass ValueError or TypeError so ordinary `except ValueError` code keeps working.
Internal failures (a pass produced IR its verifier rejects, the backend failed to compile) are kept apart
in `InternalError`, so a bug report never reads like a user error.
"""

from __future__ import annotations

from dataclasses import dataclass


class WarploomError(Exception):
    """Base of all warploom errors."""


def _msg(arg: str, expected: str, got: str, fix: str) -> str:
    return f"{arg}: expected {expected}, got {got}. Fix: {fix}"


@dataclass(frozen=True)
class SizeRule:
    """The rule on one of the GEMM's sizes that an `InputError` broke, for a caller that chose the sizes rather than
    the tensors: the command line names its option (``--k``) and the nearest sizes that pass, not ``a``'s stride.

    Attributes:
        dim: the size, ``"M"``, ``"N"`` or ``"K"``.
        multiple: what it must be a multiple of.
        why: the rule's reason, naming no tensor ("fp8's K and N, as torch._scaled_mm requires").
    """

    dim: str
    multiple: int
    why: str

    def __post_init__(self) -> None:
        if self.dim not in ("M", "N", "K") or self.multiple < 1:
            raise ValueError(f"SizeRule: expected dim M, N or K and a multiple >= 1, got {self.dim!r}, "
                             f"{self.multiple}")


class InputError(WarploomError, ValueError):
    """A tensor argument is unusable: shape, stride, alignment, device, layout or size.

    Attributes:
        arg: the argument's name, as the user wrote it (``a``, ``scale_b``, ...).
        rule: the size rule broken, where one of the GEMM's sizes is what is wrong (else None).
    """

    def __init__(self, arg: str, expected: str, got: str, fix: str, rule: SizeRule | None = None) -> None:
        self.arg = arg
        self.rule = rule
        super().__init__(_msg(arg, expected, got, fix))


class DTypeError(WarploomError, TypeError):
    """A dtype, or a combination of dtypes, that warploom does not compute."""

    def __init__(self, arg: str, expected: str, got: str, fix: str) -> None:
        self.arg = arg
        super().__init__(_msg(arg, expected, got, fix))


class ArgumentTypeError(WarploomError, TypeError):
    """An argument of the wrong kind: None, a list or a NumPy array where a tensor goes, a sparse tensor, a string
    where a `DeviceInfo` goes."""

    def __init__(self, arg: str, expected: str, got: str, fix: str) -> None:
        self.arg = arg
        super().__init__(_msg(arg, expected, got, fix))


class ShapeError(InputError):
    """Shapes that do not agree (K of a and b, scale shapes) or are not 2-D."""


class AlignmentError(InputError):
    """A stride or base address that breaks TMA's 16-byte rule, or a non-unit inner stride."""


class DeviceError(InputError):
    """Tensors on different devices, or on a device this path does not run on."""


class ScaleError(InputError):
    """Scale tensors of the wrong shape, dtype, device or recipe."""


class UnsupportedError(WarploomError, ValueError):
    """A valid request that warploom does not implement yet; the message names the nearest thing that works."""


class NoTileFitsError(UnsupportedError):
    """No tile of the planner's search fits the device's shared memory and registers with what was forced: the rules
    that plan a tile of their own (rule 22's grouped tile, rule 32's fitted one) catch it by this class."""


class TargetError(WarploomError, ValueError):
    """An unknown compilation target name."""


class PlanError(WarploomError, ValueError):
    """A `Plan` whose fields contradict each other or a count out of range (a forced plan, a tuning-cache entry);
    the message names the field and what it must be."""


class ResourceError(WarploomError, RuntimeError):
    """A resource warploom needs could not be had (device memory for a workspace); nothing was launched."""


class TritonVersionError(WarploomError, ImportError):
    """The installed Triton is outside the range warploom supports (`backends.gluon_api.SUPPORTED`): its Gluon API
    differs, so warploom refuses at import rather than emit kernels it has not compiled there.

    Attributes:
        installed: the installed Triton's version string (``none`` when Triton is missing).
    """

    def __init__(self, installed: str, supported: str) -> None:
        self.installed = installed
        super().__init__(_msg("triton", supported, f"{installed} installed",
                              f"pip install '{supported}' (torch 2.11 through 2.14 pin a Triton in that range)"))


class InternalError(WarploomError, RuntimeError):
    """A warploom bug: a pass broke an IR invariant, or generated code failed to compile. Please report it."""


class KernelHangError(InternalError):
    """A launched kernel did not finish within its deadline (`runtime.timing.finish_within`): a wait that never
    completes. torch cannot cancel a kernel, so the GPU stays busy until the process exits; the benchmark scripts
    report the plan and exit rather than block on the next synchronization.

    Attributes:
        what: the kernel or plan that hung.
        seconds: the deadline it missed.
    """

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        super().__init__(f"{what}: the kernel did not finish within {seconds:g} s (a barrier wait that never "
                         "completes, most likely); the GPU stays busy until this process exits. Fix: simulate the "
                         "same plan on the CPU (Kernel.simulate, or WARPLOOM_SIM_CHECK=1 when building), which "
                         "names the wait as a DEADLOCK finding")


class VerificationError(InternalError):
    """The schedule IR verifier rejected a module; the message lists every violation found."""

    def __init__(self, stage: str, problems: list[str]) -> None:
        self.stage = stage
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"schedule IR invalid after {stage}:\n{lines}")


def plan_field(field: str, value: object, expected: str, fix: str, got: str | None = None) -> PlanError:
    """A `Plan` field the lowering cannot run, in a plan written or edited by hand (`Plan.__post_init__`, and
    `planning.plan_check` against the spec and the GPU): the message names the field, what it must be, what it is
    (`got`, by default its value) and the fix."""
    return PlanError(_msg(f"Plan({field}={value!r})", expected, repr(value) if got is None else got, fix))


def rowwise_too_wide(bn: int, planned_n: int, n: int) -> ShapeError:
    """A kernel quantizing rowwise in its epilogue (planner rule 27) called with more columns than its one tile
    spans: the row's amax would come from each tile's part of it."""
    return ShapeError("b", f"N <= {bn}, the columns of the one tile whose amax this kernel's rowwise quantization "
                      f"takes (planned for N = {planned_n})", f"N = {n}",
                      "plan a kernel for this N (warploom.plan), or return the value and quantize the result with "
                      "warploom.quantize(out, recipe='rowwise')")


def split_k_mismatch(bk: int, split_k: int, planned_k: int, k: int, uneven: bool = False) -> ShapeError:
    """A split-K kernel (`ir.Tiling.split_k`) called with a K whose k-blocks do not split as planned: into equal
    ranges, or (`ir.Tiling.uneven_split`) into ranges of at least one k-block each."""
    how = f"at least {split_k} {bk}-element k-blocks, one for each of" if uneven else \
        f"{bk}-element k-blocks that split into {split_k} equal ranges, as"
    return ShapeError("a", f"K of {how} this split-K kernel's ranges (planned for K = {planned_k})", f"K = {k}",
                      "plan a kernel for this K (warploom.plan, or kernel.build with its spec)")
