"""Evidence of many pages as flat (ragged) arrays, built from a log of fetches.

A page is fetched at times ``t_0 < t_1 < ... < t_N``. Each fetch after the first says whether
the content changed since the previous fetch, so a page contributes ``N`` *intervals*
``(t_{i-1}, t_i]``, each a change interval or a no-change interval. Intervals of all pages are
stored in flat arrays with a page index per interval (:class:`ChangeIntervals`), so that every
estimator works on all pages at once with ``np.bincount``.

Last-Modified gives more: in an interval where it moved, the time ``l_i = t_i - d_i`` since the
last change, during which the page is known not to have changed. :class:`LastModifiedEvidence`
holds the per-page sums that the Last-Modified estimators need.

Fetch logs given to the builders here are sorted by page, then by fetch time, with strictly
increasing times within a page; :mod:`estimators.fetch_table` turns an untidy file into that
form and reports what it had to fix.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import pdtrc

from estimators.defaults import CLOCK_TOLERANCE_DAYS

__all__ = [
    "ChangeIntervals",
    "LastModifiedEvidence",
    "PageRuns",
    "change_intervals_from_fetches",
    "check_fetch_log",
    "last_fetch_times",
    "last_modified_evidence_from_fetches",
    "sorted_change_intervals",
    "sorted_last_modified_evidence",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]


#: Intervals per block of :attr:`ChangeIntervals._change_sums` (2 MiB of float64).
BLOCK_ROWS = 1 << 18


def _weighted_sum(page: IntArray, weights: FloatArray, n_pages: int) -> FloatArray:
    """Per-page sum of ``weights``, shape (n_pages,)."""
    return np.bincount(page, weights=weights, minlength=n_pages).astype(np.float64, copy=False)


class PageRuns:
    """Per-page counts and sums over an array sorted by page, one ``np.add.reduceat`` per sum.

    A fetch log sorted by page holds each page's rows as one run. Summing per run reads the
    values alone, where ``np.bincount`` also reads a page index per row and a boolean mask
    first copies the rows it keeps: on tens of millions of rows, a few times faster.

    Parameters
    ----------
    page : ndarray of int, shape (m,)
        Page of each row, non-decreasing, in ``[0, n_pages)``.
    n_pages : int
        Number of pages; pages without rows get 0.
    """

    def __init__(self, page: IntArray, n_pages: int) -> None:
        step = np.empty(page.shape[0], dtype=np.bool_)
        step[:1] = True
        np.not_equal(page[1:], page[:-1], out=step[1:])
        self.starts = np.flatnonzero(step)
        self.page = page[self.starts]
        self.n_pages = n_pages
        self.size = int(page.shape[0])

    def count(self, mask: BoolArray) -> IntArray:
        """Rows where ``mask`` (shape (m,)) is true, per page, shape (n_pages,)."""
        out = np.zeros(self.n_pages, dtype=np.intp)
        if self.size:
            out[self.page] = np.add.reduceat(mask, self.starts, dtype=np.int32)
        return out

    def total(self, values: FloatArray) -> FloatArray:
        """Sum of ``values`` (shape (m,)) per page, shape (n_pages,)."""
        out = np.zeros(self.n_pages)
        if self.size:
            out[self.page] = np.add.reduceat(values, self.starts)
        return out

    def rows(self) -> IntArray:
        """Rows per page, shape (n_pages,)."""
        out = np.zeros(self.n_pages, dtype=np.intp)
        out[self.page] = np.diff(self.starts, append=self.size)
        return out


@dataclass(frozen=True)
class ChangeIntervals:
    """Change/no-change intervals of ``n_pages`` pages, one array element per interval.

    Parameters
    ----------
    page : ndarray of int, shape (m,)
        Page index of each interval, in ``[0, n_pages)``; any order.
    length : ndarray of float, shape (m,)
        Length of each interval, days, finite and > 0.
    changed : ndarray of bool, shape (m,)
        Whether the page changed during the interval (at least once: a fetch cannot count).
    n_pages : int
        Number of pages; pages without any interval are allowed (no evidence yet).
    """

    page: IntArray
    length: FloatArray
    changed: BoolArray
    n_pages: int

    def __post_init__(self) -> None:
        page = np.asarray(self.page, dtype=np.intp)
        length = np.asarray(self.length, dtype=np.float64)
        changed = np.asarray(self.changed, dtype=np.bool_)
        if not (page.ndim == length.ndim == changed.ndim == 1):
            raise ValueError("page, length and changed must be one-dimensional")
        if not (page.shape == length.shape == changed.shape):
            raise ValueError(
                f"page, length and changed must have one element per interval, got shapes "
                f"{page.shape}, {length.shape}, {changed.shape}"
            )
        if self.n_pages < 0:
            raise ValueError(f"n_pages must be >= 0, got {self.n_pages}")
        if page.size and (page.min() < 0 or page.max() >= self.n_pages):
            raise ValueError(f"page indices must lie in [0, {self.n_pages})")
        if not np.all(np.isfinite(length) & (length > 0)):
            bad = int(np.flatnonzero(~(np.isfinite(length) & (length > 0)))[0])
            raise ValueError(
                f"interval lengths must be finite and > 0 days; interval {bad} is {length[bad]}"
            )
        object.__setattr__(self, "page", page)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "changed", changed)

    @classmethod
    def from_lists(
        cls, lengths: list[list[float]], changed: list[list[bool] | list[int]]
    ) -> ChangeIntervals:
        """Build from one list of interval lengths (days) and one of outcomes per page."""
        if len(lengths) != len(changed):
            raise ValueError("lengths and changed must have one list per page")
        counts = [len(x) for x in lengths]
        if counts != [len(x) for x in changed]:
            raise ValueError("each page needs one outcome per interval")
        page = np.repeat(np.arange(len(lengths), dtype=np.intp), counts)
        flat_len = np.array([v for x in lengths for v in x], dtype=np.float64)
        flat_changed = np.array([bool(v) for x in changed for v in x], dtype=np.bool_)
        return cls(page, flat_len, flat_changed, len(lengths))

    # Per-page sums are cached: the instance is frozen, and estimators ask for them repeatedly.
    # Intervals grouped by page (as a fetch log gives them) are summed per run with
    # ``np.add.reduceat``, which reads the values alone, a few times faster than a bincount.

    @cached_property
    def grouped(self) -> bool:
        """Whether the intervals are grouped by page in page order (as built from a fetch log),
        which lets the sums and :meth:`take` work on runs instead of looking up every page."""
        return bool(self.page.size < 2 or np.all(self.page[1:] >= self.page[:-1]))

    @cached_property
    def _runs(self) -> PageRuns:
        """The runs of grouped intervals."""
        return PageRuns(self.page, self.n_pages)

    def _per_page(self, values: FloatArray) -> FloatArray:
        """Sum of ``values`` (one per interval) per page, shape (n_pages,)."""
        if not self.grouped:
            return _weighted_sum(self.page, values, self.n_pages)
        return self._runs.total(values)

    @cached_property
    def n_intervals(self) -> IntArray:
        """Intervals per page, shape (n_pages,)."""
        if not self.grouped:
            return np.bincount(self.page, minlength=self.n_pages).astype(np.intp)
        return self._runs.rows()

    @cached_property
    def _change_sums(self) -> tuple[IntArray, FloatArray, FloatArray, FloatArray]:
        """:attr:`n_changes`, :attr:`changed_time`, :attr:`unchanged_time` and
        :attr:`changed_lengths` of grouped intervals, in one pass over blocks of about
        :data:`BLOCK_ROWS` intervals that each hold whole pages, so that every temporary of a
        block stays in the CPU's cache (tens of millions of intervals otherwise stream several
        full-size temporaries through memory)."""
        runs = self._runs
        n = self.n_pages
        changes = np.zeros(n, dtype=np.intp)
        changed_time = np.zeros(n)
        unchanged_time = np.zeros(n)
        pieces = []
        starts = runs.starts
        cuts = np.unique(
            np.append(np.searchsorted(starts, np.arange(0, runs.size, BLOCK_ROWS)), starts.size)
        )
        row_cuts = np.append(starts, runs.size)
        for first, last in itertools.pairwise(cuts.tolist()):
            a, b = int(row_cuts[first]), int(row_cuts[last])
            mask, length = self.changed[a:b], self.length[a:b]
            local = starts[first:last] - a
            pages = runs.page[first:last]
            changes[pages] = np.add.reduceat(mask, local, dtype=np.intp)
            changed = length * mask
            changed_time[pages] = np.add.reduceat(changed, local)
            # exact: each row of `changed` is its length or 0
            unchanged_time[pages] = np.add.reduceat(length - changed, local)
            pieces.append(np.compress(mask, length))
        lengths = np.concatenate(pieces) if pieces else np.empty(0)
        return changes, changed_time, unchanged_time, lengths

    @cached_property
    def n_changes(self) -> IntArray:
        """Change intervals per page, shape (n_pages,)."""
        if not self.grouped:
            changed_page = np.compress(self.changed, self.page)
            return np.bincount(changed_page, minlength=self.n_pages).astype(np.intp)
        return self._change_sums[0]

    @cached_property
    def total_time(self) -> FloatArray:
        """Observed time per page (sum of interval lengths), days, shape (n_pages,)."""
        return self._per_page(self.length)

    @cached_property
    def changed_lengths(self) -> FloatArray:
        """Lengths of the change intervals alone, grouped by page in page order, days, shape
        (n_changes.sum(),). The likelihoods work on these only (a no-change interval enters
        through its page's ``unchanged_time``)."""
        if self.grouped:
            return self._change_sums[3]
        return self.change_intervals[1]

    @cached_property
    def change_intervals(self) -> tuple[IntArray, FloatArray]:
        """The change intervals alone, grouped by page in page order: their pages and lengths,
        each shape (n_changes.sum(),)."""
        if self.grouped:
            page = np.repeat(np.arange(self.n_pages, dtype=np.intp), self.n_changes)
            return page, self.changed_lengths
        page = np.compress(self.changed, self.page)
        length = np.compress(self.changed, self.length)
        order = np.argsort(page, kind="stable")
        return page[order], length[order]

    @cached_property
    def changed_time(self) -> FloatArray:
        """Sum of change interval lengths per page, days, shape (n_pages,)."""
        if not self.grouped:
            page, length = self.change_intervals
            return _weighted_sum(page, length, self.n_pages)
        return self._change_sums[1]

    @cached_property
    def unchanged_time(self) -> FloatArray:
        """Sum of no-change interval lengths per page, days, shape (n_pages,)."""
        if not self.grouped:
            return _weighted_sum(self.page, self.length * ~self.changed, self.n_pages)
        return self._change_sums[2]

    def take(self, pages: ArrayLike) -> ChangeIntervals:
        """The evidence of the given pages only, renumbered ``0..len(pages)-1`` in that order."""
        index = np.asarray(pages, dtype=np.intp)
        if self.grouped and (index.size < 2 or np.all(index[1:] > index[:-1])):
            return self._take_runs(index)
        new_id = np.full(self.n_pages, -1, dtype=np.intp)
        new_id[index] = np.arange(index.size, dtype=np.intp)
        mapped = new_id[self.page]
        keep = mapped >= 0
        return ChangeIntervals(mapped[keep], self.length[keep], self.changed[keep], index.size)

    def _take_runs(self, index: IntArray) -> ChangeIntervals:
        """:meth:`take` of increasing ``index`` when the intervals are grouped: each page's
        intervals are one run, so the selection is a repeat of a page mask. The validated
        arrays need no second check, and the per-page sums already computed carry over."""
        if index.size and (index[0] < 0 or index[-1] >= self.n_pages):
            raise IndexError(f"page indices must lie in [0, {self.n_pages})")
        wanted = np.zeros(self.n_pages, dtype=np.bool_)
        wanted[index] = True
        counts = self.n_intervals
        keep = np.repeat(wanted, counts)
        sub = object.__new__(ChangeIntervals)
        fields = {
            "page": np.repeat(np.arange(index.size, dtype=np.intp), counts[index]),
            "length": np.compress(keep, self.length),
            "changed": np.compress(keep, self.changed),
            "n_pages": int(index.size),
        }
        for name, value in fields.items():
            object.__setattr__(sub, name, value)
        cache = sub.__dict__
        cache["grouped"] = True
        for name in ("n_intervals", "n_changes", "total_time", "changed_time", "unchanged_time"):
            if name in self.__dict__:
                cache[name] = self.__dict__[name][index]
        return sub


@dataclass(frozen=True)
class LastModifiedEvidence:
    """Per-page sums from Last-Modified dates, shape (n_pages,) each.

    Attributes
    ----------
    intervals : ndarray of int
        Intervals with Last-Modified known at both ends (Cho & Garcia-Molina's n).
    changes : ndarray of int
        Intervals in which Last-Modified moved: a change was seen (X, Xyleme's C).
    exposure : ndarray of float
        Days the page is known not to have changed: ``t_i - d_i`` of each change interval plus
        the whole length of each no-change interval (Cho & Garcia-Molina's T), days.
    age_sum : ndarray of float
        Sum of ``l_i = t_i - d_i`` over change intervals only (Xyleme's denominator), days.
    single_fetch_age : ndarray of float or None
        For a page fetched exactly once, with Last-Modified ``d`` more than the clock
        tolerance before the fetch time ``t``: ``A = t - d``, days. The page last changed at
        ``d`` and not in ``(d, t]``; for a Poisson process seen at a random time the backward
        recurrence time A is exponential, likelihood ``lambda exp(-lambda A)``: one change
        seen in exposure A. NaN for every other page; None when not computed (evidence
        summed by hand), which uses no single fetch.
    first_fetch_age : ndarray of float or None
        The same ``A = t - d`` at the first fetch of a page fetched twice or more (NaN for
        every other page, or a date within the tolerance). The intervals start at that
        fetch: what the date said before it, that the page had not changed for A days, is
        evidence they do not hold (a Poisson process is memoryless, so its likelihood,
        ``lambda exp(-lambda A)``, multiplies theirs). The empirical-Bayes estimator uses
        it (:class:`~estimators.last_modified.EmpiricalBayesLastModifiedRate`, through the
        estimator choice); Cho's does not. None when not computed.
    first_is_creation : ndarray of bool or None
        Pages whose first fetch's date is the page's creation, not a change: the date lies in
        the window in which the page was new (``created_between`` of
        :func:`last_modified_evidence_from_fetches`: it appeared on a page the crawl had read
        before without it). Their ``single_fetch_age`` and ``first_fetch_age`` then say "no
        change for A days" and nothing more: likelihood ``exp(-lambda A)``, without the
        ``lambda`` of a change seen (a new page read as a change A days ago looks as fast as a
        page that changes every A days). None: no page is known to be new.
    """

    intervals: IntArray
    changes: IntArray
    exposure: FloatArray
    age_sum: FloatArray
    single_fetch_age: FloatArray | None = None
    first_fetch_age: FloatArray | None = None
    first_is_creation: BoolArray | None = None

    def first_age_changes(self) -> FloatArray:
        """Changes the first fetch's date counts, shape (n_pages,): 1, or 0 where it is the
        page's creation."""
        n = self.n_pages
        if self.first_is_creation is None:
            return np.ones(n)
        return np.where(self.first_is_creation, 0.0, 1.0)

    @property
    def n_pages(self) -> int:
        """Number of pages."""
        return int(self.intervals.shape[0])

    def believed(self, verified: BoolArray) -> LastModifiedEvidence:
        """This evidence without the first-fetch ages of pages whose host is not verified
        (``verified`` shape (n_pages,):
        :attr:`~estimators.reliability.LastModifiedReliability.verified`): "unchanged for A
        days" before the first fetch is the one claim of a date no fetch has checked."""
        if self.first_fetch_age is None or bool(np.all(verified)):
            return self
        age = np.where(verified, self.first_fetch_age, np.nan)
        return replace(self, first_fetch_age=age)


def check_fetch_log(page: ArrayLike, fetched_at: ArrayLike) -> tuple[IntArray, FloatArray]:
    """Validate a fetch log's order and return it as arrays.

    Parameters
    ----------
    page : array_like of int, shape (m,)
        Page index of each fetch, non-decreasing.
    fetched_at : array_like of float, shape (m,)
        Fetch time, days, finite and strictly increasing within a page.

    Returns
    -------
    page, fetched_at : ndarray
        The same values as ``intp`` and ``float64`` arrays.

    Raises
    ------
    ValueError
        Naming the first fetch that is out of order: sort the log (or use
        :func:`estimators.fetch_table.estimate_fetch_table`, which sorts and reports).
    """
    pages = np.asarray(page, dtype=np.intp)
    times = np.asarray(fetched_at, dtype=np.float64)
    if pages.shape != times.shape or pages.ndim != 1:
        raise ValueError("page and fetched_at must be one-dimensional and of equal length")
    if not np.all(np.isfinite(times)):
        raise ValueError(f"fetched_at must be finite; fetch {int(np.argmin(np.isfinite(times)))}")
    if pages.size > 1:
        step = np.diff(pages)
        bad = (step < 0) | ((step == 0) & (np.diff(times) <= 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0]) + 1
            raise ValueError(
                f"fetch log must be sorted by page, then strictly by time; fetch {i} "
                f"(page {pages[i]}, t={times[i]}) follows page {pages[i - 1]}, t={times[i - 1]}"
            )
    return pages, times


def change_intervals_from_fetches(
    page: ArrayLike, fetched_at: ArrayLike, changed: ArrayLike, *, n_pages: int | None = None
) -> ChangeIntervals:
    """Change/no-change intervals from a sorted fetch log.

    Parameters
    ----------
    page : array_like of int, shape (m,)
        Page index of each fetch, non-decreasing.
    fetched_at : array_like of float, shape (m,)
        Fetch time, days, strictly increasing within a page.
    changed : array_like of float, shape (m,)
        1 if the content changed since the page's previous fetch, 0 if not, NaN if unknown
        (always for a page's first fetch, which is ignored; an unknown outcome later drops the
        interval that ends at that fetch, and the next interval starts there).
    n_pages : int, optional
        Number of pages; default ``max(page) + 1``.

    Returns
    -------
    ChangeIntervals
    """
    pages, times = check_fetch_log(page, fetched_at)
    outcome = np.asarray(changed, dtype=np.float64)
    if outcome.shape != pages.shape:
        raise ValueError("changed must have one value per fetch")
    known = ~np.isnan(outcome)
    if not np.all((outcome[known] == 0) | (outcome[known] == 1)):
        raise ValueError("changed must be 0, 1 or NaN")
    n = int(pages.max()) + 1 if n_pages is None and pages.size else int(n_pages or 0)
    return sorted_change_intervals(pages, times, outcome, n)


def sorted_change_intervals(
    pages: IntArray, times: FloatArray, outcome: FloatArray, n: int
) -> ChangeIntervals:
    """:func:`change_intervals_from_fetches` of a log already checked (:func:`check_fetch_log`,
    ``outcome`` 0, 1 or NaN), for callers that build several kinds of evidence from one log."""
    known = ~np.isnan(outcome)
    if pages.size == 0:
        return ChangeIntervals(np.empty(0, np.intp), np.empty(0), np.empty(0, np.bool_), n)
    same = pages[1:] == pages[:-1]
    keep = same & known[1:]
    out = ChangeIntervals(pages[1:][keep], np.diff(times)[keep], outcome[1:][keep] == 1, n)
    out.__dict__["grouped"] = True  # from a log sorted by page: no need to check again
    return out


def last_modified_evidence_from_fetches(
    page: ArrayLike,
    fetched_at: ArrayLike,
    last_modified: ArrayLike,
    *,
    n_pages: int | None = None,
    tolerance: float = CLOCK_TOLERANCE_DAYS,
    created_between: tuple[ArrayLike, ArrayLike] | None = None,
    max_age: float | None = None,
) -> LastModifiedEvidence:
    """Per-page Last-Modified sums from a sorted fetch log.

    An interval ``(t_{i-1}, t_i]`` counts when Last-Modified is known at both of its fetches.
    It is a change interval when Last-Modified moved by more than ``tolerance``; then
    ``l_i = t_i - d_i`` (clipped at 0 for a date up to ``tolerance`` after the fetch). A page
    fetched once contributes no interval, only ``single_fetch_age = t - d`` when that exceeds
    ``tolerance``.
    Whether these dates can be believed is :func:`estimators.reliability.assess_last_modified`'s
    question, not this function's.

    Parameters
    ----------
    page, fetched_at : array_like, shape (m,)
        As for :func:`change_intervals_from_fetches`.
    last_modified : array_like of float, shape (m,)
        Last-Modified reported at each fetch, days on the same clock, NaN when absent.
    n_pages : int, optional
        Number of pages; default ``max(page) + 1``.
    tolerance : float
        Days within which two Last-Modified dates count as equal.
    created_between : pair of array_like, shape (n_pages,) each, optional
        Per page, the days between which it was created if it is new (NaN: not known to be
        new): from the previous fetches of the pages whose re-crawl found its link (none of
        them linked to it then) to its discovery (the store's ``pages.new_after`` and
        ``first_seen``). A first fetch dated inside that window (within
        ``tolerance``) is the page's creation (``LastModifiedEvidence.first_is_creation``).
    max_age : float, optional
        Days a first fetch's age counts for at most (``single_fetch_age`` and
        ``first_fetch_age`` clipped to it; ``LastModifiedPolicy.max_date_age``). None: no
        limit.

    Returns
    -------
    LastModifiedEvidence
    """
    pages, times = check_fetch_log(page, fetched_at)
    dates = np.asarray(last_modified, dtype=np.float64)
    if dates.shape != pages.shape:
        raise ValueError("last_modified must have one value per fetch")
    n = int(pages.max()) + 1 if n_pages is None and pages.size else int(n_pages or 0)
    window = None
    if created_between is not None:
        window = tuple(np.asarray(w, dtype=np.float64) for w in created_between)
        if any(w.shape != (n,) for w in window):
            raise ValueError(f"created_between must give two arrays of {n} pages")
    return sorted_last_modified_evidence(pages, times, dates, n, tolerance, window, max_age)


def sorted_last_modified_evidence(
    pages: IntArray,
    times: FloatArray,
    dates: FloatArray,
    n: int,
    tolerance: float,
    created_between: tuple[FloatArray, ...] | None = None,
    max_age: float | None = None,
) -> LastModifiedEvidence:
    """:func:`last_modified_evidence_from_fetches` of a log already checked."""
    if max_age is not None and not max_age > tolerance:
        raise ValueError(f"max_age must exceed the tolerance ({tolerance} days), got {max_age}")
    creation = _first_is_creation(pages, dates, n, tolerance, created_between)
    if pages.size < 2:
        zeros = np.zeros(n)
        single = np.full(n, np.nan)
        if pages.size == 1:
            single[pages[0]] = _age_beyond(times[0] - dates[0], tolerance)
        if max_age is not None:
            np.minimum(single, max_age, out=single)
        return LastModifiedEvidence(
            np.zeros(n, np.intp),
            np.zeros(n, np.intp),
            zeros,
            zeros.copy(),
            single,
            single * np.nan,
            creation,
        )
    # interval k ends at fetch k + 1; it counts when both of its fetches are of one page and
    # have Last-Modified
    usable = (pages[1:] == pages[:-1]) & ~np.isnan(dates[1:]) & ~np.isnan(dates[:-1])
    moved = usable & (np.diff(dates) > tolerance)
    length = np.diff(times)
    age = times[1:] - dates[1:]
    np.maximum(age, 0.0, out=age)
    np.copyto(age, 0.0, where=~moved)
    known_free = np.minimum(age, length)
    np.copyto(known_free, length, where=~moved)
    np.copyto(known_free, 0.0, where=~usable)
    runs = PageRuns(pages[1:], n)
    single, first = _first_fetch_ages(runs, pages, times, dates, tolerance)
    if max_age is not None:
        np.minimum(single, max_age, out=single)
        np.minimum(first, max_age, out=first)
    evidence = LastModifiedEvidence(
        intervals=runs.count(usable),
        changes=runs.count(moved),
        exposure=runs.total(known_free),
        age_sum=runs.total(age),
        single_fetch_age=single,
        first_fetch_age=first,
        first_is_creation=creation,
    )
    return _without_stale_first_ages(evidence)


#: How unlikely the changes the crawl saw must be, under one rate for the first fetch's age
#: and the intervals after it, for that age to be left out (:func:`_without_stale_first_ages`).
STALE_FIRST_AGE = 1e-3
#: The fewest changes seen after the first fetch that can outweigh its age: one change
#: soon after a long quiet happens to some slow page of every large site, and the interval
#: alone would then make it look fast.
STALE_FIRST_AGE_CHANGES = 3


def _without_stale_first_ages(evidence: LastModifiedEvidence) -> LastModifiedEvidence:
    """The evidence without the first-fetch ages that the crawl's own intervals contradict.

    A page whose first date said "unchanged for years" and that then changed at fetch after
    fetch woke up: its rate changed. One rate for both (changes ``C + 1`` in exposure
    ``T + A``) would keep it planned as asleep for about as long as it slept, since the age
    ``A`` outweighs every interval the crawl adds. The age is left out where, under that
    pooled rate, ``C`` or more changes in the intervals' exposure ``T`` had a probability
    below :data:`STALE_FIRST_AGE` (Poisson's upper tail), with at least
    :data:`STALE_FIRST_AGE_CHANGES` changes; the intervals then speak alone. On a page whose
    rate held, that happens to fewer than one page in a thousand."""
    age = evidence.first_fetch_age
    if age is None:
        return evidence
    changes = evidence.changes.astype(np.float64)
    check = ~np.isnan(age) & (changes >= STALE_FIRST_AGE_CHANGES)
    if not check.any():
        return evidence
    a, c, t = age[check], changes[check], evidence.exposure[check]
    expected = (c + evidence.first_age_changes()[check]) * t / (t + a)
    stale = pdtrc(c - 1.0, expected) < STALE_FIRST_AGE
    if not stale.any():
        return evidence
    kept = age.copy()
    kept[np.flatnonzero(check)[stale]] = np.nan
    return replace(evidence, first_fetch_age=kept)


def _first_is_creation(
    pages: IntArray,
    dates: FloatArray,
    n: int,
    tolerance: float,
    created_between: tuple[FloatArray, ...] | None,
) -> BoolArray | None:
    """Whether each page's first fetch is dated inside its creation window, shape (n,);
    None without windows."""
    if created_between is None:
        return None
    since, until = created_between
    first = np.full(n, np.nan)
    if pages.size:
        starts = np.flatnonzero(np.r_[True, pages[1:] != pages[:-1]])
        first[pages[starts]] = dates[starts]
    with np.errstate(invalid="ignore"):
        return np.asarray((first >= since - tolerance) & (first <= until + tolerance))


def _age_beyond(age: FloatArray | float, tolerance: float) -> FloatArray:
    """``age`` where it exceeds ``tolerance``, else NaN: a date within the tolerance of the
    fetch time (or after it) says nothing about when the page changed."""
    age = np.asarray(age, dtype=np.float64)
    return np.where(age > tolerance, age, np.nan)


def _first_fetch_ages(
    runs: PageRuns, pages: IntArray, times: FloatArray, dates: FloatArray, tolerance: float
) -> tuple[FloatArray, FloatArray]:
    """``t - d`` at the first fetch of each page fetched exactly once, and of each page
    fetched more often (NaN otherwise), shape (n_pages,) each.

    ``runs`` are the runs of ``pages[1:]``: a page's run there holds all its fetches but the
    first fetch of the log, so its fetch count is the run length (plus one for the log's first
    page), and its first fetch is the run start plus one. Per page work only, no pass over
    the fetches.
    """
    n = runs.n_pages
    fetches = np.zeros(n, dtype=np.intp)
    first = np.zeros(n, dtype=np.intp)
    fetches[runs.page] = np.diff(runs.starts, append=runs.size)
    first[runs.page] = runs.starts + 1
    fetches[pages[0]] += 1
    first[pages[0]] = 0
    ages = []
    for chosen in (fetches == 1, fetches > 1):
        index = np.flatnonzero(chosen)
        out = np.full(n, np.nan)
        fetch = first[index]
        out[index] = _age_beyond(times[fetch] - dates[fetch], tolerance)
        ages.append(out)
    return ages[0], ages[1]


def last_fetch_times(page: ArrayLike, fetched_at: ArrayLike, *, n_pages: int) -> FloatArray:
    """Latest fetch time per page (NaN for a page never fetched), days, shape (n_pages,)."""
    pages = np.asarray(page, dtype=np.intp)
    times = np.asarray(fetched_at, dtype=np.float64)
    out = np.full(n_pages, -np.inf)
    np.maximum.at(out, pages, times)
    out[np.isneginf(out)] = np.nan
    return out
