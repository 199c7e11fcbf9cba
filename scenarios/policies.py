"""Refresh policies behind one interface, and what they share: rate knowledge, due order.

A :class:`Policy` is asked each period for the pages to crawl (:meth:`Policy.select`, at most
``budget`` distinct known pages) and is told what they showed (:meth:`Policy.observe`). Every
policy here spends its whole budget whenever it knows enough pages: a rule that would leave
crawls unused (a Nutch page not due yet) takes the most overdue pages instead, as a crawler
with a fixed fetch list size does; that makes policies comparable at equal budget.

The policies (``kind`` in a scenario file; see :func:`make_policy`):

* ``uniform``: round robin, the page fetched longest ago first.
* ``random``: ``budget`` pages drawn at random each period (Poisson-like refresh: the same
  bandwidth as uniform in the worst execution order, REFERENCE.md sec. 3).
* ``proportional``: refresh rate proportional to the change rate.
* ``nutch``: Apache Nutch AdaptiveFetchSchedule with its defaults (interval x 0.8 after a
  change, x 1.4 after none, within [60 s, 365 days], initial 30 days, SYNC_DELTA at rate 0.3
  from the Last-Modified date the server sends).
* ``stormcrawler``: StormCrawler AdaptiveScheduler with its defaults (after a change the
  interval moves half way to the minimum, after none x 1.5, within [1 h, 14 days], initial
  1 day).
* ``xyleme``, ``freshness``, ``harmonic``: the page-level optimal refresh schedules of
  :func:`planner.schedules.optimal.refresh_schedule` (objectives obsolescence, freshness, harmonic).
* ``webfountain`` (:mod:`scenarios.planner_policy`): the planner as deployed.
* ``sampling`` (:mod:`scenarios.sampling_policy`): Cho & Ntoulas sampling per host or section.

Rates come from :class:`RateKnowledge`: the true rates (``rates = "true"``, the oracle) or the
project's estimators on the policy's own observations (``"estimated"``), refitted every
``refit_every`` periods. Times are periods, rates changes per period.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from estimators.estimator_choice import ChangeRateEstimator
from estimators.evidence import last_modified_evidence_from_fetches
from estimators.prior import LogNormalRatePrior
from estimators.reliability import assess_last_modified
from planner.schedules.optimal import refresh_schedule
from scenarios.simulator import CrawlLog, Observations

__all__ = [
    "POLICY_KINDS",
    "AdaptiveIntervalPolicy",
    "Policy",
    "PolicyError",
    "RandomPolicy",
    "RateKnowledge",
    "RatePolicy",
    "UniformPolicy",
    "make_policy",
    "nutch_policy",
    "stormcrawler_policy",
    "top_pages",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Pages sampled to fit the population prior of change rates at each refit.
PRIOR_PAGES = 3000
#: Rate refits between two fits of the population prior.
PRIOR_REFITS = 4
#: Minutes and days in periods are converted with the world's ``period_days``.
MINUTES_PER_DAY = 1440.0


class PolicyError(ValueError):
    """A policy setting that cannot work; ``str(err)`` names it and the fix."""


class Policy:
    """One refresh policy. Subclasses override :meth:`select` and, if they learn, the others."""

    name: str = "policy"

    def start(self, log: CrawlLog) -> None:
        """Called once before the first period with the crawler's initial knowledge."""

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        """At most ``budget`` distinct known page ids to crawl in ``period``."""
        raise NotImplementedError

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        """What this period's crawls observed (``log`` is already updated)."""


def top_pages(priority: FloatArray, count: int) -> IntArray:
    """The ``count`` pages of highest priority (NaN or -inf: not eligible), highest first.

    Ties go to the lower page id, so selections are deterministic.
    """
    ok = np.flatnonzero(~np.isnan(priority) & (priority > -np.inf))
    if ok.size <= count:
        chosen = ok
    else:
        part = np.argpartition(-priority[ok], count - 1)[:count]
        chosen = ok[part]
    order = np.lexsort((chosen, -priority[chosen]))
    return np.asarray(chosen[order], dtype=np.int64)


def overdue_priority(log: CrawlLog, now: float, refresh_rate: FloatArray) -> FloatArray:
    """Due order for target refresh rates (crawls per period): periods since the last fetch
    times the rate (1 = exactly due), never-fetched pages first; a page with rate 0 comes
    after every page with a rate, oldest first, so the budget is always spent."""
    elapsed = log.elapsed(now)
    finite = np.isfinite(elapsed)
    spread = np.where(finite, elapsed, 0.0)
    tie = spread / (1.0 + float(spread.max(initial=0.0)))  # in [0, 1): oldest first
    ratio = np.where(refresh_rate > 0, spread * refresh_rate, 0.0)
    base = np.where(refresh_rate > 0, 1.0 + ratio, tie)
    priority = np.where(finite, base, np.inf)
    return np.where(log.eligible, priority, -np.inf)


class RateKnowledge:
    """Change rates per page as the policy knows them.

    Parameters
    ----------
    rates : ``"true"`` (needs an oracle run) or ``"estimated"``.
    refit_every : periods between two estimations.
    last_modified : ``"ignore"``, ``"checked"`` (use dates that pass
        :func:`estimators.reliability.assess_last_modified`) or ``"trusted"`` (use them all).
    """

    def __init__(
        self, rates: str = "estimated", refit_every: int = 7, last_modified: str = "ignore"
    ) -> None:
        if rates not in ("true", "estimated"):
            raise PolicyError(f"rates: use 'true' or 'estimated', got {rates!r}")
        if last_modified not in ("ignore", "checked", "trusted"):
            raise PolicyError(
                f"last_modified: use 'ignore', 'checked' or 'trusted', got {last_modified!r}"
            )
        if refit_every < 1:
            raise PolicyError("refit_every: give at least 1 period")
        self.rates = rates
        self.refit_every = refit_every
        self.last_modified = last_modified
        self._rate: FloatArray | None = None
        self._fitted_at = -(10**9)
        self._prior: LogNormalRatePrior | None = None
        self._fits = 0

    def due(self, period: int) -> bool:
        """Whether the rates are refitted in ``period``."""
        return period - self._fitted_at >= self.refit_every or self._rate is None

    def rate(self, log: CrawlLog, period: int) -> FloatArray:
        """Rates of every page (NaN where nothing is known), refitted when due, shape (n,)."""
        if self.rates == "true":
            if log.true_rate is None:
                raise PolicyError("rates = 'true' needs an oracle run (the simulator's oracle)")
            return log.true_rate
        if self.due(period) or self._rate is None:
            self._rate = self._estimate(log)
            self._fitted_at = period
        return self._rate

    def _estimate(self, log: CrawlLog) -> FloatArray:
        intervals = log.change_intervals()
        if intervals.page.size == 0:
            return np.full(log.n_pages, np.nan)
        # The population prior moves slowly: it is refitted every PRIOR_REFITS refits only,
        # on a sample of pages and a coarser grid than production's defaults (each fit costs
        # about half a second).
        if self._prior is None or self._fits % PRIOR_REFITS == 0:
            self._prior = LogNormalRatePrior(max_pages=PRIOR_PAGES, grid_step=0.1)
        self._fits += 1
        estimator = ChangeRateEstimator(prior=self._prior)
        if self.last_modified == "ignore":
            return np.asarray(estimator.fit(intervals).rate_, dtype=float)
        page, at, changed, lm = log.fetch_log()
        evidence = last_modified_evidence_from_fetches(page, at, lm, n_pages=log.n_pages)
        if self.last_modified == "trusted":
            reliable = evidence.intervals > 0
        else:
            reliable = assess_last_modified(
                page, at, changed, lm, n_pages=log.n_pages, host=log.host
            ).reliable
        return np.asarray(estimator.fit(intervals, evidence, reliable).rate_, dtype=float)


def filled_rates(rate: FloatArray, log: CrawlLog) -> FloatArray:
    """Rates with the unknown ones (NaN) replaced by the median known rate, or by the
    uniform guess budget / known pages when nothing is known yet."""
    known = rate[np.isfinite(rate) & log.eligible]
    fill = float(np.median(known)) if known.size else log.budget / max(1, int(log.eligible.sum()))
    return np.where(np.isfinite(rate), rate, fill)


class UniformPolicy(Policy):
    """Round robin: the page fetched longest ago first (never-fetched pages before all)."""

    def __init__(self, name: str = "uniform") -> None:
        self.name = name

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        rate = np.ones(log.n_pages)
        return top_pages(overdue_priority(log, float(period), rate), budget)


class RandomPolicy(Policy):
    """``budget`` known pages drawn uniformly at random every period (seeded)."""

    def __init__(self, name: str = "random", seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        pages = np.flatnonzero(log.eligible)
        if pages.size <= budget:
            return pages.astype(np.int64)
        return np.sort(self.rng.choice(pages, budget, replace=False)).astype(np.int64)


class RatePolicy(Policy):
    """Crawl in due order for target refresh rates computed from the known change rates.

    Parameters
    ----------
    name : label.
    objective : ``"proportional"`` or an objective of
        :func:`planner.schedules.optimal.refresh_schedule`
        (``"obsolescence"`` is Xyleme's sqrt schedule, ``"freshness"``, ``"harmonic"``,
        ``"binary"``).
    knowledge : RateKnowledge.
    max_interval : periods; a floor on every page's refresh rate (None: no floor).
    use_importance : weight pages by importance.
    """

    def __init__(
        self,
        name: str,
        objective: str,
        knowledge: RateKnowledge,
        *,
        max_interval: float | None = None,
        use_importance: bool = False,
    ) -> None:
        self.name = name
        self.objective = objective
        self.knowledge = knowledge
        self.max_interval = max_interval
        self.use_importance = use_importance
        self._target: FloatArray | None = None

    def targets(self, log: CrawlLog, period: int, budget: int) -> FloatArray:
        """Target crawls per period of every page (0 where not eligible), shape (n,)."""
        rate = filled_rates(self.knowledge.rate(log, period), log)
        pages = np.flatnonzero(log.eligible)
        target = np.zeros(log.n_pages)
        if pages.size == 0:
            return target
        lam = np.maximum(rate[pages], 1e-9)
        if self.objective == "proportional":
            f = lam * budget / lam.sum()
        else:
            w = log.importance[pages] if self.use_importance else None
            bound = self.max_interval
            if bound is not None and pages.size / bound > budget:
                bound = None  # the floor alone would need more than the budget
            schedule = refresh_schedule(
                lam, float(budget), objective=self.objective, importance=w, max_interval=bound
            )
            f = schedule.refresh_rate
        target[pages] = f
        return target

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        refit = self.knowledge.rates == "true" and self._target is None
        if refit or self.knowledge.due(period) or log.known.sum() != getattr(self, "_known", -1):
            self._target = self.targets(log, period, budget)
            self._known = int(log.known.sum())
        assert self._target is not None
        return top_pages(overdue_priority(log, float(period), self._target), budget)


@dataclass(frozen=True)
class AdaptiveRule:
    """An adaptive revisit rule in periods: bounds, initial interval and its two updates."""

    initial: float
    minimum: float
    maximum: float
    changed_factor: float  # Nutch: x (1 - dec); StormCrawler: toward the minimum by this share
    unchanged_factor: float
    toward_minimum: bool
    sync_delta: float | None  # Nutch SYNC_DELTA rate, None: off


class AdaptiveIntervalPolicy(Policy):
    """Per-page intervals adapted to what each fetch saw (the peers' rules), made to spend the
    budget: the pages most due (periods since the reference time over the interval) first."""

    def __init__(self, name: str, rule: AdaptiveRule) -> None:
        self.name = name
        self.rule = rule
        self.interval = np.zeros(0)
        self.reference = np.zeros(0)

    def start(self, log: CrawlLog) -> None:
        self.interval = np.full(log.n_pages, self.rule.initial)
        self.reference = np.where(np.isnan(log.last_fetch), -np.inf, log.last_fetch)

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        due = (period - self.reference) / self.interval
        priority = np.where(log.eligible, np.where(np.isfinite(due), due, np.inf), -np.inf)
        return top_pages(priority, budget)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        ok = ~obs.gone
        page = obs.page[ok]
        changed = obs.changed[ok]
        again = ~obs.first[ok]
        rule = self.rule
        interval = self.interval[page]
        if rule.toward_minimum:
            shrunk = interval - (interval - rule.minimum) * rule.changed_factor
        else:
            shrunk = interval * rule.changed_factor
        new = np.where(changed, shrunk, interval * rule.unchanged_factor)
        new = np.where(again, new, interval)
        reference = obs.fetched_at[ok]
        if rule.sync_delta is not None:
            # Nutch SYNC_DELTA: the page changed delta ago (Last-Modified, else the fetch
            # time); an interval shorter than delta is raised to it, and the next fetch is
            # counted from sync_delta * delta before this one.
            modified = np.where(np.isnan(obs.last_modified[ok]), reference, obs.last_modified[ok])
            delta = np.where(changed, np.maximum(reference - modified, 0.0), 0.0)
            new = np.where(changed & (delta > new), delta, new)
            reference = reference - np.round(delta * rule.sync_delta, 12)
        self.interval[page] = np.clip(new, rule.minimum, rule.maximum)
        self.reference[page] = reference


def nutch_policy(period_days: float, name: str = "nutch") -> AdaptiveIntervalPolicy:
    """Apache Nutch AdaptiveFetchSchedule with its default settings, in periods."""
    day = 1.0 / period_days
    rule = AdaptiveRule(
        initial=30.0 * day,
        minimum=60.0 / 86_400.0 * day,
        maximum=365.0 * day,
        changed_factor=1.0 - 0.2,
        unchanged_factor=1.0 + 0.4,
        toward_minimum=False,
        sync_delta=0.3,
    )
    return AdaptiveIntervalPolicy(name, rule)


def stormcrawler_policy(period_days: float, name: str = "stormcrawler") -> AdaptiveIntervalPolicy:
    """StormCrawler AdaptiveScheduler with its default settings, in periods."""
    day = 1.0 / period_days
    rule = AdaptiveRule(
        initial=1.0 * day,
        minimum=60.0 / MINUTES_PER_DAY * day,
        maximum=14.0 * day,
        changed_factor=0.5,
        unchanged_factor=1.5,
        toward_minimum=True,
        sync_delta=None,
    )
    return AdaptiveIntervalPolicy(name, rule)


#: Policy kinds and the settings each accepts besides ``name`` and ``kind``.
POLICY_KINDS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "random": (),
    "proportional": ("rates", "refit_every", "last_modified"),
    "nutch": (),
    "stormcrawler": (),
    "xyleme": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "freshness": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "harmonic": ("rates", "refit_every", "last_modified", "max_interval", "importance"),
    "webfountain": (
        "rates",
        "last_modified",
        "strategy",
        "buckets",
        "cycle",
        "cold_start",
        "within_bucket",
        "horizon",
        "terminal_value",
        "explore",
    ),
    "sampling": ("group", "cycle", "sample_share"),
}

_OBJECTIVE = {"xyleme": "obsolescence", "freshness": "freshness", "harmonic": "harmonic"}


def make_policy(spec: Mapping[str, Any], *, period_days: float = 1.0) -> Policy:
    """Build a policy from a scenario file's ``[[policies]]`` entry.

    ``spec`` holds ``kind`` (a key of :data:`POLICY_KINDS`), optional ``name`` and the kind's
    settings. Raises :class:`PolicyError` naming a bad setting.
    """
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise PolicyError(f"kind: use one of {', '.join(POLICY_KINDS)}, got {kind!r}")
    name = str(spec.get("name", kind))
    extra = sorted(set(spec) - {"kind", "name", *POLICY_KINDS[kind]})
    if extra:
        allowed = ", ".join(POLICY_KINDS[kind]) or "none"
        raise PolicyError(f"{extra[0]}: not a setting of kind {kind!r} (settings: {allowed})")
    knowledge_args = {k: spec[k] for k in ("rates", "refit_every", "last_modified") if k in spec}
    if kind == "uniform":
        return UniformPolicy(name)
    if kind == "random":
        return RandomPolicy(name)
    if kind == "nutch":
        return nutch_policy(period_days, name)
    if kind == "stormcrawler":
        return stormcrawler_policy(period_days, name)
    if kind == "proportional":
        return RatePolicy(name, "proportional", RateKnowledge(**knowledge_args))
    if kind in _OBJECTIVE:
        max_interval = spec.get("max_interval")
        if max_interval is not None and not (
            isinstance(max_interval, int | float) and math.isfinite(max_interval)
        ):
            raise PolicyError("max_interval: give a number of periods")
        if max_interval is not None and max_interval <= 0:
            raise PolicyError("max_interval: give a number of periods > 0")
        return RatePolicy(
            name,
            _OBJECTIVE[kind],
            RateKnowledge(**knowledge_args),
            max_interval=None if max_interval is None else float(max_interval),
            use_importance=bool(spec.get("importance", False)),
        )
    if kind == "webfountain":
        from scenarios.planner_policy import WebFountainPolicy

        return WebFountainPolicy.from_spec(name, spec)
    from scenarios.sampling_policy import SamplingPolicy

    return SamplingPolicy.from_spec(name, spec)
