"""NVFP4 on sm_100a in the simulator: e2m1 data, e4m3 block scales per 16 of K (torch's blocked layout, through the
A/B stage and tcgen05_copy) and the global scales in the epilogue, against the dequantized fp32 reference
(warploom.reference) on shapes whose M and N are not tile multiples; planted bugs the simulator and verifier
catch."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleLayout, ScaleRecipe, fp4
from warploom.blocked import from_blocked
from warploom.device import B200
from warploom.errors import ScaleError, VerificationError
from warploom.ir import nodes as ir
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.reference import make_inputs, reference
from warploom.sim import simulate
from warploom.sim.findings import FindingKind
from warploom.targets import verify as target_verify


def _spec(m: int, n: int, k: int) -> GemmSpec:
    return GemmSpec(m, n, k, DType.E2M1, DType.E2M1, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.NVFP4,
                    Accumulation.PROMOTED, scale_layout=ScaleLayout.BLOCKED)


def _module(m: int, n: int, k: int, bn: int = 128, stages: int = 3) -> ir.Module:
    spec = _spec(m, n, k)
    return build(spec, B200, plan_schedule(spec, B200, bn=bn, stages=stages)).module


@pytest.mark.parametrize("m,n,k,bn,bk", [
    (300, 272, 352, 128, 64),  # ragged M and N; 5.5 k-blocks of 64: the last one's scales padded to 4 in to_blocked
    (129, 528, 1056, 256, 64),  # one accumulator (128x256), a row past one tile of M
    (300, 272, 384, 128, 128),  # K a multiple of 128: three k-blocks of 128, two 128x4 chunks of scales each
    (129, 528, 1152, 256, 128),  # 128x256 at BK 128: B's scales two row blocks by two chunks a stage
])
def test_nvfp4_numerics_match_dequantized_reference(m: int, n: int, k: int, bn: int, bk: int) -> None:
    spec = _spec(m, n, k)
    mod = _module(m, n, k, bn)
    assert mod.tiling.bk == bk
    x = make_inputs(spec, m, n, k, seed=5)
    sa, sb = x.scales()
    res = simulate(mod, x.a, x.b, sa, sb, seed=1)
    assert not res.findings, res.findings
    ref = reference(x)
    torch.testing.assert_close(res.output.float(), ref.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
    # (what the comparison sees: scales per 16 of K, not per 32, and the global scales applied)
    assert x.global_a is not None and x.global_b is not None
    unscaled = ref / (x.global_a * x.global_b)
    assert not torch.allclose(res.output.float(), unscaled, rtol=1e-2, atol=1e-2)
    # a scale per 32 of K (each pair of 16-deep blocks reading the first one's scale) gives another product
    assert x.scale_a is not None and x.scale_b is not None
    sa32, sb32 = (from_blocked(s, rows, k // 16)[:rows, : k // 16:2].float().repeat_interleave(32, 1)[:, :k]
                  for s, rows in ((x.scale_a, m), (x.scale_b, n)))
    per32 = (fp4.unpack(x.a) * sa32) @ (fp4.unpack(x.b.t()) * sb32).t() * (x.global_a * x.global_b)
    assert not torch.allclose(res.output.float(), per32, rtol=1e-2, atol=1e-2)


def test_nvfp4_without_global_scales_is_refused_by_name() -> None:
    spec = _spec(200, 144, 256)
    x = make_inputs(spec, 200, 144, 256)
    with pytest.raises(ScaleError, match="scale_a: expected NVFP4's pairs"):
        simulate(_module(200, 144, 256), x.a, x.b, x.scale_a, x.scale_b)


@pytest.mark.parametrize("k,bk", [(320, 64), (256, 128)])
def test_planted_nvfp4_expect_tx_without_the_scales(k: int, bk: int) -> None:
    """A stage of NVFP4 brings (128 + 128) rows of BK/2 bytes and 2 x 128 x BK/16 e4m3 scale bytes (one 128x4 chunk
    a row block at BK 64, two at 128); announcing only the data leaves the scales' bytes unannounced."""
    m, n = 200, 144
    mod = _module(m, n, k)
    assert mod.ring("a_ring").slot_bytes == 128 * bk // 2 and mod.ring("sa_ring").slot_bytes == 128 * bk // 16
    data = 2 * 128 * bk // 2

    def edit(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(replace(s, body=edit(s.body)) if isinstance(s, ir.Loop) else
                     replace(s, nbytes=data) if isinstance(s, ir.ArriveExpectTx) else s for s in body)

    parts = tuple(replace(p, body=edit(p.body)) if p.role is ir.Role.PRODUCER else p for p in mod.partitions)
    bad = replace(mod, partitions=parts)
    x = make_inputs(_spec(m, n, k), m, n, k)
    sa, sb = x.scales()
    res = simulate(bad, x.a, x.b, sa, sb)
    assert FindingKind.TX_MISMATCH in {f.kind for f in res.findings}
    with pytest.raises(VerificationError, match=f"announces {data} bytes.*bring {data + 2 * 128 * bk // 16}"):
        target_verify(bad, "test", B200)


def _one_chunk_stage(mod: ir.Module) -> ir.Module:
    """A BK-128 module whose stages bring one 128x4 chunk of scales a row block (64 of K), not two: the tensor-memory
    buffers' columns 4..7, which the k-block's second 64-deep MMA reads, are never copied."""
    rings = tuple(replace(r, cols=4) if r.byte_scales else r for r in mod.rings)
    data = sum(r.slot_bytes for r in rings if r.tensor in (ir.Tensor.A, ir.Tensor.B, ir.Tensor.SCALE_A,
                                                            ir.Tensor.SCALE_B))

    def edit(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:  # (the expect-tx counts what the stage brings)
        return tuple(replace(s, body=edit(s.body)) if isinstance(s, ir.Loop) else
                     replace(s, nbytes=data) if isinstance(s, ir.ArriveExpectTx) else s for s in body)

    parts = tuple(replace(p, body=edit(p.body)) if p.role is ir.Role.PRODUCER else p for p in mod.partitions)
    return replace(mod, rings=rings, partitions=parts)


def test_planted_second_chunk_not_copied_is_caught() -> None:
    m, n, k = 200, 144, 384
    mod = _module(m, n, k)
    assert mod.tiling.bk == 128 and {(b.cols, b.columns) for b in mod.tmem_scales} == {(8, 8)}
    bad = _one_chunk_stage(mod)
    x = make_inputs(_spec(m, n, k), m, n, k, seed=2)
    sa, sb = x.scales()
    res = simulate(bad, x.a, x.b, sa, sb)
    assert not res.findings, res.findings  # (no protocol finding: the stage is consistent, its scales too few)
    ref = reference(x)
    assert not torch.allclose(res.output.float(), ref, rtol=1e-2, atol=1e-2, equal_nan=False)
    with pytest.raises(VerificationError, match="ring sa_ring holds 4 scales a row per k-block of 128"):
        target_verify(bad, "test", B200)


@pytest.mark.parametrize("bug", ["first_k_blocks_chunks", "first_chunk_twice"])
def test_planted_second_chunk_read_from_the_first_is_caught(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule the kernel's TMA box and tcgen05.cp view follow (blocked.chunk_coord, blocked.scale_box), broken
    as a backend could break it: the box at block column kb (no chunk multiplier: k-block kb reads chunks kb and
    kb + 1, the previous k-block's second and its own first), or the view reading the first chunk in both halves.
    The simulator lands scales through that rule, so its result leaves the dequantized reference."""
    from warploom import blocked

    m, n, k = 200, 144, 384
    mod = _module(m, n, k)
    x = make_inputs(_spec(m, n, k), m, n, k, seed=2)
    sa, sb = x.scales()
    ref = reference(x).to(torch.bfloat16).float()
    good = simulate(mod, x.a, x.b, sa, sb, seed=1).output.float()
    torch.testing.assert_close(good, ref, rtol=1e-2, atol=1e-2)
    if bug == "first_k_blocks_chunks":
        monkeypatch.setattr(blocked, "chunk_coord", lambda k_block, chunks: k_block)
    else:
        box = blocked.scale_box

        def first_twice(flat: torch.Tensor, rows: int, cols: int, row_block: int, col_block: int, box_rows: int,
                        box_chunks: int, fill: float) -> torch.Tensor:
            out = box(flat, rows, cols, row_block, col_block, box_rows, box_chunks, fill)
            return torch.cat([out[:, :4]] * box_chunks, dim=1)

        monkeypatch.setattr(blocked, "scale_box", first_twice)
    res = simulate(mod, x.a, x.b, sa, sb, seed=1)
    assert not torch.allclose(res.output.float(), ref, rtol=1e-2, atol=1e-2)
