"""How well a crawl's own evidence tells the change rates, by the pages' number of fetches.

The scenario report's accuracy table (issue 25): at the end of a run of a policy that
estimates rates from its own crawls, every page the crawl knows is estimated from that
crawl's change/no-change intervals three ways, and each estimate is set beside the page's
true rate:

* ``point``: :class:`estimators.ChangeRateEstimator` with its defaults, what the planner's
  classes are built from (NaN for a page with no interval: it has no estimate);
* ``population``: the mean of :class:`estimators.GammaRatePosterior` under the population
  prior alone, with its 80 % credible interval;
* ``groups``: the same with empirical-Bayes priors by host and by site section (what a
  crawler knows from URLs): a never-fetched page gets its section's prior.

:func:`page_errors` gives one row per page (its fetch class, ``ln(estimate / true)`` of each
way, and whether the true rate lies in each posterior's 80 % interval); :func:`accuracy_table`
pools such rows (of several seeds) into one row per fetch class: the pages, the median
``|ln(estimate / true)|`` of each way, and each posterior's coverage of its 80 % interval
(0.80 for a calibrated posterior). Rates are per period, as the simulator's.

Imports: numpy, pandas, scipy, :mod:`estimators`. No I/O.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats

from estimators import ChangeRateEstimator, GammaRatePosterior
from estimators.evidence import ChangeIntervals

__all__ = ["FETCH_CLASSES", "accuracy_table", "page_errors"]

#: Fetch-count classes: (label, fewest, most fetches), the issue's 1, 2, 4, 8 and 16 as the
#: upper ends of doubling ranges.
FETCH_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("0", 0, 0),
    ("1", 1, 1),
    ("2", 2, 2),
    ("3-4", 3, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17+", 17, 2**62),
)

#: Central credible interval whose coverage the table reports.
COVERAGE = 0.80


def _fetch_class(fetches: npt.NDArray[np.int64]) -> npt.NDArray[np.object_]:
    label = np.empty(fetches.shape, dtype=object)
    for name, low, high in FETCH_CLASSES:
        label[(fetches >= low) & (fetches <= high)] = name
    return label


def page_errors(
    intervals: ChangeIntervals,
    fetches: npt.ArrayLike,
    true_rate: npt.ArrayLike,
    known: npt.ArrayLike,
    host: npt.ArrayLike,
    section: npt.ArrayLike,
) -> pd.DataFrame:
    """One row per known page (``known`` bool, shape (n,)) with a positive true rate:
    ``fetches`` class, ``point`` / ``population`` / ``groups`` = ln(estimate / true), and
    ``in_population`` / ``in_groups``: the true rate inside that posterior's 80 % interval.
    ``intervals`` cover all n pages; ``fetches``, ``true_rate`` (per period), ``host`` and
    ``section`` (integer labels) are shape (n,)."""
    rate = np.asarray(true_rate, dtype=np.float64)
    count = np.asarray(fetches, dtype=np.int64)
    keep = np.asarray(known, dtype=bool) & (rate > 0)
    frame = pd.DataFrame({"fetches": _fetch_class(count[keep])})
    if not (intervals.n_intervals > 0).any():
        return frame.iloc[0:0]
    point = ChangeRateEstimator().fit(intervals).rate_
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["point"] = np.log(point[keep] / rate[keep])
    low_q, high_q = (1 - COVERAGE) / 2, (1 + COVERAGE) / 2
    levels = [("host", np.asarray(host)), ("section", np.asarray(section))]
    for name, groups in (("population", None), ("groups", levels)):
        fit = GammaRatePosterior().fit(intervals, groups=groups)
        a, b = fit.alpha_[keep], fit.beta_[keep]
        frame[name] = np.log(fit.mean_[keep] / rate[keep])
        low = stats.gamma.ppf(low_q, a, scale=1.0 / b)
        high = stats.gamma.ppf(high_q, a, scale=1.0 / b)
        frame[f"in_{name}"] = (rate[keep] >= low) & (rate[keep] <= high)
    return frame


def accuracy_table(errors: pd.DataFrame) -> pd.DataFrame:
    """Per fetch class (in :data:`FETCH_CLASSES` order, classes without pages left out): pages,
    pages with a point estimate, the median |ln(estimate / true)| of each way, and the 80 %
    intervals' coverage of each posterior."""
    rows = []
    for name, _low, _high in FETCH_CLASSES:
        part = errors[errors["fetches"] == name]
        if part.empty:
            continue
        point = part["point"].to_numpy(dtype=np.float64)
        finite = np.isfinite(point)
        rows.append(
            {
                "fetches": name,
                "pages": len(part),
                "with a point estimate": int(finite.sum()),
                "point |ln|": float(np.median(np.abs(point[finite]))) if finite.any() else np.nan,
                "posterior |ln|": float(np.median(np.abs(part["population"]))),
                "posterior, group priors |ln|": float(np.median(np.abs(part["groups"]))),
                "80 % coverage": float(part["in_population"].mean()),
                "80 % coverage, group priors": float(part["in_groups"].mean()),
            }
        )
    return pd.DataFrame(rows)
