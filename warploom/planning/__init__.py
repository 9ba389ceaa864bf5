"""The planner's pieces, below the target registry: a plan (`plan.py`) and its checks against a spec and GPU
(`plan_check.py`), what several targets' rules share (`common.py`, `options.py`, `trace.py`), and each target's rule
in its own module (`sm90.py` with its candidate search in `sm90_search.py`, tile menu in `sm90_tiles.py`, cost
models in `sm90_models.py` (rules 15 and 21), `sm90_latency.py` (rules 23, 25 and 33) and `sm90_clusters.py` (rule
24), fused epilogues' limits in `sm90_fused.py` and grouped GEMMs in `sm90_grouped.py`; `sm100.py`, `gfx1250.py`),
which its declaration (`warploom.targets`) names as its `plan`. `warploom.planner.plan_schedule`, above the
registry, looks the device's target up and calls it."""
