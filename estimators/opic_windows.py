"""Adaptive OPIC: importance from a recent window of a page's history (OPIC paper, sec. 3.2).

On a changing web, the whole credit history mixes old links with new ones; Adaptive OPIC keeps
only the cash a page received over a recent *window* of the clock G (the total cash ever
distributed, see :mod:`estimators.opic`). A page gets cash at a rate proportional to its
importance per unit of G, so the estimate of page i is::

    (cash received in the window + C[i]) / (G - start of the window)

normalized over the pages. The window is measured in units of G (about one G per crawl of all
pages with Cycle, about two with Greedy).

* :class:`FullHistory`: no window, the static OPIC estimate ``(H[i] + C[i]) / (G + 1)``.
* :class:`InterpolationWindow`: one value per page (the policy Xyleme ran on the web). At a
  crawl after ``e`` units of G, the stored window history ``W`` keeps the share of the old
  window still inside the window (``(T - e) / T`` of it once the window is full) plus the cash
  just taken; when ``e >= T`` the window holds ``cash * T / e``, the cash assumed to arrive
  linearly.
* :class:`VariableWindow`: the last ``k`` measures (cash taken, clock at the previous crawl).

Before a page's first crawl every policy gives ``C[i] / (G + 1)``: the initial cash counts as
received over one unit of G, as in the static ``G + 1``. With an infinite window both
policies reduce to :class:`FullHistory` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["FullHistory", "HistoryWindow", "InterpolationWindow", "VariableWindow"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Clock of a page never crawled: the initial cash counts as received over [-1, 0].
_NEVER = -1.0


class HistoryWindow(Protocol):
    """What :class:`~estimators.opic.OPIC` needs from a window policy."""

    def reset(self, n_pages: int) -> None:
        """Forget everything; ``n_pages`` pages, none crawled yet."""

    def record(self, pages: IntArray, cash: FloatArray, clock: float) -> None:
        """Pages ``pages`` (distinct) were crawled at clock ``clock`` and gave ``cash``."""

    def estimate(self, cash: FloatArray, clock: float) -> FloatArray:
        """Unnormalized importance of every page, shape (n_pages,), from current ``cash``."""

    def measures_per_page(self) -> float:
        """Stored measures per page (storage cost, as in the paper's Figure 5)."""


@dataclass
class FullHistory:
    """The whole credit history ``H``: static OPIC."""

    history_: FloatArray = field(default_factory=lambda: np.zeros(0))

    def reset(self, n_pages: int) -> None:
        self.history_ = np.zeros(n_pages)

    def record(self, pages: IntArray, cash: FloatArray, clock: float) -> None:
        self.history_[pages] += cash

    def estimate(self, cash: FloatArray, clock: float) -> FloatArray:
        return (self.history_ + cash) / (clock + 1.0)

    def measures_per_page(self) -> float:
        return 1.0


@dataclass
class InterpolationWindow:
    """One interpolated window value and the clock of the last crawl per page.

    Parameters
    ----------
    size : float
        Window ``T`` in units of G (> 0; ``inf`` gives :class:`FullHistory`).
    """

    size: float
    window_: FloatArray = field(default_factory=lambda: np.zeros(0))
    last_crawl_: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if not self.size > 0:
            raise ValueError(f"the window size must be > 0 (units of G), got {self.size}")

    def reset(self, n_pages: int) -> None:
        self.window_ = np.zeros(n_pages)
        self.last_crawl_ = np.full(n_pages, _NEVER)

    def _covered(self, last: FloatArray) -> FloatArray:
        # The span of G the stored value covers before the last crawl: up to T, and no more
        # than the time since the start (the initial cash counting as one unit).
        return np.minimum(self.size, last - _NEVER)

    def record(self, pages: IntArray, cash: FloatArray, clock: float) -> None:
        last = self.last_crawl_[pages]
        elapsed = clock - last
        covered = self._covered(last)
        kept = np.clip(self.size - elapsed, 0.0, covered)
        old = self.window_[pages]
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = old * np.where(covered > 0, kept / covered, 0.0) + cash
            # The cash arrived linearly over `elapsed`; the window keeps its last T.
            beyond = cash * (self.size / elapsed)
        self.window_[pages] = np.where(elapsed < self.size, inside, beyond)
        self.last_crawl_[pages] = clock

    def estimate(self, cash: FloatArray, clock: float) -> FloatArray:
        covered = self._covered(self.last_crawl_)
        return (self.window_ + cash) / (covered + clock - self.last_crawl_)

    def measures_per_page(self) -> float:
        return 1.0


@dataclass
class VariableWindow:
    """The last ``measures`` crawls of each page: cash taken and the window's start.

    Parameters
    ----------
    measures : int
        ``k >= 1`` measures kept per page (memory: ``2 k + 2`` numbers per page).
    """

    measures: int
    cash_: FloatArray = field(default_factory=lambda: np.zeros((0, 1)))
    start_: FloatArray = field(default_factory=lambda: np.zeros((0, 1)))
    count_: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_crawl_: FloatArray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.measures < 1:
            raise ValueError(f"a variable window keeps >= 1 measures, got {self.measures}")

    def reset(self, n_pages: int) -> None:
        self.cash_ = np.zeros((n_pages, self.measures))
        self.start_ = np.full((n_pages, self.measures), _NEVER)
        self.count_ = np.zeros(n_pages, dtype=np.int64)
        self.last_crawl_ = np.full(n_pages, _NEVER)

    def record(self, pages: IntArray, cash: FloatArray, clock: float) -> None:
        slot = self.count_[pages] % self.measures
        self.cash_[pages, slot] = cash
        self.start_[pages, slot] = self.last_crawl_[pages]
        self.last_crawl_[pages] = clock
        self.count_[pages] += 1

    def estimate(self, cash: FloatArray, clock: float) -> FloatArray:
        # Once the ring is full, the oldest measure sits in the slot written next.
        oldest = self.count_ % self.measures
        start = np.where(
            self.count_ >= self.measures,
            self.start_[np.arange(self.count_.size), oldest],
            _NEVER,
        )
        return (self.cash_.sum(axis=1) + cash) / (clock - start)

    def measures_per_page(self) -> float:
        return float(np.mean(np.minimum(self.count_, self.measures))) if self.count_.size else 0.0
