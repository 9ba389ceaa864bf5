"""Shared pytest setup for warploom's CPU tiers.

The repository root goes on sys.path so `import warploom` works from a plain checkout, however pytest is
started. The hypothesis profiles: ``ci`` by default, ``nightly`` (many more examples) with
WARPLOOM_HYPOTHESIS_PROFILE=nightly (tests/unit/props.py scales each property's count the same way). Nothing here
touches a GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

settings.register_profile("ci", deadline=None)
settings.register_profile("nightly", deadline=None, max_examples=5000)
settings.load_profile(os.environ.get("WARPLOOM_HYPOTHESIS_PROFILE", "ci"))
