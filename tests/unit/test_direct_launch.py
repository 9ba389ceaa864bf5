"""The direct launch path (runtime/launch.py) on CPU, against Triton's own launcher wrapper.

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

from warploom.dtypes import DType
from warploom.runtime.cross import shared_layout
from warploom.runtime.launch import _c_entry, _Compiled, _DescSlot

BLOCKS = {0: [128, 64], 1: [256, 64], 2: [128, 128]}
SIGNATURE = {"a_desc": "tensordesc<bf16[128, 64]>", "b_desc": "tensordesc<bf16[256, 64]>",
             "c_desc": "tensordesc<bf16[128, 128]>", "M": "i32", "N": "i32", "K": "i32"}
META = [{"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": blk, "fp4_padded": False}
        for blk in BLOCKS.values()]


class Utils:
    def __init__(self) -> None:
        self.encoded: list[int] = []

    def fill_tma_descriptor(self, ptr: int, swizzle: int, elem_size: int, elem_type: int, block: list[int],
                            shape: Any, strides: Any, padding: int) -> tuple[Any, ...]:
        self.encoded.append(ptr)
        return ("tensormap", ptr, swizzle, elem_size, elem_type, tuple(block), tuple(shape), tuple(strides), padding)


@pytest.fixture
def utils(monkeypatch: pytest.MonkeyPatch) -> Utils:
    u = Utils()
    monkeypatch.setattr(triton.runtime.driver, "_active", SimpleNamespace(utils=u))
    return u


class Run:
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


def kernel(run: Run, meta: Any = META) -> Any:
    return SimpleNamespace(run=run, metadata=SimpleNamespace(tensordesc_meta=meta), function=77,
                           packed_metadata=(8, 1, 1), launch_metadata=lambda *a: None)


def slots() -> dict[int, _DescSlot]:
    return {i: _DescSlot(blk, shared_layout(DType.BF16, blk), TensorDescriptor) for i, blk in BLOCKS.items()}


def tensors(m: int, n: int, k: int) -> list[Any]:
    a = torch.randn(m, k).to(torch.bfloat16)
    b = torch.randn(n, k).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    return [a, b, c, m, n, k]


def reference(args: list[Any]) -> tuple[Any, ...]:
    """What Triton's launcher passes to the C function for the same call with TensorDescriptors."""
    run = Run()
    described = [slots()[i].descriptor(x) if i in BLOCKS else x for i, x in enumerate(args)]
    run(5, 1, 1, 99, 77, (8, 1, 1), None, None, None, *described)
    return run.calls[-1]


def test_c_entry_is_the_function_triton_wraps() -> None:
    run = Run()
    entry = _c_entry(run)
    assert entry is not None and entry.__name__ == "launch" and entry is not run.launch
    assert _c_entry(Run(scratch=64)) is None  # scratch memory: Triton's own launcher allocates it


def test_direct_launch_passes_what_tritons_wrapper_passes(utils: Utils) -> None:
    run = Run()
    compiled = _Compiled(kernel(run), slots(), hook_reads_args=False)
    assert compiled.c_launch is not None

    def wrapper(*args: Any) -> None:
        raise AssertionError("the direct path must call the C function, not Triton's Python wrapper")

    run.launch = wrapper
    for m, n, k in [(300, 272, 512), (300, 272, 512), (64, 512, 128), (1, 64, 64)]:
        args = tensors(m, n, k)
        compiled.launch(5, 99, None, None, args)
        assert run.calls[-1] == reference(args)


def test_encodings_are_reused_per_address_shape_and_strides(utils: Utils, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _Compiled(kernel(Run()), slots(), hook_reads_args=False)
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
    compiled.launch(5, 99, None, None, [view, *args[1:3], 128, 256, 128])
    assert utils.encoded[4:] == [view.data_ptr()]


def test_without_a_c_entry_the_kernels_own_launcher_gets_descriptors(utils: Utils) -> None:
    run = Run()
    compiled = _Compiled(kernel(run, meta=None), slots(), hook_reads_args=False)  # no descriptor metadata
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
    compiled = _Compiled(k, slots(), hook_reads_args=False)
    args = tensors(128, 256, 64)

    def enter(meta: Any) -> None:
        pass

    compiled.launch(3, 99, enter, None, args)
    # The grid as the JIT path passes it; no launch_metadata callback: the arguments go as they are.
    assert seen == [((3,), 99, tuple(args))]
    assert run.calls[-1][10:13] == ("metadata", enter, None)


def test_a_launch_metadata_callback_gets_descriptors(utils: Utils) -> None:
    k = kernel(Run())
    seen: list[Any] = []

    def launch_metadata(grid: Any, stream: int, *args: Any) -> None:
        seen.append(args)

    k.launch_metadata = launch_metadata
    compiled = _Compiled(k, slots(), hook_reads_args=True)
    args = tensors(128, 256, 64)
    compiled.launch(3, 99, lambda meta: None, None, args)
    (got,) = seen
    assert [type(x) for x in got[:3]] == [TensorDescriptor] * 3 and got[3:] == tuple(args[3:])
    assert got[0].base is args[0] and list(got[1].block_shape) == BLOCKS[1]
