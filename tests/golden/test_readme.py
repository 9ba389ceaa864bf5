"""README.md shows a schedule as `warploom demo --dtype bf16` prints it: each of its partitions must be, line for line,
a partition of the schedule the demo plans (issue 26 item 4b: the README must not drift from what the tool prints)."""

from __future__ import annotations

import re
from pathlib import Path

from warploom.cli import _planned


def _partitions(text: str) -> dict[str, str]:
    """Each `partition NAME (...)` block of a printed schedule, by name."""
    blocks = re.split(r"(?m)^(?=  partition )", text)
    return {m.group(1): b.rstrip() for b in blocks if (m := re.match(r"  partition (\S+)", b))}


def test_readme_schedule_excerpt_is_what_the_demo_prints() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("A schedule, as `warploom demo --dtype bf16` prints it", 1)[1]
    excerpt = section.split("```", 2)[1].strip("\n")
    shown = _partitions(excerpt + "\n")
    printed = _partitions(_planned(4096, 4096, 4096, "bf16", True).schedule)
    assert shown, "the README's excerpt has no partition"
    for name, block in shown.items():
        assert block == printed.get(name), f"README.md's partition {name} differs from the demo's"
