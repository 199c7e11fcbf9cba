"""Plan on what a page's rate may be: the Bayes action, and the rate that makes a planner take it.

A planner given point estimates crawls each page as if its estimate were its rate. Where the
estimate is uncertain that is costly in one direction above all: a page seen changed at
every fetch has a likelihood flat above about one change per interval, its estimate sits at
that knee, and the knee is where the freshness-optimal schedule crawls most, while most such
pages are far faster and worth no crawl at all (docs/benchmarks.md, "Where the estimates
lose"). This module plans on each page's whole posterior instead:

1. **Posterior on a log-rate grid** (:func:`grid_log_likelihood`, :func:`grid_posterior`):
   each page's likelihood of its change/no-change intervals, or, where its host's
   Last-Modified dates are reliable, of the changes they show in the time they cover (and
   the first fetch's age), as :class:`~estimators.estimator_choice.ChangeRateEstimator`
   reads them; times a prior over the grid.
2. **A prior of any shape** (:func:`fit_grid_prior`): the nonparametric maximum likelihood
   estimate of the population's rate distribution (Kiefer-Wolfowitz; EM on the grid's
   weights). It can hold two clusters or a box where a log-normal cannot, and its upper tail,
   which a censored page's posterior reads, comes from the pages whose dates or short
   intervals do see fast changes.
3. **The Bayes action** (:func:`bayes_refresh`): each page's crawl rate ``f`` maximizes its
   expected time-averaged freshness less the bandwidth's price, ``E[F(f, lambda)] - mu f``
   with ``F = (f / lambda)(1 - exp(-lambda / f))`` (Cho & Garcia-Molina), the price ``mu``
   set so that the budget is spent. Its condition ``E[h(lambda / f) / lambda] = mu``, ``h(x)
   = 1 - (1 + x) exp(-x)``, is the freshness-optimal schedule's (REFERENCE.md) in expectation;
   the expectation is decreasing in ``f``, so each page's rate is read off a grid of ``f``,
   interpolated between its two nearest points.
4. **The Bayes-equivalent rate** (:func:`bayes_equivalent_rates`): the rate whose plug-in
   optimal crawl rate at the same price is the page's Bayes action. Given these rates, a
   planner that equalizes marginal values (the WebFountain model, the page schedules)
   allocates as the Bayes action does, without a change to its model. The plug-in crawl rate
   rises then falls with the rate (zero above ``1 / mu``), so two rates give most crawl
   rates: the one on the side of the page's posterior median is taken; a page the Bayes
   action leaves uncrawled gets its median or, if that is below the cut-off, just above it.

5. **Probes** (:func:`probe_gains`, :func:`choose_probes`): where a page's posterior
   straddles the cut-off rate ``1 / mu``, two crawls a short delay apart tell the rates on
   either side apart. A probe's value is its knowledge gradient (the expected value of the
   Bayes action after its outcome, less the value now) over the time its lesson is used; a
   probe is taken when that pays for its two crawls at the price ``mu``.
6. **Follow-ups**: a probe whose first crawl is the page's next planned crawl, so it costs
   one crawl, not two, and teaches the same, later. A page whose lesson pays for one crawl
   but not for two (or is past the probes' limit) gets one. At thin budgets they are what
   learns the rates of the pages seen changed at every fetch (docs/benchmarks.md,
   "Follow-ups").

Units: rates in changes per unit of the evidence's time (days in production, periods in the
simulator); crawl rates and the budget in crawls per the same unit. Shapes: ``n`` pages,
``G`` grid points, ``K`` crawl-rate points.

Imports: numpy, :mod:`estimators.evidence`, :mod:`estimators.prior`. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from estimators.evidence import ChangeIntervals, LastModifiedEvidence
from estimators.prior import exposure_loglik_on_grid, interval_loglik_on_grid

__all__ = [
    "PROBE_HORIZON_PERIODS",
    "PROBE_SHARE",
    "BayesPlanPrior",
    "BayesRefresh",
    "Probes",
    "bayes_equivalent_rates",
    "bayes_refresh",
    "bayes_refresh_at",
    "choose_probes",
    "evidence_grid",
    "fit_bayes_plan",
    "fit_grid_prior",
    "fit_group_grid_priors",
    "follow_up_gains",
    "grid_log_likelihood",
    "grid_posterior",
    "plan_chunk",
    "plan_rates",
    "plug_in_refresh",
    "probe_gains",
    "rate_grid",
    "straddling",
]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]

#: Log-rate grid step (natural-log units): 0.1 is a 10 % step in rate, finer than any
#: page's posterior is narrow at the evidence a crawl gathers.
GRID_STEP = 0.1
#: Crawl-rate grid points between the smallest and largest useful crawl rates, a step of
#: about 20 % over the 23 natural-log units a grid from 1e-4 to 40 changes a day spans; each
#: page's crawl rate is interpolated between two of them (the expectation is smooth in
#: ``ln f``), so the step costs little precision and the (n, G) x (G, K) product little time.
REFRESH_POINTS = 120
#: EM iterations of the prior's fit, and pages sampled to fit it.
PRIOR_ITERATIONS = 200
PRIOR_PAGES = 20_000
#: Pages' worth of the population's prior in a group's (:func:`fit_group_grid_priors`): a
#: group of a handful of pages keeps mostly the population's prior, one of hundreds its own.
GROUP_PRIOR_PAGES = 20.0
#: A group's EM stops when no weight moves by more than this in a step (or after
#: ``PRIOR_ITERATIONS``). Started from the population's weights, the bulk of a web's pages
#: (its largest group, close to the population) stops within a few steps.
GROUP_PRIOR_TOLERANCE = 1e-4


def rate_grid(shortest: float, longest: float, step: float = GRID_STEP) -> FloatArray:
    """Log rates (natural log) from a tenth of a change per ``longest`` time the evidence
    spans to twenty changes per the ``shortest`` time it resolves, spaced ``step``, shape (G,).

    Below that range every page looks alike (unchanged); above it no evidence can tell rates
    apart, so the prior's mass there is what the evidence leaves unplaced."""
    if not (0 < shortest <= longest) or not np.isfinite(longest):
        raise ValueError(f"need 0 < shortest <= longest, got {shortest}, {longest}")
    low, high = np.log(0.1 / longest), np.log(20.0 / shortest)
    return np.arange(low, high + step / 2, step)


def grid_log_likelihood(
    grid: FloatArray,
    intervals: ChangeIntervals,
    last_modified: LastModifiedEvidence | None = None,
    reliable: BoolArray | None = None,
) -> tuple[FloatArray, BoolArray]:
    """Each page's log-likelihood at each log rate of ``grid``, shape (n, G), and which pages
    have any evidence, shape (n,).

    Pages whose Last-Modified dates are ``reliable`` and span an interval are read from the
    dates (``changes`` in ``exposure``) instead of their intervals, which see the same changes
    less precisely; a reliable first fetch's age ``A`` adds ``theta - lambda A`` (a change A
    ago, none since), or ``-lambda A`` where that date is the page's creation."""
    n = intervals.n_pages
    loglik = interval_loglik_on_grid(intervals, grid)
    has = intervals.n_intervals > 0
    if last_modified is None or reliable is None:
        return loglik, has
    if last_modified.n_pages != n or np.shape(reliable) != (n,):
        raise ValueError(f"Last-Modified evidence and reliable must cover the same {n} pages")
    reliable = np.asarray(reliable, dtype=np.bool_)
    dated = reliable & (last_modified.intervals > 0)
    loglik[dated] = exposure_loglik_on_grid(
        last_modified.changes[dated].astype(np.float64), last_modified.exposure[dated], grid
    )
    creation = last_modified.first_is_creation
    for ages in (last_modified.first_fetch_age, last_modified.single_fetch_age):
        if ages is None:
            continue
        use = reliable & np.isfinite(ages)
        changed = np.ones(int(use.sum())) if creation is None else (~creation[use]).astype(float)
        loglik[use] += changed[:, None] * grid[None, :] - ages[use, None] * np.exp(grid)[None, :]
        has = has | use
    return loglik, has | dated


def _likelihood(loglik: FloatArray) -> FloatArray:
    """Likelihoods scaled to a maximum of 1 per page (no underflow), shape of ``loglik``."""
    return np.exp(loglik - loglik.max(axis=1, keepdims=True))


def fit_grid_prior(
    loglik: FloatArray,
    *,
    iterations: int = PRIOR_ITERATIONS,
    max_pages: int = PRIOR_PAGES,
    random_state: int = 0,
) -> FloatArray:
    """The population's rate distribution on the grid, weights summing to 1, shape (G,):
    the nonparametric maximum likelihood estimate from the pages' likelihoods ``loglik``
    (n, G), by EM from equal weights (a sample of ``max_pages`` pages when there are more).

    EM never moves weight within a range where every likelihood is flat, so weight that no
    evidence places stays spread as it started, evenly on the log scale."""
    g = loglik.shape[1]
    if loglik.shape[0] == 0:
        return np.full(g, 1.0 / g)
    if loglik.shape[0] > max_pages:
        rows = np.random.default_rng(random_state).choice(loglik.shape[0], max_pages, False)
        loglik = loglik[rows]
    return _em_weights(_likelihood(loglik), np.full(g, 1.0 / g), iterations)


def _em_weights(
    lik: FloatArray,
    start: FloatArray,
    iterations: int,
    *,
    pull: FloatArray | None = None,
    strength: float = 0.0,
    tolerance: float = 0.0,
) -> FloatArray:
    """EM on grid weights from ``start`` (G,) for pages of likelihoods ``lik`` (n, G), each
    step ``w <- (sum of the pages' posteriors under w + strength * pull) / (n + strength)``
    (``strength`` 0: the maximum likelihood step), for ``iterations`` steps or until no
    weight moves by ``tolerance``."""
    weights = start
    extra = 0.0 if pull is None else strength * pull
    for _ in range(iterations):
        # sum_i lik_ig w_g / sum_h lik_ih w_h, as two matrix-vector products: no (n, G)
        # array of posteriors each step
        step = (weights * (lik.T @ (1.0 / (lik @ weights))) + extra) / (lik.shape[0] + strength)
        moved = float(np.abs(step - weights).max())
        weights = step
        if moved < tolerance:
            break
    return weights


def _check_groups(groups: IntArray, n: int) -> IntArray:
    """``groups`` as integers, or ValueError unless there are ``n`` of them, all >= 0."""
    groups = np.asarray(groups, dtype=np.intp)
    if groups.shape != (n,) or (groups.size and groups.min() < 0):
        raise ValueError(f"groups must be {n} integers >= 0")
    return groups


def fit_group_grid_priors(
    loglik: FloatArray,
    groups: IntArray,
    population: FloatArray,
    *,
    strength: float = GROUP_PRIOR_PAGES,
    iterations: int = PRIOR_ITERATIONS,
    tolerance: float = GROUP_PRIOR_TOLERANCE,
    max_pages: int = PRIOR_PAGES,
    random_state: int = 0,
) -> FloatArray:
    """Each group's rate distribution on the grid, shape (H, G) for groups 0..H-1 (H: the
    largest of ``groups`` plus one), rows summing to 1: the maximum a posteriori estimate
    from its pages' likelihoods ``loglik`` (n, G) (pages ``groups`` (n,)) under a Dirichlet
    prior worth ``strength`` pages of the ``population`` weights (G,), by EM from the
    population's weights (at most ``iterations`` steps, until no weight moves by
    ``tolerance``)::

        w_g <- (sum of the group's page posteriors under w_g + strength * population)
               / (n_g + strength)

    A group without pages keeps the population's weights; one with a few pages moves
    toward what they show; one with hundreds holds its own. Pages of one kind share a
    prior this way where the population's would mislead them: the redirects and gone pages
    of a site, which never change, beside its pages, which do."""
    groups = _check_groups(groups, loglik.shape[0])
    if population.shape != (loglik.shape[1],):
        raise ValueError(f"population needs {loglik.shape[1]} weights, got {population.shape}")
    if not strength > 0:
        raise ValueError(f"strength must be > 0 pages, got {strength}")
    count = int(groups.max()) + 1 if groups.size else 1
    out = np.tile(population, (count, 1))
    rng = np.random.default_rng(random_state)
    for g in range(count):
        rows = np.flatnonzero(groups == g)
        if rows.size == 0:
            continue
        if rows.size > max_pages:
            rows = rng.choice(rows, max_pages, replace=False)
        out[g] = _em_weights(
            _likelihood(loglik[rows]),
            population,
            iterations,
            pull=population,
            strength=strength,
            tolerance=tolerance,
        )
    return out


def grid_posterior(loglik: FloatArray, prior: FloatArray) -> FloatArray:
    """Each page's posterior weights over the grid, rows summing to 1, shape (n, G)."""
    if prior.shape != (loglik.shape[1],):
        raise ValueError(f"prior needs {loglik.shape[1]} weights, got shape {prior.shape}")
    post = _likelihood(loglik) * prior
    return post / post.sum(axis=1, keepdims=True)


def _marginal_table(grid: FloatArray, refresh: FloatArray) -> FloatArray:
    """``h(lambda / f) / lambda`` at each grid rate and crawl rate, shape (G, K): the freshness
    one more crawl a unit of time buys a page of rate ``lambda`` crawled ``f`` times."""
    lam = np.exp(grid)[:, None]
    x = lam / refresh[None, :]
    return (-np.expm1(-x) - x * np.exp(-x)) / lam


def _refresh_grid(grid: FloatArray) -> FloatArray:
    """Crawl rates from a thousandth of the slowest grid rate to a hundred times the
    fastest: a page is never worth crawling faster (its freshness is then above 0.995)."""
    low, high = np.exp(grid[0]) * 1e-3, np.exp(grid[-1]) * 100.0
    return np.exp(np.linspace(np.log(low), np.log(high), REFRESH_POINTS))


@dataclass(frozen=True)
class BayesRefresh:
    """The Bayes action of every page and its price.

    Attributes
    ----------
    refresh : ndarray, shape (n,)
        Crawls per unit time that maximize each page's expected freshness less ``price``
        per crawl; 0 where even the first crawl is worth less.
    price : float
        The bandwidth's multiplier ``mu``, freshness per crawl per unit time, at which the
        crawl rates sum to the budget.
    """

    refresh: FloatArray
    price: float


def _rates_at(marginal: FloatArray, refresh: FloatArray, price: float) -> FloatArray:
    """Each page's crawl rate at which its expected marginal value is ``price`` (marginal:
    (n, K), decreasing along K, at the crawl rates ``refresh``), linear in the logs between
    the two grid crawl rates around it; 0 where even the first crawl is worth less, the
    grid's largest where the last still is worth more."""
    k = (marginal >= price).sum(axis=1)
    out = np.zeros(marginal.shape[0])
    full = k == refresh.size
    out[full] = refresh[-1]
    inside = np.flatnonzero((k > 0) & ~full)
    if inside.size:
        above = marginal[inside, k[inside] - 1]  # >= price
        below = np.maximum(marginal[inside, k[inside]], 1e-300)  # < price
        log_step = np.log(refresh[1] / refresh[0])
        share = np.log(above / price) / np.log(above / below)
        out[inside] = refresh[k[inside] - 1] * np.exp(share * log_step)
    return out


def _check_posterior(grid: FloatArray, posterior: FloatArray) -> None:
    if posterior.ndim != 2 or posterior.shape[1] != grid.size:
        raise ValueError(f"posterior must be (n, {grid.size}), got {posterior.shape}")


def bayes_refresh(grid: FloatArray, posterior: FloatArray, budget: float) -> BayesRefresh:
    """The Bayes action (module docstring) of pages with ``posterior`` weights (n, G) over
    log rates ``grid`` (G,), at ``budget`` crawls per unit time for all of them."""
    _check_posterior(grid, posterior)
    if not budget > 0:
        raise ValueError(f"budget must be > 0 crawls per unit time, got {budget}")
    if posterior.shape[0] == 0:
        return BayesRefresh(np.zeros(0), float("nan"))
    refresh = _refresh_grid(grid)
    marginal = posterior @ _marginal_table(grid, refresh)  # (n, K)
    low, high = np.log(marginal[:, -1].min() + 1e-300), np.log(marginal[:, 0].max())
    for _ in range(60):  # bisection on log price: spend falls as the price rises
        mid = 0.5 * (low + high)
        if _rates_at(marginal, refresh, float(np.exp(mid))).sum() > budget:
            low = mid
        else:
            high = mid
    price = float(np.exp(high))
    return BayesRefresh(_rates_at(marginal, refresh, price), price)


def bayes_refresh_at(grid: FloatArray, posterior: FloatArray, price: float) -> BayesRefresh:
    """The Bayes action at a given ``price`` (freshness per crawl per unit time): how a
    population too large to hold at once is planned in chunks, at the price one sample of it
    set with :func:`bayes_refresh`."""
    _check_posterior(grid, posterior)
    if not price > 0:
        raise ValueError(f"price must be > 0, got {price}")
    refresh = _refresh_grid(grid)
    marginal = posterior @ _marginal_table(grid, refresh)
    return BayesRefresh(_rates_at(marginal, refresh, price), price)


def plug_in_refresh(grid: FloatArray, price: float) -> FloatArray:
    """The freshness-optimal crawl rate of a page of each grid rate, known exactly, at
    ``price`` (0 above ``1 / price``), on the crawl-rate grid of :func:`bayes_refresh`,
    shape (G,)."""
    refresh = _refresh_grid(grid)
    return _rates_at(_marginal_table(grid, refresh), refresh, price)


def bayes_equivalent_rates(
    grid: FloatArray,
    posterior: FloatArray,
    budget: float | None = None,
    *,
    price: float | None = None,
) -> tuple[FloatArray, BayesRefresh]:
    """Each page's Bayes-equivalent rate (module docstring), changes per unit time, shape
    (n,), and the Bayes action it stands for: at the price that spends ``budget`` on these
    pages, or at ``price``."""
    if (budget is None) == (price is None):
        raise ValueError("give a budget or a price")
    action = (
        bayes_refresh(grid, posterior, budget)
        if budget is not None
        else bayes_refresh_at(grid, posterior, float(price))  # type: ignore[arg-type]
    )
    n = posterior.shape[0]
    if n == 0:
        return np.zeros(0), action
    plug = plug_in_refresh(grid, action.price)  # (G,), rises then falls
    peak = int(np.argmax(plug))
    median = (np.cumsum(posterior, axis=1) < 0.5).sum(axis=1)
    rate = np.exp(grid)
    out = np.empty(n)
    idle = action.refresh <= 0
    cutoff = 1.0 / action.price
    out[idle] = np.maximum(rate[median[idle]], cutoff * 1.2)
    log_plug = np.log(np.maximum(plug, 1e-300))
    target = np.log(np.maximum(action.refresh, 1e-300))
    for side, pages in (
        (slice(0, peak + 1), ~idle & (median <= peak)),
        (slice(peak, grid.size), ~idle & (median > peak)),
    ):
        if pages.any():
            gap = np.abs(log_plug[side][None, :] - target[pages][:, None])
            # the grid of crawl rates gives runs of rates one plug-in rate: take the run's
            # rate nearest the page's median
            index = np.arange(grid.size)[side]
            gap += 1e-9 * np.abs(index[None, :] - median[pages][:, None])
            out[pages] = rate[side][np.argmin(gap, axis=1)]
    return out, action


def evidence_grid(
    intervals: ChangeIntervals, last_modified: LastModifiedEvidence | None = None
) -> FloatArray | None:
    """:func:`rate_grid` over the times the evidence resolves and spans: from the 1st
    percentile of its single intervals, dated exposures and first ages (a retry minutes
    after a fetch would otherwise stretch the grid to rates no page has) to the longest time
    one page was watched (all its intervals together: nineteen unchanged daily intervals tell
    0.01 a day from 0.1); None when it has none."""
    single: list[FloatArray] = [intervals.length]
    watched: list[FloatArray] = [
        np.bincount(intervals.page, weights=intervals.length, minlength=intervals.n_pages).astype(
            np.float64
        )
    ]
    if last_modified is not None:
        for times in (
            last_modified.exposure,
            last_modified.single_fetch_age,
            last_modified.first_fetch_age,
        ):
            if times is not None:
                single.append(times[np.isfinite(times)])
                watched.append(single[-1])
    resolved = np.concatenate(single)
    resolved = resolved[resolved > 0]
    if resolved.size == 0:
        return None
    longest = max(float(np.concatenate(watched).max()), float(resolved.max()))
    return rate_grid(float(np.quantile(resolved, 0.01)), longest)


@dataclass(frozen=True)
class BayesPlanPrior:
    """What plans a population in chunks alike (:func:`fit_bayes_plan`): the log-rate
    ``grid`` (G,), the population's ``prior`` over it (G,), the bandwidth's ``price``, and
    with groups of pages each group's prior (``group_priors``, (H, G), row h group h's;
    None: every page on the population's)."""

    grid: FloatArray
    prior: FloatArray
    price: float
    group_priors: FloatArray | None = None

    def posterior(self, loglik: FloatArray, groups: IntArray | None = None) -> FloatArray:
        """Pages' posteriors (n, G) from their log-likelihoods on the grid (n, G), each
        under its group's prior (``groups`` (n,); a group the fit did not see, or None,
        under the population's)."""
        if self.group_priors is None or groups is None:
            return grid_posterior(loglik, self.prior)
        groups = _check_groups(groups, loglik.shape[0])
        priors = np.vstack([self.group_priors, self.prior[None, :]])
        rows = np.where(groups < self.group_priors.shape[0], groups, priors.shape[0] - 1)
        post = _likelihood(loglik)
        present = np.unique(rows)
        if present.size == 1:
            post *= priors[present[0]]
        else:
            for g in present.tolist():
                post[rows == g] *= priors[g]  # a group at a time: no (n, G) array of priors
        return post / post.sum(axis=1, keepdims=True)


def fit_bayes_plan(
    budget: float,
    intervals: ChangeIntervals,
    last_modified: LastModifiedEvidence | None = None,
    reliable: BoolArray | None = None,
    *,
    sharing: BoolArray | None = None,
    groups: IntArray | None = None,
    group_strength: float = GROUP_PRIOR_PAGES,
) -> BayesPlanPrior | None:
    """The grid, prior and price from a sample of fetched pages (spread over a store)
    and ``budget``, crawls per unit time for those pages (their share of the whole budget);
    None when no page has evidence.

    The prior is fitted on the pages with evidence. The price spends the budget on the pages
    ``sharing`` it (n,; default: every page), those without evidence (fetched once, no date
    believed) at the prior's own Bayes action: they take crawls too, and a price set on the
    pages with evidence alone would be too low wherever most pages have none.

    ``groups`` (n,; integers >= 0) puts each page in a group with a prior of its own
    (:func:`fit_group_grid_priors`, shrunk toward the population's by ``group_strength``
    pages' worth of it: on a sample, scaled by the sample's share of the pages), and the
    price is set with every page on its group's: the nightly run's groups are the pages'
    answers (pages, redirects, gone pages)."""
    grid = evidence_grid(intervals, last_modified)
    if grid is None or not budget > 0:
        return None
    loglik, has = grid_log_likelihood(grid, intervals, last_modified, reliable)
    spend = np.ones(intervals.n_pages, np.bool_)
    if sharing is not None:
        spend = np.asarray(sharing, dtype=np.bool_)
        if spend.shape != (intervals.n_pages,):
            raise ValueError(f"sharing must name each of the {intervals.n_pages} pages")
    if not has.any() or not spend.any():
        return None
    prior = fit_grid_prior(loglik[has])
    group_priors = None
    if groups is not None:
        groups = _check_groups(groups, intervals.n_pages)
        group_priors = fit_group_grid_priors(
            loglik[has], groups[has], prior, strength=group_strength
        )
    loglik[~has] = 0.0
    fitted = BayesPlanPrior(grid, prior, float("nan"), group_priors)
    posterior = fitted.posterior(loglik[spend], None if groups is None else groups[spend])
    action = bayes_refresh(grid, posterior, budget)
    return BayesPlanPrior(grid, prior, action.price, group_priors)


@dataclass(frozen=True)
class Probes:
    """The pages worth a probe (:func:`choose_probes`): ``page`` (m,), indices into the
    pages planned, best first; ``net`` (m,), each probe's net value (freshness x time,
    the unit of the plan's rates: what knowing its outcome adds over ``horizon`` less the
    price of its crawls); ``delay``, the time between a probe's two crawls. ``follow``
    (k,), the pages worth a follow-up (a probe whose first crawl is the page's next planned
    one, the same ``delay`` before its second), best first, none of them in ``page``, and
    ``follow_net`` (k,), each one's net value (its gain less one crawl). ``as_follow_up``
    (m,), each probe's net value were it a follow-up instead (0 without follow-ups): a store
    planned in chunks follows up the probes past its limit."""

    page: IntArray
    net: FloatArray
    delay: float
    follow: IntArray = field(default_factory=lambda: np.zeros(0, np.intp))
    follow_net: FloatArray = field(default_factory=lambda: np.zeros(0))
    as_follow_up: FloatArray = field(default_factory=lambda: np.zeros(0))


def _value_table(grid: FloatArray, refresh: FloatArray) -> FloatArray:
    """Time-averaged freshness ``F(f, lambda) = (f / lambda)(1 - exp(-lambda / f))`` at each
    grid rate and crawl rate, shape (G, K)."""
    x = np.exp(grid)[:, None] / refresh[None, :]
    return -np.expm1(-x) / x


def _best_values(weights: FloatArray, table: FloatArray, cost: FloatArray) -> FloatArray:
    """``max(0, max_f sum_g w_g F(f, lambda_g) - mass x price x f)`` per row of ``weights``
    (n, G), unnormalized (its mass the outcome's probability): the value of the Bayes action
    on that belief, weighted by its probability, shape (n,)."""
    mass = weights.sum(axis=1)
    return np.maximum((weights @ table - mass[:, None] * cost[None, :]).max(axis=1), 0.0)


def probe_gains(grid: FloatArray, posterior: FloatArray, price: float, delay: float) -> FloatArray:
    """What one probe adds to each page's value rate (freshness, time-averaged), shape (n,).

    A probe is two crawls ``delay`` apart: the second sees whether the page changed in
    between, a likelihood ``exp(-lambda delay)`` (unchanged) or its complement. Its gain is
    the knowledge gradient: the expected value of the Bayes action after the outcome less
    its value now, each the best of ``E[F(f, lambda)] - price f`` over crawl rates ``f``
    (at least 0: no crawl). It is never negative (the best action's value is convex in the
    belief; rounding aside), and it is largest for a page whose posterior straddles the
    rates worth crawling and whose probe tells them apart."""
    _check_posterior(grid, posterior)
    refresh = _refresh_grid(grid)
    table = _value_table(grid, refresh)
    cost = price * refresh
    keep = np.exp(-np.exp(grid) * delay)  # (G,): P(unchanged over the delay | rate)
    after = _best_values(posterior * keep, table, cost)
    after += _best_values(posterior * (1.0 - keep), table, cost)
    return after - _best_values(posterior, table, cost)


def follow_up_gains(
    grid: FloatArray, posterior: FloatArray, price: float, delay: float, interval: FloatArray
) -> FloatArray:
    """What a follow-up adds to each page's value rate, shape (n,), over what the page's
    next planned crawl teaches anyway.

    A follow-up's first crawl is that planned crawl, ``interval`` (n,) after the page's
    last (``inf``: none planned, nothing learnt from it); it sees a change with likelihood
    ``1 - exp(-lambda interval)``, and the follow-up's second crawl, ``delay`` later, the
    same over ``delay``. The gain is the knowledge gradient of both outcomes less that of
    the first alone. A page whose next crawl will tell it apart anyway (fetched once: its
    first interval still to come) gains little; a page seen changed at every fetch, whose
    next crawl will most likely see a change again, gains nearly what a probe would."""
    _check_posterior(grid, posterior)
    interval = np.asarray(interval, dtype=np.float64)
    if interval.shape != (posterior.shape[0],) or np.any(~(interval > 0)):
        raise ValueError(f"interval must be (n,) times > 0, got shape {interval.shape}")
    refresh = _refresh_grid(grid)
    table = _value_table(grid, refresh)
    cost = price * refresh
    rate = np.exp(grid)
    keep = np.exp(-rate * delay)  # (G,): P(unchanged over the delay | rate)
    planned = np.exp(-np.outer(interval, rate))  # (n, G): unchanged at the planned crawl
    gain = np.zeros(posterior.shape[0])
    for seen in (planned, 1.0 - planned):
        weights = posterior * seen
        gain += _best_values(weights * keep, table, cost)
        gain += _best_values(weights * (1.0 - keep), table, cost)
        gain -= _best_values(weights, table, cost)
    return gain


#: Periods over which what a probe teaches is counted (``plan.probe_horizon``, the default):
#: a page's rate holds for months, and a crawler runs for longer; at daily periods, half a
#: year. Probes cost a young crawl freshness while they learn and pay it back over months
#: (docs/benchmarks.md, "Probes on again: what they cost early and pay later").
PROBE_HORIZON_PERIODS = 180.0
#: The most of a cycle's capacity probes may take (two crawls each), best first: the price
#: that values them is the plan's, set as if no crawl went to probes. Also the most of the
#: fetched pages marked for a follow-up at once: their second crawls then take about that
#: share of the planned crawls' capacity.
PROBE_SHARE = 0.3
#: Probe delays tried, as multiples of the time ``1 / c`` of the cut-off rate ``c`` (the
#: fastest rate still worth a crawl at the plan's price): a probe tells rates around
#: ``1 / delay`` apart best, and the rates that matter are those around the cut-off.
PROBE_DELAYS = (0.25, 0.5, 1.0, 2.0)
#: Posterior mass below the cut-off rate outside which a page is not considered for a
#: probe: it is surely worth crawling or surely not, and a probe changes little.
PROBE_STRADDLE = 0.02


def straddling(plan: BayesPlanPrior, posterior: FloatArray) -> IntArray:
    """The pages (rows of ``posterior``, shape (n, G)) worth valuing for a probe: those with
    between :data:`PROBE_STRADDLE` and its complement of their posterior mass below the
    cut-off rate ``1 / plan.price``; the others are surely worth crawling or surely not."""
    _check_posterior(plan.grid, posterior)
    below = posterior[:, np.exp(plan.grid) < 1.0 / plan.price].sum(axis=1)
    return np.flatnonzero((below > PROBE_STRADDLE) & (below < 1.0 - PROBE_STRADDLE))


def choose_probes(
    plan: BayesPlanPrior,
    posterior: FloatArray,
    horizon: float,
    *,
    shortest: float = 0.0,
    limit: int | None = None,
    delays: tuple[float, ...] | None = None,
    follow_ups: bool = True,
    follow_limit: int | None = None,
    planned_interval: FloatArray | None = None,
) -> Probes:
    """The pages whose probe pays for its two crawls within ``horizon`` (the time the
    knowledge is used for, the plan's time unit), best first, at most ``limit``; and, with
    ``follow_ups``, the pages whose lesson pays for one crawl (the others, and those past
    ``limit``): their follow-ups, best first, at most ``follow_limit``. A follow-up is
    valued over what the page's next planned crawl teaches anyway
    (:func:`follow_up_gains`), that crawl ``planned_interval`` (n,) after the page's last
    (None: a probe's gain, as if it taught nothing).

    The delay is the one of :data:`PROBE_DELAYS` (times the cut-off rate's time, no shorter
    than ``shortest``: what the crawl can do) with the most net value in total. A probe's
    net value is its gain (:func:`probe_gains`) times ``horizon`` less its two crawls at the
    plan's price (a crawl a unit of time for ``horizon`` is ``horizon`` crawls, worth
    ``price x horizon``; so one crawl costs ``price``); a follow-up's, the same gain less one
    crawl: its first crawl is one the plan makes anyway. Only pages whose posterior mass
    below the cut-off is between :data:`PROBE_STRADDLE` and its complement are valued: the
    others' probes change little, and skipping them keeps this cheap on a whole store.
    ``delays`` (the plan's time unit) replaces the tried delays: a store planned in chunks
    at one price tries them on its first chunk with probes and keeps the one it chose."""
    if not horizon > 0:
        raise ValueError(f"horizon must be > 0, got {horizon}")
    cutoff = 1.0 / plan.price
    straddle = straddling(plan, posterior)
    none = Probes(np.zeros(0, np.intp), np.zeros(0), float("nan"))
    limit = None if limit is None else max(limit, 0)
    if straddle.size == 0 or (limit == 0 and not follow_ups):
        return none
    best, best_total = none, 0.0
    tried = delays if delays is not None else [m / cutoff for m in PROBE_DELAYS]
    for delay in sorted({max(d, shortest) for d in tried}):
        gain = probe_gains(plan.grid, posterior[straddle], plan.price, delay) * horizon
        net = gain - 2.0 * plan.price
        paying = np.flatnonzero(net > 0)
        order = paying[np.argsort(-net[paying], kind="stable")][:limit]
        total = float(net[order].sum())
        follow, once = np.zeros(0, np.intp), np.zeros(straddle.size)
        if follow_ups:
            once = gain
            if planned_interval is not None:
                once = follow_up_gains(
                    plan.grid,
                    posterior[straddle],
                    plan.price,
                    delay,
                    np.asarray(planned_interval, np.float64)[straddle],
                )
                once *= horizon
            once = once - plan.price
            rest = np.ones(straddle.size, np.bool_)
            rest[order] = False
            worth = np.flatnonzero(rest & (once > 0))
            follow = worth[np.argsort(-once[worth], kind="stable")][:follow_limit]
            total += float(once[follow].sum())
        if total > best_total:
            best_total = total
            best = Probes(
                straddle[order].astype(np.intp),
                net[order],
                float(delay),
                straddle[follow].astype(np.intp),
                once[follow],
                once[order],
            )
    return best


def plan_rates(
    plan: BayesPlanPrior,
    intervals: ChangeIntervals,
    last_modified: LastModifiedEvidence | None = None,
    reliable: BoolArray | None = None,
    groups: IntArray | None = None,
) -> FloatArray:
    """Each page's Bayes-equivalent rate under ``plan``'s prior and price, changes per unit
    time, shape (n,). A page without evidence (fetched once, no date believed) has the prior
    for its posterior, and gets the prior's rate: the pages the crawl knows nothing about
    are planned on what the population says, not on one estimate's guess. ``groups`` (n,):
    each page under its group's prior where ``plan`` has group priors."""
    return plan_chunk(plan, intervals, last_modified, reliable, groups)[0]


def plan_chunk(
    plan: BayesPlanPrior,
    intervals: ChangeIntervals,
    last_modified: LastModifiedEvidence | None = None,
    reliable: BoolArray | None = None,
    groups: IntArray | None = None,
    *,
    horizon: float | None = None,
    shortest: float = 0.0,
    probe_limit: int | None = None,
    probe_delays: tuple[float, ...] | None = None,
    follow_ups: bool = True,
    follow_limit: int | None = None,
) -> tuple[FloatArray, Probes]:
    """:func:`plan_rates`, and with a ``horizon`` the pages worth a probe or a follow-up
    (:func:`choose_probes`, on the same posteriors, trying ``probe_delays``; none
    without)."""
    none = Probes(np.zeros(0, np.intp), np.zeros(0), float("nan"))
    loglik, has = grid_log_likelihood(plan.grid, intervals, last_modified, reliable)
    loglik[~has] = 0.0
    if intervals.n_pages == 0:
        return np.zeros(0), none
    posterior = plan.posterior(loglik, groups)
    rates, action = bayes_equivalent_rates(plan.grid, posterior, price=plan.price)
    if horizon is None:
        return rates, none
    with np.errstate(divide="ignore"):
        planned = 1.0 / action.refresh  # the Bayes action's interval; inf: not crawled
    return rates, choose_probes(
        plan,
        posterior,
        horizon,
        shortest=shortest,
        limit=probe_limit,
        delays=probe_delays,
        follow_ups=follow_ups,
        follow_limit=follow_limit,
        planned_interval=planned,
    )
