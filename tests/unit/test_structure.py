"""The shape of the package: layers import only downward, no import cycles, no private names borrowed across
modules, every exception a WarploomError.

The layer order is declared once, in LAYERS, bottom first (docs/architecture.md explains it). A module belongs to
the entry that names it or its closest enclosing package; `warploom` itself (the package's facade) names only its
own `__init__`. A module may import its own layer and those below.

Every import counts, wherever it stands: at the top of a module, inside a function (a lazy import, which saves
import time but is a run-time dependency all the same, so it may not reach up or close a cycle) or under
`if TYPE_CHECKING:`. The parent packages Python imports on the way to a module are not counted: a package's
`__init__` is placed by its own imports.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import warploom
from warploom.errors import WarploomError

ROOT = Path(warploom.__file__).parent

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("warploom.errors", "warploom.target", "warploom.dtypes", "warploom.version", "warploom.device",
              "warploom.blocked", "warploom.fp4")),
    # The epilogue graph and its meaning: the spec holds a graph, so they stand below it.
    ("epilogue IR", ("warploom.epilogue.graph", "warploom.epilogue.operands", "warploom.epilogue.names",
                     "warploom.epilogue.printer", "warploom.epilogue.reference", "warploom.epilogue.builder",
                     "warploom.epilogue.compose", "warploom.epilogue.memo")),
    ("spec", ("warploom.spec",)),
    # What turns user tensors and functions into a spec, and the fp32 reference a spec is judged against.
    ("front end", ("warploom.checks", "warploom.checks_grouped", "warploom.epilogue.classify",
                   "warploom.epilogue.capture", "warploom.reference", "warploom.quantization",
                   "warploom.gate_up", "warploom.rows")),
    # gluon_api (the installed Triton's spellings) imports only errors and ir.warps; the planner asks it what the
    # installed Triton can emit.
    ("schedule IR", ("warploom.ir", "warploom.backends.gluon_api")),
    # Each target's planner rule and what the rules share (warploom.planner, above the targets, dispatches to them).
    ("planning", ("warploom.planning",)),
    ("passes", ("warploom.passes",)),
    # warploom.epilogue's __init__ re-exports the whole package, its Gluon emitter included.
    ("backends", ("warploom.backends", "warploom.epilogue")),
    # standalone.py loads and compiles a kernel of its own (the epilogue emitter's test harness).
    ("runtime", ("warploom.runtime", "warploom.epilogue.standalone")),
    # Each target's declaration: its planner rule, passes, emitter and compile step, handed down to the layers below.
    ("targets", ("warploom.targets",)),
    # plan_schedule: what precedes any target's rule, then the device's target's rule, looked up in the registry.
    ("planner", ("warploom.planner",)),
    ("simulator", ("warploom.sim",)),
    ("kernel", ("warploom.kernel",)),
    ("calls", ("warploom.eager", "warploom.fused", "warploom.placement")),
    ("tuning", ("warploom.tune",)),
    ("API", ("warploom.api", "warploom.grouped")),
    ("tools", ("warploom", "warploom.bench", "warploom.benchsuite", "warploom.cli", "warploom.__main__")),
)

# Private names one module still takes from another, each with why. (backends: the sm_100a and gfx1250 emitters
# extend sm_90a's partition emitter; its rename waits for the work in flight on those emitters.)
BORROWED: set[tuple[str, str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the closest entry naming `module` or a package around it; None if unplaced."""
    best: tuple[int, int] | None = None  # (length of the entry, layer)
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            inside = module.startswith(name + ".") and name != "warploom"
            if (module == name or inside) and (best is None or len(name) > best[0]):
                best = (len(name), i)
    return None if best is None else best[1]


def imports(module: str) -> Iterator[tuple[str, str, int]]:
    """(warploom module imported, name imported from it or '', line) for every import in `module`."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "warploom":
                    yield _resolve(alias.name), "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            if base.split(".")[0] != "warploom":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:  # `from warploom.ir import raster`: the submodule
                    yield sub, "", node.lineno
                else:
                    yield _resolve(base), alias.name, node.lineno


def _resolve(name: str) -> str:
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


EDGES = {m: sorted({(target, line) for target, _, line in imports(m) if target != m}) for m in MODULES}


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, f"place these modules in LAYERS (tests/unit/test_structure.py): {unplaced}"


def test_layers_import_only_downward() -> None:
    upward = []
    for m, edges in EDGES.items():
        here = layer_of(m)
        for target, line in edges:
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                upward.append(f"{MODULES[m].relative_to(ROOT.parent)}:{line}: {m} ({LAYERS[here][0]}) imports "
                              f"{target} ({LAYERS[there][0]})")
    assert not upward, "imports that reach a higher layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    graph = {m: {t for t, _ in edges} for m, edges in EDGES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"modules that import each other, directly or around a loop: {cycles}"


def test_no_private_names_across_modules() -> None:
    borrowed = {(m, target, name) for m in MODULES for target, name, _ in imports(m)
                if target != m and name.startswith("_") and not name.startswith("__")}
    assert borrowed <= BORROWED, f"make these public (or keep them in their module): {sorted(borrowed - BORROWED)}"
    assert BORROWED <= borrowed, f"BORROWED lists what no longer happens: {sorted(BORROWED - borrowed)}"


def _all_modules() -> list[str]:
    names = ["warploom"]
    for info in pkgutil.walk_packages(warploom.__path__, "warploom."):
        if info.name != "warploom.__main__":  # (runs the command line)
            names.append(info.name)
    return names


@pytest.mark.parametrize("name", _all_modules())
def test_exceptions_derive_from_the_warploom_error(name: str) -> None:
    module = importlib.import_module(name)
    for cls_name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ == name and issubclass(cls, BaseException) and not issubclass(cls, Warning):
            assert issubclass(cls, WarploomError), f"{name}.{cls_name} should derive from warploom.errors.WarploomError"
