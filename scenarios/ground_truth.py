"""Scoring a crawl against the synthetic web's ground truth: logs and flags in, counts out."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scenarios.synthetic_web import SyntheticWeb

__all__ = [
    "ChangeDetection",
    "match_fetches",
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
    web: SyntheticWeb, fetches: Mapping[int, Sequence[tuple[float, bool | None]]]
) -> ChangeDetection:
    """Compare change flags with the truth.

    ``fetches[page]`` are the crawler's recorded fetches of the page that the server
    answered (200 or 304), in order: each the server time (s) at which it was served and the
    crawler's ``changed`` flag (the first usually None: nothing to compare with). A flag
    compares the page with the crawler's previous stored copy, so the truth is whether the
    page changed between the two recorded fetches, whatever the server answered in between
    that the crawler did not record (see :func:`match_fetches`).
    """
    revisits = real = detected = missed = false = 0
    for page, recorded in fetches.items():
        for (t0, _), (t1, flag) in itertools.pairwise(recorded):
            truth = web.version(page, t1) != web.version(page, t0)
            revisits += 1
            real += truth
            detected += bool(truth and flag)
            missed += bool(truth and not flag)
            false += bool(flag and not truth)
    return ChangeDetection(revisits, real, detected, missed, false)


def match_fetches(
    served: Mapping[int, Sequence[float]],
    recorded: Mapping[int, Sequence[tuple[float, bool | None]]],
    *,
    slack: float = 0.5,
    within: float = 60.0,
) -> dict[int, list[tuple[float, bool | None]]]:
    """The server time of each fetch the crawler recorded, from the server's own log.

    ``served[page]``: the server times (s) at which the server answered the page, ascending.
    ``recorded[page]``: the crawler's successful fetches of it, ascending, each the time
    (s, on the server's clock) the crawler started it and its ``changed`` flag. Each fetch is
    matched to the first answer not yet matched at or after its start, less ``slack`` (the
    two clocks' disagreement), and no later than ``within`` after it; a fetch with none is
    left out. Returns ``page -> [(served time, flag), ...]``.

    Why not pair them in order: an answer the crawler never recorded (a read timeout after
    the server logged its 200, a report lost with its worker) would shift every later pair,
    and a flag would be scored against the wrong interval, as a false alarm or a miss.
    """
    out: dict[int, list[tuple[float, bool | None]]] = {}
    for page, fetches in recorded.items():
        times = np.asarray(served.get(page, ()), dtype=float)
        next_free = 0
        matched: list[tuple[float, bool | None]] = []
        for start, flag in fetches:
            i = max(next_free, int(np.searchsorted(times, start - slack, side="left")))
            if i < len(times) and times[i] <= start + within:
                matched.append((float(times[i]), flag))
                next_free = i + 1
        if matched:
            out[page] = matched
    return out


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
