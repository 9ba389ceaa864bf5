"""The autotune cache key: everything a tuned schedule's speed or validity may depend on, as canonical text.

A tuned plan is only as good as the conditions it was measured under, so the key holds:
- every field of the spec (a new GemmSpec field joins the key by itself: the encoder walks dataclass fields),
  including a fused epilogue's whole graph;
- the strides of the caller's tensors (a padded leading dimension changes the memory traffic a schedule sees,
  though not the kernel);
- the device as the planner sees it (name, arch, SMs, shared memory, registers: a MIG slice differs);
- the versions that generate and compile the kernel: warploom's, a digest of its source files (an edited
  planner or backend is another compiler, whatever the version string says), triton's, torch's and CUDA's.

The text is JSON with sorted keys and no whitespace, so equal keys are equal strings on every machine; the
cache names a file by its sha256 and stores the text beside the plan to catch collisions and stale entries.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from warploom.device import DeviceInfo
from warploom.spec import GemmSpec

# Bumped whenever the key's or the entry's layout changes, so older entries read as stale.
SCHEMA = 1


def canonical(value: Any) -> Any:
    """`value` as plain JSON data that depends only on its content (no ids, no addresses, exact floats)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return f"float:{value.hex()}"  # exact, and JSON has no NaN or inf
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        body = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__type__": type(value).__qualname__, **body}
    if isinstance(value, (tuple, list)):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    raise TypeError(f"cannot put a {type(value).__name__} in an autotune cache key: expected None, bool, int, "
                    "float, str, an enum, a dataclass, or a tuple, list or dict of those")


@functools.cache
def source_digest() -> str:
    """sha256 over warploom's own .py files (relative path and content), in sorted order."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def versions() -> tuple[tuple[str, str], ...]:
    """(name, version) of what generates and compiles kernels in this process."""
    import torch  # warploom already imports it (api.py); reading versions touches no GPU

    from warploom.version import __version__

    return (
        ("warploom", __version__),
        ("warploom_source", source_digest()),
        ("triton", _dist_version("triton")),
        ("torch", str(torch.__version__)),
        ("cuda", str(torch.version.cuda)),
    )


@dataclass(frozen=True)
class CacheKey:
    """What a tuned plan is valid for.

    Attributes:
        spec: the problem.
        device: the GPU it was tuned on.
        strides: the caller's tensors' strides, e.g. ``(a.stride(), b.stride())``; () when there are none.
        versions: (name, version) pairs, by default this process's (`versions()`).
    """

    spec: GemmSpec
    device: DeviceInfo
    strides: tuple[tuple[int, ...], ...] = ()
    versions: tuple[tuple[str, str], ...] = field(default_factory=versions)

    def fields(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "spec": canonical(self.spec), "device": canonical(self.device),
                "strides": canonical(self.strides), "versions": dict(self.versions)}

    def text(self) -> str:
        """The canonical key: sorted-key JSON without whitespace."""
        return json.dumps(self.fields(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    def digest(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()


def explain_mismatch(stored: str, expected: str) -> str:
    """Why a stored key text is not the expected one, for the warning that drops the entry."""
    try:
        old, new = json.loads(stored), json.loads(expected)
    except (json.JSONDecodeError, TypeError):
        return "its key is not valid JSON"
    if not isinstance(old, dict) or not isinstance(new, dict):
        return "its key is not a JSON object"
    if old.get("versions") != new.get("versions") and isinstance(old.get("versions"), dict):
        ov, nv = old["versions"], new["versions"]
        diffs = [f"{k} {ov.get(k)!r} != {nv.get(k)!r}" for k in sorted(set(ov) | set(nv)) if ov.get(k) != nv.get(k)]
        return "written by other versions (" + ", ".join(diffs) + ")"
    parts = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if not parts:
        return "its key is this key written non-canonically"
    return f"written for another key (differs in {', '.join(parts)}; a hash collision or an edited file)"
