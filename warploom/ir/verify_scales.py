"""The verifier's rules for sm_100a block scales in tensor memory (seed 001: `ScaleCopy` into `ScaleBuffer`s).

A complete module with scale buffers must satisfy (each violation is one message):

- **dtype:** an MX recipe's scale rings and buffers hold e8m0, NVFP4's e4m3, a row of BK / scale_k (32 or 16) a
  k-block (NVFP4 at BK 128: 8, two 128x4 chunks); the scaled MMA names the operands' own formats (e4m3 / e5m2 /
  e2m1 as `GemmSpec.a_dtype` / `b_dtype` say) and the recipe's scale vector (a scale per 32 of K for MX, per 16 for
  NVFP4: scale_vec::4X); MX fp8 x fp4's fp4 operand ring, and no other, is padded (`Ring.padded`: a value a byte,
  as kind::mxf8f6f4 reads it).
- **producer and consumer:** each buffer is written by `ScaleCopy`s and read by scaled `TcMma`s, all issued by one
  partition (tcgen05 ops of one thread run in issue order: a copy after an MMA cannot overwrite what that MMA
  reads, one from another partition can); within a k-loop every scaled MMA has a copy into each buffer it reads
  before it, from the stage slot the MMA reads.
- **release:** the stage a copy reads is released only by the completion of the MMA that reads the copied scales
  (`TcMma.release`): no plain `Arrive` on that stage's empty barrier in the copying partition.
- **TMA bytes:** the scale rings are filled by TMA loads on the stage's ready barrier, and the stage's expect-tx
  counts their bytes (A, B and both scales).

Allowed::

    wait ready[c]; tcgen05_copy sa_ring[c] -> sa_tm; tcgen05_copy sb_ring[c] -> sb_tm
    tcgen05_mma acc += a[c] @ b[c] scaled by sa_tm x sb_tm, then arrive empty[c]

Forbidden: the MMA with no copy before it; the copy after the MMA; ``arrive empty[c]`` after the copies (the MMA
may not have read them yet); a copy of ``sa_ring[c + 1]`` for the MMA of ``c``; expect-tx of A's and B's bytes
only. Tensor-memory column overlaps and the 512-column budget are `verify.check_sm100`'s.
"""

from __future__ import annotations

from warploom.blocked import BLOCK_ROWS
from warploom.dtypes import DType
from warploom.ir import nodes as ir
from warploom.spec import ScaleLayout, ScaleRecipe

# The instruction's names for the MX operand formats.
MX_FORMATS = {DType.E4M3: "e4m3", DType.E5M2: "e5m2", DType.E2M1: "e2m1"}
# NVFP4's kind::mxf4nvf4 MMA is 64 deep: 4 e4m3 scale columns (per 16 of K) a row each.
NVFP4_MMA_COLS = 4


def check_tmem_scales(m: ir.Module) -> list[str]:
    """Every rule above; empty when the module has no scale buffers."""
    if not m.tmem_scales:
        return []
    errs = _dtypes(m)
    writers: dict[str, set[str]] = {}
    readers: dict[str, set[str]] = {}
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.ScaleCopy):
                writers.setdefault(o.dst, set()).add(p.name)
            elif isinstance(o, ir.TcMma) and o.scales is not None:
                for b in (o.scales.a, o.scales.b):
                    readers.setdefault(b, set()).add(p.name)
        errs += _k_loops(m, p)
    for sb in m.tmem_scales:
        w, r = writers.get(sb.name, set()), readers.get(sb.name, set())
        if not w:
            errs.append(f"scale buffer {sb.name}: no tcgen05_copy writes it")
        if not r:
            errs.append(f"scale buffer {sb.name}: no scaled tcgen05 MMA reads it")
        if w and r and w | r != {next(iter(r))}:
            errs.append(f"scale buffer {sb.name}: written by {sorted(w)} and read by {sorted(r)}; the copies and the "
                        "MMAs must be one partition's (only one thread's tcgen05 ops run in issue order)")
    errs += _tma_bytes(m)
    return errs


def _dtypes(m: ir.Module) -> list[str]:
    errs = []
    recipe = m.spec.scale
    if not recipe.microscaled:
        errs.append(f"scale buffers in a module of {recipe.value} scales: tcgen05 block scaling here is MX's or "
                    "NVFP4's")
        return errs
    want_dt = recipe.scale_dtype  # MX: e8m0; NVFP4: e4m3
    scale_rings = {o.ring for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ScaleCopy)}
    for name in sorted(scale_rings):
        r = m.ring(name)
        if r.dtype is not want_dt:
            errs.append(f"ring {name} copied into tensor memory holds {r.dtype.value}; {recipe.value} scales are "
                        f"{want_dt.value}")
        if r.cols * recipe.scale_k != m.tiling.bk:
            errs.append(f"ring {name} holds {r.cols} scales a row per k-block of {m.tiling.bk}; {recipe.value} "
                        f"takes one per {recipe.scale_k} of K ({m.tiling.bk // recipe.scale_k})")
    errs += [f"scale buffer {sb.name} holds {sb.dtype.value}; {recipe.value} scales are {want_dt.value}"
             for sb in m.tmem_scales if sb.dtype is not want_dt]
    # (NVFP4 at BK 128: two 128x4 chunks a row block, columns 0..3 for the first 64 of K and 4..7 for the second,
    # which the second of the two MMAs Triton issues reads)
    errs += [f"scale buffer {sb.name} holds {sb.cols} scales a row per k-block of {m.tiling.bk}; {recipe.value} "
             f"takes {m.tiling.bk // recipe.scale_k}" for sb in m.tmem_scales
             if sb.cols * recipe.scale_k != m.tiling.bk]
    for r in m.rings:  # MX fp8 x fp4: kind::mxf8f6f4 reads the fp4 operand a value a byte, and only that one
        want_pad = m.spec.mixed_fp4 and r.tensor in (ir.Tensor.A, ir.Tensor.B) and r.dtype is DType.E2M1
        if r.padded != want_pad:
            errs.append(f"ring {r.name} is {'' if r.padded else 'not '}padded; "
                        + ("the fp4 operand of MX fp8 x fp4 lies a value a byte in shared memory (kind::mxf8f6f4)"
                           if want_pad else "only MX fp8 x fp4's fp4 operand is (fp4 x fp4 reads packed pairs)"))
    want = (MX_FORMATS.get(m.spec.a_dtype), MX_FORMATS.get(m.spec.b_dtype))
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if not isinstance(o, ir.TcMma) or o.scales is None:
                continue
            if (o.scales.a_type, o.scales.b_type) != want:
                errs.append(f"partition {p.name}: the scaled MMA reads {o.scales.a_type} x {o.scales.b_type}; "
                            f"the spec's operands are {want[0]} x {want[1]}")
            if o.scales.vec != recipe.scale_k:  # (NVFP4: 16, scale_vec::4X; MX: 32)
                errs.append(f"partition {p.name}: the scaled MMA applies a scale per {o.scales.vec} of K; "
                            f"{recipe.value} scales cover {recipe.scale_k}")
    return errs


def _k_loops(m: ir.Module, p: ir.Partition) -> list[str]:
    """In each k-loop of `p`: a copy into every buffer a scaled MMA reads precedes it, from the MMA's slot, and the
    copied stage is not released by a plain arrival."""
    errs = []
    empties = {b.name for b in m.barriers if b.purpose is ir.Purpose.EMPTY}
    for lp in _loops(p.body):
        copied: dict[str, ir.ScaleCopy] = {}
        for s in lp.body:
            if isinstance(s, ir.ScaleCopy):
                copied[s.dst] = s
            elif isinstance(s, ir.TcMma) and s.scales is not None:
                for b in (s.scales.a, s.scales.b):
                    cp = copied.pop(b, None)
                    if cp is None:
                        errs.append(f"partition {p.name}: a scaled MMA reads {b} with no tcgen05_copy into it before "
                                    "it in its k-loop")
                    elif cp.slot != s.slot:
                        errs.append(f"partition {p.name}: {b} is copied from slot {cp.slot} but the MMA reads the "
                                    f"stage at slot {s.slot}")
            elif isinstance(s, ir.Arrive) and s.barrier in empties and any(
                    isinstance(o, ir.ScaleCopy) for o in lp.body):
                errs.append(f"partition {p.name}: arrive {s.barrier} releases a stage whose scales tcgen05_copy "
                            "reads; only the scaled MMA's completion (its release barrier) may release it")
        errs += [f"partition {p.name}: tcgen05_copy into {b} has no scaled MMA after it in its k-loop"
                 for b in copied]
    return errs


def _loops(body: tuple[ir.Stmt, ...]) -> list[ir.Loop]:
    out = []
    for s in body:
        if isinstance(s, ir.Loop):
            out += [s, *_loops(s.body)]
    return out


def _tma_bytes(m: ir.Module) -> list[str]:
    """The stage's expect-tx counts every ring a TMA load fills on it, the scales included."""
    errs = []
    scale_rings = {o.ring for p in m.partitions for o, _ in ir.walk(p.body) if isinstance(o, ir.ScaleCopy)}
    for p in m.partitions:
        for lp in _loops(p.body):
            loads = [s for s in lp.body if isinstance(s, ir.TmaLoad)]
            expects = [s for s in lp.body if isinstance(s, ir.ArriveExpectTx)]
            if not loads or not expects:
                continue
            missing = sorted(scale_rings - {s.ring for s in loads})
            if missing:
                errs.append(f"partition {p.name}: the stage's TMA loads do not fill {missing}, which tcgen05_copy "
                            "reads; the scales ride the A/B stage (seed 001)")
            want = sum(m.ring(s.ring).slot_bytes for s in loads)
            errs += [f"partition {p.name}: arrive_expect_tx {e.barrier} announces {e.nbytes} bytes, but the stage's "
                     f"TMA loads (A, B and the scales) bring {want}" for e in expects if e.nbytes != want]
    return errs


def check_scale_partition(m: ir.Module) -> list[str]:
    """Seed 000's rules (a scale partition `StoreTmemScales` into tensor-memory scale rings, `Ring.tmem`); empty when
    the module has none.

    - **producer and consumer:** each scale ring is written by `StoreTmemScales` of one SCALES partition and read by
      the scaled `TcMma`s (reading it at a slot) of the MMA partition, and the scales hold the recipe's dtype, BK /
      scale_k a row, a row per row of the operand's tile (128; B's of a 256-wide tile 256), loaded in the spec's
      layout (`StoreTmemScales.blocked`); the MMA scales A by the SCALE_A ring and B by the SCALE_B one.
    - **not signalling early:** in the scale partition's loop the stores into a slot follow a wait on the rings'
      empty barrier at that slot and precede the arrival on their ready barrier, which guards the rings.
    - **released only by the MMA's completion:** each scaled MMA follows a wait on the ready barrier at its slot,
      releases the slot by `release_scales` (the rings' empty barrier, arrived on as the MMA completes), and no
      partition arrives on that empty barrier by hand (the tensor cores may still be reading the buffer).

    Allowed (scale partition; MMA warp)::

        wait scale_empty[q] ^1; store_tmem_scales sa_tm[q]; store_tmem_scales sb_tm[q]; arrive scale_ready[q]
        wait scale_ready[q]; tcgen05_mma ... scaled by sa_tm[q] x sb_tm[q], then arrive empty[c], scale_empty[q]

    Forbidden: ``arrive scale_ready[q]`` before the stores; no wait on ``scale_empty``; ``arrive scale_empty[q]``
    after the MMA's issue; an MMA reading ``sa_tm[q]`` with no wait on ``scale_ready[q]``."""
    rings = {r.name: r for r in m.rings if r.tmem}
    if not rings:
        return []
    errs: list[str] = []
    recipe = m.spec.scale
    if not recipe.microscaled:
        return [f"tensor-memory scale rings {sorted(rings)} in a module of {recipe.value} scales (MX's or NVFP4's)"]
    for r in rings.values():
        if r.dtype is not recipe.scale_dtype:
            errs.append(f"scale ring {r.name} holds {r.dtype.value}; {recipe.value} scales are "
                        f"{recipe.scale_dtype.value}")
        if r.cols * recipe.scale_k != m.tiling.bk:
            errs.append(f"scale ring {r.name} holds {r.cols} scales a row per k-block of {m.tiling.bk}; "
                        f"{recipe.value} takes {m.tiling.bk // recipe.scale_k}")
        # (the MMA reads a scale row per row of its operand: B's of a 256-wide tile are two 128-row chunks)
        tile = m.tiling.bm if r.tensor is ir.Tensor.SCALE_A else m.tiling.bn
        chunks = -(-tile // BLOCK_ROWS) * BLOCK_ROWS
        if r.rows != chunks:
            errs.append(f"scale ring {r.name} holds {r.rows} rows of scales; the MMA reads {tile} rows of "
                        f"{r.tensor.value} (a buffer of {chunks})")
    blocked = m.spec.scale_layout is ScaleLayout.BLOCKED
    bars = {b.name: b for b in m.barriers}
    ready = {b.name for b in m.barriers if b.purpose is ir.Purpose.READY and set(b.rings) & set(rings)}
    empty = {b.name for b in m.barriers if b.purpose is ir.Purpose.EMPTY and set(b.rings) & set(rings)}
    writers: dict[str, set[str]] = {}
    readers: dict[str, set[str]] = {}
    for p in m.partitions:
        for o, _ in ir.walk(p.body):
            if isinstance(o, ir.StoreTmemScales):
                writers.setdefault(o.ring, set()).add(p.name)
                if o.blocked != blocked:
                    errs.append(f"partition {p.name}: store_tmem_scales reads {o.tensor.value} as "
                                f"{'blocked' if o.blocked else 'row-major'}, but the spec's scales are "
                                f"{m.spec.scale_layout.value}")
                if p.role is not ir.Role.SCALES:
                    errs.append(f"partition {p.name}: store_tmem_scales in a {p.role.value} partition (the scale "
                                "partition's)")
                if o.barrier not in ready or o.ring not in bars[o.barrier].rings:
                    errs.append(f"partition {p.name}: store_tmem_scales into {o.ring} is published by {o.barrier}, "
                                "not a ready barrier guarding it")
            elif isinstance(o, ir.TcMma) and o.scales is not None and o.scales.slot is not None:
                for b in (o.scales.a, o.scales.b):
                    readers.setdefault(b, set()).add(p.name)
                # (A's rows scale by scale_a: in a swapped module, the kernel's A is the problem's B, and its
                # scale_a ring holds the problem's scale_b)
                roles = [(side, b) for side, b, t in (("A", o.scales.a, ir.Tensor.SCALE_A),
                                                      ("B", o.scales.b, ir.Tensor.SCALE_B))
                         if b in rings and rings[b].tensor is not t]
                errs += [f"partition {p.name}: the scaled MMA scales {side} by {b}, which holds "
                         f"{rings[b].tensor.value}: each operand's rows take their own scales" for side, b in roles]
                errs += _k_cols(p, o.scales, m.tiling.bk, recipe)
                if o.release_scales not in empty:
                    errs.append(f"partition {p.name}: the scaled MMA reading {o.scales.a} and {o.scales.b} releases "
                                f"{o.release_scales}, not their empty barrier {sorted(empty)}: the buffers are free "
                                "only when the MMA that reads them completes")
            elif isinstance(o, ir.TcMma) and o.scales is not None:
                errs.append(f"partition {p.name}: a scaled MMA reads scale buffers {o.scales.a}, {o.scales.b} "
                            "without a slot in a module whose scales are the scale partition's")
            elif isinstance(o, ir.Arrive) and o.barrier in empty:
                errs.append(f"partition {p.name}: arrive {o.barrier} releases a tensor-memory scale buffer by hand; "
                            "only the completion of the scaled MMA that reads it may (release_scales)")
        for lp in _loops(p.body):
            errs += _scale_loop(p, lp, ready, empty, rings)
    for name in sorted(rings):
        w, rd = writers.get(name, set()), readers.get(name, set())
        if len(w) != 1:
            errs.append(f"scale ring {name}: written by {sorted(w)}; expected one scale partition's store_tmem_scales")
        if len(rd) != 1:
            errs.append(f"scale ring {name}: read by {sorted(rd)}; expected the MMA warp's scaled MMAs")
    return errs


def _k_cols(p: ir.Partition, sc: ir.TmemScales, bk: int, recipe: ScaleRecipe) -> list[str]:
    """NVFP4: each 64-deep MMA of the k-block reads its own 4 scale columns (`TmemScales.k_cols`)."""
    if recipe is not ScaleRecipe.NVFP4:
        return [] if not sc.k_cols else [f"partition {p.name}: the scaled MMA names k_cols {sc.k_cols}, which only "
                                         "NVFP4's 64-deep MMAs take"]
    own = tuple(range(0, bk // recipe.scale_k, NVFP4_MMA_COLS))
    if len(sc.k_cols) != len(own):
        return [f"partition {p.name}: the scaled MMA reads {sc.a} and {sc.b} as {len(sc.k_cols)} 64-deep MMAs "
                f"(k_cols {sc.k_cols}); a k-block of {bk} is {len(own)}"]
    return [f"partition {p.name}: the scaled MMA's 64-deep MMA {j} (K {64 * j}..{64 * j + 63}) reads scale columns "
            f"{c}..{c + NVFP4_MMA_COLS - 1} of {sc.a} and {sc.b}; its own are {o}..{o + NVFP4_MMA_COLS - 1}"
            for j, (c, o) in enumerate(zip(sc.k_cols, own, strict=True)) if c != o]


def _scale_loop(p: ir.Partition, lp: ir.Loop, ready: set[str], empty: set[str], rings: dict[str, ir.Ring]) -> list[str]:
    """One loop body's order: waits before the stores or MMAs that need them, stores before their arrival."""
    errs: list[str] = []
    waited: set[tuple[str, ir.Slot]] = set()
    stored: dict[ir.Slot, list[str]] = {}
    for s in lp.body:
        if isinstance(s, ir.Wait):
            waited.add((s.barrier, s.slot))
        elif isinstance(s, ir.StoreTmemScales):
            if not any((b, s.slot) in waited for b in empty):
                errs.append(f"partition {p.name}: store_tmem_scales into {s.ring}[{s.slot}] with no wait on "
                            f"{sorted(empty)} at that slot before it in its loop: the MMA may still read the buffer")
            stored.setdefault(s.slot, []).append(s.ring)
        elif isinstance(s, ir.Arrive) and s.barrier in ready:
            missing = sorted(set(rings) - set(stored.pop(s.slot, [])))
            if missing:
                errs.append(f"partition {p.name}: arrive {s.barrier}[{s.slot}] signals the MMA warp before "
                            f"store_tmem_scales into {missing} at that slot in its loop")
        elif isinstance(s, ir.TcMma) and s.scales is not None and s.scales.slot is not None:
            if not any((b, s.scales.slot) in waited for b in ready):
                errs.append(f"partition {p.name}: the scaled MMA reads {s.scales.a}[{s.scales.slot}] with no wait on "
                            f"{sorted(ready)} at that slot before it in its loop")
    errs += [f"partition {p.name}: store_tmem_scales into {rs} at {sl} is never signalled to the MMA warp in its "
             "loop" for sl, rs in stored.items()]
    return errs
