"""The four page-level refresh objectives as marginal-value functions (pure, vectorized).

Every objective here is separable over pages and concave in each page's refresh rate, so the
optimal schedule under a crawl budget is characterised by one number per constraint (a
Lagrange multiplier, ``m``): each page is refreshed at the rate where its marginal value
equals the multiplier it faces. An objective therefore needs only four things:

``rate(m)``       the refresh rate f (crawls per period) at which the page's marginal value
                  is ``m`` (decreasing in ``m``; 0 where even the first crawl is worth less);
``rate_slope(m)`` df/dm (<= 0), for Newton steps on the multipliers;
``marginal(f)``   the marginal value at rate f (for KKT checks and reports);
``value(f)``      the objective itself.

Symbols, per page: ``lam`` change rate (changes per period), ``w`` importance (weight,
centered on 1 by :mod:`planner.schedules.optimal`), ``f`` refresh rate (crawls per period). A page
that never changes (``lam = 0``) or does not matter (``w = 0``) is *inactive*: no crawl is
worth anything to it, and it is refreshed only as often as a lower bound forces.

The objectives (REFERENCE.md sec. 3):

* ``obsolescence`` (Xyleme sec. 6.3): page obsolescence grows as ``w lam (t - t0)``; refreshed
  every ``1/f`` it averages ``w lam / (2 f)``. Minimising the sum under ``sum f = G`` gives
  ``f = sqrt(w lam / (2 m))``: Xyleme's ``t = K / sqrt(w lam)``. Never starves a page.
* ``freshness`` (Cho & Garcia-Molina, TODS 2003): periodic refresh at f keeps the page fresh a
  fraction ``F = (f / lam) (1 - exp(-lam / f))`` of the time; maximise ``sum w F``. Marginal
  ``(w / lam) g(lam / f)`` with ``g(x) = 1 - exp(-x) (1 + x)``; pages with ``w / lam <= m``
  get no refresh (the fastest pages starve first).
* ``harmonic`` (Kolobov et al., NeurIPS 2019): minimise ``sum w ln(1 + lam / f)``; closed form
  ``f = (-lam + sqrt(lam^2 + 4 w lam / m)) / 2``. Never starves a page.
* ``binary`` (Azar et al., PNAS 2018): Poisson crawling keeps a page fresh a fraction
  ``f / (f + lam)``; maximise ``sum w f / (f + lam)``; ``f = sqrt(w lam / m) - lam`` clipped
  at 0, so pages with ``w / lam <= m`` starve.

Arrays are float64 of shape (n,); ``m`` is broadcast against them and may hold ``inf``
(a host saturated at its lower bounds: rate 0 before bounds).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = [
    "OBJECTIVES",
    "Binary",
    "Freshness",
    "Harmonic",
    "Obsolescence",
    "RefreshObjective",
    "freshness_gain",
    "inverse_gain",
    "objective_named",
]

_EXP_LIMIT = 700.0  # exp(700) is near the largest float64


class RefreshObjective(Protocol):
    """One page-level refresh objective (see the module docstring)."""

    name: str
    maximize: bool
    starves: bool

    def rate(self, m: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Refresh rate at which each page's marginal value is ``m`` (active pages, m > 0)."""
        ...

    def rate_slope(
        self, m: np.ndarray, f: np.ndarray, lam: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        """df/dm at ``m`` where ``f = rate(m)`` (active pages, m > 0)."""
        ...

    def marginal(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The marginal value of one more crawl per period at rate ``f`` (active pages)."""
        ...

    #: the objective is the importance-weighted mean of the pages' :meth:`terms` over
    #: ``sum w`` (freshness), not their sum: either way it adds up over chunks of pages
    mean: bool

    def terms(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Each page's term of the objective (weighted by ``w`` where ``mean``)."""
        ...

    def value(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> float:
        """The objective at rates ``f`` (all pages)."""
        ...

    def coarse(self) -> RefreshObjective:
        """A cheaper copy (rates to about 1e-6) for searching multipliers, or ``self``."""
        ...


def freshness_gain(x: np.ndarray) -> np.ndarray:
    """``g(x) = 1 - exp(-x) (1 + x)``, accurate for small x (x = lam / f >= 0)."""
    x = np.asarray(x, dtype=float)
    small = x < 1e-3
    xs = np.where(small, x, 0.0)
    series = xs * xs * (0.5 - xs / 3.0 + xs * xs / 8.0 - xs**3 / 30.0)
    with np.errstate(over="ignore"):
        full = -np.expm1(-x) - x * np.exp(-x)
    return np.where(small, series, full)


def _log1p_minus_x(x: np.ndarray) -> np.ndarray:
    """``ln(1 + x) - x`` for x >= 0 without cancellation (a series below 0.01)."""
    out = np.log1p(x) - x
    small = x < 0.01
    if small.any():
        xs = x[small]
        h = -1 / 6 + xs * (1 / 7 - xs / 8)
        out[small] = xs * xs * (-1 / 2 + xs * (1 / 3 + xs * (-1 / 4 + xs * (1 / 5 + xs * h))))
    return out


def _polish(x: np.ndarray, target: np.ndarray) -> np.ndarray:
    """One Newton step on ``phi(x) = ln(1 + x) - x - target`` (concave, decreasing)."""
    return x + (_log1p_minus_x(x) - target) * (1.0 + x) / x


def _inverse_gain_newton(c: np.ndarray) -> np.ndarray:
    """x > 0 with ``g(x) = c`` for c in (0, 1), by Newton's method from the right.

    ``g(x) = c`` is ``phi(x) = ln(1 + x) - x - ln(1 - c) = 0``; phi is concave and decreasing
    on x > 0, so Newton's iterates from a start right of the root fall to it monotonically.
    Used to build :data:`_TABLE` and to check :func:`inverse_gain`.
    """
    target = np.log1p(-c)
    big = -target
    x = big + np.sqrt(2.0 * big) + np.log1p(big)
    for _ in range(200):
        step = (_log1p_minus_x(x) - target) * (1.0 + x) / x
        x = x + step
        if not np.any(np.abs(step) > 1e-9 * x):
            return _polish(x, target)
    return x


# ln x against logit(c) = ln c - ln(1 - c) is smooth and nearly linear at both ends
# (ln x ~ (logit + ln 2) / 2 for small c, x ~ logit for c near 1): a uniform table and linear
# interpolation give x to about 3e-7, and one Newton polish to about 1e-13.
_LOGIT_LOW, _LOGIT_HIGH, _STEP = -40.0, 36.0, 1.0 / 512
_GRID = np.arange(_LOGIT_LOW, _LOGIT_HIGH + _STEP, _STEP)
_TABLE = np.log(_inverse_gain_newton(1.0 / (1.0 + np.exp(-_GRID))))


def inverse_gain(c: np.ndarray, polish: int = 1) -> np.ndarray:
    """x > 0 with ``g(x) = 1 - exp(-x)(1 + x) = c``, for c in (0, 1) (vectorized).

    Table lookup on logit(c), then ``polish`` Newton steps (quadratic convergence: 3e-7 ->
    1e-13 -> rounding; 0 steps give the table's 3e-7 for a cheap search). Tiny c starts from
    the series ``x = s (1 + s / 3)``, ``s = sqrt(2 c)``.
    """
    c = np.asarray(c, dtype=float)
    target = np.log1p(-c)
    logit = np.log(c) - target
    pos = np.clip((logit - _LOGIT_LOW) / _STEP, 0.0, _TABLE.shape[0] - 1.000001)
    k = pos.astype(np.intp)
    frac = pos - k
    x = np.exp(_TABLE[k] + frac * (_TABLE[k + 1] - _TABLE[k]))
    tiny = logit < _LOGIT_LOW
    if tiny.any():
        root = np.sqrt(2.0 * c[tiny])
        x[tiny] = root * (1.0 + root / 3.0)
    huge = logit > _LOGIT_HIGH
    if huge.any():
        big = -target[huge]
        x[huge] = big + np.log1p(big)
    for _ in range(polish):
        x = _polish(x, target)
    return x


class _SumOfTerms:
    """Objectives that are a sum over pages of ``terms`` (costs to minimise)."""

    mean = False

    def terms(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def value(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> float:
        return float(self.terms(f, lam, w).sum())


class _FreshShare:
    """Objectives that are an importance-weighted mean of each page's fresh share of time
    (``_fresh``, in [0, 1]); a page that never changes is always fresh."""

    mean = True

    @staticmethod
    def _fresh(f: np.ndarray, lam: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def terms(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        return w * self._fresh(f, lam)

    def value(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> float:
        return _weighted_mean(self._fresh(f, lam), w)


class Obsolescence(_SumOfTerms):
    """Xyleme's average obsolescence ``sum w lam / (2 f)`` (minimised)."""

    name = "obsolescence"
    maximize = False
    starves = False

    def coarse(self) -> RefreshObjective:
        return self

    def rate(self, m: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.sqrt(w * lam / (2.0 * m))

    def rate_slope(
        self, m: np.ndarray, f: np.ndarray, lam: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        return -f / (2.0 * m)

    def marginal(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return w * lam / (2.0 * f * f)

    def terms(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        load = w * lam
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(load > 0, load / (2.0 * f), 0.0)


class Freshness(_FreshShare):
    """Cho & Garcia-Molina's importance-weighted average freshness (maximised)."""

    name = "freshness"
    maximize = True
    starves = True

    #: Newton polish steps after the table (1: 1e-13; 0: the cheap search copy, 3e-7)
    polish = 1

    def rate(self, m: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.broadcast_to(m * lam / w, lam.shape)
        live = c < 1.0
        cl = np.where(live, c, 0.5)
        x = inverse_gain(cl, self.polish)
        return np.where(live, lam / x, 0.0)

    def coarse(self) -> RefreshObjective:
        search = Freshness()
        search.polish = 0
        return search

    def rate_slope(
        self, m: np.ndarray, f: np.ndarray, lam: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        # f = lam / x(c), c = m lam / w, dx/dc = exp(x) / x:  df/dm = -(lam^2 / w) exp(x) / x^3
        live = f > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x = np.where(live, lam / f, 1.0)
            slope = -(lam * lam / w) * np.exp(np.minimum(x, _EXP_LIMIT)) / x**3
        return np.where(live, slope, 0.0)

    def marginal(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(f > 0, lam / f, np.inf)
            return (w / lam) * np.where(np.isinf(x), 1.0, freshness_gain(x))

    @staticmethod
    def _fresh(f: np.ndarray, lam: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = lam / f
            fresh = np.where(f > 0, -np.expm1(-ratio) / ratio, 0.0)
        return np.where(lam > 0, fresh, 1.0)


class Harmonic(_SumOfTerms):
    """Kolobov et al.'s harmonic staleness ``sum w ln(1 + lam / f)`` (minimised)."""

    name = "harmonic"
    maximize = False
    starves = False

    def coarse(self) -> RefreshObjective:
        return self

    def rate(self, m: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        # (-lam + sqrt(lam^2 + 4 w lam / m)) / 2, written without cancellation
        q = 4.0 * w * lam / m
        return q / (2.0 * (lam + np.sqrt(lam * lam + q)))

    def rate_slope(
        self, m: np.ndarray, f: np.ndarray, lam: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        return -w * lam / (m * m * (2.0 * f + lam))

    def marginal(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return w * lam / (f * (f + lam))

    def terms(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        load = w * lam
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(load > 0, w * np.log1p(lam / f), 0.0)


class Binary(_FreshShare):
    """Azar et al.'s binary freshness under Poisson crawling ``sum w f / (f + lam)`` (max)."""

    name = "binary"
    maximize = True
    starves = True

    def coarse(self) -> RefreshObjective:
        return self

    def rate(self, m: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.maximum(np.sqrt(w * lam / m) - lam, 0.0)

    def rate_slope(
        self, m: np.ndarray, f: np.ndarray, lam: np.ndarray, w: np.ndarray
    ) -> np.ndarray:
        return np.where(f > 0, -0.5 * np.sqrt(w * lam / m) / m, 0.0)

    def marginal(self, f: np.ndarray, lam: np.ndarray, w: np.ndarray) -> np.ndarray:
        return w * lam / (f + lam) ** 2

    @staticmethod
    def _fresh(f: np.ndarray, lam: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(lam > 0, f / (f + lam), 1.0)


def _weighted_mean(values: np.ndarray, w: np.ndarray) -> float:
    total = float(w.sum())
    if total <= 0:
        return float(values.mean()) if values.size else float("nan")
    return float((values * w).sum() / total)


#: The objective names ``crawlplan schedule --objective`` accepts.
OBJECTIVES = ("obsolescence", "freshness", "harmonic", "binary")


def objective_named(name: str) -> RefreshObjective:
    """A fresh objective instance for ``name`` (one of :data:`OBJECTIVES`)."""
    table: dict[str, type[RefreshObjective]] = {
        "obsolescence": Obsolescence,
        "freshness": Freshness,
        "harmonic": Harmonic,
        "binary": Binary,
    }
    try:
        return table[name]()
    except KeyError:
        raise ValueError(
            f"unknown refresh objective {name!r}: choose one of {', '.join(OBJECTIVES)}"
        ) from None
