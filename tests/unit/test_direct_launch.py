"""The direct launch path (runtime/direct.py) and bound launches (runtime/bound.py) on CPU, against Triton's own
launcher wrapper.

A direct launch expands each TMA descriptor argument itself (encoding, shape, strides, as Triton's
`make_tensordesc_arg` does, remembered per address, shape and strides) and calls the C launch function behind
Triton's `CudaLauncher`. Here the C function is a recorder and the driver's `fill_tma_descriptor` returns its
arguments, so the arguments the direct path passes can be compared with what Triton's `wrap_handle_tensordesc`
passes for the same call made with `TensorDescriptor`s: they must be identical, call after call.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import triton
from triton.backends.nvidia import driver as nv
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from warploom.backends import gluon_api
from warploom.backends.gluon_api import LaunchAbi
from warploom.dtypes import DType
from warploom.runtime.cross import shared_layout
from warploom.runtime.direct import CompiledLaunch, DescSlot, _c_entry

BLOCKS = {0: [128, 64], 1: [256, 64], 2: [128, 128]}
SIGNATURE = {"a_desc": "tensordesc<bf16[128, 64]>", "b_desc": "tensordesc<bf16[256, 64]>",
             "c_desc": "tensordesc<bf16[128, 128]>", "M": "i32", "N": "i32", "K": "i32", "bias_ptr": "*bf16"}
META = [{"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": blk, "fp4_padded": False}
        for blk in BLOCKS.values()]


class Utils:
    def __init__(self) -> None:
        self.encoded: list[int] = []

    def fill_tma_descriptor(self, ptr: int, swizzle: int, elem_size: int, elem_type: int, block: list[int],
                            shape: Any, strides: Any, padding: int) -> tuple[Any, ...]:
        self.encoded.append(ptr)
        return ("tensormap", ptr, swizzle, elem_size, elem_type, tuple(block), tuple(shape), tuple(strides), padding)

    fill_tma_descriptor_tiled = fill_tma_descriptor  # (its name from 3.7)


@pytest.fixture
def utils(monkeypatch: pytest.MonkeyPatch) -> Utils:
    u = Utils()
    monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace(utils=u))
    return u


ABI = gluon_api.for_triton(gluon_api.installed()).launch_abi
# Where the recorded C call has the launch metadata and hooks, and the kernel's expanded arguments.
HOOKS, ARGS = (slice(10, 13), slice(13, None)) if ABI is LaunchAbi.SPREAD else (slice(8, 11), slice(15, None))


class SpreadRun:
    """Shaped like triton 3.6's CudaLauncher (called through its own __call__): `launch` is Triton's own descriptor
    wrapper around the C function (here a recorder named like it)."""

    launch_cooperative_grid = False
    launch_pdl = False
    num_ctas = 1

    def __init__(self, scratch: int = 0) -> None:
        self.global_scratch_size = scratch
        self.global_scratch_align = 1
        self.profile_scratch_size = 0
        self.profile_scratch_align = 1
        self.calls: list[tuple[Any, ...]] = []

        def launch(*args: Any) -> None:
            self.calls.append(args)

        self.launch = nv.wrap_handle_tensordesc(launch, SIGNATURE, META)

    def __call__(self, *args: Any) -> None:
        nv.CudaLauncher.__call__(self, *args)  # type: ignore[arg-type]


def packed_run(scratch: int = 0) -> Any:
    """The installed Triton's (3.7+) own CudaLauncher for SIGNATURE, built over a driver whose C `launch` (the one
    function every kernel's launcher calls from 3.7) is a recorder; `calls` holds what it was called with."""
    calls: list[tuple[Any, ...]] = []

    def launch(*args: Any) -> None:
        calls.append(args)

    src = SimpleNamespace(constants={}, fn=SimpleNamespace(arg_names=list(SIGNATURE)), signature=SIGNATURE)
    metadata = SimpleNamespace(tensordesc_meta=META, global_scratch_size=scratch, global_scratch_align=1,
                               profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False,
                               launch_pdl=False, num_ctas=1, instrumentation_mode="")
    # The driver's compiled helpers (argument annotations, the signature's C form) need CUDA: readable stand-ins.
    driver = SimpleNamespace(utils=SimpleNamespace(launch=launch, build_signature_metadata=tuple))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(triton.runtime.driver, "_active", driver)
        mp.setattr(nv, "PyKernelArg", lambda nested_tuple, type: (type, nested_tuple), raising=False)
        for kind in ("ARG_CONSTEXPR", "ARG_KERNEL", "ARG_TUPLE"):
            mp.setattr(nv, kind, kind, raising=False)
        run = nv.CudaLauncher(src, metadata)
    run.calls = calls
    return run


Run = SpreadRun if ABI is LaunchAbi.SPREAD else packed_run


def kernel(run: Run, meta: Any = META) -> Any:
    return SimpleNamespace(run=run, metadata=SimpleNamespace(tensordesc_meta=meta), function=77,
                           packed_metadata=(8, 1, 1), launch_metadata=lambda *a: None)


def slots() -> dict[int, DescSlot]:
    return {i: DescSlot(blk, shared_layout(DType.BF16, blk), TensorDescriptor) for i, blk in BLOCKS.items()}


def tensors(m: int, n: int, k: int) -> list[Any]:
    """A call's arguments in SIGNATURE's order: A (M, K), B (N, K), the output, M, N, K and a bias."""
    a = torch.randn(m, k).to(torch.bfloat16)
    b = torch.randn(n, k).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    return [a, b, c, m, n, k, torch.randn(n).to(torch.bfloat16)]


def reference(args: list[Any]) -> tuple[Any, ...]:
    """What Triton's launcher passes to the C function for the same call with TensorDescriptors."""
    run = Run()
    described = [slots()[i].descriptor(x) if i in BLOCKS else x for i, x in enumerate(args)]
    run(5, 1, 1, 99, 77, (8, 1, 1), None, None, None, *described)
    return run.calls[-1]


def test_c_entry_is_the_function_triton_wraps() -> None:
    run = Run()
    entry = _c_entry(run)
    assert entry is not None and entry.fn.__name__ == "launch" and entry.fn is not run.launch and entry.abi is ABI
    assert _c_entry(Run(scratch=64)) is None  # scratch memory: Triton's own launcher allocates it


def test_direct_launch_passes_what_tritons_wrapper_passes(utils: Utils) -> None:
    run = Run()
    compiled = CompiledLaunch(kernel(run), slots(), hook_reads_args=False)
    assert compiled.c_launch is not None

    def wrapper(*args: Any) -> None:
        raise AssertionError("the direct path must call the C function, not Triton's Python wrapper")

    run.launch = wrapper
    for m, n, k in [(300, 272, 512), (300, 272, 512), (64, 512, 128), (1, 64, 64)]:
        args = tensors(m, n, k)
        compiled.launch(5, 99, None, None, args)
        assert run.calls[-1] == reference(args)


def test_encodings_are_reused_per_address_shape_and_strides(utils: Utils, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = CompiledLaunch(kernel(Run()), slots(), hook_reads_args=False)
    monkeypatch.setattr(compiled, "c_launch", lambda *a: None)
    args = tensors(256, 256, 128)
    compiled.launch(5, 99, None, None, args)
    assert len(utils.encoded) == 3
    compiled.launch(5, 99, None, None, args)
    assert len(utils.encoded) == 3  # same three tensors: nothing encoded again
    a2 = args[0].clone()
    compiled.launch(5, 99, None, None, [a2, *args[1:]])
    assert utils.encoded[3:] == [a2.data_ptr()]  # a new address: A's descriptor only
    view = args[0][:128]  # same address, other shape
    compiled.launch(5, 99, None, None, [view, *args[1:3], 128, 256, 128, args[6]])
    assert utils.encoded[4:] == [view.data_ptr()]


def test_without_a_c_entry_the_kernels_own_launcher_gets_descriptors(utils: Utils) -> None:
    run = Run()
    compiled = CompiledLaunch(kernel(run, meta=None), slots(), hook_reads_args=False)  # no descriptor metadata
    assert compiled.c_launch is None
    args = tensors(300, 272, 512)
    compiled.launch(5, 99, None, None, args)
    assert run.calls[-1] == reference(args)


def test_launch_hooks_get_the_kernels_metadata(utils: Utils) -> None:
    run = Run()
    k = kernel(run)
    seen: list[Any] = []

    def launch_metadata(grid: Any, stream: int, *args: Any) -> str:
        seen.append((grid, stream, args))
        return "metadata"

    k.launch_metadata = launch_metadata
    compiled = CompiledLaunch(k, slots(), hook_reads_args=False)
    args = tensors(128, 256, 64)

    def enter(meta: Any) -> None:
        pass

    compiled.launch(3, 99, enter, None, args)
    # The grid as the JIT path passes it; no launch_metadata callback: the arguments go as they are.
    assert seen == [((3,), 99, tuple(args))]
    assert run.calls[-1][HOOKS] == ("metadata", enter, None)


def test_a_launch_metadata_callback_gets_descriptors(utils: Utils) -> None:
    k = kernel(Run())
    seen: list[Any] = []

    def launch_metadata(grid: Any, stream: int, *args: Any) -> None:
        seen.append(args)

    k.launch_metadata = launch_metadata
    compiled = CompiledLaunch(k, slots(), hook_reads_args=True)
    args = tensors(128, 256, 64)
    compiled.launch(3, 99, lambda meta: None, None, args)
    (got,) = seen
    assert [type(x) for x in got[:3]] == [TensorDescriptor] * 3 and got[3:] == tuple(args[3:])
    assert got[0].base is args[0] and list(got[1].block_shape) == BLOCKS[1]


# --- Bound: a remembered eager call's launch (Launcher.bind), its C arguments kept as a template ---------------------

GETTERS = [lambda c: c.a, lambda c: c.b, lambda c: c.out, lambda c: c.a.shape[0], lambda c: c.b.shape[0],
           lambda c: c.a.shape[1], lambda c: c.bias]  # the launcher's per-parameter getters (here B is (N, K))


class FakeLauncher:
    """What a Bound reads of its Launcher (the getters), and its general path, recorded."""

    _args = GETTERS
    _bases: dict[int, Any] = {}
    _positional: dict[int, tuple[int, bool]] = {}  # (none: every call takes the general loop over the getters)

    def __init__(self) -> None:
        self.general: list[tuple[Any, ...]] = []

    def __call__(self, a: Any, b: Any, out: Any, *rest: Any, **kw: Any) -> Any:
        self.general.append((a, b, out))
        return out


class Knobs:
    def __init__(self) -> None:
        self.same = True

    def same_knobs(self, key: tuple[Any, ...]) -> bool:
        return self.same


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A stand-in driver: device 0 current, stream 99, `fill_tma_descriptor` recorded (as `utils`)."""
    drv = SimpleNamespace(utils=Utils(), device=0, get_current_stream=lambda d: 99)
    drv.get_current_device = lambda: drv.device
    monkeypatch.setattr(triton.runtime.driver, "_active", drv)
    return drv


call_args = tensors


# What the real launcher records for these parameters: a, b and out as descriptors, bias through aligned_copy.
POSITIONAL = {0: (0, False), 1: (1, False), 2: (2, False), 6: (5, True)}


def bound_for(args: list[Any], run: Run, kern: Any = None, positional: bool = False
              ) -> tuple[Any, FakeLauncher, Knobs]:
    from warploom.runtime.bound import Bound, BoundStep, Step

    launcher, knobs_ = FakeLauncher(), Knobs()
    if positional:
        launcher._positional = POSITIONAL
    compiled = CompiledLaunch(kern or kernel(run), slots(), hook_reads_args=False, key=(0, False, None))
    step = Step(knobs_, 5, launcher._args, launcher._positional, launcher._bases)  # type: ignore[arg-type]
    return Bound(launcher, 0, [(None, [BoundStep(step, compiled, args)])]), launcher, knobs_  # type: ignore[arg-type]


def launch(bound: Any, args: list[Any]) -> Any:
    a, b, out, _, _, _, bias = args
    return bound(a, b, out, bias=bias)


@pytest.mark.parametrize("positional", [False, True], ids=["getters", "positional"])
def test_bound_launch_passes_what_tritons_wrapper_passes(gpu: SimpleNamespace, positional: bool) -> None:
    run = Run()
    first = call_args(300, 272, 512)
    bound, launcher, _ = bound_for(first, run, positional=positional)
    (_, (step,)), = bound.parts
    assert all(slot[4] is not None for slot in step._slots) == positional  # every tensor slot has a position
    # Later calls with the key's shapes and strides, new tensors each time, and the first call's again.
    for args in [call_args(300, 272, 512), call_args(300, 272, 512), first]:
        assert launch(bound, args) is args[2]
        assert run.calls[-1] == reference(args)
    assert launcher.general == []


def test_a_positional_bound_launch_reads_no_getter(gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every tensor positional, a call whose descriptors are all encoded already builds no `Call` and reads no
    getter; one with a new address takes the getters (to encode it), and the next call is positional again."""
    import warploom.runtime.bound as bound_mod

    run = Run()
    args = call_args(300, 272, 512)
    bound, _, _ = bound_for(args, run, positional=True)
    calls: list[int] = []
    real_call = bound_mod.Call

    def counting_call(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real_call(*a, **kw)

    monkeypatch.setattr(bound_mod, "Call", counting_call)
    for _ in range(3):
        launch(bound, args)
        assert run.calls[-1] == reference(args)
    assert calls == []  # the binding call's own tensors: every encoding known
    out2 = torch.empty_like(args[2])
    later = [*args[:2], out2, *args[3:]]
    launch(bound, later)
    assert calls == [1] and run.calls[-1] == reference(later)  # a new output address: encoded through a getter
    launch(bound, later)
    assert calls == [1] and run.calls[-1] == reference(later)


@pytest.mark.parametrize("positional", [False, True], ids=["getters", "positional"])
def test_bound_keeps_no_tensor_of_the_binding_call(gpu: SimpleNamespace, positional: bool) -> None:
    import weakref

    args = call_args(128, 256, 64)
    bound, _, _ = bound_for(args, Run(), positional=positional)
    refs = [weakref.ref(t) for t in args if isinstance(t, torch.Tensor)]
    del args
    assert all(r() is None for r in refs)  # the template holds shapes, strides and encodings only
    later = call_args(128, 256, 64)
    launch(bound, later)


@pytest.mark.parametrize("positional", [False, True], ids=["getters", "positional"])
def test_bound_encodes_each_address_once(gpu: SimpleNamespace, positional: bool) -> None:
    args = call_args(256, 256, 128)
    bound, _, _ = bound_for(args, Run(), positional=positional)
    assert len(gpu.utils.encoded) == 3  # binding encodes the call's three descriptors
    launch(bound, args)
    launch(bound, args)
    assert len(gpu.utils.encoded) == 3  # the same three addresses: nothing encoded again
    out2 = torch.empty_like(args[2])
    launch(bound, [*args[:2], out2, *args[3:]])
    launch(bound, [*args[:2], out2, *args[3:]])
    assert gpu.utils.encoded[3:] == [out2.data_ptr()]  # a new output address: its descriptor, once


def test_bound_steps_aside_for_another_device_or_changed_knobs(gpu: SimpleNamespace) -> None:
    run = Run()
    args = call_args(128, 256, 64)
    bound, launcher, knobs_ = bound_for(args, run)
    gpu.device = 1  # another device is current: the general path switches to the tensors'
    launch(bound, args)
    assert len(launcher.general) == 1 and run.calls == []
    gpu.device = 0
    knobs_.same = False  # debug/instrumentation knobs changed or a pre-run hook added: through the JIT
    launch(bound, args)
    assert len(launcher.general) == 2 and run.calls == []
    knobs_.same = True
    launch(bound, args)
    assert len(launcher.general) == 2 and run.calls[-1] == reference(args)


def test_bound_gives_live_launch_hooks_their_metadata(gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run()
    k = kernel(run)
    k.launch_metadata = lambda grid, stream, *a: "metadata"
    args = call_args(128, 256, 64)
    bound, _, _ = bound_for(args, run, k)

    def enter(meta: Any) -> None:
        pass

    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", enter)
    launch(bound, args)
    assert run.calls[-1][HOOKS] == ("metadata", enter, None)
    assert run.calls[-1][ARGS] == reference(args)[ARGS]


def test_empty_hook_chains_are_no_hooks(utils: Utils) -> None:
    from triton.knobs import HookChain

    run = Run()
    k = kernel(run)
    k.launch_metadata = lambda *a: pytest.fail("no hook to give metadata to")
    compiled = CompiledLaunch(k, slots(), hook_reads_args=False)
    args = tensors(128, 256, 64)
    chain: HookChain[Any] = HookChain()
    compiled.launch(3, 99, chain, HookChain(reversed=True), args)
    assert run.calls[-1][HOOKS] == (None, None, None)  # what Triton passes when no hook is set
    chain.add(print)
    k.launch_metadata = lambda *a: "metadata"
    compiled.launch(3, 99, chain, None, args)
    assert run.calls[-1][HOOKS] == ("metadata", chain, None)


def test_bound_finds_a_views_encoding_by_its_base(gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """K-major B arrives as a (K, N) view; its descriptor is over the (N, K) storage (the getter transposes back).
    A bound launch looks the encoding up by B's address, so it makes the view only to encode a new address."""
    made: list[int] = []

    def b_desc(c: Any) -> Any:
        made.append(1)
        return c.b.t()

    monkeypatch.setattr(FakeLauncher, "_args", [GETTERS[0], b_desc, *GETTERS[2:4], lambda c: c.b.shape[1],
                                                *GETTERS[5:]])
    monkeypatch.setattr(FakeLauncher, "_bases", {1: lambda c: c.b})
    run = Run()
    args = call_args(300, 272, 512)
    args[1] = args[1].t()  # (K, N), a view of (N, K) storage
    bound, _, _ = bound_for([args[0], args[1].t(), *args[2:]], run)
    made.clear()
    for b in [args[1], args[1], args[1].t().clone().t()]:
        a, _, out, m, n, k, bias = args
        bound(a, b, out, bias=bias)
        assert run.calls[-1] == reference([a, b.t(), out, m, n, k, bias])
    assert made == [1]  # only for the third call's new address


def test_an_exit_hook_alone_gets_the_metadata(utils: Utils, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton builds launch metadata whenever the enter knob is not None (its default is an empty chain), and the
    C launcher hands it to the exit hook: an exit hook alone must get it too."""
    from triton.knobs import HookChain

    run = Run()
    k = kernel(run)
    k.launch_metadata = lambda *a: "metadata"
    compiled = CompiledLaunch(k, slots(), hook_reads_args=False)
    leave: HookChain[Any] = HookChain(reversed=True)
    leave.add(print)
    compiled.launch(3, 99, HookChain(), leave, tensors(128, 256, 64))
    assert run.calls[-1][HOOKS] == ("metadata", None, leave)


def test_aligned_passes_contiguous_aligned_scales_as_they_are() -> None:
    from warploom.runtime.direct import aligned_copy

    for t in (torch.rand(()), torch.rand(1), torch.rand(300, 1), torch.rand(1, 272)):
        assert aligned_copy(t) is t  # the launcher reads only the address and dtype: no view per call
    col = torch.rand(300, 2)[:, :1]  # (300, 1) with row stride 2: not contiguous
    got = aligned_copy(col)
    assert got.is_contiguous() and got.data_ptr() % 16 == 0 and torch.equal(got.reshape(-1), col.reshape(-1))
    off = torch.rand(301)[1:]  # contiguous at an address 4 bytes past an aligned one
    got = aligned_copy(off)
    assert got.data_ptr() % 16 == 0 and torch.equal(got, off)


class StandInLauncher:
    """What eager.Prepared uses of a Launcher: launches recorded, `bind` giving a recorder or None."""

    def __init__(self, can_bind: bool, binds: list[bool]) -> None:
        self.can_bind, self.binds = can_bind, binds
        self.log: list[str] = []

    def __call__(self, *args: Any, **kw: Any) -> None:
        self.log.append("general")

    def bind(self, *args: Any, **kw: Any) -> Any:
        self.log.append("bind")
        if not self.binds.pop(0):
            return None
        return lambda a, b, out, *rest, **kw: self.log.append("bound") or out


def test_a_remembered_call_binds_after_a_launch_and_retries_until_bound() -> None:
    from warploom import eager

    a, b = torch.randn(4, 8), torch.randn(8, 16)
    la = StandInLauncher(True, [False, True])  # the first launch kept no kernel (say, through the JIT)
    p = eager.Prepared(SimpleNamespace(launcher=la), 4, 16, torch.float32)  # type: ignore[arg-type]
    for _ in range(4):
        out = p(a, b)
        assert out.shape == (4, 16)
    assert la.log == ["general", "bind", "general", "bind", "bound", "bound"]
    never = StandInLauncher(False, [])  # rule 29's two passes: never bound, never asked
    p = eager.Prepared(SimpleNamespace(launcher=never), 4, 16, torch.float32)  # type: ignore[arg-type]
    p(a, b)
    p(a, b)
    assert never.log == ["general", "general"]
