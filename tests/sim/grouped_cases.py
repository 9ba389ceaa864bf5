"""What the grouped simulator tests share (pytest puts this folder on sys.path): random routings and the groups'
rows of a grouped result."""

from __future__ import annotations

import torch


def routing(seed: int, groups: int, rows: int) -> torch.Tensor:
    """Random cumulative offsets over `rows`: some experts empty, ends not multiples of any tile."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 2 * rows // groups, (groups,), generator=g)
    counts[torch.randperm(groups, generator=g)[: max(1, groups // 4)]] = 0  # empty experts
    return counts.cumsum(0).clamp(max=rows).to(torch.int32)


def valid_rows(bounds: tuple[tuple[int, int], ...], m: int) -> torch.Tensor:
    """(m,) bool: the rows some group owns (the rest of a grouped result is never written)."""
    rows = torch.zeros(m, dtype=torch.bool)
    for s, e in bounds:
        rows[s:e] = True
    return rows
