"""2x1 clusters of ping-pong consumers (issue 24, forced only: `pingpong=True, cluster=2`): what the planner plans and
refuses, what it keeps choosing unforced, the module the passes build and the verifier's rules on it. Checked for
Triton 3.9 with `emitting_for` (3.6 has no Hopper multicast)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from warploom import H100_SXM, Accumulation, DType, GemmSpec, ScaleRecipe, UnsupportedError
from warploom.backends.gluon_api import emitting_for
from warploom.epilogue import capture
from warploom.errors import PlanError
from warploom.ir import nodes as ir
from warploom.ir import verify
from warploom.passes.cluster import CLUSTER_EMPTY
from warploom.planner import explain, plan_schedule
from warploom.targets import compile_schedule
from warploom.tune.candidates import replan

E4 = DType.E4M3
UNALIGNED = GemmSpec(4634, 4968, 3672)  # (rule 24 clusters it unforced: rows of 7344 and 9936 bytes)


def _plan(spec: GemmSpec, **options: object) -> object:
    with emitting_for("3.9"):
        return plan_schedule(spec, H100_SXM, **options)  # type: ignore[arg-type]


def test_forced_plan() -> None:
    """The one-CTA ping-pong plan (128x128, its stages and staging) in 2x1 clusters on an even grid of whole
    clusters over the 256x128 cluster tiles."""
    plan = _plan(UNALIGNED, pingpong=True, cluster=2)
    one = _plan(UNALIGNED, pingpong=True, cluster=1)
    assert (plan.cluster, plan.cluster_n, plan.pingpong, plan.bm, plan.bn) == (2, False, True, 128, 128)
    assert replace(plan, cluster=1, grid=one.grid) == one
    assert plan.grid == 2 * min(66, 19 * 39)  # (ceil(4634 / 256) x ceil(4968 / 128) cluster tiles)
    small = _plan(GemmSpec(300, 520, 200), pingpong=True, cluster="2x1")
    assert (small.cluster, small.grid) == (2, 2 * 2 * 5)
    with emitting_for("3.9"):  # (a tuned plan of this form, read back from the cache, plans again the same)
        assert replan(UNALIGNED, H100_SXM, plan) == plan


def test_unforced_choices_unchanged() -> None:
    """Rule 24 still clusters the cooperative 128x256 plan unforced, and a forced ping-pong plan stays in one CTA
    unless the cluster is forced too (ping-pong clusters are unmeasured)."""
    plan = _plan(UNALIGNED)
    assert (plan.cluster, plan.pingpong, plan.bm, plan.bn) == (2, False, 128, 256)
    assert _plan(UNALIGNED, pingpong=True).cluster == 1
    fp8 = GemmSpec(1064, 5696, 1168, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE)  # (rule 30 leaves it to rule 24)
    chosen = _plan(fp8)
    assert (chosen.cluster, chosen.pingpong) == (2, False)


def test_explain_names_the_form() -> None:
    with emitting_for("3.9"):
        text = explain(GemmSpec(300, 520, 200), H100_SXM, pingpong=True, cluster=2).text()
    assert "2-CTA clusters of ping-pong consumers" in text and "cluster tiles of 256x128" in text, text


@pytest.mark.parametrize("what,options,expected", [
    ("1x2", {"cluster": "1x2"}, r"ping-pong in a 1x2 cluster \(built 2x1 only, sharing B: use cluster=2\)"),
    ("promoted", {"cluster": 2, "spec": GemmSpec(2000, 2112, 1008, E4, E4, DType.BF16, scale=ScaleRecipe.ROWWISE,
                                                 accumulation=Accumulation.PROMOTED)},
     r"ping-pong with promoted fp8, blockwise scales or a fused epilogue graph .*use use_fast_accum=True"),
    ("tile", {"cluster": 2, "bm": 64, "bn": 128}, r"a ping-pong tile other than 128x128"),
])
def test_refused(what: str, options: dict[str, object], expected: str) -> None:
    """Each refusal names the option, what was expected and the fix."""
    spec = options.pop("spec", UNALIGNED)
    assert isinstance(spec, GemmSpec)
    with pytest.raises(UnsupportedError, match=rf"cluster=.* \(rule 24\) cannot run .*{expected}.*Fix: drop cluster"):
        _plan(spec, pingpong=True, **options)


def test_fused_epilogue_refused() -> None:
    m, n, k = 300, 520, 200
    bias = torch.empty(n, dtype=torch.bfloat16)
    spec = replace(GemmSpec(m, n, k), epilogue=capture(lambda acc, bias: acc + bias, {"bias": bias},
                                                       out_shape=(m, n)))
    with pytest.raises(UnsupportedError, match="ping-pong with promoted fp8, blockwise scales or a fused epilogue"):
        _plan(spec, pingpong=True, cluster=2)


def test_plan_refuses_1x2_pingpong() -> None:
    plan = _plan(UNALIGNED, pingpong=True, cluster=2)
    with pytest.raises(PlanError, match=r"cluster_n=True, pingpong=True.*2x1 only.*Fix: cluster_n=False"):
        replace(plan, cluster_n=True)


def _module() -> ir.Module:
    plan = _plan(GemmSpec(300, 520, 200), pingpong=True, cluster=2)
    module, _ = compile_schedule(GemmSpec(300, 520, 200), plan, H100_SXM)
    return module


def test_module_verifies_and_corruptions_are_reported() -> None:
    module = _module()
    assert verify.complete(module, H100_SXM) == []
    along_n = replace(module, tiling=replace(module.tiling, cluster_n=True))
    assert any("take tiles in turn (ping-pong) in a 1x2 cluster's module" in e
               for e in verify.complete(along_n, H100_SXM))
    doubled = replace(module, barriers=tuple(replace(b, count=2) if b.name == CLUSTER_EMPTY else b
                                             for b in module.barriers))
    assert any(f"{CLUSTER_EMPTY} counts 2 arrival(s) a CTA, empty 1" in e and "wait forever" in e
               for e in verify.complete(doubled, H100_SXM))
