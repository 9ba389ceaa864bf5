"""Which names an epilogue operand may have: none that the generated Gluon already uses.

A fused epilogue's operand ``name`` becomes identifiers of the generated kernel: the parameter ``{name}_ptr``,
``{name}_desc`` and ``{name}_smem`` (a dense operand's TMA staging), and values such as ``{name}_acc0_0``. An
operand called ``c`` would meet the output's own ``c_smem`` (a duplicate buffer the verifier rejects), ``ep_cols``
the epilogue's column index ``ep_cols_acc0_0``. Such names are refused with the operand's name before anything is
planned (`check`).

`GENERATED` lists the bare names (not attributes, not keyword arguments) that the sm_90a, sm_100a and gfx1250
emitters write, and `_NUMBERED` those they number; tests/unit/test_operand_names.py regenerates kernels of every
backend and fails, naming the identifier, when an emitter starts writing one that is not covered here.
"""

from __future__ import annotations

import keyword
import re

from warploom.errors import InputError

GENERATED = frozenset("""
    AMDWMMALayout BK BM BN GROUP_M K M MP N SPLIT_K STAGES TensorMemoryLayout a a_desc a_layout a_ptr a_ring a_smem
    a_stride_m acc acc_empty_bars acc_layout acc_ready_bars acc_tm allocate_tensor_memory async_copy b b_desc
    b_layout b_ptr b_ring b_smem b_stride_k b_stride_n c c_desc c_mask c_ptr c_ptrs c_stride_m c_stride_n col
    consumer empty_bars ep_acc ep_layout ep_rows epilogue fence_async_shared first_pid_m get_tmem_reg_layout gl
    gluon group_size_m i k_tiles kk language layout mask mbarrier mma num_pid_in_group num_pid_m num_pid_n
    num_tiles num_units off_m off_n offs offs_m offs_n p partial pid pid_m pid_n producer range ready_bars row s sa
    sa_ptr sa_ring sa_ring_copy sa_ring_idx sa_stride_k sa_stride_m sb sb_ptr sb_ring sb_ring_copy sb_ring_idx
    sb_stride_g sb_stride_k sb_stride_n split t tcgen05_commit tcgen05_mma tdm tile_coords tile_id tl tma triton unit
    warpgroup_mma warpgroup_mma_wait wmma workspace_desc ws_ptr
    SK_SPLIT dp_tiles grid it0 it1 k_hi k_lo n_dp q sk_cols sk_ctas sk_flags_ptr sk_last sk_offs sk_owner sk_range
    sk_rows sk_tiles sk_unit sk_ws_ptr total u
    j q0 sk_here sk_q sk_set sk_up sk_wait_layout
    _nan_max ep_amax ep_block_amax ep_group
    amax_ptr
    E end first g group_count group_ptr group_tile grp hit k_base k_end k_group_tile k_left k_skip k_start mk_cols
    mk_layout mk_vals per row0 row_end seen st_cols st_layout st_rows st_vals start tiles
    grid_dependency_wait launch_dependents
""".split())

# Numbered or composed generated names: accumulator halves and parts, extra outputs, output staging buffers,
# consumer partitions, epilogue values and outputs, the epilogue's column index per accumulator part.
_NUMBERED = re.compile(r"acc\d+|acc(_hi|_lo)+|c\d+_\w+|c_smem\w*|consumer\d+|ep_\d+|ep_out\d+|ep_cols_\w+|k\d+")

# What the emitters append to an operand's name, one example of each numbered form. (The name itself is never
# written bare: an operand `gl` or `s` is `gl_ptr`, `s_acc0_0`, ... in the kernel.)
DERIVED = ("_ptr", "_desc", "_smem", "_smem0", "_smem_bar", "_smem_phase", "_smem0_bar", "_smem0_phase", "_smem_s1",
           "_smem_s1_bar", "_smem_s1_phase", "_acc_0", "_acc0_0")


# Keyword arguments that warploom's calls with an epilogue (matmul, scaled_mm, plan, grouped_mm, scaled_grouped_mm)
# take for themselves: a tensor passed under one of these names goes to the call, never to the epilogue (in at least
# one of those calls; a renamed parameter works in all of them).
CALL_KEYWORDS = frozenset({"a", "b", "offs", "masked_m", "out_dtype", "use_fast_accum", "scale_result", "device",
                           "epilogue"})


def unpassable(name: str) -> bool:
    """Whether no operand can ever be passed under `name`: a call's own keyword, or a name `check` refuses. An
    epilogue parameter so named must be renamed, whatever the call passes."""
    return name in CALL_KEYWORDS or not name.isidentifier() or keyword.iskeyword(name) or generated(name)


def generated(name: str) -> bool:
    """Whether `name`, or an identifier the emitters derive from an operand of that name, is a generated one."""
    return any(n in GENERATED or _NUMBERED.fullmatch(n) for n in (name + d for d in DERIVED))


def check(name: str) -> None:
    """Refuse an epilogue operand name that is not an identifier, or that a generated kernel already uses."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise InputError(name, "an epilogue operand name that is a Python identifier (it names fn's parameter)",
                         repr(name), "rename the operand and the epilogue's parameter")
    if generated(name):
        other = next((n for n in (f"{name}_in", f"my_{name}") if not generated(n)), f"my_{name}")
        raise InputError(name, "an epilogue operand name that the generated kernel does not use itself (a, b, c, "
                         "ep_cols and other names of its parameters, buffers and index vectors)",
                         repr(name), f"rename the operand and the epilogue's parameter, e.g. {other}={name}")
