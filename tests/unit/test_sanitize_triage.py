"""scripts/sanitize_triage.py (the GPU sanitizer sweep's verdict): each report is sorted by the source lines it names,
a kind counts as explained only where a control kernel reproduced it under the same tool in the same run, and
anything else (another line, a wrong result, a crash) fails the sweep. CPU only: the logs are written here in the
format compute-sanitizer prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sanitize_triage.py"

KERNEL = """\
@gluon.jit
def scales(sa_ring, ready, sa_ptr):
    async_copy.async_copy_global_to_shared(sa_ring.index(p % STAGES), sa_ptr + idx)
    async_copy.mbarrier_arrive(ready.index(p % STAGES))
    sb_ring.index(q % 2).store(bits)


@gluon.jit
def consumer(sa_ring):
    sa = sa_ring.index(c % STAGES).load(layout)
    sb = sb_ring.index(q % 2).load(layout)
    c_smem.store(acc)
    other = c_smem.load(layout)


@gluon.jit
def kern(a_desc):
    sa_ring = gl.allocate_shared_memory(gl.float32, [4, 128], layout)
    gl.warp_specialize([
        (consumer, (sa_ring,)),
    ], [1], [24])
"""
# line numbers in KERNEL
CP_ASYNC, ARRIVE, STORE, LOAD_SA, LOAD_SB, C_STORE, C_LOAD, DEF_KERN, WS = 3, 4, 5, 10, 11, 12, 13, 17, 19
HEAD = "========= COMPUTE-SANITIZER\n"


OK = "case: ok error 1.00e-06\n"


def race(pairs: list[tuple[str, int, str, int, int]], f: str = "wl_k.py", result: str = OK) -> str:
    """A racecheck log: one record per (first access, its line, other access, its line, hazards), then the
    program's verdict line."""
    out = HEAD + result
    for a, la, b, lb, n in pairs:
        out += (f"========= Error: Race reported between {a} access at kern+0x10 in {f}:{la}\n"
                f"=========     and {b} access at kern+0x20 in {f}:{lb} [{n} hazards]\n=========\n")
    return out + f"========= RACECHECK SUMMARY: {len(pairs)} hazard displayed ({len(pairs)} errors, 0 warnings)\n"


def sync(line: int, n: int, f: str = "wl_k.py", result: str = OK) -> str:
    rec = (f"========= Barrier error detected. Barrier overflow.\n=========     at kern+0x2480 in {f}:{line}\n"
           "=========     by thread (320,0,0) in block (12,0,0)\n=========\n")
    return HEAD + rec * n + result + f"========= ERROR SUMMARY: {n} errors\n"


CLEAN = HEAD + OK + "========= ERROR SUMMARY: 0 errors\n"
CONTROLS = {
    "control-racecheck-warp_specialize.log": race([("Read", DEF_KERN, "Write", WS, 3)]),
    "control-racecheck-cp_async_mbarrier.log": race([("Write", CP_ASYNC, "Read", LOAD_SA, 9)]),
    "control-racecheck-store_mbarrier.log": race([("Write", STORE, "Read", LOAD_SB, 9)]),
    "control-synccheck-cp_async_mbarrier.log": sync(ARRIVE, 2),
}


def triage(tmp_path: Path, logs: dict[str, str], codes: dict[tuple[str, str], int] | None = None,
           controls: dict[str, str] | None = None) -> tuple[int, str]:
    out, src = tmp_path / "out", tmp_path / "src"
    out.mkdir()
    src.mkdir()
    (src / "wl_k.py").write_text(KERNEL)
    for name, text in {**(CONTROLS if controls is None else controls), **logs}.items():
        (out / name).write_text(text)
    rows = []
    for name in logs:
        _, tool, case = name[: -len(".log")].split("-", 2)
        rows.append(f"{case}\t{tool}\t{(codes or {}).get((case, tool), 0)}")
    (out / "sanitize.tsv").write_text("\n".join(rows) + "\n")
    r = subprocess.run([sys.executable, str(SCRIPT), str(out), "--sources", str(src)], capture_output=True, text=True,
                       check=False)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, r.stdout


def test_clean_and_explained_reports_pass(tmp_path: Path) -> None:
    code, text = triage(tmp_path, {
        "sanitize-memcheck-a.log": CLEAN,
        "sanitize-racecheck-a.log": race([
            ("Read", DEF_KERN, "Write", DEF_KERN, 7), ("Read", WS, "Write", DEF_KERN, 2),
            ("Write", CP_ASYNC, "Read", LOAD_SA, 40), ("Read", LOAD_SB, "Write", STORE, 5)]),
        "sanitize-synccheck-a.log": sync(ARRIVE, 3),
    })
    assert code == 0, text
    explained = "| 0 | explained by the controls |"
    assert f"| sanitize:a | racecheck | dispatch 9, ring-cp.async 40, ring-store 5 {explained}" in text
    assert "| sanitize:a | synccheck | cp.async-arrive 3 | 0 | explained by the controls |" in text
    assert "| sanitize:a | memcheck | none | 0 | clean |" in text


@pytest.mark.parametrize("log,where", [
    (race([("Write", C_STORE, "Read", C_LOAD, 4)]), f"wl_k.py:{C_STORE} / wl_k.py:{C_LOAD}"),  # not a ring
    (race([("Write", CP_ASYNC, "Read", LOAD_SB, 4)]), f"wl_k.py:{CP_ASYNC} / wl_k.py:{LOAD_SB}"),  # another ring
    (race([("Read", DEF_KERN, "Write", C_STORE, 4)]), f"wl_k.py:{DEF_KERN} / wl_k.py:{C_STORE}"),  # half dispatch
    (race([("Read", DEF_KERN, "Write", WS, 4)], f="wl_other.py"), "wl_other.py"),  # a source we do not have
], ids=["not-a-ring", "other-ring", "half-dispatch", "no-source"])
def test_other_races_fail_and_are_located(tmp_path: Path, log: str, where: str) -> None:
    code, text = triage(tmp_path, {"sanitize-racecheck-a.log": log})
    assert code == 1
    assert "| 4 | REPORT |" in text and f"unexplained at {where}" in text


def test_a_kind_counts_only_where_its_control_reproduced_it(tmp_path: Path) -> None:
    controls = {k: v for k, v in CONTROLS.items() if "cp_async" not in k}
    code, text = triage(tmp_path, {"sanitize-racecheck-a.log": race([("Write", CP_ASYNC, "Read", LOAD_SA, 4)]),
                                   "sanitize-synccheck-a.log": sync(ARRIVE, 1)}, controls=controls)
    assert code == 1
    assert "| sanitize:a | racecheck | ring-cp.async 4 | 4 | REPORT |" in text
    assert "| sanitize:a | synccheck | cp.async-arrive 1 | 1 | REPORT |" in text


def test_overflow_elsewhere_wrong_results_and_crashes_fail(tmp_path: Path) -> None:
    code, text = triage(tmp_path, {
        "sanitize-synccheck-a.log": sync(C_STORE, 1),
        "sanitize-memcheck-b.log": CLEAN,
        "sanitize-memcheck-c.log": HEAD + "Traceback (most recent call last):\n",
        "sanitize-memcheck-d.log": HEAD + f"=========     at kern+0x10 in wl_k.py:{C_STORE}\n" + OK
                                          + "========= ERROR SUMMARY: 1 error\n",
    }, codes={("b", "memcheck"): 1})
    assert code == 1
    assert "| sanitize:a | synccheck | unexplained 1 | 1 | REPORT |" in text
    assert "| sanitize:b | memcheck | none | 0 | no result line (exit code 1) |" in text
    assert "| sanitize:c | memcheck | none | 0 | no summary (crashed or timed out) |" in text
    assert "| sanitize:d | memcheck | unexplained 1 | 1 | REPORT |" in text
    assert "4 run(s)" in text


def test_a_wrong_result_under_a_report_and_records_left_unparsed_fail(tmp_path: Path) -> None:
    """compute-sanitizer's exit code stands for its own reports (99), so the verdict comes from the program's line;
    a record the triage cannot place (here: a race without source lines) counts against the summary's total."""
    wrong = race([("Read", DEF_KERN, "Write", WS, 3)], result="case: WRONG error 4.10e-01\n")
    unparsed = race([("Read", DEF_KERN, "Write", WS, 3)]).replace(
        "RACECHECK SUMMARY: 1 hazard displayed (1 errors",
        "RACECHECK SUMMARY: 2 hazards displayed (2 errors") + "========= Error: Race reported between odd lines\n"
    code, text = triage(tmp_path, {"sanitize-racecheck-a.log": wrong, "sanitize-racecheck-b.log": unparsed,
                                   "sanitize-synccheck-c.log": sync(ARRIVE, 2).replace(OK, "")},
                        codes={("a", "racecheck"): 99, ("b", "racecheck"): 99, ("c", "synccheck"): 99})
    assert code == 1
    assert "| sanitize:a | racecheck | dispatch 3 | 0 | WRONG RESULT |" in text
    assert "| sanitize:b | racecheck | dispatch 3 | 0 | REPORT (1 records not parsed) |" in text
    assert "| sanitize:c | synccheck | cp.async-arrive 2 | 0 | no result line (exit code 99) |" in text


def test_a_control_that_computed_wrongly_explains_nothing(tmp_path: Path) -> None:
    controls = {**CONTROLS, "control-racecheck-warp_specialize.log": race([("Read", DEF_KERN, "Write", WS, 3)],
                                                                          result="x control: WRONG\n")}
    code, text = triage(tmp_path, {"sanitize-racecheck-a.log": race([("Read", DEF_KERN, "Write", WS, 3)])},
                        controls=controls)
    assert code == 1
    assert "| control:warp_specialize | racecheck | dispatch 3 | 3 | WRONG RESULT |" in text
    assert "| sanitize:a | racecheck | dispatch 3 | 3 | REPORT |" in text


ABORTED = ("Traceback (most recent call last):\ntorch.AcceleratorError: CUDA error: unspecified launch failure\n"
           "========= Target application returned an error\n")


def aborted_sync(line: int, n: int) -> str:
    """A synccheck log whose kernel the tool stopped after its reports: no result line, the abort's CUDA error."""
    return sync(line, n, result=ABORTED)


def test_a_tool_abort_passes_only_as_its_control_was_and_right_under_memcheck(tmp_path: Path) -> None:
    """Under some drivers synccheck aborts kernels after cp.async's barrier reports. A case so aborted passes where
    its control was aborted likewise in the run and memcheck saw its result right; otherwise it fails."""
    controls = {**CONTROLS, "control-synccheck-cp_async_mbarrier.log": aborted_sync(ARRIVE, 2)}
    logs = {"sanitize-synccheck-a.log": aborted_sync(ARRIVE, 3), "sanitize-memcheck-a.log": CLEAN,
            "sanitize-synccheck-b.log": aborted_sync(ARRIVE, 3),
            "sanitize-memcheck-b.log": CLEAN.replace(OK, "case: WRONG error 4.10e-01\n"),
            "sanitize-synccheck-c.log": aborted_sync(ARRIVE, 3),  # (no memcheck run of c)
            "sanitize-synccheck-d.log": aborted_sync(C_STORE, 1), "sanitize-memcheck-d.log": CLEAN}
    codes = {(c, "synccheck"): 99 for c in "abcd"} | {("b", "memcheck"): 1}
    code, text = triage(tmp_path, logs, codes=codes, controls=controls)
    assert code == 1
    assert "| control:cp_async_mbarrier | synccheck | cp.async-arrive 2 | 0 | control (aborted by the tool) |" in text
    assert ("| sanitize:a | synccheck | cp.async-arrive 3 | 0 | aborted by the tool as its control was (right under "
            "memcheck) |") in text
    assert "| sanitize:b | synccheck | cp.async-arrive 3 | 0 | no result line (exit code 99) |" in text
    assert "| sanitize:c | synccheck | cp.async-arrive 3 | 0 | no result line (exit code 99) |" in text
    assert "| sanitize:d | synccheck | unexplained 1 | 1 | no result line (exit code 99) |" in text
    assert "4 run(s)" in text  # (b, c and d, and b's wrong memcheck result)


def test_a_tool_abort_fails_where_the_control_finished(tmp_path: Path) -> None:
    code, text = triage(tmp_path, {"sanitize-synccheck-a.log": aborted_sync(ARRIVE, 3),
                                   "sanitize-memcheck-a.log": CLEAN}, codes={("a", "synccheck"): 99})
    assert code == 1
    assert "| sanitize:a | synccheck | cp.async-arrive 3 | 0 | no result line (exit code 99) |" in text


# (compute-sanitizer's record of the abort's CUDA error at the host's next call, counted in its ERROR SUMMARY)
HOST_ABORT = ('========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on '
              "CUDA API call to cudaStreamSynchronize.\n"
              "=========     Saved host backtrace up to driver entry point at error\n=========\n")
# (a record that names no source line: a kernel's own fault under synccheck, which the parser cannot read)
UNPARSED = ("========= Illegal instruction\n=========     at kern+0x3f0\n"
            "=========     by thread (0,0,0) in block (3,0,0)\n")


def test_a_tool_abort_with_records_not_parsed_fails(tmp_path: Path) -> None:
    """An aborted run passes only where every record of its summary is one of the explained reports or the abort's
    own host-side error: a record the triage cannot read (the kernel's own fault, say) fails as it does unaborted."""
    controls = {**CONTROLS, "control-synccheck-cp_async_mbarrier.log": aborted_sync(ARRIVE, 2)}
    parsed_and_host = aborted_sync(ARRIVE, 3).replace("ERROR SUMMARY: 3 errors", "ERROR SUMMARY: 4 errors")
    with_fault = aborted_sync(ARRIVE, 3).replace("ERROR SUMMARY: 3 errors", "ERROR SUMMARY: 4 errors")
    logs = {"sanitize-synccheck-a.log": parsed_and_host.replace(ABORTED, ABORTED + HOST_ABORT),
            "sanitize-memcheck-a.log": CLEAN,
            "sanitize-synccheck-b.log": with_fault.replace(ABORTED, UNPARSED + ABORTED),
            "sanitize-memcheck-b.log": CLEAN}
    code, text = triage(tmp_path, logs, codes={(c, "synccheck"): 99 for c in "ab"}, controls=controls)
    assert ("| sanitize:a | synccheck | cp.async-arrive 3 | 0 | aborted by the tool as its control was (right under "
            "memcheck) |") in text
    assert "| sanitize:b | synccheck | cp.async-arrive 3 | 0 | no result line (exit code 99) |" in text
    assert code == 1 and "1 run(s)" in text
