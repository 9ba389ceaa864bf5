"""sm_100a MX fp8 at the API and in the planner: torch's blocked scales are accepted and planned for sm_100a only;
wrong dtypes, shapes and layouts are refused by name."""

from __future__ import annotations

import pytest
import torch

import warploom
from warploom import ScaleLayout, ScaleRecipe
from warploom.blocked import from_blocked, to_blocked
from warploom.device import B200, H100_SXM
from warploom.errors import ScaleError, UnsupportedError

M, N, K = 200, 272, 288


def _args(blocked: bool = True) -> tuple[torch.Tensor, ...]:
    a = torch.zeros(M, K, dtype=torch.float8_e4m3fn)
    b = torch.zeros(N, K, dtype=torch.float8_e4m3fn).t()
    sa = torch.full((M, K // 32), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.full((N, K // 32), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    return (a, b, to_blocked(sa), to_blocked(sb)) if blocked else (a, b, sa, sb)


def test_blocked_layout_round_trips() -> None:
    x = torch.randint(0, 255, (300, 37), dtype=torch.uint8)
    f = to_blocked(x)
    assert f.shape == (384 * 40,)
    back = from_blocked(f, 300, 37)
    assert torch.equal(back[:300, :37], x) and not back[300:].any() and not back[:, 37:].any()
    # one 128x4 block is 512 contiguous bytes: row r, scale c at (r % 32) * 16 + (r // 32) * 4 + c
    assert f[(5 % 32) * 16 + (5 // 32) * 4 + 2] == x[5, 2] and f[(77 % 32) * 16 + (77 // 32) * 4 + 1] == x[77, 1]


def test_blocked_scales_plan_for_sm100a() -> None:
    k = warploom.plan(*_args(), device=B200)
    assert k.spec.scale is ScaleRecipe.MX and k.spec.scale_layout is ScaleLayout.BLOCKED
    assert k.plan.block_scaled and k.module.tmem_scales


def test_blocked_scales_refused_on_sm90a() -> None:
    with pytest.raises(UnsupportedError, match="blocked layout is sm_100a's"):
        warploom.plan(*_args(), device=H100_SXM)


def test_row_major_scales_take_seed_000s_scale_partition_on_sm100a() -> None:
    """Row-major MX scales plan on sm_100a through the scale partition (passes/blackwell_scales.py); explain says
    which path and the tensor-memory trade."""
    k = warploom.plan(*_args(blocked=False), device=B200)
    assert k.plan.block_scaled and k.plan.scale_partition
    assert (k.plan.bm, k.plan.bn, k.plan.acc_buffers) == (128, 128, 2)
    assert not k.module.tmem_scales and k.module.tmem_columns == 272
    text = warploom.planner.explain(k.spec, B200).text()
    assert "seed 000" in text and "272 of 512" in text
    blocked = warploom.plan(*_args(), device=B200)
    assert not blocked.plan.scale_partition and "seed 001" in warploom.planner.explain(blocked.spec, B200).text()
    # a narrow tile over a wider N: seed 001's chunk holds only the first rows, the scale partition loads any
    # (blocked ones too, at their blocked addresses); forcing tcgen05.cp there, or on row-major scales, is refused
    spec = k.spec
    assert warploom.planner.plan_schedule(spec, B200, bn=64).scale_partition
    assert warploom.planner.plan_schedule(blocked.spec, B200, bn=64).scale_partition
    with pytest.raises(UnsupportedError, match="scale_partition=False .* reads its B scales from inside a 128-row"):
        warploom.planner.plan_schedule(blocked.spec, B200, bn=64, scale_partition=False)
    with pytest.raises(UnsupportedError, match="scale_partition=False .*row-major scales are not in torch's blocked"):
        warploom.planner.plan_schedule(spec, B200, scale_partition=False)
    # 256 wide: one accumulator beside the scale buffers (A's 2 x 4 columns, B's 2 x 8): 280 of 512
    wide = warploom.planner.plan_schedule(spec, B200, bn=256)
    assert wide.scale_partition and wide.acc_buffers == 1
    assert "280 of 512" in warploom.planner.scale_path(wide, spec)
    # bad row-major scales are still refused by name on this path
    a, b, sa, sb = _args(blocked=False)
    with pytest.raises(ScaleError, match="scale_a.*float8_e8m0fnu"):
        warploom.plan(a, b, sa.view(torch.uint8).float(), sb, device=B200)
    per16 = torch.full((N, K // 16), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match=r"scale_b.*\(272, 9\).*got shape \(272, 18\)"):
        warploom.plan(a, b, sa, per16, device=B200)


def test_bad_mx_scales_name_the_argument() -> None:
    a, b, sa, sb = _args()
    with pytest.raises(ScaleError, match="scale_b.*float8_e8m0fnu"):
        warploom.plan(a, b, sa, sb.view(torch.uint8).float(), device=B200)  # fp32 where e8m0 is required
    with pytest.raises(ScaleError, match=r"scale_a.*\(3072,\).*got shape \(2560,\)"):
        warploom.plan(a, b, sa[:-512], sb, device=B200)  # one 128x4 block short
    per16 = torch.full((M, K // 16), 127, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    with pytest.raises(ScaleError, match=r"scale_a.*\(200, 9\)"):
        warploom.plan(a, b, per16, sb, device=B200)  # per 16 where per 32 is required
    with pytest.raises(ScaleError, match="layout of scale_a"):
        warploom.plan(a, b, sa, _args(blocked=False)[3], device=B200)
    assert issubclass(ScaleError, ValueError)
