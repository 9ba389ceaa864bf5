"""Read the sanitizer sweep's logs (`scripts/gpu.sh sanitize`) and sort every report into a kind, by the source lines
it names; a kind counts as explained only where one of the control kernels (scripts/sanitize_control.py: Gluon with
no warploom schedule in it) produced a report of that kind under the same tool in the same run.

    python3 scripts/sanitize_triage.py OUT_DIR [--sources DIR ...] [--markdown FILE]

Exit status 1 if any run (case or control) has a report that is not explained, a record it could not parse, a wrong
result or no result line (each program prints "<name>: ok" or "WRONG"), or no summary line (a crash).

What this cannot tell: a real race of an explained kind. racecheck names the two accesses of a ring race in whichever
order it saw them, so the order cannot separate a ring handed over correctly from one whose consumer released it
early; the rings' mbarrier protocol is checked instead by the verifier and by the simulator and its explorer, which
model mbarrier phases exactly.

The kinds (each one a pattern the tools are known to flag in correct kernels, the control names which):
- `dispatch`: racecheck, both accesses on the kernel's `def` line or its `gl.warp_specialize(` line: Triton's dispatch
  of the partitions (a state word past the kernel's allocations, named barrier 1), control `warp_specialize`.
- `ring-cp.async`: racecheck, a cp.async copy into a ring against a `.load` of the same ring: the ring is handed
  over by mbarriers (cp.async's arrival, then a one-thread arrival after a warpgroup barrier), which racecheck does
  not follow; control `cp_async_mbarrier`.
- `ring-store`: the same with plain stores and a thread barrier before the arrival; control `store_mbarrier`.
- `cp.async-arrive`: synccheck's "Barrier overflow" on `async_copy.mbarrier_arrive` (the tx-count arrival Triton
  lowers it to); control `cp_async_mbarrier`.

Under some drivers synccheck also aborts the kernel after those reports ("unspecified launch failure": the program
prints no result line). Such a run passes only where (a) every report is of a kind whose control, in the same run,
reported it and was aborted likewise, (b) the same case computed the right result under memcheck, which does not
abort it, and (c) every record its summary counts was read (those reports, and the abort's own "Program hit ...
unspecified launch failure" at the host's next call): a record it cannot read fails it, as it fails a run that
finished; its verdict says so. An abort with any other report, without an aborted control, or without a right
memcheck result fails.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

LOG = re.compile(r"^(sanitize|control)-(memcheck|racecheck|synccheck)-(\w+)\.log$")
RACE = re.compile(r"Race reported between (\w+) access at \S+ in (\S+):(\d+)")
RACE_AND = re.compile(r"and (\w+) access at \S+ in (\S+):(\d+) \[(\d+) hazards?\]")
AT = re.compile(r"^=+\s+at \S+ in (\S+):(\d+)")
BARRIER = re.compile(r"Barrier error detected\. ([^.]+)\.")
SUMMARY = re.compile(r"(?:ERROR SUMMARY: (\d+) errors?|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, "
                     r"(\d+) warnings?\))")
RING = re.compile(r"\b(\w*ring)\b")
# (scripts/sanitize.py's "<case>: ok error ..." and the controls' "<name> control: ok")
RESULT = re.compile(r"^\w+(?: control)?: (ok|WRONG)\b")
ABORT = "unspecified launch failure"  # (the CUDA error a kernel the tool stopped raises at the next synchronize)
CONTROL_OF = {("racecheck", "dispatch"): "warp_specialize", ("racecheck", "ring-cp.async"): "cp_async_mbarrier",
              ("racecheck", "ring-store"): "store_mbarrier", ("synccheck", "cp.async-arrive"): "cp_async_mbarrier"}


@dataclass(frozen=True)
class Report:
    """One record of a log: its kind ("unexplained" where no pattern fits) and how many hazards or errors it
    stands for."""

    kind: str
    count: int
    where: str


class Sources:
    """The generated kernels' and the controls' source files, by base name (the logs name files that way)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.files: dict[str, Path] = {}
        for d in dirs:
            for root, _, names in os.walk(d):
                for n in names:
                    if n.endswith(".py"):
                        self.files.setdefault(n, Path(root) / n)
        self._lines: dict[str, list[str]] = {}

    def lines(self, name: str) -> list[str]:
        if name not in self._lines:
            path = self.files.get(os.path.basename(name))
            self._lines[name] = path.read_text().splitlines() if path else []
        return self._lines[name]

    def line(self, name: str, no: int) -> str:
        lines = self.lines(name)
        return lines[no - 1] if 0 < no <= len(lines) else ""

    def dispatch_lines(self, name: str) -> set[int]:
        """The `gl.warp_specialize(` lines and the `def` lines of the functions that call it."""
        out: set[int] = set()
        last_def = 0
        for i, text in enumerate(self.lines(name), 1):
            if re.match(r"\s*def \w+\(", text):
                last_def = i
            if "gl.warp_specialize(" in text:
                out |= {i, last_def}
        return out


def _ring_write(text: str) -> tuple[str, str] | None:
    """(ring, how) if the line writes a ring: a cp.async copy or a plain store."""
    ring = RING.search(text.split("(", 1)[-1] if "async" in text else text)
    if ring is None:
        return None
    if re.search(r"async_copy_global_to_shared\(|async_load\(|cp_async\(", text):  # (the control's alias)
        return ring.group(1), "cp.async"
    if f"{ring.group(1)}.index(" in text and ".store(" in text or re.search(rf"\b{ring.group(1)}\.store\(", text):
        return ring.group(1), "store"
    return None


def race_kind(src: Sources, a: tuple[str, str, int], b: tuple[str, str, int]) -> str:
    (_, fa, la), (_, fb, lb) = a, b
    if fa == fb and {la, lb} <= src.dispatch_lines(fa) and src.dispatch_lines(fa):
        return "dispatch"
    for (wa, fw, lw), (ra, fr, lr) in ((a, b), (b, a)):
        if wa != "Write" or ra != "Read" or fw != fr:
            continue
        write, read = _ring_write(src.line(fw, lw)), src.line(fr, lr)
        if write and re.search(rf"\b{write[0]}\b", read) and ".load(" in read:
            return f"ring-{write[1]}"
    return "unexplained"


@dataclass(frozen=True)
class Log:
    """What one log says: its reports, how many records it printed that were parsed (`records`), its summary's
    count (None: no summary line, the program did not finish), the program's own verdict line (`result`: "ok",
    "WRONG", or None where it printed none) and whether its kernel was aborted (`aborted`: the tool stopped it)."""

    reports: list[Report]
    records: int
    total: int | None
    result: str | None
    aborted: bool = False
    host_aborts: int = 0  # (the abort's own "Program hit ... unspecified launch failure" records, in `total` too)


def parse(path: Path, tool: str, src: Sources) -> Log:
    """A log's reports, records, summary count and the program's verdict."""
    reports: list[Report] = []
    total, result, records, aborted, host_aborts = None, None, 0, False, 0
    first: tuple[str, str, int] | None = None
    barrier: str | None = None
    for line in path.read_text(errors="replace").splitlines():
        if m := RACE.search(line):
            first = (m.group(1), m.group(2), int(m.group(3)))
            records += 1
        elif (m := RACE_AND.search(line)) and first is not None:
            other = (m.group(1), m.group(2), int(m.group(3)))
            reports.append(Report(race_kind(src, first, other), int(m.group(4)),
                                  f"{first[1]}:{first[2]} / {other[1]}:{other[2]}"))
        elif m := BARRIER.search(line):
            barrier = m.group(1)
        elif (m := AT.search(line)) and tool != "racecheck":
            text = src.line(m.group(1), int(m.group(2)))
            explained = tool == "synccheck" and barrier == "Barrier overflow" and "mbarrier_arrive(" in text
            reports.append(Report("cp.async-arrive" if explained else "unexplained", 1,
                                  f"{m.group(1)}:{m.group(2)} {barrier or ''}".strip()))
            barrier = None
            records += 1
        elif m := SUMMARY.search(line):
            total = int(m.group(1)) if m.group(1) is not None else int(m.group(2)) + int(m.group(3))
        elif m := RESULT.match(line):
            result = m.group(1)
        elif ABORT in line:
            aborted = True
            if "Program hit " in line:
                host_aborts += 1
    return Log(reports, records, total, result, aborted, host_aborts)


def _tool_abort(log: Log, kinds: Counter[str]) -> bool:
    """The tool stopped the kernel after reports all of known kinds: no result line, the abort's CUDA error."""
    return log.result is None and log.aborted and bool(kinds) and "unexplained" not in kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the sweep's output folder (sanitize-*.log, control-*.log, sanitize.tsv)")
    ap.add_argument("--sources", type=Path, nargs="*", default=None,
                    help="folders holding the kernels' sources (default: $WARPLOOM_CACHE_DIR and scripts/)")
    ap.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    args = ap.parse_args()
    dirs = args.sources if args.sources is not None else [
        Path(os.environ.get("WARPLOOM_CACHE_DIR", "/tmp/warploom-cache")), Path(__file__).parent]
    src = Sources(dirs)
    exits = {}
    tsv = args.out / "sanitize.tsv"
    if tsv.exists():
        for row in tsv.read_text().splitlines():
            case, tool, code = row.split("\t")
            exits[(case, tool)] = int(code)
    seen: dict[tuple[str, str], set[str]] = {}
    aborts: dict[tuple[str, str], set[str]] = {}  # (tool, control): the kinds it reported before the tool aborted it
    memcheck: dict[str, str | None] = {}  # case: its result line under memcheck
    rows = []
    for path in sorted(args.out.iterdir()):
        m = LOG.match(path.name)
        if not m:
            continue
        role, tool, name = m.groups()
        log = parse(path, tool, src)
        kinds: Counter[str] = Counter()
        for r in log.reports:
            kinds[r.kind] += r.count
        if role == "control" and log.result == "ok":  # (a control that computed wrongly explains nothing)
            seen.setdefault((tool, name), set()).update(k for k in kinds if k != "unexplained")
        if role == "control" and _tool_abort(log, kinds):
            seen.setdefault((tool, name), set()).update(kinds)
            aborts.setdefault((tool, name), set()).update(kinds)
        if role == "sanitize" and tool == "memcheck":
            memcheck[name] = log.result
        rows.append((role, name, tool, kinds, log, exits.get((name, tool))))
    bad = 0
    table = ["| case | tool | reports by kind | unexplained | verdict |", "|---|---|---|---|---|"]
    for role, name, tool, kinds, log, code in rows:
        explained = {k: n for k, n in kinds.items()
                     if k != "unexplained" and k in seen.get((tool, CONTROL_OF.get((tool, k), "")), set())}
        unexplained = sum(kinds.values()) - sum(explained.values())
        control_aborts = all(k in aborts.get((tool, CONTROL_OF.get((tool, k), "")), set()) for k in kinds)
        if log.total is None:
            verdict = "no summary (crashed or timed out)"
        elif role == "control" and _tool_abort(log, kinds):
            verdict = "control (aborted by the tool)"
        elif (role == "sanitize" and _tool_abort(log, kinds) and code in (None, 99) and not unexplained
              and control_aborts and memcheck.get(name) == "ok" and log.records + log.host_aborts == log.total):
            # (every record of the summary read: the explained reports and the abort's own host-side error)
            verdict = "aborted by the tool as its control was (right under memcheck)"
        elif log.result != "ok" or code not in (None, 0, 99):
            # (the result line, not the exit code: compute-sanitizer's --error-exitcode replaces the program's own
            # whenever it reports anything, which every warp-specialized kernel gets under racecheck)
            verdict = "WRONG RESULT" if log.result == "WRONG" else f"no result line (exit code {code})"
        elif role == "control":
            verdict = "control"
        elif log.records != log.total:
            verdict = f"REPORT ({log.total - log.records} records not parsed)"
        elif unexplained:
            verdict = "REPORT"
        else:
            verdict = "clean" if not kinds else "explained by the controls"
        if verdict not in ("clean", "explained by the controls", "control", "control (aborted by the tool)",
                           "aborted by the tool as its control was (right under memcheck)"):
            bad += 1
        shown = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
        table.append(f"| {role}:{name} | {tool} | {shown} | {unexplained} | {verdict} |")
        where: Counter[str] = Counter()
        for r in log.reports:
            if r.kind == "unexplained" and role == "sanitize":
                where[r.where] += r.count
        table += [f"|  | | unexplained at {w} | {n} | |" for w, n in where.most_common()]
    text = "\n".join(table)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    print(f"\n{bad} run(s) with a report the controls do not explain, a wrong result or a crash")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
