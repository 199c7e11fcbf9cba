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
``equals_fetch_time``     ``|d - t| <= tol``: the server stamps the response time
``in_future``             ``d > t + tol``
``moved_without_change``  ``d`` moved since the previous fetch, the content did not change
``static_while_changed``  ``d`` did not move, the content changed
``outside_interval``      ``d`` moved, but not into ``(t_prev - tol, t + tol]``
========================  =============================================================

The content-change flag compares signatures, so "moved without change" also catches changes
the signature deliberately ignores: for this crawler those are not changes either.

A host (when host ids are given) is unreliable when more than ``max_host_violation_share`` of
the checked fetches of all its pages fail, once it has ``min_host_checks`` of them: then every
page of the host is unreliable, including pages fetched too few times to show it themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from estimators.defaults import (
    CLOCK_TOLERANCE_DAYS,
    MAX_HOST_VIOLATION_SHARE,
    MAX_PAGE_VIOLATION_SHARE,
    MIN_HOST_CHECKS,
)
from estimators.evidence import check_fetch_log

__all__ = [
    "RELIABILITY_REASONS",
    "VIOLATIONS",
    "LastModifiedPolicy",
    "LastModifiedReliability",
    "assess_last_modified",
]

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]

#: The checks, in the order in which a page's reason names the first that failed.
VIOLATIONS = (
    "equals_fetch_time",
    "in_future",
    "moved_without_change",
    "static_while_changed",
    "outside_interval",
)
#: Reasons recorded per page: reliable ("ok"), no evidence, a failed check, or the host.
RELIABILITY_REASONS = ("ok", "no_fetch", "missing", *VIOLATIONS, "host")


@dataclass(frozen=True)
class LastModifiedPolicy:
    """Thresholds of the reliability test.

    Attributes
    ----------
    clock_tolerance : float
        Days within which Last-Modified counts as equal to a fetch time or to another date.
    max_page_violation_share : float
        A page is unreliable when more than this share of its checked fetches fail.
    max_host_violation_share : float
        A host is unreliable when more than this share of its checked fetches fail ...
    min_host_checks : int
        ... and it has at least this many checked fetches.
    """

    clock_tolerance: float = CLOCK_TOLERANCE_DAYS
    max_page_violation_share: float = MAX_PAGE_VIOLATION_SHARE
    max_host_violation_share: float = MAX_HOST_VIOLATION_SHARE
    min_host_checks: int = MIN_HOST_CHECKS


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
    """

    reliable: BoolArray
    reason: pd.Categorical[str]
    checked: IntArray
    violations: dict[str, IntArray]
    violating: IntArray
    fetch_violation: BoolArray
    host_reliable: BoolArray | None


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
    rules = policy or LastModifiedPolicy()
    tol = rules.clock_tolerance
    pages, times = check_fetch_log(page, fetched_at)
    outcome = np.asarray(changed, dtype=np.float64)
    dates = np.asarray(last_modified, dtype=np.float64)
    if not (outcome.shape == dates.shape == pages.shape):
        raise ValueError("changed and last_modified must have one value per fetch")
    n = int(pages.max()) + 1 if n_pages is None and pages.size else int(n_pages or 0)

    present = ~np.isnan(dates)
    flags: dict[str, BoolArray] = {
        "equals_fetch_time": present & (np.abs(dates - times) <= tol),
        "in_future": present & (dates > times + tol),
    }
    # interval checks: fetch i against fetch i-1 of the same page, both with Last-Modified
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

    def per_page(mask: BoolArray) -> IntArray:
        return np.bincount(pages[mask], minlength=n).astype(np.intp)

    fetch_violation = np.zeros(pages.shape, dtype=np.bool_)
    for name in VIOLATIONS:
        fetch_violation |= flags[name]
    fetches = per_page(np.ones(pages.shape, dtype=np.bool_))
    checked = per_page(present)
    violating = per_page(fetch_violation)
    violations = {name: per_page(flags[name]) for name in VIOLATIONS}

    with np.errstate(divide="ignore", invalid="ignore"):
        page_share = violating / checked
    reliable = (fetches > 0) & (checked == fetches) & (page_share <= rules.max_page_violation_share)

    reason = np.zeros(n, dtype=np.int8)  # "ok"
    code = {name: i for i, name in enumerate(RELIABILITY_REASONS)}
    too_many = (checked > 0) & (page_share > rules.max_page_violation_share)
    # the first failing check names the reason: assign in reverse order of precedence
    for name in reversed(VIOLATIONS):
        reason[too_many & (violations[name] > 0)] = code[name]
    reason[(fetches > 0) & (checked < fetches)] = code["missing"]
    reason[fetches == 0] = code["no_fetch"]

    host_reliable: BoolArray | None = None
    if host is not None:
        hosts = np.asarray(host, dtype=np.intp)
        if hosts.shape != (n,):
            raise ValueError(f"host must have one id per page, shape ({n},)")
        n_hosts = int(hosts.max()) + 1 if hosts.size else 0
        host_checked = np.bincount(hosts, weights=checked, minlength=n_hosts)
        host_bad = np.bincount(hosts, weights=violating, minlength=n_hosts)
        with np.errstate(divide="ignore", invalid="ignore"):
            host_share = host_bad / host_checked
        host_reliable = ~(
            (host_checked >= rules.min_host_checks) & (host_share > rules.max_host_violation_share)
        )
        lying_host = ~host_reliable[hosts]
        reason[reliable & lying_host] = code["host"]
        reliable &= ~lying_host

    return LastModifiedReliability(
        reliable=reliable,
        reason=pd.Categorical.from_codes(reason, categories=pd.Index(RELIABILITY_REASONS)),
        checked=checked,
        violations=violations,
        violating=violating,
        fetch_violation=fetch_violation,
        host_reliable=host_reliable,
    )
