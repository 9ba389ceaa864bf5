"""warploom's autotuner: candidate schedules cut by a cost model, checked and timed on the device, cached on disk.

The files, in the order a tune goes through them:
- cost.py: shared memory, registers per thread and waves of a plan, before it runs;
- candidates.py: the plans the planner accepts when forced, cut by the cost model to a few near its default;
- accuracy.py: whether a candidate's output is right (it must be, to be timed or win);
- autotune.py: the loop (poison outputs, run, check, time, pick) over an injected device `Harness`;
- key.py, cache.py: the on-disk cache, keyed by spec, strides, device and versions, validated on every read;
- settings.py: the environment variables (WARPLOOM_AUTOTUNE, _CLEAR, _VERBOSE, WARPLOOM_CACHE_DIR);
- gpu.py: `tune_matmul` / `tune_scaled_mm`, the CUDA harness and timer.

Importing this package touches no GPU. docs/tuning.md describes the cache and the environment variables.
"""

from __future__ import annotations

from warploom.tune.autotune import Harness, TuneError, autotune
from warploom.tune.cache import Cache, StaleCacheWarning, clear_cache
from warploom.tune.candidates import Candidate, SearchSpace, candidates
from warploom.tune.cost import Estimate, estimate
from warploom.tune.gpu import time_graph, tune_matmul, tune_scaled_mm
from warploom.tune.key import CacheKey
from warploom.tune.result import Source, Trial, TuneResult

__all__ = [
    "Cache", "CacheKey", "Candidate", "Estimate", "Harness", "SearchSpace", "Source", "StaleCacheWarning", "Trial",
    "TuneError", "TuneResult", "autotune", "candidates", "clear_cache", "estimate", "time_graph", "tune_matmul",
    "tune_scaled_mm",
]
