"""README.md is checked against the code (the README must not drift from what the tool does):

- the schedule it shows as `warploom demo --dtype bf16` prints it: each of its partitions must be, line for line, a
  partition of the schedule the demo plans;
- every fenced Python block runs on the CPU: as written (meta tensors, the simulator, cross-compiling), or, where the
  line before the block is `<!-- gpu -->`, with its CUDA tensors on the meta device and each `warploom.matmul` /
  `scaled_mm` call planned (checks, planner, passes, Gluon) instead of launched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

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


GPU_MARK = "<!-- gpu -->"


def _python_blocks() -> list[tuple[int, bool, str]]:
    """Each fenced Python block of README.md: (its line, whether `<!-- gpu -->` stands on the line before, code)."""
    lines = (Path(__file__).parents[2] / "README.md").read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = lines.index("```", i + 1)
            blocks.append((i + 1, i > 0 and lines[i - 1].strip() == GPU_MARK, "\n".join(lines[i + 1:end]) + "\n"))
            i = end
        i += 1
    return blocks


PLANNED: list[Any] = []


def _planned_instead(*args: Any, **kwargs: Any) -> torch.Tensor:
    """warploom.matmul / scaled_mm for a GPU block on meta tensors: check, plan and generate the kernel's Gluon
    (warploom.plan takes the calls' arguments), and return the call's outputs: one tensor, or a tuple of one per
    output of a fused epilogue, each of its shape and dtype."""
    import warploom

    kernel = warploom.plan(*args, **kwargs)
    assert "@gluon.jit" in kernel.source
    PLANNED.append(kernel)
    sp = kernel.spec
    outs = tuple(torch.empty(shape, device="meta", dtype=d.torch)
                 for shape, d in zip(sp.output_shapes(), sp.output_dtypes(), strict=True))
    return outs[0] if len(outs) == 1 else outs


def test_readme_has_python_blocks_of_both_kinds() -> None:
    kinds = [gpu for _, gpu, _ in _python_blocks()]
    assert True in kinds and False in kinds, kinds


@pytest.mark.parametrize(("line", "gpu", "code"), _python_blocks(), ids=lambda v: str(v) if isinstance(v, int) else "")
def test_readme_python_block_runs_on_the_cpu(line: int, gpu: bool, code: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Every Python block of README.md runs as written; a GPU block on meta tensors, each call planned."""
    import warploom

    if gpu:
        assert 'device="cuda"' in code, f"README.md:{line}: a block marked {GPU_MARK} with no CUDA tensor"
        code = code.replace('device="cuda"', 'device="meta"')
        monkeypatch.setattr(warploom, "matmul", _planned_instead)
        monkeypatch.setattr(warploom, "scaled_mm", _planned_instead)
    PLANNED.clear()
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "readme"})
    calls = code.count("warploom.matmul(") + code.count("warploom.scaled_mm(")
    assert not gpu or len(PLANNED) == calls, f"README.md:{line}: {calls} calls, {len(PLANNED)} planned"
    capsys.readouterr()  # (what the block prints: a schedule, Gluon source, summaries)
