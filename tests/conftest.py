"""Shared pytest setup for warploom's CPU tiers.

The repository root goes on sys.path so `import warploom` works from a plain checkout, however pytest is
started. Nothing here touches a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
