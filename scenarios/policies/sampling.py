"""Sampling-based refresh (Cho & Ntoulas, VLDB 2002; Taleghani & Ugur-Ozekinci): per group.

Pages are grouped by host (``group = "host"``, Cho & Ntoulas's sites) or by site section
(``group = "section"``, the seed paper's correlated groups, with sections standing in for
topics). Every ``cycle`` periods the policy

1. samples about ``sqrt(size)`` pages of each group (the stalest first), scaled down so that
   samples take at most ``sample_share`` of the cycle's crawls;
2. once the samples are back, ranks groups by their ChangeRatio (changed samples over
   samples) and spends the rest of the cycle greedily: every page of the group with the
   highest ratio (stalest first), then the next group, and so on; a group whose pages have all
   been crawled this cycle is done. Cho & Ntoulas found greedy beats proportional allocation.

Crawls left over (samples still out, every group done) go to the pages fetched longest ago.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from scenarios.policies.base import Policy, PolicyError, overdue_priority, top_pages
from scenarios.simulator import CrawlLog, Observations

__all__ = ["SamplingPolicy"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class SamplingPolicy(Policy):
    """Greedy sampling-based refresh per host or per section (module docstring)."""

    def __init__(
        self, name: str, *, group: str = "host", cycle: int = 7, sample_share: float = 0.2
    ) -> None:
        if group not in ("host", "section"):
            raise PolicyError(f"group: use 'host' or 'section', got {group!r}")
        if cycle < 1:
            raise PolicyError(f"cycle: give at least 1 period, got {cycle!r}")
        if not 0 < sample_share < 1:
            raise PolicyError(f"sample_share: give a share in (0, 1), got {sample_share!r}")
        self.name = name
        self.group = group
        self.cycle = cycle
        self.sample_share = sample_share
        self._cycle_start = -(10**9)
        self._samples = np.zeros(0, dtype=np.int64)
        self._pending = np.zeros(0, dtype=np.bool_)
        self._queue = np.zeros(0, dtype=np.int64)
        self._done = np.zeros(0, dtype=np.bool_)
        self._seen = np.zeros(0)
        self._changed = np.zeros(0)

    @classmethod
    def from_spec(cls, name: str, spec: Mapping[str, Any]) -> SamplingPolicy:
        """From a scenario file's policy entry."""
        return cls(
            name,
            group=str(spec.get("group", "host")),
            cycle=int(spec.get("cycle", 7)),
            sample_share=float(spec.get("sample_share", 0.2)),
        )

    def _groups(self, log: CrawlLog) -> tuple[IntArray, int]:
        if self.group == "host":
            return log.host, log.n_hosts
        return log.section, log.n_sections

    def _new_cycle(self, log: CrawlLog, period: int, budget: int) -> None:
        group, n_groups = self._groups(log)
        pages = np.flatnonzero(log.eligible)
        size = np.bincount(group[pages], minlength=n_groups)
        want = np.ceil(np.sqrt(size)).astype(np.int64)
        cap = self.sample_share * budget * self.cycle
        if want.sum() > cap:
            want = np.minimum(want, np.maximum(1, np.floor(want * cap / want.sum()))).astype(
                np.int64
            )
        # stalest first inside each group: sort by (group, -elapsed)
        elapsed = log.elapsed(float(period))[pages]
        order = np.lexsort((-np.where(np.isfinite(elapsed), elapsed, 1e18), group[pages]))
        ranked = pages[order]
        g = group[ranked]
        start = np.searchsorted(g, np.arange(n_groups))
        rank = np.arange(ranked.size) - start[g]
        self._samples = ranked[rank < want[g]]
        self._pending = np.zeros(log.n_pages, dtype=np.bool_)
        self._pending[self._samples] = True
        self._queue = np.zeros(0, dtype=np.int64)
        self._done = np.zeros(log.n_pages, dtype=np.bool_)
        self._seen = np.zeros(n_groups)
        self._changed = np.zeros(n_groups)
        self._cycle_start = period

    def _greedy_queue(self, log: CrawlLog, period: int) -> None:
        group, _ = self._groups(log)
        ratio = np.where(self._seen > 0, self._changed / np.maximum(self._seen, 1.0), 0.0)
        pages = np.flatnonzero(log.eligible & ~self._done)
        elapsed = log.elapsed(float(period))[pages]
        stale = np.where(np.isfinite(elapsed), elapsed, 1e18)
        order = np.lexsort((-stale, group[pages], -ratio[group[pages]]))
        self._queue = pages[order]

    def select(self, period: int, budget: int, log: CrawlLog) -> IntArray:
        if period - self._cycle_start >= self.cycle:
            self._new_cycle(log, period, budget)
        chosen: list[IntArray] = []
        pending = np.flatnonzero(self._pending & log.eligible)
        if pending.size:
            chosen.append(pending[:budget])
        elif self._queue.size == 0:
            self._greedy_queue(log, period)
        taken = sum(c.size for c in chosen)
        if taken < budget and self._queue.size:
            queue = self._queue[log.eligible[self._queue] & ~self._done[self._queue]]
            chosen.append(queue[: budget - taken])
            self._queue = queue[budget - taken :]
        out = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        left = budget - out.size
        if left > 0:
            priority = overdue_priority(log, float(period), np.ones(log.n_pages))
            priority[out] = -np.inf
            out = np.concatenate([out, top_pages(priority, left, log, taken=out)])
        return out.astype(np.int64)

    def observe(self, obs: Observations, log: CrawlLog) -> None:
        if self._done.size == 0:
            return
        group, n_groups = self._groups(log)
        page = obs.page[~obs.gone & ~obs.first]
        was_sample = self._pending[page]
        sampled = page[was_sample]
        self._seen += np.bincount(group[sampled], minlength=n_groups)
        changed = obs.changed[~obs.gone & ~obs.first][was_sample]
        self._changed += np.bincount(group[sampled], weights=changed, minlength=n_groups)
        self._pending[obs.page] = False
        self._done[obs.page] = True
