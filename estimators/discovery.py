"""Discovery rates of the WebFountain model from counts the crawl measured.

The model (Edwards et al. 2001, eq. (3)) says how the pool of never-crawled pages grows::

    new pages found in a period = oldnwt * (old pages crawled) + newnwt * (new pages crawled)
                                  + nconst

The crawl does not record which fetch found which URL, but it counts per time bin the fetches
of old pages ``O_k``, the first fetches of new pages ``N_k`` and the pages first seen ``D_k``.
The three rates are the non-negative least-squares fit of ``D_k = oldnwt O_k + newnwt N_k +
c`` over the bins (``nconst`` is ``c`` scaled from a bin to a period). When the bins cannot
tell old from new crawls apart (too few bins, or one kind of crawl never varies) the fit is
not identifiable, and one pooled ratio ``sum D / sum (O + N)`` serves both, with ``nconst``
0: the honest estimate from what was measured.

**Smoothing.** One cycle's fit swings with what the crawl happened to do (a cycle of re-crawls
alone makes newnwt unidentifiable; the live loop saw oldnwt 4.68, then 0, then 1.51), and the
plan follows it. :func:`smoothed_discovery` shrinks a new fit toward the rates the previous
plan used, exponential smoothing with weight ``w`` = :data:`estimators.defaults.
SMOOTHING_WEIGHT` (0.5)::

    rate = previous + w * (fitted - previous)

so that the rates the plan uses are an exponentially weighted mean of every cycle's fit, the
last one weighted w, the one before w (1 - w), and so on. A cycle that measured no crawl
(``"none"``) keeps the previous rates; the first plan takes its fit as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import nnls

from estimators.defaults import SMOOTHING_WEIGHT

__all__ = ["DiscoveryRates", "discovery_rates", "smoothed", "smoothed_discovery"]


@dataclass(frozen=True)
class DiscoveryRates:
    """New pages found per old-page crawl, per new-page crawl, and per period from outside.

    ``method`` is ``"nnls"`` (the three-term fit), ``"pooled"`` (one ratio), ``"none"`` (no
    crawl was measured: all rates 0), or either fit's name followed by ``" smoothed"`` (shrunk
    toward the previous plan's rates: :func:`smoothed_discovery`).
    """

    oldnwt: float
    newnwt: float
    nconst: float
    method: str


def discovery_rates(
    old_crawls: ArrayLike,
    new_crawls: ArrayLike,
    discovered: ArrayLike,
    *,
    bin_seconds: float,
    period_seconds: float,
    min_bins: int = 6,
) -> DiscoveryRates:
    """Fit the discovery rates to per-bin counts.

    Parameters
    ----------
    old_crawls, new_crawls, discovered : array_like of int, shape (bins,)
        Per time bin: fetches of previously fetched pages, first fetches, pages first seen.
    bin_seconds, period_seconds : float
        Width of a bin and length of a plan period, seconds (``nconst`` is per period).
    min_bins : int
        Fewest bins with crawls for the three-term fit; fewer falls back to the pooled ratio.
    """
    old = np.asarray(old_crawls, dtype=float)
    new = np.asarray(new_crawls, dtype=float)
    found = np.asarray(discovered, dtype=float)
    if not (old.shape == new.shape == found.shape) or old.ndim != 1:
        raise ValueError("old_crawls, new_crawls and discovered need one value per bin")
    if not (bin_seconds > 0 and period_seconds > 0):
        raise ValueError("bin_seconds and period_seconds must be > 0")
    crawls = old.sum() + new.sum()
    if crawls <= 0:
        return DiscoveryRates(0.0, 0.0, 0.0, "none")
    active = (old + new) > 0
    design = np.column_stack([old, new, np.ones_like(old)])[active]
    if active.sum() >= min_bins and np.linalg.matrix_rank(design) == 3:
        # Columns scaled to unit norm so that the fit does not favour the large counts.
        norms = np.linalg.norm(design, axis=0)
        coef, _ = nnls(design / norms, found[active])
        oldnwt, newnwt, per_bin = coef / norms
        return DiscoveryRates(
            float(oldnwt), float(newnwt), float(per_bin * period_seconds / bin_seconds), "nnls"
        )
    ratio = float(found.sum() / crawls)
    return DiscoveryRates(ratio, ratio, 0.0, "pooled")


def smoothed(previous: float | None, fitted: float, weight: float = SMOOTHING_WEIGHT) -> float:
    """``previous + weight * (fitted - previous)``: one step of exponential smoothing; the
    fit itself when there is no finite previous value.

    ``weight`` in (0, 1]: the share of the new measurement (1: no smoothing).
    """
    if not 0 < weight <= 1:
        raise ValueError(f"weight must be in (0, 1], got {weight}")
    if previous is None or not math.isfinite(previous):
        return fitted
    return previous + weight * (fitted - previous)


def smoothed_discovery(
    fitted: DiscoveryRates,
    previous: DiscoveryRates | None,
    *,
    weight: float = SMOOTHING_WEIGHT,
) -> DiscoveryRates:
    """The rates a plan uses: ``fitted`` shrunk toward the ``previous`` plan's (see the module
    docstring). ``previous`` None: the fit as it is; a fit of no crawl (``"none"``): the
    previous rates. ``previous.nconst`` must be per period of the same length as the fit's.
    """
    if previous is None:
        return fitted
    if fitted.method == "none":
        return previous
    return DiscoveryRates(
        smoothed(previous.oldnwt, fitted.oldnwt, weight),
        smoothed(previous.newnwt, fitted.newnwt, weight),
        smoothed(previous.nconst, fitted.nconst, weight),
        f"{fitted.method.removesuffix(' smoothed')} smoothed",
    )
