"""gfx1250 (planner rule 20, passes/gfx1250.py): the plan, the software-pipelined schedule's shape, the verifier's
pipeline rules, the generated Gluon, and the refusals (what is not planned yet, running, compiling for another
target)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import warploom
from warploom import Accumulation, BLayout, DType, GemmSpec, ScaleRecipe
from warploom.device import B200, GFX1250, H100_SXM
from warploom.errors import PlanError, TargetError, UnsupportedError, VerificationError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.kernel import build
from warploom.planner import plan_schedule
from warploom.target import Target
from warploom.targets import verify as target_verify

E4 = DType.E4M3
SPEC = GemmSpec(4096, 4096, 4096)


def test_plan_is_rule_20() -> None:
    p = plan_schedule(SPEC, GFX1250)
    assert (p.bm, p.bn, p.bk, p.stages, p.consumer_warps, p.target, p.grid) == (128, 128, 64, 3, 4, Target.GFX1250, 256)
    assert p.short().endswith("_tdm") and p.acc_buffers == 0
    fp8 = plan_schedule(GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE), GFX1250)
    assert fp8.bk == 128
    assert plan_schedule(GemmSpec(100, 200, 300), GFX1250).grid == 2  # at most one CTA a tile
    assert plan_schedule(SPEC, GFX1250, stages=2, bm=256).stages == 2


def test_schedule_is_one_pipelined_partition() -> None:
    m = build(SPEC, GFX1250).module
    (p,) = m.partitions
    assert (p.name, p.role, p.warps, p.default, p.regs) == ("main", ir.Role.WORKGROUP, 4, True, 0)
    assert p.body[1] == ir.TdmWait(0)  # nothing in flight at the end, not even Triton's predicated-off copies
    assert m.gfx1250 and m.target == "gfx1250" and not m.blackwell and not m.barriers and not m.buffers
    assert [(r.name, r.depth) for r in m.rings] == [("a_ring", 3), ("b_ring", 3)]
    tiles = p.body[0]
    assert isinstance(tiles, ir.Loop)
    prologue = [s for s in tiles.body if isinstance(s, ir.TdmLoad)]
    assert [(s.tensor, s.ahead, s.slot.offset) for s in prologue] == [
        (ir.Tensor.A, 0, 0), (ir.Tensor.B, 0, 0), (ir.Tensor.A, 1, 1), (ir.Tensor.B, 1, 1)]
    (k_loop,) = [s for s in tiles.body if isinstance(s, ir.Loop)]
    assert [type(s) for s in k_loop.body] == [ir.TdmWait, ir.SyncWarps, ir.TdmLoad, ir.TdmLoad, ir.Wmma, ir.Advance]
    wait = k_loop.body[0]
    assert isinstance(wait, ir.TdmWait) and (wait.pending, wait.ahead) == (2, 1)
    assert isinstance(tiles.body[-1], ir.StoreTile)  # stored straight from the registers


def test_schedule_text() -> None:
    assert build(GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, BLayout.K_MAJOR, ScaleRecipe.ROWWISE,
                          Accumulation.NATIVE, DType.BF16), GFX1250).schedule.splitlines()[5:] == [
        "  partition main (workgroup, warps=4 default):",
        "    cursor c (depth 3)",
        "    acc acc: fp32[128x128]",
        "    for tiles:",
        "      tdm_load A[m, k] -> a_ring[c]",
        "      tdm_load B[n, k] -> b_ring[c]",
        "      tdm_load A[m, k+1] -> a_ring[c+1]",
        "      tdm_load B[n, k+1] -> b_ring[c+1]",
        "      for k:",
        "        tdm_wait pending=2 while k+1 < k_tiles, else 0",
        "        sync_warps",
        "        tdm_load A[m, k+2] -> a_ring[c+2]",
        "        tdm_load B[n, k+2] -> b_ring[c+2]",
        "        wmma acc += a_ring[c] @ b_ring[c]",
        "        advance c",
        "      epilogue acc: acc *= scale_a[m, None] * scale_b[None, n]; acc += bias[None, n]",
        "      store_tile C[m, n] <- acc",
        "    tdm_wait pending=0",
    ]


@pytest.mark.parametrize("stages,pending,ahead", [(2, 0, 0), (3, 2, 1), (4, 4, 2), (6, 8, 4)])
def test_wait_keeps_the_copies_behind_the_block_in_flight(stages: int, pending: int, ahead: int) -> None:
    m = build(SPEC, GFX1250, plan_schedule(SPEC, GFX1250, stages=stages)).module
    waits = [o for o, _ in ir.walk(m.partitions[0].body) if isinstance(o, ir.TdmWait)]
    assert [(w.pending, w.ahead) for w in waits] == [(pending, ahead), (0, 0)]  # (the kernel's last: none in flight)


@pytest.mark.parametrize("spec,what", [
    (GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE, accumulation=Accumulation.PROMOTED),
     "use_fast_accum=True"),
    (GemmSpec(4096, 4096, 4096, E4, E4, DType.BF16, scale=ScaleRecipe.BLOCKWISE_1X128_128X128,
              accumulation=Accumulation.PROMOTED), "blockwise_1x128_128x128 scales"),
])
def test_refuses_what_is_not_planned(spec: GemmSpec, what: str) -> None:
    with pytest.raises(UnsupportedError, match=what):
        plan_schedule(spec, GFX1250)


def test_fused_epilogue_on_the_whole_tile() -> None:
    """A fused epilogue replaces the store: each operand loaded as its kind is read cheapest (a column one value per
    row, a row one per column, a dense operand as the tile, all by ordinary loads), the graph, then every output."""
    a = torch.empty(512, 512, dtype=torch.bfloat16, device="meta")

    def fn(acc: torch.Tensor, bias: torch.Tensor, col: torch.Tensor, res: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.relu(acc + bias) * col + res, acc.float()

    kern = warploom.plan(a, a, epilogue=fn, bias=torch.empty(512, device="meta"),
                         col=torch.empty(512, 1, device="meta"), res=a, device=GFX1250)
    (tiles, _) = kern.module.partitions[0].body
    assert isinstance(tiles, ir.Loop)
    after = tiles.body[[i for i, s in enumerate(tiles.body) if isinstance(s, ir.Loop)][0] + 1:]
    assert [(type(s).__name__, getattr(s, "operand", None), getattr(s, "read", None), getattr(s, "output", None))
            for s in after] == [
        ("LoadOperand", "bias", ir.OperandRead.PER_COL, None), ("LoadOperand", "col", ir.OperandRead.PER_ROW, None),
        ("LoadOperand", "res", ir.OperandRead.TILE, None), ("ApplyEpilogue", None, None, None),
        ("StoreTile", None, None, 0), ("StoreTile", None, None, 1)]
    assert not kern.module.buffers  # no staging: the operands come by ordinary loads, the outputs go from registers
    src = kern.source
    assert "c1_ptr" in src and "gl.store(c_ptrs, ep_out1, mask=c_mask)" in src and "ep_layout: gl.constexpr" in src


def test_refuses_sm90_options() -> None:
    for forced in (dict(pingpong=True), dict(split_k=2), dict(swap_ab=True), dict(consumer_partitions=2)):
        with pytest.raises(UnsupportedError, match="the gfx1250 schedule \\(rule 20\\) has none of them"):
            plan_schedule(SPEC, GFX1250, **forced)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="bm and bn in"):
        plan_schedule(SPEC, GFX1250, bn=96)
    with pytest.raises(UnsupportedError, match="at least 2"):
        plan_schedule(SPEC, GFX1250, stages=1)
    with pytest.raises(UnsupportedError, match="stages"):
        plan_schedule(SPEC, GFX1250, bm=256, bn=256, stages=5)  # 72 KiB a stage with its padding: four fit


def test_decode_is_not_swapped() -> None:
    """Rule 18's swap is an sm_90a/sm_100a schedule: gfx1250 plans decode on its plain tiles."""
    a = torch.empty(16, 4096, dtype=torch.bfloat16, device="meta")
    w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    kern = warploom.plan(a, w.t(), device=GFX1250)
    assert not kern.plan.swap_ab and kern.module.gfx1250


def _k_loop_edit(m: ir.Module, fn: object) -> ir.Module:
    (part,) = m.partitions
    (tiles, *rest) = part.body
    assert isinstance(tiles, ir.Loop)
    body = tuple(replace(s, body=fn(s.body)) if isinstance(s, ir.Loop) else s for s in tiles.body)  # type: ignore
    return m.with_partition(replace(part, body=(replace(tiles, body=body), *rest)))


@pytest.mark.parametrize("name,edit,message", [
    ("no_sync", lambda b: tuple(s for s in b if not isinstance(s, ir.SyncWarps)),
     "overwrites the slot the previous block was read from with no sync_warps"),
    ("wait_too_lax", lambda b: tuple(replace(s, pending=4) if isinstance(s, ir.TdmWait) else s for s in b),
     "at most 1 blocks' copies \\(2\\) are issued behind"),
    ("no_tail", lambda b: tuple(replace(s, ahead=0) if isinstance(s, ir.TdmWait) else s for s in b),
     "its tail must start 1 blocks out"),
    ("wrong_slot", lambda b: tuple(replace(s, slot=ir.Slot("c", 1)) if isinstance(s, ir.TdmLoad) else s for s in b),
     "copies block k\\+2 into slot c\\+1"),
    ("a_ring_ahead", lambda b: tuple(replace(s, ahead=3, slot=ir.Slot("c", 3)) if isinstance(s, ir.TdmLoad) else s
                                     for s in b), "runs 3 blocks ahead of a 3-slot ring"),
    ("no_wait", lambda b: tuple(s for s in b if not isinstance(s, ir.TdmWait)), "without a tdm_wait and then a "
     "sync_warps"),
    ("accumulate_first", lambda b: tuple(replace(s, overwrite=ir.Guard.NOT_FIRST_K) if isinstance(s, ir.Wmma) else s
                                         for s in b), "overwrites its accumulator exactly at a tile's first k-block"),
])
def test_verifier_pipeline_rules(name: str, edit: object, message: str) -> None:
    m = build(SPEC, GFX1250).module
    target_verify(m, "test", GFX1250)  # the planner's own schedule passes
    with pytest.raises(VerificationError, match=message):
        target_verify(_k_loop_edit(m, edit), name, GFX1250)


def test_verifier_counts_the_lds_padding() -> None:
    """LDS rows carry 16 bytes of padding per 128: 19 stages of 64x64 bf16 fit unpadded (311296 bytes) but not
    padded (350208 of 327680), and the compiled kernel would need the padded size. `build` refuses such a plan
    first, naming the depth that fits (planning/plan_check.py)."""
    from warploom.passes import run_pipeline
    from warploom.targets import declared

    spec = GemmSpec(4096, 4096, 4096)
    plan = replace(plan_schedule(spec, GFX1250, bm=64, bn=64, stages=17), stages=19)
    with pytest.raises(VerificationError, match="shared memory 350208 bytes exceeds the 327680"):
        target_verify(run_pipeline(spec, plan, declared(Target.GFX1250).pipeline(plan))[0], "deep", GFX1250)
    with pytest.raises(PlanError, match=r"^Plan\(stages=19\): expected at most 17 stages.*350208 bytes") as e:
        build(spec, GFX1250, plan)
    assert "Fix: stages=17" in str(e.value)
    assert build(spec, GFX1250).module.lds_bytes == 3 * 2 * 128 * (128 + 16)


def test_large_operands_and_other_amd_gpus() -> None:
    """An N-major B past 2^31 elements is refused (its copies step over all K rows in 32 bits); a K-major one and a
    large A plan, their descriptors based at each tile's rows. Other AMD GPUs are refused, not planned as sm_90a."""
    big = GemmSpec(1 << 19, 8192, 8192)
    assert plan_schedule(big, GFX1250).target is Target.GFX1250
    assert "a_ptr + off_m.to(gl.int64) * a_stride_m" in build(GemmSpec(4096, 4096, 4096), GFX1250).source
    with pytest.raises(UnsupportedError, match="pass it K-major"):
        plan_schedule(GemmSpec(64, 1 << 18, 8192, b_layout=BLayout.N_MAJOR), GFX1250)
    with pytest.raises(UnsupportedError, match="gfx1250 only"):
        plan_schedule(big, replace(GFX1250, name="an MI300X", arch="gfx942"))


def test_verifier_target_rules() -> None:
    m = build(SPEC, GFX1250).module
    with pytest.raises(VerificationError, match="gfx1250 schedule \\(TDM copies and wmma\\) for NVIDIA H100"):
        verify.check(m, "test", H100_SXM)
    with pytest.raises(VerificationError, match="has no wgmma"):
        target_verify(build(SPEC, H100_SXM).module, "test", GFX1250)
    (p,) = m.partitions
    with pytest.raises(VerificationError, match="no register budget"):
        target_verify(m.with_partition(replace(p, regs=240)), "test", GFX1250)
    stray = ir.Wait("ready", ir.Slot("c"), ir.Parity("c"))
    with pytest.raises(VerificationError, match="an NVIDIA op"):
        verify.check(m.with_partition(replace(p, body=(*p.body, stray))), "test")
    consumer = build(SPEC, H100_SXM).module.partition("consumer0")
    with pytest.raises(VerificationError, match="in a consumer partition: TDM copies and wmma are gfx1250's"):
        verify.check(m.with_partition(replace(p, body=(*p.body,))), "ok")  # (unchanged: passes)
        bad = build(SPEC, H100_SXM).module
        verify.check(bad.with_partition(replace(consumer, body=(*consumer.body, ir.SyncWarps()))), "test")


def test_generated_gluon_reads_as_the_schedule() -> None:
    src = build(SPEC, GFX1250).source
    assert "gl.warp_specialize" not in src and "mbarrier" not in src and "warpgroup_mma" not in src
    for line in ("a_desc = tdm.make_tensor_descriptor(a_ptr + off_m.to(gl.int64) * a_stride_m, [M - off_m, K], "
                 "[a_stride_m, 1], [BM, BK], a_smem)",
                 "tdm.async_wait(2)  # tdm_wait pending=2 while k+1 < k_tiles, else 0",
                 "if kk + 1 >= k_tiles:",
                 "gl.thread_barrier()  # sync_warps",
                 "acc = wmma(a, b, acc)",
                 "gl.store(c_ptrs, acc.to(gl.bfloat16), mask=c_mask)"):
        assert line in src, line
    nmajor = build(GemmSpec(4096, 4096, 4096, b_layout=BLayout.N_MAJOR), GFX1250).source
    assert "[K, N - off_n], [b_stride_k, 1], [BK, BN]" in nmajor and ".permute((1, 0)).load(b_layout)" not in nmajor


def test_targets_and_refusals() -> None:
    kern = build(GemmSpec(512, 512, 512), GFX1250)
    with pytest.raises(TargetError, match="gfx1250 schedule, got target='sm_90a'"):
        kern.compile("sm_90a")
    with pytest.raises(TargetError, match="sm_90a schedule, got target='gfx1250'"):
        build(GemmSpec(512, 512, 512), H100_SXM).compile("gfx1250")
    with pytest.raises(TargetError, match="sm_100a schedule"):
        build(GemmSpec(512, 512, 512), B200).compile("gfx1250")
    with pytest.raises(TargetError, match="not run on a gfx1250 GPU"):
        kern.run(None, None, None)
    a = torch.randn(200, 136, dtype=torch.bfloat16)
    res = kern.simulate(a, a.t())  # the simulator models TDM copies (tests/sim/test_gfx1250_sim.py)
    assert res.ok, res.report.summary()


def test_tuning_refuses_a_gfx1250_gpu_before_making_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import types

    from warploom.device import DeviceInfo
    from warploom.tune import gpu

    monkeypatch.setattr(DeviceInfo, "current", staticmethod(lambda: GFX1250))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    with pytest.raises(TargetError, match="gfx1250 kernels"):
        gpu._device(types.SimpleNamespace(device=torch.device("cuda")))  # type: ignore[arg-type]


def test_public_api_refuses_to_launch_on_a_gfx1250_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from warploom import api

    monkeypatch.setattr(api, "device_for", lambda a: GFX1250)
    monkeypatch.setattr(api, "require_cuda", lambda *a, **k: None, raising=False)
    a = torch.empty(512, 512, dtype=torch.bfloat16, device="meta")
    with pytest.raises(TargetError, match="not run on a gfx1250 GPU"):
        api._matmul_impl(a, a)
