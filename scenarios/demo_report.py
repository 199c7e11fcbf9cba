"""The demo's figures: freshness per period (a plot), and the steady state's references.

* :func:`plot_freshness`: repository freshness per period, crawlplan beside a uniform recrawl.
* :func:`periodic_freshness`: the time-averaged freshness of pages refreshed periodically,
  ``(f / lam) (1 - exp(-lam / f))`` per page (``lam`` changes and ``f`` crawls per unit time).
* :func:`reference_freshness`: with the web's true rates, what the uniform recrawl and the
  freshness-optimal schedule (:func:`planner.schedules.optimal.refresh_schedule`, within
  each host's polite capacity) keep fresh at a budget.
* :func:`share_of_gain`: ``(policy - uniform) / (optimum - uniform)``.

Pure: arrays in, numbers out (and one PNG written by :func:`plot_freshness`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np

from planner.schedules.optimal import refresh_schedule

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = [
    "ReferenceFreshness",
    "periodic_freshness",
    "plot_freshness",
    "reference_freshness",
    "share_of_gain",
]


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


def periodic_freshness(rate: np.ndarray, refresh: np.ndarray) -> np.ndarray:
    """Per page, the share of time its copy is current when it changes as a Poisson process
    of ``rate`` and is crawled every ``1 / refresh`` (same time unit): ``(f / lam) (1 -
    exp(-lam / f))``; 1 for a page that never changes, 0 for one never crawled that does."""
    lam = np.asarray(rate, dtype=float)
    f = np.asarray(refresh, dtype=float)
    out = np.zeros_like(lam)
    still = lam <= 0
    out[still] = 1.0
    live = ~still & (f > 0)
    x = lam[live] / f[live]
    out[live] = -np.expm1(-x) / x
    return out


@dataclass(frozen=True)
class ReferenceFreshness:
    """Steady-state freshness (time-averaged, mean over the pages) of the uniform recrawl
    and of the freshness-optimal schedule at the same budget, with the true rates."""

    uniform: float
    optimum: float


def reference_freshness(
    rate: np.ndarray,
    budget: float,
    *,
    host: np.ndarray | None = None,
    host_capacity: np.ndarray | None = None,
) -> ReferenceFreshness:
    """The references at ``budget`` crawls per unit time for pages of true ``rate`` (changes
    per the same unit): every page alike (``budget / n`` each), and the freshness-optimal
    refresh rates (within ``host_capacity`` crawls per unit time of each page's ``host``)."""
    lam = np.asarray(rate, dtype=float)
    n = lam.shape[0]
    if n == 0 or budget <= 0:
        return ReferenceFreshness(0.0, 0.0)
    uniform = periodic_freshness(lam, np.full(n, budget / n))
    best = refresh_schedule(
        lam, float(budget), objective="freshness", host=host, host_capacity=host_capacity
    )
    optimum = periodic_freshness(lam, best.refresh_rate)
    return ReferenceFreshness(float(uniform.mean()), float(optimum.mean()))


def share_of_gain(policy: float, uniform: float, optimum: float) -> float:
    """``(policy - uniform) / (optimum - uniform)``: 1 = all of the optimum's gain over
    uniform, 0 = none, below 0 = worse than uniform (NaN when the optimum gains nothing)."""
    gain = optimum - uniform
    return (policy - uniform) / gain if gain > 1e-12 else float("nan")
