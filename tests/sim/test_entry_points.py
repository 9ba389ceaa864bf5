"""The simulator's entry points outside warploom.sim: Kernel.simulate / Kernel.check_protocol, sampled
comparisons (`compare`, `sample_ctas`), WARPLOOM_SIM_CHECK, and the `warploom sim` / `warploom demo` commands."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from warploom.cli import main
from warploom.device import H100_SXM
from warploom.kernel import Kernel, build
from warploom.planner import plan_schedule
from warploom.reference import make_inputs
from warploom.sim import ProtocolError, compare, representative_ctas, sample_ctas, simulate
from warploom.spec import GemmSpec


def test_kernel_simulate_is_simulate_of_its_module() -> None:
    spec = GemmSpec(130, 200, 96)
    kernel = build(spec, H100_SXM)
    x = make_inputs(spec, spec.m, spec.n, spec.k)
    res = kernel.simulate(x.a, x.b, seed=3, ctas=[1], record=False)
    direct = simulate(kernel.module, x.a, x.b, seed=3, ctas=[1], record=False)
    assert res.ok and res.report.ctas == (1,) and not res.report.timeline
    assert torch.equal(res.output.isnan(), direct.output.isnan())
    assert torch.equal(res.output.nan_to_num(), direct.output.nan_to_num())


def test_kernel_check_protocol_runs_at_the_spec_size() -> None:
    spec = GemmSpec(1000, 1000, 256)
    kernel = build(spec, H100_SXM, replace(plan_schedule(spec, H100_SXM), grid=5))  # CTAs of 12, 13 tiles
    report = kernel.check_protocol(seeds=range(2))
    assert report.ok and report.seeds == (0, 1)
    assert report.ctas == representative_ctas(kernel.module, 1000, 1000) and len(report.ctas) == 2
    broken = replace(kernel, module=replace(kernel.module, barriers=tuple(
        replace(b, count=b.count + 1) for b in kernel.module.barriers)))
    with pytest.raises(ProtocolError, match="DEADLOCK"):
        broken.check_protocol(seeds=[0])
    assert not broken.check_protocol(seeds=[0], raise_on_finding=False).ok


def test_sampled_comparison_judges_only_the_sampled_tiles() -> None:
    spec = GemmSpec(1000, 1000, 256)
    kernel = build(spec, H100_SXM, replace(plan_schedule(spec, H100_SXM), grid=5))
    ctas = sample_ctas(kernel.module, spec.m, spec.n)
    tiles = -(-spec.m // kernel.plan.bm) * -(-spec.n // kernel.plan.tile_n)
    assert 0 in ctas and (tiles - 1) % 5 in ctas
    assert set(representative_ctas(kernel.module, spec.m, spec.n)) <= set(ctas)
    cmp = compare(kernel.module, make_inputs(spec, spec.m, spec.n, spec.k), ctas=ctas)
    assert cmp.ok and cmp.grid == 5 and cmp.error < 1e-5
    assert len(cmp.tiles) == sum(len(range(p, tiles, 5)) for p in ctas) < tiles
    assert cmp.result.output.isnan().any()  # the other CTAs' tiles stay poisoned
    whole = compare(kernel.module, make_inputs(spec, spec.m, spec.n, spec.k))
    assert whole.ok and len(whole.tiles) == tiles and not whole.result.output.isnan().any()


def test_comparison_of_nothing_is_not_ok() -> None:
    spec = GemmSpec(130, 200, 96)
    cmp = compare(build(spec, H100_SXM).module, make_inputs(spec, spec.m, spec.n, spec.k), ctas=())
    assert not cmp.tiles and not cmp.ok


def test_sim_check_env_checks_every_kernel_built(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[GemmSpec, tuple[int, ...]]] = []
    original = Kernel.check_protocol

    def spy(self: Kernel, **kw: object) -> object:
        calls.append((self.spec, tuple(kw["seeds"])))  # type: ignore[arg-type]
        return original(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Kernel, "check_protocol", spy)
    spec = GemmSpec(392, 328, 264)  # a size no other test builds: not in build's cache
    monkeypatch.setenv("WARPLOOM_SIM_CHECK", "1")
    build(spec, H100_SXM)
    assert calls == [(spec, (0, 1))]
    monkeypatch.setenv("WARPLOOM_SIM_CHECK", "0")
    build(GemmSpec(392, 328, 272), H100_SXM)
    assert len(calls) == 1


def invoke(*args: str) -> str:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_sim_command(tmp_path: Path) -> None:
    png = tmp_path / "t.png"
    out = invoke("sim", "--m", "130", "--n", "200", "--k", "96", "--stages", "2", "--timeline", str(png),
                 "--explore")
    # (the planned 64x16 tiles, rule 33, at the depth asked: 3 x 13 of them)
    assert "64x16x64_s2_" in out and "CTAs simulated: 39 of 39" in out and "findings: none" in out
    assert float(re.search(r"\(x²\+y²\)\): (\S+)", out).group(1)) < 1e-5  # type: ignore[union-attr]
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "(complete)" in out and re.search(r"states: \d+", out)


def test_sim_command_samples_ctas_above_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", "1000")
    out = invoke("sim", "--m", "1000", "--n", "1008", "--k", "128", "--dtype", "fp8", "--no-fast-accum")
    assert "sample of CTAs" in out and "findings: none" in out and "promoted" in out
    assert re.search(r"CTAs simulated: [1-3] of \d+", out)


@pytest.mark.parametrize("scales,recipe,complete", [("blockwise", "blockwise_1x128_128x128", True),
                                                    ("blockwise-1x128", "blockwise_1x128_1x128", True),
                                                    ("mx", "mx", False), ("tensorwise", "tensorwise", True)])
def test_sim_command_scale_recipes(scales: str, recipe: str, complete: bool) -> None:
    """At 2 stages 20,000 states explore the blockwise recipes whole (16,000); MX's scale partition takes 166,000
    (half a minute), so its exploration is cut at the bound: inconclusive, exit 1."""
    r = CliRunner().invoke(main, ["sim", "--dtype", "fp8", "--scales", scales, "--m", "200", "--n", "256", "--k", "640",
                                  "--stages", "2", "--explore", "--max-states", "20000"])
    out = r.output
    assert r.exit_code == (0 if complete else 1), out
    assert recipe in out and "findings: none" in out and ("inconclusive" in out) is not complete
    assert float(re.search(r"\(x²\+y²\)\): (\S+)", out).group(1)) < 1e-5  # type: ignore[union-attr]


def test_sim_command_refuses_bad_sizes_and_stages_without_a_traceback() -> None:
    r = CliRunner().invoke(main, ["sim", "--stages", "40"])  # (more than the planned tile's ring fits)
    assert r.exit_code == 2 and "--stages" in r.output and "or fewer" in r.output
    r = CliRunner().invoke(main, ["sim", "--dtype", "fp8", "--n", "1000"])
    assert r.exit_code == 2 and "--n 1000: expected a multiple of 16" in r.output


def test_demo_without_a_gpu_simulates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("WARPLOOM_SIM_MAX_FLOPS", "1000")  # the sampled path, at a size that compiles fast
    png = tmp_path / "demo.png"
    out = invoke("demo", "--m", "520", "--n", "520", "--k", "128", "--out-dir", str(tmp_path), "--timeline", str(png))
    assert "no GPU here" in out and "sample of CTAs" in out and "findings: none" in out
    assert png.exists() and list(tmp_path.glob("*.py"))
    assert "persistent grid:" in out and "waves" in out  # the plan's wave fill (planner.wave_fill)


@pytest.mark.parametrize("m", [520, 16])  # the 128x256 schedule, and decode swapped
def test_demo_for_sm_100a_cross_compiles_and_simulates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       m: int) -> None:
    """`warploom demo --target sm_100a` plans for a B200, cross-compiles with tcgen05 and simulates, even where a GPU
    is present (no sm_100a GPU runs it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # an H100 here must not run the Blackwell kernel
    out = invoke("demo", "--target", "sm_100a", "--m", str(m), "--n", "520", "--k", "128", "--out-dir", str(tmp_path))
    assert "cross-compile sm_100a" in out and "UTCHMMA" in out and "findings: none" in out
    assert "sm_100a: cross-compiled, not run" in out and "tensor memory" in out


@pytest.mark.parametrize("dtype,mma", [("mxfp8", "UTCQMMA"), ("mxfp4", "UTCOMMA"), ("nvfp4", "UTCOMMA"),
                                       ("mxfp8xfp4", "UTCQMMA")])
def test_demo_of_mx_for_sm_100a(tmp_path: Path, dtype: str, mma: str) -> None:
    """`warploom demo --target sm_100a --dtype mxfp8|mxfp4|nvfp4|mxfp8xfp4`: the schedule with its tcgen05 scale
    copies, the SASS summary (block-scaled MMAs and UTCCP) and a CPU simulation against the dequantized reference
    (NVFP4's with its global scales; MX fp8 x fp4 is kind::mxf8f6f4, UTCQMMA)."""
    out = invoke("demo", "--target", "sm_100a", "--dtype", dtype, "--m", "300", "--n", "272", "--k", "544",
                 "--out-dir", str(tmp_path))
    assert "tcgen05_copy sa_ring[c] -> sa_tm" in out and "UTCCP" in out and "findings: none" in out
    row = next(line for line in out.splitlines() if line.startswith("│ main"))
    counts = dict(zip(("UTCHMMA", "UTCQMMA", "UTCOMMA", "UTCCP"), row.split("│")[2:6], strict=True))
    assert int(counts[mma]) > 0 and int(counts["UTCCP"]) == 2, row
    r = CliRunner().invoke(main, ["demo", "--dtype", dtype, "--m", "300", "--n", "272", "--k", "544"])
    assert r.exit_code == 2 and ("sm_100a" in r.output or "B200" in r.output)  # (MX of this kind: sm_100a only)


def test_demo_of_fp32_blockwise_for_sm_100a(tmp_path: Path) -> None:
    """`warploom demo --target sm_100a --dtype blockwise`: DeepSeek's fp32 scales promoted through tensor-memory
    partials: the plan says which path and why, the schedule shows the partial ring, the SASS summary plain fp8
    tcgen05 MMAs (no UTCCP), and the CPU simulation matches the reference."""
    out = invoke("demo", "--target", "sm_100a", "--dtype", "blockwise", "--m", "300", "--n", "272", "--k", "640",
                 "--out-dir", str(tmp_path))
    flat = " ".join(out.split())
    assert "promoted through tensor memory" in flat and "part_tm" in out and "findings: none" in out
    row = next(line for line in out.splitlines() if line.startswith("│ main"))
    counts = dict(zip(("UTCHMMA", "UTCQMMA", "UTCOMMA", "UTCCP"), row.split("│")[2:6], strict=True))
    assert int(counts["UTCQMMA"]) == 4 and int(counts["UTCCP"]) == 0, row


def test_sim_explore_cut_at_its_bound_is_inconclusive() -> None:
    """An exploration the state bound cut (a bad-input probe, session 37) once exited 0 like a complete one: a
    finding past the bound would go unseen. It says so, exits 1 and names the option that raises the bound."""
    r = CliRunner().invoke(main, ["sim", "--m", "64", "--n", "64", "--k", "64", "--explore", "--max-states", "50"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert "bound hit: incomplete" in r.output and "cut at --max-states 50" in r.output
    assert "inconclusive" in r.output and "Fix: pass a larger --max-states, e.g. --max-states 200" in r.output
