"""Fitted tiles in 2x1 clusters (planner rule 37, ir.Tiling.interleaved) on the CPU: each CTA's interleaved 64-row
blocks of the cluster tiles against torch and bit for bit against the same fitted tile one CTA a tile, fp8 too, whole
clusters sampled, and the cluster protocol's planted bugs found in the interleaved module by the simulator and the
explorer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_cluster_sim import assert_as_one_cta  # (pytest puts this folder on sys.path)

import warploom
from warploom.backends.gluon_api import emitting_for
from warploom.device import H100_SXM
from warploom.ir import nodes as ir
from warploom.passes.cluster import CLUSTER_EMPTY
from warploom.passes.util import filter_ops
from warploom.reference import relative_error
from warploom.sim import FindingKind, explore, simulate
from warploom.targets import compile_schedule

K = FindingKind
# M not a multiple of the cluster tile's 256 rows (a last cluster tile with rank 1's rows past M, or its second block
# of rows), N not of tile_n, K not of BK; two and three column blocks.
SHAPES = [(300, 520, 200, (128, 16)), (200, 304, 72, (128, 64)), (130, 136, 40, (128, 16)),
          (450, 400, 136, (128, 32, 16))]


def _module(m: int, n: int, k: int, blocks: tuple[int, ...], cluster: int = 2, grid: int = 8, stages: int = 4,
            fp8: bool = False) -> ir.Module:
    if fp8:
        a = torch.empty(m, k, device="meta").to(torch.float8_e4m3fn)
        b = torch.empty(n, k, device="meta").to(torch.float8_e4m3fn).t()
        kern = warploom.plan(a, b, torch.empty(m, 1, device="meta"), torch.empty(1, n, device="meta"),
                             use_fast_accum=True)
    else:
        kern = warploom.plan(torch.empty(m, k, dtype=torch.bfloat16, device="meta"),
                             torch.empty(n, k, dtype=torch.bfloat16, device="meta").t())
    plan = dataclasses.replace(kern.plan, bm=128, bn=256, consumer_warps=8, consumer_partitions=2, cluster=cluster,
                               epilogue_subtiles=4, grid=grid, stages=stages, n_blocks=blocks, split_k=1, stream_k=0,
                               tail_split=1, swap_ab=False, pingpong=False, bk=128 if fp8 else 64)
    with emitting_for("3.9"):
        module, _ = compile_schedule(kern.spec, plan, H100_SXM)
    assert module.tiling.interleaved == (cluster == 2)
    return module


def _inputs(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(m * 7 + n + k)
    return torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16().t()


@pytest.mark.parametrize("m,n,k,blocks", SHAPES)
def test_each_cta_computes_its_interleaved_rows(m: int, n: int, k: int, blocks: tuple[int, ...]) -> None:
    # (against fp32, and the same bits as the same fitted tile one CTA a tile)
    assert_as_one_cta(_module(m, n, k, blocks), _module(m, n, k, blocks, cluster=1), *_inputs(m, n, k))


def test_fp8_rowwise() -> None:
    m, n, k = 300, 528, 256
    torch.manual_seed(1)
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(1, n) + 0.5
    res = simulate(_module(m, n, k, (128, 16), fp8=True), a, b, sa, sb)
    assert res.ok, res.report.summary()
    assert relative_error(res.output.float(), (a.float() @ b.float()) * sa * sb) < 1e-2


def _drop(module: ir.Module, role: ir.Role, drop: type, barrier: str) -> ir.Module:
    parts = tuple(dataclasses.replace(p, body=filter_ops(p.body, lambda o: not (
        isinstance(o, drop) and o.barrier == barrier))) if p.role is role else p for p in module.partitions)
    assert parts != module.partitions, "the mutation changed nothing"
    return dataclasses.replace(module, partitions=parts)


def test_lead_must_wait_for_every_cta_to_release_b() -> None:
    m, n, k = 300, 520, 200
    module = _drop(_module(m, n, k, (128, 16)), ir.Role.PRODUCER, ir.Wait, CLUSTER_EMPTY)
    res = simulate(module, *_inputs(m, n, k))
    assert K.OVERWRITE_UNRELEASED in res.report.kinds(), res.report.summary()


def test_consumers_must_release_on_the_cluster_barrier() -> None:
    m, n, k = 300, 520, 200
    module = _drop(_module(m, n, k, (128, 16)), ir.Role.CONSUMER, ir.Arrive, CLUSTER_EMPTY)
    res = simulate(module, *_inputs(m, n, k))
    assert K.DEADLOCK in res.report.kinds(), res.report.summary()


def test_a_raster_that_disagrees_with_the_rows_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows a CTA's warpgroups compute (`Tiling.cta_row`) must be the ones the raster gives its rank
    (`Tiling.rank_rows`): planted, CTA r placed at r * BM as in a cluster of whole tiles while its warpgroups keep the
    interleaved blocks, rows 64..127 of each cluster tile are never stored and others twice."""
    m, n, k = 300, 520, 200
    module = _module(m, n, k, (128, 16))
    monkeypatch.setattr(ir.Tiling, "rank_rows", property(lambda t: t.bm))
    monkeypatch.setattr(ir.Tiling, "cta_row", lambda t, j: j // 64 * 128 + j % 64)
    res = simulate(module, *_inputs(m, n, k))
    assert K.OUTPUT_COVERAGE in res.report.kinds(), res.report.summary()


# One cluster tile, two k-blocks through one stage: every release and wait of the cluster's protocol is exercised.
EXPLORE = (130, 136, 72)


def test_explorer_is_clean_on_an_interleaved_cluster() -> None:
    m, n, k = EXPLORE
    rep = explore(_module(m, n, k, (128, 16), grid=2, stages=1), m, n, k, max_states=100_000)
    assert rep.ok and not rep.bound_hit, rep.summary()
    assert rep.ctas == (0, 1)


def test_explorer_finds_a_missing_cluster_wait() -> None:
    m, n, k = EXPLORE
    module = _drop(_module(m, n, k, (128, 16), grid=2, stages=1), ir.Role.PRODUCER, ir.Wait, CLUSTER_EMPTY)
    rep = explore(module, m, n, k, max_states=100_000, stop_at_first=True)
    assert K.OVERWRITE_UNRELEASED in rep.kinds() and rep.counterexample, rep.summary()


def test_the_comparison_judges_every_interleaved_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """`compare` judges each CTA's rows where `Tiling.row_blocks` puts them: a wrong value planted in the rows of
    rank 1's second warpgroup (rows 192..255 of the cluster tile) is seen; judged as BM contiguous rows from each
    rank's first, those rows were never compared."""
    import importlib

    from warploom.reference import Inputs

    cmp = importlib.import_module("warploom.sim.compare")  # (the module: warploom.sim re-exports its function)

    m, n, k = 300, 152, 64
    module = _module(m, n, k, (128, 16))
    a, b = _inputs(m, n, k)
    clean = cmp.compare(module, Inputs(a, b), ctas=(0, 1))
    assert clean.error < 1e-2 and clean.result.ok, clean
    real = cmp.simulate

    def planted(*args: object, **kw: object) -> object:
        res = real(*args, **kw)  # type: ignore[arg-type]
        res.output[192:256] = 1e4
        return res

    monkeypatch.setattr(cmp, "simulate", planted)
    bad = cmp.compare(module, Inputs(a, b), ctas=(0, 1))
    assert bad.error > 0.5, bad.error
