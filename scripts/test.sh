#!/usr/bin/env bash
# Set up and run warploom's CPU test tiers (unit, golden, simulator, compile-only), ruff and mypy.
# This is the test command README.md gives; .ci/run calls it. The GPU tier is scripts/gpu.sh.
#
# warploom supports Triton 3.6 through 3.9 (backends/gluon_api.py). Every tier runs under the oldest, 3.6.0; then the
# compile tier and the direct launch's check against Triton's own launcher run again under the newest, 3.9.0, in a
# venv over this Python's packages (torch, the test tools, warploom's source tree) that replaces only Triton. Arguments
# go to the first run; WARPLOOM_TRITON39=0 skips the second.
#
# --quick: only the unit and golden tiers (~1.5 min), on what is installed: no installs, no ruff or mypy, no second
# Triton. For the edit-test loop; the full run above is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
    shift
    exec python3 -m pytest -q -p no:cacheprovider tests/unit tests/golden "$@"
fi
python3 -m pip install -q torch==2.13.0        # the CPU build on disk; a newer torch would pull CUDA wheels
python3 -m pip install -q triton==3.6.0        # the oldest supported Triton (torch 2.11's), on disk too
python3 -m pip install -q -e ".[test]"
python3 -m ruff check warploom tests scripts archive
python3 -m mypy
python3 -m pytest -q --ignore=tests/gpu -p no:cacheprovider "$@"

if [ "${WARPLOOM_TRITON39:-1}" != 0 ]; then
    venv=/tmp/warploom-triton39      # made once, reused by later runs on this machine; nothing cached outside /tmp
    if ! "$venv/bin/python" -c "import triton, sys; sys.exit(triton.__version__ != '3.9.0')" 2>/dev/null; then
        rm -rf "$venv"
        python3 -m venv --system-site-packages "$venv"
        # --no-deps: the venv sees this Python's torch; pip must not touch it (the CPU torch does not need Triton)
        "$venv/bin/python" -m pip install -q --no-deps --no-cache-dir triton==3.9.0
    fi
    echo "compile tier under Triton $("$venv/bin/python" -c 'import triton; print(triton.__version__)')"
    TRITON_CACHE_DIR="$venv/triton-cache" WARPLOOM_CACHE_DIR="$venv/warploom-cache" PYTHONPATH="$PWD" \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/compile tests/unit/test_direct_launch.py
fi
