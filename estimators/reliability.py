"""Can a page's Last-Modified be believed? An explicit test per page and per host.

Last-Modified is the better evidence when it is true (Xyleme sec. 6.1), but many servers send
something else: the time of the response (dynamic pages), a date in the future (wrong clock,
or a template's far-future date), a date that moves on every fetch although the content is the
same (rendering time, rotating ads), or a date that stays put while the content changes
(static template date). Each fetch of a page that reports Last-Modified is checked against the
crawler's own observations; a page is reliable when Last-Modified is present on every fetch
and few of its fetches fail a check, and its host is not known to lie.

Checks, per fetch (``t`` fetch time, ``d`` Last-Modified, ``tol`` clock tolerance, days):

========================  =============================================================
``equals_fetch_time``     ``|d - t| <= tol``: the server stamps the response time (not
                          when the content changed since the previous fetch and ``d``
                          moved: a fast page changes that close to a fetch)
``in_future``             ``d > t + tol``
``moved_without_change``  ``d`` moved since the previous fetch, the content did not change
``static_while_changed``  ``d`` did not move, the content changed
``outside_interval``      ``d`` moved, but not into ``(t_prev - tol, t + tol]``
========================  =============================================================

The content-change flag compares signatures, so "moved without change" also catches changes
the signature deliberately ignores: for this crawler those are not changes either.

A page is unreliable when any of these shares exceeds ``max_page_violation_share``:

* the share of its checked fetches that fail a check;
* ``static_while_changed`` over the content changes seen (the changes Last-Modified missed);
* ``moved_without_change`` over the moves of Last-Modified (the changes it invented).

The last two judge the dates by the changes they report, the evidence the Last-Modified
estimators count. Shares of fetches alone dilute a lie by a page's quiet fetches: a static
template date on a page fetched 20 times that changed once fails one fetch in 20, within a
10 % tolerance, yet the date missed the only change seen, and the Last-Modified estimator
would count no change where the crawler saw one.

**Rate consistency** (``rate_mismatch``): a page whose fetch checks pass must still have a
Last-Modified rate ``C / T`` (its maximum-likelihood rate) that its own change/no-change
observations allow: the change log-likelihood at that rate may fall at most
``chi2_1(rate_confidence) / 2`` (5.41 at 99.9 %) below its maximum. This catches dates that
are consistent with every single observation and still wrong: a server that stamps each
response with a recent cache or render time on a page that changes at almost every fetch
moves with every change, and at the one quiet interval its single "moved without change" is
within the tolerance; the short ages ``t_i - d_i`` make the page look many times faster than
its quiet interval allows. Honest dates and honest content flags describe one Poisson process,
whose two estimates agree within their noise.

A page fetched once can fail only the first two checks (the others need a previous fetch) and
is not tested for rate consistency (it has no interval): its date is reliable when present,
neither within ``tol`` of the fetch time nor after it (its one fetch is all its share, for any
``max_page_violation_share`` below 1), and its host is not unreliable.

A host (when host ids are given) is unreliable when more than ``max_host_violation_share`` of
the checked fetches of all its pages fail, or of the content changes its dates missed, or of
the moves of its dates that came without a change, once the denominator reaches
``min_host_checks``: then every page of the host is unreliable, including pages fetched too
few times to show it themselves. One exception: when the host fails only by dates that move
without a change (the fetches that fail are those, and its dates miss no change), a page
fetched at least twice whose date never moved and never failed a check keeps its own
verdict. Such a host is a static site whose files get touched (a rebuild, a deploy, a
``touch``), or a cache that stamps its refresh time; either way a date that stayed put while
the content stayed put is the truth, and "unchanged since ``d``" is the evidence that keeps a
page unchanged for weeks from looking like one that changes daily.

**Verified hosts.** A date claims more than the crawler can check: "unchanged since ``d``",
weeks before the first fetch. The checks above test that claim only between two fetches, so
a server that sends one fixed template date for pages that change passes every check on a
page fetched once, and its pages look unchanged for as long as the date is old (then the
plan never fetches them again, and the lie is never seen). Such a host gives itself away
by its dates: more than ``max_host_violation_share`` of its pages share their first
fetch's date with another of its pages. A host without repeated dates is verified; one with
them is verified when it passes the tests of stamped, future and missed dates below and its
dates have moved with at least ``min_verifying_changes`` of the content changes seen between
two dated fetches of its pages and missed at most ``max_host_violation_share`` of them; a page
fetched once is reliable only on a verified host (reason ``unverified``), and
:attr:`LastModifiedReliability.verified` tells callers whose first-fetch ages to believe.
Until then such a page is planned as one without an estimate, fetched again, and judged by
what its own two fetches show. Without host ids every host counts as verified (the old rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from estimators.defaults import (
    CLOCK_TOLERANCE_DAYS,
    LAST_MODIFIED_RATE_CONFIDENCE,
    MAX_HOST_VIOLATION_SHARE,
    MAX_PAGE_VIOLATION_SHARE,
    MIN_HOST_CHECKS,
    MIN_VERIFYING_CHANGES,
)
from estimators.evidence import PageRuns, check_fetch_log
from estimators.likelihood import ChangeLogLikelihood
from estimators.solvers import chi2_level_drop, maximize_log_rate

__all__ = [
    "RELIABILITY_REASONS",
    "VIOLATIONS",
    "LastModifiedPolicy",
    "LastModifiedReliability",
    "assess_last_modified",
    "assess_sorted_log",
]

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]
FloatArray = NDArray[np.float64]

#: The checks, in the order in which a page's reason names the first that failed.
VIOLATIONS = (
    "equals_fetch_time",
    "in_future",
    "moved_without_change",
    "static_while_changed",
    "outside_interval",
)
#: Reasons recorded per page: reliable ("ok"), no evidence, a failed check, a Last-Modified rate
#: that the page's change observations rule out, or the host.
RELIABILITY_REASONS = (
    "ok",
    "no_fetch",
    "missing",
    *VIOLATIONS,
    "rate_mismatch",
    "host",
    "unverified",
)


@dataclass(frozen=True)
class LastModifiedPolicy:
    """Thresholds of the reliability test.

    Attributes
    ----------
    clock_tolerance : float
        Days within which Last-Modified counts as equal to a fetch time or to another date.
    max_page_violation_share : float
        A page is unreliable when more than this share of its checked fetches fail, of the
        content changes seen its Last-Modified missed, or of its Last-Modified moves came
        without a content change.
    max_host_violation_share : float
        A host is unreliable when more than this share of its checked fetches fail (or of its
        content changes were missed, or of its moves were without change) ...
    min_host_checks : int
        ... and it has at least this many checked fetches (content changes, moves).
    rate_confidence : float or None
        Level of the rate-consistency test: the change log-likelihood at the Last-Modified
        rate may fall at most ``chi2_1(rate_confidence) / 2`` below its maximum. None skips
        the test.
    min_verifying_changes : int
        Content changes a host's dates must have moved with before a page fetched once (or
        a first fetch's age) is believed (module docstring, verified hosts).
    max_date_age : float or None
        Days a first fetch's age ("unchanged for A") counts for at most; None (the
        default): no limit. A limit keeps a page dated years back that starts changing from
        being planned as asleep, and costs stationary webs' slow pages their evidence
        (docs/estimators.md, "A page that wakes up").
    """

    clock_tolerance: float = CLOCK_TOLERANCE_DAYS
    max_page_violation_share: float = MAX_PAGE_VIOLATION_SHARE
    max_host_violation_share: float = MAX_HOST_VIOLATION_SHARE
    min_host_checks: int = MIN_HOST_CHECKS
    rate_confidence: float | None = LAST_MODIFIED_RATE_CONFIDENCE
    min_verifying_changes: int = MIN_VERIFYING_CHANGES
    max_date_age: float | None = None


@dataclass(frozen=True)
class LastModifiedReliability:
    """Outcome of :func:`assess_last_modified`.

    Attributes
    ----------
    reliable : ndarray of bool, shape (n_pages,)
        Use this page's Last-Modified.
    reason : pandas.Categorical, length n_pages
        ``"ok"`` or why not, from :data:`RELIABILITY_REASONS` (the first failed check).
    checked : ndarray of int, shape (n_pages,)
        Fetches that reported Last-Modified.
    violations : dict of str to ndarray of int, shape (n_pages,)
        Failed fetches per page, per check in :data:`VIOLATIONS`.
    violating : ndarray of int, shape (n_pages,)
        Fetches that failed at least one check.
    fetch_violation : ndarray of bool, shape (m,)
        Per fetch of the input: failed at least one check.
    host_reliable : ndarray of bool, shape (n_hosts,) or None
        Per host id; None when no hosts were given.
    content_changes : ndarray of int, shape (n_pages,)
        Intervals between two fetches with Last-Modified in which the content changed.
    moves : ndarray of int, shape (n_pages,)
        Of the intervals with a known content outcome, those in which Last-Modified moved.
    rate_deviance : ndarray of float, shape (n_pages,)
        Drop of the change log-likelihood from its maximum at the page's Last-Modified rate
        ``C / T`` (rate consistency); NaN where not tested (no test asked, a page already
        unreliable, or without both kinds of evidence).
    verified : ndarray of bool, shape (n_pages,)
        The page's host is verified (module docstring): believe the age of its first
        fetch's date. All True when no hosts were given.
    """

    reliable: BoolArray
    reason: pd.Categorical[str]
    checked: IntArray
    violations: dict[str, IntArray]
    violating: IntArray
    fetch_violation: BoolArray
    host_reliable: BoolArray | None
    content_changes: IntArray
    moves: IntArray
    rate_deviance: FloatArray
    verified: BoolArray


def assess_last_modified(
    page: ArrayLike,
    fetched_at: ArrayLike,
    changed: ArrayLike,
    last_modified: ArrayLike,
    *,
    n_pages: int | None = None,
    host: ArrayLike | None = None,
    policy: LastModifiedPolicy | None = None,
) -> LastModifiedReliability:
    """Judge each page's Last-Modified (and each host's) against the observed content changes.

    Parameters
    ----------
    page : array_like of int, shape (m,)
        Page index of each fetch, non-decreasing.
    fetched_at : array_like of float, shape (m,)
        Fetch time, days, strictly increasing within a page.
    changed : array_like of float, shape (m,)
        1/0 content changed since the previous fetch, NaN unknown (first fetch).
    last_modified : array_like of float, shape (m,)
        Last-Modified at each fetch, days on the same clock, NaN when absent.
    n_pages : int, optional
        Number of pages; default ``max(page) + 1``.
    host : array_like of int, shape (n_pages,), optional
        Host id of each page (``0..n_hosts-1``), to pool the evidence of a host's pages.
    policy : LastModifiedPolicy, optional
        Thresholds; the defaults of :mod:`estimators.defaults` otherwise.

    Returns
    -------
    LastModifiedReliability
    """
    pages, times = check_fetch_log(page, fetched_at)
    outcome = np.asarray(changed, dtype=np.float64)
    dates = np.asarray(last_modified, dtype=np.float64)
    if not (outcome.shape == dates.shape == pages.shape):
        raise ValueError("changed and last_modified must have one value per fetch")
    n = int(pages.max()) + 1 if n_pages is None and pages.size else int(n_pages or 0)
    return assess_sorted_log(pages, times, outcome, dates, n, host, policy)


def assess_sorted_log(
    pages: IntArray,
    times: FloatArray,
    outcome: FloatArray,
    dates: FloatArray,
    n: int,
    host: ArrayLike | None = None,
    policy: LastModifiedPolicy | None = None,
) -> LastModifiedReliability:
    """:func:`assess_last_modified` of a log already checked (:func:`check_fetch_log`)."""
    rules = policy or LastModifiedPolicy()
    tol = rules.clock_tolerance

    present = ~np.isnan(dates)
    flags, content_changed, moved = _fetch_flags(pages, times, outcome, dates, present, tol)

    runs = PageRuns(pages, n)
    per_page = runs.count

    fetch_violation = np.zeros(pages.shape, dtype=np.bool_)
    for name in VIOLATIONS:
        fetch_violation |= flags[name]
    fetches = runs.rows()
    checked = per_page(present)
    violating = per_page(fetch_violation)
    violations = {name: per_page(flags[name]) for name in VIOLATIONS}
    content_changes = per_page(content_changed)
    moves = per_page(moved)

    limit = rules.max_page_violation_share
    with np.errstate(divide="ignore", invalid="ignore"):
        too_many = (checked > 0) & (violating / checked > limit)
        # judged by the changes the dates report: missed ones, and invented ones
        missed = (content_changes > 0) & (
            violations["static_while_changed"] / content_changes > limit
        )
        invented = (moves > 0) & (violations["moved_without_change"] / moves > limit)
    reliable = (fetches > 0) & (checked == fetches) & ~too_many & ~missed & ~invented

    reason = np.zeros(n, dtype=np.int8)  # "ok"
    code = {name: i for i, name in enumerate(RELIABILITY_REASONS)}
    failed = {name: too_many & (violations[name] > 0) for name in VIOLATIONS}
    failed["static_while_changed"] |= missed
    failed["moved_without_change"] |= invented
    # the first failing check names the reason: assign in reverse order of precedence
    for name in reversed(VIOLATIONS):
        reason[failed[name]] = code[name]
    reason[(fetches > 0) & (checked < fetches)] = code["missing"]
    reason[fetches == 0] = code["no_fetch"]

    host_reliable: BoolArray | None = None
    verified = np.ones(n, dtype=np.bool_)
    if host is not None:
        hosts = np.asarray(host, dtype=np.intp)
        if hosts.shape != (n,):
            raise ValueError(f"host must have one id per page, shape ({n},)")
        # dates that stamp the fetch, lie ahead or miss changes: every page of the host
        invented = flags["moved_without_change"]
        sound = _host_reliable(
            hosts,
            rules,
            (per_page(fetch_violation & ~invented), checked),
            (violations["static_while_changed"], content_changes),
        )
        # dates that move without a change (a touched file, a cache or render time): the
        # pages whose dates moved, and those fetched once (their date may be such a move)
        honest_moves = _host_reliable(
            hosts,
            rules,
            (violating, checked),
            (violations["moved_without_change"], moves),
        )
        host_reliable = sound & honest_moves
        # A page fetched twice or more whose date never moved and never failed a check says
        # "unchanged since d", and the crawler saw it unchanged: a date that moves too often
        # elsewhere can only make a page look faster, never slower (the host's missed-change
        # test above still covers it).
        still = (fetches >= 2) & (moves == 0) & (violating == 0)
        lying_host = ~sound[hosts] | (~honest_moves[hosts] & ~still)
        reason[reliable & lying_host] = code["host"]
        reliable &= ~lying_host
        caught = _host_verified(hosts, rules, violations["static_while_changed"], content_changes)
        # dates that move without a change (touched files) still catch the changes: only the
        # sound tests bear on "unchanged since d"
        suspect = _repeated_dates(runs, dates, hosts, rules)
        verified = (~suspect | (caught & sound))[hosts]
        unverified = reliable & (fetches == 1) & ~verified
        reason[unverified] = code["unverified"]
        reliable &= ~unverified

    rate_deviance = np.full(n, np.nan)
    if rules.rate_confidence is not None and reliable.any():
        tested, deviance = _rate_deviance(pages, times, outcome, dates, n, reliable, tol)
        rate_deviance[tested] = deviance
        mismatch = np.zeros(n, dtype=np.bool_)
        mismatch[tested] = deviance > chi2_level_drop(rules.rate_confidence)
        reason[mismatch] = code["rate_mismatch"]
        reliable &= ~mismatch

    return LastModifiedReliability(
        reliable=reliable,
        reason=pd.Categorical.from_codes(reason, categories=pd.Index(RELIABILITY_REASONS)),
        checked=checked,
        violations=violations,
        violating=violating,
        fetch_violation=fetch_violation,
        host_reliable=host_reliable,
        content_changes=content_changes,
        moves=moves,
        rate_deviance=rate_deviance,
        verified=verified,
    )


def _fetch_flags(
    pages: IntArray,
    times: FloatArray,
    outcome: FloatArray,
    dates: FloatArray,
    present: BoolArray,
    tol: float,
) -> tuple[dict[str, BoolArray], BoolArray, BoolArray]:
    """Each fetch's violations (:data:`VIOLATIONS`), whether its content changed, and
    whether its date moved, where its outcome is known; all shape (n_fetches,).

    The interval checks compare fetch i with fetch i-1 of the same page, both with a
    Last-Modified date."""
    flags: dict[str, BoolArray] = {"in_future": present & (dates > times + tol)}
    pair = np.zeros(pages.shape, dtype=np.bool_)
    moved = np.zeros(pages.shape, dtype=np.bool_)
    previous_time = np.full(pages.shape, np.nan)
    if pages.size > 1:
        pair[1:] = (pages[1:] == pages[:-1]) & present[1:] & present[:-1]
        moved[1:] = np.abs(dates[1:] - dates[:-1]) > tol
        previous_time[1:] = times[:-1]
    moved &= pair
    known = pair & ~np.isnan(outcome)
    content_changed = known & (outcome == 1)
    flags["moved_without_change"] = known & moved & (outcome == 0)
    flags["static_while_changed"] = content_changed & ~moved
    flags["outside_interval"] = moved & ~((dates > previous_time - tol) & (dates <= times + tol))
    # A date at the fetch time is a stamp, unless the content changed since the last fetch
    # and the date moved with it: a page changing about once a tolerance changes that close
    # to a fetch most of the time, and a stamping server gives itself away at the fetches
    # that find the content unchanged (its date moves on those too).
    flags["equals_fetch_time"] = (
        present & (np.abs(dates - times) <= tol) & ~(content_changed & moved)
    )
    return {name: flags[name] for name in VIOLATIONS}, content_changed, known & moved


def _host_reliable(
    hosts: IntArray, rules: LastModifiedPolicy, *tests: tuple[IntArray, IntArray]
) -> BoolArray:
    """Per host: False when any test's (bad, total) counts, summed over the host's pages,
    reach ``min_host_checks`` with a bad share over ``max_host_violation_share``."""
    n_hosts = int(hosts.max()) + 1 if hosts.size else 0
    reliable = np.ones(n_hosts, dtype=np.bool_)
    for bad, total in tests:
        host_total = np.bincount(hosts, weights=total, minlength=n_hosts)
        host_bad = np.bincount(hosts, weights=bad, minlength=n_hosts)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = host_bad / host_total
        reliable &= ~(
            (host_total >= rules.min_host_checks) & (share > rules.max_host_violation_share)
        )
    return reliable


def _repeated_dates(
    runs: PageRuns, dates: FloatArray, hosts: IntArray, rules: LastModifiedPolicy
) -> BoolArray:
    """Per host: more than ``max_host_violation_share`` of its pages with a date at their
    first fetch (the first row of each of ``runs``) share that date with another of its
    pages: the mark of one template date sent for every page (or of a site deployed at once,
    which one more fetch clears)."""
    n_hosts = int(hosts.max()) + 1 if hosts.size else 0
    first = dates[runs.starts]
    dated = ~np.isnan(first)
    frame = pd.DataFrame({"host": hosts[runs.page[dated]], "date": first[dated]})
    shared = frame.duplicated(keep=False).to_numpy()
    host_of = frame["host"].to_numpy()
    with_date = np.bincount(host_of, minlength=n_hosts)
    repeated = np.bincount(host_of, weights=shared, minlength=n_hosts)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(repeated / with_date > rules.max_host_violation_share, dtype=np.bool_)


def _host_verified(
    hosts: IntArray, rules: LastModifiedPolicy, missed: IntArray, changes: IntArray
) -> BoolArray:
    """Per host: its dates moved with at least ``min_verifying_changes`` of the content
    changes seen between two dated fetches of its pages, and missed at most
    ``max_host_violation_share`` of them (``missed``, ``changes``: per page)."""
    n_hosts = int(hosts.max()) + 1 if hosts.size else 0
    seen = np.bincount(hosts, weights=changes, minlength=n_hosts)
    lost = np.bincount(hosts, weights=missed, minlength=n_hosts)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = lost / seen
    caught = (seen - lost >= rules.min_verifying_changes) & (
        share <= rules.max_host_violation_share
    )
    return np.asarray(caught, dtype=np.bool_)


def _rate_deviance(
    pages: IntArray,
    times: FloatArray,
    outcome: FloatArray,
    dates: FloatArray,
    n: int,
    candidate: BoolArray,
    tol: float,
) -> tuple[IntArray, FloatArray]:
    """The rate-consistency statistic of the ``candidate`` pages that have both kinds of
    evidence: ``max l - l(C / T)``, l the change/no-change log-likelihood of the page's
    intervals and ``C / T`` its Last-Modified maximum-likelihood rate (0 with no move, +inf
    with moves and no change-free time; C and T as in
    :func:`~estimators.evidence.last_modified_evidence_from_fetches`). Returns the pages
    tested and their statistic.
    """
    # interval k runs from fetch k to fetch k + 1; counted when both fetches are of one candidate
    # page and have Last-Modified
    page = pages[1:]
    counted = (page == pages[:-1]) & candidate[page] & ~np.isnan(dates[1:]) & ~np.isnan(dates[:-1])
    length = np.diff(times)
    up = counted & (np.diff(dates) > tol)
    # change-free days: t_i - d_i (clipped to the interval) after a move, else the interval
    free = times[1:] - dates[1:]
    np.maximum(free, 0.0, out=free)
    np.minimum(free, length, out=free)
    np.copyto(free, length, where=~up)
    free[~counted] = 0.0
    runs = PageRuns(page, n)
    n_lm = runs.count(counted)
    c = runs.count(up).astype(np.float64)
    t = runs.total(free)
    del up, free
    change = counted & (outcome[1:] == 1)
    counts = runs.count(change)
    changed_length = np.compress(change, length)  # grouped by page: the log is sorted
    np.copyto(length, 0.0, where=~(counted & (outcome[1:] == 0)))
    unchanged = runs.total(length)
    del counted, change, length
    tested = np.flatnonzero((n_lm > 0) & ((counts > 0) | (unchanged > 0)))
    keep = np.zeros(n, dtype=np.bool_)
    keep[tested] = True
    loglik = ChangeLogLikelihood(counts, changed_length, unchanged).restrict(keep)
    c, t, x, u = c[tested], t[tested], loglik.counts, loglik.unchanged_time
    with np.errstate(divide="ignore", invalid="ignore"):
        lm_rate = np.where(c > 0, c / t, 0.0)  # c / 0 = inf: moves and no change-free time
    # maximum: 0 with no change (at rate 0) or only changes (as the rate grows), else at the
    # MLE, bracketed by C / (U + S/2) and C / U (see estimators.poisson.mle_bracket)
    best = np.zeros(tested.size)
    both = (x > 0) & (u > 0)
    if both.any():
        inner = loglik.restrict(both)
        s_changed = np.bincount(
            np.repeat(np.arange(inner.n_pages), inner.counts),
            weights=inner.changed_length,
            minlength=inner.n_pages,
        )
        xb, ub = x[both].astype(np.float64), u[both]
        lo, hi = np.log(xb / (ub + 0.5 * s_changed)), np.log(xb / ub)
        theta, _ = maximize_log_rate(inner, lo, hi, lo)
        best[both] = inner.value(theta)
    # at the Last-Modified rate; at the ends 0 and +inf it is 0 or -inf
    interior = (lm_rate > 0) & np.isfinite(lm_rate)
    at_lm = np.where(lm_rate == 0, np.where(x == 0, 0.0, -np.inf), np.where(u == 0, 0.0, -np.inf))
    if interior.any():
        at_lm[interior] = loglik.restrict(interior).value(np.log(lm_rate[interior]))
    return tested, np.maximum(best - at_lm, 0.0)
