"""Grouped GEMMs (issue 27 items 1-2): `grouped_mm` and `scaled_grouped_mm`, with the semantics of torch._grouped_mm
and torch._scaled_grouped_mm, plus DeepGEMM's masked layout.

Layouts (``b`` is (G, K, N) but in the K-grouped one: G experts' weights, a (G, N, K) tensor seen as
``.transpose(-2, -1)`` or a contiguous (G, K, N)):

- M-grouped ("contiguous"): ``a`` (total_M, K) and int32 cumulative row ends ``offs`` (G,): rows offs[g-1] ..
  offs[g] of the result are ``a[those rows] @ b[g]``; rows past offs[-1] are not written (their values are
  unspecified, as torch's).
- masked: ``a`` (G, M_max, K) and int32 counts ``masked_m`` (G,): result (G, M_max, N), rows at or past a count
  unspecified; nothing outside the result is ever written.
- batched: ``a`` (G, M, K) without counts: every row.
- K-grouped (the weight gradient): ``a`` (M, total_K), ``b`` 2-D (total_K, N) (torch's column-major one, or a
  contiguous one) and int32 cumulative K ends ``offs`` (G,): result (G, M, N), its block g
  ``a[:, offs[g-1]:offs[g]] @ b[offs[g-1]:offs[g]]``, zeros for an empty K range (torch's). bf16/fp16 only.

CUDA tensors launch the grouped kernel (ir.Tiling.grouping) with no host sync, so it can be captured in a CUDA
graph; CPU tensors run the same planned kernel on the simulator (small problems, `api.sim_max_flops`). Arguments are
checked first (`checks_grouped`); the bounds' values only on CPU tensors (its docstring says why).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from warploom.api import check_sim_size, device_for, require_cuda
from warploom.checks_grouped import GroupedCall, grouped_call
from warploom.kernel import Kernel, build
from warploom.spec import Grouping


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, *,
               masked_m: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """bf16/fp16 grouped GEMM: ``torch._grouped_mm(a, b, offs=offs, out_dtype=out_dtype)`` for a 2-D a with offs
    (over a 3-D b: M-grouped; over a 2-D b: K-grouped) or a 3-D a, and the masked layout with `masked_m` (module
    docstring). fp32 accumulation."""
    return _run(grouped_call(a, b, offs, masked_m, out_dtype))


def scaled_grouped_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      offs: torch.Tensor | None = None, *, masked_m: torch.Tensor | None = None,
                      out_dtype: torch.dtype | None = torch.bfloat16, use_fast_accum: bool = False) -> torch.Tensor:
    """fp8 (e4m3) rowwise grouped GEMM: ``torch._scaled_grouped_mm(a, b, scale_a, scale_b, offs=offs,
    out_dtype=torch.bfloat16, use_fast_accum=...)``: scale_a (total_M,) fp32 per row of a ((G, M_max) with a 3-D a),
    scale_b (G, N) per column of each expert. use_fast_accum=False promotes each k-block's partial into an fp32
    accumulator (torch's accuracy); True accumulates in the tensor core's."""
    return _run(grouped_call(a, b, offs, masked_m, out_dtype, scale_a, scale_b, use_fast_accum),
                scale_a.reshape(-1), scale_b)


def _run(call: GroupedCall, scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None) -> torch.Tensor:
    spec, a = call.spec, call.a
    dtype = spec.out_dtype.torch
    if spec.m == 0 or spec.n == 0 or spec.k == 0:  # no kernel: an empty result, or a sum over nothing
        out = torch.zeros(call.out_shape, dtype=dtype, device=a.device)
        return out
    kernel = build(spec, device_for(a))
    rows = spec.groups * spec.m if spec.grouping is Grouping.K_OFFSETS else spec.m  # (C's: K-grouped, G blocks of M)
    if a.device.type == "cpu":
        from warploom.sim.grouped import simulate_grouped

        check_sim_size(spec)
        out = torch.zeros((rows, spec.n), dtype=dtype)  # (rows outside every group: unspecified; zeros here)
        simulate_grouped(kernel.module, a, call.b, call.bounds, scale_a, scale_b, out=out).raise_for_findings()
        return out.reshape(call.out_shape)
    require_cuda(a)
    out = torch.empty((rows, spec.n), dtype=dtype, device=a.device)
    with torch.cuda.device(a.device):
        _launcher(kernel)(a, call.b, call.bounds, out, scale_a, scale_b)
    return out.reshape(call.out_shape)


@functools.lru_cache(maxsize=64)
def _launcher(kernel: Kernel) -> Any:
    from warploom.runtime.launch_grouped import GroupedLauncher

    return GroupedLauncher(kernel.module, kernel.gluon)
