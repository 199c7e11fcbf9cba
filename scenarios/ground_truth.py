"""Scoring a crawl against the synthetic web's ground truth: logs and flags in, counts out."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scenarios.synthetic_web import SyntheticWeb

__all__ = [
    "ChangeDetection",
    "repository_freshness",
    "score_change_detection",
    "smallest_gaps",
    "time_averaged_freshness",
]


@dataclass(frozen=True)
class ChangeDetection:
    """How a crawler's change flags compare with what really happened between its visits."""

    revisits: int
    real_changes: int
    detected: int
    missed: int
    false_alarms: int


def score_change_detection(
    web: SyntheticWeb,
    served: Mapping[int, Sequence[float]],
    observed: Mapping[int, Sequence[bool | None]],
) -> ChangeDetection:
    """Compare change flags with the truth.

    ``served[page]`` are the server times (s) at which the page was served (200 or 304),
    in order; ``observed[page]`` the crawler's ``changed`` flags for the same fetches, in the
    same order (the first is usually None: nothing to compare with).
    """
    revisits = real = detected = missed = false = 0
    for page, times in served.items():
        flags = observed.get(page, [])
        for (t0, t1), flag in zip(itertools.pairwise(times), flags[1:], strict=False):
            truth = web.version(page, t1) != web.version(page, t0)
            revisits += 1
            real += truth
            detected += bool(truth and flag)
            missed += bool(truth and not flag)
            false += bool(flag and not truth)
    return ChangeDetection(revisits, real, detected, missed, false)


def smallest_gaps(times_by_host: Mapping[int, Sequence[float]]) -> dict[int, float]:
    """The smallest gap (s) between two consecutive requests to each host."""
    return {
        host: min(b - a for a, b in itertools.pairwise(times))
        for host, times in times_by_host.items()
        if len(times) > 1
    }


def repository_freshness(web: SyntheticWeb, fetched_at: Mapping[int, float], t: float) -> float:
    """Share of the web's live pages whose stored copy is current at time ``t`` (seconds).

    ``fetched_at[page]`` is when the repository's copy of a page was fetched (its latest
    successful fetch); a page never fetched is not fresh. A copy is current when the page has
    not changed since (Cho & Garcia-Molina's freshness, averaged over the repository).
    """
    alive = [p for p in range(web.n_pages) if web.alive(p, t)]
    if not alive:
        return 1.0
    fresh = sum(
        1 for p in alive if p in fetched_at and web.version(p, fetched_at[p]) == web.version(p, t)
    )
    return fresh / len(alive)


def time_averaged_freshness(
    web: SyntheticWeb, served: Mapping[int, Sequence[float]], start: float, end: float
) -> float:
    """The repository's freshness averaged over the time from ``start`` to ``end`` (seconds
    since the web's epoch), exactly: the integral over that time of the live pages whose copy
    is current, over the integral of the live pages.

    ``served[page]`` are the server times (s) at which the page was served (200 or 304): from
    each on the crawler holds the version of that moment, until the page changes
    or is served again. A page never served before a moment is not fresh at it.

    Why not the mean of freshness samples: samples see each copy at one moment of its
    period only, while the references computed from the true rates
    (:func:`scenarios.demo_report.periodic_freshness`) are time averages, and so is the
    issue's scoring; this is the same measure, exactly.
    """
    if end <= start:
        raise ValueError(f"the window must have end > start, got {start} .. {end}")
    lo = np.maximum(web.born, start)
    hi = np.minimum(web.dies, end)
    exposure = float(np.clip(hi - lo, 0.0, None).sum())
    if exposure <= 0:
        return 1.0
    fresh = 0.0
    for page, times in served.items():
        if not len(times) or lo[page] >= hi[page]:
            continue
        at = np.sort(np.asarray(times, dtype=float))
        changes = web.change_times(page)
        following = np.searchsorted(changes, at, side="right")
        stale_from = np.append(changes, np.inf)[following]
        until = np.minimum(np.append(at[1:], np.inf), stale_from)
        span = np.minimum(until, hi[page]) - np.maximum(at, lo[page])
        fresh += float(span[span > 0].sum())
    return fresh / exposure
