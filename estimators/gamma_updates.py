"""Gamma(alpha, beta) beliefs about change rates, and how evidence updates them.

A page changes as a Poisson process with rate lambda; a belief about lambda is a Gamma
distribution with shape ``alpha`` and rate ``beta`` (``beta`` in the time unit of the
evidence: density ``beta^alpha lambda^(alpha-1) e^(-beta lambda) / Gamma(alpha)``, mean
``alpha / beta``, sd ``sqrt(alpha) / beta``). Gamma is conjugate to the Poisson process, so:

* an interval of length tau without change (likelihood ``e^(-lambda tau)``): ``beta += tau``;
* exact change times (a truthful Last-Modified, reliable notifications): C changes seen in T
  known change-free time units (likelihood ``lambda^C e^(-lambda T)``): ``alpha += C``,
  ``beta += T``.

An interval of length tau in which the page changed at least once, with no date (likelihood
``1 - e^(-lambda tau)``), is not conjugate. :func:`changed_within_update` moment-matches: the
exact posterior of one such interval has ``Z = 1 - q^alpha`` with ``q = beta / (beta + tau)``,
``E[lambda] = (alpha / beta) (1 - q^(alpha+1)) / Z`` and
``E[lambda^2] = (alpha (alpha+1) / beta^2) (1 - q^(alpha+2)) / Z``; the new Gamma has those
two moments. Several change intervals are taken one after the other (assumed-density
filtering), after every conjugate update, so each step starts from the narrowest belief.
The tests compare the result with the exact posterior integrated numerically.

Imports: numpy, :mod:`estimators.evidence`. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "RatePosterior",
    "changed_intervals_update",
    "changed_within_update",
    "check_gamma",
    "pooled_gamma",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: Least variance a moment-matched Gamma keeps, relative to its squared mean (shape <= 1e12).
_MIN_RELATIVE_VARIANCE = 1e-12


@dataclass(frozen=True)
class RatePosterior:
    """Gamma beliefs about the change rates of ``n`` pages, shape (n,) each.

    Attributes
    ----------
    alpha : shape of each page's Gamma (> 0).
    beta : rate of each page's Gamma (> 0), in the time unit of the evidence.
    evidence : observations behind each belief (intervals, Last-Modified intervals,
        notifications; 0: the belief is its group's prior).
    """

    alpha: FloatArray
    beta: FloatArray
    evidence: IntArray

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        return int(self.alpha.shape[0])

    @property
    def mean(self) -> FloatArray:
        """Posterior mean rate ``alpha / beta`` (changes per time unit), shape (n,)."""
        return np.asarray(self.alpha / self.beta, dtype=np.float64)

    @property
    def sd(self) -> FloatArray:
        """Posterior standard deviation ``sqrt(alpha) / beta``, shape (n,)."""
        return np.asarray(np.sqrt(self.alpha) / self.beta, dtype=np.float64)

    def interval(self, level: float = 0.9) -> tuple[FloatArray, FloatArray]:
        """Equal-tailed credible interval of each rate at ``level``, two arrays of shape (n,)."""
        if not 0 < level < 1:
            raise ValueError(f"level must lie in (0, 1), got {level}")
        from scipy.special import gammaincinv  # scipy.special is cheap; scipy.stats is not

        low = gammaincinv(self.alpha, (1 - level) / 2) / self.beta
        high = gammaincinv(self.alpha, (1 + level) / 2) / self.beta
        return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)

    def take(self, pages: ArrayLike) -> RatePosterior:
        """The beliefs of the given pages, in that order."""
        index = np.asarray(pages, dtype=np.intp)
        return RatePosterior(self.alpha[index], self.beta[index], self.evidence[index])


def check_gamma(alpha: ArrayLike, beta: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """``alpha`` and ``beta`` as float arrays of one shape, both finite and > 0.

    Raises
    ------
    ValueError
        Naming the first bad value.
    """
    a = np.asarray(alpha, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"alpha and beta must have one shape, got {a.shape} and {b.shape}")
    for name, values in (("alpha", a), ("beta", b)):
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            i = int(np.flatnonzero(bad.ravel())[0])
            raise ValueError(f"{name} must be finite and > 0; element {i} is {values.ravel()[i]}")
    return a, b


def changed_within_update(
    alpha: FloatArray, beta: FloatArray, tau: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Moment-matched Gamma after one interval of length ``tau`` with a change in it.

    Parameters
    ----------
    alpha, beta : ndarray of float, shape (m,)
        The beliefs before (finite, > 0).
    tau : ndarray of float, shape (m,)
        Interval lengths (finite, > 0), in the unit of ``beta``.

    Returns
    -------
    alpha, beta : ndarray of float, shape (m,)
        The Gamma with the mean and variance of the exact posterior.
    """
    log_q = -np.log1p(tau / beta)  # ln(beta / (beta + tau)) < 0
    # each ratio (1 - q^(alpha+j)) / (1 - q^alpha), with expm1 for pages where q^alpha ~ 1
    z = np.expm1(alpha * log_q)
    r1 = np.expm1((alpha + 1) * log_q) / z
    r2 = np.expm1((alpha + 2) * log_q) / z
    mean = alpha / beta * r1
    second = alpha * (alpha + 1) / (beta * beta) * r2
    var = np.maximum(second - mean * mean, _MIN_RELATIVE_VARIANCE * mean * mean)
    return mean * mean / var, mean / var


def changed_intervals_update(
    alpha: FloatArray, beta: FloatArray, page: IntArray, length: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """:func:`changed_within_update` of every change interval, one after another per page.

    Parameters
    ----------
    alpha, beta : ndarray of float, shape (n,)
        Beliefs of every page; updated copies are returned.
    page, length : ndarray, shape (m,)
        Page and length of each change interval, grouped by page in page order (as
        :attr:`estimators.evidence.ChangeIntervals.change_intervals` gives them).

    Returns
    -------
    alpha, beta : ndarray of float, shape (n,)

    Notes
    -----
    One vectorized step per rank: the k-th change interval of every page that has one, so the
    cost is that of a few array passes times the most change intervals of any page.
    """
    a = np.array(alpha, dtype=np.float64)
    b = np.array(beta, dtype=np.float64)
    if page.size == 0:
        return a, b
    starts = np.flatnonzero(np.r_[True, page[1:] != page[:-1]])
    counts = np.diff(np.r_[starts, page.size])
    # rank of each interval within its page, and the intervals sorted by rank (stable)
    rank = np.arange(page.size) - np.repeat(starts, counts)
    if counts.max() < np.iinfo(np.int16).max:
        rank = rank.astype(np.int16)  # a stable sort of small integers is a radix sort
    order = np.argsort(rank, kind="stable")
    cut = np.searchsorted(rank[order], np.arange(int(counts.max()) + 1))
    for k in range(int(counts.max())):
        rows = order[cut[k] : cut[k + 1]]
        p = page[rows]
        a[p], b[p] = changed_within_update(a[p], b[p], length[rows])
    return a, b


def pooled_gamma(
    alpha: ArrayLike,
    beta: ArrayLike,
    group: ArrayLike,
    n_groups: int,
    weight: ArrayLike | None = None,
) -> tuple[FloatArray, FloatArray]:
    """One Gamma per group of pages (a bucket, say): the moment match of the mixture of its
    pages' beliefs, which is the belief about the rate of a page drawn from the group.

    Mean ``sum w alpha/beta / sum w``, second moment ``sum w alpha (alpha+1)/beta^2 / sum w``;
    a group whose pages all hold one belief gets it back.

    Parameters
    ----------
    alpha, beta : array_like of float, shape (n,)
        The pages' beliefs (finite, > 0).
    group : array_like of int, shape (n,)
        Group of each page, in ``[0, n_groups)``.
    n_groups : int
        Number of groups.
    weight : array_like of float, shape (n,), optional
        Weight of each page (importance, say); 1 each by default.

    Returns
    -------
    alpha, beta : ndarray of float, shape (n_groups,)
        NaN for a group without pages (or without weight).
    """
    a, b = check_gamma(alpha, beta)
    g = np.asarray(group, dtype=np.intp)
    if g.shape != a.shape or a.ndim != 1:
        raise ValueError(f"group must have one label per page ({a.shape[0]}), got {g.shape}")
    if g.size and (g.min() < 0 or g.max() >= n_groups):
        raise ValueError(f"group labels must lie in [0, {n_groups})")
    w = np.ones(a.shape) if weight is None else np.asarray(weight, dtype=np.float64)
    if w.shape != a.shape or not np.all(np.isfinite(w) & (w >= 0)):
        raise ValueError("weight must be finite and >= 0, one per page")
    total = np.bincount(g, weights=w, minlength=n_groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.bincount(g, weights=w * a / b, minlength=n_groups) / total
        second = np.bincount(g, weights=w * a * (a + 1) / (b * b), minlength=n_groups) / total
        var = np.maximum(second - mean * mean, _MIN_RELATIVE_VARIANCE * mean * mean)
        return mean * mean / var, mean / var
