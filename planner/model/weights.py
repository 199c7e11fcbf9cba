"""Objective weights of the WebFountain model: the paper's three strategies and user weights.

The model (:mod:`planner.model.webfountain`) minimizes ``sum_t sum_i oldwt[i,t] * y[i,t] +
sum_t newwt[t] * n[t]``: a weighted count of obsolete pages (y, per bucket and period) and new
uncrawled pages (n, per period). The paper's weight table is lost from the text; its prose
says what each strategy does, and these weightings reproduce it (measured on the paper's
instance v1, see docs/model.md):

* **Strategy 1, freshness in every period** (``oldwt = newwt = 1`` everywhere). The objective
  is the time-integral of obsolete pages, so a crawl is worth the staleness it removes until
  the page changes again. Fast pages repay crawling in period after period; a slow page
  crawled now would mostly have stayed fresh anyway, and it is its *changes* that matter: the
  slowest buckets (about 40% of pages on v1) are not crawled at all during the cycle.
* **Strategy 2, fresh at the end of the cycle** (weight 1 in the last period only). Only the
  state after period T counts, so each page is worth crawling once, as late as capacity
  allows, and a second crawl buys nothing: every page is crawled about once per cycle, the
  uniform policy of Cho & Garcia-Molina and Coffman et al. It has the lowest objective of the
  three (it is the only one measured at one instant).
* **Strategy 3, compromise** (weight ``w`` in every period and weight ``1 + w * ...``, see
  :data:`STRATEGY_3_PERIOD_WEIGHT`, at the end). The end-of-cycle term makes every page worth
  one crawl; the small per-period term makes the fastest buckets (about 18% on v1) worth more
  than one.

User weights (``oldwt`` [T] or [B][T], ``newwt`` [T]) replace the strategy when given.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.model.instance import CrawlInstance, InstanceError

__all__ = [
    "STRATEGY_3_PERIOD_WEIGHT",
    "ObjectiveWeights",
    "Strategy",
    "strategy_weights",
    "weights_from_mapping",
    "with_terminal_value",
]

#: Strategy 3's weight on obsolete pages in every period, relative to 1 at the end of the cycle.
STRATEGY_3_PERIOD_WEIGHT = 0.02


class Strategy(enum.Enum):
    """The paper's three weightings of the objective (sec. 5.1)."""

    EVERY_PERIOD = 1
    """Strategy 1: obsolete pages count equally in every period."""

    END_OF_CYCLE = 2
    """Strategy 2: only obsolete and uncrawled pages at the end of the cycle count."""

    COMPROMISE = 3
    """Strategy 3: a small weight in every period plus a full weight at the end of the cycle."""

    @classmethod
    def parse(cls, value: int | str | Strategy) -> Strategy:
        """Strategy from its number (1, 2, 3, "1", ...) or itself."""
        if isinstance(value, Strategy):
            return value
        try:
            return cls(int(value))
        except ValueError:
            raise InstanceError(f"strategy: expected 1, 2 or 3, got {value!r}") from None


@dataclass(frozen=True)
class ObjectiveWeights:
    """Weights of the objective.

    Attributes
    ----------
    oldwt : ndarray, shape (B, T)
        Weight of one obsolete page of bucket i at the end of period t.
    newwt : ndarray, shape (T,)
        Weight of one new uncrawled page at the end of period t.
    label : str
        What the weights are ("strategy 1", "user").
    """

    oldwt: np.ndarray
    newwt: np.ndarray
    label: str


def strategy_weights(strategy: Strategy | int, buckets: int, periods: int) -> ObjectiveWeights:
    """The weights of one of the paper's strategies for B buckets and T periods."""
    strategy = Strategy.parse(strategy)
    per_period = np.ones(periods)
    if strategy is Strategy.END_OF_CYCLE:
        per_period = np.zeros(periods)
        per_period[-1] = 1.0
    elif strategy is Strategy.COMPROMISE:
        per_period = np.full(periods, STRATEGY_3_PERIOD_WEIGHT)
        per_period[-1] = 1.0
    oldwt = np.repeat(per_period[None, :], buckets, axis=0)
    return ObjectiveWeights(oldwt, per_period.copy(), f"strategy {strategy.value}")


def _obsolete_worth(change: np.ndarray, revisit: float) -> np.ndarray:
    """``sum_{k=1..R} (1 - a)^k``: page-periods an obsolete page costs more than a fresh one
    over the R periods until its next crawl."""
    keep = 1.0 - change
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(change > 1e-12, keep * (1.0 - keep**revisit) / change, revisit)


def with_terminal_value(
    weights: ObjectiveWeights,
    a: npt.ArrayLike,
    revisit_periods: float,
    *,
    new_page_change: float | None = None,
) -> ObjectiveWeights:
    """``weights`` with the worth, after the horizon, of the pages left fresh at its end.

    The model counts obsolete pages up to its last period T; a page crawled near T stays
    fresh after it, until it changes. A page obsolete at the end of period T stays obsolete
    until its next crawl, about ``revisit_periods`` R periods later; a fresh one is obsolete
    in period T + k with probability 1 - (1 - a)^k. Over those R periods, the obsolete page
    costs ``sum_{k=1..R} (1 - a)^k = (1 - a) (1 - (1 - a)^R) / a`` page-periods more: y[i,T]
    gets that many times bucket i's mean per-period weight added (R for a page that never
    changes, 0 for one that changes every period). Without it a short horizon starves slow
    pages, whose crawl pays off mostly after it (docs/model.md, "Horizon").

    A new page still uncrawled at T is the same: until it is crawled it counts as n, and
    once crawled it changes at ``new_page_change`` per period (the change fraction of the
    buckets new pages join); n[T] gets its worth times the mean per-period weight of n
    (without it the model would re-crawl known pages rather than fetch new ones near T).
    None: n[T] unchanged.

    ``a`` [B]: change fraction per period of each bucket in period T.
    """
    revisit = max(float(revisit_periods), 0.0)
    worth = _obsolete_worth(np.clip(np.asarray(a, dtype=float), 0.0, 1.0), revisit)
    oldwt, newwt = weights.oldwt.copy(), weights.newwt.copy()
    periods = oldwt.shape[1]
    per_period = oldwt[:, :-1].mean(axis=1) if periods > 1 else oldwt[:, -1]
    oldwt[:, -1] += per_period * worth
    if new_page_change is not None:
        change = np.clip(np.array([new_page_change], dtype=float), 0.0, 1.0)
        new_per_period = float(newwt[:-1].mean()) if periods > 1 else float(newwt[-1])
        newwt[-1] += new_per_period * float(_obsolete_worth(change, revisit)[0])
    return ObjectiveWeights(oldwt, newwt, f"{weights.label} + terminal value")


def weights_from_mapping(
    data: Mapping[str, Any], instance: CrawlInstance, strategy: Strategy | int
) -> ObjectiveWeights:
    """User weights from ``oldwt`` ([T] or [B][T]) and ``newwt`` ([T]) keys, else the strategy's.

    A key that is absent falls back to the strategy's weights for that term.
    """
    base = strategy_weights(strategy, instance.buckets, instance.periods)
    if data.get("oldwt") is None and data.get("newwt") is None:
        return base
    B, T = instance.buckets, instance.periods
    oldwt, newwt = base.oldwt, base.newwt
    if data.get("oldwt") is not None:
        raw = np.asarray(data["oldwt"], dtype=float)
        if raw.shape == (T,):
            oldwt = np.repeat(raw[None, :], B, axis=0)
        elif raw.shape == (B, T):
            oldwt = raw
        else:
            raise InstanceError(f"oldwt: expected [T] or [B][T], got shape {list(raw.shape)}")
    if data.get("newwt") is not None:
        newwt = np.asarray(data["newwt"], dtype=float)
        if newwt.shape != (T,):
            raise InstanceError(f"newwt: expected [T], got shape {list(newwt.shape)}")
    for key, value in (("oldwt", oldwt), ("newwt", newwt)):
        if not np.all(np.isfinite(value)) or np.any(value < 0):
            raise InstanceError(f"{key}: weights must be finite and >= 0")
    return ObjectiveWeights(oldwt, newwt, "user")
