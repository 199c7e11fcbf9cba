"""Per-page interval bounds from per-host and per-URL-pattern rules (pure: stdlib and numpy).

``crawlplan schedule --hosts FILE --bounds FILE`` gives minimum and maximum refresh intervals
(periods) per host and per URL pattern; :func:`page_bounds` turns them into the per-page
arrays :func:`planner.schedules.optimal.refresh_schedule` takes.

Patterns are shell-style globs matched against the whole page URL, case-sensitively:
``*`` matches any run of characters (``/`` included), ``?`` one character, and every other
character only itself (no ``[...]`` classes, so URLs with brackets need no escaping). Rules
are tried in the order they are given; the **first** pattern that matches a page wins.

Per column, a page's pattern rule overrides its host's rule (the more specific one wins);
an empty value (NaN) in a rule leaves that column to the host rule, or unbounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["first_match", "glob_regex", "page_bounds"]


def glob_regex(pattern: str) -> str:
    """The regular expression (no groups) for one glob: ``*`` any run, ``?`` one character."""
    parts = []
    for char in pattern:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return "".join(parts)


def first_match(urls: Iterable[str], patterns: Sequence[str]) -> np.ndarray:
    """Index of the first pattern matching each whole URL (int64, -1 where none matches).

    All patterns are compiled into one alternation of capturing groups, tried left to right
    by :meth:`re.Pattern.fullmatch`, so the first glob that matches the whole URL is the
    group that closes: one regex call per URL whatever the number of patterns.
    """
    if not patterns:
        return np.full(sum(1 for _ in urls), -1, np.int64)
    rx = re.compile("|".join(f"({glob_regex(p)})" for p in patterns), re.DOTALL)
    match = rx.fullmatch
    found = [(m.lastindex or 0) if (m := match(url)) else 0 for url in urls]
    return np.asarray(found, dtype=np.int64) - 1


def page_bounds(
    n_pages: int,
    *,
    host: np.ndarray | None = None,
    host_min: np.ndarray | None = None,
    host_max: np.ndarray | None = None,
    rule: np.ndarray | None = None,
    rule_min: np.ndarray | None = None,
    rule_max: np.ndarray | None = None,
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-page (min_interval, max_interval) in periods, NaN where unbounded (None: no column).

    ``host`` (n,) is each page's host index (-1: none) into ``host_min``/``host_max`` (H,);
    ``rule`` (n,) each page's first matching pattern (-1: none) into ``rule_min``/``rule_max``
    (P,). A rule's value, where not NaN, overrides the host's.
    """

    def column(host_values: np.ndarray | None, rule_values: np.ndarray | None) -> np.ndarray | None:
        if host_values is None and rule_values is None:
            return None
        out = np.full(n_pages, np.nan)
        if host is not None and host_values is not None:
            on = host >= 0
            out[on] = host_values[host[on]]
        if rule is not None and rule_values is not None:
            on = rule >= 0
            given = np.zeros(n_pages, bool)
            given[on] = ~np.isnan(rule_values[rule[on]])
            out[given] = rule_values[rule[given]]
        if np.isnan(out).all():
            return None
        return out

    return column(host_min, rule_min), column(host_max, rule_max)
