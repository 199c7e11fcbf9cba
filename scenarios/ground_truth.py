"""Scoring a crawl against the synthetic web's ground truth: logs and flags in, counts out."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scenarios.synthetic_web import SyntheticWeb

__all__ = ["ChangeDetection", "repository_freshness", "score_change_detection", "smallest_gaps"]


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
