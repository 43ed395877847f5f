"""PNG charts with matplotlib (Agg backend: no display needed).

One chart kind serves every suite: grouped bars, one group per workload and one bar
per target, the bar at the median and an error bar from min to max. A target that
failed a workload gets no bar and a "failed" mark, so a failure is visible too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Series:
    """One target's values over the groups; None where the workload failed."""

    label: str
    medians: list[float | None]
    mins: list[float | None]
    maxs: list[float | None]


_COLORS = ("#1f77b4", "#6baed6", "#ff7f0e", "#2ca02c", "#9467bd")


def grouped_bars(
    path: Path, title: str, ylabel: str, groups: list[str], series: list[Series]
) -> Path:
    """Draw the chart to ``path`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) + 2), 4.2), dpi=100)
    top = max(
        (v for s in series for v in s.maxs if v is not None and math.isfinite(v)), default=1.0
    )
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in s.medians]
        lower = [
            (m - lo) if m is not None and lo is not None else 0.0
            for m, lo in zip(s.medians, s.mins, strict=True)
        ]
        upper = [
            (hi - m) if m is not None and hi is not None else 0.0
            for m, hi in zip(s.medians, s.maxs, strict=True)
        ]
        ax.bar(
            xs,
            heights,
            width,
            yerr=[lower, upper],
            capsize=3,
            label=s.label,
            color=_COLORS[i % len(_COLORS)],
        )
        for x, m in zip(xs, s.medians, strict=True):
            if m is None:
                ax.text(x, top * 0.02, "failed", rotation=90, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path
