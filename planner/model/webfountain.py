r"""The WebFountain crawl model (Edwards, McCurley, Tomlin 2001, sec. 4) in Pyomo.

Pages are grouped into B buckets of similar change rate; a cycle has T periods. With
``t - 1 = 0`` denoting the state at the start of the cycle, the symbols are defined once here:

=====================  ===================================================================
symbol                 meaning (units)
=====================  ===================================================================
x[i,t]                 pages of bucket i crawled in period t (pages)
y[i,t]                 obsolete pages of bucket i at the end of period t (pages)
b[i,t]                 pages in bucket i at the end of period t (pages)
n[t]                   new, never-crawled pages known at the end of period t (variable, pages)
z[t]                   new pages crawled in period t (variable, pages)
f[i,t]                 x[i,t] / b[i,t-1], the fraction of bucket i crawled in period t (variable)
Z[t]                   z[1] + ... + z[t], new pages crawled so far in the cycle (variable, pages)
b0[i], y0[i], n0       b[i,0], y[i,0], n[0]: the state at the start of the cycle (pages)
a[i,t]                 fraction of bucket i's pages that change during period t (in [0, 1])
C[t]                   crawl time available in period t (seconds)
c[i,t]                 time to crawl one old page of bucket i in period t (seconds)
d[t]                   time to crawl one new page in period t (seconds)
oldnwt[i,t]            new pages discovered per old page of bucket i crawled in period t
newnwt[t]              new pages discovered per new page crawled in period t
nconst                 new pages brought to the crawler's attention per period (pages)
p[i]                   share of crawled new pages that join bucket i (sum_i p[i] = 1)
oldwt[i,t], newwt[t]   objective weights of obsolete and of new uncrawled pages
=====================  ===================================================================

The model, for all t = 1..T and i = 1..B::

    minimize  sum_t sum_i oldwt[i,t] y[i,t] + sum_t newwt[t] n[t]
    (1)  sum_i c[i,t] x[i,t] + d[t] z[t] <= C[t]                           crawl time
    (2)  y[i,t] = (1 - x[i,t] / b[i,t-1]) ((1 - a[i,t]) y[i,t-1] + a[i,t] b[i,t-1])
                                                                           obsolete pages
    (3)  n[t] = n[t-1] + sum_i oldnwt[i,t] x[i,t] + (newnwt[t] - 1) z[t] + nconst
                                                                           new pages
    (4)  b[i,t] = b[i,t-1] + p[i] z[t]                                     bucket growth
    (5)  x[i,t] <= b[i,t-1]                                                old-crawl limit
    (6)  z[t] <= n[t-1]                                                    new-crawl limit
         x, y, n, z >= 0,  b[i,t] >= b0[i]

Equation (2) is the paper's tree of alternatives: a crawled page (a fraction x/b of the
bucket, obsolete or not alike) is fresh at the end of the period unless it changes in it --
which the crawl detects -- and an uncrawled page is obsolete if it was already, or if it
changes.

**How the model is stated in Pyomo.** The same model, with fewer variables and constraints
for Ipopt (docs/model.md has the measurements):

* The decisions are ``f[i,t] = x[i,t] / b[i,t-1]``, the fraction of bucket i crawled in period
  t, with bounds ``0 <= f <= 1`` (that is (5) and ``x >= 0``), and ``z[t] >= 0``. Then
  ``1 - x/b`` in (2) is ``1 - f`` (no division), and ``x[i,t] = f[i,t] b[i,t-1]`` is a named
  Expression.
* (4) is summed up: ``b[i,t] = b0[i] + p[i] Z[t]`` (an Expression) with ``Z[t] = Z[t-1] +
  z[t]``, ``Z[0] = 0``, the new pages crawled so far: T variables and equations instead of B T.
* y is a variable only at the *state periods*, every :data:`STATE_EVERY`-th period and the
  last (the set ``S``); in the other periods ``y[i,t]`` is the Expression given by the right
  side of (2), and (2) is an equation at the state periods only. Substituting (2) in between
  halves the rows of Ipopt's linear systems, while the expressions stay short.
* ``y, n >= 0`` and ``b >= b0`` are not stated: they follow from the equations with
  ``0 <= f <= 1``, ``z >= 0`` and (6) (and the data's ``y0 <= b0``, ``newnwt >= 0``). Stated as
  bounds they would be active together with ``f <= 1`` (a bucket crawled whole has y = 0),
  which makes the problem degenerate for an interior-point method.

Every datum is a mutable Param, so :func:`set_data` changes an instance (what-if runs,
another strategy) without rebuilding; the compiled bridge (:mod:`planner.solver.compiler`) reads
the new values. Scaling factors live in the model's ``scaling_factor`` Suffix: obsolete pages of
bucket i in units of ``b0[i]`` (f is a fraction already), new pages in units of the mean
bucket, crawl time in units of C[t], the objective in units of its value on the starting point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyomo.environ as pyo

from planner.model.instance import CrawlInstance
from planner.model.weights import ObjectiveWeights

__all__ = [
    "STATE_EVERY",
    "Trajectory",
    "build_model",
    "initialize_model",
    "read_trajectory",
    "round_robin_crawl",
    "set_data",
    "simulate",
    "uniform_crawl",
]


#: y is a variable at every STATE_EVERY-th period and the last; an Expression in between.
STATE_EVERY = 4


@dataclass(frozen=True)
class Trajectory:
    """Values of the model's variables over one cycle.

    Attributes
    ----------
    x, y, b : ndarray, shape (B, T)
        Old pages crawled, obsolete pages and pages per bucket, per period.
    n, z : ndarray, shape (T,)
        New uncrawled pages at the end of each period and new pages crawled in it.
    """

    x: np.ndarray
    y: np.ndarray
    b: np.ndarray
    n: np.ndarray
    z: np.ndarray

    def before(self, instance: CrawlInstance) -> tuple[np.ndarray, np.ndarray]:
        """Pages per bucket b[i,t-1], shape (B, T), and new pages n[t-1], shape (T,), at the
        start of each period: what its crawls x[i,t] and z[t] are drawn from."""
        b = np.concatenate([instance.b0[:, None], self.b[:, :-1]], axis=1)
        n = np.concatenate([[instance.n0], self.n[:-1]])
        return b, n


# -- the defined quantities and the constraint families, one rule each -----------------------


def _pages_rule(m: Any, i: int, t: int) -> Any:
    """(4) b[i,t] = b0[i] + p[i] Z[t]: the bucket grows by its share of crawled new pages."""
    return m.b0[i] + m.p[i] * m.Z[t]


def _previous_pages(m: Any, i: int, t: int) -> Any:
    return m.b0[i] if t == 1 else m.b[i, t - 1]


def _previous_obsolete(m: Any, i: int, t: int) -> Any:
    return m.y0[i] if t == 1 else m.y[i, t - 1]


def _previous_new(m: Any, t: int) -> Any:
    return m.n0 if t == 1 else m.n[t - 1]


def _crawled_rule(m: Any, i: int, t: int) -> Any:
    """x[i,t] = f[i,t] b[i,t-1]: pages of bucket i crawled in period t."""
    return m.f[i, t] * _previous_pages(m, i, t)


def _crawl_time_rule(m: Any, t: int) -> Any:
    """(1) Old and new crawls in period t fit in its crawl time."""
    return sum(m.c[i, t] * m.x[i, t] for i in m.I) + m.d[t] * m.z[t] <= m.C[t]


def _obsolete_after(m: Any, i: int, t: int) -> Any:
    """Right side of (2): obsolete pages of bucket i at the end of period t (1 - x/b = 1 - f)."""
    b_prev = _previous_pages(m, i, t)
    y_prev = _previous_obsolete(m, i, t)
    return (1 - m.f[i, t]) * ((1 - m.a[i, t]) * y_prev + m.a[i, t] * b_prev)


def _obsolete_rule(m: Any, i: int, t: int) -> Any:
    """y[i,t]: the state variable at a state period, else (2) applied to y[i,t-1]."""
    return m.y_state[i, t] if t in m.S else _obsolete_after(m, i, t)


def _obsolete_pages_rule(m: Any, i: int, t: int) -> Any:
    """(2) at a state period t."""
    return m.y_state[i, t] == _obsolete_after(m, i, t)


def _new_pages_rule(m: Any, t: int) -> Any:
    """(3) New uncrawled pages: found by crawls and by outside sources, less those crawled."""
    found = sum(m.oldnwt[i, t] * m.x[i, t] for i in m.I)
    return m.n[t] == _previous_new(m, t) + found + (m.newnwt[t] - 1) * m.z[t] + m.nconst


def _new_crawled_rule(m: Any, t: int) -> Any:
    """(4) Z[t] = Z[t-1] + z[t], Z[0] = 0: new pages crawled so far in the cycle."""
    return m.Z[t] == (m.z[t] if t == 1 else m.Z[t - 1] + m.z[t])


def _new_crawl_limit_rule(m: Any, t: int) -> Any:
    """(6) Only new pages known at the start of the period can be crawled in it."""
    return m.z[t] <= _previous_new(m, t)


def _objective_rule(m: Any) -> Any:
    """Weighted obsolete and new uncrawled pages over the cycle."""
    old = sum(m.oldwt[i, t] * m.y[i, t] for i in m.I for t in m.T)
    return old + sum(m.newwt[t] * m.n[t] for t in m.T)


# -- build, data, start ----------------------------------------------------------------------


def build_model(
    instance: CrawlInstance, weights: ObjectiveWeights, *, state_every: int = STATE_EVERY
) -> pyo.ConcreteModel:
    """Build the model for ``instance`` with objective ``weights`` (data via :func:`set_data`).

    y is a variable at every ``state_every``-th period and the last (1: at every period).
    Variables start at the forward simulation of :func:`uniform_crawl`.
    """
    if state_every < 1:
        raise ValueError("state_every must be >= 1")
    B, T = instance.buckets, instance.periods
    m = pyo.ConcreteModel(name="webfountain")
    m.I = pyo.RangeSet(B, doc="buckets")
    m.T = pyo.RangeSet(T, doc="periods")
    state = [t for t in range(1, T + 1) if t % state_every == 0 or t == T]
    m.S = pyo.Set(initialize=state, within=m.T, ordered=True, doc="state periods")
    mutable: dict[str, Any] = {"mutable": True, "initialize": 0.0}
    m.b0 = pyo.Param(m.I, **mutable, doc="pages per bucket at the start")
    m.y0 = pyo.Param(m.I, **mutable, doc="obsolete pages per bucket at the start")
    m.n0 = pyo.Param(**mutable, doc="new uncrawled pages at the start")
    m.a = pyo.Param(m.I, m.T, **mutable, doc="fraction of pages changing per period")
    m.C = pyo.Param(m.T, **mutable, doc="crawl time per period (s)")
    m.c = pyo.Param(m.I, m.T, **mutable, doc="time per old-page crawl (s)")
    m.d = pyo.Param(m.T, **mutable, doc="time per new-page crawl (s)")
    m.oldnwt = pyo.Param(m.I, m.T, **mutable, doc="new pages found per old-page crawl")
    m.newnwt = pyo.Param(m.T, **mutable, doc="new pages found per new-page crawl")
    m.nconst = pyo.Param(**mutable, doc="new pages from outside per period")
    m.p = pyo.Param(m.I, **mutable, doc="share of crawled new pages per bucket")
    m.oldwt = pyo.Param(m.I, m.T, **mutable, doc="weight of obsolete pages")
    m.newwt = pyo.Param(m.T, **mutable, doc="weight of new uncrawled pages")

    nonneg = pyo.NonNegativeReals
    m.f = pyo.Var(m.I, m.T, bounds=(0.0, 1.0), doc="fraction of the bucket crawled, (5)")
    # y, n >= 0 and Z >= 0 follow from the equations (module docstring): no bounds.
    m.y_state = pyo.Var(m.I, m.S, doc="obsolete pages at the end of a state period")
    m.n = pyo.Var(m.T, doc="new uncrawled pages at the end of the period")
    m.z = pyo.Var(m.T, within=nonneg, doc="new pages crawled")
    m.Z = pyo.Var(m.T, doc="new pages crawled up to the end of the period")
    m.b = pyo.Expression(m.I, m.T, rule=_pages_rule, doc="pages at the end of the period")
    m.x = pyo.Expression(m.I, m.T, rule=_crawled_rule, doc="old pages crawled")
    m.y = pyo.Expression(m.I, m.T, rule=_obsolete_rule, doc="obsolete pages at the end")

    m.crawl_time = pyo.Constraint(m.T, rule=_crawl_time_rule)
    m.obsolete_pages = pyo.Constraint(m.I, m.S, rule=_obsolete_pages_rule)
    m.new_pages = pyo.Constraint(m.T, rule=_new_pages_rule)
    m.new_crawled = pyo.Constraint(m.T, rule=_new_crawled_rule)
    m.new_crawl_limit = pyo.Constraint(m.T, rule=_new_crawl_limit_rule)
    m.obsolete_weighted = pyo.Objective(rule=_objective_rule, sense=pyo.minimize)
    m.scaling_factor = pyo.Suffix(direction=pyo.Suffix.EXPORT)
    set_data(m, instance, weights)
    initialize_model(m, instance)
    return m


def _assign(param: Any, values: np.ndarray) -> None:
    """Store an array into an indexed Param whose indices are 1-based (i,) / (t,) / (i, t)."""
    if values.ndim == 1:
        param.store_values({k + 1: float(v) for k, v in enumerate(values)})
    else:
        param.store_values(
            {(i + 1, t + 1): float(values[i, t]) for i, t in np.ndindex(*values.shape)}
        )


def set_data(m: pyo.ConcreteModel, instance: CrawlInstance, weights: ObjectiveWeights) -> None:
    """Load ``instance`` and ``weights`` into the model's Params and scaling factors.

    The instance must have the model's B and T; the structure is not rebuilt.
    """
    B, T = len(m.I), len(m.T)
    if (instance.buckets, instance.periods) != (B, T):
        raise ValueError(
            f"the model has B={B}, T={T}; the instance has "
            f"B={instance.buckets}, T={instance.periods}: build a new model"
        )
    if weights.oldwt.shape != (B, T) or weights.newwt.shape != (T,):
        raise ValueError("weights must have shapes oldwt [B, T] and newwt [T]")
    for name in ("b0", "y0", "a", "crawl_cost", "new_crawl_cost", "oldnwt", "newnwt", "p"):
        target = {"crawl_cost": "c", "new_crawl_cost": "d"}.get(name, name)
        _assign(getattr(m, target), getattr(instance, name))
    _assign(m.C, instance.capacity)
    _assign(m.oldwt, np.asarray(weights.oldwt, dtype=float))
    _assign(m.newwt, np.asarray(weights.newwt, dtype=float))
    m.n0.set_value(instance.n0)
    m.nconst.set_value(instance.nconst)
    _set_scaling(m, instance, weights)


def _set_scaling(m: Any, instance: CrawlInstance, weights: ObjectiveWeights) -> None:
    sf = m.scaling_factor
    unit = float(np.mean(instance.b0))
    for i in m.I:
        s = 1.0 / float(instance.b0[i - 1])
        for t in m.S:
            sf[m.y_state[i, t]] = sf[m.obsolete_pages[i, t]] = s  # f is a fraction already
    for t in m.T:
        for comp in (m.n, m.z, m.Z, m.new_pages, m.new_crawled, m.new_crawl_limit):
            sf[comp[t]] = 1.0 / unit
        sf[m.crawl_time[t]] = 1.0 / max(float(instance.capacity[t - 1]), 1.0)
    # Objective in units of "every page weighted once": a value of order 1 for any strategy.
    weighted = float(np.sum(weights.oldwt * instance.b0[:, None]) + np.sum(weights.newwt) * unit)
    sf[m.obsolete_weighted] = 1.0 / max(weighted, 1.0) * instance.periods


# -- forward simulation ------------------------------------------------------------------------


def simulate(instance: CrawlInstance, x: np.ndarray, z: np.ndarray) -> Trajectory:
    """Run the recursion (2)-(4) forward from the crawls ``x`` [B, T] and ``z`` [T].

    The crawls are clipped to the limits (5)-(6) (not to capacity), so the result satisfies
    every equation of the model and the bounds.
    """
    B, T = instance.buckets, instance.periods
    xs = np.zeros((B, T))
    ys = np.zeros((B, T))
    bs = np.zeros((B, T))
    ns = np.zeros(T)
    zs = np.zeros(T)
    b, y, n = instance.b0.copy(), instance.y0.copy(), instance.n0
    for t in range(T):
        xt = np.clip(x[:, t], 0.0, b)
        zt = float(np.clip(z[t], 0.0, n))
        a = instance.a[:, t]
        y = (1.0 - xt / b) * ((1.0 - a) * y + a * b)
        n = n + float(instance.oldnwt[:, t] @ xt) + (instance.newnwt[t] - 1.0) * zt
        n = max(n + instance.nconst, 0.0)
        b = b + instance.p * zt
        xs[:, t], ys[:, t], bs[:, t], ns[t], zs[t] = xt, y, b, n, zt
    return Trajectory(xs, ys, bs, ns, zs)


def uniform_crawl(instance: CrawlInstance) -> Trajectory:
    """Crawl every known page (old or new) with the same probability, filling capacity.

    In period t the fraction ``f = min(1, C[t] / (sum_i c[i,t] b[i,t-1] + d[t] n[t-1]))``
    of every bucket and of the new pages is crawled. The result is feasible for the model.
    """
    return _even_crawl(instance, new_first=False)


def round_robin_crawl(instance: CrawlInstance) -> Trajectory:
    """The crawl a fixed-schedule crawler follows: every known page once a lap, the page
    unvisited longest first, so never-fetched pages before every re-crawl.

    In period t it fetches ``z = min(n[t-1], C[t] / d[t])`` new pages and then the same
    fraction ``f = min(1, (C[t] - d[t] z) / sum_i c[i,t] b[i,t-1])`` of every bucket. Once the
    new pages are drained it is :func:`uniform_crawl`; before, it finishes the first lap in
    ``n0 d / C`` periods, where :func:`uniform_crawl`, crawling the same fraction of the new
    pages as of every bucket, drains them geometrically and leaves some unfetched for many
    laps. This is the uniform baseline the nightly run plans with ``optimize = False`` (the
    simulator's ``uniform`` policy is the same round robin, page by page). The result is
    feasible for the model.
    """
    return _even_crawl(instance, new_first=True)


def _even_crawl(instance: CrawlInstance, *, new_first: bool) -> Trajectory:
    """The same fraction of every bucket each period, filling capacity; the new pages get
    that fraction too, or (``new_first``) as many as capacity allows before any bucket."""
    B, T = instance.buckets, instance.periods
    x = np.zeros((B, T))
    z = np.zeros(T)
    b, n = instance.b0.copy(), instance.n0
    for t in range(T):
        capacity = float(instance.capacity[t])
        new_cost = float(instance.new_crawl_cost[t])
        old_work = float(instance.crawl_cost[:, t] @ b)
        if new_first:
            z[t] = min(n, capacity / new_cost) if new_cost > 0 else n
            left = max(capacity - new_cost * z[t], 0.0)
            f = 1.0 if old_work <= 0 else min(1.0, left / old_work)
        else:
            work = old_work + new_cost * n
            f = 1.0 if work <= 0 else min(1.0, capacity / work)
            z[t] = f * n
        x[:, t] = f * b
        n = n + float(instance.oldnwt[:, t] @ x[:, t]) + (instance.newnwt[t] - 1.0) * z[t]
        n = max(n + instance.nconst, 0.0)
        b = b + instance.p * z[t]
    return simulate(instance, x, z)


def initialize_model(
    m: pyo.ConcreteModel, instance: CrawlInstance, start: Trajectory | None = None
) -> None:
    """Set the variables to ``start`` re-simulated forward (default :func:`uniform_crawl`).

    Re-simulating makes a previous plan (a warm start) consistent with the current data.
    """
    traj = uniform_crawl(instance) if start is None else simulate(instance, start.x, start.z)
    before, _ = traj.before(instance)
    fraction = np.divide(traj.x, before, out=np.zeros_like(traj.x), where=before > 0)
    crawled_new = np.cumsum(traj.z)
    for (i, t), v in m.f.items():
        v.set_value(float(min(max(fraction[i - 1, t - 1], 0.0), 1.0)), skip_validation=True)
        if t in m.S:
            m.y_state[i, t].set_value(float(traj.y[i - 1, t - 1]), skip_validation=True)
    for t in m.T:
        m.n[t].set_value(float(traj.n[t - 1]), skip_validation=True)
        m.z[t].set_value(float(traj.z[t - 1]), skip_validation=True)
        m.Z[t].set_value(float(crawled_new[t - 1]), skip_validation=True)


def read_trajectory(m: pyo.ConcreteModel) -> Trajectory:
    """The variables' current values as arrays; x, y and b evaluated from them with numpy
    by the model's definitions (the Expressions ``b``, ``x``, ``y``), not through Pyomo."""
    B, T = len(m.I), len(m.T)

    def value(v: Any) -> float:
        return 0.0 if v.value is None else float(v.value)

    def row(component: Any) -> np.ndarray:
        return np.array([value(component[t]) for t in m.T])

    def param(component: Any, shape: tuple[int, ...]) -> np.ndarray:
        values = np.array([pyo.value(p) for p in component.values()], dtype=float)
        return values.reshape(shape)

    f = np.array([value(v) for v in m.f.values()]).reshape(B, T)
    n, z, crawled_new = row(m.n), row(m.z), row(m.Z)
    b0, y0, p = param(m.b0, (B,)), param(m.y0, (B,)), param(m.p, (B,))
    a = param(m.a, (B, T))
    b = b0[:, None] + p[:, None] * crawled_new[None, :]  # (4) summed up
    before = np.concatenate([b0[:, None], b[:, :-1]], axis=1)
    x = f * before
    y = np.zeros((B, T))
    previous = y0
    for t in range(1, T + 1):
        if t in m.S:
            y[:, t - 1] = [value(m.y_state[i, t]) for i in m.I]
        else:  # (2) with 1 - x/b = 1 - f
            col = t - 1
            y[:, col] = (1 - f[:, col]) * ((1 - a[:, col]) * previous + a[:, col] * before[:, col])
        previous = y[:, t - 1]
    return Trajectory(x, y, b, n, z)
