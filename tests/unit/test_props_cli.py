"""Property: a random argument vector for `warploom sim`, `warploom demo` and `warploom bench --report/--merge`
ends in success, a usage error (exit 2) or a deliberate failure message (sys.exit, exit 1); never a traceback.

Values are drawn from valid ones (sizes capped at 64, --max-states at 300, so nothing simulates long) and
mistakes (zero, negative, huge, non-numeric, missing directories, files where directories go, damaged results
files from test_benchsuite_report's RESULTS_CORRUPTIONS). (`warploom plan` does not exist: no command to test.)
"""

from __future__ import annotations

import collections
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import event, given
from hypothesis import strategies as st
from props import examples, figures
from test_benchsuite_report import RESULTS_CORRUPTIONS, synthetic

from warploom.cli import main

COUNTS: collections.Counter[str] = collections.Counter()
_figures = figures("CLI argument vectors", COUNTS)

_GOOD_SIZE = st.integers(1, 48).map(str)
SIZE = st.one_of(_GOOD_SIZE, _GOOD_SIZE, _GOOD_SIZE, st.sampled_from(["0", "-5", "abc", "", "1.5", "9" * 30, "0x10"]))
BAD = st.sampled_from(["0", "-1", "abc", "", "nan", "inf", "1e400", "9" * 30])


def _paths(root: Path) -> dict[str, Path]:
    """Places a path option may name: good ones and mistakes, under `root`."""
    (root / "a_file").write_text("x")
    (root / "a_dir").mkdir(exist_ok=True)
    good = root / "good.json"
    synthetic().save(good)
    return {"png": root / "t.png", "svg": root / "t.svg", "txt": root / "t.txt", "missing dir": root / "no" / "t.png",
            "under a file": root / "a_file" / "t.png", "a dir": root / "a_dir", "a file": root / "a_file",
            "md": root / "r.md", "results": good, "out": root / "out.json", "new dir": root / "new"}


def option(name: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    return values.map(lambda v: [name, v])


@st.composite
def argv(draw: st.DrawFn, root: Path) -> list[str]:
    paths = {k: str(v) for k, v in _paths(root).items()}
    path = st.sampled_from(sorted(paths.values()))
    command = draw(st.sampled_from(["sim", "demo", "bench --report", "bench --merge"]))
    opts: list[st.SearchStrategy[list[str]]] = [st.sampled_from([["--bogus"], ["stray"]])]
    if command in ("sim", "demo"):
        opts += [option(f"--{d}", SIZE) for d in "mnk"]
        opts += [option("--dtype", st.sampled_from(["bf16", "fp16", "fp8", "fp4"])),
                 option("--scales", st.sampled_from(["rowwise", "tensorwise", "blockwise", "blockwise-1x128", "mx",
                                                     "none"])),
                 st.sampled_from([["--fast-accum"], ["--no-fast-accum"]]), option("--timeline", path)]
    if command == "sim":
        opts += [option("--stages", st.integers(1, 6).map(str) | BAD), option("--seed", st.integers(0, 2**63 - 1)
                                                                              .map(str) | BAD | st.just(str(2**63))),
                 st.just(["--explore"]), option("--max-states", st.integers(1, 300).map(str) | BAD)]
    if command == "demo":
        opts += [option("--out-dir", path), option("--target", st.sampled_from(["sm_90a", "sm_100a", "gfx1250",
                                                                                  "sm_80"]))]
    if command.startswith("bench"):
        opts += [option("--plot", path), option("--markdown", path),
                 option("--bandwidth", st.floats(1e-3, 1e3).map(str) | BAD), st.just(["--out", paths["out"]])]
    chosen = draw(st.lists(st.sampled_from(opts), max_size=4))
    args = command.split()
    if command.startswith("bench"):
        args.append(draw(path))
        if command == "bench --merge":
            args += ["--out", paths["out"]]
    for o in chosen:
        args += draw(o)
    if "--explore" in args and "--max-states" not in args:
        args += ["--max-states", "200"]
    return args


def _corrupt_results(root: Path, name: str) -> None:
    path = root / "good.json"
    synthetic().save(path)
    RESULTS_CORRUPTIONS[name][0](path)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@examples(120)
@given(data=st.data())
def test_a_random_command_line_is_a_usage_error_or_runs(root: Path, data: st.DataObject) -> None:
    args = data.draw(argv(root), label="argv")
    damaged = data.draw(st.none() | st.sampled_from(sorted(RESULTS_CORRUPTIONS)), label="results file damage")
    if damaged is not None and args[0] == "bench":
        _corrupt_results(root, damaged)
    event(" ".join(args[:2]) if args[0] == "bench" else args[0])
    COUNTS["tried"] += 1
    r = CliRunner().invoke(main, args)
    e = r.exception
    if r.exit_code == 0:
        COUNTS["ran"] += 1
    elif r.exit_code == 2:
        COUNTS["usage error"] += 1
    elif isinstance(e, SystemExit) and r.exit_code == 1:
        COUNTS["failure message"] += 1  # (sys.exit("..."): the simulation found a problem)
    else:
        COUNTS["crash"] += 1
        assert isinstance(e, (SystemExit, click.ClickException)), f"{args}: exit {r.exit_code}, {e!r}\n{r.output}"
