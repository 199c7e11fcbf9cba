r"""The steady-rate bucket model: each period valued at the steady state of its crawl rate.

Equation (2) of the WebFountain model (:mod:`planner.model.webfountain`) values a crawl at the
period's end and draws a bucket's crawled pages at random. The crawler does something else:
inside a bucket it takes the pages unvisited longest first, its crawls are spread over the
period, and users measure the objective averaged over time. A bucket of N pages crawled x
times a period that way is *periodic refresh* at the rate ``f = x / N`` crawls per page and
period, and the time-averaged value of periodic refresh has a closed form for each of the
page schedules' objectives (:mod:`planner.schedules.objectives`). This model values every
period of every bucket by that closed form at the period's own rate, and keeps the WebFountain
structure around it: per-period capacity and crawl costs, new pages against re-crawls,
discovery, bucket growth, and politeness caps: per bucket, and per group of buckets (a
host that accepts at most K crawls a period, whose pages the caller keeps in buckets of
their own).

Symbols (indices from 0; ``lambda`` is the change rate per period, ``-ln(1 - a)``):

=====================  ===================================================================
symbol                 meaning (units)
=====================  ===================================================================
i = 0..B-1, t = 0..T-1 bucket, period
x[i,t]                 crawls of bucket i's pages in period t (variable, pages)
N[i,t]                 pages of bucket i during period t (variable, pages), b0 + growth
z[t], n[t]             new pages crawled in period t; new pages known at the end of t
lambda[i,t], w[i]      change rate (per period); importance per page (weight)
C[t], cost[i,t], d[t]  crawl time of period t; per old-page crawl; per new-page crawl
oldnwt, newnwt, nconst discovery: new pages per old crawl, per new crawl, per period
p[i]                   share of crawled new pages that join bucket i
cap[i,t]               most crawls bucket i's hosts allow in period t (politeness; inf: none)
R[g], K[g,t]           host group g: its bucket rows; most crawls its host allows in t
=====================  ===================================================================

The values of a period (per bucket, N pages crawled x times; ``u = lambda N / x``, the
changes per revisit interval), :func:`period_value` in numpy and the same expressions in Pyomo:

=============  ====================================  ========  ==========================
objective      value V(x, N) of the period           sense     page-level form (per page)
=============  ====================================  ========  ==========================
freshness      ``(x / lambda) (1 - e^-u)``            maximize  Cho: (f/l)(1 - e^(-l/f))
obsolescence   ``lambda N^2 / (2 x)``                 minimize  Xyleme: l / (2 f)
harmonic       ``N ln(1 + u)``                        minimize  Kolobov: ln(1 + l/f)
binary         ``N x / (x + lambda N)``               maximize  Azar: f / (f + l)
=============  ====================================  ========  ==========================

Each is N times the page-level value at ``f = x / N`` (the perspective of a concave or convex
function), so it is jointly concave (maximize) or convex (minimize) in (x, N): the model is a
convex program, Ipopt's optimum is global. Every term is weighted by ``w[i]``.

The constraints, linear (WebFountain eqs. (1), (3), (4), (6) of REFERENCE.md sec. 2)::

    capacity   sum_i cost[i,t] x[i,t] + d[t] z[t] <= C[t]
    growth     N[i,0] = b0[i],  N[i,t+1] = N[i,t] + p[i] z[t]
    new pages  n[t] = n[t-1] + sum_i oldnwt[i,t] x[i,t] + (newnwt[t] - 1) z[t] + nconst,
               n[-1] = n0,  z[t] <= n[t-1]
    at most    x[i,t] <= N[i,t]   (a page once a period: the release takes distinct pages)
               x[i,t] <= cap[i,t]
    host caps  sum_{i in R[g]} x[i,t] <= K[g,t]   (one row per group g and period t)

**Host caps.** A host that accepts at most K crawls a period (robots.txt Crawl-delay, a
configured delay) cannot take more; a plan that gives its pages more loses the surplus (the
release skips a full host's pages). The caller splits each bucket holding pages of a bound
host into rows: one per (bucket, bound host), with that host's pages only, and one for the
bucket's other pages. A row's rate is its bucket's, so where no cap binds the split rows get
the same crawls per page as the unsplit bucket (the value is N times a function of x / N)
and the plan is the unsplit one; where a cap binds, the host's crawls go to its rows by
their marginal values and the capacity it cannot take to the other rows. The rows are
linear, the model stays convex.

**Why each period's value is its steady state.** In a cycle of constant rates (no new pages,
constant capacity) the model is, bucket by bucket, the page-level optimum of
:mod:`planner.schedules.optimal` for pages of the bucket's rate, with continuous revisit
intervals: the plan's crawl rates equal the freshness-optimal allocation aggregated to the
buckets (tests/test_steady_rates.py checks this against the closed form). Where the rate
changes from period to period the value is that of the rate the crawl converges to: exact for
the periodic crawl the model plans, an approximation during a change of rate (a bucket whose
crawl doubles takes its oldest pages first and gains more at once than the steady value says).
No terminal value is needed for re-crawls: a period's value does not depend on the periods
after it.

**New pages** enlarge N from the period after their crawl, and so the value of the bucket
they join: within the horizon the growth terms value them. A page lives on after the horizon
(``lifetime`` periods on average), so for maximized objectives a crawled new page also earns
``new_value[i]`` if it joins bucket i (share ``p[i]``), linear in z. The solver
(:func:`planner.solver.steady_solver.solve_steady`) sets it from the plan itself: a page added
to a bucket whose crawls grow with it is worth ``dV/dN`` per period (for freshness
``e^-u``, the freshness a page has when its turn comes; by Euler's theorem this is what the
page adds net of the crawls that keep it), so ``lifetime * dV/dN``, and at least what one crawl
and no other gives it, ``(1 - e^(-lambda lifetime)) / lambda`` for freshness (a page of a bucket
the plan starves). For minimized objectives a new page not yet crawled costs, each period and
``lifetime`` more periods at the horizon's end, the value of the worst bucket's page under the
uniform crawl (``new_penalty``): a page the repository lacks is at least as bad as its worst.

**A growing web** (``SteadySetup.renewal``). New pages are crawled when they are found, so
a web that gains pages holds many whose first crawl was recent: they are not due, and a
bucket's crawls go to its older pages. With pages found at ``beta`` per page and period
(the web's pages age like a population growing at that rate: the share older than ``a`` is
``e^(-beta a)``, deaths or not) and revisited every ``I`` periods of age, a bucket's re-crawls
per page and period are ``beta / (e^(beta I) - 1)``, not ``1 / I``, and its fresh share is
``beta (1 - e^(-(lambda + beta) I)) / ((lambda + beta) (1 - e^(-beta I)))``. In terms of
``x`` and ``N`` (``y = beta N / x``, ``k = 1 + lambda / beta``)::

    V       = (x + beta N) / (lambda + beta) (1 - (1 + y)^(-k))
    dV/dN   = (beta + lambda (1 + y)^(-k)) / (lambda + beta)
    I       = ln(1 + y) / beta          (the revisit interval, :func:`revisit_interval`)

the known-rate form as ``beta`` goes to 0, and still the perspective of a concave function.
Planning at ``1 / I`` on such a web spends a whole interval's crawls on pages crawled at
birth: the plan's revisit intervals come out too long and its slow buckets over-crawled
(lifetimes version 2 with 2 % births a period, every page once in 28 periods: the freshness
0.0122 below the page-level optimum's, docs/benchmarks.md). Freshness with known rates only;
the other objectives, and beliefs (``rate_shape``), plan as if ``beta = 0``.

**Uncertain rates** (issue 25). A bucket's rate may be a belief, not a number: lambda ~
Gamma(alpha, beta) with mean ``lambda[i,t] = alpha / beta`` (``SteadySetup.rate_shape`` gives
alpha per bucket). Freshness is then valued by its expectation, as the conjugate prior makes
it closed: a page last crawled s periods ago is fresh with probability ``E[e^(-lambda s)] =
(beta / (beta + s))^alpha``, so with ``I = N / x``::

    E[V]    = x int_0^I (beta / (beta + s))^alpha ds
            = x beta / (alpha - 1) (1 - (beta / (beta + I))^(alpha - 1))
    dE[V]/dN = (beta / (beta + I))^alpha

still concave (an expectation of concave functions), and the known-rate form as alpha grows.
Obsolescence is linear in lambda, so its expectation is its value at the mean; harmonic and
binary plan on the mean.

Numerics: ``x`` enters as ``x + EPSILON`` where it divides; rates below
:data:`MIN_RATE` are raised to it (a page that never changes gains nothing from a crawl, and
the closed forms would lose their digits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyomo.environ as pyo

from planner.model.instance import CrawlInstance

__all__ = [
    "EPSILON",
    "KNOWN_SHAPE",
    "MIN_RATE",
    "STEADY_OBJECTIVES",
    "SteadyObjective",
    "SteadySetup",
    "build_steady_model",
    "change_rates",
    "marginal_value",
    "new_page_values",
    "page_value",
    "period_value",
    "revisit_interval",
    "uniform_start",
]

SteadyObjective = Literal["freshness", "obsolescence", "harmonic", "binary"]

#: The objectives, and whether each is maximized (the page schedules offer the same four).
STEADY_OBJECTIVES: dict[str, bool] = {
    "freshness": True,
    "obsolescence": False,
    "harmonic": False,
    "binary": True,
}

#: Pages added to x where it divides (pages); far below one crawl.
EPSILON = 1e-9

#: The smallest change rate the model uses (changes per period).
MIN_RATE = 1e-6

#: A Gamma shape this large is a known rate (its sd is 0.1% of the mean).
KNOWN_SHAPE = 1e6

#: Shapes within this of 1 are moved this far from it (the closed form divides by alpha - 1).
_SHAPE_GAP = 1e-6


@dataclass(frozen=True)
class SteadySetup:
    """What the model needs besides the instance.

    Attributes
    ----------
    objective : str
        One of :data:`STEADY_OBJECTIVES`.
    importance : ndarray, shape (B,), or None
        w[i], the mean importance of bucket i's pages (None: all 1).
    cap : ndarray, shape (B, T), or None
        Most crawls of bucket i in period t (inf: no cap; None: no caps).
    lifetime : float
        Periods a page lives on after the horizon, on average (module docstring, "New
        pages"); 0: new pages valued within the horizon only.
    new_value : ndarray, shape (B,), or None
        Value of a crawled new page that joins bucket i, beyond the horizon (maximized
        objectives; module docstring). None: computed at the uniform crawl.
    rate_shape : ndarray, shape (B,), or None
        Gamma shape of each bucket's rate belief (module docstring, "Uncertain rates").
    renewal : float
        New pages crawled per page and period, beta (module docstring, "A growing web");
        0: a web whose pages were all crawled long ago.
    host_caps : sequence of (rows, cap)
        Host groups (module docstring, "Host caps"): ``rows`` int array of the instance rows
        (buckets) holding one bound host's pages, ``cap`` float array [T] (or a scalar: every
        period) of the most crawls the host allows per period (inf: none that period). The
        model adds ``sum x[rows, t] <= cap[t]``. Empty: no host groups.
    """

    objective: str = "freshness"
    importance: np.ndarray | None = None
    cap: np.ndarray | None = None
    lifetime: float = 0.0
    new_value: np.ndarray | None = None
    rate_shape: np.ndarray | None = None
    host_caps: Sequence[tuple[np.ndarray, np.ndarray]] = ()
    renewal: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.renewal) and self.renewal >= 0):
            raise ValueError(
                f"renewal must be >= 0 new pages per page and period, got {self.renewal}"
            )
        if self.objective not in STEADY_OBJECTIVES:
            known = ", ".join(STEADY_OBJECTIVES)
            raise ValueError(f"objective must be one of {known}, got {self.objective!r}")
        if not (np.isfinite(self.lifetime) and self.lifetime >= 0):
            raise ValueError(f"lifetime must be >= 0 periods, got {self.lifetime}")
        for g, (rows, cap) in enumerate(self.host_caps):
            rows_ = np.asarray(rows)
            if rows_.ndim != 1 or (rows_.size and not np.issubdtype(rows_.dtype, np.integer)):
                raise ValueError(f"host_caps[{g}]: rows must be a 1-d array of bucket rows")
            if np.unique(rows_).size != rows_.size:
                raise ValueError(f"host_caps[{g}]: a bucket row is given twice")
            cap_ = np.asarray(cap, dtype=float)
            if cap_.ndim > 1 or np.any(np.isnan(cap_)) or np.any(cap_ < 0):
                raise ValueError(f"host_caps[{g}]: caps must be >= 0 crawls per period (inf: none)")

    def host_groups(self, buckets: int, periods: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The host groups as (rows [k], cap [T]) with rows checked against ``buckets``
        and a scalar cap repeated over ``periods``; groups without rows are left out."""
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for g, (rows, cap) in enumerate(self.host_caps):
            rows_ = np.asarray(rows, dtype=np.int64)
            if rows_.size and (rows_.min() < 0 or rows_.max() >= buckets):
                raise ValueError(f"host_caps[{g}]: rows must lie in 0..{buckets - 1}")
            cap_ = np.asarray(cap, dtype=float)
            if cap_.ndim == 0:
                cap_ = np.full(periods, float(cap_))
            if cap_.shape != (periods,):
                raise ValueError(f"host_caps[{g}]: give one cap per period ({periods})")
            if rows_.size:
                out.append((rows_, cap_))
        return out


def change_rates(instance: CrawlInstance) -> np.ndarray:
    """lambda[i,t] = -ln(1 - a[i,t]) changes per period, at least :data:`MIN_RATE` [B, T]."""
    a = np.clip(np.asarray(instance.a, dtype=float), 0.0, 1.0 - 1e-15)
    return np.maximum(-np.log1p(-a), MIN_RATE)


def _gamma_freshness(
    xe: np.ndarray, n: np.ndarray, lam: np.ndarray, shape: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Freshness V and dV/dN with lambda ~ Gamma(shape, shape / lam) (module docstring,
    "Uncertain rates"): ``V = x beta / (alpha - 1) (1 - q^(alpha - 1))``, ``dV/dN = q^alpha``,
    ``q = beta / (beta + N / x)``."""
    alpha = np.where(np.abs(shape - 1.0) < _SHAPE_GAP, 1.0 + _SHAPE_GAP, shape)
    beta = alpha / lam
    q = beta / (beta + n / xe)
    value = -xe * beta / (alpha - 1.0) * np.expm1((alpha - 1.0) * np.log(q))
    return value, q**alpha


def _renewal_freshness(
    xe: np.ndarray, n: np.ndarray, lam: np.ndarray, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """Freshness V and dV/dN on a web growing at ``beta`` (module docstring, "A growing
    web"): ``V = (x + beta N) / (lambda + beta) (1 - (1 + y)^-k)``, ``dV/dN = (beta + lambda
    (1 + y)^-k) / (lambda + beta)``, ``y = beta N / x``, ``k = 1 + lambda / beta``."""
    log_q = -(1.0 + lam / beta) * np.log1p(beta * n / xe)
    value = -(xe + beta * n) / (lam + beta) * np.expm1(log_q)
    return value, (beta + lam * np.exp(log_q)) / (lam + beta)


def revisit_interval(x: np.ndarray, pages: np.ndarray, renewal: float = 0.0) -> np.ndarray:
    """Periods between two crawls of a page of a bucket of ``pages`` crawled ``x`` times a
    period, elementwise: ``N / x``, or ``ln(1 + beta N / x) / beta`` on a web growing at
    ``renewal = beta`` (module docstring); inf where ``x`` is 0."""
    xe = np.asarray(x, dtype=float)
    n = np.asarray(pages, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(xe > 0, n / xe, np.inf)
        if renewal <= 0:
            return ratio
        return np.where(xe > 0, np.log1p(renewal * ratio) / renewal, np.inf)


def period_value(
    objective: str,
    x: np.ndarray,
    pages: np.ndarray,
    lam: np.ndarray,
    shape: np.ndarray | None = None,
    *,
    renewal: float = 0.0,
) -> np.ndarray:
    """V(x, N) of the module docstring, elementwise (numpy; x, N in pages, lambda per period;
    ``shape``: the Gamma shape of each rate's belief, None or inf: the rate is known;
    ``renewal``: beta, for freshness with known rates)."""
    xe = np.asarray(x, dtype=float) + EPSILON
    n = np.asarray(pages, dtype=float)
    if objective == "freshness" and shape is not None:
        return _gamma_freshness(xe, n, lam, _shape(shape, lam))[0]
    if objective == "freshness" and renewal > 0:
        return _renewal_freshness(xe, n, lam, renewal)[0]
    if objective == "freshness":
        return -(xe / lam) * np.expm1(-lam * n / xe)
    if objective == "obsolescence":
        return lam * n * n / (2.0 * xe)
    if objective == "harmonic":
        return n * np.log1p(lam * n / xe)
    if objective == "binary":
        return n * xe / (xe + lam * n)
    raise ValueError(f"unknown objective {objective!r}")


def marginal_value(
    objective: str,
    x: np.ndarray,
    pages: np.ndarray,
    lam: np.ndarray,
    shape: np.ndarray | None = None,
    *,
    renewal: float = 0.0,
) -> np.ndarray:
    """What one more crawl of a bucket is worth in a period, dV/dx, signed so that larger is
    better for every objective (for minimized objectives the cost it removes)."""
    xe = np.asarray(x, dtype=float) + EPSILON
    n = np.asarray(pages, dtype=float)
    u = lam * n / xe
    if objective == "freshness" and shape is not None:
        value, per_page = _gamma_freshness(xe, n, lam, _shape(shape, lam))
        return (value - n * per_page) / xe  # Euler: V = x dV/dx + N dV/dN
    if objective == "freshness" and renewal > 0:
        value, per_page = _renewal_freshness(xe, n, lam, renewal)
        return (value - n * per_page) / xe
    if objective == "freshness":
        return -np.expm1(-u) / lam - np.exp(-u) * n / xe
    if objective == "obsolescence":
        return lam * n * n / (2.0 * xe * xe)
    if objective == "harmonic":
        return n * u / (xe * (1.0 + u))
    if objective == "binary":
        return n * lam * n / (xe + lam * n) ** 2
    raise ValueError(f"unknown objective {objective!r}")


def page_value(
    objective: str,
    x: np.ndarray,
    pages: np.ndarray,
    lam: np.ndarray,
    shape: np.ndarray | None = None,
    *,
    renewal: float = 0.0,
) -> np.ndarray:
    """dV/dN: what one more page of a bucket adds per period when the bucket's crawls grow in
    proportion (Euler: V = x dV/dx + N dV/dN), elementwise; for minimized objectives the cost
    it adds."""
    xe = np.asarray(x, dtype=float) + EPSILON
    n = np.asarray(pages, dtype=float)
    u = lam * n / xe
    if objective == "freshness" and shape is not None:
        return _gamma_freshness(xe, n, lam, _shape(shape, lam))[1]
    if objective == "freshness" and renewal > 0:
        return _renewal_freshness(xe, n, lam, renewal)[1]
    if objective == "freshness":
        return np.exp(-u)
    if objective == "obsolescence":
        return lam * n / xe
    if objective == "harmonic":
        return np.log1p(u) + u / (1.0 + u)
    if objective == "binary":
        return (xe / (xe + lam * n)) ** 2
    raise ValueError(f"unknown objective {objective!r}")


def new_page_values(
    objective: str,
    x: np.ndarray,
    pages: np.ndarray,
    lam: np.ndarray,
    lifetime: float,
    shape: np.ndarray | None = None,
    *,
    renewal: float = 0.0,
) -> np.ndarray:
    """new_value[i] of the module docstring for a plan's crawls ``x`` and pages ``N`` [B, T]
    (the last period's rates) and ``lifetime`` periods: the larger of ``lifetime * dV/dN``
    and a single crawl's worth, ``(1 - e^(-lambda lifetime)) / lambda`` (freshness; binary
    ``lifetime / (1 + lambda lifetime)``, a page fresh until its first change on average)."""
    last = None if shape is None else _shape(shape, lam)[:, -1]
    held = lifetime * page_value(
        objective, x[:, -1], pages[:, -1], lam[:, -1], last, renewal=renewal
    )
    rate = lam[:, -1]
    if objective == "freshness":
        once = -np.expm1(-rate * lifetime) / rate
    else:
        once = lifetime / (1.0 + rate * lifetime)
    return np.asarray(np.maximum(held, once))


def _shape(shape: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Gamma shapes broadcast like ``lam`` ([B] to [B, T]), inf and huge as :data:`KNOWN_SHAPE`."""
    alpha = np.asarray(shape, dtype=float)
    if alpha.ndim == 1 and lam.ndim == 2:
        alpha = alpha[:, None]
    alpha = np.where(np.isfinite(alpha), np.minimum(alpha, KNOWN_SHAPE), KNOWN_SHAPE)
    return np.broadcast_to(alpha, np.shape(lam))


def uniform_start(instance: CrawlInstance) -> np.ndarray:
    """The uniform crawl of the start's pages: x[i,t] proportional to b0[i], filling each
    period's capacity at the buckets' costs, at most b0[i] [B, T]."""
    b0 = np.asarray(instance.b0, dtype=float)
    x = np.zeros((instance.buckets, instance.periods))
    for t in range(instance.periods):
        spend = float((instance.crawl_cost[:, t] * b0).sum())
        share = min(1.0, float(instance.capacity[t]) / spend) if spend > 0 else 0.0
        x[:, t] = b0 * share
    return x


def _uniform_page_values(instance: CrawlInstance, objective: str, lam: np.ndarray) -> np.ndarray:
    """Each bucket's value per page under the uniform crawl, mean over the periods [B]."""
    b0 = np.maximum(np.asarray(instance.b0, dtype=float), 1e-12)
    x = np.maximum(uniform_start(instance), 1e-6 * b0[:, None])
    v = period_value(objective, x, np.broadcast_to(b0[:, None], x.shape), lam)
    return np.asarray((v / b0[:, None]).mean(axis=1))


def _value_expression(
    objective: str, x: Any, pages: Any, lam: Any, alpha: Any = None, renewal: float = 0.0
) -> Any:
    xe = x + EPSILON
    if objective == "freshness" and alpha is not None:
        beta = alpha / lam
        return xe * beta / (alpha - 1.0) * (1.0 - (beta / (beta + pages / xe)) ** (alpha - 1.0))
    if objective == "freshness" and renewal > 0:
        k = 1.0 + lam / renewal
        grown = pyo.log(1.0 + renewal * pages / xe)
        return (xe + renewal * pages) / (lam + renewal) * (1.0 - pyo.exp(-k * grown))
    if objective == "freshness":
        return (xe / lam) * (1.0 - pyo.exp(-lam * pages / xe))
    if objective == "obsolescence":
        return lam * pages * pages / (2.0 * xe)
    if objective == "harmonic":
        return pages * pyo.log(1.0 + lam * pages / xe)
    return pages * xe / (xe + lam * pages)


def build_steady_model(instance: CrawlInstance, setup: SteadySetup) -> pyo.ConcreteModel:
    """The Pyomo model of the module docstring for ``instance`` (B buckets, T periods).

    The data are mutable Params (``m.new_credit``, the value of a crawled new page beyond the
    horizon for maximized objectives, is one too: the solver refines it), so the bridge
    (:mod:`planner.solver.compiler`) compiles one template per constraint family and
    objective term; the start is :func:`uniform_start`.
    Scaling factors (pages of a bucket in units of the bucket, seconds in units of the
    period's capacity, the objective in units of all pages) are in ``m.scaling_factor``.
    """
    B, T = int(instance.buckets), int(instance.periods)
    maximize = STEADY_OBJECTIVES[setup.objective]
    lam = change_rates(instance)
    w = np.ones(B) if setup.importance is None else np.asarray(setup.importance, dtype=float)
    if w.shape != (B,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"importance: expected {B} finite weights >= 0")
    p = np.asarray(instance.p, dtype=float) if instance.p.size else np.zeros(B)
    b0 = np.asarray(instance.b0, dtype=float)

    m = pyo.ConcreteModel(name=f"steady-rates-{setup.objective}")
    m.I = pyo.RangeSet(0, B - 1)
    m.T = pyo.RangeSet(0, T - 1)
    m.lam = pyo.Param(m.I, m.T, initialize=lambda _, i, t: float(lam[i, t]), mutable=True)
    m.w = pyo.Param(m.I, initialize=lambda _, i: float(w[i]), mutable=True)
    uncertain = setup.rate_shape is not None and setup.objective == "freshness"
    if uncertain:
        alpha = _shape(np.asarray(setup.rate_shape, dtype=float), lam)[:, 0]
        alpha = np.where(np.abs(alpha - 1.0) < _SHAPE_GAP, 1.0 + _SHAPE_GAP, alpha)
        m.alpha = pyo.Param(m.I, initialize=lambda _, i: float(alpha[i]), mutable=True)
    m.cost = pyo.Param(
        m.I, m.T, initialize=lambda _, i, t: float(instance.crawl_cost[i, t]), mutable=True
    )
    m.oldnwt = pyo.Param(
        m.I, m.T, initialize=lambda _, i, t: float(instance.oldnwt[i, t]), mutable=True
    )

    def _x_bounds(_: Any, i: int, t: int) -> tuple[float, float | None]:
        upper = None
        if setup.cap is not None and np.isfinite(setup.cap[i, t]):
            upper = max(float(setup.cap[i, t]), 0.0)
        return (0.0, upper)

    x0 = uniform_start(instance)
    m.x = pyo.Var(m.I, m.T, bounds=_x_bounds, initialize=lambda _, i, t: float(x0[i, t]))
    m.N = pyo.Var(m.I, m.T, bounds=(0.0, None), initialize=lambda _, i, t: float(b0[i]))
    m.z = pyo.Var(m.T, bounds=(0.0, None), initialize=0.0)
    m.n = pyo.Var(m.T, bounds=(0.0, None), initialize=float(instance.n0))

    def _growth(mm: Any, i: int, t: int) -> Any:
        if t == 0:
            return mm.N[i, 0] == float(b0[i])
        return mm.N[i, t] - mm.N[i, t - 1] - float(p[i]) * mm.z[t - 1] == 0.0

    m.growth = pyo.Constraint(m.I, m.T, rule=_growth)
    m.at_most_pages = pyo.Constraint(m.I, m.T, rule=lambda mm, i, t: mm.x[i, t] - mm.N[i, t] <= 0)

    def _capacity(mm: Any, t: int) -> Any:
        old = sum(mm.cost[i, t] * mm.x[i, t] for i in mm.I)
        return old + float(instance.new_crawl_cost[t]) * mm.z[t] <= float(instance.capacity[t])

    m.capacity = pyo.Constraint(m.T, rule=_capacity)

    groups = setup.host_groups(B, T)
    m.G = pyo.RangeSet(0, len(groups) - 1)

    def _host_cap(mm: Any, g: int, t: int) -> Any:
        rows, cap = groups[g]
        if not np.isfinite(cap[t]):
            return pyo.Constraint.Skip
        return sum(mm.x[int(i), t] for i in rows) <= float(cap[t])

    m.host_cap = pyo.Constraint(m.G, m.T, rule=_host_cap)

    def _previous_new(mm: Any, t: int) -> Any:
        return float(instance.n0) if t == 0 else mm.n[t - 1]

    def _new_pages(mm: Any, t: int) -> Any:
        found = sum(mm.oldnwt[i, t] * mm.x[i, t] for i in mm.I)
        grow = (float(instance.newnwt[t]) - 1.0) * mm.z[t] + float(instance.nconst)
        return mm.n[t] - _previous_new(mm, t) - found - grow == 0.0

    m.new_pages = pyo.Constraint(m.T, rule=_new_pages)
    m.new_crawl_limit = pyo.Constraint(m.T, rule=lambda mm, t: mm.z[t] - _previous_new(mm, t) <= 0)

    values = sum(
        m.w[i]
        * _value_expression(
            setup.objective,
            m.x[i, t],
            m.N[i, t],
            m.lam[i, t],
            m.alpha[i] if uncertain else None,
            float(setup.renewal),
        )
        for i in m.I
        for t in m.T
    )
    if maximize:
        new_value = setup.new_value
        if new_value is None:
            x_u = np.maximum(x0, EPSILON)
            pages = np.broadcast_to(b0[:, None], x_u.shape)
            new_value = new_page_values(
                setup.objective,
                x_u,
                pages,
                lam,
                setup.lifetime,
                setup.rate_shape,
                renewal=setup.renewal,
            )
        credit = float((w * p * np.asarray(new_value, dtype=float)).sum())
        m.new_credit = pyo.Param(initialize=credit, mutable=True)
        objective = values + m.new_credit * sum(m.z[t] for t in m.T)
    else:
        per_page = _uniform_page_values(instance, setup.objective, lam)
        penalty = float((w * per_page).max()) if B else 0.0
        held_back = sum(m.n[t] for t in m.T) + float(setup.lifetime) * m.n[T - 1]
        objective = values + penalty * held_back
        m.new_penalty = penalty
    m.objective = pyo.Objective(expr=objective, sense=pyo.maximize if maximize else pyo.minimize)

    m.scaling_factor = pyo.Suffix(direction=pyo.Suffix.EXPORT)
    sf = m.scaling_factor
    scale = 1.0 / np.maximum(b0, 1.0)
    for i in range(B):
        for t in range(T):
            sf[m.x[i, t]] = sf[m.N[i, t]] = float(scale[i])
            sf[m.growth[i, t]] = sf[m.at_most_pages[i, t]] = float(scale[i])
    new_scale = 1.0 / max(float(instance.n0), float(instance.capacity.mean()), 1.0)
    for t in range(T):
        sf[m.capacity[t]] = 1.0 / max(float(instance.capacity[t]), 1e-12)
        sf[m.z[t]] = sf[m.n[t]] = new_scale
        sf[m.new_pages[t]] = sf[m.new_crawl_limit[t]] = new_scale
    for g, (_, cap) in enumerate(groups):
        for t in range(T):
            if (g, t) in m.host_cap:
                sf[m.host_cap[g, t]] = 1.0 / max(float(cap[t]), 1.0)
    sf[m.objective] = 1.0 / max(float(b0.sum()) * T, 1.0)
    return m
