"""The planner's pieces, below the target registry: a plan (`plan.py`) and its checks against a spec and GPU
(`plan_check.py`), what several targets' rules share (`common.py`, `options.py`, `trace.py`, rule 29's
`amax_pass.py`), and each target's rule: sm_90a's in the package `sm90/` (its phases in `sm90/rule.py`, one module a
concept beside it: its `__init__` lists them), sm_100a's in `sm100.py`, gfx1250's in `gfx1250.py`, which each
target's declaration (`warploom.targets`) names as its `plan`. `warploom.planner.plan_schedule`, above the registry,
looks the device's target up and calls it."""
