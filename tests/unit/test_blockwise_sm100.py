"""sm_100a fp32 blockwise scales (planner rule 19, passes/blackwell_promote.py): the plan and why, the schedule's
shape, the verifier's partial rules (ir/verify_promote.py) and tensor-memory accounting, and bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom import Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.device import B200, H100_SXM
from warploom.errors import DeviceError, ScaleError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import Plan, explain, plan_schedule, promotion_path
from warploom.target import Target
from warploom.targets import verify as target_verify

E4 = DType.E4M3
BW = ScaleRecipe.BLOCKWISE_1X128_128X128


def _spec(m: int = 4096, n: int = 7168, k: int = 7168, **kw: object) -> GemmSpec:
    return GemmSpec(m, n, k, E4, E4, DType.BF16, scale=BW, accumulation=Accumulation.PROMOTED, **kw)  # type: ignore


def test_plan_promotes_through_four_tensor_memory_partials() -> None:
    p = plan_schedule(_spec(), B200)
    assert (p.bm, p.bn, p.bk, p.acc_buffers, p.promote_tmem, p.consumer_warps) == (128, 128, 128, 4, True, 8)
    assert p.target is Target.SM100A and p.short().endswith("_tm4p")
    why = promotion_path(p)
    assert "e8m0" in why and "512 of 512 columns" in why and "registers" in why and "sm_100a GPU" in why
    assert "accumulation: promoted through tensor memory" in explain(_spec(), B200).text()
    # a native plan says so too, and Hopper's blockwise plan is unchanged (registers, no tensor memory)
    assert promotion_path(plan_schedule(GemmSpec(4096, 4096, 4096), B200)).startswith("native")
    assert not plan_schedule(_spec(), H100_SXM).promote_tmem


def test_schedule_shape() -> None:
    m = build(_spec(300, 264, 640), B200).module
    assert [(p.name, p.role, p.warps) for p in m.partitions] == [
        ("epilogue", ir.Role.EPILOGUE, 8), ("mma", ir.Role.MMA, 1), ("producer", ir.Role.PRODUCER, 1)]
    (part,) = [r for r in m.rings if r.in_tmem]
    assert (part.tensor, part.depth, part.rows, part.cols) == (ir.Tensor.PARTIAL, 4, 128, 128)
    assert m.tmem_columns == 512
    assert m.barrier("empty").count == 2  # the MMA's completion and the promotion's arrival release a stage
    mma = [o for o, _ in ir.walk(m.partition("mma").body)]
    assert any(isinstance(o, ir.TcMma) and o.acc_ring == "part_tm" and o.overwrite is ir.Guard.ALWAYS for o in mma)
    ep = [type(o).__name__ for o, _ in ir.walk(m.partition("epilogue").body)]
    assert ep.count("Promote") == 2 and ep.count("LoadTmem") == 2 and "Mma" not in ep
    src = build(_spec(300, 264, 640), B200).source
    assert "part_tm.index(p % 4).slice(64, 64).load(acc_layout)" in src
    assert "warpgroup_mma" not in src and "tcgen05_mma(" in src and "async_copy_global_to_shared" in src


def _edit(m: ir.Module, role: ir.Role, fn: object) -> ir.Module:
    def walk(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in body:
            out += [replace(s, body=walk(s.body))] if isinstance(s, ir.Loop) else fn(s)  # type: ignore[operator]
        return tuple(out)
    return replace(m, partitions=tuple(replace(p, body=walk(p.body)) if p.role is role else p for p in m.partitions))


def _module() -> ir.Module:
    return build(_spec(300, 264, 640), B200).module


@pytest.mark.parametrize("name,mutate,expect", [
    ("read before the commit", lambda m: _edit(m, ir.Role.EPILOGUE, lambda s: [] if isinstance(s, ir.Wait)
                                              and s.barrier == "part_ready" else [s]),
     "before a wait on its ready barrier"),
    ("no commit", lambda m: _edit(m, ir.Role.MMA, lambda s: [] if isinstance(s, ir.Commit) else [s]),
     "not followed by a tcgen05_commit"),
    ("accumulating partial", lambda m: _edit(m, ir.Role.MMA, lambda s: [replace(s, overwrite=ir.Guard.FIRST_K)]
                                             if isinstance(s, ir.TcMma) else [s]), "adds to a tensor-memory partial"),
    ("no empty wait", lambda m: _edit(m, ir.Role.MMA, lambda s: [] if isinstance(s, ir.Wait)
                                      and s.barrier == "part_empty" else [s]), "without a wait on its empty barrier"),
    ("promote twice from one load", lambda m: _edit(m, ir.Role.EPILOGUE, lambda s: [] if isinstance(s, ir.LoadTmem)
                                                    and s.part == 1 else [s]), "which no load_tmem"),
    ("release before the last load", lambda m: _edit(m, ir.Role.EPILOGUE, lambda s: [] if isinstance(s, ir.Arrive)
                                                     and s.barrier == "part_empty" else [s]), "no arrive on part_tm"),
    ("five partials", lambda m: replace(m, rings=tuple(replace(r, depth=5) if r.name == "part_tm" else r
                                                       for r in m.rings)), "640 columns"),
])
def test_verifier_rejects(name: str, mutate: object, expect: str) -> None:
    m = _module()
    verify.check(m, "ok", B200, checks=(verify.check_sm100,))  # the planned module passes
    with pytest.raises(VerificationError, match=expect):
        target_verify(mutate(m), name, B200)  # type: ignore[operator]


def test_tmem_overlap_with_a_scale_buffer_is_rejected() -> None:
    m = _module()
    buf = ir.ScaleBuffer("sa_tm", ir.Tensor.SCALE_A, 128, 4, 256, DType.E8M0)
    errs = verify.check_sm100(replace(m, tmem_scales=(buf,)))
    assert any("overlaps" in e for e in errs), errs


def test_refusals_name_the_fix() -> None:
    with pytest.raises(UnsupportedError, match="128x128.*Fix: leave bm and bn"):
        plan_schedule(_spec(), B200, bn=256)
    with pytest.raises(UnsupportedError, match="stages.*Fix"):
        plan_schedule(_spec(), B200, stages=9)
    with pytest.raises(ValueError, match="promote_tmem"):
        Plan(bm=128, bn=128, bk=128, stages=3, consumer_warps=8, group_m=8, grid=1, promote_tmem=True)


def _fp8(m: int, n: int, k: int, device: str = "meta") -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=device)
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device=device).t()
    return a, b


def _named(e: pytest.ExceptionInfo[Exception], arg: str) -> None:
    msg = str(e.value)
    assert msg.startswith(f"{arg}: ") and "Fix: " in msg, msg


def test_api_plans_blockwise_for_a_b200() -> None:
    a, b = _fp8(300, 272, 640)
    kern = warploom.plan(a, b, torch.empty(300, 5, device="meta"), torch.empty(5, 3, device="meta"), device=B200)
    assert kern.plan.promote_tmem and kern.spec.scale is BW


def test_api_bad_blockwise_input_on_a_b200() -> None:
    a, b = _fp8(300, 272, 640)
    sa, sb = torch.empty(300, 5, device="meta"), torch.empty(5, 3, device="meta")
    with pytest.raises(ScaleError) as e:  # scale_b transposed: (N-blocks, k-blocks)
        warploom.plan(a, b, sa, torch.empty(3, 5, device="meta"), device=B200)
    _named(e, "scale_b")
    with pytest.raises(ScaleError) as e:  # scale_a per 64 of K
        warploom.plan(a, b, torch.empty(300, 10, device="meta"), sb, device=B200)
    _named(e, "scale_a")
    with pytest.raises(ScaleError, match="float8_e8m0fnu") as e:  # one scale e8m0 (MX), the other fp32 blockwise
        warploom.plan(a, b, sa.to(torch.float8_e8m0fnu), sb, device=B200)
    _named(e, "scale_b")
    with pytest.raises(DeviceError) as e:
        warploom.plan(a, b, sa, torch.empty(5, 3), device=B200)
    _named(e, "scale_b")
    with pytest.raises(UnsupportedError, match="fused epilogue.*Fix"):
        warploom.plan(a, b, sa, sb, device=B200, epilogue=lambda acc: acc * 2)
