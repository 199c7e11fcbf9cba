"""The nightly pipeline's stages, wiring the store to the estimators (service edge).

Stage 2, :func:`aggregates_from_store`: the planner's per-bucket inputs (pages b_i, mean
rate, change fraction a_i per period, expected obsolete pages y_i now) and the pool of
never-fetched pages n, summed chunk by chunk; their size is 256 numbers whatever the size of
the store.

Stage 1, :func:`estimate_from_store`: every page's fetch evidence is streamed from the store
in chunks of whole pages, turned into a fetch table, estimated (change rate, interval,
estimator, bucket) and written back. The population prior of the empirical-Bayes estimator
(and the Bayes plan's prior and price) is fitted on a sample spread over the whole store and
reused for every chunk, so every page is shrunk toward the same prior however the pages are
chunked, and that prior is the store's, not its oldest pages'.

Stage 6, :func:`release_period`: the current period of the published plan is released once:
candidates read from the store by index (per bucket longest unvisited first, new pages by
cash), chosen and timed by :func:`planner.cycle.due_urls.select_due_pages`, written back in one
transaction (:func:`store.releases.queue_release`: the chosen pages go to the release queue
that the lease queue takes from; pages of earlier releases not fetched yet stay queued).
Crawls a quota cannot use (too few fetchable pages, hosts full) are spilled, in the same
period, to other buckets and new pages by the plan's marginal values (oldest first without).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from itertools import chain
from queue import Empty, Queue
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from crawler.signature import changes_at_least
from estimators.bayes_action import (
    GROUP_PRIOR_PAGES,
    PROBE_SHARE,
    BayesPlanPrior,
    Probes,
    fit_bayes_plan,
    plan_chunk,
)
from estimators.buckets import BucketAggregates, BucketScale, bucket_aggregates, combine_aggregates
from estimators.estimator_choice import ChangeRateEstimator
from estimators.fetch_table import FetchArrayEstimate, estimate_fetch_arrays
from estimators.notifications import notification_rates
from estimators.prior import LogNormalRatePrior
from estimators.reliability import LastModifiedPolicy
from planner.cycle.bound_hosts import HostPages, host_caps, split_key
from planner.cycle.due_urls import (
    DUE_SHARE,
    HOST_CAPACITY,
    NEW_PAGES,
    RECRAWLS,
    Selection,
    Shortfall,
    host_capacity,
    select_due_pages,
)
from planner.cycle.plan_cycle import HOST_CLASS_STRIDE, class_label
from planner.cycle.quotas import charge_spent
from planner.model.instance import InstanceError
from planner.model.steady_rates import revisit_interval
from store import Database, latest_plan
from store.due_times import NOTIFIED, page_schedule_finished
from store.estimates import (
    CreationWindow,
    FetchChunk,
    host_page_counts,
    iter_fetch_chunks,
    iter_page_states,
    sample_fetch_chunk,
    write_estimates,
)
from store.notifications import notification_times
from store.plans import extend_plan_in_force
from store.probes import ProbeMarks, mark_probes
from store.releases import (
    Candidates,
    PeriodWork,
    QueuedRelease,
    host_candidates,
    host_delays,
    is_released,
    new_page_candidates,
    older_releases_in,
    period_work,
    queue_release,
    refresh_candidates,
)
from store.urgent import urgent_requests_between

__all__ = [
    "EstimateSummary",
    "ReleaseSummary",
    "StoreAggregates",
    "aggregates_from_store",
    "estimate_from_store",
    "politeness_bounds",
    "release_period",
]

_DAY_S = 86_400.0
T = TypeVar("T")


@dataclass(frozen=True)
class EstimateSummary:
    """What :func:`estimate_from_store` did."""

    pages: int
    fetches: int
    by_estimator: dict[str, int]
    problems: int
    #: Changes smaller than ``min_change`` that were counted as no change.
    small_changes: int = 0
    #: Pages chosen for a probe, and those of them marked (:func:`store.probes.mark_probes`:
    #: their last fetch answered 200, and no second crawl of an earlier probe is pending).
    probes: int = 0
    probes_queued: int = 0
    #: Pages chosen for a follow-up, and those of them marked (the same conditions).
    follow_ups: int = 0
    follow_ups_marked: int = 0


@dataclass(frozen=True)
class ProbeSettings:
    """What the estimate stage needs to pick probes (:func:`estimators.bayes_action.
    choose_probes`): the ``horizon_days`` over which what a probe teaches is counted, the
    ``shortest_days`` a probe's two crawls may be apart, the most probes (``limit``), and
    whether pages whose lesson pays for one crawl get a follow-up (``follow_ups``; with a
    limit of 0 and none, the last run's marks are cleared)."""

    horizon_days: float
    shortest_days: float
    limit: int
    follow_ups: bool = False


class _BestProbes:
    """The ``limit`` best probes over the chunks (net value, page id, delay in days), and
    with ``follow_ups`` the ``follow_limit`` best follow-ups (the same): a page whose probe
    is past the limit is followed up instead (what pays for two crawls pays for one)."""

    def __init__(self, limit: int, follow_ups: bool = False, follow_limit: int = 0) -> None:
        self.limit = limit
        self.following = follow_ups
        self.follow_limit = follow_limit
        self.net = np.zeros(0)
        self.page = np.zeros(0, np.int64)
        self.delay = np.zeros(0)
        self.once = np.zeros(0)  # each probe's net value as a follow-up
        self.follow_net = np.zeros(0)
        self.follow = np.zeros(0, np.int64)
        self.follow_delay = np.zeros(0)
        self._chosen: float | None = None

    @property
    def delays(self) -> tuple[float, ...] | None:
        """The delay the first chunk with probes or follow-ups chose, for the next chunks to
        keep (every chunk is planned at one price): a quarter of the work of trying them all."""
        return None if self._chosen is None else (self._chosen,)

    def add(self, found: Probes, page_ids: npt.NDArray[Any]) -> None:
        """Add a chunk's probes and follow-ups, ``found`` (indices into the chunk's pages,
        whose ids are ``page_ids``)."""
        if found.page.size or found.follow.size:
            self._chosen = float(found.delay) if self._chosen is None else self._chosen
        if self.following and found.follow.size:
            self._add_follow_ups(
                found.follow_net,
                page_ids[found.follow],
                np.full(found.follow.size, found.delay),
            )
        if not found.page.size:
            return
        self.net = np.concatenate([self.net, found.net])
        self.page = np.concatenate([self.page, page_ids[found.page].astype(np.int64)])
        self.delay = np.concatenate([self.delay, np.full(found.page.size, found.delay)])
        self.once = np.concatenate([self.once, found.as_follow_up])
        if self.net.size > self.limit:
            order = np.argsort(-self.net, kind="stable")
            keep, out = order[: self.limit], order[self.limit :]
            if self.following:
                out = out[self.once[out] > 0]
                self._add_follow_ups(self.once[out], self.page[out], self.delay[out])
            self.net, self.page, self.delay = self.net[keep], self.page[keep], self.delay[keep]
            self.once = self.once[keep]

    def _add_follow_ups(
        self, net: npt.NDArray[Any], page: npt.NDArray[Any], delay: npt.NDArray[Any]
    ) -> None:
        self.follow_net = np.concatenate([self.follow_net, net])
        self.follow = np.concatenate([self.follow, page.astype(np.int64)])
        self.follow_delay = np.concatenate([self.follow_delay, delay.astype(np.float64)])
        if self.follow.size > self.follow_limit:
            keep = np.argsort(-self.follow_net, kind="stable")[: self.follow_limit]
            self.follow_net = self.follow_net[keep]
            self.follow, self.follow_delay = self.follow[keep], self.follow_delay[keep]

    def follow_ups(self) -> tuple[list[int], list[float]]:
        """The follow-ups' page ids and delays (days), best first."""
        order = np.argsort(-self.follow_net, kind="stable")
        return self.follow[order].tolist(), self.follow_delay[order].tolist()


def _prefetched(chunks: Iterator[T], depth: int = 1) -> Iterator[T]:
    """Iterate ``chunks`` with the next one read by a background thread meanwhile.

    The database driver releases the GIL while it reads, so reading chunk k+1 overlaps
    estimating and writing chunk k. An error in the reader is raised here.
    """
    queue: Queue[tuple[bool, Any]] = Queue(maxsize=depth)
    stop = threading.Event()

    def read() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    return
                queue.put((True, chunk))
            queue.put((False, None))
        except BaseException as error:  # handed to the consumer
            queue.put((False, error))

    reader = threading.Thread(target=read, name="evidence-reader", daemon=True)
    reader.start()
    try:
        while True:
            more, item = queue.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        while reader.is_alive():  # let a reader blocked on a full queue finish
            try:
                queue.get_nowait()
            except Empty:
                reader.join(timeout=0.05)


def _with_notifications(
    result: FetchArrayEstimate,
    notes: npt.NDArray[np.float64],
    page_id: npt.NDArray[np.float64],
    fetched_days: npt.NDArray[np.float64],
    changed: npt.NDArray[np.float64],
    scale: BucketScale,
) -> FetchArrayEstimate:
    """The chunk's estimates, with the rates of pages whose change notifications are
    reliable taken from the notifications (estimator ``notifications``)."""
    if notes.size == 0:
        return result
    lo, hi = (
        np.searchsorted(notes[:, 0], [result.page[0], result.page[-1]], side="left")[0],
        (np.searchsorted(notes[:, 0], result.page[-1], side="right")),
    )
    mine = notes[lo:hi]
    if mine.size == 0:
        return result
    found = notification_rates(
        page_id.astype(np.int64), fetched_days, changed, mine[:, 0], mine[:, 1] / _DAY_S
    )
    if found.page.size == 0:
        return result
    at = np.searchsorted(result.page, found.page)
    rate, low, high = result.rate.copy(), result.rate_low.copy(), result.rate_high.copy()
    names = result.estimator.astype(object)
    rate[at], low[at], high[at], names[at] = found.rate, found.rate_low, found.rate_high, NOTIFIED
    return replace(
        result,
        rate=rate,
        rate_low=low,
        rate_high=high,
        estimator=names.astype(np.str_),
        bucket=scale.assign(rate),
    )


def _creation_windows(
    page_id: npt.NDArray[np.float64], windows: list[CreationWindow]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None:
    """Each fetch's page's creation window, days (NaN: not new), shape (n,) each; None
    when no page of the chunk is new."""
    if not windows:
        return None
    ids, since, until = np.array(windows, dtype=np.float64).T
    at = np.minimum(np.searchsorted(ids, page_id), ids.size - 1)
    new = ids[at] == page_id
    return (
        np.where(new, since[at] / _DAY_S, np.nan),
        np.where(new, until[at] / _DAY_S, np.nan),
    )


def estimate_from_store(
    db: Database,
    *,
    chunk_pages: int = 50_000,
    sample_pages: int = 50_000,
    progress: Callable[[int], None] | None = None,
    scale: BucketScale | None = None,
    policy: LastModifiedPolicy | None = None,
    min_change: float = 0.0,
    plan_budget: float | None = None,
    probes: ProbeSettings | None = None,
    now: datetime | None = None,
) -> EstimateSummary:
    """Re-estimate every fetched page from its observations and store rates and buckets
    (``scale``: the 255 buckets' rate range, changes per day; ``policy``: the Last-Modified
    reliability test's thresholds; the defaults otherwise).

    What is fitted on the population (the estimators' rate prior, and the Bayes plan's
    prior and price below) is fitted on a sample of ``sample_pages`` fetched pages spread over
    the whole store (:func:`store.estimates.sample_fetch_chunk`: every k-th by page id; all
    of them in a smaller store), or on the store itself when it fits in one chunk of
    ``chunk_pages``, and applied to every chunk: the estimates do not depend on how the store
    is cut into chunks, nor on which pages it found first.

    ``plan_budget`` (crawls per day for the fetched pages; the nightly run's capacity) also
    stores each page's Bayes-equivalent rate (``pages.plan_rate``,
    :func:`estimators.bayes_action.plan_rates`) and buckets the page by it: the prior over
    the rate grid and the bandwidth's price are fitted once, given the fitted pages' share of
    the budget, and every chunk is planned at them. A page fetched once with no date
    believed (no estimate) gets the prior's rate and a bucket, where without a plan rate it
    is bucket 0. A page whose rate comes from change notifications keeps its rate. None:
    ``plan_rate`` is cleared, the plan uses the rates.

    ``min_change`` > 0 (``estimate.min_change``, a share of the main text, 0-1) makes
    "changed" mean "changed by at least that much": smaller changes, read from the stored
    signatures (:func:`crawler.signature.changes_at_least`), count as no change, and
    Last-Modified dates are not read, since a date says that a page changed, not by how much.

    ``probes`` (with ``plan_budget``) also picks the pages whose rate is worth learning, the
    best ``probes.limit`` of the store, and marks them for a probe (:mod:`store.probes`),
    replacing the last run's marks (a limit or horizon of 0 only clears them).

    ``now``: the time the estimates are for (default: the clock); fetches recorded after it
    are left out, so that a store is estimated as its fetches stood then
    (``tests/benchmarks/probe_value.py``).
    """
    pages = fetches = small_changes = 0
    by_estimator: dict[str, int] = {}
    now_days = (now or datetime.now(UTC)).timestamp() / _DAY_S
    notes = np.array(notification_times(db), dtype=np.float64).reshape(-1, 2)
    sized = min_change > 0
    fetched_pages = sum(host_page_counts(db).fetched) if plan_budget else 0
    estimate_chunk = partial(
        _chunk_estimate, now_days=now_days, scale=scale, policy=policy, min_change=min_change
    )
    # The population's fits (the estimators' prior, the Bayes plan's prior and price) from
    # a sample of the whole store; else, as when the store is one chunk, from the first
    # chunk that gives them.
    prior, bayes = _sample_fits(
        db, estimate_chunk, sample_pages, chunk_pages, sized, plan_budget, fetched_pages
    )
    probing = (
        probes
        if probes is not None
        and (probes.limit > 0 or probes.follow_ups)
        and probes.horizon_days > 0
        else None
    )
    # follow-ups: at most a share of the fetched pages marked at once (PROBE_SHARE)
    best = _BestProbes(
        probing.limit if probing else 0,
        bool(probing and probing.follow_ups),
        int(PROBE_SHARE * fetched_pages),
    )
    for chunk in _prefetched(iter_fetch_chunks(db, chunk_pages=chunk_pages, signatures=sized)):
        estimator = ChangeRateEstimator(prior=prior) if prior is not None else None
        result, page_id, fetched_s, changed, demoted = estimate_chunk(chunk, estimator)
        groups = answer_groups(result.page, chunk.answers)
        small_changes += demoted
        if prior is None or (plan_budget and bayes is None):
            chunk_prior, chunk_bayes = _population_fits(result, plan_budget, fetched_pages, groups)
            prior = prior if prior is not None else chunk_prior
            bayes = bayes if bayes is not None else chunk_bayes
        chosen = _with_notifications(
            result, notes, page_id, fetched_s / _DAY_S, changed, scale or BucketScale()
        )
        bucket, plan = chosen.bucket, np.full(chosen.page.size, np.nan)
        if bayes is not None:
            evidence = result.evidence
            plan, probed = plan_chunk(
                bayes,
                evidence.intervals,
                evidence.last_modified,
                evidence.reliable,
                groups,
                horizon=probing.horizon_days if probing else None,
                shortest=probing.shortest_days if probing else 0.0,
                probe_limit=probing.limit if probing else None,
                probe_delays=best.delays,
                follow_ups=bool(probing and probing.follow_ups),
            )
            notified = chosen.estimator == NOTIFIED
            plan[notified] = np.nan
            if probing:
                # a page known from notifications needs no probe; never-fetched pages are
                # not in a chunk
                on, follow = ~notified[probed.page], ~notified[probed.follow]
                best.add(
                    replace(
                        probed,
                        page=probed.page[on],
                        net=probed.net[on],
                        follow=probed.follow[follow],
                        follow_net=probed.follow_net[follow],
                        as_follow_up=probed.as_follow_up[on],
                    ),
                    result.page,
                )
            bucket = (scale or BucketScale()).assign(np.where(np.isfinite(plan), plan, chosen.rate))
        rate, low, high, planned = (
            [None if math.isnan(v) else v for v in column.tolist()]
            for column in (chosen.rate, chosen.rate_low, chosen.rate_high, plan)
        )
        write_estimates(
            db,
            chosen.page.tolist(),
            rate,
            low,
            high,
            chosen.estimator.tolist(),
            bucket.tolist(),
            plan_rates=planned,
        )
        names, counts = np.unique(chosen.estimator, return_counts=True)
        for name, count in zip(names.tolist(), counts.tolist(), strict=True):
            by_estimator[name] = by_estimator.get(name, 0) + count
        pages += int(result.page.size)
        fetches += int(result.fetches.sum())
        if progress is not None:
            progress(pages)
    marks = ProbeMarks(0, 0)
    follow, follow_delays = best.follow_ups()
    if probes is not None:
        marks = mark_probes(
            db,
            best.page.tolist(),
            best.delay.tolist(),
            follow_ups=follow,
            follow_delays=follow_delays,
        )
    return EstimateSummary(
        pages,
        fetches,
        by_estimator,
        0,
        small_changes,
        int(best.page.size),
        marks.probes,
        len(follow),
        marks.follow_ups,
    )


def _chunk_estimate(
    chunk: FetchChunk,
    estimator: ChangeRateEstimator | None,
    *,
    now_days: float,
    scale: BucketScale | None,
    policy: LastModifiedPolicy | None,
    min_change: float,
) -> tuple[
    FetchArrayEstimate,
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    int,
]:
    """Estimate one chunk of evidence: the estimates, and per fetch its page id, time
    (epoch seconds) and change flag (1/0/NaN; with ``min_change``, small changes demoted to
    0 and dates not read), and how many changes were demoted."""
    # None (no Last-Modified, first fetch) becomes NaN; True/False become 1/0.
    page_id, host_id, fetched_s, changed, modified_s = np.array(chunk.rows, dtype=np.float64).T
    demoted = 0
    if min_change > 0:
        flags, demoted = changes_at_least(
            [row[0] for row in chunk.rows],
            [row[3] for row in chunk.rows],
            chunk.signatures,
            min_change,
        )
        changed = np.array(flags, dtype=np.float64)
        modified_s = np.full_like(modified_s, np.nan)
    result = estimate_fetch_arrays(
        page_id.astype(np.int64),
        fetched_s / _DAY_S,
        changed,
        modified_s / _DAY_S,
        host_id.astype(np.int64),
        now=now_days,
        estimator=estimator,
        scale=scale,
        policy=policy,
        created_between=_creation_windows(page_id, chunk.windows),
    )
    return result, page_id, fetched_s, changed, demoted


def _sample_fits(
    db: Database,
    estimate_chunk: Callable[
        [FetchChunk, ChangeRateEstimator | None], tuple[FetchArrayEstimate, Any, Any, Any, int]
    ],
    sample_pages: int,
    chunk_pages: int,
    sized: bool,
    plan_budget: float | None,
    fetched_pages: int,
) -> tuple[LogNormalRatePrior | None, BayesPlanPrior | None]:
    """The population's fits on a sample spread over the store (None, None: the store is
    one chunk, or the sample has no evidence); the sample is gone when this returns."""
    sample = sample_fetch_chunk(db, pages=sample_pages, chunk_pages=chunk_pages, signatures=sized)
    if sample is None or not sample.rows:
        return None, None
    found, *_ = estimate_chunk(sample, None)
    return _population_fits(
        found, plan_budget, fetched_pages, answer_groups(found.page, sample.answers)
    )


def _population_fits(
    result: FetchArrayEstimate,
    plan_budget: float | None,
    fetched_pages: int,
    groups: npt.NDArray[np.intp],
) -> tuple[LogNormalRatePrior | None, BayesPlanPrior | None]:
    """The estimators' rate prior fitted on ``result``'s pages, and with ``plan_budget``
    (crawls per day for all ``fetched_pages``) the Bayes plan's prior and price, those pages
    given their share of the budget, each answer's pages (``groups``, :func:`answer_groups`)
    a prior of their own. A sample holds that share of each group's pages, so the
    population's pull on a group is scaled by it too: a group's prior depends on how many
    pages the store holds, not on how many were sampled."""
    bayes = None
    if plan_budget:
        evidence = result.evidence
        share = result.page.size / max(fetched_pages, result.page.size)
        bayes = fit_bayes_plan(
            plan_budget * share,
            evidence.intervals,
            evidence.last_modified,
            evidence.reliable,
            groups=groups,
            group_strength=GROUP_PRIOR_PAGES * share,
        )
    return result.fitted.prior_, bayes


#: The Bayes plan's groups of pages by their last answer (:attr:`FetchChunk.answers`):
#: redirects (3xx) and gone pages (404, 410); every other page is in group 0, the pages. A
#: site's redirects and gone URLs answer the same for as long as the crawl watches them,
#: where its pages change: under the population's prior a redirect seen unchanged a few
#: times looks like a slow page and is re-crawled like one; pooled with the other redirects
#: its few fetches say what all of theirs say.
REDIRECT_GROUP, GONE_GROUP = 1, 2


def answer_groups(pages: npt.NDArray[Any], answers: list[tuple[int, int]]) -> npt.NDArray[np.intp]:
    """Each of ``pages`` (page ids, ascending, shape (n,))'s Bayes-plan group from a chunk's
    ``answers`` ((page id, HTTP status of its last answered fetch), the pages that may not
    have answered as a page), shape (n,)."""
    groups = np.zeros(pages.size, dtype=np.intp)
    if not answers or pages.size == 0:
        return groups
    ids, status = np.array(answers, dtype=np.int64).T
    codes = np.where((status >= 300) & (status < 400), REDIRECT_GROUP, 0)
    codes = np.where(np.isin(status, (404, 410)), GONE_GROUP, codes)
    where = np.minimum(np.searchsorted(pages, ids), pages.size - 1)
    found = pages[where] == ids
    groups[where[found]] = codes[found]
    return groups


@dataclass(frozen=True)
class StoreAggregates:
    """The NLP's inputs from the store: per-bucket aggregates of fetched pages, and n;
    ``host_pages``: the fetched pages of the hosts whose politeness could bind the plan,
    with their caps (:func:`planner.cycle.bound_hosts.plan_within_caps`); ``importance``:
    per bucket (256), the mean OPIC importance of its fetched pages that have one, over
    that of every fetched page that has one (NaN: none known; None: no page has one)."""

    buckets: BucketAggregates
    new_pages: int
    host_pages: HostPages = field(default_factory=HostPages.none)
    importance: npt.NDArray[np.float64] | None = None


def politeness_bounds(
    db: Database, *, period_days: float, periods: int, min_delay_seconds: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The hosts whose politeness could bind a plan, and their caps (re-crawls a period,
    :func:`planner.cycle.bound_hosts.host_caps`): those whose polite delay (the larger of
    ``min_delay_seconds`` and the robots.txt crawl delay) lets a period take fewer crawls
    than they hold fetched pages. Sorted by host id."""
    counts = host_page_counts(db)
    delay = np.fmax(np.asarray(counts.crawl_delay, dtype=float), min_delay_seconds)
    fetched = np.asarray(counts.fetched, dtype=float)
    cap = host_caps(
        np.nan_to_num(delay), counts.new, period_seconds=period_days * _DAY_S, periods=periods
    )
    could = cap < fetched
    return np.asarray(counts.host_id, dtype=np.int64)[could], cap[could]


def aggregates_from_store(
    db: Database,
    *,
    period_days: float,
    now: datetime | None = None,
    chunk_pages: int = 100_000,
    hosts: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None,
) -> StoreAggregates:
    """Per-bucket aggregates of the fetched pages and the count of never-fetched pages;
    with ``hosts`` (host ids sorted, and their caps: :func:`politeness_bounds`), those
    hosts' fetched pages as :class:`~planner.cycle.bound_hosts.HostPages` too.

    Raises :class:`InstanceError` naming how many fetched pages have a bucket but no rate
    (a store whose estimates were not written by ``crawlplan estimate``, which writes both)."""
    when = now or datetime.now(UTC)
    parts = []
    new_pages = 0
    unrated, first_unrated = 0, 0
    now_s = when.timestamp()
    host_ids = np.zeros(0, dtype=np.int64) if hosts is None else hosts[0]
    kept: list[npt.NDArray[np.float64]] = []
    weight_sum = np.zeros(256)
    weighed = np.zeros(256)
    for chunk in iter_page_states(db, chunk_pages=chunk_pages):
        # None (never fetched, no rate, no importance) becomes NaN.
        ids, host, bucket, rate, last_s, importance = np.array(chunk, dtype=np.float64).T
        fetched = np.isfinite(last_s)
        new_pages += int((~fetched).sum())
        bad = fetched & (bucket > 0) & ~(rate >= 0)  # NaN (no rate) or negative
        if bad.any():
            if not unrated:
                first_unrated = int(ids[bad][0])
            unrated += int(bad.sum())
        if unrated or not fetched.any():
            continue
        elapsed = ((now_s - last_s[fetched]) / _DAY_S).clip(min=0.0)
        known = fetched & np.isfinite(importance) & (importance >= 0)
        classes = bucket[known].astype(np.int64)
        weight_sum += np.bincount(classes, weights=importance[known], minlength=256)
        weighed += np.bincount(classes, minlength=256)
        parts.append(
            bucket_aggregates(
                bucket[fetched].astype(np.int64), rate[fetched], elapsed, period=period_days
            )
        )
        if host_ids.size:
            on = np.isin(host[fetched], host_ids)
            if on.any():
                kept.append(
                    np.stack(
                        [host[fetched][on], bucket[fetched][on], rate[fetched][on], elapsed[on]]
                    )
                )
    if unrated:
        pages = "1 fetched page has" if unrated == 1 else f"{unrated:,} fetched pages have"
        raise InstanceError(
            f"{pages} a change-rate bucket but no rate >= 0 (page id {first_unrated}, for "
            "one): run `crawlplan estimate`, which writes every estimated page's rate and "
            "bucket together"
        )
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        parts.append(
            bucket_aggregates(empty, empty.astype(float), empty.astype(float), period=period_days)
        )
    host_pages = HostPages.none()
    if hosts is not None and host_ids.size:
        host, bucket, rate, elapsed = (
            np.concatenate(kept, axis=1) if kept else np.zeros((4, 0), dtype=np.float64)
        )
        host_pages = HostPages(
            host=host_ids,
            cap=np.asarray(hosts[1], dtype=float),
            page_host=np.searchsorted(host_ids, host.astype(np.int64)),
            page_class=bucket.astype(np.int64),
            rate=np.nan_to_num(rate),
            elapsed=elapsed,
        )
    mean_importance = None
    if weighed.sum() > 0 and weight_sum.sum() > 0:
        overall = weight_sum.sum() / weighed.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean_importance = np.where(weighed > 0, weight_sum / weighed / overall, np.nan)
    return StoreAggregates(combine_aggregates(parts), new_pages, host_pages, mean_importance)


@dataclass(frozen=True)
class ReleaseSummary:
    """What :func:`release_period` did.

    ``status``: ``released``; ``already released`` (by an earlier call or a concurrent one:
    nothing written); ``no plan`` (none published); ``no current period`` (``now`` falls
    before the published plan's first period; past its last, the plan stays in force and its
    last period repeats: :func:`store.plans.extend_plan_in_force`); ``not scheduled yet``
    (the plan's page schedule has not finished). ``by_bucket`` maps each bucket to the pages
    chosen for its quota (pooled quotas: to the pages the pool took of it); ``new_pages``
    counts never-fetched pages chosen; ``released`` the pages queued (given a due time);
    ``carried_over`` the pages of earlier releases still queued, not fetched yet, when this
    one ran (they stay queued and come first in their hosts' leases: a number that grows
    from period to period says the workers fetch less than the plan releases); ``withdrawn``
    the pages due from before the plan that the release read but did not choose (their due
    time cleared); ``shortfalls`` names the quotas not met and why; ``urgent`` the urgent
    crawls of the previous period's span charged against this period's quotas;
    ``older_plans`` the pages older plans released in this period's window before this plan
    was published, charged against its quotas too. ``spilled`` maps bucket
    (:data:`~planner.cycle.due_urls.NEW_PAGES`: new pages) to the pages chosen there with
    crawls that quotas left unused, and ``unspent`` counts such crawls that found no page.
    """

    status: str
    plan: int | None = None
    period: int | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    released: int = 0
    by_bucket: dict[int, int] = field(default_factory=dict)
    new_pages: int = 0
    carried_over: int = 0
    withdrawn: int = 0
    shortfalls: tuple[Shortfall, ...] = ()
    urgent: int = 0
    older_plans: int = 0
    spilled: dict[int, int] = field(default_factory=dict)
    unspent: int = 0

    def spill_line(self) -> str | None:
        """One line saying how many unusable quota crawls were spilled and where, or None
        when nothing was to spill."""
        spilled = sum(self.spilled.values())
        if not spilled and not self.unspent:
            return None
        where = ", ".join(
            f"{'new pages' if b == NEW_PAGES else f'bucket {class_label(b)}'} +{n:,}"
            for b, n in sorted(self.spilled.items(), key=lambda item: (-item[1], item[0]))
        )
        return (
            f"plan {self.plan} period {self.period}: spilled {spilled:,} crawls that quotas "
            f"could not use" + (f" to {where}" if where else "") + f"; {self.unspent:,} unspent"
        )


def _limit(quota: int, factor: float) -> int:
    return max(int(quota * factor), quota + 64) if quota > 0 else 0


def _epoch(when: datetime) -> float:
    return when.timestamp()


def _choose(
    db: Database,
    per_bucket: dict[int, Candidates],
    new: Candidates,
    work: PeriodWork,
    now: datetime,
    min_delay_seconds: float,
    spill: bool,
    due_share: float | None,
    bound: Candidates | None = None,
) -> Selection:
    """Choose the period's pages among the candidates read; ``due_share`` None, or a plan
    without crawl fractions: no due intervals (every candidate of a quota bucket eligible),
    else the quotas pooled (:func:`planner.cycle.due_urls.select_due_pages`, ``pooled``).

    ``bound``: the candidates of the plan's politeness-bound hosts (``work.bound_hosts``).
    Their pages, read there or among their buckets', are candidates of their host's classes
    (:func:`planner.cycle.bound_hosts.wide_class` on the host's group), whose quotas are
    kept, not pooled: a bound host's capacity left unused in a period is lost, so its
    classes take their own pages (``kept``)."""
    parts = [*per_bucket.values(), *([] if bound is None else [bound])]

    def column(name: str, dtype: type) -> npt.NDArray[Any]:
        return np.concatenate(
            [np.asarray(getattr(c, name), dtype=dtype) for c in parts] or [np.zeros(0, dtype)]
        )

    page_id, host_id = column("page_id", np.int64), column("host_id", np.int64)
    bucket = column("bucket", np.int64)
    last_fetch = column("last_fetch_s", np.float64)
    importance = column("importance", np.float64)
    kept: list[int] = []
    if work.bound_hosts:
        # A page read twice (its bucket's read and its host's) is one candidate.
        _, first = np.unique(page_id, return_index=True)
        first.sort()
        page_id, host_id, bucket = page_id[first], host_id[first], bucket[first]
        last_fetch, importance = last_fetch[first], importance[first]
        bucket = class_of(bucket, host_id, work.bound_hosts)
        split = set(np.unique(bucket[bucket >= HOST_CLASS_STRIDE]).tolist())
        split |= {k for k in (*work.quotas, *work.crawl_fraction) if k >= HOST_CLASS_STRIDE}
        kept = sorted(split)
    new_hosts = np.asarray(new.host_id, dtype=np.int64)
    hosts = np.unique(np.concatenate([host_id, new_hosts]))
    robots = host_delays(db, hosts.tolist())
    delay = np.array(
        [max(min_delay_seconds, robots.get(h) or 0.0) for h in hosts.tolist()], dtype=float
    )
    interval = _due_interval(work) if due_share is not None else None
    return select_due_pages(
        page_id=page_id,
        host_id=host_id,
        bucket=bucket,
        last_fetch=last_fetch,
        importance=importance,
        quotas=work.quotas,
        new_page_id=np.asarray(new.page_id, dtype=np.int64),
        new_host_id=new_hosts,
        new_quota=work.new_pages,
        host_ids=hosts,
        host_delay=delay,
        start=_epoch(work.starts_at),
        end=_epoch(work.ends_at),
        now=_epoch(now),
        spill=spill,
        marginal=work.marginal,
        new_marginal=work.new_marginal,
        due_interval=interval,
        due_share=due_share,
        pooled=interval is not None,
        kept=kept if interval is not None else (),
    )


def class_of(
    bucket: npt.NDArray[np.int64], host_id: npt.NDArray[np.int64], bound_hosts: Sequence[int]
) -> npt.NDArray[np.int64]:
    """Each candidate's class in a plan whose politeness-bound hosts are ``bound_hosts``
    (group order): :func:`planner.cycle.bound_hosts.split_key`."""
    if not len(bound_hosts):
        return bucket
    hosts = np.asarray(bound_hosts, dtype=np.int64)
    order = np.argsort(hosts, kind="stable")
    at = np.searchsorted(hosts[order], host_id).clip(max=hosts.size - 1)
    group = np.where(hosts[order][at] == host_id, order[at], -1)
    return split_key(bucket, group)


def _due_interval(work: PeriodWork) -> dict[int, float] | None:
    """Each bucket's planned revisit interval, seconds: the period's length times the
    periods between two crawls of a page at the bucket's crawls per page and period (the
    plan's average over its periods): their inverse, or on a growing web that young pages
    share (``work.renewal``) :func:`planner.model.steady_rates.revisit_interval`. None for a
    plan that records no crawl fractions (every page of a quota bucket eligible)."""
    length = (work.ends_at - work.starts_at).total_seconds()
    buckets = [b for b, f in work.crawl_fraction.items() if f > 0]
    fraction = np.array([work.crawl_fraction[b] for b in buckets], dtype=float)
    periods = revisit_interval(fraction, np.ones_like(fraction), work.renewal)
    interval = {b: length * float(p) for b, p in zip(buckets, periods, strict=True)}
    return interval or None


def release_period(
    db: Database,
    *,
    now: datetime | None = None,
    min_delay_seconds: float = 1.0,
    candidate_factor: float = 1.25,
    max_rounds: int = 4,
    require_schedule: bool = True,
    spill: bool = True,
    due: bool = True,
    due_share: float = DUE_SHARE,
) -> ReleaseSummary:
    """Release the current period of the published plan: choose the pages and their times.

    ``min_delay_seconds`` is the configured minimum delay between two requests to one host;
    a host's polite delay is the larger of it and its robots.txt crawl delay. Each bucket
    reads ``candidate_factor`` times its quota (at least quota + 64) candidates, longest
    unvisited first; a quota left short because hosts were full, with more candidates
    unread, reads four times more, up to ``max_rounds`` reads. Releasing a period twice (or
    from two processes at once) releases it once.

    ``spill``: the crawls quotas leave unused (too few fetchable pages, hosts full) go, in the
    same period, to the other buckets' next candidates and to new pages in the order of the
    plan's marginal values, highest first; without values, to the pages unvisited longest
    overall, then new pages (:func:`planner.cycle.due_urls.select_due_pages`). The buckets
    to spill to are read in that order, as many as the unused crawls need, within the same
    ``max_rounds`` reads.

    ``due``: with a plan that records crawl fractions, the period's re-crawl quotas are
    pooled: their total goes to the pages due in the period (last fetch plus ``due_share``
    of the plan's revisit interval for their bucket before the period's end), most overdue
    for that interval first, whatever their bucket; what they cannot use spills as above to
    due pages first, then to pages not due yet
    (:func:`planner.cycle.due_urls.select_due_pages`, ``due_interval``, ``pooled``). Every
    bucket with an interval is read (at least :data:`POOLED_READ` candidates), and read
    further while its last candidate read is as overdue as a page the pool took. Without
    ``due`` (or fractions), each quota takes its own bucket's pages, every page eligible,
    longest unvisited first. Estimates move pages between
    buckets every night; ``due`` keeps a bucket from re-crawling a page that has just moved
    in after a recent visit. ``due_share``: the share of the interval after which a page is
    due (:data:`planner.cycle.due_urls.DUE_SHARE`; 1.0: every class a strict round robin at
    its interval, what a uniform recrawl for comparison wants).

    A period is released only once the plan's page schedule stage has finished
    (:func:`service.page_schedule.schedule_pages`; status ``not scheduled yet`` until then):
    it withdraws the older regime's due times, so that the crawl follows the new plan's
    releases. The release no longer orders by the schedule's ``scheduled_at``, but by last
    fetch. ``require_schedule=False`` releases anyway.
    """
    when = now or datetime.now(UTC)
    plan = latest_plan(db)
    if plan is None:
        return ReleaseSummary("no plan")
    work = period_work(db, plan.version, when)
    if work is None and extend_plan_in_force(db, plan.version, when) is not None:
        work = period_work(db, plan.version, when)
    if work is None:
        return ReleaseSummary("no current period", plan=plan.version)
    done = ReleaseSummary(
        "already released",
        plan=plan.version,
        period=work.period,
        starts_at=work.starts_at,
        ends_at=work.ends_at,
    )
    if is_released(db, work.plan_id, work.period):
        return done
    if require_schedule and not page_schedule_finished(db, plan.version):
        return replace(done, status="not scheduled yet")
    # Urgent crawls asked for during the previous period's span are charged to this one, and
    # so are the pages an older plan released in this period's window (a late plan).
    urgent = urgent_requests_between(
        db, work.starts_at - (work.ends_at - work.starts_at), work.starts_at
    )
    older = older_releases_in(db, work)
    if urgent or older:
        quotas, new_pages = charge_spent(work.quotas, work.new_pages, urgent + older)
        work = replace(work, quotas=quotas, new_pages=new_pages)
    per_bucket, new, bound, selection = _read_and_choose(
        db,
        work,
        when,
        min_delay_seconds,
        candidate_factor,
        max_rounds,
        spill,
        due_share if due else None,
    )
    read = [*per_bucket.values(), bound, new]
    queued, withdrawn = _queue_chosen(db, work, when, read, selection)
    if queued is None:
        return done
    return ReleaseSummary(
        "released",
        plan=plan.version,
        period=work.period,
        starts_at=work.starts_at,
        ends_at=work.ends_at,
        released=queued.released,
        by_bucket=selection.chosen,
        new_pages=selection.new_chosen,
        carried_over=queued.carried_over,
        withdrawn=withdrawn,
        shortfalls=selection.shortfalls,
        urgent=urgent,
        older_plans=older,
        spilled=selection.spilled,
        unspent=selection.unspent,
    )


def _read_and_choose(
    db: Database,
    work: PeriodWork,
    when: datetime,
    min_delay_seconds: float,
    candidate_factor: float,
    max_rounds: int,
    spill: bool,
    due_share: float | None,
) -> tuple[dict[int, Candidates], Candidates, Candidates, Selection]:
    """Read each quota bucket's candidates (pooled: every bucket's with an interval), the
    politeness-bound hosts' (:func:`_bound_candidates`, once) and new pages', choose the
    period's pages, and read again, up to ``max_rounds`` reads: four times more of a bucket
    whose quota full hosts left short while it has more candidates unread
    (pooled: whose last candidate read may be more overdue than a page taken,
    :func:`_pooled_reads`), and, while crawls are left to spill, the buckets (or new pages)
    they go to next (:func:`_spill_reads`)."""
    # Buckets are read by index; the politeness-bound hosts' classes (keys past the
    # buckets) by host, once: at most what each host can take this period, per bucket.
    limits = {
        b: _limit(q, candidate_factor)
        for b, q in work.quotas.items()
        if q > 0 and b < HOST_CLASS_STRIDE
    }
    interval = _due_interval(work) if due_share is not None else None
    if interval is not None:  # pooled: every bucket with an interval may have due pages
        for b in interval:
            if b < HOST_CLASS_STRIDE:
                limits[b] = max(limits.get(b, 0), POOLED_READ)
    bound = _bound_candidates(db, work, when, min_delay_seconds)
    new_limit = _limit(work.new_pages, candidate_factor)
    per_bucket: dict[int, Candidates] = {}
    new = Candidates()
    to_read, read_new = set(limits), new_limit > 0
    spill_rounds = 0
    bound_keys = tuple(k for k in work.quotas if k >= HOST_CLASS_STRIDE)
    for _ in range(max_rounds):
        if to_read:
            per_bucket.update(refresh_candidates(db, {b: limits[b] for b in to_read}, now=when))
        if read_new:
            new = new_page_candidates(db, new_limit, now=when)
        selection = _choose(
            db, per_bucket, new, work, when, min_delay_seconds, spill, due_share, bound
        )
        to_read, read_new = set(), False
        if interval is not None and due_share is not None:
            for b in _pooled_reads(per_bucket, selection, interval, due_share, work):
                limits[b] *= 4
                to_read.add(b)
        for short in selection.shortfalls:
            if short.reason != HOST_CAPACITY or short.bucket in (RECRAWLS, *bound_keys):
                continue
            if short.bucket == NEW_PAGES:
                if not new.exhausted.get(NEW_PAGES, True):
                    new_limit *= 4
                    read_new = True
            elif not per_bucket[short.bucket].exhausted[short.bucket]:
                limits[short.bucket] *= 4
                to_read.add(short.bucket)
        if spill and (selection.spilled or selection.unspent):
            more, new_more = _spill_reads(
                work, per_bucket, new, limits, selection, candidate_factor, spill_rounds > 0
            )
            spill_rounds += 1
            to_read |= more
            if new_more > new_limit:
                new_limit, read_new = new_more, True
        if not to_read and not read_new:
            break
    return per_bucket, new, bound, selection


def _bound_candidates(
    db: Database, work: PeriodWork, when: datetime, min_delay_seconds: float
) -> Candidates:
    """The candidates of the plan's politeness-bound hosts: per host and bucket, as many as
    the host can take in what is left of the period (its polite delay: the larger of
    ``min_delay_seconds`` and its robots.txt crawl delay), which is every page its classes
    can use; none for a plan without bound hosts."""
    if not work.bound_hosts:
        return Candidates()
    delays = host_delays(db, list(work.bound_hosts))
    delay = np.array(
        [max(min_delay_seconds, delays.get(h) or 0.0) for h in work.bound_hosts], dtype=float
    )
    window = (work.ends_at - when).total_seconds()
    room = int(min(host_capacity(delay, window).max(initial=0), _HOST_READ_MAX))
    return host_candidates(db, list(work.bound_hosts), room, now=when)


#: At most this many candidates per bound host and bucket.
_HOST_READ_MAX = 100_000


#: Every bucket a page can be in.
_BUCKETS = range(256)

#: Candidates read at least from every bucket with a planned interval when quotas are
#: pooled: a bucket whose quota rounds to 0 this period still has pages due.
POOLED_READ = 64


def _pooled_reads(
    per_bucket: dict[int, Candidates],
    selection: Selection,
    interval: dict[int, float],
    share: float,
    work: PeriodWork,
) -> set[int]:
    """The buckets to read further when quotas are pooled: those not read in full whose
    last candidate read is due by the period's end and at least as overdue (the share of
    its bucket's interval waited by then) as the least overdue due page the pool took, or
    any due one when the pooled total fell short: the pages after it in the bucket may be
    more overdue than pages the pool took, whether the pool took that candidate or its
    host was full."""
    end = _epoch(work.ends_at)
    short = any(s.bucket == RECRAWLS for s in selection.shortfalls)
    threshold = share
    if not short:
        waited = {
            p: (end - t) / interval[b]
            for found in per_bucket.values()
            for p, b, t in zip(found.page_id, found.bucket, found.last_fetch_s, strict=True)
            if b in interval
        }
        taken = [waited[p] for p in selection.page_id.tolist() if p in waited]
        taken = [r for r in taken if r >= share]  # the pool's due pages, not the spilled
        threshold = min(taken, default=math.inf)
    out = set()
    for b, found in per_bucket.items():
        if found.exhausted.get(b, True) or not found.page_id or b not in interval:
            continue
        if (end - found.last_fetch_s[-1]) / interval[b] >= max(threshold, share):
            out.add(b)
    return out


def _spill_reads(
    work: PeriodWork,
    per_bucket: dict[int, Candidates],
    new: Candidates,
    limits: dict[int, int],
    selection: Selection,
    factor: float,
    exhaustive: bool = False,
) -> tuple[set[int], int]:
    """The reads the crawls to spill need before the selection can place them as the plan
    ranks them: the buckets to read (their raised ``limits`` set here) and the new-page
    limit (0: none to read).

    The targets in the order the selection spills to them (by the plan's marginal values,
    highest first; the unvalued buckets together, merged oldest first; new pages last when
    they have no value), until their candidates beyond their quotas cover the crawls to
    spill: a target read in full counts what was read; one not read yet is read (quota plus
    what is still to cover, with the usual margin); one read but not in full counts what
    was read, or reads four times more when crawls went unspent (its hosts were full). So
    an unread bucket worth more than the ones the first choice spilled to is read, and the
    choice made again.

    A target not read yet is first counted as holding all it is asked for. Buckets are
    often smaller than that (a plan that gives every crawl to new pages, on a small web, has
    buckets of a few pages each), and counted so, each further round would read one more
    bucket and the rounds would end with crawls unspent while pages were left. So from the
    second spill on (``exhaustive``) an unread target counts for nothing until read: every
    target still unread in the order is read at once, each up to what is still to cover
    (with the margin). That read is at most every candidate of those buckets, once a period,
    and only when crawls would otherwise go unspent."""
    need = sum(selection.spilled.values()) + selection.unspent
    values: list[tuple[float, int]] = [(v, b) for b, v in work.marginal.items()]
    if work.new_marginal is not None:
        values.append((work.new_marginal, NEW_PAGES))
    ranked = [b for _, b in sorted(values, key=lambda vb: (-vb[0], vb[1] == NEW_PAGES, vb[1]))]
    # The bound hosts' classes: read in full already (_bound_candidates).
    ranked = [b for b in ranked if b < HOST_CLASS_STRIDE]
    groups: list[list[int]] = [[b] for b in ranked]
    groups.append([b for b in _BUCKETS if b not in work.marginal])
    if work.new_marginal is None:
        groups.append([NEW_PAGES])
    reads: set[int] = set()
    new_limit = covered = 0
    for group in groups:
        for b in group:
            if b == NEW_PAGES:
                quota, read = work.new_pages, len(new.page_id)
                done = new.exhausted.get(NEW_PAGES)
                limit = new_limit = _spill_limit(
                    quota, read, done, need - covered, selection, factor
                )
            else:
                found = per_bucket.get(b)
                quota = max(work.quotas.get(b, 0), 0)
                read = 0 if found is None else len(found.page_id)
                done = None if found is None else found.exhausted.get(b)
                limit = _spill_limit(quota, read, done, need - covered, selection, factor)
                if limit:
                    limits[b] = limit
                    reads.add(b)
            unread = done is None
            covered += max((read if exhaustive and unread else limit or read) - quota, 0)
        if covered >= need:
            break
    return reads, new_limit


def _spill_limit(
    quota: int, read: int, done: bool | None, missing: int, selection: Selection, factor: float
) -> int:
    """The candidates to read of one spill target (0: none): ``read`` were read (``done``:
    all of them; None: none read yet), ``missing`` crawls are still to cover."""
    if done:
        return 0
    if done is None:
        return quota + _limit(max(missing, 1), factor)
    return 4 * read if selection.unspent > 0 else 0


def _queue_chosen(
    db: Database,
    work: PeriodWork,
    when: datetime,
    read: list[Candidates],
    selection: Selection,
) -> tuple[QueuedRelease | None, int]:
    """Queue the chosen pages (:func:`store.releases.queue_release`); returns what it
    queued (None when another process released the period first) and how many candidates
    due from before the plan lost that due time without being chosen."""
    chosen = selection.page_id
    # Candidates due from before the plan (pending): every one loses that due time, the
    # chosen ones because they are queued now; withdrawn counts those not chosen.
    ids = np.concatenate([np.asarray(c.page_id, dtype=np.int64) for c in read])
    pending = np.concatenate([np.asarray(c.pending, dtype=bool) for c in read])
    waiting = np.unique(ids[pending])  # a page read twice is withdrawn once
    withdrawn = int(np.count_nonzero(~np.isin(waiting, chosen))) if len(waiting) else 0
    # Each chosen page's fetch count, bucket and index key as read (the release checks the
    # first and finds the page's index entry by the others).
    order = np.argsort(ids, kind="stable")
    at = order[np.searchsorted(ids[order], chosen)]
    # In the order read (bucket by bucket, each in index order): the release then looks the
    # pages up in each bucket's index entries in order.
    as_read = np.argsort(at, kind="stable")
    at, chosen, release_at = at[as_read], chosen[as_read], selection.release_at[as_read]
    counts = np.concatenate([np.asarray(c.fetches, dtype=np.int64) for c in read])
    buckets = np.concatenate([np.asarray(c.bucket, dtype=np.int64) for c in read])
    # The keys as the store gave them (SQLite's text, PostgreSQL's integers, new pages'
    # cash: scalars), gathered by index without a Python step per page.
    keys = np.fromiter(chain.from_iterable(c.key for c in read), dtype=object, count=len(ids))
    queued = queue_release(
        db,
        work.plan_id,
        work.period,
        page_ids=chosen.tolist(),
        due_epoch_s=release_at.tolist(),
        fetches=counts[at].tolist(),
        buckets=buckets[at].tolist(),
        keys=keys[at].tolist(),
        withdraw_ids=waiting.tolist(),
        now=when,
    )
    return queued, withdrawn
