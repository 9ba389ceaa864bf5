"""Programmatic dependent launch in Gluon (`ir.Module.dependent_launch`, passes/launch.py): the two griddepcontrol
instructions as ``@gluon.jit`` helpers of a module's source, and the first lines of its second kernels (split-K's
reduce, rule 29's cast), which read what the first kernel wrote. Gluon has no op for griddepcontrol, so each is an
inline PTX statement (its dummy result is Triton's: an asm statement returns a value)."""

from __future__ import annotations

from warploom.backends.codebuf import CodeBuffer

GRID_DEPENDENCY_HELPERS = """\
@gluon.jit
def grid_dependency_wait():
    # griddepcontrol.wait: the grid launched before this one has finished and its writes are visible
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def launch_dependents():
    # griddepcontrol.launch_dependents: the next grid may launch once every CTA of this one has started
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)
"""


def dependent_start(b: CodeBuffer) -> None:
    """A second kernel's first lines under a dependent launch: it reads what the first kernel wrote, so it waits for
    that grid's end, and lets the next grid launch early in turn."""
    b.line("grid_dependency_wait()", "the first kernel's results are complete and visible (PDL)")
    b.line("launch_dependents()")
