"""Per-page log-likelihoods of the change rate, as functions of the log rate, for many pages.

Every estimator here maximizes, or cuts at a level, a per-page function of ``theta = ln lambda``
(lambda in changes per day). Working in the log rate keeps the positivity constraint out of
the solvers, matches the log-spaced buckets, and makes each function below *concave* in
theta, so that a page has one maximum and each level is crossed once on either side of it.

* :class:`ChangeLogLikelihood`: change/no-change observations at irregular intervals (Xyleme
  sec. 6.1.1, with the product the seed text lost)::

      l(theta) = sum_c ln(1 - exp(-lambda t_c)) - lambda * sum_u t_u

  Each term ``ln(1 - exp(-e^theta t))`` has derivative ``x / (e^x - 1)``, ``x = lambda t``,
  which falls as theta grows: concave.
* :class:`ExposureLogLikelihood`: changes seen through Last-Modified, ``C ln lambda - lambda T``
  (C changes, T days known to be change-free; Cho & Garcia-Molina sec. 5).
* :class:`PenalizedLogLikelihood`: either plus the log density of a normal prior on theta (a
  log-normal prior on the rate), still concave: the log posterior up to a constant.

Each object can be restricted to a subset of its pages, so that the solvers iterate only on
pages that have not converged, and cut into blocks of consecutive pages on views of its arrays,
so that the solvers work on arrays that stay in the CPU's cache.
"""

from __future__ import annotations

from functools import cached_property
from typing import Protocol, Self

import numpy as np
from numpy.typing import NDArray

from estimators.evidence import ChangeIntervals

__all__ = [
    "ChangeLogLikelihood",
    "ExposureLogLikelihood",
    "LogRateObjective",
    "PenalizedLogLikelihood",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]


class LogRateObjective(Protocol):
    """A concave function of the log rate per page, vectorized over ``n_pages`` pages."""

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        ...

    @property
    def terms_per_page(self) -> IntArray:
        """Array elements each page's evaluation touches, shape (n_pages,): what the solvers
        split pages into cache-sized blocks by."""
        ...

    def restrict(self, keep: BoolArray) -> Self:
        """The same function for the pages where ``keep`` (shape (n_pages,)) is true."""
        ...

    def block(self, start: int, stop: int) -> Self:
        """The same function for pages ``start:stop``, on views of this one's arrays."""
        ...

    def value(self, theta: FloatArray) -> FloatArray:
        """Function value at ``theta`` (shape (n_pages,)), shape (n_pages,)."""
        ...

    def value_gradient(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Value and first derivative in theta, each shape (n_pages,)."""
        ...

    def gradient_hessian(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """First and second derivatives in theta, each shape (n_pages,)."""
        ...


class ChangeLogLikelihood:
    """Log-likelihood of change/no-change intervals as a function of the log rate.

    Change intervals are held grouped by page (CSR-style: ``counts`` per page), so that the
    rate of each interval's page is a gather by the interval's page index, restricting to a
    subset of pages is a repeated mask, and a block of consecutive pages is a slice; per-page
    sums are ``np.bincount`` (measured faster than ``np.add.reduceat`` on runs of about ten
    intervals).

    Parameters
    ----------
    counts : ndarray of int, shape (n_pages,)
        Change intervals per page.
    changed_length : ndarray of float, shape (counts.sum(),)
        Lengths of the change intervals, days, > 0, grouped by page in page order.
    unchanged_time : ndarray of float, shape (n_pages,)
        Sum of the page's no-change interval lengths, days.
    """

    def __init__(
        self, counts: IntArray, changed_length: FloatArray, unchanged_time: FloatArray
    ) -> None:
        self.counts = counts
        self.changed_length = changed_length
        self.unchanged_time = unchanged_time

    @cached_property
    def _page(self) -> IntArray:
        """Page of each change interval, shape (counts.sum(),)."""
        return np.repeat(np.arange(self.counts.shape[0], dtype=np.intp), self.counts)

    @cached_property
    def _offsets(self) -> IntArray:
        """Where each page's change intervals start, shape (n_pages + 1,)."""
        offsets = np.zeros(self.counts.shape[0] + 1, dtype=np.intp)
        np.cumsum(self.counts, out=offsets[1:])
        return offsets

    @classmethod
    def from_intervals(
        cls, intervals: ChangeIntervals, keep: BoolArray | None = None
    ) -> ChangeLogLikelihood:
        """The log-likelihood of each page of ``intervals``, or of the pages where ``keep``
        (shape (n_pages,)) is true, renumbered in order: the same as ``restrict(keep)`` on
        the whole, without copying every page's intervals first."""
        counts, unchanged = intervals.n_changes, intervals.unchanged_time
        length = intervals.changed_lengths
        if keep is not None:
            length = np.compress(np.repeat(keep, counts), length)
            counts, unchanged = counts[keep], unchanged[keep]
        return cls(counts, length, unchanged)

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        return int(self.unchanged_time.shape[0])

    @property
    def terms_per_page(self) -> IntArray:
        """Change intervals per page, plus one for the page's own terms."""
        return self.counts + 1

    def restrict(self, keep: BoolArray) -> ChangeLogLikelihood:
        """The log-likelihood of the pages where ``keep`` is true, renumbered in order."""
        kept = np.repeat(keep, self.counts)
        return ChangeLogLikelihood(
            self.counts[keep], np.compress(kept, self.changed_length), self.unchanged_time[keep]
        )

    def block(self, start: int, stop: int) -> ChangeLogLikelihood:
        """The log-likelihood of pages ``start:stop``: views, no copy."""
        first, last = self._offsets[start], self._offsets[stop]
        return ChangeLogLikelihood(
            self.counts[start:stop],
            self.changed_length[first:last],
            self.unchanged_time[start:stop],
        )

    def _sum(self, weights: FloatArray) -> FloatArray:
        sums = np.bincount(self._page, weights=weights, minlength=self.n_pages)
        return sums.astype(np.float64, copy=False)

    def _x(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        rate = np.exp(theta)
        return rate, rate[self._page] * self.changed_length

    def value(self, theta: FloatArray) -> FloatArray:
        """``sum_c ln(1 - exp(-lambda t_c)) - lambda U`` per page."""
        rate, x = self._x(theta)
        with np.errstate(divide="ignore"):
            terms = np.log(-np.expm1(-x))
        return self._sum(terms) - rate * self.unchanged_time

    def value_gradient(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Value and derivative in theta: ``sum_c x_c / (e^{x_c} - 1) - lambda U``."""
        rate, x = self._x(theta)
        # one transcendental for both sums: with m = 1 - e^-x, r = x e^-x / m = x (1 - m) / m
        # (1 - m loses digits only where r is below 1e-14 of x, far below the other terms)
        m = -np.expm1(-x)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = x * (1.0 - m) / m
            terms = np.log(m)
        exposure = rate * self.unchanged_time
        return self._sum(terms) - exposure, self._sum(ratio) - exposure

    def gradient_hessian(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """First and second derivatives in theta.

        With ``r = x / (e^x - 1)``: ``d r / d theta = r (1 - r - x)`` (from
        ``x^2 e^x / (e^x - 1)^2 = r^2 + r x``), which stays finite where ``e^x`` overflows.
        """
        rate, x = self._x(theta)
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = x / np.expm1(x)
        exposure = rate * self.unchanged_time
        return (
            self._sum(ratio) - exposure,
            self._sum(ratio * (1.0 - ratio - x)) - exposure,
        )


class ExposureLogLikelihood:
    """``C theta - e^theta T`` per page: C changes seen in T change-free days (Last-Modified).

    Parameters
    ----------
    changes : ndarray of float, shape (n_pages,)
        Changes seen, >= 0.
    exposure : ndarray of float, shape (n_pages,)
        Days known to be change-free, >= 0.
    """

    def __init__(self, changes: FloatArray, exposure: FloatArray) -> None:
        self.changes = np.asarray(changes, dtype=np.float64)
        self.exposure = np.asarray(exposure, dtype=np.float64)

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        return int(self.changes.shape[0])

    @property
    def terms_per_page(self) -> IntArray:
        """One element per page."""
        return np.ones(self.changes.shape[0], dtype=np.intp)

    def restrict(self, keep: BoolArray) -> ExposureLogLikelihood:
        """The log-likelihood of the pages where ``keep`` is true."""
        return ExposureLogLikelihood(self.changes[keep], self.exposure[keep])

    def block(self, start: int, stop: int) -> ExposureLogLikelihood:
        """The log-likelihood of pages ``start:stop``."""
        return ExposureLogLikelihood(self.changes[start:stop], self.exposure[start:stop])

    def value(self, theta: FloatArray) -> FloatArray:
        """``C theta - lambda T`` per page."""
        return self.changes * theta - np.exp(theta) * self.exposure

    def value_gradient(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Value and derivative ``C - lambda T``."""
        exposure = np.exp(theta) * self.exposure
        return self.changes * theta - exposure, self.changes - exposure

    def gradient_hessian(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Derivatives ``C - lambda T`` and ``-lambda T``."""
        exposure = np.exp(theta) * self.exposure
        return self.changes - exposure, -exposure


class PenalizedLogLikelihood:
    """A log-likelihood plus ``-(theta - mu)^2 / (2 sigma^2)``: a normal prior on the log rate.

    Parameters
    ----------
    loglik : LogRateObjective
        The log-likelihood of each page.
    mu, sigma : float
        Mean and standard deviation of the prior on ``ln lambda`` (lambda per day).
    """

    def __init__(self, loglik: LogRateObjective, mu: float, sigma: float) -> None:
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        self.loglik = loglik
        self.mu = float(mu)
        self.sigma = float(sigma)

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        return self.loglik.n_pages

    @property
    def terms_per_page(self) -> IntArray:
        """Those of the log-likelihood."""
        return self.loglik.terms_per_page

    def restrict(self, keep: BoolArray) -> PenalizedLogLikelihood:
        """The penalized log-likelihood of the pages where ``keep`` is true."""
        return PenalizedLogLikelihood(self.loglik.restrict(keep), self.mu, self.sigma)

    def block(self, start: int, stop: int) -> PenalizedLogLikelihood:
        """The penalized log-likelihood of pages ``start:stop``."""
        return PenalizedLogLikelihood(self.loglik.block(start, stop), self.mu, self.sigma)

    def _penalty(self, theta: FloatArray) -> FloatArray:
        z = (theta - self.mu) / self.sigma
        return -0.5 * z * z

    def value(self, theta: FloatArray) -> FloatArray:
        """Log-likelihood plus log prior (without its constant)."""
        return self.loglik.value(theta) + self._penalty(theta)

    def value_gradient(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Value and derivative in theta."""
        value, grad = self.loglik.value_gradient(theta)
        return value + self._penalty(theta), grad - (theta - self.mu) / self.sigma**2

    def gradient_hessian(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """First and second derivatives in theta."""
        grad, hess = self.loglik.gradient_hessian(theta)
        return grad - (theta - self.mu) / self.sigma**2, hess - 1.0 / self.sigma**2
