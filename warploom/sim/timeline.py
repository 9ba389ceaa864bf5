"""Draw a simulation's timeline: one row per partition, ops as bars over scheduler steps.

Each partition gets a row of what it executed (waits in red hatching, so stalls stand out) and, below
it, a lane of its asynchronous operations in flight (TMA loads, wgmma, TMA stores), packed into
sub-lanes so overlapping operations stay visible. Findings are dashed red lines at the step they were
seen. One panel per CTA.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from warploom.sim.events import EventKind, TimelineEvent
from warploom.sim.simulate import SimReport, SimResult

_COLORS = {
    "tma_load": "#4C72B0",
    "wgmma": "#55A868",
    "sync": "#8172B2",
    "epilogue": "#DD8452",
    "tma_store": "#937860",
    "wait": "#C44E52",
}
_LABELS = {
    "tma_load": "TMA load",
    "wgmma": "wgmma",
    "sync": "arrive / expect-tx",
    "epilogue": "epilogue (registers, smem)",
    "tma_store": "TMA store",
    "wait": "blocked (wait)",
}


def _pack(events: Sequence[TimelineEvent]) -> list[tuple[TimelineEvent, int]]:
    """Assign each interval the lowest sub-lane free at its start (greedy interval colouring)."""
    ends: list[int] = []
    out = []
    for e in sorted(events, key=lambda e: (e.start, e.end)):
        lane = next((i for i, end in enumerate(ends) if end <= e.start), len(ends))
        if lane == len(ends):
            ends.append(e.end)
        else:
            ends[lane] = e.end
        out.append((e, lane))
    return out


def draw_timeline(result: SimResult | SimReport, path: str | os.PathLike[str], *, ctas: Sequence[int] | None = None,
                  max_ctas: int = 2, title: str | None = None) -> Path:
    """Save a PNG (or any format matplotlib infers from `path`) of the timeline of `result`; return the path.

    `ctas` picks the CTAs drawn (default: the first `max_ctas` simulated).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    report = result.report if isinstance(result, SimResult) else result
    if not report.timeline:
        raise ValueError("the simulation recorded no timeline: run simulate(..., record=True)")
    chosen = tuple(ctas) if ctas is not None else tuple(sorted({e.cta for e in report.timeline}))[:max_ctas]
    names = list(dict.fromkeys(e.partition for e in report.timeline))
    rows: list[tuple[str, str]] = []  # (partition, "ops" | "async")
    for n in names:
        rows.append((n, "ops"))
        if any(e.partition == n and e.kind is EventKind.ASYNC for e in report.timeline):
            rows.append((n, "async"))
    span = max(e.end for e in report.timeline if e.cta in chosen)
    width = min(24.0, max(10.0, span / 40))
    fig, axes = plt.subplots(len(chosen), 1, figsize=(width, 0.9 * len(rows) * len(chosen) + 1.6), squeeze=False,
                             sharex=True)
    for ax, cta in zip(axes[:, 0], chosen, strict=True):
        _panel(ax, [e for e in report.timeline if e.cta == cta], rows)
        ax.set_title(f"CTA {cta}", loc="left", fontsize=10)
        # Where the first findings of this CTA were seen.
        found = sorted((f for f in report.findings if f.cta == cta), key=lambda f: f.step)[:5]
        for level, f in enumerate(found):  # one text line per finding, so close steps do not collide
            top = len(rows) - 0.45 + 0.28 * level
            ax.plot([f.step, f.step], [-0.6, top], color="#C44E52", linewidth=1.2, linestyle="--")
            ax.text(f.step, top, f" {f.kind.name}", color="#C44E52", fontsize=8, va="center")
        if found:
            ax.set_ylim(-0.6, len(rows) - 0.3 + 0.28 * len(found))
    ax_last: Any = axes[-1, 0]
    ax_last.set_xlabel("scheduler step")
    used = {e.category for e in report.timeline if e.cta in chosen}
    handles = [Patch(facecolor=_COLORS[c], alpha=0.45 if c == "wait" else 0.9, hatch="///" if c == "wait" else None,
                     label=_LABELS[c]) for c in _COLORS if c in used]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False, fontsize=9,
               bbox_to_anchor=(0.5, 1.0))
    status = "no findings" if report.ok else f"{len(report.findings)} finding(s)"
    fig.suptitle(title or f"{report.module}  (seed {report.seed}, {status})", y=1.04, fontsize=11)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def _panel(ax: Any, events: list[TimelineEvent], rows: list[tuple[str, str]]) -> None:
    ys = {row: len(rows) - 1 - i for i, row in enumerate(rows)}
    for (part, lane), y in ys.items():
        if lane == "ops":
            mine = [e for e in events if e.partition == part and e.kind is not EventKind.ASYNC]
            for cat in _COLORS:
                bars = [(e.start, max(e.end - e.start, 1)) for e in mine if e.category == cat]
                if bars:
                    wait = cat == "wait"
                    ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=_COLORS[cat], alpha=0.45 if wait else 0.9,
                                   hatch="///" if wait else None, edgecolor=_COLORS[cat] if wait else "none",
                                   linewidth=0.3)
            # Mark where each tile's work begins, so a row reads as tile after tile.
            seen: set[int] = set()
            for e in sorted(mine, key=lambda e: e.start):
                if e.tile is not None and e.tile not in seen:
                    seen.add(e.tile)
                    ax.text(e.start, y + 0.38, f"tile {e.tile}", fontsize=7, color="#555555", va="bottom")
        else:
            packed = _pack([e for e in events if e.partition == part and e.kind is EventKind.ASYNC])
            lanes = max((lane_i for _, lane_i in packed), default=0) + 1
            h = 0.8 / lanes
            for e, lane_i in packed:
                ax.broken_barh([(e.start, max(e.end - e.start, 1))], (y - 0.4 + lane_i * h, h * 0.9),
                               facecolors=_COLORS[e.category], alpha=0.55, edgecolor="white", linewidth=0.3)
    ax.set_yticks(list(ys.values()))
    ax.set_yticklabels([p if lane == "ops" else f"{p}  · async" for p, lane in ys])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
