"""The files of ``crawlplan schedule``: pages, hosts and bounds tables in, a schedule out (edge).

Reads and validates the tables (CSV or Parquet), resolves each page's host and interval
bounds, and describes the :class:`~planner.schedules.optimal.Schedule` that
:func:`~planner.schedules.optimal.refresh_schedule` returns. Every mistake in a file becomes an
:class:`~service.errors.InputFileError` naming the file, the line (CSV, header = line 1) or
row (Parquet, first row = row 1), the column and what to do, so the CLI prints one line.

Tables (see docs/schedules.md):

* pages: ``page``, ``rate`` (changes per period), optional ``importance`` (>= 0) and ``host``;
* hosts: ``host``, ``capacity`` (crawls per period; empty or ``inf``: no limit), optional
  ``min_interval``, ``max_interval`` (periods; empty: none) for every page of the host;
* bounds: ``pattern`` (a glob on the page URL, see
  :mod:`planner.schedules.interval_bounds`), optional
  ``min_interval``, ``max_interval``; the first matching pattern wins and overrides the host.

Hosts are matched by name. Without a ``host`` column they are the origins of the page URLs
(``scheme://host[:port]``, normalized as :func:`crawler.urls.normalize_url` does); names in
either file that contain ``://`` are normalized the same way, others are compared verbatim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from crawler.urls import InvalidURLError, normalize_url, origin_of
from planner.schedules.interval_bounds import first_match, page_bounds
from planner.schedules.optimal import Schedule
from service.errors import InputFileError
from service.files import read_table

__all__ = [
    "ScheduleInputs",
    "describe_schedule",
    "read_schedule_inputs",
    "schedule_table",
]

#: What ``value`` measures, per objective, for the summary line.
VALUE_MEANING = {
    "obsolescence": "total obsolescence: importance-weighted changes not yet seen",
    "freshness": "mean freshness",
    "harmonic": "total harmonic staleness",
    "binary": "mean binary freshness",
}
_LISTED = 5  # binding hosts named in the summary
_WARNED = 20  # over-committed hosts named one per line


@dataclass(frozen=True)
class _Where:
    """A table file and how to name its rows: CSV line numbers, or Parquet row numbers."""

    path: Path

    @property
    def is_csv(self) -> bool:
        return self.path.suffix.lower() == ".csv"

    def row(self, k: int) -> str:
        return f"line {k + 2}" if self.is_csv else f"row {k + 1}"

    def rows(self, a: int, b: int) -> str:
        return f"lines {a + 2} and {b + 2}" if self.is_csv else f"rows {a + 1} and {b + 1}"


@dataclass(frozen=True)
class ScheduleInputs:
    """Everything :func:`~planner.schedules.optimal.refresh_schedule` needs, read from the files.

    ``host`` is each page's index into ``host_names`` (None without a hosts file); ``label``
    the host name written to the output (None when the pages have none and no hosts file).
    """

    page: np.ndarray
    rate: np.ndarray
    importance: np.ndarray | None
    label: np.ndarray | None
    host: np.ndarray | None
    host_names: list[str]
    capacity: np.ndarray | None
    min_interval: np.ndarray | None
    max_interval: np.ndarray | None


def read_schedule_inputs(
    pages_path: Path, hosts_path: Path | None = None, bounds_path: Path | None = None
) -> ScheduleInputs:
    """Read and check the pages, hosts and bounds tables; raise InputFileError on a mistake."""
    where = _Where(pages_path)
    table = read_table(pages_path)
    _require(table, where, ("page", "rate"), "page, rate and optionally importance, host")
    page = _names(table["page"], where, "page", "one row per page, named by its URL")
    _no_duplicates(page, where, "page", "keep one row per page")
    rate = _numbers(
        table["rate"],
        where,
        "rate",
        "rates are changes per period, finite and >= 0 (a page without an estimate has "
        "nothing to schedule: drop it or give it a prior rate)",
    )
    importance = None
    if "importance" in table.columns:
        importance = _numbers(
            table["importance"],
            where,
            "importance",
            "importance must be finite and >= 0 (leave the column out for equal importance)",
        )

    label: np.ndarray | None = None
    if "host" in table.columns:
        label = _host_keys(
            _names(table["host"], where, "host", "name each page's host or drop the column"),
            where,
            "host",
        )
    host = capacity = host_min = host_max = None
    host_names: list[str] = []
    if hosts_path is not None:
        hosts = _read_hosts(hosts_path)
        host_names = hosts.names
        capacity, host_min, host_max = hosts.capacity, hosts.min_interval, hosts.max_interval
        if label is None:
            label = _origins(page, where)
        host = _host_codes(label, where, hosts.names, hosts_path)

    rule = rule_min = rule_max = None
    patterns: list[str] = []
    if bounds_path is not None:
        patterns, rule_min, rule_max = _read_bounds(bounds_path)
        rule = first_match(page.tolist(), patterns)
    shortest, longest = page_bounds(
        page.shape[0],
        host=host,
        host_min=host_min,
        host_max=host_max,
        rule=rule,
        rule_min=rule_min,
        rule_max=rule_max,
    )
    if shortest is not None and longest is not None:
        _bounds_agree(
            shortest,
            longest,
            page,
            where,
            hosts=(host, host_names, hosts_path),
            rules=(rule, patterns, bounds_path),
        )
    return ScheduleInputs(
        page=page,
        rate=rate,
        importance=importance,
        label=label,
        host=host,
        host_names=host_names,
        capacity=capacity,
        min_interval=shortest,
        max_interval=longest,
    )


def _bounds_agree(
    shortest: np.ndarray,
    longest: np.ndarray,
    page: np.ndarray,
    where: _Where,
    *,
    hosts: tuple[np.ndarray | None, list[str], Path | None],
    rules: tuple[np.ndarray | None, list[str], Path | None],
) -> None:
    """Raise InputFileError naming the first page whose min_interval exceeds its
    max_interval, and the host and pattern rows the two bounds came from.

    ``shortest``, ``longest``: per page, shape (n_pages,), periods. ``hosts`` and ``rules``:
    each page's host code and bounds pattern index (-1: none), their names, their file.
    """
    clash = shortest > longest
    if not clash.any():
        return
    host, host_names, hosts_path = hosts
    rule, patterns, bounds_path = rules
    k = int(np.flatnonzero(clash)[0])
    sources = []
    if host is not None and host[k] >= 0:
        sources.append(f"host {host_names[host[k]]!r} in {hosts_path}")
    if rule is not None and rule[k] >= 0:
        sources.append(f"pattern {patterns[rule[k]]!r} in {bounds_path}")
    raise InputFileError(
        f"{where.path} {where.row(k)}: page {page[k]!r} gets min_interval "
        f"{shortest[k]:g} > max_interval {longest[k]:g} (from {' and '.join(sources)})"
        f"{_more(int(clash.sum()), 'pages')}; fix those bounds"
    )


def schedule_table(inputs: ScheduleInputs, schedule: Schedule) -> pd.DataFrame:
    """One row per page: page, refresh_rate (crawls/period), interval (periods; inf: never),
    and host when the pages have one."""
    columns: dict[str, object] = {
        "page": inputs.page,
        "refresh_rate": schedule.refresh_rate,
        "interval": schedule.interval,
    }
    if inputs.label is not None:
        columns["host"] = inputs.label
    return pd.DataFrame(columns)


def describe_schedule(
    inputs: ScheduleInputs, schedule: Schedule, out_path: Path
) -> tuple[str, list[str]]:
    """The one-line summary, and one warning line per over-committed host (capped)."""
    n = schedule.refresh_rate.shape[0]
    parts = [
        f"scheduled {n:,} pages ({schedule.objective}): bandwidth "
        f"{_amount(schedule.bandwidth)} crawls/period"
        + (f" ({_amount(schedule.discovery)} kept for discovery)" if schedule.discovery else "")
        + f", spent {_amount(schedule.spent)}, multiplier {schedule.multiplier:.4g}, value "
        f"{schedule.value:.6g} ({VALUE_MEANING[schedule.objective]})"
    ]
    never = int((schedule.refresh_rate == 0).sum())
    if never:
        parts.append(f"{never:,} never refreshed (interval inf)")
    if schedule.unspent > 1e-9 * schedule.bandwidth:
        parts.append(
            f"unspent {_amount(schedule.unspent)} crawls/period (min intervals and host "
            "capacities leave it unused)"
        )
    if inputs.host is not None:
        nu = schedule.host_multiplier
        binding = np.flatnonzero((nu > 0) & np.isfinite(nu))
        order = binding[np.argsort(-nu[binding], kind="stable")]
        text = f"{order.size:,} of {len(inputs.host_names):,} hosts bind"
        if order.size:
            named = ", ".join(f"{inputs.host_names[h]} (nu {nu[h]:.4g})" for h in order[:_LISTED])
            text += f": {named}" + (
                f", ... {order.size - _LISTED:,} more" if order.size > _LISTED else ""
            )
        parts.append(text)
    over, need = _overcommitted(inputs, schedule)
    if over.size:
        parts.append(f"{over.size:,} hosts over-committed (see warnings)")
    parts.append(f"written to {out_path}")
    return "; ".join(parts), _overcommitted_warnings(inputs, schedule, over, need)


def _overcommitted(inputs: ScheduleInputs, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Over-committed hosts that hold pages worth a crawl or with max intervals, and what
    those max intervals require of each host (crawls per period).

    :func:`~planner.schedules.optimal.refresh_schedule` also lists hosts of capacity 0 whose pages
    need nothing (none, or none that change); they lose nothing, so they are not reported.
    """
    n_hosts = len(inputs.host_names)
    if inputs.host is None or not schedule.overcommitted_hosts.size:
        return np.zeros(0, np.int64), np.zeros(n_hosts)
    on = inputs.host >= 0
    codes = inputs.host[on]
    need: np.ndarray = np.zeros(n_hosts)
    if inputs.max_interval is not None:
        with np.errstate(divide="ignore"):
            floor = np.where(np.isnan(inputs.max_interval), 0.0, 1.0 / inputs.max_interval)
        need = np.bincount(codes, weights=floor[on], minlength=n_hosts)
    worth = inputs.rate[on] > 0
    if inputs.importance is not None:
        worth &= inputs.importance[on] > 0
    wanted = (need > 0) | (np.bincount(codes, weights=worth, minlength=n_hosts) > 0)
    over = schedule.overcommitted_hosts
    return over[wanted[over]], need


def _overcommitted_warnings(
    inputs: ScheduleInputs, schedule: Schedule, over: np.ndarray, need: np.ndarray
) -> list[str]:
    lines = []
    for h in over[:_WARNED]:
        name, cap = inputs.host_names[h], float(schedule.host_capacity[h])
        if need[h] > 0 and cap > 0:
            lines.append(
                f"warning: host {name}: capacity {cap:g} crawls/period is below the "
                f"{need[h]:.6g} its pages' max intervals require; they are crawled at "
                f"{cap / need[h]:.3g} of their minimum rates (max intervals x{need[h] / cap:.3g})"
            )
        else:
            lines.append(f"warning: host {name}: capacity {cap:g}: its pages are never refreshed")
    if over.size > _WARNED:
        lines.append(f"warning: ... and {over.size - _WARNED:,} more over-committed hosts")
    return lines


# -- hosts and bounds files ------------------------------------------------------------------


@dataclass(frozen=True)
class _Hosts:
    names: list[str]
    capacity: np.ndarray
    min_interval: np.ndarray | None
    max_interval: np.ndarray | None


def _read_hosts(path: Path) -> _Hosts:
    where = _Where(path)
    table = read_table(path)
    expected = "host, capacity and optionally min_interval, max_interval"
    _require(table, where, ("host", "capacity"), expected)
    names = _host_keys(_names(table["host"], where, "host", "one row per host"), where, "host")
    _no_duplicates(names, where, "host", "keep one row per host")
    capacity = _numbers(
        table["capacity"],
        where,
        "capacity",
        "capacity is crawls per period, >= 0 (empty or inf: no limit)",
        empty=math.inf,
        allow_inf=True,
    )
    shortest, longest = _interval_columns(table, where)
    return _Hosts(names.tolist(), capacity, shortest, longest)


def _read_bounds(path: Path) -> tuple[list[str], np.ndarray | None, np.ndarray | None]:
    where = _Where(path)
    table = read_table(path)
    _require(table, where, ("pattern",), "pattern and min_interval and/or max_interval")
    if "min_interval" not in table.columns and "max_interval" not in table.columns:
        raise InputFileError(
            f"{path}: no min_interval or max_interval column; expected pattern and "
            "min_interval and/or max_interval"
        )
    patterns = _names(table["pattern"], where, "pattern", "one glob per row (* and ?)")
    _no_duplicates(patterns, where, "pattern", "keep one row per pattern")
    shortest, longest = _interval_columns(table, where)
    return patterns.tolist(), shortest, longest


def _interval_columns(
    table: pd.DataFrame, where: _Where
) -> tuple[np.ndarray | None, np.ndarray | None]:
    found: list[np.ndarray | None] = []
    for column in ("min_interval", "max_interval"):
        if column not in table.columns:
            found.append(None)
            continue
        found.append(
            _numbers(
                table[column],
                where,
                column,
                f"{column} is in periods, > 0 (empty: no bound)",
                empty=math.nan,
                allow_inf=True,
                positive=True,
            )
        )
    shortest, longest = found
    if shortest is not None and longest is not None:
        clash = shortest > longest
        if clash.any():
            k = int(np.flatnonzero(clash)[0])
            raise InputFileError(
                f"{where.path} {where.row(k)}: min_interval {shortest[k]:g} > max_interval "
                f"{longest[k]:g}{_more(int(clash.sum()), 'rows')}; swap or fix them"
            )
    return shortest, longest


# -- hosts of pages --------------------------------------------------------------------------


def _canonical_origin(text: str) -> str:
    """``scheme://host[:port]`` as the crawler stores it; raises InvalidURLError."""
    return origin_of(normalize_url(text.rstrip("/") + "/"))


def _host_keys(values: np.ndarray, where: _Where, column: str) -> np.ndarray:
    """Host names as compared: origins (``://``) normalized, other names verbatim."""
    codes, uniques = pd.factorize(values)
    keys = []
    for u in uniques.tolist():
        if "://" not in u:
            keys.append(u)
            continue
        try:
            keys.append(_canonical_origin(u))
        except InvalidURLError as error:
            k = int(np.flatnonzero(codes == len(keys))[0])
            raise InputFileError(
                f"{where.path} {where.row(k)}: {column} {u!r} is not a valid origin ({error}); "
                "write scheme://host[:port]"
            ) from None
    return np.asarray(keys, dtype=object)[codes]


_ORIGIN = r"^\s*([A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*)"


def _origins(page: np.ndarray, where: _Where) -> np.ndarray:
    """Each page URL's normalized origin (the host of politeness)."""
    prefix = pd.Series(page, dtype=object).str.extract(_ORIGIN, expand=False)
    missing = prefix.isna().to_numpy()
    if missing.any():
        k = int(np.flatnonzero(missing)[0])
        raise InputFileError(
            f"{where.path} {where.row(k)}: cannot tell the host of page {page[k]!r} (not a "
            f"URL with a scheme){_more(int(missing.sum()), 'pages')}; add a host column"
        )
    return _host_keys(prefix.to_numpy(dtype=object), where, "page")


def _host_codes(label: np.ndarray, where: _Where, names: list[str], hosts_path: Path) -> np.ndarray:
    index = pd.Index(names)
    codes = np.asarray(index.get_indexer(pd.Index(label)), dtype=np.int64)
    unknown = codes < 0
    if unknown.any():
        k = int(np.flatnonzero(unknown)[0])
        others = int(pd.unique(label[unknown]).shape[0]) - 1
        also = f" (and {others:,} more such hosts)" if others else ""
        raise InputFileError(
            f"{where.path} {where.row(k)}: host {label[k]!r} is not in {hosts_path}{also}; "
            "add a row for it with its capacity"
        )
    return codes


# -- columns ---------------------------------------------------------------------------------


def _require(table: pd.DataFrame, where: _Where, columns: tuple[str, ...], expected: str) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputFileError(
            f"{where.path}: missing column(s) {', '.join(missing)}; expected {expected}"
        )


def _names(column: pd.Series, where: _Where, name: str, fix: str) -> np.ndarray:
    """Stripped non-empty text values (object array)."""
    text = column.astype("string").str.strip()
    empty = (text.isna() | (text == "")).to_numpy()
    if empty.any():
        k = int(np.flatnonzero(empty)[0])
        raise InputFileError(
            f"{where.path} {where.row(k)}: empty {name}{_more(int(empty.sum()), 'rows')}; {fix}"
        )
    return text.to_numpy(dtype=object)


def _no_duplicates(values: np.ndarray, where: _Where, name: str, fix: str) -> None:
    repeated = pd.Series(values).duplicated(keep=False).to_numpy()
    if repeated.any():
        rows = np.flatnonzero(repeated)
        k = int(rows[0])
        twin = int(rows[1:][values[rows[1:]] == values[k]][0])
        count = int(pd.Series(values[rows]).nunique())
        raise InputFileError(
            f"{where.path} {where.rows(k, twin)}: {name} {values[k]!r} appears more than once"
            f"{_more(count, f'{name}s')}; {fix}"
        )


def _numbers(
    column: pd.Series,
    where: _Where,
    name: str,
    fix: str,
    *,
    empty: float | None = None,
    allow_inf: bool = False,
    positive: bool = False,
) -> np.ndarray:
    """The column as float64; empty cells become ``empty`` (an error when None)."""
    if pd.api.types.is_numeric_dtype(column.dtype) and not pd.api.types.is_bool_dtype(column.dtype):
        values = column.to_numpy(dtype=float, na_value=np.nan, copy=True)
        blank = np.isnan(values)
        shown = column
    else:
        text = column.astype("string").str.strip()
        blank = (text.isna() | (text == "")).to_numpy()
        values = pd.to_numeric(text.mask(blank), errors="coerce").to_numpy(
            dtype=float, na_value=np.nan
        )
        shown = text
    problems = []
    if empty is None:
        problems.append((blank, "is empty"))
    problems.append((np.isnan(values) & ~blank, "is not a number"))
    if not allow_inf:
        problems.append((np.isinf(values), "is not finite"))
    problems.append(
        ((values <= 0) if positive else (values < 0), "is not > 0" if positive else "is negative")
    )
    for bad, what in problems:
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            value = "" if blank[k] else f" {shown.iloc[k]!s}"
            raise InputFileError(
                f"{where.path} {where.row(k)}: {name}{value} {what}"
                f"{_more(int(bad.sum()), 'rows')}; {fix}"
            )
    if empty is not None and blank.any():
        values[blank] = empty
    return values


def _more(count: int, what: str) -> str:
    return f" ({count - 1:,} more {what} like it)" if count > 1 else ""


def _amount(x: float) -> str:
    if math.isinf(x) or math.isnan(x):
        return str(x)
    if abs(x) >= 100 or x == round(x):
        return f"{x:,.0f}"
    return f"{x:.4g}"
