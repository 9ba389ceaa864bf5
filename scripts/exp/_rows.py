"""Where the experiments in scripts/exp write their rows: JSON under $OUT (default ./out), for the device tool."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_rows(rows: list[dict[str, Any]], name: str) -> Path:
    """Write `rows` as indented JSON to $OUT/`name` (creating the folder) and return the path."""
    out = Path(os.environ.get("OUT", "out")) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return out
