"""A benchmark run's results: rows of measurements and the environment they came from, to and from JSON.

Ratios are torch_ms / warploom_ms: above 1, warploom is faster. The JSON also carries the derived ratios and
TFLOP/s for readers of the raw file; loading recomputes them from the times.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from warploom.benchsuite.roofline import tflops
from warploom.benchsuite.shapes import Case, Group, Op, Shape, Shard, Suite, cases

FORMAT = "warploom-bench/1"


class ResultsFormatError(ValueError):
    """A results file that is not what `warploom bench --out` writes."""

    def __init__(self, path: str, expected: str, got: str) -> None:
        super().__init__(f"{path}: expected {expected}, got {got}. Fix: pass a file written by `warploom bench --out`")


class MergeError(ValueError):
    """Results that are not parts of one run (`warploom bench --merge`)."""

    def __init__(self, source: str, expected: str, got: str) -> None:
        super().__init__(f"{source}: expected {expected}, got {got}. Fix: merge the shards of one "
                         "`warploom bench --suite S --shard I/N` command line, each shard once")


@dataclass(frozen=True)
class Measurement:
    """One contender's time and accuracy on one case.

    Attributes:
        eager_ms: median time of a Python call (host overhead included, as a user sees it).
        graph_ms: median time per call replaying a CUDA graph of calls (kernel time only), or None when not
            measured.
        err: scale-free error 1 - 2Σxy/Σ(x²+y²) of the output against the fp32 reference.
    """

    eager_ms: float
    graph_ms: float | None
    err: float

    @property
    def ms(self) -> float:
        """The time tables and plots use: the CUDA-graph time where measured, else the eager one."""
        return self.graph_ms if self.graph_ms is not None else self.eager_ms


@dataclass(frozen=True)
class Row:
    """One case's outcome.

    Attributes:
        case: what ran. ours / torch / compiled: warploom, torch eager, and torch.compile of the same torch
        function (None when not run, or when the case failed first). compile_s: torch.compile's first call.
        plan: warploom's schedule (Plan.short()). ok: warploom's output matched (see run.check). failure:
        why the case did not finish or did not match ('' when ok).
    """

    case: Case
    ours: Measurement | None
    torch: Measurement | None
    compiled: Measurement | None = None
    compile_s: float | None = None
    plan: str = ""
    ok: bool = True
    failure: str = ""

    @property
    def ratio(self) -> float | None:
        """torch eager / warploom eager."""
        return _ratio(self.torch, self.ours, graph=False)

    @property
    def graph_ratio(self) -> float | None:
        return _ratio(self.torch, self.ours, graph=True)

    @property
    def compile_ratio(self) -> float | None:
        """torch.compile / warploom, CUDA-graph times where both were measured, else eager."""
        if self.compiled is None or self.ours is None:
            return None
        graph = self.compiled.graph_ms is not None and self.ours.graph_ms is not None
        return _ratio(self.compiled, self.ours, graph=graph)

    @property
    def headline_ratio(self) -> float | None:
        """The graph ratio where measured, else the eager one: kernel against kernel when we can."""
        return self.graph_ratio if self.graph_ratio is not None else self.ratio

    def tflops(self, who: Measurement | None) -> float | None:
        return None if who is None else tflops(self.case, who.ms)


def _ratio(theirs: Measurement | None, ours: Measurement | None, *, graph: bool) -> float | None:
    if theirs is None or ours is None:
        return None
    if graph:
        if theirs.graph_ms is None or ours.graph_ms is None:
            return None
        return theirs.graph_ms / ours.graph_ms
    return theirs.eager_ms / ours.eager_ms


@dataclass(frozen=True)
class Environment:
    """Where and how the run was made.

    Attributes:
        device: torch's name of the GPU; torch, triton: versions; date: local time of the run's start;
        host; command: the command line; suite; options: the flags (compile, graph, ops, groups);
        copy_tbps: measured device-to-device copy bandwidth (bytes read + written), or None;
        shard: ``I/N`` for one shard of the suite (``--shard``), shards joined by commas after a merge,
        '' for the whole suite (files from before shards have none: '').
    """

    device: str
    torch: str
    triton: str
    date: str
    host: str = ""
    command: str = ""
    suite: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    copy_tbps: float | None = None
    shard: str = ""

    def __post_init__(self) -> None:
        counts = {s.count for s in self.shards}
        if len(counts) > 1:
            raise ValueError(f"Expected shards of one count but got {self.shard!r}")

    @property
    def shards(self) -> tuple[Shard, ...]:
        """The shards this run holds; () for the whole suite."""
        return tuple(Shard.parse(s) for s in self.shard.split(",")) if self.shard else ()


@dataclass(frozen=True)
class Results:
    """A run: its environment and its rows, in the order they ran."""

    env: Environment
    rows: tuple[Row, ...]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "env": asdict(self.env), "rows": [_row_json(r) for r in self.rows]}

    @staticmethod
    def from_json(data: Any, source: str = "<json>") -> Results:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = f"format {data.get('format')!r}" if isinstance(data, dict) else type(data).__name__
            raise ResultsFormatError(source, f"a JSON object with format {FORMAT!r}", got)
        try:
            env = Environment(**data["env"])
            rows = tuple(_row_from(r) for r in data["rows"])
        except (KeyError, TypeError, ValueError) as e:
            got = f"{type(e).__name__}: {e}"
            raise ResultsFormatError(source, "the fields of warploom.benchsuite.results", got) from None
        return Results(env, rows)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")  # written whole, then renamed: a killed run leaves the last save
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> Results:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ResultsFormatError(str(path), "JSON", f"a parse error ({e})") from None
        return Results.from_json(data, str(path))


def merge(parts: Sequence[Results], sources: Sequence[str] | None = None) -> Results:
    """One run from the shards (or any disjoint parts) of one: same suite, device and options, no case twice.

    Rows come back in the suite's case order (shards interleave); the environment is the first part's, with
    the earliest date, the mean measured copy bandwidth and the shards joined.
    """
    names = list(sources) if sources is not None else [f"part {i}" for i in range(len(parts))]
    if not parts:
        raise MergeError("--merge", "at least one results file", "none")
    first = parts[0].env
    seen: dict[Case, str] = {}
    for part, name in zip(parts, names, strict=True):
        env = part.env
        for what, ours, theirs in (("suite", env.suite, first.suite), ("device", env.device, first.device),
                                   ("options", env.options, first.options)):
            if ours != theirs:
                raise MergeError(name, f"the {what} of {names[0]} ({theirs!r})", repr(ours))
        for r in part.rows:
            if r.case in seen:
                raise MergeError(name, "each case in one part", f"{r.case.short()} also in {seen[r.case]}")
            seen[r.case] = name
    shards = [s for p in parts for s in p.env.shards]
    if len({s.count for s in shards}) > 1 or len(set(shards)) < len(shards):
        raise MergeError("--merge", "distinct shards I/N of one N", ", ".join(map(str, shards)))
    whole = bool(shards) and len(shards) == shards[0].count  # every shard: the whole suite again
    order = _order(first.suite)
    rows = sorted((r for p in parts for r in p.rows), key=lambda r: order.get(r.case, len(order)))
    bw = [p.env.copy_tbps for p in parts if p.env.copy_tbps]
    env = replace(first, date=min(p.env.date for p in parts), copy_tbps=sum(bw) / len(bw) if bw else None,
                  shard="" if whole else ",".join(str(s) for s in sorted(shards, key=lambda s: s.index)))
    return Results(env, tuple(rows))


def _order(suite: str) -> dict[Case, int]:
    """Each case's place in the suite (empty for a suite this version does not know: rows keep their order)."""
    known = {s.value for s in Suite}
    return {c: i for i, c in enumerate(cases(Suite(suite)))} if suite in known else {}


def _row_json(r: Row) -> dict[str, Any]:
    s = r.case.shape
    out: dict[str, Any] = {
        "op": r.case.op.value, "m": s.m, "n": s.n, "k": s.k, "group": s.group.value, "name": s.name,
        "ours": _m_json(r.ours), "torch": _m_json(r.torch), "compiled": _m_json(r.compiled),
        "compile_s": r.compile_s, "plan": r.plan, "ok": r.ok, "failure": r.failure,
    }
    # Derived, for readers of the raw file only.
    out["derived"] = {"ratio": r.ratio, "graph_ratio": r.graph_ratio, "compile_ratio": r.compile_ratio,
                      "ours_tflops": r.tflops(r.ours), "torch_tflops": r.tflops(r.torch)}
    return out


def _m_json(m: Measurement | None) -> dict[str, Any] | None:
    return None if m is None else asdict(m)


def _m_from(d: dict[str, Any] | None) -> Measurement | None:
    return None if d is None else Measurement(float(d["eager_ms"]), _opt(d["graph_ms"]), float(d["err"]))


def _opt(x: Any) -> float | None:
    return None if x is None else float(x)


def _row_from(d: dict[str, Any]) -> Row:
    shape = Shape(int(d["m"]), int(d["n"]), int(d["k"]), Group(d["group"]), str(d["name"]))
    return Row(Case(Op(d["op"]), shape), _m_from(d["ours"]), _m_from(d["torch"]), _m_from(d["compiled"]),
               _opt(d["compile_s"]), str(d["plan"]), bool(d["ok"]), str(d["failure"]))
