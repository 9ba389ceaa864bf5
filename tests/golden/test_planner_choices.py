"""The planner's choice on 30 fixed shapes of the random zoo (`warploom bench --suite zoo`), bf16 and fp8 rowwise
fast as one golden table, fp8 rowwise exact (promoted) and blockwise 1x128 x 128x128 (its M rounded up to 4, as the
zoo runs it) as another: a change to the cost model (planner steps 3, 15 and 21) shows up here in review, plan by
plan. Refresh with EXPECTTEST_ACCEPT=1 after a deliberate change, and measure it (docs/benchmarks.md)."""

from __future__ import annotations

import expecttest

from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe
from warploom.benchsuite.shapes import ZOO, Op, Shape, for_op
from warploom.planner import plan_schedule

SHAPES = ZOO[:30]


def _spec(shape: Shape, op: Op) -> GemmSpec:
    """`op`'s GemmSpec at `shape` as the zoo runs it (`for_op`): bf16, or e4m3 rowwise or blockwise 1x128 x 128x128
    with the op's accumulation."""
    s = for_op(shape, op)
    if not op.fp8:
        return GemmSpec(s.m, s.n, s.k)
    scale = ScaleRecipe.BLOCKWISE_1X128_128X128 if op is Op.SCALED_MM_FP8_BLOCKWISE else ScaleRecipe.ROWWISE
    acc = Accumulation.NATIVE if op.fast_accum else Accumulation.PROMOTED
    return GemmSpec(s.m, s.n, s.k, DType.E4M3, DType.E4M3, DType.BF16, scale=scale, accumulation=acc)


def _table(first: Op, second: Op, width: int) -> str:
    """A line a shape: the planner's plan for `first` (padded to `width`) and for `second`."""
    rows = []
    for shape in SHAPES:
        a, b = (plan_schedule(_spec(shape, op), H100_SXM).short() for op in (first, second))
        rows.append(f"{shape.m}x{shape.n}x{shape.k}".ljust(18) + f"{a:{width}s} {b}")
    return "\n".join(rows) + "\n"


class TestPlannerChoices(expecttest.TestCase):
    def test_promoted_zoo_table(self) -> None:
        self.assertExpectedInline(_table(Op.SCALED_MM_FP8_ROWWISE_EXACT, Op.SCALED_MM_FP8_BLOCKWISE, 34), """\
102x1704x672      64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
1210x128x184      64x64x128_s4_w4_g8                 64x64x128_s4_w4_g8
753x216x800       64x64x128_s4_w4_g8                 64x64x128_s4_w4_g8
73x104x3280       64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
662x1096x3752     128x128x128_s6_w8_g8_p2            128x128x128_s5_w8_g8_p2
469x88x4920       64x64x128_s6_w4_g8_k6              64x64x128_s6_w4_g8_k6
1679x2456x2000    128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
13930x480x4328    128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
494x1528x2496     128x128x128_s6_w8_g8_p2            128x128x128_s5_w8_g8_p2
366x104x888       64x64x128_s4_w4_g8                 64x64x128_s4_w4_g8
3428x1696x768     128x128x128_s6_w8_g8_p2            128x128x128_s5_w8_g8_p2
2255x176x176      64x64x128_s4_w4_g8                 64x64x128_s4_w4_g8
385x5904x192      128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
121x112x80        64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
295x1536x6064     64x64x128_s8_w4_g8                 64x64x128_s8_w4_g8
401x496x320       64x64x128_s4_w4_g8                 64x64x128_s4_w4_g8
347x4776x1344     128x128x128_s6_w8_g8_p2            128x128x128_s5_w8_g8_p2
268x112x4944      64x64x128_s6_w4_g8_k7              64x64x128_s6_w4_g8_k7
3230x6336x240     128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
1318x10440x1712   128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
12108x160x14264   128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
87x640x72         64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
5699x2888x14160   128x256x128_s3_w8_g8_e2_p2_h2_t3   128x256x128_s3_w8_g8_e2_p2_h2_t3
5556x12336x1272   128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
15348x4072x440    128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
14215x520x184     128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
97x848x192        64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
11336x12448x208   128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
114x1200x160      64x64x128_s4_w4_g8                 64x64x128_s6_w4_g8
1304x5800x264     128x256x128_s3_w8_g8_e2_p2_h2      128x256x128_s3_w8_g8_e2_p2_h2
""")


    def test_zoo_table(self) -> None:
        self.assertExpectedInline(_table(Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST, 40), """\
102x1704x672      64x64x64_s4_w4_g8                        64x64x128_s4_w4_g8
1210x128x184      64x32x64_s3_w4_g8                        64x64x128_s2_w4_g8
753x216x800       64x64x64_s4_w4_g8                        64x64x128_s4_w4_g8
73x104x3280       64x64x64_s6_w4_g8_k8                     64x64x128_s4_w4_g8
662x1096x3752     64x128x64_s6_w4_g8                       64x128x128_s6_w4_g8
469x88x4920       64x64x64_s6_w4_g8_k6                     64x64x128_s6_w4_g8_k6
1679x2456x2000    192x256x64_s4_w12_g8_e4_p3_n128_64       128x256x128_s4_w8_g8_e2_p2
13930x480x4328    192x256x64_s4_w12_g8_e2_p3_n128_32       128x256x128_s4_w8_g8_e2_p2
494x1528x2496     64x128x64_s6_w4_g8                       64x128x128_s6_w4_g8
366x104x888       64x16x64_s6_w4_g8                        64x64x128_s4_w4_g8
3428x1696x768     128x128x64_s6_w8_g8_p2                   128x128x128_s6_w8_g8_p2
2255x176x176      64x64x64_s3_w4_g8                        64x64x128_s2_w4_g8
385x5904x192      128x256x64_s3_w8_g8_e4_p2_n128_64        128x256x128_s2_w8_g8_e2_p2
121x112x80        64x16x64_s2_w4_g8                        64x64x128_s2_w4_g8
295x1536x6064     128x128x64_s5_w8_g8_p2_k3                64x64x128_s8_w4_g8
401x496x320       64x64x64_s4_w4_g8                        64x64x128_s3_w4_g8
347x4776x1344     128x128x64_s6_w8_g8_p2                   128x128x128_s6_w8_g8_p2
268x112x4944      64x64x64_s6_w4_g8_k8                     64x64x128_s6_w4_g8_k7
3230x6336x240     128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
1318x10440x1712   128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
12108x160x14264   128x256x64_s5_w8_g8_e2_p2_n128_32        128x256x128_s5_w8_g8_e2_p2_n128_32
87x640x72         64x16x64_s2_w4_g8                        64x64x128_s2_w4_g8
5699x2888x14160   192x256x64_s3_w12_g8_e2_p3_n128_64_32    128x256x128_s4_w8_g8_e2_p2_t3
5556x12336x1272   128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
15348x4072x440    128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
14215x520x184     192x256x64_s4_w12_g8_e4_p3_n128_64       128x256x128_s4_w8_g8_e2_p2
97x848x192        64x32x64_s3_w4_g8                        64x64x128_s2_w4_g8
11336x12448x208   128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
114x1200x160      64x32x64_s3_w4_g8                        64x64x128_s2_w4_g8
1304x5800x264     128x256x64_s4_w8_g8_e2_p2                128x256x128_s4_w8_g8_e2_p2
""")
