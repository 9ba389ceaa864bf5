"""sm_90a's planner rule (every rule of `warploom.planner`'s list but 19 and 20), one concept a module: `rule.py` its
phases and choice, `search.py` the scored candidate search, `tiles.py` the tile menu and what a tile costs,
`models.py` rules 15 and 21's cost models, `latency.py` rules 23, 25 and 33's few-tile models, `clusters.py` rule
24's, `narrow.py`, `fitted.py`, `ring.py`, `rows64.py`, `column.py` and `fitted_cluster.py` rules 31-39's tiles,
`fused.py` the fused epilogues' limits, `grouped.py` rule 22's grouped GEMMs. The target's declaration
(`warploom.targets.sm90`) names `rule.plan` as its `plan`."""
