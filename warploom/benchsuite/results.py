"""A benchmark run's results: rows of measurements and the environment they came from, to and from JSON.

Ratios are torch_ms / warploom_ms: above 1, warploom is faster. The JSON also carries the derived ratios and
TFLOP/s for readers of the raw file; loading recomputes them from the times.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from warploom.benchsuite.roofline import tflops
from warploom.benchsuite.shapes import Case, Group, Op, Shape, Shard, Suite, cases
from warploom.errors import WarploomError
from warploom.runtime.files import read_regular

FORMAT = "warploom-bench/1"
# The largest results file read: the zoo's 1,120 rows take about 1 MB; a larger file is refused, not read.
MAX_FILE_BYTES = 64 << 20
# Times in ms, from a nanosecond to 11 days: bounded so that every ratio of two times and every TFLOP/s rate the
# report draws from them is a finite positive float.
MIN_MS, MAX_MS = 1e-6, 1e9
MAX_TBPS = 1e6  # a copy bandwidth (TB/s) far past any device's, for the same reason
# The largest M, N or K read: far past any GEMM, small enough that 2MNK stays a finite float.
MAX_DIM = 2**40


class ResultsFormatError(WarploomError, ValueError):
    """A results file that is not what `warploom bench --out` writes."""

    def __init__(self, path: str, expected: str, got: str) -> None:
        super().__init__(f"{path}: expected {expected}, got {got}. Fix: pass a file written by `warploom bench --out`")


class MergeError(WarploomError, ValueError):
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

    def __post_init__(self) -> None:
        for name in ("eager_ms", "graph_ms"):
            ms = getattr(self, name)
            if name == "eager_ms" or ms is not None:
                _in_range(name, ms, MIN_MS, MAX_MS, "a time in ms")

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
        why the case did not finish or did not match ('' when ok). torch_note: how torch's contender differed
        from its usual call ('' when it did not; e.g. the bias added by a second kernel where cuBLASLt refused
        the fused one).
    """

    case: Case
    ours: Measurement | None
    torch: Measurement | None
    compiled: Measurement | None = None
    compile_s: float | None = None
    plan: str = ""
    ok: bool = True
    failure: str = ""
    torch_note: str = ""

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
        host; command: the command line; suite; options: the flags (compile, graph, ops, groups, shapes);
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
        if self.copy_tbps is not None:
            _in_range("copy_tbps", self.copy_tbps, 0, MAX_TBPS, "a bandwidth in TB/s", open_low=True)
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
            env = _env_from(_get(data, "env", "object", ""))
            rows = tuple(_row_from(r, f"rows[{i}]") for i, r in enumerate(_get(data, "rows", "array", "")))
        except ValueError as e:  # (a field's own message, or a dataclass's __post_init__)
            got = str(e)[:500]
            raise ResultsFormatError(source, "the fields of warploom.benchsuite.results", got) from None
        return Results(env, rows)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")  # written whole, then renamed: a killed run leaves the last save
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)

    @staticmethod
    def load(path: Path) -> Results:
        """The results in `path`; ResultsFormatError for anything else there: no file, a directory or FIFO (never
        opened blocking), a file over MAX_FILE_BYTES, not UTF-8 JSON, nesting too deep, an integer too long to
        parse, or fields that `save` does not write."""
        try:
            raw = read_regular(path, MAX_FILE_BYTES)
        except OSError as e:  # (NotRegular, FileNotFoundError, PermissionError)
            raise ResultsFormatError(str(path), f"a regular file of at most {MAX_FILE_BYTES >> 20} MiB",
                                     str(e)) from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # (UnicodeDecodeError, JSONDecodeError, a too-long int: ValueErrors)
            raise ResultsFormatError(str(path), "UTF-8 JSON", f"{type(e).__name__}: {str(e)[:200]}") from None
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
    if r.torch_note:  # (only where there is one: files before it read the same)
        out["torch_note"] = r.torch_note
    # Derived, for readers of the raw file only.
    out["derived"] = {"ratio": r.ratio, "graph_ratio": r.graph_ratio, "compile_ratio": r.compile_ratio,
                      "ours_tflops": r.tflops(r.ours), "torch_tflops": r.tflops(r.torch)}
    return out


def _m_json(m: Measurement | None) -> dict[str, Any] | None:
    return None if m is None else asdict(m)


# JSON kinds a field may hold; a trailing "?" also allows null. bool is no number here, though Python's bool is an int.
_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "number": (int, float), "integer": (int,), "bool": (bool,),
                                       "object": (dict,), "array": (list,)}


def _get(d: Any, key: str, kind: str, where: str) -> Any:
    """`d[key]`, which must hold JSON of `kind`; ValueError naming the field (`where.key`) otherwise."""
    name = f"{where}.{key}" if where else key
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"{name}: missing" if isinstance(d, dict) else f"{where}: expected an object, got {d!r:.80}")
    v = d[key]
    optional = kind.endswith("?")
    if v is None and optional:
        return None
    types = _KINDS[kind.rstrip("?")]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
        raise ValueError(f"{name}: expected a JSON {kind.rstrip('?')}{' or null' if optional else ''}, got {v!r:.80}")
    return v


def _in_range(name: str, v: float, lo: float, hi: float, what: str, *, open_low: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v if open_low else lo <= v) or not v <= hi:
        bounds = f"{'(' if open_low else '['}{lo:g}, {hi:g}]" if isinstance(hi, float) else f"[{lo}, {hi}]"
        raise ValueError(f"{name}: expected {what} in {bounds}, got {v!r:.80}")


def _env_from(d: dict[str, Any]) -> Environment:
    """The environment's fields, each of its type; those with defaults may be missing (older files), no others."""
    kinds = {"options": "object", "copy_tbps": "number?"}  # every other field is a string
    names = {f.name for f in fields(Environment)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"env: unknown fields {unknown}")
    required = {f.name for f in fields(Environment) if f.default is MISSING and f.default_factory is MISSING}
    got = {k: _get(d, k, kinds.get(k, "string"), "env") for k in names if k in required or k in d}
    if got.get("copy_tbps") is not None:
        got["copy_tbps"] = _float("env.copy_tbps", got["copy_tbps"])
    for k, v in got["options"].items() if "options" in got else ():  # flags: scalars or lists of scalars
        items = v if isinstance(v, list) else [v]
        if not all(x is None or isinstance(x, (str, int, float)) for x in items):
            raise ValueError(f"env.options.{k}: expected a JSON scalar or an array of scalars, got {v!r:.80}")
    try:
        return Environment(**got)
    except ValueError as e:
        raise ValueError(f"env: {e}") from None


def _m_from(d: Any, where: str) -> Measurement | None:
    if d is None:
        return None
    eager, graph = _get(d, "eager_ms", "number", where), _get(d, "graph_ms", "number?", where)
    err = _get(d, "err", "number", where)  # (NaN too: an output of NaNs has a NaN error, and the writer keeps it)
    times = _float(f"{where}.eager_ms", eager), None if graph is None else _float(f"{where}.graph_ms", graph)
    try:
        return Measurement(*times, _float(f"{where}.err", err))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _float(name: str, v: int | float) -> float:
    try:
        return float(v)
    except OverflowError:  # (an integer of hundreds of digits)
        raise ValueError(f"{name}: expected a number a float holds, got an integer of {len(str(v))} digits") from None


def _opt(x: Any) -> float | None:
    return None if x is None else float(x)


def _row_from(d: Any, where: str) -> Row:
    m, n, k = (_get(d, x, "integer", where) for x in "mnk")
    for x, v in zip("mnk", (m, n, k), strict=True):
        _in_range(f"{where}.{x}", v, 1, MAX_DIM, "a dimension")
    shape = Shape(m, n, k, Group(_get(d, "group", "string", where)), _get(d, "name", "string", where))
    ours, theirs, compiled = (_m_from(_get(d, who, "object?", where), f"{where}.{who}")
                              for who in ("ours", "torch", "compiled"))
    compile_s = _get(d, "compile_s", "number?", where)
    if compile_s is not None:
        _in_range(f"{where}.compile_s", compile_s, 0, MAX_MS / 1e3, "a time in s")
    note = _get(d, "torch_note", "string", where) if "torch_note" in d else ""  # (optional: newer files only)
    return Row(Case(Op(_get(d, "op", "string", where)), shape), ours, theirs, compiled, _opt(compile_s),
               _get(d, "plan", "string", where), _get(d, "ok", "bool", where), _get(d, "failure", "string", where),
               note)
