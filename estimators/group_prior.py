"""Gamma priors of change rates per group of pages (host, site section, URL pattern), by
empirical Bayes, shrunk toward the population when a group says little.

Pages of one site or section change alike (the sampling paper), so a page's neighbours say
something about it before its own fetches do. The model, for one level of grouping (say the
sections) under a parent level (the hosts, or the whole population)::

    lambda_i | g ~ Gamma(a, a / m_g)              pages of group g, within-group shape a
    ln m_g       ~ N(ln m_parent(g), tau^2)       group means around their parent's

Each page's evidence enters as a conjugate *message* ``lambda^c_i e^(-lambda t_i)``: exact for
unchanged time, Last-Modified and notifications, the moment-matched equivalent for change
intervals (:mod:`estimators.gamma_updates`). With the messages the marginal likelihood of a
group is closed form (negative binomial)::

    sum_i lgamma(a + c_i) - lgamma(a) + a ln b - (a + c_i) ln(b + t_i),   b = a / m_g

* ``m_g``: each group's maximum of that likelihood (one root per group, found for all groups
  at once by bisection in ``ln b``), with the variance ``s_g^2`` of ``ln m_g`` from its
  curvature.
* ``tau^2``: the between-group variance of ``ln m_g`` around the parent, by the Paule-Mandel
  method of moments (``sum_g d_g^2 / (s_g^2 + tau^2) = G - 1``).
* Shrinkage: ``ln m_g <- ln m_parent + w_g (ln m_g - ln m_parent)``, ``w_g = P / (P + s_g^2)``
  with ``P = tau^2 + v_parent`` (``v_parent``: how uncertain the parent's mean still is). A
  group with no evidence (``s_g = inf``) keeps its parent's mean; one with much keeps its own.
  What remains uncertain of ``ln m_g`` (``v_g = P s_g^2 / (P + s_g^2)``) is integrated out:
  the group's Gamma has the mean and variance of ``Gamma(a, a / m_g)`` over ``ln m_g ~
  N(., v_g)`` (a smaller shape), so thin groups give wider priors and the credible intervals
  keep their coverage.
* ``a``: the within-group shape that maximizes the marginal likelihood of every page with
  evidence (bounded scalar search), alternated twice with the steps above.

Levels are given coarse to fine; a level's parent mean for a group is the geometric mean of its
pages' priors at the level above (for nested levels, the parent group's mean). The population
prior (:func:`fit_population_prior`) is a Gamma fitted by maximum marginal likelihood on a
sample of pages, the change-interval likelihood integrated exactly on a grid of log rates.

Imports: numpy, scipy, :mod:`estimators.evidence`. No I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import optimize, special

from estimators.evidence import ChangeIntervals

__all__ = ["GroupLevelPrior", "fit_group_levels", "fit_population_prior"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: Bounds of a fitted Gamma shape: below 0.05 a prior spans tens of decades, above 1e3 it is
#: a point.
SHAPE_RANGE = (0.05, 1e3)
#: Group means are searched within this factor of the population mean, both ways.
MEAN_SPAN = 1e8
#: Bisection steps in ``ln b``: a span of 37 (``MEAN_SPAN`` both ways) to 2e-6.
BISECTION_STEPS = 24
#: Pages sampled to fit a level's shape (all when fewer).
SHAPE_SAMPLE = 200_000


@dataclass(frozen=True)
class GroupLevelPrior:
    """The fitted priors of one level of grouping.

    Attributes
    ----------
    name : the level's name (``"host"``, ``"section"``, ...).
    group : the group labels, shape (G,), sorted.
    alpha, beta : each group's Gamma prior, shape (G,) (the level's within-group shape,
        lowered by how uncertain the group's mean is).
    pages : pages per group, shape (G,).
    weight : how much of its own mean each group keeps, ``tau^2 / (tau^2 + s_g^2)`` in
        [0, 1], shape (G,) (0: all from the parent).
    between_sd : ``tau``, sd of ``ln m_g`` around the parent means.
    """

    name: str
    group: NDArray[np.int64]
    alpha: FloatArray
    beta: FloatArray
    pages: IntArray
    weight: FloatArray
    between_sd: float

    @property
    def mean(self) -> FloatArray:
        """Prior mean rate of each group, shape (G,)."""
        return np.asarray(self.alpha / self.beta, dtype=np.float64)


def _log_rate_grid(sample: ChangeIntervals, exposure: FloatArray, step: float) -> FloatArray:
    """Log rates spanning what the sample's evidence can tell apart: from 1e-3 changes in the
    longest time observed to 50 in the shortest interval (or exposure)."""
    observed = sample.total_time + exposure
    longest = float(observed.max())
    spans = np.r_[sample.length, exposure[exposure > 0]]
    shortest = float(spans.min()) if spans.size else longest
    low = math.log(1e-3 / longest)
    high = math.log(50.0 / shortest)
    return np.arange(low, high + step, step)


def fit_population_prior(
    intervals: ChangeIntervals,
    changes: FloatArray,
    exposure: FloatArray,
    *,
    max_pages: int = 5000,
    grid_step: float = 0.1,
    random_state: int = 0,
) -> tuple[float, float]:
    """Gamma ``(alpha, beta)`` of the whole population by maximum marginal likelihood.

    Parameters
    ----------
    intervals : ChangeIntervals
        Change/no-change intervals of every page (the no-change ones enter as exposure).
    changes, exposure : ndarray of float, shape (n_pages,)
        Conjugate evidence besides the intervals (C changes seen in T change-free time):
        Last-Modified, notifications; zeros where none.
    max_pages, grid_step, random_state
        Pages sampled among those with evidence, spacing of the log-rate grid, seed.

    Raises
    ------
    ValueError
        When no page has evidence.
    """
    has = np.flatnonzero((intervals.n_intervals > 0) | (exposure > 0) | (changes > 0))
    if has.size == 0:
        raise ValueError("no page has evidence (an interval, Last-Modified or a notification)")
    rng = np.random.default_rng(random_state)
    if has.size > max_pages:
        has = np.sort(rng.choice(has, max_pages, replace=False))
    sample = intervals.take(has)
    c, t = changes[has], exposure[has] + sample.unchanged_time
    grid = _log_rate_grid(sample, exposure[has], grid_step)
    page, length = sample.change_intervals
    loglik = np.empty((has.size, grid.size))
    for g, theta in enumerate(grid):
        rate = math.exp(theta)
        terms = np.log(-np.expm1(-rate * length))
        loglik[:, g] = np.bincount(page, weights=terms, minlength=has.size) + c * theta - rate * t
    peak = loglik.max(axis=1, keepdims=True)
    scaled = np.exp(loglik - peak)
    rates = np.exp(grid)

    def negative_log_marginal(params: FloatArray) -> float:
        a, b = math.exp(params[0]), math.exp(params[1])
        log_density = a * math.log(b) + a * grid - b * rates - math.lgamma(a)  # of ln lambda
        marginal = scaled @ (np.exp(log_density) * grid_step)
        return -float(np.sum(np.log(np.maximum(marginal, 1e-300))))

    crude = (sample.n_changes + c + 0.5) / (sample.total_time + exposure[has] + 1e-12)
    mean, var_log = float(np.mean(crude)), float(np.var(np.log(crude)))
    a0 = float(np.clip(1.0 / max(var_log, 1e-3), *SHAPE_RANGE))
    start = np.array([math.log(a0), math.log(a0 / mean)])
    lo_a, hi_a = (math.log(v) for v in SHAPE_RANGE)
    result = optimize.minimize(
        negative_log_marginal,
        start,
        method="L-BFGS-B",
        bounds=[(lo_a, hi_a), (-grid[-1] + lo_a - 5, -grid[0] + hi_a + 5)],
    )
    return math.exp(result.x[0]), math.exp(result.x[1])


def _group_means(
    a: float,
    c: FloatArray,
    t: FloatArray,
    group: IntArray,
    n_groups: int,
    log_mean_bounds: tuple[float, float],
) -> tuple[FloatArray, FloatArray]:
    """Each group's maximum-likelihood ``ln m_g`` under shape ``a``, and its variance
    (``inf`` for a group without evidence), shapes (G,)."""
    count = np.bincount(group, minlength=n_groups).astype(np.float64)
    # dl/du = F(u) = sum_i a - (a + c_i) b / (b + t_i), b = e^u, falls with u: bisection
    lo = np.full(n_groups, math.log(a) - log_mean_bounds[1])
    hi = np.full(n_groups, math.log(a) - log_mean_bounds[0])
    weight = a + c
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        b = np.exp(mid)[group]
        f = a * count - np.bincount(group, weights=weight * b / (b + t), minlength=n_groups)
        up = f > 0  # the root lies above mid
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    u = 0.5 * (lo + hi)
    b = np.exp(u)[group]
    info = np.bincount(group, weights=weight * b * t / (b + t) ** 2, minlength=n_groups)
    with np.errstate(divide="ignore"):
        var = np.where(info > 0, 1.0 / info, np.inf)
    return math.log(a) - u, var


def _between_variance(d: FloatArray, s2: FloatArray) -> float:
    """Paule-Mandel ``tau^2``: ``sum d^2 / (s^2 + tau^2) = k - 1`` over groups with evidence."""
    keep = np.isfinite(s2)
    d, s2 = d[keep], s2[keep]
    if d.size < 2:
        return 0.0

    def excess(tau2: float) -> float:
        return float(np.sum(d * d / (s2 + tau2))) - (d.size - 1)

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0 and hi < 1e6:
        hi *= 4
    return float(optimize.brentq(excess, 0.0, hi, xtol=1e-6))


def _fit_shape(c: FloatArray, t: FloatArray, mean: FloatArray, start: float) -> float:
    """Shape ``a`` maximizing ``sum_i`` of the pages' negative-binomial marginal likelihoods
    under ``Gamma(a, a / mean_i)``."""

    def negative(log_a: float) -> float:
        a = math.exp(log_a)
        b = a / mean
        value = special.gammaln(a + c) - math.lgamma(a) + a * np.log(b) - (a + c) * np.log(b + t)
        return -float(np.sum(value))

    lo, hi = (math.log(v) for v in SHAPE_RANGE)
    result = optimize.minimize_scalar(negative, bounds=(lo, hi), method="bounded")
    return float(math.exp(result.x)) if result.success else start


def fit_group_levels(
    c: FloatArray,
    t: FloatArray,
    population: tuple[float, float],
    levels: list[tuple[str, NDArray[np.integer]]],
    *,
    random_state: int = 0,
) -> tuple[FloatArray, FloatArray, list[GroupLevelPrior]]:
    """Every page's prior after the levels of grouping, and each level's fitted priors.

    Parameters
    ----------
    c, t : ndarray of float, shape (n,)
        Each page's evidence as a conjugate message ``lambda^c e^(-lambda t)`` (0, 0: none).
    population : (alpha, beta)
        The population prior, the parent of the first level.
    levels : list of (name, labels)
        Coarse to fine; labels shape (n,), non-negative integers.

    Returns
    -------
    alpha, beta : ndarray of float, shape (n,)
        Each page's prior at the finest level.
    fitted : list of GroupLevelPrior
    """
    n = c.shape[0]
    a0, b0 = population
    page_shape = a0
    page_log_mean = np.full(n, math.log(a0 / b0))
    page_log_var = np.zeros(n)  # uncertainty of each page's group mean, ln scale
    bounds = (math.log(a0 / b0) - math.log(MEAN_SPAN), math.log(a0 / b0) + math.log(MEAN_SPAN))
    has = np.flatnonzero((c > 0) | (t > 0))
    rng = np.random.default_rng(random_state)
    sample = has
    if has.size > SHAPE_SAMPLE:
        sample = np.sort(rng.choice(has, SHAPE_SAMPLE, replace=False))
    fitted = []
    for name, labels in levels:
        raw = np.asarray(labels)
        if raw.shape != (n,):
            raise ValueError(f"group labels {name!r} must have one label per page ({n})")
        if not np.issubdtype(raw.dtype, np.integer) or (raw.size and raw.min() < 0):
            raise ValueError(f"group labels {name!r} must be non-negative integers")
        group_ids, group = np.unique(raw, return_inverse=True)
        group = group.astype(np.intp)
        n_groups = group_ids.size
        count = np.bincount(group, minlength=n_groups)
        parent = np.bincount(group, weights=page_log_mean, minlength=n_groups) / count
        parent_var = np.bincount(group, weights=page_log_var, minlength=n_groups) / count
        shape = page_shape
        for _ in range(2):
            own, s2 = _group_means(shape, c, t, group, n_groups, bounds)
            d = own - parent
            tau2 = _between_variance(d, s2)
            spread = parent_var + tau2  # prior variance of ln m_g around the parent's
            known = np.isfinite(s2) & (spread > 0)
            s2_or_1 = np.where(known, s2, 1.0)
            weight = np.where(known, spread / (spread + s2_or_1), 0.0)
            log_mean = parent + weight * d
            log_var = np.where(known, spread * s2_or_1 / (spread + s2_or_1), spread)
            if sample.size:
                shape = _fit_shape(c[sample], t[sample], np.exp(log_mean[group[sample]]), shape)
        alpha, beta = _integrate_group_mean(shape, log_mean, log_var)
        fitted.append(
            GroupLevelPrior(
                name=name,
                group=group_ids.astype(np.int64),
                alpha=alpha,
                beta=beta,
                pages=count.astype(np.intp),
                weight=weight,
                between_sd=math.sqrt(tau2),
            )
        )
        page_shape = shape
        page_log_mean = log_mean[group]
        page_log_var = log_var[group]
    if not fitted:
        return np.full(n, a0), np.full(n, b0), fitted
    alpha, beta = _integrate_group_mean(page_shape, page_log_mean, page_log_var)
    return alpha, beta, fitted


def _integrate_group_mean(
    shape: float, log_mean: FloatArray, log_var: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The Gamma with the mean and variance of ``lambda ~ Gamma(shape, shape / m)`` with
    ``ln m ~ N(log_mean, log_var)``: the group prior with the uncertainty of its mean.

    ``E[lambda] = e^(mu + v/2)``, ``Var[lambda] = e^(2 mu + 2 v) (1 + 1/shape) - E[lambda]^2``,
    so the shape becomes ``1 / ((1 + 1/shape) e^v - 1)`` (``shape`` itself at ``v = 0``).
    """
    mean = np.exp(log_mean + 0.5 * log_var)
    alpha = 1.0 / ((1.0 + 1.0 / shape) * np.exp(log_var) - 1.0)
    return alpha, alpha / mean
