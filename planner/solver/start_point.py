r"""A near-optimal feasible start for the WebFountain model, by column generation over buckets.

The model (:mod:`planner.model.webfountain`) couples its B buckets only through the crawl time of
each period (1), the new pages (3) and the buckets' growth (4). With the new-page crawls z,
and so the bucket sizes ``b[i,t] = b0[i] + p[i] Z[t]``, held, a bucket's part of the objective,

    sum_t oldwt[i,t] y[i,t] + sum_t nu[t] oldnwt[i,t] f[i,t] b[i,t-1],

(``nu[t] = sum_{s >= t} newwt[s]``: what one new page found in period t adds to the weighted
new uncrawled pages) depends on its own crawl fractions only, and it is multilinear in them
(each f[i,t] appears linearly): a best crawl schedule of one bucket is a 0/1 one, the periods
in which the whole bucket is crawled. The model's optima are nearly so (99.6% of the f of v1
at 0 or 1).

So the start is a Dantzig-Wolfe decomposition. The master LP chooses, per bucket, a convex
combination of 0/1 schedules found so far (its *columns*), and the new-page crawls z, within
each period's crawl time and the new pages known (6); its duals price a second of crawl time
per period. For those prices a dynamic program over "the last period the bucket was crawled
whole" (the bucket has no obsolete pages at the end of that period) gives every bucket's best
schedule in O(T^2), vectorized over the buckets; a schedule of negative reduced cost becomes a
column. When no bucket has one, the LP is optimal over all 0/1 schedules: at most T buckets
are mixed, and a mixture is read as fractions (the share of the bucket crawled in each period).
With the new z the bucket sizes are updated and the LP is solved again (a few outer rounds;
the growth's effect on later obsolete pages is priced linearly).

The result is simulated forward, so it satisfies every equation and bound of the model, and
is scored with the model's objective. It is only a start: Ipopt solves the model from it
(:class:`planner.solver.plan_solver.PlanSolver`), needing a few dozen iterations instead of a few
hundred, and reaching better local optima than from the uniform crawl on the paper's instances
(docs/model.md has the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from planner.model.instance import CrawlInstance
from planner.model.webfountain import Trajectory, simulate
from planner.model.weights import ObjectiveWeights

__all__ = ["PricedStart", "best_schedules", "objective_of", "priced_start"]


@dataclass(frozen=True)
class PricedStart:
    """A feasible start and the crawl-time prices of the master LP that produced it.

    Attributes
    ----------
    trajectory : Trajectory
        The start, simulated forward (satisfies every equation and bound of the model).
    objective : float
        The model's objective at ``trajectory``.
    prices : ndarray, shape (T,)
        Price of one second of crawl time per period, in objective units (LP duals).
    lp_rounds : int
        Master LPs solved.
    columns : int
        0/1 schedules generated (all buckets together).
    """

    trajectory: Trajectory
    objective: float
    prices: np.ndarray
    lp_rounds: int
    columns: int


def objective_of(traj: Trajectory, weights: ObjectiveWeights) -> float:
    """The model's objective ``sum oldwt y + sum newwt n`` at ``traj``."""
    return float(np.sum(weights.oldwt * traj.y) + np.dot(weights.newwt, traj.n))


def _bucket_cost(
    instance: CrawlInstance,
    weights: ObjectiveWeights,
    owner: np.ndarray,
    schedule: np.ndarray,
    before: np.ndarray,
    found_cost: np.ndarray,
) -> np.ndarray:
    """Objective part [K] of crawl fractions ``schedule`` [K, T] of buckets ``owner`` [K]:
    weighted obsolete pages plus ``found_cost`` [B, T] per whole crawl."""
    a, w = instance.a[owner], weights.oldwt[owner]
    b, e = before[owner], found_cost[owner]
    y = instance.y0[owner].copy()
    total = np.zeros(owner.size)
    for t in range(instance.periods):
        y = (1.0 - schedule[:, t]) * ((1.0 - a[:, t]) * y + a[:, t] * b[:, t])
        total += w[:, t] * y + e[:, t] * schedule[:, t]
    return total


def best_schedules(
    instance: CrawlInstance, weights: ObjectiveWeights, before: np.ndarray, cost: np.ndarray
) -> np.ndarray:
    """Best 0/1 crawl schedule [B, T] of every bucket: weighted obsolete pages plus
    ``cost[i,t]`` for crawling bucket i whole in period t; ``before[i,t]`` is b[i,t-1].

    States s = 0..T: the bucket was last crawled whole in period s (0: not yet in this cycle,
    obsolete pages from y0).
    """
    B, T = instance.buckets, instance.periods
    a, w = instance.a, weights.oldwt
    # seg[s, :, t]: weighted obsolete pages of periods s+1..t, no crawl after s (t > s).
    seg = np.zeros((T + 1, B, T + 1))
    for s in range(T + 1):
        y = instance.y0.copy() if s == 0 else np.zeros(B)
        total = np.zeros(B)
        for t in range(s + 1, T + 1):
            y = (1.0 - a[:, t - 1]) * y + a[:, t - 1] * before[:, t - 1]
            total = total + w[:, t - 1] * y
            seg[s, :, t] = total
    value = np.zeros((T + 1, B))
    nxt = np.full((T + 1, B), -1, dtype=np.int64)
    for s in range(T, -1, -1):
        best = seg[s, :, T].copy() if s < T else np.zeros(B)  # no further crawl
        choice = np.full(B, -1, dtype=np.int64)
        for s2 in range(s + 1, T + 1):
            # obsolete pages of s+1..s2-1, then a whole crawl in s2 (no obsolete page after it)
            cand = seg[s, :, s2 - 1] + cost[:, s2 - 1] + value[s2]
            better = cand < best
            best = np.where(better, cand, best)
            choice = np.where(better, s2, choice)
        value[s], nxt[s] = best, choice
    f = np.zeros((B, T))
    state = np.zeros(B, dtype=np.int64)
    rows = np.arange(B)
    for _ in range(T):
        step = nxt[state, rows]
        active = step > 0
        if not np.any(active):
            break
        f[rows[active], step[active] - 1] = 1.0
        state = np.where(active, step, state)
    return f


def _growth_cost(
    instance: CrawlInstance,
    weights: ObjectiveWeights,
    f: np.ndarray,
    price: np.ndarray,
) -> np.ndarray:
    """G[t] [T]: objective cost of one more page joining the buckets (shared by p) at the end
    of period t, crawl fractions f held: its obsolete pages and its priced crawl time later."""
    B, T = instance.buckets, instance.periods
    a, w, c = instance.a, weights.oldwt, instance.crawl_cost
    q = np.zeros(B)  # d objective / d y[i,s], through periods s..T
    per_page = np.zeros((B, T))  # d objective / d b[i,s-1], s = 1..T
    for s in range(T, 0, -1):
        carry = q * (1.0 - f[:, s]) * (1.0 - a[:, s]) if s < T else 0.0
        q = w[:, s - 1] + carry
        crawl = price[s - 1] * c[:, s - 1] * f[:, s - 1]
        per_page[:, s - 1] = q * (1.0 - f[:, s - 1]) * a[:, s - 1] + crawl
    tail = np.cumsum(per_page[:, ::-1], axis=1)[:, ::-1]  # tail[:, k] = sum over j >= k
    g = np.zeros(T)
    g[: T - 1] = instance.p @ tail[:, 1:]  # a page joining after period t is in b[t..T-1]
    return g


def _master(
    instance: CrawlInstance,
    weights: ObjectiveWeights,
    before: np.ndarray,
    growth: np.ndarray,
    owner: list[int],
    masks: list[np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Solve the master LP. Returns column weights [K], z [T], crawl-time prices [T] (>= 0),
    bucket duals [B], LP value.

    Variables: column weights w [K], new crawls z [T], new uncrawled pages n [T] (n[t] at the
    end of period t). Rows: per bucket sum of its weights = 1; per period crawl time (1);
    (3) for n; (6) z[t] <= n[t-1].
    """
    B, T = instance.buckets, instance.periods
    nu = np.cumsum(weights.newwt[::-1])[::-1]
    own = np.asarray(owner, dtype=np.int64)
    sched = np.asarray(masks)
    K = own.size
    found_cost = nu[None, :] * instance.oldnwt * before
    cost = _bucket_cost(instance, weights, own, sched, before, found_cost)
    # z[t] changes n[s >= t] by newnwt[t] - 1 (costed through nu) and adds a page to the
    # buckets (growth[t]); the found pages' cost is in the columns, so n costs nothing here.
    c = np.concatenate([cost, (instance.newnwt - 1.0) * nu + growth, np.zeros(T)])
    col_k, per_t = np.nonzero(sched)
    load = (instance.crawl_cost * before)[own[col_k], per_t]
    found = (instance.oldnwt * before)[own[col_k], per_t]
    t_idx = np.arange(T)
    z_col, n_col = K + t_idx, K + T + t_idx
    # crawl time: sum load w + d z <= C
    cap = sparse.coo_matrix(
        (
            np.concatenate([load, instance.new_crawl_cost]),
            (np.concatenate([per_t, t_idx]), np.concatenate([col_k, z_col])),
        ),
        shape=(T, K + 2 * T),
    )
    # (6): z[t] - n[t-1] <= n0 (t = 1) or 0
    later = t_idx[1:]
    limit = sparse.coo_matrix(
        (
            np.concatenate([np.ones(T), -np.ones(T - 1)]),
            (np.concatenate([t_idx, later]), np.concatenate([z_col, n_col[:-1]])),
        ),
        shape=(T, K + 2 * T),
    )
    # (3): n[t] - n[t-1] - found w - (newnwt - 1) z = nconst (+ n0 at t = 1)
    balance = sparse.coo_matrix(
        (
            np.concatenate([np.ones(T), -np.ones(T - 1), -found, 1.0 - instance.newnwt]),
            (
                np.concatenate([t_idx, later, per_t, t_idx]),
                np.concatenate([n_col, n_col[:-1], col_k, z_col]),
            ),
        ),
        shape=(T, K + 2 * T),
    )
    convex = sparse.coo_matrix((np.ones(K), (own, np.arange(K))), shape=(B, K + 2 * T))
    first = np.zeros(T)
    first[0] = instance.n0
    res = linprog(
        c,
        A_ub=sparse.vstack([cap, limit]).tocsr(),
        b_ub=np.concatenate([instance.capacity, first]),
        A_eq=sparse.vstack([convex, balance]).tocsr(),
        b_eq=np.concatenate([np.ones(B), instance.nconst + first]),
        bounds=(0.0, None),
        method="highs",
    )
    if res.status != 0:  # pragma: no cover - the all-uncrawled columns keep it feasible
        raise RuntimeError(f"master LP: {res.message}")
    price = np.maximum(-np.asarray(res.ineqlin.marginals[:T]), 0.0)
    dual = np.asarray(res.eqlin.marginals[:B])
    return res.x[:K], res.x[K : K + T], price, dual, float(res.fun)


def _round_mixtures(
    owner: np.ndarray,
    weight: np.ndarray,
    masks: np.ndarray,
    whole: np.ndarray,
    room: np.ndarray,
) -> np.ndarray:
    """Crawl fractions [B, T] from the LP's column weights: every bucket its schedule of
    largest weight, then the mixed buckets' crawls trimmed where that overdraws a period's
    old-page crawl time ``room`` [T], and topped up, fractionally, where their other schedules
    crawl and time is left (``whole[i,t]``: the time of crawling bucket i whole in period t).

    A mixture read as fractions would crawl pages at random (the model's reading), which loses
    much of what the schedules gain (v1, strategy 3: 1% of the objective); scaling a whole
    period down to its time, about as much."""
    B, T = whole.shape
    best = np.full(B, -1.0)
    f = np.zeros((B, T))
    for k in np.argsort(-weight, kind="stable"):
        i = owner[k]
        if weight[k] > best[i]:
            best[i] = weight[k]
            f[i] = masks[k]
    share = np.zeros((B, T))  # the LP's crawl fractions (the mixtures' marginals)
    np.add.at(share, owner, weight[:, None] * masks)
    mixed = np.nonzero(best < 1.0 - 1e-9)[0]
    order = mixed[np.argsort(best[mixed], kind="stable")]  # least settled first
    for t in range(T):
        spare = float(room[t] - whole[:, t] @ f[:, t])
        for i in order:
            if spare < 0 and f[i, t] > 0:  # overdrawn: trim a mixed bucket's crawl
                cut = min(f[i, t], -spare / whole[i, t])
                f[i, t] -= cut
                spare += cut * whole[i, t]
            elif spare > 0 and f[i, t] == 0 and share[i, t] > 0:  # time left: top up
                add = min(share[i, t], spare / whole[i, t])
                f[i, t] += add
                spare -= add * whole[i, t]
    return np.clip(f, 0.0, 1.0)


#: The first columns: every bucket's best schedule at these multiples of the uniform price.
PRICE_SCALES = (0.7, 0.85, 1.0, 1.15, 1.3)


def _uniform_price(
    instance: CrawlInstance,
    weights: ObjectiveWeights,
    before: np.ndarray,
    found_cost: np.ndarray,
    start: Trajectory,
) -> float:
    """About the one price of crawl time, the same in every period, at which the buckets' best
    schedules ask for the old-page crawl time of the whole cycle (bisection in log scale over
    six decades around the objective per second of the start)."""
    whole = instance.crawl_cost * before
    budget = float(np.sum(instance.capacity - instance.new_crawl_cost * start.z))
    unit = max(objective_of(start, weights), 1.0) / max(budget, 1.0)
    low, high = np.log(unit * 1e-3), np.log(unit * 1e3)
    for _ in range(20):
        mid = 0.5 * (low + high)
        f = best_schedules(instance, weights, before, np.exp(mid) * whole + found_cost)
        if float(np.sum(f * whole)) > budget:
            low = mid
        else:
            high = mid
    return float(np.exp(high))


def _fit_capacity(instance: CrawlInstance, f: np.ndarray, z: np.ndarray) -> Trajectory:
    """Crawl fractions f [B, T] and new crawls z [T], each period scaled down to its crawl time
    where it does not fit (the bucket sizes have moved with z), simulated forward."""
    B, T = instance.buckets, instance.periods
    b, n = instance.b0.copy(), instance.n0
    x, zz = np.zeros((B, T)), np.zeros(T)
    for t in range(T):
        xt, zt = f[:, t] * b, min(float(z[t]), n)
        load = float(instance.crawl_cost[:, t] @ xt) + instance.new_crawl_cost[t] * zt
        cap = float(instance.capacity[t])
        if load > cap:
            xt, zt = xt * (cap / load), zt * (cap / load)
        x[:, t], zz[t] = xt, zt
        n = n + float(instance.oldnwt[:, t] @ xt) + (instance.newnwt[t] - 1.0) * zt
        n = max(n + instance.nconst, 0.0)
        b = b + instance.p * zt
    return simulate(instance, x, zz)


def priced_start(
    instance: CrawlInstance,
    weights: ObjectiveWeights,
    start: Trajectory,
    *,
    outer: int = 3,
    max_rounds: int = 60,
    tol: float = 1e-6,
    round_mixtures: bool = True,
) -> PricedStart:
    """The column-generation start (module docstring); ``start`` (a feasible crawl, e.g.
    :func:`planner.model.webfountain.uniform_crawl`) gives the first bucket sizes, and is returned
    if it is better."""
    B, T = instance.buckets, instance.periods
    nu = np.cumsum(weights.newwt[::-1])[::-1]
    owner: list[int] = list(range(B))
    masks: list[np.ndarray] = [np.zeros(T) for _ in range(B)]  # never crawled: always feasible
    seen = {(i, masks[i].tobytes()) for i in range(B)}
    z = np.asarray(start.z, dtype=float)
    f = np.zeros((B, T))
    price = np.zeros(T)
    growth = np.zeros(T)
    rounds = 0
    for _ in range(outer):
        before = (
            instance.b0[:, None]
            + instance.p[:, None] * np.concatenate([[0.0], np.cumsum(z)[:-1]])[None, :]
        )
        found_cost = nu[None, :] * instance.oldnwt * before
        if rounds == 0:  # first columns: the best schedules around a uniform price
            price0 = _uniform_price(instance, weights, before, found_cost, start)
            for scale in PRICE_SCALES:
                cost = scale * price0 * instance.crawl_cost * before + found_cost
                for i, row in enumerate(best_schedules(instance, weights, before, cost)):
                    key = (i, row.tobytes())
                    if key not in seen:
                        seen.add(key)
                        owner.append(i)
                        masks.append(row)
        last = np.inf
        for _ in range(max_rounds):
            weight, z_new, price, dual, value = _master(
                instance, weights, before, growth, owner, masks
            )
            rounds += 1
            whole = instance.crawl_cost * before
            cand = best_schedules(instance, weights, before, price[None, :] * whole + found_cost)
            reduced = (
                _bucket_cost(instance, weights, np.arange(B), cand, before, found_cost)
                + np.sum(cand * whole * price[None, :], axis=1)
                - dual
            )
            added = 0
            for i in np.nonzero(reduced < -tol * max(abs(value) / B, 1e-300))[0].tolist():
                key = (i, cand[i].tobytes())
                if key not in seen:
                    seen.add(key)
                    owner.append(i)
                    masks.append(cand[i].copy())
                    added += 1
            if added == 0 or last - value < tol * abs(value):
                break
            last = value
        k = weight.size  # the columns of the last master LP
        if round_mixtures:
            room = instance.capacity - instance.new_crawl_cost * z_new
            f = _round_mixtures(np.asarray(owner[:k]), weight, np.asarray(masks[:k]), whole, room)
        else:
            f = np.zeros((B, T))
            np.add.at(f, np.asarray(owner[:k]), weight[:, None] * np.asarray(masks[:k]))
            f = np.clip(f, 0.0, 1.0)
        z = z_new
        growth = _growth_cost(instance, weights, f, price)
    traj = _fit_capacity(instance, f, z)
    value = objective_of(traj, weights)
    start_value = objective_of(start, weights)
    if start_value < value:
        traj, value = start, start_value
    return PricedStart(traj, value, price, rounds, len(masks) - B)
