"""Remember captured epilogue graphs, so an eager call with a fused epilogue traces its function once.

Tracing `fn` with torch.fx costs milliseconds (measured 3.5 ms a call on the H100 host, docs/benchmarks.md); an
eager call must cost microseconds. The graph is a function of `fn`'s code and of every value the code reads
from outside (closure cells, globals, defaults) and of the operands' classification, so those form the key.

Only values whose meaning cannot change behind the key's back take part: numbers, strings, None, torch dtypes
(by value), library modules and torch's or math's own functions (by identity). A user's module (a config module,
``cfg.S``) takes part by the values of its attributes the code may read, like globals: ``cfg.S = 3.0`` after a
call must give a new trace, never the graph that baked in the old value. A function that reads anything else (a
list, a dict, a tensor, a user function that could read globals of its own) is traced on every call: a
stale graph would be a silently wrong result.
"""

from __future__ import annotations

import functools
import math
import types
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch

_SIZE = 256
_graphs: OrderedDict[Hashable, Any] = OrderedDict()


def key(fn: Callable[..., Any], extra: Hashable) -> Hashable | None:
    """The memo key of `fn` with `extra` (the classified operands and output shape), or None: not cacheable."""
    if not isinstance(fn, types.FunctionType):
        return None
    code = fn.__code__
    names = _global_names(code)
    parts: list[Hashable] = [code, extra]
    for cell in fn.__closure__ or ():
        try:
            v = _value(cell.cell_contents, names)
        except ValueError:  # an empty cell: the function would fail when called anyway
            return None
        if v is None:
            return None
        parts.append(v)
    # A name the globals lack is a builtin or an attribute (e.g. `gelu` of `F.gelu`, on a module in the key).
    for name in names & fn.__globals__.keys():
        v = _value(fn.__globals__[name], names)
        if v is None:
            return None
        parts.append((name, v))
    for d in (fn.__defaults__ or ()) + tuple((fn.__kwdefaults__ or {}).values()):
        v = _value(d, names)
        if v is None:
            return None
        parts.append(v)
    return tuple(parts)


@functools.lru_cache(maxsize=1024)
def _global_names(code: types.CodeType) -> frozenset[str]:
    """Names the code (and the code of functions and lambdas nested in it) may look up as globals. Per code object
    (immutable), remembered: an eager call reads it every time."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return frozenset(names)


def value_key(v: None | bool | int | float | complex | str | torch.dtype) -> Hashable:
    """A plain value as a key part that tells apart every value that can change a result: 0.0 == -0.0 (and hash
    alike) but `x / 0.0` and `x / -0.0` differ, so floats go by their exact hex form."""
    if isinstance(v, float):
        return ("v", "float", v.hex())
    if isinstance(v, complex):
        return ("v", "complex", v.real.hex(), v.imag.hex())
    return ("v", type(v).__name__, v)


# Modules whose attributes are code, not settings: keyed by identity. (How deep a user module's attributes that are
# modules themselves are followed: `cfg.sub.S`; deeper, or a cycle, is not cacheable.)
_LIBRARY_MODULES = ("torch", "math", "builtins", "operator", "_operator", "numpy", "warploom")
_MODULE_DEPTH = 3


def _value(v: Any, names: frozenset[str], depth: int = 0) -> Hashable | None:
    """A stable stand-in for a value the traced code reads, or None when it has none. `names` are the names the
    code may look up (globals and attributes): a user module's attributes of those names are read by value."""
    if v is None or isinstance(v, (bool, int, float, complex, str, torch.dtype)):
        return value_key(v)
    if isinstance(v, types.ModuleType):
        if v.__name__.split(".")[0] in _LIBRARY_MODULES:
            return ("m", v.__name__, id(v))
        if depth >= _MODULE_DEPTH:
            return None
        attrs = vars(v)
        parts: list[Hashable] = ["m", v.__name__, id(v)]
        for name in sorted(names & attrs.keys()):
            x = _value(attrs[name], names, depth + 1)
            if x is None:
                return None
            parts.append((name, x))
        return tuple(parts)
    if isinstance(v, (types.BuiltinFunctionType, types.FunctionType)) and _library(v):
        return ("f", id(v))
    return None


def _library(f: Any) -> bool:
    mod = getattr(f, "__module__", None) or ""
    return mod.split(".")[0] in ("torch", "math", "builtins", "_operator", "operator") or f in vars(math).values()


def get(k: Hashable | None) -> Any:
    if k is None:
        return None
    g = _graphs.get(k)
    if g is not None:
        _graphs.move_to_end(k)
    return g


def put(k: Hashable | None, graph: Any) -> None:
    if k is None:
        return
    _graphs[k] = graph
    if len(_graphs) > _SIZE:
        _graphs.popitem(last=False)


def clear() -> None:
    _graphs.clear()
