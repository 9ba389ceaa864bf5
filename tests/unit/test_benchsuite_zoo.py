"""The zoo suite on the CPU: its random shapes (deterministic, in range, accepted by the planner for every op), the
shards that split it across GPU calls, merging their JSON back, and the zoo report from made-up timings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

import warploom
from warploom.benchsuite import report, report_zoo
from warploom.benchsuite.results import Environment, Measurement, MergeError, Results, ResultsFormatError, Row, merge
from warploom.benchsuite.run import inputs, warploom_call
from warploom.benchsuite.shapes import (
    ZOO,
    ZOO_COUNT,
    ZOO_HI,
    ZOO_LO,
    ZOO_MAX_FLOPS,
    ZOO_SEED,
    ZOO_SMALL_M,
    Case,
    Group,
    Op,
    Shard,
    Suite,
    cases,
    for_op,
    zoo_shapes,
)
from warploom.cli import main

# The first shapes of ZOO_SEED's zoo, and the last (a small-M one): a changed draw changes them.
PINNED = [(102, 1704, 672), (1210, 128, 184), (753, 216, 800), (73, 104, 3280), (662, 1096, 3752)]
PINNED_LAST = (1, 816, 2272)


def test_the_zoo_is_deterministic() -> None:
    assert [(s.m, s.n, s.k) for s in ZOO[:5]] == PINNED and (ZOO[-1].m, ZOO[-1].n, ZOO[-1].k) == PINNED_LAST
    assert zoo_shapes(ZOO_SEED) == ZOO and zoo_shapes() == ZOO
    other = zoo_shapes(seed=ZOO_SEED + 1)
    assert len(other) == len(ZOO) and other != ZOO
    assert [s.name for s in ZOO[:3]] == ["zoo 000", "zoo 001", "zoo 002"] and len({s.name for s in ZOO}) == len(ZOO)


def test_the_zoo_spans_its_range() -> None:
    main_part, small = ZOO[:ZOO_COUNT], ZOO[ZOO_COUNT:]
    assert len(main_part) == ZOO_COUNT >= 200 and len(small) == ZOO_SMALL_M
    assert all(ZOO_LO <= d <= ZOO_HI for s in main_part for d in (s.m, s.n, s.k))
    assert all(1 <= s.m <= ZOO_LO and ZOO_LO <= min(s.n, s.k) and max(s.n, s.k) <= ZOO_HI for s in small)
    assert all(s.n % 8 == 0 and s.k % 8 == 0 and s.group is Group.ZOO for s in ZOO)
    assert sum(s.n % 16 != 0 for s in ZOO) >= 50 and sum(s.k % 16 != 0 for s in ZOO) >= 50  # bf16 only 8-aligned
    assert sum(s.m % 8 != 0 for s in ZOO) >= 100 and sum(s.m <= 64 for s in ZOO) >= ZOO_SMALL_M
    # Log-uniform: about as many dims below the geometric middle (1024) as above; the FLOP cap tilts it small.
    for dim in ("m", "n", "k"):
        below = sum(getattr(s, dim) < 1024 for s in main_part)
        assert 70 <= below <= 140, (dim, below)
    assert max(s.flops for s in ZOO) > ZOO_MAX_FLOPS / 4  # large shapes too, not only small ones


def test_zoo_cases_round_fp8_up_to_16() -> None:
    """fp8 ops round N and K up to multiples of 16; blockwise also M up to one of 4 (torch's scale_a alignment)."""
    todo = cases(Suite.ZOO)
    assert len(todo) == len(set(todo)) == len(Op) * len(ZOO)
    for c in todo:
        base = next(s for s in ZOO if s.name == c.shape.name)
        if c.op.fp8:
            assert c.n % 16 == 0 and c.k % 16 == 0 and 0 <= c.n - base.n < 16 and 0 <= c.k - base.k < 16
        else:
            assert c.shape == base
        if c.op is Op.SCALED_MM_FP8_BLOCKWISE:
            assert c.m % 4 == 0 and 0 <= c.m - base.m < 4
        else:
            assert c.m == base.m
        assert c.flops <= ZOO_MAX_FLOPS and max(c.m, c.n, c.k) <= ZOO_HI
    assert for_op(ZOO[0], Op.MATMUL_BF16) is ZOO[0]
    assert cases(Suite.ZOO, ops=(Op.SCALED_MM_FP8_TENSORWISE,))[0].shape.name == "zoo 000"


def test_the_planner_accepts_every_zoo_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPLOOM_CACHE_DIR", str(tmp_path))  # the planner's plans, not this machine's tuned ones
    for c in cases(Suite.ZOO):
        _, args, kw = warploom_call(c, inputs(c, "meta"))  # the tensors run.py passes, on the meta device
        try:
            warploom.plan(*args, **kw)
        except Exception as e:  # any refusal or crash: name the case
            pytest.fail(f"{c.short()} ({c.shape.name}): {type(e).__name__}: {e}")


def test_sizes_pick_cases_as_each_op_sizes_them() -> None:
    """`warploom bench --shapes`: a size picks each op's case whose own (M, N, K) it is (fp8's N and K rounded to 16,
    blockwise's M to 4), in the suite's order."""
    base = next(s for s in ZOO if s.n % 16 and s.m % 4)  # (a shape all three roundings move)
    bf16 = (base.m, base.n, base.k)
    fp8 = (base.m, -(-base.n // 16) * 16, -(-base.k // 16) * 16)
    assert {c.op for c in cases(Suite.ZOO, sizes={bf16})} == {Op.MATMUL_BF16}
    picked = cases(Suite.ZOO, sizes={fp8})
    assert {c.op for c in picked} == {op for op in Op if op.fp8 and op is not Op.SCALED_MM_FP8_BLOCKWISE}
    assert all(c.shape.name == base.name for c in picked)
    both = cases(Suite.ZOO, sizes={bf16, fp8}, ops=(Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST))
    assert [c.op for c in both] == [Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST]  # the suite's order
    blockwise = (-(-base.m // 4) * 4, *fp8[1:])
    assert [c.op for c in cases(Suite.ZOO, sizes={blockwise})] == [Op.SCALED_MM_FP8_BLOCKWISE]
    assert cases(Suite.ZOO, sizes=set()) == () and cases(Suite.ZOO, sizes={(1, 1, 1)}) == ()


@pytest.mark.parametrize("count", [1, 3, 4, 7, 12])
def test_shards_partition_the_cases(count: int) -> None:
    todo = cases(Suite.ZOO)
    parts = [Shard(i, count).select(todo) for i in range(count)]
    flat = [c for p in parts for c in p]
    assert len(flat) == len(todo) and set(flat) == set(todo)  # every case once
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert parts[-1][0] == todo[count - 1] and parts[0][1] == todo[count]  # round-robin


def test_shard_parsing() -> None:
    assert Shard.parse("2/8") == Shard(2, 8) and str(Shard(2, 8)) == "2/8"
    for bad in ("8/8", "1", "a/4", "-1/4", "1/0", ""):
        with pytest.raises(ValueError, match="Expected a shard I/N"):
            Shard.parse(bad)


def fake_row(c: Case, i: int) -> Row:
    """Made-up timings: warploom's eager and graph times vary with the case's index; every 50th is refused."""
    if i % 50 == 49:
        return Row(c, None, None, ok=False, failure="UnsupportedError: not today")
    torch_ms = c.flops / 5e11 + 0.01
    ours = Measurement(torch_ms / (0.6 + (i % 13) / 10), torch_ms / (0.7 + (i % 11) / 10), 1e-6)
    return Row(c, ours, Measurement(torch_ms, torch_ms, 1e-6), plan=f"128x{64 + i % 3 * 64}x64_s4")


def env(shard: str = "", **kw: Any) -> Environment:
    fields: dict[str, Any] = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0",
                              "date": "2026-12-01 10:00:00", "host": "h", "command": "warploom bench --suite zoo",
                              "suite": "zoo", "options": {"graph": True}, "copy_tbps": 3.0, "shard": shard}
    return Environment(**{**fields, **kw})


def zoo_results(todo: tuple[Case, ...]) -> Results:
    return Results(env(), tuple(fake_row(c, i) for i, c in enumerate(todo)))


def shard_results(whole: Results, shard: Shard, **kw: Any) -> Results:
    order = cases(Suite.ZOO)
    rows = tuple(r for r in whole.rows if order.index(r.case) % shard.count == shard.index)
    return Results(env(str(shard), **kw), rows)


def test_merge_restores_the_suite_order() -> None:
    whole = zoo_results(cases(Suite.ZOO)[:40])
    parts = [shard_results(whole, Shard(i, 3), date=f"2026-12-01 1{i}:00:00", copy_tbps=2.9 + i / 10)
             for i in (2, 0, 1)]
    merged = merge(parts)
    assert merged.rows == whole.rows and merged.env.shard == ""
    assert merged.env.date == "2026-12-01 10:00:00" and merged.env.copy_tbps == pytest.approx(3.0)
    partial = merge(parts[:2])
    assert partial.env.shard == "0/3,2/3" and partial.env.shards == (Shard(0, 3), Shard(2, 3))
    assert [r.case for r in partial.rows] == [r.case for r in whole.rows if whole.rows.index(r) % 3 != 1]
    assert Results.from_json(partial.to_json()) == partial


def test_merge_refuses_parts_of_different_runs() -> None:
    whole = zoo_results(cases(Suite.ZOO)[:12])
    a, b = shard_results(whole, Shard(0, 2)), shard_results(whole, Shard(1, 2))
    with pytest.raises(MergeError, match="each case in one part"):
        merge([a, a], ["a.json", "again.json"])
    with pytest.raises(MergeError, match="the device of a.json"):
        merge([a, shard_results(whole, Shard(1, 2), device="NVIDIA H200")], ["a.json", "b.json"])
    with pytest.raises(MergeError, match="the options"):
        merge([a, shard_results(whole, Shard(1, 2), options={"graph": False})])
    with pytest.raises(MergeError, match="distinct shards"):
        merge([a, Results(env("1/3"), b.rows)])
    with pytest.raises(MergeError, match="at least one"):
        merge([])


def test_results_validate_the_shard() -> None:
    data = zoo_results(cases(Suite.ZOO)[:3]).to_json()
    assert data["env"]["shard"] == ""
    for bad in ("3/3", "0/2,1/3", "half"):
        data["env"]["shard"] = bad
        with pytest.raises(ResultsFormatError, match="env: Expected"):
            Results.from_json(data)
    del data["env"]["shard"]  # a file from before shards: the whole suite
    assert Results.from_json(data).env.shard == ""


def test_zoo_report(tmp_path: Path) -> None:
    res = zoo_results(cases(Suite.ZOO, ops=(Op.MATMUL_BF16, Op.SCALED_MM_FP8_ROWWISE_FAST)))
    peaks = report.peaks_for(res.env)
    bf16 = report_zoo.summarize(res)[0]
    done = [r for r in res.rows[:len(ZOO)] if r.ok]
    assert bf16.op is Op.MATMUL_BF16 and bf16.ran == len(done) == len(ZOO) - 4 and bf16.failed == 4
    gm = math.exp(sum(math.log(r.torch.eager_ms / r.ours.eager_ms) for r in done if r.torch and r.ours) / len(done))
    assert bf16.geomean_ratio == pytest.approx(gm)
    worst = sorted(done, key=lambda r: r.torch.graph_ms / r.ours.graph_ms if r.torch and r.ours else 0)[:10]
    assert [r.case for r in bf16.worst] == [r.case for r in worst]
    md = report.markdown(res, peaks, plot="img/zoo.png")
    assert "![warploom bench zoo](img/zoo.png)" in md and "`random.Random(23)`" in md
    assert f"| matmul bf16 | {len(done)} of 224 | {gm:.3f}× |" in md
    table = md.split("### matmul bf16: the 10 worst")[1].split("###")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(lines) == 10 and lines[0].startswith(f"| 1 | {worst[0].case.m}×{worst[0].case.n}×{worst[0].case.k} |")
    assert lines[0].endswith(f"| {worst[0].plan} |") and "0.700×" in lines[0]  # the lowest graph ratio made up
    assert "Failed or mismatched: 8 of 448 rows" in md and "UnsupportedError: not today" in md
    assert len(md.splitlines()) < 80  # no table of every row
    png = report.plot(res, peaks, tmp_path / "img" / "zoo.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_cli_merges_shards_and_renders(tmp_path: Path) -> None:
    whole = zoo_results(cases(Suite.ZOO, ops=(Op.SCALED_MM_FP8_TENSORWISE,)))
    files = []
    for i in range(2):
        shard_results(whole, Shard(i, 2)).save(tmp_path / f"zoo-{i}.json")
        files.append(str(tmp_path / f"zoo-{i}.json"))
    out, png, md = tmp_path / "all.json", tmp_path / "zoo.png", tmp_path / "zoo.md"
    r = CliRunner().invoke(main, ["bench", "--merge", *files, "--out", str(out), "--plot", str(png), "--markdown",
                                  str(md)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert Results.load(out).rows == whole.rows and "224 rows of 2 files merged" in r.output
    assert png.read_bytes()[:4] == b"\x89PNG" and "fp8 tensorwise, fast accum: the 10 worst" in md.read_text()
    r = CliRunner().invoke(main, ["bench", "--merge", files[0], files[0], "--out", str(out)])
    assert r.exit_code == 2 and "each case in one part" in r.output
    for args in (["bench", files[0]], ["bench", "--merge", "--out", str(out)], ["bench", "--merge", files[0]]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "--merge a.json b.json ... --out all.json" in r.output


def test_cli_runs_only_its_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from warploom.benchsuite import run

    seen: list[Any] = []

    def fake_suite(todo: Any, opts: Any, out: Path, suite: str, con: Any) -> Results:
        seen.append((todo, opts, suite))
        return Results(env(opts.shard), tuple(fake_row(c, i) for i, c in enumerate(todo) if i % 50 != 49))

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(run, "run_suite", fake_suite)
    r = CliRunner().invoke(main, ["bench", "--suite", "zoo", "--shard", "3/8", "--out", str(tmp_path / "r.json")],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    todo, opts, suite = seen[0]
    assert suite == "zoo" and opts.shard == "3/8" and todo == Shard(3, 8).select(cases(Suite.ZOO))
    assert "zoo (shard 3/8): 168 cases" in r.output
    r = CliRunner().invoke(main, ["bench", "--suite", "zoo", "--shard", "8/8", "--out", str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "0 <= I < N" in r.output


def test_console_summary_of_a_zoo_run_is_over_every_shape(tmp_path: object) -> None:
    """`warploom bench --report` of a zoo run prints geomeans over every shape (the markdown's), not over the few
    large ones the other suites' summary counts."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from warploom.cli import main

    data = Path(__file__).parents[2] / "docs" / "data" / "zoo-0-1-of-8-2026-11-26-session22.json"
    rows = json.loads(data.read_text())["rows"]
    res = CliRunner().invoke(main, ["bench", "--report", str(data)], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "over every shape" in res.output
    ran = sum(1 for r in rows if r["op"] == "matmul_bf16")
    assert f"│ {ran} " in res.output.split("matmul bf16")[1][:20]
