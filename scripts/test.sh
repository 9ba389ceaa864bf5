#!/usr/bin/env bash
# Set up and run warploom's CPU test tiers (unit, golden, simulator, compile-only), ruff and mypy.
# This is the test command README.md gives; .ci/run calls it. The GPU tier is scripts/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0        # the CPU build on disk; a newer torch would pull CUDA wheels
python3 -m pip install -q -e ".[test]"
python3 -m ruff check warploom tests scripts archive
python3 -m mypy
python3 -m pytest -q --ignore=tests/gpu -p no:cacheprovider "$@"
