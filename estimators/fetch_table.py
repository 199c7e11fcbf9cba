"""Change rates from a table of fetches (the file interface of ``crawlplan estimate``), no I/O.

Input: a DataFrame with one row per fetch, as read from a CSV or Parquet file:

==================  ========================================================================
``page``            the page (URL or id); rows without one are reported and not used
``fetched_at``      ISO-8601 timestamp (UTC when it has no offset) or a number of days; both
                    are placed on one axis, days since 1970-01-01T00:00Z
``changed``         1 or 0: the content changed since the page's previous fetch; empty when
                    unknown (always for a page's first fetch)
``last_modified``   optional, the Last-Modified date reported, same formats as ``fetched_at``
``host``            optional, the page's host, to judge Last-Modified per host as well
==================  ========================================================================

Output: one row per page (in order of first appearance) with ``page``, ``rate``,
``rate_low``, ``rate_high`` (changes per day), ``estimator``, ``fetches`` (rows used) and
``bucket``, plus a list of :class:`Problem` naming input lines (``first_line`` is the line
of the table's first row: 2 for a CSV with a header line, 1 for row numbers of a Parquet file).

What happens to untidy input; nothing is dropped without a problem that names its lines:

* unreadable ``page`` or ``fetched_at``, or a fetch after ``now``: the row is not used (a
  future fetch cannot have happened; the page's earlier intervals are unaffected).
* ``changed`` other than 1, 0 or empty: the row's fetch is used but its outcome is unknown,
  so the interval ending there is not used (dropping the row would merge two intervals and
  misstate the outcome of the next one).
* ``changed`` empty on a later fetch: likewise (reported, as the interval is lost).
* ``changed`` given on a page's first fetch: ignored, there is no interval before it.
* unreadable ``last_modified``: treated as absent (which makes the page's Last-Modified
  unreliable, as any missing date does).
* the same page and time twice: an exact repeat counts once; rows that disagree keep the fetch
  with an unknown outcome and no Last-Modified.
* fetch times out of order within a page: sorted by time, and reported, since ``changed`` is
  always read as "since the previous fetch in time".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from estimators.buckets import BucketScale
from estimators.estimator_choice import ChangeRateEstimator
from estimators.evidence import (
    ChangeIntervals,
    LastModifiedEvidence,
    check_fetch_log,
    sorted_change_intervals,
    sorted_last_modified_evidence,
)
from estimators.reliability import LastModifiedPolicy, assess_sorted_log

__all__ = [
    "OUTPUT_COLUMNS",
    "FetchArrayEstimate",
    "FetchTableEstimate",
    "PageEvidence",
    "Problem",
    "estimate_fetch_arrays",
    "estimate_fetch_table",
]

#: Columns of the result, in order.
OUTPUT_COLUMNS = ("page", "rate", "rate_low", "rate_high", "estimator", "fetches", "bucket")
_REQUIRED = ("page", "fetched_at", "changed")
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
_SHOWN_LINES = 10
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Problem:
    """Something wrong with some input rows, and what was done about it.

    Attributes
    ----------
    kind : str
        ``bad_page``, ``bad_fetched_at``, ``future``, ``bad_changed``, ``unknown_changed``,
        ``changed_on_first_fetch``, ``bad_last_modified``, ``duplicate``, ``conflict`` or
        ``unsorted``.
    lines : tuple of int
        Every input line concerned (1-based).
    message : str
        One line for a person: what, which lines (the first few), what was done.
    """

    kind: str
    lines: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class FetchTableEstimate:
    """Result of :func:`estimate_fetch_table`.

    Attributes
    ----------
    rates : pandas.DataFrame
        One row per page, columns :data:`OUTPUT_COLUMNS`.
    problems : tuple of Problem
        In the order of the rules in this module's docstring.
    estimator : ChangeRateEstimator
        The fitted estimator (its ``prior_`` is the population prior used).
    """

    rates: pd.DataFrame
    problems: tuple[Problem, ...]
    estimator: ChangeRateEstimator


def _lines_text(lines: NDArray[np.int64]) -> str:
    shown = ", ".join(str(int(x)) for x in lines[:_SHOWN_LINES])
    more = len(lines) - _SHOWN_LINES
    word = "line" if len(lines) == 1 else "lines"
    return f"{word} {shown}" + (f" and {more} more" if more > 0 else "")


def _problem(kind: str, lines: NDArray[np.int64], what: str) -> Problem:
    ordered = np.sort(np.asarray(lines, dtype=np.int64))
    return Problem(kind, tuple(int(x) for x in ordered), f"{_lines_text(ordered)}: {what}")


def _to_days(values: pd.Series) -> tuple[FloatArray, BoolArray]:
    """Days since the Unix epoch of numbers or ISO-8601 strings; (days, unreadable mask)."""
    empty = values.isna().to_numpy() | (values.astype("string").str.strip() == "").to_numpy(
        dtype=bool, na_value=True
    )
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    days = numbers.copy()
    text = np.isnan(numbers) & ~empty
    if text.any():
        parsed = pd.to_datetime(
            values[text].astype("string").str.strip(), utc=True, format="ISO8601", errors="coerce"
        )
        days[text] = ((parsed - _EPOCH) / pd.Timedelta(days=1)).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    bad = ~empty & ~np.isfinite(days)
    days[~np.isfinite(days)] = np.nan
    return days, bad


def _to_outcome(values: pd.Series) -> tuple[FloatArray, BoolArray]:
    """1.0, 0.0 or NaN (empty) per row, and which rows held something else."""
    text = values.astype("string").str.strip().str.lower()
    empty = text.isna().to_numpy() | (text == "").to_numpy(dtype=bool, na_value=True)
    numbers = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    words = text.map({"true": 1.0, "false": 0.0}).to_numpy(dtype=np.float64, na_value=np.nan)
    value = np.where(np.isnan(numbers), words, numbers)
    good = (value == 0) | (value == 1)
    bad = ~empty & ~good
    return np.where(good, value, np.nan), bad


def _now_days(now: datetime | float | None) -> float | None:
    if now is None:
        return None
    if isinstance(now, datetime):
        stamp = pd.Timestamp(now)
        stamp = stamp.tz_localize(UTC) if stamp.tzinfo is None else stamp.tz_convert(UTC)
        return float((stamp - _EPOCH) / pd.Timedelta(days=1))
    return float(now)


def _fit(
    page: NDArray[np.intp],
    t: FloatArray,
    out: FloatArray,
    lm: FloatArray,
    n_pages: int,
    host_ids: NDArray[np.intp] | None,
    estimator: ChangeRateEstimator | None,
    policy: LastModifiedPolicy | None,
    created_between: tuple[FloatArray, FloatArray] | None = None,
) -> tuple[ChangeRateEstimator, PageEvidence]:
    """Fit the estimator to clean fetches sorted by (page code, time); ``out`` NaN on each
    page's first fetch, ``lm`` NaN where no Last-Modified, ``host_ids`` [n_pages] or None,
    ``created_between`` the pages' creation windows ([n_pages] each) or None."""
    # the log is checked once here; the builders below skip their own checks
    pages, times = check_fetch_log(page, t)
    intervals = sorted_change_intervals(pages, times, out, n_pages)
    fitted = ChangeRateEstimator() if estimator is None else estimator
    if np.isfinite(lm).any():
        rules = policy or LastModifiedPolicy()
        reliability = assess_sorted_log(pages, times, out, lm, n_pages, host_ids, rules)
        evidence = sorted_last_modified_evidence(
            pages, times, lm, n_pages, rules.clock_tolerance, created_between, rules.max_date_age
        ).believed(reliability.verified)
        fitted.fit(intervals, evidence, reliability.reliable)
        return fitted, PageEvidence(intervals, evidence, reliability.reliable)
    fitted.fit(intervals)
    return fitted, PageEvidence(intervals, None, None)


@dataclass(frozen=True)
class PageEvidence:
    """What the estimates were read from, pages in the estimate's order: the change/no-change
    ``intervals``, the believed Last-Modified evidence and which pages' dates are reliable
    (both None when no fetch had a date)."""

    intervals: ChangeIntervals
    last_modified: LastModifiedEvidence | None
    reliable: NDArray[np.bool_] | None


@dataclass(frozen=True)
class FetchArrayEstimate:
    """Estimates of :func:`estimate_fetch_arrays`, one entry per page, pages in id order.

    ``page`` [n] the page ids; ``rate``, ``rate_low``, ``rate_high`` [n] changes per day;
    ``estimator`` [n] the estimator chosen; ``fetches`` [n] fetches used; ``bucket`` [n];
    ``fitted`` the fitted estimator (its population prior can be handed to the next chunk);
    ``evidence`` what it read (:class:`PageEvidence`).
    """

    page: NDArray[np.int64]
    rate: FloatArray
    rate_low: FloatArray
    rate_high: FloatArray
    estimator: NDArray[np.str_]
    fetches: NDArray[np.int64]
    bucket: NDArray[np.uint8]
    fitted: ChangeRateEstimator
    evidence: PageEvidence


def estimate_fetch_arrays(
    page_id: ArrayLike,
    fetched: ArrayLike,
    changed: ArrayLike,
    last_modified: ArrayLike | None = None,
    host_id: ArrayLike | None = None,
    *,
    now: float | None = None,
    scale: BucketScale | None = None,
    estimator: ChangeRateEstimator | None = None,
    policy: LastModifiedPolicy | None = None,
    created_between: tuple[ArrayLike, ArrayLike] | None = None,
) -> FetchArrayEstimate:
    """The typed fast path of :func:`estimate_fetch_table`, for evidence from the store.

    Parameters
    ----------
    page_id : array_like of int, shape (n,)
        Page of each fetch.
    fetched : array_like of float, shape (n,)
        Fetch time, days on any common axis.
    changed : array_like of float, shape (n,)
        1.0 changed since the page's previous fetch, 0.0 not changed, NaN unknown.
    last_modified : array_like of float, shape (n,), optional
        Last-Modified date, days on the same axis, NaN where none.
    host_id : array_like of int, shape (n,), optional
        Host of each fetch (for the per-host Last-Modified test).
    now : float, optional
        Fetches after it (days) are not used.
    created_between : pair of array_like of float, shape (n,) each, optional
        The window of each fetch's page in which it was created if it is new (days; NaN:
        not known to be new), the same on every fetch of a page: a first Last-Modified in
        it is the page's creation (``LastModifiedEvidence.first_is_creation``).

    The store's rows are clean already; this does what the file interface does to untidy
    rows without the string parsing and line reporting: rows ordered by page then time (a
    stable sort when they are not), fetches after ``now`` dropped, repeats of (page, time)
    counted once, the outcome of each page's first fetch ignored.
    """
    page = np.asarray(page_id, dtype=np.int64)
    t = np.asarray(fetched, dtype=np.float64)
    out = np.array(changed, dtype=np.float64)
    lm = (
        np.full(page.size, np.nan)
        if last_modified is None
        else np.asarray(last_modified, dtype=np.float64)
    )
    host = None if host_id is None else np.asarray(host_id, dtype=np.int64)
    if not (page.shape == t.shape == out.shape == lm.shape) or page.ndim != 1:
        raise ValueError("page_id, fetched, changed and last_modified need one value per fetch")
    window = None
    if created_between is not None:
        window = np.vstack([np.asarray(w, dtype=np.float64) for w in created_between])
        if window.shape != (2, page.size):
            raise ValueError("created_between needs two values per fetch")
    keep = np.isfinite(t) if now is None else np.isfinite(t) & (t <= now)
    if page.size > 1 and np.any(
        (page[1:] < page[:-1]) | ((page[1:] == page[:-1]) & (t[1:] < t[:-1]))
    ):
        order = np.lexsort((t, page))
        page, t, out, lm, keep = page[order], t[order], out[order], lm[order], keep[order]
        host = None if host is None else host[order]
        window = None if window is None else window[:, order]
    repeat = np.zeros(page.size, dtype=bool)
    repeat[1:] = (page[1:] == page[:-1]) & (t[1:] == t[:-1])
    keep &= ~repeat
    if not keep.all():
        page, t, out, lm = page[keep], t[keep], out[keep], lm[keep]
        host = None if host is None else host[keep]
        window = None if window is None else window[:, keep]
    # rows are sorted by page now: a page's code is the number of page starts before it
    first = np.ones(page.size, dtype=bool)
    first[1:] = page[1:] != page[:-1]
    starts = np.flatnonzero(first)
    ids = page[starts]
    codes = np.cumsum(first, dtype=np.intp) - 1
    out[first] = np.nan
    host_ids = None
    if host is not None:
        host_ids = np.unique(host[first], return_inverse=True)[1].astype(np.intp)
    per_page = None if window is None else (window[0, starts], window[1, starts])
    fitted, evidence = _fit(codes, t, out, lm, int(ids.size), host_ids, estimator, policy, per_page)
    rate = np.asarray(fitted.rate_, dtype=np.float64)
    return FetchArrayEstimate(
        page=ids,
        rate=rate,
        rate_low=np.asarray(fitted.rate_low_, dtype=np.float64),
        rate_high=np.asarray(fitted.rate_high_, dtype=np.float64),
        estimator=np.asarray(fitted.estimator_, dtype=np.str_),
        fetches=np.diff(starts, append=page.size).astype(np.int64),
        bucket=(scale or BucketScale()).assign(rate),
        fitted=fitted,
        evidence=evidence,
    )


def estimate_fetch_table(
    table: pd.DataFrame,
    *,
    now: datetime | float | None = None,
    first_line: int = 2,
    scale: BucketScale | None = None,
    estimator: ChangeRateEstimator | None = None,
    policy: LastModifiedPolicy | None = None,
) -> FetchTableEstimate:
    """Estimate the change rate of every page of a fetch table; report bad rows by line.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per fetch; columns as in the module docstring (extra columns are ignored).
    now : datetime or float, optional
        The present (a float is days since 1970-01-01T00:00Z; a naive datetime is UTC).
        Fetches after it are reported and not used; None skips that check.
    first_line : int
        Input line of the table's first row.
    scale : BucketScale, optional
        Bucket configuration; defaults otherwise.
    estimator : ChangeRateEstimator, optional
        Unfitted estimator with the settings to use (a fresh default one otherwise).
    policy : LastModifiedPolicy, optional
        Thresholds of the Last-Modified reliability test.

    Returns
    -------
    FetchTableEstimate

    Raises
    ------
    ValueError
        When a required column is missing (nothing can be estimated then).
    """
    missing = [c for c in _REQUIRED if c not in table.columns]
    if missing:
        raise ValueError(
            f"the fetch table has no column {', '.join(repr(c) for c in missing)}; expected "
            f"columns page, fetched_at, changed and optionally last_modified, host"
        )
    scale = scale or BucketScale()
    problems: list[Problem] = []
    rows = table.reset_index(drop=True)
    read = _read_rows(rows, first_line, _now_days(now), problems)
    # pages in order of first appearance, including pages none of whose rows is usable
    codes, names = pd.factorize(
        read.page_text.where(~pd.Series(read.bad_page)), use_na_sentinel=True
    )
    n_pages = len(names)
    frame = pd.DataFrame(
        {
            "code": codes,
            "t": read.fetched,
            "outcome": read.outcome,
            "lm": read.modified,
            "line": read.line,
            "pos": np.arange(len(rows)),
            "reported": read.bad_changed,  # outcome already reported as unknown
        }
    )[read.usable]
    frame = _one_fetch_per_time(_sorted_by_time(frame, problems), problems)
    page = frame["code"].to_numpy(dtype=np.intp)
    t = frame["t"].to_numpy(dtype=np.float64)
    out = _interval_outcomes(frame, problems)
    lm = frame["lm"].to_numpy(dtype=np.float64)
    host_ids = None
    if "host" in rows.columns and np.isfinite(lm).any():
        host_ids = _page_hosts(codes, rows["host"].astype("string"), n_pages)
    fitted, _ = _fit(page, t, out, lm, n_pages, host_ids, estimator, policy)

    result = pd.DataFrame(
        {
            "page": pd.Series(names, dtype="string"),
            "rate": fitted.rate_,
            "rate_low": fitted.rate_low_,
            "rate_high": fitted.rate_high_,
            "estimator": pd.Series(fitted.estimator_).astype("string"),
            "fetches": np.bincount(page, minlength=n_pages).astype(np.int64),
            "bucket": scale.assign(fitted.rate_),
        },
        columns=list(OUTPUT_COLUMNS),
    )
    return FetchTableEstimate(result, tuple(problems), fitted)


@dataclass(frozen=True)
class _ReadRows:
    """The table's columns parsed, one entry per input row, and which rows are usable."""

    line: NDArray[np.int64]
    page_text: pd.Series
    bad_page: BoolArray
    fetched: FloatArray
    outcome: FloatArray
    bad_changed: BoolArray
    modified: FloatArray
    usable: BoolArray


def _read_rows(
    rows: pd.DataFrame, first_line: int, now_days: float | None, problems: list[Problem]
) -> _ReadRows:
    """Parse every column; rows with no page, no readable time or a time after ``now`` are
    not usable. Each kind of bad value is appended to ``problems`` with its lines."""
    line = np.arange(len(rows), dtype=np.int64) + first_line
    page_text = rows["page"].astype("string").str.strip()
    bad_page = (page_text.isna() | (page_text == "")).to_numpy(dtype=bool, na_value=True)
    if bad_page.any():
        problems.append(_problem("bad_page", line[bad_page], "no page; rows not used"))

    fetched, _ = _to_days(rows["fetched_at"])
    unreadable = np.isnan(fetched) & ~bad_page
    if unreadable.any():
        problems.append(
            _problem(
                "bad_fetched_at",
                line[unreadable],
                "fetched_at is empty or not an ISO-8601 timestamp or a number of days; "
                "rows not used",
            )
        )
    usable = ~bad_page & ~np.isnan(fetched)
    if now_days is not None:
        future = usable & (fetched > now_days)
        if future.any():
            problems.append(
                _problem("future", line[future], "fetched_at is after now; rows not used")
            )
            usable &= ~future

    outcome, bad_changed = _to_outcome(rows["changed"])
    if (bad_changed & usable).any():
        shown = sorted({str(v) for v in rows["changed"][bad_changed & usable]})[:5]
        problems.append(
            _problem(
                "bad_changed",
                line[bad_changed & usable],
                f"changed must be 1, 0 or empty, got {', '.join(repr(v) for v in shown)}; "
                "the fetch is used, the interval ending at it is not",
            )
        )

    modified = np.full(len(rows), np.nan)
    if "last_modified" in rows.columns:
        modified, bad_lm = _to_days(rows["last_modified"])
        if (bad_lm & usable).any():
            problems.append(
                _problem(
                    "bad_last_modified",
                    line[bad_lm & usable],
                    "last_modified is not an ISO-8601 timestamp or a number of days; "
                    "treated as absent",
                )
            )
    return _ReadRows(line, page_text, bad_page, fetched, outcome, bad_changed, modified, usable)


def _sorted_by_time(frame: pd.DataFrame, problems: list[Problem]) -> pd.DataFrame:
    """The usable rows sorted by page and time; a row earlier in time than a row above it of
    the same page is reported, as ``changed`` is read as since the previous fetch in time."""
    running_max = frame.groupby("code")["t"].cummax()
    late = frame["t"].to_numpy() < running_max.to_numpy()
    if late.any():
        problems.append(
            _problem(
                "unsorted",
                frame["line"].to_numpy()[late],
                "fetched_at is earlier than a previous row of the same page; rows sorted by "
                "time (changed is read as since the previous fetch in time)",
            )
        )
    return frame.sort_values(["code", "t", "pos"], kind="stable")


def _one_fetch_per_time(frame: pd.DataFrame, problems: list[Problem]) -> pd.DataFrame:
    """One row per (page, time): an exact repeat counts once; rows that disagree keep the
    fetch with an unknown outcome and no Last-Modified."""
    key_dup = frame.duplicated(["code", "t"], keep="first").to_numpy()
    if not key_dup.any():
        return frame
    same = frame.duplicated(["code", "t", "outcome", "lm"], keep="first").to_numpy()
    exact = key_dup & same
    if exact.any():
        problems.append(
            _problem(
                "duplicate",
                frame["line"].to_numpy()[exact],
                "repeat an earlier row of the same page and fetched_at; counted once",
            )
        )
    clash_keys = frame.loc[key_dup & ~same, ["code", "t"]]
    if len(clash_keys):
        in_clash = frame.set_index(["code", "t"]).index.isin(pd.MultiIndex.from_frame(clash_keys))
        problems.append(
            _problem(
                "conflict",
                frame["line"].to_numpy()[in_clash],
                "rows of the same page and fetched_at disagree on changed or "
                "last_modified; the fetch is kept with both unknown",
            )
        )
        frame = frame.copy()
        frame.loc[in_clash, ["outcome", "lm"]] = np.nan
        frame.loc[in_clash, "reported"] = True
    return frame[~key_dup]


def _interval_outcomes(frame: pd.DataFrame, problems: list[Problem]) -> FloatArray:
    """Each fetch's outcome (1 changed, 0 not, NaN unknown), NaN on a page's first fetch:
    there is no interval before it. Outcomes given there, and unknown outcomes on later
    fetches not reported yet, are reported."""
    page = frame["code"].to_numpy(dtype=np.intp)
    out = frame["outcome"].to_numpy(dtype=np.float64, copy=True)
    first = np.ones(page.size, dtype=np.bool_)
    first[1:] = page[1:] != page[:-1]
    given_first = first & ~np.isnan(out)
    if given_first.any():
        problems.append(
            _problem(
                "changed_on_first_fetch",
                frame["line"].to_numpy()[given_first],
                "changed given on a page's first fetch is ignored: no earlier fetch to "
                "measure an interval from",
            )
        )
    out[first] = np.nan
    lost = ~first & np.isnan(out) & ~frame["reported"].to_numpy(dtype=bool)
    if lost.any():
        problems.append(
            _problem(
                "unknown_changed",
                frame["line"].to_numpy()[lost],
                "changed is empty on a fetch that is not the page's first; the interval "
                "ending there is not used",
            )
        )
    return out


def _page_hosts(codes: NDArray[np.intp], host_text: pd.Series, n_pages: int) -> NDArray[np.intp]:
    """Each page's host id (its first row's host; pages with none share the id of "")."""
    first_host = (
        pd.DataFrame({"code": codes, "host": host_text})[codes >= 0]
        .drop_duplicates("code")
        .set_index("code")["host"]
        .reindex(range(n_pages))
    )
    host_ids, _ = pd.factorize(first_host.fillna(""))
    return host_ids
