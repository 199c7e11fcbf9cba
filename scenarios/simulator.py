"""Run a refresh policy on a synthetic world for many periods under a crawl budget (no I/O).

Each period ``t`` covers the time ``[t, t + 1)`` (periods). The simulator

1. makes the pages born in ``t`` known to the crawler (never fetched yet);
2. asks the policy for at most the period's budget of distinct known pages to crawl
   (:meth:`scenarios.policies.base.Policy.select`), and rejects anything else; the budget is
   ``budget`` times the period's multiplier of ``budget_profile`` (capacity that varies from
   period to period), known to the policy ahead (:attr:`CrawlLog.budgets`);
   a politeness-bound host (:attr:`scenarios.world.World.host_cap`) gets at most its cap of
   crawls: the pages chosen beyond it, in the policy's order, are not crawled (``deferred``);
3. draws the world's changes of the period (:meth:`scenarios.world.World.period_changes`:
   the same for every policy with the same seed) and crawls each chosen page at its fixed slot
   ``t + c`` inside the period;
4. integrates the metrics over the period exactly, from the first change after each page's
   last crawl, and hands the policy what its crawls observed (changed since the previous
   fetch or not, Last-Modified as the page's server reports it, gone);
5. records the period's metrics.

The policy sees only the :class:`CrawlLog` (its own fetches, the URLs it knows, their host
and section, importance) and, in the oracle variant, the true mean change rates.

**Metrics per period** (means over the pages alive in the period; ``*_w`` weighted by
importance): ``freshness`` the time-averaged share of pages whose stored copy is up to date
(a page never fetched is not); ``age`` time since the first change the stored copy missed,
time-averaged (periods); ``obsolescence`` Xyleme's ``lambda (t - t_last_crawl)`` with the
page's true mean rate, time-averaged (expected changes missed); ``obsolete_pages`` pages
fetched before whose stored copy is stale at the period's end (the WebFountain model's y);
``uncrawled_pages`` pages alive and never fetched at the period's end (its n);
``change_ratio`` changed re-crawls over re-crawls (Cho & Ntoulas); ``crawls``, ``wasted``
(crawls of pages gone), ``deferred`` (pages chosen beyond a host's politeness cap, not
crawled). Per page: crawls over the measured periods (:attr:`SimulationResult.
crawls`), for crawls per cycle by true change rate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from estimators.evidence import ChangeIntervals
from estimators.opic import OPIC
from scenarios.world import STATIC_DATE_AGE, World

__all__ = [
    "METRICS",
    "CrawlLog",
    "Observations",
    "RefreshPolicy",
    "SimulationError",
    "SimulationResult",
    "SimulationSettings",
    "budget_profile_problem",
    "simulate",
    "within_host_cap",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: The per-period metrics, in the order of :attr:`SimulationResult.metrics` columns.
METRICS = (
    "freshness",
    "age",
    "obsolescence",
    "freshness_w",
    "age_w",
    "obsolescence_w",
    "obsolete_pages",
    "uncrawled_pages",
    "change_ratio",
    "crawls",
    "wasted",
    "alive",
    "deferred",
)


class RefreshPolicy(Protocol):
    """What the simulator asks of a policy (:class:`scenarios.policies.base.Policy` is one).

    Declared here, not imported, so that policies import the simulator's log and never the
    reverse.
    """

    name: str

    def start(self, log: CrawlLog) -> None:
        """Called once before the first period with the crawler's initial knowledge."""

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        """At most ``budget`` distinct known page ids to crawl in ``period``."""
        ...

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        """What this period's crawls observed (``log`` is already updated)."""


class SimulationError(ValueError):
    """A policy broke the rules (over budget, a page twice, an unknown page) or bad settings."""


@dataclass(frozen=True)
class SimulationSettings:
    """How to run.

    Attributes
    ----------
    periods : periods measured (after the warm-up).
    budget : crawls per period.
    warmup : periods run before the measured ones (metrics kept, flagged ``warmup``).
    warm_start : the initial pages have been fetched once before the run (at random times in
        the last ``ceil(pages / budget)`` periods), and the crawl log holds those fetches with
        the Last-Modified their servers sent; else the crawler starts cold, knowing the URLs
        only.
    oracle : the policy may read the true change rates (and the true importance).
    seed : of the change process (the world has its own).
    importance : what the crawler knows of importance: ``"true"`` (the world's), or
        ``"opic"``: OPIC (:class:`estimators.opic.OPIC`) run on the world's link graph as the
        crawl goes, each period's crawls one batch, from uniform cash (oracle runs still see
        the truth). Needs a world with ``links_per_page > 0``.
    budget_profile : multipliers of ``budget`` by period, repeating (period ``t`` of the
        world's clock, warm-up included, takes ``budget_profile[t % len]``); their mean must
        be 1, so ``budget`` stays the mean capacity. Empty: ``budget`` every period.
    """

    periods: int
    budget: int
    warmup: int = 0
    warm_start: bool = True
    oracle: bool = False
    seed: int = 0
    importance: str = "true"
    budget_profile: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.importance not in ("true", "opic"):
            raise SimulationError("importance: use 'true' or 'opic'")
        if self.periods < 1:
            raise SimulationError("periods: give at least 1 period")
        if self.budget < 1:
            raise SimulationError("budget: give at least 1 crawl per period")
        if self.warmup < 0:
            raise SimulationError("warmup: give 0 or more periods")
        problem = budget_profile_problem(self.budget_profile)
        if problem:
            raise SimulationError(f"budget_profile: {problem}")

    def budgets(self) -> IntArray:
        """Crawls allowed in every period of the run (warm-up first), shape (warmup + periods,)."""
        t = np.arange(self.warmup + self.periods)
        if not self.budget_profile:
            return np.full(t.size, self.budget, dtype=np.int64)
        m = np.asarray(self.budget_profile, dtype=float)[t % len(self.budget_profile)]
        return np.asarray(np.rint(self.budget * m), dtype=np.int64)


def budget_profile_problem(profile: tuple[float, ...] | list[float]) -> str:
    """What is wrong with a budget profile and how to fix it ("" when it is fine)."""
    if not profile:
        return ""
    values = np.asarray(profile, dtype=float)
    if not np.isfinite(values).all() or (values < 0).any():
        return "give multipliers >= 0"
    if abs(float(values.mean()) - 1.0) > 1e-3:
        return (
            f"the multipliers' mean is {values.mean():.4g}: make it 1 (budget is the mean "
            "capacity per period)"
        )
    return ""


@dataclass(frozen=True)
class Observations:
    """What one period's crawls observed, one entry per crawled page, shape (m,).

    ``changed`` is whether the content changed since the page's previous fetch (False on a
    first fetch, see ``first``); ``last_modified`` the date the server sent (NaN: none);
    ``gone`` the page no longer exists (the fetch was wasted).
    """

    page: IntArray
    fetched_at: FloatArray
    changed: BoolArray
    first: BoolArray
    gone: BoolArray
    last_modified: FloatArray


class CrawlLog:
    """The crawler's own knowledge, kept by the simulator and read by policies.

    Attributes (shape (n,) over every page of the run; only ``known`` pages are visible)
    ----------
    known : the crawler knows the URL; gone : a fetch found it gone.
    last_fetch : time of the last fetch (NaN never); fetches : fetches so far.
    host, section, slot, importance : from the URL, the crawl order, and importance (the
        world's, or the OPIC estimate so far, mean 1; see ``SimulationSettings.importance``).
    true_rate : the true mean rates (oracle runs only), else None.
    period, budget : the current period and its budget.
    mean_budget : the mean budget per period (``SimulationSettings.budget``).
    budgets : the budget of every period of the run (world clock, warm-up first), shape
        (warmup + periods,): the capacity plan a crawler knows ahead.
    host_cap : crawls per period each host accepts (inf: no politeness bound), shape (hosts,);
        a policy that respects it spends its whole budget (a politeness delay of
        ``1 / host_cap`` periods).
    """

    def __init__(self, world: World, settings: SimulationSettings) -> None:
        n = world.n_pages
        self.n_pages = n
        self.known = np.zeros(n, dtype=np.bool_)
        self._links = world.links
        self.gone = np.zeros(n, dtype=np.bool_)
        self.last_fetch = np.full(n, np.nan)
        self.fetches = np.zeros(n, dtype=np.int64)
        self.host = world.host
        self.section = world.section
        self.n_hosts = world.spec.hosts
        self.n_sections = world.n_sections
        self.slot = world.slot
        self.importance = world.importance
        self.opic: OPIC | None = None
        if settings.importance == "opic" and not settings.oracle:
            if world.links is None:
                raise SimulationError(
                    "importance: 'opic' needs a link graph: set world.links_per_page > 0"
                )
            self.opic = OPIC().start(n)
            self.importance = np.ones(n)
        self.born = world.born
        self.true_rate: FloatArray | None = world.rate if settings.oracle else None
        self.period = 0
        self.mean_budget = settings.budget
        self.budgets = settings.budgets()
        self.budget = int(self.budgets[0])
        self.host_cap = world.host_cap
        self._chunks: list[tuple[IntArray, FloatArray, BoolArray]] = []
        self._fetch_chunks: list[tuple[IntArray, FloatArray, FloatArray, FloatArray]] = []
        self._intervals: ChangeIntervals | None = None

    @property
    def eligible(self) -> BoolArray:
        """Pages the crawler may fetch: known and not found gone, shape (n,)."""
        return self.known & ~self.gone

    def elapsed(self, now: float) -> FloatArray:
        """Periods since the last fetch (inf: never fetched), shape (n,)."""
        return np.where(np.isnan(self.last_fetch), np.inf, now - self.last_fetch)

    def record(self, obs: Observations) -> None:
        """Add a period's observations (called by the simulator)."""
        ok = ~obs.gone
        again = ok & ~obs.first
        page = obs.page[again]
        self._chunks.append(
            (page, obs.fetched_at[again] - self.last_fetch[page], obs.changed[again])
        )
        changed = np.where(obs.first, np.nan, obs.changed.astype(float))
        self._fetch_chunks.append(
            (obs.page[ok], obs.fetched_at[ok], changed[ok], obs.last_modified[ok])
        )
        self._intervals = None
        self.gone[obs.page[obs.gone]] = True
        if self.opic is not None and self._links is not None and ok.any():
            self.opic.crawl(self._links, obs.page[ok])
            self.importance = self.opic.importance() * self.n_pages  # mean 1
        self.last_fetch[obs.page[ok]] = obs.fetched_at[ok]
        self.fetches[obs.page[ok]] += 1

    def created_between(self) -> tuple[FloatArray, FloatArray]:
        """Per page, the window in which it was created if it is new, shape (n,) each (NaN:
        an initial page, not known to be new). A page born in the run was linked, and so
        known, from its birth: its window is that instant (the store's runs from the previous
        fetches of the pages whose re-crawl found it to its discovery: ``pages.new_after``)."""
        born = np.where(self.born > 0, self.born.astype(float), np.nan)
        return born, born

    def record_first_fetches(
        self, page: IntArray, fetched_at: FloatArray, last_modified: FloatArray
    ) -> None:
        """Add the warm start's fetches (before the run) to the fetch log, shape (m,) each:
        a first fetch, so no change/no-change interval, but its Last-Modified."""
        self._fetch_chunks.append(
            (page, np.asarray(fetched_at, float), np.full(page.size, np.nan), last_modified)
        )

    def change_intervals(self) -> ChangeIntervals:
        """Every change/no-change interval observed so far (lengths in periods)."""
        if self._intervals is None:
            if self._chunks:
                page = np.concatenate([c[0] for c in self._chunks])
                length = np.concatenate([c[1] for c in self._chunks])
                changed = np.concatenate([c[2] for c in self._chunks])
            else:
                page, length, changed = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool)
            self._intervals = ChangeIntervals(page, length, changed, self.n_pages)
        return self._intervals

    def fetch_log(self) -> tuple[IntArray, FloatArray, FloatArray, FloatArray]:
        """Every fetch (page, time, changed 1/0/NaN on a first fetch, Last-Modified), sorted by
        page then time (the layout :mod:`estimators.reliability` reads)."""
        if not self._fetch_chunks:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0), np.zeros(0)
        page = np.concatenate([c[0] for c in self._fetch_chunks])
        at = np.concatenate([c[1] for c in self._fetch_chunks])
        changed = np.concatenate([c[2] for c in self._fetch_chunks])
        lm = np.concatenate([c[3] for c in self._fetch_chunks])
        order = np.lexsort((at, page))
        return page[order], at[order], changed[order], lm[order]


@dataclass(frozen=True)
class SimulationResult:
    """One run of one policy.

    Attributes
    ----------
    policy : the policy's name.
    metrics : DataFrame, one row per period (warm-up included), columns ``period``,
        ``warmup`` and :data:`METRICS`.
    crawls : ndarray (n,), crawls of each page in the measured periods.
    rate : ndarray (n,), true mean change rates [changes/period].
    lifetime : ndarray (n,), measured periods each page was alive.
    seconds : wall time of the run, s.
    log : the crawler's knowledge at the end of the run (what its estimates can use).
    """

    policy: str
    metrics: pd.DataFrame
    crawls: IntArray
    rate: FloatArray
    lifetime: IntArray
    seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    log: CrawlLog | None = field(default=None, repr=False, compare=False)

    def summary(self) -> dict[str, float]:
        """Means of every metric over the measured periods."""
        measured = self.metrics[~self.metrics["warmup"]]
        return {m: float(measured[m].mean()) for m in METRICS}


def _age_integral(s0: float | FloatArray, s1: float | FloatArray, sigma: FloatArray) -> FloatArray:
    """Integral over [s0, s1) of max(0, s - sigma) ds (sigma = inf: fresh throughout)."""
    finite = np.isfinite(sigma)
    sig = np.where(finite, sigma, 0.0)
    start = np.clip(sig, s0, s1)
    value = ((s1 - sig) ** 2 - (start - sig) ** 2) / 2.0
    return np.asarray(np.where(finite & (sig < s1), value, 0.0), dtype=float)


def _fresh_time(s0: float | FloatArray, s1: float | FloatArray, sigma: FloatArray) -> FloatArray:
    """Time in [s0, s1) before ``sigma`` (the first missed change)."""
    return np.asarray(np.clip(sigma, s0, s1) - s0, dtype=float)


def _weighted_mean(values: FloatArray, weights: FloatArray) -> float:
    total = float(weights.sum())
    return float(values @ weights / total) if total > 0 else math.nan


class _Truth:
    """The ground-truth state of every page's stored copy (times on the world's clock)."""

    def __init__(self, world: World, settings: SimulationSettings, log: CrawlLog) -> None:
        n = world.n_pages
        rng = np.random.default_rng([settings.seed, 2])
        born = world.born.astype(float)
        #: first change the stored copy missed (a page never fetched: stale since birth)
        self.sigma = born.copy()
        self.last_crawl = born.copy()
        # the initial web has a past: its last change an Exp(rate) age before the run (the
        # age of a stationary Poisson process); a page born later was written at its birth
        with np.errstate(divide="ignore"):
            scale = np.where(world.rate > 0, 1.0 / np.maximum(world.rate, 1e-300), np.inf)
        age = rng.exponential(1.0, n) * scale
        self.last_change = np.where(world.born == 0, born - np.minimum(age, 1e9), born)
        self.reported = np.full(n, np.nan)  # Last-Modified last reported
        if settings.warm_start:
            initial = np.flatnonzero(world.born == 0)
            lam = world.rate[initial]
            cycle = max(1, math.ceil(initial.size / settings.budget))
            back = rng.integers(1, cycle + 1, initial.size)
            fetched = world.slot[initial] - back
            with np.errstate(divide="ignore"):
                first = fetched + rng.exponential(1.0, initial.size) / lam
                prior = fetched - rng.exponential(1.0, initial.size) / lam
                recent = -rng.exponential(1.0, initial.size) / lam
            self.sigma[initial] = np.where(first < 0, first, np.inf)
            self.last_crawl[initial] = fetched
            self.last_change[initial] = np.where(first < 0, np.maximum(first, recent), prior)
            log.known[initial] = True
            log.last_fetch[initial] = fetched
            log.fetches[initial] = 1
            # that fetch read a Last-Modified too (the crawler has it, as a real one would)
            mode = world.last_modified_mode()[initial]
            lm = _last_modified(mode, fetched, prior, np.full(initial.size, np.nan), rng)
            self.reported[initial] = lm
            log.record_first_fetches(initial, fetched, lm)


def _last_modified(
    mode: IntArray,
    fetched_at: FloatArray,
    last_change: FloatArray,
    previous: FloatArray,
    rng: np.random.Generator,
) -> FloatArray:
    """What each page's server sends as Last-Modified (modes of :mod:`scenarios.world`):
    honest, missing, the fetch time, a date that moves at random half of the time, or one
    fixed template date."""
    moved = rng.random(mode.shape[0]) < 0.5
    random = np.where(moved | np.isnan(previous), fetched_at - rng.random(mode.shape[0]), previous)
    static = np.full_like(fetched_at, -STATIC_DATE_AGE)
    choices = [last_change, np.full_like(fetched_at, np.nan), fetched_at, random]
    conditions = [mode == 0, mode == 1, mode == 2, mode == 3]
    return np.asarray(np.select(conditions, choices, static), dtype=float)


def simulate(world: World, policy: RefreshPolicy, settings: SimulationSettings) -> SimulationResult:
    """Run ``policy`` on ``world``; see the module docstring.

    The world's clock starts with the warm-up: period ``t`` of the world is reported as
    ``t - warmup`` (negative during the warm-up).

    Raises
    ------
    SimulationError
        If the policy selects more pages than the budget, a page twice, or an unknown page.
    """
    t_start = time.perf_counter()
    log = CrawlLog(world, settings)
    truth = _Truth(world, settings, log)
    lm_mode = world.last_modified_mode()
    rng = np.random.default_rng([settings.seed, 3])
    w = world.importance
    lam = world.rate
    c = world.slot
    n = world.n_pages
    crawls = np.zeros(n, dtype=np.int64)
    lifetime = np.zeros(n, dtype=np.int64)
    rows: list[dict[str, float]] = []
    policy.start(log)
    budgets = settings.budgets()
    host_cap = world.host_cap
    polite = bool(np.isfinite(host_cap).any())
    for t in range(settings.warmup + settings.periods):
        log.period = t
        log.budget = budget = int(budgets[t])
        alive = world.alive(t)
        log.known |= world.born == t
        chosen = np.asarray(policy.select(t, budget, log), dtype=np.int64)
        _check_selection(policy.name, chosen, budget, log, t)
        crawled = np.zeros(n, dtype=np.bool_)
        crawled[chosen] = True
        if np.count_nonzero(crawled) != chosen.size:
            raise SimulationError(f"policy {policy.name!r} chose a page twice in period {t}")
        deferred = 0
        if polite:
            kept = within_host_cap(chosen, world.host, host_cap)
            deferred = chosen.size - int(kept.sum())
            crawled[chosen[~kept]] = False
            chosen = chosen[kept]
        ch = world.period_changes(t, settings.seed)
        tc = t + c
        # segment A [t, t + c): the copy goes stale at its first missed change
        s = truth.sigma
        sig_a = np.where(np.isfinite(s), s, np.where(ch.count_a > 0, ch.first_a, np.inf))
        fresh = _fresh_time(t, tc, sig_a)
        age = _age_integral(t, tc, sig_a)
        # segment B [t + c, t + 1): a crawl at t + c refreshes the copy
        first_b = np.where(ch.count_b > 0, ch.first_b, np.inf)
        sig_b = np.where(crawled, first_b, np.where(np.isfinite(sig_a), sig_a, first_b))
        fresh = fresh + _fresh_time(tc, t + 1.0, sig_b)
        age = age + _age_integral(tc, t + 1.0, sig_b)
        t0 = truth.last_crawl
        obs_a = lam * ((tc - t0) ** 2 - (t - t0) ** 2) / 2.0
        after = np.where(crawled, tc, t0)
        obsolescence = obs_a + lam * ((t + 1.0 - after) ** 2 - (tc - after) ** 2) / 2.0
        # what the crawls observe
        last_change = np.where(ch.count_a > 0, ch.last_a, truth.last_change)
        gone = ~alive[chosen]
        first = log.fetches[chosen] == 0
        changed = np.isfinite(sig_a[chosen]) & ~first & ~gone
        lm = _last_modified(
            lm_mode[chosen], tc[chosen], last_change[chosen], truth.reported[chosen], rng
        )
        lm = np.where(gone, np.nan, lm)
        truth.reported[chosen] = lm
        obs = Observations(chosen, tc[chosen], changed, first, gone, lm)
        truth.sigma = sig_b
        truth.last_crawl = np.where(crawled, tc, t0)
        truth.last_change = np.where(ch.count_b > 0, ch.last_b, last_change)
        log.record(obs)
        policy.observe(obs, log)
        measured = t >= settings.warmup
        if measured:
            crawls += crawled & alive
            lifetime += alive
        rows.append(
            _period_row(
                t - settings.warmup,
                alive,
                fresh,
                age,
                obsolescence,
                w,
                sig_b,
                log,
                changed[~first & ~gone],
                chosen.size,
                int(gone.sum()),
                deferred,
            )
        )
    metrics = pd.DataFrame(rows)
    metrics.insert(1, "warmup", metrics["period"] < 0)
    return SimulationResult(
        policy=policy.name,
        metrics=metrics,
        crawls=crawls,
        rate=world.rate,
        lifetime=lifetime,
        seconds=time.perf_counter() - t_start,
        log=log,
    )


def within_host_cap(chosen: IntArray, host: IntArray, host_cap: FloatArray) -> BoolArray:
    """Which of ``chosen`` (page ids, in the policy's order) fit their host's cap: the first
    ``host_cap[h]`` pages of each host ``h`` in that order, shape (len(chosen),)."""
    h = host[chosen]
    order = np.argsort(h, kind="stable")
    sorted_h = h[order]
    starts = np.flatnonzero(np.r_[True, sorted_h[1:] != sorted_h[:-1]]) if h.size else h
    first = np.repeat(starts, np.diff(np.r_[starts, h.size]))
    rank = np.empty(h.size, dtype=np.int64)
    rank[order] = np.arange(h.size) - first
    return np.asarray(rank < host_cap[h], dtype=np.bool_)


def _check_selection(name: str, chosen: IntArray, budget: int, log: CrawlLog, t: int) -> None:
    if chosen.ndim != 1:
        raise SimulationError(f"policy {name!r} must return a 1-d array of page ids")
    if chosen.size > budget:
        raise SimulationError(
            f"policy {name!r} chose {chosen.size} pages in period {t}, over the budget of {budget}"
        )
    if chosen.size and (chosen.min() < 0 or chosen.max() >= log.n_pages):
        raise SimulationError(f"policy {name!r} chose a page id out of range in period {t}")
    if not log.known[chosen].all():
        raise SimulationError(f"policy {name!r} chose a page it does not know in period {t}")


def _period_row(
    period: int,
    alive: BoolArray,
    fresh: FloatArray,
    age: FloatArray,
    obsolescence: FloatArray,
    importance: FloatArray,
    stale_since: FloatArray,
    log: CrawlLog,
    recrawl_changed: BoolArray,
    crawls: int,
    wasted: int,
    deferred: int = 0,
) -> dict[str, float]:
    a = alive
    wa = importance * a
    any_alive = bool(a.any())
    fetched = log.fetches > 0
    return {
        "period": float(period),
        "freshness": float(fresh[a].mean()) if any_alive else math.nan,
        "age": float(age[a].mean()) if any_alive else math.nan,
        "obsolescence": float(obsolescence[a].mean()) if any_alive else math.nan,
        "freshness_w": _weighted_mean(fresh, wa),
        "age_w": _weighted_mean(age, wa),
        "obsolescence_w": _weighted_mean(obsolescence, wa),
        "obsolete_pages": float(np.count_nonzero(a & fetched & np.isfinite(stale_since))),
        "uncrawled_pages": float(np.count_nonzero(a & ~fetched)),
        "change_ratio": float(recrawl_changed.mean()) if recrawl_changed.size else math.nan,
        "crawls": float(crawls),
        "wasted": float(wasted),
        "alive": float(np.count_nonzero(a)),
        "deferred": float(deferred),
    }
