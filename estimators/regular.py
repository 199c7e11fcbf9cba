"""Reference estimators that count changes: naive ``X / T`` and Cho & Garcia-Molina's improved one.

Both summarize a page by n intervals, X of which saw a change, over T days. They assume regular
access (every I days); on irregular intervals I is taken as the mean ``T / n``, which is
exactly what makes them worse than the irregular-interval MLE (:mod:`estimators.poisson`).
They are kept as baselines for the benchmark and for a reader checking the papers.

* Naive (Cho & Garcia-Molina, TOIT 2003, sec. 4.1): ``lambda = X / T``. A fetch sees at most
  one change per interval, so it is biased low, and for lambda I >> 1 it tends to 1/I, not
  lambda: inconsistent.
* Improved (sec. 4.2): ``lambda = -ln((n - X + 0.5) / (n + 0.5)) / I``. The 0.5 terms remove
  most of the bias of ``-ln(1 - X/n) / I`` (the MLE for regular access) and keep it finite when
  every interval changed, where it saturates at ``ln(2n + 1) / I``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy import special

from estimators.defaults import CONFIDENCE
from estimators.evidence import ChangeIntervals

__all__ = ["ImprovedRegularRate", "NaiveRate", "improved_regular_rate"]

FloatArray = NDArray[np.float64]


def improved_regular_rate(
    n_intervals: NDArray[np.integer] | FloatArray,
    n_changes: NDArray[np.integer] | FloatArray,
    interval: FloatArray,
) -> FloatArray:
    """Cho & Garcia-Molina's ``-ln((n - X + 0.5) / (n + 0.5)) / I``, per page.

    Parameters
    ----------
    n_intervals, n_changes : ndarray, shape (n_pages,)
        n and X.
    interval : ndarray of float, shape (n_pages,)
        Access interval I, days.

    Returns
    -------
    ndarray of float, shape (n_pages,)
        Changes per day; NaN where n = 0.
    """
    n = np.asarray(n_intervals, dtype=np.float64)
    x = np.asarray(n_changes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = -np.log((n - x + 0.5) / (n + 0.5)) / np.asarray(interval, dtype=np.float64)
    return np.where(n > 0, rate, np.nan)


class NaiveRate:
    """``X / T``: changes seen per day observed.

    Attributes
    ----------
    rate_ : ndarray of float, shape (n_pages,)
        Changes per day; NaN for a page without intervals.
    """

    def __init__(self) -> None:
        pass

    def fit(self, intervals: ChangeIntervals) -> NaiveRate:
        """Estimate every page; returns self."""
        total = intervals.total_time
        with np.errstate(divide="ignore", invalid="ignore"):
            self.rate_ = np.where(total > 0, intervals.n_changes / total, np.nan)
        return self


class ImprovedRegularRate:
    """Cho & Garcia-Molina's improved estimator, with I the page's mean interval.

    The interval maps the exact Clopper-Pearson interval of the change probability
    ``p = 1 - exp(-lambda I)`` through ``lambda = -ln(1 - p) / I``; it ignores the estimator's
    0.5 correction, so it is a reference, not a calibrated interval for this estimate.

    Parameters
    ----------
    confidence : float
        Coverage of the interval.

    Attributes
    ----------
    rate_, rate_low_, rate_high_ : ndarray of float, shape (n_pages,)
        Changes per day; NaN for a page without intervals; ``rate_high_`` is +inf when every
        interval changed.
    """

    def __init__(self, *, confidence: float = CONFIDENCE) -> None:
        self.confidence = confidence

    def fit(self, intervals: ChangeIntervals) -> ImprovedRegularRate:
        """Estimate every page; returns self."""
        n = intervals.n_intervals.astype(np.float64)
        x = intervals.n_changes.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_interval = intervals.total_time / n
        self.rate_ = improved_regular_rate(n, x, mean_interval)
        alpha = 1.0 - self.confidence
        with np.errstate(divide="ignore", invalid="ignore"):
            p_low = np.where(x > 0, special.betaincinv(x, n - x + 1, alpha / 2), 0.0)
            p_high = np.where(x < n, special.betaincinv(x + 1, n - x, 1 - alpha / 2), 1.0)
            self.rate_low_ = np.where(n > 0, -np.log1p(-p_low) / mean_interval, np.nan)
            self.rate_high_ = np.where(n > 0, -np.log1p(-p_high) / mean_interval, np.nan)
        return self
