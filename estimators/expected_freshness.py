"""Freshness in expectation over a Gamma(alpha, beta) belief about the change rate.

With ``lambda ~ Gamma(alpha, beta)`` (``beta`` in the time unit of ``k`` and ``I``):

* a page last crawled ``k`` ago is fresh with probability
  ``E[e^(-lambda k)] = (beta / (beta + k))^alpha`` (the Gamma's Laplace transform);
* refreshed periodically every ``I``, its time-averaged freshness is
  ``E[(1 - e^(-lambda I)) / (lambda I)] = (1/I) int_0^I (beta / (beta + s))^alpha ds
  = beta / ((alpha - 1) I) * (1 - (beta / (beta + I))^(alpha - 1))``, and at ``alpha = 1``
  ``(beta / I) ln(1 + I / beta)``.

Both are computed as ``exp`` / ``expm1`` of ``L = ln(1 + I / beta)``, so they hold near
``alpha = 1``, for tiny ``I / beta`` and for huge ones. Broadcasting numpy functions.

Imports: numpy, :mod:`estimators.gamma_updates`. No I/O.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from estimators.gamma_updates import check_gamma

__all__ = ["expected_fresh_probability", "expected_periodic_freshness"]

FloatArray = NDArray[np.float64]


def _check_time(name: str, values: ArrayLike, *, positive: bool) -> FloatArray:
    out = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(out) & ((out > 0) if positive else (out >= 0))
    if not ok.all():
        i = int(np.flatnonzero(~ok.ravel())[0])
        sign = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {sign}; element {i} is {out.ravel()[i]}")
    return out


def expected_fresh_probability(alpha: ArrayLike, beta: ArrayLike, k: ArrayLike) -> FloatArray:
    """``E[e^(-lambda k)] = (beta / (beta + k))^alpha``: probability that a page last crawled
    ``k`` ago has not changed since, under ``lambda ~ Gamma(alpha, beta)``; broadcast shapes.

    Raises
    ------
    ValueError
        When alpha or beta is not finite and > 0, or k not finite and >= 0.
    """
    a, b = check_gamma(*np.broadcast_arrays(alpha, beta))
    age = _check_time("k", k, positive=False)
    return np.asarray(np.exp(-a * np.log1p(age / b)), dtype=np.float64)


def expected_periodic_freshness(
    alpha: ArrayLike, beta: ArrayLike, interval: ArrayLike
) -> FloatArray:
    """``E[(1 - e^(-lambda I)) / (lambda I)]``: time-averaged freshness of a page crawled every
    ``I`` under ``lambda ~ Gamma(alpha, beta)``; broadcast shapes.

    Raises
    ------
    ValueError
        When alpha or beta is not finite and > 0, or the interval not finite and > 0.
    """
    a, b = check_gamma(*np.broadcast_arrays(alpha, beta))
    period = _check_time("interval", interval, positive=True)
    log_ratio = np.log1p(period / b)  # L = ln((beta + I) / beta)
    x = (a - 1.0) * log_ratio
    # (1 - e^-x) / x, 1 at x = 0 (alpha = 1: the log form)
    small = np.abs(x) < 1e-8
    safe = np.where(small, 1.0, x)
    phi = np.where(small, 1.0 - 0.5 * x, -np.expm1(-safe) / safe)
    return np.asarray(b / period * log_ratio * phi, dtype=np.float64)
