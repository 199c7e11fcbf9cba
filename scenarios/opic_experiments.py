"""The OPIC paper's experiments (sec. 4.2) on synthetic power-law graphs.

* :func:`convergence_experiment` (Figures 2-3): the mean relative error of OPIC's importance
  against the PageRank fixpoint after ``k x N`` crawled pages, for Random, Cycle and Greedy,
  over all pages and over the top 10 % (by the fixpoint); beside it the off-line power
  iteration after ``k`` iterations (one iteration counted as N crawled pages).
* :func:`window_experiment` (Figure 4): Adaptive OPIC with Greedy on a graph that keeps
  changing (a share of the pages per N crawls get their in-degree doubled or halved, in ten
  steps per N), for Variable Windows of k measures and Interpolation windows; the error against
  the fixpoint of the *current* graph, averaged over the last crawls of the run.

The error is the paper's: ``mean_i |X[i] - X*[i]| / X*[i]``. Both functions are pure (no I/O)
and seeded; ``tests/benchmarks/opic_figures.py`` runs them and draws the plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from estimators.opic import DEFAULT_DAMPING, OPIC
from estimators.opic_graph import LinkGraph
from estimators.opic_selection import STRATEGIES, GreedySelection, PageSelection
from estimators.opic_windows import (
    FullHistory,
    HistoryWindow,
    InterpolationWindow,
    VariableWindow,
)
from estimators.pagerank import pagerank
from scenarios.graphs import change_in_degrees, power_law_graph

__all__ = [
    "ConvergenceResult",
    "WindowResult",
    "convergence_experiment",
    "mean_relative_error",
    "window_experiment",
]

FloatArray = NDArray[np.float64]


def mean_relative_error(estimate: FloatArray, fixpoint: FloatArray) -> float:
    """The paper's error: ``mean |X - X*| / X*`` over the pages given."""
    return float(np.mean(np.abs(estimate - fixpoint) / fixpoint))


@dataclass(frozen=True)
class ConvergenceResult:
    """Errors after ``k x N`` crawled pages.

    Attributes
    ----------
    n_pages, n_links : int
        The graph.
    multiples : tuple of float
        The ``k`` of each checkpoint.
    errors, top_errors : dict of str to tuple of float
        Per strategy (and ``"power iteration"``), the mean relative error on all pages and on
        the top 10 %, one per checkpoint.
    """

    n_pages: int
    n_links: int
    multiples: tuple[float, ...]
    errors: dict[str, tuple[float, ...]] = field(default_factory=dict)
    top_errors: dict[str, tuple[float, ...]] = field(default_factory=dict)


def convergence_experiment(
    n_pages: int = 100_000,
    n_links: int = 800_000,
    *,
    multiples: Sequence[float] = (0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
    batch_share: float = 0.005,
    damping: float = DEFAULT_DAMPING,
    seed: int = 0,
) -> ConvergenceResult:
    """Figures 2-3: error against the fixpoint after ``k x N`` crawls, per strategy.

    Parameters
    ----------
    n_pages, n_links : int
        Size of the power-law graph (:func:`scenarios.graphs.power_law_graph`).
    multiples : sequence of float
        Checkpoints ``k`` (increasing), in units of N crawled pages.
    batch_share : float
        Pages crawled per batch step, as a share of N.
    damping : float
        Damping of OPIC and of the fixpoint.
    seed : int
        Seed of the graph and of Random/Cycle.
    """
    graph = power_law_graph(n_pages, n_links, seed=seed)
    fixpoint = pagerank(graph, damping=damping, tol=1e-13).scores
    top = np.argsort(-fixpoint)[: max(1, n_pages // 10)]
    batch = max(1, round(batch_share * n_pages))
    result = ConvergenceResult(n_pages, graph.n_links, tuple(float(k) for k in multiples))
    for name in ("random", "cycle", "greedy"):
        selection: PageSelection = (
            GreedySelection() if name == "greedy" else STRATEGIES[name](seed=seed)
        )
        opic = OPIC(damping=damping).start(n_pages)
        errors, top_errors = [], []
        for k in multiples:
            target = round(k * n_pages)
            while opic.state_.crawls < target:
                size = min(batch, target - opic.state_.crawls)
                opic.crawl(graph, selection.select(opic.state_.cash[:n_pages], size))
            estimate = opic.importance()
            errors.append(mean_relative_error(estimate, fixpoint))
            top_errors.append(mean_relative_error(estimate[top], fixpoint[top]))
        result.errors[name] = tuple(errors)
        result.top_errors[name] = tuple(top_errors)
    errors, top_errors = [], []
    for k in multiples:
        iterate = pagerank(graph, damping=damping, tol=0.0, max_iter=max(1, round(k))).scores
        errors.append(mean_relative_error(iterate, fixpoint))
        top_errors.append(mean_relative_error(iterate[top], fixpoint[top]))
    result.errors["power iteration"] = tuple(errors)
    result.top_errors["power iteration"] = tuple(top_errors)
    return result


@dataclass(frozen=True)
class WindowResult:
    """Errors of each window policy per change rate.

    Attributes
    ----------
    n_pages : int
        Pages of the graph.
    change_rates : tuple of float
        Share of the pages changed per N crawled pages.
    errors : dict of str to tuple of float
        Per policy, the mean relative error (averaged over the last checkpoints), one per rate.
    measures : dict of str to float
        Stored measures per page at the end (at the highest rate), as in the paper's Figure 5.
    """

    n_pages: int
    change_rates: tuple[float, ...]
    errors: dict[str, tuple[float, ...]]
    measures: dict[str, float]


class _Windows:
    """Several window policies fed by one OPIC run (the window does not change the cash)."""

    def __init__(self, windows: dict[str, HistoryWindow]) -> None:
        self.windows = windows

    def reset(self, n_pages: int) -> None:
        for window in self.windows.values():
            window.reset(n_pages)

    def record(self, pages: NDArray[np.int64], cash: FloatArray, clock: float) -> None:
        for window in self.windows.values():
            window.record(pages, cash, clock)

    def estimate(self, cash: FloatArray, clock: float) -> FloatArray:
        return next(iter(self.windows.values())).estimate(cash, clock)

    def measures_per_page(self) -> float:
        return 1.0


def _policies(measures: Sequence[int], sizes: Sequence[float]) -> dict[str, HistoryWindow]:
    policies: dict[str, HistoryWindow] = {"full history": FullHistory()}
    for k in measures:
        policies[f"variable window {k}"] = VariableWindow(k)
    for size in sizes:
        policies[f"interpolation {size:g} G"] = InterpolationWindow(size)
    return policies


def window_experiment(
    n_pages: int = 100_000,
    n_links: int = 800_000,
    *,
    change_rates: Sequence[float] = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05),
    measures: Sequence[int] = (4, 8, 16),
    sizes: Sequence[float] = (4.0, 8.0),
    crawls: float = 10.0,
    steps_per_crawl: int = 10,
    batch_share: float = 0.005,
    damping: float = DEFAULT_DAMPING,
    seed: int = 0,
) -> WindowResult:
    """Figure 4: Adaptive OPIC (Greedy) on a changing graph, per window policy and change rate.

    Parameters
    ----------
    n_pages, n_links : int
        Size of the initial power-law graph.
    change_rates : sequence of float
        Share of the pages whose in-degree is doubled or halved per N crawled pages.
    measures : sequence of int
        Variable Window sizes (measures per page).
    sizes : sequence of float
        Interpolation window sizes, units of G.
    crawls : float
        Length of each run, in units of N crawled pages (the paper: ten).
    steps_per_crawl : int
        The graph changes this many times per N crawled pages, by ``rate / steps`` each time.
    batch_share, damping, seed
        As in :func:`convergence_experiment`.
    """
    base = power_law_graph(n_pages, n_links, seed=seed)
    batch = max(1, round(batch_share * n_pages))
    step = max(1, round(n_pages / steps_per_crawl))
    total = round(crawls * n_pages)
    # The error is averaged over the last N crawled pages, at each of its change steps.
    measured_from = total - n_pages
    errors: dict[str, list[float]] = {}
    measures_used: dict[str, float] = {}
    for rate in change_rates:
        rng = np.random.default_rng(seed + 1)
        graph: LinkGraph = base
        policies = _policies(measures, sizes)
        opic = OPIC(damping=damping, window=_Windows(policies)).start(n_pages)
        greedy = GreedySelection()
        sums = dict.fromkeys(policies, 0.0)
        samples = 0
        while opic.state_.crawls < total:
            until = min(total, opic.state_.crawls + step)
            while opic.state_.crawls < until:
                size = min(batch, until - opic.state_.crawls)
                opic.crawl(graph, greedy.select(opic.state_.cash[:n_pages], size))
            if opic.state_.crawls > measured_from:
                fixpoint = pagerank(graph, damping=damping, tol=1e-10).scores
                state = opic.state_
                for name, window in policies.items():
                    estimate = window.estimate(state.cash[:n_pages], state.clock)
                    sums[name] += mean_relative_error(estimate / estimate.sum(), fixpoint)
                samples += 1
            if rate > 0 and opic.state_.crawls < total:
                graph, _ = change_in_degrees(graph, rate / steps_per_crawl, rng)
        for name in policies:
            errors.setdefault(name, []).append(sums[name] / samples)
        measures_used = {name: w.measures_per_page() for name, w in policies.items()}
    return WindowResult(
        n_pages,
        tuple(float(r) for r in change_rates),
        {name: tuple(values) for name, values in errors.items()},
        measures_used,
    )
