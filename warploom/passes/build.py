"""The front end's output: the GEMM as one sequential partition, before any scheduling.

    for tiles:                      # this CTA's output tiles
      [zero acc]                    # promoted fp8 only
      for k:
        tma_load A[m, k] -> a[c] sync
        tma_load B[n, k] -> b[c] sync
        [copy_scales scale_a, scale_b]  # blockwise fp8 only: this k-block's scales
        wgmma acc += a[c] @ b[c]    # or: partial = a @ b; promote acc += partial [* scales]
        advance c
      [fixup acc]                   # stream-K only: join a tile split among CTAs (ir.Fixup)
      epilogue acc: scales, bias
      store_tile C[m, n] <- acc

Every later pass is a rewrite of this program, so the schedule's meaning is the meaning of this loop.
"""

from __future__ import annotations

from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.planning.common import scale_rows
from warploom.planning.plan import Plan
from warploom.spec import Accumulation, ALayout, BLayout, GemmSpec, ScaleRecipe


def kernel_name(spec: GemmSpec, plan: Plan) -> str:
    acc = "_promoted" if spec.accumulation is Accumulation.PROMOTED else ""
    scale = "" if spec.scale is ScaleRecipe.NONE else f"_{spec.scale.value}"
    bias = "_bias" if spec.bias_dtype else ""
    a = "_am_major" if spec.a_layout is ALayout.M_MAJOR else ""
    a += f"_grouped_{spec.grouping.value}" if spec.grouped else ""
    return (
        f"warploom_{spec.a_dtype.value}{spec.b_dtype.value}_{spec.out_dtype.value}{scale}{bias}{acc}{a}"
        f"_b{spec.b_layout.value}_{plan.short()}{_epilogue_tag(spec)}"
    )


def _epilogue_tag(spec: GemmSpec) -> str:
    """A fused epilogue's fingerprint: the kernel name keys the on-disk source cache, and two epilogues (or
    two operand stride patterns, which are compiled in) must not share a file."""
    if spec.epilogue is None:
        return ""
    import hashlib

    from warploom.epilogue import printer

    # (a per-group operand's group stride is compiled in too; only theirs, so other kernels keep their names)
    key = printer.text(spec.epilogue) + repr([(s.name, s.mn_strides(), *((s.group_stride,) if s.per_group else ()))
                                              for s in spec.epilogue.operands])
    return "_ep" + hashlib.sha1(key.encode()).hexdigest()[:10]


def build_sequential(spec: GemmSpec, plan: Plan) -> ir.Module:
    """The one-partition program for `spec` with `plan`'s tiling (rings of depth 1, synchronous ops). A rule 29 plan
    (`Plan.amax_pass`) builds the first pass: its module's spec is `amax_pass_spec(spec)` (y, fp32, its one output)
    and `ir.Module.amax_pass` names the cast kernel that follows."""
    amax_pass = None
    if plan.amax_pass:
        from warploom.planning.amax_pass import amax_pass_spec

        pair = spec.epilogue.quantized_pair() if spec.epilogue is not None else None
        if pair is None:
            raise ValueError("build_sequential: Plan(amax_pass=True) needs a graph that stores exactly a rowwise "
                             "quantize pair (planner rule 29)")
        spec, amax_pass = amax_pass_spec(spec), ir.AmaxPass(pair[0])
    b_rows, b_cols = (plan.bn, plan.bk) if spec.b_layout is BLayout.K_MAJOR else (plan.bk, plan.bn)
    b_coord = (ir.Axis.N, ir.Axis.K) if spec.b_layout is BLayout.K_MAJOR else (ir.Axis.K, ir.Axis.N)
    m_major = spec.a_layout is ALayout.M_MAJOR  # (an M-major A's slots are (BK, BM): its storage order)
    a_rows, a_cols = (plan.bk, plan.bm) if m_major else (plan.bm, plan.bk)
    a_coord = (ir.Axis.K, ir.Axis.M) if m_major else (ir.Axis.M, ir.Axis.K)
    # A narrow or fitted tile (rules 31 and 32) copies and keeps only its blocks of B's rows (`ir.TmaLoad.blocks`,
    # `ir.Ring.blocks`); with promoted accumulation or an N-major B the verifier refuses the plan, naming them.
    b_blocks = ir.column_blocks(plan.n_blocks) if (plan.n_blocks and spec.accumulation is Accumulation.NATIVE
                                                   and spec.b_layout is BLayout.K_MAJOR) else ()
    # MX fp8 x fp4: the fp4 operand's slots hold a value a byte (kind::mxf8f6f4 reads it so; `ir.Ring.padded`)
    rings: tuple[ir.Ring, ...] = (
        ir.Ring("a_ring", ir.Tensor.A, spec.a_dtype, 1, a_rows, a_cols, padded=spec.mixed_fp4 and spec.fp4_a),
        ir.Ring("b_ring", ir.Tensor.B, spec.b_dtype, 1, b_rows, b_cols, padded=spec.mixed_fp4 and spec.fp4_b,
                blocks=b_blocks),
    )
    blockwise = spec.scale.is_blockwise
    mx = spec.scale is ScaleRecipe.MX
    subs = plan.bk // spec.scale.scale_k if blockwise else 1  # MX: four 32-deep slices per k-block
    # sm_100a MX (rule 19, seed 001): the tensor cores apply the e8m0 scales themselves (tcgen05 block-scaled MMA),
    # so nothing is promoted; TMA copies each k-block's raw bytes, (BM, BK/32) and (BN, BK/32) in torch's blocked
    # layout, into slots of the A/B stage, which tcgen05.cp then reads.
    # NVFP4 likewise, (BM, BK/16) and (BN, BK/16) e4m3 bytes. A tile narrower than 128 (rule 18's swapped decode:
    # 16 or 32 tokens) takes the whole 128-row block its rows start (`scale_rows`), padded by to_blocked.
    native_mx = spec.scale.microscaled and plan.acc_buffers > 0
    # Seed 000's path (row-major scales, `Plan.scale_partition`): the scales never enter the A/B stage; a scale
    # partition loads them itself (passes/blackwell_scales.py).
    staged = native_mx and not plan.scale_partition
    if staged:
        sd = spec.scale.scale_dtype
        rings += (ir.Ring("sa_ring", ir.Tensor.SCALE_A, sd, 1, scale_rows(plan.bm), subs),
                  ir.Ring("sb_ring", ir.Tensor.SCALE_B, sd, 1, scale_rows(plan.bn), subs))
    elif blockwise and not native_mx:
        # The k-block's scales travel through the same stages as its A and B tiles (seed 001): one slot of
        # scale_a holds the tile's BM row scales; one of scale_b the tile's 128-column blocks' (or columns'); MX
        # slots a row of each per 32-deep slice.
        rings += (ir.Ring("sa_ring", ir.Tensor.SCALE_A, DType.FP32, 1, subs, plan.bm),
                  ir.Ring("sb_ring", ir.Tensor.SCALE_B, DType.FP32, 1, subs, spec.scale.b_scales(plan.bn)))
    cur = ir.Cursor("c", 1)
    c = ir.Slot("c")
    promoted = spec.accumulation is Accumulation.PROMOTED and not native_mx
    blocks = plan.partial_blocks if promoted else 1
    width = plan.bn // blocks
    # With column blocks the accumulator is several register tiles, one per block of the output tile.
    accs = [ir.Accumulator("acc" if blocks == 1 else f"acc{i}", plan.bm, width, i * width) for i in range(blocks)]
    k_body: list[ir.Stmt] = [
        ir.TmaLoad(ir.Tensor.A, "a_ring", c, a_coord),
        ir.TmaLoad(ir.Tensor.B, "b_ring", c, b_coord, blocks=b_blocks),
    ]
    if staged:  # (loaded like A and B: the stage's one expect-tx counts their bytes too)
        k_body += [ir.TmaLoad(ir.Tensor.SCALE_A, "sa_ring", c, (ir.Axis.M, ir.Axis.K)),
                   ir.TmaLoad(ir.Tensor.SCALE_B, "sb_ring", c, (ir.Axis.N, ir.Axis.K))]
    elif blockwise and not native_mx:
        # MX scales are single bytes: copied by ordinary loads (sync), not cp.async.
        k_body += [ir.CopyScales(ir.Tensor.SCALE_A, "sa_ring", c, sync=mx),
                   ir.CopyScales(ir.Tensor.SCALE_B, "sb_ring", c, sync=mx)]
    if promoted:
        # Each k-block's fp8 product lands in a fresh partial that is added in full fp32 precision; with
        # column blocks one block-wide partial serves each block in turn (fewer registers, more waits). MX
        # promotes each 32-deep slice of the k-block with its own scales.
        accs.append(ir.Accumulator("partial", plan.bm, width))
        for acc in accs[:blocks]:
            cols = None if blocks == 1 else ir.ColBlock(acc.col0, width)
            for j in range(subs if mx else 1):
                k_cols = ir.ColBlock(j * spec.scale.scale_k, spec.scale.scale_k) if mx else None
                scales = ir.StageScales("sa_ring", "sb_ring", c, j if mx else None) if blockwise else None
                k_body += [ir.Mma("a_ring", "b_ring", c, "partial", overwrite=ir.Guard.ALWAYS, n_cols=cols,
                                  k_cols=k_cols),
                           ir.Promote("partial", acc.name, scales)]
    elif plan.n_blocks:
        # Rules 31 and 32's narrow and fitted tiles: one accumulator and one wgmma per column block of B's slot,
        # each block then finished (stream-K's fixup, the epilogue, the stores) on its own.
        columns = ir.column_blocks(plan.n_blocks)
        accs = [ir.Accumulator(f"acc_n{i}", plan.bm, cb.cols, cb.start) for i, cb in enumerate(columns)]
        blocks = len(accs)
        k_body += [ir.Mma("a_ring", "b_ring", c, a.name, n_cols=cb) for a, cb in zip(accs, columns, strict=True)]
    else:
        k_body.append(ir.Mma("a_ring", "b_ring", c, "acc"))
    k_body.append(ir.Advance("c"))

    steps: list[ir.EpilogueStep] = []
    if spec.epilogue is not None:
        pass  # a fused epilogue's graph holds the scales and the bias as operands (GemmSpec.epilogue)
    elif spec.scale is ScaleRecipe.TENSORWISE:
        steps.append(ir.EpilogueStep.SCALE_TENSORWISE)
    elif spec.scale is ScaleRecipe.ROWWISE:
        steps.append(ir.EpilogueStep.SCALE_ROWWISE)
    elif spec.scale is ScaleRecipe.NVFP4:  # (its block scales are the MMA's; the global ones multiply the tile)
        steps.append(ir.EpilogueStep.SCALE_GLOBAL)
    if spec.bias_dtype is not None and spec.epilogue is None:
        # (swapped, rule 18: the problem's (N,) bias runs along this module's rows)
        steps.append(ir.EpilogueStep.ADD_ROW_BIAS if plan.swap_ab else ir.EpilogueStep.ADD_BIAS)

    tile_body: list[ir.Stmt] = [ir.ZeroAcc(a.name) for a in accs[:blocks]] if promoted else []
    tile_body.append(ir.Loop(ir.LoopKind.K, tuple(k_body)))
    if plan.stream_k:  # rule 21: the unit's k-blocks are part of the tile's; join them before anything reads the sum
        tile_body.append(ir.Fixup(tuple(a.name for a in accs[:blocks])))
    for a in accs[:blocks]:
        if steps:
            tile_body.append(ir.Epilogue(a.name, tuple(steps)))
        tile_body.append(ir.StoreTile(a.name))

    part = ir.Partition(
        name="main", role=ir.Role.SEQUENTIAL, warps=plan.consumer_warps, default=True,
        body=(ir.Loop(ir.LoopKind.TILES, tuple(tile_body)),),
        accumulators=tuple(accs), cursors=(cur,),
    )
    return ir.Module(
        # (rule 29: the cast kernel's fp8 type is not in the first pass's spec, so the name says it)
        name=kernel_name(spec, plan) + (f"_{amax_pass.fp8.value}" if amax_pass else ""), spec=spec,
        tiling=ir.Tiling(plan.bm, plan.bn, plan.bk, plan.group_m, plan.grid, plan.split_k, ranged=plan.tail_split > 1,
                         swap_ab=plan.swap_ab, stream_k=plan.stream_k, sk_waves=plan.sk_waves, grouping=spec.grouping,
                         uneven_split=plan.split_k > 1 and -(-spec.k // plan.bk) % plan.split_k != 0,
                         n_blocks=plan.n_blocks),
        partitions=(part,), rings=rings, target=plan.target, amax_pass=amax_pass,
    )
