r"""The cohort bucket model: crawls valued by the freshness they give, as the crawl is done.

Equation (2) of the WebFountain model (:mod:`planner.model.webfountain`) values a crawl at the
period's end and draws a bucket's crawled pages at random. The crawler takes the pages
unvisited longest first, spreads its crawls over the period, and users measure freshness
averaged over time. This model (REFERENCE.md sec. 9, "cohorts by age") describes exactly that,
and stays linear: it is an LP.

Symbols, each defined once (indices from 0):

=====================  ===================================================================
symbol                 meaning (units)
=====================  ===================================================================
i = 0..B-1             bucket
k = 0..K-1             cohort: a page of cohort k at period t was last crawled in period
                       t-1-k (k whole periods passed since the end of that period); the last
                       cohort K-1 *absorbs*: "K-1 or more"
t = 0..T-1             period; period t is the time interval [t, t+1)
theta, s               phase of a crawl in its period, and time within the period, in [0, 1)
c[i,k,t]               pages of bucket i in cohort k at the start of period t, t = 0..T
                       (variable, pages)
x[i,k,t]               pages of bucket i and cohort k crawled in period t (variable, pages)
u[i,k,t]               pages of bucket i and cohort k left uncrawled in period t (variable)
c_end[i,k]             c[i,k,T], the state after the last period (variable; planning only)
c0[i,k], b0[i], n0     the start: pages per cohort (planning), pages per bucket, new pages
z[t]                   new pages crawled in period t (variable, pages)
n[t]                   new, never-crawled pages known at the start of period t, t = 0..T
                       (variable, pages)
lambda[i,t]            change rate of bucket i's pages, ``-ln(1 - a[i,t])`` (changes/period)
w[i]                   importance of bucket i's pages (objective weight per page)
C[t], cost[i,t], d[t]  crawl time of period t; per old-page crawl; per new-page crawl (s)
oldnwt[i,t], newnwt[t] new pages discovered per old-page crawl, per new-page crawl
nconst                 new pages brought to the crawler's attention per period (pages)
p[i]                   share of crawled new pages that join bucket i (sum_i p[i] = 1)
newwt[t]               objective weight of one uncrawled new page at the end of period t
keep[i,k,t]            value per period of a page of cohort k not crawled in period t
crawl[i,k,t]           value per period of a page of cohort k crawled in period t
new[i,t]               value per period of a new page of bucket i crawled in period t
=====================  ===================================================================

The model (capacity, new pages and discovery as in the WebFountain model, REFERENCE.md sec. 2
eqs. (1), (3), (6); bucket growth (4) is the p[i] z[t] term of the first transition). The
decisions split each cohort into pages crawled and pages left, ``c[i,k,t] = x[i,k,t] +
u[i,k,t]`` with ``u[i,k,t] >= 0`` (so ``x <= c`` is a bound, not a row)::

    optimize  sum_t [ sum_i w[i] ( sum_k keep[i,k,t] u[i,k,t] + crawl[i,k,t] x[i,k,t]
                                   + new[i,t] p[i] z[t] )
                      -/+ newwt[t] n[t+1] ]      (maximize freshness / minimize obsolescence)
    crawled_cohort  c[i,0,t+1]   = sum_k x[i,k,t] + p[i] z[t]
    aging           c[i,k+1,t+1] = u[i,k,t]                                k + 1 < K - 1
                    c[i,K-1,t+1] = u[i,K-2,t] + u[i,K-1,t]                 (absorbing)
    crawl_time      sum_i cost[i,t] sum_k x[i,k,t] + d[t] z[t] <= C[t]
    new_pages       n[t+1] = n[t] + sum_i oldnwt[i,t] sum_k x[i,k,t] + (newnwt[t] - 1) z[t]
                             + nconst
    new_crawl_limit z[t] <= n[t]
    start           c[i,k,0] = c0[i,k], n[0] = n0             (planning; c[i,k,T] is c_end), or
    bucket_pages    c[i,k,T] := c[i,k,0], sum_k c[i,k,0] = b0[i], n[0] = n0   (steady state)
                    x, u, z, n, c_end >= 0

Pages are conserved: summing the transitions over k, ``sum_k c[i,k,t+1] = sum_k c[i,k,t] +
p[i] z[t]``. In the steady state ("cyclic") the state after period T *is* the start state
(the transitions into period T refer to c[i,k,0]), which the LP chooses.

**The values per period** (:func:`cohort_values`). The crawls of a period are spread uniformly
over it: a page is crawled at time t + theta, theta uniform in [0, 1).
Longest-unvisited-first crawling at a steady pace visits a page at the same phase theta as
its previous visit, so a page of cohort k has age ``k + 1 + s - theta`` at time t + s before
its crawl and ``s - theta`` after it. With ``g = (1 - e^-lambda) / lambda``, the mean of
e^(-lambda s) over the period:

* freshness, the probability ``e^(-lambda age)`` that the page is unchanged since its crawl,
  averaged over s and theta::

      keep[k]  = e^(-lambda (k+1)) E[e^(lambda theta)] E[e^(-lambda s)]  = e^(-lambda k) g^2
      crawl[k] = E[ int_0^theta e^(-lambda (k+1+s-theta)) ds
                    + int_theta^1 e^(-lambda (s-theta)) ds ]
               = e^(-lambda k) (g - e^-lambda) / lambda + (1 - g) / lambda
      new      = (1 - g) / lambda      (fresh from its crawl on; before it, not held)

  A page crawled every m periods (m integer) then averages
  ``(sum_{k<m-1} keep[k] + crawl[m-1]) / m = (1 - e^(-lambda m)) / (lambda m)``, Cho &
  Garcia-Molina's periodic freshness; the test checks this and each formula by quadrature.
* obsolescence (Xyleme sec. 6.3), ``lambda * age``, the expected changes since the crawl::

      keep[k] = lambda (k + 1),   crawl[k] = lambda (k + 1) / 2,   new = lambda / 6

  (every m periods: ``lambda m / 2``, Xyleme's ``lambda / (2 f)``).

**The period grid.** Only integer revisit intervals are valued exactly. A bucket whose pages
are revisited every m + 1/2 periods by longest-unvisited-first shifts phase by half a period
at each visit, which the cohorts do not describe; the LP values it as a mix of intervals m and
m + 1 (the linear interpolation of freshness between 1/(m+1) and 1/m crawls per period), below
its true value, as freshness is concave in the crawl rate. So an optimal plan puts most buckets
on integer intervals (tests/test_cohorts.py measures how far that is from the continuous
optimum).

With lambda = 0 the limits are used (freshness 1; obsolescence 0).

**The absorbing cohort** holds pages K-1 or more periods unvisited; their age is not tracked.
For freshness they count as stale (``keep = 0``, ``crawl = new``): exact for pages left there
for good (a freshness optimum starves the fastest pages), pessimistic for pages passing through,
so choose K above the longest revisit interval that should be planned. For obsolescence they are
valued at age K, a lower bound; in the cyclic steady state they must be crawled
(``x[i,K-1,t] = c[i,K-1,t]``, a longest interval of K periods), since a page left there for good
would have unbounded obsolescence.

Rates may vary by period (``a[i,t]``); the values of period t use lambda[i,t] for the whole age,
which is exact when rates are constant. The data are immutable Params and the objective's
coefficients plain numbers: a change of data is a new model (building it takes seconds at
B = 255; bench_cohorts.py measures it). Scaling factors for Ipopt live in the model's
``scaling_factor`` Suffix, as in the WebFountain model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyomo.environ as pyo

from planner.model.instance import CrawlInstance

__all__ = [
    "COHORT_OBJECTIVES",
    "CohortPlan",
    "CohortValues",
    "build_cohort_model",
    "cohort_values",
    "even_cohorts",
    "read_cohort_plan",
    "solve_with_highs",
]

CohortObjective = Literal["freshness", "obsolescence"]

#: The objectives the cohort model offers, and whether each is maximized.
COHORT_OBJECTIVES: dict[str, bool] = {"freshness": True, "obsolescence": False}

_SMALL_RATE = 1e-4  # below, the closed forms lose digits: use their series


@dataclass(frozen=True)
class CohortValues:
    """Value per page and period of each cohort (module docstring, "The values per period").

    Attributes
    ----------
    keep, crawl : ndarray, shape (B, K, T)
        A page of cohort k not crawled / crawled in period t.
    new : ndarray, shape (B, T)
        A new page joining bucket i, crawled in period t.
    maximize : bool
        Whether larger is better (freshness) or smaller (obsolescence).
    """

    keep: np.ndarray
    crawl: np.ndarray
    new: np.ndarray
    maximize: bool


def _freshness_parts(lam: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """g = (1 - e^-l)/l, (g - e^-l)/l and (1 - g)/l, elementwise, with series for small l."""
    small = lam < _SMALL_RATE
    safe = np.where(small, 1.0, lam)
    g_full = -np.expm1(-safe) / safe
    g = np.where(small, 1.0 - lam / 2.0 + lam * lam / 6.0, g_full)
    before = np.where(small, 0.5 - lam / 3.0, (g_full - np.exp(-safe)) / safe)
    after = np.where(small, 0.5 - lam / 6.0, (1.0 - g_full) / safe)
    return g, before, after


def cohort_values(
    rate: np.ndarray, cohorts: int, objective: CohortObjective = "freshness"
) -> CohortValues:
    """The per-page values of the objective for change rates ``rate`` [B, T] (per period).

    ``cohorts`` is K >= 2. See the module docstring for the formulas.
    """
    if objective not in COHORT_OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(COHORT_OBJECTIVES)}")
    if cohorts < 2:
        raise ValueError("cohorts must be >= 2 (the last cohort absorbs)")
    lam = np.asarray(rate, dtype=float)[:, None, :]  # (B, 1, T)
    k = np.arange(cohorts, dtype=float)[None, :, None]  # (1, K, 1)
    if objective == "freshness":
        g, before, after = _freshness_parts(lam)
        decay = np.exp(-lam * k)
        keep = decay * g * g
        crawl = decay * before + after
        keep[:, -1, :] = 0.0  # the absorbing cohort counts as stale
        crawl[:, -1, :] = after[:, 0, :]
        new = after[:, 0, :]
    else:
        keep = lam * (k + 1.0)
        crawl = keep / 2.0
        new = lam[:, 0, :] / 6.0
    return CohortValues(keep=keep, crawl=crawl, new=new, maximize=COHORT_OBJECTIVES[objective])


def even_cohorts(b0: np.ndarray, cohorts: int, interval: np.ndarray | float) -> np.ndarray:
    """Pages [B, K] spread evenly over cohorts 0..m-1, m = round(interval) per bucket (clipped
    to 1..K): the state of a bucket crawled every m periods. A start for planning."""
    b = np.asarray(b0, dtype=float)
    m = np.clip(np.rint(np.broadcast_to(interval, b.shape)), 1, cohorts).astype(int)
    out = np.zeros((b.shape[0], cohorts))
    for i, mi in enumerate(m):
        out[i, :mi] = b[i] / mi
    return out


# -- constraint rules, one per family ---------------------------------------------------------


def _held(m: Any, i: int, k: int, t: int) -> Any:
    """c[i,k,t] = x[i,k,t] + u[i,k,t]: pages in cohort k at the start of period t. After the
    last period, the end state (a variable), or in the steady state the start state again."""
    if t < len(m.T):
        return m.x[i, k, t] + m.u[i, k, t]
    if m.find_component("c_end") is not None:
        return m.c_end[i, k]
    return m.x[i, k, 0] + m.u[i, k, 0]  # cyclic: c[i,k,T] = c[i,k,0]


def _crawled_cohort_rule(m: Any, i: int, t: int) -> Any:
    """Pages crawled in period t, old and new, make cohort 0 of period t + 1."""
    crawled = sum(m.x[i, k, t] for k in m.K)
    return _held(m, i, 0, t + 1) == crawled + m.p[i] * m.z[t]


def _aging_rule(m: Any, i: int, k: int, t: int) -> Any:
    """Uncrawled pages grow one period older; the last cohort keeps its own as well."""
    last = len(m.K) - 1
    if k == last:
        return pyo.Constraint.Skip
    if k + 1 < last:
        return _held(m, i, k + 1, t + 1) == m.u[i, k, t]
    return _held(m, i, last, t + 1) == m.u[i, k, t] + m.u[i, last, t]


def _start_rule(m: Any, i: int, k: int) -> Any:
    """Planning: the cycle starts from the given cohorts c0."""
    return _held(m, i, k, 0) == m.c0[i, k]


def _bucket_pages_rule(m: Any, i: int) -> Any:
    """Steady state: bucket i holds b0[i] pages."""
    return sum(_held(m, i, k, 0) for k in m.K) == m.b0[i]


def _crawl_time_rule(m: Any, t: int) -> Any:
    """(1) Old and new crawls in period t fit in its crawl time."""
    old = sum(m.cost[i, t] * sum(m.x[i, k, t] for k in m.K) for i in m.I)
    return old + m.d[t] * m.z[t] <= m.C[t]


def _new_pages_rule(m: Any, t: int) -> Any:
    """(3) New uncrawled pages: found by crawls and from outside, less those crawled."""
    found = sum(m.oldnwt[i, t] * sum(m.x[i, k, t] for k in m.K) for i in m.I)
    return m.n[t + 1] == m.n[t] + found + (m.newnwt[t] - 1) * m.z[t] + m.nconst


def _new_crawl_limit_rule(m: Any, t: int) -> Any:
    """(6) Only new pages known at the start of period t can be crawled in it."""
    return m.z[t] <= m.n[t]


def _objective_rule(m: Any) -> Any:
    """Time-averaged value of the held pages, less (plus) weighted uncrawled new pages."""
    v = m.cohort_values
    terms = []
    for i in m.I:
        w = float(m.w[i])
        for t in m.T:
            for k in m.K:
                keep, crawl = float(v.keep[i, k, t]), float(v.crawl[i, k, t])
                terms.append(w * keep * m.u[i, k, t] + w * crawl * m.x[i, k, t])
            terms.append(w * float(v.new[i, t]) * float(m.p[i]) * m.z[t])
    sign = -1.0 if v.maximize else 1.0
    terms.extend(sign * float(m.newwt[t]) * m.n[t + 1] for t in m.T)
    return pyo.quicksum(terms)


# -- build ------------------------------------------------------------------------------------


def _data(values: np.ndarray) -> dict[Any, float]:
    """An array as a Param initializer indexed from 0: (i,), (t,) or (i, t)."""
    return {
        (idx[0] if len(idx) == 1 else idx): float(values[idx]) for idx in np.ndindex(values.shape)
    }


def build_cohort_model(
    instance: CrawlInstance,
    *,
    cohorts: int = 40,
    objective: CohortObjective = "freshness",
    importance: np.ndarray | None = None,
    new_weight: np.ndarray | float = 1.0,
    initial: np.ndarray | None = None,
    cyclic: bool = False,
) -> pyo.ConcreteModel:
    """Build the cohort LP for ``instance`` (its ``y0`` is not used: the cohorts say more).

    Parameters
    ----------
    instance : CrawlInstance
        B, T, pages b0, rates (from ``a``), capacity, costs, discovery and new pages.
    cohorts : int
        K >= 2; the last cohort absorbs (module docstring).
    objective : "freshness" or "obsolescence"
    importance : ndarray, shape (B,), optional
        w[i] >= 0 per bucket (default 1).
    new_weight : float or ndarray, shape (T,)
        newwt[t], the weight of an uncrawled new page at the end of period t.
    initial : ndarray, shape (B, K), optional
        c0, pages per cohort at the start (planning); rows should sum to b0. Required unless
        ``cyclic``.
    cyclic : bool
        The steady state: the state after period T equals the state at the start, which the
        LP chooses (with b0[i] pages in bucket i).
    """
    B, T, K = instance.buckets, instance.periods, int(cohorts)
    if initial is None and not cyclic:
        raise ValueError("give the initial cohorts [B, K] or ask for the cyclic steady state")
    w = np.ones(B) if importance is None else np.asarray(importance, dtype=float)
    if w.shape != (B,) or np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"importance must be {B} finite numbers >= 0")
    a = np.clip(instance.a, 0.0, 1.0 - 1e-15)
    values = cohort_values(-np.log1p(-a), K, objective)
    m = pyo.ConcreteModel(name="cohorts")
    m.cohort_values = values  # plain attribute: the objective's coefficients, kept for reading back
    m.I = pyo.Set(initialize=range(B), ordered=True, doc="buckets")
    m.K = pyo.Set(initialize=range(K), ordered=True, doc="cohorts")
    m.T = pyo.Set(initialize=range(T), ordered=True, doc="periods")
    m.S = pyo.Set(initialize=range(T + 1), ordered=True, doc="period starts, and the end")
    m.b0 = pyo.Param(m.I, initialize=_data(instance.b0))
    m.w = pyo.Param(m.I, initialize=_data(w))
    m.p = pyo.Param(m.I, initialize=_data(instance.p))
    m.C = pyo.Param(m.T, initialize=_data(instance.capacity))
    m.cost = pyo.Param(m.I, m.T, initialize=_data(instance.crawl_cost))
    m.d = pyo.Param(m.T, initialize=_data(instance.new_crawl_cost))
    m.oldnwt = pyo.Param(m.I, m.T, initialize=_data(instance.oldnwt))
    m.newnwt = pyo.Param(m.T, initialize=_data(instance.newnwt))
    m.nconst = pyo.Param(initialize=float(instance.nconst))
    m.newwt = pyo.Param(m.T, initialize=_data(np.broadcast_to(new_weight, (T,)).astype(float)))

    nonneg = pyo.NonNegativeReals
    m.x = pyo.Var(m.I, m.K, m.T, within=nonneg, doc="pages crawled per cohort and period")
    m.u = pyo.Var(m.I, m.K, m.T, within=nonneg, doc="pages left uncrawled per cohort, period")
    m.z = pyo.Var(m.T, within=nonneg, doc="new pages crawled")
    m.n = pyo.Var(m.S, within=nonneg, doc="new uncrawled pages at a period start")
    m.n[0].fix(float(instance.n0))
    if cyclic:
        m.bucket_pages = pyo.Constraint(m.I, rule=_bucket_pages_rule)
        if objective == "obsolescence":  # no page stays K periods or more unvisited
            for i, t in np.ndindex(B, T):
                m.u[i, K - 1, t].fix(0.0)
    else:
        c0 = np.asarray(initial, dtype=float)
        if c0.shape != (B, K) or np.any(c0 < 0) or not np.all(np.isfinite(c0)):
            raise ValueError(f"initial cohorts must be an array [B, K] = [{B}, {K}] of pages >= 0")
        m.c0 = pyo.Param(m.I, m.K, initialize=_data(c0))
        m.c_end = pyo.Var(m.I, m.K, within=nonneg, doc="pages per cohort after the last period")
        m.start = pyo.Constraint(m.I, m.K, rule=_start_rule)
    m.crawled_cohort = pyo.Constraint(m.I, m.T, rule=_crawled_cohort_rule)
    m.aging = pyo.Constraint(m.I, m.K, m.T, rule=_aging_rule)
    m.crawl_time = pyo.Constraint(m.T, rule=_crawl_time_rule)
    m.new_pages = pyo.Constraint(m.T, rule=_new_pages_rule)
    m.new_crawl_limit = pyo.Constraint(m.T, rule=_new_crawl_limit_rule)
    sense = pyo.maximize if values.maximize else pyo.minimize
    m.total_value = pyo.Objective(rule=_objective_rule, sense=sense)
    m.scaling_factor = pyo.Suffix(direction=pyo.Suffix.EXPORT)
    _set_scaling(m, instance)
    return m


def _set_scaling(m: Any, instance: CrawlInstance) -> None:
    """Pages of bucket i in units of b0[i], new pages in units of the mean bucket, crawl time
    in units of C[t], the objective in units of every page held for the cycle. HiGHS scales by
    itself; Ipopt (through the bridge, ``nlp_scaling_method = user-scaling``) needs these."""
    sf = m.scaling_factor
    unit = float(np.mean(instance.b0))
    for i in m.I:
        s = 1.0 / float(instance.b0[i])
        for k in m.K:
            for t in m.T:
                sf[m.x[i, k, t]] = sf[m.u[i, k, t]] = s
                if k < len(m.K) - 1:
                    sf[m.aging[i, k, t]] = s
            if m.find_component("c_end") is not None:
                sf[m.c_end[i, k]] = sf[m.start[i, k]] = s
        for t in m.T:
            sf[m.crawled_cohort[i, t]] = s
        if m.find_component("bucket_pages") is not None:
            sf[m.bucket_pages[i]] = s
    for t in m.T:
        sf[m.crawl_time[t]] = 1.0 / max(float(instance.capacity[t]), 1.0)
        for comp in (m.z, m.new_pages, m.new_crawl_limit):
            sf[comp[t]] = 1.0 / unit
    for t in m.S:
        sf[m.n[t]] = 1.0 / unit
    sf[m.total_value] = 1.0 / (len(m.T) * float(np.sum(instance.b0)))


# -- solve with HiGHS, read back ------------------------------------------------------------


@dataclass(frozen=True)
class CohortPlan:
    """A solved cohort model as arrays.

    Attributes
    ----------
    x : ndarray, shape (B, K, T)
        Pages crawled per bucket, cohort and period.
    c : ndarray, shape (B, K, T + 1)
        Pages per bucket and cohort at each period start (and after the last period).
    z : ndarray, shape (T,); n : ndarray, shape (T + 1,)
        New pages crawled per period; new uncrawled pages at each period start.
    objective : float
        The model's objective at the plan.
    status : str
        The solver's termination condition ("optimal" when the plan can be used).
    seconds : float
        Wall-clock time of the solve (without the build).
    """

    x: np.ndarray
    c: np.ndarray
    z: np.ndarray
    n: np.ndarray
    objective: float
    status: str
    seconds: float

    @property
    def crawls(self) -> np.ndarray:
        """Old pages crawled per bucket and period, shape (B, T): the quotas."""
        return np.asarray(self.x.sum(axis=1))

    def period_values(self, values: CohortValues) -> np.ndarray:
        """Value of each bucket's held pages in each period, shape (B, T) (e.g. fresh pages
        averaged over the period), unweighted, from the arrays (not through Pyomo)."""
        held = self.c[:, :, :-1]
        return np.asarray((values.keep * (held - self.x) + values.crawl * self.x).sum(axis=1))


def read_cohort_plan(m: pyo.ConcreteModel, status: str = "", seconds: float = 0.0) -> CohortPlan:
    """The model's current variable values as a :class:`CohortPlan`."""
    B, K, T = len(m.I), len(m.K), len(m.T)

    def arr(var: Any, shape: tuple[int, ...]) -> np.ndarray:
        values = np.fromiter((v.value or 0.0 for v in var.values()), float)
        return values.reshape(shape)

    x, u = arr(m.x, (B, K, T)), arr(m.u, (B, K, T))
    end = arr(m.c_end, (B, K)) if m.find_component("c_end") is not None else x[:, :, 0] + u[:, :, 0]
    return CohortPlan(
        x=x,
        c=np.concatenate([x + u, end[:, :, None]], axis=2),
        z=arr(m.z, (T,)),
        n=arr(m.n, (T + 1,)),
        objective=float(pyo.value(m.total_value)),
        status=status,
        seconds=seconds,
    )


def solve_with_highs(m: pyo.ConcreteModel, *, time_limit: float | None = None) -> CohortPlan:
    """Solve the LP with HiGHS through Pyomo's appsi interface and read the plan.

    Raises
    ------
    RuntimeError
        When highspy is not installed.
    """
    from pyomo.contrib.appsi.solvers import Highs  # imported here: a solver, not the model

    opt = Highs()
    if not opt.available():
        raise RuntimeError("HiGHS is not available: pip install highspy")
    opt.config.stream_solver = False
    opt.config.load_solution = False
    if time_limit is not None:
        opt.config.time_limit = time_limit
    t0 = time.perf_counter()
    results = opt.solve(m)
    seconds = time.perf_counter() - t0
    status = results.termination_condition.name
    if results.best_feasible_objective is not None:
        results.solution_loader.load_vars()
    return read_cohort_plan(m, status, seconds)
