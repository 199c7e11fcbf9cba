"""The demo's plot: repository freshness per period, crawlplan beside a uniform recrawl."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["plot_freshness"]


def plot_freshness(
    path: Path,
    seconds: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    cycle_seconds: float,
) -> None:
    """Freshness (0..1) at each sample time (s since the crawl began), one line per policy,
    cycle boundaries dotted; written to ``path`` (PNG)."""
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for name, values in series.items():
        ax.plot(seconds, values, marker="o", markersize=3, label=name)
    if seconds:
        boundary = cycle_seconds
        while boundary < max(seconds):
            ax.axvline(boundary, color="0.8", linestyle=":", linewidth=1)
            boundary += cycle_seconds
    ax.set_xlabel("seconds of crawling (dotted: a new nightly plan)")
    ax.set_ylabel("repository freshness (share of pages current)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Freshness against ground truth, same web, same crawl budget")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
