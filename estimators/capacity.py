"""The crawl capacity a plan can count on, from what the crawler did in the periods it was given.

The crawler never fetches more than was released to it. A period whose release was below
what the crawler could do ends with the crawler idle and its queue empty: the fetches it made
say only that capacity is *at least* that much. Reading them as the capacity (fetches over the
window, as a plain throughput does) makes a plan that released too little measure a lower
capacity, plan less the next cycle, measure less again, and so on: measured capacity could
only fall.

So each ended period of the window is read for what it can tell:

* **saturated**: work was left waiting at its end, more than ``share`` (:data:`estimators.
  defaults.SATURATED_SHARE`, 10 %) of the work offered to it (its own release plus the pages
  carried into it). The crawler was busy all period, and its fetches are its capacity: a
  measurement, which may be lower or higher than the previous value.
* **kept up**: it fetched what was offered (up to that share, which pages released for the
  period's last moments and pages on hosts held back by politeness leave over). Its fetches
  are a lower bound, and idle time tells nothing about how fast the crawler could go.
* a period with no request made while work waited is left out: the crawler was stopped, not
  slow.

The estimate (:func:`crawl_capacity`) is the mean fetches of the saturated periods (method
``saturated``) when they are at least ``min_share`` (:data:`estimators.defaults.
MIN_SATURATED_SHARE`, a quarter) of the periods read; else the most any period read fetched,
or the previous value if higher (``lower bound``): a cycle in which the crawler kept up never
lowers the capacity. A lone saturated period among periods that kept up is a crawler that
started late in it or paused (a live loop of 5-second periods showed one at the crawl's start
that fetched 6 where the others fetched up to 22), not its capacity; a crawler that really
got slower leaves work waiting period after period. The nightly run then smooths the
estimate toward the plan in force's capacity (:func:`estimators.discovery.smoothed`); for a
``lower bound`` that is never below the previous value either.

Pure: counts in, an estimate out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from estimators.defaults import MIN_SATURATED_SHARE, SATURATED_SHARE

__all__ = ["CapacityEstimate", "crawl_capacity", "saturated_periods"]


@dataclass(frozen=True)
class CapacityEstimate:
    """Crawls per period the crawler can do (NaN: nothing measured), how it was found, and
    how many periods were read each way.

    ``method``: ``saturated`` (mean fetches of the periods that left work waiting),
    ``lower bound`` (every period kept up: the most any fetched, or the previous value if
    higher), ``none`` (no period to read).
    """

    crawls: float
    method: str
    saturated: int = 0
    kept_up: int = 0


def saturated_periods(
    fetched: ArrayLike, offered: ArrayLike, left: ArrayLike, *, share: float = SATURATED_SHARE
) -> np.ndarray:
    """Which periods kept the crawler busy to their end (see the module docstring).

    Parameters
    ----------
    fetched : array_like of int, shape (periods,)
        Requests made in each period (answered or failed; not the pages answered without a
        request, such as those robots.txt disallows).
    offered : array_like of int, shape (periods,)
        Pages released for the period plus the pages of earlier releases still waiting when
        it began.
    left : array_like of int, shape (periods,)
        Pages released and not fetched when the period ended (carried into the next one).
    share : float
        A period is saturated when ``left > share * offered``.

    Returns
    -------
    ndarray of bool, shape (periods,)
    """
    done = np.asarray(fetched, dtype=float)
    work = np.asarray(offered, dtype=float)
    waiting = np.asarray(left, dtype=float)
    if not done.shape == work.shape == waiting.shape or done.ndim != 1:
        raise ValueError("fetched, offered and left need one value per period")
    if not 0 <= share < 1:
        raise ValueError(f"share must be in [0, 1), got {share}")
    return np.asarray((waiting > share * work) & (waiting > 0))


def crawl_capacity(
    fetched: ArrayLike,
    offered: ArrayLike,
    left: ArrayLike,
    *,
    previous: float | None = None,
    share: float = SATURATED_SHARE,
    min_share: float = MIN_SATURATED_SHARE,
) -> CapacityEstimate:
    """The crawls per period the crawler can do, from its ended periods (module docstring).

    ``previous``: the capacity the plan in force used (None or NaN: none), which a window
    of kept-up periods never lowers; ``min_share``: the saturated periods measure the
    capacity when they are at least this share of the periods read.
    """
    done = np.asarray(fetched, dtype=float)
    busy = saturated_periods(done, offered, left, share=share)
    # A crawler that made no request while work waited was stopped, not slow: left out.
    measured = busy & (done > 0)
    kept_up = ~busy
    read = int(measured.sum() + kept_up.sum())
    counts = {"saturated": int(measured.sum()), "kept_up": int(kept_up.sum())}
    if measured.any() and measured.sum() >= min_share * read:
        return CapacityEstimate(float(done[measured].mean()), "saturated", **counts)
    if read:
        # Every period read fetched at least this much: the capacity is no less.
        bound = float(done[measured | kept_up].max())
        before = previous if previous is not None and math.isfinite(previous) else 0.0
        if bound > 0 or before > 0:
            return CapacityEstimate(max(bound, before), "lower bound", **counts)
    return CapacityEstimate(math.nan, "none", **counts)
